"""What the Ray runtime costs on one machine: the same CartPole experiment on `local` and on a
one-node `ray` runtime (a Ray instance surge starts for the run), side by side.

Each run is a fresh `surge train` process of the default preset (PPO on CartPole-v1 until
solved), one at a time, alternating runtimes so both see the same machine. steps/s is the
trainer's: env steps / trainer wall time (from the trainer's start, so it leaves out process
and Ray start-up, which the wall-clock column includes).

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
    last = json.loads(lines[-1]) if lines else {}
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

    def median(runtime: str) -> float:
        return statistics.median(
            float(r["steps_per_s"])  # type: ignore[arg-type]
            for r in rows
            if r["runtime"] == runtime and r["steps_per_s"] is not None
        )

    local, ray = median("local"), median("ray")
    lines = [
        "| runtime | seed | solved | wall s (with start) | env steps | trainer s | steps/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['runtime']} | {r['seed']} | {'yes' if r['solved'] else 'no'} | {r['wall_s']} "
            f"| {r['env_steps']:,} | {r['trainer_s']} | {r['steps_per_s']:,} |"
        )
    lines.append("")
    lines.append(
        f"median steps/s: local {local:,.0f}, ray {ray:,.0f}; ray / local = {ray / local:.3f} "
        f"(Ray costs {100 * (1 - ray / local):.1f}%)"
    )
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray_vs_local.md").write_text(text + "\n")
    (args.out / "ray_vs_local.json").write_text(
        json.dumps({"rows": rows, "ratio": ray / local}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
