"""The controller: turns a config into a running graph on the chosen runtime, and reports.

`train` and `resume` are what `surge train` / `surge resume` call, and the Python API.
"""

from __future__ import annotations

import importlib.metadata
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from surge.config.load import dump_yaml, load_config
from surge.config.schema import ExperimentConfig
from surge.envs.make import probe_policies
from surge.envs.spaces import EnvInfo
from surge.errors import ConfigError, UserError
from surge.models.images import choose_encoder
from surge.models.normalize import published_stats_size
from surge.models.numpy_policy import layout_size, numpy_layout
from surge.recipes import Recipe, build_graph
from surge.runtime.warm import WarmProcess
from surge.streams.control import Control
from surge.tracking.metrics import read_metrics
from surge.tracking.progress import Progress
from surge.tracking.run_dir import create_run_dir, policy_home
from surge.workers.base import PolicyContext, RunContext
from surge.workers.graph import Graph, WorkerSpec
from surge.workers.learners import backend_name

# Sections and keys that define what a checkpoint holds: changing them on resume cannot work.
RATE_WINDOW_S = 5.0  # the live display's steps/s is measured over this window

FROZEN_ON_RESUME = ("env", "model", "algo")
CHANGEABLE_ON_RESUME = ("env.max_episode_steps", "env.clip_actions")


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    reason: str  # "solved" | "budget" | "time" | "interrupted"
    env_steps: int
    episode_return_mean: float
    """Mean return of the last `return_window` episodes; NaN when none has ended."""
    wall_time_s: float
    episodes: int = 0


def train(
    cfg: ExperimentConfig,
    name: str = "run",
    warm: WarmProcess | None = None,
    recipe: Recipe | None = None,
) -> TrainResult:
    """Train from scratch into a new run directory.

    `warm`: a trainer process already started (surge/runtime/warm.py), used by the `local`
    runtime; the caller closes it whatever happens. `recipe`: builds the graph instead of the
    algorithm's own recipe (surge/recipes), e.g. to add a worker of a new kind."""
    envs = None
    if cfg.algo == "grpo":
        from surge.llm.tasks import task_of

        task_of(cfg)  # fail on a bad task before creating anything
    else:
        envs = probe_policies(cfg)  # fail on a bad env before creating anything
        for env in envs.values():
            choose_encoder(env.observation_space, cfg.model)  # and on images no encoder fits
    run_dir = create_run_dir(cfg, name)
    return _run(cfg, run_dir, checkpoint=None, envs=envs, warm=warm, recipe=recipe)


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
    from surge.tracking.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise UserError(
            f"{run_dir} has no checkpoint to resume from",
            "a checkpoint is written every log.checkpoint_interval_s, at the end and on Ctrl+C",
        )
    return _run(cfg, run_dir, checkpoint=checkpoint, save_config_to=config_path, warm=warm)


def _run(
    cfg: ExperimentConfig,
    run_dir: Path,
    checkpoint: Path | None,
    save_config_to: Path | None = None,
    envs: dict[str, EnvInfo] | None = None,
    warm: WarmProcess | None = None,
    recipe: Recipe | None = None,
) -> TrainResult:
    """Build the graph, launch it on the configured runtime, report."""
    model_dir = None
    policies: dict[str, PolicyContext] = {}
    if cfg.algo == "grpo":
        from surge.llm import setup

        model_dir, env, n_params = setup.prepare(cfg, run_dir, resuming=checkpoint is not None)
        start_version, resumes = _llm_resume_point(checkpoint)
    else:
        envs = envs or probe_policies(cfg)
        first = next(iter(envs))
        env, n_params = envs[first], _count_params(cfg, envs[first])
        start_version, resumes = _resume_point(cfg, env, checkpoint)
        if len(envs) > 1:  # several policies: each its own size, home and resume point
            policies = _policy_contexts(cfg, envs, run_dir, checkpoint)
    if save_config_to is not None:
        dump_yaml(cfg, save_config_to)  # only once the config is known to work
    if policies:
        graph = (recipe or build_graph)(cfg, env, n_params, policies=policies)  # type: ignore[call-arg]
    else:
        graph = (recipe or build_graph)(cfg, env, n_params)
    ctx = RunContext(
        cfg=cfg,
        env=env,
        run_dir=run_dir,
        n_params=n_params,
        start_version=start_version,
        checkpoint=str(checkpoint) if checkpoint else None,
        resumes=resumes,
        model_dir=str(model_dir) if model_dir else None,
        policies=policies,
    )
    learner = (
        "torch" if cfg.algo == "grpo" else backend_name(ctx)
    )  # here, so that a backend the model cannot use fails early
    if learner == "torch":
        learner += f" {importlib.metadata.version('torch')}"
    _print_header(cfg, run_dir, graph.workers, checkpoint, learner)
    progress = Progress(cfg.total_env_steps, enabled=cfg.log.progress)
    try:
        reason = _launch(ctx, graph, ProgressFeed(progress, start_version), warm)
    finally:
        progress.close()
    result = _result(run_dir, reason)
    _print_footer(result)
    return result


