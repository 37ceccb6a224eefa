"""Small images: the small CNN, [H, W, C] layouts, how `model.encoder: auto` picks a CNN by
image size, its errors, and `env.wrappers` (how the MiniGrid preset gets its image)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from surge.config.schema import EnvConfig, ModelConfig
from surge.envs.make import load_wrapper, make_env, probe_env
from surge.errors import ConfigError, EnvSpecError
from surge.models.actor_critic import ActorCritic
from surge.models.encoders import ChannelsFirst, FlatEncoder, NatureCNN, SmallCNN, make_encoder
from surge.models.images import choose_encoder, image_layout
from surge.models.numpy_policy import numpy_layout


def _box(*shape: int) -> gym.spaces.Box:
    return gym.spaces.Box(0, 255, shape, np.uint8)


def _obs(*shape: int, high: int = 11, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randint(0, high, shape, generator=g, dtype=torch.uint8)}


MINIGRID = _box(7, 7, 3)  # ImgObsWrapper's view: [H, W, C], small indices


def test_small_cnn_shapes_chw() -> None:
    cnn = SmallCNN(_box(3, 7, 7))
    out = cnn(_obs(5, 3, 7, 7))
    assert cnn.out_dim == 64 and out.shape == (5, 64) and out.dtype == torch.float32
    assert not cnn.is_torso
    # 16x20: conv 15x19, pool 7x9, conv 6x8, conv 5x7.
    cnn = SmallCNN(_box(3, 16, 20))
    assert cnn.out_dim == 64 * 5 * 7 and cnn(_obs(2, 3, 16, 20)).shape == (2, 64 * 5 * 7)
    # MiniGrid's baseline: 16 * 3 * 4 + 16, 32 * 16 * 4 + 32, 64 * 32 * 4 + 64 parameters.
    assert sum(p.numel() for p in cnn.parameters()) == 208 + 2080 + 8256


def _reference(cnn: SmallCNN, x: torch.Tensor) -> torch.Tensor:
    relu = nn.functional.relu
    x = nn.functional.max_pool2d(relu(cnn.conv1(x)), 2)
    return relu(cnn.conv3(relu(cnn.conv2(x)))).flatten(1)


def test_small_cnn_takes_raw_values() -> None:
    torch.manual_seed(0)
    cnn = SmallCNN(_box(3, 7, 7))
    obs = _obs(4, 3, 7, 7)
    x = obs["obs"].float()  # no 1/255: MiniGrid's values are indices
    torch.testing.assert_close(cnn(obs), _reference(cnn, x))
    scaled = SmallCNN(_box(3, 7, 7), scale=1 / 255)  # for small pixel images
    scaled.load_state_dict(cnn.state_dict())
    torch.testing.assert_close(scaled(obs), _reference(cnn, x / 255))


def test_hwc_images_are_transposed_for_the_cnn() -> None:
    torch.manual_seed(0)
    enc = make_encoder(MINIGRID, ModelConfig())
    assert isinstance(enc, ChannelsFirst) and isinstance(enc.inner, SmallCNN)
    assert enc.out_dim == 64 and not enc.is_torso
    obs = _obs(5, 7, 7, 3)
    chw = {"obs": obs["obs"].permute(0, 3, 1, 2).contiguous()}
    torch.testing.assert_close(enc(obs), enc.inner(chw))
    # The one image of a Dict keeps its key.
    keyed = make_encoder(gym.spaces.Dict({"image": MINIGRID}), ModelConfig())
    keyed.load_state_dict(enc.state_dict())
    torch.testing.assert_close(keyed({"image": obs["obs"]}), enc(obs))
    # An RGB frame [H, W, 3] of 84x84 gets the Nature CNN the same way.
    enc = make_encoder(_box(84, 84, 3), ModelConfig(precision="float32"))
    assert isinstance(enc, ChannelsFirst) and isinstance(enc.inner, NatureCNN)
    assert enc(_obs(2, 84, 84, 3, high=256)).shape == (2, 512)


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((4, 84, 84), "chw"),  # Atari frame stack
        ((1, 84, 84), "chw"),
        ((7, 7, 3), "hwc"),  # MiniGrid
        ((96, 96, 3), "hwc"),  # RGB frames (CarRacing)
        ((84, 84, 1), "hwc"),
        ((3, 7, 7), "chw"),
        ((4, 4, 4), "chw"),  # ambiguous: torch's convention
        ((84, 84, 8), "chw"),  # more than 4 channels last: needs model.image_layout=hwc
    ],
)
def test_layout_rule(shape: tuple[int, int, int], layout: str) -> None:
    assert image_layout(shape) == layout
    assert image_layout(shape, "hwc") == "hwc" and image_layout(shape, "chw") == "chw"


@pytest.mark.parametrize(
    ("shape", "name"),
    [
        ((4, 84, 84), "nature_cnn"),
        ((36, 36, 3), "nature_cnn"),
        ((35, 35, 3), "small_cnn"),
        ((3, 40, 20), "small_cnn"),  # the smaller side decides
        ((7, 7, 3), "small_cnn"),
        ((3, 7, 7), "small_cnn"),
    ],
)
def test_auto_picks_the_cnn_by_image_size(shape: tuple[int, int, int], name: str) -> None:
    assert choose_encoder(_box(*shape), ModelConfig()) == name
    enc = make_encoder(_box(*shape), ModelConfig(precision="float32"))
    inner = enc.inner if isinstance(enc, ChannelsFirst) else enc
    assert isinstance(inner, NatureCNN if name == "nature_cnn" else SmallCNN)


def test_auto_keeps_flat_for_other_observations() -> None:
    assert isinstance(
        make_encoder(gym.spaces.Box(-1, 1, (4,), np.float32), ModelConfig()), FlatEncoder
    )
    assert isinstance(make_encoder(gym.spaces.Box(0, 9, (7, 7, 3)), ModelConfig()), FlatEncoder)
    two = gym.spaces.Dict({"image": MINIGRID, "direction": gym.spaces.Discrete(4)})
    assert isinstance(make_encoder(two, ModelConfig()), FlatEncoder)
    assert isinstance(make_encoder(MINIGRID, ModelConfig(encoder="flat")), FlatEncoder)


def test_too_small_images_say_which_encoder_fits() -> None:
    with pytest.raises(EnvSpecError, match=r"too small for small_cnn") as info:
        make_encoder(_box(6, 6, 3), ModelConfig())
    fix = info.value.fix
    assert "model.encoder=flat" in fix and "model.image_layout" in fix and "36x36" in fix
    # Named explicitly: the Nature CNN on MiniGrid's view says small_cnn fits.
    with pytest.raises(EnvSpecError, match=r"too small for nature_cnn") as info:
        make_encoder(MINIGRID, ModelConfig(encoder="nature_cnn"))
    assert "small_cnn for 7x7" in info.value.fix
    with pytest.raises(EnvSpecError, match="model.encoder=small_cnn needs one uint8 image"):
        make_encoder(gym.spaces.Box(-1, 1, (4,), np.float32), ModelConfig(encoder="small_cnn"))


def test_image_layout_override() -> None:
    eight = _box(84, 84, 8)  # [H, W, C] with 8 channels: auto reads [C=84, H=84, W=8]
    assert choose_encoder(eight, ModelConfig()) == "small_cnn"
    enc = make_encoder(eight, ModelConfig(image_layout="hwc", precision="float32"))
    assert isinstance(enc, ChannelsFirst) and isinstance(enc.inner, NatureCNN)
    assert enc.inner.conv1.in_channels == 8


def test_actor_critic_puts_the_mlp_torso_on_small_cnn_features() -> None:
    model = ActorCritic(MINIGRID, gym.spaces.Discrete(7), ModelConfig(hidden_sizes=[64]))
    assert model.critic_torso is not None and model.actor_torso[0].in_features == 64
    action, logp, value = model.act(_obs(6, 7, 7, 3), generator=torch.Generator().manual_seed(1))
    assert action.shape == (6,) and logp.shape == (6,) and value.shape == (6,)


@pytest.mark.parametrize("encoder", ["auto", "small_cnn"])
def test_small_images_are_left_to_torch(encoder: str) -> None:
    cfg = ModelConfig(encoder=encoder)  # type: ignore[arg-type]
    assert numpy_layout(MINIGRID, gym.spaces.Discrete(7), cfg) is None
    assert numpy_layout(_box(3, 7, 7), gym.spaces.Discrete(7), cfg) is None
    flat = numpy_layout(MINIGRID, gym.spaces.Discrete(7), ModelConfig(encoder="flat"))
    assert flat is not None and flat.fields == [("obs", 0, 0)]


# ---------------------------------------------------------------- env.wrappers


def test_wrappers_are_applied_in_order() -> None:
    cfg = EnvConfig(
        id="surge.envs.testing:surge/DictObs-v0",
        wrappers=[
            "gymnasium.wrappers:FlattenObservation",
            "gymnasium.wrappers.RecordEpisodeStatistics",
        ],
    )
    env = make_env(cfg)
    assert isinstance(env, gym.wrappers.RecordEpisodeStatistics)
    assert isinstance(env.env, gym.wrappers.FlattenObservation)
    assert isinstance(probe_env(cfg, 0).observation_space, gym.spaces.Box)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("ImgObsWrapper", "not an import path"),
        ("no_such_module_xyz:Wrap", "cannot import module 'no_such_module_xyz'"),
        ("gymnasium.wrappers:NoSuchWrapper", "has no attribute 'NoSuchWrapper'"),
        ("gymnasium:__version__", "is not callable"),
    ],
)
def test_wrapper_errors_name_the_field(spec: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as info:
        load_wrapper(spec, 2)
    assert f"env.wrappers[2]={spec!r}" in str(info.value)


def test_wrapper_must_return_an_env() -> None:
    cfg = EnvConfig(id="CartPole-v1", wrappers=["builtins:repr"])
    with pytest.raises(ConfigError, match=r"env.wrappers\[0\]='builtins:repr' returned str"):
        make_env(cfg)


def test_env_kwargs_the_constructor_rejects_are_config_errors() -> None:
    """A misspelt keyword in env.kwargs (a TypeError from the constructor) is a config error
    naming env.kwargs and the env's own message, not a traceback from gym.make (a bad value,
    a ValueError: tests/unit/test_driving_env.py)."""
    typo = EnvConfig(id="CartPole-v1", kwargs={"sutton_barto_rewrd": True})
    with pytest.raises(ConfigError, match=r"rejected env.kwargs \(sutton_barto_rewrd\)") as info:
        probe_env(typo, 0)
    assert "TypeError" in str(info.value) and "sutton_barto_rewrd" in str(info.value)
    assert probe_env(EnvConfig(id="CartPole-v1", kwargs={"sutton_barto_reward": True}), 0)


def test_wrappers_need_the_gymnasium_backend() -> None:
    cfg = EnvConfig(id="ALE/Pong-v5", wrappers=["gymnasium.wrappers:ClipReward"])
    with pytest.raises(ConfigError, match="env.backend=ale steps its own"):
        probe_env(cfg, 0)


def test_minigrid_through_img_obs_wrapper() -> None:
    pytest.importorskip("minigrid")
    cfg = EnvConfig(
        id="minigrid:MiniGrid-Empty-8x8-v0", wrappers=["minigrid.wrappers:ImgObsWrapper"]
    )
    info = probe_env(cfg, 0)
    assert info.observation_space == MINIGRID
    assert choose_encoder(info.observation_space, ModelConfig()) == "small_cnn"
