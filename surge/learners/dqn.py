"""DQN's learner inside the trainer chassis (surge/workers/trainer.py): the DQN family
(double, dueling, n-step, prioritised, Ape-X) on batches the replay workers serve.

Batch u is the row of the batches block that holds it (streams/replay.py), sampled by shard
u % S. One update per batch: the TD loss (algos/dqn.py) on the n-step targets, weighted by
the importance weights of prioritised replay; the new |TD errors| go back into the row for
the shard to turn into priorities. The target network follows the online one every
`dqn.target_every` updates (a copy, or Polyak with `dqn.target_tau` < 1).

Env steps and episodes reach the trainer with the rows: each carries its shard's counters
when it was sampled and the episodes that finished since its previous row.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from surge.algos.adam import FusedAdam
from surge.algos.dqn import double_q_target, q_learning_target, td_loss
from surge.algos.exploration import linear_schedule
from surge.algos.flat_params import FlatParameters
from surge.errors import UserError
from surge.evaluation.suite import InlineEvaluator
from surge.learners.replay import ReplayBatches
from surge.models.q_network import QNetwork
from surge.seeds import derive_seed
from surge.workers.base import Binding, RunContext
from surge.workers.trainer import Evaluation, TrainerWorker, Update, eval_fields

CHECKPOINT_FORMAT = 2  # 2: FusedAdam's optimizer state (algos/adam.py)


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx, b, DQNLearner(ctx, b))


class DQNLearner:
    name = "torch"

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        d = cfg.dqn
        torch.set_num_threads(d.threads)
        torch.manual_seed(derive_seed(cfg.seed, "model"))
        space = ctx.env.action_space
        assert isinstance(space, gym.spaces.Discrete), "the plug-in checked it"
        self.start_action = int(space.start)
        self.q = QNetwork(ctx.env.observation_space, int(space.n), cfg.model, d.dueling)
        self.target = copy.deepcopy(self.q)
        # One flat buffer for the weights and one for their gradients: zeroing, clipping
        # and Adam are one kernel each per update, and publishing reads the buffer as it is
        # (algos/flat_params.py; an update of CartPole's Q-network costs well under 1 ms,
        # so per-tensor dispatch would be a large share of it).
        self.flat = FlatParameters(self.q)
        self.target_flat = FlatParameters(self.target)  # Polyak: one kernel
        self.target.requires_grad_(False)
        self.optimizer = FusedAdam(self.flat, lr=d.lr, eps=d.adam_eps)
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
        d = self.cfg.dqn
        row, f = self.batches.take(version)
        obs = {k[4:]: torch.from_numpy(v) for k, v in f.items() if k.startswith("obs/")}
        nxt = {k[9:]: torch.from_numpy(v) for k, v in f.items() if k.startswith("next_obs/")}
        action = torch.from_numpy(f["action"].astype(np.int64) - self.start_action)
        returns, discount = torch.from_numpy(f["reward"]), torch.from_numpy(f["discount"])
        q = self.q(obs)
        q_taken = q.gather(1, action.reshape(-1, 1)).squeeze(1)
        with torch.no_grad():
            q_next = self.target(nxt)
            if d.double:
                target = double_q_target(self.q(nxt), q_next, returns, discount)
            else:
                target = q_learning_target(q_next, returns, discount)
        weights = torch.from_numpy(f["weight"]) if self.cfg.replay.prioritized else None
        loss, td = td_loss(q_taken, target, weights, d.loss)
        self.optimizer.zero_grad()
        loss.backward()
        if d.max_grad_norm is not None:
            self.flat.clip_grad_norm_(d.max_grad_norm)
        self.optimizer.step()
        td_abs = np.abs(td.numpy())
        if self.cfg.replay.prioritized:
            f["priority"][:] = td_abs
        self.updates += 1
        if self.updates % d.target_every == 0:
            self.sync_target()
        q_mean = float(q_taken.detach().numpy().mean())
        self._stats.append({"loss": loss.item(), "q_mean": q_mean, "td_abs": float(td_abs.mean())})
        update = self.batches.give_back(version, row)
        self.env_steps += update.env_steps
        return update

    def sync_target(self) -> None:
        """target <- tau * online + (1 - tau) * target (`dqn.target_tau` 1: a copy)."""
        with torch.no_grad():
            self.target_flat.data.lerp_(self.flat.data, self.cfg.dqn.target_tau)

    def parameters(self) -> np.ndarray:
        return self.flat.data.numpy()  # the published layout: `parameters()` order

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
            "model": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "dqn" or state.get("format") != CHECKPOINT_FORMAT:
            raise UserError(
                "this checkpoint was not written by the DQN learner of this surge version",
                "resume it with the surge version and algo it was trained with",
            )
        self.q.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
        self.target.load_state_dict({k: torch.as_tensor(v) for k, v in state["target"].items()})
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.env_steps = int(state["env_steps"])

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        return self.batches.export(version)  # the replay, saved by its workers

    def close(self) -> None:
        self.evaluator.close()
