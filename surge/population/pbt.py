"""PBT's decisions as pure functions (Jaderberg et al. 2017; Ray Tune's
`PopulationBasedTraining` semantics): rank the members by a metric, let a member of the
bottom quantile copy one of the top quantile (exploit), and perturb or resample the copied
settings (explore). Randomness comes in as a `random.Random`, so a seed fixes every choice,
and the toy of the paper's Fig. 2 runs on these same functions (tests/unit/test_pbt.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from surge.config.population_schema import Choices, Mutation

PERTURBATION_FACTORS = (0.8, 1.2)
"""Explore multiplies a range setting by one of these (Ray Tune's defaults)."""


def quantiles(
    scores: Mapping[int, float], fraction: float, mode: str = "max"
) -> tuple[list[int], list[int]]:
    """(bottom, top): the members of the worst and of the best `fraction` of the population,
    by their scores (`mode` max: higher is better). Members without a finite score are left
    out, as Ray leaves out trials that reported nothing; each quantile holds
    ceil(n * fraction) members, at most half of them, so no member is in both."""
    scored = [(s if mode == "max" else -s, k) for k, s in scores.items() if math.isfinite(s)]
    if len(scored) <= 1:
        return [], []
    ranked = [k for _, k in sorted(scored)]  # worst first; ties broken by member id
    n = min(math.ceil(len(ranked) * fraction), len(ranked) // 2)
    return ranked[:n], ranked[len(ranked) - n :]


def exploit_source(
    member: int, bottom: list[int], top: list[int], rng: random.Random
) -> int | None:
    """The member that `member` copies: one of the top quantile drawn at random when it is in
    the bottom quantile; None when it trains on unchanged."""
    if member not in bottom or not top:
        return None
    return rng.choice(top)


def sample(mutation: Mutation, rng: random.Random) -> float:
    """A fresh value of a mutation: one of its values, or a uniform (log-uniform with `log`)
    draw from its range."""
    if isinstance(mutation, Choices):
        return rng.choice(mutation.values)
    if mutation.log:
        return math.exp(rng.uniform(math.log(mutation.low), math.log(mutation.high)))
    return rng.uniform(mutation.low, mutation.high)


def perturb(value: float, mutation: Mutation, rng: random.Random) -> float:
    """A neighbour of `value`: the next listed value up or down (a value not in the list is
    resampled), or `value` times 0.8 or 1.2, kept inside the range. (Ray leaves a range's
    product unclipped; here it stays in range, so it also keeps the setting's own rules.)"""
    if isinstance(mutation, Choices):
        if value not in mutation.values:
            return sample(mutation, rng)
        index = mutation.values.index(value) + rng.choice((-1, 1))
        return mutation.values[min(max(index, 0), len(mutation.values) - 1)]
    moved = value * rng.choice(PERTURBATION_FACTORS)
    return min(max(moved, mutation.low), mutation.high)


def explore(
    values: Mapping[str, float],
    mutations: Mapping[str, Mutation],
    resample_probability: float,
    rng: random.Random,
) -> dict[str, float]:
    """New settings from copied ones: each mutated setting is drawn afresh with
    `resample_probability`, else perturbed; a setting not in `values` is drawn afresh.
    Settings without a mutation are kept."""
    out = dict(values)
    for key, mutation in mutations.items():
        if key not in values or rng.random() < resample_probability:
            out[key] = sample(mutation, rng)
        else:
            out[key] = perturb(values[key], mutation, rng)
    return out


def due(env_steps: int, last: int, interval: int) -> bool:
    """Whether a member at `env_steps`, last perturbed at `last`, decides again."""
    return env_steps - last >= interval
