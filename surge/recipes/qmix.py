"""Value decomposition as a plug-in (surge/recipes/base.py): QMIX (Rashid et al. 2018), VDN
(Sunehag et al. 2018) and independent Q-learning (`qmix.mixer: qmix | vdn | none`) for
cooperative multi-agent envs, on the replay graph (surge/recipes/replay_graph.py).

The agents share one Q-network (the model section's; the presets: a GRU, then a ReLU layer,
as EPyMARL's RNN agent) and tell themselves apart by their ids (`env.multiagent.agent_id`).
Actors and policy workers act greedily on it (models/q_policy.py `agent_q_policy`, numpy
for MLPs, the recurrent state carried per agent row) and the actors explore epsilon-greedily
(algos/exploration.py `TeamEpsilonGreedy`). The replay is the episode store
(algos/episode_store.py): an item is one env's whole episode, every agent of every step and
the team reward, padded to the episode limit. The trainer runs the learner of
surge/learners/qmix.py, whose maths are surge/algos/value_mixing.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surge.algos.transition_store import ReplaySetup, Spec, replay_of
from surge.config.schema import MULTI_AGENT_PREFIXES, ExperimentConfig
from surge.envs.make import probe_policies
from surge.envs.pettingzoo import make_parallel_env
from surge.envs.spaces import EnvInfo
from surge.errors import ConfigError
from surge.models.images import choose_encoder
from surge.models.inputs import GLOBAL_STATE
from surge.models.q_policy import agent_view, count_q_params, q_params
from surge.recipes.base import Algorithm
from surge.recipes.checkpoint_fit import params_misfit, require_fit, torch_flat
from surge.recipes.replay_graph import describe_replay, replay_context, replay_graph, shard_actors
from surge.tracking.checkpoint import load_checkpoint
from surge.workers.base import RunContext
from surge.workers.graph import Graph

ACTING = "surge.models.q_policy:agent_q_policy"
KIND = "qmix"


class QMIXFamily(Algorithm):
    name = "qmix"
    warm_module = "surge.learners.qmix"

    def validate(self, cfg: ExperimentConfig) -> None:
        q, r = cfg.qmix, cfg.replay
        if not cfg.env.id.startswith(MULTI_AGENT_PREFIXES):
            raise ConfigError(
                f"env.id={cfg.env.id!r}: algo qmix trains the agents of a multi-agent env",
                "use a PettingZoo or Level-Based Foraging id (pettingzoo:<module>, "
                "lbforaging:<id>), or algo=dqn for a single-agent env",
            )
        if cfg.policies:
            raise ConfigError(
                "policies: algo qmix trains one Q-network shared by the agents",
                "remove policies and policy_mapping (agent ids tell the agents apart)",
            )
        if r.prioritized:
            raise ConfigError(
                "replay.prioritized=true: algo qmix samples whole episodes uniformly",
                "set replay.prioritized=false",
            )
        if q.mixer == "qmix" and cfg.env.multiagent.global_state == "none":
            raise ConfigError(
                "qmix.mixer=qmix conditions its mixing network on the env's global state, and "
                "env.multiagent.global_state=none gives it none",
                "set env.multiagent.global_state=auto (the env's state(), or the agents' "
                "observations concatenated) or env, or qmix.mixer=vdn (no state needed)",
            )
        if q.epsilon_finish > q.epsilon_start:
            raise ConfigError(
                f"qmix.epsilon_finish={q.epsilon_finish} is above qmix.epsilon_start="
                f"{q.epsilon_start}",
                "exploration falls: set epsilon_finish <= epsilon_start",
            )
        if r.shards > cfg.workers.actors:
            raise ConfigError(
                f"replay.shards={r.shards} with workers.actors={cfg.workers.actors}: each shard "
                "takes the episodes of its own actors",
                f"set replay.shards to at most {cfg.workers.actors}",
            )

    def prepare(
        self, cfg: ExperimentConfig, run_dir: Path | None, checkpoint: Path | None
    ) -> RunContext:
        env = next(iter(probe_policies(cfg).values()))
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"algo qmix needs Discrete actions; env.id={cfg.env.id} has {env.action_space}",
                "use algo=ppo (MAPPO settings: docs/multiagent.md) for Box actions",
            )
        if cfg.qmix.mixer == "qmix" and GLOBAL_STATE not in env.obs:
            raise ConfigError(  # validate saw the setting; this is an env that has no state
                f"env.id={cfg.env.id}: its rows have no global state for QMIX's mixer",
                "set env.multiagent.global_state=auto, or qmix.mixer=vdn",
            )
        agent_space = agent_view(env.observation_space)
        choose_encoder(agent_space, cfg.model)  # an encoder fits the agents' observations
        n_actions = int(env.action_space.n)
        if checkpoint is not None:
            want = q_params(agent_space, n_actions, cfg.model, False)
            if want:  # else a CNN: the learner's load_state_dict says what differs
                saved = load_checkpoint(checkpoint).get("model", {})
                require_fit(checkpoint, "agents' Q-network", params_misfit(want, saved))
        setup = episode_setup(cfg, env)
        n_params = count_q_params(agent_space, n_actions, cfg.model, False)
        return replay_context(
            cfg, env, run_dir, checkpoint, n_params, setup, acting=ACTING,
            explore="surge.algos.exploration:TeamEpsilonGreedy", kind=KIND,
        )  # fmt: skip

    def graph(self, ctx: RunContext) -> Graph:
        return replay_graph(ctx, "surge.learners.qmix:build", ctx.cfg.qmix.threads, {})

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        q, model = ctx.cfg.qmix, ctx.cfg.model
        mixer = {"qmix": "QMIX", "vdn": "VDN", "none": "independent Q-learning"}[q.mixer]
        agent = f"a {model.core.upper()} core" if model.core != "none" else "feed-forward"
        spec = replay_of(ctx).shards[0]
        limit = spec.episode_limit if spec else 0
        lines = describe_replay(
            ctx, graph,
            f"torch ({mixer}, agents {agent}, epsilon {q.epsilon_start:g} -> "
            f"{q.epsilon_finish:g} over {q.epsilon_anneal_steps:,} steps)",
        )  # fmt: skip
        lines[1] = (
            f"replay: {q.buffer_episodes:,} episodes of up to {limit} steps in "
            f"{ctx.cfg.replay.shards} shard(s), batches of {q.batch_episodes}, "
            f"{ctx.cfg.replay.ratio:g} agent-steps trained per agent-step inserted"
        )
        return lines

    def evaluate(self, run_dir: Path, options: list[str], video: bool) -> str:
        from surge.evaluation.checkpoint import evaluate_command

        return evaluate_command(run_dir, ACTING, _published, options, video)


QMIX = QMIXFamily()


def episode_limit(cfg: ExperimentConfig) -> int:
    """`qmix.episode_limit`, or the env's time limit (a ConfigError when it has none)."""
    if cfg.qmix.episode_limit:
        return cfg.qmix.episode_limit
    env = make_parallel_env(cfg.env)
    try:
        limit = getattr(env, "max_episode_steps", None) or getattr(
            getattr(env, "unwrapped", env), "max_episode_steps", None
        )
    finally:
        env.close()
    if not limit:
        raise ConfigError(
            f"qmix.episode_limit=0 and env.id={cfg.env.id} states no time limit "
            "(max_episode_steps): the episode replay pads episodes to the longest",
            "set qmix.episode_limit to the env's longest episode, in steps",
        )
    return int(limit)


