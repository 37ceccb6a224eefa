"""The episode seam of LLM RL: an episode is one function, as AReaL's `arun_episode` is.

    async def run_episode(engine: EpisodeEngine, problem: Problem, rng) -> Trajectory | None

It asks the policy for text with `await engine.generate(context)` as many times as it needs
(one turn, or a tool loop), and returns what trains: the tokens after its prompt, a loss mask
over the policy's own tokens (tokens an env or a tool wrote stay in context with weight 0),
the behaviour log-prob and version of every policy token, and its reward (None: the reward
stage scores it with the task's verifier). None drops the episode: the generation worker
counts it and runs the problem again, so a group always trains G episodes.

The episodes are coroutines without an event loop: `EpisodeRunner` resumes each one when the
engine finishes the text it awaits, so the G episodes of a group, and all groups in flight,
decode together in the engine's continuous batch. An episode's turns continue one sequence in
the engine: each request follows the episode's previous one, so a turn whose context extends
the last (prompt, completion, then what the env appended) runs only the new tokens instead of
prefilling the whole context again. A task picks its episode with a
`run_episode` method; `single_turn` (one completion of the prompt) is the default.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from surge.errors import UserError
from surge.llm.engine_protocol import Completion, GenerationEngine, Request
from surge.llm.model import decode_completion, encode_prompt
from surge.llm.problems import Problem

log = logging.getLogger(__name__)
PROMPT_CACHE = 4096
"""Encoded prompts an `EpisodeEngine` keeps (the least recently used go first)."""


@dataclass
class Trajectory:
    """What one episode trains on. Its context starts with `prompt`; `tokens` follow it."""

    prompt: list[int]
    tokens: list[int]
    """Every token after the prompt, the policy's and the env's, in context order."""
    mask: list[bool]
    """True at the policy's tokens: the ones the loss trains."""
    logprobs: list[float]
    """Behaviour log-prob of each token (0.0 at env tokens)."""
    versions: list[int]
    """The parameter version that drew each token (-1 at env tokens)."""
    reward: float | None = None
    """The episode's reward; None: the reward stage scores the policy's text."""
    finish: str = "eos"
    """How its last completion ended: `eos`, `stop` or `length`."""
    info: dict[str, Any] = field(default_factory=dict)
    """Numbers the run logs per episode (surge/streams/rollouts.py `EPISODE_STATS`)."""
    later: list[Segment] = field(default_factory=list)
    """The segments after the first, when its context restarted (a summary, a truncation:
    surge/llm/context.py). Each starts again from `prompt`; the fields above are the first."""
    overlong: bool = False
    """It ran past its limits (tool calls, turns, summaries): none of its tokens train, but
    its reward still counts in its group's statistics."""
    dropped: list[Segment] = field(default_factory=list)
    """Turns whose exchange crossed the summary trigger and left the context (SUPO), each in
    the context it was written in. RL does not train them (the summary that follows was
    written without them); the warm start imitates an expert's, since no segment holds the
    turn a policy writes when its context is nearly full."""

    def segments(self) -> list[Segment]:
        return [Segment(self.tokens, self.mask, self.logprobs, self.versions), *self.later]

    def policy_tokens(self) -> list[int]:
        return [t for s in self.segments() for t, m in zip(s.tokens, s.mask, strict=True) if m]

    def check(self) -> None:
        for segment in self.segments():
            segment.check()


@dataclass
class Segment:
    """One context of an episode after its prompt: what one training row holds."""

    tokens: list[int]
    mask: list[bool]
    logprobs: list[float]
    versions: list[int]

    def check(self) -> None:
        n = len(self.tokens)
        for name in ("mask", "logprobs", "versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"a trajectory with {n} tokens has {len(getattr(self, name))} {name}"
                )


def completion_trajectory(prompt: Sequence[int], c: Completion) -> Trajectory:
    """One completion of `prompt` as a trajectory: every token is the policy's (it takes
    over the completion's lists)."""
    return Trajectory(
        list(prompt), c.tokens, [True] * len(c.tokens), c.logprobs, c.versions, finish=c.finish
    )


class _Generate:
    """What an episode awaits: the engine's completion of `context`, of at most `max_new`
    tokens (None: the engine's limit)."""

    def __init__(self, context: Sequence[int], max_new: int | None = None) -> None:
        if max_new is not None and max_new < 1:
            raise ValueError(f"max_new={max_new}: a completion needs room for a token")
        self.context = tuple(int(t) for t in context)
        self.max_new = max_new

    def __await__(self) -> Generator[_Generate, Completion, Completion]:
        completion = yield self  # the runner resumes the episode with the completion
        return completion


