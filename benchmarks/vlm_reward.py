"""Learning check of the model-as-reward presets: SAC on highway-env driving with four rewards,
each trained for 50k env steps per seed and evaluated on 100 held-out episodes.

    .venv/bin/python benchmarks/vlm_reward.py                       # 4 presets x 3 seeds
    .venv/bin/python benchmarks/vlm_reward.py --presets highway-sac --seeds 1
    .venv/bin/python benchmarks/vlm_reward.py --include highway-sac:1:/tmp/hwsac1

- `highway-sac`: the env's own reward; `highway-vlmrl`: VLM-RL's CLG reward synthesised with
  the vehicle's state; `highway-clg`: r_CLG alone; `highway-state`: the synthesis with
  r_CLG = 1 (no model). The CLG presets score frames with the built-in tiny CLIP (trained
  once, cached under $SURGE_CACHE; the first run pays for it before its clock starts).
- Evaluation: `surge eval RUN episodes=100 seed=<held out>` (deterministic actions): success
  (the whole 30 s, no collision, on the road), collision rate, off-road rate, mean speed,
  distance; a random policy is played on the same seeds alongside.
- Non-blocking: first, back to back on an otherwise idle machine, --speed-steps (10k) env
  steps each of highway-sac, highway-sac rendering the same frames it does not use, and
  highway-vlmrl: env steps/s once learning runs (after 2k steps), highway-vlmrl's against
  each (the second isolates the reward model's cost from the frames'); then each learning
  run's steps/s over its whole training, the reward model's scoring lag (p95, in batches)
  and frames scored against env steps (the replay takes only scored segments, so every
  sampled transition was scored).

Targets (printed): highway-sac >= 70% success; highway-vlmrl >= 60% and a collision rate no
higher than highway-state's; highway-vlmrl steps/s >= 90% of highway-sac's; lag p95 <= 2.
Writes benchmarks/results/vlm_reward.md and .json. `--include PRESET:SEED:DIR` adds a finished
run (trained by this script or by `surge train PRESET seed=SEED run_dir=DIR`) without
training it again; `--speeds-from JSON` takes an earlier report's speed rounds instead of
running them (the report names their command).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import summary  # noqa: E402

PRESETS = ("highway-sac", "highway-vlmrl", "highway-clg", "highway-state")
METRICS = ("success", "collision", "off_road", "speed_kmh", "distance_m")
HELDOUT_SEED = 900_000
"""Evaluation episodes' seeds derive from this, apart from any training seed."""


def train(
    preset: str, seed: int, steps: int, run_dir: Path, options: list[str] | None = None
) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable, "-m", "surge", "train", preset, f"seed={seed}",
            f"total_env_steps={steps}", f"run_dir={run_dir}", "log.progress=false",
            *(options or []),
        ],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{preset} seed {seed}: surge train exited {proc.returncode}")
    return {"wall_s": round(time.monotonic() - started, 1)}


def learning_speed(preset: str, options: list[str], steps: int, run_dir: Path) -> dict[str, Any]:
    """Env steps/s of a run from its first log past learning's start (2k steps) to its end,
    and where its actor's and trainer's time went (timing.json): the actor's env time per
    step depends on the policy it learns (a reset costs most of a step, and a crash-prone
    policy resets often), so a slower run is told apart from a slower env.
    `run_dir` is scratch: a speed run of an earlier report is replaced."""
    shutil.rmtree(run_dir, ignore_errors=True)
    train(preset, 1, steps, run_dir, options)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "episode_return_mean" in r]
    start = next(r for r in rows if r["env_steps"] > 2_500)
    end = rows[-1]
    timing = json.loads((run_dir / "timing.json").read_text())["processes"]
    actor, trainer = timing["actor-0"], timing["trainer-0"]
    return {
        "steps_per_s": (end["env_steps"] - start["env_steps"])
        / (end["wall_time_s"] - start["wall_time_s"]),
        "episodes": end["episodes"],
        "actor_env_ms_per_step": 1e3 * actor["env"] / end["env_steps"],
        "actor_wait_s": actor["wait_wall"],
        "trainer_wait_s": trainer["wait_wall"],
        "replay_ratio": end.get("replay/ratio"),
    }


