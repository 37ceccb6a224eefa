"""Learners and batches on a CUDA GPU: skipped, with the reason, where none is visible
(tests/conftest.py); benchmarks/gpu_check.py runs them on a machine with one.

The same update on the same batch from the same parameters gives the same parameters on
the CPU and on the GPU, to float32 rounding (bf16 off: `model.precision=float32`); a whole
run with the learner on the GPU trains and says so in its header."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from surge.algos.batch import RolloutBatch
from surge.algos.ppo import PPOLearner
from surge.algos.staging import DeviceStaging
from surge.config.schema import ModelConfig, PPOConfig
from surge.models.actor_critic import ActorCritic
from surge.models.weights import model_to_flat
from tests.conftest import run_surge

pytestmark = pytest.mark.cuda

T, N = 16, 4


def test_staging_copies_to_the_gpu_through_reused_pinned_buffers() -> None:
    staging = DeviceStaging("cuda")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    flags = np.array([True, False])
    staging.begin()
    a, b = staging(x), staging(flags)
    assert a.is_cuda and torch.equal(a.cpu(), torch.from_numpy(x))
    assert torch.equal(b.cpu(), torch.from_numpy(flags))
    pinned = [t.data_ptr() for t in staging._pinned]
    assert all(t.is_pinned() for t in staging._pinned)
    staging.begin()
    c = staging(x * 2)
    staging(flags)
    assert [t.data_ptr() for t in staging._pinned] == pinned  # the same buffers again
    assert torch.equal(c.cpu(), torch.from_numpy(x * 2))
    assert torch.equal(a.cpu(), torch.from_numpy(x))  # the earlier batch is its own copy


def _batch(model: ActorCritic, obs_dim: int, core: bool) -> RolloutBatch:
    g = torch.Generator().manual_seed(1)
    o = {"obs": torch.rand(T, N, obs_dim, generator=g) * 2 - 1}
    with torch.no_grad():
        flat = {"obs": o["obs"].reshape(T * N, obs_dim)}
        if core:
            state = torch.zeros(T * N, model.state_size)
            actions, logp, values = model.act(flat, generator=g, core=state)[:3]
        else:
            actions, logp, values = model.act(flat, generator=g)
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[3, 0] = truncated[7, 1] = True
    return RolloutBatch(
        obs=o,
        last_obs={"obs": torch.rand(N, obs_dim, generator=g)},
        final_obs={"obs": torch.rand(T, N, obs_dim, generator=g)},
        actions=actions.reshape(T, N),
        logp=logp.reshape(T, N) - 0.05,
        values=values.reshape(T, N),
        rewards=torch.randn(T, N, generator=g),
        terminated=terminated,
        truncated=truncated,
        core0=torch.zeros(N, model.state_size) if core else None,
    )


@pytest.mark.parametrize("core", ["none", "gru"])
def test_a_ppo_update_on_the_gpu_matches_the_cpu(core: str) -> None:
    obs_space = gym.spaces.Box(-1, 1, (6,), np.float32)
    action_space = gym.spaces.Discrete(3)
    cfg = ModelConfig(core=core, precision="float32")  # type: ignore[arg-type]
    ppo = PPOConfig(rollout_len=T, epochs=2, minibatches=2 if core == "gru" else 4)
    results = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        model = ActorCritic(obs_space, action_space, cfg).to(device)
        batch = _batch(model.cpu(), 6, core != "none").map(lambda t, d=device: t.to(d))
        model.to(device)
        learner = PPOLearner(model, ppo, torch.Generator().manual_seed(2))
        stats = learner.update(batch, 2.5e-4)
        results.append((model_to_flat(model), stats))
    (cpu, cpu_stats), (gpu, gpu_stats) = results
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)
    for key in ("policy_loss", "value_loss", "approx_kl"):
        assert gpu_stats[key] == pytest.approx(cpu_stats[key], rel=1e-3, abs=1e-6), key


@pytest.mark.parametrize(
    "preset, options",
    [
        ("cartpole-ppo", ["model.backend=torch"]),
        ("memory-gru", []),
    ],
)
def test_a_run_with_the_learner_on_the_gpu(preset: str, options: list[str], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_surge(
        "train", preset, "workers.trainer_device=cuda", f"run_dir={run_dir}",
        "total_env_steps=4096", "log.progress=false", "log.interval_s=0", *options,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "devices: trainer cuda:0" in result.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["policy_version"] >= 2
    evaluated = run_surge("eval", str(run_dir), "episodes=2", timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]  # its checkpoint loads on a CPU
