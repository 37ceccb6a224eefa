"""The evaluator: plays whole episodes with a checkpoint's policy and reports their returns."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from surge.algos.normalize import ObsNormalizer, stats_vector
from surge.config.load import load_config
from surge.config.schema import ExperimentConfig
from surge.envs.group import action_converter
from surge.envs.make import make_env
from surge.envs.spaces import split_obs
from surge.errors import UserError
from surge.models.actor_critic import ActorCritic
from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint
from surge.tracking.video import require_av, write_mp4
from surge.workers.base import derive_seed


def frozen_obs_normalizer(
    cfg: ExperimentConfig, obs_space: gym.Space[Any], state: dict[str, Any]
) -> ObsNormalizer | None:
    """The checkpoint's observation statistics, as the policy of its version applied them
    (the float32 values the trainer published); never updated here. None without
    `model.normalize_obs`."""
    if not cfg.model.normalize_obs:
        return None
    saved = state.get("normalizer")
    if saved is None:
        raise UserError(
            "this run normalises observations (model.normalize_obs) but its checkpoint "
            "holds no observation statistics",
            "evaluate a checkpoint written by this version of surge",
        )
    mean = np.asarray(saved["obs_mean"], np.float64)
    var = np.asarray(saved["obs_var"], np.float64)
    normalizer = ObsNormalizer(obs_space, cfg.model.clip_obs)
    normalizer.load(stats_vector(mean, var))
    return normalizer


def evaluate(
    run_dir: Path,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int | None = None,
    video: bool = False,
) -> dict[str, Any]:
    """Run `episodes` episodes with the run's newest checkpoint; writes `eval.json` too.
    `video`: the first episode is also recorded to `run_dir/videos/eval-v<version>.mp4`
    (the env rendered with `render_mode="rgb_array"`; tracking/video.py)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(f"{run_dir} is not a surge run directory (no config.yaml)")
    if episodes < 1:
        raise UserError(f"episodes={episodes}: expected at least 1")
    cfg, _ = load_config(str(run_dir / "config.yaml"), [])
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise UserError(f"{run_dir} has no checkpoint to evaluate")
    state = load_checkpoint(checkpoint)
    torch.set_num_threads(1)
    env_cfg = cfg.env
    if video:
        require_av()  # a UserError naming the extra, before any episode is played
        # Frames go to arrays: pygame-rendered envs need neither a display nor sound (and
        # SDL would otherwise complain on a headless machine).
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        env_cfg = dataclasses.replace(
            env_cfg, kwargs={**env_cfg.kwargs, "render_mode": "rgb_array"}
        )
    env = make_env(env_cfg)
    frames: list[np.ndarray] = []
    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
    model.eval()
    normalizer = frozen_obs_normalizer(cfg, env.observation_space, state)
    generator = torch.Generator().manual_seed(
        derive_seed(cfg.seed if seed is None else seed, "eval")
    )
    to_env = action_converter(env.action_space, cfg.env.clip_actions)
    returns, lengths = [], []
    base_seed = derive_seed(cfg.seed if seed is None else seed, "eval-env")
    for episode in range(episodes):
        obs, _ = env.reset(seed=(base_seed + episode) % 2**31)
        total, steps, done = 0.0, 0, False
        recording = video and episode == 0
        if recording:
            frames.append(env.render())  # type: ignore[arg-type]
        while not done:
            fields = {
                k: np.asarray(v)[None] for k, v in split_obs(obs, env.observation_space).items()
            }
            if normalizer is not None:
                fields = normalizer(fields)
            batch = {k: torch.as_tensor(v) for k, v in fields.items()}
            with torch.inference_mode():
                action, _, _ = model.act(batch, deterministic=deterministic, generator=generator)
            obs, reward, terminated, truncated, _ = env.step(to_env(action[0].numpy()))
            total += float(reward)
            steps += 1
            done = terminated or truncated
            if recording:
                frames.append(env.render())  # type: ignore[arg-type]
        returns.append(total)
        lengths.append(steps)
    env.close()
    result = {
        "checkpoint": str(checkpoint),
        "policy_version": int(state["version"]),
        "env_steps": int(state["env_steps"]),
        "episodes": episodes,
        "deterministic": deterministic,
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "returns": returns,
    }
    if video:
        fps = float(env.metadata.get("render_fps") or 30)
        name = f"eval-v{int(state['version']):08d}.mp4"
        result["video"] = str(write_mp4(run_dir / "videos" / name, frames, fps))
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    return result
