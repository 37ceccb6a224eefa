"""A multi-turn task from the setup's side: a user's text env class as `task.name`, its
shapes (segments of the window), the warm start's expert transcripts, and the errors that
name the setting at fault."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from surge.config.load import load_config  # noqa: E402
from surge.errors import ConfigError  # noqa: E402
from surge.llm import setup  # noqa: E402
from surge.llm.env_checks import TextEnvError  # noqa: E402
from surge.llm.episodes import EpisodeEngine  # noqa: E402
from surge.llm.sft import transcript_batch  # noqa: E402
from surge.llm.tasks import task_of  # noqa: E402
from surge.llm.textenv import TextEnvTask  # noqa: E402
from surge.llm.tiny import char_tokenizer  # noqa: E402


class NumberObservations:
    """A text env whose step returns an int: a user's mistake the setup must name."""

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        return "go\n", {}

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return 7, 0.0, True, False, {}


def _cfg(preset: str, *overrides: str) -> Any:
    cfg, _ = load_config(preset, list(overrides))
    return cfg


def test_a_users_env_class_is_a_multi_turn_task() -> None:
    cfg = _cfg("guess-grpo", "task.name=examples.llm_text_env:Lookup", "rollout.max_new_tokens=4")
    task = task_of(cfg)
    assert isinstance(task, TextEnvTask) and task.has_expert and task.limits.max_new_tokens == 4
    train = task.sample("train", 50, random.Random(0))
    heldout = task.sample("heldout", 50, random.Random(0))
    assert not {p.meta["seed"] for p in train} & {p.meta["seed"] for p in heldout}
    env, n_params = setup.shapes_and_size(cfg, None)
    assert env.action_space.shape == (1, 64) and n_params > 0  # mode none: one segment


def test_summarize_gives_segments_and_expert_transcripts_train_only_the_experts_tokens() -> None:
    cfg = _cfg("recall-supo")
    task = task_of(cfg)
    env, _ = setup.shapes_and_size(cfg, None)
    assert env.action_space.shape == (7, 96)  # max_summaries 6: 7 segments of the window
    tokenizer = char_tokenizer(task.alphabet)
    problems = task.sample("train", 4, random.Random(1))
    tokens, mask = transcript_batch(tokenizer, task, problems, seed=3)
    # 3 summaries (lazy) or 4 (full) each: a segment more, and the turns the summaries
    # dropped, in their contexts
    assert tokens.shape[0] in {4 * (4 + 3) + k for k in range(0, 9, 2)}
    engine = EpisodeEngine(tokenizer)
    for row, trained in zip(tokens, mask, strict=True):
        targets = "".join(
            engine.decode([t]) for t, m in zip(row[1:].tolist(), trained, strict=True) if m
        )
        # what trains is the expert's: fetches (g3), summaries (A=3B=?.. g4), the answer (=7),
        # never an observation's lowercase filler
        assert targets and set(targets) <= set("g0123456789\n=ABCDEFGHIJKLMNOPQRSTUVWXYZ? ")
        assert targets.endswith("\n")


def test_a_window_larger_than_the_model_is_an_error(tmp_path: Path) -> None:
    from surge.llm.model import save_model_dir
    from surge.llm.tiny import RECALL_ALPHABET, tiny_llama

    tokenizer = char_tokenizer(RECALL_ALPHABET)
    save_model_dir(tiny_llama(len(tokenizer), 64, 1, 2, max_length=64), tokenizer, tmp_path)
    cfg = _cfg("recall-supo", f"model.path={tmp_path}")
    with pytest.raises(ConfigError, match=r"context.window=96: the model has 64 positions"):
        setup.shapes_and_size(cfg, tmp_path)


def test_a_prompt_reserve_and_exchange_over_the_limit_is_an_error() -> None:
    cfg = _cfg("recall-supo", "context.window=48")
    with pytest.raises(ConfigError, match=r"context.summary_tokens=28 = 17"):
        setup.shapes_and_size(cfg, None)


def test_context_settings_on_a_single_turn_task_are_an_error() -> None:
    cfg = _cfg("arith-grpo", "context.mode=summarize")
    with pytest.raises(ConfigError, match=r"context.mode='summarize'.*single-turn"):
        setup.check_context(cfg, task_of(cfg))
    setup.check_context(_cfg("arith-grpo"), task_of(_cfg("arith-grpo")))  # defaults: fine


def test_an_env_with_non_string_observations_is_an_error() -> None:
    name = f"{__name__}:NumberObservations"
    cfg = _cfg("guess-grpo", f"task.name={name}", "sft.steps=0")
    with pytest.raises(TextEnvError, match=r"observation is an int \(7\), not a str"):
        setup.shapes_and_size(cfg, None)


