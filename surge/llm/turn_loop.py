"""The turn loop of a multi-turn text episode: the policy writes, the env answers, and the
working context's rule (surge/llm/context.py) acts when an exchange would not fit.

Written once for two writers: the policy (`await engine.generate(...)`) and the env's expert
(the warm start's transcripts), so both see the same contexts and limits. What the loop
guarantees, whatever the env's lengths (pinned by tests/unit/test_text_env_window.py): no
context the policy is shown, with the room it is given, passes the window W, and no segment
(a training row: the prompt and the segment's tokens) is longer than W.

- An exchange (an action and its observation) that fits the limit joins the context.
- `none`: one that does not ends the episode with reward 0 (`end: window`).
- `truncate`: the context restarts with the most recent exchanges and this one; an exchange
  that no fresh context holds ends the episode as overlong.
- `summarize` (SUPO): the exchange leaves, the policy summarises into the room the reserve
  (and the window) leaves, and the context restarts as prompt + summary; out of summaries,
  or of room for one, the episode is overlong.
- An action cut by the window is never sent to the env; the last observation is never read,
  so it is cut to what fits rather than ending the episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from surge.llm.context import (
    ContextRule,
    action_room,
    crosses,
    kept_exchanges,
    summary_room,
)
from surge.llm.env_checks import TextEnvError
from surge.llm.episodes import EpisodeEngine, Segment, Trajectory


@dataclass(frozen=True)
class EpisodeLimits:
    """What bounds a multi-turn episode (`context.*`, `rollout.*`)."""

    rule: ContextRule
    max_new_tokens: int = 16
    """A turn's longest text."""
    max_tool_calls: int = 100
    max_turns: int = 100
    instruction: str = "S:"
    """Appended to ask for a summary (summarize only)."""
    stop: tuple[str, ...] = ("\n",)
    """What ends a turn (`rollout.stop`)."""

    @property
    def max_summaries(self) -> int:
        return self.rule.max_segments - 1

    @property
    def longest_turn(self) -> int:
        """The most tokens one request may ask for: an action, or a summary."""
        return max(self.max_new_tokens, self.rule.summary_tokens)


def limits_record(limits: EpisodeLimits) -> dict[str, Any]:
    """`limits` as plain values (the warm start's cache key), `limits_from` reverses it."""
    record = dataclasses.asdict(limits)
    record["stop"] = list(limits.stop)
    return record


def limits_from(record: dict[str, Any]) -> EpisodeLimits:
    fields = dict(record)
    fields["rule"] = ContextRule(**fields["rule"])
    fields["stop"] = tuple(fields["stop"])
    return EpisodeLimits(**fields)


# What the loop's writer returns: tokens, behaviour log-probs, versions, finish reason.
Written = tuple[list[int], list[float], list[int], str]


@dataclass
class _Segment:
    """A segment being built: its tokens after the prompt, and where its exchanges start."""

    tokens: list[int] = field(default_factory=list)
    mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    exchanges: list[tuple[int, int]] = field(default_factory=list)  # (start, length)

    def add(self, tokens: list[int], written: Written | None = None) -> None:
        """Append env tokens (weight 0), or the policy's `written` text (trained)."""
        if written is None:
            self.tokens += tokens
            self.mask += [False] * len(tokens)
            self.logprobs += [0.0] * len(tokens)
            self.versions += [-1] * len(tokens)
            return
        self.tokens += written[0]
        self.mask += [True] * len(written[0])
        self.logprobs += written[1]
        self.versions += written[2]

    def frozen(self) -> Segment:
        return Segment(self.tokens, self.mask, self.logprobs, self.versions)


Writer = Callable[[list[int], int, bool], Any]
"""`write(context, max_new, summarize)`: awaited for a turn's (or a summary's) text."""


async def text_episode(
    env: Any, engine: EpisodeEngine, prompt_text: str, limits: EpisodeLimits, write: Writer
) -> Trajectory | None:
    """One episode of `env` (reset already) with `write` as the policy: the turn loop with
    the context rule, segments and limits of `limits`."""
    return await _Episode(env, engine, prompt_text, limits, write).run()


