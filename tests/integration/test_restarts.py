"""Fault tolerance: actors and policy workers restart in place; a dead trainer resumes.

These runs train CartPole to the solved score while workers are killed under them, so they
check the whole contract: the run goes on, restarts are reported and counted, the trainer
never trains on a segment written by two lives of an actor (it checks every batch and would
fail the run), and the target is still reached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from surge.tracking.checkpoint import latest_checkpoint
from surge.tracking.metrics import read_metrics
from tests.conftest import (
    SURGE,
    in_process_streams,
    metrics_so_far,
    run_surge,
    wait_for,
    workers_by_name,
)

pytestmark = pytest.mark.integration


def _kill(run_dir: Path, name: str) -> int:
    pid = workers_by_name(run_dir)[name]["pid"]
    assert isinstance(pid, int)
    os.kill(pid, signal.SIGKILL)
    return pid


def _steps(run_dir: Path) -> int:
    records = metrics_so_far(run_dir)
    return int(records[-1]["env_steps"]) if records else 0  # type: ignore[call-overload]


def test_killed_actor_and_policy_worker_restart_and_the_run_still_solves(run_dir: Path) -> None:
    proc = subprocess.Popen(
        [
            *SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", "log.interval_s=0.5",
            "log.progress=false",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        assert wait_for(lambda: _steps(run_dir) > 10_000, timeout=90)
        old_actor = _kill(run_dir, "actor-0")  # in the middle of writing its segments
        assert wait_for(lambda: workers_by_name(run_dir)["actor-0"]["restarts"] == 1, timeout=10)
        assert workers_by_name(run_dir)["actor-0"]["pid"] != old_actor
        at_kill = _steps(run_dir)
        assert wait_for(lambda: _steps(run_dir) > at_kill + 5_000, timeout=60)
        _kill(run_dir, "policy-0")  # with requests in flight: the new one finds them
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "actor-0 failed (process" in err and "SIGKILL" in err
    assert "policy-0 failed (process" in err and "restarting it (1/3)" in err
    last = read_metrics(run_dir)[-1]
    assert last["episode_return_mean"] >= 475
    assert last["restarts"] == 2
    assert last["actor_life_max"] == 1  # batches from the restarted actor were trained on
    workers = workers_by_name(run_dir)
    assert workers["actor-0"]["restarts"] == 1 and workers["policy-0"]["restarts"] == 1
    assert workers["trainer-0"]["state"] == "finished"


def test_killed_trainer_stops_the_run_and_resume_reaches_the_target(run_dir: Path) -> None:
    """With the default checkpoint settings, a trainer SIGKILLed 10 s after the first metrics
    row (long before the 60 s checkpoint interval) leaves a checkpoint to resume from: the
    first one is written `log.first_checkpoint_s` (5 s) after the start. The first run's
    stop_return (above CartPole's maximum of 500) keeps it going until the kill; the resumed
    run stops at the target."""
    proc = subprocess.Popen(
        [
            *SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", "log.interval_s=0.5",
            "log.progress=false", "stop_return=1000",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        assert wait_for(lambda: _steps(run_dir) > 0, timeout=90)
        time.sleep(10.0)
        assert proc.poll() is None, "the run ended before the kill"
        _kill(run_dir, "trainer-0")
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "worker trainer-0 failed" in err and "SIGKILL" in err
    assert "restarting" not in err  # the trainer is never restarted in place
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None  # written atomically: the last one is whole

    resumed = run_surge("resume", str(run_dir), "stop_return=475", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    records = read_metrics(run_dir)
    assert records[-1]["episode_return_mean"] >= 475
    steps = [r["env_steps"] for r in records]
    assert steps == sorted(steps)  # the resumed run continues the step count


def test_restarted_actor_with_groups_a_segment_apart_does_not_deadlock(tmp_path: Path) -> None:
    """A restart can find group 0 one segment ahead of group 1 (the actor died between their
    publishes). At lag 0 group 0 must wait for a version that needs group 1's segment: the
    actor has to step group 1 meanwhile instead of waiting on the head of its ring."""
    from surge.config.load import load_config
    from surge.runtime.launch import start_worker
    from surge.streams import sample

    cfg, _ = load_config(
        "cartpole-ppo", ["ppo.rollout_len=8", "log.progress=false", "log.tensorboard=false"]
    )
    graph, ctx, transport = in_process_streams(cfg, tmp_path)
    workers = {
        spec.name: start_worker(ctx, graph, slot, transport, life=0)[2]
        for slot, spec in enumerate(graph.workers)
        if spec.kind != "actor"
    }
    transport.block("samples")[sample.PROGRESS][0] = 1  # group 0 finished segment 0
    slot = len(graph.workers) - 1
    actor_spec = graph.workers[slot]
    workers[actor_spec.name] = start_worker(ctx, graph, slot, transport, life=1)[2]
    trainer = workers["trainer-0"]
    for _ in range(2_000):
        for worker in workers.values():
            worker.poll(0.0)
        if trainer.version >= 2:  # type: ignore[attr-defined]
            break
    assert trainer.version >= 2, "the restarted actor stalled"  # type: ignore[attr-defined]
