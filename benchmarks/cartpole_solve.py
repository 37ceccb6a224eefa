"""Time to solve CartPole-v1 with the default preset (or another), per runtime and seed.

Each run is a fresh `surge train` process (process start included in the wall time), run one
at a time so runs do not compete for the cores. Solved = mean return of the last 20
episodes >= 475 (the preset's `stop_return`).

    .venv/bin/python benchmarks/cartpole_solve.py --seeds 1 2 3 --runtimes local serial
    .venv/bin/python benchmarks/cartpole_solve.py --preset cartpole-ppo

Prints a Markdown table and writes it, with the raw numbers as JSON, to --out (default
benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from machine import describe, summary  # benchmarks/, next to this file
from surge_run import run_once

from surge.config.load import DEFAULT_PRESET


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runtimes", nargs="+", default=["local", "serial"])
    parser.add_argument("--preset", default=DEFAULT_PRESET, help="default: the default preset")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for runtime in args.runtimes:
            for seed in args.seeds:
                row = run_once(args.preset, runtime, seed, Path(tmp), [])
                print(json.dumps(row), flush=True)
                rows.append(row)

    info = describe()
    table = [
        f"preset {args.preset}" + (" (the default)" if args.preset == DEFAULT_PRESET else ""),
        "",
        summary(info) + ".",
        "",
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
    stem = "cartpole_solve" if args.preset == DEFAULT_PRESET else f"cartpole_solve_{args.preset}"
    (args.out / f"{stem}.md").write_text(text + "\n")
    report = {"preset": args.preset, "machine": info, "runs": rows}
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
