"""The narrow-kernel pass (scripts/test.sh runs the numeric tests again under
tests/numerics.py's NARROW_KERNELS) must narrow every library it names, and `precision:
auto` must not pick bfloat16 where oneDNN is held below its bfloat16 kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from surge.devices import cpu_bfloat16, native_bf16
from tests.numerics import NARROW_KERNELS

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
import torch
try:
    from numpy._core._multiarray_umath import __cpu_features__ as npy
except ImportError:
    from numpy.core._multiarray_umath import __cpu_features__ as npy
from surge.devices import cpu_bfloat16
print(json.dumps({
    "torch": torch.backends.cpu.get_cpu_capability(),
    "numpy_wide": [f for f in ("X86_V4", "AVX512_SKX", "AVX512_ICL", "AVX512_SPR") if npy.get(f)],
    "auto_bf16": cpu_bfloat16("auto"),
}))
"""


def test_the_narrow_pass_narrows_torch_numpy_and_the_bfloat16_choice() -> None:
    # -W error::ImportWarning: numpy refuses a feature name it does not dispatch with an
    # ImportWarning and keeps that feature on, which Python would otherwise hide
    done = subprocess.run(
        [sys.executable, "-W", "error::ImportWarning", "-c", PROBE],
        env={**os.environ, **NARROW_KERNELS},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["torch"] in ("AVX2", "DEFAULT"), seen
    assert seen["numpy_wide"] == [], seen
    assert seen["auto_bf16"] is False, seen


@pytest.mark.parametrize("variable", ["ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"])
def test_a_onednn_cap_below_bfloat16_turns_auto_to_float32(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    uncapped = native_bf16()  # the CPU's own answer
    monkeypatch.setenv(variable, "avx512_core")
    assert not native_bf16() and not cpu_bfloat16("auto")
    assert cpu_bfloat16("bfloat16")  # asked for by name, it is still given
    monkeypatch.setenv(variable, "AVX512_CORE_BF16")  # high enough: the CPU decides again
    assert native_bf16() == uncapped
