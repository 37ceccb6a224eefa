"""models/gemm.py: the MLP passes' products in numpy or torch give the same numbers, and the
trial that picks one times both sides on the same mix of work."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from surge.models import gemm


@pytest.fixture(autouse=True)
def numpy_after() -> Iterator[None]:
    yield
    gemm.use("numpy")  # the process-wide default for the tests that follow


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
    trial = gemm.ProductTrial("torch")
    assert trial.chosen == "torch" and gemm.library() == "torch"
    assert trial.run(lambda: 3) == 3
    assert trial.medians_ms() == {}


def test_bad_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="auto, numpy or torch"):
        gemm.ProductTrial("blas")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="numpy or torch"):
        gemm.use("mkl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cycle"):
        gemm.ProductTrial("auto", cycle=0)


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
    assert trial.chosen == faster and gemm.library() == faster
    medians = trial.medians_ms()
    assert medians[slower] - medians[faster] == pytest.approx(4.0, abs=2.5)
    assert len(trial.seconds["numpy"]) == len(trial.seconds["torch"]) == 5
    trial.run(work)  # decided: no more switching
    assert gemm.library() == faster
