"""Regenerate every results table in README.md and docs/*.md from benchmarks/results/*.json.

A table (or an inline value) lives between two markers in the Markdown:

    <!-- results:NAME -->
    ...written by this script...
    <!-- /results:NAME -->

NAME is one of the generators below (``TABLES``). Both markers on one line make an inline
value (the generator's text without line breaks). Every generator reads only JSON files in
benchmarks/results/, and each of those names its machine (CPU model), date and the command
that reproduces it: from the fields the benchmark scripts write (``meta``, ``machine``), or
from a ``provenance`` object transcribed from the report the run wrote.

    .venv/bin/python benchmarks/results_tables.py           # rewrite the files
    .venv/bin/python benchmarks/results_tables.py --check   # exit 1 and print a diff if stale

It also copies the plots docs/results.md shows from benchmarks/results/ into
docs/assets/results/, so that the docs site (built from docs/ only) can reach them.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ASSETS = ROOT / "docs" / "assets" / "results"
# The plots docs/results.md shows, copied into ASSETS.
PLOTS = [
    "suite.png",
    "default_solve.png",
    "pong-appo.png",
    "pong-appo-annealed-lr.png",
    "breakout-appo.png",
    "psro_kuhn.png",
    "psro_leduc.png",
    "pbt_lineage.png",
]

MARKER = re.compile(
    r"(<!-- results:(?P<name>[a-z0-9-]+) -->)(?P<body>.*?)(<!-- /results:(?P=name) -->)",
    re.DOTALL,
)


# ---------------------------------------------------------------------------------------------
# reading results


def load(name: str) -> dict:
    """One result file as a dict. A file that is a JSON list (as benchmarks/llm_supo.py and
    benchmarks/llm_own_file.py write) comes back as ``{"runs": [...]}``, with the
    ``provenance`` of its sidecar ``NAME.provenance.json`` where there is one."""
    data = json.loads((RESULTS / name).read_text())
    if isinstance(data, list):
        data = {"runs": data}
        sidecar = RESULTS / (Path(name).stem + ".provenance" + Path(name).suffix)
        if sidecar.is_file():
            data["provenance"] = json.loads(sidecar.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a JSON object or list")
    return data


def _cpu(machine: object) -> str | None:
    if isinstance(machine, dict):
        cpu = machine.get("cpu")
        cores = machine.get("cores")
        if cpu:
            return f"{cpu}, {cores} cores" if cores else str(cpu)
    return None


def provenance(name: str) -> dict[str, str]:
    """Machine (CPU model), date and command of one result file; KeyError if any is missing."""
    data = load(name)
    given = data.get("provenance", {})
    meta = data.get("meta", {})
    machine = (
        given.get("machine")
        or _cpu(data.get("machine"))
        or _cpu(meta.get("machine_detail"))
        or _cpu(meta.get("machine"))
    )
    date = given.get("date") or meta.get("date") or data.get("date")
    command = given.get("command") or data.get("command")
    if not command and "argv" in meta:
        # benchmarks/regression.py's meta names the two commits it compares; suite.py's not
        script = "regression.py" if "base" in meta and "head" in meta else "suite.py"
        command = f"python benchmarks/{script} {meta['argv']}"
    out = {"machine": machine, "date": date, "command": command}
    missing = [key for key, value in out.items() if not value]
    if missing:
        raise KeyError(f"benchmarks/results/{name} does not say its {', '.join(missing)}")
    return {key: str(value) for key, value in out.items()}


def source_line(*names: str) -> str:
    """One line per result file: machine, date, command and a link to the file."""
    lines = []
    for name in names:
        p = provenance(name)
        lines.append(
            f"Measured on {p['machine']}, {p['date']}: `{p['command']}` "
            f"(`benchmarks/results/{name}`)."
        )
    return "\n".join(lines)


def num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def ratio(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}x"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# generators: each returns Markdown (no surrounding blank lines)


SUITE_TASKS = {
    "cartpole-throughput": "CartPole steps/s, CleanRL `ppo.py` settings (4 envs x 128, 4 x 4)",
    "cartpole-solve": "CartPole seconds to solve (475), each library's own settings, "
    "start included, median of 3",
    "pong-throughput": "Pong steps/s, CleanRL `ppo_atari.py` settings",
    "pong-appo": "Pong APPO steps/s, same model and batch",
}


def _suite_rows(data: dict) -> list[list[str]]:
    rows = []
    for task, label in SUITE_TASKS.items():
        entries = data["summary"].get(task)
        if not entries:
            continue
        surge = next(e for e in entries if e["contender"] == "surge")
        peers = [e for e in entries if e["contender"] != "surge" and e["status"] == "ok"]
        if task.endswith("-solve"):
            best = min(peers, key=lambda e: e["solved_s"])
            cells = [f"{surge['solved_s']:.2f} s", f"{best['solved_s']:.2f} s ({best['label']})"]
        else:
            best = max(peers, key=lambda e: e["sps"])
            cells = [num(surge["sps"]), f"{num(best['sps'])} ({best['label']})"]
        rows.append([label, *cells, ratio(surge["vs_fastest_peer"])])
    return rows


def gen_suite() -> str:
    data = load("suite.json")
    head = ["task", "surge", "fastest peer", "surge / fastest peer"]
    return table(head, _suite_rows(data)) + "\n\n" + source_line("suite.json")


def gen_suite_all() -> str:
    """Every contender of every suite task."""
    data = load("suite.json")
    rows = []
    for task, entries in data["summary"].items():
        for e in entries:
            value = f"{e['solved_s']:.2f} s" if task.endswith("-solve") else num(e["sps"])
            pss = num(e["peak_pss_mb"]) if e.get("peak_pss_mb") is not None else "-"
            rows.append([f"`{task}`", e["label"], value, ratio(e["vs_fastest_peer"]), pss])
    head = ["task", "contender", "steps/s or time to solve", "vs fastest peer", "peak PSS MB"]
    return table(head, rows) + "\n\n" + source_line("suite.json")


def gen_default_solve() -> str:
    data = load("default_solve.json")
    rows = []
    for e in data["summary"]["cartpole-solve"]:
        rows.append(
            [e["label"], e["solved"], f"{e['solved_s']:.2f} s", ratio(e["vs_fastest_peer"])]
        )
    head = ["contender", "solved", "median time to solve (475), from launch", "vs fastest peer"]
    return table(head, rows) + "\n\n" + source_line("default_solve.json")


def gen_pong_avx2() -> str:
    rows = []
    names = ["pong_avx2_ppo.json", "pong_avx2_appo.json"]
    for name in names:
        data = load(name)
        for task, entries in data["summary"].items():
            surge = next(e for e in entries if e["contender"] == "surge")
            for peer in (e for e in entries if e["contender"] != "surge"):
                rows.append(
                    [
                        f"`{task}`",
                        f"{surge['sps']:.1f} ({surge['foreign_cores_max']:.2f})",
                        f"{peer['label']}: {peer['sps']:.1f} ({peer['foreign_cores_max']:.2f})",
                        ratio(surge["vs_fastest_peer"]),
                    ]
                )
    head = ["task", "surge steps/s (foreign cores)", "peer steps/s (foreign cores)", "ratio"]
    return table(head, rows) + "\n\n" + source_line(*names)


def gen_headline() -> str:
    """README's table: surge beside the fastest peer, from runs whose CPU is on record."""
    rows = []
    solve = {e["contender"]: e for e in load("default_solve.json")["summary"]["cartpole-solve"]}
    surge = solve.pop("surge")
    peer = min(solve.values(), key=lambda e: e["solved_s"])
    rows.append(
        [
            "CartPole, seconds to solve (475) from launch, median of 3",
            f"{surge['solved_s']:.2f} s",
            f"{peer['solved_s']:.2f} s ({peer['label']})",
            ratio(surge["vs_fastest_peer"]),
        ]
    )
    names = ["pong_avx2_ppo.json", "pong_avx2_appo.json"]
    what = {"pong-throughput": "Pong PPO, steps/s", "pong-appo": "Pong APPO, steps/s"}
    for name in names:
        for task, entries in load(name)["summary"].items():
            ours = next(e for e in entries if e["contender"] == "surge")
            best = max((e for e in entries if e["contender"] != "surge"), key=lambda e: e["sps"])
            rows.append(
                [
                    what.get(task, task),
                    num(ours["sps"], 1),
                    f"{num(best['sps'], 1)} ({best['label']})",
                    ratio(ours["vs_fastest_peer"]),
                ]
            )
    head = ["task", "surge", "fastest peer", "surge / fastest peer"]
    return table(head, rows) + "\n\n" + source_line("default_solve.json", *names)


