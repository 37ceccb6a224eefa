"""Whole runs and LLM generation on a CUDA GPU: skipped, with the reason, where none is
visible (tests/conftest.py); benchmarks/gpu_check.py runs them on a machine with one.

Each run puts one role on the GPU and checks that its header says so, that it trains to its
budget, and that its checkpoint still loads on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import run_surge

pytestmark = pytest.mark.cuda

REPLAY = ["replay.capacity=2000", "replay.min_size=500", "log.interval_s=0", "log.progress=false"]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "preset, options, header",
    [
        ("cartpole-dqn", [*REPLAY, "workers.trainer_device=cuda", "total_env_steps=3000"],
         "trainer cuda:0"),
        ("pendulum-sac", [*REPLAY, "workers.trainer_device=cuda", "total_env_steps=2000"],
         "trainer cuda:0"),
        ("memory-r2d2", ["log.interval_s=0", "log.progress=false", "replay.min_size=2000",
                         "workers.trainer_device=cuda", "total_env_steps=6000"],
         "trainer cuda:0"),
        ("cartpole-ppo", ["model.backend=torch", "workers.inference=remote",
                          "workers.policy_device=cuda", "total_env_steps=4096",
                          "log.interval_s=0", "log.progress=false"], "policy workers cuda:0"),
    ],
)  # fmt: skip
def test_a_run_with_a_role_on_the_gpu(
    preset: str, options: list[str], header: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    result = run_surge("train", preset, f"run_dir={run_dir}", *options, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert header in result.stderr, result.stderr[-2000:]
    training = [r for r in _rows(run_dir) if "steps_per_s" in r]
    assert training and training[-1]["policy_version"] >= 2
    evaluated = run_surge("eval", str(run_dir), "episodes=2", timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]  # its checkpoint loads on a CPU


def test_arith_grpo_generates_and_learns_on_the_gpu(tmp_path: Path) -> None:
    """Generation (two processes' engines: the generator's and the evaluator's) and the
    learner on the GPU, through the local runtime's processes."""
    run_dir = tmp_path / "run"
    result = run_surge(
        "train", "arith-grpo", f"run_dir={run_dir}", "rollout.device=cuda",
        "workers.trainer_device=cuda", "sft.steps=20", "sft.target_accuracy=0",
        "rollout.prompts_per_batch=4", "rollout.group_size=4", "total_env_steps=160",
        "task.heldout=40", "eval.every_versions=4", "log.interval_s=0", "log.progress=false",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trainer cuda:0, generation cuda:0" in result.stderr, result.stderr[-2000:]
    rows = _rows(run_dir)
    training = [r for r in rows if "steps_per_s" in r]
    assert training[-1]["policy_version"] == 10 and training[-1]["env_steps"] == 160
    assert all(0.0 <= r["reward_mean"] <= 1.0 for r in training)
    assert [r for r in rows if "eval/accuracy" in r], "no held-out evaluation"


def test_greedy_generation_on_the_gpu_matches_the_cpu() -> None:
    """The engine's KV cache, prefill-sharing and sampling on the device: greedy completions
    of the same prompts are the same tokens on both, with log-probs to float32 rounding."""
    pytest.importorskip("transformers")
    from surge.llm.engine import Decoding, Engine, Request
    from surge.llm.tiny import tiny_llama

    g = torch.Generator().manual_seed(0)
    prompts = [tuple(torch.randint(3, 16, (int(n),), generator=g).tolist()) for n in (3, 5, 8)]
    prompts += [prompts[0]] * 3  # a shared prefix: one prefill copied to the other rows
    results = []
    for device in ("cpu", "cuda"):
        model = tiny_llama(16, seed=3).eval().to(device)
        engine = Engine(model, 4, Decoding(max_prompt=8, max_new_tokens=6, eos_id=2, temperature=0))
        engine.submit([Request(i, p) for i, p in enumerate(prompts)])
        out = {}
        while not engine.idle():
            for c in engine.step():
                out[c.key] = c
        results.append(out)
    cpu, gpu = results
    assert sorted(gpu) == sorted(cpu) == list(range(len(prompts)))
    for key in cpu:
        assert gpu[key].tokens == cpu[key].tokens, key
        assert gpu[key].logprobs == pytest.approx(cpu[key].logprobs, abs=1e-4), key
