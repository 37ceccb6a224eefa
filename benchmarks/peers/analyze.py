"""Numbers from a common JSONL log, computed the same way for every contender.

    python benchmarks/peers/analyze.py LOG.jsonl [--target 475] [--window 20]

- `sps_steady`: env steps per second from the moment 10% of the run's logged steps were done
  (interpolated between records) to the last record: startup and warm-up excluded; null
  with fewer than 3 records;
- `agent_steps`, `agent_sps_steady`: the same for agent steps, when the records carry them
  (multi-agent envs: one agent step per live agent per env step); else null;
- `solved_s` / `solved_steps`: wall time since launch and env steps when the mean of the
  last `window` finished episodes first reaches `target` (null if never); a log that carries
  the library's own windowed mean (`return_mean`, e.g. surge's metrics) is read directly;
- `final_return_mean`: mean of the last `window` episodes at the end;
- also `steps`, `duration_s` (last record; records after the first `end` record, written
  when the run was told to stop, are ignored), `first_step_s` (first record with steps > 0:
  startup cost) and `episodes`.

Prints one JSON object; importable as `analyze(path)`.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path
from typing import Any


def read_log(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if isinstance(rec, dict) and "t" in rec and "steps" in rec:
            records.append(rec)
    records.sort(key=lambda r: (r["t"], r["steps"]))
    # steps taken after the run was told to stop (workers still shutting down) are not
    # training: cut at the first `end` record
    for i, rec in enumerate(records):
        if rec.get("end"):
            return records[: i + 1]
    return records


def steady_rate(records: list[dict[str, Any]], key: str) -> float | None:
    """`key` (a step count) per second from the moment 10% of its final value was reached
    (interpolated between the records around it: heartbeats are ~1,000 steps apart, so a
    short run has few records) to the record with the most; null with fewer than 3 records
    past 0 or no time between those two points."""
    if sum(1 for r in records if r[key] > 0) < 3:
        return None
    last = max(records, key=lambda r: (r[key], r["t"]))
    tenth = 0.1 * last[key]
    i = next(i for i, r in enumerate(records) if r[key] >= tenth)
    after = records[i]
    before = records[i - 1] if i > 0 else after
    if after[key] > before[key]:
        frac = (tenth - before[key]) / (after[key] - before[key])
        t10 = before["t"] + frac * (after["t"] - before["t"])
    else:
        t10 = after["t"]
    if last["t"] <= t10:
        return None
    return round((last[key] - tenth) / (last["t"] - t10), 1)


def analyze_records(
    records: list[dict[str, Any]], target: float | None = 475.0, window: int = 20
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "steps": 0,
        "agent_steps": None,
        "agent_sps_steady": None,
        "duration_s": None,
        "first_step_s": None,
        "sps_steady": None,
        "episodes": 0,
        "final_return_mean": None,
        "solved_s": None,
        "solved_steps": None,
    }
    if not records:
        return out
    out["steps"] = max(r["steps"] for r in records)
    out["duration_s"] = round(records[-1]["t"], 2)
    first = next((r for r in records if r["steps"] > 0), None)
    out["first_step_s"] = round(first["t"], 2) if first else None
    out["sps_steady"] = steady_rate(records, "steps")
    counted = [r for r in records if "agent_steps" in r]
    if counted:
        out["agent_steps"] = max(r["agent_steps"] for r in counted)
        out["agent_sps_steady"] = steady_rate(counted, "agent_steps")

    recent: collections.deque[float] = collections.deque(maxlen=window)
    final_mean = None
    for r in records:
        mean = None
        if "return" in r:
            out["episodes"] += 1
            recent.append(float(r["return"]))
            if len(recent) == window:
                mean = statistics.fmean(recent)
            final_mean = statistics.fmean(recent)
        elif r.get("return_mean") is not None:
            mean = float(r["return_mean"])
            final_mean = mean
            if "episodes" in r:
                out["episodes"] = int(r["episodes"])
        if target is not None and mean is not None and out["solved_s"] is None and mean >= target:
            out["solved_s"] = round(r["t"], 2)
            out["solved_steps"] = r["steps"]
    out["final_return_mean"] = None if final_mean is None else round(final_mean, 2)
    return out


def analyze(path: Path, target: float | None = 475.0, window: int = 20) -> dict[str, Any]:
    return analyze_records(read_log(path), target, window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--target", type=float, default=475.0, help="solve threshold")
    parser.add_argument("--no-target", action="store_true", help="do not look for a solve")
    parser.add_argument("--window", type=int, default=20)
    args = parser.parse_args()
    target = None if args.no_target else args.target
    print(json.dumps(analyze(args.log, target, args.window)))


if __name__ == "__main__":
    main()
