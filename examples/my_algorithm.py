"""An algorithm plug-in of your own, config section included: A2C (synchronous advantage
actor-critic, Mnih et al. 2016, with Stable-Baselines3's defaults) in one module, without
touching surge.

    .venv/bin/surge train cartpole-ppo algo=examples.my_algorithm:A2C a2c.lr=7e-4
    .venv/bin/python examples/my_algorithm.py

An algorithm is one object (surge/recipes/base.py `Algorithm`); `algo: module:Object` names
it, no registration needed. What this one brings:

- its settings: `A2CConfig`, the section `a2c` (`config_sections`), with defaults and range
  rules (surge/config/rules.py). surge validates it, takes `a2c.*` overrides and saves it
  with the run's config like any section; the learner reads it with `cfg.section("a2c")`.
- its learner: one gradient step per batch of `a2c.n_steps` steps of every env, on
  `-log pi(a|s) A - ent_coef H + vf_coef (R - V)^2`, R the returns (GAE with
  `a2c.gae_lambda`, bootstrapped from V at each segment's end and at time limits), with
  RMSprop. The trainer chassis (surge/workers/trainer.py) publishes versions, counts
  episodes, logs, checkpoints and stops; `EnvLearner` evaluates and closes.

What it reuses: PPO's graph of actors, policy workers and a trainer, its trainer factory
replaced (surge/recipes/ppo.py `ppo_graph`), PPO's acting policy (`FlatPolicy`) and its sample
stream. Nothing of the `ppo` section applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

import surge
from surge.algos.advantages import gae
from surge.algos.ppo import bootstrap_next_values
from surge.config.rules import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, UNIT, between, ruled
from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError
from surge.learners.base import EnvLearner
from surge.learners.ppo import slot_batch
from surge.models.actor_critic import ActorCritic
from surge.models.weights import model_to_flat
from surge.recipes.ppo import PPOFamily, ppo_graph
from surge.streams.sample import SampleConsumer
from surge.workers.base import Binding, RunContext
from surge.workers.graph import Graph
from surge.workers.trainer import TrainerWorker, Update


@dataclass
class A2CConfig:
    """A2C's settings (defaults: Stable-Baselines3's A2C)."""

    lr: float = ruled(7e-4, POSITIVE)
    """RMSprop learning rate."""

    n_steps: int = ruled(5, AT_LEAST_ONE)
    """Steps per env in one update's batch."""

    gamma: float = ruled(0.99, between(0, 1, "(]"))
    """Discount factor."""

    gae_lambda: float = ruled(1.0, UNIT)
    """GAE lambda (1: the n-step returns of the original A2C)."""

    ent_coef: float = ruled(0.0, NON_NEGATIVE)
    """Entropy bonus coefficient."""

    vf_coef: float = ruled(0.5, NON_NEGATIVE)
    """Value loss coefficient."""

    max_grad_norm: float = ruled(0.5, POSITIVE)
    """Global gradient-norm clip."""

    rms_alpha: float = ruled(0.99, between(0, 1, "()"))
    """RMSprop's smoothing constant."""

    rms_eps: float = ruled(1e-5, POSITIVE)
    """RMSprop's epsilon."""


