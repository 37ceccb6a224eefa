"""`surge report`: compare algorithms (or any grouping of runs) over several seeds.

Each run contributes one number, its final score, and the runs of a group are aggregated
with the statistics of Agarwal et al. 2021 ("Deep RL at the edge of the statistical
precipice"), computed by their `rliable` library: interquartile mean (IQM), median, mean
and optimality gap, each with a 95% stratified-bootstrap confidence interval, and the
performance profile (the fraction of runs scoring above each threshold). Over a handful of
seeds a mean is swayed by one lucky or failed run and a median ignores most runs; the IQM is
the robust middle, and the interval says how far new seeds could move it.

Reading scores and grouping runs are plain functions of the run directories' files; the
statistics go through rliable (the optional `report` extra, imported when needed) and
`write_plots` draws the figures. A report is one task: all its runs should play one env.
"""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from surge.errors import UserError
from surge.tracking.metrics import read_metrics

DEFAULT_METRIC = "episode_return_mean"
EVAL_FILE = "eval.json"  # `--metric eval.json[:FIELD]`: `surge eval`'s result, return_mean
ESTIMATE_NAMES = ("IQM", "median", "mean", "optimality gap")
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0  # the same runs give the same intervals, report after report
INSTALL_FIX = "install the report extra: pip install -e '.[report]'"


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its bootstrap confidence interval (None: a single run)."""

    value: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class GroupResult:
    """One group's runs, their final scores as logged and as aggregated (normalized when the
    report has a score range), and the estimates (None: optimality gap without a range)."""

    label: str
    run_dirs: list[str]
    final_scores: list[float]
    scores: list[float]
    estimates: dict[str, Estimate | None]


@dataclass(frozen=True)
class Report:
    """Everything `surge report` prints and writes."""

    metric: str
    score_range: tuple[float, float] | None
    reps: int
    groups: list[GroupResult]
    notes: list[str]


def parse_run_args(items: list[str]) -> list[tuple[str | None, Path]]:
    """`RUN_DIR` or `LABEL=RUN_DIR` arguments as (explicit label or None, run directory)."""
    parsed: list[tuple[str | None, Path]] = []
    for item in items:
        label, sep, path = item.partition("=")
        if sep and label and not Path(item).is_dir():  # a directory named `a=b` stays whole
            parsed.append((label, Path(path)))
        else:
            parsed.append((None, Path(item)))
    return parsed


def run_config(run_dir: Path) -> dict[str, Any]:
    """A run's config.yaml as a plain mapping (not validated, so that runs written by older
    surge versions still group by the keys they have)."""
    from surge.config.load import read_yaml

    if not (run_dir / "config.yaml").is_file():
        raise UserError(
            f"{run_dir} is not a surge run directory (no config.yaml)",
            "give directories written by `surge train`, e.g. runs/cartpole-appo-20260101-120000",
        )
    return read_yaml(run_dir / "config.yaml", "run config")


def _closest_first(wanted: str, names: list[str]) -> list[str]:
    return sorted(names, key=lambda name: -difflib.SequenceMatcher(None, wanted, name).ratio())


def final_score(run_dir: Path, metric: str) -> float:
    """The run's last logged value of `metric` (nulls, NaN when logged, are skipped), or a
    field of its eval.json when `metric` is `eval.json[:FIELD]`."""
    source, _, field = metric.partition(":")
    if source == EVAL_FILE:
        field = field or "return_mean"
        try:
            record = json.loads((run_dir / EVAL_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(
                f"{run_dir} has no {EVAL_FILE}",
                f"write it with `surge eval {run_dir}`, or choose a metric of metrics.jsonl",
            ) from None
        values, names = [record.get(field)], [k for k, v in record.items() if _is_number(v)]
    else:
        source, field, records = "metrics.jsonl", metric, read_metrics(run_dir)
        values = [r[metric] for r in records if r.get(metric) is not None]
        names = list(dict.fromkeys(key for r in records for key in r))
    scores = [v for v in values if _is_number(v)]
    if not scores:
        raise UserError(
            f"{run_dir}: no value of {metric!r} in its {source}",
            "choose --metric from its keys (closest first): "
            + ", ".join(_closest_first(field, names)),
        )
    return float(scores[-1])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def group_label(run_dir: Path, config: dict[str, Any], group_by: str) -> str:
    """A run's group: its `algo`, its preset (from the command recorded in versions.json), or
    `KEY=value` for any dotted config key."""
    if group_by == "preset":
        return _preset_of(run_dir)
    value: Any = config
    for part in group_by.split("."):
        if not isinstance(value, dict) or part not in value:
            raise UserError(
                f"{run_dir}: its config has no key {group_by!r} to group by",
                "use --group-by algo, preset or a dotted key of config.yaml, e.g. env.id",
            )
        value = value[part]
    return str(value) if group_by == "algo" else f"{group_by}={value}"


def _preset_of(run_dir: Path) -> str:
    """`surge train PRESET|FILE.yaml ...` as versions.json recorded it (no source: the
    default preset)."""
    from surge.config.load import DEFAULT_PRESET

    try:
        argv = json.loads((run_dir / "versions.json").read_text(encoding="utf-8"))["argv"]
        items = argv[argv.index("train") + 1 :]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"{run_dir}: cannot tell its preset (no `surge train` command in versions.json)",
            "group with --group-by algo or a config key, or label runs as LABEL=RUN_DIR",
        ) from None
    source = items[0] if items and "=" not in items[0] else DEFAULT_PRESET
    return Path(source).stem if source.endswith((".yaml", ".yml")) else source


def group_runs(items: list[str], group_by: str) -> dict[str, list[Path]]:
    """Run directories by group, in the order groups first appear; a `LABEL=RUN_DIR` label
    wins over `group_by`."""
    groups: dict[str, list[Path]] = {}
    for label, run_dir in parse_run_args(items):
        config = run_config(run_dir)
        groups.setdefault(label or group_label(run_dir, config, group_by), []).append(run_dir)
    return groups


def normalize(scores: np.ndarray, score_range: tuple[float, float] | None) -> np.ndarray:
    """Scores mapped so that `score_range` becomes [0, 1] (unchanged without a range)."""
    if score_range is None:
        return scores
    low, high = score_range
    if not high > low:
        raise UserError(f"--min {low} --max {high}: the maximum must exceed the minimum")
    return (scores - low) / (high - low)


def _rliable() -> Any:
    """rliable's `library` and `metrics` modules, or a UserError naming the extra."""
    try:
        from rliable import library, metrics
    except ImportError:
        raise UserError("surge report needs the rliable library", INSTALL_FIX) from None
    except Exception as e:  # arch 7, which rliable 1.2.0 needs, fails to import on pandas 3
        raise UserError(f"rliable does not import ({type(e).__name__}: {e})", INSTALL_FIX) from e
    return library, metrics


