"""Adding an algorithm: A2C (synchronous advantage actor-critic, Mnih et al. 2016) as a
plug-in of surge, in one module, without touching surge itself.

Run from the repository root:

    .venv/bin/python examples/custom_algorithm.py
    .venv/bin/surge train cartpole-ppo algo=examples.custom_algorithm:A2C total_env_steps=2e5

An algorithm is one object (surge/recipes/base.py `Algorithm`); `algo: module:Object` names
it, no registration needed. This one reuses what PPO's family already has: its graph of
actors, policy workers and a trainer (surge/recipes/ppo.py), its acting policy (`FlatPolicy`)
and its sample stream. What it brings is its learner: the trainer chassis
(surge/workers/trainer.py) publishes versions, counts episodes, logs, checkpoints and stops;
the learner only says where its batches come from and what one update does.

The update: one gradient step per batch on `-log pi(a|s) * A - entropy + 0.5 * (R - V)^2`,
where R are the segment's returns (bootstrapped from V at its end, GAE with lambda 1) and
A = R - V. The `ppo` section's lr, gamma, ent_coef, vf_coef and max_grad_norm apply.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surge.algos.advantages import gae
from surge.config.load import load_config
from surge.evaluation.suite import InlineEvaluator
from surge.models.actor_critic import ActorCritic
from surge.models.weights import model_to_flat
from surge.recipes.ppo import PPOFamily
from surge.runtime.controller import train
from surge.streams.sample import SampleConsumer
from surge.workers.base import Binding, RunContext
from surge.workers.graph import Graph
from surge.workers.trainer import Evaluation, TrainerWorker, Update, eval_fields


class A2CLearner:
    """The chassis' `Learner` (surge/workers/trainer.py)."""

    name = "torch"

    def __init__(self, ctx: RunContext, b: Binding) -> None:
        self.cfg = ctx.cfg
        torch.manual_seed(ctx.cfg.seed)
        env = ctx.env
        self.model = ActorCritic(env.observation_space, env.action_space, ctx.cfg.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=ctx.cfg.ppo.lr)
        # Batch u is segment u of every env group, read in place (surge/streams/sample.py).
        self.samples = SampleConsumer(b.transport, b.port_of_kind("segments"), b.inbox, 0)
        self.wait = self.samples.poll
        self.steps = ctx.cfg.ppo.rollout_len
        self.loss = float("nan")
        # The stop check without evaluation workers plays the newest parameters here.
        self.evaluator = InlineEvaluator(ctx.cfg, env, ctx.acting_policy)

    def ready(self, version: int) -> bool:
        return self.samples.ready(version)

    def update(self, version: int) -> Update:
        a, T, p = self.samples.batch(version), self.steps, self.cfg.ppo
        obs = {k[4:]: torch.from_numpy(v[:T]) for k, v in a.items() if k.startswith("obs/")}
        last = {k[4:]: torch.from_numpy(v[T]) for k, v in a.items() if k.startswith("obs/")}
        flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in obs.items()}
        actions = torch.from_numpy(a["action"]).reshape(T * a["action"].shape[1], -1).squeeze(-1)
        logp, entropy, value = self.model.evaluate(flat, actions)
        values = value.detach().reshape(T, -1).numpy()
        with torch.no_grad():
            bootstrap = self.model.value(last).numpy()
        next_values = np.concatenate([values[1:], bootstrap[None]])
        done = a["terminated"] | a["truncated"]
        _, returns = gae(a["reward"], values, next_values, a["terminated"], done, p.gamma, 1.0)
        returns_t = torch.from_numpy(np.asarray(returns, np.float32).reshape(-1))
        advantage = returns_t - value.detach()
        loss = (
            -(logp * advantage).mean()
            - p.ent_coef * entropy.mean()
            + p.vf_coef * 0.5 * ((returns_t - value) ** 2).mean()
        )
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), p.max_grad_norm)
        self.optimizer.step()
        self.loss = loss.item()
        finished = a["game_over"]  # the episodes that ended in this batch, counted once
        return Update(
            env_steps=T * self.cfg.total_envs,
            returns=a["episode_return"][finished].tolist(),
            lengths=a["episode_length"][finished].tolist(),
        )

    def parameters(self) -> np.ndarray:
        return model_to_flat(self.model)  # what `FlatPolicy` loads in the acting workers

    def state(self) -> dict[str, Any]:
        # the model only: a resumed run starts a fresh Adam (checkpoints hold arrays and
        # string-keyed dicts, and torch keys the optimizer's state by parameter number)
        return {"model": self.model.state_dict()}

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict({k: torch.as_tensor(v) for k, v in state["model"].items()})

    def metrics(self, seconds: float) -> dict[str, Any]:
        return {"loss": self.loss}

    def eval_record(self, result: dict[str, float]) -> tuple[dict[str, Any], float]:
        return eval_fields(result), result["return_mean"]

    def evaluate(self, episodes: int, seed: int) -> Evaluation:
        played = self.evaluator(self.parameters(), episodes, seed)
        return Evaluation(played.return_mean, played.return_std, len(played.returns))

    def export(self, run_dir: Path, version: int, wait: bool) -> bool:
        return True  # the checkpoint is the whole of it

    def close(self) -> None:
        self.evaluator.close()


def build_trainer(ctx: RunContext, b: Binding) -> TrainerWorker:
    """The trainer worker: the chassis around the A2C learner."""
    return TrainerWorker(ctx, b, A2CLearner(ctx, b))


class A2CAlgorithm(PPOFamily):
    """PPO's graph, acting policy and settings checks, with A2C's trainer."""

    warm_module = None  # no trainer process started ahead (an optimisation PPO has)

    def describe(self, ctx: RunContext, graph: Graph) -> list[str]:
        names = ", ".join(spec.name for spec in graph.workers)
        return [f"workers: {names}; {ctx.cfg.total_envs} envs; learner A2C (torch)"]

    def graph(self, ctx: RunContext) -> Graph:
        graph = super().graph(ctx)
        workers = [
            dataclasses.replace(spec, factory=f"{__name__}:build_trainer")
            if spec.kind == "trainer"
            else spec
            for spec in graph.workers
        ]
        return dataclasses.replace(graph, workers=workers)


A2C = A2CAlgorithm("a2c")


def main() -> None:
    cfg, _ = load_config(
        "cartpole-ppo",
        [f"algo={__name__}:A2C", "ppo.lr=1e-3", "total_env_steps=200000", "log.progress=false"],
    )
    result = train(cfg, "cartpole-a2c")
    print(f"{result.reason} at {result.env_steps} steps: return {result.episode_return_mean:.1f}")


if __name__ == "__main__":
    main()
