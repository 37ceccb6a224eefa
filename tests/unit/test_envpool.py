"""The `envpool` backend for non-Atari envs keeps the env group contract of the gymnasium
group: same-step resets, the episode's last observation in `final_obs`, truncation apart
from termination, clipped Box actions. (Atari on EnvPool is tested in test_atari.py.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("envpool")

from surge.config.schema import EnvConfig
from surge.envs.group import make_group
from surge.envs.make import probe_env
from surge.errors import ConfigError


def test_cartpole_group_resets_in_the_same_step_and_keeps_final_obs() -> None:
    cfg = EnvConfig(id="CartPole-v1", backend="envpool", max_episode_steps=20)
    obs = np.zeros((3, 4), np.float32)
    group = make_group(cfg, [1, 2, 3], {"obs": obs})
    group.reset()
    assert np.abs(obs).max() < 0.05  # CartPole starts within +-0.05
    ends: list[tuple[int, int, bool]] = []
    for t in range(60):
        before = obs.copy()
        group.step(np.ones(3, np.int64))  # always push right: falls within about 10 steps
        for i in np.flatnonzero(group.game_over):
            ends.append((t, int(i), bool(group.truncated[i])))
            final = group.final_obs["obs"][i]
            # The episode's last observation moved on from the one before it; the slot holds
            # a fresh episode's first observation.
            assert not np.array_equal(final, before[i]) and np.abs(final).max() > 0.05
            assert np.abs(obs[i]).max() < 0.05
            assert group.terminated[i] != group.truncated[i]
    assert len({i for _, i, _ in ends}) == 3
    assert all(not truncated for *_, truncated in ends)  # pushing right always falls first
    group.close()

    info = probe_env(cfg, seed=0)
    assert info.observation_space.shape == (4,)


def test_pendulum_is_truncated_at_the_time_limit() -> None:
    cfg = EnvConfig(id="Pendulum-v1", backend="envpool", max_episode_steps=15)
    obs = np.zeros((2, 3), np.float32)
    group = make_group(cfg, [1, 2], {"obs": obs})
    group.reset()
    for t in range(15):
        group.step(np.full((2, 1), 5.0, np.float32))  # clipped to the bound of 2
        assert group.truncated.all() == (t == 14) and not group.terminated.any()
    assert group.game_over.all()
    group.close()


def test_unknown_id_names_it() -> None:
    with pytest.raises(ConfigError, match="EnvPool has no env 'NoSuchEnv-v0'"):
        probe_env(EnvConfig(id="NoSuchEnv-v0", backend="envpool"), seed=0)
