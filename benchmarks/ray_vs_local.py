"""What the Ray runtime costs on one machine: the same CartPole experiment on `local` and on a
one-node `ray` runtime (a Ray instance surge starts for the run), side by side.

Each run is a fresh `surge train` process of the default preset (PPO on CartPole-v1 until
solved), one at a time, alternating runtimes so both see the same machine. Two rates:
"steps/s" is env steps / trainer wall time (from the trainer's start: it leaves out process
and Ray start-up, which the wall-clock column includes, but not the wait for the first batch
while the other workers start); "steady steps/s" is measured between the first and the last
metrics line, so start-up of any kind is left out. The ratio uses the steady rate.

    .venv/bin/python benchmarks/ray_vs_local.py --seeds 1 2 3

Prints a Markdown table and the ratio ray / local of the median steps/s, and writes both (and
the raw numbers as JSON) to --out (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(runtime: str, seed: int, workdir: Path, extra: list[str]) -> dict[str, object]:
    run_dir = workdir / f"{runtime}-{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "surge", "train", f"runtime={runtime}", f"seed={seed}",
            f"run_dir={run_dir}", "log.progress=false", *extra,
        ],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    wall = time.monotonic() - started
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if run_dir.exists() else []
    first = json.loads(lines[0]) if lines else {}
    last = json.loads(lines[-1]) if lines else {}
    span = last.get("wall_time_s", 0.0) - first.get("wall_time_s", 0.0)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return {
        "runtime": runtime,
        "seed": seed,
        "exit_code": proc.returncode,
        "solved": "surge: solved" in proc.stderr,
        "wall_s": round(wall, 1),
        "env_steps": last.get("env_steps"),
        "trainer_s": last.get("wall_time_s"),
        "steps_per_s": round(last["env_steps"] / last["wall_time_s"]) if last else None,
        "steady_steps_per_s": round((last["env_steps"] - first["env_steps"]) / span)
        if span > 0
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for both runtimes")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for runtime in ("local", "ray"):
                row = run_once(runtime, seed, Path(tmp), args.overrides)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)

    def median(runtime: str, key: str) -> float:
        return statistics.median(
            float(r[key])  # type: ignore[arg-type]
            for r in rows
            if r["runtime"] == runtime and r[key] is not None
        )

    lines = [
        "| runtime | seed | solved | wall s (with start) | env steps | trainer s | steps/s "
        "| steady steps/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['runtime']} | {r['seed']} | {'yes' if r['solved'] else 'no'} | {r['wall_s']} "
            f"| {r['env_steps']:,} | {r['trainer_s']} | {r['steps_per_s']:,} "
            f"| {r['steady_steps_per_s']:,} |"
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
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray_vs_local.md").write_text(text + "\n")
    (args.out / "ray_vs_local.json").write_text(
        json.dumps({"rows": rows, "steady_ratio": ratio}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