@contextlib.contextmanager
def seeded_bootstrap() -> Iterator[None]:
    """Make rliable's resamples repeatable, leaving numpy's global RNG as it was. rliable's
    StratifiedBootstrap draws them from the global RNG (`np.random.choice`) whatever
    `random_state` it is given, so that is the generator to seed."""
    state = np.random.get_state()
    np.random.seed(BOOTSTRAP_SEED)
    try:
        yield
    finally:
        np.random.set_state(state)


def aggregate(
    scores_by_group: dict[str, np.ndarray], normalized: bool, reps: int
) -> dict[str, dict[str, Estimate | None]]:
    """IQM, median, mean and (of normalized scores) optimality gap of each group's scores,
    with rliable's stratified-bootstrap 95% intervals for groups of 2 or more runs."""
    library, metrics = _rliable()
    # rliable's aggregate_median is the median over tasks of per-task means, which for one
    # task is the mean: the median over runs is the one that says something here.
    statistics = (
        metrics.aggregate_iqm,
        np.median,
        metrics.aggregate_mean,
        metrics.aggregate_optimality_gap,
    )

    def estimates(scores: np.ndarray) -> np.ndarray:
        return np.array([statistic(scores) for statistic in statistics])

    results = {}
    for label, scores in scores_by_group.items():
        matrix = scores.reshape(-1, 1)  # rliable's layout: runs x tasks, here one task
        points = estimates(matrix)
        bounds: list[tuple[float | None, float | None]] = [(None, None)] * len(points)
        if len(scores) >= 2:
            with seeded_bootstrap():
                found = library.get_interval_estimates(
                    {label: matrix}, estimates, reps=reps, confidence_interval_size=CONFIDENCE
                )
            points, intervals = found[0][label], found[1][label]  # rows: lower, upper bounds
            bounds = [(float(low), float(high)) for low, high in intervals.T]
        group: dict[str, Estimate | None] = {
            name: Estimate(float(point), *bound)
            for name, point, bound in zip(ESTIMATE_NAMES, points, bounds, strict=True)
        }
        if not normalized:  # a gap to a score of 1 means nothing on the metric's own scale
            group["optimality gap"] = None
        results[label] = group
    return results


def build_report(
    items: list[str],
    metric: str = DEFAULT_METRIC,
    group_by: str = "algo",
    score_range: tuple[float, float] | None = None,
    reps: int = 2000,
) -> Report:
    """Read, group, normalize and aggregate the runs `items` name (RUN_DIR, LABEL=RUN_DIR)."""
    if reps < 1:
        raise UserError(f"--reps {reps}: the bootstrap needs at least 1 resample (default 2000)")
    groups = group_runs(items, group_by)
    raw = {
        label: np.array([final_score(d, metric) for d in dirs]) for label, dirs in groups.items()
    }
    scored = {label: normalize(scores, score_range) for label, scores in raw.items()}
    estimates = aggregate(scored, score_range is not None, reps)
    notes = [
        f"{label}: 1 run, no confidence interval (the bootstrap resamples runs: give 2 or "
        "more seeds, 5 or more for useful intervals)"
        for label, dirs in groups.items()
        if len(dirs) < 2
    ]
    if score_range is None:
        notes.append("optimality gap: needs normalized scores, give --min and --max")
    results = [
        GroupResult(label, [str(d) for d in dirs], raw[label].tolist(), scored[label].tolist(), e)
        for (label, dirs), e in zip(groups.items(), estimates.values(), strict=True)
    ]
    return Report(metric, score_range, reps, results, notes)


