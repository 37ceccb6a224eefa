"""Observation normalisation and reward scaling, kept centrally by the trainer and versioned
with the parameters (the Sample Factory way, not CleanRL's per-env gym wrappers).

Pure functions for the maths, then the two objects that use them:

- `ObsNormalizer` is what every acting policy (actors' inline policy, policy workers, the
  evaluator) and the trainer apply to raw observations: `clip((x - mean) / sqrt(var + eps))`
  with the float32 statistics of one parameter version. It has no update method: whoever
  holds one applies frozen statistics.
- `TrainerStats` is the trainer's state: running mean / variance of the observations
  (`model.normalize_obs`), of the discounted return (`ppo.normalize_reward`), and each env's
  running discounted return, carried across segments. It is checkpointed.

One parameter version is the network's weights followed by the observation statistics
(`published`: `[mean (D), var (D)]` float32), published as one flat vector, so an acting
policy always applies the statistics of the version whose weights it loaded.

Order of a training step on batch v (trainer.py): the batch's observations are normalised
with the statistics published with version v (the ones the acting policy applied, when
max_policy_lag is 0); the return statistics take the batch's rewards first, then scale
them; the learner trains; then the observation statistics take the batch's raw
observations, and version v+1 publishes the new weights with the new statistics.

With max_policy_lag > 0 some steps of a batch were acted on with an older version's
statistics. The trainer still normalises every step with its current version's (the policy
being trained is weights and statistics together, as a function of raw observations); the
behaviour log-probabilities were computed by the older policy, so the importance ratio that
PPO clips and V-trace truncates covers the change of the statistics as it covers the change
of the weights. With lag 0 the ratio starts at exactly 1.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from surge.envs.spaces import flatten_obs_space
from surge.errors import ConfigError

EPS = 1e-8
"""Added to the variance under the square root (gymnasium's NormalizeObservation /
NormalizeReward epsilon)."""
INITIAL_COUNT = 1e-4
"""Pseudo-count of the initial statistics (mean 0, variance 1), as gymnasium's RunningMeanStd."""


# ---------------------------------------------------------------- pure functions


