"""SAC as a plug-in (surge/recipes/base.py): soft actor-critic (Haarnoja et al. 2018) for Box
actions, on the replay graph of the DQN family (surge/recipes/replay_graph.py). The trainer runs
the SAC learner (surge/learners/sac.py); actors and policy workers sample the actor's
squashed Gaussian (models/sac_policy.py: numpy for MLPs), and the actors act uniformly at
random until learning starts (algos/exploration.py `RandomStart`). Defaults follow CleanRL's
sac_continuous_action.py (surge/config/replay_schema.py `SACConfig`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig
from surge.devices import cpu_bfloat16, role_device
from surge.errors import ConfigError
from surge.models.sac_policy import count_sac_params, sac_params
from surge.recipes.base import Algorithm
from surge.recipes.checkpoint_fit import params_misfit, require_fit, torch_flat
from surge.recipes.replay_graph import (
    check_replay,
    describe_replay,
    probe,
    replay_context,
    replay_graph,
    replay_setup,
)
from surge.tracking.checkpoint import load_checkpoint
from surge.workers.base import RunContext
from surge.workers.graph import Graph

ACTING = "surge.models.sac_policy:sac_policy"


class SACAlgorithm(Algorithm):
    name = "sac"
    reward_stage = True
    warm_module = "surge.learners.sac"

    def validate(self, cfg: ExperimentConfig) -> None:
        check_replay(cfg)
        if cfg.model.core != "none":
            raise ConfigError(
                f"model.core={cfg.model.core}: SAC with a recurrent core is not built",
                "set model.core=none",
            )
        # settings the SAC learner would otherwise ignore without a word
        if cfg.replay.prioritized:
            raise ConfigError(
                "replay.prioritized: SAC samples its replay uniformly (CleanRL)",
                "set replay.prioritized=false",
            )
        if cfg.model.normalize_obs:
            raise ConfigError(
                "model.normalize_obs: SAC's networks read the raw observations",
                "set model.normalize_obs=false",
            )

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        env = probe(cfg, run=run_dir is not None)
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(
                f"algo: sac needs Box actions; env.id={cfg.env.id} has {space}",
                "use algo=dqn for Discrete actions (or algo=ppo)",
            )
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ConfigError(
                f"algo: sac squashes actions into the Box's bounds; env.id={cfg.env.id} has "
                f"{space}, unbounded",
                "bound the action space (a gymnasium.ActionWrapper), or use algo=ppo",
            )
        if checkpoint is not None:
            _check_fit(cfg, env.observation_space, space, checkpoint)
        setup = replay_setup(cfg, env, cfg.sac.gamma, 1, {}, run_dir, checkpoint)
        n_params = count_sac_params(env.observation_space, space, cfg.model)
        return replay_context(
            cfg, env, run_dir, checkpoint, n_params, setup,
            acting=ACTING,
            explore="surge.algos.exploration:RandomStart",
            kind="sac",
        )  # fmt: skip

    def graph(self, ctx: RunContext) -> Graph:
        return replay_graph(ctx, "surge.learners.sac:build", ctx.cfg.sac.threads, {})

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        s = ctx.cfg.sac
        if s.autotune:
            entropy = "-dim(A)" if s.target_entropy is None else f"{s.target_entropy:g}"
            temperature = f"alpha tuned to entropy {entropy}"
        else:
            temperature = f"alpha {s.alpha:g}"
        # as the learner decides (learners/sac.py), on this machine: a local run's trainer's
        device = role_device(ctx.cfg.workers.trainer_device, "workers.trainer_device")
        bf16 = device == "cpu" and cpu_bfloat16(s.precision)
        products = ", hidden-layer products in bfloat16" if bf16 else ""
        learner = (
            f"torch (SAC, twin Q, {temperature}, policy every {s.policy_every} updates, "
            f"random actions for the first {ctx.cfg.replay.min_size:,} steps{products})"
        )
        return describe_replay(ctx, graph, learner)  # it says how a resumed run's replay starts

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        from surge.evaluation.checkpoint import evaluate_command

        return evaluate_command(run_dir, ACTING, _published, options, video)


SAC = SACAlgorithm()


def _check_fit(cfg: ExperimentConfig, obs_space: Any, action_space: Any, checkpoint: Path) -> None:
    """The checkpoint's actor fits the one this config builds (MLPs: names and shapes,
    without torch)."""
    state = load_checkpoint(checkpoint)
    if state.get("kind") != "sac":
        return  # replay_context says whose it is
    want = sac_params(obs_space, action_space, cfg.model)
    if want:  # else a CNN: the learner's load_state_dict says what differs
        require_fit(checkpoint, "actor", params_misfit(want, state.get("actor", {})))


def _published(cfg: ExperimentConfig, env: Any, state: dict[str, Any]) -> np.ndarray:
    """The flat vector a checkpoint's actor publishes (`SACPolicy` loads it)."""
    from surge.models.sac_network import SACActor

    actor = SACActor(env.observation_space, env.action_space, cfg.model)
    return torch_flat(actor, state["actor"])
