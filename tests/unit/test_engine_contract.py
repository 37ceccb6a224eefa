"""The contract every generation engine (surge/llm/engine_protocol.py) must pass, run for
each engine `rollout.engine` can name: the built-in one on the CPU; vLLM where it imports
and a CUDA GPU is visible (skipped, with the reason, elsewhere).

The model is a tiny Llama saved with `save_pretrained` from a config with random weights (no
download) and loaded as `model.path`; the engine is built by `make_engine`, as the workers
build it. References are transformers' own `generate` and teacher-forced forward passes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from surge.config.load import load_config  # noqa: E402
from surge.errors import ConfigError  # noqa: E402
from surge.llm.engine import nucleus  # noqa: E402
from surge.llm.engine_protocol import Completion, Decoding, GenerationEngine, Request  # noqa: E402
from surge.llm.engines import check_engine, make_engine  # noqa: E402
from surge.llm.model import load_model, save_model_dir  # noqa: E402
from surge.llm.tiny import char_tokenizer, tiny_config  # noqa: E402

pytestmark = pytest.mark.numerics

ALPHABET = "0123456789+=abcdef"
MAX_NEW = 8


def _vllm_missing() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed"
    if not torch.cuda.is_available():
        return "vllm needs a CUDA GPU and none is visible"
    return None


ENGINES = [
    "builtin",
    pytest.param(
        "vllm", marks=pytest.mark.skipif(_vllm_missing() is not None, reason=str(_vllm_missing()))
    ),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama with random weights, saved as a Hugging Face directory."""
    from transformers import LlamaForCausalLM

    tokenizer = char_tokenizer(ALPHABET)
    config = tiny_config(len(tokenizer), hidden=64, layers=2, heads=2, max_length=64)
    config.initializer_range = 0.2  # logits far apart: greedy choices are not near-ties
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny-llama")
    save_model_dir(LlamaForCausalLM(config).eval(), tokenizer, directory)
    return directory


def _engine(name: str, directory: Path, temperature: float, top_p: float = 1.0) -> Any:
    """The engine `rollout.engine=name` builds for `model.path=directory` (its own model)."""
    cfg, _ = load_config("arith-grpo", [f"rollout.engine={name}", f"model.path={directory}"])
    model, tokenizer = load_model(directory)
    decoding = Decoding(
        max_prompt=16,
        max_new_tokens=MAX_NEW,
        eos_id=tokenizer.eos_token_id,
        temperature=temperature,
        top_p=top_p,
        seed=7,
    )
    return make_engine(cfg, model.eval(), decoding, slots=4, model_dir=directory)


def _prompts(directory: Path) -> list[tuple[int, ...]]:
    tokenizer = char_tokenizer(ALPHABET)
    texts = ["1+2=", "35+46=", "abc", "9", "fe+dc=", "70+7=", "0", "ddd+ee="]
    return [(tokenizer.bos_token_id, *tokenizer.encode(t, add_special_tokens=False)) for t in texts]


