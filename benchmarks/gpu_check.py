"""What surge does with a CUDA GPU, in one script for a machine that has one (7.5 minutes on
an H200, the LLM warm start on the CPU aside). It prints the device, then:

(a) PPO's learner (APPO's update: V-trace, the Nature CNN, 4 epochs x 4 minibatches of a
    1,024-frame Pong batch, surge/algos/ppo.py as the trainer runs it) timed on the CPU and
    on the GPU from the same parameters and batch: learner samples/s and their ratio; then
    on the GPU with the minibatch steps launched eagerly (`ppo.cuda_graphs=false`); then
    `pong-appo` trained for --seconds (30) with `workers.trainer_device=cpu` and `=cuda`: env
    steps/s end to end;
(b) `arith-grpo` with generation and the learner on the GPU for --grpo-seconds (180): the
    held-out accuracy of the first and the last evaluation, tokens/s generated and trained
    (its supervised warm start runs first, on the CPU, cached for later runs);
(c) GRPO's throughput on a config-built Llama of about 100M parameters (hidden 768, 12
    layers, 12 heads; random weights, no warm start) for --big-seconds (40): tokens/s
    generated and trained;
(d) the CUDA-marked tests (`pytest -m cuda`).

    python benchmarks/gpu_check.py                  # writes benchmarks/results/gpu.md
    python benchmarks/gpu_check.py --parts ad --out /tmp/gpu.md   # the learner and the tests

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


def learner_samples_per_s(
    device: str, frames: np.ndarray, updates: int, cuda_graphs: bool = True
) -> float:
    """Samples per second of APPO updates on `device` (after one untimed warm-up update);
    on a GPU with the minibatch steps replayed from CUDA graphs or not (`ppo.cuda_graphs`)."""
    import gymnasium as gym
    import torch

    from surge.algos.batch import RolloutBatch
    from surge.algos.ppo import PPOUpdater
    from surge.config.schema import APPOConfig, ModelConfig, PPOConfig
    from surge.models.actor_critic import ActorCritic

    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = ActorCritic(space, gym.spaces.Discrete(ACTIONS), ModelConfig(encoder="nature_cnn"))
    model.to(device)
    cfg = PPOConfig(
        rollout_len=T, epochs=EPOCHS, minibatches=MINIBATCHES, lr=2.5e-4, cuda_graphs=cuda_graphs
    )
    learner = PPOUpdater(model, cfg, torch.Generator().manual_seed(1), APPOConfig())
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


def surge_train(args: list[str], seconds: float) -> subprocess.CompletedProcess[str]:
    """`surge train ARGS`, stopped (exit 124) if it runs 3 minutes past its budget."""
    command = [sys.executable, "-m", "surge", "train", *args, "log.progress=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        return subprocess.run(
            command, capture_output=True, text=True, check=False, env=env, timeout=seconds + 180
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(command, 124, "", err + "\n(stopped: no end in time)")


def train_pong(trainer_device: str, seconds: float, workdir: Path) -> dict[str, Any]:
    """pong-appo for `seconds` with its learner on `trainer_device` (the actor's inline CNN
    on the CPU in both runs, so that only the learner's device differs)."""
    run_dir = workdir / f"pong-{trainer_device.replace(':', '')}"
    proc = surge_train(
        [
            "pong-appo",
            f"workers.trainer_device={trainer_device}",
            "workers.policy_device=cpu",
            f"max_train_time_s={seconds}",
            f"run_dir={run_dir}",
        ],
        seconds,
    )
    if proc.returncode != 0:
        return {"exit_code": proc.returncode, "error": proc.stderr[-1500:]}
    header = [line.strip() for line in proc.stderr.splitlines() if "devices:" in line]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "steps_per_s" in r][-1]
    return {
        "exit_code": 0,
        "devices": header[0] if header else None,
        "env_steps": last["env_steps"],
        "steps_per_s": last["env_steps"] / last["wall_time_s"],
        "time_learn": last.get("time_learn"),
    }


def train_grpo(name: str, options: list[str], seconds: float, workdir: Path) -> dict[str, Any]:
    """An arith-grpo run for `seconds` of training: its first and last held-out evaluation
    and its mean tokens/s."""
    run_dir = workdir / name
    proc = surge_train(
        ["arith-grpo", f"max_train_time_s={seconds}", f"run_dir={run_dir}", *options], seconds
    )
    if proc.returncode != 0:
        return {"exit_code": proc.returncode, "error": proc.stderr[-1500:]}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    train = [r for r in rows if r.get("tokens_per_s") is not None]
    header = [line.strip() for line in proc.stderr.splitlines() if "devices:" in line]
    return {
        "exit_code": 0,
        "devices": header[0] if header else None,
        "evals": [(r["wall_time_s"], r["eval/accuracy"]) for r in evals],
        "tokens_per_s": float(np.mean([r["tokens_per_s"] for r in train])) if train else None,
        "trained_tokens_per_s": float(np.mean([r["trained_tokens_per_s"] for r in train]))
        if train
        else None,
    }


