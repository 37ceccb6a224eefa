"""Multi-agent envs as rows (surge/envs/multiagent.py): PettingZoo's API checks on the envs
we ship, every row of an env whose agents join and leave checked by hand, the global state,
and the errors that name what to fix."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo.test import parallel_api_test  # noqa: E402

from surge.config.schema import EnvConfig, MultiAgentEnvConfig  # noqa: E402
from surge.envs.make import probe_env  # noqa: E402
from surge.envs.multiagent import AGENT_ID, STATE, MultiAgentGroup  # noqa: E402
from surge.envs.pettingzoo import make_parallel_env  # noqa: E402
from surge.envs.spaces import obs_specs  # noqa: E402
from surge.envs.testing_pettingzoo import ArrivalsEnv  # noqa: E402
from surge.errors import ConfigError, EnvSpecError  # noqa: E402

ARRIVALS = "pettingzoo:surge.envs.testing_pettingzoo:arrivals_env"
SPREAD = "pettingzoo:mpe2.simple_spread_v3"
SPREAD_KWARGS = {"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False}


def _cfg(env_id: str, **ma: object) -> EnvConfig:
    kwargs = SPREAD_KWARGS if env_id == SPREAD else {}
    return EnvConfig(id=env_id, kwargs=dict(kwargs), multiagent=MultiAgentEnvConfig(**ma))  # type: ignore[arg-type]


def _group(cfg: EnvConfig, envs: int, seed: int = 0) -> MultiAgentGroup:
    info = probe_env(cfg, seed)
    rows = envs * info.rows_per_env
    out = {
        k: np.zeros((rows, *s.shape), s.dtype) for k, s in obs_specs(info.observation_space).items()
    }
    group = MultiAgentGroup(cfg, [seed + i for i in range(envs)], out)
    group.reset()
    return group


def test_pettingzoo_api_test_passes_for_the_envs_we_ship() -> None:
    parallel_api_test(make_parallel_env(_cfg(SPREAD)), num_cycles=50)
    parallel_api_test(ArrivalsEnv(), num_cycles=20)


def test_every_row_of_agents_that_join_and_leave() -> None:
    """Two envs x 3 agents; a2 joins after step 2, a1 leaves at step 3, truncation at 6."""
    group = _group(_cfg(ARRIVALS, agent_id=True, global_state="env"), envs=2)
    assert group.size == 6
    assert group.active.tolist() == [True, True, False] * 2
    np.testing.assert_array_equal(group.obs_out[AGENT_ID], np.tile(np.eye(3), (2, 1)))
    np.testing.assert_array_equal(group.obs_out["obs"][:2], [[0, 0, 1], [1, 0, 1]])
    assert not group.obs_out["obs"][2].any()  # a2 is not in the episode yet
    ones = np.ones(6, np.int64)
    seen = []
    for t in range(1, 8):
        group.step(ones)
        seen.append(
            (
                group.active.tolist()[:3],
                [round(r, 4) for r in group.rewards.tolist()[:3]],
                group.terminated.tolist()[:3],
                group.truncated.tolist()[:3],
                [round(r, 4) for r in group.score.tolist()[:3]],
                group.game_over.tolist()[:3],
            )
        )
        if t == 3:  # a1's last step: its final observation is kept
            np.testing.assert_array_equal(group.final_obs["obs"][1], [1, 3, 1])
        if t == 6:  # truncation: the final observations and global state of who was left
            np.testing.assert_array_equal(group.final_obs["obs"][0], [0, 6, 1])
            np.testing.assert_array_equal(group.final_obs["obs"][2], [2, 6, 1])
            np.testing.assert_array_equal(group.final_obs[STATE][0], [0, 6, 1, 0, 0, 0, 2, 6, 1])
            # reset: the next episode's first observations
            np.testing.assert_array_equal(group.obs_out["obs"][:2], [[0, 0, 1], [1, 0, 1]])
    T, F = True, False
    a0, a1, a2 = 1.1, 2.1, 3.1  # agent i's reward for action 1

    def team(*r: float) -> float:
        return round(sum(r), 4)

    assert seen == [
        # active (for the next step), rewards, terminated, truncated, team score, game over
        ([T, T, F], [a0, a1, 0], [F, F, T], [F, F, F], [team(a0, a1), 0, 0], [F, F, F]),
        ([T, T, T], [a0, a1, 0], [F, F, T], [F, F, F], [team(a0, a1), 0, 0], [F, F, F]),
        ([T, F, T], [a0, a1, a2], [F, T, F], [F, F, F], [team(a0, a1, a2), 0, 0], [F, F, F]),
        ([T, F, T], [a0, 0, a2], [F, T, F], [F, F, F], [team(a0, a2), 0, 0], [F, F, F]),
        ([T, F, T], [a0, 0, a2], [F, T, F], [F, F, F], [team(a0, a2), 0, 0], [F, F, F]),
        ([T, T, F], [a0, 0, a2], [F, T, F], [T, F, T], [team(a0, a2), 0, 0], [T, F, F]),
        ([T, T, F], [a0, a1, 0], [F, F, T], [F, F, F], [team(a0, a1), 0, 0], [F, F, F]),
    ]
    # The second env's rows are the first env's, one env later.
    np.testing.assert_array_equal(group.rewards[3:], group.rewards[:3])
    np.testing.assert_array_equal(group.active[3:], group.active[:3])


def test_concatenated_state_is_simple_spreads_own_state() -> None:
    """The spread presets use global_state=concat because it equals the env's state()."""
    group = _group(_cfg(SPREAD, global_state="concat"), envs=1, seed=3)
    env = group.envs[0]
    rng = np.random.default_rng(0)
    for _ in range(30):
        np.testing.assert_array_equal(group.obs_out[STATE][0], env.state())
        group.step(rng.integers(0, 5, 3))
    np.testing.assert_array_equal(group.obs_out[STATE][0], group.obs_out[STATE][2])