SPEED_RUNS = {
    "highway-sac": ("highway-sac", []),
    "highway-sac + frames": ("highway-sac", ["env.kwargs.frames=true"]),
    "highway-vlmrl": ("highway-vlmrl", []),
}


def speed_section(steps: int, rounds: int, workdir: Path) -> dict[str, list[dict[str, Any]]]:
    """`rounds` rounds of the three runs back to back, interleaved, so that a machine that
    drifts (these are shared machines) shifts every contender of a round alike."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in SPEED_RUNS}
    for k in range(rounds):
        for i, (name, (preset, options)) in enumerate(SPEED_RUNS.items()):
            run = learning_speed(preset, options, steps, workdir / f"speed-{i}")
            out[name].append(run)
            print(
                f"round {k + 1}: {name}: {run['steps_per_s']:.1f} env steps/s while "
                f"learning, actor env {run['actor_env_ms_per_step']:.2f} ms/step",
                flush=True,
            )
    return out


def run_summary(run_dir: Path) -> dict[str, Any]:
    """Speed and reward-model figures from a finished run's metrics.jsonl."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "episode_return_mean" in r]
    last = train_rows[-1]
    out: dict[str, Any] = {
        "env_steps": last["env_steps"],
        "train_s": last["wall_time_s"],
        "steps_per_s": last["env_steps"] / last["wall_time_s"],
        "return_mean_last20": last["episode_return_mean"],
    }
    scored = [r for r in train_rows if r.get("reward_model/frames") is not None]
    if scored:
        out["frames_scored"] = int(scored[-1]["reward_model/frames"])
        out["score_batches"] = int(scored[-1]["reward_model/batches"])
        out["score_seconds"] = float(scored[-1]["reward_model/seconds"])
        lags = [r["reward_model/lag_batches_p95"] for r in scored]
        out["lag_batches_p95_max"] = float(np.nanmax(lags))
        out["lag_batches_p95_last"] = float(lags[-1])
    return out


def evaluate(run_dir: Path, episodes: int, seed: int) -> dict[str, Any]:
    """`surge eval` of the run's newest checkpoint on the held-out seeds; an eval.json of
    that checkpoint, seed and episode count from an earlier call is read instead (the
    evaluation is deterministic: same checkpoint, same seeds, same episodes)."""
    done = run_dir / "eval.json"
    if done.is_file():
        result = json.loads(done.read_text())
        latest = sorted((run_dir / "checkpoints").glob("ckpt-*.safetensors"))
        if (
            result.get("episodes") == episodes
            and result.get("seed") == seed
            and latest
            and Path(result["checkpoint"]).name == latest[-1].name
        ):
            return {"per_episode": result["episode_metrics"], "return_mean": result["return_mean"]}
    proc = subprocess.run(
        [
            sys.executable, "-m", "surge", "eval", str(run_dir), f"episodes={episodes}",
            f"seed={seed}",
        ],
        capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"surge eval {run_dir} exited {proc.returncode}")
    result = json.loads((run_dir / "eval.json").read_text())
    return {"per_episode": result["episode_metrics"], "return_mean": result["return_mean"]}


def random_policy(preset: str, episodes: int, seed: int) -> dict[str, Any]:
    """A uniformly random driver on the same held-out episodes (the env of `preset`)."""
    from surge.config.load import load_config
    from surge.evaluation.suite import EvalSuite
    from surge.seeds import derive_seed

    cfg, _ = load_config(preset, [])
    env = EvalSuite(cfg, False).env
    rng = np.random.default_rng(seed)
    per_episode: dict[str, list[float]] = {}
    for episode in range(episodes):
        env.reset(seed=derive_seed(seed, "episode", episode) % 2**31)
        while True:
            _, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, 2).astype(np.float32))
            if terminated or truncated:
                break
        for key, value in info["episode_metrics"].items():
            per_episode.setdefault(key, []).append(float(value))
    env.close()
    return {"per_episode": per_episode}


