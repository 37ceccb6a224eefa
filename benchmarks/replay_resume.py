"""Kill a replay-based run's trainer, `surge resume` it, and compare its returns before and
after: with `replay.checkpoint: true` the resumed run starts from the checkpoint's weights,
optimiser and replay, so it should play as well as it did when the checkpoint was written.

    python benchmarks/replay_resume.py [--preset cartpole-dqn] [--kill-after 300000]

1. `surge train PRESET replay.checkpoint=true` with a checkpoint every `--every` seconds.
2. Once a checkpoint at or past `--kill-after` env steps exists, SIGKILL the trainer (the
   run stops; its newest checkpoint holds the weights and each shard's replay).
3. "before": the mean return of the 20 episodes before that checkpoint (the checkpoint
   keeps them).
4. `surge resume RUN total_env_steps=<checkpoint + --after>`; "after": the mean of the first
   20 episodes that finish after the resume (the first row with 20 new episodes).

Prints both, their ratio and whether the replay was restored; exits 1 when the mean after
is not within `--tolerance` (10%) of the mean before. Writes
benchmarks/results/replay_resume.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/, next to this file)

ROOT = Path(__file__).resolve().parents[1]
SURGE = [sys.executable, "-m", "surge"]
WINDOW = 20


def rows(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line being written
            out.append(json.loads(line))
    return out


def checkpoint_steps(run_dir: Path) -> list[tuple[int, Path]]:
    from surge.tracking.checkpoint import load_checkpoint

    found = []
    for path in sorted((run_dir / "checkpoints").glob("ckpt-*.safetensors")):
        with contextlib.suppress(Exception):  # one being written
            found.append((int(load_checkpoint(path)["env_steps"]), path))
    return found


def trainer_pid(run_dir: Path) -> int:
    for w in json.loads((run_dir / "workers.json").read_text())["workers"]:
        if w["name"] == "trainer-0":
            return int(w["pid"])
    raise RuntimeError("no trainer-0 in workers.json")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="cartpole-dqn")
    p.add_argument("--kill-after", type=int, default=300_000)
    p.add_argument("--after", type=int, default=40_000, help="env steps to run after resuming")
    p.add_argument("--every", type=float, default=10.0, help="seconds between checkpoints")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--run-dir", type=Path, default=ROOT / "benchmarks/results/replay_runs/resume")
    p.add_argument("--overrides", nargs="*", default=[])
    args = p.parse_args()
    run = args.run_dir
    if run.exists():
        import shutil

        shutil.rmtree(run)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["log.progress=false", "log.interval_s=1"]
    proc = subprocess.Popen(
        [*SURGE, "train", args.preset, f"run_dir={run}", f"seed={args.seed}",
         "replay.checkpoint=true", f"log.checkpoint_interval_s={args.every}", *common,
         *args.overrides],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        while True:
            if proc.poll() is not None:
                print(proc.stdout.read() if proc.stdout else "")
                raise SystemExit("the run ended before a checkpoint past --kill-after")
            ready = [s for s, _ in checkpoint_steps(run) if s >= args.kill_after]
            if ready and (run / "checkpoints" / "replay-0.npz").exists():
                break
            time.sleep(1.0)
        time.sleep(2.0)  # the replay files of that checkpoint are written after it
        os.kill(trainer_pid(run), signal.SIGKILL)
        proc.communicate(timeout=300)
    finally:
        proc.kill()
    steps, newest = checkpoint_steps(run)[-1]
    from surge.tracking.checkpoint import load_checkpoint

    saved = load_checkpoint(newest)  # the episodes it had seen, and the last 20 returns
    before = sum(saved["recent_returns"][-WINDOW:]) / WINDOW
    resume = subprocess.run(
        [*SURGE, "resume", str(run), f"total_env_steps={steps + args.after}", *common],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if resume.returncode != 0:
        print(resume.stdout[-3000:], resume.stderr[-3000:])
        raise SystemExit("surge resume failed")
    restored = "restored from the one saved with the checkpoint" in (resume.stdout + resume.stderr)
    after_rows = [r for r in rows(run) if r.get("env_steps", 0) > steps and "episodes" in r]
    # the resumed run counts episodes on from the checkpoint's
    later = [r for r in after_rows if r["episodes"] - saved["episodes"] >= WINDOW]
    if not later:
        raise SystemExit(f"fewer than {WINDOW} episodes after resuming; raise --after")
    after = later[0]
    ratio = after["episode_return_mean"] / before
    ok = abs(ratio - 1.0) <= args.tolerance
    lines = [
        "# Trainer killed, run resumed with its replay",
        "",
        f"`python benchmarks/replay_resume.py --preset {args.preset} --kill-after "
        f"{args.kill_after}` ({time.strftime('%Y-%m-%d')}).",
        "",
        machine.summary(),
        "",
        f"- checkpoint: {newest.name} at {steps:,} env steps; trainer SIGKILLed after it",
        f"- replay restored on resume: {'yes' if restored else 'no'}",
        f"- mean of the last {WINDOW} episodes before the checkpoint: "
        f"{before:.1f} (kept in the checkpoint)",
        f"- mean of the first {WINDOW} episodes after resuming: "
        f"{after['episode_return_mean']:.1f} (row at {after['env_steps']:,} steps)",
        f"- ratio after / before: {ratio:.3f} (target within {args.tolerance:.0%}: "
        f"{'met' if ok else 'not met'})",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "benchmarks/results/replay_resume.md"
    out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
