"""A Hugging Face CLIP directory as a scorer of frames, loaded offline with transformers'
`CLIPModel`: the two language goals are embedded once, each batch of frames by the vision
tower, and r_CLG comes from their contrast (surge/rewards/clg.py). Frames are resized and
normalised here with CLIP's mean and std (no image processor needed, so a directory saved
from a config works, as the built-in tiny CLIP's is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import ConfigError
from surge.rewards.clg import CLG_THRESHOLD, clg_reward

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
"""CLIP's image normalisation (its image processor's defaults)."""


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

    def __init__(
        self,
        path: str,
        positive: str,
        negative: str,
        threshold: float,
        threshold_min: float = 0.0,
    ) -> None:
        import torch
        from transformers import AutoTokenizer, CLIPModel
        from transformers.utils import logging

        logging.disable_progress_bar()  # a run's log is no place for a loading bar

        check_clip_dir(path)
        self.torch = torch
        self.model = CLIPModel.from_pretrained(path, local_files_only=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.size = int(self.model.config.vision_config.image_size)
        self.mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
        self.threshold = threshold
        self.threshold_min = threshold_min
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
        x = pixels(frames, self.size, self.mean, self.std)
        with self.torch.inference_mode():
            features = self.model.get_image_features(pixel_values=x)
        return _features(features).numpy().astype(np.float64)

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        embeddings = self.embed(frames)
        return clg_reward(
            embeddings, self.positive, self.negative, self.threshold, self.threshold_min
        ).astype(np.float32)


def pixels(frames: np.ndarray, size: int, mean: Any, std: Any) -> Any:
    """uint8 frames [N, H, W, 3] as a vision tower's input: [N, 3, size, size] floats,
    resized (bilinear, antialiased) and normalised with `mean` and `std` ([1, 3, 1, 1])."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    if x.shape[-2:] != (size, size):
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True)
    return (x - mean) / std


def _features(out: Any) -> Any:
    """The embedding tensor of a `get_*_features` call (a tensor, or an output holding one
    as `pooler_output`, as transformers 5 returns)."""
    return out if hasattr(out, "numpy") else out.pooler_output


def suggested_thresholds(path: str) -> tuple[float, float]:
    """The (threshold_min, threshold) of r_CLG's ramp a model directory suggests for its own
    contrasts. The built-in tiny CLIP's `tiny_clip.json` holds them measured on held-out
    frames: the median z of the frames without a crash (an ordinary frame scores 1 at and
    below it, a frame nearer the negative goal less) and the median z of crashed frames (0
    from there). Any other directory gets VLM-RL's (0, 0.03), which fit ViT-bigG-14's
    cosines."""
    record = Path(path).expanduser() / "tiny_clip.json"
    if record.is_file():
        saved = json.loads(record.read_text())
        low, high = float(saved["heldout_z_other_median"]), float(saved["threshold"])
        # an undertrained model (a few steps, in tests) may rank ordinary frames above
        # crashes: it has no ramp of its own, so it gets the authors' floor
        return (low if low < high else 0.0), high
    return 0.0, CLG_THRESHOLD