class _Episode:
    """One episode's state through its turns: the segments so far and the one being built,
    the reward, and the numbers it reports."""

    def __init__(
        self, env: Any, engine: EpisodeEngine, prompt_text: str, limits: EpisodeLimits,
        write: Writer,
    ) -> None:  # fmt: skip
        self.env, self.engine, self.limits, self.write = env, engine, limits, write
        self.rule = rule = limits.rule
        self.prompt = engine.encode_prompt(prompt_text)
        if len(self.prompt) >= rule.window:
            raise _too_long(env, "reset's prompt", len(self.prompt), rule.window)
        self.instruction = engine.encode(limits.instruction)
        self.done: list[Segment] = []
        self.segment = _Segment()
        self.reward, self.turns, self.tool_calls = 0.0, 0, 0
        self.longest = len(self.prompt)
        self.finish, self.end = "stop", "done"
        self.kept: list[float] = []  # the env's share of facts kept, per summary
        self.dropped: list[Segment] = []  # the turns that crossed the trigger, in context
        self.at_summary: list[int] = []  # the context when each summary was asked for

    async def run(self) -> Trajectory:
        while not await self._turn():
            pass
        self.done.append(self.segment.frozen())
        return self._trajectory()

    def _restart(self, carry: list[int]) -> None:
        """A new segment, holding `carry` as context."""
        self.done.append(self.segment.frozen())
        self.segment = _Segment()
        self.segment.add(carry)

    async def _turn(self) -> bool:
        """One action and the env's answer, or the rule's act; True when the episode ends."""
        limits, rule = self.limits, self.rule
        if self.tool_calls >= limits.max_tool_calls or self.turns >= limits.max_turns:
            self.end = "overlong"  # it has not finished within its limits
            return True
        context = self.prompt + self.segment.tokens
        room = action_room(rule, len(context), limits.max_new_tokens)
        written: Written | None = None
        if room > 0:
            written = await self.write(context, room, False)
            self.turns += 1
            self.finish = written[3]
            self.longest = max(self.longest, len(context) + len(written[0]))
        cut = written is None or (self.finish == "length" and room < limits.max_new_tokens)
        if written is not None and self.finish == "eos":
            self.segment.add([], written)
            self.end = "eos"  # the policy ended the episode
            return True
        observation: list[int] = []
        terminated = False
        if not cut:
            assert written is not None
            observation, terminated = self._step(written[0])
        if terminated:  # the last observation is never read: the row keeps what fits W
            fits = rule.window - len(context) - (0 if written is None else len(written[0]))
            observation = observation[: max(fits, 0)]
        exchange = 0 if written is None else len(written[0]) + len(observation)
        if terminated or not (cut or crosses(rule, len(context), exchange)):
            assert written is not None
            start = len(self.segment.tokens)
            self.segment.add([], written)
            self.segment.add(observation)
            self.segment.exchanges.append((start, exchange))
            return terminated
        # The exchange does not fit: the rule acts, and the exchange leaves the context.
        if rule.mode == "none" or len(self.done) + 1 >= rule.max_segments:
            if rule.mode == "none":
                self.reward, self.end = 0.0, "window"
            else:
                self.end = "overlong"
            return True
        if rule.mode == "truncate":
            return self._truncate(written, None if cut else observation, exchange)
        return await self._summarize(context, written)

    def _step(self, action: list[int]) -> tuple[list[int], bool]:
        """The env's answer to an action (checked by the task's env, surge/llm/env_checks.py):
        its observation's tokens and whether the episode is over (terminated or truncated);
        the reward and a tool call are counted."""
        text, reward, terminated, truncated, info = self.env.step(self.engine.decode(action))
        self.reward += float(reward)
        self.tool_calls += bool(info.get("tool_call", False))
        observation = self.engine.encode(text)
        over = bool(terminated or truncated)
        if not over and len(observation) > self.rule.window:
            raise _too_long(self.env, "an observation", len(observation), self.rule.window)
        return observation, over

    def _truncate(
        self, written: Written | None, observation: list[int] | None, exchange: int
    ) -> bool:
        """The oldest exchanges leave; this one (the env has seen it, unless the window cut
        its action: `observation` None) stays in the new context, after as many recent ones
        as fit (none, if it would cross again). The action trains where it was written, at
        the end of the full context, so its behaviour log-prob and the trainer's are of the
        same context; the new segment holds it as context. True when the episode ends."""
        rule, segment, prompt = self.rule, self.segment, self.prompt
        keep = kept_exchanges(rule, len(prompt), [n for _, n in segment.exchanges])
        start = segment.exchanges[-keep][0] if keep else len(segment.tokens)
        carried = segment.tokens[start:]
        if crosses(rule, len(prompt) + len(carried), exchange):
            carried = []
        if written is not None:
            segment.add([], written)
        if crosses(rule, len(prompt), exchange):
            self.end = "overlong"  # even a fresh context cannot hold the exchange
            return True
        self._restart(carried)
        if written is not None and observation is not None:
            self.segment.exchanges.append((len(self.segment.tokens), exchange))
            self.segment.add(written[0])
            self.segment.add(observation)
        return False

    async def _summarize(self, context: list[int], written: Written | None) -> bool:
        """SUPO: the exchange leaves, the policy summarises the context, and the context
        restarts as prompt + summary. True when the episode ends (no room for a summary)."""
        rule, instruction = self.rule, self.instruction
        if written is not None:  # the context never holds it: only a warm start can teach it
            turn = _Segment()
            turn.add(self.segment.tokens)  # its context, as context
            turn.add([], written)
            self.dropped.append(turn.frozen())
        # The summary's room: its reserve, or what the window leaves (a context restarted
        # from a long prompt and summary may already be past the trigger).
        room = min(summary_room(rule, len(instruction)), rule.window - len(context + instruction))
        if room < 1:
            self.end = "overlong"
            return True
        self.at_summary.append(len(context) + len(instruction))
        summary = await self.write(context + instruction, room, True)
        self.longest = max(self.longest, len(context) + len(instruction) + len(summary[0]))
        self.segment.add(instruction)
        self.segment.add([], summary)
        measure = getattr(self.env, "summary_recall", None)
        share = None if measure is None else measure(self.engine.decode(summary[0]))
        if share is not None:
            self.kept.append(share)
        self._restart(summary[0])
        return False

    def _trajectory(self) -> Trajectory:
        first, *later = self.done
        stats = {
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "summaries": len(self.at_summary),
            "context_max": self.longest,
            "summary_context": max(self.at_summary, default=float("nan")),
            "summary_kept": float(np.mean(self.kept)) if self.kept else float("nan"),
        }
        return Trajectory(
            self.prompt, first.tokens, first.mask, first.logprobs, first.versions,
            reward=self.reward, finish=self.finish, info={"end": self.end, **stats},
            later=later, overlong=self.end == "overlong", dropped=self.dropped,
        )  # fmt: skip


def _too_long(env: Any, what: str, tokens: int, window: int) -> TextEnvError:
    name = getattr(env, "name", type(env).__name__)
    return TextEnvError(
        f"task.name={name!r}: {what} is {tokens} tokens, and the context window "
        f"(context.window={window}) must hold it with room for an action",
        "raise context.window (the built-in model is sized to it), or shorten the env's text",
    )
