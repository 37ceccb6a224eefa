"""Observation normalisation and reward scaling (surge/models/normalize.py): the maths against
hand-computed numbers and a sequential numpy reference, and the trainer's statistics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from surge.errors import ConfigError
from surge.models.normalize import (
    EPS,
    INITIAL_COUNT,
    ObsNormalizer,
    TrainerStats,
    discounted_returns,
    merge_moments,
    normalize_clip,
    obs_stats_size,
    scale_rewards,
    update_moments,
)


def test_merge_moments_hand_computed() -> None:
    # {1, 2, 3}: mean 2, var 2/3; {5, 7}: mean 6, var 1. Union {1, 2, 3, 5, 7}: mean 3.6,
    # var (6.76 + 2.56 + 0.36 + 1.96 + 11.56) / 5 = 23.2 / 5 = 4.64
    mean, var, count = merge_moments(
        np.array(2.0), np.array(2.0 / 3.0), 3.0, np.array(6.0), np.array(1.0), 2.0
    )
    assert count == 5.0
    assert float(mean) == pytest.approx(3.6, abs=1e-12)
    assert float(var) == pytest.approx(4.64, abs=1e-12)


def test_update_moments_in_chunks_equals_all_at_once() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(1000, 4)) * np.array([1.0, 10.0, 0.1, 5.0])
    mean, var, count = np.zeros(4), np.ones(4), INITIAL_COUNT
    for chunk in np.array_split(x, 7):
        mean, var, count = update_moments(mean, var, count, chunk)
    # the pseudo-count's initial (0, 1) weighs 1e-4 against 1000 samples
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(var, x.var(0), rtol=1e-6, atol=1e-6)
    assert count == pytest.approx(1000 + INITIAL_COUNT)


def test_normalize_clip() -> None:
    x = np.array([[0.0, 3.0, 100.0]])
    out = normalize_clip(x, np.array([1.0, 1.0, 0.0]), np.array([2.0, 0.5, 1.0]), clip=10.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[-0.5, 4.0, 10.0]])


def test_discounted_returns_hand_computed_across_segments() -> None:
    # gamma 0.5, two envs. env 0 ends an episode at t=1: its return restarts after it.
    rewards = np.array([[1.0, 2.0], [2.0, 0.0], [4.0, 1.0]])
    dones = np.array([[0, 0], [1, 0], [0, 0]], bool)
    running = np.array([8.0, 0.0])  # carried in from the previous segment
    out, carry = discounted_returns(rewards, dones, running, 0.5)
    # env 0: 0.5*8 + 1 = 5; 0.5*5 + 2 = 4.5 (episode ends, reset); 0 + 4 = 4
    # env 1: 2; 1 + 0 = 1; 0.5 + 1 = 1.5
    np.testing.assert_allclose(out, [[5.0, 2.0], [4.5, 1.0], [4.0, 1.5]])
    np.testing.assert_allclose(carry, [4.0, 1.5])
    # splitting the segment in two gives the same returns
    a, mid = discounted_returns(rewards[:2], dones[:2], running, 0.5)
    b, end = discounted_returns(rewards[2:], dones[2:], mid, 0.5)
    np.testing.assert_allclose(np.concatenate([a, b]), out)
    np.testing.assert_allclose(end, carry)


def test_scale_rewards() -> None:
    out = scale_rewards(np.array([[4.0, -400.0]]), return_var=4.0 - EPS, clip=10.0)
    np.testing.assert_allclose(out, [[2.0, -10.0]], rtol=1e-6)


def _sequential_reference(
    rewards: np.ndarray, dones: np.ndarray, gamma: float
) -> tuple[np.ndarray, float]:
    """CleanRL's (gym 0.23) NormalizeReward, one step of N envs at a time."""
    n = rewards.shape[1]
    ret, mean, var, count = np.zeros(n), 0.0, 1.0, INITIAL_COUNT
    for t in range(len(rewards)):
        ret = ret * gamma + rewards[t]
        bm, bv = ret.mean(), ret.var()
        delta = bm - mean
        total = count + n
        mean = mean + delta * n / total
        var = (var * count + bv * n + delta**2 * count * n / total) / total
        count = total
        ret[dones[t]] = 0.0
    return ret, var


