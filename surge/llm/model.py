"""Loading the run's language model and turning text into the token rows the streams carry.

Every worker of an LLM run loads the same starting directory (`RunContext.model_dir`: the
user's `model.path`, the cached warm start, or the built-in model's initial weights), so the
flat parameter vector has the same layout everywhere (parameters in `model.parameters()` order,
tied weights once: surge/models/weights.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def load_model(directory: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) from a Hugging Face directory, offline, in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # per-load bars would clutter the run's progress line
    model = AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=torch.float32, local_files_only=True
    )
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{directory}: the tokenizer has no end-of-sequence token")
    return model, tokenizer


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """The prompt's token ids, starting with the beginning-of-sequence token if the tokenizer
    has one (the warm start and RL see prompts the same way)."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    bos = tokenizer.bos_token_id
    return [bos, *ids] if bos is not None else ids


def decode_completion(tokenizer: Any, tokens: list[int] | Any) -> str:
    """A completion's text, up to (without) the end-of-sequence token."""
    ids = [int(t) for t in tokens]
    eos = tokenizer.eos_token_id
    if eos in ids:
        ids = ids[: ids.index(eos)]
    return str(tokenizer.decode(ids, skip_special_tokens=True))


def stop_sequences(tokenizer: Any, stop: list[str]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(tokenizer.encode(s, add_special_tokens=False)) for s in stop if s)


def max_prompt_tokens(tokenizer: Any, prompts: list[str]) -> int:
    return max(len(encode_prompt(tokenizer, p)) for p in prompts)
