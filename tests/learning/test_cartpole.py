"""Learning checks: the default preset solves CartPole-v1 (mean return >= 475 over 20 episodes).

CI runs one seed per runtime (marker `learning`); the benchmark tier runs three seeds each
(marker `slow`: `pytest -m slow tests/learning`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics


def _solve(run_dir: Path, runtime: str, seed: int) -> None:
    cfg, name = load_config(
        None, [f"runtime={runtime}", f"seed={seed}", f"run_dir={run_dir}", "log.progress=false"]
    )
    result = train(cfg, name)
    assert result.reason == "solved", f"not solved in {result.env_steps} steps"
    last = read_metrics(run_dir)[-1]
    assert last["episode_return_mean"] >= 475
    assert last["policy_lag_max"] == 0


@pytest.mark.learning
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_default_preset_solves_cartpole(tmp_path: Path, runtime: str) -> None:
    _solve(tmp_path / "run", runtime, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_default_preset_solves_cartpole_more_seeds(tmp_path: Path, runtime: str, seed: int) -> None:
    _solve(tmp_path / "run", runtime, seed)


@pytest.mark.learning
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_fast_appo_preset_solves_cartpole(tmp_path: Path, runtime: str) -> None:
    """cartpole-appo: lag 1 with V-trace, inline numpy inference."""
    run_dir = tmp_path / "run"
    cfg, name = load_config(
        "cartpole-appo", [f"runtime={runtime}", f"run_dir={run_dir}", "log.progress=false"]
    )
    result = train(cfg, name)
    assert result.reason == "solved", f"not solved in {result.env_steps} steps"
    records = read_metrics(run_dir)
    assert records[-1]["episode_return_mean"] >= 475
    lag = max(r["policy_lag_max"] for r in records)
    # In processes, acting overlaps learning; serial polls the trainer first, so no lag.
    assert lag == (1 if runtime == "local" else 0)
    assert result.env_steps <= 200_000
