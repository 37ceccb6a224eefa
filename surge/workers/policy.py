"""The policy worker: batched inference for many actors, on versioned parameters.

Each poll takes every ready request (whole env groups from any of its actors), runs one
forward pass over all of them, and answers each with the version it used. Requests that need
a newer version than the one loaded wait in `pending`; the trainer's publish record wakes
the worker, which loads the new parameters between batches, never during one.
"""

from __future__ import annotations

import numpy as np
import torch

from surge.models.actor_critic import ActorCritic
from surge.streams.inference import InferenceServer, Routing
from surge.streams.params import ParameterService
from surge.streams.transport import Transport
from surge.workers.base import RunContext, derive_seed
from surge.workers.weights import flat_to_model


class PolicyWorker:
    def __init__(self, ctx: RunContext, index: int, transport: Transport) -> None:
        cfg = ctx.cfg
        self.name = f"policy-{index}"
        self.finished = False
        torch.set_num_threads(cfg.workers.policy_threads)
        self.model = ActorCritic(ctx.env.observation_space, ctx.env.action_space, cfg.model)
        self.model.eval()
        self.generator = torch.Generator().manual_seed(
            derive_seed(cfg.seed, "policy", ctx.resumes, index)
        )
        self.params = ParameterService(transport)
        self.server = InferenceServer(
            transport, index, Routing(cfg.workers.ring_size, cfg.workers.policy_workers)
        )
        self.flat = np.zeros(ctx.n_params, np.float32)
        self.loaded = -1  # version of the parameters in self.model; -1: none yet
        self.pending: set[int] = set()
        self.group_size = cfg.workers.envs_per_group

    def _servable(self) -> list[int]:
        return sorted(g for g in self.pending if self.server.min_version[g] <= self.loaded)

    def poll(self, timeout: float) -> bool:
        groups, _ = self.server.receive(0.0 if self._servable() else timeout)
        self.pending.update(groups)
        if self.params.latest_version() > self.loaded:
            self.loaded = self.params.read(self.flat)
            flat_to_model(self.flat, self.model)
        serve = self._servable()
        if not serve:
            return bool(groups)
        self.pending.difference_update(serve)
        self._infer(serve)
        self.server.respond(serve)
        return True

    def _infer(self, groups: list[int]) -> None:
        n = len(groups) * self.group_size
        obs = {
            k: torch.from_numpy(v[groups]).reshape(n, *v.shape[2:])
            for k, v in self.server.obs.items()
        }
        with torch.inference_mode():
            action, logp, value = self.model.act(obs, generator=self.generator)
        s = self.server
        s.action[groups] = action.reshape(len(groups), self.group_size, *s.action.shape[2:]).numpy()
        s.logp[groups] = logp.reshape(len(groups), self.group_size).numpy()
        s.value[groups] = value.reshape(len(groups), self.group_size).numpy()
        s.version[groups] = self.loaded

    def close(self) -> None:
        pass
