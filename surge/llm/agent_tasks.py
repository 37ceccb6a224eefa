"""Built-in multi-turn text environments: small tool-using tasks for the tiny model.

Both follow the text-env protocol of surge/llm/textenv.py: `reset(seed)` gives the prompt,
`step(action)` the observation; every action and summary ends with "\\n" (the policy's stop)
and so does every observation. A problem is a reset seed (info["key"] puts it in its split).
Any action string is safe: a malformed one gets a short error observation, never an exception.

- `Guess(high, max_guesses)`: find a secret number in 1..high from "<" / ">" feedback.
  "guess 1-16\\n" -> "8\\n" -> ">\\n" -> "12\\n" -> "=\\n" (reward 1). Bisection always wins
  within 5 guesses at the defaults; the expert guesses at random among the numbers still
  possible, and loses sometimes, so RL has a strategy to discover.
- `Recall(facts, asked_from, filler, lazy)`: a tool `g<i>` returns fact i, a digit after "="
  and random filler letters ("g3\\n" -> "=4qkzmw\\n"). Once every fact has been fetched,
  the observation asks about one of the first `asked_from` ("?2\\n"), answered with the
  fact's number and digit, "2=7\\n" (reward 1, else 0). The asked fact lies far back (more
  than 96 tokens at the defaults), so a 96-token window keeps it only through summaries:
  truncation loses it (a guess is right 1 time in 10), SUPO's summaries keep it if the
  policy writes them well. The expert's first summary is, with probability `lazy` (0.6), a
  lazy one that says only where to go on ("g4\\n"), else a full one that also lists the
  askable facts by number ("0=71=02=53=9 g4\\n"); later summaries keep the first's style (a
  full one copies them). So the transcripts teach both styles and faithful copying, the
  warm start's most likely first summary is lazy (greedy decoding then only guesses),
  sampling writes a full one 4 times in 10, and RL gains by making the full summary the
  policy's choice: one decision, early, that decides the reward. (Facts are numbered
  digits, and summaries and answers name each by its number, so that every read is a copy
  of what follows a matching "2=": the 1M-parameter warm start failed to copy random
  capital letters, and read an unlabelled list of digits by place no better than 52%.)

The numbers at the defaults (character tokenizer, <bos> + prompt, instruction "S:"; pinned
by tests/unit/test_agent_tasks.py): see the tests for the transcript length, the distance
of the asked fact, and the summaries an episode makes in each style.
"""

from __future__ import annotations

import re
import string
from typing import Any, ClassVar

import numpy as np

from surge.llm.tiny import GUESS_ALPHABET, RECALL_ALPHABET

_NUMBER = re.compile(r"[0-9]{1,4}")
_FETCH = re.compile(r"g([0-9]{1,3})")
_ANSWER = re.compile(r"([0-9])=([0-9])")
_STATED = re.compile(r"([0-9])=([0-9])")


def _problem_rng(seed: int, task: int) -> np.random.Generator:
    """The generator of the problem of `seed` (a non-negative int): its own stream, so an
    expert whose generator is seeded with the same number does not draw the same values
    (with `default_rng(seed)` for both, Guess's expert guessed the secret first every time)."""
    return np.random.default_rng([seed, task])


