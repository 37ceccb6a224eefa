"""DQN's learner inside the trainer chassis (surge/workers/trainer.py): the DQN family
(double, dueling, n-step, prioritised, Ape-X) on batches the replay workers serve.

Batch u is the row of the batches block that holds it (streams/replay_blocks.py), sampled by shard
u % S. One update per batch: the TD loss (algos/dqn.py) on the n-step targets, weighted by
the importance weights of prioritised replay; the new |TD errors| go back into the row for
the shard to turn into priorities. The target network follows the online one every
`dqn.target_every` updates (a copy, or Polyak with `dqn.target_tau` < 1).

Env steps and episodes reach the trainer with the rows: each carries its shard's counters
when it was sampled and the episodes that finished since its previous row. The update itself
is the backend's (learners/q_backends.py: numpy for MLP Q-networks, else torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surge.algos.exploration import linear_schedule
from surge.errors import UserError
from surge.evaluation.suite import InlineEvaluator
from surge.learners.q_backends import make_q_backend
from surge.learners.replay_batches import ReplayBatches
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import Evaluation, TrainerWorker, Update, eval_fields

CHECKPOINT_FORMAT = 2  # 2: FusedAdam's optimizer state (algos/adam.py)


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, DQNLearner(ctx, b))


class DQNLearner:
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        space = ctx.env.action_space
        assert isinstance(space, gym.spaces.Discrete), "the plug-in checked it"
        self.start_action = int(space.start)
        # numpy for the MLP Q-networks it covers, else torch (learners/q_backends.py)
        self.backend = make_q_backend(ctx)
        self.name = self.backend.name
        self.batches = ReplayBatches(ctx, b)
        self.wait = self.batches.wait
        self.updates = 0
        self.env_steps = 0
        self._stats: list[dict[str, float]] = []
        self._waited: dict[str, float] = {}
        self.evaluator = InlineEvaluator(cfg, ctx.env, ctx.acting_policy)

    def ready(self, version: int) -> bool:
        return self.batches.ready(version)

    def update(self, version: int) -> Update:
        row, f = self.batches.take(version)
        prioritized = self.cfg.replay.prioritized
        loss, q_taken, td = self.backend.update(f, self.start_action, prioritized)
        td_abs = np.abs(td)
        if prioritized:
            f["priority"][:] = td_abs
        self._after_update(
            {"loss": loss, "q_mean": float(q_taken.mean()), "td_abs": float(td_abs.mean())}
        )
        update = self.batches.give_back(version, row)
        self.env_steps += update.env_steps
        return update

    def _after_update(self, stats: dict[str, float]) -> None:
        """Count the update, move the target network on its schedule, keep the stats."""
        d = self.cfg.dqn
        self.updates += 1
        if self.updates % d.target_every == 0:
            self.backend.sync_target(d.target_tau)
        self._stats.append(stats)

    def parameters(self) -> np.ndarray:
        return self.backend.parameters()

    def metrics(self, seconds: float) -> dict[str, Any]:
        d = self.cfg.dqn
        window = self._stats or [{}]
        record: dict[str, Any] = {
            k: float(np.mean([s[k] for s in window if k in s])) for k in window[-1]
        }
        record["updates_per_s"] = round(len(self._stats) / seconds, 1)
        if d.exploration == "linear":
            duration = d.epsilon_fraction * self.cfg.total_env_steps
            record["epsilon"] = linear_schedule(
                d.epsilon_start, d.epsilon_end, duration, self.env_steps
            )
        record.update(self.batches.metrics(seconds, self._waited))
        self._stats = []
        return record

    def eval_record(self, result: dict[str, float]) -> tuple[dict[str, Any], float]:
        return eval_fields(result), result["return_mean"]

    def evaluate(self, episodes: int, seed: int) -> Evaluation:
        played = self.evaluator(self.parameters(), episodes, seed)
        return Evaluation(
            played.return_mean, played.return_std, len(played.returns), played.length_mean
        )

    def state(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "kind": "dqn",
            **self.backend.state(),  # model, target, optimizer: the same for both backends
            "updates": self.updates,
        }

    def load(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "dqn" or state.get("format") != CHECKPOINT_FORMAT:
            raise UserError(
                "this checkpoint was not written by the DQN learner of this surge version",
                "resume it with the surge version and algo it was trained with",
            )
        self.backend.load(state)
        self.updates = int(state["updates"])
        self.env_steps = int(state["env_steps"])

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        return self.batches.export(version)  # the replay, saved by its workers

    def close(self) -> None:
        self.evaluator.close()
