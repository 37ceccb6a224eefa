"""The numpy inference path computes what the torch ActorCritic computes."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.config.schema import ModelConfig
from surge.envs.spaces import flatten_obs_space
from surge.models.actor_critic import ActorCritic
from surge.models.numpy_policy import NumpyPolicy, acting_layout, numpy_layout
from surge.models.weights import model_to_flat
from tests.numerics import assert_float32_close

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

Box = gym.spaces.Box
SPACES: list[tuple[str, gym.Space[Any], gym.Space[Any], ModelConfig]] = [
    ("cartpole", Box(-1, 1, (4,)), gym.spaces.Discrete(2), ModelConfig()),
    (
        "shared-relu-start",
        Box(-1, 1, (3, 2)),
        gym.spaces.Discrete(5, start=-2),
        ModelConfig(hidden_sizes=[32], activation="relu", shared=True),
    ),
    (
        "multidiscrete",
        Box(-1, 1, (6,)),
        gym.spaces.MultiDiscrete([3, 4], start=[1, 0]),
        ModelConfig(),
    ),
    ("gaussian", Box(-1, 1, (3,)), Box(-2, 2, (2,)), ModelConfig(log_std_init=-0.5)),
    (  # actor + critic wider than FUSE_MAX_WIDTH: the torsos run one after the other
        "wide-separate-relu",
        Box(-1, 1, (5,)),
        gym.spaces.Discrete(3),
        ModelConfig(hidden_sizes=[160, 8], activation="relu"),
    ),
    (
        "dict-with-discrete",
        gym.spaces.Dict({"pos": Box(-1, 1, (2,)), "cell": gym.spaces.Discrete(4, start=1)}),
        gym.spaces.Discrete(3),
        ModelConfig(hidden_sizes=[16, 16]),
    ),
    (  # MAPPO: the critic reads the global state, the policy its agent's observation
        "central-critic",
        gym.spaces.Dict(
            {"obs": Box(-1, 1, (3,)), "agent_id": Box(0, 1, (2,)), "global_state": Box(-1, 1, (6,))}
        ),
        gym.spaces.Discrete(4),
        ModelConfig(hidden_sizes=[16, 16], critic_inputs=["agent_id", "global_state"]),
    ),
    (  # the same, wider than FUSE_MAX_WIDTH: each torso reads its own input
        "central-critic-wide",
        gym.spaces.Dict({"obs": Box(-1, 1, (3,)), "global_state": Box(-1, 1, (6,))}),
        gym.spaces.Discrete(4),
        ModelConfig(hidden_sizes=[160, 8], critic_inputs=["global_state"]),
    ),
    (  # PettingZoo's classic games: illegal moves are masked, the mask is never encoded
        "action-mask",
        gym.spaces.Dict(
            {
                "observation": Box(0, 1, (2, 3), np.int8),
                "action_mask": Box(0, 1, (5,), np.int8),
            }
        ),
        gym.spaces.Discrete(5),
        ModelConfig(hidden_sizes=[16]),
    ),
]


@pytest.mark.parametrize(("name", "obs_space", "action_space", "cfg"), SPACES)
def test_numpy_policy_matches_torch(
    name: str, obs_space: gym.Space[Any], action_space: gym.Space[Any], cfg: ModelConfig
) -> None:
    torch.manual_seed(0)
    model = ActorCritic(obs_space, action_space, cfg)
    layout = numpy_layout(obs_space, action_space, cfg)
    assert layout is not None
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == layout.params
    flat = model_to_flat(model)
    policy = NumpyPolicy(layout, flat, np.random.default_rng(0))

    obs_space.seed(1)
    batch = [obs_space.sample() for _ in range(7)]
    leaves = flatten_obs_space(obs_space)
    if isinstance(obs_space, gym.spaces.Dict):
        np_obs = {k: np.stack([np.asarray(b[k]) for b in batch]) for k in leaves}
    else:
        np_obs = {k: np.stack(batch).astype(np.float32) for k in leaves}
    t_obs = {k: torch.from_numpy(v) for k, v in np_obs.items()}

    # The reference: the same parameters in float64 (tests/numerics.py); the float32 policy
    # is within rounding of it, over the fan-ins along the network.
    reference = copy.deepcopy(model).double()
    accumulations = sum(p.shape[-1] for n, p in model.named_parameters() if n.endswith("weight"))
    action, logp, value = policy.act(np_obs, deterministic=True)
    t_action, t_logp, t_value = reference.act(t_obs, deterministic=True)
    if isinstance(action_space, gym.spaces.Box):
        assert_float32_close(action, t_action, accumulations, "mean action")
    else:  # the argmax: logits are far apart compared with rounding
        np.testing.assert_array_equal(action, t_action.numpy())
    assert_float32_close(logp, t_logp, accumulations, "logp")
    assert_float32_close(value, t_value, accumulations, "value")

    # Sampled actions: valid, and their log-probs are the torch model's for those actions.
    action, logp, _ = policy.act(np_obs)
    assert all(action_space.contains(np.asarray(a, dtype=action_space.dtype)) for a in action)
    t_logp_of, _, _ = reference.evaluate(t_obs, torch.from_numpy(action))
    assert_float32_close(logp, t_logp_of, accumulations, "logp of sampled actions")

    # New parameters written into the flat vector are used after a reload.
    flat *= 0.0
    policy.reload()
    _, _, value = policy.act(np_obs, deterministic=True)
    assert np.all(value == 0.0)


def test_categorical_sampling_follows_the_probabilities() -> None:
    cfg = ModelConfig(hidden_sizes=[8])
    obs_space, action_space = Box(-1, 1, (2,)), gym.spaces.Discrete(3)
    layout = numpy_layout(obs_space, action_space, cfg)
    assert layout is not None
    model = ActorCritic(obs_space, action_space, cfg)
    with torch.no_grad():
        model.action_head.linear.weight.zero_()
        model.action_head.linear.bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    policy = NumpyPolicy(layout, model_to_flat(model), np.random.default_rng(3))
    action, _, _ = policy.act({"obs": np.zeros((20_000, 2), np.float32)})
    freq = np.bincount(action, minlength=3) / len(action)
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.015)


def test_images_are_left_to_torch() -> None:
    images = Box(0, 255, (4, 84, 84), np.uint8)
    assert numpy_layout(images, gym.spaces.Discrete(6), ModelConfig()) is None


@pytest.mark.parametrize("core", ["gru", "lstm"])
@pytest.mark.parametrize("shared", [False, True])
def test_recurrent_numpy_policy_matches_torch(core: str, shared: bool) -> None:
    """A flat model with a recurrent core acts in numpy (the numpy learner does not train
    it: `numpy_layout` is None, `acting_layout` is not): over three steps with the state
    carried, the same actions, log-probs, values and states as the torch model in float64."""
    cfg = ModelConfig(hidden_sizes=[16], core=core, core_size=12, shared=shared)
    obs_space, action_space = Box(-1, 1, (3,)), gym.spaces.Discrete(4)
    assert numpy_layout(obs_space, action_space, cfg) is None
    layout = acting_layout(obs_space, action_space, cfg)
    assert layout is not None
    torch.manual_seed(0)
    model = ActorCritic(obs_space, action_space, cfg)
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == layout.params
    policy = NumpyPolicy(layout, model_to_flat(model), np.random.default_rng(0))
    reference = copy.deepcopy(model).double()
    rows = 5
    assert policy.state_size == model.state_size == (12 if core == "gru" else 24)
    state = np.random.default_rng(1).normal(0, 0.5, (rows, policy.state_size))
    state = state.astype(np.float32)
    t_state = torch.from_numpy(state).double()
    accumulations = 3 * (3 + 12 + 4) + 16 + 12  # three steps of the core, then the torso
    for t in range(3):
        obs = np.random.default_rng(10 + t).uniform(-1, 1, (rows, 3)).astype(np.float32)
        action, logp, value, state = policy.act({"obs": obs}, True, state)
        t_action, t_logp, t_value, t_state = reference.act(
            {"obs": torch.from_numpy(obs).double()}, True, None, t_state
        )
        np.testing.assert_array_equal(action, t_action.numpy())
        assert_float32_close(logp, t_logp, accumulations, f"logp at step {t}")
        assert_float32_close(value, t_value, accumulations, f"value at step {t}")
        assert_float32_close(state, t_state, accumulations, f"state at step {t}")


@pytest.mark.parametrize("hwc", [True, False], ids=["hwc", "chw"])
def test_grid_cnn_acts_in_numpy_as_torch_does(hwc: bool) -> None:
    """grid_cnn (a board's 3x3 convolutions) acts in numpy from the trainer's vector (its
    learner is torch's: `numpy_layout` is None, `acting_layout` is not)."""
    shape = (6, 7, 2) if hwc else (2, 6, 7)
    obs_space = gym.spaces.Dict(
        {"observation": Box(0, 1, shape, np.int8), "action_mask": Box(0, 1, (7,), np.int8)}
    )
    action_space = gym.spaces.Discrete(7)
    cfg = ModelConfig(encoder="grid_cnn", grid_channels=[8, 4], hidden_sizes=[16], shared=True)
    torch.manual_seed(0)
    model = ActorCritic(obs_space, action_space, cfg)
    assert numpy_layout(obs_space, action_space, cfg) is None
    layout = acting_layout(obs_space, action_space, cfg)
    assert layout is not None and layout.grid is not None
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == layout.params
    policy = NumpyPolicy(layout, model_to_flat(model), np.random.default_rng(0))
    obs_space.seed(3)
    batch = [obs_space.sample() for _ in range(9)]
    np_obs = {k: np.stack([b[k] for b in batch]) for k in ("observation", "action_mask")}
    np_obs["action_mask"][0] = [0, 1, 0, 0, 0, 0, 0]  # one legal move only
    t_obs = {k: torch.from_numpy(v) for k, v in np_obs.items()}
    reference = copy.deepcopy(model).double()
    accumulations = 2 * 9 * 8 + 9 * 8 + 4 * 42 + 16
    action, logp, value = policy.act(np_obs, deterministic=True)
    t_action, t_logp, t_value = reference.act(t_obs, deterministic=True)
    np.testing.assert_array_equal(action, t_action.numpy())
    assert action[0] == 1
    assert_float32_close(logp, t_logp, accumulations, "logp")
    assert_float32_close(value, t_value, accumulations, "value")
    # Fewer rows take the other way to convolve (numpy_policy.GridFeatures): the same values.
    few = policy.act({k: v[:3] for k, v in np_obs.items()}, deterministic=True)
    np.testing.assert_array_equal(few[0], action[:3])
    assert_float32_close(few[2], t_value[:3], accumulations, "value of 3 rows")


def test_grid_cnn_needs_one_grid() -> None:
    from surge.errors import EnvSpecError
    from surge.models.images import choose_encoder

    cfg = ModelConfig(encoder="grid_cnn")
    assert choose_encoder(Box(0, 1, (5, 5, 2), np.int8), cfg) == "grid_cnn"
    with pytest.raises(EnvSpecError, match="needs one grid observation"):
        choose_encoder(Box(-1, 1, (6,)), cfg)
    with pytest.raises(EnvSpecError, match="smaller than 3x3"):
        choose_encoder(Box(0, 1, (2, 7, 2), np.int8), cfg)
