"""The reward worker of LLM RL: the environment's verifier, as its own stage.

It scores every completion of each group a generation worker finished (state GENERATED,
streams/rollouts.py), writes the rewards, marks the row SCORED and wakes the next stage (the
trainer, or the reference worker when the loss has a KL term). Scoring
may be slow (a verifier, a sandbox, a reward model); generation never waits for it, since
the generation workers only write rows and move on. Stateless: a new life scans the block for
GENERATED rows and carries on, so a crash loses no group.
"""

from __future__ import annotations

import time

from surge.llm.model import decode_completion
from surge.llm.tasks import make_task, problem_at
from surge.streams.rollouts import GENERATED, SCORED, RolloutRows
from surge.tracking.timing import ENV
from surge.workers.base import Binding, RunContext


def build(ctx: RunContext, b: Binding) -> RewardWorker:
    return RewardWorker(ctx, b)


class RewardWorker:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        self.name = b.name
        self.finished = False
        self.timers = b.control.timers
        assert ctx.model_dir is not None
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(ctx.model_dir, local_files_only=True)
        self.task = make_task(cfg.task.name, cfg.task.kwargs, cfg.task.reward_fn)
        port = b.port("scored")
        self.rows = RolloutRows(b.transport, port.block, cfg.rollout.prompts_per_batch)
        (downstream,) = port.sends_to
        self.downstream = b.transport.channel(downstream)
        self.inbox = b.transport.channel(b.inbox)

    def poll(self, timeout: float) -> bool:
        todo = self.rows.in_state(GENERATED)
        if not todo:
            waited = time.perf_counter()
            self.inbox.recv(timeout)
            self.timers.add_wait(waited)
            todo = self.rows.in_state(GENERATED)
            if not todo:
                return False
        clock = self.timers.now()
        for r in todo:
            self._score(r)
        self.timers.add(ENV, clock)
        return True

    def _score(self, r: int) -> None:
        a = self.rows.a
        problem = problem_at(self.task, "train", self.cfg.seed, int(a["group"][r]))
        for m in range(a["tokens"].shape[1]):
            text = decode_completion(self.tokenizer, a["tokens"][r, m, : a["length"][r, m]])
            a["reward"][r, m] = self.task.reward(problem, text)
        self.rows.set_state(r, SCORED)  # after every reward of the group
        self.downstream.send(r)

    def close(self) -> None:
        pass
