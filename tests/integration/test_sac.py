"""SAC end to end (surge/recipes/sac.py): a short Pendulum run on the serial runtime reaches
its budget with finite losses, a checkpoint `surge eval` plays and `surge resume` goes on
from, and the action-space mismatches between SAC and DQN are config errors naming `algo`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from surge.cli import main
from surge.config.load import load_config
from surge.errors import ConfigError
from surge.runtime.controller import resume, train
from surge.tracking.metrics import read_metrics

SHORT = [
    "runtime=serial", "total_env_steps=2000", "replay.min_size=500", "replay.capacity=2000",
    "model.hidden_sizes=[64,64]", "log.interval_s=0", "log.progress=false",
]  # fmt: skip
"""1,500 updates: smaller networks than the preset's keep them quick."""


@pytest.mark.integration
def test_sac_trains_on_pendulum_and_its_checkpoint_plays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    cfg, _ = load_config("pendulum-sac", [*SHORT, f"run_dir={run_dir}"])
    result = train(cfg)
    assert result.reason == "budget" and result.env_steps >= 2000
    rows = read_metrics(result.run_dir, "training")
    last = rows[-1]
    # one update per env step once the replay holds min_size transitions
    assert last["policy_version"] == pytest.approx(1500, abs=16)
    assert last["replay/ratio"] == pytest.approx(256, rel=0.05)
    for key in ("qf_loss", "actor_loss", "alpha", "alpha_loss", "q_mean", "entropy"):
        assert math.isfinite(last[key]), key
    assert 0 < last["alpha"] < 1  # tuned down from 1: the entropy is above -dim(A)
    assert last["episodes"] == 10  # Pendulum's episodes are 200 steps
    # `sac.matmul: auto` timed its first 64 updates both ways and kept one library
    # (`sac.threads: 1` here: one thread count to try)
    assert last["matmul/torch"] in (0.0, 1.0) and last["matmul/threads"] == 1
    assert last["matmul/numpy_1t_ms"] > 0 and last["matmul/torch_1t_ms"] > 0

    capsys.readouterr()
    assert main(["eval", str(run_dir), "episodes=2"]) == 0
    out = capsys.readouterr().out
    version = last["policy_version"]  # the final checkpoint's
    assert f"2 episodes with policy version {version}" in out and "length 200.0" in out

    # resumed: networks, target critics, optimisers and the temperature where they were
    resumed = resume(run_dir, ["total_env_steps=2600"])
    assert resumed.reason == "budget" and resumed.env_steps >= 2600
    after = read_metrics(run_dir, "training")[len(rows) :]
    assert after[0]["policy_version"] > version  # versions go on from the checkpoint's
    assert after[0]["alpha"] == pytest.approx(last["alpha"], rel=0.05)


@pytest.mark.parametrize(
    "preset, algo, error",
    [
        ("cartpole-dqn", "sac", "algo: sac needs Box actions; env.id=CartPole-v1 has Discrete(2)"),
        ("pendulum-sac", "dqn", "algo: dqn needs Discrete actions; env.id=Pendulum-v1 has Box("),
    ],
)
def test_sac_needs_box_actions_and_dqn_discrete_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], preset: str, algo: str, error: str
) -> None:
    argv = ["train", preset, f"algo={algo}", "log.progress=false", f"run_dir={tmp_path / 'r'}"]
    assert main(argv) == 2  # a user's mistake: a message, no traceback
    err = capsys.readouterr().err
    assert f"surge: error: {error}" in err and "use algo=" in err
    assert not (tmp_path / "r").exists()  # a run that never started leaves nothing behind


def test_sac_settings_are_checked() -> None:
    for option, field in [
        ("sac.tau=0", "sac.tau"),
        ("sac.gamma=1.5", "sac.gamma"),
        ("sac.policy_lr=0", "sac.policy_lr"),
        ("sac.policy_every=0", "sac.policy_every"),
        ("model.core=gru", "model.core"),
        ("replay.prioritized=true", "replay.prioritized"),
    ]:
        with pytest.raises(ConfigError, match=field):
            load_config("pendulum-sac", [option])
