"""An OpenCLIP model as a scorer of frames (`reward_model.open_clip`), VLM-RL's own choice
(ViT-bigG-14), loaded offline from weights on disk.

Two forms: `NAME:WEIGHTS` (an architecture open_clip knows, e.g. `ViT-bigG-14`, and a weights
file, e.g. `/models/open_clip_pytorch_model.bin`) or `local-dir:DIR` (open_clip's own folder
of `open_clip_config.json` plus weights). open_clip needs a torchvision built for the torch
installed beside it; where it does not import, the run stops before it starts, saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import ConfigError
from surge.rewards.clg import clg_reward
from surge.rewards.clip import CLIP_MEAN, CLIP_STD, pixels

LOCAL_DIR = "local-dir:"


def parse_open_clip(value: str) -> tuple[str, str | None]:
    """(model name as open_clip takes it, weights file or None for `local-dir:`), checking
    that the files are there (ConfigError naming `reward_model.open_clip` otherwise)."""
    if value.startswith(LOCAL_DIR):
        folder = Path(value[len(LOCAL_DIR) :]).expanduser()
        if not (folder / "open_clip_config.json").is_file():
            raise ConfigError(
                f"reward_model.open_clip={value}: {folder} holds no open_clip_config.json",
                "point local-dir: at a folder open_clip saved (config and weights)",
            )
        return value, None
    name, sep, weights = value.partition(":")
    if not sep or not name or not weights:
        raise ConfigError(
            f"reward_model.open_clip={value!r}: expected NAME:WEIGHTS (e.g. "
            "ViT-bigG-14:/models/open_clip_pytorch_model.bin) or local-dir:DIR",
            "name the architecture and the weights file on disk (nothing is downloaded)",
        )
    if not Path(weights).expanduser().is_file():
        raise ConfigError(
            f"reward_model.open_clip={value}: no weights file at {weights}",
            "point it at the model's weights on this machine (nothing is downloaded)",
        )
    return name, str(Path(weights).expanduser())


def import_open_clip() -> Any:
    """The open_clip module, or a ConfigError saying why it does not import here."""
    try:
        import open_clip
    except ImportError as e:
        raise ConfigError(
            f"reward_model.open_clip: open_clip is not installed ({e})",
            "pip install open-clip-torch with a torchvision built for this torch, or use "
            "reward_model.path with a Hugging Face CLIP directory",
        ) from e
    except Exception as e:  # torchvision's compiled operators missing for this torch, ...
        raise ConfigError(
            f"reward_model.open_clip: open_clip does not import here: {type(e).__name__}: "
            f"{e} (open_clip imports torchvision, whose build must match torch: a CUDA "
            "torchvision wheel beside a CPU torch fails this way)",
            "install the torchvision build that matches this torch (its CPU index for a CPU "
            "torch), or use reward_model.path with a Hugging Face CLIP directory",
        ) from e
    return open_clip


def check_open_clip(value: str) -> None:
    """Before a run: the files are there and open_clip imports (without loading weights)."""
    parse_open_clip(value)
    import_open_clip()


class OpenClipScorer:
    """r_CLG of frames under an OpenCLIP model (offline, CPU)."""

    def __init__(
        self,
        value: str,
        positive: str,
        negative: str,
        threshold: float,
        threshold_min: float = 0.0,
    ) -> None:
        import torch

        name, weights = parse_open_clip(value)
        open_clip = import_open_clip()
        self.torch = torch
        model = open_clip.create_model(name, pretrained=weights, load_weights=True)
        self.model = model.eval()
        preprocess = open_clip.get_model_preprocess_cfg(model)
        size = preprocess.get("size", 224)
        self.size = int(size[0] if isinstance(size, (tuple, list)) else size)
        self.mean = torch.tensor(preprocess.get("mean", CLIP_MEAN)).view(1, 3, 1, 1)
        self.std = torch.tensor(preprocess.get("std", CLIP_STD)).view(1, 3, 1, 1)
        self.threshold = threshold
        self.threshold_min = threshold_min
        tokenizer = open_clip.get_tokenizer(name)
        with torch.inference_mode():
            goals = model.encode_text(tokenizer([positive, negative]))
        self.positive, self.negative = goals.float().numpy().astype(np.float64)

    def embed(self, frames: np.ndarray) -> np.ndarray:
        """Image embeddings [N, D] of uint8 frames [N, H, W, 3]."""
        x = pixels(frames, self.size, self.mean, self.std)
        with self.torch.inference_mode():
            return self.model.encode_image(x).float().numpy().astype(np.float64)

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        embeddings = self.embed(frames)
        return clg_reward(
            embeddings, self.positive, self.negative, self.threshold, self.threshold_min
        ).astype(np.float32)