def _resume_point(cfg: ExperimentConfig, env: EnvInfo, checkpoint: Path | None) -> tuple[int, int]:
    """(the version to start from, how many times the run has been resumed), after checking
    that the checkpoint fits the network this config builds."""
    if checkpoint is None:
        return 0, 0
    from surge.tracking.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    problem = _misfit(cfg, env, state["model"])
    if problem:
        raise UserError(
            f"{checkpoint} does not fit the network this config builds: {problem}",
            "resume with the env and model settings the run was trained with",
        )
    return int(state["version"]), int(state["resumes"]) + 1


def _policy_contexts(
    cfg: ExperimentConfig, envs: dict[str, EnvInfo], run_dir: Path, checkpoint: Path | None
) -> dict[str, PolicyContext]:
    """Every policy's view, size and resume point; a resumed run finds each policy's newest
    checkpoint in its home (the first policy's is `checkpoint`)."""
    from surge.tracking.checkpoint import latest_checkpoint

    contexts = {}
    for k, (name, env) in enumerate(envs.items()):
        own = checkpoint
        if checkpoint is not None and k > 0:
            own = latest_checkpoint(policy_home(run_dir, name))
            if own is None:
                raise UserError(
                    f"{run_dir} has a checkpoint of policy {cfg.policy_names[0]} but none of "
                    f"policy {name} (in {policy_home(run_dir, name)})",
                    "resume a run whose trainers all wrote a checkpoint",
                )
        start, _ = _resume_point(cfg, env, own)
        contexts[name] = PolicyContext(
            env, _count_params(cfg, env), start, str(own) if own else None
        )
    return contexts


def _llm_resume_point(checkpoint: Path | None) -> tuple[int, int]:
    if checkpoint is None:
        return 0, 0
    from surge.tracking.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    if state.get("kind") != "llm":
        raise UserError(
            f"{checkpoint} was not written by an LLM run (algo: grpo)",
            "resume it with the config it was trained with",
        )
    return int(state["version"]), int(state["resumes"]) + 1


def _launch(
    ctx: RunContext, graph: Graph, on_tick: Callable[[Control], None], warm: WarmProcess | None
) -> str:
    """Run the graph on the configured runtime until it ends; the trainer's finish reason."""
    if warm is not None and (ctx.cfg.runtime != "local" or warm.name not in graph.channels):
        # only the local runtime starts its trainer as a process of this machine, and only
        # a graph with a worker of that name (not LLM RL's) can use it
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
        self.recent: deque[tuple[float, float]] = deque()  # (time, env_steps)

    def __call__(self, control: Control) -> None:
        control.note_controller_cpu()
        p = control.progress()
        if p["policy_version"] <= self.start_version:
            return  # training has not started
        now = time.monotonic()
        self.recent.append((now, p["env_steps"]))
        while now - self.recent[0][0] > RATE_WINDOW_S:
            self.recent.popleft()
        (t0, s0), (t1, s1) = self.recent[0], self.recent[-1]
        self.progress.update(
            env_steps=int(p["env_steps"]),
            # None until two updates or a log give a rate: shown as "-", not 0
            steps_per_s=(s1 - s0) / (t1 - t0) if t1 > t0 else (p["steps_per_s"] or None),
            episode_return_mean=p["episode_return_mean"],
            policy_lag_mean=p["policy_lag_mean"],
            policy_version=int(p["policy_version"]),
            episodes=int(p["episodes"]),
            eval_return_mean=p["eval_return_mean"],
        )