class A2CLearner(EnvLearner):
    """The chassis' `Learner` (surge/workers/trainer.py); evaluation and export come from
    `EnvLearner`."""

    name = "torch"

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        super().__init__(ctx)
        self.cfg, self.a2c = ctx.cfg, ctx.cfg.section("a2c")
        torch.manual_seed(ctx.cfg.seed)
        env = ctx.env
        self.model = ActorCritic(env.observation_space, env.action_space, ctx.cfg.model)
        a = self.a2c
        self.optimizer = torch.optim.RMSprop(
            self.model.parameters(), lr=a.lr, alpha=a.rms_alpha, eps=a.rms_eps
        )
        # Batch u is segment u of every env group, read in place (surge/streams/sample.py).
        self.samples = SampleConsumer(b.transport, b.port_of_kind("segments"), b.inbox, 0)
        self.wait = self.samples.poll
        self.stats: dict[str, float] = {}

    def ready(self, version: int) -> bool:
        return self.samples.ready(version)

    def update(self, version: int) -> Update:
        arrays, a = self.samples.batch(version), self.a2c
        batch = slot_batch(arrays, a.n_steps, torch.from_numpy)  # [T, N] tensors, no copy
        T, N = batch.rewards.shape
        flat_obs = {k: v.reshape(T * N, *v.shape[2:]) for k, v in batch.obs.items()}
        actions = batch.actions.reshape(T * N, *batch.actions.shape[2:])
        logp, entropy, value = self.model.evaluate(flat_obs, actions)
        values = value.detach().reshape(T, N)
        next_values = bootstrap_next_values(self.model, batch, values)
        done = batch.terminated | batch.truncated
        _, returns = gae(
            batch.rewards.numpy(), values.numpy(), next_values.numpy(),
            batch.terminated.numpy(), done.numpy(), a.gamma, a.gae_lambda,
        )  # fmt: skip
        returns_t = torch.as_tensor(np.asarray(returns, np.float32).reshape(-1))
        advantage = returns_t - value.detach()
        policy_loss = -(logp * advantage).mean()
        value_loss = ((returns_t - value) ** 2).mean()
        loss = policy_loss - a.ent_coef * entropy.mean() + a.vf_coef * value_loss
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.max_grad_norm)
        self.optimizer.step()
        self.stats = {"loss": loss.item(), "value_loss": value_loss.item()}
        finished = arrays["game_over"]  # the episodes that ended in this batch, counted once
        return Update(
            env_steps=T * N,
            returns=arrays["episode_return"][finished].tolist(),
            lengths=arrays["episode_length"][finished].tolist(),
        )

    def parameters(self) -> np.ndarray:
        return model_to_flat(self.model)  # what `FlatPolicy` loads in the acting workers

    def state(self) -> dict[str, Any]:
        # the model only: a resumed run starts a fresh RMSprop (checkpoints hold arrays and
        # string-keyed dicts, and torch keys the optimizer's state by parameter number)
        return {"model": self.model.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})

    def metrics(self, seconds: float) -> dict[str, Any]:
        return dict(self.stats)


def build_trainer(ctx: RunContext, b: Binding) -> TrainerWorker:
    """The trainer worker: the chassis around the A2C learner."""
    return TrainerWorker(ctx, b, A2CLearner(ctx, b))


class A2CAlgorithm(PPOFamily):
    """PPO's graph and acting policy with A2C's trainer and settings."""

    config_sections: ClassVar[dict[str, type]] = {"a2c": A2CConfig}
    warm_module = None  # no trainer process started ahead (an optimisation PPO has)

    def validate(self, cfg: ExperimentConfig) -> None:
        if cfg.model.core != "none":
            raise ConfigError(
                f"model.core={cfg.model.core}: this A2C trains feed-forward policies",
                "set model.core=none",
            )

    def graph(self, ctx: RunContext) -> Graph:
        steps = ctx.cfg.section("a2c").n_steps
        return ppo_graph(ctx, trainer=f"{__name__}:build_trainer", steps=steps)

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        a, names = ctx.cfg.section("a2c"), ", ".join(spec.name for spec in graph.workers)
        return [
            f"workers: {names}; {ctx.cfg.total_envs} envs; learner A2C (torch), "
            f"{a.n_steps} steps per env per update, lr {a.lr:g}"
        ]


A2C = A2CAlgorithm("a2c", vtrace=False)


def main() -> None:
    # `algo` names this module's plug-in; under `python examples/my_algorithm.py` that is
    # `__main__:A2C`, which every worker finds in the script it imports (spawn).
    run = surge.train(
        "cartpole-ppo",
        algo=f"{__name__}:A2C",
        workers__envs_per_group=4,
        total_env_steps=500_000,
        stop_return=475,
        eval__episodes=20,
        log__progress=False,
    )
    result = run.result
    assert result is not None
    print(f"{result.reason} at {result.env_steps} steps: return {result.episode_return_mean:.1f}")


if __name__ == "__main__":
    main()
