"""Did a change slow surge down? The same training runs on two revisions, back to back.

    .venv/bin/python benchmarks/regression.py --base main               # this tree vs main
    .venv/bin/python benchmarks/regression.py --base v0.1 --head HEAD~3 --rounds 7
    .venv/bin/python benchmarks/regression.py --base HEAD --rounds 2 --secs 15 \
        --tasks cartpole-ppo                                            # the noise floor

`--base REV` is checked out with `git worktree add --detach` into a temporary directory
(removed at the end); `--head` is `worktree` (default: the tree this script lives in,
uncommitted changes included) or another REV, checked out the same way. Both sides run with
this Python (the project's .venv) from their own tree's directory with `PYTHONPATH` set to
that tree, so `import surge` finds that tree's package before the editable install; the
script checks that it does before it measures anything.

Every run is a fresh `python -m surge train PRESET ...` process under
benchmarks/peers/memmon.py (as in suite.py), stopped with SIGINT `--secs` seconds after its
launch. Its rate is the steady one: env steps per second of trainer time between the first
metrics.jsonl record at or after the warm-up (`--warmup`, trainer seconds) and the last
record written before the SIGINT (`log.interval_s=1`), so start-up and shutdown are left
out. `foreign_cores` is the CPU other processes used during the run: at 0.3 cores or more the
run is marked noisy.

Rounds are outermost: each round runs every task once on each side, the two runs of a task
right after each other, base first in even rounds and head first in odd ones (AB BA AB ...),
so drift on the shared machine hits both sides alike and neither always runs second. A
round's ratio is head / base of that pair; the report gives per task the median of the
per-round ratios and their min..max (the spread), also over the quiet rounds only when
some were noisy.

Writes benchmarks/results/regression.md and regression.json (`--out` for another directory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import machine  # noqa: E402  (benchmarks/, next to this file)
import memmon  # noqa: E402  (benchmarks/peers, standard library only)

UNTIL_STOPPED = ["stop_return=null", "total_env_steps=1000000000"]
COMMON = ["log.interval_s=1", "log.progress=false"]
NOISY_FOREIGN_CORES = 0.3  # as suite.py: other processes used this much CPU during the run
GRACE = 15.0  # SIGINT -> SIGKILL


@dataclass(frozen=True)
class Task:
    preset: str
    overrides: tuple[str, ...]
    secs: float  # run time from launch, then SIGINT
    warmup: float  # trainer seconds left out of the rate
    threads: int  # OMP_NUM_THREADS / MKL_NUM_THREADS, as suite.py
    note: str


TASKS: dict[str, Task] = {
    "cartpole-ppo": Task(
        "cartpole-ppo",
        tuple(UNTIL_STOPPED),
        30,
        5,
        1,
        "PPO, remote inference (actor -> policy worker -> trainer): the distributed dataflow",
    ),
    "cartpole-appo": Task(
        "cartpole-appo",
        tuple(UNTIL_STOPPED),
        30,
        5,
        1,
        "the default preset: APPO, lag 1, inline inference",
    ),
    "pong-ppo": Task(
        "pong-ppo",
        tuple(UNTIL_STOPPED),
        90,
        20,
        2,
        "Atari PPO, Nature CNN (opt-in: longer)",
    ),
    "spread-mappo": Task(
        "spread-mappo",
        tuple(UNTIL_STOPPED),
        45,
        10,
        1,
        "multi-agent: MAPPO on MPE spread, agents as rows (opt-in)",
    ),
    "arith-grpo": Task(
        "arith-grpo",
        tuple(UNTIL_STOPPED),
        120,
        45,
        1,
        "LLM RL: asynchronous GRPO on the built-in model, completions per second after its "
        "cached warm start (opt-in: longer)",
    ),
    "countdown-grpo": Task(
        "countdown-grpo",
        tuple(UNTIL_STOPPED),
        120,
        45,
        1,
        "LLM RL: GRPO on Countdown, longer completions than arith-grpo (opt-in: longer)",
    ),
    "cartpole-dqn": Task(
        "cartpole-dqn",
        tuple(UNTIL_STOPPED),
        30,
        5,
        1,
        "replay: DQN at CleanRL's settings (actor -> replay worker -> trainer, 12.8 samples "
        "per insert), bound by the updates (opt-in)",
    ),
    "pendulum-sac": Task(
        "pendulum-sac",
        tuple(UNTIL_STOPPED),
        40,
        10,
        1,
        "replay: SAC, one update per env step, the steps in numpy (opt-in)",
    ),
}
DEFAULT_TASKS = ("cartpole-ppo", "cartpole-appo")


# ------------------------------------------------------------------------ revisions


def git(*args: str, cwd: Path = ROOT) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


@dataclass
class Side:
    name: str  # base | head
    spec: str  # what the user gave: a revision or "worktree"
    tree: Path
    sha: str
    subject: str
    dirty: bool = False  # the working tree has uncommitted changes under surge/
    added: bool = False  # a worktree this script added (removed at the end)

    def label(self) -> str:
        extra = " + uncommitted changes" if self.dirty else ""
        return f"{self.spec} = {self.sha[:10]}{extra} ({self.subject})"


def checkout(name: str, spec: str, tmp: Path) -> Side:
    if spec == "worktree":
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--", "surge", "pyproject.toml"))
        return Side(name, spec, ROOT, sha, git("log", "-1", "--format=%s", sha), dirty)
    sha = git("rev-parse", "--verify", f"{spec}^{{commit}}")
    tree = tmp / name
    git("worktree", "add", "--detach", str(tree), sha)
    return Side(name, spec, tree, sha, git("log", "-1", "--format=%s", sha), added=True)


def remove(side: Side) -> None:
    if side.added:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(side.tree)],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True, check=False)


def side_env(side: Side, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(side.tree), *filter(None, [env.get("PYTHONPATH")])]),
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
    )
    return env


def check_import(side: Side, python: str) -> set[str]:
    """Fails unless `import surge` from this side's setup finds this side's tree; returns
    the presets that tree has."""
    env = side_env(side, 1)
    found = subprocess.run(
        [python, "-c", "import surge; print(surge.__file__)"],
        cwd=side.tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    path = Path(found.stdout.strip() or "?").resolve()
    if found.returncode != 0 or not path.is_relative_to(side.tree.resolve()):
        raise SystemExit(
            f"{side.name}: `import surge` found {path}, not {side.tree} ({found.stderr[-500:]})"
        )
    print(f"[regression] {side.name}: {side.label()}; imports {path}", flush=True)
    # a fresh checkout has no bytecode yet: compile it now, not in the first run's start-up
    subprocess.run(
        [python, "-m", "compileall", "-q", str(side.tree / "surge")],
        capture_output=True,
        check=False,
    )
    out = subprocess.run(
        [python, "-m", "surge", "presets"],
        cwd=side.tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


# ------------------------------------------------------------------------ one run


def steady_rate(metrics: Path, warmup: float, stopped_at: float) -> dict[str, Any]:
    """Env steps per trainer second from the first record at or after `warmup` trainer
    seconds to the last record written before the SIGINT (Unix time `stopped_at`)."""
    records = []
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by the stop
    if records and all("time" in r for r in records):
        records = [r for r in records if r["time"] <= stopped_at]
    else:
        records = records[:-1]  # no Unix clock: drop the record the stop may have written
    window = [r for r in records if r.get("wall_time_s", 0.0) >= warmup]
    result: dict[str, Any] = {
        "records": len(records),
        "env_steps": records[-1]["env_steps"] if records else None,
        "trainer_s": records[-1]["wall_time_s"] if records else None,
        "window_s": None,
        "steps_per_s": None,
    }
    if len(window) >= 2:
        span = window[-1]["wall_time_s"] - window[0]["wall_time_s"]
        if span > 0:
            result["window_s"] = round(span, 2)
            result["steps_per_s"] = (window[-1]["env_steps"] - window[0]["env_steps"]) / span
    return result


def run_one(
    side: Side, task_name: str, task: Task, python: str, workdir: Path, rnd: int
) -> dict[str, Any]:
    run_dir = workdir / f"{task_name}-r{rnd}-{side.name}"
    cmd = [
        python, "-m", "surge", "train", task.preset, *task.overrides, *COMMON,
        f"run_dir={run_dir / 'surge-run'}",
    ]  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    launched = time.time()
    with open(run_dir / "stdout.log", "w") as stdout:
        mem = memmon.run(
            cmd,
            timeout=task.secs,
            grace=GRACE,
            env=side_env(side, task.threads),
            cwd=side.tree,
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )
    rate = steady_rate(run_dir / "surge-run" / "metrics.jsonl", task.warmup, launched + task.secs)
    notes = []
    if rate["steps_per_s"] is None:
        notes.append(f"no steady rate ({rate['records']} records before the stop)")
    if mem["exit_code"] not in (0, 130, -2):  # 130 / -2: stopped by the SIGINT
        notes.append(f"exit code {mem['exit_code']}")
    if mem["foreign_cores"] >= NOISY_FOREIGN_CORES:
        notes.append(f"noisy: other processes used {mem['foreign_cores']:.2f} cores")
    if notes and rate["steps_per_s"] is None:
        tail = (run_dir / "stdout.log").read_text()[-1500:]
        print(f"[regression] {task_name} {side.name} failed; output ends:\n{tail}", flush=True)
    row = {
        "task": task_name,
        "round": rnd,
        "side": side.name,
        **rate,
        "wall_s": mem["wall_s"],
        "cores_used": mem["cores_used"],
        "foreign_cores": mem["foreign_cores"],
        "peak_pss_mb": mem["peak_pss_mb"],
        "exit_code": mem["exit_code"],
        "noisy": mem["foreign_cores"] >= NOISY_FOREIGN_CORES,
        "note": "; ".join(notes),
    }
    sps = row["steps_per_s"]
    print(
        f"[regression] round {rnd} {task_name} {side.name}: "
        f"{'-' if sps is None else f'{sps:,.0f}'} steps/s over {row['window_s']} s, "
        f"foreign {row['foreign_cores']:.2f} cores {row['note']}",
        flush=True,
    )
    return row


# ------------------------------------------------------------------------ report


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def sign_test(k: int, n: int) -> float:
    """Two-sided sign test: the chance of a split at least this uneven if head and base
    were equally fast (each round's ratio as likely below 1 as above)."""
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def summarize(task_name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [r for r in rows if r["task"] == task_name]
    pairs = []
    for rnd in sorted({r["round"] for r in mine}):
        by_side = {r["side"]: r for r in mine if r["round"] == rnd}
        base, head = by_side.get("base"), by_side.get("head")
        if base and head and base["steps_per_s"] and head["steps_per_s"]:
            pairs.append(
                {
                    "round": rnd,
                    "ratio": head["steps_per_s"] / base["steps_per_s"],
                    "noisy": base["noisy"] or head["noisy"],
                }
            )
    ratios = [p["ratio"] for p in pairs]
    quiet = [p["ratio"] for p in pairs if not p["noisy"]]
    slower = sum(r < 1.0 for r in ratios)
    if not ratios:
        verdict = "no complete round"
    else:
        p = sign_test(slower, len(ratios))
        verdict = f"head slower in {slower} of {len(ratios)} rounds (sign test p={p:.2f})"

    def sps(side: str) -> list[float]:
        return [r["steps_per_s"] for r in mine if r["side"] == side and r["steps_per_s"]]

    return {
        "task": task_name,
        "base_sps": _stats(sps("base")),
        "head_sps": _stats(sps("head")),
        "ratio": _stats(ratios),
        "ratio_quiet": _stats(quiet),
        "noisy_rounds": sum(p["noisy"] for p in pairs),
        "pairs": pairs,
        "verdict": verdict,
    }


def _f(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown(
    meta: dict[str, Any], summary: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> str:
    base, head = meta["base"], meta["head"]
    title = "# Regression check: head vs base throughput"
    lines = [title, ""]
    if meta["calibration"]:
        lines += [
            "**Calibration (HEAD vs HEAD): both sides run the same code, so the ratio should "
            "be 1.0 and its spread is this machine's noise floor for these settings. It says "
            "nothing about any change.**",
            "",
        ]
    lines += [
        f"Measured {meta['date']}: `python benchmarks/regression.py {meta['argv']}` "
        f"({meta['rounds']} rounds, {meta['wall_s'] / 60:.0f} min).",
        "",
        f"- base: {base['label']}",
        f"- head: {head['label']}",
        "",
        machine.summary(meta["machine"]) + ".",
        "",
        "steps/s = env steps per trainer second after the warm-up, until the stop (the "
        "steady rate of one fresh `surge train` process). ratio = head / base of the two runs "
        "of one round (run back to back, the order turned around every round); the table "
        "gives the median over rounds and min..max. A run during which other processes used "
        f">= {NOISY_FOREIGN_CORES} cores is noisy; 'quiet' is the median over the rounds "
        "where neither run was. verdict: in how many rounds head was slower, and the "
        "two-sided sign test's p (the chance of a split at least that uneven if both sides "
        "were equally fast; 5 rounds can reach p=0.06 at best, 7 rounds 0.02).",
        "",
        "| task | base steps/s | head steps/s | ratio head/base (median) | min..max | quiet "
        "| rounds (noisy) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        r, q = s["ratio"], s["ratio_quiet"]
        quiet = _f(q["median"], ".3f") + f" ({q['n']})" if s["noisy_rounds"] else "all"
        lines.append(
            f"| {s['task']} | {_f(s['base_sps']['median'], ',.0f')} "
            f"| {_f(s['head_sps']['median'], ',.0f')} | **{_f(r['median'], '.3f')}** "
            f"| {_f(r['min'], '.3f')}..{_f(r['max'], '.3f')} | {quiet} "
            f"| {r['n']} ({s['noisy_rounds']}) | {s['verdict']} |"
        )
    lines += ["", "## Tasks", ""]
    for name in meta["tasks"]:
        t = meta["task_config"][name]
        lines.append(
            f"- `{name}`: {t['note']}; `surge train {t['preset']} "
            f"{' '.join(t['overrides'] + COMMON)}`, {t['secs']:.0f} s per run, warm-up "
            f"{t['warmup']:.0f} s, OMP_NUM_THREADS={t['threads']}"
        )
    lines += [
        "",
        "## Every run",
        "",
        "| round | task | side | steps/s | window s | env steps | cores | foreign | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['round']} | {r['task']} | {r['side']} | {_f(r['steps_per_s'], ',.0f')} "
            f"| {_f(r['window_s'], '.1f')} | {_f(r['env_steps'], ',')} "
            f"| {r['cores_used']:.2f} | {r['foreign_cores']:.2f} | {r['note']} |"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument(
        "--head", default="worktree", help="a revision, or `worktree` (default: this tree)"
    )
    parser.add_argument(
        "--tasks",
        default=",".join(DEFAULT_TASKS),
        help=f"comma list of {list(TASKS)} (default: {','.join(DEFAULT_TASKS)})",
    )
    parser.add_argument("--rounds", type=int, default=5, help="base/head pairs per task")
    parser.add_argument("--secs", type=float, help="seconds per run (default: per task)")
    parser.add_argument("--warmup", type=float, help="trainer seconds left out (per task)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="SECS",
        help="before each run, wait up to SECS for the machine to be idle (< 0.3 busy cores)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories")
    args = parser.parse_args()

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if unknown := [t for t in names if t not in TASKS]:
        parser.error(f"unknown task(s) {unknown}; known: {list(TASKS)}")
    tasks = {
        n: Task(
            TASKS[n].preset,
            TASKS[n].overrides,
            args.secs or TASKS[n].secs,
            TASKS[n].warmup if args.warmup is None else args.warmup,
            TASKS[n].threads,
            TASKS[n].note,
        )
        for n in names
    }
    python = sys.executable
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="surge-regression-"))
    sides: list[Side] = []
    rows: list[dict[str, Any]] = []
    interrupted = False
    try:
        sides = [checkout("base", args.base, tmp), checkout("head", args.head, tmp)]
        presets = {s.name: check_import(s, python) for s in sides}
        for name in list(tasks):
            missing = [s.name for s in sides if tasks[name].preset not in presets[s.name]]
            if missing:
                print(f"[regression] skipping {name}: no such preset on {missing}", flush=True)
                del tasks[name]
        try:
            for rnd in range(args.rounds):
                order = sides if rnd % 2 == 0 else sides[::-1]
                for name, task in tasks.items():
                    for side in order:
                        if args.quiet_wait > 0:
                            waited = time.monotonic()
                            busy = memmon.wait_for_quiet(args.quiet_wait, NOISY_FOREIGN_CORES)
                            print(
                                f"[regression] machine busy {busy:.2f} cores before the run "
                                f"(waited {time.monotonic() - waited:.0f} s)",
                                flush=True,
                            )
                        rows.append(run_one(side, name, task, python, tmp / "runs", rnd))
        except KeyboardInterrupt:
            interrupted = True
            print("[regression] interrupted: reporting the runs done", flush=True)
    finally:
        for side in sides:
            remove(side)
        if args.keep:
            print(f"[regression] runs kept in {tmp / 'runs'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if not rows:
        return 130 if interrupted else 1

    base, head = sides
    summary = [summarize(name, rows) for name in tasks]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "argv": " ".join(sys.argv[1:]),
        "wall_s": round(time.time() - started, 1),
        "rounds": args.rounds,
        "calibration": base.sha == head.sha and not base.dirty and not head.dirty,
        "base": {"spec": base.spec, "sha": base.sha, "subject": base.subject,
                 "dirty": base.dirty, "label": base.label()},
        "head": {"spec": head.spec, "sha": head.sha, "subject": head.subject,
                 "dirty": head.dirty, "label": head.label()},
        "machine": machine.describe(),
        "python": python,
        "tasks": list(tasks),
        "task_config": {
            n: {**t.__dict__, "overrides": list(t.overrides)} for n, t in tasks.items()
        },
    }  # fmt: skip
    text = markdown(meta, summary, rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "regression.md").write_text(text)
    report = {"meta": meta, "summary": summary, "runs": rows}
    (args.out / "regression.json").write_text(json.dumps(report, indent=2) + "\n")
    print(text)
    print(f"[regression] wrote {args.out / 'regression.md'} and regression.json")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
