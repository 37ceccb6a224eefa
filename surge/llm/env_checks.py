"""A user's text env behind checks: whatever it returns or raises, the run stops with a
message that names the env and the fix, never with a trainer's traceback.

Every path that runs a text env (the start-up probes, the warm start's expert episodes,
generation, evaluation) makes it through `TextEnvTask.make_env`, which wraps it here. A
mistake raises `TextEnvError`, a user error: a worker that meets one stops the run with the
message (exit 2) after the trainer saved its checkpoint (surge/runtime/supervisor.py), since
the same env would fail the same way after a restart. What is checked:

- `reset` and `step` raising (the message names the call, its argument, the exception and
  where in the env's code it was raised);
- their return shapes: `(text, info)` and `(text, reward, terminated, truncated, info)`;
- text that is not a `str`, and, for the built-in tokenizer, characters outside its
  alphabet (named, with the env's `alphabet` attribute as the fix);
- a reward that is not a real number, or is NaN or infinite (it would turn the group's
  advantages, and then the weights, into NaN);
- `expert` returning anything but a `str`.

An observation longer than the context window is checked where the tokens are known, in the
episode loop (surge/llm/textenv.py).
"""

from __future__ import annotations

import math
import numbers
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import UserError

RESET_FIX = "make reset(seed) return (prompt_text, info_dict) for every seed"
STEP_FIX = (
    "make step(action) return (observation_text, reward, terminated, truncated, info_dict) for "
    "any action text; answer a malformed action with a short error observation (as the "
    "built-in envs do) rather than an exception"
)


class TextEnvError(UserError):
    """A text env raised, or returned what surge cannot train on."""


def where_raised(error: BaseException) -> str:
    """Where `error` was raised: the innermost frame's file, line and function."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" at {Path(last.filename).name}:{last.lineno} in {last.name}"


def _kind(value: object) -> str:
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _shown(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


class CheckedTextEnv:
    """`env` with every output checked (`TextEnvError` on a mistake). `name` is how the run
    names the env (`task.name`); `alphabet`: the built-in tokenizer's characters, or None
    where the model brings its own tokenizer. Other attributes are the env's own."""

    def __init__(self, env: Any, name: str, alphabet: str | None) -> None:
        self.env = env
        self.name = name
        self.alphabet = None if alphabet is None else frozenset(alphabet)

    def __getattr__(self, attribute: str) -> Any:  # deciding, summary_recall, ...
        return getattr(self.env, attribute)

    def _error(self, problem: str, fix: str) -> TextEnvError:
        return TextEnvError(f"task.name={self.name!r}: {problem}", fix)

    def _raised(self, call: str, error: Exception, fix: str) -> TextEnvError:
        return self._error(
            f"{call} raised {type(error).__name__}: {error}{where_raised(error)}", fix
        )

    def _text(self, text: object, what: str, fix: str) -> str:
        if not isinstance(text, str):
            raise self._error(f"{what} is {_kind(text)} ({text!r:.60}), not a str", fix)
        if self.alphabet is not None:
            outside = sorted(set(text) - self.alphabet)
            if outside:
                raise self._error(
                    f"{what} {_shown(text)} has characters outside the built-in tokenizer's "
                    f"alphabet: {''.join(outside)!r}",
                    "give the env an `alphabet` attribute (a str) that holds every character "
                    "its prompts, observations and expert write, or keep the text to the "
                    "alphabet it has (default: printable ASCII)",
                )
        return text

    def _call(self, call: str, fn: Any, fix: str, *args: Any) -> Any:
        """`fn(*args)`, its exception a TextEnvError naming `call` and where it was raised."""
        try:
            return fn(*args)
        except Exception as e:
            raise self._raised(call, e, fix) from None

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        call = f"reset(seed={seed})"
        out = self._call(call, self.env.reset, RESET_FIX, seed)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise self._error(f"{call} returned {out!r:.80}, not (text, info)", RESET_FIX)
        text, info = out
        self._text(text, f"{call}'s prompt", RESET_FIX)
        if not isinstance(info, dict):
            raise self._error(f"{call}'s info is {_kind(info)}, not a dict", RESET_FIX)
        return text, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        call = f"step({_shown(action)})"
        out = self._call(call, self.env.step, STEP_FIX, action)
        if not (isinstance(out, tuple) and len(out) == 5):
            raise self._error(
                f"{call} returned {out!r:.80}, not (observation, reward, terminated, "
                "truncated, info)",
                STEP_FIX,
            )
        observation, reward, terminated, truncated, info = out
        self._text(observation, f"{call}'s observation", STEP_FIX)
        if isinstance(reward, str) or not isinstance(reward, numbers.Real):
            raise self._error(
                f"{call}'s reward is {_kind(reward)} ({reward!r:.40}), not a number",
                "return the reward as a float",
            )
        if not math.isfinite(float(reward)):
            raise self._error(
                f"{call}'s reward is {float(reward)}",
                "return a finite reward (a NaN or infinite reward would make the group's "
                "advantages, and then the model's weights, NaN)",
            )
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            if not (isinstance(value, bool | np.bool_ | numbers.Integral) and value in (0, 1)):
                raise self._error(
                    f"{call}'s {flag} is {value!r:.40}, not a bool", "return True or False"
                )
        if not isinstance(info, dict):
            raise self._error(f"{call}'s info is {_kind(info)}, not a dict", STEP_FIX)
        return observation, float(reward), bool(terminated), bool(truncated), info

    def expert(self, rng: Any, summarize: bool = False) -> str:
        call = f"expert(summarize={summarize})"
        fix = "make expert(rng, summarize=False) return the expert's next action (a summary, "
        fix += "when asked to summarize) as a str"
        text = self._call(call, self.env.expert, fix, rng, summarize)
        return self._text(text, f"{call}'s text", fix)
