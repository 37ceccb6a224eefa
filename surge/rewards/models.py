"""The scorers of a reward-model stage, and the step rewards made from their scores.

A scorer maps a batch of frames, uint8 [N, H, W, 3], to each frame's r_CLG in [0, 1] (1: the
positive goal; surge/rewards/clg.py). Four kinds, by setting (surge/config/
reward_model_schema.py):

- `reward_model.fn=module:function`: the user's function is the scorer;
- `reward_model.path=DIR`: a Hugging Face CLIP directory, loaded offline (surge/rewards/
  clip.py);
- `reward_model.open_clip=NAME:WEIGHTS`: an OpenCLIP model (surge/rewards/open_clip_scorer.py);
- neither: the built-in tiny CLIP (surge/rewards/tinyclip.py), trained on highway-env frames
  the first time and cached under `$SURGE_CACHE`.

`step_rewards` turns the scores and the recorded state terms into training rewards for
`reward_model.mode`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from surge.config.reward_model_schema import STATE_KEYS, RewardModelConfig
from surge.errors import ConfigError
from surge.imports import import_object
from surge.rewards.clg import CLG_THRESHOLD, SynthesisSettings, synthesize
from surge.rewards.clip import ClipScorer, check_clip_dir, suggested_thresholds
from surge.rewards.open_clip_scorer import OpenClipScorer, check_open_clip
from surge.rewards.tinyclip import cached_model

Scorer = Callable[[np.ndarray], np.ndarray]
"""frames uint8 [N, H, W, 3] -> r_CLG float [N] in [0, 1]."""


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
    if cfg.open_clip is not None:
        low, high = ramp(cfg, (0.0, CLG_THRESHOLD))
        return OpenClipScorer(cfg.open_clip, cfg.positive, cfg.negative, high, low)
    path = model_dir(cfg)
    low, high = ramp(cfg, suggested_thresholds(path))
    return ClipScorer(path, cfg.positive, cfg.negative, high, low)


def ramp(cfg: RewardModelConfig, suggested: tuple[float, float]) -> tuple[float, float]:
    """r_CLG's (threshold_min, threshold): the settings, else the model's `suggested` ones."""
    low = suggested[0] if cfg.threshold_min is None else cfg.threshold_min
    high = suggested[1] if cfg.threshold is None else cfg.threshold
    if not low < high:
        raise ConfigError(
            f"reward_model.threshold_min={low} must be below reward_model.threshold={high} "
            "(set or taken from the model)",
            "set reward_model.threshold_min below reward_model.threshold",
        )
    return low, high


def model_dir(cfg: RewardModelConfig, log: Callable[[str], None] = lambda text: None) -> str:
    """The CLIP directory frames are scored with: `reward_model.path`, else the built-in tiny
    CLIP's (trained here the first time: about ten minutes on two cores, then cached)."""
    return cfg.path if cfg.path is not None else str(cached_model(log=log))


def check_scorer(
    cfg: RewardModelConfig, log: Callable[[str], None] = lambda text: None, build: bool = True
) -> None:
    """Before a run: the model a mode scores with can be found (ConfigError otherwise),
    without loading it; the built-in tiny CLIP is trained now if it is not cached yet, so
    the run's reward-model worker finds it. Without `build` (only the graph is drawn) the
    built-in model is left alone."""
    if cfg.mode in ("env", "state"):
        return
    if cfg.fn is not None:
        make_scorer(cfg)  # a function is only imported
    elif cfg.open_clip is not None:
        ramp(cfg, (0.0, CLG_THRESHOLD))
        check_open_clip(cfg.open_clip)
    elif cfg.path is not None or build:  # else the built-in model, not trained for a graph
        path = model_dir(cfg, log)
        check_clip_dir(path)
        ramp(cfg, suggested_thresholds(path))


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
