"""Client hosts over OpenSSH (asyncssh, as cephadm reaches Ceph's hosts): connect, install the engine, run it.

No daemon, no new port and no Python on a client host: sshd, the Ceph client
libraries and the engine binary, which fathom uploads by SFTP when missing or
different (to `<engine_dir>/<sha256 prefix>/fathom-engine`: a temporary name,
its hash checked, then renamed into place). Before any load the engine's
`--version` runs there: a protocol mismatch, or a Ceph library the engine
cannot load, is an error naming the host and the package to install.

One connection per host carries every engine instance there (one exec channel
each: records on stdout, control lines on stdin) plus short commands (kill,
pid checks). SSH keepalives (1 s, 3 missed) tell a dead host within seconds;
SSH signals are not used (sshd refuses them for root before OpenSSH 9.8): an
engine is stopped by a control line, then `kill` by pid on a new channel.

`SshHost` fills the engine transport (fathom.hosts.transport) for client hosts;
server hosts (fathom.servers) use the same connection code for the sampler.

Everything runs on one asyncio loop in a daemon thread (`LOOP`), which the
synchronous orchestrator drives with `LOOP.run(coro)`.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import os
import re
import shlex
import signal
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Awaitable, TypeVar

from fathom.errors import FathomError
from fathom.hosts.clients import ClientHost, ClientsSpec, key_file_problem

_T = TypeVar("_T")
KEEPALIVE_S = 1.0
KEEPALIVE_MISSES = 3
COMMAND_TIMEOUT_S = 60.0
# soname -> the package that ships it (Debian/Ubuntu; the EL packages carry the same names)
LIB_PACKAGES = {"librados.so.2": "librados2", "librbd.so.1": "librbd1", "libcephfs.so.2": "libcephfs2",
                "libstdc++.so.6": "libstdc++6", "libgcc_s.so.1": "libgcc-s1"}
_LOAD_ERROR = re.compile(r"error while loading shared libraries: ([^:\s]+): (.+)")
# where each role's SSH options are given: a hint names the options of the host it is about
OPTIONS = {
    "client host": {"key": "the host's key_file (--clients-file, or the suite's clients.hosts)",
                    "accept_new": "--accept-new-host-keys (suite: clients.accept_new_host_keys: true)"},
    "server host": {"key": "--server-key FILE (or key_file in the --server-hosts-file)",
                    "accept_new": "--accept-new-host-keys (or accept_new_host_keys: true in the --server-hosts-file)"},
}


class HostError(FathomError):
    """A client host could not be used; the message names the host."""

    exit_code = 4


class Loop:
    """One asyncio event loop in a daemon thread, for every SSH connection and engine of the process."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="fathom-hosts", daemon=True).start()
                self._loop = loop
            return self._loop

    def submit(self, coro: Awaitable[_T]) -> Future[_T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def run(self, coro: Awaitable[_T], timeout: float | None = None) -> _T:
        """Run coro on the loop and wait for it; a Ctrl-C while waiting cancels it and is raised."""
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except KeyboardInterrupt:
            fut.cancel()
            raise

    def call(self, fn: Any, *args: Any) -> None:
        """fn(*args) on the loop's thread (thread-safe, returns at once)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Stop the loop and its thread (at exit: the interpreter must not finalize while the loop's
        thread is inside a connection's crypto)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        for t in threading.enumerate():
            if t.name == "fathom-hosts":
                t.join(5)


LOOP = Loop()
atexit.register(LOOP.stop)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class SshHost:
    """One host reached over SSH: its connection, the binary installed there, commands. `role` is how
    messages name it: a client host runs engines, a server host (fathom.servers) the sampler."""

    def __init__(self, spec: ClientHost, opts: ClientsSpec, role: str = "client host"):
        self.spec, self.opts, self.role = spec, opts, role
        self.name = spec.name
        self.conn: Any = None
        self.engine: str | None = None  # the engine's path on the host, once installed and checked
        self.lost: str | None = None  # why the connection was lost
        self.facts: dict[str, Any] = {}
        self._keys: list[Any] | None = None

    # ---- connection -------------------------------------------------------------------
    def keys(self) -> list[Any] | None:
        """The key pairs of the host's key file (None: ssh-agent, then ~/.ssh/id_*), read before any connection
        so a missing or unusable file is named as such, never taken for an unreachable host."""
        import asyncssh

        path = self.spec.key_file
        if not path or self._keys is not None:
            return self._keys
        fix = f"name an existing private key with {OPTIONS.get(self.role, OPTIONS['client host'])['key']}, or " \
              "leave it out to use ssh-agent, then ~/.ssh/id_*"
        why = key_file_problem(path)
        if why is None:
            try:
                self._keys = asyncssh.load_keypairs([str(Path(path).expanduser())])
                return self._keys
            except (OSError, asyncssh.KeyImportError) as exc:
                why = f"the key file {Path(path).expanduser()} is not a usable private key: " \
                      f"{getattr(exc, 'strerror', None) or exc}"
                if "assphrase" in why:  # asyncssh asks for the passphrase of an encrypted key
                    fix = "load it into ssh-agent (ssh-add) and leave the key file out"
        raise HostError(f"{self.role} {self.name}: {why}", hint=fix)

    async def connect(self) -> None:
        import asyncssh

        keys = self.keys()
        where = OPTIONS.get(self.role, OPTIONS["client host"])
        known = str(Path(self.opts.known_hosts or "~/.ssh/known_hosts").expanduser())
        known_entries = self._known_entries(known)
        host = self

        class _Client(asyncssh.SSHClient):
            def validate_host_public_key(self, h: str, addr: str, port: int, key: Any) -> bool:
                # only reached for a key known_hosts does not trust: a host it has no key for is added when
                # asked (accept-new); a host whose key changed is refused, always
                if known_entries or not host.opts.accept_new_host_keys:
                    return False
                host._add_known(known, key)
                return True

            def connection_lost(self, exc: Exception | None) -> None:
                if exc is not None and host.lost is None:
                    host.lost = f"connection lost: {exc}"

        kwargs: dict[str, Any] = {
            "port": self.spec.port, "known_hosts": known if os.path.exists(known) else ([], [], []),
            "connect_timeout": self.opts.connect_timeout_s, "keepalive_interval": KEEPALIVE_S,
            "keepalive_count_max": KEEPALIVE_MISSES, "login_timeout": self.opts.connect_timeout_s,
        }
        if self.spec.user:
            kwargs["username"] = self.spec.user
        if keys is not None:
            kwargs["client_keys"] = keys
        try:
            self.conn, _ = await asyncssh.create_connection(_Client, self.spec.host, **kwargs)
        except asyncssh.HostKeyNotVerifiable as exc:
            if known_entries:
                raise HostError(f"{self.role} {self.name}: its host key does not match {known} ({exc.reason}); "
                                "it changed, or this is another machine",
                                hint=f"if the change is expected, remove the old key with `ssh-keygen -R "
                                     f"{self._known_name()} -f {known}` and connect again") from None
            raise HostError(f"{self.role} {self.name}: not in {known}, and new host keys are not accepted",
                            hint="add its key (check the fingerprint, then connect once with ssh), or pass "
                                 f"{where['accept_new']}") from None
        except asyncssh.PermissionDenied:
            raise HostError(f"{self.role} {self.name}: the SSH login as {self.spec.user or 'the local user'} was "
                            "refused", hint=f"load a key into ssh-agent, or give {where['key']}") from None
        except (OSError, asyncio.TimeoutError, asyncssh.Error) as exc:
            why = "no answer within " f"{self.opts.connect_timeout_s:g} s" \
                if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__
            raise HostError(f"{self.role} {self.name} is unreachable over SSH (port {self.spec.port}): {why}",
                            hint="check the address, that sshd runs there and that the network lets SSH through"
                            ) from None

    def _known_name(self) -> str:
        return self.spec.host if self.spec.port == 22 else f"[{self.spec.host}]:{self.spec.port}"

    def _known_entries(self, path: str) -> bool:
        """Does known_hosts hold any key for this host (then a different key is a changed one)?"""
        import asyncssh

        if not os.path.exists(path):
            return False
        try:
            trusted, ca, revoked, *_ = asyncssh.read_known_hosts(path).match(self.spec.host, "", self.spec.port)
        except (OSError, ValueError, asyncssh.Error):
            return False
        return bool(trusted or ca or revoked)

    def _add_known(self, path: str, key: Any) -> None:
        line = f"{self._known_name()} {' '.join(key.export_public_key('openssh').decode().split()[:2])}\n"
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(line)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.abort()
            self.conn = None

    async def aclose(self) -> None:
        """Close the connection and wait until it is closed."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 5)
            except (asyncio.TimeoutError, OSError):
                conn.abort()

    # ---- commands --------------------------------------------------------------------
    async def run(self, cmd: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
        """A shell command on the host: (exit status, stdout, stderr); HostError when the host is gone."""
        import asyncssh

        if self.conn is None:
            raise HostError(f"{self.role} {self.name}: not connected ({self.lost or 'closed'})")
        try:
            r = await asyncio.wait_for(self.conn.run(cmd, check=False), timeout)
        except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
            raise HostError(f"{self.role} {self.name}: `{cmd[:60]}` failed: {exc or type(exc).__name__}") from None
        return (r.exit_status if r.exit_status is not None else 255, str(r.stdout or ""), str(r.stderr or ""))

    async def pid_alive(self, pid: int) -> bool:
        rc, _, _ = await self.run(f"kill -0 {int(pid)} 2>/dev/null")
        return rc == 0

    async def kill(self, pid: int, sig: str = "TERM") -> None:
        await self.run(f"kill -{sig} {int(pid)} 2>/dev/null; true")

    # ---- the engine ----------------------------------------------------------------------
    async def install_engine(self, local: Path, sha: str, protocol: int) -> str:
        """The engine on the host, uploaded when missing or different, checked to run and speak `protocol`."""
        path = self.spec.engine or await self.install(local, sha, "fathom-engine")
        self.engine = path
        await self._check_engine(path, protocol)
        return path

    async def install(self, local: Path, sha: str, name: str, where: str | None = None) -> str:
        """`local` at `<engine_dir>/<sha256 prefix>/<name>` on the host (or in the directory `where`), uploaded
        when missing or different."""
        d = where or f"{self.spec.engine_dir.rstrip('/')}/{sha[:16]}"
        path = f"{d}/{name}"
        rc, out, _ = await self.run(f"sha256sum {shlex.quote(path)} 2>/dev/null")
        if rc != 0 or out.split()[:1] != [sha]:
            await self._upload(local, d, path, sha)
        return path

    async def _upload(self, local: Path, d: str, path: str, sha: str) -> None:
        import asyncssh

        what = Path(path).name
        tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(3).hex()}"
        rc, _, err = await self.run(f"mkdir -p {shlex.quote(d)}")
        if rc != 0:
            raise HostError(f"{self.role} {self.name}: cannot make {d}: {err.strip()}",
                            hint="give the host an engine_dir its user can write")
        try:
            async with self.conn.start_sftp_client() as sftp:
                await sftp.put(str(local), tmp, follow_symlinks=True)
                await sftp.chmod(tmp, 0o755)
                rc, out, _ = await self.run(f"sha256sum {shlex.quote(tmp)}")
                if rc != 0 or out.split()[:1] != [sha]:
                    await sftp.remove(tmp)
                    raise HostError(f"{self.role} {self.name}: the {what} uploaded to {tmp} does not have the "
                                    f"hash sent ({out.split()[:1]} != {sha[:16]}...); removed it")
                await sftp.posix_rename(tmp, path)
        except (asyncssh.Error, OSError) as exc:
            await self.run(f"rm -f {shlex.quote(tmp)}")
            raise HostError(f"{self.role} {self.name}: uploading {what} to {path} failed: {exc}",
                            hint="check the space and permissions of engine_dir there") from None

    async def _check_engine(self, path: str, protocol: int) -> None:
        q = shlex.quote(path)
        rc, out, err = await self.run(f"{q} --version")
        if rc != 0:
            m = _LOAD_ERROR.search(err)
            if m:
                missing = [m.group(1)]
                _, ldd, _ = await self.run(f"ldd {q} 2>/dev/null")
                missing += [ln.split()[0] for ln in ldd.splitlines() if "not found" in ln]
                missing = list(dict.fromkeys(missing))
                pkgs = ", ".join(dict.fromkeys(LIB_PACKAGES.get(x, x.split(".so")[0]) for x in missing))
                raise HostError(f"{self.role} {self.name}: the engine cannot load {', '.join(missing)} "
                                f"({m.group(2).strip()})",
                                hint=f"install the package(s) {pkgs} on {self.name} (the Ceph client libraries "
                                     "of the cluster's release)")
            raise HostError(f"{self.role} {self.name}: `{path} --version` failed (exit {rc}): "
                            f"{(err or out).strip()[-300:]}",
                            hint="the engine needs the same CPU architecture and a glibc at least as new as "
                                 "this host's")
        m = re.search(r"\(protocol (\d+)\)", out)
        if not m or int(m.group(1)) != protocol:
            raise HostError(f"{self.role} {self.name}: {path} speaks protocol {m.group(1) if m else '?'}, this "
                            f"fathom needs {protocol}", hint="remove it there (fathom uploads its own when the "
                                                              "host's engine setting is left out)")
        self.facts["engine_version"] = out.strip()

    async def spawn(self, argv: list[str], spec_json: str) -> Any:
        """Start the engine with its spec on fd 3 (a here-document: no file to clean up); exec, so the
        channel's exit status is the engine's and the engine's parent is sshd."""
        cmd = (f"exec {' '.join(shlex.quote(a) for a in argv)} /dev/fd/3 3<<'FATHOM_SPEC_END'\n"
               f"{spec_json}\nFATHOM_SPEC_END\n")
        return await self.conn.create_process(cmd, encoding="utf-8", errors="replace")

    # ---- the transport (fathom.hosts.transport) -----------------------------------------
    remote = True
    start_hint = " (sshd's MaxSessions may be lower than the instances there)"

    async def provide_engine(self, local: Path, sha: str, protocol: int) -> str:
        return await self.install_engine(local, sha, protocol)

    async def start(self, spec_json: str) -> SshProcess:
        assert self.engine is not None
        return SshProcess(await self.spawn([self.engine], spec_json))

    async def alive(self, pid: int) -> bool:
        return self.conn is not None and await self.pid_alive(pid)


class SshProcess:
    """An engine on an exec channel: the channel's exit status is the engine's (exec), a signal as 128+n."""

    pid: int | None = None  # sshd does not say: the engine's `start` record does

    def __init__(self, proc: Any):
        self.proc = proc

    async def readline(self) -> str:
        return str(await self.proc.stdout.readline())

    async def read_stderr(self) -> str:
        return str(await self.proc.stderr.read())

    def write(self, data: str) -> None:
        self.proc.stdin.write(data)

    async def wait(self) -> int | None:
        try:
            await asyncio.wait_for(self.proc.wait_closed(), 10)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a dead channel ends the same way
            pass
        sig = self.proc.exit_signal
        if self.proc.exit_status is not None:
            return int(self.proc.exit_status)
        if not sig:
            return None
        return 128 + (int(getattr(signal, f"SIG{sig[0]}", 0)) if sig[0] else 0)

    def release(self) -> None:
        pass


async def open_transports(opts: ClientsSpec, engine: Path, protocol: int, ctx: Any = None) -> list[SshHost]:
    """The transport's entry (fathom.hosts.transport.TABLE): every SSH host of opts."""
    return await connect_all(opts, engine, protocol) if opts.ssh else []


async def connect_all(opts: ClientsSpec, engine: Path, protocol: int) -> list[SshHost]:
    """Connect to every remote host of opts at once and install the engine there; HostError naming every
    host that failed (the others are closed again)."""
    hosts = [SshHost(h, opts) for h in opts.ssh]
    raise_any([key_error(h) for h in hosts], lambda: None)  # every host's key file, before any connection
    sha = sha256_file(engine)

    async def one(h: SshHost) -> None:
        await h.connect()
        await h.install_engine(engine, sha, protocol)

    results = await asyncio.gather(*(one(h) for h in hosts), return_exceptions=True)
    raise_any(results, lambda: [h.close() for h in hosts])
    return hosts


def key_error(h: SshHost) -> BaseException | None:
    """h's key file read, or the error naming it (for raise_any: every host's problem at once)."""
    try:
        h.keys()
    except HostError as exc:
        return exc
    return None


def raise_any(results: list[Any], close: Any) -> None:
    """The per-host failures of a gather(return_exceptions=True), if any, as one HostError naming every host
    that failed (one alone as it is; anything not a FathomError raised as is), after close()."""
    errors = [r for r in results if isinstance(r, BaseException)]
    if not errors:
        return
    close()
    for e in errors:
        if not isinstance(e, FathomError):
            raise e
    first = errors[0]
    assert isinstance(first, FathomError)
    if len(errors) == 1:
        raise first
    raise HostError("; ".join(e.message for e in errors if isinstance(e, FathomError)), hint=first.hint)
