"""What every trainer worker does around its updates: stop requests, the stop rules, the
log and checkpoint cadence, and the run's clock. A trainer (workers/trainer.py for env RL,
workers/llm_trainer.py for LLM RL) says how to wait for and train a batch (`_ready`,
`_wait`, `_train_next`), how to log (`_log`) and how to checkpoint (`save_checkpoint`).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.streams.control import CHECKPOINT_AND_STOP, STOP, Control
from surge.tracking.checkpoint_writer import CheckpointWriter
from surge.tracking.timing import Timers


class TrainerLoop:
    cfg: ExperimentConfig
    control: Control
    timers: Timers
    checkpoints: CheckpointWriter
    env_steps: int
    recent_returns: deque[float]
    """Returns of the last `return_window` episodes (LLM RL: completion rewards)."""
    wall_time_offset: float
    finished: bool
    finish_reason: str
    _started: float
    _next_checkpoint: float
    _last_log: tuple[float, ...]
    """(time, env_steps, ...) at the last log."""

    _wait: Callable[[float], object]
    """Waits up to the timeout for news of a batch: the subclass binds its stream's own wait
    (no layer of calls around it, as the trainer polls every round)."""

    def _ready(self) -> bool:
        raise NotImplementedError

    def _train_next(self) -> None:
        raise NotImplementedError

    def _log(self, now: float) -> None:
        raise NotImplementedError

    def save_checkpoint(self, wait: bool = False) -> None:
        raise NotImplementedError

    def poll(self, timeout: float) -> bool:
        request = self.control.stop_request
        if request == CHECKPOINT_AND_STOP:
            if self.env_steps > self._last_log[1]:
                self._log(time.monotonic())  # metrics end where the checkpoint does
            self.save_checkpoint(wait=True)
            return self._finish("interrupted")
        if request == STOP:
            return self._finish("stopped")
        if not self._ready():
            waited = time.perf_counter()
            self._wait(timeout)
            self.timers.add_wait(waited)
            if not self._ready():
                return False
        self._train_next()
        return True

    def _start_clock(self) -> None:
        """The run's clock and the first checkpoint, which comes early so that every trainer
        loss is resumable."""
        self._started = time.monotonic()
        log = self.cfg.log
        self._next_checkpoint = self._started + min(
            log.first_checkpoint_s, log.checkpoint_interval_s
        )

    def _after_update(self, now: float) -> None:
        """Log, checkpoint, and stop once solved or out of budget."""
        cfg = self.cfg
        solved = (
            cfg.stop_return is not None
            and len(self.recent_returns) >= cfg.return_window
            and self.return_mean >= cfg.stop_return
        )
        out_of_budget = self.env_steps >= cfg.total_env_steps
        out_of_time = (
            cfg.max_train_time_s is not None and self.wall_time_s() >= cfg.max_train_time_s
        )
        done = solved or out_of_budget or out_of_time
        if now - self._last_log[0] >= cfg.log.interval_s or done:
            self._log(now)
        if now >= self._next_checkpoint and not self.checkpoints.busy:
            self.save_checkpoint()  # a checkpoint never queues behind one still being written
        if done:
            self.save_checkpoint(wait=True)
            self._finish("solved" if solved else "budget" if out_of_budget else "time")

    @property
    def return_mean(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else math.nan

    def wall_time_s(self) -> float:
        return self.wall_time_offset + time.monotonic() - self._started

    def _finish(self, reason: str) -> bool:
        self.finished = True
        self.finish_reason = reason
        return True
