"""`surge eval RUN`: whole episodes with a run's newest checkpoint, after (or during) training.

The algorithm's plug-in turns the checkpoint's state into the flat vector its trainer
published for that version (`Published`: PPO's weights and statistics in
surge/recipes/ppo.py, DQN's and SAC's networks in theirs), which its acting policy plays with
`play_episodes`, as evaluation workers play during training.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from surge.config.load import load_config
from surge.config.schema import ExperimentConfig
from surge.devices import role_device
from surge.envs.make import probe_policies
from surge.envs.spaces import EnvInfo
from surge.errors import UserError
from surge.evaluation.suite import EvalSuite
from surge.models.acting import ActingPolicy, acting_policy
from surge.seeds import derive_seed
from surge.threads import limit_torch_threads
from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint, require_checkpoint
from surge.tracking.run_dir import policy_home
from surge.tracking.video import write_mp4

Published = Callable[[ExperimentConfig, Any, dict[str, Any]], np.ndarray]
"""A checkpoint's state -> the flat vector its version published."""


def evaluate_with(
    run_dir: Path,
    acting: str,
    published: Published,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int | None = None,
    video: bool = False,
) -> dict[str, Any]:
    """Run `episodes` episodes with the newest checkpoint of any algorithm's run, its acting
    policy (`acting`, models/acting.py) playing the vector `published` makes of it; writes
    `eval.json` too. `video`: the first episode is also recorded to
    `run_dir/videos/eval-v<version>.mp4` (the env rendered with `render_mode="rgb_array"`;
    tracking/video.py)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(f"{run_dir} is not a surge run directory (no config.yaml)")
    if episodes < 1:
        raise UserError(f"episodes={episodes}: expected at least 1")
    cfg, _ = load_config(str(run_dir / "config.yaml"), [])
    checkpoint = require_checkpoint(run_dir, "evaluate")
    state = load_checkpoint(checkpoint)
    suite = EvalSuite(cfg, video)
    env = suite.env
    seed = cfg.seed if seed is None else seed
    spaces = EnvInfo(env.observation_space, env.action_space)
    device = role_device(cfg.eval.device, "eval.device")
    first = acting_policy(acting, spaces, cfg, derive_seed(seed, "eval"), device)
    first.load(published(cfg, env, state))
    policy: ActingPolicy | dict[str, ActingPolicy] = first
    if len(cfg.policy_names) > 1:  # every policy from its own newest checkpoint
        others = _other_policies(cfg, run_dir, seed, acting, published)
        policy = {cfg.policy_names[0]: first, **others}
    limit_torch_threads(1)  # if a CNN (or a checkpoint's tensors) brought torch
    played, rates = suite.play(
        policy, episodes, derive_seed(seed, "eval-env"), deterministic, record_first=video
    )
    suite.close()
    version = int(state["version"])
    result = {
        "checkpoint": str(checkpoint),
        "policy_version": version,
        "env_steps": int(state["env_steps"]),
        "episodes": episodes,
        "deterministic": deterministic,
        "seed": seed,
        "return_mean": played.return_mean,
        "return_std": played.return_std,
        "length_mean": played.length_mean,
        "returns": played.returns,
        **rates,  # self-play: win / draw / loss rates per fixed player
    }
    if played.metrics:  # the env's own measures (driving: success, collision, speed, ...)
        result["metrics"] = played.metric_means
        result["episode_metrics"] = played.metrics
    if video:
        path = run_dir / "videos" / f"eval-v{version:08d}.mp4"
        result["video"] = str(write_mp4(path, played.frames, suite.render_fps))
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2))
    return result


EVAL_OPTIONS = {"episodes": int, "deterministic": bool, "seed": int}
"""`surge eval RUN key=value` options every algorithm takes."""


def evaluate_command(
    run_dir: Path, acting: str, published: Published, options: list[str], video: bool
) -> str:
    """`surge eval RUN [key=value ...]` of a run whose acting policy plays its checkpoints
    (an `Algorithm.evaluate`): `evaluate_with` the options, and the lines it prints."""
    given = parse_options(options, EVAL_OPTIONS)
    return summary(evaluate_with(run_dir, acting, published, **given, video=video))


def summary(result: dict[str, Any]) -> str:
    """The lines `surge eval` prints for an evaluation's result."""
    line = (
        f"{result['episodes']} episodes with policy version {result['policy_version']} "
        f"({result['env_steps']:,} env steps): return {result['return_mean']:.1f} "
        f"+- {result['return_std']:.1f}, length {result['length_mean']:.1f}"
    )
    if result.get("metrics"):
        line += "\n" + ", ".join(f"{k} {v:.3g}" for k, v in result["metrics"].items())
    if "video" in result:
        line += f"\nvideo of the first episode: {result['video']}"
    return line


def _other_policies(
    cfg: ExperimentConfig, run_dir: Path, seed: int, acting: str, published: Published
) -> dict[str, ActingPolicy]:
    """The policies but the first of a multi-agent run, each loaded from the newest
    checkpoint in its home (surge/workers/base.py `policy_home`)."""
    envs = probe_policies(cfg)
    policies: dict[str, ActingPolicy] = {}
    for name in cfg.policy_names[1:]:
        checkpoint = latest_checkpoint(policy_home(run_dir, name))
        if checkpoint is None:
            raise UserError(f"policy {name} of {run_dir} has no checkpoint to evaluate")
        env = envs[name]
        device = role_device(cfg.eval.device, "eval.device")
        policy = acting_policy(acting, env, cfg, derive_seed(seed, "eval", name), device)
        policy.load(published(cfg, env, load_checkpoint(checkpoint)))
        policies[name] = policy
    return policies


def parse_options(items: list[str], kinds: dict[str, type]) -> dict[str, Any]:
    """`surge eval`'s `key=value` options, each of the type `kinds` gives it."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in kinds:
            raise UserError(
                f"eval option {item!r} not understood",
                "use key=value with key one of: " + ", ".join(kinds),
            )
        value = yaml.safe_load(raw)
        if not isinstance(value, kinds[key]) or (kinds[key] is int and isinstance(value, bool)):
            raise UserError(f"eval option {key}: expected {kinds[key].__name__}, got {raw!r}")
        options[key] = value
    return options
