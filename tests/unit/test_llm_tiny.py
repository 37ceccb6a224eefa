"""The built-in tiny Llama and character tokenizer are plain Hugging Face objects: they save
to a directory that transformers loads back by itself, with no network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from surge.llm.tiny import ARITHMETIC_ALPHABET, char_tokenizer, tiny_llama  # noqa: E402


def test_char_tokenizer_round_trips_and_marks_unknowns() -> None:
    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    assert len(tok) == 4 + 12
    ids = tok("12+34=46")["input_ids"]
    assert len(ids) == 8 and tok.decode(ids) == "12+34=46"
    assert tok.convert_ids_to_tokens(tok("1a")["input_ids"]) == ["1", "<unk>"]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)


def test_tiny_llama_saves_and_loads_with_plain_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a directory, never the hub
    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    model = tiny_llama(len(tok), seed=3)
    n = sum(p.numel() for p in model.parameters())
    assert 0.5e6 < n < 5e6, n  # order 1M
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    tok_again = AutoTokenizer.from_pretrained(tmp_path)
    ids = torch.tensor([tok_again("12+34=")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits)
    assert (
        tiny_llama(len(tok), seed=3)
        .state_dict()["lm_head.weight"]
        .equal(model.state_dict()["lm_head.weight"])
    )  # seeded
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_head_size_below_32_is_refused() -> None:
    with pytest.raises(ValueError, match="head size of at least 32"):
        tiny_llama(16, hidden=64, heads=4)
