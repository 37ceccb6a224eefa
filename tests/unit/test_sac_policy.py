"""SAC's acting policy (models/sac_policy.py) against its torch actor (models/sac_network.py)
and the learner's maths (algos/sac.py): the same parameter layout, the same actions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.sac import LOG_STD_MAX, LOG_STD_MIN, bounded_log_std, squashed_gaussian
from surge.config.schema import ModelConfig
from surge.models import sac_policy as sp
from surge.models.sac_network import SACActor, TwinQ
from surge.models.weights import model_to_flat

BOX = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
DICT = gym.spaces.Dict({"b": gym.spaces.Box(-1, 1, (2, 2)), "a": gym.spaces.Discrete(3)})
SPACES: list[tuple[str, gym.Space[Any], str]] = [
    ("vector", gym.spaces.Box(-8.0, 8.0, (3,), np.float32), "relu"),
    ("dict", DICT, "tanh"),  # a Discrete field one-hot, fields in sorted order
]


def _actor(obs_space: gym.Space[Any], activation: str) -> tuple[SACActor, sp.SACPolicy]:
    cfg = ModelConfig(hidden_sizes=[16, 8], activation=activation)  # type: ignore[arg-type]
    torch.manual_seed(0)
    actor = SACActor(obs_space, BOX, cfg)
    with torch.no_grad():  # heads of the same scale as the torso, so the tanh is not trivial
        for head in (actor.mean, actor.log_std):
            head.weight.normal_(0.0, 0.5)
            head.bias.normal_(0.0, 0.5)
    policy = sp.SACPolicy(obs_space, BOX, cfg, seed=1)
    policy.load(model_to_flat(actor))
    return actor, policy


def _obs(obs_space: gym.Space[Any], n: int) -> dict[str, np.ndarray]:
    obs_space.seed(3)
    rows = [obs_space.sample() for _ in range(n)]
    if isinstance(obs_space, gym.spaces.Dict):
        return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in obs_space.spaces}
    return {"obs": np.stack(rows).astype(np.float32)}


@pytest.mark.parametrize("name, obs_space, activation", SPACES)
def test_the_layout_is_the_torch_actors(
    name: str, obs_space: gym.Space[Any], activation: str
) -> None:
    cfg = ModelConfig(hidden_sizes=[16, 8], activation=activation)  # type: ignore[arg-type]
    actor = SACActor(obs_space, BOX, cfg)
    want = [(n, tuple(p.shape)) for n, p in actor.named_parameters()]
    assert sp.sac_params(obs_space, BOX, cfg) == want
    count = sum(p.numel() for p in actor.parameters())
    assert sp.count_sac_params(obs_space, BOX, cfg) == count == len(model_to_flat(actor))
    # the published vector is the actor's alone: the critics are the learner's
    assert not set(dict(TwinQ(obs_space, BOX, cfg).named_parameters())) & {n for n, _ in want}


def test_the_log_std_bounds_are_the_learners() -> None:
    assert (sp.LOG_STD_MIN, sp.LOG_STD_MAX) == (LOG_STD_MIN, LOG_STD_MAX)
    raw = np.linspace(-6.0, 6.0, 25, dtype=np.float32)
    want = bounded_log_std(torch.from_numpy(raw)).numpy()
    np.testing.assert_allclose(sp.bound_log_std(raw), want, rtol=1e-6, atol=1e-6)


@pytest.mark.numerics
@pytest.mark.parametrize("name, obs_space, activation", SPACES)
def test_numpy_actions_equal_the_torch_actors(
    name: str, obs_space: gym.Space[Any], activation: str
) -> None:
    actor, policy = _actor(obs_space, activation)
    obs = _obs(obs_space, 64)
    scale, bias = (torch.from_numpy(x) for x in sp.box_scale_bias(BOX))
    with torch.no_grad():
        mean, raw = actor({k: torch.from_numpy(v) for k, v in obs.items()})
        log_std = bounded_log_std(raw)
        want, _ = squashed_gaussian(mean, log_std, scale, bias, None)
        noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(5))
        want_noisy, _ = squashed_gaussian(mean, log_std, scale, bias, noise)
    (action,) = policy.act(obs, deterministic=True)
    assert action.dtype == np.float32 and action.shape == (64, 2)
    np.testing.assert_allclose(action, want.numpy(), rtol=1e-5, atol=1e-5)
    got_mean, got_log_std = policy.heads(obs)
    np.testing.assert_allclose(got_mean, mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_log_std, log_std.numpy(), rtol=1e-5, atol=1e-5)
    # the stochastic action is the learner's squashed Gaussian for the same noise
    noisy = np.tanh(got_mean + np.exp(got_log_std) * noise.numpy()) * policy.scale + policy.bias
    np.testing.assert_allclose(noisy, want_noisy.numpy(), rtol=1e-5, atol=1e-5)


def test_stochastic_actions_stay_within_the_bounds_and_vary() -> None:
    obs_space = SPACES[0][1]
    _, policy = _actor(obs_space, "relu")
    obs = _obs(obs_space, 256)
    (a1,) = policy.act(obs)
    (a2,) = policy.act(obs)
    for a in (a1, a2):
        assert a.dtype == np.float32 and a.shape == (256, 2)
        assert np.all(a >= BOX.low) and np.all(a <= BOX.high)
    assert not np.array_equal(a1, a2)  # noise: a Gaussian per call
    (d1,) = policy.act(obs, deterministic=True)
    (d2,) = policy.act(obs, deterministic=True)
    np.testing.assert_array_equal(d1, d2)
    # the acting contract (models/acting.py): no outputs, no state
    assert policy.OUTPUTS == {} and policy.state_size == 0 and policy.initial_state(4) is None


def test_a_cnn_actor_acts_through_torch() -> None:
    obs_space = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    cfg = ModelConfig(hidden_sizes=[16])
    assert sp.sac_params(obs_space, BOX, cfg) == []
    torch.manual_seed(0)
    actor = SACActor(obs_space, BOX, cfg)
    policy = sp.SACPolicy(obs_space, BOX, cfg, seed=1)
    assert sp.count_sac_params(obs_space, BOX, cfg) == len(policy.flat)
    policy.load(model_to_flat(actor))
    obs = {"obs": np.random.default_rng(0).integers(0, 255, (3, 4, 36, 36), dtype=np.uint8)}
    (action,) = policy.act(obs, deterministic=True)
    with torch.no_grad():
        mean, _ = actor({"obs": torch.from_numpy(obs["obs"])})
    want = np.tanh(mean.numpy()) * policy.scale + policy.bias
    np.testing.assert_allclose(action, want, rtol=1e-5, atol=1e-5)


def test_held_critics_pass_gradients_to_the_action_only() -> None:
    obs_space = SPACES[0][1]
    critic = TwinQ(obs_space, BOX, ModelConfig(hidden_sizes=[16, 8], activation="relu"))
    obs = {k: torch.from_numpy(v) for k, v in _obs(obs_space, 32).items()}
    values, grads = [], []
    for held in (False, True):
        action = torch.linspace(-2.0, 1.0, 64).reshape(32, 2).requires_grad_()
        q1, q2 = critic.held(obs, action) if held else critic(obs, action)
        (q1 + 2 * q2).sum().backward()
        values.append(torch.stack([q1, q2]).detach())
        grads.append(action.grad)
        if held:  # the actor's loss leaves the critics' gradients alone
            assert all(p.grad is None for p in critic.parameters())
        critic.zero_grad(set_to_none=True)
    torch.testing.assert_close(values[1], values[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-5)
