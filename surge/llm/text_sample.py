"""What the built-in model knows of a task's text, for any task it may train on.

No weights can be downloaded here, so a user without a Hugging Face model of their own trains
the built-in tiny model (surge/llm/tiny.py) on their task. Its character tokenizer gets its
characters from a fixed sample of the task's problems, prompts and answers, the way every
task gets them:

- the built-in tasks (`arithmetic`, `countdown`) have fixed alphabets (tasks.py `ALPHABETS`);
- a reasoning-gym dataset: entries 0 .. TEXT_SAMPLE-1 of its problem space
  (reasoning_gym_task.py);
- a dataset file: every row of it (it is finite and already in memory);
- any other task (`module:function`): TEXT_SAMPLE training and TEXT_SAMPLE held-out problems
  drawn with a fixed seed.

A character outside the sample becomes the unknown token <unk>, not an error (a problem with
a new character costs that problem: the model cannot write the character). The sample also
sizes the model's positions (`tiny_model_positions`), tells the warm start whether every
problem has an answer to imitate (`check_warm_start`), and its digest keys the warm start's
cache (surge/llm/sft.py), so a changed dataset file trains a new warm start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from surge.errors import ConfigError
from surge.llm.problems import REASONING_GYM, Problem
from surge.llm.tasks import ALPHABETS, make_task
from surge.llm.textenv import TextEnvTask

TEXT_SAMPLE = 1000
"""Problems (per split, for tasks drawn at random) whose characters make the alphabet."""
MAX_POSITIONS = 512
"""Most positions the built-in model is given: its KV cache grows with them (per slot and
layer), and a 1M-parameter model learns little from longer problems anyway."""
SAMPLE_SEED = 0


@dataclass(frozen=True)
class TextSample:
    """What the built-in model needs to know of a task's text (see the module docstring)."""

    alphabet: str
    longest_prompt: int
    """Characters (one token each with the built-in tokenizer)."""
    longest_answer: int
    all_answered: bool
    """Every sampled problem has a reference answer (the warm start imitates them)."""
    digest: str
    """A hash of the sampled prompts and answers."""


def summarise(problems: list[Problem]) -> TextSample:
    """The `TextSample` of these problems."""
    chars = {c for p in problems for c in p.prompt + p.answer}
    text = hashlib.blake2b(digest_size=10)
    for p in problems:
        text.update(json.dumps([p.prompt, p.answer]).encode())
    return TextSample(
        alphabet="".join(sorted(chars)),
        longest_prompt=max(len(p.prompt) for p in problems),
        longest_answer=max(len(p.answer) for p in problems),
        all_answered=all(p.answer != "" for p in problems),
        digest=text.hexdigest(),
    )


def alphabet_of(name: str, kwargs: dict[str, Any], reward_fn: str | None = None) -> str:
    """The built-in tokenizer's characters for task `name`: a built-in task's, or those of a
    fixed sample of the task's problems."""
    if name in ALPHABETS:
        return ALPHABETS[name]
    return text_sample(name, kwargs, reward_fn).alphabet


def text_sample(name: str, kwargs: dict[str, Any], reward_fn: str | None = None) -> TextSample:
    """The `TextSample` of task `name` made with `kwargs` (deterministic; see the module
    docstring for which problems). A ValueError (or TypeError) when the task cannot be made."""
    return _text_sample(name, json.dumps(kwargs, sort_keys=True, default=repr), reward_fn)


@functools.lru_cache(maxsize=8)  # setup asks several times; a sample can take a second or two
def _text_sample(name: str, kwargs_json: str, reward_fn: str | None) -> TextSample:
    kwargs = json.loads(kwargs_json)
    if name.startswith(REASONING_GYM):
        from surge.llm.reasoning_gym_task import sample_problems

        return summarise(sample_problems(name, kwargs, TEXT_SAMPLE))
    task = make_task(name, kwargs, reward_fn)
    if isinstance(task, TextEnvTask):
        return _text_env_sample(task)
    listed = getattr(getattr(task, "task", task), "problems", None)  # a file: every row
    if callable(listed):
        problems: list[Problem] = listed()
    else:
        rng = random.Random(SAMPLE_SEED)
        problems = task.sample("train", TEXT_SAMPLE, rng) + task.sample("heldout", TEXT_SAMPLE, rng)
    if not problems:
        raise ValueError(f"task.name={name!r}: the task gave no problems")
    return summarise(problems)


def _text_env_sample(task: TextEnvTask) -> TextSample:
    """A text env's sample: its prompts; its alphabet is its own (`alphabet`, or printable
    ASCII); the digest also covers the code that makes its episodes: the env's, the episode
    loop's and the context rules' (a changed transcript trains a new warm start)."""
    from surge.llm import context, textenv

    problems = task.sample("train", TEXT_SAMPLE, random.Random(SAMPLE_SEED))
    sample = summarise(problems)
    digest = hashlib.blake2b(sample.digest.encode(), digest_size=10)
    digest.update(inspect.getsource(textenv.text_episode).encode())
    digest.update(inspect.getsource(context).encode())
    # no source (a compiled or dynamic class): the prompts only
    with contextlib.suppress(OSError, TypeError):
        digest.update(inspect.getsource(task.env_factory).encode())
    return dataclasses.replace(
        sample, alphabet=task.alphabet, all_answered=task.has_expert, digest=digest.hexdigest()
    )


def tiny_model_positions(sample: TextSample, name: str, max_new_tokens: int, least: int) -> int:
    """Positions the built-in model needs for a task, in multiples of 64 and at least
    `least`: its longest sampled prompt and <bos> plus a quarter (the prompt rows' margin,
    setup.task_shapes), then the longer of `max_new_tokens` and the longest sampled answer
    with <eos> (the warm start's examples). A ConfigError above MAX_POSITIONS."""
    s = sample
    need = math.ceil((s.longest_prompt + 1) * 1.25) + max(max_new_tokens, s.longest_answer + 1)
    if need > MAX_POSITIONS:
        raise ConfigError(
            f"task.name={name!r}: its problems need {need} positions (prompts of up to "
            f"{s.longest_prompt} characters, answers of up to {s.longest_answer}, "
            f"rollout.max_new_tokens={max_new_tokens}); the built-in model takes at most "
            f"{MAX_POSITIONS}",
            "choose task.kwargs that make shorter problems, lower rollout.max_new_tokens, or "
            "set model.path to a Hugging Face model with a longer context",
        )
    return max(least, -(-need // 64) * 64)


def check_warm_start(sample: TextSample, name: str) -> None:
    """A ConfigError if the task has problems without a reference answer to imitate."""
    if not sample.all_answered:
        raise ConfigError(
            f"task.name={name!r} has problems without a reference answer (its verifier accepts "
            "any valid solution), so the supervised warm start has nothing to imitate",
            "set sft.steps=0, or model.path to a model that already solves some problems",
        )
