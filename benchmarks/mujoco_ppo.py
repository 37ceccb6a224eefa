"""surge's halfcheetah-ppo (or hopper-ppo) beside a CleanRL-style continuous PPO, same settings.

    .venv/bin/python benchmarks/mujoco_ppo.py                        # HalfCheetah, 1M steps, seed 1
    .venv/bin/python benchmarks/mujoco_ppo.py --seeds 1 2 3 --jobs 2 # 3 seeds, 2 at a time
    .venv/bin/python benchmarks/mujoco_ppo.py --steps 100000 --tag sps # a shorter steps/s check
    .venv/bin/python benchmarks/mujoco_ppo.py --report-only          # rebuild the report

Each run is a fresh process under peers/memmon.py (which also measures `foreign_cores`: the
CPU other processes used meanwhile): surge as `python -m surge train PRESET` in this venv,
the peer as peers/cleanrl_ppo_continuous.py in the peers' `base` venv (peers/setup_venvs.py).
Both use CleanRL's ppo_continuous_action settings (1 env, 2048 steps a batch, 10 epochs of
32 minibatches, obs and reward normalisation, clip 10). Run files go to
benchmarks/results/mujoco_runs/<contender>-<env>-s<seed>[-tag]/ (not committed); the report
to benchmarks/results/mujoco.md and mujoco.json, built from every run found there.

- steps/s: env steps per second from 10% of the run's steps to its end (startup excluded;
  peers/analyze.py's `sps_steady`), and total steps over the process's wall time. Runs made
  with `--jobs` above 1 shared the cores with each other: their steps/s is marked as such
  and left out of the ratio.
- final return: mean of the last 20 episodes' raw returns (surge: the `episode_return_mean`
  of its last metrics record, the same window).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "mujoco_runs"
sys.path.insert(0, str(PEERS))

import analyze  # noqa: E402  (benchmarks/peers, standard library only)
import machine  # noqa: E402  (benchmarks/, next to this file)
import memmon  # noqa: E402

PRESETS = {"halfcheetah": "halfcheetah-ppo", "hopper": "hopper-ppo"}
CONTENDERS = ("surge", "cleanrl")
MILESTONES = (100_000, 250_000, 500_000, 750_000, 1_000_000)
"""Env steps at which the report gives each run's mean return of the last 20 episodes."""
BATCH = 2048
"""A run "reached" N steps at N - BATCH: CleanRL's 1M is 488 batches = 999,424 steps."""


def command(contender: str, env: str, seed: int, steps: int, run: Path) -> list[str]:
    if contender == "surge":
        return [
            sys.executable, "-m", "surge", "train", PRESETS[env], f"seed={seed}",
            f"total_env_steps={steps}", f"run_dir={run / 'run'}", "log.progress=false",
            "log.interval_s=1",
        ]  # fmt: skip
    python = ROOT / "benchmarks" / ".venvs" / "base" / "bin" / "python"
    return [
        str(python), str(PEERS / "cleanrl_ppo_continuous.py"), "--env", env,
        "--total-steps", str(steps), "--max-secs", "86400", "--seed", str(seed),
        "--log", str(run / "log.jsonl"),
    ]  # fmt: skip


