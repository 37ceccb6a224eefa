"""The scorers of a reward-model stage, and the step rewards made from their scores.

A scorer maps a batch of frames, uint8 [N, H, W, 3], to each frame's r_CLG in [0, 1] (1: the
positive goal; surge/rewards/clg.py). Two kinds, by setting (surge/config/
reward_model_schema.py):

- `reward_model.fn=module:function`: the user's function is the scorer;
- `reward_model.path=DIR`: a Hugging Face CLIP directory, loaded offline with transformers'
  `CLIPModel`; the two goals are embedded once, each batch of frames by the vision tower,
  and r_CLG comes from their contrast. Frames are resized and normalised here with CLIP's
  mean and std (no image processor needed, so a directory saved from a config works).

`step_rewards` turns the scores and the recorded state terms into training rewards for
`reward_model.mode`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from surge.config.reward_model_schema import STATE_KEYS, RewardModelConfig
from surge.errors import ConfigError
from surge.imports import import_object
from surge.rewards.clg import SynthesisSettings, clg_reward, synthesize

Scorer = Callable[[np.ndarray], np.ndarray]
"""frames uint8 [N, H, W, 3] -> r_CLG float [N] in [0, 1]."""

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
"""CLIP's image normalisation (its image processor's defaults)."""


def make_scorer(cfg: RewardModelConfig) -> Scorer | None:
    """The configured scorer; None where the mode scores no frames (`env`, `state`)."""
    if cfg.mode in ("env", "state"):
        return None
    if cfg.fn is not None:
        try:
            fn = import_object(cfg.fn)
        except (ValueError, ImportError, AttributeError) as e:
            raise ConfigError(
                f"reward_model.fn={cfg.fn!r}: {e}",
                "name a function `module:function` importable from the working directory",
            ) from e
        return _checked(fn, cfg.fn)
    assert cfg.path is not None, "validated: fn or path"
    return ClipScorer(cfg.path, cfg.positive, cfg.negative, cfg.threshold)


def check_scorer(cfg: RewardModelConfig) -> None:
    """Before a run: the model a mode scores with can be found (ConfigError otherwise),
    without loading it."""
    if cfg.mode in ("env", "state"):
        return
    if cfg.path is not None:
        check_clip_dir(cfg.path)
    else:
        make_scorer(cfg)  # a function is only imported


def _checked(fn: Callable[[np.ndarray], Any], name: str) -> Scorer:
    def score(frames: np.ndarray) -> np.ndarray:
        out = np.asarray(fn(frames), dtype=np.float32)
        if out.shape != (len(frames),) or not np.all(np.isfinite(out)):
            raise ValueError(
                f"reward_model.fn={name}: returned shape {out.shape} for {len(frames)} frames "
                "(or non-finite values); expected one finite score per frame"
            )
        return out

    return score


def check_clip_dir(path: str) -> None:
    """A ConfigError unless `path` holds a CLIP model's config (read without loading it)."""
    config = Path(path).expanduser() / "config.json"
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"reward_model.path={path}: no readable config.json ({e})",
            "point reward_model.path at a Hugging Face CLIP directory (CLIPModel."
            "save_pretrained), or use reward_model.fn",
        ) from e
    if model_type != "clip":
        raise ConfigError(
            f"reward_model.path={path}: a {model_type!r} model, not a CLIP model",
            "point reward_model.path at a CLIP directory (config.json model_type 'clip')",
        )


class ClipScorer:
    """r_CLG of frames under a CLIP model from a directory (transformers, offline, CPU)."""

    def __init__(self, path: str, positive: str, negative: str, threshold: float) -> None:
        import torch
        from transformers import AutoTokenizer, CLIPModel

        check_clip_dir(path)
        self.torch = torch
        self.model = CLIPModel.from_pretrained(path, local_files_only=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.size = int(self.model.config.vision_config.image_size)
        self.mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
        self.threshold = threshold
        for field, goal in (("positive", positive), ("negative", negative)):
            unknown = tokenizer.unk_token_id
            if unknown is not None and unknown in tokenizer(goal).input_ids:
                words = [w for w in goal.split() if unknown in tokenizer(w).input_ids]
                raise ConfigError(
                    f"reward_model.{field}={goal!r}: {words} are outside the vocabulary of "
                    f"the model at {path}",
                    f"write reward_model.{field} in words the model knows",
                )
        with torch.inference_mode():
            tokens = tokenizer([positive, negative], padding=True, return_tensors="pt")
            goals = _features(self.model.get_text_features(**tokens))
        self.positive, self.negative = goals.numpy().astype(np.float64)

    def embed(self, frames: np.ndarray) -> np.ndarray:
        """Image embeddings [N, D] of uint8 frames [N, H, W, 3]."""
        torch = self.torch
        x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-2:] != (self.size, self.size):
            x = torch.nn.functional.interpolate(
                x, size=(self.size, self.size), mode="bilinear", antialias=True
            )
        with torch.inference_mode():
            features = self.model.get_image_features(pixel_values=(x - self.mean) / self.std)
        return _features(features).numpy().astype(np.float64)

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        embeddings = self.embed(frames)
        return clg_reward(embeddings, self.positive, self.negative, self.threshold).astype(
            np.float32
        )


def _features(out: Any) -> Any:
    """The embedding tensor of a `get_*_features` call (a tensor, or an output holding one
    as `pooler_output`, as transformers 5 returns)."""
    return out if hasattr(out, "numpy") else out.pooler_output


def synthesis_settings(cfg: RewardModelConfig) -> SynthesisSettings:
    return SynthesisSettings(
        v_target=cfg.v_target,
        v_max=max(cfg.v_target, SynthesisSettings.v_max),
        v_min=min(cfg.v_target, SynthesisSettings.v_min),
        d_max=cfg.d_max,
        theta_max_deg=cfg.theta_max_deg,
        sigma_max=cfg.sigma_max,
        terminal_penalty=cfg.terminal_penalty,
    )


def step_rewards(
    cfg: RewardModelConfig,
    scores: np.ndarray | None,
    info: dict[str, np.ndarray],
    terminated: np.ndarray,
) -> np.ndarray:
    """The training rewards [N] of N steps for `cfg.mode`: `clg` the scores themselves,
    `clg+state` VLM-RL's synthesis of the scores with the state terms (`info`, by the names
    of STATE_KEYS), `state` the synthesis with r_CLG = 1. Terminated steps of a synthesis
    get `terminal_penalty`."""
    if cfg.mode == "clg":
        assert scores is not None
        return scores.astype(np.float32)
    n = len(terminated)
    r_clg = np.ones(n) if cfg.mode == "state" else np.asarray(scores, np.float64)
    speed, offset, heading, spread = (np.asarray(info[k], np.float64) for k in STATE_KEYS)
    rewards = synthesize(
        r_clg,
        np.maximum(speed, 0.0),
        offset,
        heading,
        spread,
        terminated,
        synthesis_settings(cfg),
    )
    return rewards.astype(np.float32)
