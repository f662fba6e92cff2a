"""One launcher for the peer tools fathom runs (fio, rados bench), behind an executor seam.

fathom-engine is not started here: the engine group (fathom.engines.group) runs it, one engine on this host
as many on many hosts, so it has one supervisor.

An executor starts a process somewhere: `LocalExecutor` on this host (hyperfine's
Executor trait is the model).
The launcher streams the child's stdout as lines to the caller, enforces a
wall-clock limit, and stops the child (SIGTERM, then SIGKILL) on timeout or interruption. Its record
of "a child ran" is `ChildRun`.

Children run in their own session, so a Ctrl-C on the terminal reaches fathom
only: fathom decides how its child ends (and keeps what it reported).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from fathom.errors import FathomError


@dataclass
class ChildRun:
    """A child that ran: how it ended, what it printed, what it cost (CPU from wait4 on this host)."""

    argv: list[str]
    rc: int | None = None  # exit code; negative: killed by that signal
    stdout: str = ""
    stderr: str = ""
    user_s: float = 0.0
    sys_s: float = 0.0
    max_rss_kib: int = 0
    wall_s: float = 0.0
    started: float = 0.0  # epoch
    host: str = "local"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s


class Child:
    """A running child: its pid, a signal to it, its end (status and rusage)."""

    def __init__(self, proc: subprocess.Popen, host: str):
        self.proc = proc
        self.pid = proc.pid
        self.host = host
        self.status: int | None = None
        self.rusage: Any = None

    def signal(self, sig: int) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _reap(self, wait_s: float | None) -> bool:
        """Collect the exit status and rusage (wait4, never Popen.poll: that would reap without rusage)."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while self.status is None:
            pid, status, ru = os.wait4(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.status, self.rusage = status, ru
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() >= deadline:  # type: ignore[operator]
                return False
            time.sleep(0.05)
        return True

    def wait(self) -> None:
        self._reap(None)

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after grace_s: only this child, by its pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.status is not None:
                return
            self.signal(sig)
            if self._reap(grace_s):
                return


class Executor(Protocol):
    host: str

    def spawn(self, argv: list[str], env: dict[str, str] | None, cwd: Path | None, stderr: Any,
              preexec: Callable[[], None] | None) -> subprocess.Popen: ...


class LocalExecutor:
    host = "local"

    def spawn(self, argv: list[str], env: dict[str, str] | None, cwd: Path | None, stderr: Any,
              preexec: Callable[[], None] | None) -> subprocess.Popen:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True, preexec_fn=preexec)


LOCAL = LocalExecutor()


def run(argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
        cwd: Path | None = None, on_line: Callable[[str], None] | None = None, split_cr: bool = False,
        on_start: Callable[[Child], None] | None = None,
        on_interrupt: Callable[[Child], float] | None = None, executor: Executor = LOCAL,
        preexec: Callable[[], None] | None = None, name: str | None = None) -> ChildRun:
    """Run argv to its end, calling on_line for every stdout line as it arrives (also '\\r'-ended with split_cr).

    On timeout the child is stopped and FathomError raised. On
    KeyboardInterrupt, on_interrupt(child) may ask the child to wind down and return how
    many seconds to keep reading its output (its final records); then the child is stopped
    and the interrupt re-raised, with the ChildRun so far as `exc.child_run`.
    """
    name = name or os.path.basename(argv[0])
    res = ChildRun(argv=list(argv), started=time.time(), host=executor.host)
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as err:
        try:
            proc = executor.spawn(argv, env, cwd, err, preexec)
        except OSError as exc:
            raise FathomError(f"cannot start {name}: {exc.strerror or exc}", exit_code=4) from None
        child = Child(proc, executor.host)
        if on_start:
            on_start(child)
        out = bytearray()
        pending = b""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline: float | None = None if timeout is None else t0 + timeout

        def feed(chunk: bytes, final: bool = False) -> None:
            nonlocal pending
            out.extend(chunk)
            if on_line is None:
                return
            pending += chunk
            parts = (pending.replace(b"\r", b"\n") if split_cr else pending).split(b"\n")
            pending = b"" if final else parts.pop()
            for p in parts:
                if p.strip():
                    on_line(p.decode(errors="replace"))

        def read_until(limit: float | None) -> bool:
            """Read output until EOF (True) or the monotonic limit (False)."""
            while True:
                wait = 0.5 if limit is None else min(0.5, limit - time.monotonic())
                if wait <= 0:
                    return False
                r, _, _ = select.select([fd], [], [], wait)
                if r:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        return True
                    feed(chunk)

        try:
            try:
                if not read_until(deadline):
                    child.stop()
                    raise FathomError(f"{name} did not finish within {timeout:.0f} s; stopped it")
            except KeyboardInterrupt as exc:
                keep = on_interrupt(child) if on_interrupt else 0.0
                if keep > 0:
                    try:
                        read_until(time.monotonic() + keep)
                    except KeyboardInterrupt:
                        pass  # a second Ctrl-C: stop waiting for the final records
                child.stop()
                child.wait()
                feed(b"", final=True)
                _finish(res, child, err, t0, out)
                exc.child_run = res  # type: ignore[attr-defined]
                raise
            child.wait()
        except BaseException:
            child.stop()
            raise
        finally:
            proc.stdout.close()
        feed(b"", final=True)
        _finish(res, child, err, t0, out)
    return res


def _finish(res: ChildRun, child: Child, err: Any, t0: float, out: bytearray) -> None:
    res.rc = os.waitstatus_to_exitcode(child.status)  # type: ignore[arg-type]
    ru = child.rusage
    res.user_s, res.sys_s, res.max_rss_kib = ru.ru_utime, ru.ru_stime, ru.ru_maxrss
    res.wall_s = time.monotonic() - t0
    res.stdout = out.decode(errors="replace")
    err.seek(0)
    res.stderr = err.read().decode(errors="replace")
