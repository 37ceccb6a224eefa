"""Errors a user can cause and fix. The CLI prints them without a traceback and exits 2."""

from __future__ import annotations

import json
import traceback
from typing import Any


class UserError(Exception):
    """A mistake in the user's input: says what is wrong and how to fix it."""

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}\n  how to fix: {fix}" if fix else problem)

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in another process (a worker, the prepare process) and re-raised here: the
        # problem and the fix travel apart, so the CLI still prints them apart.
        return (type(self), (self.problem, self.fix))


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


class WorkerUserError(UserError):
    """A user error a worker met while the run went on (a text env's bad output, say): the
    run stops with its problem and fix, as the CLI shows any user error, not a traceback."""

    def __init__(self, worker: str, problem: str, fix: str = "") -> None:
        self.worker = worker
        super().__init__(problem, fix)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.worker, self.problem, self.fix))


USER_ERROR_TAG = "surge user error\n"
"""How a worker's failure text marks a user error (the rest: its problem, then its fix)."""


def failure_text(error: BaseException) -> str:
    """What a failed worker reports to the controller: a user error's problem and fix, tagged
    (`user_error_in` reads them back), or any other exception's traceback."""
    if isinstance(error, UserError):
        return USER_ERROR_TAG + json.dumps({"problem": error.problem, "fix": error.fix})
    return "".join(traceback.format_exception(error))


def user_error_in(worker: str, detail: str) -> WorkerUserError | None:
    """The user error a worker's failure text carries (`failure_text`), or None."""
    if not detail.startswith(USER_ERROR_TAG):
        return None
    fields = json.loads(detail[len(USER_ERROR_TAG) :])
    return WorkerUserError(worker, f"{fields['problem']} (met by {worker})", fields["fix"])
