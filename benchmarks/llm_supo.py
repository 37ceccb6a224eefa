"""Learning checks of multi-turn LLM agents: SUPO against truncation and a 4x window on
`recall`, and RL over the warm start on `guess`.

    .venv/bin/python benchmarks/llm_supo.py                      # recall: 3 presets, seed 1
    .venv/bin/python benchmarks/llm_supo.py --presets recall-supo --seeds 1,2,3
    .venv/bin/python benchmarks/llm_supo.py --presets guess-grpo --seeds 1,2,3 --rl-seconds 600

Each run is `surge train PRESET seed=S` with `max_train_time_s` = `--rl-seconds` (trainer
time: the warm start before it is not counted), its warm start trained into a fresh cache
under the output directory. Read from the run's metrics.jsonl:

- start: held-out success of version 0 (the warm start), from the evaluation worker;
- final: the mean of the last `LAST` held-out evaluations (single readings of 200 problems
  swing by a few points); best: the highest reading;
- at 2S: held-out success with `context.eval_max_summaries` (twice the training S), last;
- the longest context any trained episode showed the policy (`episode/context_max_max`).

Targets (asserted and printed): `recall-supo` >= 0.60 and >= 0.20 above its start;
`recall-truncate` <= 0.15; SUPO within 0.15 of `recall-grpo-4w`; SUPO's longest context
<= its window; `guess-grpo` >= 0.15 above its start. Writes benchmarks/results/llm_supo.md
and llm_supo.json (`--out`).
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402

LAST = 3


def read_run(run_dir: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/accuracy" in r]
    start = next((r["eval/accuracy"] for r in evals if r["eval/policy_version"] == 0), None)
    tail = [r["eval/accuracy"] for r in evals[-LAST:]]
    more = [r["eval/accuracy_eval_summaries"] for r in evals if "eval/accuracy_eval_summaries" in r]
    contexts = [r["episode/context_max_max"] for r in rows if "episode/context_max_max" in r]
    trained = [r for r in rows if "episodes" in r]
    return {
        "start": start,
        "final": sum(tail) / len(tail) if tail else None,
        "best": max((r["eval/accuracy"] for r in evals), default=None),
        "at_2S": more[-1] if more else None,
        "longest_context": max(contexts, default=None),
        "evaluations": len(evals),
        "last_version": evals[-1]["eval/policy_version"] if evals else None,
        "episodes": trained[-1]["episodes"] if trained else 0,
        "rl_seconds": rows[-1]["wall_time_s"] if rows else 0.0,
        "curve": [(r["eval/policy_version"], r["wall_time_s"], r["eval/accuracy"]) for r in evals],
    }


def run(preset: str, seed: int, seconds: float, work: Path) -> dict[str, Any]:
    run_dir = work / f"{preset}-seed{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SURGE_CACHE": str(work / "cache")}
    cmd = [
        str(REPO / ".venv" / "bin" / "surge"), "train", preset, f"seed={seed}",
        f"run_dir={run_dir}", f"max_train_time_s={seconds}", "total_env_steps=100000000",
        "log.progress=false",
    ]  # fmt: skip
    print(" ".join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{preset} seed {seed} failed ({done.returncode})")
    warm = [line.strip() for line in done.stderr.splitlines() if "warm start:" in line]
    return {"preset": preset, "seed": seed, "warm_start_log": warm, **read_run(run_dir)}


def checks(results: list[dict[str, Any]], window: int) -> list[tuple[str, bool]]:
    by = {}
    for r in results:
        by.setdefault(r["preset"], []).append(r)
    out: list[tuple[str, bool]] = []
    for r in by.get("recall-supo", []):
        gain = r["final"] - r["start"]
        out.append(
            (f"recall-supo seed {r['seed']}: final {r['final']:.3f} >= 0.60", r["final"] >= 0.6)
        )
        out.append(
            (f"recall-supo seed {r['seed']}: +{gain:.3f} over its start >= 0.20", gain >= 0.2)
        )
        ctx = r["longest_context"]
        out.append(
            (f"recall-supo seed {r['seed']}: longest context {ctx} <= {window}", ctx <= window)
        )
    for r in by.get("recall-truncate", []):
        out.append(
            (
                f"recall-truncate seed {r['seed']}: final {r['final']:.3f} <= 0.15",
                r["final"] <= 0.15,
            )
        )
    supo, whole = by.get("recall-supo", []), by.get("recall-grpo-4w", [])
    if supo and whole:
        a = sum(r["final"] for r in supo) / len(supo)
        b = sum(r["final"] for r in whole) / len(whole)
        out.append((f"SUPO {a:.3f} within 0.15 of recall-grpo-4w {b:.3f}", abs(a - b) <= 0.15))
    for r in by.get("guess-grpo", []):
        gain = r["final"] - r["start"]
        out.append(
            (f"guess-grpo seed {r['seed']}: +{gain:.3f} over its start >= 0.15", gain >= 0.15)
        )
    return out


def report(results: list[dict[str, Any]], verdicts: list[tuple[str, bool]], cmd: str) -> str:
    lines = [
        "# Multi-turn LLM agents: SUPO, truncation, a 4x window; RL over the warm start",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {summary()}",
        "",
        "| preset | seed | warm start | final (last 3) | best | at 2S summaries | longest context "
        "| episodes | RL s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:

        def f(x: Any) -> str:
            return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)

        lines.append(
            f"| {r['preset']} | {r['seed']} | {f(r['start'])} | {f(r['final'])} | {f(r['best'])} "
            f"| {f(r['at_2S'])} | {f(r['longest_context'])} | {r['episodes']:,} | "
            f"{r['rl_seconds']:.0f} |"
        )
    included = [r for r in results if r.get("included")]
    if included:
        lines += ["", "Included (run before this command, as it runs them):", ""]
        lines += [f"- {r['preset']} seed {r['seed']}: {r['included']}" for r in included]
    lines += ["", "Targets:", ""]
    lines += [f"- {'met' if ok else 'NOT met'}: {text}" for text, ok in verdicts]
    lines += ["", "Held-out success over time (version, trainer seconds, success):", ""]
    for r in results:
        curve = ", ".join(f"({v}, {s:.0f}, {a:.2f})" for v, s, a in r["curve"])
        lines.append(f"- {r['preset']} seed {r['seed']}: {curve}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--presets", default="recall-supo,recall-truncate,recall-grpo-4w")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--rl-seconds", type=float, default=1200.0)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PRESET:SEED:RUN_DIR",
        help="a run already made as this script makes it (`surge train PRESET seed=SEED "
        "max_train_time_s=...` on a fresh cache), reported beside the new ones",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="surge-llm-supo-"))
    results = []
    for spec in args.include:
        preset, seed, run_dir = spec.split(":", 2)
        results.append({"preset": preset, "seed": int(seed), "warm_start_log": [],
                        "included": run_dir, **read_run(Path(run_dir))})  # fmt: skip
    results += [
        run(preset, seed, args.rl_seconds, work)
        for seed in map(int, args.seeds.split(","))
        for preset in filter(None, args.presets.split(","))
    ]
    verdicts = checks(results, window=96)
    cmd = "python benchmarks/llm_supo.py " + " ".join(sys.argv[1:])
    text = report(results, verdicts, cmd.strip())
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "llm_guess" if "guess" in args.presets else "llm_supo"
    (args.out / f"{name}.md").write_text(text)
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=1))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
