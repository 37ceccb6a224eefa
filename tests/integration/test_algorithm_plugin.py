"""An algorithm of one's own is one module (examples/custom_algorithm.py: A2C), named by
`algo: module:Object` without registering it; surge's controller, runtimes and generic
workers run it unchanged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.errors import ConfigError
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_a_plugin_algorithm_trains_on_every_runtime(tmp_path: Path, runtime: str) -> None:
    cfg, _ = load_config(
        "cartpole-ppo",
        [
            "algo=examples.custom_algorithm:A2C", f"runtime={runtime}", "total_env_steps=4096",
            "ppo.rollout_len=32", "log.interval_s=0", "log.progress=false",
            f"run_dir={tmp_path / 'run'}",
        ],
    )  # fmt: skip
    result = train(cfg)
    assert result.reason == "budget" and result.env_steps == 4096
    rows = read_metrics(result.run_dir, "training")
    assert rows[-1]["policy_version"] == 32  # one update per batch of 4 envs x 32 steps
    assert all(math.isfinite(r["loss"]) for r in rows)  # the plug-in's own metric
    assert rows[-1]["episodes"] > 0


def test_an_unknown_algorithm_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="algo: unknown algorithm 'a3c'"):
        load_config("cartpole-ppo", ["algo=a3c"])
    with pytest.raises(ConfigError, match="cannot import the plug-in"):
        load_config("cartpole-ppo", ["algo=no_such_module:Algo"])
