"""A text env whose episodes can outgrow a small window (docs/agents.md, "When your episodes
are longer than the window").

`LastWord` shows 3 to `most` three-letter words, one per line, one per "next" action
("next\\n" -> "kel\\n"); the last one ends with a full stop ("uvn.\\n"), and then "=u\\n" (its
first letter) earns reward 1. An episode of n words takes 7 tokens of prompt (with <bos>),
9 per word and 4 for the answer: 56 for 5 words, 65 for 6, 74 for 7. So guess-grpo's
64-token window holds the short episodes and not the long ones: with `context.mode=none`
those end at the window with reward 0, and `surge train` warns. A window of 96 holds them:

    .venv/bin/surge train guess-grpo task.name=examples.llm_long_episodes:LastWord \\
        'task.kwargs={}' rollout.max_new_tokens=6 context.window=96
"""

from __future__ import annotations

from typing import Any

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"


class LastWord:
    alphabet = LETTERS + ".=\n"
    """The built-in tokenizer's characters: every character of prompts, actions and
    observations."""

    def __init__(self, most: int = 7) -> None:
        if not 3 <= most <= 8:
            raise ValueError(f"most={most}: expected 3 to 8 (guess-grpo allows 8 turns)")
        self.most = most
        self.words: list[str] = []
        self.shown = 0

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        rng = np.random.default_rng([seed, 11])
        count = int(rng.integers(3, self.most + 1))
        self.words = ["".join(rng.choice(list(LETTERS), 3)) for _ in range(count)]
        self.shown = 0
        return "words\n", {"key": f"last/{seed}"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = action.strip()
        if action == "next" and self.shown < len(self.words):
            self.shown += 1
            last = self.shown == len(self.words)
            return f"{self.words[self.shown - 1]}{'.' if last else ''}\n", 0.0, False, False, {}
        if action.startswith("="):
            right = self.shown == len(self.words) and action[1:] == self.words[-1][0]
            return "\n", float(right), True, False, {}
        return "=\n", 0.0, False, False, {}  # a malformed action: an error observation

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> str:
        if self.shown < len(self.words):
            return "next\n"
        return f"={self.words[-1][0]}\n"
