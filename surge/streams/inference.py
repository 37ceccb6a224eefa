"""The inference stream: actors post observations of a whole env group, policy workers answer.

One slot per env group (global group id `g`). The actor's env group writes observations
straight into its request slot; the actor then sends `g` to its policy worker's channel.
The policy worker batches every ready slot, runs one forward pass, writes actions, log-probs,
values and the policy version into the same slots, and sends `g` back on the actor's channel.

A request carries `min_version`: the policy worker holds it until it has loaded parameters at
least that new. This is how `max_policy_lag` is enforced without the actor ever polling the
parameter service: each actor waits on exactly one channel.

Requests are sent `inference_splits` times per ring rotation: posts are buffered and flushed
as one channel write every `ring_size / inference_splits` groups (and always before the actor
blocks), trading a little latency for fewer, larger messages.

With `workers.inference: inline` the same slots are used, but the actor answers its own
requests (workers/policy.py `InlineInference`); the trainer then notifies the actors'
`inline_channel`s of new parameters instead of policy workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from surge.envs.spaces import ArraySpec
from surge.streams.transport import PARAMS_UPDATED, BlockLayout, Channel, Field, Transport

BLOCK = "inference"


def policy_channel(p: int) -> str:
    return f"policy-{p}"


def actor_channel(a: int) -> str:
    return f"actor-{a}"


def inline_channel(a: int) -> str:
    """Parameter announcements for actor `a` when it runs its policy inline."""
    return f"actor-{a}"


def inference_layout(
    obs: dict[str, ArraySpec], action: ArraySpec, groups: int, group_size: int
) -> BlockLayout:
    fields = {
        f"obs/{k}": Field((groups, group_size, *s.shape), s.dtype.str) for k, s in obs.items()
    }
    fields["min_version"] = Field((groups,), "<i8")
    fields["action"] = Field((groups, group_size, *action.shape), action.dtype.str)
    fields["logp"] = Field((groups, group_size), "<f4")
    fields["value"] = Field((groups, group_size), "<f4")
    fields["version"] = Field((groups,), "<i8")
    return BlockLayout(fields)


def request_obs(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The observation fields of the inference block, keyed without the `obs/` prefix."""
    return {k[len("obs/") :]: v for k, v in arrays.items() if k.startswith("obs/")}


@dataclass
class Routing:
    """Which policy worker serves a group and which actor owns it."""

    ring_size: int
    policy_workers: int

    def actor_of(self, group: int) -> int:
        return group // self.ring_size

    def policy_of(self, group: int) -> int:
        return self.actor_of(group) % self.policy_workers


class InferenceClient:
    """The actor side of remote inference."""

    def __init__(
        self, transport: Transport, actor: int, routing: Routing, posts_per_flush: int = 1
    ) -> None:
        arrays = transport.block(BLOCK)
        self._min_version = arrays["min_version"]
        self._policy = transport.channel(
            policy_channel(routing.policy_of(actor * routing.ring_size))
        )
        self._responses = transport.channel(actor_channel(actor))
        self._outbox: list[int] = []
        self._posts_per_flush = posts_per_flush

    def post(self, group: int, min_version: int) -> None:
        """The group's observations are in its slot: ask for its actions."""
        self._min_version[group] = min_version
        self._outbox.append(group)
        if len(self._outbox) >= self._posts_per_flush:
            self.flush()

    def flush(self) -> None:
        if self._outbox:
            self._policy.send(*self._outbox)
            self._outbox.clear()

    def ready(self, timeout: float) -> list[int]:
        """Groups whose responses arrived (waits up to `timeout` for the first)."""
        self.flush()  # never block on an answer to a request not yet sent
        return [g for g in self._responses.recv(timeout) if g >= 0]


class InferenceServer:
    """The policy worker side."""

    def __init__(self, transport: Transport, policy: int, routing: Routing) -> None:
        self.arrays = transport.block(BLOCK)
        self._requests = transport.channel(policy_channel(policy))
        self._transport = transport
        self._routing = routing
        self._actor_channels: dict[int, Channel] = {}

    def receive(self, timeout: float) -> tuple[list[int], bool]:
        """(newly ready groups, whether new parameters were announced)."""
        records = self._requests.recv(timeout)
        return [g for g in records if g >= 0], PARAMS_UPDATED in records

    def respond(self, groups: list[int]) -> None:
        by_actor: dict[int, list[int]] = {}
        for g in groups:
            by_actor.setdefault(self._routing.actor_of(g), []).append(g)
        for actor, gs in by_actor.items():
            if actor not in self._actor_channels:
                self._actor_channels[actor] = self._transport.channel(actor_channel(actor))
            self._actor_channels[actor].send(*gs)
