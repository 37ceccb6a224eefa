"""The arith-grpo learning check: for each seed, `surge train arith-grpo` from a fresh
warm start, then RL; reports the warm start's held-out accuracy and when RL first raised it by
40 points.

    .venv/bin/python benchmarks/llm_learning.py [--seeds 1,2,3] [--completions 400000]

"Raised by 40 points" is read from a window, not a single reading (single held-out readings
swing by +-10 points late in a run): the first evaluation at which the mean of the last
`WINDOW` readings is at least the version-0 accuracy + 0.40. Each seed's warm start is trained
into a fresh cache (`SURGE_CACHE` under the output directory), so its time is measured too.
Writes benchmarks/results/llm_learning.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402

WINDOW = 5
GAIN = 0.40
LAST_S = 240.0


def eval_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "eval/accuracy" in r]


def summarize(rows: list[dict]) -> dict:
    start = rows[0]["eval/accuracy"] if rows and rows[0]["eval/policy_version"] == 0 else None
    reached = None
    if start is not None:
        for i in range(WINDOW, len(rows) + 1):
            window = [r["eval/accuracy"] for r in rows[i - WINDOW : i]]
            if sum(window) / WINDOW >= start + GAIN:
                reached = rows[i - 1]["wall_time_s"]
                break
    end = rows[-1]["wall_time_s"] if rows else 0.0
    last = [r["eval/accuracy"] for r in rows if r["wall_time_s"] >= end - LAST_S]
    return {
        "start": start,
        "reached_s": reached,
        "last_mean": sum(last) / len(last) if last else None,
        "best": max((r["eval/accuracy"] for r in rows), default=None),
        "wall_s": end,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--completions", type=int, default=400_000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "llm_learning.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="surge-llm-learning-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SURGE_CACHE": str(work / "cache")}
    lines = []
    for seed in map(int, args.seeds.split(",")):
        run_dir = work / f"seed{seed}"
        cmd = [
            str(REPO / ".venv" / "bin" / "surge"), "train", "arith-grpo", f"seed={seed}",
            f"run_dir={run_dir}", f"total_env_steps={args.completions}", "log.progress=false",
        ]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        warm = next((work / "cache" / "warm-start").glob("*/warm_start.json"))
        record = json.loads(warm.read_text())
        warm.rename(warm.with_name(f"warm_start.seed{seed}.json"))  # next seed: its own file
        s = summarize(eval_rows(run_dir))
        reached = f"{s['reached_s']:.0f} s" if s["reached_s"] is not None else "not reached"
        line = (
            f"| {seed} | {s['start']:.1%} | {record['steps']} steps, {record['seconds']:.0f} s "
            f"| {reached} | {s['last_mean']:.1%} | {s['best']:.1%} | {s['wall_s']:.0f} s |"
        )
        print(line, flush=True)
        lines.append(line)
    header = [
        "# arith-grpo: warm start, then RL",
        "",
        f"Machine: {summary()}. Command: `.venv/bin/python benchmarks/llm_learning.py "
        f"--seeds {args.seeds} --completions {args.completions}`.",
        "",
        f"Held-out greedy exact match on 500 problems. '+40 points' is the RL wall time at which "
        f"the mean of the last {WINDOW} evaluations first reached the version-0 accuracy + 40 "
        f"points; 'last {LAST_S:.0f} s' is the mean of the evaluations in the run's last "
        f"{LAST_S:.0f} s.",
        "",
        f"| seed | warm start | warm-start cost | +40 points | last {LAST_S:.0f} s | best | RL "
        "wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    args.out.write_text("\n".join(header + lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
