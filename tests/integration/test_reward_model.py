"""The reward-model stage (surge/workers/reward_model.py) end to end: SAC on a pendulum whose
camera frame encodes the next state, scored by a function. Every transition in the replay
carries the score of its own frame (so the reward model scored it, and scored the right
frame), none was lost, and the run's log has the model's counters. Also the settings'
errors, each naming its field."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from surge.config.load import load_config
from surge.errors import ConfigError
from surge.rewards.clg import synthesize
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics

ENV = "surge.envs.testing:surge/CameraPendulum-v0"
KEYS = "[frame,speed_kmh,lane_offset,heading_error,lane_offset_std]"
SHORT = [
    f"env.id={ENV}", f"env.info_keys={KEYS}", "total_env_steps=1200", "replay.min_size=300",
    "replay.capacity=4000", "replay.checkpoint=true", "model.hidden_sizes=[32,32]",
    "log.interval_s=0", "log.progress=false", "eval.workers=0",
]  # fmt: skip


def stored(run_dir: Path) -> dict[str, np.ndarray]:
    """The replay the run saved with its last checkpoint (one shard, one env column)."""
    with np.load(run_dir / "checkpoints" / "replay-0.npz") as f:
        return {k: f[k] for k in f.files}


def consecutive(replay: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reward, the observation after it, whether that pair is one step) of column 0."""
    n = int(replay["written"][0])
    obs, reward = replay["obs/obs"][0, :n], replay["reward"][0, :n]
    cut = replay["truncated"][0, :n] | replay["terminated"][0, :n]
    return reward[:-1], obs[1:], ~cut[:-1]


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_every_stored_transition_has_its_own_frames_score(runtime: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    options = [
        *SHORT, f"runtime={runtime}", "reward_model.mode=clg",
        "reward_model.fn=surge.envs.testing:brightness", "reward_model.batch_size=16",
        "reward_model.max_pending=3", f"run_dir={run_dir}",
    ]  # fmt: skip
    result = train(load_config("pendulum-sac", options)[0])
    assert result.reason == "budget"
    replay = stored(run_dir)
    reward, after, one_step = consecutive(replay)
    assert int(replay["written"][0]) >= 1200
    expected = np.round((after[:, 0] + 1) / 2 * 255) / 255  # the next frame's brightness
    assert one_step.sum() > 1000
    np.testing.assert_allclose(reward[one_step], expected[one_step], atol=1e-6)
    last = read_metrics(run_dir, "training")[-1]
    # every stored step was scored, whatever waited at each call (one to three segments of 8
    # steps), in batches of at most 16
    frames, batches = last["reward_model/frames"], last["reward_model/batches"]
    assert frames >= int(replay["written"][0])
    assert frames / 16 <= batches <= frames / 8
    assert 0 <= last["reward_model/lag_batches_p95"] <= 4
    assert math.isfinite(last["qf_loss"])


@pytest.mark.integration
def test_state_mode_synthesises_the_state_terms(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    options = [*SHORT, "runtime=serial", "reward_model.mode=state", f"run_dir={run_dir}"]
    options[1] = "env.info_keys=[speed_kmh,lane_offset,heading_error,lane_offset_std]"
    train(load_config("pendulum-sac", options)[0])
    reward, after, one_step = consecutive(stored(run_dir))
    speed = 10 * np.abs(after[:, 2])
    zero = np.zeros(len(speed))
    want = synthesize(np.ones(len(speed)), speed, after[:, 1], zero, zero, zero.astype(bool))
    np.testing.assert_allclose(reward[one_step], want[one_step], rtol=1e-5, atol=1e-5)


def test_a_model_that_cannot_be_found_stops_the_run_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from surge.cli import main

    base = ["train", "pendulum-sac", f"env.id={ENV}", f"env.info_keys={KEYS}",
            "reward_model.mode=clg", "log.progress=false", f"run_dir={tmp_path / 'r'}"]  # fmt: skip
    assert main([*base, f"reward_model.path={tmp_path}"]) == 2
    assert "reward_model.path" in capsys.readouterr().err
    assert main([*base, "reward_model.fn=surge.envs.testing:nothing"]) == 2
    assert "reward_model.fn='surge.envs.testing:nothing'" in capsys.readouterr().err
    assert main([*base, f"reward_model.open_clip=ViT-B-32:{tmp_path / 'missing.bin'}"]) == 2
    assert "reward_model.open_clip" in capsys.readouterr().err
    not_rgb = [
        "reward_model.fn=surge.envs.testing:brightness",
        "reward_model.frame_key=lane_offset",
    ]
    assert main([*base, *not_rgb]) == 2
    assert "not an RGB frame (uint8 [H, W, 3])" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "options, field",
    [
        (
            ["reward_model.mode=clg", "reward_model.fn=a:b", "reward_model.path=/x"],
            "reward_model.fn",
        ),
        (["reward_model.mode=clg", "reward_model.fn=a:b", "env.info_keys=[]"], "env.info_keys"),
        (["reward_model.mode=state", "env.info_keys=[frame]"], "env.info_keys"),
        (["reward_model.mode=state", "algo=ppo"], "reward_model.mode"),
        (["reward_model.batch_size=0"], "reward_model.batch_size"),
        (["reward_model.threshold=0"], "reward_model.threshold"),
        (["reward_model.threshold_min=.nan"], "reward_model.threshold_min"),
    ],
)
def test_reward_model_settings_are_checked(options: list[str], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config("pendulum-sac", [f"env.id={ENV}", f"env.info_keys={KEYS}", *options])


class Died(Exception):
    """Stands for the process's death at that point (the test's kill)."""


def test_a_reward_model_dead_between_hand_on_and_ack_hands_on_nothing_twice(
    tmp_path: Path,
) -> None:
    """Life 0 hands a segment on to the replay and dies before acknowledging it to the actor;
    life 1 finds it handed on and only acknowledges it. The replay's transitions then run on
    unbroken (a duplicate or a lost segment would break the obs/reward chain), each with its
    own frame's score."""
    from surge.recipes.sac import SAC
    from surge.runtime.launch import start_worker
    from surge.streams.control import Control
    from surge.streams.transport import InlineTransport

    options = [
        *SHORT, "runtime=serial", "reward_model.mode=clg",
        "reward_model.fn=surge.envs.testing:brightness", f"run_dir={tmp_path}",
    ]  # fmt: skip
    cfg = load_config("pendulum-sac", options)[0]
    ctx = SAC.prepare(cfg, tmp_path, None)
    graph = SAC.graph(ctx)
    transport = InlineTransport(graph.all_layouts(), graph.channels)
    Control(transport).reset()
    slot = {w.name: i for i, w in enumerate(graph.workers)}
    workers = {
        name: start_worker(ctx, graph, slot[name], transport)[2]
        for name in ("trainer-0", "replay-0", "reward-model-0", "actor-0")
    }
    actor, first = workers["actor-0"], workers["reward-model-0"]
    while first.reader.waiting(0) < 2:  # type: ignore[attr-defined]
        actor.poll(0)

    def die(group: int) -> None:
        raise Died

    first.reader.ack = die  # type: ignore[attr-defined]
    with pytest.raises(Died):
        first.poll(0)
    scored = transport.block("scored")
    samples = transport.block("samples")
    assert scored["published"][0] == 1 and samples["consumed"][0] == 0  # handed on, not acked
    second = start_worker(ctx, graph, slot["reward-model-0"], transport, life=1)[2]
    for _ in range(300):
        for worker in (actor, second, workers["replay-0"], workers["trainer-0"]):
            worker.poll(0)
    assert scored["published"][0] == samples["consumed"][0] >= 20
    storage = transport.block("replay.0")
    reward, after, one_step = consecutive({k: storage[k] for k in storage})
    assert int(storage["written"][0]) >= 160
    expected = np.round((after[:, 0] + 1) / 2 * 255) / 255
    np.testing.assert_allclose(reward[one_step], expected[one_step], atol=1e-6)


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["local", "ray"])
def test_a_killed_reward_model_restarts_and_every_transition_is_scored_once(
    tmp_path: Path, runtime: str
) -> None:
    import os
    import signal
    import subprocess

    from tests.conftest import SURGE, metrics_so_far, wait_for, workers_by_name
    from tests.integration.test_replay_runs import RAY_ENV

    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(RAY_ENV if runtime == "ray" else {})}
    options = [
        *SHORT, "total_env_steps=2500", "replay.ratio=32", f"runtime={runtime}",
        "reward_model.mode=clg", "reward_model.fn=surge.envs.testing:brightness",
        f"run_dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [*SURGE, "train", "pendulum-sac", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip

    def steps() -> int:
        return max([0, *(int(r.get("env_steps", 0)) for r in metrics_so_far(run_dir))])

    try:
        assert wait_for(lambda: steps() > 800, timeout=180), "no progress"
        os.kill(workers_by_name(run_dir)["reward-model-0"]["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "reward-model-0 failed" in err and "restarting it" in err
    last = read_metrics(run_dir, "training")[-1]
    assert last["restarts"] == 1 and last["env_steps"] >= 2500
    replay = stored(run_dir)
    reward, after, one_step = consecutive(replay)
    assert int(replay["written"][0]) >= 2500
    expected = np.round((after[:, 0] + 1) / 2 * 255) / 255
    np.testing.assert_allclose(reward[one_step], expected[one_step], atol=1e-6)


@pytest.mark.integration
def test_highway_vlmrl_preset_scores_real_frames_with_the_cached_tiny_clip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `highway-vlmrl` preset as shipped, with no model named: the built-in tiny CLIP is
    found in $SURGE_CACHE (a small build put where the default one goes, so nothing trains
    for ten minutes here), scores every highway-env frame, and `surge eval` reports the
    driving measures."""
    pytest.importorskip("highway_env")
    from surge.rewards import tinyclip
    from tests.conftest import run_surge

    small = tinyclip.cached_model(
        tinyclip.TinyClipSettings(frames=64, steps=2, batch_size=16), root=tmp_path / "build"
    )
    default = tinyclip.cache_path(root=tmp_path / "cache")
    default.parent.mkdir(parents=True)
    small.rename(default)
    monkeypatch.setenv("SURGE_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    result = run_surge(
        "train", "highway-vlmrl", f"run_dir={run_dir}", "total_env_steps=400",
        "replay.min_size=300", "model.hidden_sizes=[32,32]", "log.interval_s=0",
        "log.progress=false", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tiny CLIP" not in result.stderr  # cached: not trained again
    rows = [r for r in read_metrics(run_dir) if r.get("reward_model/frames") is not None]
    assert rows[-1]["reward_model/frames"] >= rows[-1]["env_steps"] >= 400
    evaluated = run_surge("eval", str(run_dir), "episodes=2", timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "success" in evaluated.stdout and "collision" in evaluated.stdout