def rate_interval(values: list[float]) -> tuple[float, float, float]:
    """A rate's mean and Wilson 95% interval."""
    n, p, z = len(values), float(np.mean(values)), 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, centre - half, centre + half


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    mean = float(np.mean(values))
    half = 1.96 * float(np.std(values, ddof=1)) / math.sqrt(len(values)) if len(values) > 1 else 0
    return mean, mean - half, mean + half


def pooled(evals: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for e in evals:
        for key, values in e["per_episode"].items():
            out.setdefault(key, []).extend(values)
    return out


def table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| reward | seeds | success | collision | off road | speed km/h | distance m | steps/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        if not runs:
            continue
        per = pooled([r["eval"] for r in runs])
        cells = []
        for key in METRICS:
            fn = mean_interval if key in ("speed_kmh", "distance_m") else rate_interval
            m, lo, hi = fn(per[key])
            scale, fmt = (100, ".1f") if fn is rate_interval else (1, ".0f")
            unit = "%" if fn is rate_interval else ""
            cells.append(f"{m * scale:{fmt}}{unit} [{lo * scale:{fmt}}, {hi * scale:{fmt}}]")
        speeds = [r["run"]["steps_per_s"] for r in runs if "run" in r]
        speed = f"{np.mean(speeds):.1f}" if speeds else "-"
        seeds = ",".join(str(r["seed"]) for r in runs)
        lines.append(f"| {name} | {seeds} | " + " | ".join(cells) + f" | {speed} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/surge-vlm-reward"))
    parser.add_argument("--include", nargs="*", default=[], help="PRESET:SEED:DIR, trained")
    parser.add_argument("--speed-steps", type=int, default=10_000, help="0: no speed runs")
    parser.add_argument("--speed-rounds", type=int, default=3)
    parser.add_argument(
        "--speed-only", action="store_true", help="the speed runs, into the last results"
    )
    parser.add_argument(
        "--speeds-from",
        type=Path,
        default=None,
        help="a vlm_reward.json whose speed rounds this report takes over (none are run)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()

    args.speeds_command = None
    if args.speeds_from:  # read before this report overwrites it, were it the same file
        earlier = json.loads(args.speeds_from.read_text())
        args.speeds = earlier["speeds"]
        args.speeds_command = earlier.get("commands", {}).get("speed", "(not recorded)")
    elif args.speed_steps:
        args.speeds = speed_section(args.speed_steps, args.speed_rounds, args.workdir)
    else:
        args.speeds = {}
    if args.speed_only:  # the learning runs of the last report, with these speeds
        if not args.speed_steps:  # --speed-steps 0: the last report again, as it was measured
            args.speeds = json.loads((args.out / "vlm_reward.json").read_text())["speeds"]
        report(json.loads((args.out / "vlm_reward.json").read_text())["results"], args)
        print((args.out / "vlm_reward.md").read_text())
        return 0
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in args.presets}
    jobs = []
    for item in args.include:  # trained already: evaluated (or read) and reported
        preset, seed, directory = item.split(":", 2)
        results.setdefault(preset, [])
        jobs.append((preset, int(seed), Path(directory), True))
    done = {(p, s) for p, s, _, _ in jobs}
    jobs += [
        (p, s, args.workdir / f"{p}-{s}", False)
        for s in args.seeds
        for p in args.presets
        if (p, s) not in done
    ]
    for preset, seed, run_dir, done in jobs:  # seed by seed: a cut-short run covers every preset
        record: dict[str, Any] = {"seed": seed, "run_dir": str(run_dir)}
        if not done:
            record.update(train(preset, seed, args.steps, run_dir))
        record["run"] = run_summary(run_dir)
        record["eval"] = evaluate(run_dir, args.episodes, HELDOUT_SEED + seed)
        results[preset].append(record)
        per = record["eval"]["per_episode"]
        print(
            f"{preset} seed {seed}: success {np.mean(per['success']):.0%}, collisions "
            f"{np.mean(per['collision']):.0%}, {record['run']['steps_per_s']:.1f} steps/s",
            flush=True,
        )
        report(results, args)
    print((args.out / "vlm_reward.md").read_text())
    return 0


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    """Writes vlm_reward.md and .json for the runs so far, with a random driver on the same
    held-out episodes."""
    seeds = sorted({r["seed"] for runs in results.values() for r in runs})
    randoms = [random_policy(PRESETS[0], args.episodes, HELDOUT_SEED + s) for s in seeds]
    baseline = [{"seed": s, "eval": e} for s, e in zip(seeds, randoms, strict=True)]
    rows = table({**results, "random policy": baseline})
    cmd = ("python benchmarks/vlm_reward.py " + " ".join(sys.argv[1:])).strip()
    commands = {"learning": cmd, "speed": cmd}
    if args.speed_only:  # the learning runs came from the command of the last report
        last = json.loads((args.out / "vlm_reward.json").read_text())
        commands["learning"] = last.get("commands", {}).get("learning", "(not recorded)")
        if not args.speed_steps:  # re-rendered: the speeds came from the last report's runs
            commands["speed"] = last.get("commands", {}).get("speed", "(not recorded)")
    if args.speeds_command:
        commands["speed"] = (
            f"{args.speeds_command} (an earlier report's rounds, taken over with --speeds-from)"
        )
    (args.out / "vlm_reward.json").write_text(
        json.dumps(
            {"commands": commands, "speeds": args.speeds, "results": results, "random": randoms},
            indent=1,
        )
    )
    speed = commands["speed"]
    speed_command = "" if speed == commands["learning"] else f"; speed runs: `{speed}`"
    text = [
        "# Model-as-reward: SAC on highway-env driving with four rewards",
        "",
        f"Command: `{commands['learning']}`" + speed_command,
        "",
        f"Machine: {summary()}",
        "",
        f"{args.steps:,} env steps per run; {args.episodes} evaluation episodes per seed on "
        "held-out seeds, deterministic actions; rates with Wilson 95% intervals over the "
        "pooled episodes, speed and distance with normal 95% intervals. The table's steps/s is "
        "each run's over its whole training, whatever else ran on the machine then; the "
        "speed comparison is the back-to-back runs below.",
        "",
        *rows,
        "",
        *speed_lines(args.speeds),
        *verdict_lines(results),
        "",
    ]
    (args.out / "vlm_reward.md").write_text("\n".join(text))


