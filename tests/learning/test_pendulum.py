"""Benchmark tier: the continuous-action preset learns Pendulum-v1 (random play scores ~ -1200)."""

from __future__ import annotations

from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics


@pytest.mark.slow
def test_pendulum_preset_reaches_minus_300(tmp_path: Path) -> None:
    cfg, name = load_config("pendulum-ppo", [f"run_dir={tmp_path / 'run'}", "log.progress=false"])
    train(cfg, name)
    best = max(r["episode_return_mean"] for r in read_metrics(tmp_path / "run"))
    assert best >= -300
