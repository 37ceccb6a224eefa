"""surge's replay-based algorithms (DQN, SAC) beside a CleanRL-style script and
Stable-Baselines3, side by side, one run at a time.

    .venv/bin/python benchmarks/replay.py                                # every task, seeds 1 2 3
    .venv/bin/python benchmarks/replay.py --tasks dqn-throughput --seeds 1 --secs 60
    .venv/bin/python benchmarks/replay.py --tasks sac-halfcheetah --jobs 2   # returns only
    .venv/bin/python benchmarks/replay.py --tasks sac-halfcheetah --seeds 1 --steps 50000 --tag sps
    .venv/bin/python benchmarks/replay.py --report-only --with-tags sps  # rebuild the report

Tasks (`--tasks`, comma-separated; all by default), each run per seed (`--seeds`, 1 2 3):

- `dqn-throughput`: surge `cartpole-dqn` against peers/cleanrl_dqn.py `--mode throughput`,
  both with CleanRL dqn.py's settings, each for `--secs` (120) wall seconds (surge:
  `max_train_time_s`; the peer: `--max-secs`; memmon interrupts either 60 s later). Steps/s
  in the learning phase: from the first record at or past the 10,000 learning-start steps to
  the run's last record. Target: median surge / median CleanRL >= 2.
- `dqn-solve`: time from process launch until CartPole-v1 is solved, `--solve-secs` (600)
  budget each: surge `cartpole-dqn-fast` (solved: the run ended "solved", its stop check's
  evaluation of the newest version confirmed 475; the time is that `eval/stop_check` row's),
  cleanrl_dqn.py `--mode solve` (CleanRL's settings) and sb3_dqn.py `--mode solve`
  (rl-baselines3-zoo's), both solved when the mean of their last 20 episodes reaches 475. A
  run not solved within the budget counts as the budget (marked `*`). Target: surge's median
  / the faster peer's median <= 0.5.
- `dqn-learning`: surge `cartpole-dqn` for its 500k steps: the final mean of the last 20
  episodes, >= 470 on every seed (CleanRL publishes 488.7 +- 16.1 for its dqn.py).
- `sac-pendulum`: surge `pendulum-sac` (20k steps): the final mean of the last 20 episodes
  and the step at which that mean first reached -250; target: reached within 20k steps on
  every seed. `--peers` adds cleanrl_sac.py and sb3_sac.py (zoo settings) on Pendulum-v1.
- `sac-halfcheetah`: surge `halfcheetah-sac` against cleanrl_sac.py `--env halfcheetah`,
  300k steps each: final mean return (target: surge's mean over seeds >= CleanRL's mean minus
  its population std) and learning-phase steps/s (from 5,000 steps, median of the runs made
  alone; target: ratio >= 1.3).

A dqn-throughput run that reaches CleanRL's 500k steps before `--secs` ends there (its rate
is the same measure). Every number comes from the run's own files, so `--report-only`
rebuilds the report from the run directories at any time.

Each run is a fresh process under peers/memmon.py (peak PSS of the process tree, and
`foreign_cores`: the CPU other processes used meanwhile, >= 0.3 marks a run noisy): surge
as `python -m surge train PRESET key=value ...` in this venv (`log.interval_s=1`; its
metrics.jsonl records carry their Unix `time`, which puts them on the launch clock), the
peers in the `base` venv (peers/setup_venvs.py), writing the common JSONL log
(peers/common.py) with `PEER_T0` = the launch time. `OMP_NUM_THREADS=1` for everyone.
`dqn-throughput` and `dqn-solve` always run one at a time; the other tasks run `--jobs` at
once (default 1): runs made with `--jobs` above 1 shared the cores, so their steps/s is
left out of the ratio (their returns count).

Shorter runs for a check: `--steps N` sets the step budget of the step-budgeted tasks
(dqn-learning, sac-*) for every contender, `--override key=value` (repeatable) goes to every
surge run; a task with such runs reports its numbers but does not judge its targets
(except sac-halfcheetah's steps/s, which a shorter `--steps` still measures).

Run files: benchmarks/results/replay_runs/<task>-<contender>-s<seed>[-<tag>]/ (not
committed): meta.json, stdout.txt (stdout and stderr), mem.json, and surge's run directory
`run/` or the peer's `log.jsonl`. The report, benchmarks/results/replay.md and replay.json,
is built from every untagged run found there; runs made with `--tag T` go to their own
report, replay-T.md and .json (add other tags' runs with `--with-tags`, or one contender's
runs of a tag with `--with-tags T:cleanrl`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "replay_runs"
BASE_VENV = ROOT / "benchmarks" / ".venvs" / "base"
sys.path.insert(0, str(PEERS))

import analyze  # noqa: E402  (benchmarks/peers, standard library only)
import machine  # noqa: E402  (benchmarks/, next to this file)
import memmon  # noqa: E402

SLACK = 60.0
"""Seconds past a run's own limit before memmon interrupts it (SIGINT, SIGKILL 15 s later)."""
NOISY = 0.3
"""A run during which other processes used this many cores is marked noisy."""
SOLVED = 475.0
"""CartPole-v1 is solved at a mean return of 475."""
WINDOW = 20
"""Episodes in every "mean of the last N episodes"."""
CLEANRL_DQN_PUBLISHED = "488.7 +- 16.1"
"""CleanRL's published dqn.py CartPole-v1 return (docs: rl-algorithms/dqn)."""


