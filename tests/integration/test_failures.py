"""Workers that crash, hang or get killed; Ctrl+C; what is left behind afterwards (nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint
from surge.tracking.metrics import read_metrics
from tests.conftest import (
    QUICK,
    SURGE,
    metrics_so_far,
    run_surge,
    shm_dirs_of,
    wait_for,
    worker_processes,
    workers_by_name,
)

pytestmark = pytest.mark.integration

CRASHING = "env.id=surge.envs.testing:surge/Crashing-v0"


def _assert_nothing_left(run_dir: Path, controller_pid: int) -> None:
    assert wait_for(lambda: not worker_processes(run_dir), timeout=5), worker_processes(run_dir)
    assert shm_dirs_of(controller_pid) == []


@pytest.mark.parametrize("runtime", ["local", "serial"])
def test_crashing_env_reports_worker_and_traceback(run_dir: Path, runtime: str) -> None:
    # Each env crashes at its 400th step: after several updates (and checkpoints) of 32 x 4.
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            *SURGE, "train", "cartpole-ppo", CRASHING, "env.kwargs={crash_after: 400}",
            f"runtime={runtime}",
            f"run_dir={run_dir}", "log.checkpoint_interval_s=0", "total_env_steps=100000", *QUICK,
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    assert "worker actor-0 failed" in err
    assert "Traceback (most recent call last)" in err
    assert "CrashingEnv: simulated failure at step 401" in err
    assert elapsed < 60
    _assert_nothing_left(run_dir, proc.pid)
    # The trainer, still healthy, saved its state when the actor failed: the checkpoint
    # loads and matches the last metrics line.
    assert "the trainer saved a checkpoint" in err
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None
    assert load_checkpoint(ckpt)["version"] == read_metrics(run_dir)[-1]["policy_version"] >= 1
    if runtime == "local":
        workers = workers_by_name(run_dir)
        assert workers["actor-0"]["state"] == "failed"


def test_hung_worker_is_detected_by_heartbeat(run_dir: Path) -> None:
    result = run_surge(
        "train", "cartpole-ppo", "env.id=surge.envs.testing:surge/Hanging-v0",
        "env.kwargs={hang_after: 50}",
        "workers.heartbeat_timeout_s=3", "workers.max_restarts=1", f"run_dir={run_dir}",
        "total_env_steps=100000", *QUICK,
    )  # fmt: skip
    assert result.returncode == 1
    # Handled like a dead worker: restarted in place once, then (hung again) the run stops.
    assert "actor-0 failed (no heartbeat" in result.stderr
    assert "restarting it (1/1)" in result.stderr
    assert "worker actor-0 failed" in result.stderr
    assert "no heartbeat" in result.stderr
    assert wait_for(lambda: not worker_processes(run_dir), timeout=5)


def test_killed_worker_is_named(run_dir: Path) -> None:
    proc = subprocess.Popen(
        [
            *SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", "total_env_steps=10000000",
            "workers.max_restarts=0", *QUICK,
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wait_for(lambda: len(metrics_so_far(run_dir)) > 2, timeout=60)
    policy_pid = workers_by_name(run_dir)["policy-0"]["pid"]
    # Worker processes carry their name in the process title.
    titles = {" ".join(p.cmdline()) for p in worker_processes(run_dir)}
    assert any(t.startswith("surge policy-0") for t in titles), titles
    os.kill(policy_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "worker policy-0 failed" in err and "SIGKILL" in err
    _assert_nothing_left(run_dir, proc.pid)


def test_ctrl_c_saves_a_checkpoint_and_resume_continues(run_dir: Path) -> None:
    proc = subprocess.Popen(
        [*SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", "total_env_steps=10000000", *QUICK],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert wait_for(lambda: len(metrics_so_far(run_dir)) > 3, timeout=60)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl+C does: the whole group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "surge resume" in err
    _assert_nothing_left(run_dir, proc.pid)
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None
    saved = load_checkpoint(ckpt)
    steps_at_interrupt = saved["env_steps"]
    # The metrics end exactly where the checkpoint does.
    assert read_metrics(run_dir)[-1]["env_steps"] == steps_at_interrupt

    target = steps_at_interrupt + 2048
    result = run_surge("resume", str(run_dir), f"total_env_steps={target}")
    assert result.returncode == 0, result.stderr
    records = read_metrics(run_dir)
    after = [r for r in records if r["env_steps"] > steps_at_interrupt]
    assert after and after[-1]["env_steps"] >= target
    # Versions and steps continue where the checkpoint left off, and never go back.
    assert after[0]["policy_version"] == saved["version"] + 1
    assert all(b["env_steps"] > a["env_steps"] for a, b in zip(records, records[1:], strict=False))


def test_controller_killed_leaves_no_orphans(run_dir: Path) -> None:
    proc = subprocess.Popen(
        [*SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", "total_env_steps=10000000", *QUICK],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert wait_for(lambda: len(metrics_so_far(run_dir)) > 1, timeout=60)
    assert len(worker_processes(run_dir)) == 3
    proc.kill()
    proc.wait()
    # Workers die with their controller (parent-death signal).
    assert wait_for(lambda: not worker_processes(run_dir), timeout=5)
    # Its shared memory is swept by the next run's start.
    assert shm_dirs_of(proc.pid)
    from surge.streams.transport import sweep_stale_shm

    sweep_stale_shm()
    assert shm_dirs_of(proc.pid) == []


def test_python_api_raises_worker_failure(run_dir: Path) -> None:
    from surge.config.load import load_config
    from surge.errors import WorkerFailure
    from surge.runtime.controller import train

    cfg, name = load_config(
        "cartpole-ppo", [CRASHING, "env.kwargs={crash_after: 5}", f"run_dir={run_dir}", *QUICK]
    )
    with pytest.raises(WorkerFailure) as info:
        train(cfg, name)
    assert info.value.worker == "actor-0"
    assert "simulated failure" in info.value.detail
    assert sys.modules.get("surge.runtime.local") is not None
