"""Asynchronous against synchronous LLM RL, measured on countdown, whose completion lengths
vary widely (a synchronous batch waits for its longest sequence), and simulated at 1, 4 and 16
generation workers per trainer.

    .venv/bin/python benchmarks/llm_async.py [--seconds 300] [--lags 1,2,4] [--sync-threads 1,2]
        [--caches keep,recompute] [--report DIR [--rerun sync-2,async-1-keep,...]]

Every run starts from the same warm start (`countdown-grpo`'s, cached) and trains for
`--seconds` on the trainer's clock, under benchmarks/peers/memmon.py (which also reports CPU
used outside the run). Synchronous runs (max_policy_lag 0) alternate generation and training,
so each stage may use both cores: they run with 1 and with 2 torch threads per stage and the
faster is the baseline. Asynchronous runs overlap the stages, one thread each, and run once
per way of treating in-flight sequences at a new version (`--caches`): `keep` their cache
(`rollout.keep_cache: true`, PipelineRL's in-flight update, the preset's setting) or
`recompute` it (AReaL's).

Reported per run: trained tokens/s (tokens with a loss weight), generated tokens/s, versions/s,
the busy share of each stage (timing.json: CPU seconds per second of the run; the generator's
weight loading, with any cache recomputation, apart from its decoding), and held-out accuracy at
equal trained tokens: the mean of the evaluations made between 75% and 100% of the smallest
token count any run reached.

Then the stage costs are measured alone, one thread each (decode step against active
sequences, the cache recomputation per token, the update of a batch, version publication) together
with the warm start's completion lengths, and benchmarks/llm_pipeline_sim.py simulates the
pipeline with 1, 4 and 16 generation workers per trainer, each stage on its own device, keeping
and recomputing the cache.
Writes benchmarks/results/llm_async.md. The runs are saved in a directory (printed; runs.json
after each run): `--report DIR` reports them again, completes the runs missing there and, with
`--rerun`, runs the named ones again (say, one a neighbour's load disturbed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(REPO))
import memmon  # noqa: E402
from llm_pipeline_sim import Costs, simulate  # noqa: E402
from machine import summary  # noqa: E402

PRESET = "countdown-grpo"
EQUAL_FROM = 0.75


def warm_start_dir() -> Path:
    from surge.config.load import load_config
    from surge.llm.sft import WarmStartSettings, warm_start

    cfg, _ = load_config(PRESET, [])
    t, s = cfg.tiny_model, cfg.sft
    settings = WarmStartSettings(
        cfg.task.name, dict(cfg.task.kwargs), t.hidden, t.layers, t.heads, 64, s.steps,
        s.batch_size, s.lr, s.target_accuracy, cfg.seed,
    )  # fmt: skip
    return warm_start(settings, log=print)


# ----------------------------------------------------------------------------- measured runs


def run(
    name: str, model: Path, lag: int, threads: int, seconds: float, work: Path, keep_cache: bool
) -> dict:
    run_dir = work / name.replace(" ", "-").replace(",", "")
    cmd = [
        str(REPO / ".venv" / "bin" / "surge"), "train", PRESET, f"model.path={model}",
        f"max_policy_lag={lag}", f"rollout.threads={threads}", f"grpo.threads={threads}",
        f"rollout.keep_cache={str(keep_cache).lower()}",
        f"run_dir={run_dir}", "total_env_steps=100000000", "log.progress=false",
        "log.interval_s=5",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    mem = memmon.run(cmd, timeout=seconds + 25, env=env, cwd=REPO, stderr=None)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "trained_tokens_per_s" in r and r["wall_time_s"] <= seconds]
    times = np.array([0.0] + [r["wall_time_s"] for r in train])
    trained = np.cumsum([0.0] + [r["trained_tokens_per_s"] * dt for r, dt in zip(
        train, np.diff(times), strict=True)])  # fmt: skip
    generated = sum(r["tokens_per_s"] * dt for r, dt in zip(train, np.diff(times), strict=True))
    evals = [
        (r["wall_time_s"], float(np.interp(r["wall_time_s"], times, trained)), r["eval/accuracy"])
        for r in rows
        if "eval/accuracy" in r and r["wall_time_s"] <= seconds
    ]
    timing = json.loads((run_dir / "timing.json").read_text())["processes"]
    wall = times[-1]
    return {
        "lag": lag,
        "threads": threads,
        "wall_s": wall,
        "trained_tokens": trained[-1],
        "trained_tokens_per_s": trained[-1] / wall,
        "generated_tokens_per_s": generated / wall,
        "versions_per_s": train[-1]["policy_version"] / wall,
        "publish_s": float(np.mean([r["publish_s"] for r in train])),
        "length_mean": float(np.mean([r["response_length_mean"] for r in train])),
        "computed_groups": float(np.mean([r["computed_groups"] for r in train])),
        "evals": evals,
        "busy": {
            "trainer": timing["trainer-0"]["learn"] / wall,
            "generator": timing["generator-0"]["inference"] / wall,
            "weight_load": timing["generator-0"]["copy"] / wall,
            "rewarder": timing["rewarder-0"]["env"] / wall,
            "evaluator": timing["llm-evaluator-0"]["cpu_total"] / wall,
        },
        "foreign_cores": mem.get("foreign_cores", float("nan")),
    }


def accuracy_at(evals: list[tuple[float, float, float]], tokens: float) -> float:
    window = [a for _, n, a in evals if EQUAL_FROM * tokens <= n <= tokens]
    return float(np.mean(window)) if window else float("nan")


# ----------------------------------------------------------------------------- stage costs


def calibrate(model_dir: Path, publish_s: float, computed: float) -> tuple[Costs, list[int]]:
    """Each stage alone on one thread, from the warm start, in CPU seconds (process time: a
    busy neighbour on the machine does not inflate them). `computed`: the share of groups the
    runs' updates computed (the others had equal rewards, so no gradient)."""
    import random

    import torch

    from surge.algos.grpo_update import grpo_update
    from surge.config.load import load_config
    from surge.llm.engine import Decoding, Engine, Request
    from surge.llm.lean import LeanLlama
    from surge.llm.model import encode_prompt, load_model
    from surge.llm.tasks import make_task

    torch.set_num_threads(1)
    cfg, _ = load_config(PRESET, [])
    r = cfg.rollout
    model, tok = load_model(model_dir)
    task = make_task(cfg.task.name, cfg.task.kwargs)
    problems = task.sample("train", 64, random.Random(0))
    prompts = [tuple(encode_prompt(tok, p.prompt)) for p in problems]
    width = max(len(p) for p in prompts)
    prompt_tokens = round(float(np.mean([len(p) for p in prompts])))

    decoding = Decoding(
        max_prompt=width, max_new_tokens=r.max_new_tokens, eos_id=tok.eos_token_id,
        temperature=r.temperature, top_p=r.top_p, seed=0,
    )  # fmt: skip

    def engine(slots: int) -> Engine:
        return Engine(model, slots, decoding)

    # Decode steps against active sequences, the cache recomputation of a new version, and
    # the completion lengths.
    sizes, step_s, lengths, recompute = [], [], [], []
    for slots in (16, 64, 128, 256):
        e = engine(slots)
        e.submit([Request(i, prompts[i // r.group_size % 64]) for i in range(slots)])
        done, steps = e.step(), []  # admission (one prefill per group) and the first token
        while not e.idle():
            active = e.active
            if active == slots and len(steps) == 4:  # mid-sequence: every slot busy
                t = time.process_time()
                e.set_version(1, recompute=True)
                busy = [s for s in e.slots if s]  # a group's prompt is recomputed once
                shared = {(s.request.key // r.group_size, s.request.prompt) for s in busy}
                inflight = sum(len(p) for _, p in shared)
                inflight += sum(len(s.out.tokens) - 1 for s in busy)
                recompute.append((time.process_time() - t) / inflight)
            t = time.process_time()
            done += e.step()
            steps.append((active, time.process_time() - t))
        full = [s for a, s in steps if a == slots]
        if full:
            sizes.append(slots)
            step_s.append(float(np.median(full)))
        lengths += [len(c.tokens) for c in done]
    step_per_seq, step_fixed = np.polyfit(sizes, step_s, 1)

    # The trainer's update of a batch of sampled lengths, with the runs' share of groups
    # computed (the rest have equal rewards: no gradient, skipped).
    lean = LeanLlama(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # timing only: weights stay
    groups = r.prompts_per_batch
    n = groups * r.group_size
    informative = max(1, round(computed * groups))
    rng = random.Random(0)
    seqs = [rng.choice(lengths) for _ in range(n)]
    N = max(seqs)
    rewards = [float(i % 2) if i // r.group_size < informative else 0.0 for i in range(n)]
    data = {
        "prompts": torch.tensor([list(p) + [0] * (width - len(p)) for p in prompts[:groups]]),
        "prompt_lens": torch.tensor([len(p) for p in prompts[:groups]]),
        "completions": torch.randint(3, 16, (n, N)),
        "mask": (torch.arange(N)[None, :] < torch.tensor(seqs)[:, None]).float(),
        "behav": torch.full((n, N), -1.0),
        "reward": torch.tensor(rewards),
        "ref": torch.zeros(n, N),
    }
    times = []
    for _ in range(10):
        t = time.process_time()
        grpo_update(lean, optimizer, data, cfg.grpo, r.group_size)
        times.append(time.process_time() - t)
    costs = Costs(
        step_fixed=float(step_fixed),
        step_per_seq=float(step_per_seq),
        prefill_per_token=float(np.median(recompute)),
        train_fixed=float(np.median(times[2:])),
        train_per_token=0.0,  # one batch composition: the cost per batch
        publish=publish_s,
        prompt_tokens=prompt_tokens,
    )
    return costs, lengths


# ----------------------------------------------------------------------------- report


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--lags", default="1,2,4")
    p.add_argument("--sync-threads", default="1,2")
    p.add_argument("--caches", default="keep,recompute", help="async runs: keep, recompute")
    p.add_argument("--out", type=Path, default=HERE / "results" / "llm_async.md")
    p.add_argument("--report", type=Path, help="report an earlier run's directory again")
    p.add_argument(
        "--rerun",
        default="",
        help="with --report: run these again (run directory names, e.g. sync-2,async-1-keep), "
        "as after a neighbour loaded the machine during them",
    )
    args = p.parse_args()
    lags = [int(x) for x in args.lags.split(",")]
    sync_threads = [int(x) for x in args.sync_threads.split(",")]
    caches = args.caches.split(",")
    if not set(caches) <= {"keep", "recompute"}:
        p.error(f"--caches {args.caches}: a list of keep, recompute")
    planned = {  # run name -> (directory, lag, threads per stage, keep the cache)
        f"sync, {t} thread{'s' if t > 1 else ''} per stage": (f"sync-{t}", 0, t, False)
        for t in sync_threads
    }
    for cache in caches:
        for lag in lags:
            planned[f"async, lag {lag}, {cache} cache"] = (
                f"async-{lag}-{cache}", lag, 1, cache == "keep"
            )  # fmt: skip
    rerun = {x for x in args.rerun.split(",") if x}
    if rerun and not args.report:
        p.error("--rerun needs --report DIR (the run to complete)")
    if unknown := rerun - {d for d, *_ in planned.values()}:
        p.error(f"--rerun: no planned run {sorted(unknown)}; planned: "
                f"{', '.join(d for d, *_ in planned.values())}")  # fmt: skip
    model = warm_start_dir()
    work = args.report or Path(tempfile.mkdtemp(prefix="surge-llm-async-"))
    runs = json.loads((work / "runs.json").read_text()) if args.report else {}
    print(f"runs: {work}", flush=True)
    for name, (directory, lag, threads, keep) in planned.items():
        if name not in runs or directory in rerun:
            runs[name] = run(directory, model, lag, threads, args.seconds, work, keep)
            (work / "runs.json").write_text(json.dumps(runs))  # after each: resumable
    runs = {name: runs[name] for name in planned if name in runs}
    sync_name = max(
        (n for n in runs if n.startswith("sync")), key=lambda n: runs[n]["trained_tokens_per_s"]
    )
    base = runs[sync_name]
    # Compared at the fewest tokens the baseline or an asynchronous run trained (the slower
    # synchronous setting is there to choose the baseline, not to compare accuracy against).
    contenders = [r for n, r in runs.items() if r is base or not n.startswith("sync")]
    equal = min(r["trained_tokens"] for r in contenders)
    base_acc = accuracy_at(base["evals"], equal)

    lines = [
        "# Asynchronous against synchronous LLM RL on countdown",
        "",
        f"Machine: {summary()}. Command: `.venv/bin/python benchmarks/llm_async.py --seconds "
        f"{args.seconds:g} --lags {args.lags} --sync-threads {args.sync_threads} --caches "
        f"{args.caches}`. Preset "
        f"`{PRESET}` (3 numbers up to 20, completions up to 16 tokens, 16 prompts x 8), warm "
        f"start {model}. Each run: {args.seconds:g} s on the trainer's clock.",
        "",
        f"Baseline: {sync_name} (the faster synchronous run). Accuracy at equal trained "
        f"tokens: mean held-out accuracy of the evaluations between {EQUAL_FROM:.0%} and 100% "
        f"of {equal:,.0f} trained tokens (the fewest the baseline or an asynchronous run "
        "trained; '-' for a run that trained fewer). The same mean at earlier token counts is "
        "in the second table: single evaluations swing by a few points, so read the rows, "
        "not one cell.",
        "",
        "| run | trained tokens/s | vs baseline | generated tokens/s | versions/s | mean "
        "length | accuracy at equal tokens | busy: trainer / generator (+ weight loading) / "
        "rewarder / evaluator | CPU outside the run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        b = r["busy"]
        acc = accuracy_at(r["evals"], equal)
        at_equal = (
            "-" if r["trained_tokens"] < equal else f"{acc:.1%} ({(acc - base_acc) * 100:+.1f})"
        )
        lines.append(
            f"| {name} | {r['trained_tokens_per_s']:,.0f} | "
            f"{r['trained_tokens_per_s'] / base['trained_tokens_per_s']:.2f}x | "
            f"{r['generated_tokens_per_s']:,.0f} | {r['versions_per_s']:.2f} | "
            f"{r['length_mean']:.1f} | {at_equal} | "
            f"{b['trainer']:.0%} / {b['generator']:.0%} (+{b.get('weight_load', 0):.0%}) / "
            f"{b['rewarder']:.0%} / {b.get('evaluator', float('nan')):.0%} | "
            f"{r['foreign_cores']:.2f} cores |"
        )

    marks = [equal * f for f in (0.25, 0.5, 0.75, 1.0)]
    lines += [
        "",
        "Held-out accuracy at equal trained tokens (mean of the evaluations between 75% and "
        "100% of each count; version 0, the warm start: "
        f"{base['evals'][0][2]:.1%}):",
        "",
        "| run | " + " | ".join(f"{m / 1e3:,.0f}k tokens" for m in marks) + " |",
        "|---|" + "---|" * len(marks),
    ]
    for name, r in runs.items():
        cells = [accuracy_at(r["evals"], m) for m in marks]
        lines.append(
            f"| {name} | "
            + " | ".join("-" if c != c or r["trained_tokens"] < m else f"{c:.1%}"
                         for c, m in zip(cells, marks, strict=True))
            + " |"
        )  # fmt: skip

    publish = float(np.mean([r["publish_s"] for r in runs.values()]))
    computed = float(np.mean([r["computed_groups"] for r in runs.values()]))
    costs, lengths = calibrate(model, publish, computed)
    lines += [
        "",
        "## Simulated: more generation workers per trainer",
        "",
        "benchmarks/llm_pipeline_sim.py with the stage costs measured alone on one thread "
        "(CPU time): "
        f"decode step {costs.step_fixed * 1e3:.2f} ms + {costs.step_per_seq * 1e6:.1f} us per "
        f"active sequence, prefill {costs.prefill_per_token * 1e6:.1f} us per token (a "
        f"group's {costs.prompt_tokens}-token prompt once; at each new version, with the cache "
        "recomputed, each in-flight group's prompt and every in-flight sequence's tokens), "
        f"update {costs.train_fixed * 1e3:.1f} ms per batch (computing "
        f"{computed:.0%} of its groups, the runs' mean), "
        f"publication {costs.publish * 1e3:.1f} ms; completion lengths of the warm start "
        f"(mean {np.mean(lengths):.1f}, min {min(lengths)}, max {max(lengths)}, "
        f"{len(lengths)} samples). Each worker has its own device; 200 versions. Each cell: "
        "keeping the cache of in-flight sequences at a new version / recomputing it.",
        "",
        "| generation workers | sync trained tokens/s | "
        + " | ".join(f"lag {lag}" for lag in lags)
        + f" | trainer busy (sync / lag {lags[0]}) | generator busy (sync / lag {lags[0]}) |",
        "|---|---|" + "---|" * len(lags) + "---|---|",
    ]
    for n in (1, 4, 16):
        sync = simulate(costs, lengths, n, 0)
        cells = []
        for lag in lags:
            kept = simulate(costs, lengths, n, lag, keep_cache=True)
            recomputed = simulate(costs, lengths, n, lag, keep_cache=False)
            cells.append(
                f"{kept.trained_tokens_per_s / sync.trained_tokens_per_s:.2f}x / "
                f"{recomputed.trained_tokens_per_s / sync.trained_tokens_per_s:.2f}x"
            )
        first = simulate(costs, lengths, n, lags[0], keep_cache=True)
        lines.append(
            f"| {n} | {sync.trained_tokens_per_s:,.0f} | "
            + " | ".join(cells)
            + f" | {sync.trainer_busy:.0%} / {first.trainer_busy:.0%} | "
            f"{sync.generator_busy:.0%} / {first.generator_busy:.0%} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"runs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
