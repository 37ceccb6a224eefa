"""surge against the libraries users would pick instead, side by side, in one command.

    python3 benchmarks/peers/setup_venvs.py        # once: one venv per peer library
    .venv/bin/python benchmarks/suite.py           # every task and contender (about 1 h)
    .venv/bin/python benchmarks/suite.py --tasks cartpole-throughput --contenders surge,cleanrl \
        --secs 30

Contenders run one at a time (never two at once on the 2 cores), each as a fresh process
launched under benchmarks/peers/memmon.py, which samples RSS and PSS over the whole
process tree every 0.5 s, enforces the time limit and measures the CPU used by everything
else (`foreign_cores`: a busy neighbour makes a run noisy). Every contender's progress ends
up in one JSONL format (episodes and step heartbeats, time since launch), and
benchmarks/peers/analyze.py computes every number from it the same way:

- steps/s: `sps_steady`, env steps per second from 10% to 100% of the run's steps;
- time to solve: seconds from process launch (imports and startup included) until the
  mean return of the last 20 episodes reaches 475 (CartPole-v1's threshold).

Peers write the common log themselves (benchmarks/peers/*.py). surge is run unchanged as
`python -m surge train PRESET key=value ...`; its metrics.jsonl (every `log.interval_s=1`
s) is read while it runs, and each record is placed on the launch clock by its own
Unix `time` (launch time subtracted).
surge's windowed `episode_return_mean` (20 episodes) stands in for the per-episode returns.

After each throughput task surge ran, the limits of the same config: the raw env rate and
the learner's rate alone (benchmarks/suite_limits.py runs benchmarks/limits.py).

Writes benchmarks/results/suite.md (tables), suite.json (every run, raw) and suite.png
(bars, with each contender's ratio to the fastest peer); each run's raw files (stdout,
log.jsonl, mem.json) go to benchmarks/results/suite_runs/, the limits to limits/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
VENVS = ROOT / "benchmarks" / ".venvs"
sys.path.insert(0, str(PEERS))

import analyze  # noqa: E402  (benchmarks/peers, standard library only)
import machine  # noqa: E402  (benchmarks/, next to this file)
import memmon  # noqa: E402
import suite_limits  # noqa: E402

# =====================================================================================
# surge: preset and overrides per task. EDIT HERE when surge's presets change.
# A contender whose preset does not exist (yet) is skipped with a note.
# `stop_return=null total_env_steps=...` makes a throughput run go on until the suite
# stops it with SIGINT at --secs (surge saves a checkpoint and exits); a solve run stops
# itself at the preset's stop_return (475).
# =====================================================================================
CARTPOLE_MATCHED = [  # CleanRL ppo.py's layout: 4 envs x 128 steps, 4 epochs x 4 minibatches
    "workers.actors=1",
    "workers.ring_size=1",
    "workers.envs_per_group=4",
    "ppo.rollout_len=128",
    "ppo.epochs=4",
    "ppo.minibatches=4",
]
# surge's own choices on top of the matched settings: acting overlaps learning (lag 1, V-trace
# corrects for it) and the policy runs inside the actor (no process hop per step).
SURGE_FAST = ["max_policy_lag=1", "workers.inference=inline", "workers.trainer_threads=1"]
UNTIL_STOPPED = ["stop_return=null", "total_env_steps=1000000000"]
ATARI_STICKY = 0.25  # ALE v5's default sticky actions, the same for every contender

SURGE: dict[str, tuple[str, list[str]]] = {
    # task:                (preset,         overrides)
    "cartpole-throughput": ("cartpole-ppo", CARTPOLE_MATCHED + SURGE_FAST + UNTIL_STOPPED),
    "cartpole-solve": ("cartpole-appo", []),  # the default preset (`surge train`), as shipped
    "pong-throughput": (  # CleanRL ppo_atari settings (algo ppo, clip .1, 8 x 128, 4 x 4)
        "pong-ppo",
        SURGE_FAST + UNTIL_STOPPED + [f"env.atari.repeat_action_probability={ATARI_STICKY}"],
    ),
    "pong-appo": (  # the preset already runs lag 1, inline, one trainer thread
        "pong-appo",
        UNTIL_STOPPED + [f"env.atari.repeat_action_probability={ATARI_STICKY}"],
    ),
}

# Extra arguments for a peer in one task, e.g. to match surge's pong-appo batch settings:
# Sample Factory takes its own flags after `--` (they override sf_appo.py's).
PEER_EXTRA: dict[tuple[str, str], list[str]] = {
    # ("pong-appo", "sf"): ["--", "--rollout=64", "--batch_size=512"],
}


@dataclass(frozen=True)
class Task:
    env: str  # cartpole | pong
    mode: str  # throughput: matched settings, fixed time; solve: own settings, until solved
    secs: float  # run time (throughput) or time budget (solve)
    seeds: tuple[int, ...]
    contenders: tuple[str, ...]
    threads: int  # OMP_NUM_THREADS / torch threads of the peers' learners
    note: str = ""


ALL = ("surge", "cleanrl", "sb3", "sf", "rllib", "sb3-default")
PEERS_MATCHED = ALL[:-1]  # sb3-default runs SB3's own defaults: only in the solve task
TASKS: dict[str, Task] = {
    "cartpole-throughput": Task(
        "cartpole",
        "throughput",
        60,
        (1,),
        PEERS_MATCHED,
        1,
        "CleanRL ppo.py settings for every contender",
    ),
    "cartpole-solve": Task(
        "cartpole",
        "solve",
        300,
        (1, 2, 3),
        ALL,
        1,
        "each library's recommended settings; process start included",
    ),
    "pong-throughput": Task(
        "pong",
        "throughput",
        120,
        (1,),
        PEERS_MATCHED,
        2,
        "CleanRL ppo_atari.py settings for every contender",
    ),
    "pong-appo": Task(
        "pong", "throughput", 120, (1,), ("surge", "sf"), 2, "asynchronous PPO, same model/batch"
    ),
}

PEER_SCRIPTS = {
    "cleanrl": ("base", "cleanrl_ppo.py"),
    "sb3": ("base", "sb3_ppo.py"),
    "sf": ("sf", "sf_appo.py"),
    "rllib": ("rllib", "rllib_ppo.py"),
    "sb3-default": ("base", "sb3_ppo.py"),
}
PEER_ARGS = {"sb3-default": ["--defaults"]}  # arguments a contender always gets
LABELS = {
    "surge": "surge",
    "cleanrl": "CleanRL-style PPO",
    "sb3": "Stable-Baselines3 PPO",
    "sf": "Sample Factory 2 APPO",
    "rllib": "RLlib PPO",
    "sb3-default": "Stable-Baselines3 PPO, its defaults",
}
STARTUP_SLACK = 45.0  # seconds past --secs before memmon interrupts a peer that overran
GRACE = 15.0  # SIGINT -> SIGKILL
SOLVED_RETURN = 475.0  # CartPole-v1: mean of the last 20 episodes
NOISY_FOREIGN_CORES = 0.3  # a run during which other processes used this much CPU is noisy


@dataclass
class Run:
    task: str
    contender: str
    seed: int
    status: str = "ok"  # ok | skipped | failed
    note: str = ""
    analysis: dict[str, Any] = field(default_factory=dict)
    mem: dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""

    def row(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "contender": self.contender,
            "seed": self.seed,
            "status": self.status,
            "note": self.note,
            "run_dir": self.run_dir,
            **self.analysis,
            **{k: v for k, v in self.mem.items() if k != "cmd"},
            "cmd": self.mem.get("cmd"),
        }


# ------------------------------------------------------------------------ surge


def find_surge_python(given: str | None) -> str | None:
    candidates = [given] if given else [sys.executable, str(ROOT / ".venv" / "bin" / "python")]
    for py in candidates:
        if py and Path(py).exists():
            ok = subprocess.run(
                [py, "-c", "import surge"], cwd=ROOT, capture_output=True, check=False
            )
            if ok.returncode == 0:
                return py
    return None


def surge_presets(py: str) -> set[str]:
    out = subprocess.run(
        [py, "-m", "surge", "presets"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


class SurgeTail:
    """Reads a surge run's metrics.jsonl while it runs and stamps each record's arrival."""

    def __init__(self, metrics: Path, launched: float) -> None:
        self.metrics, self.launched = metrics, launched
        self.offset = 0
        self.records: list[tuple[float, dict[str, Any]]] = []
        self._partial = ""

    def poll(self, _elapsed: float = 0.0) -> None:
        if not self.metrics.exists():
            return
        with open(self.metrics) as f:
            f.seek(self.offset)
            chunk = f.read()
            self.offset = f.tell()
        arrival = time.time() - self.launched
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                try:
                    self.records.append((arrival, json.loads(line)))
                except ValueError:  # a line cut short by a kill
                    continue

    def common_log(self, path: Path) -> None:
        """Writes the records in the common format, on the launch clock."""
        recs = [(a, r) for a, r in self.records if r.get("wall_time_s") is not None]
        if not recs:
            path.write_text("")
            return
        # Records carry the Unix time they were written at (`time`); older surges only
        # their run time, placed by the earliest arrival seen (late by up to a poll).
        clocked = all(r.get("time") is not None for _, r in recs)
        offset = min(a - float(r["wall_time_s"]) for a, r in recs)
        with open(path, "w") as f:
            for _, r in recs:
                out = {
                    "t": round(
                        float(r["time"]) - self.launched
                        if clocked
                        else float(r["wall_time_s"]) + offset,
                        3,
                    ),
                    "steps": int(r.get("env_steps") or 0),
                    "return_mean": r.get("episode_return_mean"),
                }
                if r.get("episodes") is not None:
                    out["episodes"] = r["episodes"]
                f.write(json.dumps(out) + "\n")


# ------------------------------------------------------------------------ running


def run_one(
    task_name: str,
    task: Task,
    contender: str,
    seed: int,
    out: Path,
    surge_py: str | None,
    presets: set[str],
    quiet_wait: float = 0.0,
) -> Run:
    run = Run(task_name, contender, seed)
    run_dir = out / "suite_runs" / task_name / f"{contender}-s{seed}"
    run.run_dir = str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir)
    log_path = run_dir / "log.jsonl"
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(task.threads),
        MKL_NUM_THREADS=str(task.threads),
        PYTHONUNBUFFERED="1",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
    )
    tail: SurgeTail | None = None
    if contender == "surge":
        if surge_py is None:
            run.status, run.note = "skipped", "surge is not importable (use --surge-python)"
            return run
        preset, overrides = SURGE[task_name]
        if preset not in presets:
            run.status, run.note = "skipped", f"surge preset {preset!r} does not exist yet"
            return run
        surge_run = run_dir / "surge-run"
        cmd = [
            surge_py,
            "-m",
            "surge",
            "train",
            preset,
            *overrides,
            f"seed={seed}",
            f"run_dir={surge_run}",
            "log.interval_s=1",
            "log.progress=false",
        ]
        timeout = task.secs  # throughput: SIGINT at --secs; solve: the time budget
    else:
        venv, script = PEER_SCRIPTS[contender]
        py = VENVS / venv / "bin" / "python"
        if not (VENVS / venv / ".complete").exists():
            run.status = "skipped"
            run.note = f"venv {venv} missing: run benchmarks/peers/setup_venvs.py"
            return run
        cmd = [
            str(py),
            str(PEERS / script),
            f"--env={task.env}",
            f"--mode={task.mode}",
            f"--max-secs={task.secs}",
            f"--log={log_path}",
            f"--seed={seed}",
            f"--threads={task.threads}",
            f"--sticky={ATARI_STICKY}",
            *PEER_ARGS.get(contender, []),
            *PEER_EXTRA.get((task_name, contender), []),
        ]
        timeout = task.secs + STARTUP_SLACK
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "cmd.txt").write_text(" ".join(cmd) + "\n")
    if quiet_wait > 0:
        started_wait = time.monotonic()
        busy = memmon.wait_for_quiet(quiet_wait, NOISY_FOREIGN_CORES)
        waited = time.monotonic() - started_wait
        print(f"[suite] machine busy {busy:.2f} cores before the run (waited {waited:.0f} s)")
    launched = time.time()
    env["PEER_T0"] = repr(launched)
    if contender == "surge":
        tail = SurgeTail(surge_run / "metrics.jsonl", launched)
    print(f"[suite] {task_name} {contender} seed {seed}: {' '.join(cmd)}", flush=True)
    with open(run_dir / "stdout.log", "w") as stdout:
        mem = memmon.run(
            cmd,
            timeout=timeout,
            out=run_dir / "mem.json",
            grace=GRACE,
            env=env,
            cwd=ROOT,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            on_sample=tail.poll if tail else None,
        )
    if tail is not None:
        tail.poll()
        tail.common_log(log_path)
    judge(run, task, mem, log_path)
    if contender == "surge":
        run.analysis["time_shares"] = surge_time_shares(run_dir / "surge-run" / "metrics.jsonl")
    a = run.analysis
    print(
        f"[suite]   sps {a.get('sps_steady')} solved_s {a.get('solved_s')} "
        f"steps {a.get('steps')} PSS {mem['peak_pss_mb']} MB procs {mem['peak_procs']} "
        f"foreign {mem['foreign_cores']} {run.status} {run.note}",
        flush=True,
    )
    return run


TIME_SHARES = ("env", "inference", "learn", "copy", "overhead")


def surge_time_shares(metrics: Path) -> dict[str, float]:
    """Where surge's CPU time went from 10% of the run on (start-up excluded, as for
    steps/s): the mean of the `time_*` shares its trainer logs per window (docs/architecture.md,
    "Where the time goes")."""
    if not metrics.exists():
        return {}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if not records:
        return {}
    start = 0.1 * records[-1]["env_steps"]
    steady = [r for r in records if r["env_steps"] >= start and "time_learn" in r]
    if not steady:
        return {}
    return {k: statistics.mean(r.get(f"time_{k}", 0.0) for r in steady) for k in TIME_SHARES}


def judge(run: Run, task: Task, mem: dict[str, Any], log_path: Path) -> None:
    """Fills a run's analysis, status and note from its memmon result and common log."""
    run.mem = mem
    target = SOLVED_RETURN if task.env == "cartpole" else None
    run.analysis = analyze.analyze(log_path, target=target) if log_path.exists() else {}
    notes = []
    foreign = mem.get("foreign_cores", 0.0)
    if not run.analysis.get("steps"):
        run.status = "failed"
        notes.append(f"no env step logged in {mem['wall_s']:.0f} s (exit {mem['exit_code']})")
    elif mem["exit_code"] not in (0, 130, -2):  # 130 / -2: stopped by SIGINT at --secs
        notes.append(f"exit code {mem['exit_code']}")
    if mem["timed_out"] and run.contender != "surge":
        notes.append("overran: stopped by the harness")
    if task.mode == "solve" and run.analysis.get("solved_s") is None:
        notes.append("not solved")
    if foreign >= NOISY_FOREIGN_CORES:
        notes.append(f"noisy: other processes used {foreign:.1f} cores")
    run.note = "; ".join(notes)


