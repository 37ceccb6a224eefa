"""reasoning-gym tasks by name (surge/llm/reasoning_gym_task.py), on the real package's
datasets: seeded problems, a held-out split no seed trains on, the datasets' own verifiers,
the built-in tokenizer's alphabet and positions, and clear errors."""

from __future__ import annotations

import random
import sys

import pytest

pytest.importorskip("reasoning_gym")

from surge.config.load import load_config  # noqa: E402
from surge.errors import ConfigError, UserError  # noqa: E402
from surge.llm.problems import split_of
from surge.llm.tasks import heldout_set, make_task  # noqa: E402
from surge.llm.text_sample import (  # noqa: E402
    MAX_POSITIONS,
    TEXT_SAMPLE,
    alphabet_of,
    check_warm_start,
    text_sample,
    tiny_model_positions,
)

SMALL_SUMS = {"min_terms": 2, "max_terms": 2, "max_digits": 1}  # "4 + 2 =", answers -9..18


def test_problems_are_the_questions_and_answers_and_are_seeded() -> None:
    task = make_task("reasoning-gym:chain_sum", SMALL_SUMS)
    first = task.sample("train", 40, random.Random(3))
    again = make_task("reasoning-gym:chain_sum", SMALL_SUMS).sample("train", 40, random.Random(3))
    assert [(p.prompt, p.answer) for p in first] == [(p.prompt, p.answer) for p in again]
    other = task.sample("train", 40, random.Random(4))
    assert [p.prompt for p in first] != [p.prompt for p in other]
    for p in first:
        assert p.prompt == p.meta["question"] and p.answer == p.meta["answer"]
        assert p.prompt.startswith("State the final answer") and p.prompt.endswith(" =")
        a, op, b = p.meta["metadata"]["expression"].split()
        assert int(p.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
    # The dataset's seed is fixed unless task.kwargs sets one: another gives other problems.
    reseeded = make_task("reasoning-gym:chain_sum", {**SMALL_SUMS, "seed": 7})
    assert [p.prompt for p in reseeded.sample("train", 40, random.Random(3))] != [
        p.prompt for p in first
    ]


def test_heldout_questions_never_appear_in_training() -> None:
    task = make_task("reasoning-gym:basic_arithmetic", {})
    train = {p.prompt for seed in (1, 2) for p in task.sample("train", 800, random.Random(seed))}
    heldout = heldout_set(task, 100)
    assert len(heldout) == 100
    assert all(split_of(p.prompt) == "heldout" for p in heldout)
    assert train and not train & {p.prompt for p in heldout}
    assert heldout == heldout_set(task, 100)  # the same evaluation problems in every run
    # A small space (two 1-digit terms: 200 questions, some from several entries) is split
    # whole: every question drawn for training is outside the held-out set.
    small = make_task("reasoning-gym:chain_sum", SMALL_SUMS)
    train = {p.prompt for p in small.sample("train", 3000, random.Random(0))}
    heldout = {p.prompt for p in small.sample("heldout", 300, random.Random(0))}
    assert len(train) > 150 and len(heldout) > 10 and not train & heldout


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("chain_sum", SMALL_SUMS), ("basic_arithmetic", {}), ("spell_backward", {})],
)
def test_the_reference_answer_scores_one_and_a_wrong_one_less(name: str, kwargs: dict) -> None:
    task = make_task(f"reasoning-gym:{name}", kwargs)
    problems = task.sample("train", 30, random.Random(0))
    for p in problems:
        assert task.reward(p, p.answer) == 1.0, p
        assert task.reward(p, f" {p.answer}\n") == 1.0  # the completion is stripped
        wrong = next(q.answer for q in problems if q.answer != p.answer)
        assert task.reward(p, wrong) < 1.0
        assert task.reward(p, "") == 0.0
        assert 0.0 <= task.reward(p, "no idea") < 1.0


def test_the_alphabet_covers_the_sample_and_the_tokenizer_round_trips_it() -> None:
    from surge.llm.tiny import char_tokenizer

    # leg_counting's questions span lines: newlines must be characters like any other.
    name = "reasoning-gym:leg_counting"
    task = make_task(name, {})
    sample = [task.entry(i) for i in range(TEXT_SAMPLE)]  # type: ignore[attr-defined]
    alphabet = alphabet_of(name, {})
    assert alphabet == text_sample(name, {}).alphabet
    assert alphabet is not None and "\n" in alphabet
    assert set(alphabet) == {c for p in sample for c in p.prompt + p.answer}
    tokenizer = char_tokenizer(alphabet)
    for p in sample[:50] + task.sample("heldout", 50, random.Random(0)):
        ids = tokenizer.encode(p.prompt + p.answer, add_special_tokens=False)
        assert tokenizer.unk_token_id not in ids and len(ids) == len(p.prompt + p.answer)
        assert tokenizer.decode(ids) == p.prompt + p.answer
    # A character the sample never showed is the unknown token (the documented limit).
    assert "€" not in alphabet
    ids = tokenizer.encode("5 €", add_special_tokens=False)
    assert ids[-1] == tokenizer.unk_token_id and len(ids) == 3
    # The alphabet follows task.kwargs: sums have no "*" or "/".
    default = text_sample("reasoning-gym:basic_arithmetic", {}).alphabet
    sums = text_sample("reasoning-gym:basic_arithmetic", {"operators": ["+"]}).alphabet
    assert "*" in default and "/" in default and "*" not in sums and "/" not in sums


