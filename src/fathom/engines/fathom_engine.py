"""Run fathom-engine (the Rust load generator) for one point and collect its records.

The engine takes one point spec (JSON, engine/PROTOCOL.md) on stdin and writes
JSON lines: `start`, one `interval` a second, `summary`, and `error` records.
This module finds the binary, runs it as a child process, streams and parses
its records as they arrive, measures the child's CPU with os.wait4, and turns
an engine failure into a FathomError carrying the engine's own message.

Public API (stable):
    PROTOCOL = 1
    engine_path() -> Path
        $FATHOM_ENGINE, else engine/target/release/fathom-engine in this
        checkout, else `fathom-engine` on PATH; FathomError naming
        `make install` when none exists.
    connection_spec(conn: fathom.cluster.ceph.Connection, timeout_s: float | None = None) -> dict
        The spec's "connection" section for a Connection (paths only, no secrets).
    run_point(spec: dict, on_record: Callable[[dict], None] | None = None,
              timeout: float | None = None, check: bool = True,
              on_start: Callable[[int | None], None] | None = None) -> EngineRun
        Run one point. on_record is called for every record as it arrives
        (live progress); on_start gets the child's pid once it runs and None
        when it ends. timeout: hard wall-clock limit in seconds (then SIGTERM,
        SIGKILL and FathomError). With check=True (default) a non-zero exit
        raises EngineError (a FathomError) whose .run holds the EngineRun.
    EngineRun: start, intervals, summary, errors, exit_code, user_s, sys_s,
        max_rss_kib, wall_s, stderr, rusage; .cpu_s; .ok
    EngineError(FathomError): .kind (error record kind), .run (EngineRun)

Exit codes: 0 ok, 2 invalid spec, 3 Ceph error / stall / stopped on error,
5 verify mismatch.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fathom.errors import FathomError

PROTOCOL = 1
BINARY = "fathom-engine"
INSTALL_HINT = ("build it with `make install` (needs cargo; the binary is engine/target/release/fathom-engine), "
                "or set FATHOM_ENGINE to its path")
_REPO_BINARY = Path(__file__).resolve().parents[3] / "engine" / "target" / "release" / BINARY


def engine_path() -> Path:
    """The fathom-engine binary to run: $FATHOM_ENGINE, this checkout's release build, or PATH."""
    env = os.environ.get("FATHOM_ENGINE")
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise FathomError(f"FATHOM_ENGINE={env!r} is not an executable file", hint=INSTALL_HINT, exit_code=4)
    if _REPO_BINARY.is_file() and os.access(_REPO_BINARY, os.X_OK):
        return _REPO_BINARY
    found = shutil.which(BINARY)
    if found:
        return Path(found)
    raise FathomError(f"{BINARY} not found (looked at $FATHOM_ENGINE, {_REPO_BINARY}, PATH)",
                      hint=INSTALL_HINT, exit_code=4)


def connection_spec(conn: Any, timeout_s: float | None = None) -> dict[str, Any]:
    """The spec's connection section for a fathom.cluster.ceph.Connection."""
    out: dict[str, Any] = {"conf": conn.conf, "name": conn.name}
    if getattr(conn, "keyring", None):
        out["keyring"] = conn.keyring
    opts = getattr(conn, "options", None)
    if opts:
        out["options"] = {str(k): str(v) for k, v in opts.items()}
    if timeout_s is not None:
        out["timeout_s"] = float(timeout_s)
    return out


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
    rusage: Any = None  # the raw resource.struct_rusage
    other: list[str] = field(default_factory=list)  # stdout lines that were not records

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


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
            proc.wait(5.0)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _dispatch(run: EngineRun, line: str, on_record: Callable[[dict], None] | None) -> None:
    line = line.strip()
    if not line:
        return
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        run.other.append(line)
        return
    if not isinstance(rec, dict):
        run.other.append(line)
        return
    kind = rec.get("type")
    if kind == "start":
        run.start = rec
    elif kind == "interval":
        run.intervals.append(rec)
    elif kind == "summary":
        run.summary = rec
    elif kind == "error":
        run.errors.append(rec)
    if on_record is not None:
        on_record(rec)


def run_point(spec: dict[str, Any], on_record: Callable[[dict[str, Any]], None] | None = None,
              timeout: float | None = None, check: bool = True,
              on_start: Callable[[int | None], None] | None = None) -> EngineRun:
    """Run one point spec to completion; see the module docstring."""
    binary = engine_path()
    payload = json.dumps(spec).encode()
    run = EngineRun()
    t0 = time.monotonic()
    env = dict(os.environ)
    env.pop("CEPH_ARGS", None)  # the spec says where to connect; a user's CEPH_ARGS must not redirect it
    import tempfile

    with tempfile.TemporaryFile() as err:
        try:
            # The engine sets its own parent-death signal: no preexec_fn, so Popen can use vfork.
            proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    env=env, start_new_session=True)
        except OSError as exc:
            raise FathomError(f"cannot start {binary}: {exc}", hint=INSTALL_HINT, exit_code=4) from None
        if on_start:
            on_start(proc.pid)
        status = None
        try:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(payload)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            fd = proc.stdout.fileno()
            pending = b""
            while True:
                wait = 0.5
                if timeout is not None:
                    left = timeout - (time.monotonic() - t0)
                    if left <= 0:
                        _stop(proc)
                        raise FathomError(f"fathom-engine did not finish within {timeout:.0f} s; stopped it")
                    wait = min(wait, left)
                r, _, _ = select.select([fd], [], [], wait)
                if not r:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for ln in lines:
                    _dispatch(run, ln.decode(errors="replace"), on_record)
            if pending:
                _dispatch(run, pending.decode(errors="replace"), on_record)
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:
            if status is None:
                _stop(proc)
            raise
        finally:
            if on_start:
                on_start(None)
            if proc.stdout:
                proc.stdout.close()
        err.seek(0)
        run.stderr = err.read().decode(errors="replace")
    run.exit_code = proc.returncode
    run.rusage = ru
    run.user_s, run.sys_s, run.max_rss_kib = ru.ru_utime, ru.ru_stime, ru.ru_maxrss
    run.wall_s = time.monotonic() - t0
    if check and run.exit_code != 0:
        raise _error(run)
    return run


def _error(run: EngineRun) -> EngineError:
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