def episode_setup(cfg: ExperimentConfig, env: EnvInfo) -> ReplaySetup:
    """Each shard's episode store: its actors' envs, `qmix.buffer_episodes` shared out."""
    r, w, q = cfg.replay, cfg.workers, cfg.qmix
    agents, limit = env.rows_per_env, episode_limit(cfg)
    # Sampling starts at min_size agent-steps; the store samples only finished episodes, so
    # by then every env must have had room to finish one (else actors and replay wait on
    # each other).
    least = limit * agents * cfg.total_envs
    if r.min_size < least:
        raise ConfigError(
            f"replay.min_size={r.min_size} agent-steps: sampling could start before an episode "
            f"has finished ({cfg.total_envs} envs x {agents} agents x episodes of up to {limit} "
            f"steps = {least})",
            f"raise replay.min_size to at least {least}",
        )
    specs = []
    for s in range(r.shards):
        columns = len(shard_actors(cfg, s)) * w.ring_size * w.envs_per_group * agents
        episodes = max(q.buffer_episodes // r.shards, q.batch_episodes)
        specs.append(
            Spec(
                columns=columns,
                length=limit,
                obs={k: (a.shape, a.dtype.str) for k, a in env.obs.items()},
                action=(env.action.shape, env.action.dtype.str),
                segment=r.segment_len,
                store="episodes",
                agents=agents,
                episodes=episodes,
                episode_limit=limit,
                trained=limit * agents,
            )  # fmt: skip
        )
    return ReplaySetup(tuple(specs), q.gamma, 1, restored=False, batch=q.batch_episodes)


def _published(cfg: ExperimentConfig, env: Any, state: dict[str, Any]) -> np.ndarray:
    """The flat vector a checkpoint's agents' Q-network publishes (`QPolicy` loads it)."""
    from surge.models.q_network import QNetwork

    space = agent_view(env.observation_space)
    net = QNetwork(space, int(env.action_space.n), cfg.model, False)
    return torch_flat(net, state["model"])
