"""Multi-turn continuation in the generation engine (surge/llm/engine.py): a finished
sequence parks its slot, and a request that follows it runs only its new tokens, giving what
a full prefill of the whole context would."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from surge.llm.engine import Completion, Decoding, Engine, Request  # noqa: E402
from surge.llm.episodes import EpisodeEngine, EpisodeRunner, Trajectory  # noqa: E402
from surge.llm.problems import Problem  # noqa: E402
from surge.llm.tiny import tiny_llama  # noqa: E402

EOS = 2
OBSERVATION = (5, 9, 4)
PROMPTS = [(1, 7, 3, 11), (1, 12, 6), (1, 8, 8, 13, 4)]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_llama(16, seed=3).eval()


def _engine(model: torch.nn.Module, slots: int = 4, max_new: int = 5) -> Engine:
    return Engine(
        model, slots, Decoding(max_prompt=32, max_new_tokens=max_new, eos_id=-1, temperature=0)
    )


def _finish(engine: Engine, requests: list[Request]) -> dict[int, Completion]:
    engine.submit(requests)
    out = {}
    while not engine.idle():
        out.update({c.key: c for c in engine.step()})
    return out


def _next_turn(prompt: tuple[int, ...], c: Completion, seen: int = 3) -> tuple[int, ...]:
    return (*prompt, *c.tokens, *OBSERVATION[:seen])


def _assert_same(got: Completion, want: Completion) -> None:
    assert got.tokens == want.tokens and got.finish == want.finish
    assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_a_continued_sequence_runs_only_its_new_tokens_and_matches_a_fresh_prefill(
    model: torch.nn.Module,
) -> None:
    engine = _engine(model)
    first = _finish(engine, [Request(k, p, keep=True) for k, p in enumerate(PROMPTS)])
    assert sorted(engine.parked) == [0, 1, 2] and engine.idle() and engine.free == 4
    prefilled = engine.prefill_tokens
    # observations of 1, 2 and 3 tokens: rows of different lengths extend together
    turns = {k: _next_turn(p, first[k], seen=k + 1) for k, p in enumerate(PROMPTS)}
    second = _finish(engine, [Request(10 + k, turns[k], follows=k) for k in range(3)])
    assert engine.prefill_tokens == prefilled  # nothing prefilled again
    # each: the last sampled token (never run) and the observation
    assert engine.extend_tokens == (1 + 1) + (1 + 2) + (1 + 3)
    assert not engine.parked  # continued, and the followers did not ask to be kept
    fresh = _finish(_engine(model), [Request(10 + k, turns[k]) for k in range(3)])
    for k in range(3):
        _assert_same(second[10 + k], fresh[10 + k])


def test_a_parked_slot_survives_others_decoding_and_starts_with_fresh_requests(
    model: torch.nn.Module,
) -> None:
    engine = _engine(model)
    first = _finish(engine, [Request(0, PROMPTS[0], keep=True)])
    _finish(engine, [Request(5, PROMPTS[2])])  # decodes in the slot after the parked one
    turn = _next_turn(PROMPTS[0], first[0])
    both = _finish(engine, [Request(1, turn, follows=0), Request(2, PROMPTS[1])])
    assert engine.extend_tokens == 1 + len(OBSERVATION)
    fresh = _finish(_engine(model), [Request(1, turn), Request(2, PROMPTS[1])])
    for k in (1, 2):
        _assert_same(both[k], fresh[k])


def test_a_new_sequence_evicts_the_least_recently_parked_and_its_follower_prefills(
    model: torch.nn.Module,
) -> None:
    engine = _engine(model, slots=2)
    first = _finish(engine, [Request(0, PROMPTS[0], keep=True)])
    _finish(engine, [Request(1, PROMPTS[1], keep=True)])
    assert list(engine.parked) == [0, 1] and engine.free == 2
    _finish(engine, [Request(2, PROMPTS[2], keep=True)])
    assert list(engine.parked) == [1, 2]  # 0 went: it was parked first
    prefilled, extended = engine.prefill_tokens, engine.extend_tokens
    turn = _next_turn(PROMPTS[0], first[0])
    again = _finish(engine, [Request(3, turn, follows=0)])
    assert engine.prefill_tokens == prefilled + len(turn) and engine.extend_tokens == extended
    _assert_same(again[3], _finish(_engine(model), [Request(3, turn)])[3])


def test_a_follower_whose_prompt_does_not_start_with_the_parked_tokens_prefills(
    model: torch.nn.Module,
) -> None:
    engine = _engine(model)
    first = _finish(engine, [Request(0, PROMPTS[0], keep=True)])
    edited = (*PROMPTS[0][:-1], 14, *first[0].tokens, *OBSERVATION)  # the prompt changed
    prefilled = engine.prefill_tokens
    got = _finish(engine, [Request(1, edited, follows=0)])
    assert engine.prefill_tokens == prefilled + len(edited) and engine.extend_tokens == 0
    assert not engine.parked  # the follower superseded the parked sequence
    _assert_same(got[1], _finish(_engine(model), [Request(1, edited)])[1])


def test_a_request_stops_at_its_own_max_new(model: torch.nn.Module) -> None:
    engine = _engine(model, max_new=5)
    out = _finish(engine, [Request(0, PROMPTS[0], max_new=2), Request(1, PROMPTS[0])])
    assert len(out[0].tokens) == 2 and out[0].finish == "length"
    assert out[0].tokens == out[1].tokens[:2] and len(out[1].tokens) == 5
    capped = _finish(engine, [Request(2, PROMPTS[0], max_new=99)])[2]
    assert len(capped.tokens) == 5  # the engine's limit caps it
    one = _finish(engine, [Request(3, PROMPTS[0], max_new=1)])[3]
    assert len(one.tokens) == 1 and one.finish == "length"
    with pytest.raises(ValueError, match="max_new=0"):
        engine.submit([Request(4, PROMPTS[0], max_new=0)])


def test_new_weights_release_parked_slots_unless_the_cache_is_kept(
    model: torch.nn.Module,
) -> None:
    engine = _engine(model)
    _finish(engine, [Request(k, p, keep=True) for k, p in enumerate(PROMPTS)])
    engine.set_version(1, recompute=False)
    assert sorted(engine.parked) == [0, 1, 2]
    engine.release(1)
    engine.release(7)  # not parked: nothing happens
    assert sorted(engine.parked) == [0, 2]
    engine.set_version(2, recompute=True)
    assert not engine.parked
    _finish(engine, [Request(3, PROMPTS[0], keep=True)])
    engine.drop_all()
    assert not engine.parked and engine.idle() and engine.free == 4


class _Tokenizer:
    bos_token_id, eos_token_id = 1, EOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [3 + ord(ch) - ord("a") for ch in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(ord("a") + i - 3) for i in ids if i >= 3)


async def _three_turns(
    engine: EpisodeEngine, problem: Problem, rng: np.random.Generator
) -> Trajectory:
    """Ask three times, the env appending "cc" after each answer (the last one capped)."""
    prompt = engine.encode_prompt(problem.prompt)
    context, tokens, mask, logprobs, versions = list(prompt), [], [], [], []
    for turn in range(3):
        c = await engine.generate(context, max_new=2 if turn == 2 else None)
        env = engine.encode("cc")
        tokens += [*c.tokens, *env]
        mask += [True] * len(c.tokens) + [False] * len(env)
        logprobs += [*c.logprobs, *[0.0] * len(env)]
        versions += [*c.versions, *[-1] * len(env)]
        context += [*c.tokens, *env]
    assert len(c.tokens) == 2
    return Trajectory(prompt, tokens, mask, logprobs, versions)


def test_an_episodes_turns_continue_its_sequence_and_release_it_at_the_end(
    model: torch.nn.Module,
) -> None:
    engine = Engine(model, 4, Decoding(max_prompt=40, max_new_tokens=4, eos_id=-1, temperature=1.0))
    runner = EpisodeRunner(engine, _Tokenizer(), _three_turns)
    for i, text in enumerate(("abc", "de")):
        runner.start(i, Problem(text, ""), np.random.default_rng(i))
    out: dict[int, Trajectory | None] = {}
    while not runner.idle():
        out.update(runner.step())
    assert runner.errors == 0 and sorted(out) == [0, 1]
    assert not engine.parked  # each episode released its last sequence
    # two continued turns per episode, each the last sampled token and "cc"
    assert engine.extend_tokens == 2 * 2 * 3
    assert engine.prefill_tokens == len("abc") + 1 + len("de") + 1
    for t in out.values():  # behaviour log-probs are the model's on the whole context
        assert t is not None
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([[*t.prompt, *t.tokens]])).logits[0], -1)
        for k in (k for k, m in enumerate(t.mask) if m):
            want = float(logp[len(t.prompt) + k - 1, t.tokens[k]])
            assert t.logprobs[k] == pytest.approx(want, abs=1e-4)


def test_an_episode_that_raises_releases_its_slot(model: torch.nn.Module) -> None:
    async def crashes(engine: EpisodeEngine, problem: Problem, rng: np.random.Generator) -> None:
        await engine.generate([1, 3, 4])
        raise RuntimeError("the tool crashed")

    engine = _engine(model)
    runner = EpisodeRunner(engine, _Tokenizer(), crashes)
    runner.start(0, Problem("ab", ""), np.random.default_rng(0))
    while not runner.idle():
        runner.step()
    assert runner.errors == 1 and not engine.parked
