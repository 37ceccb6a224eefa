"""PSRO's NashConv curve on OpenSpiel's poker games, over seeds: each seed a fresh
`surge train <preset> seed=N` (a config with a `psro` section), its `psro.jsonl` read back.

    .venv/bin/python benchmarks/psro.py --preset kuhn-psro --seeds 1 2 3
    .venv/bin/python benchmarks/psro.py --preset kuhn-psro --seeds 1 --set psro.iterations=20 \\
        --set env.id=openspiel:leduc_poker --set total_env_steps=100000 --tag leduc
    .venv/bin/python benchmarks/psro.py --report-only --tag kuhn

Runs are kept under benchmarks/results/psro_runs/<tag>/ (not committed). The report is
benchmarks/results/psro_<tag>.json and .md (machine line first: machine.py) and a plot
psro_<tag>.png of NashConv per iteration, one line per seed, with uniform random play's
NashConv (iteration 0) and the target beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNS = HERE / "results" / "psro_runs"
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402


def run_seed(preset: str, seed: int, tag: str, overrides: list[str]) -> Path:
    """One seed's PSRO run (skipped when its log is complete)."""
    out = RUNS / tag / f"s{seed}"
    if not (out / "config.yaml").exists():
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "surge", "train", preset, f"seed={seed}", f"run_dir={out}"]
        subprocess.run([*cmd, *overrides], check=True, cwd=REPO, env=env)
    return out


def read_curve(out: Path) -> list[dict]:
    path = out / "psro.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def report(tag: str, target: float, command: str) -> None:
    seeds = sorted(RUNS.joinpath(tag).glob("s*"), key=lambda p: int(p.name[1:]))
    curves = {p.name: read_curve(p) for p in seeds}
    rows = []
    for name, curve in curves.items():
        convs = [r["nash_conv"] for r in curve]
        reached = next((r["iteration"] for r in curve if r["nash_conv"] <= target), None)
        rows.append(
            {
                "seed": int(name[1:]),
                "iterations": len(convs) - 1,
                "nash_conv_start": round(convs[0], 4),
                "nash_conv_final": round(convs[-1], 4),
                "nash_conv_min": round(min(convs), 4),
                "first_at_or_below_target": reached,
                "curve": [round(c, 4) for c in convs],
                "br_seconds": [r.get("br_seconds") for r in curve[:-1]],
            }
        )
    result = {
        "provenance": {"machine": summary(), "date": time.strftime("%Y-%m-%d"), "command": command},
        "target": target,
        "seeds": rows,
    }
    (HERE / "results" / f"psro_{tag}.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# PSRO NashConv ({tag})",
        "",
        f"Machine: {result['provenance']['machine']}. Date: {result['provenance']['date']}. "
        f"Command: `{command}`.",
        "",
        f"| seed | iterations | NashConv at 0 | final | min | first <= {target:g} |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        first = r["first_at_or_below_target"]
        lines.append(
            f"| {r['seed']} | {r['iterations']} | {r['nash_conv_start']:.4f} | "
            f"{r['nash_conv_final']:.4f} | {r['nash_conv_min']:.4f} | "
            f"{'-' if first is None else first} |"
        )
    (HERE / "results" / f"psro_{tag}.md").write_text("\n".join(lines) + "\n")
    _plot(tag, rows, target)
    print("\n".join(lines))


def _plot(tag: str, rows: list[dict], target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        ax.plot(range(len(r["curve"])), r["curve"], marker="o", ms=3, label=f"seed {r['seed']}")
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:g}")
    ax.set_yscale("symlog", linthresh=1e-2)  # NashConv reaches 0 exactly
    ax.set_ylim(bottom=0)
    ax.set_xlabel("PSRO iteration (best responses added)")
    ax.set_ylabel("NashConv of the meta-strategy mixture")
    ax.set_title(f"PSRO, PPO best responses ({tag})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "results" / f"psro_{tag}.png", dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="kuhn-psro")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--set", action="append", default=[], help="an override, e.g. psro.iterations=5")
    p.add_argument("--target", type=float, default=0.05)
    p.add_argument("--tag", default="kuhn")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    # the command that reproduces the runs (a report-only call reads them)
    command = " ".join(
        ["python benchmarks/psro.py", *(a for a in sys.argv[1:] if a != "--report-only")]
    )
    if not args.report_only:
        for seed in args.seeds:
            run_seed(args.preset, seed, args.tag, args.set)
    report(args.tag, args.target, command)


if __name__ == "__main__":
    main()
