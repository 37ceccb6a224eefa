"""The supervised warm start (surge/llm/sft.py): the training examples, a short run that
learns, and the cache that a second run reuses."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from surge.config.llm_schema import SFTConfig  # noqa: E402
from surge.llm.sft import (  # noqa: E402
    KEY_DEFAULTS,
    WarmStartSettings,
    example_batch,
    train_sft,
    warm_start,
)
from surge.llm.tasks import Arithmetic  # noqa: E402
from surge.llm.tiny import ARITHMETIC_ALPHABET, char_tokenizer, tiny_llama  # noqa: E402


def test_examples_train_the_answer_and_the_end_token_only() -> None:
    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    tokens, mask = example_batch(tok, [("1+2=", "3"), ("12+34=", "46")])
    ids = {c: tok.convert_tokens_to_ids(c) for c in "0123456789+="}
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    first = [bos, ids["1"], ids["+"], ids["2"], ids["="], ids["3"], eos, pad, pad, pad]
    assert tokens[0].tolist() == first
    # Position t predicts token t + 1: "=" (position 4) predicts "3", "3" predicts <eos>.
    assert mask[0].tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0]
    assert mask[1].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_the_aggregation_reaches_the_loss_and_only_a_new_one_changes_the_cache_key() -> None:
    from surge.config.load import load_config
    from surge.llm.tasks import task_of

    cfg, _ = load_config("recall-supo", [])
    task = task_of(cfg)  # summaries: segments of unequal numbers of trained tokens
    tok = char_tokenizer(task.alphabet)  # type: ignore[attr-defined]
    first = {}
    for mode in ("token-mean", "seq-mean-token-mean"):
        model = tiny_llama(len(tok), hidden=64, layers=1, heads=2, max_length=256, seed=0)
        first[mode] = train_sft(model, tok, task, 1, 4, 1e-3, 0, aggregation=mode).losses[0]
    # the same batch and model: only the reduction of the token losses differs
    assert abs(first["token-mean"] - first["seq-mean-token-mean"]) > 1e-3
    # arith-grpo's warm start keeps the key it had before the setting existed (its cache
    # entry stays valid); another aggregation trains anew
    arith = WarmStartSettings(
        "arithmetic", task_kwargs={"digits": 2}, steps=600, target_accuracy=0.3, max_length=64
    )
    assert arith.key() == "275c38ea112e1265ec67"
    assert replace(arith, aggregation="seq-mean-token-mean").key() != arith.key()


def test_a_short_warm_start_lowers_the_loss() -> None:
    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    model = tiny_llama(len(tok), hidden=64, layers=2, heads=2, seed=0)
    losses = train_sft(model, tok, Arithmetic(2), steps=30, batch_size=32, lr=3e-3, seed=0).losses
    assert len(losses) == 30
    assert sum(losses[-5:]) < 0.75 * sum(losses[:5])  # from ln(16) = 2.8 towards 0


def test_the_cache_is_reused_and_loads_with_plain_transformers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = WarmStartSettings(
        "arithmetic", {"digits": 1}, hidden=64, layers=1, heads=2, steps=5, batch_size=8
    )
    first = warm_start(settings, tmp_path)
    record = json.loads((first / "warm_start.json").read_text())
    assert record["steps"] == 5 and 0.0 <= record["heldout_accuracy"] <= 1.0
    started = time.monotonic()
    assert warm_start(settings, tmp_path) == first  # from the cache: no training
    assert time.monotonic() - started < 1.0
    model = AutoModelForCausalLM.from_pretrained(first)
    tok = AutoTokenizer.from_pretrained(first)
    assert tok.decode(tok.encode("12+3=", add_special_tokens=False)) == "12+3="
    assert model(torch.tensor([[tok.bos_token_id]])).logits.shape[-1] == len(tok)
    # Any setting that changes the result is a different entry.
    other = WarmStartSettings(
        "arithmetic", {"digits": 1}, hidden=64, layers=1, heads=2, steps=6, batch_size=8
    )
    assert other.key() != settings.key()
    # So is the thread count (float sums in another order); the default keeps the key that
    # entries written before it was part of the key have.
    threads = [replace(settings, threads=n) for n in (1, 2)]
    assert threads[0].key() != settings.key() and threads[1].key() == settings.key()
    # The config's defaults are the ones left out of the key, so default runs find them.
    config = SFTConfig()
    assert (config.threads, config.aggregation) == (
        KEY_DEFAULTS["threads"],
        KEY_DEFAULTS["aggregation"],
    )


def test_the_target_accuracy_stops_the_warm_start_early() -> None:
    from surge.llm.evaluate import greedy_accuracy
    from surge.llm.sft import CHECK_EVERY

    tok = char_tokenizer(ARITHMETIC_ALPHABET)
    model = tiny_llama(len(tok), hidden=64, layers=2, heads=2, seed=0)
    task = Arithmetic(1)
    losses = train_sft(model, tok, task, 300, 64, 3e-3, 0, target_accuracy=0.2).losses
    assert len(losses) < 300 and len(losses) % CHECK_EVERY == 0
    import random

    check = task.sample("train", 256, random.Random(1))  # the sample train_sft checks (seed + 1)
    assert greedy_accuracy(model, tok, task, check) >= 0.2


def test_a_text_env_with_a_deciding_action_checks_the_expert_led_accuracy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """recall marks its answer as deciding: the warm start's target check is the model's
    answer after the expert's full summaries, not its own greedy episodes."""
    import random

    from surge.config.load import load_config
    from surge.llm import sft
    from surge.llm.tasks import task_of

    cfg, _ = load_config("recall-supo", [])
    task = task_of(cfg)
    assert task.has_deciding
    tok = char_tokenizer(task.alphabet)
    model = tiny_llama(len(tok), hidden=32, layers=1, heads=1, max_length=96, seed=0)
    led: list[float] = []
    real = sft.expert_led_accuracy

    def recorded(*args: object, **kwargs: object) -> float:
        led.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return led[-1]

    monkeypatch.setattr(sft, "expert_led_accuracy", recorded)
    monkeypatch.setattr(sft, "CHECK_EVERY_LED", 2)
    monkeypatch.setattr(sft, "CHECK_PROBLEMS", 8)
    checks: list[tuple[int, float]] = []
    progress = train_sft(
        model, tok, task, 5, 2, 1e-3, 0, target_accuracy=0.99,
        on_check=lambda step, accuracy: checks.append((step, accuracy)),
    )  # fmt: skip
    assert progress.step == len(progress.losses) == 5
    assert progress.checks == [(s, round(a, 4)) for s, a in checks] and [s for s, _ in checks] == [
        2,
        4,
    ]
    assert [a for _, a in checks] == led and all(0 <= a <= 1 for a in led)
    check = task.sample("train", 8, random.Random(1))
    assert real(model, tok, task, check) == real(model, tok, task, check)  # greedy: stable


