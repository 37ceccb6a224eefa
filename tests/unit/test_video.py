"""Episode videos (tracking/video.py): frames in, a playable MP4 out, decoded back."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from surge.tracking.video import read_mp4, write_mp4


def test_cartpole_episode_round_trips_through_mp4(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    frames = [env.render()]
    for t in range(29):
        _, _, terminated, _, _ = env.step(t % 2)  # left, right: stays up for 30 steps
        assert not terminated
        frames.append(env.render())
    env.close()
    path = write_mp4(tmp_path / "videos" / "episode.mp4", frames, fps=50)
    assert path.is_file() and not list(path.parent.glob("*.partial"))
    back = read_mp4(path)
    assert len(back) == len(frames) and back[0].shape == frames[0].shape
    # lossy, but the same picture: the mean error of a frame is a few grey levels
    assert float(np.abs(back[10].astype(int) - frames[10].astype(int)).mean()) < 8


def test_odd_sized_frames_are_padded(tmp_path: Path) -> None:
    frames = [np.full((5, 7, 3), 40 * i, np.uint8) for i in range(4)]
    back = read_mp4(write_mp4(tmp_path / "odd.mp4", frames, fps=10))
    assert len(back) == 4 and back[0].shape == (6, 8, 3)


def test_no_frames_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no frames"):
        write_mp4(tmp_path / "none.mp4", [], fps=10)