def gen_marl() -> str:
    data = load("marl.json")
    session = next(s for s in data["sessions"] if "surge-mappo" in s["summary"])
    labels = {
        "surge-mappo": "surge MAPPO (`spread-mappo`)",
        "surge-ippo": "surge IPPO (`spread-ippo`)",
        "rllib-ppo": "RLlib PPO, 1 env runner",
        "rllib-ppo-2r": "RLlib PPO, 2 env runners",
        "benchmarl-mappo": "BenchMARL MAPPO",
        "benchmarl-ippo": "BenchMARL IPPO",
    }
    rows = []
    for contender, s in sorted(session["summary"].items(), key=lambda kv: -kv[1]["agent_sps"]):
        rows.append(
            [
                labels.get(contender, contender),
                num(s["agent_sps"]),
                ratio(s["ratio"]),
                f"{s['return_mean']:.1f}",
                num(s["peak_pss_mb"]),
            ]
        )
    head = ["contender", "agent-steps/s", "vs fastest peer", "final team return", "peak PSS MB"]
    secs = int(session["secs"])
    note = f"Session {session['session']}, {secs} s per contender, seed 1."
    return table(head, rows) + "\n\n" + note + " " + source_line("marl.json")


def gen_memory() -> str:
    data = load("memory.json")
    rows = []
    runs = sorted(data["runs"], key=lambda r: (r["variant"] != "gru", r["seed"]))
    for r in runs:
        reached = num(r["steps_to_400"]) if r["steps_to_400"] else "never"
        model = "GRU" if r["variant"] == "gru" else r["variant"]
        rows.append(
            [
                model,
                str(r["seed"]),
                reached,
                f"{r['best_return']:.1f}",
                f"{r['final_return']:.1f}",
                f"{r['wall_s']:.1f}",
                f"{r['foreign_cores']:.2f}",
            ]
        )
    head = ["model", "seed", "steps to a mean return of 400", "best mean return"]
    head += ["final mean return", "wall s", "foreign cores"]
    steps = num(data["steps"])
    note = f"`{data['preset']}`, {steps} env steps per run."
    return table(head, rows) + "\n\n" + note + " " + source_line("memory.json")


