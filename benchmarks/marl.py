"""Multi-agent throughput side by side: surge's MAPPO and IPPO beside RLlib and BenchMARL on
PettingZoo MPE simple_spread, in one run.

    python3 benchmarks/peers/setup_venvs.py rllib benchmarl   # once: the peers' venvs
    .venv/bin/python benchmarks/marl.py                       # every contender, 300 s, seed 1
    .venv/bin/python benchmarks/marl.py --secs 120 --seeds 1 2 \
        --contenders surge-mappo,rllib-ppo,benchmarl-mappo
    .venv/bin/python benchmarks/marl.py --report-only         # rebuild the report

Every contender trains on `mpe2.simple_spread_v3` (3 agents, local_ratio 0.5, 25-step
episodes, discrete actions) with the same batch settings (peers/marl_settings.MATCHED: 32
envs x 25 steps = 800 env steps = 2,400 agent steps per batch, 10 epochs of one minibatch,
64x64 ReLU actor and critic, lr 7e-4), for `--secs` seconds of wall time from its launch.
Runs go one at a time, each a fresh process under peers/memmon.py (peak memory of the whole
process tree, and `foreign_cores`: the CPU other processes used meanwhile; a run with 0.3 or
more is marked noisy). Peers stop themselves at `--secs`; surge gets SIGINT then (it saves
a checkpoint and exits).

- agent-steps/s: agent steps per second from 10% of the run's agent steps to its end
  (start-up excluded; peers/analyze.py's `steady_rate`); env steps/s likewise. Peers count
  both inside their envs (peers/spread_env.LogSpread); surge's trainer logs both in
  metrics.jsonl (`env_steps`, `agent_steps`).
- final return: the mean team return (summed over the 3 agents) of the last 100 episodes
  (surge: `episode_return_mean` of its last record, the preset's `return_window` of 100).
  A uniformly random policy gets about -80.
- ratio: a contender's agent-steps/s over the fastest peer's in the same session (one
  invocation of this script).

Run files: benchmarks/results/marl_runs/<session>/<contender>-s<seed>/ (not committed):
cmd.txt, stdout.log, log.jsonl (the common log; surge's converted from its metrics),
mem.json, meta.json. The report, benchmarks/results/marl.md and marl.json, is built from
every session found there, newest first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
VENVS = ROOT / "benchmarks" / ".venvs"
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "marl_runs"
sys.path.insert(0, str(PEERS))

import analyze  # noqa: E402  (benchmarks/peers, standard library only)
import machine  # noqa: E402  (benchmarks/, next to this file)
import memmon  # noqa: E402
from marl_settings import MATCHED  # noqa: E402

RETURN_WINDOW = 100
"""Episodes in the final mean return (surge's spread-* presets' `return_window`)."""
STARTUP_SLACK = 45.0  # seconds past --secs before memmon interrupts a peer that overran
GRACE = 15.0  # SIGINT -> SIGKILL
NOISY_FOREIGN_CORES = 0.3  # a run during which other processes used this much CPU is noisy

# =====================================================================================
# surge: its preset per contender and the overrides that pin the matched batch settings.
# EDIT HERE when the spread-* presets change. A contender whose preset does not exist (yet)
# is skipped with a note.
# =====================================================================================
SURGE_MATCHED = [
    "workers.actors=2",  # 2 x 2 x 8 = MATCHED["n_envs"] envs
    "workers.ring_size=2",
    "workers.envs_per_group=8",
    f"ppo.rollout_len={MATCHED['rollout_len']}",
    f"ppo.epochs={MATCHED['epochs']}",
    f"ppo.minibatches={MATCHED['minibatches']}",
    f"return_window={RETURN_WINDOW}",
]
UNTIL_STOPPED = ["stop_return=null", "total_env_steps=1000000000"]


@dataclass(frozen=True)
class Contender:
    label: str
    preset: str = ""  # surge
    venv: str = ""  # peers
    script: str = ""
    args: tuple[str, ...] = ()

    @property
    def is_surge(self) -> bool:
        return bool(self.preset)


CONTENDERS: dict[str, Contender] = {
    "surge-mappo": Contender("surge MAPPO (spread-mappo)", preset="spread-mappo"),
    "surge-ippo": Contender("surge IPPO (spread-ippo)", preset="spread-ippo"),
    "rllib-ppo": Contender(
        "RLlib PPO, one shared policy (no centralised critic in 2.60's new stack)",
        venv="rllib",
        script="rllib_mappo.py",
    ),
    "rllib-ppo-2r": Contender(
        "RLlib PPO as above, 2 env runners x 16 envs",
        venv="rllib",
        script="rllib_mappo.py",
        args=("--env-runners=2",),
    ),
    "benchmarl-mappo": Contender(
        "BenchMARL MAPPO",
        venv="benchmarl",
        script="benchmarl_mappo.py",
        args=("--algorithm=mappo",),
    ),
    "benchmarl-ippo": Contender(
        "BenchMARL IPPO", venv="benchmarl", script="benchmarl_mappo.py", args=("--algorithm=ippo",)
    ),
}
PEERS_NAMES = tuple(n for n, c in CONTENDERS.items() if not c.is_surge)


# ------------------------------------------------------------------------ surge


def surge_presets(py: str) -> set[str] | None:
    """The presets `py -m surge presets` lists; None if surge does not run there."""
    out = subprocess.run(
        [py, "-m", "surge", "presets"], cwd=RUNS, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        return None
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def surge_source(py: str) -> str | None:
    """Where the surge that `py` imports lives, with its git commit (and `+dirty` if its tree
    has changes): which surge a session measured."""
    out = subprocess.run(
        [py, "-c", "import os, surge; print(os.path.dirname(os.path.dirname(surge.__file__)))"],
        cwd=RUNS, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        return None
    tree = out.stdout.strip()
    git = ["git", "-C", tree]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "surge"], capture_output=True)
    commit = head.stdout.strip() if head.returncode == 0 else "?"
    return f"{tree} @ {commit}{'+dirty' if dirty.stdout.strip() else ''}"


def surge_common_log(metrics: Path, launched: float, out: Path) -> None:
    """surge's metrics.jsonl as a common log on the launch clock (each record carries the Unix
    `time` it was written at)."""
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    with open(out, "w") as f:
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:  # a line cut short by the stop
                continue
            if r.get("time") is None or r.get("env_steps") is None:
                continue
            rec: dict[str, Any] = {"t": round(float(r["time"]) - launched, 3)}
            rec["steps"] = int(r["env_steps"])
            if r.get("agent_steps") is not None:
                rec["agent_steps"] = int(r["agent_steps"])
            rec["return_mean"] = r.get("episode_return_mean")
            if r.get("episodes") is not None:
                rec["episodes"] = r["episodes"]
            f.write(json.dumps(rec) + "\n")


# ------------------------------------------------------------------------ running


def run_one(
    name: str, seed: int, secs: float, session_dir: Path, surge_py: str | None,
    presets: set[str] | None, quiet_wait: float,
) -> dict[str, Any]:  # fmt: skip
    c = CONTENDERS[name]
    run_dir = session_dir / f"{name}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    meta: dict[str, Any] = {"contender": name, "seed": seed, "secs": secs, "status": "ok"}
    log_path = run_dir / "log.jsonl"
    if c.is_surge:
        if surge_py is None or presets is None:
            meta.update(status="skipped", note="surge does not run here (use --surge-python)")
        elif c.preset not in presets:
            meta.update(status="skipped", note=f"surge preset {c.preset!r} does not exist yet")
        cmd = [
            str(surge_py), "-m", "surge", "train", c.preset, *SURGE_MATCHED, *UNTIL_STOPPED,
            f"seed={seed}", f"run_dir={run_dir / 'surge-run'}", "log.interval_s=1",
            "log.progress=false",
        ]  # fmt: skip
        timeout = secs
    else:
        py = VENVS / c.venv / "bin" / "python"
        if not (VENVS / c.venv / ".complete").exists():
            meta.update(
                status="skipped",
                note=f"venv {c.venv} missing: run benchmarks/peers/setup_venvs.py {c.venv}",
            )
        cmd = [
            str(py), str(PEERS / c.script), f"--max-secs={secs}", f"--log={log_path}",
            f"--seed={seed}", "--threads=1", *c.args,
        ]  # fmt: skip
        timeout = secs + STARTUP_SLACK
    meta["cmd"] = cmd
    if meta["status"] == "skipped":
        print(f"[marl] {name} seed {seed}: skipped: {meta['note']}", flush=True)
        (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        return meta
    (run_dir / "cmd.txt").write_text(" ".join(cmd) + "\n")
    if quiet_wait > 0:
        waited = time.monotonic()
        busy = memmon.wait_for_quiet(quiet_wait, NOISY_FOREIGN_CORES)
        meta["busy_before"] = round(busy, 2)
        meta["waited_s"] = round(time.monotonic() - waited, 1)
    launched = time.time()
    meta.update(launched=launched, loadavg_at_start=os.getloadavg())
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", PEER_T0=repr(launched),
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
    )  # fmt: skip
    print(f"[marl] {name} seed {seed}: {' '.join(cmd)}", flush=True)
    # surge runs from the run directory: `-m surge` then imports the surge installed in
    # its python, never a checkout that happens to be the working directory
    with open(run_dir / "stdout.log", "w") as out:
        memmon.run(
            cmd, timeout=timeout, out=run_dir / "mem.json", grace=GRACE, env=env,
            cwd=run_dir if c.is_surge else ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    if c.is_surge:
        surge_common_log(run_dir / "surge-run" / "metrics.jsonl", launched, log_path)
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    row = summarise(run_dir)
    print(
        f"[marl]   agent-steps/s {row['agent_sps']} env steps/s {row['env_sps']} "
        f"return {row['final_return']} steps {row['steps']} PSS {row['peak_pss_mb']} MB "
        f"foreign {row['foreign_cores']} {row['note']}",
        flush=True,
    )
    return meta


def raw_env_rate(secs: float) -> dict[str, Any] | None:
    """simple_spread alone (random actions, one process, no learning), in the rllib venv."""
    for venv in ("rllib", "benchmarl"):
        py = VENVS / venv / "bin" / "python"
        if (VENVS / venv / ".complete").exists():
            out = subprocess.run(
                [str(py), str(PEERS / "spread_env.py"), f"--secs={secs}"],
                capture_output=True, text=True, check=False, cwd=ROOT,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )  # fmt: skip
            if out.returncode == 0:
                return {"venv": venv, **json.loads(out.stdout.strip().splitlines()[-1])}
    return None


# ------------------------------------------------------------------------ report


def summarise(run_dir: Path) -> dict[str, Any]:
    meta = json.loads((run_dir / "meta.json").read_text())
    row: dict[str, Any] = {
        "run": run_dir.name, "contender": meta["contender"], "seed": meta["seed"],
        "status": meta["status"], "note": meta.get("note", ""), "agent_sps": None,
        "env_sps": None, "final_return": None, "steps": None, "agent_steps": None,
        "episodes": None, "startup_s": None, "peak_pss_mb": None, "peak_rss_mb": None,
        "foreign_cores": None, "cores_used": None, "cpu_us_per_agent_step": None,
        "wall_s": None, "exit_code": None,
    }  # fmt: skip
    if meta["status"] == "skipped":
        return row
    log = analyze.read_log(run_dir / "log.jsonl") if (run_dir / "log.jsonl").exists() else []
    info = analyze.analyze_records(log, target=None, window=RETURN_WINDOW)
    mem_path = run_dir / "mem.json"
    mem = json.loads(mem_path.read_text()) if mem_path.exists() else {}
    row.update(
        agent_sps=info["agent_sps_steady"], env_sps=info["sps_steady"],
        final_return=info["final_return_mean"], steps=info["steps"],
        agent_steps=info["agent_steps"], episodes=info["episodes"],
        startup_s=info["first_step_s"],
        peak_pss_mb=mem.get("peak_pss_mb"), peak_rss_mb=mem.get("peak_rss_mb"),
        foreign_cores=mem.get("foreign_cores"), cores_used=mem.get("cores_used"),
        wall_s=mem.get("wall_s"), exit_code=mem.get("exit_code"),
    )  # fmt: skip
    if mem.get("tree_cpu_s") and info["agent_steps"]:
        row["cpu_us_per_agent_step"] = round(1e6 * mem["tree_cpu_s"] / info["agent_steps"], 1)
    notes = [row["note"]] if row["note"] else []
    if not info["steps"]:
        row["status"] = "failed"
        notes.append(f"no env step logged (exit {mem.get('exit_code')})")
    elif mem.get("exit_code") not in (0, 130, -2):  # 130 / -2: stopped by SIGINT
        notes.append(f"exit code {mem.get('exit_code')}")
    if info["steps"] and info["agent_steps"] is None:
        notes.append("no agent steps logged")
    if (mem.get("foreign_cores") or 0.0) >= NOISY_FOREIGN_CORES:
        notes.append(f"noisy: other processes used {mem['foreign_cores']:.2f} cores")
    row["note"] = "; ".join(notes)
    return row


def summarise_session(session: Path) -> dict[str, Any]:
    rows = [summarise(d) for d in sorted(session.iterdir()) if (d / "meta.json").exists()]
    info_path = session / "session.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    per: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name in CONTENDERS:
        mine = [r for r in rows if r["contender"] == name and r["status"] == "ok"]
        if not mine:
            others = [r for r in rows if r["contender"] == name]
            if others:
                skipped[name] = f"{others[0]['status']}: {others[0]['note']}"
            continue
        rates = [r["agent_sps"] for r in mine if r["agent_sps"]]
        returns = [r["final_return"] for r in mine if r["final_return"] is not None]
        per[name] = {
            "runs": len(mine),
            "agent_sps": statistics.median(rates) if rates else None,
            "env_sps": statistics.median([r["env_sps"] for r in mine if r["env_sps"]] or [0]),
            "return_mean": statistics.fmean(returns) if returns else None,
            "return_std": statistics.pstdev(returns) if len(returns) > 1 else None,
            "steps": statistics.median([r["steps"] for r in mine]),
            "peak_pss_mb": max(r["peak_pss_mb"] or 0 for r in mine),
            "cpu_us_per_agent_step": statistics.median(
                [r["cpu_us_per_agent_step"] for r in mine if r["cpu_us_per_agent_step"]] or [0]
            ),
            "foreign_cores_max": max(r["foreign_cores"] or 0 for r in mine),
        }
    peer_rates = {n: s["agent_sps"] for n, s in per.items() if n in PEERS_NAMES and s["agent_sps"]}
    fastest = max(peer_rates, key=lambda n: peer_rates[n]) if peer_rates else None
    for s in per.values():
        s["ratio"] = s["agent_sps"] / peer_rates[fastest] if fastest and s["agent_sps"] else None
    return {
        "session": session.name, **info, "fastest_peer": fastest, "summary": per,
        "not_run": skipped, "runs": rows,
    }  # fmt: skip


def _fmt(x: Any, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


SETTINGS = """\
Matched settings (benchmarks/peers/marl_settings.py), for every contender where its library
allows: 32 simple_spread envs x 25 steps per batch (800 env steps, 2,400 agent steps; one
whole episode per env), 10 epochs of one minibatch (the whole batch), Adam lr 7e-4 constant,
gamma 0.99, GAE lambda 0.95, clip 0.2, entropy 0.01, value coefficient 1, grad norm 10,
separate 64x64 ReLU actor and critic, actor shared by the 3 agents, 1 torch thread per
process.

