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
    with pytest.raises(ConfigError, match=r"int observation, not a str"):
        setup.shapes_and_size(cfg, None)


def test_an_expert_episode_is_seeded() -> None:
    task = task_of(_cfg("recall-supo"))
    engine = EpisodeEngine(char_tokenizer(task.alphabet))
    a = task.expert_episode(engine, 5, np.random.default_rng(0))
    b = task.expert_episode(engine, 5, np.random.default_rng(0))
    assert a.tokens == b.tokens and [s.tokens for s in a.later] == [s.tokens for s in b.later]
