"""The run directory: where one run keeps its config, versions, metrics and checkpoints.

runs/<name>-<YYYYmmdd-HHMMSS>/
    config.yaml        the resolved config (every key); `surge resume` reads it
    versions.json      python / library versions, git revision, command line
    metrics.jsonl      see tracking/metrics.py
    tensorboard/       TensorBoard event files
    checkpoints/       see tracking/checkpoint.py
    workers.json       live worker table (name, pid, host, state, restarts; node_id on Ray)
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from surge.config.load import config_from_dict, dump_yaml, read_yaml
from surge.config.schema import ExperimentConfig
from surge.errors import UserError
from surge.tracking.files import atomic_writer

CONFIG_FILE = "config.yaml"
VERSIONS_FILE = "versions.json"
WORKERS_FILE = "workers.json"


def create_run_dir(cfg: ExperimentConfig, name: str) -> Path:
    """Create the run directory and write config.yaml and versions.json into it.

    `cfg.run_dir` if set, else runs/<name>-<timestamp> under the current directory. The
    saved config has run_dir set to the directory actually used.
    """
    if cfg.run_dir:
        path = Path(cfg.run_dir)
        if (path / CONFIG_FILE).exists():
            raise UserError(
                f"run_dir {path} already holds a run ({CONFIG_FILE} exists)",
                f"continue it with `surge resume {path}`, or choose another run_dir",
            )
        path.mkdir(parents=True, exist_ok=True)
    else:
        path = _fresh_dir(Path("runs"), f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    dump_yaml(dataclasses.replace(cfg, run_dir=str(path)), path / CONFIG_FILE)
    (path / VERSIONS_FILE).write_text(json.dumps(collect_versions(), indent=2) + "\n")
    return path


def discard_run_dir(path: Path) -> None:
    """Undo `create_run_dir` for a run that never started (its preparation failed): its two
    files, and the directory if nothing else is in it."""
    for name in (CONFIG_FILE, VERSIONS_FILE):
        (path / name).unlink(missing_ok=True)
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def _fresh_dir(parent: Path, base: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    for i in range(1, 1000):
        path = parent / (base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir()  # exist_ok=False: two runs started in the same second both succeed
            return path
        except FileExistsError:
            continue
    raise UserError(f"could not find a free run directory name {parent / base}-N")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str, cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=5, check=True, cwd=cwd
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip()


def collect_versions() -> dict[str, Any]:
    """What produced this run: interpreter, platform, library versions, git state, argv."""
    import surge

    revision = _git("rev-parse", "HEAD")  # the user's project, if run from a checkout
    status = _git("status", "--porcelain") if revision else None
    surge_revision = _git("rev-parse", "HEAD", cwd=Path(surge.__file__).parent)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "surge": getattr(surge, "__version__", None) or _version("surge-rl"),
        "surge_git_revision": surge_revision or None,
        "torch": _version("torch"),
        "gymnasium": _version("gymnasium"),
        "numpy": _version("numpy"),
        "git_revision": revision or None,
        "git_dirty": bool(status) if status is not None else None,
        "argv": list(sys.argv),
    }


def load_run_config(run_dir: Path) -> ExperimentConfig:
    """The config a run was started with (its config.yaml), validated."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir} is not a surge run directory (no {CONFIG_FILE})",
            "give the directory a run was started in, e.g. runs/cartpole-ppo-20250101-120000",
        )
    return config_from_dict(read_yaml(path, "run config"), source=f"in {path}")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so readers see the old or the new file, never a partial one."""
    with atomic_writer(path) as f:
        json.dump(data, f, indent=2)
        f.write("\n")


class WorkersFile:
    """The live worker table, `path` (normally run_dir/workers.json), rewritten atomically.

    Content: {"updated_unix": <time.time()>, "workers": [{name, pid, host, state,
    restarts}, ...]} (on Ray also each worker's `node_id`).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, workers: list[dict[str, Any]]) -> None:
        """Replace the table with `workers` (one dict per worker), stamped with the time now."""
        write_json_atomic(self.path, {"updated_unix": time.time(), "workers": workers})

    def read(self) -> list[dict[str, Any]]:
        """The workers of the table ([] before it is first written)."""
        if not self.path.is_file():
            return []
        workers: list[dict[str, Any]] = json.loads(self.path.read_text())["workers"]
        return workers


def policy_home(run_dir: Path, policy: str) -> Path:
    """Where the trainer of a multi-agent run's policy other than the first writes its
    metrics and checkpoints."""
    return run_dir / "policies" / policy
