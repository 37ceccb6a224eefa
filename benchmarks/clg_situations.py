"""What a reward model's r_CLG says before a crash: its contrast z and r_CLG by driving
situation (clear road, following a car, a car close ahead, crashed) on highway-env frames of
the driving presets' env.

    .venv/bin/python benchmarks/clg_situations.py                  # the built-in tiny CLIP
    .venv/bin/python benchmarks/clg_situations.py --path DIR       # a CLIP directory

A reward model that scores 1 everywhere short of a crash tells the agent nothing the crash's
own penalty does not; VLM-RL's reward lowers the speed asked for as a frame nears the
negative goal. The frames come from a scripted driver at a steady throttle (drawn per
episode) on held-out seeds, the situations from the simulator (surge/rewards/tinyclip.py
`situation`: close is under 15 m to the car ahead in its lane, following under 40 m). Writes
benchmarks/results/clg_situations.md and .json.
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
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402

from surge.config.reward_model_schema import RewardModelConfig  # noqa: E402
from surge.rewards.clg import clg_contrast, clg_from_contrast  # noqa: E402
from surge.rewards.clip import ClipScorer  # noqa: E402
from surge.rewards.models import make_scorer  # noqa: E402
from surge.rewards.tinyclip import situation  # noqa: E402

SITUATIONS = ("clear", "follow", "close", "crash")
PRESET = HERE.parent / "surge" / "config" / "presets" / "highway-vlmrl.yaml"


def drive(episodes: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """Frames and situations of `episodes` scripted episodes (throttle per episode, lane kept
    with a little steering noise) in highway-vlmrl's env."""
    from surge.envs.driving import make_driving_env

    env = make_driving_env(**yaml.safe_load(PRESET.read_text())["env"]["kwargs"])
    rng = np.random.default_rng(seed)
    frames: list[np.ndarray] = []
    kinds: list[str] = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        throttle = rng.uniform(-0.1, 0.6)
        done = False
        while not done:
            action = np.array([throttle, rng.normal(0.0, 0.05)], np.float32)
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            frames.append(info["frame"])
            kinds.append(situation(env.unwrapped.vehicle))  # type: ignore[attr-defined]
    env.close()
    return np.stack(frames), kinds


def measure(z: np.ndarray, kinds: list[str], low: float, high: float) -> dict[str, Any]:
    """Median z and r_CLG (ramp from `low` to `high`) of the frames of each situation."""
    r = clg_from_contrast(z, high, low)
    labels = np.array(kinds)
    rows = {}
    for kind in SITUATIONS:
        m = labels == kind
        if m.any():
            rows[kind] = {
                "frames": int(m.sum()),
                "z_median": float(np.median(z[m])),
                "r_clg_mean": float(r[m].mean()),
                "r_clg_below_1": float((r[m] < 0.999).mean()),
            }
    return {"threshold_min": low, "threshold": high, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", default=None, help="a CLIP directory (default: tiny CLIP)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=700_000)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    frames, kinds = drive(args.episodes, args.seed)
    scorer = make_scorer(RewardModelConfig(mode="clg", path=args.path))
    assert isinstance(scorer, ClipScorer)
    z = clg_contrast(scorer.embed(frames), scorer.positive, scorer.negative)
    own = measure(z, kinds, scorer.threshold_min, scorer.threshold)
    authors = measure(z, kinds, 0.0, scorer.threshold)  # VLM-RL's floor, for comparison
    record = {"episodes": args.episodes, "seed": args.seed, "model": args.path or "tiny CLIP",
              "ramp": own, "floor_0": authors}  # fmt: skip
    lines = [
        "# r_CLG by driving situation",
        "",
        f"Command: `{' '.join(['python benchmarks/clg_situations.py', *sys.argv[1:]])}`",
        "",
        f"Machine: {summary()}",
        "",
        f"Model: {record['model']}; {args.episodes} scripted episodes, {len(kinds)} frames. "
        f"The model's ramp: r_CLG 1 up to z = {own['threshold_min']:.3f}, 0 from "
        f"z = {own['threshold']:.3f}; beside it VLM-RL's floor of 0 with the same threshold.",
        "",
        "| situation | frames | median z | mean r_CLG | r_CLG < 1 | mean r_CLG, floor 0 "
        "| r_CLG < 1, floor 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, row in own["rows"].items():
        base = authors["rows"][kind]
        lines.append(
            f"| {kind} | {row['frames']} | {row['z_median']:.3f} | {row['r_clg_mean']:.3f} | "
            f"{row['r_clg_below_1']:.0%} | {base['r_clg_mean']:.3f} | "
            f"{base['r_clg_below_1']:.0%} |"
        )
    text = "\n".join([*lines, ""])
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "clg_situations.md").write_text(text)
    (args.out / "clg_situations.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
