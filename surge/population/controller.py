"""The population's controller: `surge train` of a config with a `population` section.

Each member is a whole run of the experiment, started as its own `surge train` process in a
directory under the population's (`member-<k>/`: its config, trainer, streams, metrics and
checkpoints, on the config's runtime). This controller only watches: it reads every member's
new metrics rows, and each time a member has trained another `perturbation_interval` env
steps it decides for that member, as Ray Tune's PBT does (surge/population/pbt.py):

- a member of the bottom quantile copies one of the top quantile (exploit): the source's
  newest checkpoint is copied under `exploits/`, and the member's trainer loads its learner
  state (weights, optimiser, normalisation statistics) live, between two updates, keeping
  its own counters;
- with the source's settings perturbed or resampled (explore), pushed in the same message
  of the member's settings channel (surge/tracking/hyperparams.py).

Every decision that changes a member is a JSON line of `population.jsonl`. The population
ends when every member has (on its budget, time or `stop_return`); Ctrl+C stops them all,
each with a checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from surge.config.algorithms import load_algorithm
from surge.config.mutable import checked_value, get_setting
from surge.config.population_schema import initial_values, parse_mutations, population_of
from surge.config.schema import ExperimentConfig
from surge.errors import UserError, WorkerFailure
from surge.population.pbt import due, exploit_source, explore, quantiles
from surge.seeds import derive_seed
from surge.tracking.checkpoint import latest_checkpoint
from surge.tracking.hyperparams import SettingsRequest, write_request
from surge.tracking.lineage import POPULATION_LOG, plot_lineage
from surge.tracking.run_dir import CONFIG_FILE, create_run_dir

TICK_S = 0.5
"""How often the controller reads the members' metrics."""
MAX_RESTARTS = 3
"""Times a member whose run failed is resumed before the population stops."""
STOP_GRACE_S = 60.0
"""After Ctrl+C, how long members may take to save their checkpoint."""


@dataclass
class Member:
    """One member's run, as the controller sees it."""

    index: int
    run_dir: Path
    values: dict[str, float]
    """Its mutated settings in force."""
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    env_steps: int = 0
    score: float = math.nan
    last_decision: int = 0
    seq: int = 0
    restarts: int = 0
    """Times the member was resumed after its run failed."""
    _offset: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"member-{self.index}"

    def read_metrics(self, metric: str) -> None:
        """Take the member's new complete metrics rows: its env steps and newest score."""
        path = self.run_dir / "metrics.jsonl"
        try:
            with path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a row being written is read next time
        self._offset += end
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            self.env_steps = max(self.env_steps, int(row.get("env_steps", 0)))
            value = row.get(metric)
            if isinstance(value, int | float) and math.isfinite(value):
                self.score = float(value)
            if "steps_per_s" in row:
                self.rows.append(row)


@dataclass(frozen=True)
class PopulationResult:
    """How the population ended, and each member's last training row."""

    run_dir: Path
    reason: str  # "finished" | "interrupted"
    members: list[dict[str, Any]]
    exploits: int


def train_population(cfg: ExperimentConfig, name: str = "population") -> PopulationResult:
    """Train the population of `cfg` (it has a `population` section) into a new run
    directory whose members are `member-<k>/`."""
    pop = population_of(cfg)
    assert pop is not None, "a config with a population section"
    mutable = tuple(load_algorithm(cfg.algo).mutable_settings)
    mutations = parse_mutations(cfg, mutable)
    starts = initial_values(cfg, mutable)
    run_dir = create_run_dir(cfg, name)
    members = []
    for k in range(pop.size):
        values = {key: float(get_setting(cfg, key)) for key in mutations}
        members.append(Member(k, run_dir / f"member-{k}", {**values, **starts[k]}))
    rng = random.Random(derive_seed(cfg.seed, "population"))
    print(
        f"surge: population of {pop.size} x {cfg.algo} on {cfg.env.id}, runtime={cfg.runtime}, "
        f"run_dir={run_dir}\n  mutating {', '.join(mutations)} every "
        f"{pop.perturbation_interval:,} env steps; ranked by {pop.metric} ({pop.mode})",
        file=sys.stderr,
    )
    exploits = 0
    with (run_dir / POPULATION_LOG).open("a") as log:
        try:
            for member in members:
                _start(member, run_dir, cfg)
            while True:
                _check_exits(members)  # may resume a failed member: before the end check
                if not any(m.process is not None and m.process.poll() is None for m in members):
                    break
                time.sleep(TICK_S)
                for member in members:
                    member.read_metrics(pop.metric)
                for member in members:
                    if member.process is None or member.process.poll() is not None:
                        continue
                    if not due(member.env_steps, member.last_decision, pop.perturbation_interval):
                        continue
                    member.last_decision = member.env_steps
                    record = _decide(member, members, mutations, rng, cfg, run_dir)
                    if record is not None:
                        exploits += 1
                        log.write(json.dumps(record) + "\n")
                        log.flush()
            reason = "finished"
        except KeyboardInterrupt:
            _stop(members)
            reason = "interrupted"
        except BaseException:
            _stop(members)
            raise
        finally:
            for member in members:
                if member.log is not None:
                    member.log.close()
    for member in members:
        member.read_metrics(pop.metric)
    if all((m.run_dir / "metrics.jsonl").is_file() for m in members):
        plot_lineage(run_dir, run_dir / "lineage.png", pop.metric)  # `surge plot` redraws it
    result = PopulationResult(
        run_dir, reason, [m.rows[-1] if m.rows else {} for m in members], exploits
    )
    _print_footer(result, members, pop.metric)
    return result


