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

Several policies (`policies`, `policy_mapping`): `route_agents` maps each agent to one
policy, and each policy gets its own rows, a lane: agent j of the policy's agents in env i is
row `i * n + j` of that policy's batch (n: its agents per env). Each lane has its own
inference and sample streams, parameters and trainer; the env steps once for all of them.

Reporting: the episode return of an env, for a policy, is the sum over that policy's agents
of their rewards (with one policy: the team return), reported once per episode on the lane's
first row of the env (`game_over` there only), so each trainer counts each env episode once.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from surge.config.schema import EnvConfig
from surge.envs.pettingzoo import make_parallel_env
from surge.envs.spaces import (
    EnvInfo,
    action_converter,
    action_spec,
    check_observation,
    flatten_obs_space,
    split_obs,
)
from surge.errors import ConfigError, EnvSpecError

AGENT_ID = "agent_id"
STATE = "global_state"
DEFAULT_POLICY = "default"


def route_agents(
    agents: tuple[str, ...], policies: list[str], mapping: dict[str, str]
) -> dict[str, tuple[str, ...]]:
    """Each policy's agents, in `possible_agents` order: an agent goes to the policy of the
    first pattern of `mapping` (shell-style, `adversary_*`) it matches; with no mapping,
    every agent goes to the one policy."""
    if not mapping:
        return {policies[0]: tuple(agents)}
    routed: dict[str, list[str]] = {p: [] for p in policies}
    for agent in agents:
        policy = next((p for pat, p in mapping.items() if fnmatch.fnmatchcase(agent, pat)), None)
        if policy is None:
            raise EnvSpecError(
                f"policy_mapping: agent {agent!r} matches none of {list(mapping)}",
                "add a pattern for it (a last '*' catches every other agent)",
            )
        routed[policy].append(agent)
    idle = [p for p, a in routed.items() if not a]
    if idle:
        raise ConfigError(
            f"policies {idle} get no agent from policy_mapping (agents: {list(agents)})",
            "map an agent-name pattern to each policy, or remove the idle ones",
        )
    return {p: tuple(a) for p, a in routed.items()}


@dataclass(frozen=True)
class AgentRows:
    """How one policy's agents of an env map to rows, and what a row observes."""

    agents: tuple[str, ...]
    """The policy's agents, in row order (`possible_agents` order)."""
    all_agents: tuple[str, ...]
    """The env's `possible_agents`: the agent-id one-hot and the concatenated state span them."""
    agent_space: gym.Space[Any]
    """One agent's own observation space (the same for every agent of the policy)."""
    action_space: gym.Space[Any]
    obs_space: gym.spaces.Dict
    """A row's observation: the agent's fields, `agent_id` and `global_state` if configured."""
    state: str
    """Where `global_state` comes from: "env" (`env.state()`), "concat", or "" (no such field)."""

    @property
    def count(self) -> int:
        return len(self.agents)


def agent_rows(env: Any, cfg: EnvConfig, agents: tuple[str, ...] | None = None) -> AgentRows:
    """The row layout of `agents` (default: all of them) of a parallel env under
    `cfg.multiagent`; EnvSpecError for agents whose spaces differ (the agents of one policy
    share one observation and one action space)."""
    all_agents = tuple(env.possible_agents)
    if not all_agents:
        raise EnvSpecError(f"env {cfg.id!r} has no possible_agents", "")
    agents = all_agents if agents is None else agents
    obs_spaces = {a: env.observation_space(a) for a in all_agents}
    act_spaces = {a: env.action_space(a) for a in agents}
    first = agents[0]
    for a in agents[1:]:
        for what, spaces in (("observation", obs_spaces), ("action", act_spaces)):
            if spaces[a] != spaces[first]:
                raise EnvSpecError(
                    f"env {cfg.id!r}: agent {a!r} has {what} space {spaces[a]}, agent "
                    f"{first!r} has {spaces[first]}; the agents of one policy share both",
                    "route them to different policies (policies, policy_mapping), or pad the "
                    "spaces to one shape (SuperSuit's pad_observations / pad_action_space)",
                )
    agent_space = obs_spaces[first]
    fields = _agent_fields(agent_space)
    ma = cfg.multiagent
    if ma.agent_id:
        fields[AGENT_ID] = gym.spaces.Box(0.0, 1.0, (len(all_agents),), np.float32)
    state = _state_source(env, cfg, [obs_spaces[a] for a in all_agents])
    if state:
        fields[STATE] = _state_space(env, state, [obs_spaces[a] for a in all_agents])
    return AgentRows(
        agents, all_agents, agent_space, act_spaces[first], gym.spaces.Dict(fields), state
    )


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


