"""What computes the DQN learner's update (`model.backend`): numpy for the MLP Q-networks it
covers (algos/numpy_dqn.py; the default there, about a third of torch's cost per update on a
small batch), torch for every Q-network (CNNs, and R2D2's recurrent ones).

Both keep the online and target weights in flat float32 vectors in `QNetwork.parameters()`
order (the published layout), and write the same checkpoint: the torch state dicts of both
networks and Adam's state in FusedAdam's layout (algos/adam.py), so either backend resumes
the other's checkpoints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from surge.errors import ConfigError
from surge.models.q_policy import q_inputs, q_params
from surge.seeds import derive_seed
from surge.workers.base import RunContext

Step = tuple[float, np.ndarray, np.ndarray]
"""(loss, Q of the actions taken [B], TD errors target - Q [B])."""


def q_backend_name(cfg: Any, env: Any) -> str:
    """The backend `model.backend` selects for this Q-network (`env`: its spaces)."""
    choice = cfg.model.backend
    if choice == "torch" or cfg.workers.trainer_device.startswith("cuda"):
        return "torch"  # numpy learners run on the CPU only (config/load.py checks numpy)
    covered = cfg.model.core == "none" and bool(
        q_params(env.observation_space, int(env.action_space.n), cfg.model, cfg.dqn.dueling)
    )
    if choice == "numpy" and not covered:
        raise ConfigError(
            "model.backend=numpy covers feed-forward MLP Q-networks on the flat encoder; this "
            f"one has {'a recurrent core' if cfg.model.core != 'none' else 'a CNN encoder'}",
            "set model.backend to auto or torch",
        )
    return "numpy" if covered else "torch"


def make_q_backend(ctx: RunContext) -> NumpyQ | TorchQ:
    if q_backend_name(ctx.cfg, ctx.env) == "numpy":
        return NumpyQ(ctx)
    return TorchQ(ctx)


def _initial_network(ctx: RunContext) -> Any:
    """The torch Q-network with its seeded initial weights (both backends start from it)."""
    import torch

    from surge.models.q_network import QNetwork

    torch.manual_seed(derive_seed(ctx.cfg.seed, "model"))
    n = int(ctx.env.action_space.n)  # type: ignore[attr-defined]
    return QNetwork(ctx.env.observation_space, n, ctx.cfg.model, ctx.cfg.dqn.dueling)


class NumpyQ:
    name = "numpy"

    def __init__(self, ctx: RunContext) -> None:
        from surge.algos.numpy_dqn import NumpyQLearner, QLayout
        from surge.envs.spaces import flatten_obs_space
        from surge.models.numpy_policy import flat_fields
        from surge.models.weights import model_to_flat

        cfg, d, space = ctx.cfg, ctx.cfg.dqn, ctx.env.observation_space
        n = int(ctx.env.action_space.n)  # type: ignore[attr-defined]
        encoded = flat_fields(flatten_obs_space(space), q_inputs(space))
        assert encoded is not None, "q_backend_name checked it"
        self.fields = encoded[0]
        self.layout = QLayout(
            q_params(space, n, cfg.model, d.dueling), d.dueling, cfg.model.activation == "relu"
        )
        flat = model_to_flat(_initial_network(ctx))
        self.learner = NumpyQLearner(
            self.layout, flat, d.lr, d.adam_eps, d.double, d.loss, d.max_grad_norm
        )

    def update(self, f: dict[str, np.ndarray], start_action: int, prioritized: bool) -> Step:
        from surge.models.numpy_policy import encode_fields

        obs = {k[4:]: v for k, v in f.items() if k.startswith("obs/")}
        nxt = {k[9:]: v for k, v in f.items() if k.startswith("next_obs/")}
        action = f["action"].astype(np.int64) - start_action
        return self.learner.update(
            encode_fields(self.fields, obs),
            encode_fields(self.fields, nxt),
            action,
            f["reward"],
            f["discount"],
            f["weight"] if prioritized else None,
        )

    def sync_target(self, tau: float) -> None:
        self.learner.sync_target(tau)

    def parameters(self) -> np.ndarray:
        return self.learner.flat

    def _named(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        names = [name for name, _ in self.layout.shapes]
        return dict(zip(names, (v.copy() for v in self.layout.views(flat)), strict=True))

    def state(self) -> dict[str, Any]:
        return {
            "model": self._named(self.learner.flat),
            "target": self._named(self.learner.target),
            "optimizer": self.learner.optimizer.state_dict(self.layout.views),
        }

    def load(self, state: dict[str, Any]) -> None:
        for flat, saved in (
            (self.learner.flat, state["model"]),
            (self.learner.target, state["target"]),
        ):
            for (name, shape), view in zip(
                self.layout.shapes, self.layout.views(flat), strict=True
            ):
                view[...] = np.asarray(saved[name], np.float32).reshape(shape)
        self.learner.optimizer.load_state_dict(state["optimizer"])


class TorchQ:
    name = "torch"

    def __init__(self, ctx: RunContext) -> None:
        import copy

        import torch

        from surge.algos.adam import FusedAdam
        from surge.algos.flat_params import FlatParameters
        from surge.algos.staging import DeviceStaging
        from surge.devices import trainer_device

        d = ctx.cfg.dqn
        torch.set_num_threads(d.threads)
        self.device = trainer_device(ctx.cfg)
        self.staging = DeviceStaging(self.device)  # the batch row, copied once per update
        self.q = _initial_network(ctx).to(self.device)
        self.target = copy.deepcopy(self.q)
        # One flat buffer for the weights and one for their gradients: zeroing, clipping
        # and Adam are one kernel each per update, and publishing reads the buffer as it is
        # (algos/flat_params.py).
        self.flat = FlatParameters(self.q)
        self.target_flat = FlatParameters(self.target)  # Polyak: one kernel
        self.target.requires_grad_(False)
        self.optimizer = FusedAdam(self.flat, lr=d.lr, eps=d.adam_eps)
        self.cfg = ctx.cfg

    def update(self, f: dict[str, np.ndarray], start_action: int, prioritized: bool) -> Step:
        import torch

        from surge.algos.dqn import double_q_target, q_learning_target, td_loss

        d = self.cfg.dqn
        put = self.staging
        put.begin()
        obs = {k[4:]: put(v) for k, v in f.items() if k.startswith("obs/")}
        nxt = {k[9:]: put(v) for k, v in f.items() if k.startswith("next_obs/")}
        action = put(f["action"].astype(np.int64) - start_action)
        returns, discount = put(f["reward"]), put(f["discount"])
        q = self.q(obs)
        q_taken = q.gather(1, action.reshape(-1, 1)).squeeze(1)
        with torch.no_grad():
            q_next = self.target(nxt)
            if d.double:
                target = double_q_target(self.q(nxt), q_next, returns, discount)
            else:
                target = q_learning_target(q_next, returns, discount)
        weights = put(f["weight"]) if prioritized else None
        loss, td = td_loss(q_taken, target, weights, d.loss)
        self.optimizer.zero_grad()
        loss.backward()
        if d.max_grad_norm is not None:
            self.flat.clip_grad_norm_(d.max_grad_norm)
        self.optimizer.step()
        # back on the CPU once per update: the replay's priorities and the metrics need them
        return loss.item(), q_taken.detach().cpu().numpy(), td.cpu().numpy()

    def sync_target(self, tau: float) -> None:
        import torch

        with torch.no_grad():
            self.target_flat.data.lerp_(self.flat.data, tau)

    def parameters(self) -> np.ndarray:
        return self.flat.published().cpu().numpy()  # `parameters()` order, each row-major

    def state(self) -> dict[str, Any]:
        return {
            "model": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load(self, state: dict[str, Any]) -> None:
        import torch

        self.q.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
        self.target.load_state_dict({k: torch.as_tensor(v) for k, v in state["target"].items()})
        self.optimizer.load_state_dict(state["optimizer"])
