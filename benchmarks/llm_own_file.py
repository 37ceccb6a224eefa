"""Learning check: a user's own JSONL file and reward function on the built-in model.

    .venv/bin/python benchmarks/llm_own_file.py                 # seed 1, 8 minutes of RL
    .venv/bin/python benchmarks/llm_own_file.py --seeds 1,2,3

No `model.path`: the built-in model spells its tokenizer from the file's text, the warm start
imitates the file's answers (until 30% of training problems are solved, as arith-grpo does),
and GRPO trains on `task.reward_fn`. The file: letter-sorting problems, "sort:dbca=" -> "abcd",
3 to 5 distinct letters from a-j, 5,000 rows (the held-out split is chosen by the prompt's
hash). The reward function below is exact match.

Each run is `surge train arith-grpo task.name=FILE task.kwargs={} task.reward_fn=...` with
`max_train_time_s` = `--rl-seconds` (trainer time: the warm start is not counted) and a fresh
cache. Target (asserted): held-out accuracy (mean of the last 3 evaluations) >= 20 points
above the warm start's (version 0). Writes benchmarks/results/llm_own_file.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from llm_supo import read_run  # noqa: E402
from machine import summary  # noqa: E402

LETTERS = "abcdefghij"


def exact(prompt: str, completion: str, answer: str, **meta: object) -> float:
    """The reward function the runs name (`benchmarks.llm_own_file:exact`)."""
    return float(completion.strip() == answer)


def write_sort_file(path: Path, rows: int = 5000, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(rows):
            letters = rng.sample(LETTERS, rng.randint(3, 5))
            prompt = f"sort:{''.join(letters)}="
            f.write(json.dumps({"prompt": prompt, "answer": "".join(sorted(letters))}) + "\n")


def run(data: Path, seed: int, seconds: float, work: Path) -> dict[str, Any]:
    run_dir = work / f"sort-seed{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SURGE_CACHE": str(work / "cache")}
    cmd = [
        str(REPO / ".venv" / "bin" / "surge"), "train", "arith-grpo", f"seed={seed}",
        f"task.name={data}", "task.kwargs={}", "task.reward_fn=benchmarks.llm_own_file:exact",
        "rollout.max_new_tokens=6", f"run_dir={run_dir}", f"max_train_time_s={seconds}",
        "total_env_steps=100000000", "log.progress=false",
    ]  # fmt: skip
    print(" ".join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"seed {seed} failed ({done.returncode})")
    warm = [line.strip() for line in done.stderr.splitlines() if "warm start:" in line]
    return {"seed": seed, "warm_start_log": warm, **read_run(run_dir)}


def report(results: list[dict[str, Any]], cmd: str) -> tuple[str, bool]:
    lines = [
        "# A user's JSONL file and reward function on the built-in model: letter sorting",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {summary()}",
        "",
        "| seed | warm start | final (last 3) | best | gain | episodes | RL s | warm start log |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ok = True
    for r in results:
        gain = r["final"] - r["start"]
        ok = ok and gain >= 0.2
        lines.append(
            f"| {r['seed']} | {r['start']:.3f} | {r['final']:.3f} | {r['best']:.3f} | "
            f"{gain:+.3f} | {r['episodes']:,} | {r['rl_seconds']:.0f} | "
            f"{'; '.join(r['warm_start_log'])} |"
        )
    lines += [
        "",
        f"Target, held-out accuracy >= 0.20 above the warm start: {'met' if ok else 'NOT met'}",
    ]
    lines += ["", "Held-out accuracy over time (version, trainer seconds, accuracy):", ""]
    for r in results:
        curve = ", ".join(f"({v}, {s:.0f}, {a:.2f})" for v, s, a in r["curve"])
        lines.append(f"- seed {r['seed']}: {curve}")
    return "\n".join(lines) + "\n", ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--rl-seconds", type=float, default=480.0)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="surge-own-file-"))
    data = work / "sort.jsonl"
    write_sort_file(data)
    results = [run(data, seed, args.rl_seconds, work) for seed in map(int, args.seeds.split(","))]
    cmd = "python benchmarks/llm_own_file.py " + " ".join(sys.argv[1:])
    text, ok = report(results, cmd.strip())
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llm_own_file.md").write_text(text)
    (args.out / "llm_own_file.json").write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
