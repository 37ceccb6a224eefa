"""Mutable settings: a running PPO trainer takes new values from its settings channel
(surge/tracking/hyperparams.py) between two updates, and a checkpoint to load, without a
restart; settings its algorithm does not declare mutable are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surge.config.load import load_config
from surge.config.mutable import get_setting, set_setting
from surge.errors import ConfigError, UserError
from surge.runtime.launch import start_worker
from surge.tracking.checkpoint import load_checkpoint
from surge.tracking.hyperparams import SettingsRequest, SettingsWatch, write_request
from tests.conftest import in_process_streams

SMALL = [
    "runtime=serial", "ppo.rollout_len=16", "ppo.minibatches=2", "ppo.epochs=1",
    "ppo.anneal_lr=false", "log.tensorboard=false", "log.progress=false", "stop_return=null",
    "workers.inference=inline",
]  # fmt: skip


def _workers(run_dir: Path, *more: str) -> tuple[Any, list[Any]]:
    """The serial run's trainer and every worker, built and not yet polled."""
    cfg, _ = load_config("cartpole-ppo", [*SMALL, *more])
    graph, ctx, transport = in_process_streams(cfg, run_dir)
    workers = [start_worker(ctx, graph, k, transport)[2] for k in range(len(graph.workers))]
    trainer = next(w for w in workers if w.name == "trainer-0")
    return trainer, workers


def _until_version(trainer: Any, workers: list[Any], version: int) -> None:
    for _ in range(10_000):
        if trainer.version >= version:
            return
        for w in workers:
            w.poll(0.0)
    raise AssertionError(f"the trainer did not reach version {version}")


def test_ppo_learner_takes_a_new_lr_between_two_updates(tmp_path: Path) -> None:
    trainer, workers = _workers(tmp_path)
    adam = trainer.learner.backend.learner.optimizer  # the numpy backend's Adam
    _until_version(trainer, workers, 1)
    assert adam.lr == pytest.approx(2.5e-4)
    write_request(tmp_path, SettingsRequest(1, {"ppo.lr": 0.01, "ppo.ent_coef": 0.0}))
    _until_version(trainer, workers, 2)  # taken after update 1, before version 2 is published
    assert trainer.in_force == {"ppo.lr": 0.01, "ppo.ent_coef": 0.0}
    _until_version(trainer, workers, 3)  # update 2 trains with it
    assert adam.lr == pytest.approx(0.01)
    assert trainer.cfg.ppo.ent_coef == 0.0
    trainer._log(0.0)
    trainer.metrics.close()
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert '"hp/ppo.lr": 0.01' in rows[-1] and '"hp/seq": 1' in rows[-1]
    for w in workers:
        w.close()


def test_trainer_loads_a_checkpoint_live_and_keeps_its_counters(tmp_path: Path) -> None:
    source, source_workers = _workers(tmp_path / "a", "seed=2")
    _until_version(source, source_workers, 3)
    source.save_checkpoint(wait=True)
    saved = next((tmp_path / "a" / "checkpoints").iterdir())
    trainer, workers = _workers(tmp_path / "b")
    _until_version(trainer, workers, 1)
    write_request(tmp_path / "b", SettingsRequest(1, {"ppo.lr": 1e-3}, load=str(saved)))
    _until_version(trainer, workers, 2)
    # the published version 2 is the loaded weights; the counters stay the run's own
    assert trainer.version == 2 and trainer.learner.env_steps == trainer.env_steps
    loaded = load_checkpoint(saved)["model"]
    now = trainer.learner.backend.net.state_dict()
    assert all((now[k] == loaded[k]).all() for k in loaded)
    for w in [*workers, *source_workers]:
        w.close()


def test_a_setting_the_algorithm_does_not_declare_mutable_is_refused(tmp_path: Path) -> None:
    trainer, workers = _workers(tmp_path)
    _until_version(trainer, workers, 1)
    write_request(tmp_path, SettingsRequest(1, {"ppo.epochs": 2}))
    with pytest.raises(UserError, match="ppo.epochs cannot change during a run"):
        _until_version(trainer, workers, 2)
    for w in workers:
        w.close()


def test_set_setting_keeps_the_fields_rules() -> None:
    cfg, _ = load_config("cartpole-ppo", [])
    assert set_setting(cfg, "ppo.lr", 1e-3) == 1e-3 and get_setting(cfg, "ppo.lr") == 1e-3
    with pytest.raises(ConfigError, match=r"ppo.gamma: must be in \(0, 1\], got 1.2"):
        set_setting(cfg, "ppo.gamma", 1.2)
    with pytest.raises(ConfigError, match="ppo.nope: no such setting"):
        set_setting(cfg, "ppo.nope", 1.0)


def test_settings_watch_takes_each_message_once(tmp_path: Path) -> None:
    watch = SettingsWatch(tmp_path)
    assert watch.new() is None
    write_request(tmp_path, SettingsRequest(1, {"ppo.lr": 1e-3}))
    request = watch.new()
    assert request is not None and request.values == {"ppo.lr": 1e-3}
    assert watch.new() is None
    write_request(tmp_path, SettingsRequest(1, {"ppo.lr": 5e-3}))  # an old seq: not new
    assert watch.new() is None