def _ray_rows(data: dict, solve: bool = False) -> list[list[str]]:
    by = {"local": [], "ray": []}
    for r in data["rows"]:
        by[r["runtime"]].append(r)
    rows = []
    labels = [
        ("steps_per_s", "steps/s (env steps / trainer s)"),
        ("steady_steps_per_s", "steady steps/s"),
    ]
    for key, label in labels:
        local = statistics.median(r[key] for r in by["local"])
        ray = statistics.median(r[key] for r in by["ray"])
        rows.append([f"median {label}", num(local), num(ray), f"{ray / local:.2f}"])
    # what the runtime adds around the trainer: start-up (Ray's instance included) and shut-down
    local = statistics.median(r["wall_s"] - r["trainer_s"] for r in by["local"])
    ray = statistics.median(r["wall_s"] - r["trainer_s"] for r in by["ray"])
    label = "median s of a run outside the trainer (wall-clock - trainer s: start, stop)"
    rows.append([label, f"{local:.1f}", f"{ray:.1f}", f"{ray / local:.2f}"])
    if solve:
        solved = {k: sum(bool(r["solved"]) for r in v) for k, v in by.items()}
        rows.append(
            [
                "runs that solved",
                f"{solved['local']} of {len(by['local'])}",
                f"{solved['ray']} of {len(by['ray'])}",
                "-",
            ]
        )
    return rows


def gen_ray_vs_local() -> str:
    data = load("ray_vs_local.json")
    head = ["", "local", "ray", "ray / local"]
    return table(head, _ray_rows(data, solve=True)) + "\n\n" + source_line("ray_vs_local.json")


