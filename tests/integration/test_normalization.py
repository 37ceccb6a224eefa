"""Observation and reward normalisation end to end: the statistics travel with the
parameters, are checkpointed, continue on `surge resume` and are applied frozen by eval."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from surge.api import Run
from surge.config.load import load_config
from surge.envs.make import make_env
from surge.models.actor_critic import ActorCritic
from surge.models.flat_policy import FlatPolicy
from surge.models.normalize import ObsNormalizer, stats_vector
from surge.recipes.ppo import checkpoint_flat
from surge.runtime.controller import resume, train
from surge.streams.params import ParameterService
from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint
from surge.workers.trainer import TrainerWorker
from tests.conftest import run_surge

pytestmark = pytest.mark.integration

# Pendulum: 8 envs x 32 steps = 256 steps a batch; observations far from mean 0 / var 1
NORMALIZED = [
    "runtime=serial",
    "ppo.rollout_len=32",
    "ppo.minibatches=4",
    "log.interval_s=0",
    "log.progress=false",
    "model.normalize_obs=true",
    "ppo.normalize_reward=true",
]
BATCH = 256


def _train_normalized(run: Path, steps: int, *overrides: str) -> tuple[Any, Any]:
    """(config, result) of a serial pendulum-ppo run with normalisation, into `run`."""
    cfg, name = load_config(
        "pendulum-ppo", [*NORMALIZED, f"total_env_steps={steps}", f"run_dir={run}", *overrides]
    )
    return cfg, train(cfg, name)


def _saved_stats(run: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    state = load_checkpoint(latest_checkpoint(run))  # type: ignore[arg-type]
    return state, {k: np.asarray(v) for k, v in state["normalizer"].items()}


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_resume_continues_with_the_checkpointed_statistics(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    _, result = _train_normalized(run, 1024, f"model.backend={backend}")
    assert result.reason == "budget"
    state, saved = _saved_stats(run)
    assert state["version"] == 4
    assert saved["obs_count"] == pytest.approx(4 * BATCH + 1e-4)
    assert saved["ret_count"] == pytest.approx(4 * BATCH + 1e-4)
    assert saved["running_returns"].shape == (8,) and np.any(saved["running_returns"] != 0)
    assert not np.allclose(saved["obs_var"], 1.0)  # far from the initial statistics

    # The resumed trainer starts from the checkpoint's statistics, and its first published
    # version carries them after the weights.
    seen: list[tuple[dict[str, np.ndarray], np.ndarray]] = []
    original = TrainerWorker.__init__

    def spy(self: TrainerWorker, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        flat = np.zeros(self.ctx.n_params, np.float32)
        assert isinstance(self.params, ParameterService)
        self.params.read(flat)
        seen.append((self.learner.stats.state_dict(), flat))

    monkeypatch.setattr(TrainerWorker, "__init__", spy)
    assert resume(run, ["total_env_steps=1536"]).reason == "budget"
    restored, flat = seen[0]
    for key, value in saved.items():
        np.testing.assert_array_equal(restored[key], value, err_msg=key)
    stats = stats_vector(saved["obs_mean"], saved["obs_var"])
    np.testing.assert_array_equal(flat[-len(stats) :], stats)
    np.testing.assert_array_equal(
        flat[: -len(stats)], np.concatenate([v.reshape(-1) for v in state["model"].values()])
    )

    # Two more batches were added to the same statistics (not to fresh ones).
    _, after = _saved_stats(run)
    assert after["obs_count"] == pytest.approx(saved["obs_count"] + 2 * BATCH)
    assert after["ret_count"] == pytest.approx(saved["ret_count"] + 2 * BATCH)


def test_eval_applies_the_statistics_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    cfg, _ = _train_normalized(run, 1024)
    state, saved = _saved_stats(run)
    env = make_env(cfg.env)
    # The checkpoint as the published vector of its version: weights, then the statistics.
    policy = FlatPolicy(env.observation_space, env.action_space, cfg.model, seed=0)
    policy.load(checkpoint_flat(cfg, env, state))
    normalizer = policy.normalizer
    assert normalizer is not None

    # With the statistics the policy acts differently than on raw observations.
    model = ActorCritic(env.observation_space, env.action_space, cfg.model)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
    raw = {"obs": np.array([[1.0, 0.0, 6.0], [-0.5, 0.8, -7.0]], np.float32)}
    normed = normalizer(raw)
    expected = (raw["obs"] - saved["obs_mean"]) / np.sqrt(saved["obs_var"] + 1e-8)
    np.testing.assert_allclose(normed["obs"], expected, rtol=1e-5, atol=1e-6)
    act = {k: model.act({"obs": torch.as_tensor(v["obs"])}, deterministic=True)[0] for k, v in
           (("raw", raw), ("normed", normed))}  # fmt: skip
    assert not torch.allclose(act["raw"], act["normed"])

    # `surge eval` normalises every observation it feeds the policy, with those statistics,
    # and leaves them as they were.
    calls = []
    original = ObsNormalizer.__call__

    def counting(self: ObsNormalizer, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        calls.append(1)
        return original(self, obs)

    monkeypatch.setattr(ObsNormalizer, "__call__", counting)
    result = Run(run).evaluate(episodes=2)
    assert len(calls) == 2 * 200  # Pendulum episodes are 200 steps
    assert result["return_mean"] == json.loads((run / "eval.json").read_text())["return_mean"]
    _, unchanged = _saved_stats(run)
    for key, value in saved.items():
        np.testing.assert_array_equal(unchanged[key], value)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_checkpoint_flat_is_the_vector_the_trainer_published(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `surge eval` loads from a checkpoint is bit for bit what an evaluation worker
    reads from the parameter service at that version."""
    published: dict[int, np.ndarray] = {}
    original = ParameterService.publish

    def spy(self: ParameterService, version: int, flat: np.ndarray) -> None:
        published[version] = np.array(flat, np.float32)
        original(self, version, flat)

    monkeypatch.setattr(ParameterService, "publish", spy)  # the serial runtime: one process
    run = tmp_path / "run"
    cfg, result = _train_normalized(run, 768, f"model.backend={backend}")
    assert result.reason == "budget"
    state, _ = _saved_stats(run)
    assert state["backend"] == backend and state["version"] == 3
    env = make_env(cfg.env)
    flat = checkpoint_flat(cfg, env, state)
    np.testing.assert_array_equal(flat, published[3])
    assert not np.array_equal(flat, published[2])  # a version apart, they differ
    env.close()


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs the mujoco extra")
def test_hopper_preset_trains_evaluates_and_resumes(tmp_path: Path) -> None:
    """The CI's short MuJoCo check: the preset as shipped (local runtime), two updates."""
    run = tmp_path / "run"
    result = run_surge("train", "hopper-ppo", "total_env_steps=4096", f"run_dir={run}",
                       "log.progress=false", timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "reached total_env_steps" in result.stderr
    state = load_checkpoint(latest_checkpoint(run))  # type: ignore[arg-type]
    assert state["version"] == 2 and float(state["normalizer"]["obs_count"]) > 4000
    result = run_surge("eval", str(run), "episodes=1", timeout=120)
    assert result.returncode == 0, result.stderr
    result = run_surge("resume", str(run), "total_env_steps=6144", timeout=300)
    assert result.returncode == 0, result.stderr
    after = load_checkpoint(latest_checkpoint(run))  # type: ignore[arg-type]
    assert float(after["normalizer"]["obs_count"]) == pytest.approx(
        float(state["normalizer"]["obs_count"]) + 2048
    )


def test_lagged_appo_with_normalisation_on_the_local_runtime(tmp_path: Path) -> None:
    """max_policy_lag 1: steps acted on with the previous version's statistics train
    with the current one's (the V-trace ratio covers the difference)."""
    run = tmp_path / "run"
    overrides = [o for o in NORMALIZED if o != "runtime=serial"]
    cfg, name = load_config(
        "pendulum-ppo",
        [*overrides, "runtime=local", "algo=appo", "max_policy_lag=1",
         "workers.inference=inline", "total_env_steps=2048", f"run_dir={run}"],
    )  # fmt: skip
    assert train(cfg, name).reason == "budget"
    _, saved = _saved_stats(run)
    assert saved["obs_count"] == pytest.approx(8 * BATCH + 1e-4)
