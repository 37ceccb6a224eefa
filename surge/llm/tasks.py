"""Built-in LLM RL tasks: procedural prompts with held-out splits, and their verifiers.

A task yields `Problem`s (prompt, reference answer, metadata) and scores a completion with a
reward in [0, 1]. Problems are drawn from a seeded generator; the held-out split is a fixed
part of the problem space (chosen by a hash of the problem, not by the seed), so training
never sees a held-out problem whatever the seeds.

- `Arithmetic(digits)`: "12+34=" -> "46". Reward 1 for the exact sum, read up to the first
  character that is not a digit.
- `guess`, `recall`: multi-turn text envs (surge/llm/agent_tasks.py, textenv.py).
- `Countdown(numbers, max_value)`: reach a target from given numbers with + - * / and
  parentheses, each number at most once: "3 7 25 50 -> 81:" -> "50+25+3+7-...". Reward 1
  when the expression uses only those numbers, each at most once, and evaluates to the
  target exactly; the expression is parsed, never executed.

`reasoning-gym:<dataset>` names a procedural dataset of the reasoning-gym package (the optional
`reasoning-gym` extra; surge/llm/reasoning_gym_task.py).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Protocol

from surge.config.schema import ExperimentConfig
from surge.errors import ConfigError
from surge.llm.context import ContextRule
from surge.llm.problems import REASONING_GYM, Problem, Split, split_of
from surge.llm.textenv import TextEnvTask, is_text_env
from surge.llm.tiny import ARITHMETIC_ALPHABET, COUNTDOWN_ALPHABET
from surge.llm.turn_loop import EpisodeLimits


class Arithmetic:
    """`digits`-digit addition."""

    def __init__(self, digits: int = 2) -> None:
        if digits < 1:
            raise ValueError(f"digits={digits}: expected at least 1")
        self.digits = digits
        self.low, self.high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]:
        out: list[Problem] = []
        while len(out) < n:
            a, b = rng.randint(self.low, self.high), rng.randint(self.low, self.high)
            prompt = f"{a}+{b}="
            if split_of(prompt) == split:
                out.append(Problem(prompt, str(a + b), {"a": a, "b": b}))
        return out

    @staticmethod
    def reward(problem: Problem, completion: str) -> float:
        digits = ""
        for ch in completion.strip():
            if not ch.isdigit():
                break
            digits += ch
        return 1.0 if digits == problem.answer else 0.0


class Countdown:
    """Reach the target with `numbers` numbers (each used at most once)."""

    def __init__(self, numbers: int = 4, max_value: int = 50) -> None:
        if numbers < 2:
            raise ValueError(f"numbers={numbers}: expected at least 2")
        self.numbers, self.max_value = numbers, max_value

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]:
        out: list[Problem] = []
        while len(out) < n:
            nums = [rng.randint(1, self.max_value) for _ in range(self.numbers)]
            expr = self._random_expression(nums, rng)
            target = _evaluate(ast.parse(expr, mode="eval").body)
            if target is None or target.denominator != 1 or not 0 < target <= 1000:
                continue
            prompt = f"{' '.join(map(str, nums))} -> {int(target)}:"
            if split_of(prompt) == split:
                out.append(Problem(prompt, expr, {"numbers": nums, "target": int(target)}))
        return out

    @staticmethod
    def _random_expression(nums: list[int], rng: random.Random) -> str:
        """A solution: the numbers in random order joined by random operators."""
        order = rng.sample(nums, len(nums))
        expr = str(order[0])
        for x in order[1:]:
            expr = f"({expr}{rng.choice('+-*/')}{x})"
        return expr

    @staticmethod
    def reward(problem: Problem, completion: str) -> float:
        text = completion.strip().split("\n")[0].strip()
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            return 0.0
        used = _numbers_of(tree)
        if used is None:
            return 0.0
        available = list(problem.meta["numbers"])
        for x in used:
            if x not in available:
                return 0.0
            available.remove(x)
        return 1.0 if _evaluate(tree) == problem.meta["target"] else 0.0


_OPS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__}


def _evaluate(node: ast.AST) -> Fraction | None:
    """The exact value of an expression of integers, + - * / and parentheses; None for
    anything else (names, calls, powers, division by zero)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Div):
            return None if right == 0 else left / right
        op = _OPS.get(type(node.op))
        return None if op is None else op(left, right)
    return None


def _numbers_of(node: ast.AST) -> list[int] | None:
    """The integer literals of an allowed expression, or None if it has anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        left, right = _numbers_of(node.left), _numbers_of(node.right)
        return None if left is None or right is None else left + right
    return None


# --------------------------------------------------------------------------- the run's task


class Task(Protocol):
    """What LLM RL needs of a task: problems drawn from a split, and a score for a completion."""

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]: ...

    def reward(self, problem: Problem, completion: str) -> float: ...


BUILT_IN: dict[str, type] = {"arithmetic": Arithmetic, "countdown": Countdown}
ALPHABETS = {"arithmetic": ARITHMETIC_ALPHABET, "countdown": COUNTDOWN_ALPHABET}
"""The characters of each built-in task's prompts and solutions (the built-in tokenizer's)."""


class _UserReward:
    """A task whose verifier is the user's `reward_fn(prompt, completion, **meta) -> float`."""

    def __init__(self, task: Task, reward_fn: Callable[..., float]) -> None:
        self.task, self.reward_fn = task, reward_fn

    def sample(self, split: Split, n: int, rng: random.Random) -> list[Problem]:
        return self.task.sample(split, n, rng)

    def reward(self, problem: Problem, completion: str) -> float:
        meta = {"answer": problem.answer, **problem.meta}
        return float(self.reward_fn(problem.prompt, completion, **meta))