def _state_source(env: Any, cfg: EnvConfig, spaces: list[gym.Space[Any]]) -> str:
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
    if not all(isinstance(s, gym.spaces.Box) for s in spaces):
        raise EnvSpecError(
            f"env.multiagent.global_state={choice}: concatenating the agents' observations "
            f"needs Box observations, env {cfg.id!r} gives {spaces[0]}",
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


def _state_space(env: Any, source: str, spaces: list[gym.Space[Any]]) -> gym.spaces.Box:
    """The global state's space, with the bounds the env gives (a learner may scale by them):
    the agents' observation spaces end to end (`concat`), or the env's `state_space` where it
    has one of the state's shape; unbounded otherwise."""
    if source == "concat":
        boxes = [s for s in spaces if isinstance(s, gym.spaces.Box)]
        low = np.concatenate([b.low.reshape(-1) for b in boxes]).astype(np.float32)
        high = np.concatenate([b.high.reshape(-1) for b in boxes]).astype(np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32)
    shape = _env_state_shape(env)
    assert shape is not None
    given = getattr(env, "state_space", None)
    if isinstance(given, gym.spaces.Box) and tuple(given.shape) == shape:
        return gym.spaces.Box(
            given.low.astype(np.float32), given.high.astype(np.float32), dtype=np.float32
        )
    return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)


class Lane:
    """One policy's rows of a group: what `EnvGroup` offers for envs (surge/envs/group.py),
    plus `active` [rows]: the row's agent is in its episode."""

    def __init__(self, rows: AgentRows, envs: int, obs_out: dict[str, np.ndarray]) -> None:
        self.rows = rows
        self.size = envs * rows.count
        self.obs_out = obs_out  # [envs * n, ...] per field
        self.final_obs = {k: np.zeros_like(v) for k, v in obs_out.items()}
        self.rewards = np.zeros(self.size, np.float32)
        self.terminated = np.zeros(self.size, bool)
        self.truncated = np.zeros(self.size, bool)
        self.score = np.zeros(self.size, np.float32)  # the lane's team reward, on row 0 of an env
        self.game_over = np.zeros(self.size, bool)
        self.active = np.zeros(self.size, bool)
        self.observation_space: gym.Space[Any] = rows.obs_space
        self.action_space: gym.Space[Any] = rows.action_space
        self.agent_fields = [k for k in obs_out if k not in (AGENT_ID, STATE)]
        if AGENT_ID in obs_out:  # constant: each row's agent among all the env's agents
            index = [rows.all_agents.index(a) for a in rows.agents]
            one_hot = np.tile(np.eye(len(rows.all_agents), dtype=np.float32)[index], (envs, 1))
            obs_out[AGENT_ID][:] = one_hot
            self.final_obs[AGENT_ID][:] = one_hot

    def clear(self) -> None:
        for arr in (self.rewards, self.score):
            arr.fill(0.0)
        for arr in (self.terminated, self.truncated, self.game_over):
            arr.fill(False)


