"""How an engine process on a client host is started and talked to: the transport seam.

A point's engines run as one group (fathom.engines.group: ready barrier, clock
offsets, one start time, heartbeats, live merge, lost hosts, Ctrl-C) and the
group asks only this of a host:

    provide_engine   the engine binary there, checked to run and speak the protocol
    start            the engine started with its spec; its records on stdout, control lines on stdin
    kill, alive      a signal to, and a check of, an engine by the pid its `start` record names
    lost             set once the transport knows the host is gone (the group then flags it)
    close, aclose    drop the host's connection (its engines' streams end)

`Local` is this host (a child process in its own session). `fathom.hosts.ssh`
fills it over OpenSSH, `fathom.hosts.pods` with pods and the API's exec
streams. A new transport is one module with a class that has these members and
an `open_transports(spec, engine, protocol, ctx)` coroutine that connects (or makes)
the spec's hosts it serves; its name and module go in `TABLE` (fathom.plugins). A host may also carry
`connection`: the Ceph connection fields its engines use there (a pod's mounted conf).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from fathom.cluster.client import HOST, Client
from fathom.hosts.clients import LOCAL, ClientsSpec
from fathom.plugins import Table

STREAM_LIMIT = 64 << 20  # longest record line of a local engine (a summary with many histograms)
# transport name -> the module whose `open_transports` connects the run's remote client hosts it serves
TABLE: Table[Any] = Table("transport", {"ssh": "fathom.hosts.ssh", "k8s": "fathom.hosts.pods"}, "open_transports")
# the transports that make their hosts for a run out of the cluster it uses (pods get its conf and keyring in a
# Secret, and are written in its journal): opened once the cluster is there. The others reach hosts that exist
# already and need nothing of the cluster: a run connects them before any Ceph call, so a bad host is named at once
NEEDS_CLUSTER = frozenset({"k8s"})


@runtime_checkable
class EngineProcess(Protocol):
    """One running engine as the group sees it: lines in, lines out, an exit code."""

    pid: int | None  # known at once on this host; elsewhere from the engine's `start` record

    async def readline(self) -> str:
        """The next stdout line ('' at the end); raises when the stream breaks (the host is then lost)."""
        ...

    async def read_stderr(self) -> str: ...

    def write(self, data: str) -> None:
        """Send control lines on its stdin; raises (OSError, RuntimeError...) when that is gone."""
        ...

    async def wait(self) -> int | None:
        """Its exit code once it has ended (None when the transport cannot tell)."""
        ...

    def release(self) -> None:
        """Remove what starting it made (a spec file); called once the group has ended."""
        ...


@runtime_checkable
class Transport(Protocol):
    """One client host as the engine group uses it."""

    name: str  # the host's name in records, tables and messages
    remote: bool  # silence means lost (LOST_AFTER_S), and a lost host's exit status is not awaited
    lost: str | None  # why the host is gone, once the transport knows
    engine: str | None  # the engine's path (or name) there, once provided
    facts: dict[str, Any]  # what describe() records of the host (engine version...)
    start_hint: str  # said after a failed start: a limit of the transport that may be the cause

    async def provide_engine(self, local: Path, sha: str, protocol: int) -> str: ...

    async def start(self, spec_json: str) -> EngineProcess: ...

    async def kill(self, pid: int, sig: str = "TERM") -> None: ...

    async def alive(self, pid: int) -> bool: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


@dataclass
class OpenContext:
    """What a transport that makes its hosts for a run needs of it."""

    run: str  # the run's tag: names what the transport makes
    conn: Any = None  # the cluster's fathom.cluster.ceph.Connection the engines use (paths; None: no cluster)
    journal: Any = None  # the run's undo journal (None: removed at the end only, as for a bench)
    say: Callable[[str], None] = print


async def open_all(spec: ClientsSpec, engine: Path, protocol: int, ctx: OpenContext | None = None,
                   needs_cluster: bool | None = None) -> list[Transport]:
    """Every remote host of spec connected by the transport that serves it, the engine provided there (with
    needs_cluster, only those of the transports that do, or do not, need the cluster: NEEDS_CLUSTER); what
    one transport opened is closed again when a later one fails."""
    out: list[Transport] = []
    try:
        for name in TABLE.names():
            if needs_cluster is None or (name in NEEDS_CLUSTER) == needs_cluster:
                out += await TABLE.get(name)(spec, engine, protocol, ctx)
    except BaseException:
        await asyncio.gather(*(h.aclose() for h in out), return_exceptions=True)
        raise
    return out


class LocalProcess:
    """An engine child of this process: its pipes on the loop, and reaped by wait4 (its CPU and peak memory are
    the OS's count, whole process, all threads)."""

    def __init__(self, popen: subprocess.Popen, specfile: str):
        self.popen, self.specfile, self.pid = popen, specfile, popen.pid
        self.rusage: Any = None
        self._stdout = asyncio.StreamReader(limit=STREAM_LIMIT)
        self._stderr = asyncio.StreamReader(limit=STREAM_LIMIT)
        self._stdin: asyncio.WriteTransport | None = None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        for reader, pipe in ((self._stdout, self.popen.stdout), (self._stderr, self.popen.stderr)):
            await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
        # never blocks the loop: an engine that stops reading (SIGSTOP) holds lines in the transport's buffer
        self._stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, self.popen.stdin)

    async def readline(self) -> str:
        return (await self._stdout.readline()).decode(errors="replace")

    async def read_stderr(self) -> str:
        return (await self._stderr.read()).decode(errors="replace")

    def write(self, data: str) -> None:
        if self._stdin is None or self._stdin.is_closing():
            raise BrokenPipeError("the engine's stdin is closed")
        self._stdin.write(data.encode())

    async def wait(self) -> int | None:
        if self.popen.returncode is None:
            _, status, self.rusage = await asyncio.get_running_loop().run_in_executor(None, os.wait4, self.pid, 0)
            self.popen.returncode = os.waitstatus_to_exitcode(status)
        return self.popen.returncode

    def release(self) -> None:
        if self._stdin is not None:
            self._stdin.close()
        for f in (self.popen.stdout, self.popen.stderr):
            if f is not None:
                f.close()
        try:
            os.unlink(self.specfile)
        except OSError:
            pass


