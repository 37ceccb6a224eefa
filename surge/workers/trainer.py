"""The trainer worker: consumes batches of segments, learns, publishes versioned parameters.

Batch u is segment u of every env group (see streams/sample.py), read in place. After the
update the trainer publishes version u+1 at once, so actors resume while it logs and
checkpoints. Episode statistics arrive inside the segments, so every finished episode is
counted exactly once, by the one worker that also owns the step count.
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import UserError
from surge.models.normalize import TrainerStats
from surge.streams.params import ParameterService
from surge.streams.results import ResultReader
from surge.streams.sample import SampleConsumer, lives_are_unmixed
from surge.tracking import timing
from surge.tracking.checkpoint import rng_state
from surge.tracking.checkpoint_writer import CheckpointWriter, snapshot
from surge.tracking.metrics import MetricsWriter, wandb_options
from surge.tracking.timing import COPY, LEARN
from surge.workers.base import Binding, RunContext
from surge.workers.learners import make_backend
from surge.workers.trainer_loop import TrainerLoop

CHECKPOINT_FORMAT = 2  # the state's layout (2: FusedAdam's optimizer state, algos/adam.py)


def build(ctx: RunContext, b: Binding) -> TrainerWorker:
    return TrainerWorker(ctx.for_policy(b.policy), b)


class TrainerWorker(TrainerLoop):
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        self.name = b.name
        self.finished = False
        self.finish_reason = ""
        self.ctx = ctx
        self.control = control = b.control
        self.timers = control.timers
        transport = b.transport
        # model.backend: numpy for MLPs (no torch import in this process), else torch
        self.learner = make_backend(ctx)
        # Observation and return statistics (models/normalize.py): published with the weights
        self.stats = TrainerStats(
            ctx.env.observation_space,
            ctx.total_rows,
            normalize_obs=cfg.model.normalize_obs,
            clip_obs=cfg.model.clip_obs,
            normalize_reward=cfg.ppo.normalize_reward,
            clip_reward=cfg.ppo.clip_reward,
            gamma=cfg.ppo.gamma,
        )
        samples = b.port_of_kind("segments")
        self.consumer = SampleConsumer(transport, samples, b.inbox, ctx.start_version)
        self._wait = self.consumer.poll
        # The first policy's trainer shows the run's progress and logs its evaluations; the
        # others (multi-agent runs with several policies) log into their own home.
        self.primary = b.policy in ("", cfg.policy_names[0])
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        self.flow = self.consumer.flow
        alone = cfg.workers.trainer_threads_alone
        if alone and alone != cfg.workers.trainer_threads:
            self.learner.use_threads(self._threads)
        published = b.port_of_kind("versions")
        subscribers = [transport.channel(name) for name in published.wakes]
        self.params = ParameterService(transport, published.block, subscribers)
        # Evaluation workers' results (recipes/evaluation.py), logged as eval/* rows.
        results = b.ports.get("evaluations")
        self.evaluations = ResultReader(transport, results) if results else None

        self.version = 0  # = updates done; the parameters of version v trained batches 0..v-1
        self.env_steps = 0
        self.agent_steps = 0  # multi-agent envs: steps of agents in their episodes
        self.episodes = 0
        self.wall_time_offset = 0.0
        self.recent_returns: deque[float] = deque(maxlen=cfg.return_window)
        self.recent_lengths: deque[float] = deque(maxlen=cfg.return_window)
        if ctx.checkpoint is not None:
            from surge.tracking.checkpoint import load_checkpoint

            self._restore(load_checkpoint(Path(ctx.checkpoint)))
        resumed_at = self.env_steps if ctx.checkpoint is not None else None
        self.checkpoints = CheckpointWriter(ctx.run_dir, cfg.log.keep_checkpoints)
        wandb = wandb_options(cfg) if self.primary else None
        self.metrics = MetricsWriter(ctx.run_dir, cfg.log.tensorboard, resumed_at, wandb)
        self._start_clock()
        self._last_log = (self._started, self.env_steps)
        self._lag_sum = 0.0
        self._lag_count = 0
        self._lag_max = 0
        self._life_max = 0  # highest actor life seen in a batch (> 0: restarted actors' data)
        self._latest_stats: dict[str, float] = {}
        self._timing_at_last_log = self.control.timing.sum(axis=0)
        self.params.reset()
        self._publish()

    # ------------------------------------------------------------------ main loop

    def _ready(self) -> bool:
        return self.consumer.ready(self.version)

    def _train_next(self) -> None:
        self._train(self.consumer.batch(self.version))

    def _threads(self) -> int:
        """`workers.trainer_threads_alone` once every actor waits for this update (it has
        published the last batch it may fill ahead, `version + max_policy_lag`), else
        `workers.trainer_threads`."""
        w = self.cfg.workers
        alone = self.consumer.ready(self.version + self.cfg.max_policy_lag)
        return w.trainer_threads_alone if alone else w.trainer_threads

    def _train(self, arrays: dict[str, np.ndarray]) -> None:
        """One update on batch `version`, then publish, log, checkpoint and check the stop
        rules. Everything needed from the slot is read before publishing: actors refill it
        right after."""
        self._check_batch(arrays)
        self._account(arrays)
        clock = self.timers.now()
        # normalised with the statistics of this version, rewards scaled (models/normalize.py)
        batch = self.stats.prepare(arrays)
        self._latest_stats = self.learner.update(batch, self._learning_rate())
        self._latest_stats.update(self.stats.metrics())
        self.stats.observe(arrays, self.cfg.ppo.rollout_len)  # the next version's statistics
        clock = self.timers.add(LEARN, clock)
        self.version += 1
        self.env_steps += self.cfg.batch_steps
        self._publish()
        self.timers.add(COPY, clock)
        if self.primary:
            self.control.set_progress(  # every update, for a live display; rates come with logs
                env_steps=self.env_steps,
                episode_return_mean=self.return_mean,
                policy_version=self.version,
                episodes=self.episodes,
            )
        self._log_evaluations()
        self._after_update(time.monotonic())

    def _check_batch(self, arrays: dict[str, np.ndarray]) -> None:
        """The sample stream's invariants (broken ones are bugs, never user errors): no
        segment mixes two lives of an actor, and the stream's version bound admits every
        step (its slots make older samples impossible, streams/flow.py)."""
        if not lives_are_unmixed(arrays["life"], self.ctx.group_rows):
            raise RuntimeError(
                f"batch {self.version} holds a segment written by two lives of an actor"
            )
        rejected = int((~self.flow.admits(self.version, arrays["version"])).sum())
        if rejected:
            raise RuntimeError(
                f"batch {self.version} holds {rejected} step(s) older than the sample "
                f"stream's bound ({self.flow.describe()})"
            )

    def _account(self, arrays: dict[str, np.ndarray]) -> None:
        """Policy lag, actor lives and finished episodes of a batch, for the logs."""
        self._life_max = max(self._life_max, int(arrays["life"].max()))
        lag = self.version - arrays["version"]
        self._lag_sum += float(lag.mean())
        self._lag_max = max(self._lag_max, int(lag.max()))
        self._lag_count += 1
        if "active" in arrays:
            self.agent_steps += int(arrays["active"].sum())
        done = arrays["game_over"]
        if done.any():
            self.recent_returns.extend(arrays["episode_return"][done].tolist())
            self.recent_lengths.extend(arrays["episode_length"][done].tolist())
            self.episodes += int(done.sum())

    def _learning_rate(self) -> float:
        p = self.cfg.ppo
        if not p.anneal_lr:
            return p.lr
        return p.lr * max(0.0, 1.0 - self.env_steps / self.cfg.total_env_steps)

    def _log_evaluations(self) -> None:
        """Rows of the evaluation workers' new results: metrics.jsonl, TensorBoard, W&B (at
        the trainer's current step) and the progress line."""
        if self.evaluations is None:
            return
        for result in self.evaluations.new():
            record: dict[str, Any] = {"env_steps": self.env_steps, "time": round(time.time(), 3)}
            for name, value in result.items():  # the fields recipes/evaluation.py declares
                key = "eval/policy_version" if name == "version" else f"eval/{name}"
                record[key] = int(value) if name in ("version", "episodes", "video") else value
            self.metrics.write(record)
            self.control.set_progress(eval_return_mean=result["return_mean"])

    def _publish(self) -> None:
        """Publish this version: the weights, then the observation statistics and the value
        statistics (each if the model has them; models/normalize.py)."""
        flat = self.learner.flat_parameters()
        extra = [self.stats.published()] if self.stats.obs is not None else []
        if self.learner.value_norm is not None:
            extra.append(self.learner.value_norm.published())
        if extra:
            flat = np.concatenate([flat, *extra])
        self.params.publish(self.version, flat)

    def _log(self, now: float) -> None:
        then, steps_then = self._last_log
        sps = (self.env_steps - steps_then) / max(now - then, 1e-9)
        lag = self._lag_sum / max(self._lag_count, 1)
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
            "policy_lag_mean": lag,
            "policy_lag_max": self._lag_max,
            "policy_version": self.version,
            "restarts": int(self.control.progress()["restarts"]),
            "actor_life_max": self._life_max,
            **self._latest_stats,
        }
        record.update(timing.shares_since(self.control.timing, self._timing_at_last_log))
        self._timing_at_last_log = self.control.timing.sum(axis=0)
        self.metrics.write(record)
        if self.primary:
            self.control.set_progress(steps_per_s=sps, policy_lag_mean=lag)
        self._last_log = (now, self.env_steps)
        self._lag_sum, self._lag_count, self._lag_max = 0.0, 0, 0

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, wait: bool = False) -> None:
        """Snapshot the state and hand it to the writer thread (tracking/checkpoint_writer.py:
        serialising, fsync and torch's import never stall training). `wait`: return once it
        is on disk (the last checkpoint of a run)."""
        model, learner = self.learner.state()
        state = {
            "format": CHECKPOINT_FORMAT,
            "backend": self.learner.name,
            "version": self.version,
            "env_steps": self.env_steps,
            "agent_steps": self.agent_steps,
            "episodes": self.episodes,
            "wall_time_s": self.wall_time_s(),
            "recent_returns": list(self.recent_returns),
            "recent_lengths": list(self.recent_lengths),
            "resumes": self.ctx.resumes,
            "model": snapshot(model),
            "learner": snapshot(learner),
            "normalizer": snapshot(self.stats.state_dict()),
            "rng": rng_state(),
        }
        self.checkpoints.submit(state, self.version)
        self._next_checkpoint = time.monotonic() + self.cfg.log.checkpoint_interval_s
        if wait:
            self.checkpoints.wait()

    def _restore(self, state: dict[str, Any]) -> None:
        from surge.tracking.checkpoint import restore_rng_state

        if state.get("format") != CHECKPOINT_FORMAT:
            raise UserError(
                f"this checkpoint has format {state.get('format')}, this surge writes and "
                f"reads format {CHECKPOINT_FORMAT}",
                "resume it with the surge version that wrote it, or start a new run",
            )
        backend = state.get("backend", "torch")
        if backend != self.learner.name:
            raise UserError(
                f"this checkpoint was written by the {backend} learner, and this run's "
                f"model.backend selects the {self.learner.name} one",
                f"resume with model.backend={backend}",
            )
        self.learner.load(state["model"], state["learner"])
        self._restore_stats(state.get("normalizer"))
        restore_rng_state(state["rng"])
        self.version = int(state["version"])
        self.env_steps = int(state["env_steps"])
        self.agent_steps = int(state.get("agent_steps", 0))
        self.episodes = int(state["episodes"])
        self.wall_time_offset = float(state["wall_time_s"])
        self.recent_returns.extend(float(x) for x in state["recent_returns"])
        self.recent_lengths.extend(float(x) for x in state["recent_lengths"])

    def _restore_stats(self, saved: dict[str, Any] | None) -> None:
        """The running statistics continue where the checkpoint left them."""
        if saved is None:  # written before normalisation existed
            if self.stats.obs is not None:
                raise UserError(
                    "this checkpoint holds no observation statistics (it was written by a "
                    "surge without them), and this run's model.normalize_obs needs them",
                    "start a new run with `surge train`",
                )
            return  # reward statistics, if switched on now, start fresh
        self.stats.load_state_dict({k: _numpy(v) for k, v in saved.items()})

    def close(self) -> None:
        self.checkpoints.close()
        self.metrics.close()


def _numpy(value: Any) -> Any:
    """A checkpoint array as a numpy array (format-2 checkpoints hold tensors)."""
    return value.numpy() if hasattr(value, "numpy") else value


def warm_up() -> None:
    """What a trainer process can do before it knows its run (surge/runtime/warm.py calls
    this while the controller starts): import the numpy learner and make numpy's first
    LAPACK and BLAS calls (the orthogonal init's QR), which load state on first use. torch
    is not imported here: a numpy-backend run never needs it (models/numpy_net.py), and a
    torch-backend one imports it when its learner is built. TensorBoard's import is left
    to MetricsWriter's thread, which overlaps it with the first updates."""
    from surge.algos.numpy_ppo import NumpyPPOLearner  # noqa: F401
    from surge.models.numpy_net import orthogonal

    orthogonal(np.random.default_rng(0), (16, 8), 1.0) @ np.ones((8, 4), np.float32)
