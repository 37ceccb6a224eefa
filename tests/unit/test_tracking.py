"""Metrics, checkpoints, run directories, progress display and plots."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from surge.config.load import load_config
from surge.errors import UserError
from surge.tracking.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from surge.tracking.checkpoint_writer import CheckpointWriter, snapshot
from surge.tracking.metrics import MetricsWriter, read_metrics
from surge.tracking.plot import plot_runs
from surge.tracking.progress import Progress, Reading, format_duration, render_line
from surge.tracking.run_dir import WorkersFile, create_run_dir, load_run_config

# ---------------------------------------------------------------- metrics


def test_metrics_write_read(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write({"env_steps": 512, "episode_return_mean": 20.5, "policy_version": 1})
        w.write({"env_steps": 1024, "episode_return_mean": float("nan")})
    rows = read_metrics(tmp_path)
    assert rows == [
        {"env_steps": 512, "episode_return_mean": 20.5, "policy_version": 1},
        {"env_steps": 1024, "episode_return_mean": None},  # NaN stored as null
    ]


def test_metrics_append_and_torn_last_line(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write({"env_steps": 1})
    with MetricsWriter(tmp_path, tensorboard=False) as w:  # a resumed run appends
        w.write({"env_steps": 2})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"env_steps": 3, "episode_ret')  # crash mid-write
    assert [r["env_steps"] for r in read_metrics(tmp_path)] == [1, 2]


def test_metrics_corrupt_middle_line(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"env_steps": 1}\nnot json\n{"env_steps": 2}\n')
    with pytest.raises(UserError, match="metrics.jsonl:2"):
        read_metrics(tmp_path)


def test_metrics_tensorboard(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=True) as w:
        w.write({"env_steps": 10, "episode_return_mean": 1.0, "policy_loss": 0.5})
        with pytest.raises(ValueError, match="env_steps"):
            w.write({"policy_loss": 0.1})
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


# ---------------------------------------------------------------- checkpoints


def _state(v: int) -> dict:
    return {"model": {"w": torch.full((3,), float(v))}, "version": v, "name": "x", "ok": True}


def test_checkpoint_save_load_and_prune(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    for v in (1, 2, 3, 10, 11):
        path = save_checkpoint(tmp_path, _state(v), version=v, keep=3)
        assert path.name == f"ckpt-{v:08d}.safetensors"
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    # Only the newest three remain, and no temp files are left behind.
    assert names == [
        "ckpt-00000003.safetensors",
        "ckpt-00000010.safetensors",
        "ckpt-00000011.safetensors",
    ]
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "ckpt-00000011.safetensors"
    state = load_checkpoint(latest)
    assert state["version"] == 11 and state["name"] == "x" and state["ok"] is True
    assert torch.equal(state["model"]["w"], torch.full((3,), 11.0))


def test_checkpoint_failed_save_leaves_no_partial_file(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, _state(1), version=1, keep=3)

    # Only data goes into a checkpoint: any other object is refused, naming where it is.
    with pytest.raises(TypeError, match="/model/w: cannot save a PosixPath"):
        save_checkpoint(tmp_path, {"model": {"w": Path("x")}}, version=2, keep=3)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-00000001.safetensors"]


def test_checkpoint_weights_only_rejects_objects(tmp_path: Path) -> None:
    # A checkpoint of the torch format surge wrote before (format 2) is still read, with
    # weights_only=True: a pickled arbitrary object is refused.
    path = tmp_path / "checkpoints" / "ckpt-00000001.pt"
    path.parent.mkdir()
    torch.save({"obj": Path("x")}, path)
    with pytest.raises(UserError, match="corrupt or unreadable"):
        load_checkpoint(path)
    torch.save({"w": torch.ones(2), "version": 1}, path)
    assert load_checkpoint(path)["version"] == 1 and latest_checkpoint(tmp_path) == path


def test_checkpoint_keeps_types_and_never_needs_torch_for_arrays(tmp_path: Path) -> None:
    """Arrays come back as arrays, tensors as tensors, tuples as tuples, big ints (a numpy
    generator's 128-bit state) exactly; a state of arrays is written and read by a process
    that never imports torch."""
    rng = np.random.default_rng(7)
    state = {
        "a": np.arange(3, dtype=np.float64),
        "t": torch.arange(2, dtype=torch.int64),
        "tuple": (1, "two", None, True),
        "gen": rng.bit_generator.state,
        "nested": [{"x": np.zeros((2, 0), np.float32)}, 2.5],
    }
    back = load_checkpoint(save_checkpoint(tmp_path, state, version=1, keep=1))
    assert isinstance(back["a"], np.ndarray) and back["a"].tolist() == [0.0, 1.0, 2.0]
    assert isinstance(back["t"], torch.Tensor) and back["t"].tolist() == [0, 1]
    assert back["tuple"] == (1, "two", None, True) and back["gen"] == state["gen"]
    assert back["nested"][0]["x"].shape == (2, 0) and back["nested"][1] == 2.5
    script = f"""
import sys, numpy as np
from surge.tracking.checkpoint import save_checkpoint, load_checkpoint
p = save_checkpoint({str(tmp_path / "np")!r}, {{"w": np.ones(3), "rng": 1}}, version=4, keep=1)
assert load_checkpoint(p)["w"].tolist() == [1.0, 1.0, 1.0]
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_checkpoint_corrupt_and_missing(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, _state(1), version=1, keep=1)
    path.write_bytes(path.read_bytes()[:50])  # truncated
    with pytest.raises(UserError, match="corrupt or unreadable"):
        load_checkpoint(path)
    with pytest.raises(UserError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "nope.pt")


def _draws() -> tuple:
    return (
        torch.rand(4).tolist(),
        np.random.rand(4).tolist(),
        np.random.normal(size=3).tolist(),
        [random.random() for _ in range(4)],
        random.gauss(0, 1),
    )


def test_rng_round_trip_through_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    np.random.normal()  # leaves a cached gaussian in numpy's state
    random.gauss(0, 1)  # and in python's
    path = save_checkpoint(tmp_path, {"rng": rng_state()}, version=1, keep=1)
    expected = _draws()
    _draws()  # move every generator on
    restore_rng_state(load_checkpoint(path)["rng"])
    assert _draws() == expected


def test_background_writer_saves_the_snapshot_in_order_and_surfaces_failures(
    tmp_path: Path,
) -> None:
    """The trainer's checkpoints (tracking/checkpoint_writer.py): what is written is the state
    at submit time, even as training goes on changing the arrays and tensors; writes happen
    in order; the RNG states are those of the submit; a failed write raises on the trainer."""
    np.random.seed(3)
    random.seed(3)
    weights, moments = np.arange(4, dtype=np.float32), torch.zeros(2)
    writer = CheckpointWriter(tmp_path, keep=5)
    for version in (1, 2):
        state = {"version": version, "model": {"w": weights}, "learner": [moments]}
        writer.submit({**snapshot(state), "rng": rng_state()}, version)
        if version == 1:
            expected = _draws()  # what the RNGs give right after the first snapshot
        weights += 10.0  # training goes on while the writer works
        moments += 1.0
    writer.close()
    first = load_checkpoint(tmp_path / "checkpoints" / "ckpt-00000001.safetensors")
    assert first["model"]["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert first["learner"][0].tolist() == [0.0, 0.0]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "ckpt-00000002.safetensors"
    assert load_checkpoint(latest_checkpoint(tmp_path))["model"]["w"].tolist()[0] == 10.0
    restore_rng_state(first["rng"])
    assert _draws() == expected

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    writer = CheckpointWriter(blocked, keep=1)
    writer.submit({"rng": rng_state()}, 1)
    with pytest.raises(OSError):
        writer.wait()


# ---------------------------------------------------------------- run dir


def test_create_run_dir_default_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg, name = load_config("cartpole-ppo", ["seed=5"])
    first = create_run_dir(cfg, name)
    second = create_run_dir(cfg, name)
    assert first.parent == Path("runs") and first.name.startswith("cartpole-ppo-")
    assert second != first  # same second: a suffix keeps them apart
    versions = json.loads((first / "versions.json").read_text())
    for key in ("python", "platform", "surge", "torch", "gymnasium", "numpy", "git_revision"):
        assert key in versions
    assert versions["torch"] and isinstance(versions["argv"], list)
    saved = load_run_config(first)
    assert saved.seed == 5 and saved.run_dir == str(first)


def test_create_run_dir_explicit_refuses_existing_run(tmp_path: Path) -> None:
    cfg, name = load_config("cartpole-ppo", [f"run_dir={tmp_path / 'r'}"])
    path = create_run_dir(cfg, name)
    assert path == tmp_path / "r" and (path / "config.yaml").is_file()
    with pytest.raises(UserError, match="surge resume"):
        create_run_dir(cfg, name)


def test_load_run_config_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a surge run directory"):
        load_run_config(tmp_path)


def test_workers_file(tmp_path: Path) -> None:
    wf = WorkersFile(tmp_path / "workers.json")
    assert wf.read() == []
    workers = [{"name": "actor-0", "pid": 123, "host": "h", "state": "running", "restarts": 0}]
    wf.write(workers)
    wf.write(workers + [{**workers[0], "name": "trainer"}])
    data = json.loads((tmp_path / "workers.json").read_text())
    assert [w["name"] for w in data["workers"]] == ["actor-0", "trainer"]
    assert wf.read() == data["workers"]
    assert [p.name for p in tmp_path.iterdir()] == ["workers.json"]  # no temp files left


# ---------------------------------------------------------------- progress


def test_render_line() -> None:
    line = render_line(Reading(123_456, 4120.0, 187.34, 0.0, 241, 1_611), 500_000)
    assert line == (
        "env steps 123,456/500,000 (24.7%) | 4,120 steps/s | episodes 1,611 | return 187.3 "
        "| lag 0.00 | v 241 | ETA 1m31s"
    )
    # before the first episode ends: no number, and the count says why
    assert "| episodes 0 | return - |" in render_line(Reading(0, 0.0, float("nan"), None, 0, 0), 10)
    assert "nan" not in render_line(Reading(0, *[float("nan")] * 3, 0, 0), 10)
    assert "ETA ?" in render_line(Reading(0, 0.0, None, None, 0, 0), 10)
    assert "| - steps/s |" in render_line(Reading(0, None, None, None, 0, 0), 10)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (5, 92, 7380)] == ["5s", "1m32s", "2h03m"]


def test_progress_non_tty_rate_limit() -> None:
    now = [0.0]
    out = io.StringIO()
    p = Progress(1000, enabled=True, stream=out, clock=lambda: now[0])
    p.update(Reading(100, 50.0, 10.0, 0.0, 1, 5))  # first update always shows
    now[0] = 5.0
    p.update(Reading(200, 50.0, 11.0, 0.0, 2, 5))  # within 10 s: held back
    now[0] = 10.5
    p.update(Reading(300, 50.0, 12.0, 0.0, 3, 5))
    now[0] = 11.0
    p.update(Reading(400, 50.0, 13.0, 0.0, 4, 5))
    p.close()  # shows the newest held-back state
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == [
        "env steps 100/1,000 (10.0%)",
        "env steps 300/1,000 (30.0%)",
        "env steps 400/1,000 (40.0%)",
    ]
    assert "\r" not in out.getvalue()


def test_progress_tty_rewrites_line() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    now = [0.0]
    out = Tty()
    p = Progress(1000, enabled=True, stream=out, clock=lambda: now[0])
    p.update(Reading(100, 50.0, 10.0, 0.0, 1, 5))
    now[0] = 0.3
    p.update(Reading(200, 50.0, 11.0, 0.0, 2, 5))
    p.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1


def test_progress_disabled() -> None:
    out = io.StringIO()
    p = Progress(1000, enabled=False, stream=out)
    p.update(Reading(100, 50.0, 10.0, 0.0, 1, 5))
    p.close()
    assert out.getvalue() == ""


# ---------------------------------------------------------------- plot


def test_plot_two_runs(tmp_path: Path) -> None:
    runs = []
    for i, name in enumerate(["run-a", "run-b"]):
        run = tmp_path / name
        run.mkdir()
        with MetricsWriter(run, tensorboard=False) as w:
            w.write({"env_steps": 0, "wall_time_s": 0.0, "episode_return_mean": float("nan")})
            for k in range(1, 6):
                w.write(
                    {"env_steps": k * 512, "wall_time_s": k * (1.0 + i), "episode_return_mean": k}
                )
        runs.append(run)
    out = tmp_path / "plots" / "compare.png"
    plot_runs(runs, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_run_without_metrics(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no metrics.jsonl"):
        plot_runs([tmp_path], tmp_path / "x.png")


def test_resume_fit_check_names_the_parameters_that_differ() -> None:
    """`surge resume` checks a checkpoint's model against the config's network first; for
    MLPs by names and shapes, without torch."""
    from surge.envs.make import probe_env
    from surge.models.numpy_net import NumpyActorCritic, initial_parameters
    from surge.models.numpy_policy import numpy_layout
    from surge.recipes.ppo import _misfit

    cfg, _ = load_config("cartpole-ppo", [])
    env = probe_env(cfg.env, cfg.seed)
    layout = numpy_layout(env.observation_space, env.action_space, cfg.model)
    assert layout is not None
    net = NumpyActorCritic(layout, initial_parameters(layout, np.random.default_rng(0), 0.0))
    state = net.state_dict()
    assert _misfit(cfg, env, state) == ""
    state["value_head.weight"] = np.zeros((1, 8), np.float32)
    assert "value_head.weight (1, 8)" in _misfit(cfg, env, state)
    del state["value_head.bias"]
    assert "value_head.bias (1,)" in _misfit(cfg, env, state)


def test_the_display_rate_holds_between_bursts_and_falls_when_the_count_stops() -> None:
    """Batches of 64 episodes landing every 4 s, read every 2 s: the rate is 16/s at every
    reading (a plain 5-second window read 0 at half of them), and it falls once they stop."""
    from surge.tracking.progress import RecentRate

    rate = RecentRate(window_s=5.0)
    readings = [rate.update(t, 64 * (t // 4)) for t in range(0, 42, 2)]
    assert readings[0] is None and readings[1] is None  # no growth measured yet
    after_two_bursts = [r for r in readings[4:] if r is not None]
    assert len(after_two_bursts) == len(readings) - 4
    assert all(12.0 <= r <= 16.0 for r in after_two_bursts)  # a burst is due, or just came
    assert min(after_two_bursts) > 0
    stalled = [rate.update(t, 64 * 10) for t in range(42, 120, 2)]
    assert stalled[-1] is not None and stalled[-1] < 4.0 and stalled == sorted(stalled)[::-1]
    steady = RecentRate(window_s=5.0)  # a steady stream: the last 5 s only
    values = [steady.update(t / 10, 100.0 * t / 10) for t in range(0, 300)]
    assert values[-1] == pytest.approx(100.0)