def test_a_stopped_warm_start_resumes_to_the_same_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after its last save, a warm start resumes there: the weights, optimizer and
    problem sampler continue as if it had never stopped (recall: transcripts, target checks)."""
    from surge.config.load import load_config
    from surge.llm import sft
    from surge.llm.tasks import task_of

    cfg, _ = load_config("recall-supo", [])
    task = task_of(cfg)
    tok = char_tokenizer(task.alphabet)  # type: ignore[attr-defined]
    monkeypatch.setattr(sft, "CHECK_EVERY_LED", 2)
    monkeypatch.setattr(sft, "CHECK_PROBLEMS", 4)
    monkeypatch.setattr(sft, "CHECKPOINT_EVERY", 3)

    def model() -> torch.nn.Module:
        return tiny_llama(len(tok), hidden=32, layers=1, heads=1, max_length=96, seed=0)

    def train(m: torch.nn.Module, steps: int, checkpoint: Path | None) -> sft.SFTProgress:
        return train_sft(m, tok, task, steps, 2, 3e-3, 0, 0.99, checkpoint=checkpoint)

    straight = model()
    whole = train(straight, 8, None)
    checkpoint = tmp_path / "progress.pt"
    first = train(model(), 7, checkpoint)  # stopped at step 7: saved at step 6
    assert first.step == 7 and checkpoint.is_file()
    resumed = model()
    rest = train(resumed, 8, checkpoint)
    assert rest.step == 8 and rest.losses == whole.losses and rest.checks == whole.checks
    assert [c for c, _ in whole.checks] == [2, 4, 6]
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    # without the file it starts over: another first step than a resumed one
    again = train(model(), 1, tmp_path / "absent.pt")
    assert again.losses == whole.losses[:1]


def test_the_warm_start_resumes_its_saved_progress_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from surge.llm import sft

    monkeypatch.setattr(sft, "CHECKPOINT_EVERY", 2)
    settings = WarmStartSettings(
        "arithmetic", {"digits": 1}, hidden=64, layers=1, heads=2, steps=5, batch_size=8
    )
    straight = warm_start(settings, tmp_path / "straight")
    assert not list((tmp_path / "straight" / "warm-start").glob(".*"))  # no progress left
    # A warm start stopped at step 3 (its progress saved at step 2), then run again.
    root = tmp_path / "stopped"
    checkpoint = root / "warm-start" / f".{settings.key()}.progress.pt"
    tok = char_tokenizer(settings.alphabet())
    model = tiny_llama(len(tok), 64, 1, 2, 64, settings.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)  # as warm_start trains: the sums' order
    try:
        train_sft(
            model, tok, Arithmetic(1), 3, 8, settings.lr, settings.seed, checkpoint=checkpoint
        )
    finally:
        torch.set_num_threads(threads)
    lines: list[str] = []
    batches: list[int] = []
    real = sft.example_batch

    def counted(*args: Any) -> Any:
        batches.append(1)
        return real(*args)

    monkeypatch.setattr(sft, "example_batch", counted)
    resumed = warm_start(settings, root, lines.append)
    assert len(batches) == 3  # steps 2, 3 and 4: on from the save
    assert any("resuming" in line for line in lines) and not checkpoint.exists()
    assert json.loads((resumed / "warm_start.json").read_text())["steps"] == 5
    from transformers import AutoModelForCausalLM

    a, b = (AutoModelForCausalLM.from_pretrained(d).state_dict() for d in (straight, resumed))
    assert all(torch.equal(a[name], b[name]) for name in a)
