"""The matrix products of the numpy MLP passes inside torch models, in numpy or in torch.

`parallel_mlps` (models/layers.py) runs MLPs' forward and backward passes in numpy so two
networks can run on two threads. numpy's matmul calls OpenBLAS; torch's CPU wheels call
MKL, and which of the two is faster depends on the CPU: single-thread float32 products at a
SAC critic's batch of 256, (256 x 256) @ (256 x 256) and (256 x 23) @ (23 x 256), took 200
and 28.8 us in numpy against 172 and 18.3 us in torch on an Intel Xeon with AMX, and 261
and 26.9 us against 302 and 29.8 us on an AMD EPYC (family 26). An update mixes many
shapes, on two threads, with the element-wise work between them; so a learner that spends
its time here times its whole update each way (`ProductTrial`) and keeps the fastest.

Both libraries run on the numpy arrays' memory (transposed views stay views, no copies) and
release the GIL for the product. numpy is the default: a process that never imports torch
never pays for it.

Apart from the library, the large products can run in bfloat16 (`use_bfloat16`, SAC's
`sac.precision`): on CPUs with native bf16 dot products oneDNN's bf16 kernels are several
times faster than float32's, 76.6 against 305 us for 256 x 256 x 256 on one thread of an AMD
EPYC (family 26), the conversions costing about 6 us a matrix. Only products whose three
dimensions all reach `BF16_MIN_DIM` take that path: a network's first layer reads raw
observations and its head writes the values the losses compare, and both are cheap anyway.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

Library = Literal["numpy", "torch"]
T = TypeVar("T")

_library: Library = "numpy"
_bf16 = False
BF16_MIN_DIM = 64
"""With bfloat16 products on, a product runs in bfloat16 when each of its three dimensions
(rows, inner, columns) is at least this: the hidden layers' products of a SAC network
(256 x 256 at a batch of 256, forward and backward), not the thin ones that read
observations or write the heads' outputs (inner 23, or 1 to 12 columns)."""


def use(library: Library) -> None:
    """Run every product from now on in `library` (process-wide: a worker runs one learner)."""
    if library not in ("numpy", "torch"):
        raise ValueError(f"matrix products run in numpy or torch, not {library!r}")
    if library == "torch":
        import torch  # noqa: F401 - loaded now, so `matmul` finds it in sys.modules
    global _library
    _library = library


def library() -> Library:
    return _library


def use_bfloat16(on: bool) -> None:
    """Run the large products (`BF16_MIN_DIM`) in bfloat16 from now on (process-wide)."""
    if on:
        import torch  # noqa: F401 - loaded now, so `matmul` finds it in sys.modules
    global _bf16
    _bf16 = on


def bfloat16() -> bool:
    return _bf16


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ b for 2-D float arrays (into `out` if given), in the library in use."""
    if _bf16 and min(a.shape[0], a.shape[1], b.shape[1]) >= BF16_MIN_DIM:
        return _bf16_matmul(a, b, out)
    if _library == "numpy":
        if a.shape[1] == 1:  # an outer product (a one-output head's input gradient): the
            return np.multiply(a, b, out=out)  # same numbers, 71.5 us in OpenBLAS, 22 here
        return np.matmul(a, b, out=out)
    torch = sys.modules["torch"]  # loaded by `use("torch")`
    if out is None:
        product: np.ndarray = torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        return product
    torch.mm(torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(out))
    return out


def _bf16_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """a @ b with both factors rounded to bfloat16 and the sum in float32 (oneDNN), the
    product rounded to bfloat16 and widened back to float32."""
    torch = sys.modules["torch"]
    bf16 = torch.bfloat16
    product = torch.mm(torch.from_numpy(a).to(bf16), torch.from_numpy(b).to(bf16))
    if out is None:
        widened: np.ndarray = product.float().numpy()
        return widened
    torch.from_numpy(out).copy_(product)
    return out


@dataclass(frozen=True)
class Way:
    """One way to run an update's MLP passes: the products' library, and how many threads the
    caller's networks take side by side (a SAC learner's twin critics)."""

    library: Library
    threads: int = 1

    @property
    def name(self) -> str:
        """As the metrics name it: `numpy_1t`, `torch_2t`, ..."""
        return f"{self.library}_{self.threads}t"


class ProductTrial:
    """Chooses how to run the products by timing the caller's own work. With `auto`, the
    first calls of `run` go round the ways (each library, times each of `threads`), `cycle`
    calls at a time (a learner whose calls differ in a pattern, such as SAC's actor step
    every other update, passes the pattern's period so every way times the same mix). After
    `rounds` timed cycles of each (the first of each left out: first-call set-up), the way
    with the lowest median cycle time stays in use. Going round puts a burst of load on the
    machine on every way alike. A fixed library runs no trial when `threads` holds one
    count, and times only the counts when it holds more.

    Threads are part of the choice because a second thread is not free: on a 2-core Intel
    Xeon with AMX, two threads' bfloat16 products at once took 152 us each against 87 alone,
    and a SAC update on one thread beat the same on two (7.1 against 8.3 ms, its steps then
    in torch), where on others the two threads win. `set_threads` applies a way's count to
    the caller's networks."""

    def __init__(
        self,
        choice: Literal["auto", "numpy", "torch"],
        rounds: int = 15,
        cycle: int = 1,
        threads: Sequence[int] = (1,),
        set_threads: Callable[[int], None] | None = None,
    ) -> None:
        if choice not in ("auto", "numpy", "torch"):
            raise ValueError(f"the products' library must be auto, numpy or torch, not {choice!r}")
        if rounds < 1 or cycle < 1:
            raise ValueError(f"a product trial needs rounds and cycle >= 1, got {rounds}, {cycle}")
        counts = sorted(set(threads))
        if not counts or counts[0] < 1:
            raise ValueError(f"a product trial's thread counts must be >= 1, got {threads}")
        if len(counts) > 1 and set_threads is None:
            raise ValueError("a product trial over thread counts needs `set_threads`")
        libraries: tuple[Library, ...] = ("numpy", "torch") if choice == "auto" else (choice,)
        self.ways = [Way(lib, n) for lib in libraries for n in counts]
        self.rounds, self.cycle = rounds, cycle
        self.seconds: dict[Way, list[float]] = {way: [] for way in self.ways}
        self.chosen: Way | None = self.ways[0] if len(self.ways) == 1 else None
        self._set_threads = set_threads
        self._calls = 0
        self._in_cycle = 0.0
        self._apply(self.chosen or self.ways[0])

    def _apply(self, way: Way) -> None:
        use(way.library)
        if self._set_threads is not None:
            self._set_threads(way.threads)

    def run(self, work: Callable[[], T]) -> T:
        if self.chosen is not None:
            return work()
        turn = self._calls // self.cycle  # which cycle this call belongs to
        way = self.ways[turn % len(self.ways)]
        self._apply(way)
        start = time.perf_counter()
        result = work()
        self._in_cycle += time.perf_counter() - start
        self._calls += 1
        if self._calls % self.cycle == 0:
            if turn >= len(self.ways):  # each way's first cycle pays its set-up
                self.seconds[way].append(self._in_cycle)
            self._in_cycle = 0.0
            if turn + 1 == len(self.ways) * (self.rounds + 1):
                fastest = min(self.ways, key=lambda w: statistics.median(self.seconds[w]))
                self._apply(fastest)
                self.chosen = fastest
        return result

    def medians_ms(self) -> dict[str, float]:
        """Each way's median time per call in the trial (ms), by `Way.name`."""
        return {
            w.name: 1e3 * statistics.median(t) / self.cycle for w, t in self.seconds.items() if t
        }
