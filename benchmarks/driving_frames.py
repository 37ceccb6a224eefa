"""What does a camera frame add to a driving env step? Steps `highway-vlmrl`'s env (one env,
the preset's kwargs, driven by driving_traffic.py's `hold_speed` at 80 km/h) without
frames, with frames drawn by highway-env's own `EnvViewer.display()`, and with the frames'
`FrameViewer` (surge/envs/driving_frames.py: the same pixels, straight lanes drawn on
arrays).

The three alternate in rounds of `--steps` steps from the same seeds, so host noise hits
them alike; the table (results/driving_frames.md) shows each one's median round in ms per
step, and the frames' cost over the frameless step.

    python benchmarks/driving_frames.py
    python benchmarks/driving_frames.py --rounds 9 --steps 300
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import machine  # benchmarks/, next to this file
from driving_traffic import hold_speed

from surge.config.load import load_config
from surge.envs.driving import make_driving_env

RESULTS = Path(__file__).resolve().parent / "results"
CASES = ("no frames", "EnvViewer frames", "FrameViewer frames")


def make_env(case: str, kwargs: dict[str, Any]) -> Any:
    env = make_driving_env(**{**kwargs, "frames": case != "no frames"})
    if case == "EnvViewer frames":
        from highway_env.envs.common.graphics import EnvViewer

        base = env.unwrapped
        env._viewer = EnvViewer(base, {**base.config, "offscreen_rendering": True})
        env._viewer.enabled = True
    return env


def drive(env: Any, steps: int, seed: int) -> float:
    """Seconds per step over `steps` steps at 80 km/h in the lane's centre, resetting at
    episode ends."""
    _, info = env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(hold_speed(80.0, info))
        if terminated or truncated:
            _, info = env.reset()
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="highway-vlmrl")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=200, help="env steps per case per round")
    p.add_argument("--out", type=Path, default=RESULTS / "driving_frames.md")
    args = p.parse_args()
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    cfg, _ = load_config(args.preset, [])
    kwargs = {k: v for k, v in dict(cfg.env.kwargs).items() if k != "frames"}
    envs = {case: make_env(case, kwargs) for case in CASES}
    times: dict[str, list[float]] = {case: [] for case in CASES}
    for env in envs.values():
        drive(env, 20, seed=0)  # warm: first frames build the viewer, fonts and surfaces
    for r in range(args.rounds):
        for case, env in envs.items():
            times[case].append(drive(env, args.steps, seed=r + 1))
    ms = {case: 1e3 * statistics.median(t) for case, t in times.items()}
    base = ms["no frames"]
    lines = [
        "# A driving env step's cost with camera frames",
        "",
        f"Command: `python benchmarks/driving_frames.py --preset {args.preset} --rounds "
        f"{args.rounds} --steps {args.steps}`",
        "",
        f"Machine: {machine.summary()}",
        "",
        "| case | ms per step (median round) | frame's cost, ms | steps/s vs no frames |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        cost = f"{ms[case] - base:.3f}" if case != "no frames" else "-"
        lines.append(f"| {case} | {ms[case]:.3f} | {cost} | {100 * base / ms[case]:.1f}% |")
    report = "\n".join(lines) + "\n"
    print(report, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    for env in envs.values():
        env.close()


if __name__ == "__main__":
    main()
