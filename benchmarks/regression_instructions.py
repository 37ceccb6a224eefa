"""Did a change slow surge down? Instructions per env step, base vs head, free of noise.

    .venv/bin/python benchmarks/regression_instructions.py --base 2171602   # ~30 min on 2 cores

benchmarks/regression_cpu.py measures CPU time, which moves with the neighbours and the
machine; this counts the instructions a serial `surge train` executes in user space under
valgrind's callgrind, which is the same on every run of the same code (a machine without
hardware counters can still count). Startup is left out by differencing a short and a long
budget. Instructions are not cycles (cache misses and branch mispredictions are not in
them), so the two instruments bracket a change's cost. The four runs go in parallel, one
per core at a time. Writes benchmarks/results/regression_instructions.md (or --out).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import summary  # noqa: E402  (benchmarks/, next to this file)

SHORT, LONG = 10_000, 40_000


def instructions(tree: Path, preset: str, steps: int, workdir: Path, tag: str) -> int:
    """User-space instructions of one serial run of `steps` env steps."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir / tag}.out",
         sys.executable, "-m", "surge", "train", preset, "runtime=serial", "stop_return=null",
         f"total_env_steps={steps}", "log.progress=false", "log.tensorboard=false",
         f"run_dir={workdir / tag}"],
        cwd=tree, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--preset", default="cartpole-ppo")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = work / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base],
                       cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        try:
            runs = [(side, tree, steps)
                    for side, tree in (("base", base), ("head", ROOT))
                    for steps in (SHORT, LONG)]  # fmt: skip

            def count(run: tuple[str, Path, int]) -> int:
                side, tree, steps = run
                return instructions(tree, args.preset, steps, work, f"{side}-{steps}")

            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                totals = list(pool.map(count, runs))
            counts = {(side, steps): n for (side, _, steps), n in zip(runs, totals, strict=True)}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)],
                           cwd=ROOT, check=False, capture_output=True)  # fmt: skip
    per_step = {
        side: (counts[(side, LONG)] - counts[(side, SHORT)]) / (LONG - SHORT)
        for side in ("base", "head")
    }
    text = (
        f"Instructions per env step of serial `surge train {args.preset}` (valgrind callgrind, "
        f"user space, runs of {LONG:,} minus {SHORT:,} steps), head (this tree) against base "
        f"{args.base}:\n\n{summary()}\n\n"
        "| side | instructions, short run | long run | per env step |\n|---|---|---|---|\n"
        + "".join(
            f"| {side} | {counts[(side, SHORT)]:,} | {counts[(side, LONG)]:,} | "
            f"{per_step[side]:,.0f} |\n"
            for side in ("base", "head")
        )
        + f"\nhead / base: **{per_step['head'] / per_step['base']:.4f}**\n"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "regression_instructions.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
