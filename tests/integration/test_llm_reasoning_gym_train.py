"""`surge train` on a reasoning-gym dataset by name: the built-in model's tokenizer and
positions come from the dataset's text, a short warm start trains on its answers, and RL runs a
few versions with the dataset's own verifier."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("reasoning_gym")

from tests.conftest import metrics_so_far, run_surge  # noqa: E402

pytestmark = pytest.mark.integration


def test_surge_trains_on_a_reasoning_gym_dataset(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SURGE_CACHE", str(tmp_path / "cache"))  # a fresh warm start
    result = run_surge(
        "train", "arith-grpo", f"run_dir={run_dir}", "runtime=serial",
        "task.name=reasoning-gym:chain_sum",
        "task.kwargs={min_terms: 2, max_terms: 2, max_digits: 1}",
        "tiny_model.hidden=64", "tiny_model.layers=1", "tiny_model.heads=2",
        "sft.steps=10", "sft.batch_size=16", "sft.target_accuracy=0",
        "rollout.prompts_per_batch=4", "rollout.group_size=4", "rollout.max_new_tokens=4",
        "total_env_steps=96", "task.heldout=20", "eval.every_versions=3", "eval.nice=0",
        "log.interval_s=0", "log.progress=false",
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warm start: 10 supervised steps on reasoning-gym:chain_sum" in result.stderr
    rows = metrics_so_far(run_dir)
    training = [r for r in rows if "steps_per_s" in r]
    assert training[-1]["policy_version"] == 6 and training[-1]["env_steps"] == 96
    assert all(0.0 <= r["reward_mean"] <= 1.0 for r in training)
    evals = [r for r in rows if "eval/accuracy" in r]
    assert evals and evals[0]["eval/policy_version"] == 0
    # The run's model directory holds the dataset's tokenizer: its questions round-trip.
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir / "model")
    question = "State the final answer to the following arithmetic problem: 4 - 9 ="
    ids = tokenizer.encode(question, add_special_tokens=False)
    assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids) == question
    assert AutoConfig.from_pretrained(run_dir / "model").max_position_embeddings == 128
