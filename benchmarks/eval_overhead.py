"""What evaluation workers cost training: the same run with and without them, back to back.

    .venv/bin/python benchmarks/eval_overhead.py                      # 5 rounds, ~20 min
    .venv/bin/python benchmarks/eval_overhead.py --rounds 3 --tasks cartpole-appo --secs 40

Each round runs every task twice from this tree, once as shipped (`off`) and once with one
evaluation worker at the default evaluation settings (`on`: `eval.workers=1`, evaluating 10
episodes every 30 s at niceness +19), in alternating order, with the measurement of
benchmarks/regression.py (steady env steps per trainer second after the warm-up, one fresh
`surge train` process per run, noisy runs marked). The ratio on/off is the training speed
left with evaluation; the target is >= 0.95.

Writes benchmarks/results/eval_overhead.md and .json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import regression as R  # noqa: E402  (benchmarks/, next to this file)

EVAL_ON = ("eval.workers=1",)  # and the default eval.* settings
DEFAULT_TASKS = ("cartpole-appo", "cartpole-ppo")


def eval_cpu_share(run: Path) -> float | None:
    """The evaluation worker's share of all CPU time the run used (its timing.json): what
    evaluation took from the machine, free of the run-to-run noise of steps/s."""
    path = run / "surge-run" / "timing.json"
    if not path.exists():
        return None
    timing = json.loads(path.read_text())
    total = timing["total"]["cpu_total_s"]
    used = sum(v["cpu_total"] for k, v in timing["processes"].items() if k.startswith("evaluator-"))
    return used / total if total else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--secs", type=float, default=70.0, help="per run (two evaluations)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    tasks = {
        name: dataclasses.replace(R.TASKS[name], secs=args.secs) for name in args.tasks.split(",")
    }
    python = sys.executable
    tree = R.checkout("base", "worktree", Path(tempfile.gettempdir()))
    # "base": evaluation off, "head": on (regression.py's names, so its summary applies)
    off = dataclasses.replace(tree, name="base")
    on = dataclasses.replace(tree, name="head")
    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="surge-eval-overhead-") as tmp:
        for rnd in range(args.rounds):
            for name, task in tasks.items():
                with_eval = dataclasses.replace(task, overrides=task.overrides + EVAL_ON)
                runs = [(off, task), (on, with_eval)]
                for side, variant in runs if rnd % 2 == 0 else runs[::-1]:
                    row = R.run_one(side, name, variant, python, Path(tmp), rnd)
                    row["eval_cpu_share"] = eval_cpu_share(Path(tmp) / f"{name}-r{rnd}-{side.name}")
                    rows.append(row)
    summary = [R.summarize(name, rows) for name in tasks]
    for s in summary:
        shares = [
            r["eval_cpu_share"] for r in rows if r["task"] == s["task"] and r["side"] == "head"
        ]
        s["eval_cpu_share"] = R._stats([x for x in shares if x is not None])
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "argv": " ".join(sys.argv[1:]),
        "rounds": args.rounds,
        "secs": args.secs,
        "wall_s": time.time() - started,
        "machine": R.machine.describe(),
        "tree": tree.label(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eval_overhead.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=1)
    )
    (args.out / "eval_overhead.md").write_text(markdown(meta, summary))
    print(markdown(meta, summary))
    return 0


def markdown(meta: dict, summary: list[dict]) -> str:  # type: ignore[type-arg]
    lines = [
        "# Evaluation workers: what they cost training",
        "",
        f"Measured {meta['date']}: `python benchmarks/eval_overhead.py {meta['argv']}` "
        f"({meta['rounds']} rounds, {meta['secs']:.0f} s per run, "
        f"{meta['wall_s'] / 60:.0f} min), tree {meta['tree']}.",
        "",
        R.machine.summary(meta["machine"]) + ".",
        "",
        "off: the preset as shipped; on: plus `eval.workers=1` with the default evaluation "
        "settings (10 deterministic episodes every 30 s, niceness +19). steps/s: steady env "
        "steps per trainer second after the warm-up (benchmarks/regression.py). ratio = on / "
        "off of the two runs of a round, run back to back in alternating order; median and "
        "min..max over rounds. Target: >= 0.95.",
        "",
        "eval CPU share: the evaluation worker's CPU seconds over the CPU seconds of every "
        "process of the run (timing.json of the `on` runs; median, max): what evaluation "
        "took from the machine, measured without the run-to-run noise of steps/s.",
        "",
        "| task | off steps/s | on steps/s | ratio on/off (median) | min..max | quiet rounds "
        "| verdict | eval CPU share (median, max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        r, q = s["ratio"], s["ratio_quiet"]
        quiet = f"{R._f(q['median'], '.3f')} ({q['n']})" if s["noisy_rounds"] else "all"
        verdict = s["verdict"].replace("head", "with evaluation")
        lines.append(
            f"| {s['task']} | {R._f(s['base_sps']['median'], ',.0f')} "
            f"| {R._f(s['head_sps']['median'], ',.0f')} | **{R._f(r['median'], '.3f')}** "
            f"| {R._f(r['min'], '.3f')}..{R._f(r['max'], '.3f')} | {quiet} | {verdict} "
            f"| {_pct(s['eval_cpu_share']['median'])}, {_pct(s['eval_cpu_share']['max'])} |"
        )
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}%"


if __name__ == "__main__":
    sys.exit(main())