- surge: the preset, with `{surge}` (and `{until}`).
- RLlib 2.60 PPO, new API stack (peers/rllib_mappo.py): one env runner process with the 32
  envs (`rllib-ppo`) or two with 16 each, half a CPU each (`rllib-ppo-2r`: sampling on both
  cores), the learner in the driver; batch counted in agent steps (2,400); one RLModule shared
  by the agents. RLlib 2.60 has no centralised critic on its new stack (only an old-stack
  example), so its critic sees each agent's own observation: parameter-sharing IPPO. Its
  value loss is clipped at 10 (default); it samples 11 minibatches of 2,400 per batch.
- BenchMARL 1.5.2 MAPPO / IPPO (peers/benchmarl_mappo.py, TorchRL 0.11.1): the 32 envs in a
  TorchRL SerialEnv (its default for an unvectorised env), MAPPO's critic on the 54-float
  global state, IPPO's on each agent's observation; BenchMARL's PettingZoo task class with
  the env from mpe2 (its own task looks for `pettingzoo.mpe`, which PettingZoo 1.27 moved out
  to mpe2). Its own: advantages not normalised, one Adam per loss (eps 1e-6).
- Differences kept: surge's actor and critic also get a one-hot agent id and its critic value
  normalisation (the presets'); the peers use their libraries' defaults (no agent id, no
  value normalisation).
"""


def report() -> None:
    sessions = sorted((p for p in RUNS.glob("*") if p.is_dir()), reverse=True)
    data = [summarise_session(s) for s in sessions]
    data = [d for d in data if d["runs"]]
    (RESULTS / "marl.json").write_text(
        json.dumps({"machine": machine.describe(), "sessions": data}, indent=2) + "\n"
    )
    lines = [
        "# Multi-agent throughput: surge beside RLlib and BenchMARL on simple_spread",
        "",
        machine.summary() + ".",
        "",
        "Generated by `benchmarks/marl.py` from the runs in benchmarks/results/marl_runs/ (one",
        "section per session: one invocation, contenders one at a time). PettingZoo MPE",
        "`simple_spread_v3` from `mpe2` (N=3, local_ratio 0.5, max_cycles 25, discrete",
        "actions). agent-steps/s and env steps/s: steady rates from 10% of the run's steps to",
        "its end; final return: mean team return (summed over the 3 agents) of the last 100",
        "episodes (random policy: about -80); ratio: agent-steps/s over the fastest peer's in",
        "the same session; foreign: cores other processes used during the run (>= 0.3: noisy);",
        "CPU us / agent step: CPU time of the run's whole process tree (start-up included) per",
        "agent step, much less sensitive to neighbours than a rate.",
        "",
        SETTINGS.format(surge=" ".join(SURGE_MATCHED), until=" ".join(UNTIL_STOPPED)),
    ]
    for d in data:
        raw = d.get("raw_env")
        lines += [
            f"## Session {d['session']}",
            "",
            f"{d.get('secs', '?')} s per run, seeds {d.get('seeds', '?')}; machine busy "
            f"before the session: {d.get('busy_before', '?')} cores."
            + (f" surge: {d['surge']}." if d.get("surge") else "")
            + (
                f" simple_spread alone (random actions, one process, 10 s): "
                f"{_fmt(raw['env_sps'])} env steps/s = {_fmt(raw['agent_sps'])} agent steps/s."
                if raw
                else ""
            ),
            "",
            "| contender | runs | agent-steps/s (median) | env steps/s | ratio to fastest peer "
            "| final return (mean +- std) | env steps reached | CPU us / agent step | peak PSS MB "
            "| foreign (max) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, s in d["summary"].items():
            ret = _fmt(s["return_mean"], ".1f")
            if s["return_std"] is not None:
                ret += f" +- {s['return_std']:.1f}"
            fastest = " (fastest peer)" if name == d["fastest_peer"] else ""
            lines.append(
                f"| {CONTENDERS[name].label}{fastest} | {s['runs']} | {_fmt(s['agent_sps'])} "
                f"| {_fmt(s['env_sps'])} | {_fmt(s['ratio'], '.2f')} | {ret} | "
                f"{_fmt(s['steps'])} | {_fmt(s['cpu_us_per_agent_step'])} | "
                f"{_fmt(s['peak_pss_mb'])} | "
                f"{_fmt(s['foreign_cores_max'], '.2f')} |"
            )
        for name, why in d["not_run"].items():
            lines.append(f"| {CONTENDERS[name].label} | 0 | {why} | | | | | | | |")
        lines += [
            "",
            "| run | status | agent-steps/s | env steps/s | final return | env steps | agent "
            "steps | episodes | first step s | CPU us / agent step | peak PSS MB | peak RSS MB "
            "| cores used | foreign | wall s | note |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in d["runs"]:
            lines.append(
                f"| {r['run']} | {r['status']} | {_fmt(r['agent_sps'])} | {_fmt(r['env_sps'])} "
                f"| {_fmt(r['final_return'], '.1f')} | {_fmt(r['steps'])} "
                f"| {_fmt(r['agent_steps'])} | {_fmt(r['episodes'])} "
                f"| {_fmt(r['startup_s'], '.1f')} | {_fmt(r['cpu_us_per_agent_step'])} "
                f"| {_fmt(r['peak_pss_mb'])} "
                f"| {_fmt(r['peak_rss_mb'])} | {_fmt(r['cores_used'], '.2f')} "
                f"| {_fmt(r['foreign_cores'], '.2f')} | {_fmt(r['wall_s'])} | {r['note']} |"
            )
        lines.append("")
    (RESULTS / "marl.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    # started in the background by a non-interactive shell, this process would ignore SIGINT
    # (and so Ctrl+C through a job-control shell would not stop the run under way)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--secs", type=float, default=300.0, help="wall time per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument(
        "--contenders", default=",".join(CONTENDERS), help=f"comma-separated, of {list(CONTENDERS)}"
    )
    p.add_argument("--surge-python", default=sys.executable, help="the python that runs surge")
    p.add_argument("--quiet-wait", type=float, default=0.0, help="wait up to this for quiet")
    p.add_argument("--session", default="", help="session name (default: the start time)")
    p.add_argument("--report-only", action="store_true", help="run nothing; rebuild the report")
    args = p.parse_args()
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        p.error(f"unknown contender(s) {unknown}; choose from {list(CONTENDERS)}")
    if not args.report_only:
        RUNS.mkdir(parents=True, exist_ok=True)
        session = RUNS / (args.session or time.strftime("%Y%m%d-%H%M%S"))
        session.mkdir(parents=True, exist_ok=True)
        presets = surge_presets(args.surge_python) if any(
            CONTENDERS[n].is_surge for n in names
        ) else None  # fmt: skip
        info = {
            "secs": args.secs, "seeds": args.seeds, "contenders": names,
            "busy_before": round(memmon.busy_cores(), 2), "raw_env": raw_env_rate(10.0),
            "surge": surge_source(args.surge_python) if presets is not None else None,
        }  # fmt: skip
        (session / "session.json").write_text(json.dumps(info, indent=2) + "\n")
        for seed in args.seeds:
            for name in names:
                run_one(name, seed, args.secs, session, args.surge_python, presets, args.quiet_wait)
    report()


if __name__ == "__main__":
    main()
