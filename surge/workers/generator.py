"""The generation worker of LLM RL: SRL's policy worker and actor in one, for a language model.

It starts groups (a prompt, `rollout.group_size` samples) as the rollout stream's version
bound allows (streams/rollouts.py), decodes them with continuous batching (surge/llm/engine.py)
and writes each finished group to its row, then wakes the reward worker. Generation worker i
of n takes the groups with k % n == i.

New parameters are loaded between decode steps. With `rollout.interrupt` the in-flight
sequences continue under them (their cache recomputed, or kept with `rollout.keep_cache`);
without it, new prompts wait until the in-flight ones finish under the old weights, then the
new ones load.

A new life of this worker (after a crash) starts at the first group of the batch the trainer
waits for and skips every group whose row is already complete: the groups its previous life
left half-written are generated again from the start.
"""

from __future__ import annotations

import time

import numpy as np

from surge.llm.engine import Completion, Engine, Request
from surge.llm.model import encode_prompt, load_model, stop_sequences
from surge.llm.tasks import make_task, problem_at
from surge.models.weights import flat_to_model
from surge.seeds import derive_seed
from surge.streams.params import NONE, ParameterService
from surge.streams.rollouts import GENERATED, RolloutRows, may_start
from surge.threads import limit_torch_threads
from surge.tracking.timing import COPY, INFERENCE
from surge.workers.base import Binding, RunContext


def build(ctx: RunContext, b: Binding) -> GenerationWorker:
    return GenerationWorker(ctx, b)


class GenerationWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        r = cfg.rollout
        self.name = b.name
        self.finished = False
        self.life = b.life
        self.control = b.control
        self.timers = b.control.timers
        assert ctx.model_dir is not None, "an LLM run has a starting model directory"
        self.model, self.tokenizer = load_model(ctx.model_dir)
        self.model.eval()
        limit_torch_threads(r.threads)
        self.task = make_task(cfg.task.name, cfg.task.kwargs, cfg.task.reward_fn)
        port = b.port("rollouts")
        self.flow = port.flow
        assert self.flow is not None
        self.rows = RolloutRows(b.transport, port.block, r.prompts_per_batch)
        (rewarder,) = port.sends_to
        self.rewarder = b.transport.channel(rewarder)
        self.inbox = b.transport.channel(b.inbox)
        self.params = ParameterService(b.transport, b.port_of_kind("versions").block)
        self.flat = np.zeros(ctx.n_params, np.float32)
        prompt_width = self.rows.a["prompt"].shape[1]
        self.engine = Engine(
            self.model,
            slots=r.slots or 2 * r.prompts_per_batch * r.group_size,
            max_prompt=prompt_width,
            max_new_tokens=r.max_new_tokens,
            eos_id=self.tokenizer.eos_token_id,
            temperature=r.temperature,
            top_p=r.top_p,
            stop=stop_sequences(self.tokenizer, r.stop),
            seed=derive_seed(cfg.seed, "generate", b.index, ctx.resumes, b.life),
        )
        self.index, self.workers = b.index, r.workers
        self.group_size = r.group_size
        self.version = NONE  # the version in the engine
        # Groups in flight: group -> (row, completions so far).
        self.open: dict[int, tuple[int, int]] = {}
        first = ctx.start_version * r.prompts_per_batch
        self.next = self._mine(first)

    def _mine(self, k: int) -> int:
        """The first group >= k that is this worker's."""
        return k + (self.index - k) % self.workers

    def poll(self, timeout: float) -> bool:
        latest = self.params.latest_version()
        if latest > self.version and (self.cfg.rollout.interrupt or self.engine.idle()):
            self._load()
        if self.version == NONE:
            self.inbox.recv(timeout)
            return False
        self._admit(latest)
        if self.engine.idle():
            waited = time.perf_counter()
            self.inbox.recv(timeout)  # a new version wakes it
            self.timers.add_wait(waited)
            return False
        clock = self.timers.now()
        done = self.engine.step()
        self.timers.add(INFERENCE, clock)
        for c in done:
            self._collect(c)
        return True

    def _load(self) -> None:
        clock = self.timers.now()
        version = self.params.read(self.flat)
        flat_to_model(self.flat, self.model)
        self.engine.set_version(version, recompute=not self.cfg.rollout.keep_cache)
        self.version = version
        # Groups of batches before `version` are trained: a new life starts after them.
        self.next = max(self.next, self._mine(version * self.cfg.rollout.prompts_per_batch))
        self.timers.add(COPY, clock)

    def _admit(self, latest: int) -> None:
        """Start every group the version bound allows (and the engine has room for), unless
        new weights wait for the in-flight sequences to finish (`rollout.interrupt` off)."""
        assert self.flow is not None
        if latest > self.version:
            return  # draining for the new weights
        B, G = self.cfg.rollout.prompts_per_batch, self.group_size
        while self.engine.free >= G:
            k = self.next
            if not may_start(k, self.version, B, self.flow):
                return
            self.next = self._mine(k + 1)
            if self.rows.holds(k, GENERATED):
                continue  # a previous life finished it
            problem = problem_at(self.task, "train", self.cfg.seed, k)
            prompt = encode_prompt(self.tokenizer, problem.prompt)
            row = self.rows.begin(k, prompt, self.life)
            self.open[k] = (row, 0)
            self.engine.submit([Request(k * G + m, tuple(prompt)) for m in range(G)])

    def _collect(self, c: Completion) -> None:
        k, member = divmod(c.key, self.group_size)
        row, count = self.open[k]
        self.rows.put(row, member, c.tokens, c.logprobs, c.versions, c.finish)
        count += 1
        if count < self.group_size:
            self.open[k] = (row, count)
            return
        del self.open[k]
        self.rows.set_state(row, GENERATED)  # after every write of the group
        self.rewarder.send(row)

    def close(self) -> None:
        self.engine.drop_all()
