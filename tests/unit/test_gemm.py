"""models/gemm.py: the MLP passes' products in numpy or torch give the same numbers, the
trial that picks one times both sides on the same mix of work, and with bfloat16 products
only the large ones round (a SAC learner's `sac.precision`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from surge.config.load import load_config
from surge.devices import native_bf16
from surge.envs.make import probe_env
from surge.learners.sac import SACBatch, SACUpdate
from surge.models import gemm


@pytest.fixture(autouse=True)
def numpy_after() -> Iterator[None]:
    yield
    gemm.use("numpy")  # the process-wide defaults for the tests that follow
    gemm.use_bfloat16(False)


@pytest.mark.numerics
def test_torch_products_match_numpy_on_views_and_into_out() -> None:
    """Transposed views (a forward's h @ W^T, a backward's g^T @ h) and `out=` arrays, as
    numpy_net.py passes them."""
    rng = np.random.default_rng(0)
    h, w, g = (rng.standard_normal(s, dtype=np.float32) for s in ((64, 23), (48, 23), (64, 48)))
    for a, b in ((h, w.T), (g.T, h), (g, w)):
        gemm.use("numpy")
        expected = gemm.matmul(a, b)
        gemm.use("torch")
        got = gemm.matmul(a, b)
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        out = np.empty_like(expected)
        assert gemm.matmul(a, b, out=out) is out
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_a_fixed_choice_runs_no_trial() -> None:
    counts: list[int] = []
    trial = gemm.ProductTrial("torch", threads=(2,), set_threads=counts.append)
    assert trial.chosen == gemm.Way("torch", 2) and gemm.library() == "torch"
    assert counts == [2]  # applied at once
    assert trial.run(lambda: 3) == 3
    assert trial.medians_ms() == {}


def test_outer_products_match_matmul() -> None:
    """Inner dimension 1 (a one-output head's input gradient) takes numpy's broadcasting
    multiply: the same single rounded product per element as a matmul's."""
    rng = np.random.default_rng(1)
    g, w = (
        rng.standard_normal((256, 1), dtype=np.float32),
        rng.standard_normal((1, 40), dtype=np.float32),
    )
    gemm.use("numpy")
    np.testing.assert_array_equal(gemm.matmul(g, w), np.matmul(g, w))
    out = np.empty((256, 40), np.float32)
    assert gemm.matmul(g, w, out=out) is out
    np.testing.assert_array_equal(out, np.matmul(g, w))


def test_bad_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="auto, numpy or torch"):
        gemm.ProductTrial("blas")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="numpy or torch"):
        gemm.use("mkl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cycle"):
        gemm.ProductTrial("auto", cycle=0)
    with pytest.raises(ValueError, match="thread counts must be >= 1"):
        gemm.ProductTrial("auto", threads=(0, 2), set_threads=print)
    with pytest.raises(ValueError, match="needs `set_threads`"):
        gemm.ProductTrial("auto", threads=(1, 2))


@pytest.mark.parametrize("slower", ["numpy", "torch"])
def test_the_trial_keeps_the_faster_library_over_a_repeating_mix(slower: str) -> None:
    """Work whose every second call is heavy (SAC's actor step every other update) and whose
    `slower` side costs 4 ms more per call. With a cycle of 2, both sides time one heavy and
    one light call per turn, so the trial sees the library's cost, not the pattern's; alone
    the pattern would have handed every heavy call to torch."""
    calls = 0

    def work() -> int:
        nonlocal calls
        heavy = calls % 2 == 1
        calls += 1
        time.sleep((0.012 if heavy else 0.0) + (0.004 if gemm.library() == slower else 0.0))
        return calls

    trial = gemm.ProductTrial("auto", rounds=5, cycle=2)
    while trial.chosen is None:
        trial.run(work)
    assert calls == 2 * 2 * (5 + 1)  # 6 turns of 2 calls each side, the first of each untimed
    faster = "torch" if slower == "numpy" else "numpy"
    assert trial.chosen == gemm.Way(faster) and gemm.library() == faster
    medians = trial.medians_ms()
    assert medians[f"{slower}_1t"] - medians[f"{faster}_1t"] == pytest.approx(4.0, abs=2.5)
    assert [len(t) for t in trial.seconds.values()] == [5, 5]
    trial.run(work)  # decided: no more switching
    assert gemm.library() == faster


def test_the_trial_goes_round_libraries_and_thread_counts() -> None:
    """Four ways (two libraries, one or two threads): each gets its untimed first cycle and
    `rounds` timed ones, and the fastest (torch on one thread here) stays, threads included."""
    threads = [0]
    seen: list[gemm.Way] = []

    def work() -> None:
        seen.append(gemm.Way(gemm.library(), threads[0]))
        slow = (gemm.library() == "numpy") + (threads[0] == 2)  # torch on 1 thread: fastest
        time.sleep(0.002 + 0.004 * slow)

    def set_threads(n: int) -> None:
        threads[0] = n

    trial = gemm.ProductTrial("auto", rounds=4, threads=(2, 1, 2), set_threads=set_threads)
    assert [w.name for w in trial.ways] == ["numpy_1t", "numpy_2t", "torch_1t", "torch_2t"]
    while trial.chosen is None:
        trial.run(work)
    assert seen[:4] == trial.ways and len(seen) == 4 * (4 + 1)
    assert trial.chosen == gemm.Way("torch", 1) and gemm.library() == "torch"
    assert threads[0] == 1
    assert set(trial.medians_ms()) == {w.name for w in trial.ways}


