"""Recipes: each algorithm as one plug-in (surge/recipes/base.py `Algorithm`), with the graph
of workers and streams a config of it runs as.

The runtimes launch whatever graph they are given, so a new shape of experiment is a new
algorithm, or a recipe of its own (`controller.train(cfg, recipe=...)`: a function from the
run's context to a graph, e.g. the algorithm's graph plus a worker of a new kind registered
with `register_worker_kind`), never a runtime edit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from surge.config.algorithms import load_algorithm
from surge.config.schema import ExperimentConfig
from surge.recipes.base import Algorithm
from surge.workers.base import RunContext
from surge.workers.graph import Graph

Recipe = Callable[[RunContext], Graph]


def algorithm_of(cfg: ExperimentConfig) -> Algorithm:
    """The plug-in of `cfg.algo` (surge/config/algorithms.py)."""
    return cast(Algorithm, load_algorithm(cfg.algo))


def build_graph(ctx: RunContext) -> Graph:
    """The graph of the run `ctx` prepares, as its algorithm lays it out."""
    return algorithm_of(ctx.cfg).graph(ctx)
