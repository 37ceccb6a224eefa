"""The sample stream: trajectory segments from actors to the trainer, in place.

Layout: every field is `[depth, T(+1), N, ...]` where N is the total number of envs and env
group g owns columns `g*G:(g+1)*G` (SRL's "second-dim index"). Batch u is slot `u % depth`
of every field, already time-major `[T, N, ...]`: the trainer reads it without a copy.

The fields are the env's and the actor's (observations, action, reward, episode ends, the
policy version and actor life of each step) plus the algorithm's per-step policy outputs
(`outputs`: PPO's log-prob and value, algos/ppo_common.py): the algorithm owns its schema.

Flow control comes from versions, not locks (the stream's `VersionBound`, streams/flow.py).
Segment n of a group goes into slot `n % depth` with `depth = max_lag + 1`; an actor starts
segment n only with parameters of version >= n - max_lag, which the trainer publishes only
after it has finished training on batch n - depth, the previous tenant of that slot. So a
slot is never written while the trainer reads it, and no sample is older than the bound.

Completion is state, too: `published[g]` counts the segments group g has finished in this run
(bumped after the segment's last write; the channel record only wakes the trainer).

A reader that keeps what it reads (the replay) acknowledges instead: it copies each group's
segments in order and counts them in `consumed[g]` (`acked` streams), and an actor writes
segment k of a run into its slot only once the reader has consumed segment k - depth, the
slot's previous tenant (`SampleProducer.slot_free`). Their flow policy then only paces the
actors (streams/flow.py `RatioBound`); the acknowledgements keep the slots safe. A
restarted actor resumes each group at its first unfinished segment and rewrites it from the
start, so a half-written segment is never read. Every step is stamped with the `life` of the
actor process that wrote it (0, then 1 after a restart, ...), and the trainer checks that no
segment mixes two lives.
"""

from __future__ import annotations

import numpy as np

from surge.envs.spaces import ArraySpec
from surge.models.recurrent_state import RowFields
from surge.streams.ports import Port
from surge.streams.transport import WAKE, BlockLayout, Field, Transport

PROGRESS = "published"
CONSUMED = "consumed"
COUNTERS = (PROGRESS, CONSUMED)
"""Per-group counters of the block, beside the segment fields."""


def sample_layout(
    obs: dict[str, ArraySpec],
    action: ArraySpec,
    outputs: Outputs,
    depth: int,
    steps: int,
    envs: int,
    groups: int,
    active: bool = False,
    state: RowFields | None = None,
    acked: bool = False,
    info: dict[str, ArraySpec] | None = None,
) -> BlockLayout:
    """`envs`: columns (envs, or a multi-agent env's agents); `active`: record which columns'
    agents were in their episode at each step (envs/multiagent.py); `state`: a recurrent
    policy's per-segment state fields, [depth, 1, N, *shape] each (the state of each
    segment's first step: models/recurrent_state.py); `acked`: the reader acknowledges each
    segment it has consumed (`consumed`, see the module docstring); `info`: the env's
    recorded info entries (`env.info_keys`), `info/<key>` per step."""
    fields: dict[str, Field] = {PROGRESS: Field((groups,), "<i8")}
    if acked:
        fields[CONSUMED] = Field((groups,), "<i8")
    for k, s in obs.items():
        # obs[:, T] is the observation after the last step, for bootstrapping.
        fields[f"obs/{k}"] = Field((depth, steps + 1, envs, *s.shape), s.dtype.str)
        fields[f"final_obs/{k}"] = Field((depth, steps, envs, *s.shape), s.dtype.str)
    fields["action"] = Field((depth, steps, envs, *action.shape), action.dtype.str)
    for name, (dtype, shape) in output_fields(outputs).items():
        fields[name] = Field((depth, steps, envs, *shape), dtype)
    for name, dtype in [
        ("reward", "<f4"),
        ("terminated", "|b1"),
        ("truncated", "|b1"),
        ("version", "<i8"),  # policy version that chose each action
        ("life", "<i4"),  # which life of the writing actor process produced this step
        ("game_over", "|b1"),  # a reported episode ended here (differs with episodic life)
        ("episode_return", "<f4"),  # valid where game_over: the raw score of the episode
        ("episode_length", "<i8"),
    ]:
        fields[name] = Field((depth, steps, envs), dtype)
    if active:
        fields["active"] = Field((depth, steps, envs), "|b1")
    for key, spec in (info or {}).items():
        fields[f"info/{key}"] = Field((depth, steps, envs, *spec.shape), spec.dtype.str)
    for name, (dtype, shape) in (state or {}).items():
        fields[name] = Field((depth, 1, envs, *shape), dtype)
    return BlockLayout(fields)


Outputs = dict[str, str] | dict[str, tuple[str, tuple[int, ...]]]
"""The acting policy's per-step outputs: name -> dtype (a scalar per row), or name -> (dtype,
shape) (DQN's Q-values: one per action)."""


def output_fields(outputs: Outputs) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) of each output."""
    return {k: (v, ()) if isinstance(v, str) else v for k, v in outputs.items()}


def prefixed(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays of `arrays` whose names start with `prefix`, under their names without it."""
    return {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}


