"""Multi-agent envs as rows: each agent of each env is one row of its policy's batch.

A PettingZoo parallel env with agents `a_0 .. a_{A-1}` (`possible_agents`) becomes A rows per
env, so a group of G envs is G x A rows, row `i * A + j` being agent j of env i. To the rest
of surge (actor, inference and sample streams, learners) a row is what an env is in a
single-agent run: one observation, one action, one reward per step. That is how one policy
is shared by many agents, and how all agents of all an actor's envs go to the policy in one
inference request.

One row's observation is a Dict: the agent's own observation (field `obs`, or the keys of
the agent's Dict observation, e.g. `observation` and `action_mask`), plus, if configured
(`env.multiagent`), `agent_id` (one-hot of j) and `global_state` (the env's global state, the same
for all its agents: a centralised critic's input).

Agents that leave an episode early (die) or join late are rows that are inactive for a
while: `active[row]` says whether the row's agent is in the episode for the observation now
in its slot. An inactive row's steps are recorded as terminated with reward 0, so no return
flows across the gap, and the learners leave them out of the loss (the sample stream's
`active` field). An episode ends when the env has no agents left.

Reporting: the episode return of an env is the sum over its agents of their rewards (a team
return), reported once per episode on the env's first row (`game_over` there only), so the
trainer counts each env episode once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import EnvConfig
from surge.envs.group import action_converter
from surge.envs.make import EnvInfo, check_observation
from surge.envs.pettingzoo import make_parallel_env
from surge.envs.spaces import action_spec, flatten_obs_space, split_obs
from surge.errors import EnvSpecError

AGENT_ID = "agent_id"
STATE = "global_state"


@dataclass(frozen=True)
class AgentRows:
    """How one env's agents map to rows, and what a row observes."""

    agents: tuple[str, ...]
    """`possible_agents`, in row order."""
    agent_space: gym.Space[Any]
    """One agent's own observation space (the same for every agent)."""
    action_space: gym.Space[Any]
    obs_space: gym.spaces.Dict
    """A row's observation: the agent's fields, `agent_id` and `global_state` if configured."""
    state: str
    """Where `global_state` comes from: "env" (`env.state()`), "concat", or "" (no such field)."""

    @property
    def count(self) -> int:
        return len(self.agents)


def agent_rows(env: Any, cfg: EnvConfig) -> AgentRows:
    """The row layout of a parallel env under `cfg.multiagent`; raises EnvSpecError for
    agents whose spaces differ (one shared policy needs one observation and action space)."""
    agents = tuple(env.possible_agents)
    if not agents:
        raise EnvSpecError(f"env {cfg.id!r} has no possible_agents", "")
    obs_spaces = {a: env.observation_space(a) for a in agents}
    act_spaces = {a: env.action_space(a) for a in agents}
    first = agents[0]
    for a in agents[1:]:
        for what, spaces in (("observation", obs_spaces), ("action", act_spaces)):
            if spaces[a] != spaces[first]:
                raise EnvSpecError(
                    f"env {cfg.id!r}: agent {a!r} has {what} space {spaces[a]}, agent "
                    f"{first!r} has {spaces[first]}; the agents of one policy share both",
                    "pad the spaces to one shape (SuperSuit's pad_observations / "
                    "pad_action_space) or wrap the env so that its agents agree",
                )
    agent_space = obs_spaces[first]
    fields = _agent_fields(agent_space)
    ma = cfg.multiagent
    if ma.agent_id:
        fields[AGENT_ID] = gym.spaces.Box(0.0, 1.0, (len(agents),), np.float32)
    state = _state_source(env, cfg, agent_space)
    if state:
        shape = _state_shape(env, state, agents, agent_space)
        fields[STATE] = gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
    return AgentRows(agents, agent_space, act_spaces[first], gym.spaces.Dict(fields), state)


def _agent_fields(space: gym.Space[Any]) -> dict[str, gym.Space[Any]]:
    fields = dict(flatten_obs_space(space))
    clash = {AGENT_ID, STATE} & set(fields)
    if clash:
        raise EnvSpecError(
            f"the agents' observations already have the field(s) {sorted(clash)}, which "
            "surge adds for env.multiagent.agent_id / global_state",
            "rename those keys in the env, or wrap it",
        )
    return fields


