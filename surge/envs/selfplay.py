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

from surge.envs.players import Opponent, RandomPlayer
from surge.errors import ConfigError, EnvSpecError

PREFIX = "selfplay:"


def is_selfplay_id(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


class OpponentSource(Protocol):
    def sample(self, rng: np.random.Generator) -> Opponent:
        """The opponent of the next episode."""
        ...

    def report(self, opponent: Opponent, outcome: int) -> None:
        """How a game against `opponent` ended for the learner: 1 won, 0 drawn, -1 lost."""
        ...


class Fixed:
    """Always the same opponent."""

    def __init__(self, opponent: Opponent) -> None:
        self.opponent = opponent

    def sample(self, rng: np.random.Generator) -> Opponent:
        return self.opponent

    def report(self, opponent: Opponent, outcome: int) -> None:
        pass


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

    # A step is three phases, so that a group of games can batch its opponents' moves
    # (`SelfPlayGroup`): the learner's move, the opponent's moves, the outcome.

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.begin(seed)
        self._play_opponent()
        return self.settle(), {"seat": self.seats.index(self.learner)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.move(action)
        self._play_opponent()
        return self.outcome()

    def begin(self, seed: int | None) -> None:
        """A new game: the learner's seat (they alternate) and the opponent."""
        super().reset(seed=seed)
        self.game.reset(seed=seed)
        self.learner = self.seats[self.episodes % 2]
        self.episodes += 1
        self.opponent = self.opponents.sample(self.np_random)

    def settle(self) -> Any:
        """The learner's first observation, once the opponent has moved if it moves first
        (which gives the learner nothing yet)."""
        self._gained = self._cumulative()
        return self.game.observe(self.learner)

    def move(self, action: Any) -> None:
        """The learner's move."""
        self.game.step(int(action))

    def opponent_to_move(self) -> Any:
        """The opponent seat's observation if it is to move (the game goes on), else None."""
        if self._over() or self.game.agent_selection == self.learner:
            return None
        return self.game.observe(self.game.agent_selection)

    def opponent_move(self, action: int) -> None:
        self.game.step(int(action))

    def outcome(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """(observation, reward, terminated, truncated, info) of the learner's move and the
        opponent's replies."""
        now = self._cumulative()
        reward, self._gained = now - self._gained, now
        terminated = bool(self.game.terminations[self.learner])
        truncated = bool(self.game.truncations[self.learner]) and not terminated
        info: dict[str, Any] = {}
        if terminated or truncated:
            info["outcome"] = int(np.sign(now))
            self.opponents.report(self.opponent, info["outcome"])
        return self.game.observe(self.learner), reward, terminated, truncated, info

    def _over(self) -> bool:
        return bool(self.game.terminations[self.learner] or self.game.truncations[self.learner])

    def _cumulative(self) -> float:
        return float(self.game._cumulative_rewards[self.learner])

    def _play_opponent(self) -> None:
        """The opponent moves until it is the learner's turn again or the game is over."""
        while (obs := self.opponent_to_move()) is not None:
            self.opponent_move(self.opponent.act(obs, self.np_random))

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


class SelfPlayGroup:
    """G self-play games as an env group (the contract of surge/envs/group.py `EnvGroup`):
    one row per game, the learner's seat. After the learner's moves, the games whose
    opponent is to move ask it together: one batched call per opponent (a league snapshot's
    policy acts for all the games that drew it at once), until every game waits for the
    learner or is over; a finished game is reset and its opponent moves first in it if it
    has that seat."""

    def __init__(
        self,
        cfg: Any,
        seeds: list[int],
        obs_out: dict[str, np.ndarray],
        opponents: OpponentSource | None,
    ) -> None:
        kwargs = dict(cfg.kwargs)
        render_mode = kwargs.pop("render_mode", None)
        self.envs = [make_selfplay_env(cfg.id, kwargs, opponents, render_mode) for _ in seeds]
        self.seeds = seeds
        self.size = len(seeds)
        self.obs_out = obs_out
        self.final_obs = {k: np.zeros_like(v) for k, v in obs_out.items()}
        self.rewards = np.zeros(self.size, np.float32)
        self.terminated = np.zeros(self.size, bool)
        self.truncated = np.zeros(self.size, bool)
        self.score = self.rewards
        self.game_over = np.zeros(self.size, bool)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.rng = np.random.default_rng(seeds[0])

    def reset(self) -> None:
        for env, seed in zip(self.envs, self.seeds, strict=True):
            env.begin(seed)
        self._play_opponents(self.envs)
        for i, env in enumerate(self.envs):
            self._write(self.obs_out, i, env.settle())

    def step(self, actions: np.ndarray) -> None:
        for env, action in zip(self.envs, actions, strict=True):
            env.move(action)
        self._play_opponents(self.envs)
        restarted = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, _ = env.outcome()
            self.rewards[i], self.terminated[i], self.truncated[i] = reward, terminated, truncated
            if terminated or truncated:
                self._write(self.final_obs, i, obs)
                env.begin(None)
                restarted.append(env)
            else:
                self._write(self.obs_out, i, obs)
        self._play_opponents(restarted)  # new games whose opponent has the first move
        for env in restarted:
            self._write(self.obs_out, self.envs.index(env), env.settle())
        np.logical_or(self.terminated, self.truncated, out=self.game_over)

    def _play_opponents(self, envs: list[SelfPlayEnv]) -> None:
        while True:
            waiting: dict[int, list[tuple[SelfPlayEnv, Any]]] = {}
            for env in envs:
                obs = env.opponent_to_move()
                if obs is not None:
                    waiting.setdefault(id(env.opponent), []).append((env, obs))
            if not waiting:
                return
            for games in waiting.values():
                batch = {k: np.stack([obs[k] for _, obs in games]) for k in games[0][1]}
                moves = games[0][0].opponent.act_batch(batch, self.rng)
                for (env, _), move in zip(games, moves, strict=True):
                    env.opponent_move(int(move))

    def _write(self, out: dict[str, np.ndarray], i: int, obs: dict[str, Any]) -> None:
        for key, value in obs.items():
            out[key][i] = value

    def close(self) -> None:
        for env in self.envs:
            env.close()
