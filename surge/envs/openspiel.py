"""OpenSpiel's two-player games as a learner's seat: `env.id=openspiel:<game>`.

`env.id=openspiel:kuhn_poker` (any OpenSpiel game of two players with information-state
tensors: kuhn_poker, leduc_poker, ...) is a Gymnasium env of one seat: the learner's. The
observation is a Dict of `observation` (the seat's information-state tensor, which names the
seat) and `action_mask` (its legal actions: surge masks the policy's logits with it, as for
self-play games). Chance nodes (the deal) are sampled by the env. The seat alternates between
episodes, so one network learns to play both; `info["seat"]` says which it was.

The other seat is played by a population of tabular policies (`TabularPopulation`, a
`.npz` file named by `env.kwargs.population`): one member drawn per episode from the
meta-strategy over that seat's members, as PSRO trains its best responses
(surge/population/psro.py). Without a population the opponent plays uniformly at random.

Rewards: the learner's return, paid when the game ends (OpenSpiel's `returns()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from surge.errors import ConfigError, EnvSpecError

PREFIX = "openspiel:"


def is_openspiel_id(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def load_game(name: str) -> Any:
    """The OpenSpiel game `name` (e.g. `kuhn_poker`, `leduc_poker(players=2)`), checked to be
    one this adapter plays."""
    try:
        import pyspiel
    except ImportError:
        raise ConfigError(
            f"env.id={PREFIX}{name}: OpenSpiel is not installed",
            "install the games extra: pip install -e '.[games]'",
        ) from None
    try:
        game = pyspiel.load_game(name)
    except pyspiel.SpielError as e:
        raise ConfigError(
            f"env.id={PREFIX}{name}: OpenSpiel has no such game ({e})",
            "name an OpenSpiel game, e.g. openspiel:kuhn_poker or openspiel:leduc_poker",
        ) from None
    kind = game.get_type()
    if game.num_players() != 2 or not kind.provides_information_state_tensor:
        raise EnvSpecError(
            f"env.id={PREFIX}{name}: not a two-player game with information-state tensors",
            "the adapter plays two-player games such as kuhn_poker and leduc_poker",
        )
    return game


@dataclass
class TabularPopulation:
    """Tabular policies of a game and, per seat, the meta-strategy over them.

    `policies` [K, S, A]: member k's action probabilities at each of the game's information
    states (the rows of OpenSpiel's `TabularPolicy` of the game, both seats' states);
    `meta` [2, K]: the probability that seat p is played by member k."""

    policies: np.ndarray
    meta: np.ndarray

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, policies=self.policies, meta=self.meta)
        tmp.replace(path)  # an actor reading it never sees half a file

    @classmethod
    def load(cls, path: str | Path) -> TabularPopulation:
        with np.load(path) as f:
            return cls(policies=f["policies"], meta=f["meta"])


class OpenSpielSeatEnv(gym.Env[Any, np.int64]):
    """One seat of a two-player OpenSpiel game against a tabular population."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, game: str, population: str | None = None) -> None:
        from open_spiel.python.policy import TabularPolicy

        self.game_name = game
        self.game = load_game(game)
        self.table = TabularPolicy(self.game)  # the information states' row order
        self.n_actions = n_actions = int(self.game.num_distinct_actions())
        (width,) = self.game.information_state_tensor_shape()
        self.width = int(width)
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (width,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (n_actions,), np.int8),
            }
        )
        self.action_space = gym.spaces.Discrete(n_actions)
        uniform = self.table.action_probability_array[None].astype(np.float64)
        self.population = (
            TabularPopulation.load(population)
            if population
            else TabularPopulation(uniform, np.ones((2, 1)))
        )
        if self.population.policies.shape[1:] != uniform.shape[1:]:
            raise ConfigError(
                f"env.kwargs.population={population}: its policies are "
                f"{self.population.policies.shape[1:]}, {game} has {uniform.shape[1:]}",
                "write the population of this game (surge/population/psro.py)",
            )
        self.episodes = 0
        self.seat = 0
        self.opponent = 0  # the member playing the other seat this episode
        self.state: Any = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.seat = self.episodes % 2
        self.episodes += 1
        meta = self.population.meta[1 - self.seat]
        self.opponent = int(self.np_random.choice(len(meta), p=meta / meta.sum()))
        self.state = self.game.new_initial_state()
        self._advance()
        return self._observe(), {"seat": self.seat}

    def step(
        self, action: np.int64 | int
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        state = self.state
        if int(action) not in state.legal_actions():
            raise EnvSpecError(
                f"{self.game_name}: action {action} is not legal here",
                "mask the policy's logits with the observation's action_mask",
            )
        state.apply_action(int(action))
        self._advance()
        if state.is_terminal():
            reward = float(state.returns()[self.seat])
            info = {"seat": self.seat, "outcome": int(np.sign(reward))}
            return self._observe(), reward, True, False, info
        return self._observe(), 0.0, False, False, {}

    def _advance(self) -> None:
        """Sample chance nodes and play the opponent until the learner moves or it ends."""
        state, rng = self.state, self.np_random
        while not state.is_terminal() and state.current_player() != self.seat:
            if state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(int(rng.choice(outcomes, p=probs)))
                continue
            row = self.table.state_index(state)
            legal = np.asarray(state.legal_actions_mask(), bool)
            weights = np.where(legal, self.population.policies[self.opponent, row], 0.0)
            state.apply_action(int(rng.choice(len(weights), p=weights / weights.sum())))

    def _observe(self) -> dict[str, np.ndarray]:
        state, n = self.state, self.n_actions
        if state.is_terminal():  # the last observation: nothing to act on
            return {
                "observation": np.zeros(self.width, np.float32),
                "action_mask": np.ones(n, np.int8),
            }
        return {
            "observation": np.asarray(state.information_state_tensor(self.seat), np.float32),
            "action_mask": np.asarray(state.legal_actions_mask(self.seat), np.int8),
        }


def make_openspiel_env(env_id: str, kwargs: dict[str, Any]) -> OpenSpielSeatEnv:
    """The learner's seat of the game `env_id` names; `kwargs`: `population` (a path)."""
    unknown = set(kwargs) - {"population"}
    if unknown:
        raise ConfigError(
            f"env.kwargs: {', '.join(sorted(unknown))} not taken by {env_id}",
            "openspiel: envs take only `population` (a path to a tabular population)",
        )
    return OpenSpielSeatEnv(env_id.removeprefix(PREFIX), kwargs.get("population"))
