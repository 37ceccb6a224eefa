"""One fresh `surge train` process, timed from launch, summarised from its metrics.jsonl:
what benchmarks/cartpole_solve.py and benchmarks/ray_vs_local.py each run per seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run_once(
    preset: str, runtime: str, seed: int, workdir: Path, extra: list[str]
) -> dict[str, object]:
    run_dir = workdir / f"{runtime}-{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "surge", "train", preset, f"runtime={runtime}",
            f"seed={seed}", f"run_dir={run_dir}", "log.progress=false", *extra,
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
        "preset": preset,
        "runtime": runtime,
        "seed": seed,
        "exit_code": proc.returncode,
        "solved": "surge: solved" in proc.stderr,
        "wall_s": round(wall, 1),
        "env_steps": last.get("env_steps"),
        "return_mean": last.get("episode_return_mean"),
        "trainer_s": last.get("wall_time_s"),
        "steps_per_s": round(last["env_steps"] / last["wall_time_s"]) if last else None,
        "steady_steps_per_s": round((last["env_steps"] - first["env_steps"]) / span)
        if span > 0
        else None,
    }