def _result(run_dir: Path, reason: str) -> TrainResult:
    """The run's outcome, from the last metrics record."""
    records = [r for r in read_metrics(run_dir) if "steps_per_s" in r]  # not eval/* rows
    last = records[-1] if records else {}
    return TrainResult(
        run_dir=run_dir,
        reason=reason,
        env_steps=int(last.get("env_steps", 0)),
        episode_return_mean=_number(last.get("episode_return_mean")),
        wall_time_s=float(last.get("wall_time_s", 0.0)),
        episodes=int(last.get("episodes", 0)),
    )


def _misfit(cfg: ExperimentConfig, env: EnvInfo, saved: dict[str, Any]) -> str:
    """Why a checkpoint's model state does not fit the model this config builds ("" if it
    does). MLPs are compared by parameter names and shapes without importing torch."""
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    if layout is not None:
        want = dict(layout.params)
        have = {name: tuple(np.shape(value)) for name, value in saved.items()}
        if want == have:
            return ""
        diff = sorted(set(want.items()) ^ set(have.items()))
        return f"parameters differ: {', '.join(f'{n} {s}' for n, s in diff[:6])}"
    import torch

    from surge.models.actor_critic import ActorCritic

    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    try:
        model.load_state_dict({k: torch.as_tensor(v) for k, v in saved.items()})
    except RuntimeError as e:
        return str(e)
    return ""


def _count_params(cfg: ExperimentConfig, env: EnvInfo) -> int:
    """Size of the published flat vector: the weights, then the observation and value
    statistics (models/normalize.py). MLP policies are counted without importing torch (the
    controller stays small: it only watches); other models are built once to count."""
    m = cfg.model
    stats = published_stats_size(env.observation_space, m.normalize_obs, m.value_norm)
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    if layout is not None:
        return layout_size(layout) + stats
    from surge.models.actor_critic import ActorCritic
    from surge.models.weights import count_params

    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    return count_params(model) + stats


def _number(value: object) -> float:
    """A metric that may be null in metrics.jsonl (e.g. no episode finished yet)."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def _print_header(
    cfg: ExperimentConfig,
    run_dir: Path,
    workers: list[WorkerSpec],
    checkpoint: Path | None,
    learner: str,
) -> None:
    names = ", ".join(s.name for s in workers)
    on = cfg.task.name if cfg.algo == "grpo" else cfg.env.id
    print(f"surge: {cfg.algo} on {on}, runtime={cfg.runtime}, run_dir={run_dir}", file=sys.stderr)
    if cfg.algo == "grpo":
        r = cfg.rollout
        print(
            f"  workers: {names}; {r.prompts_per_batch} prompts x {r.group_size} completions "
            f"per batch; max_policy_lag={cfg.max_policy_lag}; interrupt={r.interrupt}; "
            f"loss {cfg.grpo.loss}",
            file=sys.stderr,
        )
    else:
        _print_env_workers(cfg, names, learner)
    if checkpoint is not None:
        print(f"  resuming from {checkpoint}", file=sys.stderr)


def _print_env_workers(cfg: ExperimentConfig, names: str, learner: str) -> None:
    w = cfg.workers
    print(
        f"  workers: {names}; {cfg.total_envs} envs ({w.actors} actors x {w.ring_size} groups x "
        f"{w.envs_per_group}); max_policy_lag={cfg.max_policy_lag}; inference {w.inference}; "
        f"learner {learner}",
        file=sys.stderr,
    )


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
    print(
        f"surge: {summary}: {result.env_steps:,} env steps in {result.wall_time_s:.1f} s, "
        f"{episodes}",
        file=sys.stderr,
    )
