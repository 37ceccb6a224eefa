"""An algorithm of one's own is one module (examples/my_algorithm.py: A2C with its own `a2c`
section), named by `algo: module:Object` without registering it; surge's config loader,
controller, runtimes and generic workers run it unchanged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from surge.config.algorithms import ALGORITHMS, register_algorithm
from surge.config.load import config_from_dict, config_to_dict, load_config
from surge.errors import ConfigError
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics

PLUGIN = "algo=examples.my_algorithm:A2C"


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_a_plugin_algorithm_trains_on_every_runtime(tmp_path: Path, runtime: str) -> None:
    cfg, _ = load_config(
        "cartpole-ppo",
        [
            PLUGIN, f"runtime={runtime}", "total_env_steps=4096", "a2c.n_steps=32",
            "log.interval_s=0", "log.progress=false", f"run_dir={tmp_path / 'run'}",
        ],
    )  # fmt: skip
    result = train(cfg)
    assert result.reason == "budget" and result.env_steps == 4096
    rows = read_metrics(result.run_dir, "training")
    assert rows[-1]["policy_version"] == 32  # one update per batch of 4 envs x 32 steps
    assert all(math.isfinite(r["loss"]) for r in rows)  # the plug-in's own metric
    assert rows[-1]["episodes"] > 0
    # its section is saved with the run, so a resume reads the same settings
    saved, _ = load_config(str(result.run_dir / "config.yaml"), [])
    assert saved.section("a2c").n_steps == 32


@pytest.mark.learning
def test_the_plugin_solves_cartpole(tmp_path: Path) -> None:
    cfg, _ = load_config(
        "cartpole-ppo",
        [
            PLUGIN, "workers.envs_per_group=4", "total_env_steps=500000", "stop_return=475",
            "eval.episodes=20", "log.progress=false", f"run_dir={tmp_path / 'run'}",
        ],
    )  # fmt: skip
    result = train(cfg)
    assert result.reason == "solved", f"not solved in {result.env_steps} steps"
    assert result.eval_return_mean >= 475  # an evaluation of the final version confirmed it


def test_a_plugins_section_is_a_config_section() -> None:
    cfg, _ = load_config("cartpole-ppo", [PLUGIN, "a2c.lr=1e-3", "a2c={gamma: 0.95}"])
    a2c = cfg.section("a2c")
    assert (a2c.lr, a2c.gamma, a2c.n_steps) == (1e-3, 0.95, 5)  # the rest: its defaults
    assert config_from_dict(config_to_dict(cfg)) == cfg  # dumped and read back whole
    # the algorithm may come after its section's overrides
    later, _ = load_config("cartpole-ppo", ["a2c.n_steps=8", PLUGIN])
    assert later.section("a2c").n_steps == 8


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("a2c.lr=abc", "a2c.lr: expected a float, got 'abc'"),
        ("a2c.lr=-1", r"a2c.lr: must be > 0, got -1"),
        ("a2c.n_steps=0", r"a2c.n_steps: must be >= 1, got 0"),
        ("a2c.lrr=1", "did you mean 'a2c.lr'"),
    ],
)
def test_a_plugins_section_is_checked_like_any(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole-ppo", [PLUGIN, override])


def test_a_section_without_its_plugin_is_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown key 'a2c'"):
        load_config("cartpole-ppo", ["a2c.lr=1e-3"])


def test_a_registered_name_stands_for_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALGORITHMS, "a2c", ALGORITHMS["ppo"])  # restored after the test
    register_algorithm("a2c", "examples.my_algorithm:A2C")
    cfg, _ = load_config("cartpole-ppo", ["algo=a2c", "a2c.n_steps=7"])
    assert cfg.section("a2c").n_steps == 7
    with pytest.raises(ConfigError, match="is not 'module:object'"):
        register_algorithm("bad", "no_colon")


def test_an_unknown_algorithm_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="algo: unknown algorithm 'a3c'"):
        load_config("cartpole-ppo", ["algo=a3c"])
    with pytest.raises(ConfigError, match="cannot import the plug-in"):
        load_config("cartpole-ppo", ["algo=no_such_module:Algo"])
