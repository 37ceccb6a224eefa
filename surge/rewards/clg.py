"""The reward maths of VLM-RL and the vision-language baselines it compares with, in numpy.

Huang et al. 2024, "VLM-RL: A Unified Vision Language Models and Reinforcement Learning
Framework for Safe Autonomous Driving" (arXiv 2412.15544). Every formula here follows the
authors' code (github zihaosheng/VLM-RL), which is the reference where it is more precise
than the paper:

- the contrasting-language-goal (CLG) reward: clip/clip_reward_model.py `forward_vlm_rl`
  and its normalisation in clip/clip_rewarded_sac.py `_compute_clip_rewards`;
- the synthesis with the vehicle state: the same function, the state factors of
  carla_env/envs/carla_route_env.py `step` and the terminal rules of carla_env/rewards.py;
- the baselines LORD, VLM-RM and VLM-SR: clip/clip_reward_model.py `forward_lord`,
  `forward_vlm_rm`, `forward_vlm_sr` and the VLM-SR rule in `_compute_clip_rewards`.

Embeddings are (N, D) arrays, one row a frame; goals are (D,) arrays. Every embedding and
goal is normalised to unit length here, as in the authors' code, so callers may pass raw
encoder outputs. Speeds are in km/h, distances in metres, the heading error in radians (the
units of the authors' CARLA environment).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


CLG_THRESHOLD = 0.03
"""Contrast at and above which r_CLG is 0 (clip/clip_rewarded_sac.py, `thre_max`)."""
VLM_RM_ALPHA = 0.5
"""Weight of the goal-baseline projection in VLM-RM (config.py, `alpha`)."""
VLM_SR_THRESHOLD = 0.32
"""Cosine above which VLM-SR pays +1 (clip/clip_rewarded_sac.py)."""


def _unit_rows(embeddings: ArrayLike) -> FloatArray:
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"embeddings must be an (N, D) array with D >= 1, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("embeddings must be finite")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0.0):
        raise ValueError("embeddings has a zero row, which cannot be normalised")
    return x / norms


def _unit_goal(goal: ArrayLike, name: str, dim: int) -> FloatArray:
    g = np.asarray(goal, dtype=np.float64)
    if g.shape != (dim,):
        raise ValueError(f"{name} must have shape ({dim},) to match embeddings, got {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError(f"{name} must be finite")
    norm = float(np.linalg.norm(g))
    if norm == 0.0:
        raise ValueError(f"{name} is the zero vector, which cannot be normalised")
    return g / norm


def _cosines(embeddings: ArrayLike, goal: ArrayLike, name: str) -> FloatArray:
    e = _unit_rows(embeddings)
    return e @ _unit_goal(goal, name, e.shape[1])


def clg_contrast(embeddings: ArrayLike, positive: ArrayLike, negative: ArrayLike) -> FloatArray:
    """The contrast z = cos(e, negative) - cos(e, positive), one per row: [N].

    VLM-RL code, clip/clip_reward_model.py `forward_vlm_rl`: the prompts are listed
    negative first (config.py `reward_clg`), so y[:, 0] - y[:, 1] is negative minus positive.
    A frame nearer the negative goal ("two cars have collided") has the larger z.
    """
    e = _unit_rows(embeddings)
    dim = e.shape[1]
    return e @ _unit_goal(negative, "negative", dim) - e @ _unit_goal(positive, "positive", dim)


def clg_from_contrast(
    contrast: ArrayLike, threshold: float = CLG_THRESHOLD, threshold_min: float = 0.0
) -> FloatArray:
    """r_CLG = 1 - (clip(z, threshold_min, threshold) - threshold_min) / (threshold -
    threshold_min), in [0, 1]: [N] from z [N].

    VLM-RL code, clip/clip_rewarded_sac.py `_compute_clip_rewards` (thre_min = 0,
    thre_max = 0.03): 1 where the frame is at least as near the positive goal as the
    negative one, 0 from z = threshold on, linear in between. A model whose ordinary frames
    sit far below z = 0 (a tiny CLIP's cosines spread much wider than ViT-bigG's) needs a
    lower `threshold_min` for the ramp to reach them: otherwise every frame short of a
    crash scores exactly 1.
    """
    if not math.isfinite(threshold) or threshold <= 0.0:
        raise ValueError(f"threshold must be a finite number > 0, got {threshold}")
    if not math.isfinite(threshold_min) or threshold_min >= threshold:
        raise ValueError(
            f"threshold_min must be a finite number < threshold ({threshold}), got {threshold_min}"
        )
    z = np.asarray(contrast, dtype=np.float64)
    if z.ndim != 1:
        raise ValueError(f"contrast must be a 1-D array of N values, got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("contrast must be finite")
    return 1.0 - (np.clip(z, threshold_min, threshold) - threshold_min) / (
        threshold - threshold_min
    )


def clg_reward(
    embeddings: ArrayLike,
    positive: ArrayLike,
    negative: ArrayLike,
    threshold: float = CLG_THRESHOLD,
    threshold_min: float = 0.0,
) -> FloatArray:
    """r_CLG of each frame: `clg_from_contrast(clg_contrast(...))`, [N] in [0, 1]."""
    return clg_from_contrast(clg_contrast(embeddings, positive, negative), threshold, threshold_min)


def lord_reward(embeddings: ArrayLike, negative: ArrayLike) -> FloatArray:
    """LORD's opposite reward r = 1 - cos(e, negative), [N] in [0, 2].

    Ye et al., "LORD: Large models based opposite reward design for autonomous driving";
    VLM-RL code, clip/clip_reward_model.py `forward_lord`, with the negative goal alone.
    """
    return 1.0 - _cosines(embeddings, negative, "negative")


def vlm_rm_reward(
    embeddings: ArrayLike,
    goal: ArrayLike,
    baseline: ArrayLike,
    alpha: float = VLM_RM_ALPHA,
) -> FloatArray:
    """VLM-RM with goal-baseline regularisation: r = 1 - ||P (e - g)||^2 / 2, [N].

    Rocamonde et al., "Vision-Language Models are Zero-Shot Reward Models for Reinforcement
    Learning"; VLM-RL code, clip/clip_reward_model.py `compute_projection`/`forward_vlm_rm`.
    P = alpha * u u^T + (1 - alpha) * I with u the unit direction of g - b, all of e, g, b
    normalised first. With one goal and one baseline prompt (as there) the prompt means of
    the original are the prompts' own unit embeddings. P is applied without forming the
    (D, D) matrix; it is symmetric, so P (e - g) is the code's (e - g) @ P.
    """
    if not math.isfinite(alpha) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    e = _unit_rows(embeddings)
    dim = e.shape[1]
    g = _unit_goal(goal, "goal", dim)
    direction = g - _unit_goal(baseline, "baseline", dim)
    length = float(np.linalg.norm(direction))
    if length == 0.0:
        raise ValueError("goal and baseline point the same way: no direction to project on")
    u = direction / length
    y = e - g
    projected = alpha * np.outer(y @ u, u) + (1.0 - alpha) * y
    return 1.0 - 0.5 * np.sum(projected * projected, axis=1)


def vlm_sr_reward(
    embeddings: ArrayLike, goal: ArrayLike, threshold: float = VLM_SR_THRESHOLD
) -> FloatArray:
    """VLM-SR's sparse reward: +1 where cos(e, goal) > threshold, else -1, [N].

    VLM-RL code, clip/clip_rewarded_sac.py `_compute_clip_rewards`
    (`np.where(rewards0 > 0.32, 1, -1)`, strictly greater) on the cosine of
    clip/clip_reward_model.py `forward_vlm_sr`, with the VLM-RM goal prompt.
    """
    if not math.isfinite(threshold) or not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a cosine in [-1, 1], got {threshold}")
    return np.where(_cosines(embeddings, goal, "goal") > threshold, 1.0, -1.0)


@dataclass(frozen=True)
class SynthesisSettings:
    """The settings of VLM-RL's reward synthesis, defaulting to the authors' values.

    config.py `reward_fn_5_default`: target, minimum and maximum speed 25, 20 and 35 km/h,
    3 m of lane offset, 90 degrees of heading error, 0.4 m of offset standard deviation, a
    penalty of -10 on terminal steps. `synthesize` reads v_target, d_max, theta_max_deg,
    sigma_max and terminal_penalty; `terminal_mask` reads v_max and d_max. v_min shapes only
    the environment's own speed reward (carla_env/rewards.py `reward_fn5`), never the
    synthesis, and is kept here so that the settings match the authors' config.
    """

    v_target: float = 25.0
    v_min: float = 20.0
    v_max: float = 35.0
    d_max: float = 3.0
    theta_max_deg: float = 90.0
    sigma_max: float = 0.4
    terminal_penalty: float = -10.0

    def __post_init__(self) -> None:
        for name in ("v_target", "d_max", "theta_max_deg", "sigma_max"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not math.isfinite(self.v_min) or self.v_min < 0.0:
            raise ValueError(f"v_min must be a finite number >= 0, got {self.v_min}")
        if not math.isfinite(self.v_max) or self.v_max < self.v_target:
            raise ValueError(f"v_max must be finite and >= v_target, got {self.v_max}")
        if self.v_min > self.v_target:
            raise ValueError(f"v_min must be <= v_target, got {self.v_min} > {self.v_target}")
        if not math.isfinite(self.terminal_penalty):
            raise ValueError(f"terminal_penalty must be finite, got {self.terminal_penalty}")


DEFAULT_SETTINGS = SynthesisSettings()
"""The authors' settings (frozen, so one instance is shared safely)."""


