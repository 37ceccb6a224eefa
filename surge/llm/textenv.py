"""Multi-turn text environments: the episode of a tool-using agent, on the episode seam.

A text env is a Gymnasium-like object over strings:

    reset(seed) -> (text, info)                  the episode's prompt; info["key"] (optional)
                                                 puts the problem in its split (default: the
                                                 text and the seed)
    step(action) -> (text, reward, terminated, truncated, info)
                                                 info["tool_call"]: the action called a tool
    expert(rng, summarize=False) -> str          optional: the expert's next action (or, asked
                                                 to, a summary): the warm start imitates it

A turn of the policy ends at `rollout.stop` ("\\n"); the observation follows it in the
context. The policy's tokens train; the env's, the summary instruction and everything a new
segment carries over stay in context with loss weight 0. When the context fills,
`context.mode` decides (surge/llm/context.py): end the episode, truncate, or summarise
(SUPO). A user's env is `task.name=module:Class` (`task.kwargs` are its constructor's).

The loop is written once for two writers: the policy (`await engine.generate(...)`) and the
env's expert (the warm start's transcripts), so both see the same contexts and limits.
"""

from __future__ import annotations

import dataclasses
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from surge.llm.context import (
    ContextRule,
    action_room,
    crosses,
    kept_exchanges,
    summary_room,
)
from surge.llm.env_checks import CheckedTextEnv, TextEnvError, where_raised
from surge.llm.episodes import EpisodeEngine, Segment, Trajectory
from surge.llm.problems import Problem, Split, split_of

USER_ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "")
"""The built-in tokenizer's characters for a user's env that names none (`alphabet`)."""


class TextEnv(Protocol):
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]: ...


def is_text_env(obj: object) -> bool:
    """A class (or factory) whose objects have `reset` and `step`: a text env."""
    return callable(getattr(obj, "reset", None)) and callable(getattr(obj, "step", None))


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


class TextEnvTask:
    """A text env as a task: problems are reset seeds, the episode is the env's loop."""

    def __init__(
        self, env_factory: Callable[..., Any], kwargs: dict[str, Any], name: str = ""
    ) -> None:
        self.env_factory, self.kwargs = env_factory, dict(kwargs)
        self.name = name or getattr(env_factory, "__name__", "env")
        probe = self._construct({})
        self.alphabet: str = getattr(probe, "alphabet", USER_ALPHABET)
        if not isinstance(self.alphabet, str):
            raise TextEnvError(
                f"task.name={self.name!r}: its alphabet is a {type(self.alphabet).__name__}, "
                "not a str",
                "set `alphabet` to a str of every character the env and its expert write",
            )
        self.checked_alphabet: str | None = self.alphabet
        """What the env's text is checked against: the built-in tokenizer's characters, or
        None when the model brings its own tokenizer (`configure`)."""
        self.has_expert = callable(getattr(probe, "expert", None))
        # An env that marks its deciding action lets the warm start check the model there
        # with the expert leading (expert_led_episode).
        self.has_deciding = self.has_expert and hasattr(probe, "deciding")
        self.limits = EpisodeLimits(ContextRule("none", 256))

    def configure(self, limits: EpisodeLimits, own_tokenizer: bool = False) -> None:
        """The run's context and turn limits (`context.*`, `rollout.*`); `own_tokenizer`:
        the model brings its tokenizer (`model.path`), so the env's text need not keep to
        the built-in one's alphabet."""
        self.limits = limits
        self.checked_alphabet = None if own_tokenizer else self.alphabet

    def _construct(self, settings: dict[str, Any]) -> Any:
        """The env object (a TypeError, for arguments it does not take, names task.kwargs)."""
        kwargs = {**self.kwargs, **settings}
        try:
            return self.env_factory(**kwargs)
        except TypeError:
            raise
        except Exception as e:
            raise TextEnvError(
                f"task.name={self.name!r}: constructing it with {kwargs} raised "
                f"{type(e).__name__}: {e}{where_raised(e)}",
                "fix the env's constructor, or task.kwargs",
            ) from None

    def make_env(self, settings: dict[str, Any] | None = None) -> CheckedTextEnv:
        """A new env (with `settings` over task.kwargs), its outputs checked."""
        return CheckedTextEnv(self._construct(settings or {}), self.name, self.checked_alphabet)

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]:
        """`n` problems of `split`: reset seeds drawn from `rng` whose key falls in it."""
        env = self.make_env()
        out: list[Problem] = []
        tries = 0
        while len(out) < n:
            tries += 1
            if tries > 100 * n + 1000:
                raise ValueError(f"{self.name}: no problems of the {split} split found")
            seed = rng.getrandbits(31)
            text, info = env.reset(seed)
            if split_of(str(info.get("key", f"{text}#{seed}"))) == split:
                out.append(Problem(text, "", {"seed": seed}))
        return out

    def reward(self, problem: Problem, completion: str) -> float:
        raise TypeError(f"{self.name}: a text env's episodes bring their own rewards")

    async def run_episode(
        self, engine: EpisodeEngine, problem: Problem, rng: np.random.Generator
    ) -> Trajectory | None:
        env = self.make_env()
        prompt_text, _ = env.reset(int(problem.meta["seed"]))

        async def policy(context: list[int], max_new: int, summarize: bool) -> Written:
            c = await engine.generate(context, max_new)
            return c.tokens, c.logprobs, c.versions, c.finish

        return await text_episode(env, engine, prompt_text, self.limits, policy)

    def expert_episode(
        self,
        engine: EpisodeEngine,
        seed: int,
        rng: np.random.Generator,
        limits: EpisodeLimits | None = None,
    ) -> Any:
        """The expert's trajectory of the problem of `seed` (the warm start's data), under
        the run's limits or `limits`."""
        env = self.make_env()
        prompt_text, _ = env.reset(seed)

        async def expert(context: list[int], max_new: int, summarize: bool) -> Written:
            return expert_turn(env, engine, rng, max_new, summarize)

        return run_now(text_episode(env, engine, prompt_text, limits or self.limits, expert))

    def expert_led_episode(
        self, engine: EpisodeEngine, seed: int, rng: np.random.Generator, decide: Writer
    ) -> Any:
        """The problem of `seed` with the expert at its best (the env's `best_expert`
        settings over the task's) writing every turn and summary until the env's `deciding`
        is true; `decide(context, max_new, False)` writes that action and any after it,
        synchronously (it must not await an engine)."""
        best = getattr(self.env_factory, "best_expert", {})
        env = self.make_env(best)
        prompt_text, _ = env.reset(seed)

        async def lead(context: list[int], max_new: int, summarize: bool) -> Written:
            if env.deciding and not summarize:
                return decide(context, max_new, False)
            return expert_turn(env, engine, rng, max_new, summarize)

        return run_now(text_episode(env, engine, prompt_text, self.limits, lead))


