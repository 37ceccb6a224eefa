"""The built-in tiny CLIP (surge/rewards/tinyclip.py): its captions never hold the goals but
cover their words, and a small build runs end to end into a cached directory that
`reward_model.path` loads. (Its learning check, AUROC on held-out frames, is
benchmarks/tiny_clip.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from surge.config.reward_model_schema import RewardModelConfig
from surge.errors import ConfigError
from surge.rewards.clip import ClipScorer
from surge.rewards.tinyclip import (
    SITUATIONS,
    TinyClipSettings,
    auroc,
    cached_model,
    check_captions,
)

pytest.importorskip("highway_env")
GOALS = (RewardModelConfig().positive, RewardModelConfig().negative)


def test_captions_are_many_and_never_the_goals_but_cover_their_words() -> None:
    templates = [c for group in SITUATIONS.values() for c in group]
    assert len(set(templates)) >= 20
    check_captions(GOALS)
    with pytest.raises(ValueError, match="goal sentences among the captions"):
        check_captions(("The road ahead is clear.",))
    words = {w for c in templates for w in c.split()}
    for goal in GOALS:
        assert set(goal.lower().split()) <= words, goal


def test_auroc_by_hand() -> None:
    scores = np.array([0.9, 0.8, 0.1, 0.8])
    assert auroc(scores, np.array([True, True, False, False])) == pytest.approx(0.875)


def test_a_small_build_is_cached_as_a_clip_directory_that_scores(tmp_path: Path) -> None:
    from surge.rewards.models import make_scorer

    settings = TinyClipSettings(frames=96, steps=3, batch_size=16)
    said: list[str] = []
    directory = cached_model(settings, root=tmp_path, log=said.append)
    record = json.loads((directory / "tiny_clip.json").read_text())
    assert record["frames"] == 96 and directory.parent == tmp_path / "tiny-clip"
    assert any("collecting 96 highway-env frames" in line for line in said)
    said.clear()
    assert cached_model(settings, root=tmp_path, log=said.append) == directory
    assert said == []  # found in the cache, not built again
    assert [p.name for p in (tmp_path / "tiny-clip").iterdir()] == [directory.name]
    other = cached_model(TinyClipSettings(frames=64, steps=2, batch_size=16), root=tmp_path)
    assert other != directory  # other settings, another key
    scorer = make_scorer(RewardModelConfig(mode="clg", path=str(directory)))
    assert isinstance(scorer, ClipScorer)
    assert scorer.threshold == record["threshold"]  # the directory's own, not VLM-RL's 0.03
    floor = record["heldout_z_other_median"]  # the ramp's floor, unless it is no floor
    assert scorer.threshold_min == (floor if floor < record["threshold"] else 0.0)
    with pytest.raises(ConfigError, match=r"reward_model.threshold_min=0.5 must be below"):
        make_scorer(RewardModelConfig(mode="clg", path=str(directory), threshold_min=0.5,
                                      threshold=0.25))  # fmt: skip
    scores = scorer(np.zeros((4, 64, 64, 3), np.uint8))
    assert scores.shape == (4,) and ((scores >= 0) & (scores <= 1)).all()
    with pytest.raises(ConfigError, match=r"reward_model.positive=.*\['purple'\]"):
        make_scorer(RewardModelConfig(mode="clg", path=str(directory), positive="a purple road"))
