"""`algo: qmix` end to end on real multi-agent envs: actors act with the agents' shared
Q-network and explore, replay shards keep whole episodes, the trainer mixes and learns, and
a run resumes and evaluates; the settings it cannot train are errors naming the field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.errors import ConfigError
from surge.recipes import algorithm_of
from surge.runtime.controller import resume, train
from surge.tracking.metrics import read_metrics

pytestmark = pytest.mark.integration
SHORT = ["replay.min_size=800", "eval.workers=0", "log.interval_s=0", "log.progress=false"]


@pytest.mark.parametrize("preset", ["lbf-qmix", "lbf-vdn"])
def test_a_short_run_trains_resumes_and_evaluates(tmp_path: Path, preset: str) -> None:
    run_dir = tmp_path / "run"
    cfg, _ = load_config(preset, ["total_env_steps=3000", f"run_dir={run_dir}", *SHORT])
    result = train(cfg)
    assert result.reason == "budget" and result.env_steps >= 3000
    rows = read_metrics(run_dir, "training")
    trained = [r for r in rows if "loss" in r]
    assert trained and all(math.isfinite(r["loss"]) for r in trained)
    assert rows[-1]["policy_version"] > 10  # updates on batches of whole episodes
    assert 0.05 < rows[-1]["epsilon"] < 1.0  # annealing over env steps
    resumed = resume(run_dir, ["total_env_steps=4000"])
    assert resumed.env_steps >= 4000 and resumed.reason == "budget"
    summary = algorithm_of(cfg).evaluate(run_dir, ["episodes=3"], video=False)
    assert "3 episodes with policy version" in summary


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env.id=CartPole-v1"], "algo qmix trains the agents of a multi-agent env"),
        (["env.multiagent.global_state=none"], "qmix.mixer=qmix conditions its mixing network"),
        (["replay.prioritized=true"], "samples whole episodes uniformly"),
        (["qmix.mixer=qmx"], "qmix.mixer: expected one of 'qmix', 'vdn', 'none'"),
        (["qmix.hypernet_layers=3"], r"qmix.hypernet_layers: must be in \[1, 2\], got 3"),
        (["policies=[a]"], "trains one Q-network shared by the agents"),
    ],
)
def test_settings_it_cannot_train_are_config_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("lbf-qmix", overrides)


def test_a_replay_that_could_sample_before_an_episode_ends_is_a_config_error() -> None:
    cfg, _ = load_config("lbf-qmix", ["replay.min_size=400"])
    with pytest.raises(ConfigError, match=r"(?s)replay.min_size=400 agent-steps.*at least 800"):
        algorithm_of(cfg).prepare(cfg, None, None)


def test_box_actions_are_a_config_error() -> None:
    cfg, _ = load_config(
        "spread-qmix",
        ["env.kwargs={N: 3, local_ratio: 0.5, max_cycles: 25, continuous_actions: true}"],
    )
    with pytest.raises(ConfigError, match="algo qmix needs Discrete actions"):
        algorithm_of(cfg).prepare(cfg, None, None)
