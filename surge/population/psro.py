"""Policy-Space Response Oracles (Lanctot et al. 2017) for two-player zero-sum OpenSpiel games,
with surge's own RL as the oracle.

The population starts as one member, the uniform random policy. Each iteration:

1. the meta-game: the payoff of every pair of members (member i in seat 0 against member j in
   seat 1), computed exactly by OpenSpiel (`expected_game_score.policy_value`);
2. the meta-strategy of each seat: projected replicator dynamics on the meta-game
   (OpenSpiel's `projected_replicator_dynamics`), or uniform over the members (fictitious
   play's);
3. the population's NashConv: how much each seat gains by its best response against the
   other seat's meta-strategy mixture (OpenSpiel's `exploitability.nash_conv` of the
   members aggregated by `PolicyAggregator`), logged as the curve PSRO is judged by;
4. a best response: a surge training run (PPO by the presets) of `env.id=openspiel:<game>`
   whose opponent in each episode is a member drawn from the other seat's meta-strategy
   (surge/envs/openspiel.py; the learner's seat alternates, so one network answers both);
   its greedy policy at every information state is the new member of the population.

Everything an iteration decides is logged to `psro.jsonl` in the population's run directory;
each best response is a run of its own under it (`br-<k>`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from surge.config.psro_schema import PSRO, PSROConfig, psro_of
from surge.config.schema import ExperimentConfig
from surge.envs.openspiel import PREFIX, TabularPopulation, load_game

MetaSolver = Literal["nash", "prd", "uniform"]
LOG_FILE = "psro.jsonl"


# ------------------------------------------------------------------- the meta-game (pure)


def tabular(game: Any, probabilities: np.ndarray) -> Any:
    """OpenSpiel's TabularPolicy of `game` with the action probabilities [S, A]."""
    from open_spiel.python.policy import TabularPolicy

    policy = TabularPolicy(game)
    policy.action_probability_array = np.asarray(probabilities, np.float64).copy()
    return policy


def uniform_table(game: Any) -> np.ndarray:
    """[S, A]: the uniform random policy over each information state's legal actions."""
    from open_spiel.python.policy import TabularPolicy

    return np.asarray(TabularPolicy(game).action_probability_array, np.float64)


def payoff(game: Any, seat0: np.ndarray, seat1: np.ndarray) -> float:
    """Seat 0's expected return when tabular policy `seat0` plays seat 0 and `seat1` seat 1."""
    from open_spiel.python.algorithms.expected_game_score import policy_value

    values = policy_value(game.new_initial_state(), [tabular(game, seat0), tabular(game, seat1)])
    return float(values[0])


def extend_payoffs(game: Any, payoffs: np.ndarray, policies: np.ndarray) -> np.ndarray:
    """The meta-game's payoff matrix [K, K] (seat 0's return) for `policies` [K, S, A],
    given the [K-1, K-1] matrix of its first K - 1 members: only the new row and column are
    played."""
    K = len(policies)
    out = np.zeros((K, K))
    out[: K - 1, : K - 1] = payoffs
    for i in range(K):
        out[i, K - 1] = payoff(game, policies[i], policies[K - 1])
        out[K - 1, i] = payoff(game, policies[K - 1], policies[i])
    return out


def zero_sum_nash(payoffs: np.ndarray) -> np.ndarray:
    """[2, K]: a Nash equilibrium of the zero-sum matrix game `payoffs` (the row player's
    gains), each seat's maximin strategy by linear programming (scipy's HiGHS): the row
    player maximises v subject to x^T A >= v, x a distribution; the column player likewise
    on -A^T."""
    from scipy.optimize import linprog

    def maximin(A: np.ndarray) -> np.ndarray:
        rows, cols = A.shape
        # variables x_1..x_rows, v; minimise -v
        cost = np.zeros(rows + 1)
        cost[-1] = -1.0
        upper = np.hstack([-A.T, np.ones((cols, 1))])  # v - x^T A_j <= 0 for each column j
        total = np.hstack([np.ones((1, rows)), np.zeros((1, 1))])
        bounds = [(0, None)] * rows + [(None, None)]
        out = linprog(cost, A_ub=upper, b_ub=np.zeros(cols), A_eq=total, b_eq=[1.0],
                      bounds=bounds, method="highs")  # fmt: skip
        if not out.success:
            raise RuntimeError(f"the meta-game's linear program failed: {out.message}")
        x = np.clip(out.x[:rows], 0.0, None)
        return x / x.sum()

    return np.stack([maximin(payoffs), maximin(-payoffs.T)])