def test_the_built_in_model_gets_positions_for_the_longer_prompts() -> None:
    sample = text_sample("reasoning-gym:chain_sum", {})
    positions = tiny_model_positions(sample, "reasoning-gym:chain_sum", 8, 64)
    assert positions % 64 == 0 and positions >= 1.25 * (sample.longest_prompt + 1) + 8
    with pytest.raises(ConfigError, match=f"at most {MAX_POSITIONS}"):
        tiny_model_positions(sample, "reasoning-gym:chain_sum", MAX_POSITIONS, 64)
    # The settings a run's setup computes it from, and the error it raises there.
    from surge.llm.setup import tiny_positions

    cfg, _ = load_config("arith-grpo", ["task.name=reasoning-gym:chain_sum", "task.kwargs={}"])
    assert tiny_positions(cfg) == tiny_model_positions(sample, "reasoning-gym:chain_sum", 4, 64)
    builtin, _ = load_config("arith-grpo", [])
    assert tiny_positions(builtin) == 64


def test_a_dataset_without_reference_answers_has_no_warm_start() -> None:
    check_warm_start(text_sample("reasoning-gym:chain_sum", SMALL_SUMS), "chain_sum")
    logic = text_sample("reasoning-gym:propositional_logic", {})
    with pytest.raises(ConfigError, match="sft.steps=0"):
        check_warm_start(logic, "reasoning-gym:propositional_logic")


def test_the_warm_start_trains_on_a_reasoning_gym_task(tmp_path) -> None:
    pytest.importorskip("transformers")
    import json

    from surge.llm.sft import WarmStartSettings, warm_start

    small = text_sample("reasoning-gym:chain_sum", SMALL_SUMS)
    positions = tiny_model_positions(small, "reasoning-gym:chain_sum", 4, 64)
    settings = WarmStartSettings(
        "reasoning-gym:chain_sum", SMALL_SUMS, hidden=64, layers=1, heads=2,
        max_length=positions, steps=4, batch_size=8,
    )  # fmt: skip
    record = json.loads((warm_start(settings, tmp_path) / "warm_start.json").read_text())
    assert record["steps"] == 4 and 0.0 <= record["heldout_accuracy"] <= 1.0
    other = WarmStartSettings(
        "reasoning-gym:chain_sum", {}, hidden=64, layers=1, heads=2, max_length=positions,
        steps=4, batch_size=8,
    )  # fmt: skip
    assert other.key() != settings.key()


def test_an_unknown_dataset_or_setting_is_a_clear_config_error() -> None:
    from surge.llm.tasks import task_of

    with pytest.raises(ValueError, match="did you mean chain_sum"):
        make_task("reasoning-gym:chain_summ", {})
    cfg, _ = load_config("arith-grpo", ["task.name=reasoning-gym:no_such_dataset"])
    with pytest.raises(ConfigError, match="reasoning-gym has no dataset 'no_such_dataset'"):
        task_of(cfg)
    cfg, _ = load_config("arith-grpo", ["task.name=reasoning-gym:chain_sum"])  # digits: 2
    with pytest.raises(ConfigError, match="chain_sum takes no digits"):
        task_of(cfg)
    cfg, _ = load_config(
        "arith-grpo", ["task.name=reasoning-gym:chain_sum", "task.kwargs={min_terms: 0}"]
    )
    with pytest.raises(ConfigError, match="min_terms must be positive"):
        task_of(cfg)


def test_without_the_package_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from surge.llm.tasks import task_of

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` fails
    with pytest.raises(UserError, match=r"pip install -e '\.\[reasoning-gym\]'") as caught:
        make_task("reasoning-gym:chain_sum", {})
    assert "task.name='reasoning-gym:chain_sum' needs the reasoning-gym package" in str(
        caught.value
    )
    # A run stops there, before creating anything (the CLI prints it and exits 2).
    cfg, _ = load_config("arith-grpo", ["task.name=reasoning-gym:chain_sum", "task.kwargs={}"])
    with pytest.raises(UserError, match="reasoning-gym extra"):
        task_of(cfg)
