"""The controller: turns a config into a running graph on the chosen runtime, and reports.

`train` and `resume` are what `surge train` / `surge resume` call, and the Python API. The
algorithm is a plug-in (surge/recipes/base.py): it prepares the run's context and lays out
its graph; the controller names none, and only launches, watches and reports.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surge.config.algorithms import device_roles
from surge.config.load import dump_yaml, load_config
from surge.config.schema import ExperimentConfig
from surge.devices import check_devices
from surge.devices import describe as describe_devices
from surge.errors import ConfigError, UserError
from surge.recipes import Recipe, algorithm_of
from surge.recipes.base import Algorithm
from surge.runtime.warm import WarmProcess
from surge.streams.control import Control
from surge.tracking.checkpoint import require_checkpoint
from surge.tracking.metrics import read_metrics
from surge.tracking.progress import Progress, Reading, RecentRate
from surge.tracking.run_dir import create_run_dir, discard_run_dir
from surge.workers.base import RunContext
from surge.workers.graph import Graph

RATE_WINDOW_S = 5.0  # the live display's steps/s is measured over this window

# Sections and keys that define what a checkpoint holds: changing them on resume cannot work.
FROZEN_ON_RESUME = ("env", "model", "algo")
CHANGEABLE_ON_RESUME = ("env.max_episode_steps", "env.clip_actions")


@dataclass(frozen=True)
class TrainResult:
    """How a run ended (what `train` and `resume` return): its directory, why it stopped (`solved`,
    `budget`, `time` or `interrupted`), env steps, returns, wall time and the newest evaluation."""

    run_dir: Path
    reason: str  # "solved" | "budget" | "time" | "interrupted"
    env_steps: int
    episode_return_mean: float
    """Mean return of the last `return_window` episodes; NaN when none has ended."""
    wall_time_s: float
    episodes: int = 0
    eval_return_mean: float = math.nan
    """The newest evaluation's mean return (the stop check's, when the run was solved)."""
    eval_return_std: float = math.nan
    eval_episodes: int = 0
    eval_version: int = -1
    """The policy version that evaluation played (-1: none)."""


def train(
    cfg: ExperimentConfig,
    name: str = "run",
    warm: WarmProcess | None = None,
    recipe: Recipe | None = None,
) -> TrainResult:
    """Train from scratch into a new run directory.

    `warm`: a trainer process already started (surge/runtime/warm.py), used by the `local`
    runtime; the caller closes it whatever happens. `recipe`: builds the graph from the
    run's context instead of the algorithm's own (e.g. to add a worker of a new kind)."""
    algorithm = algorithm_of(cfg)
    # before the run directory: a run that cannot start leaves nothing
    check_devices(cfg, algorithm.device_roles)
    run_dir = create_run_dir(cfg, name)
    try:
        ctx = algorithm.prepare(cfg, run_dir, checkpoint=None)
    except BaseException:
        discard_run_dir(run_dir)  # a run that never started leaves nothing behind
        raise
    return _run(algorithm, ctx, warm, recipe)


def resume(run_dir: Path, overrides: list[str], warm: WarmProcess | None = None) -> TrainResult:
    """Continue a run from its newest checkpoint, optionally with changed settings."""
    run_dir = Path(run_dir)
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        raise UserError(
            f"{run_dir} is not a surge run directory (no config.yaml)",
            "pass the directory a `surge train` run created",
        )
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        section = key.split(".")[0]
        if section in FROZEN_ON_RESUME and key not in CHANGEABLE_ON_RESUME:
            raise ConfigError(
                f"{key} cannot change on resume: the checkpoint was trained with it",
                "start a new run with `surge train` instead",
            )
    cfg, _ = load_config(str(config_path), overrides)
    check_devices(cfg, device_roles(cfg))
    checkpoint = require_checkpoint(run_dir, "resume from")
    algorithm = algorithm_of(cfg)
    ctx = algorithm.prepare(cfg, run_dir, checkpoint)
    dump_yaml(cfg, config_path)  # only once the config is known to work
    return _run(algorithm, ctx, warm, None)


def _run(
    algorithm: Algorithm, ctx: RunContext, warm: WarmProcess | None, recipe: Recipe | None
) -> TrainResult:
    """Lay out the graph, launch it on the configured runtime, report."""
    graph = (recipe or algorithm.graph)(ctx)
    _print_header(algorithm, ctx, graph)
    progress = Progress(ctx.cfg.total_env_steps, enabled=ctx.cfg.log.progress)
    try:
        reason = _launch(ctx, graph, ProgressFeed(progress, ctx.start_version), warm)
    finally:
        progress.close()
    result = _result(ctx.run_dir, reason)
    _print_footer(result)
    return result


def _launch(
    ctx: RunContext, graph: Graph, on_tick: Callable[[Control], None], warm: WarmProcess | None
) -> str:
    """Run the graph on the configured runtime until it ends; the trainer's finish reason."""
    usable = (
        ctx.cfg.runtime == "local"  # only local starts its trainer as a process here
        and not graph.shared_imports  # whose workers are forked, not spawned
    )
    if warm is not None and (not usable or warm.name not in graph.channels):
        warm.close()
        warm = None
    if ctx.cfg.runtime == "serial":
        from surge.runtime.serial import run_serial

        return run_serial(ctx, graph, on_tick)
    if ctx.cfg.runtime == "ray":
        from surge.runtime.ray import run_ray

        return run_ray(ctx, graph, on_tick)
    from surge.runtime.local import run_local

    return run_local(ctx, graph, on_tick, warm)