@dataclass(frozen=True)
class Task:
    preset: str
    """surge's preset."""
    peers: dict[str, list[str]]
    """Peer contender -> its script and the arguments that pick its settings."""
    limit: str
    """What ends a run: `secs` (wall time), `solve` (solved, or the budget), `steps`."""
    steps: int | None = None
    """The step budget (`limit == "steps"`): every contender's total env steps."""
    learn_from: int = 10_000
    """Steps/s is measured from the first record at or past this many env steps."""
    target: float | None = None
    """A return whose first crossing (mean of the last 20 episodes) each run reports."""
    optional_peers: bool = False
    """Peers run only with `--peers`."""
    labels: dict[str, str] = field(default_factory=dict)


TASKS: dict[str, Task] = {
    "dqn-throughput": Task(
        "cartpole-dqn",
        {"cleanrl": ["cleanrl_dqn.py", "--env", "cartpole", "--mode", "throughput"]},
        "secs",
        labels={
            "surge": "surge `cartpole-dqn` (CleanRL dqn.py's settings)",
            "cleanrl": "`cleanrl_dqn.py --mode throughput` (CleanRL dqn.py's settings)",
        },
    ),
    "dqn-solve": Task(
        "cartpole-dqn-fast",
        {
            "cleanrl": ["cleanrl_dqn.py", "--env", "cartpole", "--mode", "solve"],
            "sb3": ["sb3_dqn.py", "--env", "cartpole", "--mode", "solve"],
        },
        "solve",
        target=SOLVED,
        labels={
            "surge": "surge `cartpole-dqn-fast` (confirmed by an evaluation)",
            "cleanrl": "`cleanrl_dqn.py --mode solve` (CleanRL's settings)",
            "sb3": "`sb3_dqn.py --mode solve` (SB3, rl-baselines3-zoo's settings)",
        },
    ),
    "dqn-learning": Task(
        "cartpole-dqn",
        {},
        "steps",
        steps=500_000,
        labels={"surge": "surge `cartpole-dqn` (CleanRL dqn.py's settings)"},
    ),
    "sac-pendulum": Task(
        "pendulum-sac",
        {
            "cleanrl": ["cleanrl_sac.py", "--env", "pendulum"],
            "sb3": ["sb3_sac.py", "--env", "pendulum"],
        },
        "steps",
        steps=20_000,
        learn_from=5_000,
        target=-250.0,
        optional_peers=True,
        labels={
            "surge": "surge `pendulum-sac` (CleanRL's SAC settings)",
            "cleanrl": "`cleanrl_sac.py --env pendulum` (CleanRL's settings)",
            "sb3": "`sb3_sac.py --env pendulum` (SB3, rl-baselines3-zoo's settings)",
        },
    ),
    "sac-halfcheetah": Task(
        "halfcheetah-sac",
        {"cleanrl": ["cleanrl_sac.py", "--env", "halfcheetah"]},
        "steps",
        steps=300_000,
        learn_from=5_000,
        labels={
            "surge": "surge `halfcheetah-sac` (CleanRL's SAC settings)",
            "cleanrl": "`cleanrl_sac.py --env halfcheetah` (CleanRL's settings)",
        },
    ),
}
TIMED = ("dqn-throughput", "dqn-solve")
"""Tasks whose measure is time: always one run at a time."""


# ------------------------------------------------------------------------ running


def run_name(task: str, contender: str, seed: int, tag: str) -> str:
    return f"{task}-{contender}-s{seed}{'-' + tag if tag else ''}"


def limit_s(task: Task, args: argparse.Namespace) -> float:
    """The run's own wall-clock limit (the peers' --max-secs, surge's max_train_time_s)."""
    return {"secs": args.secs, "solve": args.solve_secs, "steps": args.max_secs}[task.limit]


def command(
    name: str, contender: str, seed: int, args: argparse.Namespace, run: Path
) -> tuple[list[str], int | None]:
    """The run's command line and its step budget (None: the settings' own)."""
    task = TASKS[name]
    steps = (args.steps or task.steps) if task.limit == "steps" else None
    limit = limit_s(task, args)
    if contender == "surge":
        cmd = [
            sys.executable, "-m", "surge", "train", task.preset, f"seed={seed}",
            f"run_dir={run / 'run'}", "log.progress=false", "log.interval_s=1",
            f"max_train_time_s={limit:g}",
        ]  # fmt: skip
        if steps is not None:
            cmd.append(f"total_env_steps={steps}")
        return [*cmd, *args.override], steps
    script, *settings = task.peers[contender]
    cmd = [
        str(BASE_VENV / "bin" / "python"), str(PEERS / script), *settings,
        "--max-secs", f"{limit:g}", "--seed", str(seed), "--log", str(run / "log.jsonl"),
    ]  # fmt: skip
    if steps is not None:
        cmd += ["--total-steps", str(steps)]
    return cmd, steps