def _state_source(env: Any, cfg: EnvConfig, agent_space: gym.Space[Any]) -> str:
    choice = cfg.multiagent.global_state
    if choice == "none":
        return ""
    if choice in ("env", "auto"):
        if _env_state_shape(env) is not None:
            return "env"
        if choice == "env":
            raise EnvSpecError(
                f"env.multiagent.global_state=env, but env {cfg.id!r} has no state()",
                "use global_state=concat (the agents' observations concatenated)",
            )
    if not isinstance(agent_space, gym.spaces.Box):
        raise EnvSpecError(
            f"env.multiagent.global_state={choice}: concatenating the agents' observations "
            f"needs Box observations, env {cfg.id!r} gives {agent_space}",
            "use an env with state(), or global_state=none",
        )
    return "concat"


def _env_state_shape(env: Any) -> tuple[int, ...] | None:
    """The shape of `env.state()`, or None if the env does not implement it (PettingZoo's
    base classes raise NotImplementedError)."""
    space = getattr(env, "state_space", None)
    if space is not None:
        return tuple(space.shape)
    try:
        env.reset(seed=0)
        return tuple(np.shape(env.state()))
    except NotImplementedError:
        return None


def _state_shape(
    env: Any, source: str, agents: tuple[str, ...], agent_space: gym.Space[Any]
) -> tuple[int, ...]:
    if source == "concat":
        return (len(agents) * math.prod(agent_space.shape or ()),)
    shape = _env_state_shape(env)
    assert shape is not None
    return shape