class MultiAgentGroup:
    """G PettingZoo parallel envs as rows of one lane per policy.

    With one policy (`policies` None) the group is that lane: `rewards`, `terminated`, ...,
    `active` are the lane's arrays and `obs_out` is `{field: [G * A, ...]}`, as for any env
    group. With several, `obs_out` is `{policy: {field: array}}`, `lanes[policy]` has each
    policy's arrays (its agents routed by `mapping`, `route_agents`), and `step` takes
    `{policy: actions}`."""

    def __init__(
        self,
        cfg: EnvConfig,
        seeds: list[int],
        obs_out: dict[str, Any],
        policies: list[str] | None = None,
        mapping: dict[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.envs = [make_parallel_env(cfg) for _ in seeds]
        self.seeds = seeds
        if not policies or len(policies) == 1:
            rows = agent_rows(self.envs[0], cfg)
            self.lanes = {DEFAULT_POLICY: Lane(rows, len(seeds), obs_out)}
        else:
            routing = route_agents(tuple(self.envs[0].possible_agents), policies, mapping or {})
            self.lanes = {
                p: Lane(agent_rows(self.envs[0], cfg, agents), len(seeds), obs_out[p])
                for p, agents in routing.items()
            }
        first = next(iter(self.lanes.values()))
        self.all_agents = first.rows.all_agents
        self._state = first.rows.state
        env = self.envs[0]
        self._obs_sizes = [math.prod(env.observation_space(a).shape or ()) for a in self.all_agents]
        # The group contract (surge/envs/group.py) over the first lane: with one policy,
        # the group is its lane.
        self.size, self.obs_out, self.final_obs = first.size, first.obs_out, first.final_obs
        self.rewards, self.terminated, self.truncated = (
            first.rewards, first.terminated, first.truncated,
        )  # fmt: skip
        self.score, self.game_over, self.active = first.score, first.game_over, first.active
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self._to_env = {
            p: action_converter(lane.action_space, cfg.clip_actions)
            for p, lane in self.lanes.items()
        }
        self._where = {  # agent -> (lane, its index among the lane's agents)
            a: (lane, j) for lane in self.lanes.values() for j, a in enumerate(lane.rows.agents)
        }

    def reset(self) -> None:
        for i, (env, seed) in enumerate(zip(self.envs, self.seeds, strict=True)):
            obs, _ = env.reset(seed=seed)
            self._write(i, env, obs, live=True)

    def step(self, actions: np.ndarray | dict[str, np.ndarray]) -> None:
        """Step every env with its live agents' actions (with several policies,
        `{policy: actions}`); an env whose agents are all gone is reset, and each ended
        agent's last observation kept in `final_obs`."""
        if not isinstance(actions, dict):
            actions = {next(iter(self.lanes)): actions}
        for lane in self.lanes.values():
            lane.clear()
        for i, env in enumerate(self.envs):
            acting = {}
            for p, lane in self.lanes.items():
                n, to_env = lane.rows.count, self._to_env[p]
                for j, agent in enumerate(lane.rows.agents):
                    if lane.active[i * n + j]:
                        acting[agent] = to_env(actions[p][i * n + j])
            obs, rewards, terms, truncs, _ = env.step(acting)
            over = not env.agents
            ended = False
            for lane in self.lanes.values():
                ended |= self._record(lane, i, rewards, terms, truncs, over)
            if ended:
                self._write(i, env, obs, live=False)
            if over:
                obs, _ = env.reset()
            self._write(i, env, obs, live=True)

    def _record(
        self, lane: Lane, i: int, rewards: dict[str, Any], terms: dict[str, Any],
        truncs: dict[str, Any], over: bool,
    ) -> bool:  # fmt: skip
        """One env's step in one lane's rows; True if one of its agents' episodes ended."""
        n = lane.rows.count
        base = i * n
        team = 0.0
        for j, agent in enumerate(lane.rows.agents):
            row = base + j
            if not lane.active[row]:
                lane.terminated[row] = True  # a gap: nothing flows across it
                continue
            reward = float(rewards.get(agent, 0.0))
            lane.rewards[row] = reward
            team += reward
            lane.terminated[row] = bool(terms.get(agent, False))
            # An agent still in an episode that ended without saying so was cut short.
            lane.truncated[row] = bool(truncs.get(agent, False)) or (
                over and not lane.terminated[row]
            )
        lane.score[base] = team
        if over:
            lane.game_over[base] = True
        span = slice(base, base + n)
        return bool((lane.active[span] & (lane.terminated[span] | lane.truncated[span])).any())

    def _write(self, i: int, env: Any, obs: dict[str, Any], live: bool) -> None:
        """Write env i's agents' observations into every lane (zeros for agents without one):
        the next step's (`live`, which also sets `active`) or the final ones."""
        state = self._state_of(env, obs) if self._state else None
        for lane in self.lanes.values():
            out = lane.obs_out if live else lane.final_obs
            n, space = lane.rows.count, lane.rows.agent_space
            for j, agent in enumerate(lane.rows.agents):
                row = i * n + j
                present = agent in obs
                if live:
                    lane.active[row] = present and agent in env.agents
                if not present:
                    for key in lane.agent_fields:
                        out[key][row] = 0
                    continue
                try:
                    for key, value in split_obs(obs[agent], space).items():
                        out[key][row] = value
                except (ValueError, KeyError, TypeError, IndexError):
                    check_observation(self.cfg.id, f"agent {agent!r}", obs[agent], space)
                    raise
            if state is not None:
                out[STATE][i * n : (i + 1) * n] = state

    def _state_of(self, env: Any, obs: dict[str, Any]) -> np.ndarray:
        if self._state == "env":
            return np.asarray(env.state(), np.float32)
        parts = [
            np.asarray(obs[agent], np.float32).reshape(-1)
            if agent in obs
            else np.zeros(size, np.float32)
            for agent, size in zip(self.all_agents, self._obs_sizes, strict=True)
        ]
        return np.concatenate(parts)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def probe_multiagent(
    cfg: EnvConfig,
    seed: int,
    policies: list[str] | None = None,
    mapping: dict[str, str] | None = None,
) -> dict[str, EnvInfo]:
    """Build one env, check its agents' spaces and outputs, route its agents to `policies`
    by `mapping`, and return each policy's view of a row."""
    if cfg.wrappers:
        raise EnvSpecError(
            "env.wrappers are Gymnasium wrappers; a PettingZoo env takes none here",
            "apply PettingZoo / SuperSuit wrappers in a factory: pettingzoo:<module>:<factory>",
        )
    env = make_parallel_env(cfg)
    try:
        routing = route_agents(
            tuple(env.possible_agents), policies or [DEFAULT_POLICY], mapping or {}
        )
        infos = {}
        for policy, agents in routing.items():
            rows = agent_rows(env, cfg, agents)
            info = EnvInfo(rows.obs_space, rows.action_space, agents=rows.agents)
            info.obs  # noqa: B018 - raises for unsupported observation spaces
            action_spec(rows.action_space)
            infos[policy] = info
        obs, _ = env.reset(seed=seed)
        spaces = {a: env.observation_space(a) for a in env.possible_agents}
        for agent, value in obs.items():
            check_observation(cfg.id, f"reset() for agent {agent!r}", value, spaces[agent])
        for k, agent in enumerate(env.agents):
            env.action_space(agent).seed(seed + k)
        obs, rewards, terms, truncs, _ = env.step(
            {a: env.action_space(a).sample() for a in env.agents}
        )
        for agent, value in obs.items():
            check_observation(cfg.id, f"step() for agent {agent!r}", value, spaces[agent])
        for agent, reward in rewards.items():
            if np.shape(np.asarray(reward)) != ():
                raise EnvSpecError(
                    f"env {cfg.id!r}: step() gave agent {agent!r} a reward of shape "
                    f"{np.shape(np.asarray(reward))}",
                    "each agent gets one scalar reward per step",
                )
        return infos
    finally:
        env.close()