def expert_turn(
    env: Any, engine: EpisodeEngine, rng: np.random.Generator, max_new: int, summarize: bool
) -> Written:
    """The expert's next action (or summary) as the engine would give it: at most `max_new`
    tokens, finishing `length` where it was cut (as a policy's text is), else `stop`."""
    tokens = engine.encode(env.expert(rng, summarize=summarize))
    finish = "length" if len(tokens) > max_new else "stop"
    tokens = tokens[:max_new]
    return tokens, [0.0] * len(tokens), [0] * len(tokens), finish


def run_now(episode: Any) -> Any:
    """Run an episode coroutine that never awaits the engine (an expert's) to its end."""
    try:
        episode.send(None)
    except StopIteration as end:
        return end.value
    episode.close()
    raise RuntimeError("an expert episode awaited the engine")


Writer = Callable[[list[int], int, bool], Any]


async def text_episode(
    env: Any, engine: EpisodeEngine, prompt_text: str, limits: EpisodeLimits, write: Writer
) -> Trajectory | None:
    """One episode of `env` (reset already) with `write` as the policy: the turn loop with
    the context rule, segments and limits of `limits`."""
    rule = limits.rule
    prompt = engine.encode_prompt(prompt_text)
    if len(prompt) >= rule.window:
        raise _too_long(env, "reset's prompt", len(prompt), rule.window)
    instruction = engine.encode(limits.instruction)
    done: list[Segment] = []
    segment = _Segment()
    reward, turns, tool_calls, longest = 0.0, 0, 0, len(prompt)
    finish, end = "stop", "done"
    kept: list[float] = []  # the env's share of facts kept, per summary
    dropped: list[Segment] = []  # the turns that crossed the trigger, in their context
    at_summary: list[int] = []  # the context when each summary was asked for

    def restart(carry: list[int]) -> _Segment:
        done.append(segment.frozen())
        fresh = _Segment()
        fresh.add(carry)
        return fresh

    while True:
        if tool_calls >= limits.max_tool_calls or turns >= limits.max_turns:
            end = "overlong"  # it has not finished within its limits
            break
        context = prompt + segment.tokens
        room = action_room(rule, len(context), limits.max_new_tokens)
        written: Written | None = None
        if room > 0:
            written = await write(context, room, False)
            turns += 1
            finish = written[3]
            longest = max(longest, len(context) + len(written[0]))
        window_full = written is None or (finish == "length" and room < limits.max_new_tokens)
        if written is not None and finish == "eos":
            segment.add([], written)
            end = "eos"  # the policy ended the episode
            break
        observation_tokens: list[int] = []
        terminated = False
        if not window_full:
            assert written is not None
            observation_tokens, r, terminated, tool_call = _step(env, engine, written[0])
            reward += r
            tool_calls += tool_call
            if not terminated and len(observation_tokens) > rule.window:
                raise _too_long(env, "an observation", len(observation_tokens), rule.window)
        if terminated:  # the last observation is never read: the row keeps what fits W
            fits = rule.window - len(context) - (0 if written is None else len(written[0]))
            observation_tokens = observation_tokens[: max(fits, 0)]
        exchange = 0 if written is None else len(written[0]) + len(observation_tokens)
        if terminated or not (window_full or crosses(rule, len(context), exchange)):
            assert written is not None
            start = len(segment.tokens)
            segment.add([], written)
            segment.add(observation_tokens)
            segment.exchanges.append((start, exchange))
            if terminated:
                break
            continue
        # The exchange does not fit: the rule acts, and the exchange leaves the context.
        if rule.mode == "none" or len(done) + 1 >= rule.max_segments:
            reward, end = (0.0, "window") if rule.mode == "none" else (reward, "overlong")
            break
        if rule.mode == "truncate":
            # The oldest exchanges leave; this one (the env has seen it) stays in the new
            # context, after as many recent ones as fit (none, if it would cross again).
            # The action trains where it was written, at the end of the full context, so
            # its behaviour log-prob and the trainer's are of the same context; the new
            # segment holds it as context.
            keep = kept_exchanges(rule, len(prompt), [n for _, n in segment.exchanges])
            start = segment.exchanges[-keep][0] if keep else len(segment.tokens)
            carried = segment.tokens[start:]
            if crosses(rule, len(prompt) + len(carried), exchange):
                carried = []
            if written is not None:
                segment.add([], written)
            if crosses(rule, len(prompt), exchange):
                end = "overlong"  # even a fresh context cannot hold the exchange
                break
            segment = restart(carried)
            if written is not None and not window_full:
                segment.exchanges.append((len(segment.tokens), exchange))
                segment.add(written[0])
                segment.add(observation_tokens)
            continue
        if written is not None:  # the context never holds it: only a warm start can teach it
            turn = _Segment()
            turn.add(segment.tokens)  # its context, as context
            turn.add([], written)
            dropped.append(turn.frozen())
        # The summary's room: its reserve, or what the window leaves (a context restarted
        # from a long prompt and summary may already be past the trigger).
        room = min(summary_room(rule, len(instruction)), rule.window - len(context + instruction))
        if room < 1:
            end = "overlong"
            break
        at_summary.append(len(context) + len(instruction))
        summary = await write(context + instruction, room, True)
        longest = max(longest, len(context) + len(instruction) + len(summary[0]))
        segment.add(instruction)
        segment.add([], summary)
        share = _summary_kept(env, engine.decode(summary[0]))
        if share is not None:
            kept.append(share)
        segment = restart(summary[0])
    done.append(segment.frozen())
    first, *later = done
    stats = {
        "turns": turns,
        "tool_calls": tool_calls,
        "summaries": len(at_summary),
        "context_max": longest,
        "summary_context": max(at_summary, default=float("nan")),
        "summary_kept": float(np.mean(kept)) if kept else float("nan"),
    }
    return Trajectory(
        prompt,
        first.tokens,
        first.mask,
        first.logprobs,
        first.versions,
        reward=reward,
        finish=finish,
        info={"end": end, **stats},
        later=later,
        overlong=end == "overlong",
        dropped=dropped,
    )


def _step(
    env: Any, engine: EpisodeEngine, action: list[int]
) -> tuple[list[int], float, bool, bool]:
    """The env's answer to an action (checked by the task's env: surge/llm/env_checks.py):
    its observation's tokens, the reward, whether the episode is over (terminated or
    truncated), and whether the action called a tool."""
    observation, reward, terminated, truncated, info = env.step(engine.decode(action))
    tool_call = bool(info.get("tool_call", False))
    return engine.encode(observation), float(reward), bool(terminated or truncated), tool_call


def _too_long(env: Any, what: str, tokens: int, window: int) -> TextEnvError:
    name = getattr(env, "name", type(env).__name__)
    return TextEnvError(
        f"task.name={name!r}: {what} is {tokens} tokens, and the context window "
        f"(context.window={window}) must hold it with room for an action",
        "raise context.window (the built-in model is sized to it), or shorten the env's text",
    )


def _summary_kept(env: Any, summary: str) -> float | None:
    measure = getattr(env, "summary_recall", None)
    return None if measure is None else measure(summary)
