"""A text env whose episodes can outgrow a small window (docs/agents.md, "When your episodes
are longer than the window").

`FirstWord` shows 3 to `most` three-letter words, one per line, one per "next" action
("next\\n" -> "kel\\n"); once all are shown, "=kel\\n" (the first word again) earns reward 1.
An episode of n words takes 11 + n tokens of prompt (with <bos>), 9 per word and 5 for the
answer: 56 for 4 words, 66 for 5, 76 for 6. So guess-grpo's 64-token window holds the short
episodes and not the long ones: with `context.mode=none` those end at the window with reward
0, and `surge train` warns. A window of 96 holds them all:

    .venv/bin/surge train guess-grpo task.name=examples.llm_long_episodes:FirstWord \\
        'task.kwargs={}' rollout.max_new_tokens=6 context.window=96
"""

from __future__ import annotations

from typing import Any

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"


class FirstWord:
    alphabet = LETTERS + " =\n"
    """The built-in tokenizer's characters: every character of prompts, actions and
    observations."""

    def __init__(self, most: int = 6) -> None:
        if not 3 <= most <= 9:
            raise ValueError(f"most={most}: expected 3 to 9")
        self.most = most
        self.words: list[str] = []
        self.shown = 0

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        rng = np.random.default_rng([seed, 11])
        count = int(rng.integers(3, self.most + 1))
        self.words = ["".join(rng.choice(list(LETTERS), 3)) for _ in range(count)]
        self.shown = 0
        return f"first of {'n' * count}\n", {"key": f"first/{seed}"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = action.strip()
        if action == "next" and self.shown < len(self.words):
            self.shown += 1
            return f"{self.words[self.shown - 1]}\n", 0.0, False, False, {}
        if action.startswith("="):
            right = self.shown == len(self.words) and action[1:] == self.words[0]
            return "\n", float(right), True, False, {}
        return "=\n", 0.0, False, False, {}  # a malformed action: an error observation

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> str:
        if self.shown < len(self.words):
            return "next\n"
        return f"={self.words[0]}\n"
