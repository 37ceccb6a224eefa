"""The VLM-RL reward maths against values worked by hand from small vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from surge.rewards.clg import (
    DEFAULT_SETTINGS,
    SynthesisSettings,
    clg_contrast,
    clg_from_contrast,
    clg_reward,
    lord_reward,
    synthesize,
    terminal_mask,
    vlm_rm_reward,
    vlm_sr_reward,
)

POSITIVE = np.array([4.0, 0.0, 0.0])  # unit x, scaled: the code must normalise
NEGATIVE = np.array([0.0, 0.5, 0.0])  # unit y, scaled


def frame_with_contrast(z: float, scale: float = 3.0) -> np.ndarray:
    """A frame whose cosines are 0.5 with POSITIVE and 0.5 + z with NEGATIVE."""
    x, y = 0.5, 0.5 + z
    return scale * np.array([x, y, math.sqrt(1.0 - x * x - y * y)])


def test_contrast_is_negative_minus_positive_cosine() -> None:
    frames = np.stack([frame_with_contrast(z) for z in (-0.01, 0.015, 0.05)])
    np.testing.assert_allclose(
        clg_contrast(frames, POSITIVE, NEGATIVE), [-0.01, 0.015, 0.05], atol=1e-12
    )


def test_clg_reward_at_hand_values() -> None:
    frames = np.stack([frame_with_contrast(z) for z in (-0.01, 0.015, 0.05, 0.0, 0.03)])
    np.testing.assert_allclose(
        clg_reward(frames, POSITIVE, NEGATIVE), [1.0, 0.5, 0.0, 1.0, 0.0], atol=1e-9
    )
    # The goals swapped turn z into -z: a frame near the negative goal no longer scores 0.5.
    np.testing.assert_allclose(clg_reward(frames[1:2], NEGATIVE, POSITIVE), [1.0], atol=1e-9)


def test_clg_threshold_sets_the_ramp() -> None:
    np.testing.assert_allclose(
        clg_from_contrast(np.array([0.015, 0.045, 0.06]), threshold=0.06), [0.75, 0.25, 0.0]
    )


def test_clg_threshold_min_moves_the_ramp_floor() -> None:
    # 1 at and below the floor, 0 from the threshold on, linear between: a model whose
    # ordinary frames sit near z = -0.5 still tells a frame at -0.25 from them
    z = np.array([-0.6, -0.5, -0.25, 0.0, 0.5, 0.6])
    np.testing.assert_allclose(
        clg_from_contrast(z, threshold=0.5, threshold_min=-0.5), [1, 1, 0.75, 0.5, 0, 0]
    )
    np.testing.assert_allclose(clg_from_contrast(z, threshold=0.5), [1, 1, 1, 1, 0, 0])
    with pytest.raises(ValueError, match="threshold_min"):
        clg_from_contrast(z, threshold=0.5, threshold_min=0.5)


def test_lord_is_one_minus_the_negative_cosine() -> None:
    negative = np.array([1.0, math.sqrt(3.0)])  # norm 2, at 60 degrees from x
    frames = np.array([[2.0, 0.0], [0.0, 3.0], [-1.0, -math.sqrt(3.0)]])
    np.testing.assert_allclose(
        lord_reward(frames, negative), [0.5, 1.0 - math.sqrt(3.0) / 2.0, 2.0], atol=1e-12
    )


def test_vlm_rm_against_hand_values() -> None:
    goal, baseline = np.array([2.0, 0.0, 0.0]), np.array([0.0, 5.0, 0.0])
    # u = (1, -1, 0)/sqrt2. Frame z: y = e - g = (-1, 0, 1), (y.u) u = (-1/2, 1/2, 0).
    frames = np.array([[7.0, 0.0, 0.0], [0.0, 0.0, 7.0]])
    # alpha 0.5: P y = (-3/4, 1/4, 1/2), |P y|^2 = 7/8, r = 1 - 7/16 = 9/16.
    np.testing.assert_allclose(vlm_rm_reward(frames, goal, baseline), [1.0, 0.5625])
    # alpha 1: P y = (-1/2, 1/2, 0), r = 1 - 1/4; alpha 0: |y|^2 = 2, r = 0 (the cosine).
    np.testing.assert_allclose(vlm_rm_reward(frames, goal, baseline, alpha=1.0), [1.0, 0.75])
    np.testing.assert_allclose(
        vlm_rm_reward(frames, goal, baseline, alpha=0.0), [1.0, 0.0], atol=1e-12
    )


def test_vlm_sr_pays_plus_or_minus_one_strictly_above_the_threshold() -> None:
    goal = np.array([3.0, 0.0])
    frames = np.array([[0.5, math.sqrt(0.75)], [0.33, 0.9], [0.3, 0.9], [-1.0, 0.0]])
    cosines = frames[:, 0] / np.linalg.norm(frames, axis=1)
    assert cosines[1] > 0.32 > cosines[2]
    np.testing.assert_array_equal(vlm_sr_reward(frames, goal), [1.0, 1.0, -1.0, -1.0])
    # Equal to the threshold is not above it.
    np.testing.assert_array_equal(vlm_sr_reward(np.array([[2.0, 0.0]]), goal, 1.0), [-1.0])


def _synth(**state: list[float] | list[bool]) -> np.ndarray:
    n = len(next(iter(state.values())))
    base: dict[str, list[float] | list[bool]] = {
        "r_clg": [1.0] * n,
        "speed": [25.0] * n,
        "lane_offset": [0.0] * n,
        "heading_error": [0.0] * n,
        "offset_std": [0.0] * n,
        "terminal": [False] * n,
    }
    base.update(state)
    return synthesize(**{k: np.array(v) for k, v in base.items()}, settings=DEFAULT_SETTINGS)


def test_synthesis_against_hand_values() -> None:
    got = synthesize(
        r_clg=np.array([1.0, 0.5, 0.0, 0.5, 1.2]),
        speed=np.array([25.0, 20.0, 30.0, 20.0, 25.0]),
        lane_offset=np.array([0.0, -1.5, 0.0, -1.5, 0.0]),
        heading_error=np.array([0.0, math.pi / 4, 0.0, -math.pi / 4, 0.0]),
        offset_std=np.array([0.0, 0.1, 0.0, 0.1, 0.0]),
        terminal=np.array([False, False, False, True, False]),
    )
    # Row 1: v_des 12.5, speed term 1 - 7.5/25 = 0.7, f_c 0.5, f_a 0.5, f_s 0.75.
    # Row 2: v_des 0, speed term 1 - 30/25 = -0.2, not clipped (the authors' code).
    # Row 3: terminal, so the penalty. Row 4: r_CLG clipped to 1, so v_des 25 (not 30).
    np.testing.assert_allclose(got, [1.0, 0.13125, -0.2, -10.0, 1.0], atol=1e-12)


def test_each_factor_clips_at_zero() -> None:
    # Unclipped, these would be 1 - 4/3, 1 - 180/90 and 1 - 1/0.4: all negative.
    np.testing.assert_array_equal(_synth(lane_offset=[4.0, -4.0]), [0.0, 0.0])
    np.testing.assert_array_equal(_synth(heading_error=[math.pi, -math.pi]), [0.0, 0.0])
    np.testing.assert_array_equal(_synth(offset_std=[1.0]), [0.0])


def test_synthesis_settings_change_the_scales() -> None:
    settings = SynthesisSettings(
        v_target=30.0,
        v_max=40.0,
        d_max=2.0,
        theta_max_deg=45.0,
        sigma_max=0.2,
        terminal_penalty=-5.0,
    )
    got = synthesize(
        np.array([0.5, 0.0]),
        np.array([20.0, 1.0]),
        np.array([0.5, 0.0]),
        np.array([math.pi / 8, 0.0]),
        np.array([0.05, 0.0]),
        np.array([0, 1]),
        settings,
    )
    # v_des 15, speed term 1 - 5/30, f_c 0.75, f_a 0.5, f_s 0.75.
    np.testing.assert_allclose(got, [(5.0 / 6.0) * 0.75 * 0.5 * 0.75, -5.0])


def test_terminal_mask_follows_the_environment_rules() -> None:
    got = terminal_mask(
        collision=np.array([True, False, False, False, False, False, False]),
        speed=np.array([10.0, 10.0, 10.0, 35.0, 35.5, 10.0, 10.0]),
        lane_offset=np.array([0.0, 3.0, -3.5, 0.0, 0.0, 3.5, 0.0]),
        stopped=np.array([False, False, False, False, False, False, True]),
    )
    np.testing.assert_array_equal(got, [True, False, True, False, True, True, True])


def test_errors_name_the_bad_argument() -> None:
    frames = np.ones((2, 3))
    with pytest.raises(ValueError, match="threshold"):
        clg_from_contrast(np.zeros(2), threshold=0.0)
    with pytest.raises(ValueError, match="threshold"):
        clg_reward(frames, POSITIVE, NEGATIVE, threshold=-0.03)
    with pytest.raises(ValueError, match="negative"):
        clg_contrast(frames, POSITIVE, np.ones(4))
    with pytest.raises(ValueError, match="embeddings"):
        lord_reward(np.ones(3), NEGATIVE)
    with pytest.raises(ValueError, match="embeddings"):
        lord_reward(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), NEGATIVE)
    with pytest.raises(ValueError, match="embeddings"):
        lord_reward(np.array([[np.nan, 0.0, 0.0]]), NEGATIVE)
    with pytest.raises(ValueError, match="goal"):
        vlm_sr_reward(frames, np.zeros(3))
    with pytest.raises(ValueError, match="threshold"):
        vlm_sr_reward(frames, POSITIVE, threshold=1.5)
    with pytest.raises(ValueError, match="alpha"):
        vlm_rm_reward(frames, POSITIVE, NEGATIVE, alpha=1.5)
    with pytest.raises(ValueError, match="baseline"):
        vlm_rm_reward(frames, POSITIVE, 2.0 * POSITIVE)
    with pytest.raises(ValueError, match="v_target"):
        SynthesisSettings(v_target=0.0)
    with pytest.raises(ValueError, match="v_min"):
        SynthesisSettings(v_min=30.0)
    with pytest.raises(ValueError, match="v_max"):
        SynthesisSettings(v_max=20.0)
    with pytest.raises(ValueError, match="sigma_max"):
        SynthesisSettings(sigma_max=-0.4)
    with pytest.raises(ValueError, match="speed"):
        _synth(r_clg=[1.0, 1.0], speed=[25.0])
    with pytest.raises(ValueError, match="speed"):
        _synth(speed=[-1.0])
    with pytest.raises(ValueError, match="offset_std"):
        _synth(offset_std=[-0.1])
    with pytest.raises(ValueError, match="terminal"):
        _synth(terminal=[0.5])
    with pytest.raises(ValueError, match="r_clg"):
        synthesize(1.0, 25.0, 0.0, 0.0, 0.0, False)
    with pytest.raises(ValueError, match="lane_offset"):
        terminal_mask(np.array([False]), np.array([1.0]), np.array([1.0, 2.0]), np.array([0]))
