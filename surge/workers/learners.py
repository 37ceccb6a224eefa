"""The trainer's two learner backends behind one interface (`model.backend`).

Both run the same PPO / APPO update on a sample-stream slot, publish the same flat
parameter vector, and checkpoint the same torch state dict. `NumpyBackend` never imports
torch (see models/numpy_net.py for why); `TorchBackend` does, when it is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from surge.algos.batch import slot_batch
from surge.errors import ConfigError
from surge.models.normalize import ValueNormalizer
from surge.models.numpy_policy import numpy_layout
from surge.seeds import derive_seed
from surge.workers.base import RunContext


class LearnerBackend(Protocol):
    name: str
    value_norm: ValueNormalizer | None
    """`model.value_norm`'s statistics (published after the weights), or None."""

    def update(self, arrays: dict[str, np.ndarray], lr: float) -> dict[str, float]:
        """Train on the batch in a slot's arrays; the stats of the update."""
        ...

    def flat_parameters(self) -> np.ndarray:
        """The parameters as the float32 vector the parameter service publishes."""
        ...

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(model state dict, learner state) for a checkpoint (numpy arrays or tensors)."""
        ...

    def load(self, model: dict[str, Any], learner: dict[str, Any]) -> None: ...

    def use_threads(self, threads: Callable[[], int]) -> None:
        """Ask `threads()` for the thread count before each step of an update (see
        `workers.trainer_threads_alone`)."""
        ...


def backend_name(ctx: RunContext) -> str:
    """The backend `model.backend` selects for this run's model."""
    cfg = ctx.cfg
    choice = cfg.model.backend
    if choice == "torch":
        return "torch"
    covered = numpy_layout(ctx.env.observation_space, ctx.env.action_space, cfg.model) is not None
    if choice == "numpy" and not covered:
        why = (
            f"a recurrent core (model.core={cfg.model.core})"
            if cfg.model.core != "none"
            else "a CNN encoder (an image observation, or model.encoder=nature_cnn / small_cnn)"
        )
        raise ConfigError(
            f"model.backend=numpy covers feed-forward MLP models on the flat encoder; this "
            f"model uses {why}",
            "set model.backend to auto or torch",
        )
    return "numpy" if covered else "torch"


def make_backend(ctx: RunContext) -> LearnerBackend:
    return NumpyBackend(ctx) if backend_name(ctx) == "numpy" else TorchBackend(ctx)


class NumpyBackend:
    name = "numpy"

    def __init__(self, ctx: RunContext) -> None:
        from surge.algos.numpy_ppo import NumpyPPOLearner
        from surge.models.numpy_net import NumpyActorCritic, initial_parameters

        cfg = self.cfg = ctx.cfg
        layout = numpy_layout(ctx.env.observation_space, ctx.env.action_space, cfg.model)
        assert layout is not None
        init_rng = np.random.default_rng(derive_seed(cfg.seed, "model"))
        flat = initial_parameters(layout, init_rng, cfg.model.log_std_init)
        self.net = NumpyActorCritic(layout, flat)
        rng = np.random.default_rng(derive_seed(cfg.seed, "trainer"))
        vtrace = cfg.appo if cfg.algo == "appo" else None
        self.value_norm = ValueNormalizer() if cfg.model.value_norm else None
        self.learner = NumpyPPOLearner(self.net, cfg.ppo, rng, vtrace, self.value_norm)

    def update(self, arrays: dict[str, np.ndarray], lr: float) -> dict[str, float]:
        return self.learner.update(slot_batch(arrays, self.cfg.ppo.rollout_len), lr)

    def flat_parameters(self) -> np.ndarray:
        return self.net.flat

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.net.state_dict(), self.learner.state_dict()

    def load(self, model: dict[str, Any], learner: dict[str, Any]) -> None:
        self.net.load_state_dict({k: np.asarray(v) for k, v in model.items()})
        self.learner.load_state_dict(learner)

    def use_threads(self, threads: Callable[[], int]) -> None:
        pass  # the numpy learner computes on one BLAS thread


class TorchBackend:
    name = "torch"

    def __init__(self, ctx: RunContext) -> None:
        import torch

        from surge.algos.ppo import PPOLearner
        from surge.models.actor_critic import ActorCritic

        cfg = self.cfg = ctx.cfg
        torch.set_num_threads(cfg.workers.trainer_threads)
        torch.manual_seed(derive_seed(cfg.seed, "model"))
        self.model = ActorCritic(ctx.env.observation_space, ctx.env.action_space, cfg.model)
        generator = torch.Generator().manual_seed(derive_seed(cfg.seed, "trainer"))
        vtrace = cfg.appo if cfg.algo == "appo" else None
        self.value_norm = ValueNormalizer() if cfg.model.value_norm else None
        self.learner = PPOLearner(self.model, cfg.ppo, generator, vtrace, self.value_norm)

    def update(self, arrays: dict[str, np.ndarray], lr: float) -> dict[str, float]:
        import torch

        batch = slot_batch(arrays, self.cfg.ppo.rollout_len, torch.from_numpy)
        return self.learner.update(batch, lr)

    def flat_parameters(self) -> np.ndarray:
        from surge.models.weights import model_to_flat

        return model_to_flat(self.model)

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.model.state_dict(), self.learner.state_dict()

    def load(self, model: dict[str, Any], learner: dict[str, Any]) -> None:
        self.model.load_state_dict(model)
        self.learner.load_state_dict(learner)

    def use_threads(self, threads: Callable[[], int]) -> None:
        self.learner.threads = threads
