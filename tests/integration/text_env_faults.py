"""Text envs with a user's mistakes, for the runs of test_text_env_faults.py (imported by
the run's workers as `task.name=tests.integration.text_env_faults:<Class>`)."""

from __future__ import annotations

from typing import Any

import numpy as np


class RaisesOnPolicyText:
    """Answers the setup's probe (the empty action) and raises on any text a policy writes."""

    alphabet = "abc\n"

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        return "abc\n", {"key": f"faults/{seed}"}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action:
            raise KeyError(f"no command {action!r}")
        return "a\n", 0.0, False, False, {}


class ExpertWritesNumbers(RaisesOnPolicyText):
    """Its expert returns an int: the warm start meets it first."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "a\n", 1.0, True, False, {}

    def expert(self, rng: np.random.Generator, summarize: bool = False) -> Any:
        return 3
