"""PBT's pure functions (surge/population/pbt.py), the toy of the PBT paper's Fig. 2 solved
with them, and the `population` section's config errors."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from surge.config.load import load_config
from surge.config.population_schema import Choices, Range
from surge.errors import ConfigError
from surge.population.cluster import check_cpu_budget, member_workers
from surge.population.pbt import due, exploit_source, explore, perturb, quantiles, sample

# ---------------------------------------------------------------------- ranking and choices


def test_quantiles_split_worst_and_best_and_skip_unscored_members() -> None:
    scores = {0: 1.0, 1: 5.0, 2: math.nan, 3: 3.0, 4: 0.5, 5: 4.0}
    bottom, top = quantiles(scores, 0.25)
    assert bottom == [4, 0] and top == [5, 1]  # ceil(5 * 0.25) = 2 each
    assert quantiles(scores, 0.25, mode="min") == ([1, 5], [0, 4])
    assert quantiles({0: 1.0, 1: 2.0}, 0.5) == ([0], [1])
    assert quantiles({0: 1.0, 1: 2.0, 2: 3.0}, 0.5) == ([0], [2])  # at most half
    assert quantiles({0: 1.0, 1: math.nan}, 0.5) == ([], [])


def test_only_the_bottom_quantile_exploits() -> None:
    rng = random.Random(0)
    assert exploit_source(1, [0], [2], rng) is None
    assert exploit_source(0, [0], [2], rng) == 2


def test_explore_perturbs_by_the_factors_or_resamples() -> None:
    rng = random.Random(1)
    lr = Range(1e-5, 1e-1, log=True)
    moved = {perturb(1e-3, lr, rng) for _ in range(50)}
    assert sorted(moved) == pytest.approx([8e-4, 1.2e-3])
    assert perturb(0.1, lr, rng) <= 0.1  # kept inside the range
    grid = Choices((0.0, 0.01, 0.02))
    assert {perturb(0.01, grid, rng) for _ in range(50)} == {0.0, 0.02}
    assert perturb(0.5, grid, rng) in grid.values  # not listed: resampled
    draws = [sample(lr, rng) for _ in range(200)]
    assert all(1e-5 <= d <= 1e-1 for d in draws) and min(draws) < 1e-4 < 1e-2 < max(draws)
    always = explore({"a": 1e-3, "keep": 7.0}, {"a": lr}, 1.0, random.Random(2))
    assert always["keep"] == 7.0 and always["a"] not in (8e-4, 1.2e-3)
    assert due(2000, 0, 2000) and not due(1999, 0, 2000)


# ---------------------------------------------------------------------- the paper's toy


def _q(theta: np.ndarray) -> float:
    """The true objective, Q(theta) = 1.2 - (theta0^2 + theta1^2)."""
    return 1.2 - float((theta**2).sum())


def _toy(seed: int, pbt: bool, steps: int = 200, ready: int = 4) -> float:
    """Two workers do gradient ascent on the surrogate Q^(theta|h) = 1.2 - (h0 theta0^2 +
    h1 theta1^2) from theta = (0.9, 0.9), one with h = (1, 0), the other (0, 1); with `pbt`
    every `ready` steps the worse copies the better's theta and explores its h. Returns the
    best Q reached."""
    rng = random.Random(seed)
    mutations = {"h0": Range(0.0, 1.0), "h1": Range(0.0, 1.0)}
    thetas = [np.array([0.9, 0.9]), np.array([0.9, 0.9])]
    hs = [{"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 1.0}]
    best = -math.inf
    for t in range(1, steps + 1):
        for k in range(2):
            h = np.array([hs[k]["h0"], hs[k]["h1"]])
            thetas[k] = thetas[k] + 0.01 * (-2.0 * h * thetas[k])  # the gradient of Q^
            best = max(best, _q(thetas[k]))
        if pbt and t % ready == 0:
            bottom, top = quantiles({k: _q(thetas[k]) for k in range(2)}, 0.5)
            for k in range(2):
                source = exploit_source(k, bottom, top, rng)
                if source is not None:
                    thetas[k] = thetas[source].copy()
                    hs[k] = explore(hs[source], mutations, 0.25, rng)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pbt_reaches_the_toys_optimum_where_fixed_settings_cannot(seed: int) -> None:
    assert _toy(seed, pbt=False) <= 1.2 - 0.81 + 1e-9  # each h leaves one coordinate at 0.9
    assert _toy(seed, pbt=True) > 1.19


# ---------------------------------------------------------------------- the config section

PBT = ["population.size=4", "population.mutations={ppo.lr: {low: 1e-5, high: 1e-2, log: true}}"]


def test_population_section_is_optional_and_checked() -> None:
    cfg, _ = load_config("cartpole-ppo", [])
    assert "population" not in cfg.sections
    cfg, _ = load_config("cartpole-ppo", PBT)
    assert cfg.section("population").size == 4


F = "population."
ERRORS = [
    (F + "quantile_fraction=0.6", r"population.quantile_fraction: must be in \(0, 0.5\]"),
    (F + "quantile_fraction=0", r"population.quantile_fraction: must be in \(0, 0.5\]"),
    (F + "mutations={ppo.epochs: [1, 2]}", "mutations.ppo.epochs: algo ppo does not let"),
    (F + "mutations={ppo.gamma: [0.9, 1.5]}", r"mutations.ppo.gamma: ppo.gamma: must be in \(0, 1"),
    (F + "mutations={ppo.lr: {low: 1, high: 0.1}}", "mutations.ppo.lr: .* is not a range"),
    (F + "initial={ppo.lr: [1e-3]}", "initial.ppo.lr: expected a list of 4 values"),
    (F + "size=1", "population.size: must be >= 2"),
    (F + "metric=eval/return_mean", "eval.workers=0"),
]


@pytest.mark.parametrize(("override", "message"), ERRORS)
def test_population_config_errors_name_the_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole-ppo", [*PBT, override])


def test_an_algorithm_without_mutable_settings_has_no_population() -> None:
    with pytest.raises(ConfigError, match="declares no setting that may change"):
        load_config("cartpole-dqn", PBT)


def test_a_population_beyond_the_cpu_budget_is_refused_naming_what_to_lower() -> None:
    cfg, _ = load_config("cartpole-pbt", [])
    workers = member_workers(cfg)
    assert [w.name for w in workers] == ["trainer-0", "actor-0"]  # inline inference
    check_cpu_budget(4, workers, 2, "this machine")  # 8 processes on 2 CPUs: allowed
    with pytest.raises(ConfigError, match=r"population.size=5: 5 members of 2 workers") as e:
        check_cpu_budget(5, workers, 2, "this machine")
    assert "workers.inference=inline" in e.value.fix
