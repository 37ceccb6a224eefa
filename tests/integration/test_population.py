"""A population (surge/population/): two CartPole members, each its own `surge train` on
the local runtime, of which the worse copies the better live (weights, optimiser and
statistics through its settings channel) with explored settings, and both finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from surge.tracking.checkpoint import latest_checkpoint
from tests.conftest import SURGE, run_surge, wait_for, workers_by_name


def test_two_member_population_exploits_and_finishes(run_dir: Path) -> None:
    result = run_surge(
        "train", "cartpole-pbt", f"run_dir={run_dir}", "runtime=local",
        "total_env_steps=12800", "stop_return=null", "ppo.rollout_len=32",
        "log.interval_s=0", "log.tensorboard=false", "log.first_checkpoint_s=0",
        "log.checkpoint_interval_s=0.5", "population.size=2",
        "population.perturbation_interval=2000", "population.quantile_fraction=0.5",
        "population.initial={ppo.lr: [1e-6, 3e-3]}",
        timeout=90,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "population finished" in result.stderr
    decisions = [json.loads(x) for x in (run_dir / "population.jsonl").read_text().splitlines()]
    assert decisions, result.stderr[-3000:]
    first = decisions[0]
    assert first["member"] != first["source"] and set(first["new"]) == {"ppo.lr", "ppo.ent_coef"}
    assert Path(decisions[-1]["checkpoint"]).is_file()  # a member's newest copy is kept
    for k in range(2):
        rows = [json.loads(x) for x in (run_dir / f"member-{k}" / "metrics.jsonl").open()]
        trained = [r for r in rows if "steps_per_s" in r]
        assert trained[-1]["env_steps"] == 12800  # each member its own budget
    copier = run_dir / first["member"] / "metrics.jsonl"
    taken = [json.loads(x) for x in copier.open() if '"hp/seq"' in x]
    assert taken and taken[-1]["hp/ppo.lr"] > 0  # the values in force are logged
    # the lineage: written when the population ends, and redrawn by `surge plot`
    assert (run_dir / "lineage.png").stat().st_size > 0
    replot = run_surge("plot", str(run_dir), "-o", str(run_dir / "again.png"), timeout=60)
    assert replot.returncode == 0 and (run_dir / "again.png").stat().st_size > 0


def test_killed_member_trainer_resumes_and_the_population_finishes(run_dir: Path) -> None:
    """SIGKILL of one member's trainer mid-run: that member's run fails, the population's
    controller resumes it from its newest checkpoint, the other member never stops, and
    both reach their budget."""
    argv = [
        "train", "cartpole-pbt", f"run_dir={run_dir}", "runtime=local",
        "total_env_steps=40000", "stop_return=null", "ppo.rollout_len=32",
        "log.interval_s=0.5", "log.tensorboard=false", "log.first_checkpoint_s=0",
        "log.checkpoint_interval_s=0.5", "population.size=2",
        "population.perturbation_interval=100000", "population.initial={ppo.lr: [3e-3, 3e-3]}",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    population = subprocess.Popen(
        [*SURGE, *argv], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    )
    victim = run_dir / "member-1"
    try:
        started = wait_for(lambda: latest_checkpoint(victim) is not None, 120)
        assert started, population.communicate(timeout=10)[1][-3000:]
        pid = workers_by_name(victim)["trainer-0"]["pid"]
        os.kill(pid, signal.SIGKILL)
        _, err = population.communicate(timeout=240)
    finally:
        if population.poll() is None:
            population.kill()
    assert population.returncode == 0, err[-3000:]
    assert "member-1 exited with" in err and "resuming it" in err, err[-3000:]
    assert "member-0 exited" not in err  # the other member ran on, untouched
    for k in range(2):
        rows = [json.loads(x) for x in (run_dir / f"member-{k}" / "metrics.jsonl").open()]
        assert max(r["env_steps"] for r in rows if "steps_per_s" in r) >= 40000


def test_an_interrupted_population_resumes_where_it_stopped(run_dir: Path) -> None:
    """Ctrl+C of the population stops every member with a checkpoint; `surge resume` of the
    population's directory resumes each from it, with its settings in force, to its budget."""
    argv = [
        "train", "cartpole-pbt", f"run_dir={run_dir}", "runtime=local",
        "total_env_steps=30000", "stop_return=null", "ppo.rollout_len=32",
        "log.interval_s=0.5", "log.tensorboard=false", "log.first_checkpoint_s=0",
        "log.checkpoint_interval_s=0.5", "population.size=2",
        "population.perturbation_interval=100000", "population.initial={ppo.lr: [1e-3, 3e-3]}",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    population = subprocess.Popen(
        [*SURGE, *argv], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    )
    try:
        members = [run_dir / f"member-{k}" for k in range(2)]
        started = wait_for(lambda: all(latest_checkpoint(m) for m in members), 120)
        assert started, population.communicate(timeout=10)[1][-3000:]
        population.send_signal(signal.SIGINT)
        _, err = population.communicate(timeout=120)
    finally:
        if population.poll() is None:
            population.kill()
    assert population.returncode == 130, err[-3000:]
    stopped_at = [_trained_steps(m) for m in members]
    assert all(0 < steps < 30000 for steps in stopped_at), stopped_at
    result = run_surge("resume", str(run_dir), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "population finished" in result.stderr
    finals = [_trained_steps(m) for m in members]
    assert all(30000 <= steps < 30300 for steps in finals), finals  # the budget, not beyond
    states = json.loads((run_dir / "members.json").read_text())
    assert [s["state"] for s in states] == ["finished", "finished"]
    lr = [json.loads((m / "hyperparams.json").read_text())["values"]["ppo.lr"] for m in members]
    assert lr == [1e-3, 3e-3]  # each resumed with its own settings


def _trained_steps(member: Path) -> int:
    rows = [json.loads(x) for x in (member / "metrics.jsonl").open()]
    return max(r["env_steps"] for r in rows if "steps_per_s" in r)