def gen_ray_vs_local_pong() -> str:
    name = "ray_vs_local_pong-appo.json"
    head = ["", "local", "ray", "ray / local"]
    return table(head, _ray_rows(load(name))) + "\n\n" + source_line(name)


def gen_replay() -> str:
    s = load("replay.json")["summary"]
    rows = []
    t = s["dqn-throughput"]
    rows.append(
        [
            "`dqn-throughput`: `cartpole-dqn` steps/s vs CleanRL-style `dqn.py`, same settings",
            f"{num(t['sps_median']['surge'])} vs {num(t['sps_median']['cleanrl'])}: "
            f"{ratio(t['ratio'])}",
            t["target"],
        ]
    )
    t = s["dqn-solve"]
    peer = t["faster_peer"]
    rows.append(
        [
            "`dqn-solve`: `cartpole-dqn-fast` median seconds to solve vs the faster peer",
            f"{t['median_s']['surge']:.1f} s vs {t['median_s'][peer]:.1f} s ({peer}): "
            f"{t['ratio']:.2f}",
            t["target"],
        ]
    )
    t = s["dqn-learning"]
    finals = ", ".join(f"{v:.1f}" for v in t["final_returns"].values())
    rows.append(["`dqn-learning`: `cartpole-dqn` final returns at 500k steps", finals, t["target"]])
    t = s["sac-pendulum"]
    reached = ", ".join(num(v["reached_steps"]) for v in t["surge"].values())
    rows.append(["`sac-pendulum`: steps until -250", reached, t["target"]])
    head = ["task", "measured", "target"]
    return table(head, rows) + "\n\n" + source_line("replay.json")


def gen_apex() -> str:
    data = load("apex.json")
    sc, le = data["scaling"], data["learning"]
    rates = sc["rates"]
    rows = [
        [
            "inserts/s, 1 and 2 actor processes",
            f"{num(rates['1']['inserts_per_s'])} / {num(rates['2']['inserts_per_s'])}: "
            f"{ratio(sc['ratio'])}",
        ],
        [
            f"greedy score after {num(le['eval_env_steps'])} env steps "
            f"({le['eval_episodes']} whole games)",
            f"{le['eval_return']:.1f} +- {le['eval_std']:.1f}",
        ],
        ["peak PSS of the process tree", f"{num(le['peak_pss_mb'])} MB"],
    ]
    return table(["`breakout-apex`", "measured"], rows) + "\n\n" + source_line("apex.json")


# Every replay report docs/replay.md compares with the peers, and what sets it apart.
REPLAY_PEERS = [
    ("replay.json", "seeds 1-3"),
    ("replay-dqnx.json", "seeds 1-3"),
    ("replay-pend9.json", "the steps in numpy"),
    ("replay-sps2.json", "40k-step runs, one each"),
    ("replay-sps3.json", "40k-step runs, one each"),
    ("replay-sps7.json", "`sac.precision: auto` (bfloat16 there), one run each"),
    ("replay-sps9.json", "the thread trial, the steps without autograd, one run each"),
    ("replay-sps4.json", "40k-step runs, one each"),
    ("replay-sps5.json", "with the `sac.matmul` trial, surge only"),
    ("replay-sps6.json", "`sac.precision: auto` (bfloat16 there), one run each"),
    ("replay-hc300k.json", "300k steps, seeds 1-3"),
    ("replay-hcbf16.json", "300k steps, `sac.precision: auto` (bfloat16)"),
    ("replay-hcnp.json", "300k steps, the thread trial and the steps in numpy"),
]


def _yes(met: object) -> str:
    return {True: "yes", False: "**no**"}.get(met, "-")  # type: ignore[call-overload]


