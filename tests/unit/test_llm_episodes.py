"""The episode seam (surge/llm/episodes.py): episodes as coroutines over the engine's
continuous batch, their trajectories and loss masks, and episodes that fail."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from surge.llm.engine import Decoding, Engine, Request  # noqa: E402
from surge.llm.episodes import (  # noqa: E402
    EpisodeEngine,
    EpisodeRunner,
    Trajectory,
    completion_trajectory,
    episode_of,
    single_turn,
)
from surge.llm.problems import Problem  # noqa: E402
from surge.llm.tiny import tiny_llama  # noqa: E402

EOS = 2


class _Tokenizer:
    """Characters 'a'.. as ids 3..; <bos> 1, <eos> 2 (what the episodes need of one)."""

    bos_token_id, eos_token_id = 1, EOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [3 + ord(ch) - ord("a") for ch in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(ord("a") + i - 3) for i in ids if i >= 3)


def _engine(slots: int = 8, seed: int = 0) -> Engine:
    model = tiny_llama(16, seed=3).eval()
    return Engine(model, slots, Decoding(max_prompt=24, max_new_tokens=6, eos_id=EOS, seed=seed))


def _run(runner: EpisodeRunner, problems: list[Problem]) -> dict[int, Trajectory | None]:
    for i, p in enumerate(problems):
        runner.start(i, p, np.random.default_rng(i))
    out: dict[int, Trajectory | None] = {}
    while not runner.idle():
        out.update(runner.step())
    return out


PROBLEMS = [Problem(text, "") for text in ("abc", "de", "fghij", "k")]


def test_single_turn_episodes_are_the_engines_completions_of_their_prompts() -> None:
    tok = _Tokenizer()
    got = _run(EpisodeRunner(_engine(), tok, single_turn), PROBLEMS)
    direct = _engine()  # same seed, same requests in the same order: the same draws
    direct.submit([Request(i, (1, *tok.encode(p.prompt))) for i, p in enumerate(PROBLEMS)])
    want = {}
    while not direct.idle():
        want.update({c.key: c for c in direct.step()})
    for i, p in enumerate(PROBLEMS):
        t = got[i]
        assert t is not None and t.prompt == [1, *tok.encode(p.prompt)]
        assert t == completion_trajectory(t.prompt, want[i])
        assert all(t.mask) and t.reward is None and t.policy_tokens() == want[i].tokens


async def _two_turns(
    engine: EpisodeEngine, problem: Problem, rng: np.random.Generator
) -> Trajectory:
    """Ask, let the env answer with "cc", ask again; reward: the policy's token count."""
    prompt = engine.encode_prompt(problem.prompt)
    first = await engine.generate(prompt)
    env = engine.encode("cc")
    second = await engine.generate([*prompt, *first.tokens, *env])
    n1, n2 = len(first.tokens), len(second.tokens)
    return Trajectory(
        prompt,
        [*first.tokens, *env, *second.tokens],
        [True] * n1 + [False] * len(env) + [True] * n2,
        [*first.logprobs, *[0.0] * len(env), *second.logprobs],
        [*first.versions, *[-1] * len(env), *second.versions],
        reward=float(n1 + n2),
        finish=second.finish,
    )


def test_multi_turn_episodes_decode_together_and_mask_only_the_policys_tokens() -> None:
    tok = _Tokenizer()
    engine = _engine()
    runner = EpisodeRunner(engine, tok, _two_turns)
    for i, p in enumerate(PROBLEMS):
        runner.start(i, p, np.random.default_rng(i))
    busiest, out = 0, {}
    while not runner.idle():
        out.update(runner.step())
        busiest = max(busiest, engine.active)
    assert busiest == len(PROBLEMS)  # every episode's turn in one batch
    model = tiny_llama(16, seed=3).eval()
    for i in range(len(PROBLEMS)):
        t = out[i]
        assert t is not None and t.reward == sum(t.mask)
        env_at = [k for k, m in enumerate(t.mask) if not m]
        assert [t.tokens[k] for k in env_at] == tok.encode("cc")
        assert all(t.versions[k] == -1 and t.logprobs[k] == 0.0 for k in env_at)
        # each policy token was drawn after the whole context before it, env tokens too:
        # its behaviour log-prob is the model's on that context
        context = torch.tensor([[*t.prompt, *t.tokens]])
        with torch.no_grad():
            logp = torch.log_softmax(model(context).logits[0], -1)
        for k in (k for k, m in enumerate(t.mask) if m):
            want = logp[len(t.prompt) + k - 1, t.tokens[k]]
            assert t.logprobs[k] == pytest.approx(float(want), abs=1e-4)
    assert runner.errors == 0


def test_an_episode_that_raises_or_returns_garbage_is_dropped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(
        engine: EpisodeEngine, problem: Problem, rng: np.random.Generator
    ) -> Trajectory:
        out = await engine.generate(engine.encode_prompt(problem.prompt))
        if problem.prompt == "abc":
            raise RuntimeError("the tool crashed")
        if problem.prompt == "de":
            return Trajectory([1], out.tokens, [True], [0.0], [0])  # lengths disagree
        if problem.prompt == "k":
            return None  # the episode's own choice: drop it
        return completion_trajectory([1], out)

    runner = EpisodeRunner(_engine(), _Tokenizer(), broken)
    out = _run(runner, PROBLEMS)
    assert out[0] is None and out[1] is None and out[3] is None and out[2] is not None
    assert runner.errors == 2
    assert "the tool crashed" in caplog.text and "Traceback" in caplog.text


def test_a_task_picks_its_episode() -> None:
    class Agent:
        async def run_episode(self, engine: object, problem: object, rng: object) -> None:
            return None

    agent = Agent()
    assert episode_of(agent) == agent.run_episode
    assert episode_of(object()) is single_turn


def test_drop_all_closes_the_running_episodes() -> None:
    closed = []

    async def waits(engine: EpisodeEngine, problem: Problem, rng: np.random.Generator) -> None:
        try:
            await engine.generate([1, 3])
        finally:
            closed.append(problem.prompt)

    engine = _engine()
    runner = EpisodeRunner(engine, _Tokenizer(), waits)
    runner.start(0, PROBLEMS[0], np.random.default_rng(0))
    assert runner.running == 1 and not engine.idle()
    runner.drop_all()
    assert closed == ["abc"] and runner.idle() and runner.running == 0
