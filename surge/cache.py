"""Where surge keeps what it builds once and reuses across runs: `$SURGE_CACHE` (by default
`~/.cache/surge`). The LLM presets' warm starts and the built-in tiny CLIP live there, each
under a key hashed from every setting that changes it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("SURGE_CACHE", Path.home() / ".cache" / "surge"))


def publish_dir(built: Path, target: Path) -> None:
    """Move the finished directory `built` to `target` in one rename, so a reader never sees
    half of one; when another process got there first, its copy stays and `built` goes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        built.rename(target)
    except OSError:  # target exists (another run finished the same build first)
        shutil.rmtree(built, ignore_errors=True)


def staging_dir(target: Path) -> Path:
    """A fresh directory beside `target` to build it in (then `publish_dir`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
