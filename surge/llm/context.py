"""The working context of a multi-turn episode: when it is full, and what happens then.

Pure rules on token counts, used by the text-env episode (surge/llm/textenv.py) and pinned
by tests/unit/test_llm_context.py. A multi-turn episode's context is its prompt, then
(after a restart) what it carries over, then exchanges: the policy's action and the env's
observation. `context.mode` says what happens when an exchange would take it past the
limit:

- `none`: the limit is the window W; an episode that needs more ends with reward 0.
- `truncate`: the oldest exchanges are dropped, so the context restarts as the prompt and
  the most recent exchanges (at most half the room after the prompt).
- `summarize` (SUPO, Lu et al. 2025): the exchange that crossed the trigger is dropped, an
  instruction is appended, the same policy writes a summary, and the context restarts as
  prompt + summary. The trigger is threshold x W minus `summary_tokens` (room kept for the
  instruction and the summary), so the context the policy sees never exceeds W.

Every restart begins a new segment: the tokens trained once in a segment are carried into
the next with loss weight 0, so each token trains once (surge/streams/rollouts.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ContextMode = Literal["none", "truncate", "summarize"]
MODES: tuple[ContextMode, ...] = ("none", "truncate", "summarize")


@dataclass(frozen=True)
class ContextRule:
    """The settings of `context.*` that the rules read."""

    mode: ContextMode
    window: int
    threshold: float = 0.95
    summary_tokens: int = 0
    """Room kept for the summary instruction and the summary (summarize only)."""
    max_segments: int = 1
    """Segments an episode may use: summaries + 1 (truncating: `rollout.max_turns` + 1)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"context.mode={self.mode!r}: expected one of {MODES}")
        if self.window < 1:
            raise ValueError(f"context.window={self.window}: expected at least 1")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"context.threshold={self.threshold}: expected in (0, 1]")

    @property
    def limit(self) -> int:
        """The longest context an exchange may leave: past it, the rule acts."""
        if self.mode == "none":
            return self.window
        return math.floor(self.threshold * self.window) - self.reserve

    @property
    def reserve(self) -> int:
        return self.summary_tokens if self.mode == "summarize" else 0


def action_room(rule: ContextRule, context: int, max_new_tokens: int) -> int:
    """Tokens the policy may write after a context of `context` tokens: its turn limit, or
    less where the window would otherwise be exceeded (0: no room)."""
    return max(0, min(max_new_tokens, rule.window - context))


def crosses(rule: ContextRule, context: int, exchange: int) -> bool:
    """Whether appending an exchange of `exchange` tokens to a context of `context` tokens
    takes it past the rule's limit."""
    return context + exchange > rule.limit


def kept_exchanges(rule: ContextRule, prompt: int, exchanges: Sequence[int]) -> int:
    """Truncation: how many of the most recent exchanges (lengths, oldest first) the restarted
    context keeps: as many as fit in half the room between the prompt and the limit."""
    budget = (rule.limit - prompt) // 2
    kept, used = 0, 0
    for length in reversed(exchanges):
        if used + length > budget:
            break
        kept, used = kept + 1, used + length
    return kept


def summary_room(rule: ContextRule, instruction: int) -> int:
    """Tokens the policy may write as a summary after the instruction's."""
    return rule.summary_tokens - instruction


def check_fits(rule: ContextRule, prompt: int, instruction: int, exchange: int) -> str | None:
    """Why a prompt of `prompt` tokens, an instruction and one exchange of `exchange` tokens
    cannot run under the rule (None when they can): every segment must hold at least one
    exchange, and a summary must have room after its instruction."""
    if rule.mode == "summarize" and summary_room(rule, instruction) < 1:
        return (
            f"context.summary_tokens={rule.summary_tokens} leaves no room for a summary after "
            f"the {instruction}-token context.instruction"
        )
    if prompt + exchange > rule.limit:
        where = (
            f"context.window={rule.window}"
            if rule.mode == "none"
            else (
                f"context.threshold x context.window ({rule.threshold} x {rule.window})"
                + (f" minus context.summary_tokens={rule.summary_tokens}" if rule.reserve else "")
                + f" = {rule.limit}"
            )
        )
        return (
            f"a prompt of {prompt} tokens and one exchange of up to {exchange} tokens do not "
            f"fit under {where}"
        )
    return None
