"""Thread counts of a worker process's numeric libraries.

On a machine with few cores every busy thread beyond the cores is lost time, so each worker
process sets its own counts deliberately: OpenMP and MKL through the environment it is
started with (surge/runtime/warm.py `thread_env`), torch's intra-op threads here.
"""

from __future__ import annotations

import sys


def limit_torch_threads(n: int) -> None:
    """torch's intra-op threads, if this process runs torch (OMP_NUM_THREADS covers the rest).
    Call it after building what may import torch (a CNN policy does so when it is built)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
