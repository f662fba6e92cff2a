"""One error type that the CLI turns into a message and an exit code, never a traceback."""

from __future__ import annotations


class FathomError(Exception):
    """A failure the user can act on: what went wrong, and (optionally) how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(FathomError):
    """Bad option values (sizes, counts, names)."""

    exit_code = 2


class ClusterError(FathomError):
    """The cluster could not be started, reached or prepared."""

    exit_code = 3