def test_trainer_reward_statistics_match_a_sequential_reference() -> None:
    rng = np.random.default_rng(1)
    T, N, segments = 16, 3, 4
    rewards = rng.normal(1.0, 3.0, size=(T * segments, N)).astype(np.float32)
    dones = rng.random((T * segments, N)) < 0.05
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    stats = TrainerStats(
        space, N, normalize_obs=False, clip_obs=10.0, normalize_reward=True,
        clip_reward=10.0, gamma=0.9,
    )  # fmt: skip
    for s in range(segments):
        rows = slice(s * T, (s + 1) * T)
        arrays = {
            "reward": rewards[rows],
            "terminated": dones[rows],
            "truncated": np.zeros((T, N), bool),
        }
        scaled = stats.prepare(arrays)["reward"]
        # rewards are scaled by the statistics that include this segment
        ref_ret, ref_var = _sequential_reference(rewards[: (s + 1) * T], dones[: (s + 1) * T], 0.9)
        np.testing.assert_allclose(stats.running_returns, ref_ret, rtol=1e-6, atol=1e-9)
        assert float(stats.ret_var) == pytest.approx(ref_var, rel=1e-9)
        np.testing.assert_allclose(
            scaled, np.clip(rewards[rows] / np.sqrt(ref_var + EPS), -10, 10), rtol=1e-5
        )


def _obs_batch(rng: np.random.Generator, T: int, N: int) -> dict[str, np.ndarray]:
    obs = rng.normal([5.0, -3.0, 0.0], [2.0, 0.1, 50.0], size=(T + 1, N, 3))
    return {
        "obs/obs": obs,
        "final_obs/obs": obs[:T] * 0 + 1.0,
        "reward": np.ones((T, N), np.float32),
        "terminated": np.zeros((T, N), bool),
        "truncated": np.zeros((T, N), bool),
    }


def test_trainer_obs_statistics_versioned_and_round_trip() -> None:
    rng = np.random.default_rng(2)
    space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    T, N = 8, 2

    def new() -> TrainerStats:
        return TrainerStats(
            space, N, normalize_obs=True, clip_obs=5.0, normalize_reward=True,
            clip_reward=10.0, gamma=0.99,
        )  # fmt: skip

    stats = new()
    # version 0: mean 0, var 1 (observations pass through, clipped)
    np.testing.assert_array_equal(stats.published(), [0, 0, 0, 1, 1, 1])
    first = _obs_batch(rng, T, N)
    batch = stats.prepare(first)
    np.testing.assert_allclose(batch["obs/obs"], np.clip(first["obs/obs"], -5, 5), rtol=1e-6)
    assert batch["obs/obs"].dtype == np.float32
    assert first["obs/obs"].dtype == np.float64  # the slot's arrays are not written
    stats.observe(first, T)  # only the first T steps: obs[T] is the next segment's first
    x = first["obs/obs"][:T].reshape(T * N, 3)
    np.testing.assert_allclose(stats.obs_mean, x.mean(0), rtol=1e-5)
    published = stats.published()
    np.testing.assert_array_equal(
        published, np.concatenate([stats.obs_mean, stats.obs_var]).astype(np.float32)
    )
    # the next batch is normalised with those published statistics
    second = _obs_batch(rng, T, N)
    batch = stats.prepare(second)
    std = np.sqrt(published[3:] + np.float32(EPS))
    expected = np.clip((second["obs/obs"].astype(np.float32) - published[:3]) / std, -5, 5)
    np.testing.assert_allclose(batch["obs/obs"], expected, rtol=1e-5, atol=1e-6)
    stats.observe(second, T)

    restored = new()
    restored.load_state_dict(stats.state_dict())
    np.testing.assert_array_equal(restored.published(), stats.published())
    for key, value in stats.state_dict().items():
        np.testing.assert_array_equal(restored.state_dict()[key], value)


def test_obs_normalizer_is_frozen_and_checks_its_input() -> None:
    space = gym.spaces.Dict(
        {"a": gym.spaces.Box(-1, 1, (2,), np.float32), "b": gym.spaces.Box(-1, 1, (), np.float32)}
    )
    norm = ObsNormalizer(space, clip=10.0)
    assert norm.size == 3 and not hasattr(norm, "update")
    norm.load(np.array([1, 2, 3, 4, 4, 1], np.float32))  # means (a: 1, 2; b: 3), vars
    out = norm({"a": np.array([[3.0, 2.0]]), "b": np.array([5.0])})
    np.testing.assert_allclose(out["a"], [[1.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(out["b"], [2.0], rtol=1e-6)
    with pytest.raises(ValueError):
        norm.load(np.zeros(4, np.float32))


def test_obs_normalisation_rejects_images_and_discrete_fields() -> None:
    image = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with pytest.raises(ConfigError, match="model.normalize_obs"):
        obs_stats_size(image, True)
    assert obs_stats_size(image, False) == 0
    with pytest.raises(ConfigError, match="model.normalize_obs"):
        obs_stats_size(gym.spaces.Discrete(3), True)
    assert obs_stats_size(gym.spaces.Box(-1, 1, (17,)), True) == 34