def merge_moments(
    mean_a: np.ndarray,
    var_a: np.ndarray,
    count_a: float,
    mean_b: np.ndarray,
    var_b: np.ndarray,
    count_b: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, (population) variance and count of the union of two sets, from each set's
    moments (Chan et al.'s parallel algorithm)."""
    total = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * (count_b / total)
    m2 = var_a * count_a + var_b * count_b + delta * delta * (count_a * count_b / total)
    return mean, m2 / total, total


def update_moments(
    mean: np.ndarray, var: np.ndarray, count: float, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Running (mean, var, count) after the samples `x` [n, *shape] (float64 moments)."""
    x = np.asarray(x, np.float64)
    if len(x) == 0:
        return mean, var, count
    return merge_moments(mean, var, count, x.mean(axis=0), x.var(axis=0), float(len(x)))


def normalize_clip(x: np.ndarray, mean: np.ndarray, std: np.ndarray, clip: float) -> np.ndarray:
    """float32 `clip((x - mean) / std, -clip, clip)`; `std` is `sqrt(var + EPS)`."""
    out = np.subtract(x, mean, dtype=np.float32)
    out /= std
    # np.maximum / np.minimum: np.clip's Python wrapper costs more than the maths on the
    # one-row batches of acting
    np.maximum(out, -clip, out=out)
    return np.minimum(out, clip, out=out)


def discounted_returns(
    rewards: np.ndarray, dones: np.ndarray, running: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each env's running discounted return at every step of a [T, N] segment.

    `running` [N] is the return carried in from the previous segment. At step t:
    `R = gamma * R + r_t`, then R restarts at 0 after an episode end (terminated or
    truncated) at t. Returns ([T, N] float64 returns after each step, the [N] carry-out).
    This is CleanRL's (gym 0.23) NormalizeReward; gymnasium 1.x resets only on termination.
    """
    out = np.empty(rewards.shape, np.float64)
    r = np.array(running, np.float64)
    for t in range(len(rewards)):
        r *= gamma
        r += rewards[t]
        out[t] = r
        r[dones[t]] = 0.0
    return out, r


def scale_rewards(rewards: np.ndarray, return_var: float, clip: float) -> np.ndarray:
    """float32 `clip(r / sqrt(var + EPS))`: rewards divided by the std of the return."""
    out = np.asarray(rewards, np.float32) / np.float32(math.sqrt(return_var + EPS))
    return np.clip(out, -clip, clip, out=out)


# ---------------------------------------------------------------- what the policy applies


def obs_norm_fields(obs_space: gym.Space[Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(field, shape) of every observation field, in the statistics' order; raises a
    ConfigError naming `model.normalize_obs` for observations it cannot normalise."""
    fields = []
    for key, space in sorted(flatten_obs_space(obs_space).items()):
        is_image = isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
        if not isinstance(space, gym.spaces.Box) or is_image:
            raise ConfigError(
                f"model.normalize_obs: observation field {key!r} is {space}; normalisation "
                "covers real-valued Box observations only",
                "set model.normalize_obs=false for this env",
            )
        fields.append((key, tuple(space.shape)))
    return fields


def obs_stats_size(obs_space: gym.Space[Any], normalize_obs: bool) -> int:
    """Length of the statistics appended to the published parameters (0: none)."""
    if not normalize_obs:
        return 0
    return 2 * sum(math.prod(shape) for _, shape in obs_norm_fields(obs_space))


class ObsNormalizer:
    """Frozen observation statistics applied to dicts of raw [B, ...] observations.

    `load(stats)` takes a published `[mean, var]` float32 vector; calling the normalizer
    returns float32 fields `clip((x - mean) / sqrt(var + EPS), -clip, clip)`.
    """

    def __init__(self, obs_space: gym.Space[Any], clip: float) -> None:
        self.fields = obs_norm_fields(obs_space)
        self.size = sum(math.prod(shape) for _, shape in self.fields)
        self.clip = clip
        self._mean: dict[str, np.ndarray] = {}
        self._std: dict[str, np.ndarray] = {}
        self.load(initial_stats(self.size))

    def load(self, stats: np.ndarray) -> None:
        if stats.shape != (2 * self.size,):
            raise ValueError(f"observation statistics: want {2 * self.size} values")
        mean, var = stats[: self.size], stats[self.size :]
        std = np.sqrt(var.astype(np.float32) + np.float32(EPS))
        offset = 0
        for key, shape in self.fields:
            n = math.prod(shape)
            self._mean[key] = mean[offset : offset + n].astype(np.float32).reshape(shape)
            self._std[key] = std[offset : offset + n].reshape(shape)
            offset += n

    def __call__(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            key: normalize_clip(x, self._mean[key], self._std[key], self.clip)
            for key, x in obs.items()
        }


def stats_vector(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """The published form of running observation statistics: `[mean, var]` float32."""
    return np.concatenate([mean, var]).astype(np.float32)


def initial_stats(size: int) -> np.ndarray:
    """The published statistics before any data: mean 0, variance 1."""
    return np.concatenate([np.zeros(size, np.float32), np.ones(size, np.float32)])


# ---------------------------------------------------------------- value targets


class ValueNormalizer:
    """Running mean and variance of the value targets (MAPPO's value normalisation,
    `model.value_norm`): the critic learns targets in units of their running std around
    their running mean, and every value that leaves the critic is `denormalize`d, so the
    values recorded by acting policies, bootstraps and GAE stay in reward units. Works on
    numpy arrays and torch tensors alike (plain arithmetic with float scalars).

    The learner updates it with each batch's targets before the loss, publishes
    `published()` (`[mean, var]` float32) after the weights, and checkpoints it."""

    def __init__(self) -> None:
        self.mean = np.zeros((), np.float64)
        self.var = np.ones((), np.float64)
        self.count = INITIAL_COUNT

    def update(self, targets: np.ndarray) -> None:
        x = np.asarray(targets, np.float64).reshape(-1)
        self.mean, self.var, self.count = update_moments(self.mean, self.var, self.count, x)

    @property
    def std(self) -> float:
        return math.sqrt(float(self.var) + EPS)

    def normalize(self, x: Any) -> Any:
        return (x - float(self.mean)) / self.std

    def denormalize(self, x: Any) -> Any:
        return x * self.std + float(self.mean)

    def published(self) -> np.ndarray:
        return stats_vector(self.mean.reshape(1), self.var.reshape(1))

    def state_dict(self) -> dict[str, Any]:
        return {"mean": float(self.mean), "var": float(self.var), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = np.asarray(float(state["mean"]), np.float64)
        self.var = np.asarray(float(state["var"]), np.float64)
        self.count = float(state["count"])


VALUE_STATS_SIZE = 2
"""Length of the value statistics appended to a published version with `model.value_norm`."""


def published_stats_size(obs_space: gym.Space[Any], normalize_obs: bool, value_norm: bool) -> int:
    """Length of everything a published version holds after the weights: the observation
    statistics, then the value statistics."""
    return obs_stats_size(obs_space, normalize_obs) + (VALUE_STATS_SIZE if value_norm else 0)


def denormalize_published(value: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """An acting policy's values in reward units, from its version's `[mean, var]`."""
    mean, var = float(stats[0]), float(stats[1])
    return (value * np.float32(math.sqrt(var + EPS)) + np.float32(mean)).astype(np.float32)


# ---------------------------------------------------------------- the trainer's state


class TrainerStats:
    """The running statistics the trainer keeps (see the module docstring for the order)."""

    def __init__(
        self,
        obs_space: gym.Space[Any],
        n_envs: int,
        *,
        normalize_obs: bool,
        clip_obs: float,
        normalize_reward: bool,
        clip_reward: float,
        gamma: float,
    ) -> None:
        self.obs = ObsNormalizer(obs_space, clip_obs) if normalize_obs else None
        size = self.obs.size if self.obs is not None else 0
        self.obs_mean = np.zeros(size, np.float64)
        self.obs_var = np.ones(size, np.float64)
        self.obs_count = INITIAL_COUNT
        self.normalize_reward = normalize_reward
        self.clip_reward = clip_reward
        self.gamma = gamma
        self.ret_mean = np.zeros((), np.float64)
        self.ret_var = np.ones((), np.float64)
        self.ret_count = INITIAL_COUNT
        self.running_returns = np.zeros(n_envs, np.float64)
        self._published = self._snapshot()

    @property
    def active(self) -> bool:
        return self.obs is not None or self.normalize_reward

    def _snapshot(self) -> np.ndarray:
        stats = stats_vector(self.obs_mean, self.obs_var)
        if self.obs is not None:
            self.obs.load(stats)
        return stats

    def published(self) -> np.ndarray:
        """[mean, var] float32 of the observations, appended to the published weights."""
        return self._published

    def prepare(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The batch the learner trains on: the slot's arrays with observations normalised
        by the published statistics and rewards scaled by the return's std (after the
        return statistics took this batch). Copies what it changes; the slot is not written."""
        if not self.active:
            return arrays
        out = dict(arrays)
        if self.obs is not None:
            for name, x in arrays.items():
                if name.startswith(("obs/", "final_obs/")):
                    key = name.split("/", 1)[1]
                    out[name] = self.obs({key: x})[key]
        if self.normalize_reward:
            rewards = arrays["reward"]
            dones = arrays["terminated"] | arrays["truncated"]
            returns, self.running_returns = discounted_returns(
                rewards, dones, self.running_returns, self.gamma
            )
            self.ret_mean, self.ret_var, self.ret_count = update_moments(
                self.ret_mean, self.ret_var, self.ret_count, returns.reshape(-1)
            )
            out["reward"] = scale_rewards(rewards, float(self.ret_var), self.clip_reward)
        return out

    def observe(self, arrays: dict[str, np.ndarray], steps: int) -> None:
        """Take the batch's raw observations (the first `steps` of the segment: the last
        one is the next segment's first) into the observation statistics."""
        if self.obs is None:
            return
        parts = []
        for key, _ in self.obs.fields:
            x = arrays[f"obs/{key}"][:steps]
            parts.append(x.reshape(x.shape[0] * x.shape[1], -1))
        x = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        self.obs_mean, self.obs_var, self.obs_count = update_moments(
            self.obs_mean, self.obs_var, self.obs_count, x
        )
        self._published = self._snapshot()

    def metrics(self) -> dict[str, float]:
        """For metrics.jsonl: the std rewards are divided by (`reward_scale`)."""
        if not self.normalize_reward:
            return {}
        return {"reward_scale": math.sqrt(float(self.ret_var) + EPS)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "obs_mean": self.obs_mean.copy(),
            "obs_var": self.obs_var.copy(),
            "obs_count": float(self.obs_count),
            "ret_mean": self.ret_mean.copy(),
            "ret_var": self.ret_var.copy(),
            "ret_count": float(self.ret_count),
            "running_returns": self.running_returns.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mean = np.asarray(state["obs_mean"], np.float64)
        if mean.shape != self.obs_mean.shape:
            raise ValueError(
                f"observation statistics of {mean.size} values, this model has {self.obs_mean.size}"
            )
        self.obs_mean = mean
        self.obs_var = np.asarray(state["obs_var"], np.float64)
        self.obs_count = float(state["obs_count"])
        self.ret_mean = np.asarray(state["ret_mean"], np.float64).reshape(())
        self.ret_var = np.asarray(state["ret_var"], np.float64).reshape(())
        self.ret_count = float(state["ret_count"])
        running = np.asarray(state["running_returns"], np.float64)
        # a resume with another number of envs starts their running returns at 0
        if running.shape == self.running_returns.shape:
            self.running_returns = running
        self._published = self._snapshot()
