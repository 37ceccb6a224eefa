"""The getting-started page (docs/quickstart.md) runs as written.

Its `bash` and `python` code blocks run in order, in a scratch directory (the paths under
/tmp/qs move into it, and `.venv` there points at this checkout's), each as its own
process. A block right after a line `<!-- ci: skip (why) -->` is not run (the install: CI's
setup has run it). A block after `<!-- ci: serve -->` starts a server: it must still be
serving after `SERVE_S` seconds, then it is stopped. The others train with short budgets
(`total_env_steps=20000`, or the default preset, which solves CartPole in seconds).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
SKIP = re.compile(r"<!-- ci: skip \((.+?)\) -->\s*$")
BLOCK_TIMEOUT_S = 120
SERVE = re.compile(r"<!-- ci: serve -->\s*$")
SERVE_S = 8.0


def code_blocks(text: str) -> list[tuple[str, str, str | None]]:
    """(language, code, skip reason, `serve` for a server, or None) of every fenced block,
    in page order."""
    blocks = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        mark = skip.group(1) if skip else ("serve" if SERVE.search(before) else None)
        blocks.append((m.group(1), m.group(2), mark))
    return blocks


def test_blocks_are_found_and_every_skip_says_why():
    blocks = code_blocks(PAGE.read_text())
    runnable = [b for b in blocks if b[0] in ("bash", "python") and b[2] is None]
    assert len(runnable) >= 5, "docs/quickstart.md: fewer runnable blocks than expected"
    for line in PAGE.read_text().splitlines():
        if "ci: skip" in line:
            assert SKIP.search(line), f"write `<!-- ci: skip (why) -->`, not {line!r}"


def test_quickstart_blocks_run(tmp_path: Path):
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    scratch = tmp_path / "qs"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    ran = 0
    for language, code, mark in code_blocks(PAGE.read_text()):
        if language not in ("bash", "python") or mark not in (None, "serve"):
            continue
        code = code.replace("/tmp/qs", str(scratch))
        if mark == "serve":  # a server: it must come up and keep serving until stopped
            server = subprocess.Popen(["bash", "-c", code], cwd=tmp_path, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True)  # fmt: skip
            try:
                time.sleep(SERVE_S)
                assert server.poll() is None, f"{code} stopped: {server.communicate()[1][-2000:]}"
            finally:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=30)
            ran += 1
            continue
        if language == "bash":
            command = ["bash", "-euo", "pipefail", "-c", code]
        else:
            script = tmp_path / f"block{ran}.py"
            script.write_text(code)
            command = [sys.executable, str(script)]
        try:
            done = subprocess.run(
                command,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"this block of {PAGE.name} ran over {BLOCK_TIMEOUT_S} s:\n{code}")
        assert done.returncode == 0, (
            f"this block of {PAGE.name} failed with {done.returncode}:\n{code}\n"
            f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
        )
        ran += 1
    assert ran >= 5
