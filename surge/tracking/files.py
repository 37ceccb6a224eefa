"""Writing run files so that a reader (or a crash) sees the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_writer(path: Path, mode: str = "w", durable: bool = False) -> Iterator[IO]:  # type: ignore[type-arg]
    """Yield a file to write; on success it replaces `path` in one rename.

    The temporary file lives in the same directory, so `os.replace` is an atomic rename on the
    same filesystem. `durable` also fsyncs the data and the directory (for checkpoints).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; run files are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable; not supported everywhere (e.g. Windows), so best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
