"""The Python API (surge/api.py): train, evaluate and load as the `surge` command does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import surge
from surge.api import keyword_overrides
from surge.config.load import dump_yaml
from surge.errors import ConfigError, UserError

QUIET = {"log__progress": False}


def test_keywords_map_double_underscores_to_dotted_keys() -> None:
    settings = {
        "total_env_steps": 20_000,
        "algo__lr": 1e-3,
        "env__id": "CartPole-v1",
        "stop_return": None,
        "model__hidden_sizes": (32, 32),
        "log__progress": False,
        "env__kwargs": {"render_mode": "rgb_array"},
        "run_dir": Path("runs/x"),
    }
    assert keyword_overrides(settings) == [
        "total_env_steps=20000",
        "algo.lr=0.001",
        'env.id="CartPole-v1"',
        "stop_return=null",
        "model.hidden_sizes=[32, 32]",
        "log.progress=false",
        'env.kwargs={"render_mode": "rgb_array"}',
        'run_dir="runs/x"',
    ]
    # keywords come after the `overrides` list, so they win; strings stay strings
    cfg = surge.config(
        "cartpole-ppo", overrides=["ppo.lr=5e-4", "seed=3"], ppo__lr=1e-3, env__id="Acrobot-v1"
    )
    assert (cfg.ppo.lr, cfg.seed, cfg.env.id) == (1e-3, 3, "Acrobot-v1")
    assert surge.config(cfg, seed=4).seed == 4  # a config object takes settings too


def test_a_bad_setting_raises_naming_the_field(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"(?s)ppo\.lrr.*did you mean 'ppo\.lr'"):
        surge.train("cartpole-appo", ppo__lrr=1e-3, run_dir=run_dir, **QUIET)
    with pytest.raises(ConfigError, match=r"ppo\.lr: must be > 0"):
        surge.train("cartpole-appo", overrides=["ppo.lr=-1"], run_dir=run_dir, **QUIET)
    assert not run_dir.exists()  # nothing started
    with pytest.raises(ConfigError, match="is not a config value"):
        surge.config("cartpole-appo", seed=object())


def test_import_surge_stays_cheap() -> None:
    """Every worker process imports the package: the API's imports wait for its calls."""
    code = (
        "import sys, surge\n"
        "heavy = {'numpy', 'gymnasium', 'torch', 'yaml', 'surge.runtime.controller'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_script_calling_train_outside_its_main_guard_is_told(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text("import surge\n\nsurge.train('cartpole-appo')\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode != 0
    assert f"top level of {script}:3" in out.stderr
    assert 'if __name__ == "__main__":' in out.stderr


def test_train_evaluate_and_load_cartpole_appo(tmp_path: Path) -> None:
    run = surge.train("cartpole-appo", run_dir=tmp_path / "run", **QUIET)
    assert run.dir == tmp_path / "run"
    assert run.result is not None and run.result.reason == "solved", run.result
    rows = run.metrics("training")
    assert rows and rows[-1]["env_steps"] == run.result.env_steps
    assert run.metrics("eval")  # the stop check's evaluations
    assert run.checkpoint is not None and run.checkpoint.parent == run.dir / "checkpoints"

    scores = run.evaluate(episodes=5)
    assert scores["episodes"] == 5 and scores["return_mean"] >= 475, scores
    assert (run.dir / "eval.json").exists()  # as `surge eval` writes it

    policy = surge.load(run.dir)  # greedy by default
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=123)
    total, done = 0.0, False
    while not done:
        action = policy.act(obs)
        assert isinstance(action, int)  # what env.step takes
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    assert total >= 475
    batch = np.stack([obs, obs, obs])
    assert policy.act(batch).shape == (3,)
    with pytest.raises(UserError, match=r"takes \(4,\)"):
        policy.act(np.zeros(5, np.float32))
    assert surge.Run(run.dir).checkpoint == run.checkpoint  # a run opened by its path


def test_load_dqn_and_cnn_policies(tmp_path: Path) -> None:
    """Short serial runs: a checkpoint to load is all these need, not a solved task."""
    dqn = surge.train(
        "cartpole-dqn-fast",
        runtime="serial",
        total_env_steps=1000,
        run_dir=tmp_path / "dqn",
        **QUIET,
    )
    policy = surge.load(dqn.dir)
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    assert policy.act(obs) in (0, 1)
    assert policy.act(np.stack([obs, obs])).shape == (2,)

    pytest.importorskip("minigrid")
    cnn = surge.train(
        "minigrid-empty-ppo",
        runtime="serial",
        total_env_steps=128,
        stop_return=None,
        workers__ring_size=1,
        workers__envs_per_group=4,
        ppo__rollout_len=32,
        ppo__minibatches=1,
        ppo__epochs=1,
        run_dir=tmp_path / "cnn",
        **QUIET,
    )
    policy = surge.load(cnn.dir)
    env = policy.make_env()  # the run's env: its ImgObsWrapper gives the 7x7x3 view
    obs, _ = env.reset(seed=0)
    assert obs.shape == (7, 7, 3)
    assert policy.act(obs) in range(int(env.action_space.n))


def test_load_refuses_a_kind_of_run_it_does_not_load(tmp_path: Path) -> None:
    dump_yaml(surge.config("lbf-qmix"), tmp_path / "config.yaml")
    with pytest.raises(UserError, match="multi-agent|algo qmix"):
        surge.load(tmp_path)
    with pytest.raises(UserError, match="no config.yaml"):
        surge.load(tmp_path / "missing")