def speed_lines(speeds: dict[str, Any]) -> list[str]:
    if not speeds:
        return []
    # reports before rounds held one number per contender
    runs = {k: v if isinstance(v, list) else [{"steps_per_s": v}] for k, v in speeds.items()}
    names = list(runs)
    rounds = len(runs["highway-sac"])

    def ratios(name: str, over: str = "highway-sac") -> list[float]:
        pairs = zip(runs[name], runs[over], strict=True)
        return [a["steps_per_s"] / b["steps_per_s"] for a, b in pairs]

    vlm = ratios("highway-vlmrl")
    framed = ratios("highway-vlmrl", over="highway-sac + frames")
    lines = [
        f"Env steps/s while learning (from 2,500 steps on), seed 1, {rounds} round(s) of the "
        "three runs back to back on an otherwise idle machine:",
        "",
        "| round | " + " | ".join(names) + " | highway-vlmrl / highway-sac |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for k in range(rounds):
        cells = []
        for n in names:
            run = runs[n][k]
            env_ms = run.get("actor_env_ms_per_step")
            cells.append(f"{run['steps_per_s']:.1f}" + (f" ({env_ms:.2f} ms)" if env_ms else ""))
        lines.append(f"| {k + 1} | " + " | ".join(cells) + f" | {vlm[k]:.1%} |")
    lines += [
        "",
        "In brackets: the actor's env time per step over the whole run (steps and resets).",
        "",
        f"- {'met' if np.median(vlm) >= 0.9 else 'NOT met'}: highway-vlmrl at "
        f"{float(np.median(vlm)):.1%} of highway-sac's "
        "steps/s, the median over rounds of each round's ratio (>= 90%)",
        f"- highway-vlmrl at {float(np.median(framed)):.1%} of highway-sac rendering the same "
        "frames (median): the reward model's own cost",
    ]
    return lines


def verdict_lines(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = []

    def count(preset: str, key: str) -> tuple[int, int] | None:
        """(episodes with `key`, episodes) over the preset's seeds."""
        runs = results.get(preset) or []
        flags = pooled([r["eval"] for r in runs])[key] if runs else []
        return (int(np.sum(flags)), len(flags)) if runs else None

    def rate(preset: str, key: str) -> float | None:
        counted = count(preset, key)
        return counted[0] / counted[1] if counted else None

    def said(ok: bool) -> str:
        return "met" if ok else "NOT met"

    sac, vlm = rate("highway-sac", "success"), rate("highway-vlmrl", "success")
    if sac is not None:
        lines.append(f"- {said(sac >= 0.7)}: highway-sac success {sac:.1%} >= 70%")
    if vlm is not None:
        lines.append(f"- {said(vlm >= 0.6)}: highway-vlmrl success {vlm:.1%} >= 60%")
    vc, sc = count("highway-vlmrl", "collision"), count("highway-state", "collision")
    if vc is not None and sc is not None:
        (a, n1), (b, n2) = vc, sc
        p = fisher_exact_p(a, n1, b, n2)
        lines.append(
            f"- {said(a / n1 <= b / n2)}: highway-vlmrl collision rate {a / n1:.1%} ({a}/{n1}) "
            f"<= highway-state's {b / n2:.1%} ({b}/{n2}); Fisher's exact test p = {p:.2f}"
        )
        if a + b == 0:
            claim = "not testable (no agent of either reward collided on these episodes)"
        elif p >= 0.05:
            claim = "neither shown nor contradicted (the difference is within chance)"
        else:
            claim = "shown" if a / n1 < b / n2 else "contradicted"
        lines.append(
            f"- VLM-RL's claim, fewer collisions with CLG + state than with the state-only "
            f"reward: {claim} here"
        )
    scored = [r for p in results for r in results[p] if "frames_scored" in r.get("run", {})]
    if scored:
        lag = max(r["run"]["lag_batches_p95_max"] for r in scored)
        lines.append(f"- {said(lag <= 2)}: scoring lag p95 at most {lag:g} batches (<= 2)")
        every = all(r["run"]["frames_scored"] >= r["run"]["env_steps"] for r in scored)
        lines.append(
            f"- {said(every)}: frames scored >= env steps in every model-scored run ("
            + ", ".join(f"{r['run']['frames_scored']:,}/{r['run']['env_steps']:,}" for r in scored)
            + ")"
        )
    return lines


def fisher_exact_p(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided Fisher's exact test of a/n1 against b/n2: the chance, with both rates
    equal, of a split of the a + b events at most as likely as the one seen."""
    k, total = a + b, n1 + n2

    def chance(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, k - x) / math.comb(total, k)

    seen = chance(a)
    splits = range(max(0, k - n2), min(k, n1) + 1)
    return min(1.0, sum(c for x in splits if (c := chance(x)) <= seen * (1 + 1e-9)))


if __name__ == "__main__":
    raise SystemExit(main())
