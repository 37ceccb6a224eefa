"""Learning checks: CartPole-v1 is solved (mean return >= 475 over 20 episodes) by the default
preset (`cartpole-appo`, the fastest solve) and by `cartpole-ppo` (CleanRL's synchronous
PPO, whose curves compare with CleanRL's).

CI runs one seed per runtime (marker `learning`); the benchmark tier runs three more seeds
each (marker `slow`: `pytest -m slow tests/learning`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics


def _solve(run_dir: Path, preset: str | None, runtime: str, seed: int) -> list[dict]:  # type: ignore[type-arg]
    cfg, name = load_config(
        preset, [f"runtime={runtime}", f"seed={seed}", f"run_dir={run_dir}", "log.progress=false"]
    )
    result = train(cfg, name)
    assert result.reason == "solved", f"not solved in {result.env_steps} steps"
    records = read_metrics(run_dir, rows="training")
    assert records[-1]["episode_return_mean"] >= 475
    # the stop was confirmed by an evaluation of the version the final checkpoint holds
    assert result.eval_return_mean >= 475 and result.eval_version == records[-1]["policy_version"]
    return records


def _check_default(records: list[dict], runtime: str) -> None:  # type: ignore[type-arg]
    lag = max(r["policy_lag_max"] for r in records)
    # In processes, acting overlaps learning (lag 1, V-trace corrects for it); serial polls
    # the trainer first, so there is no lag.
    assert lag == (1 if runtime == "local" else 0)
    assert records[-1]["env_steps"] <= 200_000


@pytest.mark.learning
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_default_preset_solves_cartpole(tmp_path: Path, runtime: str) -> None:
    _check_default(_solve(tmp_path / "run", None, runtime, seed=1), runtime)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_default_preset_solves_cartpole_more_seeds(tmp_path: Path, runtime: str, seed: int) -> None:
    _check_default(_solve(tmp_path / "run", None, runtime, seed), runtime)


@pytest.mark.learning
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_cleanrl_ppo_preset_solves_cartpole(tmp_path: Path, runtime: str) -> None:
    """cartpole-ppo: synchronous on-policy PPO, actors wait for every update."""
    records = _solve(tmp_path / "run", "cartpole-ppo", runtime, seed=1)
    assert max(r["policy_lag_max"] for r in records) == 0
