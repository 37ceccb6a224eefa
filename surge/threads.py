"""Thread counts of a worker process's numeric libraries, and work split over threads.

On a machine with few cores every busy thread beyond the cores is lost time, so each worker
process sets its own counts deliberately: OpenMP and MKL through the environment it is
started with (surge/runtime/warm.py `thread_env`), torch's intra-op threads here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_POOLS: dict[int, ThreadPoolExecutor] = {}


def limit_torch_threads(n: int) -> None:
    """torch's intra-op threads, if this process runs torch (OMP_NUM_THREADS covers the rest).
    Call it after building what may import torch (a CNN policy does so when it is built)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def run_each(fn: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """`[fn(item) for item in items]`, up to `threads` at a time: the first item on the
    calling thread, the others on a pool of `threads - 1` threads (made once per size).
    Pays off for work that releases the GIL (numpy's matmuls and large ufuncs)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    pool = _POOLS.get(threads - 1)
    if pool is None:
        pool = _POOLS[threads - 1] = ThreadPoolExecutor(threads - 1, thread_name_prefix="surge")
    futures = [pool.submit(fn, item) for item in items[1:]]
    first = fn(items[0])
    return [first, *(f.result() for f in futures)]
