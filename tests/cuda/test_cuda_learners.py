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
from surge.algos.ppo import PPOUpdater
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
        learner = PPOUpdater(model, ppo, torch.Generator().manual_seed(2))
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


def _frames_batch(T: int, N: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(3)
    frames = torch.randint(0, 256, (T, N, 4, 84, 84), generator=g, dtype=torch.uint8)
    return RolloutBatch(
        obs={"obs": frames},
        last_obs={"obs": frames[-1]},
        final_obs={"obs": frames},
        actions=torch.randint(0, 6, (T, N), generator=g),
        logp=torch.full((T, N), -float(np.log(6))),
        values=torch.zeros(T, N),
        rewards=torch.randn(T, N, generator=g),
        terminated=torch.zeros(T, N, dtype=torch.bool),
        truncated=torch.zeros(T, N, dtype=torch.bool),
    )


@pytest.mark.parametrize("encoder", ["auto", "nature_cnn"])
def test_a_graphed_minibatch_step_matches_the_eager_one(encoder: str) -> None:
    """`ppo.cuda_graphs`: two APPO updates, the second at another learning rate, replayed
    from CUDA graphs give the eager updates' parameters and stats."""
    from surge.config.schema import APPOConfig

    obs_space: gym.Space = gym.spaces.Box(-1, 1, (6,), np.float32)
    action_space: gym.Space = gym.spaces.Discrete(3)
    if encoder == "nature_cnn":
        obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        action_space = gym.spaces.Discrete(6)
    model_cfg = ModelConfig(encoder=encoder, precision="float32")  # type: ignore[arg-type]
    results = []
    for graphs in (False, True):
        torch.manual_seed(0)
        model = ActorCritic(obs_space, action_space, model_cfg)
        batch = _frames_batch(T, N) if encoder == "nature_cnn" else _batch(model, 6, False)
        model.to("cuda")
        before = model_to_flat(model)
        ppo = PPOConfig(rollout_len=T, epochs=2, minibatches=4, cuda_graphs=graphs)
        learner = PPOUpdater(model, ppo, torch.Generator().manual_seed(2), APPOConfig())
        cuda_batch = batch.map(lambda t: t.to("cuda"))
        stats = [learner.update(cuda_batch, 2.5e-4), learner.update(cuda_batch, 1e-4)]
        assert learner.graph_error is None
        assert len(learner.graphs) == int(graphs)
        assert not np.array_equal(model_to_flat(model), before)
        results.append((model_to_flat(model), stats))
    (eager, eager_stats), (graphed, graphed_stats) = results
    np.testing.assert_allclose(graphed, eager, rtol=1e-4, atol=1e-6)
    for a, b in zip(graphed_stats, eager_stats, strict=True):
        for key in ("policy_loss", "value_loss", "approx_kl", "grad_norm", "lr"):
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-6), key
