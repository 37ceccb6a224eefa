"""The `surge` command end to end: user mistakes, presets, eval, plot, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from surge.tracking.metrics import read_metrics
from surge.tracking.video import read_mp4
from tests.conftest import QUICK, run_surge

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "ppo.lr=abc"], "ppo.lr"),
        (["train", "ppo.lrr=0.1"], "did you mean 'ppo.lr'"),
        (["train", "runtime=gpu"], "'serial', 'local'"),
        (["train", "total_env_steps"], "key=value"),
        (["train", "cartpole-ppo", "total_env_steps"], "key=value"),
        (["train", "no-such-preset"], "cartpole-ppo"),
        (["train", "ppo.minibatches=3"], "ppo.minibatches"),
        (["train", "env.id=CartPol-v1"], "CartPole-v1"),
        (["train", "env.id=no_such_module:Env-v0"], "no_such_module"),
        (["train", "env.id=surge.envs.testing:surge/WrongShape-v0"], "(4,)"),
        (["resume", "/nonexistent/run"], "not a surge run directory"),
        (["eval", "/nonexistent/run"], "not a surge run directory"),
        (["plot", "/nonexistent/run"], "metrics.jsonl"),
    ],
)
def test_user_mistakes_exit_2_with_a_message_and_no_traceback(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    if args[0] == "train":
        args = [*args, f"run_dir={tmp_path / 'run'}"]
    result = run_surge(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr
    assert len(result.stderr.splitlines()) < 40  # one screen
    assert not (tmp_path / "run").exists()  # nothing created for a run that cannot start


def test_wrong_shape_error_says_declared_returned_and_fix() -> None:
    result = run_surge("train", "env.id=surge.envs.testing:surge/WrongShape-v0")
    assert result.returncode == 2
    assert "declared observation_space Box" in result.stderr
    assert "returned shape (4,)" in result.stderr
    assert "how to fix" in result.stderr


def test_presets_lists_the_shipped_presets() -> None:
    result = run_surge("presets")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert {"cartpole-ppo", "acrobot-ppo", "pendulum-ppo"} <= set(names)


def test_train_from_yaml_then_eval_plot_and_resume(tmp_path: Path) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text("env:\n  id: CartPole-v1\nruntime: serial\ntotal_env_steps: 1024\n")
    run = tmp_path / "run"
    result = run_surge("train", str(config), f"run_dir={run}", *QUICK)
    assert result.returncode == 0, result.stderr
    assert "reached total_env_steps" in result.stderr

    result = run_surge("eval", str(run), "episodes=3", "--video")
    assert result.returncode == 0, result.stderr
    evaluation = json.loads((run / "eval.json").read_text())
    assert len(evaluation["returns"]) == 3 and evaluation["policy_version"] == 8
    # the first episode on video: one frame per step and the one after reset, decodable
    frames = read_mp4(Path(evaluation["video"]))
    assert Path(evaluation["video"]).parent == run / "videos"
    assert len(frames) == round(evaluation["returns"][0]) + 1  # CartPole: +1 per step
    assert frames[0].shape == (400, 600, 3) and frames[0].std() > 0

    out = tmp_path / "curves.png"
    result = run_surge("plot", str(run), str(run), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    result = run_surge("resume", str(run), "total_env_steps=2048")
    assert result.returncode == 0, result.stderr
    assert "resuming from" in result.stderr

    result = run_surge("resume", str(run), "model.hidden_sizes=[8]")
    assert result.returncode == 2 and "cannot change on resume" in result.stderr


def _tiny_run(run: Path) -> None:
    result = run_surge(
        "train", "cartpole-ppo", "runtime=serial", "total_env_steps=256", f"run_dir={run}", *QUICK
    )
    assert result.returncode == 0, result.stderr


def test_existing_run_dir_is_not_overwritten(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _tiny_run(run)
    result = run_surge("train", "cartpole-ppo", "runtime=serial", f"run_dir={run}", *QUICK)
    assert result.returncode == 2
    assert "surge resume" in result.stderr


def test_run_with_no_finished_episode_ends_cleanly(tmp_path: Path) -> None:
    # Acrobot episodes last up to 500 steps: none ends in 4 updates of 32 steps per env.
    # The progress display is on (into a pipe: one line at the first update) and says so.
    run = tmp_path / "run"
    result = run_surge(
        "train", "env.id=Acrobot-v1", "runtime=serial", "total_env_steps=512", f"run_dir={run}",
        "ppo.rollout_len=32", "log.interval_s=0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "| episodes 0 | return - |" in result.stderr
    assert "no episode has ended yet" in result.stderr
    assert "nan" not in result.stderr.lower()
    records = read_metrics(run)
    assert records and all(r["episode_return_mean"] is None for r in records)


def test_resume_refuses_changes_to_what_the_checkpoint_holds(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _tiny_run(run)
    config_before = (run / "config.yaml").read_text()
    for override in [
        "model={hidden_sizes: [8]}",
        "env.kwargs.foo=1",
        "env={id: Acrobot-v1}",
        "algo=ppo",
    ]:
        result = run_surge("resume", str(run), override)
        assert result.returncode == 2, (override, result.stderr)
        assert "cannot change on resume" in result.stderr
    assert (run / "config.yaml").read_text() == config_before


def test_users_env_module_in_the_working_directory(tmp_path: Path) -> None:
    # The `surge` script, like `python -m surge`, imports modules from the current directory,
    # in the controller and in every worker process (local runtime).
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register(id='MyCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=50)\n"
    )
    script = Path(sys.executable).parent / "surge"
    result = subprocess.run(
        [str(script), "train", "env.id=my_envs:MyCartPole-v0", "total_env_steps=512", *QUICK],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("mycartpole-v0-appo-")  # after the env and algo, not the preset


def test_wandb_mirrors_metrics_and_config_offline_and_resume_continues_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """log.wandb=true with WANDB_MODE=offline (no network): the W&B run under run_dir/wandb
    holds the metric tags and the config; a resumed run logs into the same W&B run id."""
    run = tmp_path / "run"
    monkeypatch.setenv("WANDB_MODE", "offline")  # run_surge's processes inherit it
    args = ["runtime=serial", "log.wandb=true", "log.wandb_project=surge-test", *QUICK]
    first = run_surge("train", "cartpole-ppo", f"run_dir={run}", "total_env_steps=1024", *args)
    assert first.returncode == 0, first.stderr
    again = run_surge("resume", str(run), "total_env_steps=2048")
    assert again.returncode == 0, again.stderr
    runs = sorted((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and len({r.name.rsplit("-", 1)[1] for r in runs}) == 1  # one run id
    data = b"".join(p.read_bytes() for r in runs for p in r.glob("run-*.wandb"))
    for expected in (b"charts/policy_version", b"losses/approx_kl", b"CartPole-v1", b"surge-test"):
        assert expected in data, expected


def test_wandb_without_the_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from surge.config.load import load_config
    from surge.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError) as info:
        load_config(None, ["log.wandb=true"])
    assert "log.wandb" in str(info.value) and "surge-rl[wandb]" in str(info.value)


def test_graph_draws_workers_and_streams() -> None:
    result = run_surge("graph", "cartpole-ppo", "workers.actors=3", "workers.policy_workers=2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("cartpole-ppo: ppo on CartPole-v1 (runtime local)")
    assert "trainer-0  trainer  1 thread(s), ends the run" in out
    assert "actor-0, actor-2 <-> policy-0" in out and "actor-1 <-> policy-1" in out
    assert "actor-0, actor-1, actor-2 --> trainer-0" in out
    assert "trainer-0 --> policy-0, policy-1" in out and "(max_policy_lag 0)" in out
    inline = run_surge("graph").stdout  # the default: the policy runs inside the actor
    assert "actor-0 answers its own requests" in inline and "policy-0" not in inline


def test_a_time_budget_ends_the_run(tmp_path: Path) -> None:
    """max_train_time_s stops training on the trainer's clock, with a checkpoint."""
    run_dir = tmp_path / "timed"
    result = run_surge(
        "train", "cartpole-ppo", f"run_dir={run_dir}", "runtime=serial", "max_train_time_s=2",
        "stop_return=null", "total_env_steps=100000000", *QUICK,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "reached max_train_time_s" in result.stderr
    rows = [r for r in read_metrics(run_dir) if "wall_time_s" in r]
    assert 2.0 <= rows[-1]["wall_time_s"] < 30 and rows[-1]["env_steps"] < 100000000
    assert list((run_dir / "checkpoints").glob("ckpt-*"))
