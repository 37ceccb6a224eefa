"""LLM RL side by side on one CPU: surge synchronous (max_policy_lag 0), surge asynchronous,
and TRL's GRPOTrainer, from the same warm-start checkpoint, on the same task (2-digit
addition), with the same group size, batch, learning rate and completion length.

    python3 benchmarks/peers/setup_venvs.py trl          # once: TRL in its own venv
    .venv/bin/python benchmarks/llm.py [--seconds 420] [--async-lag 1]

Each contender runs for `--seconds` of training wall time (surge: its trainer's clock; TRL: its
training loop's, with evaluation time taken out) under benchmarks/peers/memmon.py, which
reports the peak memory (PSS) of its whole process tree. Held-out accuracy is greedy exact
match on the same 500 problems. Reported per contender: completion tokens/s generated and
trained, the time at which the mean of the last 5 evaluations first reached TRL's mean over
its last 240 s, that mean for each, the best reading, and peak memory.
Writes benchmarks/results/llm.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(REPO))
import memmon  # noqa: E402
from machine import summary  # noqa: E402

WINDOW = 5
LAST_S = 240.0
BATCH = 16 * 8


def warm_start_dir() -> Path:
    from surge.config.load import load_config
    from surge.llm.sft import WarmStartSettings, warm_start

    cfg, _ = load_config("arith-grpo", [])
    t, s = cfg.tiny_model, cfg.sft
    settings = WarmStartSettings(
        "arithmetic", dict(cfg.task.kwargs), t.hidden, t.layers, t.heads, 64, s.steps,
        s.batch_size, s.lr, s.target_accuracy, cfg.seed,
    )  # fmt: skip
    return warm_start(settings, log=print)


def run_surge(name: str, model: Path, lag: int, seconds: float, work: Path) -> dict:
    run_dir = work / name
    cmd = [
        str(REPO / ".venv" / "bin" / "surge"), "train", "arith-grpo", f"model.path={model}",
        f"max_policy_lag={lag}", f"run_dir={run_dir}", "total_env_steps=100000000",
        "log.progress=false", "log.interval_s=5",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # The trainer's clock starts after the workers load (a few seconds): stop on its clock.
    mem = memmon.run(cmd, timeout=seconds + 20, env=env, cwd=REPO, stderr=None)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [
        (r["wall_time_s"], r["eval/accuracy"])
        for r in rows
        if "eval/accuracy" in r and r["wall_time_s"] <= seconds
    ]
    train = [r for r in rows if "tokens_per_s" in r and r["wall_time_s"] <= seconds]
    last = train[-1]
    gaps = _gaps(train)
    generated = sum(r["tokens_per_s"] * dt for r, dt in zip(train, gaps, strict=True))
    trained = sum(r["trained_tokens_per_s"] * dt for r, dt in zip(train, gaps, strict=True))
    return {
        "evals": evals,
        "generated_tokens_per_s": generated / last["wall_time_s"],
        "trained_tokens_per_s": trained / last["wall_time_s"],
        "versions_per_s": last["policy_version"] / last["wall_time_s"],
        "peak_pss_mb": mem["peak_pss_mb"],
    }


def _gaps(rows: list[dict]) -> list[float]:
    times = [0.0] + [r["wall_time_s"] for r in rows]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def run_trl(model: Path, seconds: float, work: Path) -> dict:
    log = work / "trl.jsonl"
    python = HERE / ".venvs" / "trl" / "bin" / "python"
    cmd = [
        str(python), str(HERE / "peers" / "trl_grpo.py"), "--model", str(model),
        "--out", str(log), "--seconds", str(seconds),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    mem = memmon.run(cmd, timeout=seconds * 3 + 120, env=env, cwd=REPO)
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    evals = [(r["t"], r["accuracy"]) for r in rows if "accuracy" in r]
    logs = [r for r in rows if "completions/mean_length" in r]
    tokens, prev_step = 0.0, 0
    for r in logs:
        tokens += (r["step"] - prev_step) * BATCH * r["completions/mean_length"]
        prev_step = r["step"]
    end = logs[-1]["t"] if logs else 1.0
    return {
        "evals": evals,
        "generated_tokens_per_s": tokens / end,  # TRL trains every token it generates
        "trained_tokens_per_s": tokens / end,
        "versions_per_s": prev_step / end,
        "peak_pss_mb": mem["peak_pss_mb"],
    }


def last_mean(evals: list[tuple[float, float]]) -> float:
    end = evals[-1][0]
    window = [a for t, a in evals if t >= end - LAST_S]
    return sum(window) / len(window)


def time_to(evals: list[tuple[float, float]], target: float) -> float | None:
    for i in range(WINDOW, len(evals) + 1):
        if sum(a for _, a in evals[i - WINDOW : i]) / WINDOW >= target:
            return evals[i - 1][0]
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=420)
    p.add_argument("--async-lag", type=int, default=1)
    p.add_argument("--out", type=Path, default=HERE / "results" / "llm.md")
    p.add_argument("--report", type=Path, help="rewrite the report of an earlier run's directory")
    args = p.parse_args()
    if args.report:
        saved = json.loads((args.report / "results.json").read_text())
        report(saved["results"], saved["seconds"], saved["async_lag"], saved["model"], args.out)
        return 0
    work = Path(tempfile.mkdtemp(prefix="surge-llm-bench-"))
    model = warm_start_dir()
    results = {"TRL GRPOTrainer": run_trl(model, args.seconds, work)}
    results["surge sync (lag 0)"] = run_surge("sync", model, 0, args.seconds, work)
    results[f"surge async (lag {args.async_lag})"] = run_surge(
        "async", model, args.async_lag, args.seconds, work
    )
    saved = {"results": results, "seconds": args.seconds, "async_lag": args.async_lag}
    (work / "results.json").write_text(json.dumps({**saved, "model": str(model)}))
    report(results, args.seconds, args.async_lag, str(model), args.out)
    print(f"runs: {work}")
    return 0


def report(results: dict, seconds: float, lag: int, model: str, out: Path) -> None:
    target = last_mean(results["TRL GRPOTrainer"]["evals"])
    trl_time = time_to(results["TRL GRPOTrainer"]["evals"], target)
    lines = [
        "# LLM RL side by side: surge and TRL",
        "",
        f"Machine: {summary()}. Command: `.venv/bin/python benchmarks/llm.py --seconds "
        f"{seconds:g} --async-lag {lag}`. Warm start: {model}, held-out "
        f"accuracy {results['TRL GRPOTrainer']['evals'][0][1]:.1%}.",
        "",
        f"Target: TRL's mean held-out accuracy over its last {LAST_S:.0f} s, {target:.1%}. "
        f"'reaches target' is the first time the mean of the last {WINDOW} evaluations is at "
        "least that. Generated tokens/s: completion tokens generated and delivered to the "
        "trainer; trained: those with a loss weight (TRL trains all it generates).",
        "",
        "| contender | generated tokens/s | trained tokens/s | versions/s | reaches target | "
        "last 240 s mean | best | peak memory (PSS) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        reached = time_to(r["evals"], target)
        best = max(a for _, a in r["evals"])
        lines.append(
            f"| {name} | {r['generated_tokens_per_s']:,.0f} | {r['trained_tokens_per_s']:,.0f} "
            f"| {r['versions_per_s']:.2f} | "
            f"{f'{reached:.0f} s' if reached is not None else 'no'} | "
            f"{last_mean(r['evals']):.1%} | {best:.1%} | {r['peak_pss_mb']:,.0f} MB |"
        )
    trl = results["TRL GRPOTrainer"]
    for name, r in results.items():
        if name.startswith("surge"):
            reached = time_to(r["evals"], target)
            ratio = r["generated_tokens_per_s"] / trl["generated_tokens_per_s"]
            share = f"{reached / trl_time:.2f}" if reached and trl_time else "-"
            memory = r["peak_pss_mb"] / trl["peak_pss_mb"]
            lines.append(
                f"\n{name}: {ratio:.2f}x TRL's generated tokens/s; time to TRL's final "
                f"accuracy / TRL's own time to it: {share}; memory {memory:.2f}x TRL's."
            )
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
