"""The limits section of benchmarks/suite.py: for every throughput task surge ran, the raw
env rate and the learner-alone rate of the same config (benchmarks/limits.py, run in surge's
Python with the task's preset and overrides), beside surge's end-to-end steps/s.

End-to-end over the lower of the two limits says how much of what the machine can do
surge turns into training; with acting and learning overlapped on two cores the
end-to-end rate can come close to the slower of the two, never above it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def measure(
    surge_py: str, task: str, preset: str, overrides: list[str], secs: float, out: Path
) -> dict[str, Any] | None:
    """Run limits.py for one task; its JSON goes to OUT/limits/<task>.json."""
    path = out / "limits" / f"{task}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # The run-length overrides only matter to a training run.
    config = [o for o in overrides if not o.startswith(("stop_return=", "total_env_steps="))]
    cmd = [surge_py, str(HERE / "limits.py"), preset, "--secs", str(secs), "--json", str(path)]
    cmd += ["--set", *config] if config else []
    print(f"[suite] limits of {task}: {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=20 * secs + 300)
    if done.returncode != 0 or not path.exists():
        print(f"[suite] limits of {task} failed:\n{done.stderr[-2000:]}", flush=True)
        return None
    return load(out, task)


def load(out: Path, task: str) -> dict[str, Any] | None:
    path = out / "limits" / f"{task}.json"
    if not path.exists():
        return None
    result: dict[str, Any] = next(iter(json.loads(path.read_text()).values()))
    return result


def markdown(limits: dict[str, dict[str, Any]], surge_sps: dict[str, float | None]) -> list[str]:
    if not limits:
        return []
    lines = [
        "",
        "## Limits: how close surge runs to the machine",
        "",
        "env = random actions through the same env group (backend, preprocessing, resets), "
        "one process, no policy; learner = the same learner alone on a synthetic batch of "
        "the task's shape, with the task's trainer threads (`python benchmarks/limits.py`). "
        "Each is measured alone; surge runs both at once on the same 2 cores.",
        "",
        "| task | env steps/s | learner samples/s (ms/update) | surge steps/s | "
        "surge / lower limit |",
        "|---|---|---|---|---|",
    ]
    for task, lim in limits.items():
        env, learn = lim["env"]["env_steps_per_s"], lim["learner"]["samples_per_s"]
        sps = surge_sps.get(task)
        ratio = f"{sps / min(env, learn):.2f}" if sps else "–"
        lines.append(
            f"| {task} | {env:,.0f} | {learn:,.0f} ({lim['learner']['update_ms']:.1f}) "
            f"| {f'{sps:,.0f}' if sps else '–'} | {ratio} |"
        )
    return lines