def _replay_peer_rows(name: str, note: str) -> list[list[str]]:
    data = load(name)
    cpu = _cpu(data.get("machine")) or "-"
    if name in ("replay-hc300k.json", "replay-hcbf16.json", "replay-hcnp.json"):
        cpu = "see the source line"
    where = f"`{name}` ({note}); {cpu}"
    rows = []
    for task, t in data["summary"].items():
        if task == "dqn-throughput":
            sps = t["sps_median"]
            measured = f"median {num(sps['surge'])} vs CleanRL-style {num(sps['cleanrl'])} steps/s"
            rows.append(
                [where, f"`{task}`", measured, ratio(t["ratio"]), t["target"], _yes(t["met"])]
            )
        elif task == "dqn-solve":
            peer = t["faster_peer"]
            ms = t["median_s"]
            measured = f"median {ms['surge']:.1f} s vs {peer} {ms[peer]:.1f} s"
            others = [f"{k} not solved in its budget ({v:.0f} s counted)" for k, v in ms.items()]
            others = [o for o in others if not o.startswith(("surge", peer))]
            if others:
                measured += "; " + ", ".join(others)
            rows.append(
                [where, f"`{task}`", measured, f"{t['ratio']:.2f}", t["target"], _yes(t["met"])]
            )
        elif task == "dqn-learning":
            finals = " / ".join(f"{v:.1f}" for v in t["final_returns"].values())
            measured = f"{finals} (CleanRL publishes {t['cleanrl_published']})"
            rows.append([where, f"`{task}`", measured, "-", t["target"], _yes(t["met"])])
        elif task == "sac-pendulum":
            steps = " / ".join(num(v["reached_steps"]) for v in t["surge"].values())
            finals = " / ".join(f"{v['final_return']:.1f}" for v in t["surge"].values())
            measured = f"reached -250 at {steps} steps (finals {finals})"
            rows.append([where, f"`{task}`", measured, "-", t["target"], _yes(t["met"])])
        elif task == "sac-halfcheetah":
            s, c = t["surge"], t["cleanrl"]
            if t["return_bar"] is not None:
                measured = (
                    f"return {num(s['return_mean'])} +- {num(s['return_std'])} vs CleanRL-style "
                    f"{num(c['return_mean'])} +- {num(c['return_std'])}"
                )
                if s["sps_median_alone"]:
                    measured += f"; surge alone {s['sps_median_alone']:.0f} steps/s (median)"
                met = f"{_yes(t['return_met'])}: {num(s['return_mean'])} >= {num(t['return_bar'])}"
                target = "surge mean return >= CleanRL mean - std"
                rows.append([where, f"`{task}`", measured, "-", target, met])
            elif t["sps_ratio"] is not None:
                measured = (
                    f"{s['sps_median_alone']:.0f} vs CleanRL-style "
                    f"{c['sps_median_alone']:.0f} steps/s"
                )
                met = _yes(t["sps_met"])
                rows.append(
                    [
                        where,
                        f"`{task}`",
                        measured,
                        ratio(t["sps_ratio"]),
                        "steps/s ratio >= 1.3",
                        met,
                    ]
                )
            else:
                measured = f"surge {s['sps_median_alone']:.0f} steps/s"
                rows.append([where, f"`{task}`", measured, "-", "-", "-"])
    return rows


def gen_replay_peers() -> str:
    rows = []
    for name, note in REPLAY_PEERS:
        rows += _replay_peer_rows(name, note)
    for name in ("apex.json", "apex_scaling_xeon.json"):
        data = load(name)
        sc = data["scaling"]
        rates = sc["rates"]
        measured = (
            f"{num(rates['1']['inserts_per_s'])} -> {num(rates['2']['inserts_per_s'])} "
            "inserts/s, 1 -> 2 actor processes"
        )
        rows.append(
            [
                f"`{name}`",
                "`breakout-apex` scaling",
                measured,
                ratio(sc["ratio"]),
                ">= 1.6x",
                "yes" if sc["ratio"] >= 1.6 else "**no**",
            ]
        )
    le = load("apex.json")["learning"]
    measured = (
        f"greedy {le['eval_return']:.1f} +- {le['eval_std']:.1f} after "
        f"{num(le['eval_env_steps'])} env steps ({le['eval_episodes']} games); "
        f"peak PSS {num(le['peak_pss_mb'])} MB"
    )
    met = _yes(le["met_return"] and le["met_memory"])
    rows.append(
        ["`apex.json`", "`breakout-apex` learning", measured, "-", ">= 10 at 1M; <= 8 GB", met]
    )
    head = ["result file; CPU", "task", "measured", "ratio", "target", "met"]
    names = [n for n, _ in REPLAY_PEERS] + ["apex.json", "apex_scaling_xeon.json"]
    return table(head, rows) + "\n\n" + source_line(*names)


