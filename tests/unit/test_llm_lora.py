"""LoRA (surge/llm/lora.py): the adapters alone make the flat vector, with one layout on the
trainer's and the engine's side; the engine loaded from that vector computes the trainer's
PEFT model (logits and greedy tokens); the lean forward's merged weights give PEFT's
gradients; and the settings that cannot work are config errors naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("peft")

import torch  # noqa: E402

from surge.config.llm_schema import LoraConfig  # noqa: E402
from surge.config.load import load_config  # noqa: E402
from surge.errors import ConfigError  # noqa: E402
from surge.llm.engine_protocol import Decoding, Request  # noqa: E402
from surge.llm.engines import check_engine, make_engine  # noqa: E402
from surge.llm.lean import LeanLlama  # noqa: E402
from surge.llm.lora import (  # noqa: E402
    add_adapters,
    load_trained_state,
    trained_parameters,
    trained_state,
)
from surge.llm.model import load_model, save_model_dir  # noqa: E402
from surge.llm.setup import count_parameters  # noqa: E402
from surge.llm.tiny import ARITHMETIC_ALPHABET, char_tokenizer, tiny_config  # noqa: E402
from surge.models.weights import flat_to_tensors, tensors_to_flat  # noqa: E402

LORA = LoraConfig(r=4, alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"])
PROMPTS = ["12+34=", "7+8=", "99+1=", "50+50="]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama with random weights whose logits are far apart (greedy choices are not
    near-ties), saved as a Hugging Face directory."""
    from transformers import LlamaForCausalLM

    tokenizer = char_tokenizer(ARITHMETIC_ALPHABET)
    config = tiny_config(len(tokenizer), hidden=64, layers=2, heads=2, max_length=64)
    config.initializer_range = 0.2
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("base")
    save_model_dir(LlamaForCausalLM(config).eval(), tokenizer, directory)
    return directory


def _trained(base_dir: Path, lora: LoraConfig = LORA) -> tuple[object, object, object]:
    """(model, its PEFT model, tokenizer): the trainer's side, adapters moved off their
    start (B = 0 would make every comparison trivially the base's)."""
    model, tokenizer = load_model(base_dir)
    adapted = add_adapters(model, lora, seed=1)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trained_parameters(model):
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
    return model, adapted, tokenizer


