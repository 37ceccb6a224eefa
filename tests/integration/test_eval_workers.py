"""Evaluation workers during training: eval rows and playable videos on local and Ray, and a
killed evaluation worker is restarted while training goes on without it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from surge.tracking.metrics import read_metrics
from surge.tracking.video import read_mp4
from tests.conftest import QUICK, SURGE, interrupt, metrics_so_far, wait_for, workers_by_name

pytestmark = pytest.mark.integration

# eval.nice=0: at the default 19 a busy CI machine may give the evaluator no CPU before this
# short run ends; that the niced evaluator costs training nothing is benchmarks/eval_overhead.py.
EVAL = [
    "eval.workers=1",
    "eval.every_versions=5",
    "eval.video_every=2",
    "eval.episodes=2",
    "eval.nice=0",
]
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def _evaluator(run_dir: Path) -> dict[str, Any]:
    return workers_by_name(run_dir)["evaluator-0"]


def _eval_rows(run_dir: Path) -> list[dict[str, object]]:
    return [r for r in metrics_so_far(run_dir) if "eval/return_mean" in r]


def _steps(run_dir: Path) -> int:
    return int(metrics_so_far(run_dir)[-1]["env_steps"])  # type: ignore[call-overload]


def _trained_steps(run_dir: Path) -> int:
    """The env steps of the newest training row (0 before the first)."""
    trained = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    return int(trained[-1]["env_steps"]) if trained else 0  # type: ignore[call-overload]


def _check_eval_output(run_dir: Path) -> None:
    rows = _eval_rows(run_dir)
    assert len(rows) >= 2, rows
    for row in rows:
        assert row["eval/episodes"] == 2
        length = float(row["eval/length_mean"])  # type: ignore[arg-type]
        assert 8 <= length <= 500
        assert row["eval/return_mean"] == length  # CartPole: +1 per step
    versions = [int(r["eval/policy_version"]) for r in rows]  # type: ignore[call-overload]
    assert versions == sorted(versions) and versions[0] >= 5, versions
    assert any(r["eval/video"] for r in rows)
    videos = sorted((run_dir / "videos").glob("eval-v*.mp4"))
    assert videos, "no video written"
    frames = read_mp4(videos[0])  # decodes: a playable MP4
    assert len(frames) >= 9 and frames[0].shape == (400, 600, 3)
    # Training rows are unaffected: the run's result comes from them, not from eval rows.
    training = [r for r in read_metrics(run_dir) if "steps_per_s" in r]
    assert training[-1]["env_steps"] >= 8192


@pytest.mark.parametrize("runtime", ["local", "ray"])
def test_eval_workers_write_rows_and_videos(runtime: str, run_dir: Path) -> None:
    # Training never waits for evaluation, so how many evaluations a run of N steps holds
    # depends on the machine's load (on a busy CI machine a Ray evaluator once started late
    # enough to log one). The run goes on until the rows this test needs exist, then Ctrl+C.
    env = {**os.environ, **RAY_ENV, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", f"runtime={runtime}", *QUICK,
         *EVAL, "total_env_steps=10000000", "stop_return=null"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        rows = lambda: _eval_rows(run_dir)  # noqa: E731
        # and the training rows `_check_eval_output` reads: on a busy machine the evaluator
        # once logged its two rows before the trainer had trained 8192 env steps
        enough = wait_for(
            lambda: (
                len(rows()) >= 2
                and any(r["eval/video"] for r in rows())
                and _trained_steps(run_dir) >= 8192
            ),
            240,
        )
    finally:
        interrupt(proc)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert enough, f"evaluations so far: {_eval_rows(run_dir)}\n{stderr[-3000:]}"
    assert proc.returncode == 130, stderr[-3000:]  # interrupted, after saving a checkpoint
    _check_eval_output(run_dir)
    assert _evaluator(run_dir)["state"] == "stopped"


@pytest.mark.parametrize("runtime", ["local", "ray"])
def test_killed_eval_worker_is_restarted_and_training_never_waits(
    runtime: str, run_dir: Path
) -> None:
    # stop_return=null: a run that solves CartPole ends, and with it the evaluations this
    # test waits for (on a slow machine the run once solved before the restarted evaluator
    # logged). The run goes on until the test has seen what it needs, then Ctrl+C.
    env = {**os.environ, **RAY_ENV, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*SURGE, "train", "cartpole-ppo", f"run_dir={run_dir}", f"runtime={runtime}", *QUICK,
         "eval.workers=1", "eval.every_versions=20", "eval.episodes=1",
         "total_env_steps=10000000", "stop_return=null"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip

    def running(predicate: Callable[[], object], timeout: float) -> bool:
        return wait_for(lambda: proc.poll() is not None or predicate(), timeout) and (
            proc.poll() is None
        )

    def kill_and_watch() -> str:
        """What went wrong, or ""."""
        if not running(lambda: _eval_rows(run_dir), 120):
            return "no evaluation was logged"
        victim = psutil.Process(_evaluator(run_dir)["pid"])  # a process, or a Ray actor's
        # Frozen (SIGSTOP: it neither reads its inbox nor reports), it must not hold training
        # up: the trainer's announcements to it are dropped, never waited on.
        victim.send_signal(signal.SIGSTOP)
        steps_at_stop = _steps(run_dir)
        if not running(lambda: _steps(run_dir) > steps_at_stop + 40_000, 60):
            return "training stalled while the evaluation worker was frozen"
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        rows_at_kill = len(_eval_rows(run_dir))

        def restarted() -> bool:
            ev = _evaluator(run_dir)
            return bool(ev["restarts"] == 1 and ev["state"] == "running")

        if not running(restarted, 60):
            return "the evaluation worker was not restarted"
        if not running(lambda: len(_eval_rows(run_dir)) > rows_at_kill, 120):
            return "the restarted evaluation worker logged nothing"
        if time.monotonic() - killed_at >= 200:
            return "the restarted evaluation worker took over 200 s to log"
        return ""

    try:
        problem = kill_and_watch()
    finally:
        interrupt(proc)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert not problem, f"{problem} (surge exited {proc.returncode}):\n{stderr[-3000:]}"
    assert proc.returncode == 130, stderr[-3000:]  # interrupted, after saving a checkpoint
    assert "evaluator-0 failed (" in stderr and "restarting it" in stderr