def gen_llm_async() -> str:
    data = load("llm_async.json")
    rows = []
    for r in data["runs"]:
        acc = f"{r['accuracy_at_equal_tokens']:.1f}%" if r["accuracy_at_equal_tokens"] else "-"
        rows.append([r["run"], num(r["trained_tokens_per_s"]), ratio(r["vs_baseline"]), acc])
    tokens = num(data["equal_trained_tokens"])
    head = ["run", "trained tokens/s", "vs sync", f"held-out accuracy at {tokens} trained tokens"]
    return table(head, rows) + "\n\n" + source_line("llm_async.json")


# the benchmarks/regression.py runs docs/scaling.md quotes (the second reruns one task)
REGRESSION_DEVICES = ["regression_devices.json", "regression_devices_appo.json"]


def gen_regression_devices() -> str:
    """benchmarks/regression.py on a CPU-only machine: the per-role device settings
    against the commit before them."""
    rows = []
    for name in REGRESSION_DEVICES:
        for s in load(name)["summary"]:
            r = s["ratio"]
            rows.append(
                [
                    f"`{s['task']}`",
                    num(s["base_sps"]["median"]),
                    num(s["head_sps"]["median"]),
                    f"**{r['median']:.3f}**",
                    f"{r['min']:.3f}..{r['max']:.3f}",
                    str(r["n"]),
                    s["verdict"],
                ]
            )
    head = ["task", "base steps/s", "head steps/s", "head/base (median)", "min..max"]
    head += ["rounds", "verdict"]
    return table(head, rows) + "\n\n" + source_line(*REGRESSION_DEVICES)


def gen_llm_agents() -> str:
    """guess-grpo (benchmarks/llm_supo.py) and a user's JSONL file (benchmarks/llm_own_file.py):
    held-out success from the warm start to the end of RL."""
    names = {"llm_guess.json": None, "llm_own_file.json": "own JSONL file (letter sorting)"}
    rows = []
    for name, label in names.items():
        for r in load(name)["runs"]:
            rows.append(
                [
                    label or f"`{r['preset']}`",
                    str(r["seed"]),
                    f"{r['start']:.1%}",
                    f"{r['final']:.1%}",
                    f"{r['best']:.1%}",
                    num(r["episodes"]),
                    f"{r['rl_seconds']:.0f}",
                ]
            )
    head = ["task", "seed", "warm start", "final (mean of the last 3 evaluations)", "best"]
    head += ["episodes", "RL s"]
    return table(head, rows) + "\n\n" + source_line(*names)


def gen_gpu() -> str:
    data = load("gpu.json")
    rows = [[r["what"], r["measured"]] for r in data["rows"]]
    return table(["", "measured"], rows) + "\n\n" + source_line("gpu.json")


def gen_psro(tag: str) -> str:
    """benchmarks/psro.py on one game (`--tag`): each seed's NashConv curve, summarised."""
    data = load(f"psro_{tag}.json")
    target = data["target"]
    rows = []
    for r in data["seeds"]:
        first = r["first_at_or_below_target"]
        rows.append(
            [
                str(r["seed"]),
                str(r["iterations"]),
                f"{r['nash_conv_start']:.3f}",
                f"{r['nash_conv_min']:.4f}",
                f"{r['nash_conv_final']:.4f}",
                "-" if first is None else str(first),
            ]
        )
    head = ["seed", "iterations", "NashConv at 0", "lowest", "final", f"first <= {target:g}"]
    return table(head, rows) + "\n\n" + source_line(f"psro_{tag}.json")


def gen_pbt() -> str:
    """benchmarks/pbt.py: cartpole-pbt's members against its start settings held fixed."""
    data = load("pbt.json")
    solved = data["solved_at"]
    rows = []
    for s in data["seeds"]:
        members = [m["eval"] for m in s["members"]]
        fixed = [f["eval"] for f in s["fixed"]]
        rows.append(
            [
                str(s["seed"]),
                f"{max(members):.1f}",
                f"{sum(x >= solved for x in members)} of {len(members)}",
                str(s["exploits"]),
                ", ".join(f"{f['lr']:g}: {f['eval']:.1f}" for f in s["fixed"]),
                f"{sum(x >= solved for x in fixed)} of {len(fixed)}",
            ]
        )
    head = ["seed", "best member (eval)", f"members >= {solved:g}", "exploits"]
    head += ["fixed runs, start lr: eval", f"fixed >= {solved:g}"]
    return table(head, rows) + "\n\n" + source_line("pbt.json")


