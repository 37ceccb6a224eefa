"""The evaluator: plays whole episodes with a checkpoint's policy and reports their returns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surge.config.load import load_config
from surge.envs.group import action_converter
from surge.envs.make import make_env
from surge.envs.spaces import split_obs
from surge.errors import UserError
from surge.models.actor_critic import ActorCritic
from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint
from surge.workers.base import derive_seed


def evaluate(
    run_dir: Path, episodes: int = 10, deterministic: bool = True, seed: int | None = None
) -> dict[str, Any]:
    """Run `episodes` episodes with the run's newest checkpoint; writes `eval.json` too."""
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
    env = make_env(cfg.env)
    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
    model.eval()
    generator = torch.Generator().manual_seed(
        derive_seed(cfg.seed if seed is None else seed, "eval")
    )
    to_env = action_converter(env.action_space, cfg.env.clip_actions)
    returns, lengths = [], []
    base_seed = derive_seed(cfg.seed if seed is None else seed, "eval-env")
    for episode in range(episodes):
        obs, _ = env.reset(seed=(base_seed + episode) % 2**31)
        total, steps, done = 0.0, 0, False
        while not done:
            batch = {
                k: torch.as_tensor(np.asarray(v))[None]
                for k, v in split_obs(obs, env.observation_space).items()
            }
            with torch.inference_mode():
                action, _, _ = model.act(batch, deterministic=deterministic, generator=generator)
            obs, reward, terminated, truncated, _ = env.step(to_env(action[0].numpy()))
            total += float(reward)
            steps += 1
            done = terminated or truncated
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
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    return result
