"""Learning checks of the multi-agent presets, each seed a fresh run with a time
budget, one at a time:

    .venv/bin/python benchmarks/multiagent_learning.py --task spread [--seeds 1 2 3] [--minutes 30]
    .venv/bin/python benchmarks/multiagent_learning.py --task connect4 [--seeds 1 2 3]
    .venv/bin/python benchmarks/multiagent_learning.py --task spread --report-only

- `spread`: `spread-mappo` (and `--presets spread-ippo` beside it) on MPE simple_spread for
  `--minutes` each; the target is a mean episode return (summed over the 3 agents, over the
  preset's `return_window` of 100 episodes) of at least -55. Reports when each run first
  reached it, the return at the end and the env steps trained.
- `connect4`: `connect4-selfplay` for `--minutes` each, then `surge eval RUN episodes=200`
  on the final checkpoint: 200 games against the random and 200 against the heuristic
  player, seats alternating; targets >= 95% and >= 60% wins. The curve of the evaluation
  workers' 100-game evaluations during training is reported too.

Every run goes through peers/memmon.py, which records the CPU other processes used
(`foreign_cores`): a run beside another job is marked noisy. Runs are kept under
benchmarks/results/multiagent_runs/ (not committed); the report is
benchmarks/results/multiagent_<task>.md, headed by the machine line (machine.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNS = HERE / "results" / "multiagent_runs"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
import memmon  # noqa: E402
from machine import summary  # noqa: E402

SPREAD_TARGET = -55.0
WIN_TARGETS = {"random": 0.95, "heuristic": 0.60}
NOISY_FOREIGN_CORES = 0.3


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spread_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """When the logged window mean first reached the target, and the end of the run."""
    train = [r for r in rows if "steps_per_s" in r and r["episode_return_mean"] is not None]
    reached = next((r for r in train if r["episode_return_mean"] >= SPREAD_TARGET), None)
    last = train[-1] if train else {}
    return {
        "reached_s": reached["wall_time_s"] if reached else None,
        "reached_steps": reached["env_steps"] if reached else None,
        "final_return": last.get("episode_return_mean"),
        "best_return": max((r["episode_return_mean"] for r in train), default=None),
        "env_steps": last.get("env_steps"),
        "agent_steps": last.get("agent_steps"),
        "wall_s": last.get("wall_time_s"),
        "steps_per_s": (last["env_steps"] / last["wall_time_s"]) if last else None,
    }


def connect4_summary(rows: list[dict[str, Any]], final: dict[str, Any]) -> dict[str, Any]:
    train = [r for r in rows if "steps_per_s" in r]
    evals = [r for r in rows if "eval/win_rate_vs_random" in r]
    start = train[0]["time"] - train[0]["wall_time_s"] if train else 0.0

    def first(player: str) -> float | None:
        target = WIN_TARGETS[player]
        hit = next((r for r in evals if r[f"eval/win_rate_vs_{player}"] >= target), None)
        return None if hit is None else hit["time"] - start

    last = train[-1] if train else {}
    return {
        "env_steps": last.get("env_steps"),
        "wall_s": last.get("wall_time_s"),
        "steps_per_s": (last["env_steps"] / last["wall_time_s"]) if last else None,
        "final_random": final.get("win_rate_vs_random"),
        "final_heuristic": final.get("win_rate_vs_heuristic"),
        "draw_heuristic": final.get("draw_rate_vs_heuristic"),
        "first_random_s": first("random"),
        "first_heuristic_s": first("heuristic"),
        "curve": [
            (
                round(r["time"] - start),
                r["eval/win_rate_vs_random"],
                r["eval/win_rate_vs_heuristic"],
            )
            for r in evals
        ],
    }


def run(preset: str, seed: int, minutes: float, extra: list[str]) -> dict[str, Any]:
    run_dir = RUNS / f"{preset}-s{seed}"
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    cmd = [
        str(REPO / ".venv" / "bin" / "surge"), "train", preset, f"seed={seed}",
        f"run_dir={run_dir}", f"max_train_time_s={minutes * 60:g}",
        "total_env_steps=10000000000", "log.progress=false", "log.interval_s=10", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    RUNS.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(RUNS / f"{preset}-s{seed}.log", "w") as log:
        mem = memmon.run(
            cmd, timeout=minutes * 60 + 300, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
        )
    record = {
        "preset": preset,
        "seed": seed,
        "command": " ".join(cmd[1:]),
        "started": started,
        "exit_code": mem["exit_code"],
        "foreign_cores": mem["foreign_cores"],
        "peak_pss_mb": mem["peak_pss_mb"],
    }
    (RUNS / f"{preset}-s{seed}.json").write_text(json.dumps(record, indent=1))
    return record


def evaluate(preset: str, seed: int, games: int) -> dict[str, Any]:
    run_dir = RUNS / f"{preset}-s{seed}"
    cmd = [str(REPO / ".venv" / "bin" / "surge"), "eval", str(run_dir), f"episodes={games}"]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    result: dict[str, Any] = json.loads((run_dir / "eval.json").read_text())
    return result


def _f(value: Any, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def report(
    task: str,
    presets: list[str],
    seeds: list[int],
    minutes: float,
    stop_at_target: bool = False,
    out: str = "",
) -> str:
    lines = [
        f"# Multi-agent learning check: {task}",
        "",
        f"Machine: {summary()}.",
        f"Command: `.venv/bin/python benchmarks/multiagent_learning.py --task {task} --seeds "
        f"{' '.join(map(str, seeds))} --minutes {minutes:g}"
        + (f" --presets {','.join(presets)}" if task == "spread" else "")
        + (" --stop-at-target" if stop_at_target else "")
        + (f" --out {out}`." if out else "`."),
        "",
    ]
    if task == "spread":
        lines += [
            f"Target: a mean episode return (summed over the 3 agents, over the last 100 "
            f"episodes) of at least {SPREAD_TARGET:g} within {minutes:g} minutes. For scale: "
            "a uniformly random policy gets -79.9 +- 24.2, a scripted policy with full "
            "information -27.8 +- 10.3 (measured on this kind of machine)."
            + (
                " Each run stopped once it reached the target (`stop_return`), so its return "
                "at the end is the target's neighbourhood, not a plateau."
                if stop_at_target
                else ""
            ),
            "",
            "| preset | seed | reached -55 | at env steps | return at the end | best | env steps | "
            "env steps/s | CPU outside the run |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            f"Targets: at least {WIN_TARGETS['random']:.0%} wins against the random player and "
            f"{WIN_TARGETS['heuristic']:.0%} against the heuristic player, in 200 games each "
            f"(seats alternating) with the checkpoint after {minutes:g} minutes "
            "(`surge eval RUN episodes=200`). 'First reached' is the first 100-game "
            "evaluation during training at the target, in seconds from the trainer's start.",
            "",
            "| seed | wins vs random | wins vs heuristic (draws) | first reached (random / "
            "heuristic) | env steps | env steps/s | CPU outside the run |",
            "|---|---|---|---|---|---|---|",
        ]
    curves = []
    for preset in presets:
        for seed in seeds:
            meta_path = RUNS / f"{preset}-s{seed}.json"
            if not meta_path.exists():
                continue
            meta = json.loads(meta_path.read_text())
            rows = metrics(RUNS / f"{preset}-s{seed}")
            noisy = " (noisy)" if meta["foreign_cores"] >= NOISY_FOREIGN_CORES else ""
            foreign = f"{meta['foreign_cores']:.2f} cores{noisy}"
            if task == "spread":
                s = spread_summary(rows)
                reached = _f(s["reached_s"], ".0f", "not reached")
                lines.append(
                    f"| {preset} | {seed} | {reached}{'' if s['reached_s'] is None else ' s'} | "
                    f"{_f(s['reached_steps'], ',')} | {_f(s['final_return'], '.1f')} | "
                    f"{_f(s['best_return'], '.1f')} | {_f(s['env_steps'], ',')} | "
                    f"{_f(s['steps_per_s'], ',.0f')} | {foreign} |"
                )
            else:
                final_path = RUNS / f"{preset}-s{seed}" / "eval.json"
                final = json.loads(final_path.read_text()) if final_path.exists() else {}
                s = connect4_summary(rows, final)
                lines.append(
                    f"| {seed} | {_f(s['final_random'], '.1%')} | "
                    f"{_f(s['final_heuristic'], '.1%')} ({_f(s['draw_heuristic'], '.1%')}) | "
                    f"{_f(s['first_random_s'], '.0f')} s / {_f(s['first_heuristic_s'], '.0f')} s"
                    f" | {_f(s['env_steps'], ',')} | {_f(s['steps_per_s'], ',.0f')} | {foreign} |"
                )
                curves.append((seed, s["curve"]))
    if curves:
        lines += [
            "",
            "Evaluations during training (seconds, wins vs random, wins vs heuristic):",
            "",
        ]
        for seed, curve in curves:
            points = ", ".join(f"{t} s: {r:.0%} / {h:.0%}" for t, r, h in curve)
            lines.append(f"- seed {seed}: {points}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", choices=["spread", "connect4"], required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--presets", default="", help="spread: comma-separated presets")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        help="wait up to this long for an idle machine before each run",
    )
    parser.add_argument(
        "--stop-at-target",
        action="store_true",
        help="spread: each run stops once its window mean reaches the target (stop_return)",
    )
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--out", default="", help="the report's file name (default: multiagent_<task>.md)"
    )
    args = parser.parse_args()
    if args.task == "spread":
        presets = args.presets.split(",") if args.presets else ["spread-mappo"]
    else:
        presets = ["connect4-selfplay"]
    if not args.report_only:
        for preset in presets:
            for seed in args.seeds:
                if args.quiet_wait:
                    memmon.wait_for_quiet(args.quiet_wait)
                if args.task == "connect4":
                    extra = ["eval.workers=1", "eval.episodes=100", "eval.every_s=120"]
                else:
                    extra = [f"stop_return={SPREAD_TARGET:g}"] if args.stop_at_target else []
                run(preset, seed, args.minutes, extra)
                if args.task == "connect4":
                    evaluate(preset, seed, games=200)
                print(
                    report(
                        args.task, presets, args.seeds, args.minutes, args.stop_at_target, args.out
                    ),
                    flush=True,
                )
    text = report(args.task, presets, args.seeds, args.minutes, args.stop_at_target, args.out)
    out = HERE / "results" / (args.out or f"multiagent_{args.task}.md")
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
