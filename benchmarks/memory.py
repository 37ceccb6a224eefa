"""Memory: the `memory-gru` preset (CartPole-v1 without its velocities) with its GRU core and,
beside it, the same preset with a feed-forward model (`model.core=none`), per seed.

    .venv/bin/python benchmarks/memory.py                      # seeds 1 2 3, 1M steps each
    .venv/bin/python benchmarks/memory.py --seeds 1 --steps 300000

The check: the recurrent policy reaches a mean return (last 20 episodes) of at
least 400 within 1M env steps on every seed, and the feed-forward one stays below 200 (its
best logged mean over the run). Both run the full budget (`stop_return=null`), one at a time,
each a fresh `surge train` process under peers/memmon.py, which also measures the CPU other
processes used meanwhile (`foreign_cores`): this machine is shared.

Prints a Markdown table and writes it to --out/memory.md, the raw rows to memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from machine import describe, summary  # benchmarks/, next to this file

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import memmon  # noqa: E402  (benchmarks/peers, standard library only)

PRESET = "memory-gru"
TARGET = 400.0
FEED_FORWARD_CEILING = 200.0
VARIANTS = {"gru": [], "feed-forward": ["model.core=none"]}


def run(variant: str, seed: int, steps: int, workdir: Path) -> dict[str, Any]:
    run_dir = workdir / f"{variant}-{seed}"
    cmd = [
        sys.executable, "-m", "surge", "train", PRESET, f"seed={seed}", f"run_dir={run_dir}",
        f"total_env_steps={steps}", "stop_return=null", "log.progress=false",
        "log.interval_s=1", *VARIANTS[variant],
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    mem = memmon.run(cmd, timeout=3600, env=env, stdout=subprocess.DEVNULL, stderr=None)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if "steps_per_s" in r]
    returns = [(r["env_steps"], r["episode_return_mean"]) for r in records]
    reached = next((s for s, ret in returns if ret is not None and ret >= TARGET), None)
    last = records[-1]
    return {
        "variant": variant,
        "seed": seed,
        "env_steps": last["env_steps"],
        "steps_to_400": reached,
        "final_return": last["episode_return_mean"],
        "best_return": max(ret for _, ret in returns if ret is not None),
        "wall_s": round(mem["wall_s"], 1),
        "steps_per_s": round(last["env_steps"] / last["wall_time_s"]),
        "foreign_cores": round(mem["foreign_cores"], 2),
        "exit_code": mem["exit_code"],
        "curve": returns,
    }


def passed(row: dict[str, Any]) -> bool:
    if row["variant"] == "gru":
        return row["steps_to_400"] is not None
    return bool(row["best_return"] < FEED_FORWARD_CEILING)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for variant in VARIANTS:
                row = run(variant, seed, args.steps, Path(tmp))
                print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
                rows.append(row)

    info = describe()
    table = [
        f"`{PRESET}` (CartPole-v1 without velocities) with its GRU core and with "
        f"`model.core=none`, {args.steps:,} env steps each, one run at a time.",
        "",
        summary(info) + ". `foreign` = cores other processes used during the run.",
        "",
        "| model | seed | steps to 400 | best mean return | final mean return | wall s | "
        "steps/s | foreign | check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reached = f"{r['steps_to_400']:,}" if r["steps_to_400"] is not None else "never"
        rule = ">= 400" if r["variant"] == "gru" else "< 200"
        table.append(
            f"| {r['variant']} | {r['seed']} | {reached} | {r['best_return']:.1f} | "
            f"{r['final_return']:.1f} | {r['wall_s']} | {r['steps_per_s']:,} | "
            f"{r['foreign_cores']:.2f} | {rule}: {'pass' if passed(r) else 'FAIL'} |"
        )
    text = "\n".join(table)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.md").write_text(text + "\n")
    report = {"preset": PRESET, "steps": args.steps, "machine": info, "runs": rows}
    (args.out / "memory.json").write_text(json.dumps(report, indent=2) + "\n")
    if not all(passed(r) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
