"""Run a command and measure its whole process tree: peak memory, CPU, and CPU used by
everything else on the machine.

    python benchmarks/peers/memmon.py --out mem.json --timeout 120 -- CMD ARGS...

The command starts in a new session (its own process group). Every `--interval` seconds
(0.5) the monitor finds the tree: the command's descendants, every process of its session,
and every process seen before that is still alive (so daemons that re-parent themselves,
like Ray's, stay counted) and their descendants. It sums RSS and PSS (from
/proc/PID/smaps_rollup) over the tree and keeps the peaks.

At the timeout it sends SIGINT to the tree, then SIGKILL after `--grace` seconds. When the
command exits, whatever is left of its tree gets SIGTERM, then SIGKILL. `foreign_cores` is
the CPU used by processes outside the tree during the run (/proc/stat busy time minus the
tree's), in cores: a noisy neighbour shows up there.

Writes one JSON object (to --out, and to stdout with --print). Only the standard library is
used, so any Python runs it; `run()` is the API.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _proc_table() -> dict[int, tuple[int, int, int, int]]:
    """pid -> (ppid, session, cpu ticks utime+stime, starttime) for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is state (field 3); ppid=4, session=6, utime=14, stime=15, starttime=22
        table[int(entry)] = (
            int(fields[1]),
            int(fields[3]),
            int(fields[11]) + int(fields[12]),
            int(fields[19]),
        )
    return table


def _busy_ticks() -> int:
    """Busy CPU ticks of the whole machine: user+nice+system+irq+softirq."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in parts[1:8])
    return user + nice + system + irq + softirq


def busy_cores(seconds: float = 2.0) -> float:
    """Cores the whole machine kept busy over the next `seconds`."""
    before = _busy_ticks()
    time.sleep(seconds)
    return (_busy_ticks() - before) / TICK / seconds


def wait_for_quiet(max_wait: float, threshold: float = 0.3, poll: float = 10.0) -> float:
    """Waits (up to max_wait seconds) until other processes use less than `threshold`
    cores; returns the busy cores measured last."""
    deadline = time.monotonic() + max_wait
    busy = busy_cores()
    while busy >= threshold and time.monotonic() < deadline:
        time.sleep(poll)
        busy = busy_cores()
    return busy


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in kB; (0, 0) if it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
                    break
    except OSError:
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * PAGE_KB
            pss = rss
        except OSError:
            pass
    return rss, pss


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Tree:
    """The set of processes that belong to one run."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.known: dict[int, int] = {root: -1}  # pid -> starttime (-1: not read yet)
        self.cpu: dict[tuple[int, int], int] = {}  # (pid, starttime) -> last cpu ticks

    def refresh(self) -> list[int]:
        table = _proc_table()
        members: set[int] = set()
        for pid, start in list(self.known.items()):
            row = table.get(pid)
            if row is not None and (start == -1 or row[3] == start):
                members.add(pid)
        members |= {pid for pid, row in table.items() if row[1] == self.root}
        children: dict[int, list[int]] = {}
        for pid, row in table.items():
            children.setdefault(row[0], []).append(pid)
        todo = list(members)
        while todo:
            for c in children.get(todo.pop(), []):
                if c not in members:
                    members.add(c)
                    todo.append(c)
        self.known = {pid: table[pid][3] for pid in members}
        for pid in members:
            self.cpu[(pid, table[pid][3])] = table[pid][2]
        return sorted(members)

    def cpu_ticks(self) -> int:
        return sum(self.cpu.values())

    def signal(self, sig: int) -> int:
        sent = 0
        for pid in self.refresh():
            try:
                os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        return sent


def run(
    cmd: list[str],
    *,
    timeout: float,
    out: Path | None = None,
    grace: float = 15.0,
    interval: float = 0.5,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    stdout: Any = None,
    stderr: Any = None,
    on_sample: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """Run cmd under the monitor; returns (and writes to `out`) the measurement."""
    busy0 = _busy_ticks()
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        # a monitor started in the background by a non-interactive shell ignores SIGINT,
        # and the command would inherit that: then the SIGINT at the timeout does nothing
        preexec_fn=_default_sigint,
    )
    tree = Tree(proc.pid)
    peak_rss = peak_pss = peak_procs = samples = 0
    timed_out = False
    killed_at: float | None = None
    exit_code = None
    try:
        while True:
            members = tree.refresh()
            rss = pss = 0
            for pid in members:
                r, p = _memory_kb(pid)
                rss += r
                pss += p
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            peak_procs = max(peak_procs, len(members))
            samples += 1
            elapsed = time.monotonic() - started
            if on_sample is not None:
                on_sample(elapsed)
            exit_code = proc.poll()
            if exit_code is not None:
                break
            if not timed_out and elapsed >= timeout:
                timed_out = True
                killed_at = elapsed
                tree.signal(signal.SIGINT)
            elif killed_at is not None and elapsed >= killed_at + grace:
                tree.signal(signal.SIGKILL)
                killed_at = float("inf")
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=interval)
    except BaseException:  # Ctrl+C (or any error) in the monitor: the run must not outlive it
        tree.signal(signal.SIGINT)
        deadline = time.monotonic() + 5.0
        while tree.refresh() and time.monotonic() < deadline:
            time.sleep(0.2)
        tree.signal(signal.SIGKILL)
        raise
    wall = time.monotonic() - started
    # whatever the command left behind (daemons, orphaned workers) is part of the run
    leftovers = len(tree.refresh())
    if leftovers:
        deadline = time.monotonic() + 5.0
        while tree.refresh() and time.monotonic() < deadline:
            time.sleep(0.2)
        tree.signal(signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        while tree.refresh() and time.monotonic() < deadline:
            time.sleep(0.2)
        tree.signal(signal.SIGKILL)
    cpu_s = tree.cpu_ticks() / TICK
    busy_s = (_busy_ticks() - busy0) / TICK
    result = {
        "cmd": cmd,
        "exit_code": exit_code,
        "timed_out": timed_out,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(peak_rss / 1024, 1),
        "peak_pss_mb": round(peak_pss / 1024, 1),
        "peak_procs": peak_procs,
        "tree_cpu_s": round(cpu_s, 1),
        "cores_used": round(cpu_s / max(wall, 1e-9), 2),
        "foreign_cores": round(max(0.0, busy_s - cpu_s) / max(wall, 1e-9), 2),
        "leftover_procs": leftovers,
        "samples": samples,
    }
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--timeout", type=float, required=True, help="seconds, then SIGINT")
    parser.add_argument("--grace", type=float, default=15.0, help="SIGINT -> SIGKILL seconds")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--print", action="store_true", help="also print the JSON")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given (put it after --)")
    os.environ.setdefault("PEER_T0", repr(time.time()))
    result = run(cmd, timeout=args.timeout, out=args.out, grace=args.grace, interval=args.interval)
    if args.print or args.out is None:
        print(json.dumps(result))
    code = result["exit_code"]
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
