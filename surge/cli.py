"""The `surge` command.

    surge train [PRESET|FILE.yaml] [key=value ...]
    surge resume RUN_DIR [key=value ...]
    surge eval RUN_DIR [episodes=N] [deterministic=true|false] [--video]
    surge plot RUN_DIR... -o curves.png
    surge report [LABEL=]RUN_DIR... [--metric M] [--group-by algo|preset|KEY] [--out DIR]
    surge presets
    surge graph [PRESET|FILE.yaml] [key=value ...]

User mistakes (config, env, paths) print a short message and exit 2, with no traceback;
a failed worker prints its name and original traceback and exits 1; Ctrl+C saves a
checkpoint and exits 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from surge.errors import UserError, WorkerFailure

if TYPE_CHECKING:
    from surge.runtime.warm import WarmProcess

TRAIN_EXAMPLES = """examples:
  surge train                                   CartPole-v1 APPO until solved (local runtime)
  surge train runtime=serial seed=3             one process, deterministic for the seed
  surge train acrobot-ppo total_env_steps=1e6   a preset with a longer budget
  surge train my_exp.yaml ppo.lr=3e-4           your YAML file, one setting changed
  surge train env.id=my_pkg.envs:MyEnv-v0       your own env (module imported, registers it)

common keys: env.id, seed, runtime (serial|local), run_dir, total_env_steps, stop_return,
max_policy_lag, workers.actors, workers.ring_size, workers.envs_per_group, ppo.*, model.*
all keys: docs/configuration.md"""

EXIT_USER_ERROR = 2
EXIT_WORKER_FAILED = 1
EXIT_INTERRUPTED = 130


def _graceful_stop_signals() -> None:
    """SIGINT and SIGTERM both stop a run the Ctrl+C way (checkpoint first). A process
    started in the background by a non-interactive shell inherits an ignored SIGINT, and
    `kill` sends SIGTERM: without this, neither would save anything."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    # Like `python -m surge`: modules in the current directory (a user's env named by
    # `env.id=my_module:MyEnv-v0`) are importable here and, via spawn, in every worker.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    _graceful_stop_signals()
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        return int(args.handler(args) or 0)
    except UserError as e:
        print(f"surge: error: {e.problem}", file=sys.stderr)
        if e.fix:
            print(f"  how to fix: {e.fix}", file=sys.stderr)
        return EXIT_USER_ERROR
    except WorkerFailure as e:
        print(
            f"surge: worker {e.worker} failed; the run stopped.\n{e.detail.rstrip()}",
            file=sys.stderr,
        )
        return EXIT_WORKER_FAILED
    except KeyboardInterrupt:
        print("surge: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="surge", description="Scalable reinforcement learning: workers joined by streams."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser(
        "train",
        help="train an agent (default: CartPole-v1 APPO, until solved)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=TRAIN_EXAMPLES,
    )
    t.add_argument(
        "items",
        nargs="*",
        metavar="[PRESET|FILE.yaml] [key=value ...]",
        help="a preset name (see `surge presets`) or YAML file, then config overrides",
    )
    t.set_defaults(handler=_train)

    r = sub.add_parser("resume", help="continue a run from its newest checkpoint")
    r.add_argument("run_dir", type=Path)
    r.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. total_env_steps=1000000")
    r.set_defaults(handler=_resume)

    e = sub.add_parser(
        "eval",
        help="play episodes with a run's newest checkpoint (LLM runs: held-out accuracy)",
    )
    e.add_argument("run_dir", type=Path)
    e.add_argument(
        "options",
        nargs="*",
        metavar="key=value",
        help="episodes=N, deterministic=BOOL, seed=N (LLM runs: pass_k=N, problems=N)",
    )
    e.add_argument(
        "--video", action="store_true", help="record the first episode to RUN_DIR/videos/*.mp4"
    )
    e.set_defaults(handler=_eval)

    pl = sub.add_parser("plot", help="plot learning curves of one or more runs")
    pl.add_argument("run_dirs", nargs="+", type=Path)
    pl.add_argument("-o", "--output", type=Path, default=Path("curves.png"))
    pl.set_defaults(handler=_plot)

    rp = sub.add_parser(
        "report", help="compare runs over seeds: IQM, median, mean with bootstrap CIs (rliable)"
    )
    rp.add_argument("run_dirs", nargs="+", metavar="[LABEL=]RUN_DIR")
    rp.add_argument(
        "--metric", help="a metrics.jsonl key (default episode_return_mean) or eval.json[:FIELD]"
    )
    rp.add_argument("--group-by", default="algo", metavar="algo|preset|KEY", help="default algo")
    rp.add_argument("--min", type=float, dest="score_min", metavar="SCORE", help="maps to 0")
    rp.add_argument("--max", type=float, dest="score_max", metavar="SCORE", help="maps to 1")
    rp.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    rp.add_argument(
        "--out", type=Path, default=Path("report"), metavar="DIR", help="default ./report"
    )
    rp.set_defaults(handler=_report)

    ps = sub.add_parser("presets", help="list the shipped presets")
    ps.set_defaults(handler=_presets)

    g = sub.add_parser("graph", help="draw an experiment's worker graph as text")
    g.add_argument("items", nargs="*", metavar="[PRESET|FILE.yaml] [key=value ...]")
    g.set_defaults(handler=_graph)
    return p