def _greedy_reference(model: Any, prompt: tuple[int, ...], eos: int) -> list[int]:
    """transformers' `generate`, greedy, one prompt at a time (no padding)."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=MAX_NEW,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    return [int(t) for t in out[0, len(prompt) :]]


def _teacher_forced(
    model: Any, prompt: tuple[int, ...], c: Completion, temperature: float, top_p: float
) -> torch.Tensor:
    """Each completion token's log-prob under `model` run on the whole sequence at once,
    after temperature and top-p (greedy: the plain log-softmax)."""
    tokens = torch.tensor([[*prompt, *c.tokens]])
    with torch.no_grad():
        logits = model(tokens).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    if temperature and top_p < 1.0:
        logp = nucleus(logp, top_p)
    return logp.gather(1, torch.tensor(c.tokens)[:, None])[:, 0]


@pytest.mark.parametrize("name", ENGINES)
def test_implements_the_protocol(name: str, model_dir: Path) -> None:
    engine = _engine(name, model_dir, temperature=0.0)
    assert isinstance(engine, GenerationEngine)
    assert engine.weight_version == 0 and engine.idle() and not engine.paused
    engine.sleep()  # the CPU's: no-ops; vLLM's: frees and takes back the GPU's memory
    engine.wake()
    assert engine.generate([Request(0, _prompts(model_dir)[0])])[0].tokens


@pytest.mark.parametrize("name", ENGINES)
def test_greedy_tokens_match_transformers_generate(name: str, model_dir: Path) -> None:
    engine = _engine(name, model_dir, temperature=0.0)
    model, tokenizer = load_model(model_dir)
    prompts = _prompts(model_dir)
    got = engine.generate([Request(i, p) for i, p in enumerate(prompts)])
    assert [c.key for c in got] == list(range(len(prompts)))
    for prompt, c in zip(prompts, got, strict=True):
        assert c.tokens == _greedy_reference(model, prompt, tokenizer.eos_token_id)
        assert c.finish == ("eos" if c.tokens[-1] == tokenizer.eos_token_id else "length")


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_every_token_has_its_version_and_behaviour_logprob(
    name: str, model_dir: Path, temperature: float, top_p: float
) -> None:
    engine = _engine(name, model_dir, temperature, top_p)
    model, _ = load_model(model_dir)
    prompts = _prompts(model_dir)
    got = engine.generate([Request(i, p) for i, p in enumerate(prompts)])
    for prompt, c in zip(prompts, got, strict=True):
        assert len(c.tokens) == len(c.logprobs) == len(c.versions) > 0
        assert c.versions == [0] * len(c.tokens)
        want = _teacher_forced(model, prompt, c, temperature, top_p)
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-4)


def _perturbed(model_dir: Path, out: Path) -> Any:
    """The starting model with every weight moved a little, saved to `out` too."""
    model, tokenizer = load_model(model_dir)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    save_model_dir(model, tokenizer, out)
    return model.eval()


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize("source", ["tensors", "path"])
def test_an_update_mid_generation_versions_the_later_tokens(
    name: str, source: str, model_dir: Path, tmp_path: Path
) -> None:
    engine = _engine(name, model_dir, temperature=0.0)
    old, tokenizer = load_model(model_dir)
    new = _perturbed(model_dir, tmp_path / "v1")
    eos = tokenizer.eos_token_id
    # prompts whose completion under the old weights outlives the update's step, all in a slot
    prompts = [p for p in _prompts(model_dir) if eos not in _greedy_reference(old, p, eos)[:4]]
    prompts = prompts[:4]
    assert len(prompts) >= 2
    steps = 0

    def update() -> None:
        nonlocal steps
        steps += 1
        if steps == 2:
            engine.begin_weight_update(1)
            engine.push_weights(new.state_dict() if source == "tensors" else tmp_path / "v1")
            engine.commit_weight_update(recompute=True)

    got = engine.generate([Request(i, p) for i, p in enumerate(prompts)], between_steps=update)
    assert engine.weight_version == 1
    for prompt, c in zip(prompts, got, strict=True):
        before = c.versions.count(0)
        assert 1 <= before < len(c.tokens), c.versions  # tokens on each side of the update
        assert c.versions == [0] * before + [1] * (len(c.tokens) - before)
        # each token's log-prob is that of the weights that drew it (the cache recomputed)
        lp = torch.tensor(c.logprobs)
        assert torch.allclose(
            lp[:before], _teacher_forced(old, prompt, c, 0, 1)[:before], atol=1e-4
        )
        assert torch.allclose(
            lp[before:], _teacher_forced(new, prompt, c, 0, 1)[before:], atol=1e-4
        )
        # and greedy under them: the old weights' tokens up to the update, then the new's
        assert c.tokens[:before] == _greedy_reference(old, prompt, eos)[:before]
        rest = _greedy_reference(new, (*prompt, *c.tokens[:before]), eos)
        assert c.tokens[before:] == rest[: len(c.tokens) - before]


@pytest.mark.parametrize("name", ENGINES)
def test_pause_holds_decoding_and_resume_continues(name: str, model_dir: Path) -> None:
    engine = _engine(name, model_dir, temperature=0.0)
    model, tokenizer = load_model(model_dir)
    prompts = _prompts(model_dir)[:3]
    engine.submit([Request(i, p) for i, p in enumerate(prompts)])
    done = {c.key: c for c in engine.step()}
    engine.pause()
    assert engine.paused
    for _ in range(3):
        assert engine.step() == []
    with pytest.raises(RuntimeError, match="paused"):
        engine.generate([Request(99, prompts[0])])
    engine.resume()
    with pytest.raises(RuntimeError, match="in flight"):
        engine.generate([Request(99, prompts[0])])  # their completions would be lost
    while not engine.idle():
        done.update({c.key: c for c in engine.step()})
    for i, prompt in enumerate(prompts):
        assert done[i].tokens == _greedy_reference(model, prompt, tokenizer.eos_token_id)
    # a pause around a weight update, as a trainer sharing the GPU would do it
    engine.submit([Request(5, prompts[0])])
    engine.pause()
    engine.begin_weight_update(1)
    engine.push_weights(model.state_dict())  # the same weights: the same tokens
    engine.commit_weight_update()
    engine.resume()
    while not engine.idle():
        done.update({c.key: c for c in engine.step()})
    assert done[5].tokens == done[0].tokens and set(done[5].versions) == {1}


def test_vllm_without_vllm_or_cuda_is_a_config_error_naming_rollout_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg, _ = load_config("arith-grpo", ["rollout.engine=vllm", "model.path=/nowhere"])
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a)
    )
    with pytest.raises(ConfigError, match=r"rollout\.engine=vllm: the vllm package is not"):
        check_engine(cfg)
    # installed but no GPU to run on
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object())
    with pytest.raises(ConfigError, match=r"rollout\.engine=vllm: no CUDA GPU is visible"):
        check_engine(cfg, visible=0)
    check_engine(load_config("arith-grpo", [])[0])  # builtin: always runs


def test_an_unknown_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.engine"):
        load_config("arith-grpo", ["rollout.engine=sglang"])


@pytest.mark.skipif(_vllm_missing() is None, reason="vllm can run here")
def test_train_with_vllm_where_it_cannot_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from surge.cli import main

    run_dir = tmp_path / "r"
    code = main(["train", "arith-grpo", "rollout.engine=vllm", f"run_dir={run_dir}"])
    assert code == 2
    assert "rollout.engine=vllm" in capsys.readouterr().err