class ProgressFeed:
    """Called on every controller tick: feeds the trainer's progress (shared memory) to the
    display, with steps/s over the last `RATE_WINDOW_S` seconds."""

    def __init__(self, progress: Progress, start_version: int) -> None:
        self.progress = progress
        self.start_version = start_version
        self.rate = RecentRate(RATE_WINDOW_S)

    def __call__(self, control: Control) -> None:
        control.note_controller_cpu()
        p = control.progress()
        if p["policy_version"] <= self.start_version:
            return  # training has not started
        rate = self.rate.update(time.monotonic(), p["env_steps"])
        reading = Reading(
            env_steps=int(p["env_steps"]),
            # None until two updates or a log give a rate: shown as "-", not 0
            steps_per_s=rate if rate is not None else (p["steps_per_s"] or None),
            episode_return_mean=p["episode_return_mean"],
            policy_lag_mean=p["policy_lag_mean"],
            policy_version=int(p["policy_version"]),
            episodes=int(p["episodes"]),
            eval_return_mean=p["eval_return_mean"],
        )
        self.progress.update(reading)


def _result(run_dir: Path, reason: str) -> TrainResult:
    """The run's outcome, from the last training and evaluation records of its metrics."""
    trained = read_metrics(run_dir, rows="training")
    last = trained[-1] if trained else {}
    evaluated = read_metrics(run_dir, rows="eval")
    ev: dict[str, Any] = evaluated[-1] if evaluated else {}
    return TrainResult(
        run_dir=run_dir,
        reason=reason,
        env_steps=int(last.get("env_steps", 0)),
        episode_return_mean=_number(last.get("episode_return_mean")),
        wall_time_s=float(last.get("wall_time_s", 0.0)),
        episodes=int(last.get("episodes", 0)),
        eval_return_mean=_number(ev.get("eval/return_mean", ev.get("eval/accuracy"))),
        eval_return_std=_number(ev.get("eval/return_std")),
        eval_episodes=int(ev.get("eval/episodes", ev.get("eval/problems", 0))),
        eval_version=int(ev.get("eval/policy_version", -1)),
    )


def _number(value: object) -> float:
    """A metric that may be null in metrics.jsonl (e.g. no episode finished yet)."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def _print_header(algorithm: Algorithm, ctx: RunContext, graph: Graph) -> None:
    cfg = ctx.cfg
    subject = algorithm.subject(cfg)
    print(
        f"surge: {cfg.algo} on {subject}, runtime={cfg.runtime}, run_dir={ctx.run_dir}",
        file=sys.stderr,
    )
    for line in algorithm.describe(ctx, graph):
        print(f"  {line}", file=sys.stderr)
    print(f"  {describe_devices(cfg, device_roles(cfg))}", file=sys.stderr)
    if ctx.checkpoint is not None:
        print(f"  resuming from {ctx.checkpoint}", file=sys.stderr)


def _print_footer(result: TrainResult) -> None:
    summary = {
        "solved": "solved",
        "budget": "reached total_env_steps",
        "time": "reached max_train_time_s",
        "interrupted": "interrupted; checkpoint saved, continue with `surge resume "
        f"{result.run_dir}`",
    }.get(result.reason, result.reason)
    episodes = (
        f"{result.episodes:,} episodes, mean return {result.episode_return_mean:.1f}"
        if result.episodes and math.isfinite(result.episode_return_mean)
        else "no episode has ended yet"
    )
    evaluation = ""
    if result.eval_version >= 0 and math.isfinite(result.eval_return_mean):
        spread = (
            f" +- {result.eval_return_std:.1f}" if math.isfinite(result.eval_return_std) else ""
        )
        evaluation = (
            f"; evaluation of version {result.eval_version}: {result.eval_return_mean:.1f}"
            f"{spread} over {result.eval_episodes} episodes"
        )
    print(
        f"surge: {summary}: {result.env_steps:,} env steps in {result.wall_time_s:.1f} s, "
        f"{episodes}{evaluation}",
        file=sys.stderr,
    )