def _train(args: argparse.Namespace) -> int:
    from surge.runtime.warm import warm_trainer

    # The trainer's process imports torch while this one loads the config and probes the
    # env; a serial or Ray run closes it unused.
    warm = warm_trainer()
    try:
        return _train_with(args, warm)
    finally:
        warm.close()


def _train_with(args: argparse.Namespace, warm: WarmProcess) -> int:
    from surge.api import train_source

    source, overrides = _source_and_overrides(args.items)
    run = train_source(source, overrides, warm)
    ended = run.result or run.population
    return EXIT_INTERRUPTED if ended is not None and ended.reason == "interrupted" else 0


def _source_and_overrides(items: list[str]) -> tuple[str | None, list[str]]:
    """`[PRESET|FILE.yaml] [key=value ...]` split into the source (None: the default) and the
    overrides."""
    source = items[0] if items and "=" not in items[0] else None
    if source is not None and _looks_like_key(source):
        raise UserError(
            f"{source!r} looks like a config key without a value",
            f"write it as key=value, e.g. {source}=...",
        )
    return source, items[1:] if source is not None else items


def _graph(args: argparse.Namespace) -> int:
    from surge.runtime.graph_docs import graph_text

    source, overrides = _source_and_overrides(args.items)
    print("\n".join(graph_text(source, overrides)))
    return 0


def _looks_like_key(item: str) -> bool:
    from dataclasses import fields

    from surge.config.schema import ExperimentConfig

    top = item.split(".")[0]
    return not item.endswith((".yaml", ".yml")) and top in {
        f.name for f in fields(ExperimentConfig)
    }


def _resume(args: argparse.Namespace) -> int:
    from surge.runtime.controller import resume
    from surge.runtime.warm import warm_trainer
    from surge.tracking.lineage import is_population_dir

    if is_population_dir(args.run_dir):  # each member resumes as its own run
        from surge.population.controller import resume_population

        population = resume_population(args.run_dir, args.overrides)
        return EXIT_INTERRUPTED if population.reason == "interrupted" else 0
    warm = warm_trainer()
    try:
        result = resume(args.run_dir, args.overrides, warm)
    finally:
        warm.close()
    return EXIT_INTERRUPTED if result.reason == "interrupted" else 0


def _eval(args: argparse.Namespace) -> int:
    """`surge eval RUN [key=value ...]`: the run's algorithm scores its newest checkpoint."""
    from surge.recipes import algorithm_of
    from surge.tracking.run_dir import load_run_config

    algorithm = algorithm_of(load_run_config(args.run_dir))
    print(algorithm.evaluate(Path(args.run_dir), args.options, args.video))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from surge.tracking.lineage import is_population_dir, plot_lineage
    from surge.tracking.plot import plot_runs

    if len(args.run_dirs) == 1 and is_population_dir(args.run_dirs[0]):
        plot_lineage(args.run_dirs[0], args.output)  # a PBT population: its lineage
    else:
        plot_runs(args.run_dirs, args.output)
    print(f"wrote {args.output}")
    return 0


def _report(args: argparse.Namespace) -> int:
    """`surge report RUN...`: final scores aggregated over seeds (surge/tracking/report.py)."""
    from surge.tracking.report import DEFAULT_METRIC, build_report, format_table, write_report

    if (args.score_min is None) != (args.score_max is None):
        raise UserError("--min and --max go together", "give both: the scores mapped to 0 and 1")
    score_range = None if args.score_min is None else (args.score_min, args.score_max)
    metric = args.metric or DEFAULT_METRIC
    report = build_report(args.run_dirs, metric, args.group_by, score_range, args.reps)
    print(format_table(report))
    for path in write_report(report, args.out):
        print(f"wrote {path}")
    return 0


def _presets(args: argparse.Namespace) -> int:
    from surge.config.load import list_presets

    presets = list_presets()
    width = max(len(name) for name, _ in presets)
    for name, description in presets:
        print(f"{name:<{width}}  {description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
