"""How fathom reaches a cluster: connection facts and bounded calls to the ceph CLIs.

Every call has a timeout, so an unreachable mon turns into an error that names
what was tried instead of a hang. The local cluster passes its own conf
explicitly, so nothing in /etc/ceph is read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fathom.cluster import keys
from fathom.cluster.client import HOST, Client
from fathom.errors import ClusterError, FathomError

CEPH_TOOLS_HINT = "install Ceph's packages with `make install` (Debian: ceph-common ceph-mon ceph-osd ceph-mgr)"


def require_binaries(*names: str) -> dict[str, str]:
    """Absolute paths of the named programs, or one error listing every missing one."""
    found = {n: shutil.which(n) for n in names}
    missing = [n for n, p in found.items() if not p]
    if missing:
        raise FathomError(f"Ceph programs not found: {', '.join(missing)}", hint=CEPH_TOOLS_HINT, exit_code=4)
    return {n: str(p) for n, p in found.items()}


@dataclass(frozen=True)
class Connection:
    """What a client needs to reach a cluster. The keyring is a path; its secret is never read here. `client`:
    whose Ceph programs and libraries reach it (fathom.cluster.client; default this host's)."""

    conf: str
    name: str = "client.admin"
    keyring: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    client: Client = HOST

    @property
    def client_id(self) -> str:
        return self.name.split(".", 1)[1] if self.name.startswith("client.") else self.name

    def args(self) -> list[str]:
        """Connection arguments shared by ceph, rados, rbd, radosgw-admin."""
        out = ["--conf", self.conf, "--name", self.name]
        if self.keyring:
            out += ["--keyring", self.keyring]
        return out

    def env(self) -> dict[str, str]:
        env = self.client.env(dict(os.environ))
        env["CEPH_CONF"] = self.conf
        env.pop("CEPH_ARGS", None)  # a user's CEPH_ARGS must not redirect our calls
        return env

    def tool(self, name: str) -> list[str]:
        """argv prefix of one of Ceph's programs (ceph, rados, rbd, ...) of this connection's client."""
        return self.client.argv(name)

    def with_client(self, client: Client) -> "Connection":
        return replace(self, client=client)

    def describe(self) -> dict[str, Any]:
        """Safe to store: paths and names, never key material."""
        return {"conf": self.conf, "name": self.name, "keyring": self.keyring, "options": dict(self.options)}

    @staticmethod
    def from_args(conf: str | None, client_id: str | None, name: str | None, keyring: str | None) -> "Connection":
        """Resolve --conf/--id/--name/--keyring like the ceph tools do (CEPH_CONF, then /etc/ceph)."""
        conf = conf or os.environ.get("CEPH_CONF") or "/etc/ceph/ceph.conf"
        if not Path(conf).is_file():
            raise ClusterError(
                f"ceph config {conf!r} does not exist",
                hint="pass --conf PATH (or set CEPH_CONF), or start a local cluster with `fathom cluster up`",
            )
        if name and client_id:
            raise FathomError("give --id or --name, not both", exit_code=2)
        full = name or f"client.{client_id or 'admin'}"
        if keyring and not Path(keyring).is_file():
            raise ClusterError(f"keyring {keyring!r} does not exist", hint="pass the path of an existing keyring")
        return Connection(conf=str(Path(conf).resolve()), name=full,
                          keyring=str(Path(keyring).resolve()) if keyring else None)


class Ceph:
    """Bounded calls to the ceph, rados, rbd and radosgw-admin commands for one connection."""

    def __init__(self, conn: Connection, timeout: float = 60.0):
        self.conn = conn
        self.timeout = timeout

    def _run(self, argv: list[str], timeout: float | None, input_data: str | None = None,
             shown: str = "") -> subprocess.CompletedProcess:
        t = timeout or self.timeout
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=t, env=self.conn.env(), input=input_data,
                stdin=None if input_data is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(
                f"`{shown}` did not answer within {t:.0f} s",
                hint=f"check that the mons in {self.conn.conf} are reachable and the cluster is up",
            ) from None
        except FileNotFoundError:
            if self.conn.client.kind == "host":
                require_binaries(argv[0])
            raise ClusterError(f"{argv[0]} does not exist: the Ceph client {self.conn.client.label()} lacks it",
                               hint="rebuild the root (`fathom cluster rootfs RELEASE --rebuild`) or choose "
                                    "another --client-ceph") from None

    def call(self, tool: str, *args: str, fmt_json: bool = True, timeout: float | None = None,
             check: bool = True, input_data: str | None = None) -> Any:
        """Run `tool <conn> args`; JSON output decoded when fmt_json. Errors name the command and its stderr."""
        argv = [*self.conn.tool(tool), *self.conn.args()]
        if tool == "ceph":
            argv += ["--connect-timeout", str(int(min(timeout or self.timeout, 30)))]
        else:
            argv += ["--client_mount_timeout", str(int(min(timeout or self.timeout, 30)))]
        argv += list(args)
        if fmt_json:
            argv += ["--format", "json"]
        proc = self._run(argv, timeout, input_data, shown=" ".join([tool, *args[:6]]))
        if check and proc.returncode != 0:
            err = (proc.stderr or proc.stdout).strip().splitlines()
            last = err[-1] if err else f"exit code {proc.returncode}"
            raise ClusterError(f"`{tool} {' '.join(args)}` failed: {last}")
        if not fmt_json:
            return proc if not check else proc.stdout
        text = proc.stdout.strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            # some commands print a line of prose before their JSON
            for i, line in enumerate(text.splitlines()):
                if line.startswith(("{", "[")):
                    return json.loads("\n".join(text.splitlines()[i:]))
            raise ClusterError(f"`{tool} {' '.join(args)}` printed no JSON: {text[:200]}") from None

    def ceph(self, *args: str, **kw: Any) -> Any:
        return self.call("ceph", *args, **kw)

    def rados(self, *args: str, **kw: Any) -> Any:
        return self.call("rados", *args, **kw)

    def rbd(self, *args: str, **kw: Any) -> Any:
        return self.call("rbd", *args, **kw)

    def radosgw_admin(self, *args: str, **kw: Any) -> Any:
        return self.call("radosgw-admin", *args, **kw)

    def probe(self, timeout: float = 30.0) -> dict[str, Any]:
        """`ceph status`, bounded; the error names the conf, the mon addresses tried and how long it waited."""
        t0 = time.monotonic()
        try:
            return self.ceph("status", timeout=timeout)
        except ClusterError as exc:
            refused = key_refused(self.conn, exc.message)
            if refused is not None:
                raise refused from None
            mons = _mon_host(self.conn.conf)
            raise ClusterError(
                f"cannot reach the cluster of {self.conn.conf} (mon_host {mons or 'not set'}) "
                f"as {self.conn.name} {waited(time.monotonic() - t0, timeout)}: {exc.message}",
                hint="check the conf path, that the mons are running, and the --id/--keyring you gave",
            ) from None

    def version(self) -> str:
        return self.conn.client.version() or ""



def waited(elapsed: float, timeout: float) -> str:
    """How long a call that failed waited: "within 30 s" only when it used its time; a command that failed
    early (refused auth, no mon_host, a mon that said no) is not a timeout, and its error says what happened."""
    if elapsed >= 0.9 * timeout:
        return f"within {timeout:.0f} s"
    return f"after {elapsed:.1f} s (the command failed before its {timeout:.0f} s limit, it did not time out)"


def key_refused(conn: Connection, detail: str) -> ClusterError | None:
    """The error for a client that cannot read its own key's type (a Ceph 16 client, a Ceph 20 aes256k key),
    or None when that is not why `detail` failed."""
    why = keys.unreadable_key(conn.keyring or conf_keyring(conn.conf, conn.name), conn.name, conn.client.major(),
                              detail)
    if why is None:
        return None
    return ClusterError(f"cannot reach the cluster of {conn.conf} as {conn.name} with "
                        f"{conn.client.version() or 'this client'}: {why}",
                        hint="use that release's client: --client-ceph tentacle (built once with `fathom cluster "
                             "rootfs tentacle`), or a root or build directory of Ceph 20 or later")


def conf_keyring(conf: str, name: str) -> str | None:
    """The keyring a client finds for `name` with no --keyring: the conf's `keyring` (its [name], [client] or
    [global] section, $cluster and $name expanded), else the first of Ceph's default paths that exists."""
    import configparser

    cp = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        with open(conf) as f:
            cp.read_string("\n".join(line.strip() for line in f))
    except (OSError, configparser.Error):
        cp = configparser.RawConfigParser()
    found = next((cp.get(s, k) for s in (name, "client", "global") if cp.has_section(s)
                  for k in ("keyring",) if cp.has_option(s, k)), None)
    cands = found.split(",") if found else [f"/etc/ceph/ceph.{name}.keyring", "/etc/ceph/ceph.keyring",
                                            "/etc/ceph/keyring"]
    for c in cands:
        p = c.strip().replace("$cluster", "ceph").replace("$name", name)
        if Path(p).is_file():
            return p
    return None


def _mon_host(conf: str) -> str | None:
    try:
        for line in Path(conf).read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip().replace(" ", "_") in ("mon_host", "mon_addr"):
                return value.strip()
    except OSError:
        return None
    return None
