"""Recipes: one per algorithm family, each turns a config into the experiment's graph.

A recipe is `(cfg, env, n_params) -> Graph` (surge/workers/graph.py). The runtimes launch
whatever graph they are given, so a new shape of experiment is a new recipe (and, if it needs
them, new worker kinds registered with `register_worker_kind`), never a runtime edit.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from surge.config.schema import ExperimentConfig
from surge.envs.spaces import EnvInfo
from surge.workers.base import PolicyContext
from surge.workers.graph import Graph

Recipe = Callable[[ExperimentConfig, EnvInfo, int], Graph]

RECIPES: dict[str, str] = {
    "ppo": "surge.recipes.ppo:ppo_graph",
    "appo": "surge.recipes.ppo:ppo_graph",  # the same graph; the trainer's loss differs
    "grpo": "surge.recipes.grpo:grpo_graph",
}
"""`algo` -> `module:function` of its recipe."""


def recipe_for(cfg: ExperimentConfig) -> Recipe:
    module, _, function = RECIPES[cfg.algo].partition(":")
    recipe: Recipe = getattr(importlib.import_module(module), function)
    return recipe


def build_graph(
    cfg: ExperimentConfig,
    env: EnvInfo,
    n_params: int,
    policies: dict[str, PolicyContext] | None = None,
) -> Graph:
    """The graph of this config's algorithm family; `policies`: every policy's env view and
    size in a multi-agent run with several (PPO's recipe takes them)."""
    recipe = recipe_for(cfg)
    if policies and len(policies) > 1:
        return recipe(cfg, env, n_params, policies=policies)  # type: ignore[call-arg]
    return recipe(cfg, env, n_params)