def bf16_rounded(a: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16).double().numpy()


@pytest.mark.numerics
@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_bfloat16_rounds_the_large_products_only(library: gemm.Library) -> None:
    """A SAC layer's shapes at batch 256: the hidden layer's forward, weight gradient and
    input gradient (all three dimensions >= 64) multiply bfloat16-rounded factors, so they
    match float64 products of the rounded factors within one bfloat16 rounding and stray
    from the exact product as float32 never would; the first layer's (inner 23) and the
    head's (1 column) stay float32."""
    rng = np.random.default_rng(0)
    h, w, g, w1, head = (
        rng.standard_normal(s, dtype=np.float32)
        for s in ((256, 256), (256, 256), (256, 256), (256, 23), (1, 256))
    )
    x = rng.standard_normal((256, 23), dtype=np.float32)
    gemm.use(library)
    gemm.use_bfloat16(True)
    for a, b in ((h, w.T), (g.T, h), (g, w)):
        got = gemm.matmul(a, b)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        of_rounded = bf16_rounded(a) @ bf16_rounded(b)
        assert got.dtype == np.float32 and got.shape == exact.shape
        # the sums in float32, the product rounded once to bfloat16 (8 bits)
        np.testing.assert_allclose(got, of_rounded, rtol=2**-8, atol=1e-3)
        error = np.abs(got - exact).max() / np.abs(exact).max()
        assert 1e-4 < error < 2e-2  # rounded, unlike float32's ~1e-7
        out = np.empty_like(got)
        assert gemm.matmul(a, b, out=out) is out
        np.testing.assert_array_equal(out, got)
    for a, b in ((x, w1.T), (h, head.T)):  # thin: float32, as without bfloat16
        expected = np.matmul(a, b)
        np.testing.assert_allclose(gemm.matmul(a, b), expected, rtol=1e-5, atol=1e-5)
    gemm.use_bfloat16(False)
    np.testing.assert_allclose(gemm.matmul(h, w.T), h @ w.T, rtol=1e-5, atol=1e-4)


def sac_update(precision: str) -> tuple[SACUpdate, dict[str, float], dict[str, torch.Tensor]]:
    """Two updates (a critic step, then one with the actor's and temperature's steps) of
    pendulum-sac's learner on a synthetic batch: the learner, the last stats and each
    network's parameter change."""
    cfg, _ = load_config("pendulum-sac", [f"sac.precision={precision}", "sac.matmul=numpy"])
    env = probe_env(cfg.env, cfg.seed)
    sac = SACUpdate(cfg, env.observation_space, env.action_space, torch.device("cpu"))
    rng = np.random.default_rng(0)
    rows = cfg.replay.batch_size

    def obs() -> dict[str, torch.Tensor]:
        return {"obs": torch.from_numpy(rng.standard_normal((rows, 3), dtype=np.float32))}

    batch = SACBatch(
        obs=obs(),
        action=torch.from_numpy(rng.uniform(-2, 2, (rows, 1)).astype(np.float32)),
        next_obs=obs(),
        reward=torch.from_numpy(rng.standard_normal(rows, dtype=np.float32)),
        discount=torch.full((rows,), 0.99),
    )
    nets = ("actor_flat", "critic_flat")
    start = {name: getattr(sac, name).data.clone() for name in nets}
    stats: dict[str, float] = {}
    for _ in range(2):
        stats = sac(batch)
    return sac, stats, {name: getattr(sac, name).data - start[name] for name in nets}


@pytest.mark.numerics
def test_sac_precision_resolves_and_its_updates_stay_close_to_float32() -> None:
    """`sac.precision`: `float32` leaves every product float32, `bfloat16` turns the large
    ones to bfloat16 for the learner's process, `auto` follows the CPU. Two updates from the
    same start (the preset's 256 x 256 networks) then land within bfloat16's rounding of the
    float32 ones: the losses and the parameters moved, not bit for bit."""
    ref, ref_stats, ref_moves = sac_update("float32")
    assert not ref.bf16 and not gemm.bfloat16()
    low, low_stats, low_moves = sac_update("bfloat16")
    assert low.bf16 and gemm.bfloat16()
    for key in ("qf_loss", "actor_loss", "alpha_loss", "q_mean"):
        assert low_stats[key] == pytest.approx(ref_stats[key], rel=2e-3, abs=1e-4), key
    for name, move in ref_moves.items():
        apart = ((low_moves[name] - move).norm() / move.norm()).item()
        assert 0 < apart < 0.1, name  # 0.013 (actor) and 0.034 (critics) on an AMD EPYC
    auto, _, _ = sac_update("auto")
    assert auto.bf16 == native_bf16() == gemm.bfloat16()
