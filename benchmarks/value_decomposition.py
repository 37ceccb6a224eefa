"""QMIX, VDN and independent Q-learning (`algo: qmix`) on Level-Based Foraging, each seed a
fresh run, one at a time, its final policy evaluated greedily, the seeds aggregated with
rliable (interquartile mean, stratified bootstrap 95% intervals: surge/tracking/report.py).

    .venv/bin/python benchmarks/value_decomposition.py --presets lbf-qmix --seeds 1 2 3
    .venv/bin/python benchmarks/value_decomposition.py --presets lbf-qmix lbf-vdn lbf-iql \\
        --env Foraging-10x10-3p-3f-v3 --seeds 1 2 3 4 5 --tag lbf10
    .venv/bin/python benchmarks/value_decomposition.py --report-only --tag lbf10

Each run trains `--steps` env steps (the presets' 2M by default), then `surge eval RUN
episodes=100` plays its final checkpoint greedily (returns in [0, 1]: every food eaten is
1). The report gives each run's evaluation, the env steps at which its evaluation workers
first reached `--target` (0.9), and per preset the IQM and its interval over the seeds
(`surge report ... --metric eval.json --min 0 --max 1`). Runs are kept under
benchmarks/results/marl_value_runs/ (not committed); the report is
benchmarks/results/value_decomposition_<tag>.md, headed by the machine line (machine.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNS = HERE / "results" / "marl_value_runs"
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402


def run_dir(tag: str, preset: str, seed: int) -> Path:
    return RUNS / tag / f"{preset}-s{seed}"


def train_and_eval(preset: str, seed: int, args: argparse.Namespace) -> None:
    """One seed: train (unless its evaluation is there), then evaluate its final version."""
    out = run_dir(args.tag, preset, seed)
    if (out / "eval.json").exists():
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    overrides = [f"seed={seed}", f"run_dir={out}", "log.progress=false"]
    if args.steps:
        overrides.append(f"total_env_steps={args.steps}")
    if args.env:
        overrides.append(f"env.id=lbforaging:{args.env}")
    surge = [sys.executable, "-m", "surge"]
    if not (out / "config.yaml").exists():
        subprocess.run([*surge, "train", preset, *overrides], check=True, cwd=REPO, env=env)
    subprocess.run([*surge, "eval", str(out), "episodes=100"], check=True, cwd=REPO, env=env)


def first_reached(out: Path, target: float) -> int | None:
    """Env steps at the first evaluation-worker result at or above `target`."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        row = json.loads(line)
        value = row.get("eval/return_mean")
        if value is not None and value >= target:
            return int(row["env_steps"])
    return None


def report(args: argparse.Namespace) -> str:
    from surge.tracking.report import build_report, format_table, write_report

    lines = [f"# Value decomposition on Level-Based Foraging ({args.tag})", "", summary(), ""]
    lines += ["| run | env steps | greedy return (100 episodes) | first eval >= target at |"]
    lines += ["|---|---|---|---|"]
    labelled = []
    for preset in args.presets:
        for seed in args.seeds:
            out = run_dir(args.tag, preset, seed)
            if not (out / "eval.json").exists():
                continue
            result = json.loads((out / "eval.json").read_text())
            reached = first_reached(out, args.target)
            lines.append(
                f"| {preset} seed {seed} | {result['env_steps']:,} | "
                f"{result['return_mean']:.3f} +- {result['return_std']:.3f} | "
                f"{'-' if reached is None else f'{reached:,}'} |"
            )
            labelled.append(f"{preset}={out}")
    if labelled:
        built = build_report(labelled, "eval.json", "preset", (0.0, 1.0), 2000)
        lines += ["", "```", format_table(built), "```"]
        write_report(built, HERE / "results" / f"value_decomposition_{args.tag}")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=["lbf-qmix"])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=0, help="env steps (0: the preset's)")
    p.add_argument("--env", default="", help="another LBF id, e.g. Foraging-10x10-3p-3f-v3")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--tag", default="lbf8")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if not args.report_only:
        for preset in args.presets:
            for seed in args.seeds:
                train_and_eval(preset, seed, args)
    text = report(args)
    (HERE / "results" / f"value_decomposition_{args.tag}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
