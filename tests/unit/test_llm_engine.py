"""The generation engine (surge/llm/engine.py) and the lean forward it runs
(surge/llm/lean.py), against the transformers model they stand in for."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from surge.llm.engine import Decoding, Engine, Request, nucleus  # noqa: E402
from surge.llm.lean import LeanLlama  # noqa: E402
from surge.llm.tiny import tiny_llama  # noqa: E402

EOS = 2
GREEDY = Decoding(max_prompt=8, max_new_tokens=6, eos_id=-1, temperature=0)
"""Prompts of up to 8 tokens, 6 new ones drawn greedily, no end token."""


def _model(seed: int = 3, **kw: int) -> torch.nn.Module:
    model = tiny_llama(16, seed=seed, **kw)
    return model.eval()


def _prompts(n: int, seed: int = 0) -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (n,), generator=g)
    return [tuple(torch.randint(3, 16, (int(k),), generator=g).tolist()) for k in lengths]


def _run(engine: Engine, prompts: list[tuple[int, ...]]) -> dict[int, list[int]]:
    engine.submit([Request(i, p) for i, p in enumerate(prompts)])
    out = {}
    while not engine.idle():
        for c in engine.step():
            out[c.key] = c
    return out


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_lean_forward_and_cached_decoding_match_transformers(kv_heads: int) -> None:
    model = tiny_llama(16, seed=1)
    if kv_heads != 4:  # grouped-query attention: a fresh model with 2 key/value heads
        from transformers import LlamaForCausalLM

        config = model.config
        config.num_key_value_heads = kv_heads
        torch.manual_seed(1)
        model = LlamaForCausalLM(config)
    model.eval()
    lean = LeanLlama(model)
    tokens = torch.randint(3, 16, (5, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(tokens).logits
        assert torch.allclose(lean.forward(tokens), want, atol=1e-5)
        cache = lean.new_cache(5, 12)
        first = lean.prefill(cache, torch.arange(5), tokens[:, :7], torch.full((5,), 7))
        assert torch.allclose(first, want[:, 6], atol=1e-5)
        for t in range(7, 12):
            logits = lean.decode(cache, tokens[:, t], torch.full((5,), t))
            assert torch.allclose(logits, want[:, t], atol=1e-5)


def test_greedy_continuous_batching_matches_generate_and_scores_every_token() -> None:
    model = _model()
    prompts = _prompts(13)
    # 4 slots for 13 prompts of different lengths: sequences join as others leave.
    engine = Engine(model, 4, replace(GREEDY, eos_id=EOS))
    out = _run(engine, prompts)
    for i, p in enumerate(prompts):
        ids = torch.tensor([p])
        ref = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=EOS,
        )[0, len(p) :].tolist()
        if EOS in ref:
            ref = ref[: ref.index(EOS) + 1]
        c = out[i]
        assert c.tokens == ref
        assert c.finish == ("eos" if ref[-1] == EOS else "length")
        with torch.no_grad():
            logits = model(torch.tensor([list(p) + c.tokens])).logits[0, len(p) - 1 : -1]
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(c.tokens)[:, None])[:, 0]
        assert torch.allclose(logp, torch.tensor(c.logprobs), atol=1e-5)
        assert c.versions == [0] * len(c.tokens)


def test_new_weights_mid_sequence_recompute_the_cache_and_stamp_later_tokens() -> None:
    model, other = _model(seed=3), _model(seed=4)
    prompt = _prompts(1, seed=5)[0]
    engine = Engine(model, 2, GREEDY)
    engine.submit([Request(0, prompt)])
    assert engine.step() == []  # admitted (first token) and one more decoded: 2 tokens
    model.load_state_dict(other.state_dict())
    engine.set_version(7, recompute=True)
    (c,) = [c for _ in range(6) for c in engine.step()]
    assert c.versions == [0, 0, 7, 7, 7, 7]
    # The tokens after the switch are what the new weights choose given the whole prefix.
    with torch.no_grad():
        logits = other(torch.tensor([list(prompt) + c.tokens])).logits[0]
    greedy = logits[len(prompt) + 1 : -1].argmax(-1).tolist()
    assert c.tokens[2:] == greedy


def test_recomputed_cache_is_the_new_weights_prefill_of_each_prefix() -> None:
    """The recomputation runs a group's shared prompt once and then each sequence's own
    tokens; the cache must hold what a prefill of each whole prefix would."""
    model, other = _model(seed=3), _model(seed=4)
    a, b = _prompts(2, seed=6)
    engine = Engine(model, 6, replace(GREEDY, max_new_tokens=8, temperature=1.0))
    engine.submit([Request(m, a) for m in range(4)])
    engine.step()
    engine.submit([Request(4 + m, b) for m in range(2)])
    engine.step()  # a's sequences hold 3 tokens, b's 2, the samples differing
    model.load_state_dict(other.state_dict())
    engine.set_version(1, recompute=True)
    reference = LeanLlama(other)
    for i, slot in enumerate(engine.slots):
        assert slot is not None
        prefix = [*slot.request.prompt, *slot.out.tokens[:-1]]
        n = len(prefix)
        assert n == slot.position  # the cache holds all but the last sampled token
        cache = reference.new_cache(1, n)
        with torch.no_grad():
            reference.prefill(cache, torch.tensor([0]), torch.tensor([prefix]), torch.tensor([n]))
        layers = zip(
            engine.cache.keys + engine.cache.values, cache.keys + cache.values, strict=True
        )
        for mine, want in layers:
            assert torch.allclose(mine[i, :, :n], want[0], atol=1e-5)


def test_new_weights_mid_sequence_can_keep_the_old_cache() -> None:
    """PipelineRL's in-flight update: after the switch the new weights decode on the keys and
    values the old weights computed, and each token's log-prob is the one it was drawn with."""
    model, other = _model(seed=3), _model(seed=4)
    prompt = _prompts(1, seed=5)[0]
    engines = {}
    for recompute in (True, False):
        model.load_state_dict(_model(seed=3).state_dict())
        engine = Engine(model, 2, GREEDY)
        engine.submit([Request(0, prompt)])
        assert engine.step() == []  # two tokens under the old weights
        model.load_state_dict(other.state_dict())
        engine.set_version(7, recompute=recompute)
        (engines[recompute],) = [c for _ in range(6) for c in engine.step()]
    kept, recomputed = engines[False], engines[True]
    assert kept.versions == [0, 0, 7, 7, 7, 7]
    # By hand: the old weights' cache of the prompt and the first token, then the new weights
    # decode the second token (the last one sampled before the switch) on it.
    old_lean, new_lean = LeanLlama(_model(seed=3)), LeanLlama(other)
    with torch.no_grad():
        cache = old_lean.new_cache(1, 14)
        n = len(prompt)
        old_lean.prefill(cache, torch.tensor([0]), torch.tensor([[*prompt, kept.tokens[0]]]),
                         torch.tensor([n + 1]))  # fmt: skip
        logits = new_lean.decode(cache, torch.tensor([kept.tokens[1]]), torch.tensor([n + 1]))
    logp = torch.log_softmax(logits[0], -1)
    assert kept.tokens[2] == int(logp.argmax())
    assert math.isclose(kept.logprobs[2], float(logp.max()), abs_tol=1e-5)
    # Not the recomputed cache's distribution: the mode matters.
    assert abs(kept.logprobs[2] - recomputed.logprobs[2]) > 1e-3


