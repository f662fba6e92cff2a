"""What one fathom-engine process reported: its records as they arrived, its exit and its CPU, and the error
that names what went wrong (below the group that runs engines and the adapter that builds their specs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fathom.errors import FathomError


@dataclass
class EngineRun:
    """Everything one engine process reported, plus the OS's view of it."""

    start: dict[str, Any] | None = None
    intervals: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)  # `error` records
    exit_code: int | None = None
    user_s: float = 0.0  # child CPU from os.wait4 (whole process, all threads)
    sys_s: float = 0.0
    max_rss_kib: int = 0
    wall_s: float = 0.0
    stderr: str = ""
    started: float = 0.0  # epoch, when the process was started
    other: list[str] = field(default_factory=list)  # stdout lines that were not records

    @property
    def fatal(self) -> dict[str, Any] | None:
        """The first fatal error record: it names the cause; later ones follow from it."""
        return next((e for e in self.errors if e.get("fatal")), None)

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.summary is not None


class EngineError(FathomError):
    """The engine failed: message from its error record; .run has what it reported before."""

    def __init__(self, message: str, kind: str, run: EngineRun, hint: str | None = None):
        code = run.exit_code if run.exit_code in (2, 3) else 1
        super().__init__(message, hint=hint, exit_code=code)
        self.kind = kind
        self.run = run


def keep(run: EngineRun, rec: dict[str, Any]) -> None:
    """One parsed record of the engine's, kept where its kind goes (a `pong` or `ready` is the group's alone)."""
    kind = rec.get("type")
    if kind == "start":
        run.start = rec
    elif kind == "interval":
        run.intervals.append(rec)
    elif kind == "summary":
        run.summary = rec
    elif kind == "error":
        run.errors.append(rec)


def engine_error(run: EngineRun) -> EngineError:
    if run.errors:
        # The first fatal record names the cause; others follow from it.
        e = next((e for e in run.errors if e.get("fatal")), run.errors[0])
        return EngineError(f"fathom-engine: {e.get('message', 'failed')}", str(e.get("kind", "error")), run)
    code = run.exit_code
    if code is not None and code < 0:
        msg = f"fathom-engine was killed by signal {-code}"
    else:
        msg = f"fathom-engine exited with code {code} without an error record"
    tail = run.stderr.strip().splitlines()[-5:]
    if tail:
        msg += ": " + " | ".join(tail)
    return EngineError(msg, "crash", run)
