"""The sample stream: trajectory segments from actors to the trainer, in place.

Layout: every field is `[depth, T(+1), N, ...]` where N is the total number of envs and env
group g owns columns `g*G:(g+1)*G` (SRL's "second-dim index"). Batch u is slot `u % depth`
of every field, already time-major `[T, N, ...]`: the trainer reads it without a copy.

Flow control comes from versions, not locks. Segment n of a group goes into slot
`n % depth` with `depth = max_policy_lag + 1`; an actor starts segment n only with
parameters of version >= n - max_policy_lag, which the trainer publishes only after it has
finished training on batch n - depth, the previous tenant of that slot. So a slot is never
written while the trainer reads it, and no sample is older than the lag allows.
"""

from __future__ import annotations

import numpy as np

from surge.envs.spaces import ArraySpec
from surge.streams.transport import BlockLayout, Field, Transport

BLOCK = "samples"
CHANNEL = "trainer"


def sample_layout(
    obs: dict[str, ArraySpec], action: ArraySpec, depth: int, steps: int, envs: int
) -> BlockLayout:
    fields: dict[str, Field] = {}
    for k, s in obs.items():
        # obs[:, T] is the observation after the last step, for bootstrapping.
        fields[f"obs/{k}"] = Field((depth, steps + 1, envs, *s.shape), s.dtype.str)
        fields[f"final_obs/{k}"] = Field((depth, steps, envs, *s.shape), s.dtype.str)
    fields["action"] = Field((depth, steps, envs, *action.shape), action.dtype.str)
    for name, dtype in [
        ("logp", "<f4"),
        ("value", "<f4"),
        ("reward", "<f4"),
        ("terminated", "|b1"),
        ("truncated", "|b1"),
        ("version", "<i8"),  # policy version that chose each action
        ("game_over", "|b1"),  # a reported episode ended here (differs with episodic life)
        ("episode_return", "<f4"),  # valid where game_over: the raw score of the episode
        ("episode_length", "<i8"),
    ]:
        fields[name] = Field((depth, steps, envs), dtype)
    return BlockLayout(fields)


def prefixed(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}


class SampleProducer:
    """An actor's writer: views of its groups' columns, and the publish notification."""

    def __init__(self, transport: Transport, depth: int, group_size: int) -> None:
        self.arrays = transport.block(BLOCK)
        self.depth = depth
        self.group_size = group_size
        self._channel = transport.channel(CHANNEL)

    def columns(self, group: int, segment: int) -> dict[str, np.ndarray]:
        """Views `[T(+1), G, ...]` of the slot where segment `segment` of `group` goes."""
        cols = slice(group * self.group_size, (group + 1) * self.group_size)
        slot = segment % self.depth
        return {k: v[slot, :, cols] for k, v in self.arrays.items()}

    def publish(self, group: int) -> None:
        self._channel.send(group)


class SampleConsumer:
    """The trainer's reader: batch u is ready once every group has published its segment u."""

    def __init__(self, transport: Transport, depth: int, groups: int, first_batch: int) -> None:
        self.arrays = transport.block(BLOCK)
        self.depth = depth
        self._channel = transport.channel(CHANNEL)
        # Segments received per group, counted from the first batch of this run.
        self._received = np.full(groups, first_batch, dtype=np.int64)

    def poll(self, timeout: float) -> None:
        for g in self._channel.recv(timeout):
            if g >= 0:
                self._received[g] += 1

    def ready(self, batch: int) -> bool:
        return bool(self._received.min() > batch)

    def batch(self, batch: int) -> dict[str, np.ndarray]:
        """Views of batch `batch`: `[T(+1), N, ...]` per field, valid until the next publish."""
        slot = batch % self.depth
        return {k: v[slot] for k, v in self.arrays.items()}
