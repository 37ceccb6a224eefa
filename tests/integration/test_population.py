"""A population (surge/population/): two CartPole members, each its own `surge train` on
the local runtime, of which the worse copies the better live (weights, optimiser and
statistics through its settings channel) with explored settings, and both finish."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_surge


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
