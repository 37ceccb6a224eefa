"""Run metrics: one JSON object per line in metrics.jsonl, mirrored to TensorBoard and,
when `log.wandb` is set, to Weights & Biases.

metrics.jsonl is the record of truth (plots and tests read it); TensorBoard and W&B are
views, with the same tags.
Non-finite floats (NaN before the first episode ends) are written as null so the file
stays strict JSON for other tools.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from surge.errors import UserError

METRICS_FILE = "metrics.jsonl"

# TensorBoard tag for each known metric, CleanRL-style groups. Keys not listed go under
# `other/` unless they name a group (`eval/...`); `env_steps` is the x axis.
TB_TAGS: dict[str, str] = {
    "episode_return_mean": "charts/episode_return_mean",
    "episode_length_mean": "charts/episode_length_mean",
    "episodes": "charts/episodes",
    "steps_per_s": "charts/steps_per_s",
    "policy_version": "charts/policy_version",
    "policy_lag_mean": "charts/policy_lag_mean",
    "policy_lag_max": "charts/policy_lag_max",
    "lr": "charts/learning_rate",
    "wall_time_s": "charts/wall_time_s",
    "policy_loss": "losses/policy_loss",
    "value_loss": "losses/value_loss",
    "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl",
    "old_approx_kl": "losses/old_approx_kl",
    "clipfrac": "losses/clipfrac",
    "explained_variance": "losses/explained_variance",
    "grad_norm": "losses/grad_norm",
}
STEP_KEY = "env_steps"
CLOCK_KEY = "time"  # Unix time of the record: TensorBoard stamps its own, so it is not plotted


def tb_tag(key: str) -> str:
    """A metric's TensorBoard tag; keys that name their group (`eval/return_mean`) keep it."""
    return TB_TAGS.get(key, key if "/" in key else f"other/{key}")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _drop_records_after(path: Path, env_steps: int) -> None:
    """Forget records logged after the checkpoint a run resumes from (a trainer that died
    logged past its last checkpoint): the resumed run logs those steps again."""
    from surge.tracking.files import atomic_writer

    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)[STEP_KEY] <= env_steps]
    if len(kept) != len(lines):
        with atomic_writer(path) as f:
            f.writelines(kept)


class ScalarWriter:
    """TensorBoard scalars through tensorboard's own event-file writer: the files
    torch.utils.tensorboard.SummaryWriter writes, without importing torch (a numpy-backend
    trainer never does; models/numpy_net.py)."""

    def __init__(self, log_dir: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(log_dir))

    def add_scalar(self, tag: str, value: float, global_step: int) -> None:
        """Write scalar `value` under `tag` at step `global_step`."""
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)])
        self._writer.add_event(
            self._event(wall_time=time.time(), step=global_step, summary=summary)
        )

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


class WandbWriter:
    """Scalars and the config to a W&B run stored in `run_dir/wandb/`. The run id is derived
    from the run directory, so `surge resume` continues the same W&B run."""

    def __init__(self, run_dir: Path, options: WandbOptions) -> None:
        import wandb

        run_dir = Path(run_dir).resolve()
        run_id = hashlib.sha1(str(run_dir).encode()).hexdigest()[:12]
        try:
            self._run = wandb.init(
                project=options.project,
                entity=options.entity,
                name=run_dir.name,
                id=run_id,
                resume="allow",
                dir=str(run_dir),
                config=options.config,
                # silent: the terminal belongs to the progress line; logs go to run_dir/wandb
                settings=wandb.Settings(silent=True, console="off"),
            )
        except Exception as e:  # wandb raises its own error types for login and network
            raise UserError(
                f"log.wandb=true: W&B could not start a run ({type(e).__name__}: {e})",
                "log in (`wandb login`, or WANDB_API_KEY), or record offline with "
                "WANDB_MODE=offline and upload later with `wandb sync`",
            ) from e

    def add_scalars(self, values: dict[str, float], global_step: int) -> None:
        """Log `values` (scalars by name) to the W&B run at step `global_step`."""
        self._run.log(values, step=global_step)

    def close(self) -> None:
        """Finish the W&B run."""
        self._run.finish()


