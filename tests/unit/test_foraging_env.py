"""Level-Based Foraging as a PettingZoo env (surge/envs/foraging.py): PettingZoo's API test,
seeded episodes that repeat, the end of an episode (all food eaten: terminated; the time
limit: truncated), the action mask, and `lbforaging:` ids through surge's env probing."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("lbforaging")

from pettingzoo.test import parallel_api_test  # noqa: E402

from surge.config.load import load_config  # noqa: E402
from surge.config.schema import EnvConfig  # noqa: E402
from surge.envs.foraging import ACTIONS, foraging_env  # noqa: E402
from surge.envs.make import probe_policies  # noqa: E402
from surge.envs.pettingzoo import make_parallel_env  # noqa: E402
from surge.errors import ConfigError  # noqa: E402

LBF_ID = "Foraging-8x8-2p-2f-coop-v3"
SMALL_ID = "Foraging-5x5-2p-1f-v3"  # one food any agent can load: random play eats it often


def _random_episode(env, rng: np.random.Generator, seed: int | None) -> list[tuple]:
    """(observations, rewards, terminated, truncated) of each step of one episode."""
    obs, _ = env.reset(seed=seed)
    steps = [(obs, {}, {}, {})]
    while env.agents:
        actions = {agent: int(rng.integers(ACTIONS)) for agent in env.agents}
        obs, rewards, terminated, truncated, _ = env.step(actions)
        steps.append((obs, rewards, terminated, truncated))
    return steps


def _same(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for step_a, step_b in zip(a, b, strict=True):
        for part_a, part_b in zip(step_a, step_b, strict=True):
            if part_a.keys() != part_b.keys():
                return False
            if not all(np.array_equal(part_a[k], part_b[k]) for k in part_a):
                return False
    return True


@pytest.mark.parametrize("observe_action_mask", [False, True])
def test_pettingzoo_api_test_passes(observe_action_mask: bool) -> None:
    env = foraging_env(LBF_ID, observe_action_mask=observe_action_mask)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test only warns about some violations
        parallel_api_test(env, num_cycles=120)


def test_spaces_agents_and_state() -> None:
    env = foraging_env(LBF_ID)
    assert env.possible_agents == ["agent_0", "agent_1"]
    assert env.action_space("agent_0").n == ACTIONS
    assert env.observation_space("agent_1").shape == (3 * 2 + 3 * 2,)  # 2 foods, 2 players
    obs, _ = env.reset(seed=0)
    assert env.state_space.shape == (24,)
    np.testing.assert_array_equal(env.state(), np.concatenate([obs["agent_0"], obs["agent_1"]]))


def test_a_seeded_run_repeats_and_another_seed_differs() -> None:
    def run(seed: int) -> list[list[tuple]]:
        env, rng = foraging_env(LBF_ID), np.random.default_rng(123)
        # the second episode is reset without a seed: it continues the seeded generator
        return [_random_episode(env, rng, seed), _random_episode(env, rng, None)]

    first, again, other = run(7), run(7), run(8)
    assert all(_same(a, b) for a, b in zip(first, again, strict=True))
    assert not _same(first[0][:1], other[0][:1])  # a different layout at reset


def test_eating_all_food_terminates_and_the_time_limit_truncates() -> None:
    env, rng = foraging_env(SMALL_ID), np.random.default_rng(0)
    endings = set()
    for seed in range(30):
        steps = _random_episode(env, rng, seed)
        _, _, terminated, truncated = steps[-1]
        team_return = sum(sum(rewards.values()) for _, rewards, _, _ in steps)
        if terminated["agent_0"]:
            assert not truncated["agent_0"]
            assert team_return == pytest.approx(1.0)  # normalised: all the food pays 1
            endings.add("terminated")
        else:
            assert truncated["agent_0"] and len(steps) - 1 == 50  # lbforaging's limit
            assert team_return == 0.0
            endings.add("truncated")
    assert endings == {"terminated", "truncated"}


def test_max_episode_steps_sets_lbforagings_own_limit() -> None:
    env = foraging_env(LBF_ID, max_episode_steps=5)
    steps = _random_episode(env, np.random.default_rng(0), seed=0)
    assert len(steps) - 1 == 5 and steps[-1][3] == {"agent_0": True, "agent_1": True}


def test_an_action_the_mask_forbids_leaves_the_agent_in_place() -> None:
    env, rng = foraging_env(LBF_ID, observe_action_mask=True), np.random.default_rng(1)
    own_position = slice(3 * 2, 3 * 2 + 2)  # after the 2 foods' triples, the agent's own
    obs, infos = env.reset(seed=3)
    forbidden_moves = 0
    for _ in range(300):
        if not env.agents:
            obs, infos = env.reset()
        actions = {agent: int(rng.integers(1, 5)) for agent in env.agents}  # moves only
        for agent in env.agents:
            np.testing.assert_array_equal(obs[agent]["action_mask"], infos[agent]["action_mask"])
            assert obs[agent]["action_mask"][0] == 1  # none is always possible
        before = {a: obs[a]["observation"][own_position].copy() for a in env.agents}
        masks = {a: obs[a]["action_mask"] for a in env.agents}
        obs, _, _, _, infos = env.step(actions)
        for agent, action in actions.items():
            if not masks[agent][action]:
                forbidden_moves += 1
                np.testing.assert_array_equal(
                    obs[agent]["observation"][own_position], before[agent]
                )
    assert forbidden_moves > 0


def test_lbforaging_ids_route_through_surges_env_probing() -> None:
    overrides = [f"env.id=lbforaging:{LBF_ID}", "env.kwargs={}", "env.multiagent.global_state=env"]
    cfg, _ = load_config("spread-mappo", overrides)
    info = probe_policies(cfg)["default"]
    assert info.agents == ("agent_0", "agent_1")
    assert info.action_space.n == ACTIONS
    state, obs = info.observation_space["global_state"], info.observation_space["obs"]
    assert state.shape == (24,) and obs.shape == (12,)
    # the state's bounds are the env's (a QMIX learner scales its mixer's input by them)
    np.testing.assert_array_equal(state.low, np.tile(obs.low, 2))
    np.testing.assert_array_equal(state.high, np.tile(obs.high, 2))


def test_errors_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="did you mean"):
        make_parallel_env(EnvConfig(id="lbforaging:Foraging-8x8-2p-2f-cop-v3"))
    with pytest.raises(ConfigError, match="env.kwargs"):
        make_parallel_env(EnvConfig(id=f"lbforaging:{LBF_ID}", kwargs={"N": 3}))
    monkeypatch.setitem(sys.modules, "lbforaging", None)  # import lbforaging now fails
    with pytest.raises(ConfigError) as missing:
        make_parallel_env(EnvConfig(id=f"lbforaging:{LBF_ID}"))
    assert "pip install -e '.[lbf]'" in missing.value.fix
