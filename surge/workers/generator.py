"""The generation worker of LLM RL: SRL's policy worker and actor in one, for a language model.

It starts groups (a problem, `rollout.group_size` episodes of it) as the rollout stream's
version bound allows (streams/rollouts.py). Each episode is the task's episode function
(surge/llm/episodes.py: one completion by default, or a multi-turn loop); their generation
requests decode together with continuous batching (surge/llm/engine.py). Each trajectory is
written to its member of the group's row; once the group is whole the row is handed to the
reward worker. An episode that ends without a trajectory (None, or it raised) is counted in
the row and run again, at most `MAX_DROPS` times in a row. Generation worker i of n takes the
groups with k % n == i.

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

from surge.devices import role_device
from surge.llm.engine_protocol import Decoding
from surge.llm.engines import make_engine
from surge.llm.episodes import EpisodeRunner, Trajectory, episode_of
from surge.llm.lora import trained_parameters
from surge.llm.model import load_model, stop_sequences
from surge.llm.problems import Problem
from surge.llm.run import model_dir_of
from surge.llm.tasks import problem_at, task_of
from surge.llm.textenv import TextEnvTask
from surge.models.weights import flat_to_tensors
from surge.seeds import derive_seed
from surge.streams.params import NONE, ParameterService
from surge.streams.rollouts import GENERATED, RolloutRows, may_start
from surge.threads import limit_torch_threads
from surge.tracking.timing import COPY, INFERENCE
from surge.workers.base import Binding, RunContext

MAX_DROPS = 8
"""Episodes of one group member that may end without a trajectory in a row before the worker
fails (a task whose episodes always fail would otherwise loop forever)."""


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
        self.model, self.tokenizer = load_model(model_dir_of(ctx), cfg.model.lora, cfg.seed)
        self.trained = trained_parameters(self.model)  # the flat vector's layout
        # the built-in engine decodes where the model is (its cache, sampling and log-probs
        # there); vLLM holds its own copy on the GPU, so this one stays on the CPU
        device = "cpu" if r.engine == "vllm" else role_device(r.device, "rollout.device")
        self.model.to(device).eval()
        limit_torch_threads(r.threads)
        self.task = task_of(cfg)
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
        longest_turn, max_length = r.max_new_tokens, None
        if isinstance(self.task, TextEnvTask):  # a context grows to the window, a turn at a time
            prompt_width = max_length = cfg.context.window
            longest_turn = self.task.limits.longest_turn
        decoding = Decoding(
            max_prompt=prompt_width,
            max_new_tokens=longest_turn,
            eos_id=self.tokenizer.eos_token_id,
            temperature=r.temperature,
            top_p=r.top_p,
            stop=stop_sequences(self.tokenizer, r.stop),
            seed=derive_seed(cfg.seed, "generate", b.index, ctx.resumes, b.life),
            max_length=max_length,
        )
        slots = r.slots or 2 * r.prompts_per_batch * r.group_size
        self.engine = make_engine(
            cfg, self.model, decoding, slots=slots, model_dir=model_dir_of(ctx)
        )
        self.runner = EpisodeRunner(self.engine, self.tokenizer, episode_of(self.task))
        self.index, self.workers = b.index, r.workers
        self.group_size = r.group_size
        self.version = NONE  # the version in the engine
        # Groups in flight: group -> (row, episodes written so far, its problem); and each
        # running member's episodes dropped in a row.
        self.open: dict[int, tuple[int, int, Problem]] = {}
        self.drops: dict[int, int] = {}
        self.episode_seed = derive_seed(cfg.seed, "episode") << 64
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
        if self.runner.idle():
            waited = time.perf_counter()
            self.inbox.recv(timeout)  # a new version wakes it
            self.timers.add_wait(waited)
            return False
        clock = self.timers.now()
        ended = self.runner.step()
        self.timers.add(INFERENCE, clock)
        for key, trajectory in ended:
            self._collect(key, trajectory)
        return True

    def _load(self) -> None:
        clock = self.timers.now()
        version = self.params.read(self.flat)
        flat_to_tensors(self.flat, self.trained)
        # the engine's three-step update: the built-in engine sees its own model's tensors and
        # copies nothing; another engine (vLLM) takes them in
        self.engine.begin_weight_update(version)
        self.engine.push_weights(self.model.state_dict())
        self.engine.commit_weight_update(recompute=not self.cfg.rollout.keep_cache)
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
            self.open[k] = (self.rows.begin(k, self.life), 0, problem)
            for m in range(G):
                self._start(k * G + m, problem, attempt=0)

    def _start(self, key: int, problem: Problem, attempt: int) -> None:
        """Episode `attempt` of member `key` (group x group_size + member), with an env
        seed of the run, the member and the attempt (the run's data, whoever runs it)."""
        # one integer per (key, attempt) above the run's own: a list seed or a derived one
        # costs twice as much, per episode
        rng = np.random.default_rng(self.episode_seed + key * (MAX_DROPS + 1) + attempt)
        self.runner.start(key, problem, rng)

    def _collect(self, key: int, trajectory: Trajectory | None) -> None:
        k, member = divmod(key, self.group_size)
        row, count, problem = self.open[k]
        if trajectory is not None:
            try:
                self.rows.put(row, member, trajectory)
            except ValueError as e:
                self.runner.log_dropped(key, e)
                trajectory = None
        if trajectory is None:
            self.rows.a["dropped"][row] += 1
            drops = self.drops[key] = self.drops.get(key, 0) + 1
            if drops > MAX_DROPS:
                raise RuntimeError(
                    f"{drops} episodes of problem {k} in a row ended without a trajectory "
                    f"(the log above says why): the task's episode fails"
                )
            self._start(key, problem, attempt=drops)
            return
        self.drops.pop(key, None)
        count += 1
        if count < self.group_size:
            self.open[k] = (row, count, problem)
            return
        del self.open[k]
        self.rows.set_state(row, GENERATED)  # after every write of the group
        self.rewarder.send(row)

    def close(self) -> None:
        self.runner.drop_all()