def test_spread_rows_and_team_return() -> None:
    cfg = _cfg(SPREAD, agent_id=True, global_state="auto")
    info = probe_env(cfg, 0)
    assert info.agents == ("agent_0", "agent_1", "agent_2")
    assert sorted(obs_specs(info.observation_space)) == ["agent_id", "global_state", "obs"]
    group = _group(cfg, envs=2)
    rng = np.random.default_rng(1)
    team = np.zeros(2)
    for _ in range(25):
        group.step(rng.integers(0, 5, 6))
        team += group.score[[0, 3]]
        np.testing.assert_allclose(group.score[[0, 3]], group.rewards.reshape(2, 3).sum(1), 1e-6)
        assert group.active.all()
    assert group.game_over.tolist() == [True, False, False, True, False, False]
    assert group.truncated.all() and not group.terminated.any()
    assert (team < 0).all()


def test_errors_name_what_to_fix() -> None:
    with pytest.raises(ConfigError, match="cannot import 'no_such_module'"):
        probe_env(EnvConfig(id="pettingzoo:no_such_module"), 0)
    with pytest.raises(ConfigError, match="has no callable 'nope'"):
        probe_env(EnvConfig(id="pettingzoo:surge.envs.testing_pettingzoo:nope"), 0)
    with pytest.raises(EnvSpecError, match="turn-based"):
        probe_env(EnvConfig(id="pettingzoo:pettingzoo.classic.connect_four_v3"), 0)
    with pytest.raises(EnvSpecError, match="env.wrappers"):
        probe_env(EnvConfig(id=ARRIVALS, wrappers=["gymnasium.wrappers:FlattenObservation"]), 0)
    with pytest.raises(EnvSpecError, match="has no state"):
        probe_env(
            _cfg("pettingzoo:surge.envs.testing_pettingzoo:stateless_env", global_state="env"), 0
        )


def test_route_agents_first_matching_pattern_wins() -> None:
    from surge.envs.multiagent import route_agents

    agents = ("adversary_0", "adversary_1", "agent_0", "agent_1")
    assert route_agents(agents, ["default"], {}) == {"default": agents}
    mapping = {"adversary_*": "red", "agent_1": "red", "*": "blue"}
    assert route_agents(agents, ["red", "blue"], mapping) == {
        "red": ("adversary_0", "adversary_1", "agent_1"),
        "blue": ("agent_0",),
    }
    with pytest.raises(EnvSpecError, match="agent 'agent_0' matches none"):
        route_agents(agents, ["red"], {"adversary_*": "red"})
    with pytest.raises(ConfigError, match=r"policies \['green'\] get no agent"):
        route_agents(agents, ["red", "green"], {"*": "red"})


def test_policy_settings_are_checked_against_the_config() -> None:
    from surge.config.load import load_config

    with pytest.raises(ConfigError, match="is not one"):
        load_config("cartpole-ppo", ["policies=[a, b]", "policy_mapping={'*': a}"])
    with pytest.raises(ConfigError, match=r"routes agents to \['c'\]"):
        load_config("spread-ippo", ["policies=[a, b]", "policy_mapping={'*': c}"])
    with pytest.raises(ConfigError, match="policy_mapping is empty"):
        load_config("spread-ippo", ["policies=[a, b]"])
    with pytest.raises(ConfigError, match="distinct names"):
        load_config("spread-ippo", ["policies=[a, a]", "policy_mapping={'*': a}"])


def test_lanes_of_two_policies_by_hand() -> None:
    """Arrivals with a0 in one policy and a1, a2 in another: each lane has its own rows,
    rewards, team score and activity."""
    from surge.config.load import load_config
    from surge.envs.make import probe_policies

    cfg, _ = load_config(
        "spread-ippo",
        [f"env.id={ARRIVALS}", "env.kwargs={}", "env.multiagent.global_state=none",
         "model.actor_inputs=[]", "model.critic_inputs=[]",
         "policies=[solo, pair]", "policy_mapping={a0: solo, '*': pair}"],
    )  # fmt: skip
    infos = probe_policies(cfg)
    assert [i.agents for i in infos.values()] == [("a0",), ("a1", "a2")]
    outs = {
        p: {k: np.zeros((2 * i.rows_per_env, *s.shape), s.dtype)
            for k, s in obs_specs(i.observation_space).items()}
        for p, i in infos.items()
    }  # fmt: skip
    group = MultiAgentGroup(cfg.env, [0, 1], outs, cfg.policy_names, cfg.policy_mapping)
    solo, pair = group.lanes["solo"], group.lanes["pair"]
    group.reset()
    np.testing.assert_array_equal(pair.obs_out[AGENT_ID][:2], [[0, 1, 0], [0, 0, 1]])
    assert solo.active.tolist() == [True, True] and pair.active.tolist() == [True, False] * 2
    group.step({"solo": np.zeros(2, np.int64), "pair": np.ones(4, np.int64)})
    group.step({"solo": np.zeros(2, np.int64), "pair": np.ones(4, np.int64)})
    group.step({"solo": np.zeros(2, np.int64), "pair": np.ones(4, np.int64)})
    # step 3: a2 (joined after step 2) and a1 (leaving now) both act
    np.testing.assert_allclose(solo.rewards, [1.0, 1.0])
    np.testing.assert_allclose(pair.rewards, [2.1, 3.1, 2.1, 3.1], rtol=1e-6)
    np.testing.assert_allclose(pair.score, [5.2, 0, 5.2, 0], rtol=1e-6)
    assert pair.terminated.tolist() == [True, False] * 2
    assert pair.active.tolist() == [False, True] * 2