def run_one(contender: str, env: str, seed: int, steps: int, tag: str, jobs: int) -> Path:
    run = RUNS / f"{contender}-{env}-s{seed}{'-' + tag if tag else ''}"
    if run.exists():
        raise SystemExit(f"{run} exists: remove it, or pass another --tag")
    run.mkdir(parents=True)
    cmd = command(contender, env, seed, steps, run)
    meta = {
        "contender": contender, "env": env, "seed": seed, "steps": steps, "jobs": jobs,
        "launched": time.time(), "loadavg_at_start": os.getloadavg(), "cmd": cmd,
    }  # fmt: skip
    (run / "meta.json").write_text(json.dumps(meta, indent=2))
    print(f"[mujoco] {run.name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with open(run / "stdout.txt", "w") as out:
        mem = memmon.run(cmd, timeout=86400, out=run / "mem.json", env=env_vars, cwd=ROOT,
                         stdout=out, stderr=out)  # fmt: skip
    print(f"[mujoco] {run.name}: exit {mem['exit_code']} in {mem['wall_s']} s", file=sys.stderr)
    return run


def summarise(run: Path) -> dict[str, Any] | None:
    meta_path = run / "meta.json"
    if not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    mem = json.loads((run / "mem.json").read_text()) if (run / "mem.json").exists() else {}
    row: dict[str, Any] = {"run": run.name, **{k: meta[k] for k in ("contender", "env", "seed")}}
    row["jobs"] = meta.get("jobs", 1)
    row["note"] = meta.get("note", "")
    if meta["contender"] == "surge":
        path = run / "run" / "metrics.jsonl"
        records = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        launched = meta["launched"]
        common = [{"t": r["time"] - launched, "steps": r["env_steps"]} for r in records]
        info = analyze.analyze_records(common, target=None)
        timeline = [(r["time"], r["env_steps"]) for r in records]
        final = records[-1]["episode_return_mean"] if records else None
        episodes = records[-1]["episodes"] if records else 0
        at = {
            m: next((r["episode_return_mean"] for r in reversed(records)
                     if r["env_steps"] <= m), None)
            if records and records[-1]["env_steps"] > m - BATCH else None
            for m in MILESTONES
        }  # fmt: skip
    else:
        path = run / "log.jsonl"
        log = analyze.read_log(path) if path.exists() else []
        info = analyze.analyze_records(log, target=None) if log else {}
        # the log's clock starts at the process's start, within a few ms of `launched`
        timeline = [(meta["launched"] + r["t"], r["steps"]) for r in log]
        final = info.get("final_return_mean")
        episodes = info.get("episodes", 0)
        returns = [(r["steps"], r["return"]) for r in log if "return" in r]
        at = {}
        for m in MILESTONES:
            window = [ret for steps, ret in returns if steps <= m][-20:]
            at[m] = statistics.fmean(window) if window and steps_done(log) > m - BATCH else None
    steps = info.get("steps") or 0
    wall = mem.get("wall_s") or info.get("duration_s")  # runs started by hand: no mem.json
    # CPU time per env step: much less sensitive to neighbours than steps/s. From memmon's
    # whole-tree CPU time, or for a run started by hand a snapshot (`ps` of its processes)
    if mem.get("tree_cpu_s") and steps:
        cpu_us = 1e6 * mem["tree_cpu_s"] / steps
    elif "cpu_snapshot" in meta:
        cpu_us = 1e6 * meta["cpu_snapshot"]["cpu_s"] / meta["cpu_snapshot"]["steps"]
    else:
        cpu_us = None
    row.update(
        steps=steps,
        episodes=episodes,
        final_return=final,
        sps_steady=info.get("sps_steady"),
        sps_wall=round(steps / wall, 1) if wall else None,
        wall_s=wall,
        foreign_cores=mem.get("foreign_cores"),
        cores_used=mem.get("cores_used"),
        cpu_us_per_step=round(cpu_us, 1) if cpu_us else None,
        peak_pss_mb=mem.get("peak_pss_mb"),
        exit_code=mem.get("exit_code"),
        timeline=timeline,
        return_at={str(m): v for m, v in at.items()},
    )
    return row


def steps_done(log: list[dict[str, Any]]) -> int:
    return max((r["steps"] for r in log), default=0)


def steps_at(timeline: list[tuple[float, int]], t: float) -> float:
    """Env steps done at Unix time t, interpolated between a run's records."""
    for (t0, s0), (t1, s1) in zip(timeline, timeline[1:], strict=False):
        if t0 <= t <= t1:
            return s0 + (s1 - s0) * (t - t0) / max(t1 - t0, 1e-9)
    return float(timeline[-1][1] if t > timeline[-1][0] else timeline[0][1])


def shared_window(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Steps/s of two runs that ran at the same time, over the same wall-clock window:
    from when both had passed 10% of their steps to when the first of them ended. Both
    met the same neighbours, so the ratio is fair where neither rate alone is."""
    ta, tb = a["timeline"], b["timeline"]
    if len(ta) < 3 or len(tb) < 3:
        return None

    def t10(tl: list[tuple[float, int]]) -> float:
        return next(t for t, s in tl if s >= 0.1 * tl[-1][1])

    start, end = max(t10(ta), t10(tb)), min(ta[-1][0], tb[-1][0])
    if end - start < 60:
        return None
    rate = [(steps_at(tl, end) - steps_at(tl, start)) / (end - start) for tl in (ta, tb)]
    return {"runs": [a["run"], b["run"]], "window_s": round(end - start, 1),
            "sps": [round(x, 1) for x in rate], "ratio": round(rate[0] / rate[1], 2)}  # fmt: skip


def _fmt(x: Any, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def report(env_filter: str | None) -> None:
    rows = [r for p in sorted(RUNS.glob("*")) if (r := summarise(p)) is not None]
    if env_filter:
        rows = [r for r in rows if r["env"] == env_filter]
    summary: dict[str, Any] = {}
    for env in sorted({r["env"] for r in rows}):
        for contender in CONTENDERS:
            mine = [r for r in rows if r["env"] == env and r["contender"] == contender]
            full = [
                r for r in mine if r["steps"] > 1_000_000 - BATCH and r["final_return"] is not None
            ]
            alone = [r["sps_steady"] for r in mine if r["jobs"] == 1 and r["sps_steady"]]
            cpu = [r["cpu_us_per_step"] for r in mine if r["cpu_us_per_step"]]
            returns = [r["final_return"] for r in full]
            summary[f"{env}/{contender}"] = {
                "seeds_at_1M": len(full),
                "return_mean": statistics.fmean(returns) if returns else None,
                "return_std": statistics.pstdev(returns) if len(returns) > 1 else None,
                "sps_steady_median_alone": statistics.median(alone) if alone else None,
                "cpu_us_per_step_median": statistics.median(cpu) if cpu else None,
            }
        s, c = summary[f"{env}/surge"], summary[f"{env}/cleanrl"]
        if s["sps_steady_median_alone"] and c["sps_steady_median_alone"]:
            s["sps_ratio_vs_cleanrl"] = s["sps_steady_median_alone"] / c["sps_steady_median_alone"]
    pairs = []
    for a in rows:
        for b in rows:
            same = a["run"].split("-", 1)[1] == b["run"].split("-", 1)[1]  # env, seed, tag
            pair = (
                shared_window(a, b)
                if a["contender"] == "surge" and b["contender"] == "cleanrl" and same
                else None
            )
            if pair is not None:
                pairs.append(pair)
    runs_out = [{k: v for k, v in r.items() if k != "timeline"} for r in rows]
    (RESULTS / "mujoco.json").write_text(
        json.dumps(
            {
                "machine": machine.describe(),
                "summary": summary,
                "shared_windows": pairs,
                "runs": runs_out,
            },
            indent=2,
        )
        + "\n"
    )
    lines = [
        "# MuJoCo PPO: surge vs a CleanRL-style script",
        "",
        machine.summary() + " (shared with other jobs: see `foreign`).",
        "",
        "Generated by `benchmarks/mujoco_ppo.py` from the runs in benchmarks/results/mujoco_runs/.",
        "Same settings for both (CleanRL ppo_continuous_action: 1 env, 2048-step batches,",
        "10 epochs x 32 minibatches, obs and reward normalisation). `steady` = env steps/s",
        "from 10% of the run to its end; `wall` = steps / process wall time. `jobs` = runs",
        "sharing the machine at once (steps/s of runs with jobs > 1 are not comparable);",
        "`foreign` = cores used by other processes during the run. CPU us / step = CPU time",
        "of the run's processes per env step (less sensitive to neighbours than steps/s).",
        "Final return = mean of the last 20 episodes (raw rewards); +- is the population",
        "std over seeds.",
        "",
        "## Summary",
        "",
        "| env | contender | seeds at 1M | final return (mean +- std) | steps/s (steady, "
        "median of runs alone) | ratio | CPU us / step (median of runs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, s in summary.items():
        env, contender = key.split("/")
        ret = _fmt(s["return_mean"])
        if s["return_std"] is not None:
            ret += f" +- {_fmt(s['return_std'])}"
        lines.append(
            f"| {env} | {contender} | {s['seeds_at_1M']} | {ret} | "
            f"{_fmt(s['sps_steady_median_alone'])} | {_fmt(s.get('sps_ratio_vs_cleanrl'), '.2f')} "
            f"| {_fmt(s['cpu_us_per_step_median'])} |"
        )
    if pairs:
        lines += [
            "",
            "## Side by side in the same wall-clock window",
            "",
            "Runs of both contenders that ran at the same time, each one's steps/s over the",
            "window from when both had passed 10% of their steps to when the first ended:",
            "the same neighbours for both, so the ratio is fair where a rate alone is not.",
            "",
            "| surge run | CleanRL run | window s | surge steps/s | CleanRL steps/s | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for p in pairs:
            lines.append(
                f"| {p['runs'][0]} | {p['runs'][1]} | {_fmt(p['window_s'])} | "
                f"{_fmt(p['sps'][0])} | {_fmt(p['sps'][1])} | {p['ratio']:.2f} |"
            )
    lines += [
        "",
        "## Return along the way",
        "",
        "Mean of the last 20 episodes at each step count (surge: its last metrics record at",
        "or before it; `-`: the run had not got there).",
        "",
        "| run | " + " | ".join(f"{m // 1000}k" for m in MILESTONES) + " |",
        "|---|" + "---|" * len(MILESTONES),
    ]
    for r in rows:
        cells = " | ".join(_fmt(r["return_at"][str(m)]) for m in MILESTONES)
        lines.append(f"| {r['run']} | {cells} |")
    lines += [
        "",
        "## Runs",
        "",
        "| run | steps | episodes | final return | steps/s steady | steps/s wall | wall s "
        "| jobs | foreign | cores | CPU us / step | peak PSS MB | exit | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {_fmt(r['steps'])} | {r['episodes']} | {_fmt(r['final_return'])} "
            f"| {_fmt(r['sps_steady'])} | {_fmt(r['sps_wall'])} | {_fmt(r['wall_s'])} "
            f"| {r['jobs']} | {_fmt(r['foreign_cores'], '.2f')} | {_fmt(r['cores_used'], '.2f')} "
            f"| {_fmt(r['cpu_us_per_step'])} | {_fmt(r['peak_pss_mb'])} | {r['exit_code']} "
            f"| {r['note']} |"
        )
    (RESULTS / "mujoco.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", choices=sorted(PRESETS), default="halfcheetah")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--jobs", type=int, default=1, help="runs at once (>1: returns only)")
    p.add_argument("--tag", default="", help="suffix of the run directories")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if not args.report_only:
        todo = [(c, s) for s in args.seeds for c in args.contenders.split(",")]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(
                lambda cs: run_one(cs[0], args.env, cs[1], args.steps, args.tag, args.jobs), todo
            ))  # fmt: skip
    report(None)


if __name__ == "__main__":
    main()
