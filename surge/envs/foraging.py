"""Level-Based Foraging (the `lbforaging` package) as a PettingZoo parallel env.

`env.id=lbforaging:Foraging-8x8-2p-2f-coop-v3` (surge/envs/pettingzoo.py routes the prefix
here) builds lbforaging's Gymnasium env of that id and serves it through PettingZoo's
`ParallelEnv` API, so it trains like any PettingZoo env (surge/envs/multiagent.py): one row per
agent, and a global state for centralised critics and value-decomposition mixers (QMIX, VDN).

What lbforaging 2.0.0 gives, and what this adapter makes of it:

- Ids: `Foraging[-2s]-{5..19}x{5..19}-{2..9}p-{1..4}f[-coop]-v3`; `-2s` limits each agent's
  sight to 2 cells, `-coop` sets every food's level to the sum of the players' levels (the
  three lowest), so only the agents together can load it.
- Agents `agent_0 .. agent_{n-1}` (lbforaging's players, in order). Each observes a Box of
  `3 * foods + 3 * players` floats: (row, col, level) of every food it sees, then of every
  player it sees, itself first; (-1, -1, 0) for what it does not see or was eaten.
- Actions: Discrete(6): none, north, south, west, east, load. lbforaging turns an invalid
  action (into a wall, a food or a cell out of reach; loading with no food next to it) into
  none, so every action can be sent.
- The action mask: lbforaging keeps each player's valid actions but does not publish them
  (a private attribute), so each step's `infos[agent]["action_mask"]` carries them, and with
  `observe_action_mask=True` (`env.kwargs`) the observation becomes a Dict of `observation`
  and `action_mask`, which surge uses to mask the policy's logits (docs/multiagent.md).
  EPyMARL marks every action available for these envs; the mask only spares the no-ops.
- Rewards: per agent, as lbforaging gives them: loading a food of level L pays each loader
  of level l `l * L / (S * F)`, S the loaders' total level and F the level of all the food
  spawned, so the agents' rewards add up to 1 over an episode that eats all the food.
  EPyMARL trains on the sum of the agents' rewards as the common reward; surge's reported
  episode return is that sum.
- `state()`: the agents' observations concatenated in agent order, EPyMARL's global state
  for these envs (with full sight each observation already shows the whole grid).
- Episode end: terminated when all the food is eaten; truncated at lbforaging's time limit
  (`max_episode_steps`, 50 for the registered ids), which lbforaging reports as done: a
  time limit is not a terminal state, so learners bootstrap there.
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from surge.errors import ConfigError

ACTIONS = 6
"""lbforaging's actions: none, north, south, west, east, load."""
ID_EXAMPLE = "Foraging-8x8-2p-2f-coop-v3"
RENDER_MODES = ("human", "rgb_array")
"""lbforaging draws with pyglet, which needs a display."""