def test_an_expert_episode_is_seeded() -> None:
    task = task_of(_cfg("recall-supo"))
    engine = EpisodeEngine(char_tokenizer(task.alphabet))
    a = task.expert_episode(engine, 5, np.random.default_rng(0))
    b = task.expert_episode(engine, 5, np.random.default_rng(0))
    assert a.tokens == b.tokens and [s.tokens for s in a.later] == [s.tokens for s in b.later]


def test_truncation_restarts_until_the_turn_limit_not_a_summary_budget() -> None:
    """A policy that fetches every fact twice truncates about 9 times: with no summary
    budget in truncate mode it still reaches the question, and the rows hold
    `rollout.max_turns` + 1 segments (each segment holds at least one turn)."""
    from surge.llm.textenv import run_now
    from surge.llm.turn_loop import text_episode

    cfg = _cfg("recall-truncate")
    task = task_of(cfg)
    env_info, _ = setup.shapes_and_size(cfg, None)
    assert env_info.action_space.shape == (cfg.rollout.max_turns + 1, 96)
    engine = EpisodeEngine(char_tokenizer(task.alphabet))
    env = task.make_env()
    prompt, _ = env.reset(3)
    fetches = [f"g{i}\n" for i in range(12) for _ in range(2)]

    async def twice(context: list[int], max_new: int, summarize: bool) -> Any:
        text = fetches.pop(0) if fetches else "0=0\n"
        tokens = engine.encode(text)
        return tokens, [0.0] * len(tokens), [0] * len(tokens), "stop"

    episode = run_now(text_episode(env, engine, prompt, task.limits, twice))
    assert episode.info["end"] == "done" and not episode.overlong
    assert len(episode.segments()) > cfg.context.max_summaries + 1 + 2
    assert episode.info["context_max"] <= 96


@pytest.mark.parametrize("setting", ["context.max_summaries=6", "context.summary_tokens=28"])
def test_summary_settings_outside_summarize_are_an_error(setting: str) -> None:
    cfg = _cfg("recall-truncate", setting)
    key = setting.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}=.*context.mode=summarize, not 'truncate'"):
        setup.check_context(cfg, task_of(cfg))
    setup.check_context(_cfg("recall-truncate"), task_of(_cfg("recall-truncate")))


def _answering(engine: EpisodeEngine, env: Any, right: bool, calls: list[str]) -> Any:
    """A stand-in for the model's deciding turn: recall's answer, right or one digit off."""

    def decide(context: list[int], max_new: int, summarize: bool) -> Any:
        calls.append(engine.decode(context))
        digit = (int(env.digits[env.asked]) + (0 if right else 1)) % 10
        tokens = engine.encode(f"{env.asked}={digit}\n")
        return tokens, [0.0] * len(tokens), [0] * len(tokens), "stop"

    return decide


def test_expert_led_episodes_hand_the_model_only_the_deciding_action() -> None:
    """The expert at its best (full summaries) leads; the model writes the answer alone, once,
    with the question in its context: right answers win every episode, wrong ones none."""
    task = task_of(_cfg("recall-supo"))
    engine = EpisodeEngine(char_tokenizer(task.alphabet))
    for right in (True, False):
        for seed in range(10):
            env = task.make_env()
            env.reset(seed)
            calls: list[str] = []
            decide = _answering(engine, env, right, calls)
            episode = task.expert_led_episode(engine, seed, np.random.default_rng(seed), decide)
            assert episode.reward == float(right) and len(calls) == 1
            assert calls[0].rstrip("\n").endswith(f"?{env.asked}")
            # full summaries: every summary states the askable facts fetched so far
            assert episode.info["summaries"] >= 3 and episode.info["summary_kept"] == 1.0


def test_a_truncated_episode_trains_each_action_in_the_context_it_was_written_in() -> None:
    """The action whose exchange crosses the limit was written after the full context: it
    trains there (the end of the old segment) and is context only in the new one, so each
    action trains once, in the context its behaviour log-prob came from."""
    task = task_of(_cfg("recall-truncate"))
    engine = EpisodeEngine(char_tokenizer(task.alphabet))
    episode = task.expert_episode(engine, 5, np.random.default_rng(0))
    segments = episode.segments()
    assert len(segments) >= 3
    actions: list[str] = []
    for before, after in zip(segments, segments[1:], strict=False):
        text = engine.decode(before.tokens)
        last = text.rstrip("\n").split("\n")[-1] + "\n"  # the crossing action, e.g. "g6\n"
        assert last.startswith("g") and before.mask[-len(last) :] == [True] * len(last)
        position = engine.decode(after.tokens).index(last + "=")  # its exchange, carried
        assert not any(after.mask[position : position + len(last)])
    for s in segments:
        actions += [engine.decode([t]) for t, m in zip(s.tokens, s.mask, strict=True) if m]
    trained = "".join(actions).split("\n")[:-1]
    assert trained[:12] == [f"g{i}" for i in range(12)]  # every fetch once, in order
