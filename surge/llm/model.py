"""Loading the run's language model and turning text into the token rows the streams carry.

Every worker of an LLM run loads the same starting directory (`RunContext.model_dir`: the
user's `model.path`, the cached warm start, or the built-in model's initial weights), so the
flat parameter vector has the same layout everywhere (parameters in `model.parameters()` order,
tied weights once: surge/models/weights.py; a LoRA run's adapters alone: surge/llm/lora.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from surge.config.llm_schema import LoraConfig, RolloutConfig


def load_model(
    directory: str | Path, lora: LoraConfig | None = None, seed: int = 0
) -> tuple[Any, Any]:
    """(model, tokenizer) from a Hugging Face directory, offline, in float32; with `lora`
    (rank above 0) the model carries the run's adapters (surge/llm/lora.py, seeded by
    `seed`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # per-load bars would clutter the run's progress line
    model = AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=torch.float32, local_files_only=True
    )
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{directory}: the tokenizer has no end-of-sequence token")
    if lora is not None and lora.r > 0:
        from surge.llm.lora import add_adapters

        add_adapters(model, lora, seed)  # in place: the PEFT wrapper is only for saving
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


def save_model_dir(
    model: Any, tokenizer: Any, directory: str | Path, rollout: RolloutConfig | None = None
) -> None:
    """The model and tokenizer as `save_pretrained` writes them, with the generation config
    of `generation_config`: `generate` then needs no arguments beyond the prompt's ids
    (`tokenizer(prompt)`, which starts with <bos> where surge's prompts do)."""
    model.generation_config = generation_config(tokenizer, rollout)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def save_adapter(
    adapted: Any, tokenizer: Any, directory: str | Path, base: str | Path, rollout: RolloutConfig
) -> None:
    """A LoRA run's adapters as PEFT writes them (adapter_config.json,
    adapter_model.safetensors; `adapted` is `add_adapters`' PEFT model), with the tokenizer
    and the generation config, in `directory`. The adapter config names `base` (made
    absolute) as its base model: `PeftModel.from_pretrained(AutoModelForCausalLM
    .from_pretrained(base), directory)` is the trained model."""
    for config in adapted.peft_config.values():
        config.base_model_name_or_path = str(Path(base).resolve())
    adapted.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    generation_config(tokenizer, rollout).save_pretrained(directory)


def generation_config(tokenizer: Any, rollout: RolloutConfig | None) -> Any:
    """A `GenerationConfig` that generates as surge does: the special tokens' ids, and with
    `rollout` its completion length (`max_new_tokens`) and stops (end-of-sequence, then each
    stop string: one-token stops as extra end ids, longer ones as `stop_strings` where
    transformers can match them with this tokenizer: its `StopStringCriteria` cannot with
    the built-in character tokenizer, whose stop strings are all longer than a token)."""
    from transformers import GenerationConfig

    eos: list[int] = [tokenizer.eos_token_id]
    settings: dict[str, Any] = {}
    if rollout is not None:
        stops = list(zip(rollout.stop, stop_sequences(tokenizer, rollout.stop), strict=True))
        eos += [ids[0] for _, ids in stops if len(ids) == 1 and ids[0] not in eos]
        longer = [text for text, ids in stops if len(ids) > 1]
        settings["max_new_tokens"] = rollout.max_new_tokens
        if longer and _stop_strings_work(tokenizer, longer):
            settings["stop_strings"] = longer
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos[0] if len(eos) == 1 else eos,
        pad_token_id=tokenizer.pad_token_id,
        **settings,
    )


def _stop_strings_work(tokenizer: Any, stops: list[str]) -> bool:
    """Whether transformers' `StopStringCriteria` accepts `stops` with this tokenizer (it
    reads token strings the way byte-level BPE vocabularies spell them)."""
    from transformers import StopStringCriteria

    try:
        StopStringCriteria(tokenizer, stops)
    except (ValueError, KeyError, IndexError):
        return False
    return True
