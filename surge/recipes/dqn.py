"""The DQN family as a plug-in (surge/recipes/base.py): DQN (Mnih et al. 2015) with double
Q-learning, dueling heads, n-step returns, prioritised replay and Ape-X's per-env
exploration, on the replay graph (surge/recipes/replay.py). The trainer runs the DQN learner
(surge/learners/dqn.py); actors and policy workers act greedily on the Q-network
(models/q_policy.py: numpy for MLPs) and the actors explore epsilon-greedily
(algos/exploration.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError, UserError
from surge.models.q_policy import count_q_params, q_params
from surge.recipes.base import Algorithm
from surge.recipes.replay import (
    check_replay,
    describe_replay,
    probe,
    replay_context,
    replay_graph,
    replay_setup,
)
from surge.streams.sample import Outputs
from surge.tracking.checkpoint import load_checkpoint
from surge.workers.base import RunContext
from surge.workers.graph import Graph


class DQNFamily(Algorithm):
    name = "dqn"
    warm_module = "surge.learners.dqn"

    def validate(self, cfg: ExperimentConfig) -> None:
        check_replay(cfg, cfg.dqn.nstep)
        d = cfg.dqn
        for field, value, ok, rule in [
            ("dqn.lr", d.lr, d.lr > 0, "> 0"),
            ("dqn.gamma", d.gamma, 0 < d.gamma <= 1, "in (0, 1]"),
            ("dqn.nstep", d.nstep, d.nstep >= 1, ">= 1"),
            ("dqn.target_every", d.target_every, d.target_every >= 1, ">= 1"),
            ("dqn.target_tau", d.target_tau, 0 < d.target_tau <= 1, "in (0, 1]"),
            ("dqn.epsilon_fraction", d.epsilon_fraction, 0 <= d.epsilon_fraction <= 1, "in [0, 1]"),
            ("dqn.apex_base", d.apex_base, 0 < d.apex_base < 1, "in (0, 1)"),
        ]:
            if not ok:
                raise ConfigError(f"{field}: must be {rule}, got {value!r}", f"set {field} {rule}")
        if cfg.model.core != "none":
            raise ConfigError(
                f"model.core={cfg.model.core}: recurrent Q-networks (R2D2) are not built yet",
                "set model.core=none",
            )

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        env = probe(cfg)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"algo: dqn needs Discrete actions; env.id={cfg.env.id} has {env.action_space}",
                "use algo=sac for Box actions (or algo=ppo)",
            )
        n_actions = int(env.action_space.n)
        if checkpoint is not None:
            _check_fit(cfg, env.observation_space, n_actions, checkpoint)
        outputs = q_outputs(cfg, n_actions)
        d = cfg.dqn
        setup = replay_setup(cfg, env, d.gamma, d.nstep, outputs, run_dir, checkpoint)
        n_params = count_q_params(env.observation_space, n_actions, cfg.model, cfg.dqn.dueling)
        return replay_context(
            cfg, env, run_dir, checkpoint, n_params, setup,
            acting="surge.models.q_policy:q_policy",
            explore="surge.algos.exploration:EpsilonGreedy",
            kind="dqn",
        )  # fmt: skip

    def graph(self, ctx: RunContext) -> Graph:
        n_actions = int(ctx.env.action_space.n)  # type: ignore[attr-defined]
        outputs = q_outputs(ctx.cfg, n_actions)
        return replay_graph(ctx, "surge.learners.dqn:build", ctx.cfg.dqn.threads, outputs)

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        d = ctx.cfg.dqn
        kind = ("double " if d.double else "") + ("dueling " if d.dueling else "") + "DQN"
        explore = (
            f"epsilon {d.epsilon_start:g} -> {d.epsilon_end:g} over "
            f"{d.epsilon_fraction:g} of the run"
            if d.exploration == "linear"
            else "Ape-X epsilons per env"
        )
        return describe_replay(ctx, graph, f"torch ({kind}, {d.nstep}-step, {explore})")

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        from surge.evaluation.checkpoint import evaluate_with, parse_options

        kinds = {"episodes": int, "deterministic": bool, "seed": int}
        result = evaluate_with(
            run_dir, "surge.models.q_policy:q_policy", _published,
            **parse_options(options, kinds), video=video,
        )  # fmt: skip
        return (
            f"{result['episodes']} episodes with policy version {result['policy_version']} "
            f"({result['env_steps']:,} env steps): return {result['return_mean']:.1f} "
            f"+- {result['return_std']:.1f}, length {result['length_mean']:.1f}"
        )


DQN = DQNFamily()


def q_outputs(cfg: ExperimentConfig, n_actions: int) -> Outputs:
    """The acting policy's outputs: every Q-value, for prioritised replay's first
    priorities (models/q_policy.py); none otherwise."""
    shape: tuple[int, ...] = (n_actions,)
    return {"q": ("<f4", shape)} if cfg.replay.prioritized else {}


def _check_fit(cfg: ExperimentConfig, obs_space: Any, n_actions: int, checkpoint: Path) -> None:
    """The checkpoint's Q-network fits the one this config builds (MLPs: names and shapes,
    without torch)."""
    saved = load_checkpoint(checkpoint).get("model", {})
    want = dict(q_params(obs_space, n_actions, cfg.model, cfg.dqn.dueling))
    if not want:
        return  # a CNN: the learner's load_state_dict says what differs
    have = {name: tuple(np.shape(v)) for name, v in saved.items()}
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()))
        raise UserError(
            f"{checkpoint} does not fit the Q-network this config builds: parameters differ: "
            f"{', '.join(f'{n} {s}' for n, s in diff[:6])}",
            "resume with the env and model settings the run was trained with",
        )


def _published(cfg: ExperimentConfig, env: Any, state: dict[str, Any]) -> np.ndarray:
    """The flat vector a checkpoint's Q-network publishes (`QPolicy` loads it)."""
    import torch

    from surge.models.q_network import QNetwork
    from surge.models.weights import model_to_flat

    net = QNetwork(env.observation_space, int(env.action_space.n), cfg.model, cfg.dqn.dueling)
    net.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})
    return model_to_flat(net)