def run_one(
    name: str, contender: str, seed: int, args: argparse.Namespace, jobs: int, surge_tree: str
) -> Path:
    task = TASKS[name]
    run = RUNS / run_name(name, contender, seed, args.tag)
    run.mkdir(parents=True)
    cmd, steps = command(name, contender, seed, args, run)
    busy = None
    if args.quiet_wait > 0 and jobs == 1:
        busy = round(memmon.wait_for_quiet(args.quiet_wait, NOISY), 2)
    launched = time.time()
    meta = {
        "task": name, "contender": contender, "seed": seed, "tag": args.tag, "jobs": jobs,
        "steps_budget": steps, "limit_s": limit_s(task, args),
        "overrides": args.override if contender == "surge" else [],
        "surge": surge_tree if contender == "surge" else None,
        "launched": launched, "loadavg_at_start": os.getloadavg(), "busy_before": busy,
        "cmd": cmd, "cpu": machine.describe()["cpu"],
    }  # fmt: skip
    (run / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"[replay] {run.name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "PEER_T0": repr(launched),
    }
    with open(run / "stdout.txt", "w") as out:
        mem = memmon.run(
            cmd, timeout=limit_s(task, args) + SLACK, out=run / "mem.json", env=env, cwd=ROOT,
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    row = summarise(run)
    brief = (
        f"steps {row['steps']:,}, steps/s {_fmt(row['sps'])}, final return "
        f"{_fmt(row['final_return'], '.1f')}, solved at {row['solved_at']}, ended {row['ended']}"
        if row
        else ""
    )
    print(
        f"[replay] {run.name}: exit {mem['exit_code']} in {mem['wall_s']} s; {brief}",
        file=sys.stderr,
        flush=True,
    )
    return run


def surge_tree() -> str:
    """The surge this venv imports, with its commit (`+dirty`: uncommitted changes in
    surge/). Read-only git: optional locks off, so the index is never rewritten."""
    import surge

    tree = Path(surge.__file__).resolve().parents[1]
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    git = ["git", "-C", str(tree)]
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, env=env
    )
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", "surge"], capture_output=True, text=True, env=env
    )
    commit = head.stdout.strip() if head.returncode == 0 else "?"
    return f"{tree} @ {commit}{'+dirty' if dirty.stdout.strip() else ''}"


def surge_presets() -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "surge", "presets"], capture_output=True, text=True, cwd=ROOT
    )
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


# ------------------------------------------------------------------------ reading a run


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a kill
    return out


ENDINGS = {
    "surge: solved": "solved",
    "surge: reached total_env_steps": "total steps",
    "surge: reached max_train_time_s": "max time",
    "surge: interrupted": "interrupted",
}


def surge_ending(stdout: Path) -> str:
    """How a surge run ended, from its closing stderr line."""
    text = stdout.read_text(errors="replace") if stdout.exists() else ""
    for line in reversed(text.splitlines()):
        for prefix, ending in ENDINGS.items():
            if line.startswith(prefix):
                return ending
    return "no closing line"


def learning_sps(timeline: list[tuple[float, int]], from_steps: int) -> float | None:
    """Env steps per second from the first record at or past `from_steps` to the record with
    the most steps (None if less than 5 s or no step lies between them)."""
    start = next(((t, s) for t, s in timeline if s >= from_steps), None)
    if start is None:
        return None
    t1, s1 = max(timeline, key=lambda ts: (ts[1], ts[0]))
    if t1 - start[0] < 5.0 or s1 <= start[1]:
        return None
    return (s1 - start[1]) / (t1 - start[0])


