"""`surge train` of a config with a `psro` section: real best-response runs of PPO on Kuhn
poker, the population growing and NashConv logged per iteration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspiel")

SURGE = [sys.executable, "-m", "surge"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_psro_iterations_grow_the_population(tmp_path: Path) -> None:
    out = tmp_path / "psro"
    done = subprocess.run(
        [*SURGE, "train", "kuhn-psro", "psro.iterations=1", "total_env_steps=4000",
         f"run_dir={out}"],
        env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "psro.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]
    assert [r["members"] for r in records] == [1, 2]
    assert records[0]["nash_conv"] == pytest.approx(0.9166667, abs=1e-6)  # uniform play
    # the first best response answers uniform play: it must beat it in both seats
    assert min(records[0]["br_gain"]) > 0.1, records[0]
    assert records[1]["nash_conv"] < records[0]["nash_conv"]
    assert (out / "br-1" / "config.yaml").exists()


@pytest.mark.parametrize(
    ("override", "field"),
    [("env.id=CartPole-v1", "env.id"), ("psro.iterations=0", "psro.iterations")],
)
def test_psro_config_errors(override: str, field: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [*SURGE, "train", "kuhn-psro", override, f"run_dir={tmp_path / 'x'}"],
        env=ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert field in done.stderr
