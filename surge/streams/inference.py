"""The inference stream: actors post observations of a whole env group, policy workers answer.

One slot per env group (global group id `g`). The actor's env group writes observations
straight into its request slot; the actor then sends `g` to its policy worker's channel.
The policy worker batches every ready slot, runs one forward pass, writes actions, log-probs,
values and the policy version into the same slots, and sends `g` back on the actor's channel.

Requests are state, not messages: a slot is pending while its `request_id` (bumped by the
actor after writing the observations) is ahead of its `response_id` (set by whoever answered,
to the id it read before reading the observations). Channel records only wake the other side.
So a restarted policy worker finds every unanswered request by looking at the slots, and an
actor accepts only the answer to its latest request: an answer computed for a previous life of
the actor (or from observations being overwritten) has a stale id and is ignored.

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
from surge.streams.transport import BlockLayout, Channel, Field, Transport

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
    fields["request_id"] = Field((groups,), "<i8")
    fields["response_id"] = Field((groups,), "<i8")
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

    def groups_of_policy(self, policy: int, actors: int) -> np.ndarray:
        return np.array(
            [
                a * self.ring_size + k
                for a in range(policy, actors, self.policy_workers)
                for k in range(self.ring_size)
            ],
            dtype=np.int64,
        )


class InferenceClient:
    """The actor side of remote inference."""

    def __init__(
        self, transport: Transport, actor: int, routing: Routing, posts_per_flush: int = 1
    ) -> None:
        arrays = transport.block(BLOCK)
        self._min_version = arrays["min_version"]
        self._request_id, self._response_id = arrays["request_id"], arrays["response_id"]
        self._policy = transport.channel(
            policy_channel(routing.policy_of(actor * routing.ring_size))
        )
        self._responses = transport.channel(actor_channel(actor))
        self._outbox: list[int] = []
        self._posts_per_flush = posts_per_flush

    def post(self, group: int, min_version: int) -> None:
        """The group's observations are in its slot: ask for its actions."""
        self._min_version[group] = min_version
        self._request_id[group] += 1  # after the observations: publishes them
        self._outbox.append(group)
        if len(self._outbox) >= self._posts_per_flush:
            self.flush()

    def flush(self) -> None:
        if self._outbox:
            self._policy.send(*self._outbox)
            self._outbox.clear()

    def ready(self, timeout: float) -> list[int]:
        """Groups whose answers to their latest request arrived (waits up to `timeout`)."""
        self.flush()  # never block on an answer to a request not yet sent
        req, resp = self._request_id, self._response_id
        return [g for g in self._responses.recv(timeout) if g >= 0 and resp[g] == req[g]]


class InferenceServer:
    """The policy worker side."""

    def __init__(self, transport: Transport, policy: int, routing: Routing, actors: int) -> None:
        self.arrays = transport.block(BLOCK)
        self.groups = routing.groups_of_policy(policy, actors)
        self._request_id = self.arrays["request_id"]
        self._response_id = self.arrays["response_id"]
        self._requests = transport.channel(policy_channel(policy))
        self._transport = transport
        self._routing = routing
        self._actor_channels: dict[int, Channel] = {}

    def receive(self, timeout: float) -> bool:
        """Wait up to `timeout` for a request or a parameter announcement; True if any came."""
        return bool(self._requests.recv(timeout))

    def pending(self) -> set[int]:
        """This worker's groups with an unanswered request (read from the slots)."""
        g = self.groups
        return set(g[self._request_id[g] > self._response_id[g]].tolist())

    def respond(self, groups: list[int]) -> None:
        by_actor: dict[int, list[int]] = {}
        for g in groups:
            by_actor.setdefault(self._routing.actor_of(g), []).append(g)
        for actor, gs in by_actor.items():
            if actor not in self._actor_channels:
                self._actor_channels[actor] = self._transport.channel(actor_channel(actor))
            self._actor_channels[actor].send(*gs)
