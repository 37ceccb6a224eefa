"""`stop_return` stops a run only when an evaluation of its newest version confirms it: a
run whose training mean passes while its evaluation does not keeps going (the trainer's own
stop check without evaluation workers, the evaluation workers' with them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics

ALTERNATE = [
    # A sampling policy scores ~9.5 of 19, a greedy one 0 (surge/envs/testing.py).
    "env.id=surge.envs.testing:surge/Alternate-v0",
    "stop_return=5",
    "total_env_steps=8192",
    "ppo.rollout_len=32",
    "log.interval_s=0",
    "log.progress=false",
    "runtime=serial",
]


def _run(run_dir: Path, *overrides: str):  # type: ignore[no-untyped-def]
    cfg, _ = load_config("cartpole-ppo", [*ALTERNATE, f"run_dir={run_dir}", *overrides])
    return train(cfg), read_metrics(run_dir)


@pytest.mark.integration
@pytest.mark.parametrize("evaluators", [0, 1])
def test_a_run_whose_evaluation_does_not_confirm_its_training_mean_keeps_going(
    tmp_path: Path, evaluators: int
) -> None:
    result, records = _run(tmp_path / "run", f"eval.workers={evaluators}", "eval.every_s=1000")
    assert result.reason == "budget", result
    assert result.env_steps >= 8192
    checks = [r for r in records if r.get("eval/stop_check")]
    assert checks, "the training mean passed, so the stop was checked"
    assert all(r["eval/return_mean"] < 5 for r in checks)  # greedy: never alternates
    # the check ran again after failing, once a new window of episodes had finished
    assert len(checks) >= 2
    trained = [r for r in records if "steps_per_s" in r]
    assert trained[-1]["episode_return_mean"] >= 5  # the training mean did pass


@pytest.mark.integration
def test_without_the_stop_check_the_same_run_stops_at_once(tmp_path: Path) -> None:
    result, records = _run(tmp_path / "run", "stop_confirm=false")
    assert result.reason == "solved", result
    assert result.env_steps < 8192
    assert not [r for r in records if r.get("eval/stop_check")]


@pytest.mark.integration
def test_a_confirmed_stop_names_both_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, _ = load_config(
        "cartpole-appo", ["runtime=serial", "log.progress=false", f"run_dir={tmp_path / 'run'}"]
    )
    result = train(cfg)
    assert result.reason == "solved"
    assert result.episode_return_mean >= 475 and result.eval_return_mean >= 475
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"mean return {result.episode_return_mean:.1f}" in line
    assert f"evaluation of version {result.eval_version}: {result.eval_return_mean:.1f}" in line


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_a_run_that_ends_on_its_budget_reports_an_evaluation_of_its_last_version(
    tmp_path: Path, runtime: str
) -> None:
    """No scheduled evaluation falls due (`eval.every_s` 1000), so the only evaluation row is
    the final one; without `eval.final` there is none."""
    common = ["stop_return=null", "total_env_steps=2048", "eval.workers=1", "eval.every_s=1000"]
    common += [f"runtime={runtime}", "eval.nice=0"]
    result, records = _run(tmp_path / "final", *common)
    assert result.reason == "budget", result
    last = [r for r in records if "steps_per_s" in r][-1]["policy_version"]
    evals = [r for r in records if "eval/return_mean" in r]
    assert [(r["eval/policy_version"], r.get("eval/final")) for r in evals] == [(last, True)]
    assert result.eval_version == last and result.eval_episodes == 10
    result, records = _run(tmp_path / "none", *common, "eval.final=false")
    assert result.reason == "budget" and result.eval_version == -1
    assert not [r for r in records if "eval/return_mean" in r]
