"""The one interface every load engine fills, like fio's ioengine ops table.

An adapter turns one planned point (a dict of fio-named parameters) into a run
of its engine and returns a PointResult. Adding an engine means one module in
this package that defines an adapter and calls `register()`; nothing else
changes. Adapters run their engine as a child process in its own session
(Ctrl-C reaches fathom only, which stops the child and marks the point), with
PR_SET_PDEATHSIG so a SIGKILLed fathom does not leave load running, and
measure the child's CPU with os.wait4.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from fathom.cluster.ceph import Connection
from fathom.errors import FathomError
from fathom.model import PointResult


@dataclass
class PointContext:
    """What an adapter needs besides the point's own parameters. No secrets: the keyring is a path."""

    conn: Connection | None  # None: no cluster (an interface that needs none, such as null)
    pool: str | None  # the pool as prepared (may carry a run prefix)
    images: list[str]  # RBD images as prepared
    run_tag: str  # unique per run, for object names / rados bench --run-name
    workdir: Path  # scratch files (job files, outputs) for this run
    timeout: float  # hard limit on the child's wall time, s
    image_size: int | None = None  # bytes per RBD image, as prepared
    on_interval: Callable[[dict[str, Any]], None] = lambda rec: None  # live records, engine clock
    on_child: Callable[[int | None], None] = lambda pid: None  # child pid for telemetry (None when it ends)
    # the running engine's control handle (has .stop(reason)), for companions that end a point early
    on_control: Callable[[Any], None] = lambda handle: None


class EngineAdapter(Protocol):
    name: str
    binary_hint: str

    def unsupported(self, workload: Any) -> str | None:
        """Why this engine cannot run the workload (spec.Workload), or None."""

    def check(self) -> None:
        """Raise FathomError (naming how to install) when the engine cannot run here."""

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        """Run one point; raise FathomError on failure, KeyboardInterrupt passes through after stopping the child."""

    def cleanup(self, ctx: PointContext) -> None:
        """Remove what this engine left in the cluster for the run (e.g. rados bench objects)."""


_REGISTRY: dict[str, EngineAdapter] = {}


def register(adapter: EngineAdapter) -> EngineAdapter:
    _REGISTRY[adapter.name] = adapter
    return adapter


def registry() -> dict[str, EngineAdapter]:
    return _REGISTRY


# ---- running a child engine ------------------------------------------------------

@dataclass
class ChildRun:
    rc: int
    stdout: str
    stderr: str
    user_s: float
    sys_s: float
    wall_s: float
    max_rss_kib: int
    started: float  # epoch
    extra: dict[str, Any] = field(default_factory=dict)


_prctl: Any = None


def _load_prctl() -> None:
    """libc's prctl, loaded in the parent: ctypes is imported only when a peer tool runs (it costs every
    command's start-up otherwise), and never between fork and exec."""
    global _prctl
    if _prctl is None:
        import ctypes

        try:
            _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
        except OSError:
            _prctl = False


def _pdeathsig() -> None:
    # Runs in the child between fork and exec: die with the parent, so a killed
    # fathom does not leave an engine loading the cluster.
    if _prctl:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_child(argv: list[str], ctx: PointContext, env: dict[str, str] | None = None,
              on_chunk: Callable[[str], None] | None = None, cwd: Path | None = None) -> ChildRun:
    """Run argv to completion, streaming stdout pieces (split on newlines and \\r) to on_chunk.

    Returns exit code, output, and the child's own rusage (CPU seconds, peak RSS).
    On KeyboardInterrupt or timeout the child gets SIGTERM, then SIGKILL.
    """
    errf = ctx.workdir / f"stderr-{os.getpid()}-{time.monotonic_ns()}.txt"
    started = time.time()
    t0 = time.monotonic()
    _load_prctl()
    with open(errf, "w+b") as err:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                    cwd=cwd, start_new_session=True, preexec_fn=_pdeathsig)
        except FileNotFoundError:
            raise FathomError(f"{argv[0]} not found") from None
        ctx.on_child(proc.pid)
        out = bytearray()
        pending = b""
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        status = None
        rusage = None
        try:
            while True:
                if time.monotonic() - t0 > ctx.timeout:
                    _stop(proc)
                    raise FathomError(f"{os.path.basename(argv[0])} did not finish within {ctx.timeout:.0f} s; "
                                      "stopped it")
                r, _, _ = select.select([fd], [], [], 0.5)
                if r:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    out += chunk
                    if on_chunk:
                        pending += chunk
                        *parts, pending = pending.replace(b"\r", b"\n").split(b"\n")
                        for p in parts:
                            if p.strip():
                                on_chunk(p.decode(errors="replace"))
            _, status, rusage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:
            if status is None:
                _stop(proc)
            raise
        finally:
            ctx.on_child(None)
            proc.stdout.close()  # type: ignore[union-attr]
        if on_chunk and pending.strip():
            on_chunk(pending.decode(errors="replace"))
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    errf.unlink(missing_ok=True)
    return ChildRun(rc=proc.returncode, stdout=out.decode(errors="replace"), stderr=stderr,
                    user_s=rusage.ru_utime, sys_s=rusage.ru_stime, wall_s=time.monotonic() - t0,
                    max_rss_kib=rusage.ru_maxrss, started=started)


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def ceph_env(conn: Connection, workdir: Path) -> dict[str, str]:
    """Environment for a librados client: CEPH_CONF, plus a conf copy naming the keyring when one was given.

    Engines such as fio's rbd engine read only the conf file (no CEPH_ARGS), so a
    --keyring is passed by writing `[<name>] keyring = <path>` after the user's conf.
    """
    env = conn.env()
    if conn.keyring:
        conf = workdir / "client.conf"
        if not conf.exists():
            text = Path(conn.conf).read_text()
            conf.write_text(f"{text}\n[{conn.name}]\nkeyring = {conn.keyring}\n")
        env["CEPH_CONF"] = str(conf)
    return env


def last_json(text: str) -> Any:
    """The last JSON document in text that may carry stray lines before it (fio: lines, rados bench prose)."""
    import json

    dec = json.JSONDecoder()
    found = None
    i = 0
    while True:
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k >= 0), default=-1)
        if j < 0:
            break
        try:
            obj, end = dec.raw_decode(text, j)
        except json.JSONDecodeError:
            i = j + 1
            continue
        found = obj
        i = end
    return found