class Local:
    """This host: the engine is a child in its own session (a Ctrl-C reaches fathom only), with its spec in a
    temporary file and CEPH_ARGS unset (the spec names every connection setting)."""

    remote = False
    lost: str | None = None
    start_hint = ""

    def __init__(self, engine: str | None = None, client: Client = HOST):
        self.name = LOCAL
        self.engine = engine
        self.client = client  # whose Ceph libraries the engine loads (fathom.cluster.client)
        self.facts: dict[str, Any] = {}

    async def provide_engine(self, local: Path, sha: str, protocol: int) -> str:
        self.engine = str(local)
        return self.engine

    async def start(self, spec_json: str) -> LocalProcess:
        assert self.engine is not None
        with tempfile.NamedTemporaryFile("w", prefix="fathom-spec-", suffix=".json", delete=False) as f:
            f.write(spec_json)
        env = self.client.engine_env(dict(os.environ))
        env.pop("CEPH_ARGS", None)
        try:
            popen = subprocess.Popen([*self.client.engine_argv(self.engine), f.name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        except BaseException:
            os.unlink(f.name)
            raise
        proc = LocalProcess(popen, f.name)
        await proc.connect()
        return proc

    async def kill(self, pid: int, sig: str = "TERM") -> None:
        try:
            os.kill(pid, getattr(signal, f"SIG{sig}"))
        except ProcessLookupError:
            pass

    async def alive(self, pid: int) -> bool:
        return local_alive(pid)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def local_alive(pid: int) -> bool:
    """Is pid a running process on this host (a zombie is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
