"""`surge report`: final scores read from fake run directories, grouping, the rliable
statistics on scores whose IQM, median and mean are known, the written files, each user
error, and the command itself."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from surge.cli import main
from surge.config.load import DEFAULT_PRESET
from surge.errors import UserError
from surge.tracking.report import (
    ESTIMATE_NAMES,
    aggregate,
    build_report,
    final_score,
    format_table,
    group_runs,
    normalize,
    parse_run_args,
    table_rows,
    write_report,
)

needs_rliable = pytest.mark.skipif(
    importlib.util.find_spec("rliable") is None,
    reason="needs rliable: pip install -e '.[report]'",
)
REPS = 200  # bootstrap resamples: enough to check intervals, fast enough for a unit test
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fake_run(
    root: Path,
    name: str,
    returns: list[float | None],
    config: dict[str, Any] | None = None,
    argv: list[str] | None = None,
) -> Path:
    """A run directory as `surge train` leaves it: config.yaml, versions.json, and a
    metrics.jsonl whose training rows log `returns`, after an evaluation row."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    full_config = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"lr": 0.001}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**full_config, **(config or {})}))
    argv = argv or ["surge", "train", "cartpole-ppo", "seed=1"]
    (run_dir / "versions.json").write_text(json.dumps({"argv": argv}))
    rows: list[dict[str, Any]] = [{"env_steps": 0, "eval/policy_version": 0, "eval/return_mean": 9}]
    rows += [
        {"env_steps": 100 * (i + 1), "episode_return_mean": value, "steps_per_s": 1000.0}
        for i, value in enumerate(returns)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def runs_scoring(root: Path, scores: list[float], algo: str = "ppo") -> list[str]:
    """One fake run per score, each ending on that score."""
    return [
        str(fake_run(root, f"{algo}-{i}", [0.0, score], {"algo": algo}))
        for i, score in enumerate(scores)
    ]


def test_run_arguments_take_an_optional_label(tmp_path: Path) -> None:
    literal = tmp_path / "lr=0.1"  # a directory whose name holds '=' is not a label
    literal.mkdir()
    assert parse_run_args(["runs/a", "fast=runs/b", str(literal)]) == [
        (None, Path("runs/a")),
        ("fast", Path("runs/b")),
        (None, literal),
    ]


def test_final_score_is_the_last_logged_value_skipping_nulls(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "r", [10.0, 20.0, None])
    assert final_score(run, "episode_return_mean") == 20.0
    assert final_score(run, "eval/return_mean") == 9.0


def test_final_score_from_eval_json(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "r", [10.0])
    (run / "eval.json").write_text(json.dumps({"return_mean": 321.5, "accuracy": 0.25}))
    assert final_score(run, "eval.json") == 321.5
    assert final_score(run, "eval.json:accuracy") == 0.25
    with pytest.raises(UserError, match="no value of 'eval.json:pass@8'"):
        final_score(run, "eval.json:pass@8")


def test_a_missing_eval_json_says_how_to_write_it(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "r", [10.0])
    with pytest.raises(UserError, match="has no eval.json") as error:
        final_score(run, "eval.json")
    assert "surge eval" in error.value.fix


def test_a_missing_metric_names_the_run_keys_closest_first(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "r", [10.0])
    with pytest.raises(UserError, match="no value of 'eval/return_man'") as error:
        final_score(run, "eval/return_man")
    keys = error.value.fix.split(": ", 1)[1].split(", ")
    assert keys[0] == "eval/return_mean"
    assert set(keys) == {"env_steps", "eval/policy_version", "eval/return_mean"} | {
        "episode_return_mean",
        "steps_per_s",
    }


def test_a_directory_without_config_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a surge run directory"):
        group_runs([str(tmp_path / "empty")], "algo")


def test_runs_group_by_algo_config_key_preset_or_label(tmp_path: Path) -> None:
    a = fake_run(tmp_path, "a", [1.0], {"algo": "appo"}, ["surge", "train", "seed=1"])
    b = fake_run(tmp_path, "b", [1.0], {"algo": "ppo"}, ["x/surge", "train", "cfg/mine.yaml"])
    c = fake_run(tmp_path, "c", [1.0], {"algo": "appo", "ppo": {"lr": 0.01}})
    items = [str(a), str(b), str(c)]
    assert group_runs(items, "algo") == {"appo": [a, c], "ppo": [b]}
    assert group_runs(items, "ppo.lr") == {"ppo.lr=0.001": [a, b], "ppo.lr=0.01": [c]}
    assert group_runs(items, "preset") == {DEFAULT_PRESET: [a], "mine": [b], "cartpole-ppo": [c]}
    assert group_runs([f"mine={a}", str(b)], "algo") == {"mine": [a], "ppo": [b]}
    with pytest.raises(UserError, match="no key 'ppo.gama'"):
        group_runs(items, "ppo.gama")


def test_normalize_maps_the_range_onto_zero_to_one() -> None:
    import numpy as np

    assert normalize(np.array([0.0, 250.0, 750.0]), (0.0, 500.0)).tolist() == [0, 0.5, 1.5]
    with pytest.raises(UserError, match="maximum must exceed the minimum"):
        normalize(np.array([1.0]), (5.0, 5.0))


@needs_rliable
def test_iqm_median_and_mean_of_known_scores(tmp_path: Path) -> None:
    import numpy as np
    from rliable import metrics

    # Sorted, the middle half is 2, 3, 4, 10: IQM 4.75; the median is (3 + 4) / 2; the
    # outlier 1000 drags the mean to 1031 / 8.
    scores = [1000.0, 0.0, 11.0, 1.0, 2.0, 10.0, 3.0, 4.0]
    report = build_report(runs_scoring(tmp_path, scores), reps=REPS)
    [group] = report.groups
    assert group.label == "ppo" and group.final_scores == scores
    found = {name: group.estimates[name] for name in ESTIMATE_NAMES}
    assert found["IQM"] is not None and found["IQM"].value == pytest.approx(4.75)
    assert found["IQM"].value == pytest.approx(metrics.aggregate_iqm(np.array(scores)[:, None]))
    assert found["median"] is not None and found["median"].value == pytest.approx(3.5)
    assert found["mean"] is not None and found["mean"].value == pytest.approx(128.875)
    assert found["optimality gap"] is None  # raw returns: no gap without --min/--max


@needs_rliable
def test_confidence_intervals_bracket_the_estimates(tmp_path: Path) -> None:
    items = runs_scoring(tmp_path, [100.0, 400.0, 250.0, 500.0, 300.0])
    report = build_report(items, score_range=(0.0, 500.0), reps=REPS)
    for estimate in report.groups[0].estimates.values():
        assert estimate is not None and estimate.ci_low is not None and estimate.ci_high
        assert estimate.ci_low <= estimate.value <= estimate.ci_high
        assert estimate.ci_low < estimate.ci_high  # five different scores: a real interval
    gap = report.groups[0].estimates["optimality gap"]
    assert gap is not None and gap.value == pytest.approx(1 - (0.2 + 0.8 + 0.5 + 1 + 0.6) / 5)


@needs_rliable
def test_the_bootstrap_repeats_whatever_numpy_global_rng_holds(tmp_path: Path) -> None:
    import numpy as np

    items = runs_scoring(tmp_path, [100.0, 400.0, 250.0, 500.0, 300.0])
    np.random.seed(1)
    first = build_report(items, reps=REPS)
    caller_draw = np.random.rand()  # the caller's RNG went on as if nothing had drawn from it
    np.random.seed(1)
    assert np.random.rand() == caller_draw
    np.random.seed(2)
    assert build_report(items, reps=REPS) == first


@needs_rliable
def test_a_single_run_gets_point_estimates_without_interval(tmp_path: Path) -> None:
    items = runs_scoring(tmp_path, [10.0, 30.0]) + runs_scoring(tmp_path, [50.0], "appo")
    report = build_report(items, reps=REPS)
    single = report.groups[1].estimates["IQM"]
    assert single is not None and single.value == 50.0 and single.ci_low is None
    assert any(note.startswith("appo: 1 run, no confidence interval") for note in report.notes)
    assert table_rows(report)[2] == ["appo", "1", "50.0", "50.0", "50.0", "-"]
    assert "note: appo: 1 run" in format_table(report)


@needs_rliable
def test_report_files_are_written_and_the_plots_are_pngs(tmp_path: Path) -> None:
    from matplotlib.image import imread

    items = runs_scoring(tmp_path, [100.0, 400.0, 250.0]) + runs_scoring(
        tmp_path, [450.0, 500.0], "appo"
    )
    report = build_report(items, score_range=(0.0, 500.0), reps=REPS)
    out = tmp_path / "out"
    paths = write_report(report, out)
    names = {"report.json", "report.md", "performance_profile.png", "interval_estimates.png"}
    assert {p.name for p in paths} == names and all(p.parent == out for p in paths)
    for png in (out / "performance_profile.png", out / "interval_estimates.png"):
        assert png.read_bytes().startswith(PNG_SIGNATURE)
        assert imread(png).shape[0] > 100  # decodes, and is a real figure
    written = json.loads((out / "report.json").read_text())
    assert [g["label"] for g in written["groups"]] == ["ppo", "appo"]
    assert written["groups"][1]["scores"] == [0.9, 1.0]
    assert written["groups"][0]["estimates"]["IQM"]["value"] == pytest.approx(0.5)
    assert "| appo | 2 |" in (out / "report.md").read_text()


def test_without_rliable_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    monkeypatch.setitem(sys.modules, "rliable", None)  # what `import rliable` meets uninstalled
    with pytest.raises(UserError, match="needs the rliable library") as error:
        aggregate({"ppo": np.array([1.0, 2.0])}, normalized=False, reps=REPS)
    assert "pip install -e '.[report]'" in error.value.fix


@needs_rliable
def test_the_command_prints_the_table_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = runs_scoring(tmp_path, [100.0, 400.0, 250.0])
    out = tmp_path / "out"
    args = ["report", *items, "--min", "0", "--max", "500", "--reps", str(REPS), "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("final episode_return_mean normalized from [0, 500]")
    assert "group  runs  IQM" in printed and f"wrote {out / 'report.json'}" in printed
    assert (out / "report.md").is_file()


def test_the_command_exits_2_on_user_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert "is not a surge run directory (no config.yaml)" in capsys.readouterr().err
    run = fake_run(tmp_path, "r", [1.0])
    assert main(["report", str(run), "--min", "0"]) == 2
    assert "--min and --max go together" in capsys.readouterr().err
    assert main(["report", str(run), "--reps", "0"]) == 2
    assert "the bootstrap needs at least 1 resample" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
