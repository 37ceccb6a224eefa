"""The inference stream: actors post observations of a whole env group, policy workers answer.

One slot per env group (global group id `g`). The actor's env group writes observations
straight into its request slot; the actor then sends `g` to its policy worker's inbox.
The policy worker batches every ready slot, runs one forward pass, writes the action, the
algorithm's per-step policy outputs (PPO: log-prob and value) and the policy version into the
same slots, and sends `g` back to the actor's inbox. Who serves which groups is the graph's
business: each side reads it from its port (streams/ports.py).

Requests are state, not messages: a slot is pending while its `request_id` (bumped by the
actor after writing the observations) is ahead of its `response_id` (set by whoever answered,
to the id it read before reading the observations). Channel records only wake the other side.
So a restarted policy worker finds every unanswered request by looking at the slots, and an
actor accepts only the answer to its latest request: an answer computed for a previous life of
the actor (or from observations being overwritten) has a stale id and is ignored.

A request carries `min_version`: the policy worker holds it until it has loaded parameters at
least that new. This is how the stream's version bound (streams/flow.py) is enforced without
the actor ever polling the parameter service: each actor waits on exactly one channel.

Requests are sent `inference_splits` times per ring rotation: posts are buffered and flushed
as one channel write every `ring_size / inference_splits` groups (and always before the actor
blocks), trading a little latency for fewer, larger messages.

Since the slots say what is answered, a waiting side first polls them for a moment
(`workers.inference_spin_us`, streams/spin.py) and sleeps on its channel only when nothing
comes: a policy worker on another core answers a small batch faster than a sleeper wakes.

With `workers.inference: inline` the same slots are used, but the actor answers its own
requests (workers/policy.py `InlineInference`) and hears of new parameters in its inbox.
"""

from __future__ import annotations

import time

import numpy as np

from surge.envs.spaces import ArraySpec
from surge.models.recurrent_state import RowFields
from surge.streams.ports import Port
from surge.streams.sample import Outputs, output_fields
from surge.streams.spin import polling
from surge.streams.transport import BlockLayout, Field, Transport
from surge.tracking.timing import Timers


def inference_layout(
    obs: dict[str, ArraySpec],
    action: ArraySpec,
    outputs: Outputs,
    groups: int,
    group_size: int,
    state: RowFields | None = None,
) -> BlockLayout:
    """`outputs`: the algorithm's per-step policy outputs besides the action (name -> dtype, or
    name -> (dtype, shape): streams/sample.py `Outputs`).
    `state`: a recurrent policy's per-row state fields, [groups, G, *shape] each (the state a
    request carries and the one its answer returns: models/recurrent_state.py)."""
    fields = {
        f"obs/{k}": Field((groups, group_size, *s.shape), s.dtype.str) for k, s in obs.items()
    }
    fields["min_version"] = Field((groups,), "<i8")
    fields["request_id"] = Field((groups,), "<i8")
    fields["response_id"] = Field((groups,), "<i8")
    fields["action"] = Field((groups, group_size, *action.shape), action.dtype.str)
    for name, (dtype, shape) in output_fields(outputs).items():
        fields[name] = Field((groups, group_size, *shape), dtype)
    for name, (dtype, shape) in (state or {}).items():
        fields[name] = Field((groups, group_size, *shape), dtype)
    fields["version"] = Field((groups,), "<i8")
    return BlockLayout(fields)


def request_obs(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The observation fields of the inference block, keyed without the `obs/` prefix."""
    return {k[len("obs/") :]: v for k, v in arrays.items() if k.startswith("obs/")}


class InferenceClient:
    """The actor side of remote inference."""

    def __init__(
        self,
        transport: Transport,
        port: Port,
        inbox: str,
        timers: Timers,
        posts_per_flush: int = 1,
        spin_s: float = 0.0,
    ) -> None:
        arrays = transport.block(port.block)
        self._min_version = arrays["min_version"]
        self._request_id, self._response_id = arrays["request_id"], arrays["response_id"]
        (server,) = port.sends_to  # the policy worker serving this actor
        self._policy = transport.channel(server)
        self._responses = transport.channel(inbox)
        self._outbox: list[int] = []
        self._posts_per_flush = posts_per_flush
        self._asked: list[int] = []  # groups posted whose answers `ready` has not returned
        self._spin = polling(spin_s, self._responses.concurrent)
        self._timers = timers

    def post(self, group: int, min_version: int) -> None:
        """The group's observations are in its slot: ask for its actions."""
        self._min_version[group] = min_version
        self._request_id[group] += 1  # after the observations: publishes them
        if group not in self._asked:  # a ring's worth at most (several lanes never call ready)
            self._asked.append(group)
        self._outbox.append(group)
        if len(self._outbox) >= self._posts_per_flush:
            self.flush()

    def flush(self) -> None:
        """Send the requests posted since the last flush to the policy worker, in one write."""
        if self._outbox:
            self._policy.send(*self._outbox)
            self._outbox.clear()

    def answered(self, group: int) -> bool:
        """Whether the group's latest request has its answer."""
        return bool(self._response_id[group] == self._request_id[group])

    def _take_answered(self) -> list[int]:
        """The asked groups whose latest requests are answered, no longer asked."""
        req, resp = self._request_id, self._response_id
        done = [g for g in self._asked if resp[g] == req[g]]
        if done:
            self._asked = [g for g in self._asked if g not in done]
        return done

    def ready(self, timeout: float) -> list[int]:
        """Groups whose answers to their latest request arrived (waits up to `timeout`).
        The slots say which; the channel's records only wake a sleeping actor."""
        self.flush()  # never block on an answer to a request not yet sent
        self._responses.recv(0.0)  # wake-ups of answers the slots already show
        done = self._take_answered()
        if done or timeout <= 0:
            return done
        done = self._spin.poll(self._take_answered) or []
        if done:
            return done
        waited = time.perf_counter()
        self._responses.recv(timeout)
        self._spin.slept(self._timers.add_wait(waited) - waited)
        return self._take_answered()


class InferenceServer:
    """The policy worker side."""

    def __init__(self, transport: Transport, port: Port, inbox: str) -> None:
        self.arrays = transport.block(port.block)
        self.groups = np.array(port.slots, dtype=np.int64)
        self._request_id = self.arrays["request_id"]
        self._response_id = self.arrays["response_id"]
        self._requests = transport.channel(inbox)
        self._client_of = {g: a for a in port.hears_from for g in port.slots_of(a)}
        """group -> the actor that owns it (whose inbox gets the answer)"""
        self._inboxes = {a: transport.channel(a) for a in port.hears_from}

    @property
    def concurrent(self) -> bool:
        """Whether its clients run beside it (not in its thread: the serial runtime)."""
        return self._requests.concurrent

    def receive(self, timeout: float) -> bool:
        """Wait up to `timeout` for a request or a parameter announcement; True if any came."""
        return bool(self._requests.recv(timeout))

    def pending(self) -> set[int]:
        """This worker's groups with an unanswered request (read from the slots)."""
        g = self.groups
        return set(g[self._request_id[g] > self._response_id[g]].tolist())

    def respond(self, groups: list[int]) -> None:
        """Wake the actors of `groups`: their actions are in the slots."""
        by_client: dict[str, list[int]] = {}
        for g in groups:
            by_client.setdefault(self._client_of[g], []).append(g)
        for actor, gs in by_client.items():
            self._inboxes[actor].send(*gs)
