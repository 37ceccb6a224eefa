"""The trainer: one loop around an algorithm's learner, the same for every algorithm.

A learner (surge/learners/: PPO and APPO, GRPO, ...) says where its batches come from and
what one update does. The chassis here owns everything around the updates:

- versions: update u trains batch u with the parameters of version u, and the learner's new
  parameters are published at once as version u+1, before anything else, so the workers
  that wait for them resume while the trainer logs and checkpoints;
- counts: env steps and finished episodes, from each update's `Update` (episode statistics
  travel inside the samples, so every episode is counted once, by the one worker that also
  owns the step count), and the live progress display;
- metrics: a row every `log.interval_s` (the common fields and the learner's own), and the
  evaluation workers' results as `eval/*` rows;
- checkpoints: the first early (`log.first_checkpoint_s`), then every
  `log.checkpoint_interval_s`, never queued behind one still being written, one at the end
  and one on Ctrl+C; a resumed run restores them;
- the stop rules: the budget (`total_env_steps`), the time (`max_train_time_s`) and the
  return (`stop_return`). A run stops "solved" only when an evaluation of its newest version
  also reaches `stop_return` (`stop_confirm`): the evaluation workers play it when the graph
  has them, else the trainer plays it itself (the learner's `evaluate`). Training waits for
  that evaluation, so the checkpoint it then writes holds the version that was evaluated.
- mutable settings: between two updates it takes new values of the settings its algorithm
  declares mutable (`Algorithm.mutable_settings`), and a checkpoint to load, from the run's
  settings channel (tracking/hyperparams.py), and logs the values in force as `hp/*` fields;
- the final evaluation (`eval.final`): a run that ends on its budget or time with evaluation
  workers asks them for its last version too, and closes once that result is logged (or
  after `eval.final_timeout_s`), so its closing line reports the policy it saved.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from surge.config.algorithms import load_algorithm
from surge.config.mutable import set_setting
from surge.errors import UserError
from surge.seeds import derive_seed
from surge.streams.control import CHECKPOINT_AND_STOP, STOP
from surge.streams.params import ParameterService
from surge.streams.results import ResultReader
from surge.streams.stats import read_stats
from surge.tracking import timing
from surge.tracking.checkpoint import rng_state
from surge.tracking.checkpoint_writer import CheckpointWriter, snapshot
from surge.tracking.hyperparams import SettingsWatch, read_request
from surge.tracking.metrics import MetricsWriter, wandb_options
from surge.tracking.timing import COPY, LEARN
from surge.workers.base import Binding, RunContext

EXPORT_TIMEOUT_S = 120.0
"""How long the trainer waits, at the end, for what goes beside its last checkpoint."""


@dataclass
class Update:
    """What one update tells the chassis."""

    env_steps: int
    """Env steps the update's batch brings to the run's count."""
    returns: Sequence[float] = ()
    """Returns of the episodes that finished in the batch (LLM RL: completion rewards)."""
    lengths: Sequence[float] = ()
    """Their lengths (none for LLM RL)."""
    agent_steps: int = 0
    """Multi-agent envs: steps of agents that were in their episode."""


@dataclass(frozen=True)
class Evaluation:
    """An evaluation of one version: the mean and spread of its episodes' returns (LLM RL:
    held-out accuracy)."""

    return_mean: float
    return_std: float
    episodes: int
    length_mean: float = math.nan


class Learner(Protocol):
    """An algorithm's side of the trainer."""

    name: str
    """What computes (`numpy`, `torch`, ...): checkpoints say which wrote them."""

    def wait(self, timeout: float) -> object:
        """Wait up to `timeout` for news of a batch (its input stream's own wait)."""
        ...

    def ready(self, version: int) -> bool:
        """Whether the batch of update `version` can be trained now."""
        ...

    def update(self, version: int) -> Update:
        """Train on the batch of update `version` (read everything it needs from shared
        memory before returning: writers refill it once the next version is published)."""
        ...

    def parameters(self) -> np.ndarray:
        """The flat float32 vector published as a version (weights and any statistics)."""
        ...

    def state(self) -> dict[str, Any]:
        """Its part of a checkpoint (model, optimiser, statistics, format)."""
        ...

    def load(self, state: dict[str, Any]) -> None:
        """Restore its part of a checkpoint (a UserError if it cannot)."""
        ...

    def metrics(self, seconds: float) -> dict[str, Any]:
        """Its fields of the next metrics row (`seconds` since the previous row), and the
        start of a new window."""
        ...

    def eval_record(self, result: dict[str, float]) -> tuple[dict[str, Any], float]:
        """An evaluation worker's result as `eval/*` fields, and the number that measures
        it against `stop_return` (a mean return, an accuracy)."""
        ...

    def evaluate(self, episodes: int, seed: int) -> Evaluation:
        """Evaluate the current parameters here, in the trainer (no evaluation workers)."""
        ...

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        """Write (or have written) what goes beside the checkpoint of `version` (LLM RL: a
        Hugging Face directory; replay-based RL: the replay, which its workers save); True
        once all of it is written. The run's last checkpoint asks with `wait`, and again
        until True, before the trainer finishes."""
        ...

    def close(self) -> None: ...