@dataclass(frozen=True)
class WandbOptions:
    """Where and how `log.wandb=true` mirrors a run: the W&B project and entity, and the config
    shown with it."""

    project: str
    entity: str | None
    config: dict[str, Any]
    """The experiment config (`config_to_dict`), shown as the W&B run's config."""


class MetricsWriter:
    """Appends records to run_dir/metrics.jsonl (and TensorBoard and W&B if enabled)."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool,
        resume_at_steps: int | None = None,
        wandb: WandbOptions | None = None,
    ) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        if resume_at_steps is not None and self.path.exists():
            _drop_records_after(self.path, resume_at_steps)
        # Append: a resumed run continues the same file.
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._tb: Any = None
        self._tb_ready: concurrent.futures.Future[Any] | None = None
        self._wandb: WandbWriter | None = None
        self._wandb_ready: concurrent.futures.Future[WandbWriter] | None = None
        # TensorBoard's import takes about 0.3 s, W&B's start about 2 s; they run in a thread
        # so that training starts at once. The first write waits for them.
        if tensorboard or wandb is not None:
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="metric-sinks")
            if tensorboard:
                self._tb_ready = pool.submit(ScalarWriter, Path(run_dir) / "tensorboard")
            if wandb is not None:
                self._wandb_ready = pool.submit(WandbWriter, Path(run_dir), wandb)
            pool.shutdown(wait=False)

    def write(self, record: dict[str, float | int]) -> None:
        """Append `record` to metrics.jsonl as one JSON line, and send it to TensorBoard and W&B
        where they are on."""
        line = json.dumps({k: _clean(v) for k, v in record.items()}, allow_nan=False)
        self._file.write(line + "\n")
        self._file.flush()
        self._await_sinks()
        if self._tb is None and self._wandb is None:
            return
        if STEP_KEY not in record:
            raise ValueError(f"a metrics record needs '{STEP_KEY}' for the plots' x axis")
        step = int(record[STEP_KEY])
        scalars = {
            tb_tag(key): value
            for key, value in record.items()
            if key not in (STEP_KEY, CLOCK_KEY)
            and not isinstance(value, bool)
            and isinstance(value, int | float)
            and math.isfinite(value)  # NaN: nothing to plot yet (no episode has ended)
        }
        if self._tb is not None:
            for tag, value in scalars.items():
                self._tb.add_scalar(tag, value, global_step=step)
        if self._wandb is not None:
            self._wandb.add_scalars(scalars, global_step=step)

    def _await_sinks(self) -> None:
        if self._tb_ready is not None:
            self._tb, self._tb_ready = self._tb_ready.result(), None
        if self._wandb_ready is not None:
            self._wandb, self._wandb_ready = self._wandb_ready.result(), None

    def close(self) -> None:
        """Close metrics.jsonl and the TensorBoard and W&B writers."""
        if not self._file.closed:
            self._file.close()
        self._await_sinks()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(run_dir: Path, rows: str = "all") -> list[dict[str, Any]]:
    """The records of run_dir/metrics.jsonl; a torn last line (a crash mid-write) is skipped.
    `rows`: `all`, `training` (the trainer's rows: `steps_per_s` and the learner's fields)
    or `eval` (evaluations: `eval/*` fields)."""
    path = Path(run_dir) / METRICS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError(
            f"{run_dir} has no {METRICS_FILE}",
            "give a run directory written by `surge` (it appears after the first log interval)",
        ) from None
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise UserError(
                f"{path}:{i + 1}: not a JSON line: {line[:80]!r}",
                "the file is corrupt; remove or repair that line",
            ) from None
    if rows == "training":
        return [r for r in records if "steps_per_s" in r]
    if rows == "eval":
        return [r for r in records if "eval/policy_version" in r]
    return records


def wandb_options(cfg: Any) -> WandbOptions | None:
    """The W&B settings of an experiment config (`log.wandb`), or None when it is off."""
    if not cfg.log.wandb:
        return None
    from surge.config.load import config_to_dict

    return WandbOptions(cfg.log.wandb_project, cfg.log.wandb_entity, config_to_dict(cfg))