class ForagingParallelEnv(ParallelEnv[str, Any, int]):
    """One lbforaging Gymnasium env (`game`) served as a PettingZoo parallel env."""

    metadata = {"name": "lbforaging_v3", "render_modes": list(RENDER_MODES)}

    def __init__(
        self, game: Any, render_mode: str | None = None, observe_action_mask: bool = False
    ) -> None:
        self._game = game  # lbforaging's ForagingEnv
        self.render_mode = render_mode
        self.observe_action_mask = observe_action_mask
        self.possible_agents = [f"agent_{i}" for i in range(self._game.n_agents)]
        self.agents: list[str] = []
        agent_box: gym.spaces.Box = self._game.observation_space[0]
        self._obs_space: gym.spaces.Space[Any] = agent_box
        if observe_action_mask:
            mask_box = gym.spaces.Box(0, 1, (ACTIONS,), np.int8)
            self._obs_space = gym.spaces.Dict({"observation": agent_box, "action_mask": mask_box})
        self._act_space = gym.spaces.Discrete(ACTIONS)
        self.max_episode_steps = int(self._game._max_episode_steps)
        """lbforaging's time limit: the longest episode (an episode replay's padding)."""
        agents = len(self.possible_agents)
        self.state_space = gym.spaces.Box(  # flat, also for lbforaging's grid observations
            np.tile(agent_box.low.reshape(-1), agents),
            np.tile(agent_box.high.reshape(-1), agents),
            dtype=np.float32,
        )
        self._last_obs: tuple[np.ndarray, ...] = tuple(
            np.full(agent_box.shape, -1.0, np.float32) for _ in self.possible_agents
        )

    def observation_space(self, agent: str) -> gym.spaces.Space[Any]:
        """Every agent's observation space (one object: PettingZoo's API test checks that)."""
        return self._obs_space

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        """Every agent's Discrete(6) action space."""
        return self._act_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Start an episode; a seed makes the layout and all later episodes reproducible."""
        nobs, _ = self._game.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return self._observe(nobs)

    def step(self, actions: dict[str, int]) -> tuple[dict[str, Any], ...]:
        """Step every agent at once; lbforaging makes an invalid action a no-op."""
        joint = [int(actions[agent]) for agent in self.agents]
        nobs, rewards, done, _, _ = self._game.step(joint)
        all_eaten = not self._game.field.any()
        # lbforaging says done at its time limit too; only an empty field is terminal.
        terminated = dict.fromkeys(self.agents, all_eaten)
        truncated = dict.fromkeys(self.agents, bool(done) and not all_eaten)
        reward = {agent: float(r) for agent, r in zip(self.agents, rewards, strict=True)}
        obs, infos = self._observe(nobs)
        if done:
            self.agents = []
        return obs, reward, terminated, truncated, infos

    def state(self) -> np.ndarray:
        """The agents' observations concatenated in agent order (EPyMARL's state for LBF)."""
        return np.concatenate([obs.reshape(-1) for obs in self._last_obs])

    def action_masks(self) -> np.ndarray:
        """[agents, 6] int8: 1 where lbforaging would carry the action out, not make it a
        no-op (action 0, none, is always valid)."""
        masks = np.zeros((len(self.possible_agents), ACTIONS), np.int8)
        for i, player in enumerate(self._game.players):
            # lbforaging publishes no mask; this is the list its own step() checks actions by
            for action in self._game._valid_actions[player]:
                masks[i, action.value] = 1
        return masks

    def render(self) -> Any:
        """lbforaging's pyglet view (it needs a display); an image with `rgb_array`."""
        if self.render_mode is None:
            return None
        return self._game.render(mode=self.render_mode)

    def close(self) -> None:
        """Close lbforaging's viewer, if one was opened."""
        self._game.close()

    def _observe(
        self, nobs: tuple[np.ndarray, ...]
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Each agent's observation and info (its action mask) from lbforaging's tuple."""
        self._last_obs = tuple(np.asarray(o, np.float32) for o in nobs)
        masks = dict(zip(self.possible_agents, self.action_masks(), strict=True))
        infos = {agent: {"action_mask": mask} for agent, mask in masks.items()}
        obs: dict[str, Any] = dict(zip(self.possible_agents, self._last_obs, strict=True))
        if self.observe_action_mask:
            obs = {agent: {"observation": obs[agent], "action_mask": masks[agent]} for agent in obs}
        return obs, infos


def foraging_env(
    gym_id: str = ID_EXAMPLE,
    render_mode: str | None = None,
    observe_action_mask: bool = False,
    **kwargs: Any,
) -> ForagingParallelEnv:
    """The parallel env of lbforaging's Gymnasium id `gym_id`; `kwargs` override the id's
    registered settings (e.g. `max_episode_steps`, `penalty`, `normalize_reward`)."""
    try:
        import lbforaging  # noqa: F401 - registers the Foraging-* ids with Gymnasium
    except ImportError:
        raise ConfigError(
            f"env.id=lbforaging:{gym_id} needs the lbforaging package, which is not installed",
            "install the lbf extra: pip install -e '.[lbf]' (.venv/bin/pip in a clone)",
        ) from None
    if gym_id not in gym.registry:
        known = [k for k in gym.registry if k.startswith("Foraging")]
        close = difflib.get_close_matches(gym_id, known, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(
            f"env.id=lbforaging:{gym_id}: lbforaging registers no such id",
            f"{hint}ids read Foraging[-2s]-<size>x<size>-<players>p-<foods>f[-coop]-v3, "
            f"e.g. lbforaging:{ID_EXAMPLE}",
        )
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ConfigError(
            f"render_mode={render_mode!r}: lbforaging renders {list(RENDER_MODES)}",
            "use one of those, or none",
        )
    from lbforaging.foraging import ForagingEnv

    # Built directly, not by gymnasium.make, whose own max_episode_steps argument would add
    # a TimeLimit wrapper instead of setting lbforaging's limit of that name.
    settings = {**gym.spec(gym_id).kwargs, **kwargs}
    try:
        game = ForagingEnv(**settings)
    except TypeError as e:
        raise ConfigError(
            f"env.kwargs for lbforaging:{gym_id}: {e}",
            "check env.kwargs against lbforaging's ForagingEnv arguments (players, field_size, "
            "max_num_food, sight, max_episode_steps, force_coop, penalty, normalize_reward, ...)",
        ) from None
    return ForagingParallelEnv(game, render_mode, observe_action_mask)