def _state(values: ArrayLike, name: str, shape: tuple[int, ...]) -> FloatArray:
    x = np.asarray(values, dtype=np.float64)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape} like r_clg, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite")
    return x


def _flags(values: ArrayLike, name: str, shape: tuple[int, ...]) -> BoolArray:
    x = np.asarray(values)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    if x.dtype != np.bool_ and not (
        np.issubdtype(x.dtype, np.integer) and np.all((x == 0) | (x == 1))
    ):
        raise ValueError(f"{name} must hold booleans (or 0/1), got dtype {x.dtype}")
    return x.astype(np.bool_)


def terminal_mask(
    collision: ArrayLike,
    speed: ArrayLike,
    lane_offset: ArrayLike,
    stopped: ArrayLike,
    settings: SynthesisSettings = DEFAULT_SETTINGS,
) -> BoolArray:
    """The steps the authors' environment ends with its penalty, [N] bool.

    carla_env/rewards.py `create_reward_fn` and carla_env/envs/carla_route_env.py: a
    collision, |lane_offset| > d_max ("Off-track"), speed > v_max ("Too fast"), or the
    caller's `stopped` flag (there: under 1 km/h for 90 s running). All strict; the
    environment skips the off-track and too-fast rules in evaluation.
    """
    hit = _flags(collision, "collision", np.shape(collision))
    if hit.ndim != 1:
        raise ValueError(f"collision must be a 1-D array of N flags, got shape {hit.shape}")
    shape = hit.shape
    v = _state(speed, "speed", shape)
    d = _state(lane_offset, "lane_offset", shape)
    return (
        hit
        | (np.abs(d) > settings.d_max)
        | (v > settings.v_max)
        | _flags(stopped, "stopped", shape)
    )


