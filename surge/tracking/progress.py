"""The live one-line progress display on the terminal.

    env steps 123,456/500,000 (24.7%) | 4,120 steps/s | episodes 611 | return 187.3
        | lag 0.00 | v 241 | ETA 1m32s                                      (one line)

Until the first episode ends the return is shown as `-` (and `episodes 0` says why). With
evaluation workers (`eval.workers`), `| eval R` after the return is the newest evaluation's
mean return.

On a TTY the line is redrawn in place (at most ~5 times a second); into a file or pipe a
full line is printed at most every 10 s, so logs stay readable.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

TTY_INTERVAL_S = 0.2
PIPE_INTERVAL_S = 10.0


class RecentRate:
    """Steps per second over the last `window_s` seconds, for a count that may grow in
    bursts: it keeps the times the count grew (at least the last three, so a burst every
    10 s still has two intervals to measure) and divides the growth since the oldest by
    the time since it. Between bursts the rate holds; when the count stops, it falls."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.grew: deque[tuple[float, float]] = deque()  # (time, count) when it grew

    def update(self, now: float, count: float) -> float | None:
        """The rate after the count reads `count` at `now` (None: not measurable yet)."""
        if not self.grew or count > self.grew[-1][1]:
            self.grew.append((now, count))
        while len(self.grew) > 3 and now - self.grew[1][0] > self.window_s:
            self.grew.popleft()
        (t0, c0), (_, c1) = self.grew[0], self.grew[-1]
        return (c1 - c0) / (now - t0) if len(self.grew) > 1 and now > t0 else None


def format_duration(seconds: float) -> str:
    """45s, 1m32s, 2h03m."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _number(x: float | None, fmt: str) -> str:
    return format(x, fmt) if _finite(x) else "-"


@dataclass(frozen=True)
class Reading:
    """What the progress line shows of a run at one moment; None (or NaN): not known yet."""

    env_steps: int
    steps_per_s: float | None
    episode_return_mean: float | None
    policy_lag_mean: float | None
    policy_version: int
    episodes: int
    eval_return_mean: float | None = None


def render_line(r: Reading, total_env_steps: int) -> str:
    """The progress line of reading `r` of a run of `total_env_steps`."""
    pct = 100.0 * r.env_steps / total_env_steps if total_env_steps else 0.0
    remaining = max(total_env_steps - r.env_steps, 0)
    rate = r.steps_per_s
    eta = format_duration(remaining / rate) if rate and rate > 0 else "?"
    evaluated = _finite(r.eval_return_mean)
    return (
        f"env steps {r.env_steps:,}/{total_env_steps:,} ({pct:.1f}%)"
        f" | {_number(rate, ',.0f')} steps/s"
        f" | episodes {r.episodes:,}"
        f" | return {_number(r.episode_return_mean if r.episodes else None, '.1f')}"
        + (f" | eval {_number(r.eval_return_mean, '.1f')}" if evaluated else "")
        + f" | lag {_number(r.policy_lag_mean, '.2f')}"
        f" | v {r.policy_version}"
        f" | ETA {eta}"
    )


class Progress:
    """The live progress line: redrawn in place on a terminal (several times a second), printed at
    most every 10 s into a file or pipe, and never the same line twice."""

    def __init__(
        self,
        total_env_steps: int,
        enabled: bool,
        stream: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total_env_steps = total_env_steps
        self.enabled = enabled
        self.stream = stream
        self.clock = clock
        isatty = getattr(stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.interval = TTY_INTERVAL_S if self.tty else PIPE_INTERVAL_S
        self._last_shown: float | None = None
        self._pending: str | None = None  # newest line not yet shown
        self._last_line: str | None = None  # never print the same line twice
        self._width = 0  # length of the line on screen (TTY), to blank leftovers

    def update(self, reading: Reading) -> None:
        """Take the run's newest state; show it unless the last line was shown too lately."""
        if not self.enabled:
            return
        self._pending = render_line(reading, self.total_env_steps)
        now = self.clock()
        if self._last_shown is None or now - self._last_shown >= self.interval:
            self._show()
            self._last_shown = now

    def _show(self) -> None:
        line, self._pending = self._pending, None
        if line is None or line == self._last_line:
            return
        self._last_line = line
        if self.tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Show the newest state and end the line."""
        if not self.enabled:
            return
        self._show()
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