def meta_strategies(payoffs: np.ndarray, solver: MetaSolver, iterations: int) -> np.ndarray:
    """[2, K]: each seat's distribution over the members. `nash`: an exact Nash equilibrium
    of the zero-sum meta-game (`zero_sum_nash`); `prd`: OpenSpiel's projected replicator
    dynamics (`iterations` steps); `uniform`: every member alike."""
    K = len(payoffs)
    if solver == "uniform" or K == 1:
        return np.full((2, K), 1.0 / K)
    if solver == "nash":
        return zero_sum_nash(payoffs)
    from open_spiel.python.algorithms.projected_replicator_dynamics import (
        projected_replicator_dynamics,
    )

    strategies = projected_replicator_dynamics(
        [payoffs, -payoffs], prd_iterations=iterations, prd_dt=1e-3, prd_gamma=1e-6
    )
    meta = np.asarray(strategies, np.float64)
    return meta / meta.sum(axis=1, keepdims=True)


def nash_conv(game: Any, policies: np.ndarray, meta: np.ndarray) -> tuple[float, np.ndarray]:
    """NashConv of the population's meta-strategy mixture: the sum over seats of what a best
    response to the other seat's mixture gains over the mixture itself (0 at a Nash
    equilibrium); and those gains per seat [2]."""
    from open_spiel.python.algorithms import exploitability
    from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator

    members = [tabular(game, p) for p in policies]
    mixture = PolicyAggregator(game).aggregate([0, 1], [members, members], list(meta))
    result = exploitability.nash_conv(game, mixture, return_only_nash_conv=False)
    return float(result.nash_conv), np.asarray(result.player_improvements, np.float64)


def greedy_table(game: Any, act: Callable[[dict[str, np.ndarray]], np.ndarray]) -> np.ndarray:
    """[S, A]: the deterministic policy `act` (a batch of observations -> actions) at every
    information state of `game`, one-hot, in TabularPolicy's row order."""
    from open_spiel.python.policy import TabularPolicy

    table = TabularPolicy(game)
    obs: dict[str, np.ndarray] = {
        "observation": np.array([s.information_state_tensor() for s in table.states], np.float32),
        "action_mask": np.array(
            [s.legal_actions_mask(s.current_player()) for s in table.states], np.int8
        ),
    }
    actions = np.asarray(act(obs), np.int64)
    rows = np.arange(len(actions))
    mask = obs["action_mask"]
    if np.any(actions >= mask.shape[1]) or not np.all(mask[rows, actions.clip(0)]):
        raise RuntimeError("the best response chose an illegal action: is the mask applied?")
    out = np.zeros_like(table.action_probability_array)
    out[rows, actions] = 1.0
    return out


# ------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class PSROResult:
    """A PSRO run: its directory, how it ended (`done` or `interrupted`) and its iterations'
    records (`psro.jsonl`)."""

    run_dir: Path
    reason: str
    records: list[dict[str, Any]]


def train_psro(cfg: ExperimentConfig, name: str = "psro") -> PSROResult:
    """PSRO as `surge train` runs a config with a `psro` section: a new run directory holding
    `psro.jsonl`, the population and one run per best response (`br-<k>/`), each trained by
    this config without its psro section."""
    from surge.runtime.controller import train
    from surge.tracking.run_dir import create_run_dir

    settings = psro_of(cfg)
    assert settings is not None, "a config with a psro section"
    run_dir = create_run_dir(cfg, name)
    oracle = dataclasses.replace(cfg, sections={k: v for k, v in cfg.sections.items() if k != PSRO})

    def best_response(br_cfg: ExperimentConfig, br_name: str) -> Path | None:
        result = train(br_cfg, br_name)
        return None if result.reason == "interrupted" else result.run_dir

    print(f"surge: psro on {cfg.env.id}, run_dir={run_dir}", file=sys.stderr)
    records = run_psro(oracle, run_dir, settings, best_response)
    finished = len(records) == settings.iterations + 1
    return PSROResult(run_dir, "done" if finished else "interrupted", records)


