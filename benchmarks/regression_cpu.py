"""Did a change slow surge down? CPU time per env step, relative to env stepping, base vs head.

    .venv/bin/python benchmarks/regression_cpu.py --base main --rounds 5

On a shared machine a wall-clock rate (benchmarks/regression.py) moves with the neighbours,
and so does raw CPU time (a busy sibling hyperthread slows every instruction). This measures
what a change to surge's own code can move: each run is a serial `surge train` (every worker
in one process) of a fixed budget, and its CPU seconds (timing.json `cpu_total_s`) are
divided by the CPU seconds the same run spent stepping envs (`env_s`), code that both sides
share, so a neighbour that slows the run slows both alike. Startup is left out by
differencing a short and a long budget. Rounds alternate the order (AB BA ...); the report
gives per preset the median head / base ratio and its min..max.

`--base REV` is checked out with `git worktree add --detach` into a temporary directory
(removed at the end); the head is this tree, uncommitted changes included. Writes
benchmarks/results/regression_cpu.md (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHORT, LONG = 50_000, 250_000


def cpu_per_env_cpu(tree: Path, preset: str, steps: int, run_dir: Path) -> tuple[float, float]:
    """(CPU seconds, env-stepping CPU seconds) of one serial run of `steps` env steps."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", "surge", "train", preset, "runtime=serial", "stop_return=null",
         f"total_env_steps={steps}", "log.progress=false", "log.tensorboard=false",
         f"run_dir={run_dir}"],
        cwd=tree, env=env, check=True, capture_output=True,
    )  # fmt: skip
    total = json.loads((run_dir / "timing.json").read_text())["total"]
    return float(total["cpu_total_s"]), float(total["env_s"])


def relative_cost(tree: Path, preset: str, workdir: Path, tag: str) -> float:
    """CPU per env step over env-stepping CPU per env step, startup differenced out."""
    cpu_s, env_s = cpu_per_env_cpu(tree, preset, SHORT, workdir / f"{tag}-short")
    cpu_l, env_l = cpu_per_env_cpu(tree, preset, LONG, workdir / f"{tag}-long")
    return (cpu_l - cpu_s) / (env_l - env_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--presets", nargs="+", default=["cartpole-ppo", "cartpole-appo"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base],
                       cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        try:
            ratios: dict[str, list[float]] = {p: [] for p in args.presets}
            for rnd in range(args.rounds):
                for preset in args.presets:
                    sides = [("base", base), ("head", ROOT)]
                    cost = {
                        name: relative_cost(tree, preset, Path(tmp), f"{preset}-{name}-{rnd}")
                        for name, tree in (sides if rnd % 2 == 0 else sides[::-1])
                    }
                    ratio = cost["head"] / cost["base"]
                    ratios[preset].append(ratio)
                    print(
                        f"round {rnd} {preset}: base {cost['base']:.3f}, "
                        f"head {cost['head']:.3f} -> {ratio:.3f}",
                        flush=True,
                    )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    lines = [
        f"CPU per env step relative to env stepping, head (this tree) / base ({args.base}), "
        f"serial runs of {LONG - SHORT:,} steps, {args.rounds} rounds "
        "(`python benchmarks/regression_cpu.py`):",
        "",
        "| preset | median head / base | min..max |",
        "|---|---|---|",
        *(
            f"| {p} | {statistics.median(r):.3f} | {min(r):.3f}..{max(r):.3f} |"
            for p, r in ratios.items()
        ),
    ]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "regression_cpu.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
