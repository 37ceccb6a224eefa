"""QMIX's learner inside the trainer chassis (surge/workers/trainer.py): QMIX, VDN or
independent Q-learning (`qmix.mixer`) on batches of whole episodes the replay workers serve
(algos/episode_store.py).

Batch u is the row of the batches block that holds it: `qmix.batch_episodes` episodes, every
agent of every step, padded to the episode limit. One update per batch
(surge/algos/value_mixing.py `ValueMixing`): the agents' shared Q-network unrolled over each
episode from a zero state, the chosen actions' Q-values mixed with the global state (the
agents' rows carry it as `global_state`), double-Q targets from the target networks, a
masked TD loss on the team reward. The trainer publishes the agents' network alone: what
the actors act with (models/q_policy.py `agent_q_policy`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from surge.algos.exploration import linear_schedule
from surge.algos.transition_store import replay_of
from surge.algos.value_mixing import EpisodeBatch, ValueMixing, unit_scaling
from surge.devices import trainer_device
from surge.learners.base import ReplayLearner
from surge.models.inputs import ACTION_MASK, GLOBAL_STATE
from surge.models.q_policy import agent_view
from surge.seeds import derive_seed
from surge.threads import limit_torch_threads
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import TrainerWorker, Update

CHECKPOINT_FORMAT = 1


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, QMIXLearner(ctx, b))


def warm_up() -> None:
    """What a QMIX trainer's process can do before it knows its run: import torch's modules."""
    from surge.algos import value_mixing  # noqa: F401


class QMIXLearner(ReplayLearner):
    kind = "qmix"
    checkpoint_format = CHECKPOINT_FORMAT

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx, b)
        cfg = self.cfg
        limit_torch_threads(cfg.qmix.threads)
        spec = replay_of(ctx).shards[0]
        env = ctx.env
        self.device = trainer_device(cfg)
        self.start_action = int(getattr(env.action_space, "start", 0))
        self.agent_fields = list(agent_view(env.observation_space).keys())  # type: ignore[attr-defined]
        state = env.obs.get(GLOBAL_STATE)
        self.has_state = state is not None  # VDN and IQL may train without one
        self.state_dim = math.prod(state.shape) if state is not None else 1
        # the mixer's state scaled to [0, 1] by its finite bounds (`unit_scaling`: why)
        self.state_offset = np.zeros(1, np.float32)
        self.state_scale = np.ones(1, np.float32)
        if self.has_state:
            space = env.observation_space[GLOBAL_STATE]  # type: ignore[index]
            self.state_offset, self.state_scale = unit_scaling(space.low, space.high)
        self.mixing = ValueMixing(
            agent_view(env.observation_space), int(env.action_space.n),  # type: ignore[attr-defined]
            spec.agents, self.state_dim, cfg.model, cfg.qmix,
            derive_seed(cfg.seed, "model"), self.device,
        )  # fmt: skip
        self.env_steps = 0

    def update(self, version: int) -> Update:
        row, f = self.batches.take(version)
        self._stats.append(self.mixing.update(self.episode_batch(f)))
        update = self.batches.give_back(version, row)  # after the last read of the row
        self.env_steps += update.env_steps
        return update

    def episode_batch(self, f: dict[str, np.ndarray]) -> EpisodeBatch:
        """A row of the batches block as the tensors `ValueMixing` trains on."""

        def put(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

        # trained up to the batch's longest episode: the padding after it changes nothing
        # but costs an unroll (EPyMARL slices its batches the same way)
        T = int(np.flatnonzero(f["filled"].any(axis=0)).max(initial=0)) + 1
        per_step = ("action", "reward", "terminated", "filled")
        f = {k: v[:, : T + 1] for k, v in f.items() if k.startswith("obs/")} | {
            k: f[k][:, :T] for k in per_step
        }
        obs = {k: put(f[f"obs/{k}"]) for k in self.agent_fields}
        B = f["reward"].shape[0]
        if self.has_state:
            states = f[f"obs/{GLOBAL_STATE}"][:, :, 0]  # the same for every agent of an env
            states = states.reshape(B, T + 1, -1).astype(np.float32)
            state = put((states - self.state_offset) * self.state_scale)
        else:  # VDN and IQL read no state
            state = torch.zeros((B, T + 1, 1), device=self.device)
        mask = f.get(f"obs/{ACTION_MASK}")
        return EpisodeBatch(
            obs=obs,
            state=state,
            actions=put(f["action"].astype(np.int64) - self.start_action),
            reward=put(f["reward"]),
            terminated=put(f["terminated"]),
            filled=put(f["filled"]),
            avail=None if mask is None else put(mask.astype(bool)),
        )

    def parameters(self) -> np.ndarray:
        return self.mixing.agent_flat()

    def metrics(self, seconds: float) -> dict[str, Any]:
        q = self.cfg.qmix
        record = self.stats_record(seconds)
        record["epsilon"] = linear_schedule(
            q.epsilon_start, q.epsilon_finish, q.epsilon_anneal_steps, self.env_steps
        )
        return record

    def state(self) -> dict[str, Any]:
        model = {k: v.detach().cpu().numpy() for k, v in self.mixing.agent.state_dict().items()}
        return self.marked({"model": model, "mixing": self.mixing.state_dict()})

    def load(self, state: dict[str, Any]) -> None:
        self.check_state(state)
        self.mixing.load_state_dict(state["mixing"])
        self.env_steps = int(state["env_steps"])
