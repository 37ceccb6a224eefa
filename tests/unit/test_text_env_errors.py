"""A user's text env that raises or returns what cannot train gets a message naming the env,
what it did and the fix (surge/llm/env_checks.py), on every path that runs it."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from surge.errors import ConfigError, UserError  # noqa: E402
from surge.llm.context import ContextRule  # noqa: E402
from surge.llm.episodes import EpisodeEngine  # noqa: E402
from surge.llm.setup import expert_fit  # noqa: E402
from surge.llm.textenv import TextEnvTask  # noqa: E402
from surge.llm.tiny import char_tokenizer  # noqa: E402
from surge.llm.turn_loop import EpisodeLimits  # noqa: E402


class Scripted:
    """A text env whose reset and step return what the test gives (`prompt`, `answer`)."""

    alphabet = "abcdefgh\n=?"

    def __init__(self, prompt: Any = ("ab\n", {}), answer: Any = ("c\n", 1.0, True, False, {}),
                 expert: Any = "d\n") -> None:  # fmt: skip
        self.prompt, self.answer, self.answer_expert = prompt, answer, expert

    def reset(self, seed: int) -> Any:
        if isinstance(self.prompt, Exception):
            raise self.prompt
        return self.prompt

    def step(self, action: str) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> Any:
        return self.answer_expert


def _env(**kwargs: Any) -> Any:
    task = TextEnvTask(Scripted, kwargs, "my.envs:Scripted")
    return task.make_env()


@pytest.mark.parametrize(
    ("kwargs", "call", "message", "fix"),
    [
        ({"prompt": KeyError("seed")}, "reset", r"reset\(seed=3\) raised KeyError: 'seed' at "
         r"test_text_env_errors.py:\d+ in reset", "reset\\(seed\\) return"),
        ({"answer": ValueError("no such tool")}, "step", r"step\('a\\n'\) raised ValueError: no "
         r"such tool at test_text_env_errors.py:\d+ in step", "error observation"),
        ({"prompt": (7, {})}, "reset", r"prompt is an int \(7\), not a str", "reset"),
        ({"prompt": "ab\n"}, "reset", r"returned 'ab\\n', not \(text, info\)", "reset"),
        ({"answer": (None, 0.0, False, False, {})}, "step", r"observation is a NoneType", "step"),
        ({"answer": ("c\n", math.nan, False, False, {})}, "step", r"reward is nan", "finite"),
        ({"answer": ("c\n", "1", False, False, {})}, "step", r"reward is a str \('1'\)", "float"),
        ({"answer": ("c\n", None, False, False, {})}, "step", r"reward is a NoneType", "float"),
        ({"answer": ("c\n", 0.0, "no", False, {})}, "step", r"terminated is 'no'", "True or"),
        ({"answer": ("c\n", 0.0, False, False)}, "step", r"not \(observation, reward", "step"),
        ({"answer": ("Cé\n", 0.0, False, False, {})}, "step",
         r"characters outside the built-in tokenizer's alphabet: 'Cé'", "`alphabet`"),
        ({"prompt": ("aZ\n", {})}, "reset", r"outside .* alphabet: 'Z'", "`alphabet`"),
        ({"expert": 5}, "expert", r"expert\(summarize=False\)'s text is an int", "as a str"),
        ({"expert": "zz\n"}, "expert", r"outside .* alphabet: 'z'", "`alphabet`"),
    ],
)  # fmt: skip
def test_each_mistake_is_named_with_its_env_and_fix(
    kwargs: dict[str, Any], call: str, message: str, fix: str
) -> None:
    env = _env(**kwargs)
    with pytest.raises(UserError, match="task.name='my.envs:Scripted'") as raised:
        {"reset": lambda: env.reset(3), "step": lambda: env.step("a\n"),
         "expert": lambda: env.expert(np.random.default_rng(0))}[call]()  # fmt: skip
    assert raised.type.__name__ == "TextEnvError"
    assert raised.match(message), raised.value.problem
    assert re.search(fix, raised.value.fix), raised.value.fix


def test_good_outputs_pass_through_and_numpy_values_are_plain() -> None:
    env = _env(answer=("c\n", np.float32(0.5), np.bool_(True), 0, {"tool_call": True}))
    assert env.reset(0) == ("ab\n", {})
    observation, reward, terminated, truncated, info = env.step("a\n")
    assert (observation, reward, terminated, truncated) == ("c\n", 0.5, True, False)
    assert type(reward) is float and type(terminated) is bool and info["tool_call"]


def test_a_model_with_its_own_tokenizer_takes_any_character() -> None:
    task = TextEnvTask(Scripted, {"prompt": ("Zé\n", {})}, "my.envs:Scripted")
    task.configure(task.limits, own_tokenizer=True)
    assert task.make_env().reset(0)[0] == "Zé\n"


def test_a_constructor_that_raises_is_named_and_bad_kwargs_stay_a_config_error() -> None:
    class Broken(Scripted):
        def __init__(self) -> None:
            raise RuntimeError("missing data file")

    with pytest.raises(UserError, match=r"constructing it with \{\} raised RuntimeError"):
        TextEnvTask(Broken, {}, "my.envs:Broken")
    from surge.config.load import load_config
    from surge.llm.tasks import task_of

    cfg, _ = load_config("guess-grpo", ["task.kwargs={nope: 1}"])
    with pytest.raises(ConfigError, match="task.kwargs"):
        task_of(cfg)


def test_the_setup_reports_the_experts_longest_episode_beside_the_window() -> None:
    tokenizer = char_tokenizer(Scripted.alphabet)
    # reset 'ab\n' (4 tokens with <bos>), the expert's 'd\n', the final 'c\n': 8 tokens
    task = TextEnvTask(Scripted, {}, "my.envs:Scripted")
    task.configure(EpisodeLimits(ContextRule("none", 8), 4))
    assert expert_fit(task, tokenizer).startswith("the expert's longest episode needs 8 tokens")
    task.configure(EpisodeLimits(ContextRule("none", 7), 4))
    line = expert_fit(task, tokenizer)
    assert line.startswith("warning: ") and "raise context.window to at least 8" in line
    task.configure(EpisodeLimits(ContextRule("summarize", 7, 1.0, 3, 3), 2))
    assert "summarises" in expert_fit(task, tokenizer)
    never_done = TextEnvTask(Scripted, {"answer": ("c\n", 0.0, False, False, {})}, "m:S")
    never_done.configure(EpisodeLimits(ContextRule("none", 64), 4, max_turns=5))
    line = expert_fit(never_done, tokenizer)
    assert "64 of them ran past rollout.max_turns=5" in line and line.startswith("warning: ")


def test_an_episode_engine_is_not_needed_for_the_checks() -> None:
    """The checks sit in the env, so the probes, the warm start and the episode loop all
    meet them: the setup's probe of observations fails as the run would."""
    from surge.llm.setup import longest_observation

    task = TextEnvTask(Scripted, {"answer": ("c\n", math.inf, True, False, {})}, "m:Scripted")
    with pytest.raises(UserError, match=r"reward is inf"):
        longest_observation(task, EpisodeEngine(char_tokenizer(Scripted.alphabet)))
