"""Gymnasium wrappers that ship with surge, applied by import path through `env.wrappers`.

`HideVelocity` turns a classic-control task into a partially observed one: it drops the
velocity entries of the observation, so a feed-forward policy sees positions only and must
guess the motion, while a recurrent one (`model.core`) can infer it from the positions it
saw (preset `memory-gru`: CartPole-v1 without its two velocities).

    env.wrappers: [surge.envs.wrappers:HideVelocity]
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from surge.errors import EnvSpecError

VELOCITY_ENTRIES: dict[str, tuple[int, ...]] = {
    "CartPole": (1, 3),  # x, x_dot, theta, theta_dot
    "Acrobot": (4, 5),  # cos/sin of both angles, then both angular velocities
    "MountainCar": (1,),  # position, velocity
    "MountainCarContinuous": (1,),
    "Pendulum": (2,),  # cos(theta), sin(theta), theta_dot
}
"""Per Gymnasium env name (the id without its version): the observation entries that are
velocities."""


class HideVelocity(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """Observations without their velocity entries (`VELOCITY_ENTRIES`): a 1-D Box of the
    remaining entries, with their bounds."""

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        spec = env.spec
        name = spec.name if spec is not None else ""
        space = env.observation_space
        if name not in VELOCITY_ENTRIES or not isinstance(space, gym.spaces.Box):
            raise EnvSpecError(
                f"HideVelocity does not know the velocity entries of {spec.id if spec else env}",
                f"use it with one of {', '.join(sorted(VELOCITY_ENTRIES))} (any version)",
            )
        hidden = VELOCITY_ENTRIES[name]
        self.keep = np.array([i for i in range(space.shape[0]) if i not in hidden])
        self.observation_space = gym.spaces.Box(
            space.low[self.keep], space.high[self.keep], dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]