def gen_lora() -> str:
    """benchmarks/lora.py: LoRA beside full fine-tuning on arith-grpo from one warm start, and
    the saved adapters scored in plain transformers with PEFT."""
    data = load("lora.json")
    labels = {"lora": "LoRA", "full": "full fine-tuning"}
    rows = []
    for r in data["runs"]:
        rows.append(
            [
                labels.get(r["run"], r["run"]),
                f"{r['train_seconds']:.0f}",
                num(r["trained_parameters"]),
                f"{r['trainer_state_mb']:.2f}",
                f"{r['accuracy_start']:.1%} -> {r['accuracy_final']:.1%}",
                f"{r['gain_points']:+.1f}",
                num(r["generated_tokens_per_s"]),
                num(r["peak_pss_mb"]),
            ]
        )
    head = ["run", "training s", "trained parameters", "their state MB"]
    head += ["held-out accuracy", "points", "generated tokens/s", "peak PSS MB"]
    peft = data["peft"]
    check = (
        f"The LoRA run's adapters loaded with PEFT onto the base in plain transformers, "
        f"greedy `generate` on the {peft['problems']} held-out problems: {peft['accuracy']:.1%} "
        f"(`surge eval`: {peft['surge_eval_accuracy']:.1%})."
    )
    note = data.get("note")
    parts = [table(head, rows), check, *([note] if note else []), source_line("lora.json")]
    return "\n\n".join(parts)


TABLES: dict[str, Callable[[], str]] = {
    "suite": gen_suite,
    "headline": gen_headline,
    "suite-all": gen_suite_all,
    "default-solve": gen_default_solve,
    "pong-avx2": gen_pong_avx2,
    "marl": gen_marl,
    "memory": gen_memory,
    "ray-vs-local": gen_ray_vs_local,
    "ray-vs-local-pong": gen_ray_vs_local_pong,
    "replay": gen_replay,
    "apex": gen_apex,
    "replay-peers": gen_replay_peers,
    "llm-async": gen_llm_async,
    "gpu": gen_gpu,
    "regression-devices": gen_regression_devices,
    "llm-agents": gen_llm_agents,
    "psro-kuhn": lambda: gen_psro("kuhn"),
    "psro-leduc": lambda: gen_psro("leduc"),
    "pbt": gen_pbt,
    "lora": gen_lora,
}


# ---------------------------------------------------------------------------------------------
# rewriting the Markdown


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def render(text: str, where: str) -> str:
    def replace(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise KeyError(f"{where}: unknown results table {name!r}")
        body = TABLES[name]()
        if "\n" not in m.group("body"):
            return m.group(1) + body.replace("\n", " ") + m.group(4)
        return f"{m.group(1)}\n{body}\n{m.group(4)}"

    return MARKER.sub(replace, text)


def plot_changes() -> list[tuple[Path, bytes]]:
    """(destination, bytes) for every plot whose copy in docs/assets/results/ differs."""
    out = []
    for name in PLOTS:
        data = (RESULTS / name).read_bytes()
        dest = ASSETS / name
        if not dest.exists() or dest.read_bytes() != data:
            out.append((dest, data))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 with a diff if stale"
    )
    args = parser.parse_args(argv)
    stale = False
    for path in markdown_files():
        old = path.read_text()
        new = render(old, str(path.relative_to(ROOT)))
        if new == old:
            continue
        rel = str(path.relative_to(ROOT))
        if args.check:
            stale = True
            sys.stdout.writelines(
                difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), "a/" + rel, "b/" + rel
                )
            )
        else:
            path.write_text(new)
            print(f"wrote {rel}")
    for dest, _ in plot_changes():
        rel = str(dest.relative_to(ROOT))
        if args.check:
            stale = True
            print(f"{rel} differs from benchmarks/results/{dest.name}")
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(RESULTS / dest.name, dest)
            print(f"copied {rel}")
    if args.check and stale:
        print("results tables are stale: run .venv/bin/python benchmarks/results_tables.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
