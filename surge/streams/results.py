"""The results stream: small records (an evaluation's numbers) from workers to the trainer.

One row per writer (its port's slot). A writer fills the row's fields and bumps its `seq`
(odd while writing, even when complete: a seqlock, as in the parameter service); the reader
(the trainer, once per update) takes every row whose `seq` moved since it last looked.
Nobody waits on anybody: a writer never blocks, and a reader only skips a row being written
until its next look.

The other way, the reader may ask for one record out of turn: `request(version)` names a
version whose evaluation it wants now (the trainer's stop check); the writers look at
`requested()` on their own clock.
"""

from __future__ import annotations

from surge.streams.ports import Port
from surge.streams.transport import BlockLayout, Field, Transport

NONE = -1

_CONTROL = ("seq", "request")
"""The block's fields that are not a record's."""


def results_layout(rows: int, fields: tuple[str, ...]) -> BlockLayout:
    """The results block: one row per writer of the numbers `fields`, a sequence counter per row,
    and the reader's request."""
    layout = {"seq": Field((rows,), "<i8"), "request": Field((1,), "<i8")}
    layout.update({name: Field((rows,), "<f8") for name in fields})
    return BlockLayout(layout)


class ResultWriter:
    """A writer's end (an evaluation worker): its one row of the results block."""

    def __init__(self, transport: Transport, port: Port) -> None:
        self._arrays = transport.block(port.block)
        (self.row,) = port.slots

    def requested(self) -> int:
        """The version whose record the reader asked for (NONE: none)."""
        return int(self._arrays["request"][0])

    def write(self, record: dict[str, float]) -> None:
        """Write `record` (numbers by field) into this writer's row; the row's sequence counter
        marks it being written, then complete."""
        seq, row = self._arrays["seq"], self.row
        seq[row] |= 1  # odd: being written (already odd if a previous life died writing)
        for name, value in record.items():
            self._arrays[name][row] = value
        seq[row] += 1  # even: complete


class ResultReader:
    """The reader's end (the trainer): every writer's row, each record read once it is complete."""

    def __init__(self, transport: Transport, port: Port) -> None:
        self._arrays = transport.block(port.block)
        self._fields = [k for k in self._arrays if k not in _CONTROL]
        self._rows = list(port.slots)
        self._seen = {row: 0 for row in self._rows}
        self._arrays["request"][0] = NONE

    def request(self, version: int) -> None:
        """Ask the writers for a record of `version` now (they answer with a `new()` one)."""
        self._arrays["request"][0] = version

    def new(self) -> list[dict[str, float]]:
        """Records completed since the last call, in row order."""
        out = []
        seq = self._arrays["seq"]
        for row in self._rows:
            s = int(seq[row])
            if s % 2 or s == self._seen[row]:
                continue
            record = {k: float(self._arrays[k][row]) for k in self._fields}
            if int(seq[row]) == s:  # not rewritten while we copied
                self._seen[row] = s
                out.append(record)
        return out
