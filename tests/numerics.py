"""How the tests compare numbers, so that they hold on every CPU.

Two implementations of the same float32 maths (numpy against torch, AVX2 against AVX-512
kernels, a fused node against autograd) round differently: sums are taken in different
orders and with different vector widths. So:

- **Equal maths is checked in float64**, where both sides agree to ~1e-12 and rounding
  cannot tip a discrete decision (a PPO clip, the sign of Adam's first step on a gradient
  near zero) that would then compound over many steps.
- **A float32 result is checked against a float64 reference** with a tolerance derived from
  the computation: each output is a chain of sums, and a float32 sum of n terms is off by
  at most about n * eps32 * (the size of the terms). `accumulations` is that n, summed over
  the chain (e.g. the fan-ins along a network plus the batch rows a gradient sums over);
  the size of the terms is bounded by the largest reference value.

scripts/test.sh runs the numeric tests a second time with `NARROW_KERNELS` (AVX-512 off in
torch, numpy, MKL and oneDNN), so a tolerance that holds only on AVX-512 fails on any CPU.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

F32_EPS = float(np.finfo(np.float32).eps)


def numpy_wide_targets() -> str:
    """The SIMD targets above AVX2 that this numpy dispatches to, by its own names: before
    numpy 2.4 AVX512F, AVX512_SKX, ..., from 2.4 the x86-64 level X86_V4 with AVX512_ICL and
    AVX512_SPR. numpy refuses a name it does not dispatch with an ImportWarning, which
    Python hides by default, and keeps the target on; so only its own names are given."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__ as dispatched
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__ as dispatched
    return ",".join(t for t in dispatched if t.startswith("AVX512") or t == "X86_V4")


NARROW_KERNELS = {
    # torch's own CPU kernels (ATen), numpy's SIMD dispatch, and the BLAS / DNN libraries
    # both call, each held to AVX2 whatever the CPU offers.
    "ATEN_CPU_CAPABILITY": "avx2",
    "NPY_DISABLE_CPU_FEATURES": numpy_wide_targets(),
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
"""The environment scripts/test.sh gives its second run of the numeric tests."""


@contextmanager
def float64_torch() -> Iterator[None]:
    """Modules and random tensors created inside are float64 (torch's default dtype)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def float32_tolerance(reference: np.ndarray, accumulations: int) -> float:
    """The absolute error a float32 computation of `reference` may carry (module doc)."""
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    return accumulations * F32_EPS * max(scale, 1e-30)


def assert_float32_close(
    actual: np.ndarray | torch.Tensor,
    reference: np.ndarray | torch.Tensor,
    accumulations: int,
    what: str = "",
) -> None:
    """`actual` (float32) is within rounding of `reference` (float64)."""
    a = actual.detach().numpy() if isinstance(actual, torch.Tensor) else np.asarray(actual)
    r = reference.detach().numpy() if isinstance(reference, torch.Tensor) else reference
    r = np.asarray(r, np.float64)
    tol = float32_tolerance(r, accumulations)
    worst = float(np.max(np.abs(a.astype(np.float64) - r))) if r.size else 0.0
    assert worst <= tol, f"{what}: max abs error {worst:.3g} > {tol:.3g} ({accumulations} eps)"


if __name__ == "__main__":
    # `python -m tests.numerics [pytest args]`: the numeric tests under NARROW_KERNELS.
    args = [sys.executable, "-m", "pytest", "-q", "-m", "numerics and not slow", *sys.argv[1:]]
    print(
        "numeric tests under", " ".join(f"{k}={v}" for k, v in NARROW_KERNELS.items()), flush=True
    )
    os.execve(sys.executable, args, {**os.environ, **NARROW_KERNELS})
