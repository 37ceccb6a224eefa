"""The replay's rate limiter (streams/flow.py): Reverb's SampleToInsertRatio, whose insert
half paces the actors on the trainer's versions (`RatioBound`) and whose sample half the
replay worker applies. Hand values, and a simulation of both halves together: the samples
per insert stay within the error buffer of the ratio whichever side is faster."""

from __future__ import annotations

import numpy as np
import pytest

from surge.streams.flow import RatioBound, SampleToInsertRatio


def test_both_halves_against_hand_values() -> None:
    limit = SampleToInsertRatio(ratio=4.0, min_size=100, error_buffer=32.0)
    assert limit.samples_allowed(99) == 0.0  # below min_size: no sample at all
    assert limit.samples_allowed(100) == 32.0  # (100 - 100) * 4 + 32
    assert limit.samples_allowed(150) == 232.0  # (150 - 100) * 4 + 32
    assert limit.inserts_allowed(0) == 108.0  # 100 + (0 + 32) / 4
    assert limit.inserts_allowed(400) == 208.0  # 100 + (400 + 32) / 4


def test_the_version_bound_holds_segments_until_the_trainer_sampled_enough() -> None:
    # 8 transitions per segment round, batches of 16, 2 samples per insert after 40, eb 16
    bound = RatioBound(SampleToInsertRatio(2.0, 40, 16.0), batch=16, round=8, start=0, slots=2)
    # segment n brings inserts to 8 (n + 1); it needs ((8 (n + 1) - 40) * 2 - 16) / 16 versions
    assert [bound.min_version(n) for n in range(8)] == [0, 0, 0, 0, 0, 0, 1, 2]
    assert bound.min_version(20) == 15  # (8 * 21 - 40) * 2 - 16 = 240 samples: 15 batches
    resumed = RatioBound(SampleToInsertRatio(2.0, 40, 16.0), batch=16, round=8, start=50, slots=2)
    assert resumed.min_version(50) == 50  # a resumed run counts its inserts from its start
    assert bound.admits(10, np.array([0, 5, 10])).all()  # off-policy: any version trains


def _simulate(actor_speed: float, learner_speed: float) -> tuple[float, int]:
    """Actors and a learner, each stepping when its half of the limiter allows; returns the
    samples per insert past min_size, and the largest excess of samples over the bound."""
    limit = SampleToInsertRatio(ratio=8.0, min_size=500, error_buffer=256.0)
    round_, batch = 16, 128
    bound = RatioBound(limit, batch, round_, start=0, slots=2)
    inserts = samples = version = segment = 0
    clock_actor = clock_learner = 0.0
    worst = 0.0
    for _ in range(200_000):
        if clock_actor <= clock_learner:
            clock_actor += 1.0 / actor_speed
            if version >= bound.min_version(segment):  # the actors' version bound
                inserts += round_
                segment += 1
        else:
            clock_learner += 1.0 / learner_speed
            if samples + batch <= limit.samples_allowed(inserts):  # the replay's half
                samples += batch
                version += 1
        worst = max(worst, samples - limit.samples_allowed(inserts))
    return samples / (inserts - limit.min_size), int(worst)


@pytest.mark.parametrize(("actors", "learner"), [(10.0, 1.0), (1.0, 10.0), (1.0, 1.0)])
def test_samples_per_insert_stay_at_the_ratio_whichever_side_is_faster(
    actors: float, learner: float
) -> None:
    ratio, worst = _simulate(actors, learner)
    assert ratio == pytest.approx(8.0, rel=0.05)
    assert worst <= 0  # never a sample the limiter would not allow
