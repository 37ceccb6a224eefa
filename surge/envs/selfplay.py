"""Two-player zero-sum games by self-play: the learner's seat as a single-agent env.

`env.id=selfplay:<module>` names a PettingZoo AEC game with two agents (its module's `env()`),
e.g. `selfplay:pettingzoo.classic.connect_four_v3`. `SelfPlayEnv` is a Gymnasium env of one
seat, the learner's; the other seat is played by an opponent drawn for each episode from an
`OpponentSource`: during training the league's pool of the learner's past versions
(surge/workers/league.py), in evaluations a fixed player (`RandomPlayer`, a game's
heuristic player). Seats alternate between episodes, so the learner plays first in half of
them. Everything downstream (env groups, actors, the sample stream, the learners, evaluation)
sees an ordinary env with a Dict observation whose `action_mask` masks the logits.

Rewards: the learner's reward for an action is what it gained from that action and the
opponent's replies (PettingZoo's cumulative reward of the seat): +1 for a win, -1 for a loss,
0 for a draw in the classic games. A finished game is `terminated`; `info["outcome"]` is then
the sign of the learner's final reward.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from surge.errors import ConfigError, EnvSpecError

PREFIX = "selfplay:"


def is_selfplay_id(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


class Opponent(Protocol):
    @property
    def name(self) -> str: ...

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        """A legal move for the seat whose observation (with `action_mask`) this is."""
        ...


class OpponentSource(Protocol):
    def sample(self, rng: np.random.Generator) -> Opponent:
        """The opponent of the next episode."""
        ...


class Fixed:
    """Always the same opponent."""

    def __init__(self, opponent: Opponent) -> None:
        self.opponent = opponent

    def sample(self, rng: np.random.Generator) -> Opponent:
        return self.opponent


class RandomPlayer:
    """A uniformly random legal move."""

    name = "random"

    def act(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        return int(rng.choice(np.flatnonzero(obs["action_mask"])))


def make_game(env_id: str, kwargs: dict[str, Any], render_mode: str | None = None) -> Any:
    """The PettingZoo AEC game a `selfplay:` id names."""
    from pettingzoo import AECEnv

    module_name = env_id.removeprefix(PREFIX)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"env.id={env_id!r}: cannot import {module_name!r} ({e})",
            "install the multi-agent extra (pip install -e '.[multiagent]'), or put the module "
            "on PYTHONPATH",
        ) from None
    make = getattr(module, "env", None)
    if make is None:
        raise ConfigError(f"env.id={env_id!r}: {module_name} has no env()", "name an AEC game")
    game = make(**kwargs, **({"render_mode": render_mode} if render_mode else {}))
    if not isinstance(game, AECEnv) or len(game.possible_agents) != 2:
        raise EnvSpecError(
            f"env {env_id!r} is not a two-player PettingZoo AEC game",
            "self-play takes a game of two seats (e.g. pettingzoo.classic.connect_four_v3)",
        )
    return game


class SelfPlayEnv(gym.Env[Any, Any]):
    """The learner's seat of a two-player game; the other seat is an opponent's."""

    def __init__(self, game: Any, opponents: OpponentSource) -> None:
        self.game = game
        self.opponents = opponents
        self.seats = tuple(game.possible_agents)
        first = self.seats[0]
        self.observation_space = game.observation_space(first)
        self.action_space = game.action_space(first)
        for seat in self.seats[1:]:
            if game.observation_space(seat) != self.observation_space:
                raise EnvSpecError(
                    f"the seats of {game.metadata.get('name')} observe different spaces",
                    "self-play needs a symmetric game",
                )
        self.metadata = dict(game.metadata)
        self.render_mode = getattr(game, "render_mode", None)
        self.episodes = 0
        self.learner = first
        self.opponent: Opponent = RandomPlayer()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.game.reset(seed=seed)
        self.learner = self.seats[self.episodes % 2]  # seats alternate
        self.episodes += 1
        self.opponent = self.opponents.sample(self.np_random)
        self._gained = self._cumulative()
        self._play_opponent()
        self._gained = self._cumulative()  # the opponent's first move gives nothing yet
        return self.game.observe(self.learner), {"seat": self.seats.index(self.learner)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.game.step(int(action))
        self._play_opponent()
        now = self._cumulative()
        reward, self._gained = now - self._gained, now
        terminated = bool(self.game.terminations[self.learner])
        truncated = bool(self.game.truncations[self.learner]) and not terminated
        info: dict[str, Any] = {}
        if terminated or truncated:
            info["outcome"] = int(np.sign(now))
        return self.game.observe(self.learner), reward, terminated, truncated, info

    def _over(self) -> bool:
        return bool(self.game.terminations[self.learner] or self.game.truncations[self.learner])

    def _cumulative(self) -> float:
        return float(self.game._cumulative_rewards[self.learner])

    def _play_opponent(self) -> None:
        """The opponent moves until it is the learner's turn again or the game is over."""
        while not self._over() and self.game.agent_selection != self.learner:
            seat = self.game.agent_selection
            self.game.step(self.opponent.act(self.game.observe(seat), self.np_random))

    def render(self) -> Any:
        return self.game.render()

    def close(self) -> None:
        self.game.close()


def make_selfplay_env(
    env_id: str,
    kwargs: dict[str, Any],
    opponents: OpponentSource | None,
    render_mode: str | None = None,
) -> SelfPlayEnv:
    """The learner's view of the game; without `opponents`, a random player (enough to
    check the spaces)."""
    game = make_game(env_id, kwargs, render_mode)
    return SelfPlayEnv(game, opponents if opponents is not None else Fixed(RandomPlayer()))


def fixed_player(name: str, env_id: str) -> Opponent:
    """A fixed opponent by name (`selfplay.eval_opponents`): `random`, or `heuristic`, the
    game's heuristic player (connect four's: surge/envs/connect_four.py)."""
    if name == "random":
        return RandomPlayer()
    if name == "heuristic" and "connect_four" in env_id:
        from surge.envs.connect_four import ConnectFourHeuristic

        return ConnectFourHeuristic()
    raise ConfigError(
        f"selfplay.eval_opponents: no {name!r} player for {env_id}",
        "use random (any game), or heuristic with connect four",
    )
