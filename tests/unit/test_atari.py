"""Atari env groups against real games: what the actor reads after each step.

Every backend (`ale`: ale-py's vector env; `envpool`: EnvPool's; `gymnasium`:
AtariPreprocessing per env) must give the same semantics: uint8 [4, 84, 84] stacks, oldest
frame first; clipped training rewards next to the raw score; a lost life ends the training
episode but not the game; the observation after `step` is the one to act on and
`final_obs` the one an episode ended with.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ale_py")

from surge.config.schema import AtariConfig, EnvConfig
from surge.envs.atari import resolve_backend
from surge.envs.group import Group, make_group
from surge.envs.make import probe_env
from surge.errors import ConfigError

BACKENDS = ["ale", "envpool", "gymnasium"]


def _group(game: str, backend: str, envs: int = 2, **kw: Any) -> tuple[Group, np.ndarray]:
    atari = AtariConfig(**kw.pop("atari", {}))
    cfg = EnvConfig(id=f"ALE/{game}-v5", backend=backend, atari=atari, **kw)  # type: ignore[arg-type]
    obs = np.zeros((envs, 4, 84, 84), np.uint8)
    group = make_group(cfg, list(range(1, envs + 1)), {"obs": obs})
    group.reset()
    return group, obs


def _play(group: Group, obs: np.ndarray, steps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Random play; one record per step: the arrays the actor reads, copied."""
    rng = np.random.default_rng(seed)
    n = group.action_space.n  # type: ignore[attr-defined]
    records = []
    for _ in range(steps):
        before = obs.copy()
        group.step(rng.integers(0, n, group.size))
        records.append(
            {
                "before": before,
                "obs": obs.copy(),
                "final": group.final_obs["obs"].copy(),
                **{
                    k: getattr(group, k).copy()
                    for k in ("rewards", "score", "terminated", "truncated", "game_over")
                },
            }
        )
    return records


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_gives_preprocessed_spaces(backend: str) -> None:
    info = probe_env(EnvConfig(id="ALE/Pong-v5", backend=backend), seed=1)  # type: ignore[arg-type]
    assert info.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert info.action_space == gym.spaces.Discrete(6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_order_and_reset_frames(backend: str) -> None:
    group, obs = _group("Pong", backend)
    assert obs.dtype == np.uint8 and obs.any()
    # A new episode's stack repeats its first frame.
    assert all(np.array_equal(obs[i, k], obs[i, 3]) for i in range(2) for k in range(3))
    for r in _play(group, obs, 40):
        # Oldest frame first: each step drops frame 0 and appends the new frame last.
        assert np.array_equal(r["obs"][:, :3], r["before"][:, 1:])
    assert not np.array_equal(obs[:, 3], obs[:, 2])  # the frames do move
    group.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rewards_are_clipped_score_is_raw(backend: str) -> None:
    # Space Invaders pays 5-30 points per invader, so raw and clipped rewards differ.
    group, obs = _group("SpaceInvaders", backend)
    records = _play(group, obs, 300)
    score = np.stack([r["score"] for r in records])
    rewards = np.stack([r["rewards"] for r in records])
    assert np.abs(score).max() > 1
    np.testing.assert_array_equal(rewards, np.sign(score))
    group.close()

    group, obs = _group("SpaceInvaders", backend, envs=1, atari={"clip_rewards": False})
    records = _play(group, obs, 100)
    for r in records:
        np.testing.assert_array_equal(r["rewards"], r["score"])
    group.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_life_loss_ends_training_episode_not_game(backend: str) -> None:
    group, obs = _group("Breakout", backend)
    records = _play(group, obs, 400)
    life_ends = [r for r in records if (r["terminated"] & ~r["game_over"]).any()]
    game_ends = [r for r in records if r["game_over"].any()]
    assert len(life_ends) >= 4 and game_ends  # 5 lives per game
    for r in life_ends:
        i = int(np.argmax(r["terminated"] & ~r["game_over"]))
        # No reset: the game goes on, and the episode's final obs is the current one.
        assert np.array_equal(r["obs"][i, :3], r["before"][i, 1:])
        assert np.array_equal(r["final"][i], r["obs"][i])
    for r in game_ends:
        i = int(np.argmax(r["game_over"]))
        assert r["terminated"][i]
        # The final obs continues the old stack; the slot holds a fresh game's stack.
        assert np.array_equal(r["final"][i, :3], r["before"][i, 1:])
        assert all(np.array_equal(r["obs"][i, k], r["obs"][i, 3]) for k in range(3))
    group.close()

    group, obs = _group("Breakout", backend, envs=1, atari={"episodic_life": False})
    for r in _play(group, obs, 250):
        np.testing.assert_array_equal(r["terminated"], r["game_over"] & ~r["truncated"])
    group.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_truncates_and_resets(backend: str) -> None:
    group, obs = _group("Pong", backend, max_episode_steps=25)
    records = _play(group, obs, 60)
    ends = [(t, i) for t, r in enumerate(records) for i in np.flatnonzero(r["truncated"])]
    # 25 steps = 100 frames; gymnasium's count includes the up to 30 no-op frames at reset.
    assert ends and 16 <= ends[0][0] <= 26, ends
    for t, i in ends:
        r = records[t]
        assert r["game_over"][i] and not r["terminated"][i]
        assert np.array_equal(r["final"][i, :3], r["before"][i, 1:])
        assert all(np.array_equal(r["obs"][i, k], r["obs"][i, 3]) for k in range(3))
    group.close()


def test_backend_resolution() -> None:
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5")) == "ale"
    assert resolve_backend(EnvConfig(id="CartPole-v1")) == "gymnasium"
    with pytest.raises(ConfigError, match="env.backend=ale"):
        resolve_backend(EnvConfig(id="CartPole-v1", backend="ale"))
    assert resolve_backend(EnvConfig(id="ALE/Pong-v5", backend="envpool")) == "envpool"
    assert resolve_backend(EnvConfig(id="CartPole-v1", backend="envpool")) == "envpool"


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_life_starts_with_fire(backend: str) -> None:
    """Breakout waits for FIRE after a lost life: with episodic life and `fire_reset` the
    group presses it for the life's first step, so an agent that only ever chooses NOOP still
    loses every life and ends its games (without it, the first lost life would stall the
    game until the frame limit)."""
    group, _ = _group("Breakout", backend, envs=2)
    noop = np.zeros(group.size, np.int64)
    lives_ended = games = 0
    for _ in range(1500):
        group.step(noop)
        lives_ended += int(group.terminated.sum())
        games += int(group.game_over.sum())
    group.close()
    assert games >= 2 and lives_ended >= 5 * games, (games, lives_ended)

    # Without episodic life a lost life starts no episode and nothing presses FIRE: the
    # NOOP agent's games stall after their first lost life (the reason for the rule).
    stalled, _ = _group("Breakout", backend, envs=2, atari={"episodic_life": False})
    stalled_games = 0
    for _ in range(1500):
        stalled.step(noop)
        stalled_games += int(stalled.game_over.sum())
    stalled.close()
    assert stalled_games == 0


def test_the_evaluation_env_also_fires_after_a_lost_life() -> None:
    """`make_atari_env` (the gymnasium backend's and the evaluation's env) plays whole games:
    a NOOP agent trained with FIRE-started lives finishes its game there too."""
    from surge.envs.atari import make_atari_env

    env = make_atari_env(EnvConfig(id="ALE/Breakout-v5"))
    env.reset(seed=3)
    steps = 0
    terminated = truncated = False
    while not (terminated or truncated) and steps < 3000:
        _, _, terminated, truncated, info = env.step(0)
        steps += 1
    env.close()
    assert terminated and info["lives"] == 0, (steps, info)
