"""The `psro` section: Policy-Space Response Oracles on a two-player zero-sum OpenSpiel game.

A config with a `psro` section trains a population of best responses (surge/population/
psro.py, docs/population.md): the rest of the config is the oracle, one surge training run
per iteration of `env.id=openspiel:<game>` against the meta-strategy of the population so
far. Like `population`, the section is optional: its presence makes the run a PSRO run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from surge.config.rules import AT_LEAST_ONE, ruled
from surge.errors import ConfigError

PSRO = "psro"
"""The section's name."""


@dataclass
class PSROConfig:
    """Policy-Space Response Oracles (docs/population.md)."""

    iterations: int = ruled(20, AT_LEAST_ONE)
    """Best responses trained, one per iteration; `total_env_steps` is each one's budget."""

    meta_solver: Literal["nash", "prd", "uniform"] = "nash"
    """The meta-strategies over the population: `nash`, an exact Nash equilibrium of the
    zero-sum meta-game (a linear program); `prd`, OpenSpiel's projected replicator dynamics
    (approximate, `prd_iterations` steps); `uniform`, every member alike (fictitious
    play)."""

    prd_iterations: int = ruled(50_000, AT_LEAST_ONE)
    """Steps of the replicator dynamics per meta-game solve."""


def psro_of(cfg: Any) -> PSROConfig | None:
    """The config's psro section, or None when it trains one run."""
    section = cfg.sections.get(PSRO)
    return section if isinstance(section, PSROConfig) else None


def check_psro(cfg: Any) -> None:
    """What a PSRO run needs of the rest of the config: an OpenSpiel game, and an oracle whose
    policy the loop reads back (PPO's family: its greedy actions are the new member)."""
    if psro_of(cfg) is None:
        return
    if not cfg.env.id.startswith("openspiel:"):
        raise ConfigError(
            f"env.id={cfg.env.id}: psro plays an OpenSpiel game",
            "set env.id=openspiel:<game>, e.g. openspiel:kuhn_poker",
        )
    if cfg.algo not in ("ppo", "appo"):
        raise ConfigError(
            f"algo={cfg.algo}: psro's best responses are trained by ppo or appo",
            "set algo=ppo",
        )
    if "population" in cfg.sections:
        raise ConfigError(
            "psro and population: a run is one kind of population",
            "remove one of the two sections",
        )
