"""Recurrent policies outside the maths: config validation, the stream layouts, the backend
choice, the velocity-hiding wrapper, and the episode player carrying the state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from surge.config.load import load_config
from surge.envs.make import probe_env
from surge.envs.wrappers import HideVelocity
from surge.errors import ConfigError, EnvSpecError
from surge.evaluation.episodes import play_episodes
from surge.learners.ppo import backend_name
from surge.models.flat_policy import FlatPolicy
from surge.models.numpy_policy import numpy_layout
from surge.models.recurrent_state import CORE0, CORE_IN, CORE_OUT
from tests.conftest import sketch_graph

MEMORY = ["env.wrappers=[surge.envs.wrappers:HideVelocity]", "model.core=gru"]


def _error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config("cartpole-ppo", list(overrides))
    return str(info.value)


def test_burn_in_must_leave_steps_to_train_on() -> None:
    text = _error("model.core=gru", "ppo.rollout_len=16", "ppo.burn_in=16")
    assert "ppo.burn_in=16" in text and "ppo.rollout_len=16" in text
    load_config("cartpole-ppo", ["model.core=gru", "ppo.rollout_len=16", "ppo.burn_in=15"])
    assert "ppo.burn_in: must be >= 0" in _error("model.core=gru", "ppo.burn_in=-1")


def test_burn_in_needs_a_recurrent_core() -> None:
    assert "ppo.burn_in=4 applies to recurrent models" in _error("ppo.burn_in=4")


def test_minibatches_of_whole_sequences_divide_the_envs() -> None:
    # cartpole-ppo has 4 envs: 8 minibatches divide its 512 steps but not its 4 sequences
    load_config("cartpole-ppo", ["ppo.minibatches=8"])
    text = _error("model.core=lstm", "ppo.minibatches=8")
    assert "ppo.minibatches=8" in text and "4 envs" in text and "1, 2, 4" in text


def test_numpy_backend_is_refused_for_recurrent_models() -> None:
    text = _error("model.core=gru", "model.backend=numpy")
    assert "model.backend=numpy" in text and "model.core=gru" in text
    assert "model.core_size: must be >= 1" in _error("model.core=gru", "model.core_size=0")


def test_auto_backend_picks_torch_for_recurrent_models() -> None:
    cfg, _ = load_config("cartpole-ppo", ["model.core=gru"])
    env = probe_env(cfg.env, cfg.seed)
    assert numpy_layout(env.observation_space, env.action_space, cfg.model) is None
    assert backend_name(cfg, env) == "torch"
    cfg.model.backend = "numpy"  # past validation (e.g. a hand-built config): still refused
    with pytest.raises(ConfigError, match="recurrent core"):
        backend_name(cfg, env)


@pytest.mark.parametrize(("core", "size"), [("gru", 16), ("lstm", 32)])
def test_stream_layouts_carry_the_state_only_for_recurrent_models(core: str, size: int) -> None:
    def layouts(*overrides: str) -> dict[str, dict[str, tuple[int, ...]]]:
        cfg, _ = load_config("cartpole-ppo", list(overrides))
        graph = sketch_graph(cfg)
        return {
            name: {k: f.shape for k, f in layout.fields.items()}
            for name, layout in graph.layouts.items()
            if name in ("inference", "samples")
        }

    plain = layouts()
    recurrent = layouts(f"model.core={core}", "model.core_size=16")
    # cartpole-ppo: 2 groups of 2 envs, 1 slot (lag 0), 4 envs in all
    assert recurrent["inference"][CORE_IN] == recurrent["inference"][CORE_OUT] == (2, 2, size)
    assert recurrent["samples"][CORE0] == (1, 1, 4, size)
    # a feed-forward model's blocks have no state fields at all
    assert not {CORE_IN, CORE_OUT} & plain["inference"].keys()
    assert CORE0 not in plain["samples"]
    assert {k: v for k, v in recurrent["inference"].items() if k not in (CORE_IN, CORE_OUT)} == (
        plain["inference"]
    )


def test_hide_velocity_keeps_cart_and_pole_positions() -> None:
    env = HideVelocity(gym.make("CartPole-v1"))
    assert env.observation_space.shape == (2,)
    full = env.unwrapped.observation_space
    assert isinstance(full, gym.spaces.Box)
    np.testing.assert_array_equal(env.observation_space.high, full.high[[0, 2]])  # type: ignore[attr-defined]
    obs, _ = env.reset(seed=3)
    for _ in range(5):
        obs, *_ = env.step(1)
        state = np.asarray(env.unwrapped.state, np.float32)  # x, x_dot, theta, theta_dot
        np.testing.assert_array_equal(obs, state[[0, 2]])
    pendulum = HideVelocity(gym.make("Pendulum-v1"))
    assert pendulum.observation_space.shape == (2,)
    with pytest.raises(EnvSpecError, match="HideVelocity does not know"):
        HideVelocity(gym.make("FrozenLake-v1"))


def test_memory_config_probes_a_two_dimensional_observation() -> None:
    cfg, _ = load_config("cartpole-ppo", MEMORY)
    env = probe_env(cfg.env, cfg.seed)
    assert env.observation_space.shape == (2,)


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_episode_player_carries_the_state_and_resets_it_per_episode(core: str) -> None:
    cfg, _ = load_config("cartpole-ppo", [*MEMORY, f"model.core={core}", "model.core_size=8"])
    env = HideVelocity(gym.make("CartPole-v1"))
    policy = FlatPolicy(env.observation_space, env.action_space, cfg.model, seed=0)
    policy.load(np.random.default_rng(0).normal(0, 0.5, policy.flat.size).astype(np.float32))
    calls: list[tuple[np.ndarray, np.ndarray]] = []  # (state given, state returned) per step
    act = policy.act

    def recording(obs, deterministic=False, core=None):  # type: ignore[no-untyped-def]
        out = act(obs, deterministic, core)
        calls.append((core.copy(), out[-1].copy()))
        return out

    policy.act = recording  # type: ignore[method-assign]
    played = play_episodes(env, policy, episodes=3, seed=5, deterministic=True)
    starts = np.cumsum([0, *played.lengths])
    assert len(calls) == starts[-1]
    for k, (given, _) in enumerate(calls):
        if k in starts:  # an episode's first step starts from zero
            np.testing.assert_array_equal(given, np.zeros((1, policy.state_size)))
        else:  # every other step from the state the previous step returned
            np.testing.assert_array_equal(given, calls[k - 1][1])
            assert np.abs(given).sum() > 0


def test_a_cnn_with_a_core_acts_in_torch_and_trains_on_sequences() -> None:
    """Small images (MiniGrid's 7x7x3) get the small CNN, then the core: `FlatPolicy` acts
    through torch, and the learner's unroll over [T, B, H, W, C] frames from the stored state
    gives the log-probs the policy acted with."""
    import torch

    from surge.config.schema import ModelConfig
    from surge.models.actor_critic import ActorCritic
    from surge.models.recurrent_state import resets_before

    images = gym.spaces.Box(0, 10, (7, 7, 3), np.uint8)
    cfg = ModelConfig(core="lstm", core_size=8, hidden_sizes=[8])
    policy = FlatPolicy(images, gym.spaces.Discrete(3), cfg, seed=0)
    assert type(policy.policy).__name__ == "TorchActing" and policy.state_size == 16
    model = ActorCritic(images, gym.spaces.Discrete(3), cfg)
    policy.load(np.concatenate([p.detach().numpy().ravel() for p in model.parameters()]))
    T, B = 4, 3
    frames = np.random.default_rng(0).integers(0, 10, (T, B, 7, 7, 3)).astype(np.uint8)
    ended = np.zeros((T, B), bool)
    ended[1, 2] = True
    state = policy.initial_state(B)
    assert state is not None
    core0, actions, logps = state, [], []
    for t in range(T):
        action, logp, _, after = policy.act({"obs": frames[t]}, core=state)
        actions.append(action)
        logps.append(logp)
        state = after * ~ended[t, :, None]
    resets = resets_before(torch.from_numpy(ended), torch.zeros(T, B, dtype=torch.bool))
    with torch.no_grad():
        new_logp, _, _ = model.evaluate_sequence(
            {"obs": torch.from_numpy(frames)},
            torch.from_numpy(np.stack(actions)),
            torch.from_numpy(core0),
            resets,
        )
    np.testing.assert_allclose(new_logp.view(T, B).numpy(), np.stack(logps), atol=1e-5)


def test_self_play_with_a_core_is_refused() -> None:
    with pytest.raises(ConfigError, match="league opponents play feed-forward only"):
        load_config("connect4-selfplay", ["model.core=gru"])


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_multiagent_player_carries_each_rows_state(core: str) -> None:
    """The evaluation player of multi-agent envs: every row starts an episode from zero,
    then gets the state its previous step returned, zeroed while its agent is out."""
    pytest.importorskip("pettingzoo")
    from surge.envs.make import probe_policies
    from surge.envs.multiagent import MultiAgentGroup
    from surge.envs.spaces import obs_specs
    from surge.evaluation.episodes import play_multiagent_episodes

    cfg, _ = load_config(
        "spread-ippo",
        ["env.id=pettingzoo:surge.envs.testing_pettingzoo:arrivals_env", "env.kwargs={}",
         "env.multiagent.global_state=none", "model.actor_inputs=[]", "model.critic_inputs=[]",
         f"model.core={core}", "model.core_size=4", "model.value_norm=false"],
    )  # fmt: skip
    ((name, info),) = probe_policies(cfg).items()
    outs = {
        k: np.zeros((info.rows_per_env, *s.shape), s.dtype)
        for k, s in obs_specs(info.observation_space).items()
    }  # one policy: the group takes its fields (as surge/evaluation/suite.py builds it)
    group = MultiAgentGroup(cfg.env, [0], outs)
    policy = FlatPolicy(info.observation_space, info.action_space, cfg.model, seed=0)
    policy.load(np.random.default_rng(0).normal(0, 0.5, policy.flat.size).astype(np.float32))
    calls: list[tuple[np.ndarray, np.ndarray]] = []
    act = policy.act

    def recording(obs, deterministic=False, core=None):  # type: ignore[no-untyped-def]
        out = act(obs, deterministic, core)
        calls.append((core.copy(), out[-1].copy()))
        return out

    policy.act = recording  # type: ignore[method-assign]
    played, _ = play_multiagent_episodes(group, {name: policy}, 2, seed=3, deterministic=True)
    starts = np.cumsum([0, *played.lengths])
    assert len(calls) == starts[-1]
    zeroed = 0
    for k, (given, _) in enumerate(calls):
        if k in starts:
            np.testing.assert_array_equal(given, 0.0)
        else:  # the previous step's state, with the rows of agents that were out zeroed
            kept = np.abs(given).sum(axis=1) > 0
            assert kept.any()
            np.testing.assert_array_equal(given[kept], calls[k - 1][1][kept])
            zeroed += int((~kept).sum())
    assert zeroed > 0  # arrivals: agents join late and leave early
