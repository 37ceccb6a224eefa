"""What the Ray runtime costs on one machine: the same experiment on `local` and on a one-node
`ray` runtime (a Ray instance surge starts for the run), side by side.

Each run is a fresh `surge train` process of one preset (by default `cartpole-ppo`: PPO on
CartPole-v1 until solved; `--preset pong-appo` for Atari, with a step budget as an override),
one at a time, alternating runtimes so both see the same machine. Two rates:
"steps/s" is env steps / trainer wall time (from the trainer's start: it leaves out process
and Ray start-up, which the wall-clock column includes, but not the wait for the first batch
while the other workers start); "steady steps/s" is measured between the first and the last
metrics line, so start-up of any kind is left out. The ratio uses the steady rate.

    .venv/bin/python benchmarks/ray_vs_local.py --seeds 1 2 3
    .venv/bin/python benchmarks/ray_vs_local.py --preset pong-appo --seeds 1 2 3 \
        total_env_steps=200000

Prints a Markdown table and the ratio ray / local of the median steps/s, and writes both (and
the raw numbers as JSON) to --out (default benchmarks/results/): `ray_vs_local.md` and
`.json` for the default preset, `ray_vs_local_<preset>.md` and `.json` for another.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

from machine import describe, summary  # benchmarks/, next to this file
from surge_run import run_once

DEFAULT_PRESET = "cartpole-ppo"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        help="surge preset to run on both runtimes, e.g. pong-appo (Atari; pass a step budget "
        "such as total_env_steps=200000 as an override)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for both runtimes")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for runtime in ("local", "ray"):
                row = run_once(args.preset, runtime, seed, Path(tmp), args.overrides)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)

    def median(runtime: str, key: str) -> float:
        values = [
            float(r[key])  # type: ignore[arg-type]
            for r in rows
            if r["runtime"] == runtime and r[key] is not None
        ]
        return statistics.median(values) if values else math.nan

    def num(value: object) -> str:
        return f"{value:,}" if isinstance(value, int | float) else "-"

    def ended(r: dict[str, object]) -> str:
        if r["solved"]:
            return "solved"
        return "budget" if r["exit_code"] == 0 else f"exit {r['exit_code']}"

    info = describe()
    lines = [
        f"preset {args.preset}, overrides: {' '.join(args.overrides) or 'none'}",
        "",
        summary(info) + ".",
        "",
        "| runtime | seed | ended | wall s (with start) | env steps | trainer s | steps/s "
        "| steady steps/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['runtime']} | {r['seed']} | {ended(r)} | {r['wall_s']} "
            f"| {num(r['env_steps'])} | {num(r['trainer_s'])} | {num(r['steps_per_s'])} "
            f"| {num(r['steady_steps_per_s'])} |"
        )
    lines.append("")
    for key in ("steps_per_s", "steady_steps_per_s"):
        local, ray = median("local", key), median("ray", key)
        lines.append(
            f"median {key}: local {local:,.0f}, ray {ray:,.0f}; ray / local = {ray / local:.3f} "
            f"(Ray costs {100 * (1 - ray / local):.1f}%)"
        )
    ratio = median("ray", "steady_steps_per_s") / median("local", "steady_steps_per_s")
    text = "\n".join(lines)
    print(text)
    stem = "ray_vs_local" if args.preset == DEFAULT_PRESET else f"ray_vs_local_{args.preset}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(text + "\n")
    (args.out / f"{stem}.json").write_text(
        json.dumps(
            {
                "preset": args.preset,
                "overrides": args.overrides,
                "machine": info,
                "rows": rows,
                "steady_ratio": ratio,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
