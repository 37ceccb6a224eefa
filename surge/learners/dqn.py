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

from typing import Any

import gymnasium as gym
import numpy as np

from surge.algos.exploration import linear_schedule
from surge.learners.base import ReplayLearner
from surge.learners.q_backends import make_q_backend
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import TrainerWorker, Update

CHECKPOINT_FORMAT = 2  # 2: FusedAdam's optimizer state (algos/adam.py)


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, DQNLearner(ctx, b))


class DQNLearner(ReplayLearner):
    kind = "dqn"
    checkpoint_format = CHECKPOINT_FORMAT

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx, b)
        space = ctx.env.action_space
        assert isinstance(space, gym.spaces.Discrete), "the plug-in checked it"
        self.start_action = int(space.start)
        # numpy for the MLP Q-networks it covers, else torch (learners/q_backends.py)
        self.backend = make_q_backend(ctx)
        self.name = self.backend.name
        self.updates = 0
        self.env_steps = 0

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
        record = self.stats_record(seconds)
        if d.exploration == "linear":
            duration = d.epsilon_fraction * self.cfg.total_env_steps
            record["epsilon"] = linear_schedule(
                d.epsilon_start, d.epsilon_end, duration, self.env_steps
            )
        return record

    def state(self) -> dict[str, Any]:
        # model, target, optimizer: the same for both backends
        return self.marked({**self.backend.state(), "updates": self.updates})

    def load(self, state: dict[str, Any]) -> None:
        self.check_state(state)
        self.backend.load(state)
        self.updates = int(state["updates"])
        self.env_steps = int(state["env_steps"])
