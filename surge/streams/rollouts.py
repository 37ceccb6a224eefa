"""The rollout stream of LLM RL: groups of completions, from generation to reward to trainer.

Group k (k = 0, 1, ...) is problem k of the run's training stream, sampled `group_size` times.
Batch b is groups `b*B .. b*B+B-1` (B = `rollout.prompts_per_batch`), trained by version b,
in that order: the data order is a function of the seed alone, so a resumed run sees what an
uninterrupted one would have.

Rows. Group k lives in row `k % R`, R = (max_policy_lag + 1) * B. The stream's version bound
(streams/flow.py, as for env segments) lets a generation worker start group k only with
parameters of version >= b - max_policy_lag (b = k // B): AReaL's staleness capacity rule
(at most (eta + v + 1) * B groups started at trainer version v) in the form that also names
each group's row. So the previous tenant of a row, group k - R, belongs to batch b - eta - 1,
already trained when group k may start: a row is never overwritten while it is read, and no
token is trained more than max_policy_lag versions after the version that produced it.

Hand-over is a state per row, written only by the row's current owner:

    EMPTY -> GENERATING (generation worker) -> GENERATED (it) -> SCORED (reward worker)
          [-> REFERENCED (reference worker, when the loss has a KL term)]

A row holds its group's prompt and, per member, one episode's trajectory after it
(surge/llm/episodes.py): its tokens, a loss mask over the policy's own tokens (env and tool
tokens stay in context with weight 0), behaviour log-probs and versions. A member's reward
is the episode's own (`rewarded`) or the reward worker's. `dropped` counts the episodes the
generation worker ran again because they ended without a trajectory.

Segments. A multi-turn episode whose context restarted (a summary, a truncation:
surge/llm/context.py) is several sequences, each starting from the prompt: member m's
segment s is sequence m * segments + s of the row (`segments` = 1 for single-turn tasks, so
those rows are one sequence per member). Unused segments have an empty mask. The reward,
`overlong` and the logged `stats` are per member; the trainer broadcasts a member's
advantage to its segments (SUPO, ReSum's advantage broadcasting). A group is handed on only
whole, so no segment of a half-run episode is ever read.

A row's `group` says which group it holds. A generation worker sets GENERATED only after the
last write of the group's last completion, and the reward worker reads only GENERATED rows;
so a generation worker killed mid-group leaves a GENERATING row that nobody reads, and its
next life generates that group again from the start. Channel records (row numbers) only wake
the reader; the states are the truth, so a lost or repeated record loses nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from surge.streams.flow import FlowPolicy
from surge.streams.transport import BlockLayout, Field, Transport

EMPTY, GENERATING, GENERATED, SCORED, REFERENCED = 0, 1, 2, 3, 4
FINISH = {"eos": 0, "stop": 1, "length": 2}
EPISODE_STATS = (
    "turns",
    "tool_calls",
    "summaries",
    "context_max",
    "summary_context",
    "summary_kept",
)
"""Per-episode numbers of multi-turn tasks that the trainer logs (NaN where not given)."""


def rollout_layout(
    rows: int, group_size: int, prompt_len: int, new_tokens: int, segments: int = 1
) -> BlockLayout:
    """The rollout block: `rows` rows of one group each (`group_size` episodes of up to `segments`
    segments of `new_tokens` tokens after a prompt of up to `prompt_len`), with their state, rewards
    and per-episode numbers."""
    g, n, q = group_size, new_tokens, group_size * segments
    return BlockLayout(
        {
            "state": Field((rows,), "<i8"),
            "group": Field((rows,), "<i8"),
            "life": Field((rows,), "<i4"),  # the generation worker's life that wrote it
            "prompt": Field((rows, prompt_len), "<i4"),
            "prompt_len": Field((rows,), "<i4"),
            "tokens": Field((rows, q, n), "<i4"),  # [row, member x segments + segment, token]
            "logprobs": Field((rows, q, n), "<f4"),  # behaviour log-probs
            "versions": Field((rows, q, n), "<i4"),  # the version that drew each token
            "mask": Field((rows, q, n), "|b1"),  # the policy's tokens: those that train
            "finish": Field((rows, g), "<i1"),
            "reward": Field((rows, g), "<f4"),
            "rewarded": Field((rows, g), "|b1"),  # the episode gave its reward
            "overlong": Field((rows, g), "|b1"),  # past its limits: trains no token
            "stats": Field((rows, g, len(EPISODE_STATS)), "<f4"),
            "dropped": Field((rows,), "<i4"),  # episodes dropped and run again
            "ref_logprobs": Field((rows, q, n), "<f4"),  # under the frozen reference model
        }
    )


class SegmentRecord(Protocol):
    """What a row keeps of one segment (surge/llm/episodes.py `Segment`)."""

    @property
    def tokens(self) -> Sequence[int]:
        """The segment's tokens after the prompt."""

    @property
    def mask(self) -> Sequence[bool]:
        """Which of `tokens` the policy wrote (they train; the env's do not)."""

    @property
    def logprobs(self) -> Sequence[float]:
        """The behaviour policy's log-prob of each token."""

    @property
    def versions(self) -> Sequence[int]:
        """The policy version that drew each token."""