class MultiAgentGroup:
    """G PettingZoo parallel envs as G x A rows, with the env group contract of `EnvGroup`
    (surge/envs/group.py) plus `active` [rows]: the row's agent is in its episode."""

    def __init__(self, cfg: EnvConfig, seeds: list[int], obs_out: dict[str, np.ndarray]) -> None:
        self.cfg = cfg
        self.envs = [make_parallel_env(cfg) for _ in seeds]
        self.rows = agent_rows(self.envs[0], cfg)
        self.seeds = seeds
        A = self.rows.count
        self.size = len(seeds) * A
        self.obs_out = obs_out  # [G * A, ...] per field
        self.final_obs = {k: np.zeros_like(v) for k, v in obs_out.items()}
        self.rewards = np.zeros(self.size, np.float32)
        self.terminated = np.zeros(self.size, bool)
        self.truncated = np.zeros(self.size, bool)
        self.score = np.zeros(self.size, np.float32)  # the team's reward, on each env's row 0
        self.game_over = np.zeros(self.size, bool)
        self.active = np.zeros(self.size, bool)
        self.observation_space: gym.Space[Any] = self.rows.obs_space
        self.action_space: gym.Space[Any] = self.rows.action_space
        self._to_env = action_converter(self.action_space, cfg.clip_actions)
        self._agent_fields = [k for k in obs_out if k not in (AGENT_ID, STATE)]
        if AGENT_ID in obs_out:  # constant: agent j's one-hot on every row j of every env
            one_hot = np.tile(np.eye(A, dtype=np.float32), (len(seeds), 1))
            obs_out[AGENT_ID][:] = one_hot
            self.final_obs[AGENT_ID][:] = one_hot

    def reset(self) -> None:
        for i, (env, seed) in enumerate(zip(self.envs, self.seeds, strict=True)):
            obs, _ = env.reset(seed=seed)
            self._write(i, env, obs, self.obs_out, live=True)

    def step(self, actions: np.ndarray) -> None:
        """Step every env with its live agents' actions; an env whose agents are all gone is
        reset, and each ended agent's last observation kept in `final_obs`."""
        A, agents = self.rows.count, self.rows.agents
        for arr in (self.rewards, self.score):
            arr.fill(0.0)
        for arr in (self.terminated, self.truncated, self.game_over):
            arr.fill(False)
        for i, env in enumerate(self.envs):
            base = i * A
            acting = {
                agent: self._to_env(actions[base + j])
                for j, agent in enumerate(agents)
                if self.active[base + j]
            }
            obs, rewards, terms, truncs, _ = env.step(acting)
            over = not env.agents
            team = 0.0
            for j, agent in enumerate(agents):
                row = base + j
                if not self.active[row]:
                    self.terminated[row] = True  # a gap: nothing flows across it
                    continue
                reward = float(rewards.get(agent, 0.0))
                self.rewards[row] = reward
                team += reward
                self.terminated[row] = bool(terms.get(agent, False))
                # An agent still in an episode that ended without saying so was cut short.
                self.truncated[row] = bool(truncs.get(agent, False)) or (
                    over and not self.terminated[row]
                )
            self.score[base] = team
            ended = self.terminated[base : base + A] | self.truncated[base : base + A]
            if ended.any():
                self._write(i, env, obs, self.final_obs, live=False)
            if over:
                self.game_over[base] = True
                obs, _ = env.reset()
            self._write(i, env, obs, self.obs_out, live=True)

    def _write(
        self, i: int, env: Any, obs: dict[str, Any], out: dict[str, np.ndarray], live: bool
    ) -> None:
        """Write env i's agents' observations (zeros for agents without one) into `out`;
        with `live`, they are the next step's and set `active`."""
        A, base = self.rows.count, i * self.rows.count
        space = self.rows.agent_space
        for j, agent in enumerate(self.rows.agents):
            row = base + j
            present = agent in obs
            if live:
                self.active[row] = present and agent in env.agents
            if not present:
                for key in self._agent_fields:
                    out[key][row] = 0
                continue
            try:
                for key, value in split_obs(obs[agent], space).items():
                    out[key][row] = value
            except (ValueError, KeyError, TypeError, IndexError):
                check_observation(self.cfg.id, f"agent {agent!r}", obs[agent], space)
                raise
        if STATE in out:
            out[STATE][base : base + A] = self._state(env, obs)

    def _state(self, env: Any, obs: dict[str, Any]) -> np.ndarray:
        if self.rows.state == "env":
            return np.asarray(env.state(), np.float32)
        parts = [
            np.asarray(obs[a], np.float32).reshape(-1)
            if a in obs
            else np.zeros(math.prod(self.rows.agent_space.shape or ()), np.float32)
            for a in self.rows.agents
        ]
        return np.concatenate(parts)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def probe_multiagent(cfg: EnvConfig, seed: int) -> EnvInfo:
    """Build one env, check its agents' spaces and outputs, and return a row's view of it."""
    if cfg.wrappers:
        raise EnvSpecError(
            "env.wrappers are Gymnasium wrappers; a PettingZoo env takes none here",
            "apply PettingZoo / SuperSuit wrappers in a factory: pettingzoo:<module>:<factory>",
        )
    env = make_parallel_env(cfg)
    try:
        rows = agent_rows(env, cfg)
        info = EnvInfo(rows.obs_space, rows.action_space, agents=rows.agents)
        info.obs  # noqa: B018 - raises for unsupported observation spaces
        action_spec(rows.action_space)
        obs, _ = env.reset(seed=seed)
        for agent, value in obs.items():
            check_observation(cfg.id, f"reset() for agent {agent!r}", value, rows.agent_space)
        for k, agent in enumerate(env.agents):
            env.action_space(agent).seed(seed + k)
        obs, rewards, terms, truncs, _ = env.step(
            {a: env.action_space(a).sample() for a in env.agents}
        )
        for agent, value in obs.items():
            check_observation(cfg.id, f"step() for agent {agent!r}", value, rows.agent_space)
        for agent, reward in rewards.items():
            if np.shape(np.asarray(reward)) != ():
                raise EnvSpecError(
                    f"env {cfg.id!r}: step() gave agent {agent!r} a reward of shape "
                    f"{np.shape(np.asarray(reward))}",
                    "each agent gets one scalar reward per step",
                )
        return info
    finally:
        env.close()
