"""Evaluation's pieces: the flat-vector policy (numpy and torch paths agree), the episode
player, and TensorBoard videos."""

from __future__ import annotations

import io
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.config.schema import ModelConfig
from surge.evaluation.episodes import play_episodes
from surge.models.actor_critic import ActorCritic
from surge.models.flat_policy import FlatPolicy, TorchActing
from surge.models.weights import model_to_flat
from surge.tracking.video import TensorBoardVideo, gif_bytes
from surge.workers.evaluation import video_due


def _cartpole_policy(normalize: bool = False) -> tuple[gym.Env, FlatPolicy, np.ndarray]:  # type: ignore[type-arg]
    env = gym.make("CartPole-v1")
    model_cfg = ModelConfig(normalize_obs=normalize)
    torch.manual_seed(0)
    model = ActorCritic(env.observation_space, env.action_space, model_cfg)
    flat = model_to_flat(model)
    if normalize:  # statistics [mean, var] follow the weights in a published version
        flat = np.concatenate([flat, np.full(4, 0.5, np.float32), np.full(4, 2.0, np.float32)])
    policy = FlatPolicy(env.observation_space, env.action_space, model_cfg, seed=0)
    policy.load(flat)
    return env, policy, flat


@pytest.mark.numerics
@pytest.mark.parametrize("normalize", [False, True])
def test_numpy_and_torch_paths_choose_the_same_greedy_actions(normalize: bool) -> None:
    env, numpy_policy, flat = _cartpole_policy(normalize)
    assert not isinstance(numpy_policy.policy, TorchActing)  # an MLP acts in numpy
    torch_policy = FlatPolicy(
        env.observation_space, env.action_space, ModelConfig(normalize_obs=normalize), 0
    )
    torch_policy.policy = TorchActing(env.observation_space, env.action_space, ModelConfig(), 0)
    torch_policy.load(flat)
    obs = {"obs": np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)}
    a_np, logp_np, v_np = numpy_policy.act(obs, deterministic=True)
    a_t, logp_t, v_t = torch_policy.act(obs, deterministic=True)
    np.testing.assert_array_equal(a_np, a_t)
    np.testing.assert_allclose(v_np, v_t, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logp_np, logp_t, rtol=1e-4, atol=1e-5)


def test_a_version_of_the_wrong_size_is_refused() -> None:
    _, policy, flat = _cartpole_policy()
    with pytest.raises(ValueError, match="has 9155 values, got 9154"):
        policy.load(flat[:-1])


def test_play_episodes_counts_whole_episodes_and_is_reproducible() -> None:
    env, policy, _ = _cartpole_policy()
    steps = []
    first = play_episodes(
        env, policy, 3, seed=7, deterministic=False, on_step=lambda: steps.append(1)
    )
    assert len(first.returns) == 3 and first.returns == [float(n) for n in first.lengths]
    assert sum(first.lengths) == len(steps)  # the heartbeat hook runs every step
    assert not first.frames
    policy.policy.rng = np.random.default_rng(0)  # type: ignore[union-attr]
    again = play_episodes(env, policy, 3, seed=7, deterministic=True)
    assert again.lengths == play_episodes(env, policy, 3, seed=7, deterministic=True).lengths


class _Measured(gym.Wrapper):  # type: ignore[type-arg]
    """CartPole that reports its episode's length as a measure at the last step."""

    def step(self, action: object) -> tuple:  # type: ignore[type-arg]
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps = getattr(self, "steps", 0) + 1
        if terminated or truncated:
            info = {**info, "episode_metrics": {"steps": self.steps, "long": self.steps > 20}}
            self.steps = 0
        return obs, reward, terminated, truncated, info


def test_play_episodes_collects_the_envs_own_measures() -> None:
    env, policy, _ = _cartpole_policy()
    played = play_episodes(_Measured(env), policy, 4, seed=3, deterministic=True)
    assert played.metrics["steps"] == [float(n) for n in played.lengths]
    assert played.metrics["long"] == [float(n > 20) for n in played.lengths]
    assert played.metric_means["steps"] == pytest.approx(np.mean(played.lengths))
    assert not play_episodes(env, policy, 2, seed=3, deterministic=True).metrics


def test_recording_keeps_the_first_episodes_frames() -> None:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    _, policy, _ = _cartpole_policy()
    played = play_episodes(env, policy, 2, seed=1, deterministic=True, record_first=True)
    assert len(played.frames) == played.lengths[0] + 1  # the reset frame, then every step
    assert played.frames[0].shape == (400, 600, 3) and played.frames[0].dtype == np.uint8


def test_tensorboard_gets_an_animated_gif(tmp_path: Path) -> None:
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    frames = [np.full((400, 600, 3), i % 256, np.uint8) for i in range(300)]
    data, height, width = gif_bytes(frames, fps=50, max_frames=120, max_side=256)
    assert (height, width) == (171, 256)
    gif = Image.open(io.BytesIO(data))
    assert gif.n_frames == 100  # every third frame: at most 120 kept
    board = TensorBoardVideo(tmp_path)
    board.add("eval/video", frames, step=4096, fps=50)
    board.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    events.Reload()
    (image,) = events.Images("eval/video")
    assert image.step == 4096 and (image.height, image.width) == (171, 256)
    assert Image.open(io.BytesIO(image.encoded_image_string)).n_frames == 100


@pytest.mark.parametrize(
    ("played", "every", "recorded"),
    [
        ([1, 2, 3, 4, 5, 6], 2, [2, 4, 6]),
        ([1, 3, 5, 7], 2, [3, 5, 7]),  # a lagging evaluator skips every even number
        ([1, 4, 9, 10], 3, [4, 9]),  # 3 and 6 skipped: one video each time, never a backlog
        ([2, 3, 4], 1, [2, 3, 4]),
    ],
)
def test_a_skipped_evaluation_passes_its_video_on(
    played: list[int], every: int, recorded: list[int]
) -> None:
    last, videos = 0, []
    for number in played:
        if video_due(number, every, last):
            videos.append(number)
            last = number // every
    assert videos == recorded
