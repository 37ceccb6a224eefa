"""Time to solve CartPole-v1 with the default preset, per runtime and seed.

Each run is a fresh `surge train` process (process start included in the wall time), run one
at a time so runs do not compete for the cores. Solved = mean return of the last 20
episodes >= 475 (the preset's `stop_return`).

    .venv/bin/python benchmarks/cartpole_solve.py --seeds 1 2 3 --runtimes local serial

Prints a Markdown table and writes it, with the raw numbers as JSON, to --out (default
benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(runtime: str, seed: int, workdir: Path) -> dict[str, object]:
    run_dir = workdir / f"{runtime}-{seed}"
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "surge", "train", f"runtime={runtime}", f"seed={seed}",
            f"run_dir={run_dir}", "log.progress=false",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if run_dir.exists() else []
    last = json.loads(lines[-1]) if lines else {}
    return {
        "runtime": runtime,
        "seed": seed,
        "exit_code": proc.returncode,
        "solved": "surge: solved" in proc.stderr,
        "wall_s": round(wall, 1),
        "env_steps": last.get("env_steps"),
        "return_mean": last.get("episode_return_mean"),
        "steps_per_s": round(last["env_steps"] / last["wall_time_s"]) if last else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runtimes", nargs="+", default=["local", "serial"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for runtime in args.runtimes:
            for seed in args.seeds:
                row = run_once(runtime, seed, Path(tmp))
                print(json.dumps(row), flush=True)
                rows.append(row)

    table = [
        "| runtime | seed | solved | wall-clock s (incl. start) | env steps | steps/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        table.append(
            f"| {r['runtime']} | {r['seed']} | {'yes' if r['solved'] else 'NO'} | {r['wall_s']} "
            f"| {r['env_steps']:,} | {r['steps_per_s']:,} |"
        )
    for runtime in args.runtimes:
        mine = [r for r in rows if r["runtime"] == runtime]
        walls = [float(r["wall_s"]) for r in mine]  # type: ignore[arg-type]
        steps = [int(r["env_steps"]) for r in mine]  # type: ignore[call-overload]
        table.append(
            f"| {runtime} | median | {sum(bool(r['solved']) for r in mine)}/{len(mine)} "
            f"| {statistics.median(walls):.1f} | {int(statistics.median(steps)):,} | |"
        )
    text = "\n".join(table)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cartpole_solve.md").write_text(text + "\n")
    (args.out / "cartpole_solve.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
