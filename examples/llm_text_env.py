"""A text env of your own: a tool-using agent trained end to end on the built-in model.

`Lookup` hides a digit behind each of the letters a-d. The prompt names two of them
("add bd\\n"); the tool `?b` returns "b=4\\n"; the answer "=9\\n" (their sum) earns reward 1.
The policy has to call the tool for both letters, remember what it read, and add. An
`expert` (looks up what it does not know, then answers) gives the warm start transcripts to
imitate; its summaries (`summarize=True`) list what it has read, for `context.mode=summarize`.

Train it with the guess-grpo preset's settings (a 64-token window, one turn per line):

    .venv/bin/surge train guess-grpo task.name=examples.llm_text_env:Lookup \\
        rollout.max_new_tokens=4

Any class with `reset(seed) -> (text, info)` and `step(action) -> (text, reward, terminated,
truncated, info)` works the same way (docs/agents.md); `task.kwargs` go to its constructor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

KEYS = "abcd"


class Lookup:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789?=!-+ \nS:"
    """The built-in tokenizer's characters: every character of prompts, actions,
    observations and summaries (the summary instruction "S:" too)."""

    def __init__(self, keys: int = 4) -> None:
        if not 2 <= keys <= len(KEYS):
            raise ValueError(f"keys={keys}: expected 2 to {len(KEYS)}")
        self.keys = KEYS[:keys]
        self.values: dict[str, int] = {}
        self.asked = ""
        self.known: dict[str, int] = {}  # what the expert has read (and kept)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        rng = np.random.default_rng([seed, 7])
        self.values = {k: int(rng.integers(0, 10)) for k in self.keys}
        self.asked = "".join(rng.choice(list(self.keys), 2, replace=False))
        self.known = {}
        return f"add {self.asked}\n", {"key": f"lookup/{seed}"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = action.strip()
        if len(action) == 2 and action[0] == "?" and action[1] in self.values:
            key = action[1]
            self.known[key] = self.values[key]
            return f"{key}={self.values[key]}\n", 0.0, False, False, {"tool_call": True}
        if action.startswith("="):
            right = action[1:] == str(sum(self.values[k] for k in self.asked))
            return "\n", float(right), True, False, {"tool_call": False}
        return "!\n", 0.0, False, False, {"tool_call": False}

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> str:
        if summarize:
            return " ".join(f"{k}={v}" for k, v in sorted(self.known.items())) + "\n"
        for key in self.asked:
            if key not in self.known:
                return f"?{key}\n"
        return f"={sum(self.known[k] for k in self.asked)}\n"
