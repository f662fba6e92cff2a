"""Run fathom-engine (the Rust load generator) for one point and collect its records.

The engine takes one point spec (JSON, protocol 2, engine/PROTOCOL.md) as a
file argument and writes JSON lines: `start`, one `interval` a second,
`summary`, and `error` records. When the spec's "control" is set, the
engine's stdin is the control channel (JSON lines: stop, go, heartbeat).
This module finds the binary, checks the protocol it speaks, runs it as a
child process, streams and parses its records as they arrive, measures the
child's CPU with os.wait4, and turns an engine failure into a FathomError
carrying the engine's own message.

Public API (stable):
    PROTOCOL = 2
    engine_path() -> Path
        $FATHOM_ENGINE, else engine/target/release/fathom-engine in this
        checkout, else `fathom-engine` on PATH; FathomError naming
        `make install` when none exists.
    engine_protocol(path: Path) -> int
        The protocol the binary speaks, from `fathom-engine --version`.
    check_engine() -> Path
        engine_path() that speaks PROTOCOL; FathomError naming both protocol
        versions and `make install` otherwise. run_point calls it (cached per
        binary and modification time).
    connection_spec(conn: fathom.cluster.ceph.Connection, timeout_s: float | None = None) -> dict
        The spec's target "connection" section for a Connection (paths only, no secrets).
    run_point(spec: dict, on_record: Callable[[dict], None] | None = None,
              timeout: float | None = None, check: bool = True,
              on_start: Callable[[int | None], None] | None = None,
              on_proc: Callable[[EngineProcess], None] | None = None) -> EngineRun
        Run one point. on_record is called for every record as it arrives
        (live progress); on_start gets the child's pid once it runs and None
        when it ends; on_proc gets the EngineProcess handle once it runs (its
        send/stop/go reach the engine only when spec["control"] is set).
        With spec["control"]["heartbeat_timeout_s"] set, a heartbeat line
        goes every third of it. timeout: hard wall-clock limit in seconds
        (then SIGTERM, SIGKILL and FathomError). With check=True (default) a
        non-zero exit raises EngineError (a FathomError) whose .run holds the
        EngineRun.
    EngineProcess: pid; send(dict) -> bool, stop(reason) -> bool,
        go(at_epoch_s) -> bool: thread-safe, never raise; False when the
        line could not be delivered (no control channel, engine gone).
    EngineRun: start, intervals, summary, errors, exit_code, user_s, sys_s,
        max_rss_kib, wall_s, stderr, rusage; .cpu_s; .ok
    EngineError(FathomError): .kind (error record kind), .run (EngineRun)

Exit codes: 0 ok (also a control stop), 2 invalid spec, 3 target error /
stall / stopped on error, 5 verify mismatch, 6 orchestrator lost (control
channel EOF, heartbeats stopped, stdout closed), 128+N signal N.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fathom.errors import FathomError

PROTOCOL = 2
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


def engine_protocol(path: Path) -> int:
    """The protocol `path` speaks, from its `--version` line "fathom-engine X (protocol N)"."""
    try:
        p = subprocess.run([str(path), "--version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FathomError(f"cannot run {path} --version: {exc}", hint=INSTALL_HINT, exit_code=4) from None
    m = re.search(r"\(protocol (\d+)\)", p.stdout)
    if p.returncode != 0 or not m:
        out = (p.stdout.strip() or p.stderr.strip())[:200]
        raise FathomError(f"{path} --version did not name a protocol (exit {p.returncode}: {out!r}); "
                          f"is it fathom-engine?", hint=INSTALL_HINT, exit_code=4)
    return int(m.group(1))


_protocols: dict[tuple[str, int, int], int] = {}


def check_engine() -> Path:
    """engine_path(), refused unless it speaks PROTOCOL (asked once per binary version)."""
    path = engine_path()
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _protocols:
        _protocols[key] = engine_protocol(path)
    got = _protocols[key]
    if got != PROTOCOL:
        raise FathomError(f"{path} speaks fathom-engine protocol {got}, but this fathom needs protocol {PROTOCOL}",
                          hint="rebuild the engine with `make install` (or set FATHOM_ENGINE to a build of this "
                               "checkout)", exit_code=4)
    return path


def connection_spec(conn: Any, timeout_s: float | None = None) -> dict[str, Any]:
    """The connection section of a Ceph target (rados, rbd) for a fathom.cluster.ceph.Connection."""
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


class EngineProcess:
    """A running engine: its pid and, with a control channel, a way to talk to it.

    send/stop/go are thread-safe and never raise: they return False when the
    line was not delivered (no control channel, or the engine has exited).
    """

    def __init__(self, pid: int, stdin: IO[bytes] | None):
        self.pid = pid
        self._stdin = stdin
        self._lock = threading.Lock()

    def send(self, line: dict[str, Any]) -> bool:
        data = (json.dumps(line) + "\n").encode()
        with self._lock:
            if self._stdin is None:
                return False
            try:
                self._stdin.write(data)
                self._stdin.flush()
                return True
            except (OSError, ValueError):  # EPIPE: the engine is gone; ValueError: closed here
                self._close_locked()
                return False

    def stop(self, reason: str) -> bool:
        """Stop cleanly: nothing new is issued, in-flight ops drain, the summary says why (exit 0)."""
        return self.send({"type": "stop", "reason": reason})

    def go(self, at: float) -> bool:
        """Start the main phase at `at` (epoch seconds, CLOCK_REALTIME); needs control.wait."""
        return self.send({"type": "go", "at": float(at)})

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._stdin is not None:
            try:
                self._stdin.close()
            except OSError:
                pass
            self._stdin = None


def _heartbeats(proc: EngineProcess, every_s: float, done: threading.Event) -> None:
    while not done.wait(every_s):
        if not proc.send({"type": "heartbeat"}):
            return


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
              on_start: Callable[[int | None], None] | None = None,
              on_proc: Callable[[EngineProcess], None] | None = None) -> EngineRun:
    """Run one point spec to completion; see the module docstring."""
    binary = check_engine()
    control = spec.get("control")
    run = EngineRun()
    t0 = time.monotonic()
    env = dict(os.environ)
    env.pop("CEPH_ARGS", None)  # the spec says where to connect; a user's CEPH_ARGS must not redirect it
    # The spec goes in a file: stdin is the control channel (or nothing).
    with tempfile.NamedTemporaryFile("w", prefix="fathom-spec-", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    spec_path = f.name
    beat_done = threading.Event()
    try:
        with tempfile.TemporaryFile() as err:
            try:
                # The engine sets its own parent-death signal: no preexec_fn, so Popen can use vfork.
                proc = subprocess.Popen([str(binary), spec_path],
                                        stdin=subprocess.PIPE if control is not None else subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
            except OSError as exc:
                raise FathomError(f"cannot start {binary}: {exc}", hint=INSTALL_HINT, exit_code=4) from None
            handle = EngineProcess(proc.pid, proc.stdin)
            status = None
            try:
                if on_start:
                    on_start(proc.pid)
                beat = (control or {}).get("heartbeat_timeout_s")
                if beat:
                    threading.Thread(target=_heartbeats, args=(handle, float(beat) / 3, beat_done),
                                     name="fathom-engine-heartbeat", daemon=True).start()
                if on_proc:
                    on_proc(handle)
                assert proc.stdout is not None
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
                # Only now: EOF on the control channel tells a running engine its orchestrator is gone.
                beat_done.set()
                handle.close()
                if on_start:
                    on_start(None)
                if proc.stdout:
                    proc.stdout.close()
            err.seek(0)
            run.stderr = err.read().decode(errors="replace")
    finally:
        os.unlink(spec_path)
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