class EpisodeEngine:
    """An episode's handle on the policy: text in, completions out, and the tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        # A group's G episodes encode the same prompt one after the other: a tokenizer call
        # costs more than the rest of starting an episode.
        self._encoded = functools.lru_cache(maxsize=PROMPT_CACHE)(
            lambda text: tuple(encode_prompt(tokenizer, text))
        )

    def generate(self, context: Sequence[int], max_new: int | None = None) -> _Generate:
        """`await engine.generate(tokens)`: the policy's completion of `context`, of at most
        `max_new` tokens (the engine's limit caps it). A context that starts with the
        episode's previous context and completion is cheap: only what follows them runs."""
        return _Generate(context, max_new)

    def encode_prompt(self, text: str) -> list[int]:
        """A prompt's tokens as training and evaluation see them (with `<bos>`)."""
        return list(self._encoded(text))

    def encode(self, text: str) -> list[int]:
        """Text an env adds to the context (no special tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of completion tokens, up to an end-of-sequence token."""
        return decode_completion(self.tokenizer, tokens)


EpisodeFn = Callable[
    [EpisodeEngine, Problem, np.random.Generator], Coroutine[Any, Any, Trajectory | None]
]


async def single_turn(
    engine: EpisodeEngine, problem: Problem, rng: np.random.Generator
) -> Trajectory | None:
    """The default episode: one completion of the problem's prompt, scored by the task."""
    prompt = engine.encode_prompt(problem.prompt)
    return completion_trajectory(prompt, await engine.generate(prompt))


def episode_of(task: Any) -> EpisodeFn:
    """The task's episode: its `run_episode` method, else `single_turn`."""
    episode = getattr(task, "run_episode", None)
    return episode if callable(episode) else single_turn


_Episode = Coroutine[Any, Any, Trajectory | None]


class EpisodeRunner:
    """Runs episodes against a `GenerationEngine` (surge/llm/engine_protocol.py): each
    generation request an episode awaits goes into the engine's batch, and the episode
    resumes when its completion is back.

    `start` begins an episode under a caller's key; `step` decodes one token in every busy
    slot and returns the episodes that ended, as (key, trajectory or None). An episode that
    raises is logged with its traceback and ends as None (dropped), as does one whose
    trajectory is malformed; a user error (a text env's bad output) propagates, and stops
    the run with its message.

    Each request keeps its slot parked when it finishes and follows the episode's previous
    request, so the next turn continues its cache; an episode that ends releases its slot
    at once (a single-turn episode, in the same `step` that finished it)."""

    def __init__(self, engine: GenerationEngine, tokenizer: Any, episode: EpisodeFn) -> None:
        self.engine = engine
        self.handle = EpisodeEngine(tokenizer)
        self.episode = episode
        self._ids = itertools.count()
        self._waiting: dict[int, tuple[int, _Episode]] = {}  # request id -> (key, episode)
        self._ended: list[tuple[int, Trajectory | None]] = []
        self.errors = 0

    @property
    def running(self) -> int:
        """Episodes started and not yet ended."""
        return len(self._waiting)

    def idle(self) -> bool:
        return not self._waiting and not self._ended and self.engine.idle()

    def start(self, key: int, problem: Problem, rng: np.random.Generator) -> None:
        self._resume(key, self.episode(self.handle, problem, rng), None)

    def step(self) -> list[tuple[int, Trajectory | None]]:
        if not self.engine.idle():
            for c in self.engine.step():
                key, episode = self._waiting.pop(c.key)
                self._resume(key, episode, c)
        ended, self._ended = self._ended, []
        return ended

    def drop_all(self) -> None:
        for _, episode in self._waiting.values():
            episode.close()
        self._waiting.clear()
        self._ended.clear()
        self.engine.drop_all()

    def _resume(self, key: int, episode: _Episode, completion: Completion | None) -> None:
        """Send `completion` (None to start) into the episode; submit what it awaits next,
        continuing the completion's sequence, or release that sequence if the episode ends."""
        try:
            awaited = episode.send(completion)
        except StopIteration as end:
            self._release(completion)
            self._ended.append((key, self._checked(key, end.value)))
            return
        except UserError:
            raise  # the env's mistake (surge/llm/env_checks.py): every episode would meet it
        except Exception:
            self._release(completion)
            log.exception("episode %d raised: dropped", key)
            self.errors += 1
            self._ended.append((key, None))
            return
        if not isinstance(awaited, _Generate):
            self._release(completion)
            episode.close()
            log.error(
                "episode %d awaited %r: only engine.generate(...) can be awaited", key, awaited
            )
            self.errors += 1
            self._ended.append((key, None))
            return
        request = next(self._ids)
        self._waiting[request] = (key, episode)
        follows = None if completion is None else completion.key
        self.engine.submit(
            [Request(request, awaited.context, awaited.max_new, follows=follows, keep=True)]
        )

    def _release(self, completion: Completion | None) -> None:
        if completion is not None:
            self.engine.release(completion.key)

    def log_dropped(self, key: int, reason: object) -> None:
        """An ended episode its caller could not keep (e.g. it does not fit a row)."""
        log.error("episode %d: %s; dropped", key, reason)
        self.errors += 1

    def _checked(self, key: int, trajectory: object) -> Trajectory | None:
        if trajectory is None:
            return None
        try:
            if not isinstance(trajectory, Trajectory):
                raise TypeError(f"returned {type(trajectory).__name__}, not a Trajectory")
            trajectory.check()
        except (TypeError, ValueError) as e:
            self.log_dropped(key, e)
            return None
        return trajectory
