"""What surge does with a CUDA GPU, in one script for a machine that has one (about 5
minutes). It prints the device, then:

(a) PPO's learner (APPO's update: V-trace, the Nature CNN, 4 epochs x 4 minibatches of a
    1,024-frame Pong batch, surge/algos/ppo.py as the trainer runs it) timed on the CPU and
    on the GPU from the same parameters and batch: learner samples/s and their ratio; then
    `pong-appo` trained for --seconds with `workers.trainer_device=cpu` and `=cuda`: env
    steps/s end to end;
(d) the CUDA-marked tests (`pytest -m cuda`).

Not in it yet: GRPO on the GPU (arith-grpo's accuracy within 3 minutes, tokens/s of a 100M
model): LLM generation and the GRPO learner do not run on CUDA yet.

    python benchmarks/gpu_check.py                  # writes benchmarks/results/gpu.md
    python benchmarks/gpu_check.py --seconds 30 --out /tmp/gpu.md

Needs gymnasium and ale-py beside torch (a GPU machine without a package index: install
their wheels from a folder, `pip install --no-index --find-links WHEELS gymnasium ale-py`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from learner_speed import ACTIONS, BATCH, EPOCHS, MINIBATCHES, N, T, pong_frames  # noqa: E402
from machine import summary  # noqa: E402


def learner_samples_per_s(device: str, frames: np.ndarray, updates: int) -> float:
    """Samples per second of APPO updates on `device` (after one untimed warm-up update)."""
    import gymnasium as gym
    import torch

    from surge.algos.batch import RolloutBatch
    from surge.algos.ppo import PPOLearner
    from surge.config.schema import APPOConfig, ModelConfig, PPOConfig
    from surge.models.actor_critic import ActorCritic

    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = ActorCritic(space, gym.spaces.Discrete(ACTIONS), ModelConfig(encoder="nature_cnn"))
    model.to(device)
    cfg = PPOConfig(rollout_len=T, epochs=EPOCHS, minibatches=MINIBATCHES, lr=2.5e-4)
    learner = PPOLearner(model, cfg, torch.Generator().manual_seed(1), APPOConfig())
    g = torch.Generator().manual_seed(2)
    obs = torch.from_numpy(frames[:BATCH].reshape(T, N, 4, 84, 84))
    batch = RolloutBatch(
        obs={"obs": obs},
        last_obs={"obs": obs[-1]},
        final_obs={"obs": obs},
        actions=torch.randint(0, ACTIONS, (T, N), generator=g),
        logp=torch.full((T, N), -np.log(ACTIONS), dtype=torch.float32),
        values=torch.zeros(T, N),
        rewards=torch.randn(T, N, generator=g),
        terminated=torch.zeros(T, N, dtype=torch.bool),
        truncated=torch.zeros(T, N, dtype=torch.bool),
    ).map(lambda t: t.to(device))
    learner.update(batch, 2.5e-4)  # warm-up: kernels chosen, memory allocated
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(updates):
        learner.update(batch, 2.5e-4)  # reads its metrics off the device: synchronised
    return updates * BATCH / (time.perf_counter() - start)


def train_pong(trainer_device: str, seconds: float, workdir: Path) -> dict[str, Any]:
    run_dir = workdir / f"pong-{trainer_device.replace(':', '')}"
    proc = subprocess.run(
        [
            sys.executable, "-m", "surge", "train", "pong-appo",
            f"workers.trainer_device={trainer_device}", f"max_train_time_s={seconds}",
            f"run_dir={run_dir}", "log.progress=false",
        ],
        capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    header = [line.strip() for line in proc.stderr.splitlines() if "devices:" in line]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "steps_per_s" in r][-1]
    return {
        "exit_code": proc.returncode,
        "devices": header[0] if header else None,
        "env_steps": last["env_steps"],
        "steps_per_s": last["env_steps"] / last["wall_time_s"],
        "time_learn": last.get("time_learn"),
        "error": proc.stderr[-1500:] if proc.returncode else None,
    }


def cuda_tests() -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rs", "tests"],
        capture_output=True, text=True, check=False, cwd=HERE.parent,
    )  # fmt: skip
    return proc.returncode, proc.stdout[-3000:]


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gpu.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU visible: nothing to check here", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0)
    lines = [
        "# surge on a CUDA GPU",
        "",
        f"Command: `python benchmarks/gpu_check.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        "",
        f"GPU: {gpu} (torch {torch.__version__}, CUDA {torch.version.cuda}); {summary()}",
        "",
    ]
    print("\n".join(lines), flush=True)
    frames = pong_frames(BATCH)
    cpu = learner_samples_per_s("cpu", frames, args.updates)
    gpu_rate = learner_samples_per_s("cuda", frames, args.updates)
    ratio = gpu_rate / cpu
    part_a = [
        "## (a) PPO's learner on Pong frames (APPO update, Nature CNN, 1,024-frame batch)",
        "",
        f"- learner samples/s: CPU {cpu:,.0f}, GPU {gpu_rate:,.0f}: {ratio:.1f}x "
        f"({'met' if ratio >= 5 else 'NOT met'}: >= 5x)",
    ]
    with tempfile.TemporaryDirectory(prefix="surge-gpu-") as work:
        for device in ("cpu", "cuda"):
            r = train_pong(device, args.seconds, Path(work))
            part_a.append(
                f"- pong-appo, trainer on {device}, {args.seconds:g} s: "
                + (
                    f"{r['steps_per_s']:,.0f} env steps/s ({r['env_steps']:,} steps; "
                    f"learner busy {r['time_learn']:.0%} of the trainer's time); {r['devices']}"
                    if r["exit_code"] == 0
                    else f"exit {r['exit_code']}: {r['error']}"
                )
            )
    print("\n".join(part_a), flush=True)
    code, tail = cuda_tests()
    part_d = ["", "## (d) `pytest -m cuda`", "", "```", tail.strip(), "```", ""]
    print("\n".join(part_d))
    args.out.write_text("\n".join([*lines, *part_a, *part_d]))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