def from_disk(out: Path, tasks: list[str], contenders: list[str]) -> list[Run]:
    """The runs a previous invocation left in out/suite_runs, judged again (--report-only)."""
    runs = []
    for task_name in tasks:
        for run_dir in sorted((out / "suite_runs" / task_name).glob("*-s*")):
            contender, _, seed = run_dir.name.rpartition("-s")
            if contender not in contenders or not (run_dir / "mem.json").exists():
                continue
            run = Run(task_name, contender, int(seed), run_dir=str(run_dir))
            mem = json.loads((run_dir / "mem.json").read_text())
            judge(run, TASKS[task_name], mem, run_dir / "log.jsonl")
            if contender == "surge":
                metrics = run_dir / "surge-run" / "metrics.jsonl"
                run.analysis["time_shares"] = surge_time_shares(metrics)
            runs.append(run)
    return runs


# ------------------------------------------------------------------------ report


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(task_name: str, task: Task, runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for contender in task.contenders:
        mine = [r for r in runs if r.contender == contender]
        if not mine:
            continue
        done = [r for r in mine if r.status == "ok"]
        row: dict[str, Any] = {
            "task": task_name,
            "contender": contender,
            "label": LABELS[contender],
            "runs": len(done),
            "status": "ok" if done else mine[0].status,
            "note": "; ".join(sorted({r.note for r in mine if r.note})),
        }
        sps = [r.analysis["sps_steady"] for r in done if r.analysis.get("sps_steady")]
        row["sps"] = _median(sps)
        solved = [r for r in done if r.analysis.get("solved_s") is not None]
        row["solved"] = f"{len(solved)}/{len(done)}"
        if task.mode == "solve" and done:
            # unsolved runs count as slower than any solved run
            times = sorted(r.analysis["solved_s"] if r in solved else float("inf") for r in done)
            med = statistics.median(times)
            row["solved_s"] = None if med == float("inf") else med
            steps = [r.analysis["solved_steps"] for r in solved]
            row["solved_steps"] = _median(steps) if len(solved) * 2 > len(done) else None
        finals = [
            r.analysis["final_return_mean"]
            for r in done
            if r.analysis.get("final_return_mean") is not None
        ]
        row["final_return"] = _median(finals)
        for key in ("peak_pss_mb", "peak_rss_mb", "peak_procs", "cores_used", "first_step_s"):
            vals = [r.mem.get(key, r.analysis.get(key)) for r in done]
            row[key] = _median([v for v in vals if v is not None])
        shares = [r.analysis["time_shares"] for r in done if r.analysis.get("time_shares")]
        if shares:
            row["time_shares"] = {k: _median([x[k] for x in shares]) for k in TIME_SHARES}
        row["foreign_cores_max"] = max((r.mem.get("foreign_cores", 0) for r in done), default=None)
        rows.append(row)
    peers = [r for r in rows if r["contender"] != "surge" and r["status"] == "ok"]
    if task.mode == "throughput":
        best = max((r["sps"] for r in peers if r["sps"]), default=None)
        for r in rows:
            r["vs_fastest_peer"] = round(r["sps"] / best, 2) if best and r["sps"] else None
    else:
        best = min((r["solved_s"] for r in peers if r.get("solved_s")), default=None)
        for r in rows:
            s = r.get("solved_s")
            r["vs_fastest_peer"] = round(best / s, 2) if best and s else None
    return rows


def _fmt(v: Any, spec: str = ",.0f") -> str:
    if v is None:
        return "–"
    if isinstance(v, float | int):
        return format(v, spec)
    return str(v)


def markdown(
    summary: dict[str, list[dict[str, Any]]],
    runs: list[Run],
    meta: dict[str, Any],
    limits: dict[str, dict[str, Any]],
) -> str:
    lines = [
        "# surge vs peers",
        "",
        f"Measured {meta['date']} on {meta['machine']}; one run at a time. `python "
        f"benchmarks/suite.py {meta['argv']}`.",
        "",
        machine.summary(meta["machine_detail"]) + ".",
        "",
        "steps/s = env steps per second from 10% to 100% of the run's steps. Time to solve = "
        "seconds from process launch until the mean return of the last 20 episodes reaches "
        "475 (median over seeds; an unsolved seed counts as slowest). 'vs fastest peer' is "
        "a speed ratio against the best non-surge contender: steps/s ÷ best steps/s, or "
        "best time ÷ time (>1 = faster). Memory is the peak summed over the process tree "
        "(PSS counts shared pages once). 'foreign' = cores used by other processes on the "
        "machine during the run (noise).",
    ]
    for task_name, rows in summary.items():
        task = TASKS[task_name]
        lines += ["", f"## {task_name}", "", f"{task.env}, {task.mode}: {task.note}.", ""]
        if task.mode == "throughput":
            lines += [
                "| contender | steps/s | vs fastest peer | final return | peak PSS MB "
                "| peak RSS MB | procs | cores used | foreign | note |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for r in rows:
                lines.append(
                    f"| {r['label']} | {_fmt(r.get('sps'))} "
                    f"| {_fmt(r.get('vs_fastest_peer'), '.2f')} "
                    f"| {_fmt(r.get('final_return'), '.1f')} | {_fmt(r.get('peak_pss_mb'))} "
                    f"| {_fmt(r.get('peak_rss_mb'))} | {_fmt(r.get('peak_procs'), '.0f')} "
                    f"| {_fmt(r.get('cores_used'), '.2f')} "
                    f"| {_fmt(r.get('foreign_cores_max'), '.2f')} | {r['note']} |"
                )
        else:
            lines += [
                "| contender | solved | time to solve s | vs fastest peer | steps to solve "
                "| steps/s | peak PSS MB | peak RSS MB | procs | startup s | foreign | note |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            for r in rows:
                lines.append(
                    f"| {r['label']} | {r.get('solved', '–')} | {_fmt(r.get('solved_s'), '.1f')} "
                    f"| {_fmt(r.get('vs_fastest_peer'), '.2f')} | {_fmt(r.get('solved_steps'))} "
                    f"| {_fmt(r.get('sps'))} | {_fmt(r.get('peak_pss_mb'))} "
                    f"| {_fmt(r.get('peak_rss_mb'))} | {_fmt(r.get('peak_procs'), '.0f')} "
                    f"| {_fmt(r.get('first_step_s'), '.1f')} "
                    f"| {_fmt(r.get('foreign_cores_max'), '.2f')} | {r['note']} |"
                )
    surge_sps = {
        t: next((r.get("sps") for r in rows if r["contender"] == "surge"), None)
        for t, rows in summary.items()
    }
    lines += suite_limits.markdown(limits, surge_sps)
    shares = [(t, r) for t, rows in summary.items() for r in rows if r.get("time_shares")]
    if shares:
        lines += [
            "",
            "## Where surge's CPU time goes",
            "",
            "Shares of the CPU time of all surge processes from 10% of the run on (median "
            "over seeds); overhead = everything that is not env stepping, inference or "
            "learning (the copy column is part of it).",
            "",
            "| task | env | inference | learn | copy | overhead |",
            "|---|---|---|---|---|---|",
        ]
        for t, r in shares:
            sh = r["time_shares"]
            lines.append(
                f"| {t} | " + " | ".join(f"{100 * sh[k]:.1f}%" for k in TIME_SHARES) + " |"
            )
    lines += [
        "",
        "## Every run",
        "",
        "| task | contender | seed | status | steps/s | solved s | solved steps | steps "
        "| final return | peak PSS MB | procs | cores | foreign | exit | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        a, m = r.analysis, r.mem
        lines.append(
            f"| {r.task} | {r.contender} | {r.seed} | {r.status} | {_fmt(a.get('sps_steady'))} "
            f"| {_fmt(a.get('solved_s'), '.1f')} | {_fmt(a.get('solved_steps'))} "
            f"| {_fmt(a.get('steps'))} | {_fmt(a.get('final_return_mean'), '.1f')} "
            f"| {_fmt(m.get('peak_pss_mb'))} | {_fmt(m.get('peak_procs'), '.0f')} "
            f"| {_fmt(m.get('cores_used'), '.2f')} | {_fmt(m.get('foreign_cores'), '.2f')} "
            f"| {_fmt(m.get('exit_code'), 'd')} | {r.note} |"
        )
    lines += ["", "## Versions", ""]
    for name, versions in meta["versions"].items():
        lines.append(f"- {name}: {versions}")
    surge_table = ", ".join(
        f"{t}: `{' '.join([p, *o])}`" for t, (p, o) in SURGE.items() if t in summary
    )
    lines += ["", f"surge presets and overrides per task: {surge_table}", ""]
    return "\n".join(lines)


def plot(summary: dict[str, list[dict[str, Any]]], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart"
    tasks = [t for t, rows in summary.items() if any(r["status"] == "ok" for r in rows)]
    if not tasks:
        return "nothing to plot"
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.8 * len(tasks), 4.2), squeeze=False)
    for ax, task_name in zip(axes[0], tasks, strict=True):
        rows = [r for r in summary[task_name] if r["status"] == "ok"]
        throughput = TASKS[task_name].mode == "throughput"
        key = "sps" if throughput else "solved_s"
        names = [r["contender"] for r in rows]
        values = [r.get(key) or 0.0 for r in rows]
        colors = ["tab:red" if n == "surge" else "tab:blue" for n in names]
        bars = ax.bar(names, values, color=colors)
        for bar, r in zip(bars, rows, strict=True):
            ratio = r.get("vs_fastest_peer")
            text = "not solved" if not r.get(key) else (f"x{ratio:.2f}" if ratio else "")
            ax.annotate(
                text,
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_title(task_name)
        ax.set_ylabel(
            "env steps/s (higher is better)" if throughput else "s to solve (lower is better)"
        )
        ax.tick_params(axis="x", labelrotation=30)
    fig.suptitle("surge vs peers (ratio: speed vs the fastest peer)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def versions(surge_py: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    keys = ("torch", "gymnasium", "ale-py", "ale_py", "numpy", "stable", "sample-factory", "ray")
    for venv in ("base", "sf", "rllib"):
        marker = VENVS / venv / ".complete"
        if marker.exists():
            freeze = json.loads(marker.read_text()).get("freeze", [])
            out[f"venv {venv}"] = " ".join(p for p in freeze if p.lower().startswith(keys))
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if surge_py:
        torch_v = subprocess.run(
            [surge_py, "-c", "import torch; print(torch.__version__)"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        out["surge"] = f"git {rev}, torch {torch_v}, python {surge_py}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma list of {list(TASKS)}")
    parser.add_argument("--contenders", default=",".join(ALL), help=f"comma list of {list(ALL)}")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="seeds for every task (default: per task)"
    )
    parser.add_argument("--secs", type=float, help="run time of the throughput tasks")
    parser.add_argument("--solve-secs", type=float, help="time budget of each solve run")
    parser.add_argument(
        "--surge-python", help="Python with surge installed (default: this one, or .venv)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="SECS",
        help="before each run, wait up to SECS for other processes to use < 0.3 cores "
        "(the machine is shared; default 0: do not wait)",
    )
    parser.add_argument(
        "--limits-secs",
        type=float,
        default=10.0,
        help="seconds for each limit (env alone, learner alone) of each throughput task "
        "surge runs; 0 skips the limits",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rebuild suite.md/json/png from the runs already in OUT/suite_runs",
    )
    args = parser.parse_args()

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    bad = [t for t in tasks if t not in TASKS] + [c for c in contenders if c not in ALL]
    if bad:
        parser.error(f"unknown task or contender: {bad}")
    surge_py = find_surge_python(args.surge_python) if "surge" in contenders else None
    presets = surge_presets(surge_py) if surge_py else set()
    args.out.mkdir(parents=True, exist_ok=True)

    runs: list[Run] = []
    summary: dict[str, list[dict[str, Any]]] = {}
    limits: dict[str, dict[str, Any]] = {}
    started = time.time()
    interrupted = False
    for task_name in tasks:
        task = TASKS[task_name]
        secs = args.secs if (args.secs and task.mode == "throughput") else task.secs
        if args.solve_secs and task.mode == "solve":
            secs = args.solve_secs
        seeds = tuple(args.seeds) if args.seeds else task.seeds
        task = Task(
            task.env,
            task.mode,
            secs,
            seeds,
            tuple(c for c in task.contenders if c in contenders),
            task.threads,
            task.note,
        )
        TASKS[task_name] = task
        if args.report_only:
            task_runs = from_disk(args.out, [task_name], list(task.contenders))
        else:
            task_runs = []
            try:
                # Seeds outermost: a slow period hits every contender alike. The order turns
                # around on every other seed, so no contender always runs right after the same
                # other one (a run leaves the page cache and memory in its own state).
                for i, seed in enumerate(seeds):
                    order = task.contenders if i % 2 == 0 else task.contenders[::-1]
                    for contender in order:
                        task_runs.append(
                            run_one(
                                task_name,
                                task,
                                contender,
                                seed,
                                args.out,
                                surge_py,
                                presets,
                                args.quiet_wait,
                            )
                        )
            except KeyboardInterrupt:
                interrupted = True
                print("[suite] interrupted: writing the report of the runs done", flush=True)
        runs += task_runs
        summary[task_name] = summarize(task_name, task, task_runs)
        if interrupted:
            break
        if task.mode == "throughput" and "surge" in task.contenders:
            if args.report_only:
                found = suite_limits.load(args.out, task_name)
            elif surge_py and args.limits_secs > 0:
                preset, overrides = SURGE[task_name]
                found = suite_limits.measure(
                    surge_py, task_name, preset, overrides, args.limits_secs, args.out
                )
            else:
                found = None
            if found:
                limits[task_name] = found

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, {platform.python_version()} "
        f"(suite), Linux {platform.release()}",
        "machine_detail": machine.describe(),
        "argv": " ".join(sys.argv[1:]),
        "wall_s": round(time.time() - started, 1),
        "versions": versions(surge_py),
    }
    (args.out / "suite.md").write_text(markdown(summary, runs, meta, limits))
    report = {"meta": meta, "summary": summary, "limits": limits, "runs": [r.row() for r in runs]}
    (args.out / "suite.json").write_text(json.dumps(report, indent=2) + "\n")
    problem = plot(summary, args.out / "suite.png")
    print((args.out / "suite.md").read_text())
    print(
        f"[suite] wrote {args.out / 'suite.md'}, suite.json"
        + (f" ({problem})" if problem else ", suite.png")
    )
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