def eval_fields(result: dict[str, float]) -> dict[str, Any]:
    """The `eval/*` fields of an evaluation worker's result: `version` is the policy
    version, counts are integers, NaN fields (not measured) are left out."""
    record: dict[str, Any] = {}
    for name, value in result.items():
        if isinstance(value, float) and math.isnan(value):
            continue
        key = "eval/policy_version" if name == "version" else f"eval/{name}"
        record[key] = int(value) if name in ("version", "episodes", "video", "problems") else value
    return record


class TrainerWorker:
    def __init__(self, ctx: RunContext, b: Binding, learner: Learner) -> None:
        cfg = self.cfg = ctx.cfg
        self.ctx = ctx
        self.name = b.name
        self.finished = False
        self.finish_reason = ""
        self.control = b.control
        self.timers = b.control.timers
        self.learner = learner
        self._wait = learner.wait  # bound once: the trainer waits in every idle poll
        # The first policy's trainer shows the run's progress; the others (multi-agent runs
        # with several policies) log into their own home.
        self.primary = b.policy in ("", cfg.policy_names[0])
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        published = b.port_of_kind("versions")
        subscribers = [b.transport.channel(name) for name in published.wakes]
        self.params = ParameterService(b.transport, published.block, subscribers)
        # stages off the trainer's data path report their counters in `stats` blocks
        self.transport = b.transport
        self.stage_stats = [p.block for p in b.ports.values() if p.kind == "stats"]
        results = b.ports.get("evaluations")  # the evaluation workers' (recipes/evaluation.py)
        self.evaluations = ResultReader(b.transport, results) if results else None

        self.version = 0  # = updates done; the parameters of version v trained batches 0..v-1
        self.env_steps = 0
        self.agent_steps = 0
        self.episodes = 0
        self.wall_time_offset = 0.0
        self.recent_returns: deque[float] = deque(maxlen=max(cfg.return_window, 1))
        self.recent_lengths: deque[float] = deque(maxlen=max(cfg.return_window, 1))
        self.mutable = tuple(getattr(load_algorithm(cfg.algo), "mutable_settings", ()))
        self.settings = SettingsWatch(ctx.run_dir)
        self.in_force: dict[str, float] = {}  # settings changed through the channel
        if ctx.checkpoint is not None:
            from surge.tracking.checkpoint import load_checkpoint

            self._restore(load_checkpoint(Path(ctx.checkpoint)))
        self._take_settings(start=True)  # a resumed run goes on with the values in force
        resumed_at = self.env_steps if ctx.checkpoint is not None else None
        self.checkpoints = CheckpointWriter(ctx.run_dir, cfg.log.keep_checkpoints)
        wandb = wandb_options(cfg) if self.primary else None
        self.metrics = MetricsWriter(ctx.run_dir, cfg.log.tensorboard, resumed_at, wandb)
        self._started = time.monotonic()
        log = cfg.log
        self._next_checkpoint = self._started + min(
            log.first_checkpoint_s, log.checkpoint_interval_s
        )  # early, so that a run whose trainer dies soon can still be resumed
        self._last_log = (self._started, self.env_steps)
        self._timing_at_last_log = self.control.timing.sum(axis=0)
        self._checked_at_episodes: int | None = None  # episodes when the last stop check ran
        self._awaiting: int | None = None  # the version the evaluation workers are asked for
        self._final: tuple[str, float] | None = None  # (reason, deadline): awaiting the last
        self._evaluated = -1  # the newest version an evaluation result was logged for
        self._exporting: int | None = None  # the last checkpoint's version, not all written
        self._closing: tuple[str, float] | None = None  # (reason, deadline) while it is
        self.params.reset()
        self._publish()

    # ------------------------------------------------------------------ main loop

    def poll(self, timeout: float) -> bool:
        if self._closing is not None:  # the last checkpoint's exports are being written
            return self._close_when_exported(timeout)
        request = self.control.stop_request
        if request == CHECKPOINT_AND_STOP:
            if self.env_steps > self._last_log[1]:
                self._log(time.monotonic())  # metrics end where the checkpoint does
            self.save_checkpoint(wait=True)
            return self._finish("interrupted")
        if request == STOP:
            return self._finish("stopped")
        if self._awaiting is not None:  # no training until the stop check has its answer
            return self._await_stop_check(timeout)
        if not self.learner.ready(self.version):
            waited = time.perf_counter()
            self._wait(timeout)
            self.timers.add_wait(waited)
            if not self.learner.ready(self.version):
                return False
        self._train()
        return True

    def _train(self) -> None:
        clock = self.timers.now()
        update = self.learner.update(self.version)
        clock = self.timers.add(LEARN, clock)
        self.version += 1
        self.env_steps += update.env_steps
        self.agent_steps += update.agent_steps
        self._take_settings()  # before publishing: a loaded state is the new version
        self._publish()
        self.timers.add(COPY, clock)
        if update.returns:
            self.recent_returns.extend(update.returns)
            self.recent_lengths.extend(update.lengths)
            self.episodes += len(update.returns)
        if self.primary:
            self.control.set_progress(  # every update, for a live display; rates come with logs
                env_steps=self.env_steps,
                episode_return_mean=self.return_mean,
                policy_version=self.version,
                episodes=self.episodes,
            )
        self._log_evaluations()
        self._after_update(time.monotonic())

    def _publish(self) -> None:
        self.params.publish(self.version, self.learner.parameters())

    # ------------------------------------------------------------------ stop rules

    def _after_update(self, now: float) -> None:
        """Log, checkpoint, and stop once solved (and confirmed), out of budget or of time."""
        cfg = self.cfg
        out_of_budget = self.env_steps >= cfg.total_env_steps
        out_of_time = (
            cfg.max_train_time_s is not None and self.wall_time_s() >= cfg.max_train_time_s
        )
        solved = not (out_of_budget or out_of_time) and self._check_stop_return()
        if self._awaiting is not None:
            return  # the evaluation workers' answer decides (`_await_stop_check`)
        done = solved or out_of_budget or out_of_time
        if now - self._last_log[0] >= cfg.log.interval_s or done:
            self._log(now)
        if now >= self._next_checkpoint and not self.checkpoints.busy:
            self.save_checkpoint()  # a checkpoint never queues behind one still being written
        if done:
            self.save_checkpoint(wait=True)
            reason = "solved" if solved else "budget" if out_of_budget else "time"
            if not solved and self._ask_final_evaluation(reason):
                return
            self._finish(reason)

    def _ask_final_evaluation(self, reason: str) -> bool:
        """Ask the evaluation workers for the last version (`eval.final`); False when there
        is nothing to ask: no evaluation workers, or that version's result is logged."""
        e = self.cfg.eval
        if not e.final or self.evaluations is None or self._evaluated >= self.version:
            return False
        self._final = (reason, time.monotonic() + e.final_timeout_s)
        self._awaiting = self.version
        self.evaluations.request(self.version)
        return True

    def _check_stop_return(self) -> bool:
        """Whether the run is solved: the mean return of the last `return_window` episodes
        reaches `stop_return`, and so does an evaluation of the newest version. The check
        runs again, after a failed one, once a new window of episodes has finished. With
        evaluation workers the answer comes later: `_awaiting` is set and False returned."""
        cfg = self.cfg
        if cfg.stop_return is None or len(self.recent_returns) < cfg.return_window:
            return False
        if self.return_mean < cfg.stop_return:
            return False
        if not cfg.stop_confirm:
            return True
        last = self._checked_at_episodes
        if last is not None and self.episodes < last + cfg.return_window:
            return False
        self._checked_at_episodes = self.episodes
        if self.evaluations is not None:
            self._awaiting = self.version
            self.evaluations.request(self.version)
            return False
        seed = derive_seed(cfg.seed, "stop-check", self.ctx.resumes, self.version)
        result = self.learner.evaluate(cfg.eval.episodes, seed)
        self._write_stop_check(result, self.version)
        return result.return_mean >= cfg.stop_return

    def _await_stop_check(self, timeout: float) -> bool:
        """Wait for the evaluation workers' result of the version `_awaiting`; then stop
        (confirmed) or go back to training, or, for the final evaluation, finish (also once
        its deadline has passed without a result)."""
        assert self._awaiting is not None and self.evaluations is not None
        found = self._log_evaluations(answer=self._awaiting)
        overdue = self._final is not None and time.monotonic() >= self._final[1]
        if found is None and not overdue:
            self._wait(min(timeout, 0.05))  # evaluators do not wake the trainer
            return False
        self._awaiting = None
        if self._final is not None:
            reason, self._final = self._final[0], None
            return self._finish(reason)
        assert found is not None
        if found < (self.cfg.stop_return or 0.0):
            return True  # not confirmed: train on
        now = time.monotonic()
        self._log(now)
        self.save_checkpoint(wait=True)
        return self._finish("solved")

    def _write_stop_check(self, result: Evaluation, version: int) -> None:
        self.metrics.write(
            {
                "env_steps": self.env_steps,
                "wall_time_s": round(self.wall_time_s(), 3),
                "time": round(time.time(), 3),
                "eval/policy_version": version,
                "eval/episodes": result.episodes,
                "eval/return_mean": result.return_mean,
                "eval/return_std": result.return_std,
                "eval/length_mean": result.length_mean,
                "eval/stop_check": True,
            }
        )
        if self.primary:
            self.control.set_progress(eval_return_mean=result.return_mean)

    def _log_evaluations(self, answer: int | None = None) -> float | None:
        """Rows of the evaluation workers' new results (metrics.jsonl, TensorBoard, W&B, the
        progress line). `answer`: a version whose evaluation the stop check waits for; its
        measure is returned when it is among them (else None)."""
        if self.evaluations is None:
            return None
        found = None
        for result in self.evaluations.new():
            fields, measure = self.learner.eval_record(result)
            record: dict[str, Any] = {
                "env_steps": self.env_steps,
                "wall_time_s": round(self.wall_time_s(), 3),
                "time": round(time.time(), 3),
                **fields,
            }
            version = int(result["version"])
            self._evaluated = max(self._evaluated, version)
            if answer is not None and version == answer:
                record["eval/final" if self._final else "eval/stop_check"] = True
                found = measure
            self.metrics.write(record)
            if self.primary:
                self.control.set_progress(eval_return_mean=measure)
        return found

    # ------------------------------------------------------------------ metrics

    def _log(self, now: float) -> None:
        then, steps_then = self._last_log
        seconds = max(now - then, 1e-9)
        sps = (self.env_steps - steps_then) / seconds
        record: dict[str, Any] = {
            "env_steps": self.env_steps,
            "wall_time_s": round(self.wall_time_s(), 3),
            "time": round(time.time(), 3),  # the Unix clock, to line the run up with others
            "episode_return_mean": self.return_mean,
            "episode_length_mean": float(np.mean(self.recent_lengths))
            if self.recent_lengths
            else math.nan,
            "episodes": self.episodes,
            "steps_per_s": round(sps, 1),
            **({"agent_steps": self.agent_steps} if self.ctx.env.agents else {}),
            "policy_version": self.version,
            "restarts": int(self.control.progress()["restarts"]),
            **self.learner.metrics(seconds),
            **{f"hp/{key}": value for key, value in self.in_force.items()},
        }
        if self.in_force:
            record["hp/seq"] = self.settings.taken
        for block in self.stage_stats:
            record.update(read_stats(self.transport, block))
        record.update(timing.shares_since(self.control.timing, self._timing_at_last_log))
        self._timing_at_last_log = self.control.timing.sum(axis=0)
        self.metrics.write(record)
        if self.primary:
            lag = record.get("policy_lag_mean", 0.0)
            self.control.set_progress(steps_per_s=sps, policy_lag_mean=lag)
        self._last_log = (now, self.env_steps)

    @property
    def return_mean(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else math.nan

    def wall_time_s(self) -> float:
        return self.wall_time_offset + time.monotonic() - self._started

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, wait: bool = False) -> None:
        """Snapshot the state and hand it to the writer thread (tracking/checkpoint_writer.py:
        serialising, fsync and torch's import never stall training). `wait`: return once it
        is on disk (the last checkpoint of a run)."""
        state = {
            "version": self.version,
            "env_steps": self.env_steps,
            "agent_steps": self.agent_steps,
            "episodes": self.episodes,
            "wall_time_s": self.wall_time_s(),
            "recent_returns": list(self.recent_returns),
            "recent_lengths": list(self.recent_lengths),
            "resumes": self.ctx.resumes,
            "settings_seq": self.settings.taken,
            "rng": rng_state(),
            **self.learner.state(),
        }
        self.checkpoints.submit(snapshot(state), self.version)
        exported = self.learner.export(self.ctx.run_dir, self.version, wait)
        self._next_checkpoint = time.monotonic() + self.cfg.log.checkpoint_interval_s
        if wait:
            self.checkpoints.wait()
            self._exporting = None if exported else self.version

    def _restore(self, state: dict[str, Any]) -> None:
        from surge.tracking.checkpoint import restore_rng_state

        self.learner.load(state)  # first: it says whether the checkpoint is one it can read
        if "rng" not in state:
            raise UserError("this checkpoint holds no random state", "start a new run")
        restore_rng_state(state["rng"])
        self.version = int(state["version"])
        self.env_steps = int(state["env_steps"])
        self.agent_steps = int(state.get("agent_steps", 0))
        self.episodes = int(state.get("episodes", self.env_steps))
        self.wall_time_offset = float(state["wall_time_s"])
        self.settings.taken = int(state.get("settings_seq", 0))
        # LLM checkpoints before the chassis called the window `recent_rewards`
        returns = state.get("recent_returns", state.get("recent_rewards", []))
        self.recent_returns.extend(float(x) for x in returns)
        self.recent_lengths.extend(float(x) for x in state.get("recent_lengths", []))

    # ------------------------------------------------------------------ mutable settings

    def _take_settings(self, start: bool = False) -> None:
        """Take a new message of the settings channel (tracking/hyperparams.py): load its
        checkpoint's learner state, then set its values. At the start the file's values are
        set whatever its `seq` (they are the ones in force), its checkpoint only if new."""
        if start:
            request = read_request(self.ctx.run_dir)
            if request is None:
                return
            load = request.load if request.seq > self.settings.taken else None
            self.settings.taken = max(self.settings.taken, request.seq)
        else:
            request = self.settings.new()
            if request is None:
                return
            load = request.load
        if load:
            self._load_learner(Path(load))
        for key, value in request.values.items():
            if key not in self.mutable:
                raise UserError(
                    f"{self.settings.path}: {key} cannot change during a run of {self.cfg.algo}",
                    f"change only {', '.join(self.mutable) or 'nothing (none is mutable)'}",
                )
            self.in_force[key] = set_setting(self.cfg, key, value)
        changed = getattr(self.learner, "settings_changed", None)
        if changed is not None and request.values:
            changed(list(request.values))

    def _load_learner(self, path: Path) -> None:
        """Load another run's learner state (PBT's exploit: weights, optimiser and
        normalisation statistics) into the running learner. The run keeps its own counters
        (versions, env steps, episodes), so its curve and budget go on."""
        from surge.tracking.checkpoint import load_checkpoint

        state = load_checkpoint(path)
        own = {"version": self.version, "env_steps": self.env_steps, "episodes": self.episodes}
        self.learner.load({**state, **own})

    def _finish(self, reason: str) -> bool:
        self._log_evaluations()  # results that arrived since the last update
        if self._exporting is not None:  # finish once the last exports are written
            self._closing = (reason, time.monotonic() + EXPORT_TIMEOUT_S)
            return True
        self.finished = True
        self.finish_reason = reason
        return True

    def _close_when_exported(self, timeout: float) -> bool:
        """The last checkpoint is on disk; finish once what goes beside it is too (others'
        work: the serial runtime polls them meanwhile), or after `EXPORT_TIMEOUT_S`."""
        assert self._closing is not None and self._exporting is not None
        reason, deadline = self._closing
        done = self.learner.export(self.ctx.run_dir, self._exporting, wait=True)
        if not done and time.monotonic() < deadline:
            self._wait(min(timeout, 0.05))
            return False
        self._exporting = self._closing = None
        return self._finish(reason)

    def close(self) -> None:
        self.checkpoints.close()
        self.metrics.close()
        self.learner.close()


def warm_up() -> None:
    """What a trainer process can do before it knows its run (surge/runtime/warm.py): import
    what every trainer runs (this module imports the streams and tracking), nothing of any
    algorithm (the learner's module is preloaded on its own once the config names it)."""
