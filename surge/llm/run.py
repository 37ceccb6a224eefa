"""What an LLM run's workers share beyond the config (`RunContext.family`): the Hugging Face
directory every worker loads its starting model from (surge/llm/setup.py prepares it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LLMRun:
    model_dir: str
    """The user's `model.path`, the warm start's cached directory, or run_dir/model."""


def model_dir_of(ctx: Any) -> str:
    """The model directory of an LLM run's context."""
    run = ctx.family
    assert isinstance(run, LLMRun), "an LLM run has a starting model directory"
    return run.model_dir
