"""The DQN family as a plug-in (surge/recipes/base.py): DQN (Mnih et al. 2015) with double
Q-learning, dueling heads, n-step returns, prioritised replay and Ape-X's per-env
exploration, on the replay graph (surge/recipes/replay_graph.py). The trainer runs the DQN learner
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
from surge.errors import ConfigError
from surge.learners.q_backends import q_backend_name
from surge.models.q_policy import count_q_params, q_params
from surge.models.recurrent_state import state_size
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
from surge.streams.sample import Outputs
from surge.tracking.checkpoint import load_checkpoint
from surge.workers.base import RunContext
from surge.workers.graph import Graph

ACTING = "surge.models.q_policy:q_policy"


class DQNFamily(Algorithm):
    name = "dqn"
    reward_stage = True
    warm_module = "surge.learners.dqn"

    def validate(self, cfg: ExperimentConfig) -> None:
        d = cfg.dqn
        check_replay(cfg, d.nstep, _trained(cfg))
        if cfg.model.core != "none":  # R2D2: sequences
            _check_sequences(cfg)

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        env = probe(cfg, run=run_dir is not None)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"algo: dqn needs Discrete actions; env.id={cfg.env.id} has {env.action_space}",
                "use algo=sac for Box actions (or algo=ppo)",
            )
        n_actions = int(env.action_space.n)
        q_backend_name(cfg, env)  # model.backend=numpy on a model it does not cover: say so
        if checkpoint is not None:
            _check_fit(cfg, env.observation_space, n_actions, checkpoint)
        outputs = q_outputs(cfg, n_actions)
        d, recurrent = cfg.dqn, cfg.model.core != "none"
        setup = replay_setup(
            cfg, env, d.gamma, d.nstep, outputs, run_dir, checkpoint,
            sequence=d.sequence_len if recurrent else 0,
            trained=_trained(cfg),
            core_size=state_size(cfg.model),
        )  # fmt: skip
        n_params = count_q_params(env.observation_space, n_actions, cfg.model, cfg.dqn.dueling)
        return replay_context(
            cfg, env, run_dir, checkpoint, n_params, setup,
            acting=ACTING,
            explore="surge.algos.exploration:EpsilonGreedy",
            kind="dqn",
        )  # fmt: skip

    def graph(self, ctx: RunContext) -> Graph:
        n_actions = int(ctx.env.action_space.n)  # type: ignore[attr-defined]
        outputs = q_outputs(ctx.cfg, n_actions)
        learner = "r2d2" if ctx.cfg.model.core != "none" else "dqn"
        return replay_graph(ctx, f"surge.learners.{learner}:build", ctx.cfg.dqn.threads, outputs)

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        d, model = ctx.cfg.dqn, ctx.cfg.model
        kind = ("double " if d.double else "") + ("dueling " if d.dueling else "") + "DQN"
        if model.core != "none":
            kind = (
                f"R2D2: {kind} with a {model.core.upper()} core, sequences of "
                f"{d.sequence_len} (burn-in {d.burn_in})"
                + (", value rescaling" if d.value_rescale else "")
            )
        explore = (
            f"epsilon {d.epsilon_start:g} -> {d.epsilon_end:g} over "
            f"{d.epsilon_fraction:g} of the run"
            if d.exploration == "linear"
            else "Ape-X epsilons per env"
        )
        backend = q_backend_name(ctx.cfg, ctx.env)
        return describe_replay(ctx, graph, f"{backend} ({kind}, {d.nstep}-step, {explore})")

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        from surge.evaluation.checkpoint import evaluate_command

        return evaluate_command(run_dir, ACTING, _published, options, video)


DQN = DQNFamily()


def _trained(cfg: ExperimentConfig) -> int:
    """Transitions one sampled item trains: 1, or a sequence's steps past its burn-in."""
    d = cfg.dqn
    return d.sequence_len - d.burn_in if cfg.model.core != "none" else 1


def _check_sequences(cfg: ExperimentConfig) -> None:
    """R2D2's sequence settings (ConfigError naming the field)."""
    d, segment = cfg.dqn, cfg.replay.segment_len
    if d.sequence_len < segment or d.sequence_len % segment:
        raise ConfigError(
            f"dqn.sequence_len={d.sequence_len}: sequences start at every segment's first "
            f"step, so the length must be a multiple of replay.segment_len={segment}",
            f"set dqn.sequence_len to a multiple of {segment} (R2D2: 80 with segments of 40)",
        )
    if not 0 <= d.burn_in < d.sequence_len - d.nstep:
        raise ConfigError(
            f"dqn.burn_in={d.burn_in}: a sequence of {d.sequence_len} steps with {d.nstep}-step "
            "returns would leave no step to train",
            f"set dqn.burn_in in [0, {d.sequence_len - d.nstep})",
        )


def q_outputs(cfg: ExperimentConfig, n_actions: int) -> Outputs:
    """The acting policy's outputs: every Q-value, for prioritised replay's first
    priorities (models/q_policy.py); none otherwise."""
    shape: tuple[int, ...] = (n_actions,)
    return {"q": ("<f4", shape)} if cfg.replay.prioritized else {}


def _check_fit(cfg: ExperimentConfig, obs_space: Any, n_actions: int, checkpoint: Path) -> None:
    """The checkpoint's Q-network fits the one this config builds (MLPs: names and shapes,
    without torch)."""
    saved = load_checkpoint(checkpoint).get("model", {})
    want = q_params(obs_space, n_actions, cfg.model, cfg.dqn.dueling)
    if want:  # else a CNN: the learner's load_state_dict says what differs
        require_fit(checkpoint, "Q-network", params_misfit(want, saved))


def _published(cfg: ExperimentConfig, env: Any, state: dict[str, Any]) -> np.ndarray:
    """The flat vector a checkpoint's Q-network publishes (`QPolicy` loads it)."""
    from surge.models.q_network import QNetwork

    net = QNetwork(env.observation_space, int(env.action_space.n), cfg.model, cfg.dqn.dueling)
    return torch_flat(net, state["model"])
