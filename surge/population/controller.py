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
each with a checkpoint, and `surge resume` of the population's directory resumes every member
that had not finished (surge/population/members.py). On `runtime=ray` every member runs on
one cluster, their trainers spread over its nodes (surge/population/cluster.py).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surge.config.algorithms import load_algorithm
from surge.config.load import load_config
from surge.config.mutable import checked_value, get_setting
from surge.config.population_schema import initial_values, parse_mutations, population_of
from surge.config.schema import ExperimentConfig
from surge.errors import UserError
from surge.population.cluster import check_cpu_budget, local_cpus, member_workers, ray_population
from surge.population.members import (
    Member,
    check_exits,
    load_members,
    resume,
    save_states,
    start,
    stop,
)
from surge.population.pbt import due, exploit_source, explore, quantiles
from surge.seeds import derive_seed
from surge.tracking.checkpoint import latest_checkpoint
from surge.tracking.hyperparams import SettingsRequest, write_request
from surge.tracking.lineage import POPULATION_LOG, plot_lineage, read_decisions
from surge.tracking.run_dir import CONFIG_FILE, create_run_dir
from surge.workers.graph import WorkerSpec

TICK_S = 0.5
"""How often the controller reads the members' metrics."""


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
    workers = member_workers(cfg)
    if cfg.runtime != "ray":
        check_cpu_budget(pop.size, workers, local_cpus(), "this machine")
    run_dir = create_run_dir(cfg, name)
    members = []
    for k in range(pop.size):
        values = {key: float(get_setting(cfg, key)) for key in mutations}
        members.append(Member(k, run_dir / f"member-{k}", {**values, **starts[k]}))
    return _run(cfg, run_dir, members, workers, mutations)


def resume_population(run_dir: Path, overrides: list[str]) -> PopulationResult:
    """Continue the population in `run_dir`: every member that had not finished resumes from
    its newest checkpoint with its settings in force; `overrides` apply to every member."""
    run_dir = Path(run_dir)
    cfg, _ = load_config(str(run_dir / CONFIG_FILE), overrides)
    pop = population_of(cfg)
    if pop is None:
        raise UserError(f"{run_dir}: its config has no population section", "use `surge resume`")
    mutations = parse_mutations(cfg, tuple(load_algorithm(cfg.algo).mutable_settings))
    members = load_members(run_dir, pop.size)
    for member in members:
        if not member.finished and latest_checkpoint(member.run_dir) is None:
            raise UserError(
                f"{member.run_dir} has no checkpoint to resume from",
                "start the population afresh with `surge train`",
            )
    workers = member_workers(cfg)
    return _run(cfg, run_dir, members, workers, mutations, overrides)


def _run(
    cfg: ExperimentConfig,
    run_dir: Path,
    members: list[Member],
    workers: list[WorkerSpec],
    mutations: dict[str, Any],
    resume_overrides: list[str] | None = None,
) -> PopulationResult:
    """Run (or, with `resume_overrides`, resume) the members until every one has finished."""
    pop = population_of(cfg)
    assert pop is not None
    # a resumed population draws afresh, not the first run's draws again
    decisions = len(read_decisions(run_dir)) if (run_dir / POPULATION_LOG).is_file() else 0
    rng = random.Random(derive_seed(cfg.seed, "population", decisions))
    print(
        f"surge: population of {pop.size} x {cfg.algo} on {cfg.env.id}, runtime={cfg.runtime}, "
        f"run_dir={run_dir}\n  mutating {', '.join(mutations)} every "
        f"{pop.perturbation_interval:,} env steps; ranked by {pop.metric} ({pop.mode})",
        file=sys.stderr,
    )
    exploits = 0
    with ExitStack() as stack:
        log = stack.enter_context((run_dir / POPULATION_LOG).open("a"))
        if cfg.runtime == "ray":
            placed = stack.enter_context(ray_population(cfg, pop.size, workers))
        else:
            placed = [[] for _ in members]
        common = ["log.progress=false", *(resume_overrides or [])]
        again = {m.index: [*common, *placed[m.index]] for m in members}
        try:
            for member in members:
                if member.finished:
                    continue
                if resume_overrides is None:
                    overrides = [*_start_overrides(cfg, member), *again[member.index]]
                    start(member, run_dir / CONFIG_FILE, overrides)
                else:
                    resume(member, again[member.index])
            save_states(run_dir, members)
            while True:
                if check_exits(members, again):  # may resume a failed member: first
                    save_states(run_dir, members)
                if not any(m.running for m in members):
                    break
                time.sleep(TICK_S)
                for record in _decisions(members, mutations, rng, cfg, run_dir):
                    exploits += 1
                    log.write(json.dumps(record) + "\n")
                    log.flush()
            reason = "finished"
        except KeyboardInterrupt:
            stop(members)
            reason = "interrupted"
        except BaseException:
            stop(members)
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


def _decisions(
    members: list[Member],
    mutations: dict[str, Any],
    rng: random.Random,
    cfg: ExperimentConfig,
    run_dir: Path,
) -> list[dict[str, Any]]:
    """Read the members' new metrics; decide for each running member at its perturbation
    point. The exploits made (their log records)."""
    pop = population_of(cfg)
    assert pop is not None
    for member in members:
        member.read_metrics(pop.metric)
    records = []
    for member in members:
        if not member.running:
            continue
        if not due(member.env_steps, member.last_decision, pop.perturbation_interval):
            continue
        member.last_decision = member.env_steps
        record = _decide(member, members, mutations, rng, cfg, run_dir)
        if record is not None:
            records.append(record)
    return records


def _start_overrides(cfg: ExperimentConfig, member: Member) -> list[str]:
    """A member's `surge train` of the population's config: without the population section,
    with its own directory, seed and start values."""
    return [
        "population=null",
        f"run_dir={member.run_dir}",
        f"seed={cfg.seed + member.index}",
        *[f"{key}={value!r}" for key, value in member.values.items()],
    ]


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


def _print_footer(result: PopulationResult, members: list[Member], metric: str) -> None:
    lines = [f"surge: population {result.reason}: {result.exploits} exploit(s), {result.run_dir}"]
    for member, row in zip(members, result.members, strict=True):
        values = ", ".join(f"{k}={v:.3g}" for k, v in member.values.items())
        lines.append(
            f"  {member.name}: {row.get('env_steps', 0):,} env steps, {metric} "
            f"{member.score:.1f}; {values}"
        )
    print("\n".join(lines), file=sys.stderr)