def grpo_lines(r: dict[str, Any], what: str) -> list[str]:
    if r["exit_code"] != 0:
        return [f"- {what}: exit {r['exit_code']}: {r['error']}"]
    line = (
        f"- {what}: {r['tokens_per_s']:,.0f} tokens/s generated, "
        f"{r['trained_tokens_per_s']:,.0f} trained; {r['devices']}"
    )
    if r["evals"]:
        (t0, a0), (t1, a1) = r["evals"][0], r["evals"][-1]
        gain = 100 * (a1 - a0)
        line += (
            f"\n- held-out accuracy {a0:.1%} at {t0:.0f} s -> {a1:.1%} at {t1:.0f} s: "
            f"{gain:+.1f} points ({'met' if gain >= 30 else 'NOT met'}: +30 within 3 minutes)"
        )
    return [line]


def cuda_tests() -> tuple[int, str]:
    """`pytest -m cuda` over tests/cuda (every CUDA-marked test lives there), on 4 workers
    where pytest-xdist is installed."""
    import importlib.util

    parallel = ["-n", "4"] if importlib.util.find_spec("xdist") else []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rs", *parallel, "tests/cuda"],
        capture_output=True, text=True, check=False, cwd=HERE.parent,
    )  # fmt: skip
    return proc.returncode, proc.stdout[-6000:]


def parameters(hidden: int, layers: int, heads: int) -> int:
    """Parameters of the built-in Llama at this size (the arithmetic alphabet's few embedding
    rows included)."""
    from surge.llm.setup import count_parameters
    from surge.llm.tiny import tiny_config

    return count_parameters(tiny_config(16, hidden, layers, heads, 64))


def part_a(args: argparse.Namespace, work: Path) -> list[str]:
    import torch

    frames = pong_frames(BATCH)
    cpu = learner_samples_per_s("cpu", frames, args.updates)
    eager = learner_samples_per_s("cuda", frames, args.updates, cuda_graphs=False)
    gpu_rate = learner_samples_per_s("cuda", frames, args.updates)
    ratio = gpu_rate / cpu
    lines = [
        "## (a) PPO's learner on Pong frames (APPO update, Nature CNN, 1,024-frame batch)",
        "",
        f"- learner samples/s: CPU {cpu:,.0f} ({torch.get_num_threads()} torch threads), "
        f"GPU {gpu_rate:,.0f}: {ratio:.1f}x ({'met' if ratio >= 5 else 'NOT met'}: >= 5x)",
        f"- the GPU's minibatch steps launched eagerly (`ppo.cuda_graphs=false`): "
        f"{eager:,.0f} samples/s, {eager / cpu:.1f}x the CPU",
    ]
    for device in ("cpu", "cuda"):
        r = train_pong(device, args.seconds, work)
        lines.append(
            f"- pong-appo, trainer on {device}, {args.seconds:g} s: "
            + (
                f"{r['steps_per_s']:,.0f} env steps/s ({r['env_steps']:,} steps; "
                f"learner busy {r['time_learn']:.0%} of the trainer's time); {r['devices']}"
                if r["exit_code"] == 0
                else f"exit {r['exit_code']}: {r['error']}"
            )
        )
    return lines


def part_b(args: argparse.Namespace, work: Path) -> list[str]:
    small = train_grpo("arith", [], args.grpo_seconds, work)
    return ["## (b) arith-grpo on the GPU", "", *grpo_lines(small, f"{args.grpo_seconds:g} s")]


def part_c(args: argparse.Namespace, work: Path) -> list[str]:
    size = {"hidden": 768, "layers": 12, "heads": 12}
    big = train_grpo(
        "arith-100m",
        [*(f"tiny_model.{k}={v}" for k, v in size.items()), "sft.steps=0", "eval.workers=0"],
        args.big_seconds,
        work,
    )
    return [
        "## (c) GRPO on a config-built Llama of about 100M parameters",
        "",
        f"- {parameters(**size) / 1e6:.0f}M parameters (hidden 768, 12 layers, 12 heads)",
        *grpo_lines({**big, "evals": []}, f"{args.big_seconds:g} s"),
    ]


def part_d(args: argparse.Namespace, work: Path) -> list[str]:
    code, tail = cuda_tests()
    args.tests_failed = code != 0
    return ["## (d) `pytest -m cuda`", "", "```", tail.strip(), "```"]


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0, help="each pong-appo run")
    parser.add_argument("--grpo-seconds", type=float, default=180.0)
    parser.add_argument("--big-seconds", type=float, default=40.0)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--parts", default="abcd", help="which parts to run, in this order")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gpu.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU visible: nothing to check here", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0)
    lines = [
        "# surge on a CUDA GPU",
        "",
        f"Command: `{' '.join(['python benchmarks/gpu_check.py', *sys.argv[1:]])}`",
        "",
        f"GPU: {gpu} (torch {torch.__version__}, CUDA {torch.version.cuda}); {summary()}",
    ]
    print("\n".join(lines), flush=True)
    parts = {"a": part_a, "b": part_b, "c": part_c, "d": part_d}
    args.tests_failed = False
    failed = False
    with tempfile.TemporaryDirectory(prefix="surge-gpu-") as work:
        for name in args.parts:
            start = time.perf_counter()
            try:
                section = parts[name](args, Path(work))
            except Exception as e:  # one part's failure leaves the others' results
                failed = True
                section = [f"## ({name})", "", f"- failed: {type(e).__name__}: {e}"]
            lines += ["", *section, f"- ({time.perf_counter() - start:.0f} s)"]
            print("\n".join(section), flush=True)
            args.out.write_text("\n".join([*lines, ""]))  # each part kept as it ends
    return 1 if failed or args.tests_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
