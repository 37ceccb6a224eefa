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
    assert len(ids) == 9 and ids[0] == tok.bos_token_id  # <bos> first, as in Llama's
    assert tok.decode(ids, skip_special_tokens=True) == "12+34=46"
    assert tok("12+34=46", add_special_tokens=False)["input_ids"] == ids[1:]
    assert tok.convert_ids_to_tokens(tok("1a")["input_ids"]) == ["<bos>", "1", "<unk>"]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)


def test_saved_directory_reproduces_surges_inputs_and_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`save_model_dir` writes what plain transformers needs to feed and run the model as
    surge does: `tokenizer(prompt)` gives `encode_prompt`'s ids, and `generate` with no
    settings stops at the run's stops and its completion length, as surge's greedy
    generation does (surge/llm/engine.py) for the stops transformers can express."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from surge.config.llm_schema import RolloutConfig
    from surge.llm.engine import Decoding, Engine, Request
    from surge.llm.model import encode_prompt, save_model_dir, stop_sequences

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    model = tiny_llama(len(tok), seed=5)
    rollout = RolloutConfig(max_new_tokens=6, stop=["=", "+3"])
    save_model_dir(model, tok, tmp_path, rollout)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    tok_again = AutoTokenizer.from_pretrained(tmp_path)
    prompt = "12+34="
    assert tok_again(prompt)["input_ids"] == encode_prompt(tok, prompt)
    config = again.generation_config
    assert config.eos_token_id == [tok.eos_token_id, tok.convert_tokens_to_ids("=")]
    # transformers' StopStringCriteria cannot match stops longer than one character token
    assert config.stop_strings is None
    assert config.max_new_tokens == 6 and config.pad_token_id == tok.pad_token_id
    inputs = tok_again(prompt, return_tensors="pt")
    out = again.generate(**inputs, tokenizer=tok_again)[0, inputs["input_ids"].shape[1] :]
    ids = encode_prompt(tok, prompt)
    engine = Engine(
        model,
        1,
        Decoding(
            max_prompt=len(ids),
            max_new_tokens=rollout.max_new_tokens,
            eos_id=tok.eos_token_id,
            temperature=0.0,
            stop=stop_sequences(tok, ["="]),  # the stops `generate` knows
        ),
    )
    engine.submit([Request(0, tuple(ids))])
    (completion,) = [c for _ in range(rollout.max_new_tokens + 1) for c in engine.step()]
    assert out.tolist() == list(completion.tokens)


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
