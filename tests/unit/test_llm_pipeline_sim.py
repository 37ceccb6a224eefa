"""The pipeline simulation of benchmarks/llm_pipeline_sim.py against times computed by hand."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark

_sim = load_benchmark("llm_pipeline_sim")
Costs, simulate = _sim.Costs, _sim.simulate

COSTS = Costs(
    step_fixed=0.004, step_per_seq=1e-4, prefill_per_token=1e-5, train_fixed=0.02,
    train_per_token=5e-5, publish=0.001, prompt_tokens=10,
)  # fmt: skip


def test_synchronous_version_time_by_hand() -> None:
    """Lag 0, one worker, every completion 5 tokens: all 16 x 8 sequences start together;
    a version is 16 prefills, 5 full steps, then the update and its publication."""
    gen = 16 * 10 * 1e-5 + 5 * (0.004 + 128 * 1e-4)
    train = 0.02 + 5e-5 * 128 * 5 + 0.001
    r = simulate(COSTS, [5], workers=1, max_lag=0, versions=20)
    assert r.versions_per_s == pytest.approx(1 / (gen + train), rel=1e-9)
    assert r.trained_tokens_per_s == pytest.approx(128 * 5 / (gen + train), rel=1e-9)
    assert r.trainer_busy == pytest.approx(train / (gen + train), rel=1e-9)


def test_asynchronous_overlaps_the_stages() -> None:
    """Lag 1: generation of the next batch runs during the update, so the version time
    approaches the slower stage (here generation, which also recomputes the cache of the
    sequences in flight at each new version) instead of the sum."""
    sync = simulate(COSTS, [5], workers=1, max_lag=0, versions=50)
    lag1 = simulate(COSTS, [5], workers=1, max_lag=1, versions=50)
    gen = 16 * 10 * 1e-5 + 5 * (0.004 + 128 * 1e-4)
    train = 0.02 + 5e-5 * 128 * 5 + 0.001
    assert sync.versions_per_s < lag1.versions_per_s <= 1 / max(gen, train) * 1.001
    assert lag1.versions_per_s > 1.3 * sync.versions_per_s
    assert lag1.generator_busy > 0.9 and sync.generator_busy < gen / (gen + train) + 0.01


def test_more_workers_make_generation_cheaper_up_to_the_trainer() -> None:
    lengths = [3, 5, 8, 16]
    one = simulate(COSTS, lengths, workers=1, max_lag=2)
    sixteen = simulate(COSTS, lengths, workers=16, max_lag=2)
    assert sixteen.trained_tokens_per_s > one.trained_tokens_per_s
    assert sixteen.trainer_busy > 0.95  # the trainer is the bottleneck


def test_keeping_the_cache_saves_its_recomputation() -> None:
    """One worker with one batch of slots, generation-bound: with `keep_cache` each version
    costs one batch's prefills and 5 full steps (the update overlaps them; the last one adds
    once). Recomputing the cache of the sequences in flight at each new version costs more,
    and at most the recomputation of a whole batch in flight: 16 prompts once and 4 tokens of
    each of the 128 sequences (the last sampled token is not in the cache)."""
    gen = 16 * 10 * 1e-5 + 5 * (0.004 + 128 * 1e-4)
    train = 0.02 + 5e-5 * 128 * 5 + 0.001
    whole_batch = (16 * 10 + 128 * 4) * 1e-5
    for lag in (1, 2, 4):
        kept = simulate(COSTS, [5], 1, lag, versions=200, slots_per_worker=128, keep_cache=True)
        assert 1 / kept.versions_per_s == pytest.approx(gen + train / 200, rel=1e-9)
        recomputed = simulate(COSTS, [5], 1, lag, versions=200, slots_per_worker=128)
        assert 1 / kept.versions_per_s < 1 / recomputed.versions_per_s
        assert 1 / recomputed.versions_per_s <= gen + whole_batch + train / 200
