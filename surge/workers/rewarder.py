"""The reward worker of LLM RL: the environment's verifier, as its own stage.

It scores every episode of each group a generation worker finished (state GENERATED,
streams/rollouts.py) that did not bring its own reward, with the task's verifier on the
policy's text (the tokens under the loss mask), writes the rewards, marks the row SCORED
and wakes the next stage (the trainer, or the reference worker when the loss has a KL
term). Scoring
may be slow (a verifier, a sandbox, a reward model); generation never waits for it, since
the generation workers only write rows and move on. Stateless: a new life scans the block for
GENERATED rows and carries on, so a crash loses no group.
"""

from __future__ import annotations

import numpy as np

from surge.llm.model import decode_completion
from surge.llm.run import model_dir_of
from surge.llm.tasks import make_task, problem_at
from surge.streams.rollouts import GENERATED, SCORED, RolloutRows
from surge.workers.base import Binding, RunContext
from surge.workers.stage import HandOver, StageWorker, every_row


def build(ctx: RunContext, b: Binding) -> RewardWorker:
    return RewardWorker(ctx, b)


class RewardWorker(StageWorker):
    """Scores GENERATED rows and gives them SCORED (surge/workers/stage.py)."""

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir_of(ctx), local_files_only=True)
        self.task = make_task(cfg.task.name, cfg.task.kwargs, cfg.task.reward_fn)
        port = b.port("scored")
        rows = RolloutRows(b.transport, port.block, cfg.rollout.prompts_per_batch)
        (downstream,) = port.sends_to
        scoring = HandOver(
            GENERATED, SCORED, every_row(self._score), b.transport.channel(downstream)
        )
        super().__init__(b, rows, [scoring])
        self.a = rows.a
        self.segments = rows.segments

    def _score(self, rows: list[int]) -> None:
        a = self.a
        for r in rows:
            problem = problem_at(self.task, "train", self.cfg.seed, int(a["group"][r]))
            for m in np.flatnonzero(~a["rewarded"][r]).tolist():
                q = m * self.segments  # a task the verifier scores is single-turn: one segment
                text = decode_completion(self.tokenizer, a["tokens"][r, q][a["mask"][r, q]])
                a["reward"][r, m] = self.task.reward(problem, text)