def _cell(estimate: Estimate | None) -> str:
    def number(x: float) -> str:
        return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"

    if estimate is None:
        return "-"
    if estimate.ci_low is None or estimate.ci_high is None:
        return number(estimate.value)
    return f"{number(estimate.value)} [{number(estimate.ci_low)}, {number(estimate.ci_high)}]"


def table_rows(report: Report) -> list[list[str]]:
    """The summary table, header first: per group its number of runs and the estimates."""
    rows = [["group", "runs", *ESTIMATE_NAMES]]
    for group in report.groups:
        cells = [_cell(group.estimates[name]) for name in ESTIMATE_NAMES]
        rows.append([group.label, str(len(group.run_dirs)), *cells])
    return rows


def report_title(report: Report) -> str:
    """What was aggregated: the metric, its normalization and the bootstrap."""
    title = f"final {report.metric}"
    if report.score_range is not None:
        low, high = report.score_range
        title += f" normalized from [{low:g}, {high:g}]"
    return f"{title}; {CONFIDENCE:.0%} stratified-bootstrap CIs ({report.reps} reps)"


def format_table(report: Report) -> str:
    """The title, the summary table as aligned plain text, and the notes."""
    rows = table_rows(report)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(map(str.ljust, row, widths)).rstrip() for row in rows]
    return "\n".join([report_title(report), *lines, *(f"note: {n}" for n in report.notes)])


def write_plots(report: Report, out: Path) -> list[Path]:
    """Draw the performance profile and the interval estimates with rliable's plot_utils
    into `out`; returns the two PNG paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed; rliable draws through pyplot
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    library, _ = _rliable()
    scores = {group.label: np.array(group.scores).reshape(-1, 1) for group in report.groups}
    low = min(s.min() for s in scores.values())
    high = max(s.max() for s in scores.values())
    if report.score_range is not None:  # show the whole normalized range [0, 1]
        low, high = min(low, 0.0), max(high, 1.0)
    taus = np.linspace(low, high if high > low else low + 1.0, 101)
    with seeded_bootstrap():
        profiles, profile_cis = library.create_performance_profile(scores, taus, reps=report.reps)
    axis_label = report.metric + ("" if report.score_range is None else " (normalized)")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_performance_profiles(
        profiles, taus, performance_profile_cis=profile_cis, ax=ax, xlabel=axis_label
    )
    ax.legend(loc="best")
    profile_png = out / "performance_profile.png"
    fig.savefig(profile_png, dpi=100, bbox_inches="tight")
    plt.close(fig)

    names = [n for n in ESTIMATE_NAMES if report.groups[0].estimates[n] is not None]
    points, intervals = {}, {}
    for group in report.groups:
        found = [e for e in (group.estimates[n] for n in names) if e is not None]
        points[group.label] = np.array([e.value for e in found])
        # A single run has no interval: it is drawn as a zero-width one at its point.
        lows = [e.value if e.ci_low is None else e.ci_low for e in found]
        highs = [e.value if e.ci_high is None else e.ci_high for e in found]
        intervals[group.label] = np.array([lows, highs])
    # rliable sizes the figure by rows (groups) and places the x label in figure fractions:
    # keep a few groups readable and the label about half an inch below the axes.
    row_height = max(0.45, 1.6 / len(report.groups))
    fig, _ = plot_utils.plot_interval_estimates(
        points,
        intervals,
        metric_names=names,
        xlabel=axis_label,
        row_height=row_height,
        xlabel_y_coordinate=-0.5 / (row_height * len(report.groups)),
    )
    intervals_png = out / "interval_estimates.png"
    fig.savefig(intervals_png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [profile_png, intervals_png]


def write_report(report: Report, out: Path) -> list[Path]:
    """Write report.json, report.md and the two plots into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    pngs = write_plots(report, out)
    json_path, md_path = out / "report.json", out / "report.md"
    json_path.write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    header, *rows = table_rows(report)
    markdown = [
        f"# surge report: {report_title(report)}\n",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        *(f"- {note}" for note in report.notes),
        "",
        *(f"![{png.stem}]({png.name})" for png in pngs),
    ]
    md_path.write_text("\n".join(markdown) + "\n", encoding="utf-8")
    return [json_path, md_path, *pngs]