class Guess:
    """Find a secret number in 1..`high` within `max_guesses` guesses ("<": it is smaller)."""

    alphabet = GUESS_ALPHABET

    def __init__(self, high: int = 16, max_guesses: int = 5) -> None:
        if high < 1:
            raise ValueError(f"high={high}: expected at least 1")
        if max_guesses < 1:
            raise ValueError(f"max_guesses={max_guesses}: expected at least 1")
        self.high, self.max_guesses = high, max_guesses
        self.reset(0)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.secret = int(_problem_rng(seed, 1).integers(1, self.high + 1))
        self.guesses, self.done = 0, False
        # The expert's knowledge: the interval its context shows, and the one before the
        # latest exchange (a summary replaces that exchange, so it cannot know its feedback).
        self.known = self.before = (1, self.high)
        return f"guess 1-{self.high}\n", {"key": f"guess/{seed}"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        info = {"tool_call": False}
        if self.done:
            return "?\n", 0.0, True, False, info
        self.before = self.known
        self.guesses += 1
        text = action.strip()
        if not _NUMBER.fullmatch(text):
            observation = "?\n"
        else:
            n, (lo, hi) = int(text), self.known
            if n == self.secret:
                self.done = True
                return "=\n", 1.0, True, False, info
            if self.secret < n:
                observation, self.known = "<\n", (lo, min(hi, n - 1))
            else:
                observation, self.known = ">\n", (max(lo, n + 1), hi)
        self.done = self.guesses >= self.max_guesses
        return observation, 0.0, self.done, False, info

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> str:
        """A random guess among the numbers still possible; or, summarising, that interval
        as the context showed it before the dropped exchange ("5-9\\n")."""
        if summarize:
            self.known = self.before
            return f"{self.known[0]}-{self.known[1]}\n"
        lo, hi = self.known
        return f"{int(rng.integers(lo, hi + 1))}\n"


class Recall:
    """Fetch `facts` facts with the tool g<i>, then answer a question about one of the first
    `asked_from` of them. `filler` random letters follow each fact (they make the facts far
    apart); `lazy` is the chance that the expert's summaries list no facts (its first decides)."""

    alphabet = RECALL_ALPHABET
    best_expert: ClassVar[dict[str, Any]] = {"lazy": 0.0}
    """The expert at its best (every summary full): the warm start's expert-led check."""

    def __init__(
        self, facts: int = 12, asked_from: int = 4, filler: int = 6, lazy: float = 0.6
    ) -> None:
        if not 1 <= facts <= 100:
            raise ValueError(f"facts={facts}: expected 1 to 100 (tools g0 to g99)")
        if not 1 <= asked_from <= min(facts, 10):
            raise ValueError(f"asked_from={asked_from}: expected 1 to min(facts, 10)")
        if filler < 0:
            raise ValueError(f"filler={filler}: expected at least 0")
        if not 0 <= lazy <= 1:
            raise ValueError(f"lazy={lazy}: expected in [0, 1]")
        self.facts, self.asked_from, self.filler, self.lazy = facts, asked_from, filler, lazy
        self.reset(0)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        rng = _problem_rng(seed, 2)
        self.digits = [str(d) for d in rng.integers(0, 10, size=self.facts)]
        lower = np.array(list(string.ascii_lowercase))
        self.fillers = ["".join(rng.choice(lower, size=self.filler)) for _ in range(self.facts)]
        self.asked = int(rng.integers(0, self.asked_from))
        self.fetched: set[int] = set()
        self.fetched_before: set[int] = set()  # before the latest action
        self.question, self.done = False, False
        # The expert's memory: the askable facts it knows, its next fetch and whether it has
        # seen the question; `before` is the same before the latest exchange, which a summary
        # replaces. `full`: the style its first summary chose (None before it).
        self.memory: dict[int, str] = {}
        self.full: bool | None = None
        self.next, self.knows_question = 0, False
        self.before: tuple[dict[int, str], int, bool] = ({}, 0, False)
        return f"recall {self.facts}\n", {"key": f"recall/{seed}"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.done:
            return "?\n", 0.0, True, False, {"tool_call": False}
        self.before = (dict(self.memory), self.next, self.knows_question)
        self.fetched_before = set(self.fetched)
        text = action.strip()
        fetch = _FETCH.fullmatch(text)
        if fetch and int(fetch[1]) < self.facts:
            if self.question:
                # A fetch after the question asks it again, so a policy whose summary
                # replaced the question's exchange can get it back; it shows no fact, so the
                # answer must come from what the context kept, not from a fetch anew.
                self.knows_question = True
                return f"?{self.asked}\n", 0.0, False, False, {"tool_call": True}
            i = int(fetch[1])  # the tool is idempotent
            self.fetched.add(i)
            observation = f"={self.digits[i]}{self.fillers[i]}\n"
            self.question = len(self.fetched) == self.facts
            if self.question:
                observation += f"?{self.asked}\n"
            if i < self.asked_from:
                self.memory[i] = self.digits[i]
            self.next = i + 1 if i == self.next else self.next
            self.knows_question = self.question
            return observation, 0.0, False, False, {"tool_call": True}
        if not self.question:
            return "?\n", 0.0, False, False, {"tool_call": False}
        # After the question, anything but a fetch ends the episode: rewarded if the answer.
        self.done = True
        answer = _ANSWER.fullmatch(text)
        right = answer is not None and answer[1] == str(self.asked)
        right = right and answer is not None and answer[2] == self.digits[self.asked]
        return ("\n" if answer else "?\n"), float(right), True, False, {"tool_call": False}

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> str:
        """The next fetch in order, or the remembered answer (a random digit if forgotten).

        Summarising, the expert writes what its context held before the latest exchange
        (the runner drops the exchange that crossed the trigger): in a full summary the
        askable facts it knows, each as its number and digit ("0=71=0"), then the next fetch
        (the dropped one again: " g4") or the question if it had seen it (" ?2"); a lazy
        summary only the latter. The first summary picks the style (lazy with probability
        `lazy`), later ones keep it. Its memory afterwards is what the summary says.
        Truncation is not announced to it, so under `context.mode=truncate` it still answers
        from memory: its transcripts there show answers the context does not support."""
        if summarize:
            memory, self.next, self.knows_question = self.before
            if self.full is None:
                self.full = bool(rng.random() >= self.lazy)
            self.memory = dict(memory) if self.full else {}
            self.before = (dict(self.memory), self.next, self.knows_question)
            facts = "".join(f"{i}={d}" for i, d in sorted(self.memory.items()))
            then = f"?{self.asked}" if self.knows_question else f"g{self.next}"
            return f"{facts} {then}\n" if self.memory else f"{then}\n"
        if self.knows_question:
            digit = self.memory.get(self.asked)
            return f"{self.asked}={digit if digit is not None else int(rng.integers(0, 10))}\n"
        return f"g{min(self.next, self.facts - 1)}\n"

    @property
    def deciding(self) -> bool:
        """Whether the next action decides the reward (the answer: the question is known)."""
        return self.knows_question

    def summary_recall(self, summary: str) -> float | None:
        """The share of the askable facts fetched before the latest action (the exchange a
        summary replaces) that the summary states ("2=5"); None when there are none yet."""
        seen = [i for i in sorted(self.fetched_before) if i < self.asked_from]
        if not seen:
            return None
        head = summary.split(" ")[0] if " " in summary else ""
        stated = dict(_STATED.findall(head))
        return sum(stated.get(str(i)) == self.digits[i] for i in seen) / len(seen)
