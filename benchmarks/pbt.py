"""PBT against the same settings held fixed: `cartpole-pbt` (4 members started from learning
rates 1e-6 .. 1e-1) beside one run per member's start setting with no population.

    .venv/bin/python benchmarks/pbt.py                 # seed 1
    .venv/bin/python benchmarks/pbt.py --seeds 1 2 3
    .venv/bin/python benchmarks/pbt.py --report-only

Every run, population member or fixed, trains `cartpole-pbt`'s budget and is then evaluated
greedily (`surge eval RUN episodes=20`, its newest checkpoint); CartPole counts as solved at
a mean of 475. Runs are kept under benchmarks/results/pbt_runs/ (not committed); the report
is benchmarks/results/pbt.json and pbt.md (machine line first: machine.py) and the first
seed's lineage plot, benchmarks/results/pbt_lineage.png (`surge plot POPULATION_DIR`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNS = HERE / "results" / "pbt_runs"
SOLVED = 475.0
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402

SURGE = [sys.executable, "-m", "surge"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def start_lrs() -> list[float]:
    sys.path.insert(0, str(REPO))
    from surge.config.load import load_config

    cfg, _ = load_config("cartpole-pbt", [])
    return [float(x) for x in cfg.sections["population"].initial["ppo.lr"]]


def train(out: Path, overrides: list[str]) -> None:
    if not (out / "config.yaml").exists():
        cmd = [*SURGE, "train", "cartpole-pbt", f"run_dir={out}", *overrides]
        subprocess.run(cmd, check=True, cwd=REPO, env=ENV)


def evaluate(run: Path) -> float:
    if not (run / "eval.json").exists():
        cmd = [*SURGE, "eval", str(run), "episodes=20"]
        subprocess.run(cmd, check=True, cwd=REPO, env=ENV, capture_output=True)
    return float(json.loads((run / "eval.json").read_text())["return_mean"])


def run_seed(seed: int) -> dict:
    base = RUNS / f"s{seed}"
    population = base / "population"
    started = time.perf_counter()
    train(population, [f"seed={seed}"])
    members = sorted(p for p in population.glob("member-*") if p.is_dir())
    fixed = []
    for lr in start_lrs():
        run = base / f"fixed-lr{lr:g}"
        train(run, [f"seed={seed}", "population=null", f"ppo.lr={lr}"])
        fixed.append({"lr": lr, "eval": evaluate(run)})
    decisions = (population / "population.jsonl").read_text().splitlines()
    return {
        "seed": seed,
        "members": [{"member": m.name, "eval": evaluate(m)} for m in members],
        "exploits": len(decisions),
        "fixed": fixed,
        "seconds": round(time.perf_counter() - started, 1),
    }


def report(command: str) -> None:
    seeds = []
    for base in sorted(RUNS.glob("s*"), key=lambda p: int(p.name[1:])):
        seeds.append(run_seed(int(base.name[1:])))
    result = {
        "provenance": {"machine": summary(), "date": time.strftime("%Y-%m-%d"), "command": command},
        "solved_at": SOLVED,
        "seeds": seeds,
    }
    (HERE / "results" / "pbt.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# PBT against fixed settings: cartpole-pbt",
        "",
        f"Machine: {result['provenance']['machine']}. Date: {result['provenance']['date']}. "
        f"Command: `{command}`.",
        "",
        "| seed | best member (eval) | members solved | exploits | fixed lr: eval | fixed solved |",
        "|---|---|---|---|---|---|",
    ]
    for s in seeds:
        best = max(m["eval"] for m in s["members"])
        solved = sum(m["eval"] >= SOLVED for m in s["members"])
        fixed = ", ".join(f"{f['lr']:g}: {f['eval']:.1f}" for f in s["fixed"])
        fixed_solved = sum(f["eval"] >= SOLVED for f in s["fixed"])
        lines.append(
            f"| {s['seed']} | {best:.1f} | {solved} of {len(s['members'])} | {s['exploits']} | "
            f"{fixed} | {fixed_solved} of {len(s['fixed'])} |"
        )
    (HERE / "results" / "pbt.md").write_text("\n".join(lines) + "\n")
    first = RUNS / f"s{seeds[0]['seed']}" / "population" / "lineage.png"
    if first.exists():
        shutil.copy(first, HERE / "results" / "pbt_lineage.png")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[1])
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    # the command that reproduces the runs (a report-only call reads them)
    command = " ".join(
        ["python benchmarks/pbt.py", *(a for a in sys.argv[1:] if a != "--report-only")]
    )
    if not args.report_only:
        for seed in args.seeds:
            run_seed(seed)
    report(command)


if __name__ == "__main__":
    main()
