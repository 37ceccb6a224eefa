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
(SUPO). A user's env is `task.name=module:Class` (`task.kwargs` are its constructor's); every
env a task makes is checked (surge/llm/env_checks.py).

The turn loop (surge/llm/turn_loop.py) is written once for two writers: the policy (`await
engine.generate(...)`) and the env's expert (the warm start's transcripts), so both see the
same contexts and limits.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from surge.llm.context import ContextRule
from surge.llm.env_checks import CheckedTextEnv, TextEnvError, where_raised
from surge.llm.episodes import EpisodeEngine, Trajectory
from surge.llm.problems import Problem, Split, split_of
from surge.llm.turn_loop import EpisodeLimits, Writer, Written, text_episode

USER_ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "")
"""The built-in tokenizer's characters for a user's env that names none (`alphabet`)."""


def is_text_env(obj: object) -> bool:
    """A class (or factory) whose objects have `reset` and `step`: a text env."""
    return callable(getattr(obj, "reset", None)) and callable(getattr(obj, "step", None))


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
