"""Raw env steps/s of surge's Atari env groups: random actions, no policy, one process.

Each backend steps one group of `--envs` envs through `make_group` (the code the actor
runs: preprocessing, frame stacking into the slot, reward clipping, episodic life, resets).
Steps are agent steps (x frame_skip = emulator frames).

    python benchmarks/env_speed.py                       # Pong, 8 envs, every backend
    python benchmarks/env_speed.py --env ALE/Breakout-v5 --secs 5
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import machine  # benchmarks/, next to this file
import numpy as np

from surge.config.schema import EnvConfig
from surge.envs.group import make_group
from surge.errors import ConfigError

CASES = [  # (backend, env.threads)
    ("ale", 1),
    ("ale", 2),
    ("envpool", 1),
    ("envpool", 2),
    ("gymnasium", 1),
]


def machine_busy_s() -> float:
    """CPU seconds all processes on the machine have used (from /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure(env_id: str, backend: str, threads: int, envs: int, secs: float) -> dict[str, float]:
    cfg = EnvConfig(id=env_id, backend=backend, threads=threads)  # type: ignore[arg-type]
    obs = {"obs": np.zeros((envs, 4, 84, 84), np.uint8)}
    group = make_group(cfg, list(range(1, envs + 1)), obs)
    group.reset()
    n = group.action_space.n  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    actions = rng.integers(0, n, (4096, envs))
    for t in range(50):  # warm up
        group.step(actions[t])
    steps, games = 0, 0
    busy0, cpu0, t0 = machine_busy_s(), time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < secs:
        group.step(actions[steps % len(actions)])
        games += int(group.game_over.sum())
        steps += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    group.close()
    return {
        "sps": steps * envs / wall,
        "cores_used": cpu / wall,
        "foreign_cores": max(0.0, (machine_busy_s() - busy0 - cpu) / wall),
        "games": games,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="ALE/Pong-v5")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--secs", type=float, default=10.0)
    args = ap.parse_args()
    print(machine.summary())
    print(f"{args.env}, {args.envs} envs, random actions, {args.secs:.0f} s each")
    print("| backend | env.threads | steps/s | cores used | others' cores |")
    print("|---|---|---|---|---|")
    for backend, threads in CASES:
        if backend == "envpool" and importlib.util.find_spec("envpool") is None:
            continue  # the `envpool` extra is not installed
        try:
            r = measure(args.env, backend, threads, args.envs, args.secs)
        except ConfigError as e:  # e.g. `ale` for a non-Atari id
            print(f"| {backend} | {threads} | skipped: {e.problem} | | |", flush=True)
            continue
        print(
            f"| {backend} | {threads if backend != 'gymnasium' else '-'} | {r['sps']:,.0f} | "
            f"{r['cores_used']:.2f} | {r['foreign_cores']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