def _start(member: Member, run_dir: Path, cfg: ExperimentConfig) -> None:
    """Start a member as its own `surge train` of the population's config, without the
    population section, with its own directory, seed and start values."""
    overrides = [
        "population=null",
        f"run_dir={member.run_dir}",
        f"seed={cfg.seed + member.index}",
        "log.progress=false",
        *[f"{key}={value!r}" for key, value in member.values.items()],
    ]
    # its start values as the channel's first message too: its trainer logs the values in
    # force (`hp/*`) from its first record, not only from its first exploit
    member.run_dir.mkdir(parents=True, exist_ok=True)
    write_request(member.run_dir, SettingsRequest(0, dict(member.values)))
    _launch(member, ["train", str(run_dir / CONFIG_FILE), *overrides])


def _launch(member: Member, command: list[str]) -> None:
    """Run `surge COMMAND...` as the member's process, its output appended to its log."""
    if member.log is None:
        member.log = (member.run_dir.parent / f"{member.name}.log").open("ab")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    member.process = subprocess.Popen(
        [sys.executable, "-m", "surge", *command],
        stdout=member.log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _decide(
    member: Member,
    members: list[Member],
    mutations: dict[str, Any],
    rng: random.Random,
    cfg: ExperimentConfig,
    run_dir: Path,
) -> dict[str, Any] | None:
    """The decision for a member at its perturbation point: exploit and explore when it is in
    the bottom quantile (the JSON line for the log), else None."""
    pop = population_of(cfg)
    assert pop is not None
    scores = {m.index: m.score for m in members}
    bottom, top = quantiles(scores, pop.quantile_fraction, pop.mode)
    source_index = exploit_source(member.index, bottom, top, rng)
    if source_index is None:
        return None
    source = members[source_index]
    copied = _copy_checkpoint(source, member, run_dir)
    if copied is None:
        return None  # the source has no checkpoint yet: the next interval decides
    copy, original = copied
    explored = explore(source.values, mutations, pop.resample_probability, rng)
    new = {key: checked_value(cfg, key, value) for key, value in explored.items()}
    member.seq += 1
    write_request(member.run_dir, SettingsRequest(member.seq, new, load=str(copy)))
    record = {
        "time": round(time.time(), 3),
        "member": member.name,
        "env_steps": member.env_steps,
        "score": member.score,
        "source": source.name,
        "source_env_steps": source.env_steps,
        "source_score": source.score,
        "source_checkpoint": original.name,
        "checkpoint": str(copy),
        "old": member.values,
        "new": new,
    }
    member.values = new
    changes = ", ".join(f"{k}={v:.3g}" for k, v in new.items())
    print(
        f"surge: {member.name} ({pop.metric} {member.score:.1f}) copies {source.name} "
        f"({source.score:.1f}) at {member.env_steps:,} env steps; explores {changes}",
        file=sys.stderr,
    )
    return record


def _copy_checkpoint(source: Member, member: Member, run_dir: Path) -> tuple[Path, Path] | None:
    """(the copy, the original) of the source's newest checkpoint, copied where its own
    rotation cannot delete it before the member has loaded it; None when it has none yet.
    The member's earlier copies go: it took each at its next update, an interval ago."""
    for old in (run_dir / "exploits").glob(f"{member.name}-*"):
        old.unlink(missing_ok=True)
    for _ in range(3):  # the newest may be rotated away between listing and copying
        found = latest_checkpoint(source.run_dir)
        if found is None:
            return None
        target = run_dir / "exploits" / f"{member.name}-{member.seq + 1}-from-{source.name}"
        target = target.with_name(f"{target.name}-{found.name}")
        target.parent.mkdir(exist_ok=True)
        try:
            shutil.copyfile(found, target)
        except FileNotFoundError:
            continue
        return target, found
    return None


def _check_exits(members: list[Member]) -> None:
    """A member whose run failed is resumed from its newest checkpoint (`surge resume`, up
    to `MAX_RESTARTS` times: the others go on meanwhile); one that stopped on a config error
    (exit 2), or cannot be resumed, stops the population with the end of its log."""
    for member in members:
        code = member.process.poll() if member.process is not None else None
        if code is None or code == 0:
            continue
        log = member.run_dir.parent / f"{member.name}.log"
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-20:])
        if code == 2:
            raise UserError(f"{member.name} stopped on an error:\n{tail}")
        if member.restarts < MAX_RESTARTS and latest_checkpoint(member.run_dir) is not None:
            member.restarts += 1
            print(
                f"surge: {member.name} exited with {code}; resuming it from its newest "
                f"checkpoint ({member.restarts} of {MAX_RESTARTS})",
                file=sys.stderr,
            )
            _launch(member, ["resume", str(member.run_dir), "log.progress=false"])
            continue
        raise WorkerFailure(member.name, f"exited with {code}:\n{tail}")


def _stop(members: list[Member]) -> None:
    """Ask every running member to save a checkpoint and stop (SIGINT, as Ctrl+C does);
    kill those that have not after `STOP_GRACE_S`."""
    running = [m.process for m in members if m.process is not None and m.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in running:
        try:
            process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _print_footer(result: PopulationResult, members: list[Member], metric: str) -> None:
    lines = [f"surge: population {result.reason}: {result.exploits} exploit(s), {result.run_dir}"]
    for member, row in zip(members, result.members, strict=True):
        values = ", ".join(f"{k}={v:.3g}" for k, v in member.values.items())
        lines.append(
            f"  {member.name}: {row.get('env_steps', 0):,} env steps, {metric} "
            f"{member.score:.1f}; {values}"
        )
    print("\n".join(lines), file=sys.stderr)