def summarise(run: Path) -> dict[str, Any] | None:
    """One run's numbers, from its files (None if it has no meta.json)."""
    if not (run / "meta.json").exists():
        return None
    meta = json.loads((run / "meta.json").read_text())
    mem = json.loads((run / "mem.json").read_text()) if (run / "mem.json").exists() else {}
    task = TASKS.get(meta["task"])
    if task is None:
        return None
    launched = meta["launched"]
    row: dict[str, Any] = {
        "run": run.name,
        **{k: meta[k] for k in ("task", "contender", "seed", "tag", "jobs", "steps_budget")},
        "overrides": meta.get("overrides", []),
        "surge": meta.get("surge"),
        "cpu": meta.get("cpu"),  # runs of one report may come from several sittings
    }
    reached_s = reached_steps = None  # first time the mean of 20 reached the task's target
    solved_s = solved_steps = eval_return = None  # dqn-solve: the run's own solve criterion
    if meta["contender"] == "surge":
        records = read_jsonl(run / "run" / "metrics.jsonl")
        train = [r for r in records if "episode_return_mean" in r]
        timeline = [(r["time"] - launched, int(r["env_steps"])) for r in train]
        last = train[-1] if train else {}
        final = _finite(last.get("episode_return_mean"))
        episodes = int(last.get("episodes", 0))
        ended = surge_ending(run / "stdout.txt")
        if task.target is not None:
            hit = next(
                (
                    r
                    for r in train
                    if r.get("episodes", 0) >= WINDOW
                    and (_finite(r["episode_return_mean"]) or -math.inf) >= task.target
                ),
                None,
            )
            if hit is not None:
                reached_s, reached_steps = hit["time"] - launched, int(hit["env_steps"])
        if meta["task"] == "dqn-solve":
            check = next(
                (
                    r
                    for r in records
                    if r.get("eval/stop_check")
                    and (_finite(r.get("eval/return_mean")) or -math.inf) >= SOLVED
                ),
                None,
            )
            if check is not None and ended == "solved":
                solved_s, solved_steps = check["time"] - launched, int(check["env_steps"])
                eval_return = check["eval/return_mean"]
        replay_ratio = _finite(last.get("replay/ratio"))
    else:
        log = analyze.read_log(run / "log.jsonl") if (run / "log.jsonl").exists() else []
        info = analyze.analyze_records(log, target=task.target, window=WINDOW)
        timeline = [(r["t"], int(r["steps"])) for r in log]
        final = info["final_return_mean"]
        episodes = info["episodes"]
        end = next((r for r in log if r.get("end")), None)
        ended = str(end.get("reason", "?")) if end else "no end record"
        reached_s, reached_steps = info["solved_s"], info["solved_steps"]
        if meta["task"] == "dqn-solve":
            solved_s, solved_steps = reached_s, reached_steps
        replay_ratio = None
    limit = meta["limit_s"]
    if solved_s is not None and solved_s > limit:  # solved, but after the budget
        solved_s = solved_steps = None
    steps = max((s for _, s in timeline), default=0)
    wall = mem.get("wall_s")
    sps = learning_sps(timeline, task.learn_from)
    if meta["task"] == "dqn-solve":
        solved_at = f"{solved_s:.1f} s, {solved_steps:,} steps" if solved_s is not None else "-"
    elif reached_steps is not None:
        solved_at = f"{reached_steps:,} steps"
    else:
        solved_at = "-"
    notes = []
    if mem.get("foreign_cores") is not None and mem["foreign_cores"] >= NOISY:
        notes.append("noisy")
    if meta["jobs"] > 1:
        notes.append(f"{meta['jobs']} at once")
    if mem.get("timed_out"):
        notes.append("stopped by memmon")
    if not mem:
        notes.append("no mem.json (unfinished?)")
    if row["overrides"]:
        notes.append("overrides: " + " ".join(row["overrides"]))
    row.update(
        steps=steps,
        episodes=episodes,
        wall_s=wall,
        sps=round(sps, 1) if sps else None,
        final_return=None if final is None else round(final, 2),
        ended=ended,
        reached_s=None if reached_s is None else round(reached_s, 2),
        reached_steps=reached_steps,
        solved_s=None if solved_s is None else round(solved_s, 2),
        solved_steps=solved_steps,
        eval_return=eval_return,
        solved_at=solved_at,
        replay_ratio=None if replay_ratio is None else round(replay_ratio, 2),
        limit_s=limit,
        foreign_cores=mem.get("foreign_cores"),
        cores_used=mem.get("cores_used"),
        peak_pss_mb=mem.get("peak_pss_mb"),
        exit_code=mem.get("exit_code"),
        note="; ".join(notes),
    )
    return row


# ------------------------------------------------------------------------ report


