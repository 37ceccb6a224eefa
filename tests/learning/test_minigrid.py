"""Learning check for small images: the minigrid-empty-ppo preset solves MiniGrid-Empty-8x8
(7x7x3 [H, W, C] views through ImgObsWrapper, `model.encoder: auto` -> small_cnn, the torch
learner and torch inference in the actor) to a mean return of 0.9 over 20 episodes.

CI runs one seed on the preset's runtime (marker `learning`, about 15-30 s of training on
2 cores); the benchmark tier runs more seeds on both runtimes (marker `slow`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from surge.config.load import load_config
from surge.runtime.controller import train
from surge.tracking.metrics import read_metrics

pytest.importorskip("minigrid", reason="needs the minigrid extra")


def _solve(run_dir: Path, runtime: str, seed: int) -> None:
    cfg, name = load_config(
        "minigrid-empty-ppo",
        [f"runtime={runtime}", f"seed={seed}", f"run_dir={run_dir}", "log.progress=false"],
    )
    assert cfg.model.encoder == "auto"
    result = train(cfg, name)
    assert result.reason == "solved", f"not solved in {result.env_steps} steps"
    assert read_metrics(run_dir)[-1]["episode_return_mean"] >= 0.9
    assert result.env_steps <= 100_000


@pytest.mark.learning
def test_minigrid_preset_solves_empty_8x8(tmp_path: Path) -> None:
    _solve(tmp_path / "run", "local", seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
@pytest.mark.parametrize("runtime", ["serial", "local"])
def test_minigrid_preset_solves_empty_8x8_more_seeds(
    tmp_path: Path, runtime: str, seed: int
) -> None:
    _solve(tmp_path / "run", runtime, seed)