class SampleProducer:
    """An actor's writer: views of its groups' columns, and the publish notification."""

    def __init__(self, transport: Transport, port: Port, depth: int, group_size: int) -> None:
        arrays = transport.block(port.block)
        self.published = arrays[PROGRESS]
        self.consumed = arrays.get(CONSUMED)  # None: the reader does not acknowledge
        self.arrays = {k: v for k, v in arrays.items() if k not in COUNTERS}
        self.depth = depth
        self.group_size = group_size
        self.steps = int(self.arrays["reward"].shape[1])
        """T: steps in a segment."""
        (reader,) = port.sends_to
        self._channel = transport.channel(reader)

    def columns(self, group: int, segment: int) -> dict[str, np.ndarray]:
        """Views `[T(+1), G, ...]` of the slot where segment `segment` of `group` goes."""
        cols = slice(group * self.group_size, (group + 1) * self.group_size)
        slot = segment % self.depth
        return {k: v[slot, :, cols] for k, v in self.arrays.items()}

    def publish(self, group: int) -> None:
        """Segment of `group` written: count it and wake the reader."""
        self.published[group] += 1  # after every write of the segment
        self._channel.send(group)

    def slot_free(self, group: int, done: int) -> bool:
        """Whether segment `done` of this run (0, 1, ...) may be written: an acknowledging
        reader has consumed its slot's previous tenant (always, for other readers: their
        flow policy keeps the slots safe)."""
        return self.consumed is None or done < int(self.consumed[group]) + self.depth


class SampleConsumer:
    """The trainer's reader: batch u is ready once every group has published its segment u."""

    def __init__(self, transport: Transport, port: Port, inbox: str, first_batch: int) -> None:
        arrays = transport.block(port.block)
        self._published = arrays[PROGRESS]  # counted from 0 in each run (fresh shared memory)
        self.arrays = {k: v for k, v in arrays.items() if k not in COUNTERS}
        assert port.flow is not None, "the sample stream has a version bound"
        self.flow = port.flow
        self.depth = port.flow.depth
        self._first = first_batch
        self._channel = transport.channel(inbox)

    def poll(self, timeout: float) -> None:
        """Wait up to `timeout` for a wake-up from an actor (or the controller)."""
        self._channel.recv(timeout)

    def ready(self, batch: int) -> bool:
        """Whether every group has published its segment of batch `batch`."""
        return bool(self._first + self._published.min() > batch)

    def batch(self, batch: int) -> dict[str, np.ndarray]:
        """Views of batch `batch`: `[T(+1), N, ...]` per field, valid until the next publish."""
        slot = batch % self.depth
        return {k: v[slot] for k, v in self.arrays.items()}


def first_unfinished_segment(transport: Transport, block: str, group: int, first_batch: int) -> int:
    """Where an actor (re)starts group `group`: the first segment it has not published."""
    return first_batch + int(transport.block(block)[PROGRESS][group])


def lives_are_unmixed(life: np.ndarray, group_size: int) -> bool:
    """True if every group's segment in a batch `life` [T, N] was written by one actor life."""
    per_group = life.reshape(life.shape[0], -1, group_size).transpose(1, 0, 2)
    flat = per_group.reshape(per_group.shape[0], -1)
    return bool((flat.min(axis=1) == flat.max(axis=1)).all())


class SegmentReader:
    """An acknowledging reader (the replay): takes each of its groups' segments in order,
    as they are published, and counts them consumed, which frees their slots."""

    def __init__(self, transport: Transport, port: Port, first: int) -> None:
        arrays = transport.block(port.block)
        self._published, self._consumed = arrays[PROGRESS], arrays[CONSUMED]
        self.arrays = {k: v for k, v in arrays.items() if k not in COUNTERS}
        assert port.flow is not None, "the sample stream has a flow policy"
        self.depth = port.flow.depth
        self.groups = list(port.slots)
        self.group_size = self.arrays["reward"].shape[2] // len(self._published)
        self.steps = int(self.arrays["reward"].shape[1])
        """T: steps per segment."""
        self._first = first  # the run's first segment number (its start version)
        self._writers = {g: transport.channel(w) for w, gs in port.peer_slots for g in gs}

    def pending(self) -> list[int]:
        """Its groups with a published segment not yet consumed."""
        return [g for g in self.groups if self._published[g] > self._consumed[g]]

    def waiting(self, group: int) -> int:
        """Segments of `group` published and not yet consumed."""
        return int(self._published[group] - self._consumed[group])

    def consumed(self, group: int) -> int:
        """Segments of `group` consumed so far in this run (the next one's number)."""
        return int(self._consumed[group])

    def segment(self, group: int, ahead: int = 0) -> dict[str, np.ndarray]:
        """Views `[T(+1), G, ...]` of the group's next segment to consume (`ahead`: the one
        that many after it, if published)."""
        slot = (self._first + int(self._consumed[group]) + ahead) % self.depth
        cols = slice(group * self.group_size, (group + 1) * self.group_size)
        return {k: v[slot, :, cols] for k, v in self.arrays.items()}

    def ack(self, group: int) -> None:
        """The segment is consumed (after every read of it): its slot is free again, and
        the actor that may wait for it is woken."""
        self._consumed[group] += 1
        self._writers[group].send(WAKE)
