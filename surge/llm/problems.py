"""What every LLM task is made of: problems, the train / held-out split they fall in, and the
name prefix of reasoning-gym datasets. The task modules (tasks.py, datasets.py,
reasoning_gym_task.py) build on these."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["train", "heldout"]
HELDOUT_EVERY = 10
"""One problem in this many belongs to the held-out split."""


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


def split_of(key: str) -> Split:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(digest, "little") % HELDOUT_EVERY == 0 else "train"


REASONING_GYM = "reasoning-gym:"
"""The prefix of task names that are reasoning-gym datasets: `reasoning-gym:chain_sum`."""
