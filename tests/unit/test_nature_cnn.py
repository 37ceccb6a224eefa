"""The Nature CNN encoder: shapes, the 1/255 scaling, its fast variants, and how
`model.encoder` wires it into ActorCritic."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from surge.config.schema import ModelConfig
from surge.errors import EnvSpecError
from surge.models.actor_critic import ActorCritic
from surge.models.encoders import FlatEncoder, NatureCNN, make_encoder

pytestmark = pytest.mark.numerics  # also run under the narrowest kernels (tests/numerics.py)

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def _frames(b: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randint(0, 256, (b, 4, 84, 84), generator=g, dtype=torch.uint8)}


def test_shapes_and_parameters() -> None:
    cnn = NatureCNN(FRAMES)
    out = cnn(_frames())
    assert out.shape == (3, 512) and out.dtype == torch.float32
    assert bool((out >= 0).all())  # ReLU features
    assert cnn.fc.in_features == 64 * 7 * 7  # 84 -> 20 -> 9 -> 7
    # CleanRL's ppo_atari network: 1,684,128 trunk parameters.
    assert sum(p.numel() for p in cnn.parameters()) == 1_684_128


def test_scales_uint8_by_1_over_255() -> None:
    torch.manual_seed(0)
    cnn = NatureCNN(FRAMES)
    obs = _frames()
    x = obs["obs"].float() / 255.0  # CleanRL: network(x / 255.0)
    relu = nn.functional.relu
    ref = relu(cnn.conv3(relu(cnn.conv2(relu(cnn.conv1(x))))))
    ref = relu(cnn.fc(ref.flatten(1)))
    torch.testing.assert_close(cnn(obs), ref, rtol=1e-5, atol=1e-5)


def test_orthogonal_init_gain_sqrt2() -> None:
    cnn = NatureCNN(FRAMES)
    w = cnn.fc.weight  # [512, 3136]: orthonormal rows scaled by sqrt(2)
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(512), atol=1e-4, rtol=0)
    assert all(float(m.bias.detach().abs().max()) == 0.0 for m in (cnn.conv1, cnn.conv2, cnn.conv3))


@pytest.mark.parametrize("kw", [{"channels_last": True}, {"bf16": True}])
def test_fast_variants_match_fp32(kw: dict[str, bool]) -> None:
    torch.manual_seed(0)
    ref = NatureCNN(FRAMES, channels_last=False)
    fast = NatureCNN(FRAMES, **kw)
    fast.load_state_dict(ref.state_dict())
    obs = _frames(8)
    a, b = ref(obs), fast(obs)
    assert b.dtype == torch.float32
    tol = 0.03 if kw.get("bf16") else 1e-5  # bf16 keeps 8 bits of mantissa
    assert float((a - b).detach().abs().max()) <= tol * float(a.detach().abs().max())
    b.sum().backward()  # gradients reach the float32 parameters
    assert fast.conv1.weight.grad is not None and fast.conv1.weight.grad.dtype == torch.float32


def test_auto_picks_the_cnn_for_uint8_images_only() -> None:
    assert isinstance(make_encoder(FRAMES, ModelConfig()), NatureCNN)
    vec = gym.spaces.Box(-1, 1, (4,), np.float32)
    assert isinstance(make_encoder(vec, ModelConfig()), FlatEncoder)
    flat_frames = gym.spaces.Box(0, 255, (4, 84, 84), np.float32)  # not uint8: flat
    assert isinstance(make_encoder(flat_frames, ModelConfig()), FlatEncoder)
    assert isinstance(make_encoder(FRAMES, ModelConfig(encoder="flat")), FlatEncoder)
    with pytest.raises(EnvSpecError, match="nature_cnn"):
        make_encoder(vec, ModelConfig(encoder="nature_cnn"))


def test_actor_critic_heads_sit_on_the_cnn_features() -> None:
    torch.manual_seed(0)
    model = ActorCritic(FRAMES, gym.spaces.Discrete(6), ModelConfig())
    assert isinstance(model.encoder, NatureCNN)
    assert model.critic_torso is None and len(model.actor_torso) == 0  # no MLP torso
    assert model.action_head.linear.in_features == 512  # type: ignore[union-attr]
    assert model.value_head.in_features == 512
    action, logp, value = model.act(_frames(5), generator=torch.Generator().manual_seed(1))
    assert action.shape == (5,) and logp.shape == (5,) and value.shape == (5,)
    # The policy starts near uniform (head gain 0.01).
    assert float((logp + math.log(6)).abs().max()) < 0.05
    logp2, entropy, value2 = model.evaluate(_frames(5), action)
    torch.testing.assert_close(logp2, logp)
    torch.testing.assert_close(value2, value)
    assert entropy.shape == (5,)


def test_precision_setting() -> None:
    fp32 = make_encoder(FRAMES, ModelConfig(precision="float32"))
    bf16 = make_encoder(FRAMES, ModelConfig(precision="bfloat16"))
    assert isinstance(fp32, NatureCNN) and isinstance(bf16, NatureCNN)
    assert not fp32.bf16 and bf16.bf16
    assert fp32.channels_last and fp32.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    assert all(p.dtype == torch.float32 for p in bf16.parameters())


@pytest.mark.parametrize("channels_last", [True, False])
def test_prepare_changes_the_layout_not_the_features(channels_last: bool) -> None:
    torch.manual_seed(0)
    cnn = NatureCNN(FRAMES, channels_last=channels_last)
    obs = _frames(6)
    prepared = cnn.prepare(obs)
    assert torch.equal(prepared["obs"], obs["obs"])
    assert prepared["obs"].is_contiguous(memory_format=torch.channels_last) == channels_last
    with torch.no_grad():
        assert torch.equal(cnn(prepared), cnn(obs))
