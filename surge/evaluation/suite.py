"""What one evaluation plays, for evaluation workers and `surge eval` alike.

For most envs: whole episodes on one env instance; for a multi-agent env, one env whose
agents all act through the policy (team returns, surge/envs/multiagent.py). For a self-play game
(`env.id=selfplay:<game>`): the same number of games against each fixed player of
`selfplay.eval_opponents` (seats alternating), reported as win, draw and loss rates per
player (`win_rate_vs_random`, ...) beside the return statistics over all games.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from surge.config.schema import ExperimentConfig
from surge.devices import role_device
from surge.envs.make import make_env, probe_policies
from surge.envs.multiagent import MultiAgentGroup
from surge.envs.pettingzoo import is_pettingzoo_id
from surge.envs.selfplay import Fixed, fixed_player, is_selfplay_id
from surge.envs.spaces import EnvInfo, obs_specs
from surge.evaluation.episodes import (
    EpisodeResults,
    eval_env_config,
    play_episodes,
    play_multiagent_episodes,
    render_fps,
)
from surge.models.acting import ActingPolicy, acting_policy
from surge.seeds import derive_seed

OUTCOMES = ("win_rate", "draw_rate", "loss_rate")


def match_fields(cfg: ExperimentConfig) -> tuple[str, ...]:
    """The fields an evaluation of this config reports besides the return statistics:
    self-play's rates per fixed player, or each policy's team return when a multi-agent run
    has several."""
    if is_selfplay_id(cfg.env.id):
        return tuple(f"{o}_vs_{p}" for p in cfg.selfplay.eval_opponents for o in OUTCOMES)
    if len(cfg.policy_names) > 1:
        return tuple(f"return_mean_{p}" for p in cfg.policy_names)
    return ()


def outcome_rates(returns: list[float], player: str) -> dict[str, float]:
    """Win, draw and loss rates from the signs of the games' returns."""
    signs = np.sign(np.asarray(returns, np.float64))
    return {
        f"win_rate_vs_{player}": float((signs > 0).mean()),
        f"draw_rate_vs_{player}": float((signs == 0).mean()),
        f"loss_rate_vs_{player}": float((signs < 0).mean()),
    }


class EvalSuite:
    def __init__(self, cfg: ExperimentConfig, video: bool) -> None:
        self.cfg = cfg
        env_cfg = eval_env_config(cfg.env, video)
        self.envs: dict[str, Any]
        self.group: MultiAgentGroup | None = None
        if is_pettingzoo_id(cfg.env.id):  # one env's agents as rows (envs/multiagent.py)
            infos = probe_policies(replace(cfg, env=env_cfg))
            outs = {p: _rows(info) for p, info in infos.items()}
            if len(outs) == 1:
                self.group = MultiAgentGroup(env_cfg, [cfg.seed], next(iter(outs.values())))
            else:
                policies, mapping = cfg.policy_names, cfg.policy_mapping
                self.group = MultiAgentGroup(env_cfg, [cfg.seed], outs, policies, mapping)
            self.envs = {"": self.group}
        elif is_selfplay_id(cfg.env.id):
            self.envs = {
                name: make_env(env_cfg, Fixed(fixed_player(name, cfg.env.id)))
                for name in cfg.selfplay.eval_opponents
            }
        else:
            self.envs = {"": make_env(env_cfg)}

    @property
    def env(self) -> Any:
        """The first env (or multi-agent group): its spaces are the policy's."""
        return next(iter(self.envs.values()))

    @property
    def render_fps(self) -> float:
        env = self.group.envs[0] if self.group is not None else self.env
        return render_fps(env)

    def play(
        self,
        policy: ActingPolicy | dict[str, ActingPolicy],
        episodes: int,
        seed: int,
        deterministic: bool,
        record_first: bool = False,
        on_step: Callable[[], None] | None = None,
    ) -> tuple[EpisodeResults, dict[str, float]]:
        """(every episode's results, the extra fields: per-player rates or per-policy
        returns): `episodes` per env. `policy`: one per policy, in the run's order, when a
        multi-agent run has several."""
        combined = EpisodeResults()
        rates: dict[str, float] = {}
        policies = policy if isinstance(policy, dict) else {"": policy}
        if self.group is not None:
            played, returns = play_multiagent_episodes(
                self.group, policies, episodes, seed, deterministic, record_first, on_step
            )
            if len(returns) > 1:
                rates = {f"return_mean_{p}": float(np.mean(r)) for p, r in returns.items()}
            return played, rates
        policy = next(iter(policies.values()))
        for k, (player, env) in enumerate(self.envs.items()):
            played = play_episodes(
                env,
                policy,
                episodes,
                derive_seed(seed, player) if player else seed,
                deterministic,
                clip_actions=self.cfg.env.clip_actions,
                record_first=record_first and k == 0,
                on_step=on_step,
            )
            combined.extend(played)
            if player:
                rates.update(outcome_rates(played.returns, player))
        return combined, rates

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


def _rows(info: EnvInfo) -> dict[str, np.ndarray]:
    """Observation arrays for the rows of one env of a policy."""
    specs = obs_specs(info.observation_space)
    return {k: np.zeros((info.rows_per_env, *s.shape), s.dtype) for k, s in specs.items()}


class InlineEvaluator:
    """Plays a version's published parameters in the calling process: the trainer's stop
    check when the run has no evaluation workers (surge/workers/trainer.py). The suite and
    the policy (`acting`: the algorithm's acting policy, models/acting.py) are made at the
    first call and kept. Single-policy runs: it plays `env`'s policy for every agent."""

    def __init__(self, cfg: ExperimentConfig, env: EnvInfo, acting: str) -> None:
        self.cfg, self.env, self.acting = cfg, env, acting
        self.suite: EvalSuite | None = None
        self.policy: ActingPolicy | None = None

    def __call__(self, flat: np.ndarray, episodes: int, seed: int) -> EpisodeResults:
        if self.suite is None or self.policy is None:
            self.suite = EvalSuite(self.cfg, video=False)
            device = role_device(self.cfg.eval.device, "eval.device")
            self.policy = acting_policy(self.acting, self.env, self.cfg, seed, device)
        self.policy.load(flat)
        played, _ = self.suite.play(self.policy, episodes, seed, self.cfg.eval.deterministic)
        return played

    def close(self) -> None:
        if self.suite is not None:
            self.suite.close()