def synthesize(
    r_clg: ArrayLike,
    speed: ArrayLike,
    lane_offset: ArrayLike,
    heading_error: ArrayLike,
    offset_std: ArrayLike,
    terminal: ArrayLike,
    settings: SynthesisSettings = DEFAULT_SETTINGS,
) -> FloatArray:
    """VLM-RL's synthesised reward of each step, [N] from arrays of N.

        v_des = clip(r_CLG, 0, 1) * v_target
        r     = (1 - |v - v_des| / v_target) * f_c * f_a * f_s
        f_c   = max(1 - |d| / d_max, 0)
        f_a   = max(1 - |theta| / theta_max, 0)
        f_s   = max(1 - sigma_d / sigma_max, 0)

    and r = terminal_penalty where `terminal`. VLM-RL code, clip/clip_rewarded_sac.py
    `_compute_clip_rewards` (the same in clip_rewarded_ppo.py) with the factors of
    carla_env/envs/carla_route_env.py `step`. As in that code, the speed term is not
    clipped: it goes below 0 once v > v_des + v_target (say r_CLG = 0 at 30 km/h gives
    -0.2), while the three factors are clipped at 0. v_des and the speed term use v_target
    alone; v_min and v_max take no part. The code overrides with the environment reward
    where that is negative, which in training is exactly its -10 on terminal steps.

    `speed` in km/h (>= 0); `lane_offset` d in metres, signed or not; `heading_error`
    theta in radians, signed or not; `offset_std` sigma_d in metres (>= 0), the population
    standard deviation of the recent offsets (there: the last 30 steps); `terminal` bool.
    """
    r = np.asarray(r_clg, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"r_clg must be a 1-D array of N values, got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("r_clg must be finite")
    shape = r.shape
    v = _state(speed, "speed", shape)
    d = _state(lane_offset, "lane_offset", shape)
    theta = _state(heading_error, "heading_error", shape)
    sigma = _state(offset_std, "offset_std", shape)
    done = _flags(terminal, "terminal", shape)
    if np.any(v < 0.0):
        raise ValueError("speed must be >= 0 (km/h)")
    if np.any(sigma < 0.0):
        raise ValueError("offset_std must be >= 0 (m)")

    s = settings
    v_des = np.clip(r, 0.0, 1.0) * s.v_target
    r_speed = 1.0 - np.abs(v - v_des) / s.v_target
    f_c = np.maximum(1.0 - np.abs(d) / s.d_max, 0.0)
    f_a = np.maximum(1.0 - np.abs(theta) / math.radians(s.theta_max_deg), 0.0)
    f_s = np.maximum(1.0 - sigma / s.sigma_max, 0.0)
    return np.where(done, s.terminal_penalty, r_speed * f_c * f_a * f_s)
