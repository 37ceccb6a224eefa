"""Both runtimes on short real runs: run directory contents, versions, determinism, spaces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from surge.config.load import load_config
from surge.runtime.controller import train
from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint
from surge.tracking.metrics import read_metrics

pytestmark = pytest.mark.integration

QUICK = ["ppo.rollout_len=32", "log.interval_s=0", "log.progress=false"]
METRIC_KEYS = {
    "env_steps",
    "wall_time_s",
    "time",
    "episode_return_mean",
    "episodes",
    "steps_per_s",
    "policy_lag_mean",
    "policy_version",
}


def _train(run_dir: Path, *overrides: str, preset: str = "cartpole-ppo"):  # type: ignore[no-untyped-def]
    cfg, name = load_config(preset, [*QUICK, f"run_dir={run_dir}", *overrides])
    return train(cfg, name)


@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_short_run_writes_a_complete_run_directory(run_dir: Path, runtime: str) -> None:
    result = _train(run_dir, f"runtime={runtime}", "total_env_steps=2048")
    assert result.reason == "budget"
    assert result.env_steps == 2048  # 16 updates of 32 steps x 4 envs

    records = read_metrics(run_dir)
    assert records and all(r.keys() >= METRIC_KEYS for r in records)
    assert [r["policy_version"] for r in records] == list(range(1, 17))
    assert records[-1]["episodes"] > 0
    # Synchronous PPO: every step of every batch was acted by the trainer's current version.
    assert all(r["policy_lag_mean"] == 0 and r["policy_lag_max"] == 0 for r in records)

    assert (run_dir / "config.yaml").exists()
    versions = json.loads((run_dir / "versions.json").read_text())
    assert versions["torch"] == torch.__version__
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and load_checkpoint(ckpt)["version"] == 16
    if runtime == "local":
        workers = json.loads((run_dir / "workers.json").read_text())["workers"]
        assert [w["name"] for w in workers] == ["trainer-0", "policy-0", "actor-0"]
        assert all(isinstance(w["pid"], int) and w["host"] and w["restarts"] == 0 for w in workers)
        assert workers[0]["state"] == "finished"


def test_serial_runtime_is_deterministic(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for r in runs:
        _train(r, "runtime=serial", "total_env_steps=2048", "seed=7")
    a, b = (read_metrics(r) for r in runs)
    strip = ("wall_time_s", "time", "steps_per_s")  # and the time_* shares: timings differ

    def same(x: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in x.items() if k not in strip and not k.startswith("time_")}

    assert [same(x) for x in a] == [same(x) for x in b]
    pa, pb = (load_checkpoint(latest_checkpoint(r))["model"] for r in runs)  # type: ignore[arg-type]
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_different_seeds_differ(tmp_path: Path) -> None:
    for seed in (1, 2):
        _train(tmp_path / str(seed), "runtime=serial", "total_env_steps=1024", f"seed={seed}")
    a, b = (read_metrics(tmp_path / s) for s in ("1", "2"))
    assert a[-1]["policy_loss"] != b[-1]["policy_loss"]


def test_policy_lag_is_bounded_by_max_policy_lag(run_dir: Path) -> None:
    result = _train(
        run_dir,
        "runtime=local",
        "total_env_steps=8192",
        "max_policy_lag=2",
        "workers.actors=2",
        "workers.ring_size=1",
    )
    assert result.reason == "budget"
    records = read_metrics(run_dir)
    assert max(r["policy_lag_max"] for r in records) <= 2
    assert all(r["policy_lag_mean"] >= 0 for r in records)


@pytest.mark.parametrize(
    ("env_id", "runtime"),
    [
        ("surge.envs.testing:surge/DictObs-v0", "serial"),  # Dict obs, MultiDiscrete actions
        ("surge.envs.testing:surge/DiscreteObs-v0", "local"),  # Discrete obs, Box actions
        ("Pendulum-v1", "serial"),  # Box obs, Box actions, truncation only
    ],
)
def test_observation_and_action_spaces(run_dir: Path, env_id: str, runtime: str) -> None:
    result = _train(run_dir, f"env.id={env_id}", f"runtime={runtime}", "total_env_steps=1024")
    assert result.reason == "budget"
    assert read_metrics(run_dir)[-1]["episodes"] > 0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5"])
def test_envpool_backend_trains(run_dir: Path, env_id: str) -> None:
    pytest.importorskip("envpool")
    preset = "pong-appo" if env_id.startswith("ALE/") else "cartpole-ppo"
    result = _train(
        run_dir, "env.backend=envpool", "total_env_steps=2048", "runtime=local", preset=preset
    )
    assert result.reason == "budget" and result.env_steps == 2048
    records = read_metrics(run_dir)
    assert records[-1]["policy_version"] == 2048 // (32 * (8 if "Pong" in env_id else 4))
    if "CartPole" in env_id:
        assert records[-1]["episodes"] > 0


def test_warm_trainer_process_becomes_the_trainer(run_dir: Path) -> None:
    from surge.runtime.warm import warm_trainer

    warm = warm_trainer()
    assert warm.process is not None
    pid = warm.process.pid
    try:
        cfg, name = load_config(
            "cartpole-ppo", [*QUICK, f"run_dir={run_dir}", "total_env_steps=1024"]
        )
        assert train(cfg, name, warm).reason == "budget"
    finally:
        warm.close()
    workers = json.loads((run_dir / "workers.json").read_text())["workers"]
    assert workers[0]["name"] == "trainer-0" and workers[0]["pid"] == pid
    assert workers[0]["state"] == "finished"

    unused = warm_trainer()  # a serial run never launches it: closing it ends the process
    process = unused.process
    assert process is not None
    unused.close()
    assert not process.is_alive() and unused.process is None


def test_multiple_actors_and_policy_workers(run_dir: Path) -> None:
    result = _train(
        run_dir,
        "runtime=local",
        "total_env_steps=4096",
        "workers.actors=2",
        "workers.policy_workers=2",
        "workers.ring_size=2",
        "workers.envs_per_group=1",
    )
    assert result.reason == "budget"
    workers = json.loads((run_dir / "workers.json").read_text())["workers"]
    assert {w["name"] for w in workers} == {
        "trainer-0",
        "policy-0",
        "policy-1",
        "actor-0",
        "actor-1",
    }


@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_inline_inference_keeps_versions_exact(run_dir: Path, runtime: str) -> None:
    result = _train(
        run_dir, f"runtime={runtime}", "total_env_steps=2048", "workers.inference=inline"
    )
    assert result.reason == "budget"
    records = read_metrics(run_dir)
    # Synchronous: the actor's own policy waited for every new version before acting.
    assert all(r["policy_lag_max"] == 0 for r in records)
    timing = json.loads((run_dir / "timing.json").read_text())
    assert set(timing["processes"]) == {"trainer-0", "actor-0", "controller"}  # no policy worker
    actor = timing["processes"]["actor-0"]
    assert actor["inference"] > 0 and actor["env"] > 0
    assert timing["processes"]["trainer-0"]["learn"] > 0
    total = timing["total"]
    assert 0 <= total["overhead_frac"] < 1
    assert total["cpu_total_s"] >= total["env_s"] + total["inference_s"] + total["learn_s"]


def test_appo_with_lag_and_split_requests(run_dir: Path) -> None:
    result = _train(
        run_dir,
        "runtime=local",
        "algo=appo",
        "max_policy_lag=2",
        "total_env_steps=8192",
        "workers.ring_size=4",
        "workers.envs_per_group=1",
        "workers.inference_splits=2",
    )
    assert result.reason == "budget"
    records = read_metrics(run_dir)
    assert max(r["policy_lag_max"] for r in records) <= 2
    assert all(r["vtrace_rho_mean"] > 0 for r in records)
    assert all(0 <= r["vtrace_clipped_frac"] <= 1 for r in records)
