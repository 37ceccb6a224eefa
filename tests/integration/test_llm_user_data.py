"""A user's own text task on the built-in model, as a new user would try it: a local JSONL file
of short letter-string problems (`prompt`, `answer`) and a `task.reward_fn`, no `model.path`.
The built-in tokenizer is spelled from the file's text, the warm start imitates its answers
(cached under the data's hash), GRPO trains, and the saved model works in plain transformers
with the inputs surge gave it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.conftest import metrics_so_far, run_surge  # noqa: E402

pytestmark = pytest.mark.integration
REWARD = "tests.integration.test_llm_user_data:exact"


def exact(prompt: str, completion: str, answer: str, **meta: object) -> float:
    """The task's reward: the reversed string, exactly."""
    return float(completion.strip() == answer)


def _write_problems(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(rows):
            word = "".join(rng.choice("abcdefgh") for _ in range(3))
            f.write(json.dumps({"prompt": f"{word}>", "answer": word[::-1]}) + "\n")


def test_a_jsonl_task_trains_the_built_in_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SURGE_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "reverse.jsonl"
    _write_problems(data, 400, seed=0)
    run_dir = tmp_path / "run"
    result = run_surge(
        "train", "arith-grpo", f"run_dir={run_dir}", f"task.name={data}", "task.kwargs={}",
        f"task.reward_fn={REWARD}", "rollout.max_new_tokens=4", "sft.steps=30",
        "sft.batch_size=32", "rollout.prompts_per_batch=4", "rollout.group_size=4",
        "runtime=serial", "eval.workers=0", "total_env_steps=64", "log.progress=false",
        "task.heldout=40",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warm start: 30 supervised steps" in result.stderr
    training = [r for r in metrics_so_far(run_dir) if "steps_per_s" in r]
    assert training[-1]["env_steps"] == 64 and training[-1]["policy_version"] == 4

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir / "model")
    vocabulary = set(tokenizer.get_vocab())
    assert set("abcdefgh>") <= vocabulary  # spelled from the file's text
    ids = tokenizer("abc>")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and tokenizer.unk_token_id not in ids

    # One warm start, cached; the same file's settings find it, a changed file does not.
    assert len(list((tmp_path / "cache" / "warm-start").iterdir())) == 1
    from surge.llm.sft import WarmStartSettings

    settings = WarmStartSettings(str(data), {}, reward_fn=REWARD)
    key = settings.key()
    assert key == settings.key()
    _write_problems(data, 400, seed=1)
    from surge.llm import text_sample as sampling

    sampling._text_sample.cache_clear()  # this process read the old file
    assert settings.key() != key
