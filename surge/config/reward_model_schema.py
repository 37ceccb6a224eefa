"""Config section of a model-as-reward stage (`reward_model`, docs/reward-models.md): a worker
between the actors and the replay that scores each step's camera frame with a
vision-language model and writes the step's reward (VLM-RL, Huang et al. 2024).

Part of the experiment config (surge/config/schema.py imports it); documented the same way,
by the string under each field (docs/configuration.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from surge.config.rules import AT_LEAST_ONE, FINITE_OR_NULL, POSITIVE, or_null, ruled

RewardMode = Literal["env", "clg", "clg+state", "state"]

STATE_KEYS = ("speed_kmh", "lane_offset", "heading_error", "lane_offset_std")
"""The vehicle's state terms the synthesis reads from each step's info (surge/envs/driving.py
records them), by these names."""


@dataclass
class RewardModelConfig:
    """Where each step's training reward comes from, and the model that scores frames."""

    mode: RewardMode = "env"
    """`env`: the env's own reward (no reward-model worker). `clg`: the contrasting-language-
    goal reward of the step's frame, r_CLG in [0, 1]. `clg+state`: VLM-RL's synthesis of
    r_CLG with the vehicle's state (speed towards r_CLG x `v_target`, lane centring, heading,
    steadiness; surge/rewards/clg.py `synthesize`). `state`: the synthesis with r_CLG = 1
    (no model). Terminal steps of the synthesis get `terminal_penalty`."""

    batch_size: int = ruled(64, AT_LEAST_ONE)
    """Most frames scored in one call of the model (VLM-RL scores each 64-step collection).
    The worker scores whatever waits whenever it is free: frames pile up into full batches
    while a slow model works, and a fast one keeps up a segment at a time."""

    max_pending: int = ruled(2, AT_LEAST_ONE)
    """Segments per env group that may wait for scoring. An actor writes its next segment
    while earlier ones are scored, and waits (logged as the actor's wait) only when the
    model has fallen behind and all its slots are unscored; no frame is dropped. A slow
    model wants room for a batch: segment_len x envs per group x max_pending >=
    batch_size."""

    fn: str | None = None
    """`module:function` scoring frames: uint8 [N, H, W, 3] -> float [N], each the frame's
    r_CLG in [0, 1] (1: the goal state). Instead of a model directory."""

    path: str | None = None
    """A Hugging Face CLIP directory (config.json, weights, tokenizer), loaded offline: frames
    and goals are embedded with it and scored by their contrast. Neither `fn` nor `path`: the
    built-in tiny CLIP, trained on highway-env frames the first time (about ten minutes on
    two cores) and cached under `$SURGE_CACHE` (surge/rewards/tinyclip.py); it knows
    highway-env's look and its captions' words only."""

    open_clip: str | None = None
    """An OpenCLIP model, loaded offline: `NAME:WEIGHTS` (an architecture open_clip knows and
    its weights file, e.g. `ViT-bigG-14:/models/open_clip_pytorch_model.bin`, VLM-RL's model)
    or `local-dir:DIR` (a folder open_clip saved). Needs open-clip-torch with a torchvision
    built for this torch; where it does not import, the run stops before it starts."""

    frame_key: str = "frame"
    """The info entry holding each step's frame (it must be among `env.info_keys`)."""

    positive: str = "The road is clear with no car accidents"
    """The positive language goal (VLM-RL's)."""

    negative: str = "Two cars have collided with each other on the road"
    """The negative language goal (VLM-RL's)."""

    threshold: float | None = ruled(None, or_null(POSITIVE))
    """The contrast z = cos(frame, negative) - cos(frame, positive) at which r_CLG reaches 0
    (r_CLG = 1 - (clip(z, m, threshold) - m) / (threshold - m), m: `threshold_min`). None:
    the model's own, where its directory suggests one (the built-in tiny CLIP's, measured on
    held-out frames), else VLM-RL's 0.03 (which fits ViT-bigG-14's cosines)."""

    threshold_min: float | None = ruled(None, FINITE_OR_NULL)
    """The contrast at and below which r_CLG is 1 (below `threshold`). None: the model's
    own, where its directory suggests one (the built-in tiny CLIP's: the held-out median z
    of frames without a crash, so frames nearer the negative goal than an ordinary one
    score less, as cars close ahead do), else VLM-RL's 0."""

    v_target: float = ruled(25.0, POSITIVE)
    """km/h: the speed asked for when r_CLG = 1 (the synthesis; VLM-RL's code)."""

    d_max: float = ruled(3.0, POSITIVE)
    """m: the lane offset at which the centring factor reaches 0."""

    theta_max_deg: float = ruled(90.0, POSITIVE)
    """Degrees: the heading error at which the heading factor reaches 0."""

    sigma_max: float = ruled(0.4, POSITIVE)
    """m: the standard deviation of recent lane offsets at which the steadiness factor
    reaches 0."""

    terminal_penalty: float = -10.0
    """The synthesis's reward on a terminal step (a crash, leaving the road)."""