def test_only_the_adapters_train_and_the_base_model_is_untouched(base_dir: Path) -> None:
    model, _ = load_model(base_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    add_adapters(model, LORA, seed=1)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert [p for _, p in model.named_parameters() if p.requires_grad] == trained_parameters(model)
    # 2 layers x r x (in + out) of q, v and o (64 x 64) and down (256 -> 64)
    adapters = 2 * 4 * (3 * (64 + 64) + (256 + 64))
    assert sum(p.numel() for p in trained_parameters(model)) == adapters
    assert count_parameters(model.config, LORA) == adapters
    with torch.no_grad():  # B starts at 0: the adapted model computes the base's function
        tokens = torch.randint(3, 15, (2, 9), generator=torch.Generator().manual_seed(1))
        base, _ = load_model(base_dir)
        assert torch.equal(LeanLlama(model.eval()).forward(tokens), LeanLlama(base).forward(tokens))
    kept = {k.replace(".base_layer", ""): v for k, v in model.state_dict().items()}
    assert all(torch.equal(kept[k], v) for k, v in before.items())


def test_the_engine_loaded_from_the_flat_vector_computes_the_trainers_peft_model(
    base_dir: Path,
) -> None:
    model, adapted, tokenizer = _trained(base_dir)
    flat = tensors_to_flat(trained_parameters(model))
    assert flat.size == count_parameters(model.config, LORA)  # what the parameter block holds

    # The generation worker's side: the same base, adapters added with another seed (so
    # nothing but the pushed vector can make them equal), loaded as the worker loads them.
    engine_model, _ = load_model(base_dir, LORA, seed=7)
    engine_model.eval()
    own = trained_parameters(engine_model)
    trainer_names = [n for n, p in model.named_parameters() if ".lora_" in n]
    assert [n for n, p in engine_model.named_parameters() if ".lora_" in n] == trainer_names
    decoding = Decoding(max_prompt=8, max_new_tokens=6, eos_id=-1, temperature=0.0)
    engine = make_engine(None, engine_model, decoding, slots=len(PROMPTS))
    engine.begin_weight_update(1)
    flat_to_tensors(flat, own)
    engine.push_weights(engine_model.state_dict())
    engine.commit_weight_update()

    prompts = [tokenizer(p, return_tensors="pt")["input_ids"] for p in PROMPTS]
    adapted.eval()
    with torch.no_grad():
        for ids in prompts:
            want = adapted(input_ids=ids).logits
            got = engine.lean.forward(ids)  # type: ignore[attr-defined]
            assert torch.allclose(got, want, atol=1e-4)  # merged or not: rounding apart
    completions = engine.generate(
        [Request(i, tuple(ids[0].tolist())) for i, ids in enumerate(prompts)]
    )
    for ids, completion in zip(prompts, completions, strict=True):
        assert completion.versions == [1] * 6
        greedy = adapted.generate(
            input_ids=ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0
        )
        assert completion.tokens == greedy[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_the_lean_forward_gives_peft_its_own_gradients(base_dir: Path, dropout: float) -> None:
    """Training through the merged weight W + (alpha / r) B A is exact; with dropout the
    adapted layers' own forwards run, in PEFT's order (the same dropout masks)."""
    lora = LoraConfig(r=4, alpha=8, dropout=dropout, target_modules=LORA.target_modules)
    model, adapted, _ = _trained(base_dir, lora)
    model.train()
    tokens = torch.randint(3, 15, (3, 10), generator=torch.Generator().manual_seed(2))
    params = trained_parameters(model)

    def grads(logits: torch.Tensor) -> list[torch.Tensor]:
        loss = torch.log_softmax(logits, -1)[..., 5].mean()
        return list(torch.autograd.grad(loss, params))

    torch.manual_seed(3)
    want = grads(adapted(input_ids=tokens).logits)
    torch.manual_seed(3)
    got = grads(LeanLlama(model).forward(tokens))
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=1e-6, rtol=1e-4)


def test_a_checkpoint_holds_the_adapters_and_restores_them(base_dir: Path) -> None:
    model, _, _ = _trained(base_dir)
    state = trained_state(model)
    assert state and all(".lora_" in k for k in state)
    fresh, _ = load_model(base_dir, LORA, seed=9)
    load_trained_state(fresh, {k: v.numpy() for k, v in state.items()})
    restored = tensors_to_flat(trained_parameters(fresh))
    assert np.array_equal(restored, tensors_to_flat(trained_parameters(model)))
    full, _ = load_model(base_dir)  # a full fine-tuning run's checkpoint does not fit
    with pytest.raises(ValueError, match="LoRA adapters"):
        load_trained_state(fresh, full.state_dict())


@pytest.mark.parametrize(
    ("target", "found"),
    [
        ("qkv_proj", "matches no module"),
        ("mlp", "names LlamaMLP modules, not linear layers"),
        ("embed_tokens", "names Embedding modules, not linear layers"),
    ],
)
def test_targets_the_model_lacks_are_config_errors_listing_its_linear_layers(
    base_dir: Path, target: str, found: str
) -> None:
    model, _ = load_model(base_dir)
    lora = LoraConfig(r=4, target_modules=["q_proj", target])
    with pytest.raises(ConfigError) as error:
        count_parameters(model.config, lora)
    message = str(error.value)
    assert f"model.lora.target_modules: {target!r} {found} of this model" in message
    assert "down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj" in message


def test_lora_with_the_vllm_engine_is_a_config_error(base_dir: Path) -> None:
    cfg, _ = load_config(
        "arith-grpo", [f"model.path={base_dir}", "rollout.engine=vllm", "model.lora.r=8"]
    )
    with pytest.raises(ConfigError, match=r"rollout.engine=vllm with model.lora.r=8"):
        check_engine(cfg, visible=1)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("model.lora.r=-1", "model.lora.r: must be >= 0"),
        ("model.lora.alpha=0", "model.lora.alpha: must be > 0"),
        ("model.lora.dropout=1", "model.lora.dropout: must be in [0, 1)"),
        ("model.lora.target_modules=[]", "model.lora.target_modules: must be a non-empty"),
    ],
)
def test_out_of_range_lora_settings_are_config_errors(override: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config("arith-grpo", [override])