def run_psro(
    cfg: ExperimentConfig,
    out: Path,
    settings: PSROConfig,
    train_best_response: Callable[[ExperimentConfig, str], Path | None],
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> list[dict[str, Any]]:
    """PSRO on `cfg.env.id` (an `openspiel:` game), best responses trained by
    `train_best_response(config, name) -> its run directory` (None: interrupted, the loop
    ends); returns the iterations' records (also in `out/psro.jsonl`)."""
    game_name = cfg.env.id.removeprefix(PREFIX)
    game = load_game(game_name)
    out.mkdir(parents=True, exist_ok=True)
    policies = uniform_table(game)[None]  # the first member plays uniformly at random
    payoffs = np.array([[payoff(game, policies[0], policies[0])]])
    records: list[dict[str, Any]] = []
    population_file = out / "population.npz"
    for iteration in range(settings.iterations + 1):
        meta = meta_strategies(payoffs, settings.meta_solver, settings.prd_iterations)
        conv, improvements = nash_conv(game, policies, meta)
        value = float(meta[0] @ payoffs @ meta[1])  # seat 0's return under the meta-strategies
        record: dict[str, Any] = {
            "iteration": iteration,
            "members": len(policies),
            "nash_conv": conv,
            "meta": meta.round(4).tolist(),
            # what an exact best response would earn in each seat: the oracle's target
            "exact_br": (improvements + [value, -value]).round(4).tolist(),
        }
        TabularPopulation(policies, meta).save(population_file)
        if iteration < settings.iterations:  # the last iteration only measures
            started = time.perf_counter()
            br_cfg = dataclasses.replace(
                cfg,
                env=dataclasses.replace(
                    cfg.env, kwargs={**cfg.env.kwargs, "population": str(population_file)}
                ),
                run_dir=str(out / f"br-{iteration + 1}"),
            )
            run_dir = train_best_response(br_cfg, f"br-{iteration + 1}")
            if run_dir is None:
                break
            new = greedy_table(game, best_response_actor(run_dir))
            record["br_seconds"] = round(time.perf_counter() - started, 1)
            record["br_gain"] = _gain(game, policies, meta, new)
            policies = np.concatenate([policies, new[None]])
            payoffs = extend_payoffs(game, payoffs, policies)
        records.append(record)
        with open(out / LOG_FILE, "a") as f:
            f.write(json.dumps(record) + "\n")
        log(
            f"psro: iteration {iteration}, {record['members']} members, "
            f"NashConv {record['nash_conv']:.4f}"
        )
    return records


def _gain(game: Any, policies: np.ndarray, meta: np.ndarray, new: np.ndarray) -> list[float]:
    """What the new member earns in each seat against the other seat's meta-strategy (an
    exact best response earns that seat's share of NashConv plus the mixture's value)."""
    seat0 = sum(w * payoff(game, new, p) for w, p in zip(meta[1], policies, strict=True))
    seat1 = sum(-w * payoff(game, p, new) for w, p in zip(meta[0], policies, strict=True))
    return [round(float(seat0), 4), round(float(seat1), 4)]


def best_response_actor(run_dir: Path) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """The greedy actions of the newest checkpoint of the best-response run `run_dir`."""
    from surge.config.load import load_config
    from surge.envs.openspiel import make_openspiel_env
    from surge.envs.spaces import EnvInfo
    from surge.models.flat_policy import flat_policy
    from surge.recipes.ppo import checkpoint_flat
    from surge.tracking.checkpoint import latest_checkpoint, load_checkpoint

    cfg, _ = load_config(str(run_dir / "config.yaml"), [])
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise RuntimeError(f"the best response {run_dir} wrote no checkpoint")
    env = make_openspiel_env(cfg.env.id, {})
    policy = flat_policy(EnvInfo(env.observation_space, env.action_space), cfg, seed=0)
    policy.load(checkpoint_flat(cfg, env, load_checkpoint(checkpoint)))
    return lambda obs: policy.act(obs, deterministic=True)[0]
