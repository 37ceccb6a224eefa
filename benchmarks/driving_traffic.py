"""How often a scripted car collides in the VLM-RL presets' driving env, by traffic speed.

    .venv/bin/python benchmarks/driving_traffic.py                   # 100 episodes a cell
    .venv/bin/python benchmarks/driving_traffic.py --traffic 50,65 --traffic 40,55

The car holds a speed (`--speeds`, km/h) in its lane: throttle toward the speed and a
steering that cancels its lane offset and heading error, never braking for the car ahead.
Each traffic setting is highway-env's own (the other cars at 76-86 km/h) or
`env.kwargs.traffic_speed_kmh=[low, high]` (surge/envs/driving.py). The collision rate of such
a car says whether the traffic forces a driver to react: a trained agent that keeps the same
pace without colliding has learned to. The env is highway-state's (its preset's env.kwargs).
Writes benchmarks/results/driving_traffic.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from machine import summary  # noqa: E402
from vlm_reward import rate_interval  # noqa: E402

PRESET = HERE.parent / "surge" / "config" / "presets" / "highway-state.yaml"


def hold_speed(speed_kmh: float, info: dict[str, Any]) -> np.ndarray:
    """Throttle toward `speed_kmh` (full at 18 km/h off) and steer back to the lane centre."""
    throttle = np.clip((speed_kmh - info["speed_kmh"]) / 18.0, -1.0, 1.0)
    steer = np.clip(-0.5 * info["lane_offset"] - 2.0 * info["heading_error"], -1.0, 1.0)
    return np.array([throttle, steer], np.float32)


def drive(
    traffic: list[float] | None, speed_kmh: float, episodes: int, seed: int
) -> dict[str, Any]:
    from surge.envs.driving import make_driving_env

    kwargs = yaml.safe_load(PRESET.read_text())["env"]["kwargs"]
    env = make_driving_env(**{**kwargs, "traffic_speed_kmh": traffic})
    collisions, speeds = [], []
    for episode in range(episodes):
        _, info = env.reset(seed=seed + episode)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(hold_speed(speed_kmh, info))
            done = terminated or truncated
        collisions.append(info["episode_metrics"]["collision"])
        speeds.append(info["episode_metrics"]["speed_kmh"])
    env.close()
    rate, low, high = rate_interval(collisions)
    return {
        "traffic_speed_kmh": traffic, "hold_kmh": speed_kmh, "episodes": episodes,
        "collision_rate": rate, "interval95": [low, high], "speed_kmh": float(np.mean(speeds)),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--traffic", action="append", default=None, metavar="LOW,HIGH",
        help="traffic_speed_kmh settings (repeatable); highway-env's own traffic is always in",
    )  # fmt: skip
    parser.add_argument("--speeds", default="72,90", help="held speeds, km/h, comma-separated")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=800_000)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    traffics: list[list[float] | None] = [None]
    for text in args.traffic or ["50,65"]:
        traffics.append([float(v) for v in text.split(",")])
    speeds = [float(v) for v in args.speeds.split(",")]
    rows = [drive(t, s, args.episodes, args.seed) for t in traffics for s in speeds]
    lines = [
        "# A car that holds its speed in its lane, by traffic speed",
        "",
        f"Command: `{' '.join(['python benchmarks/driving_traffic.py', *sys.argv[1:]])}`",
        "",
        f"Machine: {summary()}",
        "",
        f"highway-state's env, {args.episodes} episodes a row (seeds {args.seed} on). The car",
        "never brakes for the car ahead. Collision rate with its Wilson 95% interval.",
        "",
        "| other cars | held speed | collisions | 95% interval | mean speed |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        t = row["traffic_speed_kmh"]
        traffic = "76-86 km/h (highway-env's)" if t is None else f"{t[0]:g}-{t[1]:g} km/h"
        low, high = row["interval95"]
        lines.append(
            f"| {traffic} | {row['hold_kmh']:g} km/h | {row['collision_rate']:.0%} "
            f"| {low:.0%}-{high:.0%} | {row['speed_kmh']:.1f} km/h |"
        )
    text = "\n".join([*lines, ""])
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "driving_traffic.md").write_text(text)
    record = {"episodes": args.episodes, "seed": args.seed, "rows": rows}
    (args.out / "driving_traffic.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
