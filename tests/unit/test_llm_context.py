"""The working-context rules (surge/llm/context.py) and the multi-turn episode loop that
applies them (surge/llm/textenv.py), on hand-built and random transcripts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from surge.llm.context import (
    ContextRule,
    action_room,
    check_fits,
    crosses,
    kept_exchanges,
    summary_room,
)
from surge.llm.env_checks import CheckedTextEnv, TextEnvError
from surge.llm.episodes import EpisodeEngine
from surge.llm.textenv import run_now
from surge.llm.tiny import char_tokenizer
from surge.llm.turn_loop import EpisodeLimits, Written, text_episode

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789\nS:?=<>"


def test_limits_of_each_mode() -> None:
    assert ContextRule("none", 96).limit == 96
    assert ContextRule("truncate", 96, 0.95).limit == 91
    assert ContextRule("summarize", 96, 0.95, summary_tokens=28).limit == 63
    with pytest.raises(ValueError, match="context.mode"):
        ContextRule("forget", 96)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context.threshold"):
        ContextRule("summarize", 96, 1.5)


def test_room_and_crossing() -> None:
    rule = ContextRule("summarize", 96, 0.95, 28)
    assert action_room(rule, 50, 4) == 4
    assert action_room(rule, 94, 4) == 2  # the window, not the turn limit, binds
    assert action_room(rule, 96, 4) == 0
    assert not crosses(rule, 50, 13) and crosses(rule, 51, 13)  # 63 is the limit
    assert summary_room(rule, 2) == 26


def test_truncation_keeps_recent_exchanges_within_half_the_room() -> None:
    rule = ContextRule("truncate", 96, 0.95)  # limit 91
    # prompt 11: half of the 80 tokens of room is 40: the last three of 13 fit (39)
    assert kept_exchanges(rule, 11, [13, 13, 13, 13, 13]) == 3
    assert kept_exchanges(rule, 11, [50]) == 0


def test_fit_errors_name_the_settings() -> None:
    rule = ContextRule("summarize", 96, 0.95, 28)
    assert check_fits(rule, 10, 2, 13) is None
    why = check_fits(rule, 40, 2, 30)
    assert why is not None and "context.summary_tokens=28" in why and "= 63" in why
    assert "summary" in (check_fits(ContextRule("summarize", 96, 0.95, 2), 10, 2, 13) or "")
    assert "context.window=20" in (check_fits(ContextRule("none", 20), 10, 2, 13) or "")


# ---------------------------------------------------------------- the episode loop


class CountingEnv:
    """Answers every action with an observation of a random length; ends after `turns`."""

    def __init__(self, turns: int, seed: int, longest: int = 12) -> None:
        self.turns, self.longest = turns, longest
        self.rng = np.random.default_rng(seed)
        self.t = 0

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        return "abc\n", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.t += 1
        n = int(self.rng.integers(1, self.longest))
        done = self.t >= self.turns
        return "o" * n + "\n", float(done), done, False, {"tool_call": True}


def random_writer(engine: EpisodeEngine, seed: int, seen: list[list[int]]) -> Any:
    rng = np.random.default_rng(seed)

    async def write(context: list[int], max_new: int, summarize: bool) -> Written:
        seen.append(list(context))
        n = int(rng.integers(1, max_new + 1))
        tokens = engine.encode(("s" if summarize else "x") * (n - 1) + "\n")[:max_new]
        return tokens, [-0.5] * len(tokens), [3] * len(tokens), "stop"

    return write


@pytest.fixture(scope="module")
def engine() -> EpisodeEngine:
    return EpisodeEngine(char_tokenizer(ALPHABET))


@pytest.mark.parametrize("mode", ["summarize", "truncate"])
def test_random_transcripts_never_exceed_the_window(engine: EpisodeEngine, mode: str) -> None:
    rule = ContextRule(mode, 60, 0.95, 16 if mode == "summarize" else 0, max_segments=50)  # type: ignore[arg-type]
    limits = EpisodeLimits(rule, max_new_tokens=6, max_tool_calls=1000, max_turns=1000)
    for seed in range(30):
        seen: list[list[int]] = []
        env = CountingEnv(turns=25, seed=seed)
        prompt_text, _ = env.reset(0)
        t = run_now(
            text_episode(env, engine, prompt_text, limits, random_writer(engine, seed, seen))
        )
        assert t is not None and t.reward == 1.0 and not t.overlong
        assert max(len(c) for c in seen) <= 60
        assert t.info["context_max"] <= 60
        segments = t.segments()
        if mode == "summarize":
            assert len(segments) == t.info["summaries"] + 1
        for s in segments:
            assert len(t.prompt) + len(s.tokens) <= 60
            # the mask covers exactly the policy's tokens (x..., s...), nothing the env wrote;
            # policy tokens out of the mask are only those carried over from the last segment
            text = [engine.decode([tok]) for tok in s.tokens]
            policy = [c for c, m in zip(text, s.mask, strict=True) if m]
            assert all(c in "xs\n" for c in policy)
            trained = s.mask.index(True) if any(s.mask) else len(s.mask)
            after = zip(text[trained:], s.mask[trained:], strict=True)
            assert all(c not in "xs" for c, m in after if not m)
            assert all(v == 3 for v, m in zip(s.versions, s.mask, strict=True) if m)


def test_the_trigger_drops_the_exchange_and_restarts_from_prompt_and_summary(
    engine: EpisodeEngine,
) -> None:
    """Prompt 5 tokens (<bos>abc\\n); exchanges of 4 + 4 tokens; limit 30 - 9 = 21: two
    exchanges fit (29 > 21 with the third), so the third is dropped, the policy summarises,
    and the next segment starts as prompt + summary."""

    class Fixed:
        def __init__(self) -> None:
            self.t = 0

        def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
            return "abc\n", {}

        def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
            self.t += 1
            return "ooo\n", 0.0, self.t >= 5, False, {}

    async def write(context: list[int], max_new: int, summarize: bool) -> Written:
        tokens = engine.encode("ss\n" if summarize else "xxx\n")
        return tokens, [0.0] * len(tokens), [0] * len(tokens), "stop"

    rule = ContextRule("summarize", 30, 1.0, summary_tokens=9, max_segments=5)
    limits = EpisodeLimits(rule, max_new_tokens=4, instruction="S:")
    t = run_now(text_episode(Fixed(), engine, "abc\n", limits, write))
    first, second, *rest = t.segments()
    assert engine.decode(first.tokens) == "xxx\nooo\nxxx\nooo\nS:ss\n"  # the 3rd exchange: gone
    assert [engine.decode([x]) for x, m in zip(first.tokens, first.mask, strict=True) if m] == list(
        "xxx\nxxx\nss\n"
    )
    assert engine.decode(second.tokens).startswith("ss\nxxx\nooo\n")  # prompt + summary, then on
    assert not any(second.mask[:3])  # the carried summary trains once, in the first segment
    assert t.info["summaries"] == len(rest) + 1


def test_limits_make_an_episode_overlong(engine: EpisodeEngine) -> None:
    env = CountingEnv(turns=100, seed=0)
    limits = EpisodeLimits(ContextRule("summarize", 60, 0.95, 16, 3), 6, 1000, 1000)
    t = run_now(text_episode(env, engine, "abc\n", limits, random_writer(engine, 0, [])))
    assert t.overlong and t.info["end"] == "overlong" and len(t.segments()) == 3
    limits = EpisodeLimits(ContextRule("none", 400), 6, max_tool_calls=4, max_turns=1000)
    t = run_now(
        text_episode(CountingEnv(100, 0), engine, "abc\n", limits, random_writer(engine, 0, []))
    )
    assert t.overlong and t.info["tool_calls"] == 4


def test_a_full_window_without_summaries_ends_with_reward_zero(engine: EpisodeEngine) -> None:
    env = CountingEnv(turns=100, seed=0)
    limits = EpisodeLimits(ContextRule("none", 40), 6)
    t = run_now(text_episode(env, engine, "abc\n", limits, random_writer(engine, 0, [])))
    assert t.reward == 0.0 and t.info["end"] == "window" and not t.overlong
    assert len(t.prompt) + len(t.tokens) <= 40


def test_a_non_string_observation_raises(engine: EpisodeEngine) -> None:
    class Bad(CountingEnv):
        def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
            return 7, 0.0, False, False, {}

    limits = EpisodeLimits(ContextRule("none", 40), 6)
    env = CheckedTextEnv(Bad(3, 0), "my:Bad", None)
    with pytest.raises(TextEnvError, match=r"my:Bad.*observation is an int \(7\), not a str"):
        run_now(text_episode(env, engine, "abc\n", limits, random_writer(engine, 0, [])))
