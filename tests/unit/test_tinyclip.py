"""The built-in tiny CLIP (surge/rewards/tinyclip.py): its captions never hold the goals but
cover their words, and a small build runs end to end into a directory `reward_model.path`
loads. (Its learning check, AUROC on held-out frames, is benchmarks/tiny_clip.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from surge.config.reward_model_schema import RewardModelConfig
from surge.errors import ConfigError
from surge.rewards.tinyclip import SITUATIONS, TinyClipSettings, auroc, build, check_captions

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


def test_a_small_build_saves_a_clip_directory_that_scores(tmp_path: Path) -> None:
    from surge.rewards.models import make_scorer

    record = build(tmp_path, TinyClipSettings(frames=96, steps=3, batch_size=16))
    assert record["frames"] == 96 and (tmp_path / "tiny_clip.json").exists()
    scorer = make_scorer(
        RewardModelConfig(mode="clg", path=str(tmp_path), threshold=record["threshold"])
    )
    assert scorer is not None
    scores = scorer(np.zeros((4, 64, 64, 3), np.uint8))
    assert scores.shape == (4,) and ((scores >= 0) & (scores <= 1)).all()
    with pytest.raises(ConfigError, match=r"reward_model.positive=.*\['purple'\]"):
        make_scorer(RewardModelConfig(mode="clg", path=str(tmp_path), positive="a purple road"))