def test_sampled_log_probs_are_of_the_distribution_sampled() -> None:
    model = _model()
    engine = Engine(model, 8, replace(GREEDY, max_new_tokens=3, temperature=0.7))
    prompts = _prompts(8)
    out = _run(engine, prompts)
    for i, p in enumerate(prompts):
        c = out[i]
        with torch.no_grad():
            logits = model(torch.tensor([list(p) + c.tokens])).logits[0, len(p) - 1 : -1]
        logp = torch.log_softmax(logits / 0.7, -1).gather(1, torch.tensor(c.tokens)[:, None])[:, 0]
        assert torch.allclose(logp, torch.tensor(c.logprobs), atol=1e-5)


def test_nucleus_keeps_the_smallest_set_reaching_top_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = nucleus(probs.log(), top_p=0.8).exp()
    # 0.5 + 0.3 reaches 0.8: the rest go, the two kept are renormalised.
    assert torch.allclose(kept, torch.tensor([[0.625, 0.375, 0.0, 0.0]]), atol=1e-6)
    only_top = nucleus(probs.log(), top_p=0.1).exp()
    assert torch.allclose(only_top, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert math.isclose(float(nucleus(probs.log(), 1.0).exp().sum()), 1.0, rel_tol=1e-6)


def test_stop_sequences_and_prompt_limits() -> None:
    model = _model()
    prompt = _prompts(1)[0]
    free = _run(Engine(model, 1, GREEDY), [prompt])[0]
    stop = tuple(free.tokens[1:3])
    first = next(n for n in range(2, 7) if tuple(free.tokens[n - 2 : n]) == stop)
    stopped = _run(Engine(model, 1, replace(GREEDY, stop=(stop,))), [prompt])[0]
    assert stopped.tokens == free.tokens[:first] and stopped.finish == "stop"
    with pytest.raises(ValueError, match="prompt of 9 tokens"):
        Engine(model, 1, GREEDY).submit([Request(0, tuple(range(3, 12)))])


def test_grouped_forward_is_the_forward_of_each_prompt_and_completion() -> None:
    model = tiny_llama(16, seed=2)
    lean = LeanLlama(model)
    g = torch.Generator().manual_seed(0)
    groups, G, P, N = 3, 4, 6, 5
    lens = torch.tensor([6, 4, 5])
    prompts = torch.randint(3, 16, (groups, P), generator=g)
    for i in range(groups):
        prompts[i, lens[i] :] = 0  # padding after a shorter prompt
    completions = torch.randint(3, 16, (groups * G, N), generator=g)
    grouped = lean.forward_groups(prompts, lens, completions)
    grouped.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total = torch.zeros(())
    for s in range(groups * G):
        n = int(lens[s // G])
        sequence = torch.cat([prompts[s // G, :n], completions[s]])[None]
        logits = model(sequence).logits[0, n - 1 : n - 1 + N]  # each predicts the next token
        assert torch.allclose(grouped[s], logits, atol=1e-5)
        total = total + logits.sum()
    total.backward()
    for mine, theirs in zip(grads, model.parameters(), strict=True):
        assert torch.allclose(mine, theirs.grad, rtol=1e-4, atol=1e-3)


def test_a_weight_update_is_checked_and_blocks_decoding_until_committed() -> None:
    model = _model()
    engine = Engine(model, 2, GREEDY)
    engine.submit([Request(0, (3, 4, 5))])
    engine.step()
    with pytest.raises(RuntimeError, match="before begin_weight_update"):
        engine.push_weights({})
    engine.begin_weight_update(1)
    with pytest.raises(RuntimeError, match="during a weight update"):
        engine.step()
    with pytest.raises(ValueError, match="no parameter"):
        engine.push_weights({"no.such.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="lm_head.weight is"):
        engine.push_weights({"lm_head.weight": torch.zeros(2, 2)})
    norm = torch.full_like(model.model.norm.weight, 0.5)
    engine.push_weights({"model.norm.weight": norm})  # a part of the weights is enough
    engine.commit_weight_update()
    assert torch.equal(model.model.norm.weight, norm) and engine.weight_version == 1
    while not engine.idle():
        for c in engine.step():
            assert c.versions[0] == 0 and c.versions[-1] == 1
