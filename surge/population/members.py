"""A population's members as its controller sees them: each a whole `surge train` run in its
own directory (`member-<k>/`), started, resumed, watched and stopped as a child process.

What the controller needs to resume the population (`surge resume POPULATION_DIR`) is on
disk: each member's settings in force are its settings channel's newest message (surge/
tracking/hyperparams.py), and whether it finished is `members.json`, rewritten whenever a
member starts, is resumed or ends.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from surge.errors import UserError, WorkerFailure
from surge.tracking.checkpoint import latest_checkpoint
from surge.tracking.hyperparams import SettingsRequest, read_request, write_request

MAX_RESTARTS = 3
"""Times a member whose run failed is resumed before the population stops."""
STOP_GRACE_S = 60.0
"""After Ctrl+C, how long members may take to save their checkpoint."""
MEMBERS_FILE = "members.json"
"""In the population's directory: every member's state (`running` or `finished`)."""


@dataclass
class Member:
    """One member's run, as the controller sees it."""

    index: int
    run_dir: Path
    values: dict[str, float]
    """Its mutated settings in force."""
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    env_steps: int = 0
    score: float = math.nan
    last_decision: int = 0
    seq: int = 0
    """The newest message of its settings channel."""
    restarts: int = 0
    """Times the member was resumed after its run failed."""
    finished: bool = False
    """Its run ended on its own (budget, time or `stop_return`)."""
    _offset: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"member-{self.index}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def read_metrics(self, metric: str) -> None:
        """Take the member's new complete metrics rows: its env steps and newest score."""
        path = self.run_dir / "metrics.jsonl"
        try:
            with path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a row being written is read next time
        self._offset += end
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            self.env_steps = max(self.env_steps, int(row.get("env_steps", 0)))
            value = row.get(metric)
            if isinstance(value, int | float) and math.isfinite(value):
                self.score = float(value)
            if "steps_per_s" in row:
                self.rows.append(row)


def start(member: Member, config: Path, overrides: list[str]) -> None:
    """Start a member as its own `surge train` of the population's `config` (run with
    `population=null` and the member's own directory and start values among `overrides`);
    its start values are the channel's first message too, so its trainer logs the values in
    force (`hp/*`) from its first record, not only from its first exploit."""
    member.run_dir.mkdir(parents=True, exist_ok=True)
    write_request(member.run_dir, SettingsRequest(0, dict(member.values)))
    launch(member, ["train", str(config), *overrides])


def resume(member: Member, overrides: list[str]) -> None:
    """Continue a member from its newest checkpoint (`surge resume`)."""
    launch(member, ["resume", str(member.run_dir), *overrides])


def launch(member: Member, command: list[str]) -> None:
    """Run `surge COMMAND...` as the member's process, its output appended to its log."""
    if member.log is None:
        member.log = (member.run_dir.parent / f"{member.name}.log").open("ab")
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    member.process = subprocess.Popen(
        [sys.executable, "-m", "surge", *command],
        stdout=member.log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def check_exits(members: list[Member], overrides: dict[int, list[str]]) -> bool:
    """Mark the members whose run ended on its own as finished; a member whose run failed is
    resumed from its newest checkpoint (`surge resume` with its `overrides`, up to `MAX_RESTARTS`
    times: the others go on meanwhile); one that stopped on a config error (exit 2), or
    cannot be resumed, stops the population with the end of its log. True when a member's
    state changed."""
    changed = False
    for member in members:
        code = member.process.poll() if member.process is not None else None
        if code is None or member.finished:
            continue
        if code == 0:
            member.finished = changed = True
            continue
        log = member.run_dir.parent / f"{member.name}.log"
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-20:])
        if code == 2:
            raise UserError(f"{member.name} stopped on an error:\n{tail}")
        if member.restarts < MAX_RESTARTS and latest_checkpoint(member.run_dir) is not None:
            member.restarts += 1
            changed = True
            print(
                f"surge: {member.name} exited with {code}; resuming it from its newest "
                f"checkpoint ({member.restarts} of {MAX_RESTARTS})",
                file=sys.stderr,
            )
            resume(member, overrides[member.index])
            continue
        raise WorkerFailure(member.name, f"exited with {code}:\n{tail}")
    return changed


def stop(members: list[Member]) -> None:
    """Ask every running member to save a checkpoint and stop (SIGINT, as Ctrl+C does);
    kill those that have not after `STOP_GRACE_S`."""
    running = [m.process for m in members if m.process is not None and m.running]
    for process in running:
        process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in running:
        try:
            process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def save_states(run_dir: Path, members: list[Member]) -> None:
    """`members.json`: each member's index, state and restarts (written whole, then renamed:
    a reader never sees half of it)."""
    states = [
        {"member": m.name, "state": "finished" if m.finished else "running", "restarts": m.restarts}
        for m in members
    ]
    tmp = run_dir / f".{MEMBERS_FILE}.tmp"
    tmp.write_text(json.dumps(states, indent=1))
    tmp.replace(run_dir / MEMBERS_FILE)


def load_members(run_dir: Path, size: int) -> list[Member]:
    """The members of the population in `run_dir` as its controller left them: their
    settings in force from their channels, finished or not from `members.json`."""
    path = run_dir / MEMBERS_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no {MEMBERS_FILE}: not a population directory surge can resume",
            "pass the directory a population's `surge train` created",
        )
    states = {s["member"]: s for s in json.loads(path.read_text())}
    members = []
    for k in range(size):
        member_dir = run_dir / f"member-{k}"
        request = read_request(member_dir)
        if request is None:
            raise UserError(
                f"{member_dir} has no settings channel: the population never started it",
                "start the population afresh with `surge train`",
            )
        state = states.get(f"member-{k}", {})
        member = Member(k, member_dir, dict(request.values), seq=request.seq)
        member.finished = state.get("state") == "finished"
        member.restarts = int(state.get("restarts", 0))
        members.append(member)
    return members
