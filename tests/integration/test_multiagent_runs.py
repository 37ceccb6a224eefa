"""Multi-agent runs end to end: the spread preset on serial, local and Ray, an env whose agents
join and leave counted exactly, and a SIGKILLed actor survived."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("mpe2")

from tests.conftest import SURGE, metrics_so_far, run_surge, wait_for, workers_by_name  # noqa: E402
from tests.integration.test_eval_workers import RAY_ENV  # noqa: E402

pytestmark = pytest.mark.integration

ARRIVALS = "pettingzoo:surge.envs.testing_pettingzoo:arrivals_env"
SHORT = ["log.interval_s=0", "log.progress=false", "workers.envs_per_group=2"]


def _training_rows(run_dir: Path) -> list[dict[str, object]]:
    return [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]


@pytest.mark.parametrize("runtime", ["serial", "local", "ray"])
def test_spread_mappo_runs_on_every_runtime(runtime: str, run_dir: Path) -> None:
    if runtime == "ray":
        os.environ.update(RAY_ENV)  # inherited by `surge` and the Ray instance it starts
    steps = 2 * 2 * 2 * 25 * 6  # 8 envs x 25 steps per update, 6 updates
    result = run_surge(
        "train", "spread-mappo", f"run_dir={run_dir}", f"runtime={runtime}",
        f"total_env_steps={steps}", *SHORT, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    last = _training_rows(run_dir)[-1]
    assert last["env_steps"] == steps and last["policy_version"] == 6
    assert last["agent_steps"] == 3 * steps  # simple_spread's agents never leave early
    assert last["episodes"] == steps // 25  # one team episode per env, counted once
    assert -200 < float(last["episode_return_mean"]) < 0  # type: ignore[arg-type]
    assert float(last["explained_variance"]) == float(last["explained_variance"])  # type: ignore[arg-type]


def test_agents_that_join_and_leave_are_counted_exactly(run_dir: Path) -> None:
    """Arrivals (surge/envs/testing_pettingzoo.py): every 6-step episode has 13 agent steps
    (a0 6, a1 3, a2 4) and a team return of 24 plus 0.1 per action 1, at most 25.3."""
    result = run_surge(
        "train", "spread-ippo", f"run_dir={run_dir}", f"env.id={ARRIVALS}", "env.kwargs={}",
        "runtime=serial",
        "env.multiagent.global_state=none", "model.actor_inputs=[]", "model.critic_inputs=[]",
        "ppo.rollout_len=6", "total_env_steps=480", *SHORT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    last = _training_rows(run_dir)[-1]
    assert last["episodes"] == 480 // 6
    assert last["agent_steps"] == 13 * 480 // 6
    assert 24.0 <= float(last["episode_return_mean"]) <= 25.3  # type: ignore[arg-type]


def test_a_killed_actor_of_a_multiagent_run_is_restarted(run_dir: Path) -> None:
    proc = subprocess.Popen(
        [*SURGE, "train", "spread-mappo", f"run_dir={run_dir}", "total_env_steps=32000",
         "log.interval_s=0.5", "log.progress=false"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip

    try:
        assert wait_for(lambda: len(_training_rows(run_dir)) >= 3, timeout=120)
        victim = workers_by_name(run_dir)["actor-1"]["pid"]
        assert isinstance(victim, int)
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "actor-1 failed (process" in err and "restarting it (1/3)" in err
    assert workers_by_name(run_dir)["actor-1"]["restarts"] == 1
    last = _training_rows(run_dir)[-1]
    assert last["env_steps"] == 32000 and last["restarts"] == 1 and last["actor_life_max"] == 1
    assert last["agent_steps"] == 3 * 32000


@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_connect4_selfplay_trains_against_its_league_and_reports_win_rates(
    runtime: str, run_dir: Path
) -> None:
    result = run_surge(
        "train", "connect4-selfplay", f"run_dir={run_dir}", f"runtime={runtime}",
        "total_env_steps=20480", "workers.envs_per_group=4", "eval.every_versions=5",
        "eval.every_s=1", "eval.episodes=6", "eval.nice=0", "selfplay.snapshot_every=2",
        "model.grid_channels=[8,8,8]", "model.hidden_sizes=[32]",  # the preset's shape, small
        *SHORT[:2], timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = metrics_so_far(run_dir)
    evals = [r for r in rows if "eval/win_rate_vs_random" in r]
    assert evals, "no evaluation against the fixed players was logged"
    for r in evals:
        for player in ("random", "heuristic"):
            rates = [float(r[f"eval/{o}_rate_vs_{player}"]) for o in ("win", "draw", "loss")]  # type: ignore[arg-type]
            assert abs(sum(rates) - 1) < 1e-9 and all(0 <= x <= 1 for x in rates)
        assert r["eval/episodes"] == 12  # 6 games against each player
    last = _training_rows(run_dir)[-1]
    assert last["env_steps"] == 20480 and -1 <= float(last["episode_return_mean"]) <= 1  # type: ignore[arg-type]
    if runtime == "local":  # the serial runtime writes no worker table
        assert "league-0" in workers_by_name(run_dir)
    # `surge eval` plays the same matches with the run's checkpoint.
    out = run_surge("eval", str(run_dir), "episodes=4")
    assert out.returncode == 0, out.stderr[-3000:]
    result_json = json.loads((run_dir / "eval.json").read_text())
    assert result_json["episodes"] == 4 and "win_rate_vs_heuristic" in result_json


def test_multiagent_evaluation_during_training_and_after(run_dir: Path) -> None:
    """Evaluation workers and `surge eval` play one env with every agent acting through the
    policy: team returns of whole 25-step episodes, and a playable video of the agents."""
    from surge.tracking.video import read_mp4

    result = run_surge(
        "train", "spread-mappo", f"run_dir={run_dir}", "total_env_steps=16000",
        "eval.workers=1", "eval.every_versions=4", "eval.video_every=2", "eval.episodes=2",
        "eval.nice=0", *SHORT[:2], timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = metrics_so_far(run_dir)
    evals = [r for r in records if "eval/return_mean" in r]
    # however few scheduled evaluations a fast run left time for, the last version's is there
    # (the final evaluation's, or the schedule's when it fell on that version)
    last = [r for r in records if "steps_per_s" in r][-1]["policy_version"]
    assert evals[-1]["eval/policy_version"] == last
    assert all(r["eval/length_mean"] == 25.0 for r in evals)
    assert all(float(r["eval/return_mean"]) < 0 for r in evals)  # type: ignore[arg-type]
    out = run_surge("eval", str(run_dir), "episodes=3", "--video")
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["episodes"] == 3 and summary["length_mean"] == 25.0
    frames = read_mp4(Path(summary["video"]))
    assert len(frames) >= 20 and frames[0].ndim == 3


TWO_POLICIES = [
    f"env.id={ARRIVALS}", "env.kwargs={}", "env.multiagent.global_state=none",
    "model.actor_inputs=[]", "model.critic_inputs=[]", "ppo.rollout_len=6",
    "policies=[solo, pair]", "policy_mapping={a0: solo, '*': pair}",
]  # fmt: skip


@pytest.mark.parametrize("runtime", ["serial", "local", "ray"])
def test_two_policies_each_with_its_trainer_and_resume(runtime: str, run_dir: Path) -> None:
    """a0 is one policy's, a1 and a2 the other's: two trainers, two parameter streams, the
    second policy's metrics and checkpoints in policies/pair/, and a resume of both."""
    if runtime == "ray":
        os.environ.update(RAY_ENV)
    common = [f"runtime={runtime}", *SHORT]
    result = run_surge(
        "train", "spread-ippo", f"run_dir={run_dir}", *TWO_POLICIES, *common,
        "total_env_steps=480", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trainer-0, trainer-1" in result.stderr
    pair_dir = run_dir / "policies" / "pair"
    for rows, agent_steps, low, high in (
        (_training_rows(run_dir), 6, 6.0, 6.6),  # a0: 6 steps of 1 (+0.1 per action 1)
        (_training_rows(pair_dir), 7, 18.0, 18.7),  # a1: 3 of 2, a2: 4 of 3
    ):
        last = rows[-1]
        assert last["env_steps"] == 480 and last["policy_version"] == 10
        assert last["episodes"] == 80 and last["agent_steps"] == agent_steps * 80
        assert low <= float(last["episode_return_mean"]) <= high  # type: ignore[arg-type]
    assert list((pair_dir / "checkpoints").glob("ckpt-*.safetensors"))
    again = run_surge("resume", str(run_dir), "total_env_steps=960", timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    for rows in (_training_rows(run_dir), _training_rows(pair_dir)):
        assert rows[-1]["env_steps"] == 960 and rows[-1]["policy_version"] == 20
