"""Errors a user can cause and fix. The CLI prints them without a traceback and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input: says what is wrong and how to fix it."""

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}\n  how to fix: {fix}" if fix else problem)


class ConfigError(UserError):
    """A wrong config key, type or value."""


class EnvSpecError(UserError):
    """An environment whose spaces or outputs do not fit what surge (or its config) expects."""


class WorkerFailure(Exception):
    """A worker raised or died; carries the worker's name and its original traceback."""

    def __init__(self, worker: str, detail: str) -> None:
        self.worker = worker
        self.detail = detail
        super().__init__(f"worker {worker} failed:\n{detail}")