def _fmt(x: Any, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def verdict(ok: bool | None, why: str = "") -> str:
    if ok is None:
        return f"not judged{': ' + why if why else ''}"
    return "**met**" if ok else "**not met**"


def shortened(task: str, runs: list[dict[str, Any]]) -> str:
    """Why a task's targets are not judged on these runs ('' if they are)."""
    default = TASKS[task].steps
    budgets = sorted({r["steps_budget"] for r in runs if r["steps_budget"] != default})
    why = []
    if budgets:
        why.append(f"step budget {', '.join(f'{b:,}' for b in budgets)}, not {default:,}")
    if any(r["overrides"] for r in runs):
        why.append("surge ran with --override")
    return "; ".join(why)


def by(runs: list[dict[str, Any]], contender: str) -> list[dict[str, Any]]:
    return sorted((r for r in runs if r["contender"] == contender), key=lambda r: r["seed"])


def section_throughput(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    s, c = by(runs, "surge"), by(runs, "cleanrl")
    med = {
        k: _median([r["sps"] for r in v if r["sps"] and r["jobs"] == 1])
        for k, v in (("surge", s), ("cleanrl", c))
    }
    ratio = med["surge"] / med["cleanrl"] if med["surge"] and med["cleanrl"] else None
    why = shortened("dqn-throughput", runs)
    ok = None if ratio is None or why else ratio >= 2.0
    summary = {
        "sps_median": med,
        "ratio": None if ratio is None else round(ratio, 3),
        "target": "surge / CleanRL >= 2",
        "met": ok,
    }
    lines = [
        "Both with CleanRL dqn.py's settings (1 env, replay 10,000, batch 128 every 10 env",
        "steps, target copy every 500 steps, learning from 10,000 steps), each for its",
        "`--secs`. Steps/s: from the first record at or past 10,000 steps (the learning",
        "phase) to the run's last record. `replay/ratio`: surge's samples per inserted step",
        "(CleanRL: 128 / 10 = 12.8).",
        "",
        "| seed | surge steps/s | CleanRL steps/s | ratio | surge replay/ratio |",
        "|---|---|---|---|---|",
    ]
    for seed in sorted({r["seed"] for r in runs}):
        a = next((r for r in s if r["seed"] == seed), None)
        b = next((r for r in c if r["seed"] == seed), None)
        x, y = (a or {}).get("sps"), (b or {}).get("sps")
        lines.append(
            f"| {seed} | {_fmt(x)} | {_fmt(y)} | {_fmt(x / y if x and y else None, '.2f')} "
            f"| {_fmt((a or {}).get('replay_ratio'), '.2f')} |"
        )
    lines += [
        f"| **median** | **{_fmt(med['surge'])}** | **{_fmt(med['cleanrl'])}** "
        f"| **{_fmt(ratio, '.2f')}** | |",
        "",
        f"Target: surge / CleanRL >= 2 (medians): {_fmt(ratio, '.2f')}, {verdict(ok, why)}.",
    ]
    return summary, lines


def section_solve(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    task = TASKS["dqn-solve"]
    contenders = ["surge", *task.peers]
    medians: dict[str, float | None] = {}
    table = []
    for contender in contenders:
        mine = by(runs, contender)
        if not mine:
            continue
        times = [r["solved_s"] if r["solved_s"] is not None else r["limit_s"] for r in mine]
        medians[contender] = _median(times)
        cells = ", ".join(
            f"{_fmt(t, '.1f')}{'' if r['solved_s'] is not None else '*'}"
            for r, t in zip(mine, times, strict=True)
        )
        solved = sum(r["solved_s"] is not None for r in mine)
        table.append(
            f"| {task.labels[contender]} | {cells} | {solved}/{len(mine)} "
            f"| **{_fmt(medians[contender], '.1f')}** |"
        )
    peer = min((m for k, m in medians.items() if k != "surge" and m is not None), default=None)
    fastest = next((k for k, m in medians.items() if k != "surge" and m == peer), None)
    ratio = medians["surge"] / peer if medians.get("surge") and peer else None
    why = shortened("dqn-solve", runs)
    ok = None if ratio is None or why else ratio <= 0.5
    summary = {
        "median_s": medians,
        "faster_peer": fastest,
        "ratio": None if ratio is None else round(ratio, 3),
        "target": "surge median / faster peer median <= 0.5",
        "met": ok,
    }
    lines = [
        "Seconds from process launch until solved, each library with its own recommended",
        "settings. surge: the run ended `solved`, its stop check (an evaluation of the newest",
        "version, greedy) confirmed 475, timed at that evaluation's row; the peers: the mean",
        "of their last 20 training episodes reached 475. `*`: not solved within the budget,",
        "counted as the budget.",
        "",
        "| contender | per seed (s) | solved | median s |",
        "|---|---|---|---|",
        *table,
        "",
        f"Target: surge's median / the faster peer's ({fastest or '-'}) <= 0.5: "
        f"{_fmt(ratio, '.2f')}, {verdict(ok, why)}.",
        "",
        "Per run: steps when solved, and surge's own training mean (the peers' criterion):",
        "",
        "| run | solved s | steps | evaluation | training mean >= 475 at s | ended |",
        "|---|---|---|---|---|---|",
    ]
    for contender in contenders:
        for r in by(runs, contender):
            lines.append(
                f"| {r['run']} | {_fmt(r['solved_s'], '.1f')} | {_fmt(r['solved_steps'])} "
                f"| {_fmt(r['eval_return'], '.1f')} | {_fmt(r['reached_s'], '.1f')} "
                f"| {r['ended']} |"
            )
    return summary, lines


def full_runs(task: str, runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The runs a step-budgeted task's return targets are judged on (those at the task's step
    budget, without --override) and '', or, if there are none, every run and why they are
    not judged."""
    full = [r for r in runs if r["steps_budget"] == TASKS[task].steps and not r["overrides"]]
    return (full, "") if full else (runs, shortened(task, runs))


def basis_line(runs: list[dict[str, Any]], basis: list[dict[str, Any]]) -> str:
    if len(basis) == len(runs):
        return ""
    return f" (on the {len(basis)} of {len(runs)} runs at the task's budget without --override)"


def section_learning(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    basis, why = full_runs("dqn-learning", by(runs, "surge"))
    finals = [r["final_return"] for r in basis]
    known = [f for f in finals if f is not None]
    ok = None if not basis or why else all(f is not None and f >= 470 for f in finals)
    summary = {
        "final_returns": {r["run"]: r["final_return"] for r in basis},
        "mean": statistics.fmean(known) if known else None,
        "std": statistics.pstdev(known) if len(known) > 1 else None,
        "target": "final mean of the last 20 episodes >= 470 on every seed",
        "cleanrl_published": CLEANRL_DQN_PUBLISHED,
        "met": ok,
    }
    lines = [
        "surge `cartpole-dqn` for its whole step budget; the mean of the last 20 episodes",
        f"when the run ends. CleanRL's published figure for dqn.py: {CLEANRL_DQN_PUBLISHED}.",
        "",
        "| run | seed | steps | final return | ended |",
        "|---|---|---|---|---|",
        *(
            f"| {r['run']} | {r['seed']} | {_fmt(r['steps'])} "
            f"| {_fmt(r['final_return'], '.1f')} | {r['ended']} |"
            for r in by(runs, "surge")
        ),
        "",
        f"Mean {_fmt(summary['mean'], '.1f')} +- {_fmt(summary['std'], '.1f')} (population "
        f"std){basis_line(by(runs, 'surge'), basis)}. Target: >= 470 on every "
        f"seed: {verdict(ok, why)}.",
    ]
    return summary, lines


def section_pendulum(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    task = TASKS["sac-pendulum"]
    surge = by(runs, "surge")
    basis, why = full_runs("sac-pendulum", surge)
    reached = [r["reached_steps"] for r in basis]
    ok = None if not basis or why else all(x is not None and x <= 20_000 for x in reached)
    final_ok = all(r["final_return"] is not None and r["final_return"] >= -250 for r in basis)
    summary: dict[str, Any] = {
        "target": "mean of the last 20 episodes >= -250 within 20,000 steps on every seed",
        "met": ok,
        "final_at_least_-250_every_seed": final_ok if basis else None,
    }
    lines = [
        "The mean of the last 20 episodes when the run ends, and the step at which it first",
        "reached -250 (`-`: never).",
        "",
        "| run | contender | steps | final return | -250 reached at step | ended |",
        "|---|---|---|---|---|---|",
    ]
    for contender in ["surge", *task.peers]:
        mine = by(runs, contender)
        summary[contender] = {
            r["run"]: {"final_return": r["final_return"], "reached_steps": r["reached_steps"]}
            for r in (basis if contender == "surge" else mine)
        }
        for r in mine:
            lines.append(
                f"| {r['run']} | {task.labels[contender]} | {_fmt(r['steps'])} "
                f"| {_fmt(r['final_return'], '.1f')} | {_fmt(r['reached_steps'])} "
                f"| {r['ended']} |"
            )
    lines += [
        "",
        f"Target: surge reaches -250 within 20,000 steps on every seed"
        f"{basis_line(surge, basis)}: {verdict(ok, why)} (final mean >= -250 "
        f"on every seed: {'yes' if final_ok and basis else 'no'}).",
    ]
    return summary, lines


def section_halfcheetah(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    stats: dict[str, dict[str, Any]] = {}
    whys = []
    for name in ("surge", "cleanrl"):
        mine = by(runs, name)
        basis, why = full_runs("sac-halfcheetah", mine)
        whys.append(why)
        finals = [r["final_return"] for r in basis if r["final_return"] is not None]
        # steps/s from 5,000 steps on: a shorter --steps still measures it, --override not
        alone = [r["sps"] for r in mine if r["sps"] and r["jobs"] == 1 and not r["overrides"]]
        stats[name] = {
            "runs": len(finals),
            "return_mean": statistics.fmean(finals) if finals else None,
            "return_std": statistics.pstdev(finals) if len(finals) > 1 else None,
            "sps_median_alone": _median(alone),
            "sps_runs": len(alone),
        }
    why = "; ".join(sorted(set(filter(None, whys))))
    ss, cc = stats["surge"], stats["cleanrl"]
    bar = (
        cc["return_mean"] - cc["return_std"]
        if cc["return_mean"] is not None and cc["return_std"] is not None
        else None
    )
    if not why and bar is None:
        why = "too few CleanRL runs for a std"
    ret_ok = None if why or ss["return_mean"] is None else ss["return_mean"] >= bar
    ratio = (
        ss["sps_median_alone"] / cc["sps_median_alone"]
        if ss["sps_median_alone"] and cc["sps_median_alone"]
        else None
    )
    sps_ok = None if ratio is None else ratio >= 1.3
    summary = {
        **stats,
        "return_bar": bar,
        "return_met": ret_ok,
        "sps_ratio": None if ratio is None else round(ratio, 3),
        "sps_met": sps_ok,
        "target": "surge mean return >= CleanRL mean - CleanRL std; steps/s ratio >= 1.3",
    }
    lines = [
        "Both with CleanRL sac_continuous_action.py's settings, 300k steps. Final return: the",
        "mean of the last 20 episodes when the run ends, over the runs at 300k steps without",
        "--override; +- is the population std over them. Steps/s: from 5,000 steps (learning",
        "starts) to the end, median of the runs made alone (shorter `--steps` runs included).",
        "",
        "| contender | runs | final return | steps/s (alone) | runs alone | per run |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("surge", "cleanrl"):
        st = stats[name]
        per = ", ".join(f"{r['run']}: {_fmt(r['final_return'])}" for r in by(runs, name))
        lines.append(
            f"| {TASKS['sac-halfcheetah'].labels[name]} | {st['runs']} "
            f"| {_fmt(st['return_mean'])} +- {_fmt(st['return_std'])} "
            f"| {_fmt(st['sps_median_alone'])} | {st['sps_runs']} | {per} |"
        )
    lines += [
        "",
        f"Target, return: surge's mean {_fmt(ss['return_mean'])} >= CleanRL's mean minus its "
        f"std {_fmt(bar)}: {verdict(ret_ok, why)}.",
        f"Target, steps/s: surge / CleanRL >= 1.3: {_fmt(ratio, '.2f')}, {verdict(sps_ok)}.",
    ]
    return summary, lines


SECTIONS = {
    "dqn-throughput": section_throughput,
    "dqn-solve": section_solve,
    "dqn-learning": section_learning,
    "sac-pendulum": section_pendulum,
    "sac-halfcheetah": section_halfcheetah,
}
TITLES = {
    "dqn-throughput": "DQN throughput on CartPole-v1",
    "dqn-solve": "DQN time to solve CartPole-v1",
    "dqn-learning": "DQN learning on CartPole-v1 (500k steps)",
    "sac-pendulum": "SAC on Pendulum-v1 (20k steps)",
    "sac-halfcheetah": "SAC on HalfCheetah-v5 (300k steps)",
}


def report_paths(tag: str) -> tuple[Path, Path]:
    stem = f"replay-{tag}" if tag else "replay"
    return RESULTS / f"{stem}.md", RESULTS / f"{stem}.json"


def report(tag: str, with_tags: list[str]) -> str:
    """The report of `tag`'s runs and `with_tags`' (`TAG` or `TAG:CONTENDER`, that
    contender's runs only: a peer's seeds beside surge's runs of another setting)."""
    wanted: set[tuple[str, str | None]] = {(tag, None)}  # (tag, None: every contender)
    for entry in with_tags:
        name, _, contender = entry.partition(":")
        wanted.add(("" if name == "untagged" else name, contender or None))
    tags = {t for t, _ in wanted}
    rows = [r for p in sorted(RUNS.glob("*")) if (r := summarise(p)) is not None]
    rows = [
        r for r in rows if any(r["tag"] == t and c in (None, r["contender"]) for t, c in wanted)
    ]
    info = machine.describe()
    summary: dict[str, Any] = {}
    body: list[str] = []
    for name in TASKS:
        mine = [r for r in rows if r["task"] == name]
        if not mine:
            continue
        summary[name], lines = SECTIONS[name](mine)
        body += ["", f"## {TITLES[name]} (`{name}`)", "", *lines]
    trees = sorted({r["surge"] for r in rows if r["surge"]})
    md_path, json_path = report_paths(tag)
    json_path.write_text(
        json.dumps(
            {
                "machine": info,
                "tags": sorted(tags),
                "surge": trees,
                "summary": summary,
                "runs": rows,
            },
            indent=2,
        )  # fmt: skip
        + "\n"
    )
    label = ", ".join(
        (repr(t) if t else "untagged") + (f" ({c}'s runs only)" if c else "")
        for t, c in sorted(wanted, key=lambda tc: (tc[0], tc[1] or ""))
    )
    lines = [
        "# Replay-based algorithms: surge beside CleanRL-style scripts and Stable-Baselines3",
        "",
        machine.summary(info) + " (shared with other jobs: see `foreign`).",
        "",
        "Generated by `benchmarks/replay.py` from the runs in benchmarks/results/replay_runs/"
        f" ({label}); surge: {'; '.join(trees) or '-'}. Each run a fresh process, one at a",
        "time unless its note says otherwise; `OMP_NUM_THREADS=1` for all. Returns are raw",
        "episode returns, the mean of the last 20 episodes.",
    ]
    cpus: dict[str, list[str]] = {}
    for r in rows:
        cpus.setdefault(r["cpu"] or "not recorded", []).append(r["run"])
    if set(cpus) != {info["cpu"]}:  # the runs were not all made on the machine above
        lines += [
            "",
            "The machine above wrote this report; the runs ran on: "
            + "; ".join(f"{cpu}: {', '.join(names)}" for cpu, names in cpus.items())
            + ".",
        ]
    if summary:
        lines += ["", "## Targets", "", "| task | measure | value | target | met |"]
        lines.append("|---|---|---|---|---|")
        for name, s in summary.items():
            lines += target_rows(name, s)
    lines += body
    lines += [
        "",
        "## Runs",
        "",
        "`steps/s`: from the task's learning start (DQN 10,000 steps, SAC 5,000) to the run's",
        "last record. `solved at`: dqn-solve, time since launch and steps when solved;",
        "sac-pendulum, the step at which the mean of 20 first reached -250. `foreign`: cores",
        f"other processes used during the run (>= {NOISY}: noisy).",
        "",
        "| run | contender | seed | steps | wall s | steps/s | final return | solved at "
        "| foreign | peak PSS MB | exit | ended | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['contender']} | {r['seed']} | {_fmt(r['steps'])} "
            f"| {_fmt(r['wall_s'], '.1f')} | {_fmt(r['sps'])} | {_fmt(r['final_return'], '.1f')} "
            f"| {r['solved_at']} | {_fmt(r['foreign_cores'], '.2f')} "
            f"| {_fmt(r['peak_pss_mb'])} | {r['exit_code']} | {r['ended']} | {r['note']} |"
        )
    text = "\n".join(lines) + "\n"
    md_path.write_text(text)
    return text


def _met(ok: bool | None) -> str:
    return "not judged" if ok is None else ("yes" if ok else "no")


def target_rows(name: str, s: dict[str, Any]) -> list[str]:
    if name == "dqn-throughput":
        return [
            f"| {name} | steps/s surge / CleanRL | {_fmt(s['ratio'], '.2f')} | >= 2 "
            f"| {_met(s['met'])} |"
        ]
    if name == "dqn-solve":
        return [
            f"| {name} | median time to solve, surge / {s['faster_peer'] or 'peer'} "
            f"| {_fmt(s['ratio'], '.2f')} | <= 0.5 | {_met(s['met'])} |"
        ]
    if name == "dqn-learning":
        finals = ", ".join(_fmt(v, ".1f") for v in s["final_returns"].values()) or "-"
        return [f"| {name} | final return per seed | {finals} | >= 470 each | {_met(s['met'])} |"]
    if name == "sac-pendulum":
        steps = ", ".join(_fmt(v["reached_steps"]) for v in s["surge"].values()) or "-"
        return [
            f"| {name} | step reaching -250, per seed | {steps} | <= 20,000 each "
            f"| {_met(s['met'])} |"
        ]
    return [
        f"| {name} | final return: surge's mean; CleanRL's mean - std "
        f"| {_fmt(s['surge']['return_mean'])}; {_fmt(s['return_bar'])} | first >= second "
        f"| {_met(s['return_met'])} |",
        f"| {name} | steps/s surge / CleanRL | {_fmt(s['sps_ratio'], '.2f')} | >= 1.3 "
        f"| {_met(s['sps_met'])} |",
    ]


# ------------------------------------------------------------------------ main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated; default: all")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--contenders", default="", help="only these (surge,cleanrl,sb3)")
    p.add_argument("--secs", type=float, default=120.0, help="dqn-throughput run time")
    p.add_argument("--solve-secs", type=float, default=600.0, help="dqn-solve budget")
    p.add_argument("--steps", type=int, help="step budget of dqn-learning and sac-* runs")
    p.add_argument(
        "--max-secs", type=float, default=14400.0, help="wall limit of step-budgeted runs"
    )
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="to surge runs"
    )
    p.add_argument("--peers", action="store_true", help="sac-pendulum: the peers too")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (not dqn-throughput/solve)")
    p.add_argument("--quiet-wait", type=float, default=0.0, help="wait for an idle machine")
    p.add_argument("--tag", default="", help="run directory suffix; its own report")
    p.add_argument(
        "--with-tags",
        default="",
        help="also report these tags' runs (`untagged`: no tag; TAG:CONTENDER: its runs only)",
    )
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown task(s) {unknown}; known: {', '.join(TASKS)}")
    if not args.report_only:
        only = set(filter(None, args.contenders.split(",")))
        plan: list[tuple[str, str, int]] = []
        for name in tasks:
            task = TASKS[name]
            with_peers = args.peers or not task.optional_peers
            contenders = ["surge", *(task.peers if with_peers else [])]
            plan += [(name, c, s) for s in args.seeds for c in contenders if not only or c in only]
        taken = [RUNS / run_name(*x, args.tag) for x in plan]
        taken = [r for r in taken if r.exists()]
        if taken:
            raise SystemExit(
                f"{', '.join(r.name for r in taken)} exist(s): remove, or pass another --tag"
            )
        if any(c != "surge" for _, c, _ in plan) and not (BASE_VENV / ".complete").exists():
            raise SystemExit("no peers' venv: run python3 benchmarks/peers/setup_venvs.py base")
        missing = {TASKS[n].preset for n, c, _ in plan if c == "surge"} - surge_presets()
        if missing:
            raise SystemExit(f"surge has no preset(s) {sorted(missing)}")
        tree = surge_tree()
        for name in tasks:
            todo = [(c, s) for n, c, s in plan if n == name]
            jobs = 1 if name in TIMED else max(1, args.jobs)
            one = functools.partial(run_one, name, args=args, jobs=jobs, surge_tree=tree)
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(one, *zip(*todo, strict=True)))
    print(report(args.tag, [t for t in args.with_tags.split(",") if t]))


if __name__ == "__main__":
    main()
