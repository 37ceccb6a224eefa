"""The acting policy: what every worker that acts runs, whatever the algorithm.

Policy workers, inline inference in actors, evaluation workers, self-play opponents and
`surge eval` all act through this contract on the flat parameter vector the trainer
publishes. Each algorithm names its own factory (`RunContext.acting_policy`, an import path
with the signature of `ActingFactory`); PPO's family acts with `FlatPolicy`
(models/flat_policy.py).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo
from surge.imports import import_object


class ActingPolicy(Protocol):
    OUTPUTS: dict[str, str]
    """The per-step outputs `act` returns after the action, name -> dtype, in that order:
    the inference answer and the sample stream carry them (the algorithm's sample fields)."""

    flat: np.ndarray
    """The published vector of the loaded version: write into it, then `reload()`."""

    state_size: int
    """Floats of recurrent state per row (0: feed-forward)."""

    def reload(self) -> None: ...

    def load(self, flat: np.ndarray) -> None: ...

    def act(
        self,
        obs: dict[str, np.ndarray],
        deterministic: bool = False,
        core: np.ndarray | None = None,
    ) -> tuple[np.ndarray, ...]:
        """(action, *outputs) for a batch of observations; a recurrent policy takes the
        state before the step `core` [B, S] and returns the state after it last."""
        ...

    def initial_state(self, rows: int) -> np.ndarray | None: ...


class ActingFactory(Protocol):
    def __call__(
        self, env: EnvInfo, cfg: ExperimentConfig, seed: int, device: str = "cpu"
    ) -> ActingPolicy: ...


def acting_policy(
    path: str, env: EnvInfo, cfg: ExperimentConfig, seed: int, device: str = "cpu"
) -> ActingPolicy:
    """The acting policy the factory at `path` builds for `env`'s spaces. `device`: where a
    torch model acts (surge/devices.py); numpy MLP policies act on the CPU whatever it is.
    Observations go to it once per batch, the outputs come back once."""
    factory: ActingFactory = import_object(path)
    return factory(env, cfg, seed, device)
