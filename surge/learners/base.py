"""What the learners of env tasks share inside the trainer chassis (surge/workers/trainer.py).

`EnvLearner`: an inline evaluator playing the learner's published parameters (the trainer's
stop check without evaluation workers), its record for the metrics, nothing to export beyond
the checkpoint, and closing the evaluator. `ReplayLearner` adds what the replay-based ones
(DQN, SAC) share: the batches block the replay shards fill (learners/replay_batches.py), the
mean of their per-update statistics at each log, the replay saved beside a checkpoint, and a
checkpoint marked with their kind and format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import UserError
from surge.evaluation.suite import InlineEvaluator
from surge.learners.replay_batches import ReplayBatches
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import Evaluation, eval_fields


class EnvLearner:
    """The evaluation and export half of an env learner; subclasses publish `parameters()`."""

    def __init__(self, ctx: RunContext) -> None:
        self.cfg = ctx.cfg
        self.evaluator = InlineEvaluator(ctx.cfg, ctx.env, ctx.acting_policy)

    def parameters(self) -> np.ndarray:
        raise NotImplementedError

    def eval_record(self, result: dict[str, float]) -> tuple[dict[str, Any], float]:
        return eval_fields(result), result["return_mean"]

    def evaluate(self, episodes: int, seed: int) -> Evaluation:
        played = self.evaluator(self.parameters(), episodes, seed)
        return Evaluation(
            played.return_mean, played.return_std, len(played.returns), played.length_mean
        )

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        return True  # the checkpoint is the whole of it

    def close(self) -> None:
        self.evaluator.close()


class ReplayLearner(EnvLearner):
    """An env learner on the replay's batches; `kind` and `checkpoint_format` mark its
    checkpoints (a resumed run checks them: `check_state`)."""

    name = "torch"
    kind = ""
    checkpoint_format = 0

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx)
        self.batches = ReplayBatches(ctx, b)
        self.wait: Callable[[float], object] = self.batches.wait
        self._stats: list[dict[str, float]] = []  # per update, since the last log
        self._waited: dict[str, float] = {}

    def ready(self, version: int) -> bool:
        return self.batches.ready(version)

    def stats_record(self, seconds: float) -> dict[str, Any]:
        """The means of the updates' statistics since the last log, their rate and the
        batches' counters; the window starts again."""
        keys = {k for s in self._stats for k in s}
        record: dict[str, Any] = {
            k: float(np.mean([s[k] for s in self._stats if k in s])) for k in sorted(keys)
        }
        record["updates_per_s"] = round(len(self._stats) / seconds, 1)
        record.update(self.batches.metrics(seconds, self._waited))
        self._stats = []
        return record

    def marked(self, state: dict[str, Any]) -> dict[str, Any]:
        """`state` as a checkpoint of this learner: its format and kind first."""
        return {"format": self.checkpoint_format, "kind": self.kind, **state}

    def check_state(self, state: dict[str, Any]) -> None:
        """A UserError unless `state` is a checkpoint of this learner and format."""
        if state.get("kind") != self.kind or state.get("format") != self.checkpoint_format:
            raise UserError(
                f"this checkpoint was not written by the {self.kind.upper()} learner of this "
                "surge version",
                "resume it with the surge version and algo it was trained with",
            )

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        return self.batches.export(version)  # the replay, saved by its workers