def import_path(path: str, what: str) -> Any:
    """The object `module:name` names; a clear error naming `what` (a config field)."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"{what}={path!r}: expected 'module:name'")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what}={path!r}: cannot import it ({e})") from e


def make_task(name: str, kwargs: dict[str, Any], reward_fn: str | None = None) -> Task:
    """A built-in task by name, a reasoning-gym dataset (`reasoning-gym:<dataset>`), a dataset
    file, or `module:function` returning a task."""
    task: Task
    if name in TEXT_ENVS:
        task = TextEnvTask(_text_env_class(name), kwargs, name)
    elif name in BUILT_IN:
        task = BUILT_IN[name](**kwargs)
    elif name.startswith(REASONING_GYM):  # before `module:function`, which it resembles
        from surge.llm.reasoning_gym_task import ReasoningGymTask

        task = ReasoningGymTask(name.removeprefix(REASONING_GYM), **kwargs)
    elif name.endswith((".jsonl", ".json", ".parquet")):
        from surge.llm.datasets import FileTask

        task = FileTask(name, **kwargs)
        if reward_fn is None:
            raise ValueError(f"task.name={name!r}: a dataset file needs task.reward_fn")
    elif ":" in name:
        made = import_path(name, "task.name")
        task = TextEnvTask(made, kwargs, name) if is_text_env(made) else made(**kwargs)
    else:
        raise ValueError(
            f"task.name={name!r}: expected one of {sorted(BUILT_IN)}, "
            f"'{REASONING_GYM}<dataset>', a .jsonl/.parquet file, or 'module:function'"
        )
    if reward_fn is not None:
        if isinstance(task, TextEnvTask):
            raise ValueError(
                f"task.reward_fn={reward_fn!r}: task.name={name!r} is a text env, whose "
                "episodes bring their own rewards"
            )
        task = _UserReward(task, import_path(reward_fn, "task.reward_fn"))
    return task


TEXT_ENVS = ("guess", "recall")
"""The built-in multi-turn tasks (surge/llm/agent_tasks.py)."""


def _text_env_class(name: str) -> Any:
    from surge.llm import agent_tasks

    return {"guess": agent_tasks.Guess, "recall": agent_tasks.Recall}[name]


def more_summaries(cfg: ExperimentConfig) -> bool:
    """Whether evaluation also scores with `context.eval_max_summaries` (set, and unlike
    training's)."""
    c = cfg.context
    return c.mode != "none" and c.eval_max_summaries not in (None, c.max_summaries)


def episode_limits(cfg: ExperimentConfig, evaluation: bool = False) -> EpisodeLimits:
    """A multi-turn task's limits from `context.*` and `rollout.*` (in evaluation, the
    summaries of `context.eval_max_summaries`)."""
    c, r = cfg.context, cfg.rollout
    summaries = c.max_summaries
    if evaluation and c.eval_max_summaries is not None:
        summaries = c.eval_max_summaries
    segments = summaries + 1
    if c.mode == "truncate":
        # Truncation has no summary budget: the turn limits end an episode. Each segment
        # holds at least one turn (a restart keeps under half the room, so the next turn
        # fits), so max_turns + 1 segments always suffice.
        segments = r.max_turns + 1
    rule = ContextRule(c.mode, c.window, c.threshold, c.summary_tokens, segments)
    return EpisodeLimits(
        rule, r.max_new_tokens, r.max_tool_calls, r.max_turns, c.instruction, tuple(r.stop)
    )


def problem_at(task: Task, split: Split, seed: int, index: int) -> Problem:
    """Problem `index` of a run's stream of `split` problems: a pure function of (seed, index),
    so every worker (and a resumed run) sees the same problem under the same index."""
    key = int.from_bytes(
        hashlib.blake2b(f"{seed}/{split}/{index}".encode(), digest_size=8).digest()
    )
    return task.sample(split, 1, random.Random(key))[0]


def heldout_set(task: Task, n: int) -> list[Problem]:
    """The evaluation problems: the same `n` held-out problems in every run of the task."""
    return task.sample("heldout", n, random.Random(12345))


def task_of(cfg: ExperimentConfig, evaluation: bool = False) -> Task:
    """The run's task (`task.*`; a multi-turn one with the run's limits, those of evaluation
    with `evaluation`); a ConfigError naming the setting when it cannot be made."""
    try:
        task = make_task(cfg.task.name, cfg.task.kwargs, cfg.task.reward_fn)
        if isinstance(task, TextEnvTask):
            task.configure(episode_limits(cfg, evaluation), own_tokenizer=bool(cfg.model.path))
        return task
    except TypeError as e:  # arguments the task does not take
        raise ConfigError(
            f"task.kwargs={cfg.task.kwargs}: {e}",
            "give task.kwargs the arguments of this task (task.kwargs={} for none)",
        ) from None
    except ValueError as e:
        raise ConfigError(str(e), "see docs/llm.md for the task settings") from None
