"""Small envs for tests (ours and users'): every space surge accepts, and ways to fail.

Importing this module registers them, so any config can name one with gymnasium's
`module:EnvName` form, e.g. `env.id=surge.envs.testing:surge/DictObs-v0`; worker processes
import the module themselves.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np


class _Base(gym.Env[Any, Any]):
    """A short-horizon env with random observations and rewards: for plumbing, not learning.

    Episodes terminate at random (p=0.05 per step) or are truncated at `horizon` steps, so
    both kinds of episode end occur in short runs."""

    def __init__(self, horizon: int = 16) -> None:
        self.horizon = horizon
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        reward = self._reward(action)
        terminated = bool(self.np_random.random() < 0.05)
        truncated = self.t >= self.horizon and not terminated
        return self._obs(), reward, terminated, truncated, {}

    def _obs(self) -> Any:
        return self.observation_space.sample()

    def _reward(self, action: Any) -> float:
        return float(self.np_random.random())


class DictObsEnv(_Base):
    """Dict observation (a Box and a Discrete), MultiDiscrete action."""

    def __init__(self, horizon: int = 16) -> None:
        super().__init__(horizon)
        self.observation_space = gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                "room": gym.spaces.Discrete(5),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete([3, 2])

    def _obs(self) -> Any:
        return {
            "position": self.np_random.uniform(-1, 1, 3).astype(np.float32),
            "room": int(self.np_random.integers(5)),
        }


class DiscreteObsEnv(_Base):
    """Discrete observation, Box (continuous) action."""

    def __init__(self, horizon: int = 16) -> None:
        super().__init__(horizon)
        self.observation_space = gym.spaces.Discrete(7)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)

    def _obs(self) -> Any:
        return int(self.np_random.integers(7))


class WrongShapeEnv(_Base):
    """Declares observations of shape (3,) but returns shape (4,)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> Any:
        return np.zeros(4, np.float32)


class CrashingEnv(_Base):
    """Raises from step() after `crash_after` steps (counted per env instance)."""

    def __init__(self, crash_after: int = 100) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.crash_after = crash_after
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps > self.crash_after:
            raise RuntimeError(f"CrashingEnv: simulated failure at step {self.steps}")
        return super().step(action)


class HangingEnv(CrashingEnv):
    """Stops answering (sleeps) in step() after `hang_after` steps (counted per env)."""

    def __init__(self, hang_after: int = 100) -> None:
        super().__init__(crash_after=10**12)
        self.hang_after = hang_after

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps > self.hang_after:
            time.sleep(10**6)
        return _Base.step(self, action)


class AlternateEnv(gym.Env[Any, Any]):
    """Rewards switching: 1 for an action unlike the one before, over 20 steps. The
    observation is always the same, so a policy that acts on it alone cannot alternate: a
    uniformly random one scores 9.5 on average, a deterministic one 0. A run whose training
    mean (of a sampling policy) passes a threshold its greedy evaluation never reaches."""

    HORIZON = 20

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t, self.last = 0, -1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t, self.last = 0, -1
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        action = int(action)
        reward = float(self.last >= 0 and action != self.last)
        self.t, self.last = self.t + 1, action
        return np.zeros(1, np.float32), reward, False, self.t >= self.HORIZON, {}


class CameraPendulum(gym.Wrapper[Any, Any, Any, Any]):
    """Pendulum-v1 with a camera: each step's info holds an 8x8 RGB `frame` whose brightness
    is (cos(theta) + 1) / 2 of the new state, and driving-style state terms made from it
    (`speed_kmh` = 10 |theta dot|, `lane_offset` = sin(theta), `heading_error` 0,
    `lane_offset_std` 0). `brightness` scores such frames: a reward model whose every
    reward can be checked against the observation that follows it."""

    def __init__(self) -> None:
        super().__init__(gym.make("Pendulum-v1"))

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        level = np.uint8(round((float(obs[0]) + 1.0) / 2.0 * 255.0))
        info = {
            **info,
            "frame": np.full((8, 8, 3), level, np.uint8),
            "speed_kmh": 10.0 * abs(float(obs[2])),
            "lane_offset": float(obs[1]),
            "heading_error": 0.0,
            "lane_offset_std": 0.0,
        }
        return obs, reward, terminated, truncated, info


def brightness(frames: np.ndarray) -> np.ndarray:
    """A reward model for `CameraPendulum`: each frame's mean brightness in [0, 1]."""
    return frames.reshape(len(frames), -1).mean(axis=1) / 255.0


for _name, _cls in [
    ("DictObs", DictObsEnv),
    ("DiscreteObs", DiscreteObsEnv),
    ("WrongShape", WrongShapeEnv),
    ("Crashing", CrashingEnv),
    ("Hanging", HangingEnv),
    ("Alternate", AlternateEnv),
    ("CameraPendulum", CameraPendulum),
]:
    if f"surge/{_name}-v0" not in gym.registry:
        gym.register(f"surge/{_name}-v0", entry_point=_cls)  # type: ignore[arg-type]
