"""The `population` section: population-based training (PBT) of one experiment.

A config with a `population` section trains `size` members of the experiment, each its own
run, and every `perturbation_interval` env steps of a member the bottom quantile copies a
top-quantile member and perturbs its settings (surge/population/, docs/population.md). The
section is optional (present or absent, like a plug-in's own section: it is kept in
`ExperimentConfig.sections` and read with `population_of(cfg)`), so a config without it is
one run, as before.

`mutations` names the settings that change, by their config keys; each must be one the
algorithm declares mutable (`Algorithm.mutable_settings`): a list of values (explore steps to
a neighbouring value) or a range `{low, high, log}` (explore multiplies by 0.8 or 1.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from surge.config.mutable import checked_value
from surge.config.rules import AT_LEAST_ONE, UNIT, Rule, between, ruled
from surge.errors import ConfigError

POPULATION = "population"
"""The section's name."""


@dataclass
class PopulationConfig:
    """Population-based training (docs/population.md)."""

    size: int = ruled(4, Rule(lambda v: v >= 2, ">= 2"))
    """Members of the population, each its own run under the population's run directory."""

    perturbation_interval: int = ruled(20_000, AT_LEAST_ONE)
    """Env steps of a member between two of its exploit / explore decisions."""

    quantile_fraction: float = ruled(0.25, between(0, 0.5, "(]"))
    """The share of members in the bottom quantile (which copy) and in the top one (which are
    copied)."""

    resample_probability: float = ruled(0.25, UNIT)
    """Explore draws a setting afresh from its mutation with this probability, else perturbs
    the copied value."""

    mutations: dict[str, Any] = field(default_factory=dict)
    """Setting key -> a list of values, or a range `{low: .., high: .., log: true|false}`."""

    initial: dict[str, Any] = field(default_factory=dict)
    """Setting key -> one start value per member (a list of `size`); a setting not named
    starts at the config's value in every member."""

    metric: str = "episode_return_mean"
    """The members' ranking: a field of their metrics rows (`episode_return_mean`,
    `eval/return_mean`); its newest value counts."""

    mode: Literal["max", "min"] = "max"
    """Whether a higher or a lower `metric` is better."""


@dataclass(frozen=True)
class Choices:
    """A mutation over listed values."""

    values: tuple[float, ...]


@dataclass(frozen=True)
class Range:
    """A mutation over a continuous range (log-uniform draws when `log`)."""

    low: float
    high: float
    log: bool = False


Mutation = Choices | Range


def population_of(cfg: Any) -> PopulationConfig | None:
    """The config's population section, or None when it trains one run."""
    section = cfg.sections.get(POPULATION)
    return section if isinstance(section, PopulationConfig) else None


def parse_mutations(cfg: Any, mutable: tuple[str, ...]) -> dict[str, Mutation]:
    """`population.mutations` as `Choices` and `Range`s, checked: every key is a setting the
    algorithm declares mutable, and every value keeps the setting's range rules."""
    pop = population_of(cfg)
    assert pop is not None
    out: dict[str, Mutation] = {}
    for key, spec in pop.mutations.items():
        name = f"population.mutations.{key}"
        _require_mutable(cfg, key, name, mutable)
        if isinstance(spec, list):
            if not spec:
                raise ConfigError(f"{name}: an empty list", "list at least one value")
            out[key] = Choices(tuple(_value(cfg, key, v, name) for v in spec))
        elif isinstance(spec, dict) and {"low", "high"} <= set(spec) <= {"low", "high", "log"}:
            low, high = (_value(cfg, key, spec[k], name) for k in ("low", "high"))
            log = spec.get("log", False)
            if not isinstance(log, bool) or not low < high or (log and low <= 0):
                raise ConfigError(
                    f"{name}: {spec!r} is not a range with low < high (and low > 0 with log)",
                    f"write e.g. {key}: {{low: 1e-5, high: 1e-2, log: true}}",
                )
            out[key] = Range(low, high, log)
        else:
            raise ConfigError(
                f"{name}: expected a list of values or {{low, high, log}}, got {spec!r}",
                f"write e.g. {key}: [1e-4, 3e-4, 1e-3] or {key}: {{low: 1e-5, high: 1e-2}}",
            )
    return out


def initial_values(cfg: Any, mutable: tuple[str, ...]) -> list[dict[str, float]]:
    """Each member's start values (`population.initial`), checked like the mutations."""
    pop = population_of(cfg)
    assert pop is not None
    members: list[dict[str, float]] = [{} for _ in range(pop.size)]
    for key, values in pop.initial.items():
        name = f"population.initial.{key}"
        _require_mutable(cfg, key, name, mutable)
        if not isinstance(values, list) or len(values) != pop.size:
            raise ConfigError(
                f"{name}: expected a list of {pop.size} values (one per member), got {values!r}",
                f"list population.size={pop.size} values",
            )
        for k, value in enumerate(values):
            members[k][key] = _value(cfg, key, value, name)
    return members


def check_population(cfg: Any, mutable: tuple[str, ...]) -> None:
    """What the section's own rules cannot say: mutations and initial values of settings the
    algorithm declares mutable, a metric that is logged, a runtime that runs members."""
    pop = population_of(cfg)
    if pop is None:
        return
    if not mutable:
        raise ConfigError(
            f"population: algo {cfg.algo} declares no setting that may change during a run",
            "train a population of an algorithm that does (ppo, appo), or remove population",
        )
    if not pop.mutations:
        raise ConfigError(
            "population.mutations: empty, so explore would change nothing",
            f"name settings to mutate, e.g. {mutable[0]}: {{low: 1e-5, high: 1e-2, log: true}}",
        )
    parse_mutations(cfg, mutable)
    initial_values(cfg, mutable)
    if len(cfg.policy_names) > 1:
        raise ConfigError(
            "population with several policies: members are ranked by one metric",
            "train one policy, or remove population",
        )
    if pop.metric.startswith("eval/") and not cfg.eval.workers:
        raise ConfigError(
            f"population.metric={pop.metric}: evaluation rows come from evaluation workers, "
            "and eval.workers=0",
            "set eval.workers=1, or population.metric=episode_return_mean",
        )


def _require_mutable(cfg: Any, key: str, name: str, mutable: tuple[str, ...]) -> None:
    if key not in mutable:
        raise ConfigError(
            f"{name}: algo {cfg.algo} does not let {key} change during a run",
            f"mutate settings it declares mutable: {', '.join(mutable) or 'none'}",
        )


def _value(cfg: Any, key: str, value: Any, name: str) -> float:
    """A value of a mutation, as its setting takes it (its rules checked, `name` named)."""
    try:
        number = checked_value(cfg, key, value)
    except ConfigError as e:
        raise ConfigError(f"{name}: {e.problem}", e.fix) from None
    if not math.isfinite(number):
        raise ConfigError(f"{name}: {value!r} is not finite")
    return number
