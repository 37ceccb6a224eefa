"""A user's text env that fails mid-run stops the run with a message that names the env and
the fix, after the trainer saved its checkpoint: exit 2, never a trainer traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_surge

pytest.importorskip("transformers")
pytestmark = pytest.mark.integration

FAULTS = "tests.integration.text_env_faults"
SMALL = [
    "task.kwargs={}",
    "eval.workers=0",
    "tiny_model.hidden=32",
    "tiny_model.layers=1",
    "tiny_model.heads=1",
    "rollout.prompts_per_batch=2",
    "rollout.group_size=2",
    "log.progress=false",
]


@pytest.mark.parametrize("runtime", ["local", "serial"])
def test_an_env_raising_in_generation_stops_the_run_with_its_message_and_a_checkpoint(
    tmp_path: Path, runtime: str
) -> None:
    run_dir = tmp_path / "run"
    result = run_surge(
        "train", "guess-grpo", f"task.name={FAULTS}:RaisesOnPolicyText", "sft.steps=0",
        f"runtime={runtime}", f"run_dir={run_dir}", *SMALL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    err = result.stderr
    assert "Traceback" not in err
    assert f"task.name='{FAULTS}:RaisesOnPolicyText': step(" in err
    assert (
        "raised KeyError" in err and "text_env_faults.py:" in err and "(met by generator-0)" in err
    )
    assert "how to fix: make step(action) return" in err
    assert f"`surge resume {run_dir}` continues" in err
    assert list((run_dir / "checkpoints").glob("ckpt-*.safetensors")), "no checkpoint kept"


def test_an_expert_returning_a_non_string_stops_the_warm_start(tmp_path: Path) -> None:
    result = run_surge(
        "train", "guess-grpo", f"task.name={FAULTS}:ExpertWritesNumbers", "sft.steps=5",
        f"run_dir={tmp_path / 'run'}", *SMALL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "expert(summarize=False)'s text is an int (3), not a str" in result.stderr
    assert not (tmp_path / "run").exists()  # a run that never started leaves nothing