class EpisodeRecord(Protocol):
    """What a row keeps of an episode (surge/llm/episodes.py `Trajectory`): its prompt, its
    segments, and the per-episode fields."""

    @property
    def prompt(self) -> Sequence[int]:
        """The prompt's tokens (the same for every episode of a group)."""

    @property
    def reward(self) -> float | None:
        """The episode's reward; None while it has none."""

    @property
    def finish(self) -> str:
        """Why the episode ended (a key of `FINISH`)."""

    @property
    def overlong(self) -> bool:
        """Whether it ran past its limits (then no token of it trains)."""

    @property
    def info(self) -> dict[str, Any]:
        """Per-episode numbers of multi-turn tasks (`EPISODE_STATS`)."""

    def segments(self) -> Sequence[SegmentRecord]:
        """The episode's segments, in order (one unless its context was summarised or truncated)."""


def trained_width(mask: np.ndarray) -> int:
    """Token positions up to the last policy token of any episode in `mask` [..., width]
    (at least 1): where a forward over the rows may stop, since nothing after it trains."""
    used = np.flatnonzero(mask.reshape(-1, mask.shape[-1]).any(axis=0))
    return int(used[-1]) + 1 if used.size else 1


def may_start(group: int, version: int, batch_groups: int, flow: FlowPolicy) -> bool:
    """Whether a generation worker holding parameters of `version` may start `group` (trained
    by version group // batch_groups): AReaL's capacity rule, (eta + version + 1) batches."""
    return flow.min_version(group // batch_groups) <= version


class RolloutRows:
    """A worker's view of the rollout block."""

    def __init__(
        self, transport: Transport, block: str, batch_groups: int, complete: int = SCORED
    ) -> None:
        self.a = transport.block(block)
        self.rows = self.a["state"].shape[0]
        self.segments = self.a["tokens"].shape[1] // self.a["reward"].shape[1]
        self.batch_groups = batch_groups
        self.complete = complete
        """The state in which a row is ready for the trainer (the last stage's)."""

    def row(self, group: int) -> int:
        """The row that holds `group` (rows are reused round-robin)."""
        return group % self.rows

    def holds(self, group: int, at_least: int) -> bool:
        """Row of `group` holds it, in state `at_least` or later."""
        r = self.row(group)
        return int(self.a["group"][r]) == group and int(self.a["state"][r]) >= at_least

    def begin(self, group: int, life: int) -> int:
        """Claim the row for `group` (a generation worker starting it)."""
        r = self.row(group)
        a = self.a
        a["state"][r] = GENERATING  # first: the row's old contents are no longer readable
        a["group"][r] = group
        a["life"][r] = life
        a["prompt_len"][r] = 0  # the first trajectory brings the group's prompt
        a["dropped"][r] = 0
        return r

    def put(self, r: int, member: int, trajectory: EpisodeRecord) -> None:
        """Write one episode's trajectory as member `member` of row `r`. Every episode of a
        group starts from the group's prompt (the first one written sets it)."""
        a, t = self.a, trajectory
        width = a["tokens"].shape[2]
        if not 0 < len(t.prompt) <= a["prompt"].shape[1]:
            raise ValueError(
                f"a prompt of {len(t.prompt)} tokens; the rollout rows hold 1 to "
                f"{a['prompt'].shape[1]}"
            )
        segments = t.segments()
        if len(segments) > self.segments:
            raise ValueError(
                f"an episode of {len(segments)} segments; the rollout rows hold "
                f"{self.segments} (context.max_summaries + 1; truncating, rollout.max_turns + 1)"
            )
        for s in segments:
            if len(s.tokens) > width:
                raise ValueError(
                    f"an episode of {len(s.tokens)} tokens after its prompt; the rollout rows "
                    f"hold {width} (rollout.max_new_tokens, or context.window)"
                )
        plen = int(a["prompt_len"][r])
        if plen == 0:
            a["prompt"][r] = 0
            a["prompt"][r, : len(t.prompt)] = t.prompt
            a["prompt_len"][r] = len(t.prompt)
        elif a["prompt"][r, :plen].tolist() != list(t.prompt):
            raise ValueError("the episodes of a group must start from the same prompt")
        first = member * self.segments
        for i, s in enumerate(segments):
            n = len(s.tokens)
            a["tokens"][r, first + i] = 0
            a["tokens"][r, first + i, :n] = s.tokens
            a["mask"][r, first + i] = False
            a["mask"][r, first + i, :n] = s.mask
            a["logprobs"][r, first + i] = 0.0
            a["logprobs"][r, first + i, :n] = s.logprobs
            a["versions"][r, first + i, :n] = s.versions
        if len(segments) < self.segments:
            a["mask"][r, first + len(segments) : first + self.segments] = False
        a["finish"][r, member] = FINISH[t.finish]
        a["rewarded"][r, member] = t.reward is not None
        if t.reward is not None:
            a["reward"][r, member] = t.reward
        a["overlong"][r, member] = t.overlong
        if self.segments > 1 or t.info:
            a["stats"][r, member] = [float(t.info.get(k, np.nan)) for k in EPISODE_STATS]

    def set_state(self, r: int, state: int) -> None:
        """Move row `r` to `state` (the stage that owns it next)."""
        self.a["state"][r] = state

    def in_state(self, state: int) -> list[int]:
        """The rows now in `state`."""
        return [int(r) for r in np.flatnonzero(self.a["state"] == state)]

    def batch_ready(self, batch: int) -> bool:
        """Whether every group of batch `batch` is in its row and complete."""
        start = batch * self.batch_groups
        return all(self.holds(k, self.complete) for k in range(start, start + self.batch_groups))

    def batch(self, batch: int) -> dict[str, np.ndarray]:
        """Copies of batch `batch`'s rows, in group order (the rows are refilled once the
        trainer publishes the next version, so it copies before)."""
        start = batch * self.batch_groups
        rows = [self.row(k) for k in range(start, start + self.batch_groups)]
        return {k: v[rows].copy() for k, v in self.a.items()}
