"""The evaluation worker: plays whole episodes with the latest published policy, during training.

It subscribes to a policy's parameter stream and reports to the trainer on the results stream
(recipes/evaluation.py); it writes no samples, so no other worker ever waits for it. It plays
on its own env instance with its own seeds, with the same code as `surge eval` (surge/evaluation/),
and runs at a raised niceness (`eval.nice`), so on a busy machine it uses the CPU training
leaves.

Evaluation k (k = 1, 2, ...) is due once the newest version reaches k * `eval.every_versions`
(or, with `every_versions` 0, once k * `eval.every_s` seconds have passed); with several
evaluation workers, worker i takes the evaluations with k % workers == i. An evaluation uses
the newest version at the time it starts; evaluations that fell due while one was playing are
skipped, never queued, so a slow evaluator lags behind, it does not pile up work.

The trainer's stop check (surge/workers/trainer.py) may ask for an evaluation of its newest
version out of turn (`ResultWriter.requested`): evaluation worker 0 plays it at its next
look, ahead of the schedule, with no video.

Videos: one falls due at every `eval.video_every`-th evaluation number; evaluation worker 0
records it with the first evaluation it plays at or after that number, so a skipped number
delays its video, it never drops it (and several evaluation workers never record the same one).
"""

from __future__ import annotations

import time

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.devices import role_device
from surge.evaluation.suite import EvalSuite
from surge.models.acting import acting_policy
from surge.seeds import derive_seed
from surge.streams.params import NONE, ParameterService
from surge.streams.results import ResultWriter
from surge.streams.transport import Channel
from surge.threads import limit_torch_threads
from surge.tracking.video import TensorBoardVideo, write_mp4
from surge.workers.base import Binding, RunContext


def video_due(number: int, video_every: int, recorded: int) -> bool:
    """Whether evaluation `number` records a video: one is due per `video_every` evaluation
    numbers, and `recorded` (number // video_every at the last video) were recorded."""
    return number // video_every > recorded


def build(ctx: RunContext, b: Binding) -> EvalWorker:
    return EvalWorker(ctx, b)


class ScheduledEvaluations:
    """The schedule every evaluation worker keeps (this module's docstring); a subclass sets
    `cfg`, `params`, `inbox`, `index`, `workers`, `started` and calls `_start_schedule`, and
    says what one evaluation is (`_evaluate`)."""

    cfg: ExperimentConfig
    params: ParameterService
    results: ResultWriter
    inbox: Channel
    index: int
    workers: int
    started: float
    next: int
    answered: int = NONE
    """The newest version the trainer asked for that this worker evaluated."""

    def _start_schedule(self, from_version_zero: bool = False) -> None:
        """`from_version_zero`: evaluation 0 (the starting weights) is due at once, however
        far training got while this worker started."""
        self.started = time.monotonic()
        self.next = self._next_turn(-1 if from_version_zero else self._due())

    def _due(self) -> int:
        """The newest evaluation number that is due (0: none yet)."""
        e = self.cfg.eval
        if e.every_versions:
            return max(0, self.params.latest_version()) // e.every_versions
        return int((time.monotonic() - self.started) // e.every_s)

    def _next_turn(self, after: int) -> int:
        """The first evaluation number > `after` that is this worker's."""
        k = after + 1
        return k + (self.index - k) % self.workers

    def poll(self, timeout: float) -> bool:
        asked = self.results.requested()
        if self.index == 0 and asked > self.answered and self.params.latest_version() >= asked:
            self.answered = asked
            self._evaluate(-1 - asked)  # out of turn: its own seeds, never a video
            return True
        due = self._due()
        if due < self.next or self.params.latest_version() == NONE:
            self.inbox.recv(timeout)
            return False
        self._evaluate(self.next)
        self.next = self._next_turn(max(due, self.next))
        return True

    def _evaluate(self, number: int) -> None:
        """Play evaluation `number` (negative: one the trainer asked for) and write it."""
        raise NotImplementedError


class EvalWorker(ScheduledEvaluations):
    def __init__(self, ctx: RunContext, b: Binding) -> None:
        cfg = self.cfg = ctx.cfg
        self.name = b.name
        self.finished = False
        self.ctx = ctx
        self.control = b.control
        # One parameter stream per policy (several in multi-agent runs with `policies`): the
        # schedule follows the first policy's versions.
        versions = {p.policy: p for p in b.ports.values() if p.kind == "versions"}
        names = [""] if "" in versions else cfg.policy_names
        self.streams = {n: ParameterService(b.transport, versions[n].block) for n in names}
        self.params = self.streams[names[0]]
        # Nobody writes here but the controller at shutdown: waiting on it is the poll clock
        # (drive's timeout, 0.5 s), so new versions cost the busy cores no wake-up each.
        self.inbox = b.transport.channel(b.inbox)
        self.results = ResultWriter(b.transport, b.port("evaluations"))
        self.video = cfg.eval.video_every > 0 and b.index == 0
        self.videos_recorded = 0  # number // video_every at the last video
        self.suite = EvalSuite(cfg, video=self.video)
        self.env = self.suite.env
        seed = derive_seed(cfg.seed, "eval-policy", ctx.resumes, b.index, b.life)
        self.policies = {}
        device = role_device(cfg.eval.device, "eval.device")
        for n in names:
            own = derive_seed(seed, n) if n else seed
            env = ctx.for_policy(n).env
            self.policies[n] = acting_policy(ctx.acting_policy, env, cfg, own, device)
        self.policy = self.policies[names[0]]
        limit_torch_threads(1)
        self.index, self.workers = b.index, cfg.eval.workers
        self._start_schedule()
        self.board: TensorBoardVideo | None = None

    def _evaluate(self, number: int) -> None:
        e = self.cfg.eval
        versions = {n: service.read(self.policies[n].flat) for n, service in self.streams.items()}
        for policy in self.policies.values():
            policy.reload()
        version = versions[next(iter(versions))]
        record = (
            self.video and number >= 0 and video_due(number, e.video_every, self.videos_recorded)
        )
        played, rates = self.suite.play(
            self.policies if len(self.policies) > 1 else self.policy,
            episodes=e.episodes,
            seed=derive_seed(self.cfg.seed, "eval-episodes", self.ctx.resumes, number),
            deterministic=e.deterministic,
            record_first=record,
            on_step=self.control.beat,  # an episode may outlast workers.heartbeat_timeout_s
        )
        if record:
            self._save_video(version, played.frames)
            self.videos_recorded = number // e.video_every
        self.results.write(
            {
                "version": version,
                "episodes": len(played.returns),
                "return_mean": played.return_mean,
                "return_std": played.return_std,
                "length_mean": played.length_mean,
                "video": float(record),
                **rates,  # self-play: win / draw / loss rates per fixed player
            }
        )

    def _save_video(self, version: int, frames: list[np.ndarray]) -> None:
        """`videos/eval-v<version>.mp4`, the name `surge eval --video` uses, and TensorBoard
        (at the trainer's env steps now, shortly after that version)."""
        fps = self.suite.render_fps
        write_mp4(self.ctx.run_dir / "videos" / f"eval-v{version:08d}.mp4", frames, fps)
        if self.cfg.log.tensorboard:
            if self.board is None:
                self.board = TensorBoardVideo(self.ctx.run_dir / "tensorboard")
            steps = int(self.control.progress()["env_steps"])
            self.board.add("eval/video", frames, steps, fps)

    def close(self) -> None:
        self.suite.close()
        if self.board is not None:
            self.board.close()
