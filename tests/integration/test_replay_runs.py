"""Replay-based RL end to end: DQN on every runtime, the rate limiter's ratio as measured, a
killed replay worker restarted in place (its shard restored from shared memory), and the
errors a replay config can make."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.errors import ConfigError
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics
from tests.conftest import SURGE, metrics_so_far, run_surge, wait_for, workers_by_name

pytestmark = pytest.mark.integration

SMALL = [
    "replay.capacity=2000", "replay.min_size=500", "log.interval_s=0", "log.progress=false",
]  # fmt: skip
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_dqn_trains_and_samples_at_the_ratio(tmp_path: Path, runtime: str) -> None:
    cfg, _ = load_config(
        "cartpole-dqn",
        [*SMALL, f"runtime={runtime}", "total_env_steps=4000", f"run_dir={tmp_path / 'run'}"],
    )
    result = train(cfg)
    assert result.reason == "budget" and result.env_steps >= 4000
    last = read_metrics(result.run_dir, "training")[-1]
    assert last["replay/ratio"] == pytest.approx(12.8, rel=0.05)  # samples per insert
    assert last["replay/size"] > 1500 and last["policy_version"] > 100
    for key in ("loss", "q_mean", "td_abs"):
        assert last[key] == last[key], key  # finite: not NaN


def test_r2d2_trains_on_sequences_at_the_ratio(tmp_path: Path) -> None:
    """memory-r2d2 (a GRU Q-network on replayed sequences) runs end to end on processes;
    the ratio counts each sequence's trained steps against the steps inserted."""
    cfg, _ = load_config(
        "memory-r2d2",
        ["replay.min_size=2000", "log.interval_s=0", "log.progress=false",
         "total_env_steps=12000", f"run_dir={tmp_path / 'run'}"],
    )  # fmt: skip
    result = train(cfg)
    assert result.reason == "budget" and result.env_steps >= 12000
    last = read_metrics(result.run_dir, "training")[-1]
    assert last["replay/ratio"] == pytest.approx(8.0, rel=0.05)
    assert 0.9 < last["trained_share"] < 1.0  # the steps whose bootstrap leaves the sequence
    assert last["policy_version"] >= 55  # (12000 - 2000) * 8 / (32 sequences x 40 steps)
    for key in ("loss", "q_mean", "td_abs"):
        assert last[key] == last[key], key


def _steps(run_dir: Path) -> int:
    rows = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    return int(rows[-1]["env_steps"]) if rows else 0  # type: ignore[call-overload]


@pytest.mark.parametrize("runtime", ["local", "ray"])
def test_a_killed_replay_worker_restarts_with_its_shard_and_the_run_finishes(
    run_dir: Path, runtime: str
) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(RAY_ENV if runtime == "ray" else {})}
    proc = subprocess.Popen(
        [
            *SURGE, "train", "cartpole-dqn", *SMALL, f"runtime={runtime}",
            "total_env_steps=30000", f"run_dir={run_dir}",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        # after sampling started: the shard holds what the trainer has been learning from
        assert wait_for(lambda: _steps(run_dir) > 3_000, timeout=180), "no progress"
        before = metrics_so_far(run_dir)[-1]
        pid = workers_by_name(run_dir)["replay-0"]["pid"]
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: workers_by_name(run_dir)["replay-0"]["restarts"] == 1, 30)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "replay-0 failed" in err and "restarting it" in err and "(1/3)" in err
    rows = read_metrics(run_dir, "training")
    assert rows[-1]["env_steps"] >= 30000 and rows[-1]["restarts"] == 1
    # restored, not refilled: right after the restart the shard was as full as before
    after = [r for r in rows if r["restarts"] == 1]  # logged once the new life ran
    assert after[0]["replay/size"] >= before["replay/size"]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["env.id=Pendulum-v1"], "algo: dqn needs Discrete actions"),
        (["replay.capacity=100", "replay.batch_size=128"], "replay.capacity=100 is below"),
        (["replay.ratio=0"], "replay.ratio: must be > 0"),
        (["total_env_steps=5000"], "total_env_steps=5000 is below replay.min_size=10000"),
        (
            ["replay.capacity=500", "replay.min_size=100", "workers.envs_per_group=64"],
            "replay.capacity=500",
        ),
    ],
)
def test_replay_config_mistakes_exit_2_naming_the_field(
    tmp_path: Path, overrides: list[str], named: str
) -> None:
    out = run_surge("train", "cartpole-dqn", f"run_dir={tmp_path / 'run'}", *overrides)
    assert out.returncode == 2, out.stderr
    assert named in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["dqn.sequence_len=50"], "dqn.sequence_len=50"),
        (["dqn.burn_in=79"], "dqn.burn_in=79"),
        (
            ["replay.capacity=1000", "replay.min_size=500", "replay.batch_size=8"],
            "dqn.sequence_len=80",
        ),
    ],
)
def test_r2d2_config_mistakes_exit_2_naming_the_field(
    tmp_path: Path, overrides: list[str], named: str
) -> None:
    out = run_surge("train", "memory-r2d2", f"run_dir={tmp_path / 'run'}", *overrides)
    assert out.returncode == 2, out.stderr
    assert named in out.stderr and "Traceback" not in out.stderr


def test_config_errors_are_raised_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="replay.shards=2"):
        load_config("cartpole-dqn", ["replay.shards=2"])


def test_a_resumed_run_restores_its_replay_with_replay_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fast = ["replay.capacity=3000", "replay.min_size=500", "log.interval_s=0", "log.progress=false"]
    out = run_surge(
        "train", "cartpole-dqn-fast", *fast, "stop_return=null", "total_env_steps=6000",
        "replay.checkpoint=true", "log.first_checkpoint_s=0", "log.checkpoint_interval_s=0.2",
        f"run_dir={run}", "runtime=serial",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = read_metrics(run, "training")
    written = [r for r in rows if "replay/checkpoint_mb" in r]  # its size and write time
    assert written and written[-1]["replay/checkpoint_mb"] > 0.1
    assert written[-1]["replay/checkpoint_s"] > 0
    assert (run / "checkpoints" / "replay-0.npz").is_file()
    saved = rows[-1]
    out = run_surge("resume", str(run), "total_env_steps=7500", "runtime=serial")
    assert out.returncode == 0, out.stderr
    assert "the replay is restored from the one saved with the checkpoint" in out.stderr
    resumed = [r for r in read_metrics(run, "training") if r["env_steps"] > saved["env_steps"]]
    # full from its first row: restored (a refilled replay holds only the 1,500 new steps)
    assert resumed[0]["replay/size"] >= 3000 > resumed[-1]["env_steps"] - saved["env_steps"]
    assert 7500 <= resumed[-1]["env_steps"] < 7600  # counted on from the checkpoint
    # without replay.checkpoint, a resumed run says it starts empty
    out = run_surge("resume", str(run), "total_env_steps=8000", "replay.checkpoint=false")
    assert out.returncode == 0, out.stderr
    assert "the replay starts empty (replay.checkpoint is off)" in out.stderr
