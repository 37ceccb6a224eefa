"""Ape-X on one machine: `breakout-apex`'s actor scaling, and its learning run.

    .venv/bin/python benchmarks/apex.py --part scaling    # 1 vs 2 actor processes, ~5 min
    .venv/bin/python benchmarks/apex.py --part learning   # 1M env steps, about an hour

scaling: `breakout-apex` with 1, then 2 actor processes (8 envs each), with the learner kept
off the critical path (`replay.ratio` 0.05: a batch of 64 per 1,280 inserts), each for
`--secs` (150) seconds; the insert rate is env steps per second (one transition per step)
between the first metrics record past `--warmup` (60) trainer seconds and the last one.
Target: 2 actors insert >= 1.6x one's transitions per second.

learning: `breakout-apex` for its 1M env steps under peers/memmon.py, then `surge eval` of its
newest checkpoint (10 whole games, greedy: the learner's policy, as Ape-X reports it; target
>= 10, a random policy scores about 1.5); also the mean raw score of the last 20 training
games (all 16 envs, exploration included), the peak PSS of the run's process tree (target
<= 8 GB), its wall time and steps/s. `--part evaluate` redoes only the evaluation.

Each part writes its section of benchmarks/results/apex.md (and apex.json), keeping the
other's. Run files: benchmarks/results/replay_runs/apex-* (not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import machine  # noqa: E402  (benchmarks/, next to this file)
import memmon  # noqa: E402  (benchmarks/peers, standard library only)

RUNS = ROOT / "benchmarks" / "results" / "replay_runs"
OUT = ROOT / "benchmarks" / "results"
COMMON = ["log.progress=false", "log.interval_s=2"]
EVAL_EPISODES = 10


def records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return [r for r in out if "episode_return_mean" in r or "steps_per_s" in r]


def run(name: str, overrides: list[str], timeout: float) -> tuple[Path, dict[str, Any]]:
    run_dir = RUNS / name
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    cmd = [sys.executable, "-m", "surge", "train", "breakout-apex", *overrides, *COMMON,
           f"run_dir={run_dir / 'run'}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"[apex] {name}: {' '.join(cmd[2:])}", flush=True)
    with open(run_dir / "stdout.txt", "w") as out:
        mem = memmon.run(
            cmd, timeout=timeout, grace=30.0, stdout=out, stderr=out, env=env, cwd=ROOT
        )
    (run_dir / "mem.json").write_text(json.dumps(mem, indent=1))
    return run_dir / "run", mem


def insert_rate(run_dir: Path, warmup: float) -> float | None:
    rows = [r for r in records(run_dir) if r.get("wall_time_s", 0) >= warmup]
    if len(rows) < 2:
        return None
    span = rows[-1]["wall_time_s"] - rows[0]["wall_time_s"]
    return (rows[-1]["env_steps"] - rows[0]["env_steps"]) / span if span > 0 else None


def scaling(secs: float, warmup: float) -> dict[str, Any]:
    rates = {}
    for actors in (1, 2):
        overrides = [f"workers.actors={actors}", "replay.ratio=0.05", "total_env_steps=100000000"]
        run_dir, mem = run(f"apex-scaling-{actors}", overrides, secs)
        rate = insert_rate(run_dir, warmup)
        rates[str(actors)] = {"inserts_per_s": rate, "foreign": mem.get("foreign_cores")}
    one, two = rates["1"]["inserts_per_s"], rates["2"]["inserts_per_s"]
    ratio = two / one if one and two else None
    return {"rates": rates, "ratio": ratio, "met": ratio is not None and ratio >= 1.6}


def learning() -> dict[str, Any]:
    started = time.time()
    run_dir, mem = run("apex-learning", [], 4 * 3600)
    result = learning_result(run_dir, mem, round(time.time() - started, 1))
    return result | evaluation(run_dir)


def learning_result(run_dir: Path, mem: dict[str, Any], wall_s: float) -> dict[str, Any]:
    rows = records(run_dir)
    last = rows[-1] if rows else {}
    final = last.get("episode_return_mean")
    return {
        "env_steps": last.get("env_steps"),
        "final_return": final,
        "wall_s": wall_s,
        "steps_per_s": round(last["env_steps"] / last["wall_time_s"], 1) if last else None,
        "peak_pss_mb": mem.get("peak_pss_mb"),
        "foreign": mem.get("foreign_cores"),
        "met_memory": (mem.get("peak_pss_mb") or 0) <= 8 * 1024,
        "curve": [
            (r["env_steps"], r.get("episode_return_mean")) for r in rows[:: max(1, len(rows) // 20)]
        ],
    }


def evaluation(run_dir: Path, episodes: int = EVAL_EPISODES) -> dict[str, Any]:
    """`surge eval` of the run's newest checkpoint: whole games, greedy, the learner's policy
    (the training score mixes in the actors' exploration, up to epsilon 0.4)."""
    cmd = [sys.executable, "-m", "surge", "eval", str(run_dir), f"episodes={episodes}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"[apex] evaluating: {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    played = json.loads((run_dir / "eval.json").read_text())
    return {
        "eval_return": played["return_mean"],
        "eval_std": played["return_std"],
        "eval_episodes": played["episodes"],
        "eval_env_steps": played["env_steps"],
        "met_return": played["return_mean"] >= 10 and played["env_steps"] >= 1_000_000,
    }


def report(results: dict[str, Any]) -> str:
    lines = ["# Ape-X on one machine: `breakout-apex`", "", machine.summary(), ""]
    s = results.get("scaling")
    if s:
        r1, r2 = s["rates"]["1"], s["rates"]["2"]
        lines += [
            "## Insert rate: 1 vs 2 actor processes",
            "",
            "`python benchmarks/apex.py --part scaling`: `breakout-apex workers.actors=N "
            "replay.ratio=0.05` (the learner off the critical path), 8 envs per actor; env "
            "steps (= transitions inserted) per second after the warm-up.",
            "",
            "| actors | inserts/s | foreign cores |",
            "|---|---|---|",
            f"| 1 | {r1['inserts_per_s']:,.0f} | {r1['foreign']:.2f} |",
            f"| 2 | {r2['inserts_per_s']:,.0f} | {r2['foreign']:.2f} |",
            "",
            f"2 actors / 1 actor: **{s['ratio']:.2f}** (target >= 1.6: "
            f"{'met' if s['met'] else 'not met'}).",
            "",
        ]
    ll = results.get("learning")
    if ll:
        lines += [
            "## Learning: 1M env steps",
            "",
            "`python benchmarks/apex.py --part learning`: `surge train breakout-apex` (seed 1).",
            "",
            f"- env steps {ll['env_steps']:,}, wall {ll['wall_s']:,.0f} s "
            f"({ll['steps_per_s']} steps/s)",
            f"- greedy evaluation of the newest checkpoint ({ll['eval_env_steps']:,} env "
            f"steps; `surge eval RUN episodes={ll['eval_episodes']}`, whole games): "
            f"**{ll['eval_return']:.1f} +- {ll['eval_std']:.1f}** (target >= 10 at 1M steps: "
            f"{'met' if ll['met_return'] else 'not met'}; random play about 1.5)",
            f"- mean raw score of the last 20 training games, over all 16 envs (their "
            f"epsilons run up to 0.4): {ll['final_return']:.1f}",
            f"- peak PSS of the process tree: **{ll['peak_pss_mb']:,.0f} MB** (target <= 8 GB: "
            f"{'met' if ll['met_memory'] else 'not met'})",
            "",
            "| env steps | mean score of the last 20 games |",
            "|---|---|",
            *(f"| {s:,} | {'-' if r is None else f'{r:.1f}'} |" for s, r in ll["curve"]),
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--part",
        choices=["scaling", "learning", "evaluate"],
        required=True,
        help="evaluate: only the greedy evaluation of the last learning run's checkpoint",
    )
    p.add_argument("--secs", type=float, default=150.0)
    p.add_argument("--warmup", type=float, default=60.0)
    args = p.parse_args()
    store = OUT / "apex.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    if args.part == "scaling":
        results["scaling"] = scaling(args.secs, args.warmup)
    elif args.part == "learning":
        results["learning"] = learning()
    else:
        results["learning"] |= evaluation(RUNS / "apex-learning" / "run")
    store.write_text(json.dumps(results, indent=1))
    text = report(json.loads(store.read_text()))
    (OUT / "apex.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
