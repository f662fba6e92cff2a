"""Ceph access for the run's pods: a conf (fsid, mon_host) and a keyring holding one entity's key.

It comes from the conf and keyring the run was given (read with Ceph's own ceph-conf and ceph-authtool, so
metavariables and defaults resolve as for any client), or from a Rook cluster's objects, as Rook's toolbox
reads them: the ConfigMap `rook-ceph-mon-endpoints` (key `data`: `a=10.0.0.1:6789,b=...`) and the Secret
`rook-ceph-mon` (keys `ceph-username` and `ceph-secret`; `admin-secret` with client.admin before Rook 1.9,
and `fsid`). fathom puts it in a Secret of its own that the pods mount (fathom.hosts.pods); the key is never
written anywhere else, and this object's repr leaves it out.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

from fathom.cluster.client import HOST, Client
from fathom.errors import FathomError

MOUNT = "/etc/fathom-ceph"  # where the pods see the Secret: ceph.conf and keyring
ROOK_ENDPOINTS = "rook-ceph-mon-endpoints"
ROOK_SECRET = "rook-ceph-mon"


class AccessError(FathomError):
    """The conf, keyring or Rook objects cannot give the pods Ceph access."""

    exit_code = 4


@dataclass
class CephAccess:
    name: str  # the entity, client.admin
    fsid: str
    mon_host: str
    source: str  # where it came from, for messages and the run's record
    key: str = field(repr=False)

    def conf(self) -> str:
        return f"[global]\nfsid = {self.fsid}\nmon_host = {self.mon_host}\n"

    def keyring(self) -> str:
        return f"[{self.name}]\n\tkey = {self.key}\n"

    def secret_data(self) -> dict[str, str]:
        """A Secret's `data` (base64)."""
        return {k: base64.b64encode(v.encode()).decode() for k, v in
                (("ceph.conf", self.conf()), ("keyring", self.keyring()))}

    def connection(self) -> dict[str, str]:
        """The engine's connection fields inside a pod."""
        return {"conf": f"{MOUNT}/ceph.conf", "keyring": f"{MOUNT}/keyring", "name": self.name}

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "name": self.name, "fsid": self.fsid, "mon_host": self.mon_host}


def _tool(argv: list[str], what: str, client: Client = HOST) -> str:
    try:
        p = subprocess.run([*client.argv(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=30,
                           env=client.env(dict(os.environ)))
    except FileNotFoundError:
        raise AccessError(f"{argv[0]} is not installed; it reads {what}",
                          hint="install Debian's ceph-common (make install does)") from None
    if p.returncode != 0:
        raise AccessError(f"cannot read {what}: `{argv[0]}` exit {p.returncode}: {p.stderr.strip()[-200:]}")
    return p.stdout.strip()


def from_conn(conf: str, name: str, keyring: str | None, client: Client = HOST) -> CephAccess:
    """From the run's conf and keyring paths (a keyring not named: the one its conf gives for `name`)."""
    look = lambda key: _tool(["ceph-conf", "-c", conf, "--name", name, "--lookup", key],  # noqa: E731
                             f"{key} from {conf}", client)
    mon_host, fsid = look("mon_host"), look("fsid")
    paths = [keyring] if keyring else [p for p in look("keyring").split(",") if p.strip()]
    key = None
    for path in paths:
        try:
            key = _tool(["ceph-authtool", path.strip(), "--name", name, "--print-key"], f"{name}'s key from {path}",
                        client)
            break
        except AccessError:
            if path is paths[-1]:
                raise
    if not key or not mon_host:
        raise AccessError(f"{conf} gives no mon_host" if not mon_host else f"no key for {name} in {paths}")
    return CephAccess(name=name, fsid=fsid, mon_host=mon_host, source=f"conf {conf}", key=key)


def rook_mon_host(endpoints: str) -> str:
    """Rook's `a=10.0.0.1:6789,b=10.0.0.2:6789` as a mon_host (names may hold digits, `-` and `_`)."""
    addrs = [e.split("=", 1)[1] if "=" in e else e for e in endpoints.split(",") if e.strip()]
    return ",".join(a.strip() for a in addrs)


async def from_rook(core: Any, namespace: str) -> CephAccess:
    """From a Rook cluster's mon endpoints ConfigMap and mon Secret in `namespace` (core: a CoreV1Api)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        cm = await core.read_namespaced_config_map(ROOK_ENDPOINTS, namespace)
        sec = await core.read_namespaced_secret(ROOK_SECRET, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise AccessError(f"no Rook cluster in namespace {namespace}: ConfigMap {ROOK_ENDPOINTS} or Secret "
                              f"{ROOK_SECRET} is missing", hint="name the namespace Rook runs the cluster in "
                                                                "(rook: {namespace: ...}), or leave rook: out to "
                                                                "use the run's conf and keyring") from None
        raise
    data = {k: base64.b64decode(v).decode() for k, v in (sec.data or {}).items()}
    mon_host = rook_mon_host((cm.data or {}).get("data", ""))
    name = data.get("ceph-username") or "client.admin"
    key = data.get("ceph-secret") or data.get("admin-secret")
    if not mon_host or not key:
        raise AccessError(f"Rook's objects in {namespace} give no mon endpoints or no key "
                          f"({ROOK_ENDPOINTS}: {'ok' if mon_host else 'empty'}; {ROOK_SECRET}: keys "
                          f"{', '.join(sorted(data))})")
    return CephAccess(name=name, fsid=data.get("fsid", ""), mon_host=mon_host,
                      source=f"rook {namespace}/{ROOK_SECRET}", key=key)


_ADDR = re.compile(r"(?:v[12]:)?(\[[0-9a-fA-F:]+\]|[0-9.]+|[A-Za-z0-9.-]+)(?::(\d+))?")


def mon_addrs(mon_host: str) -> list[tuple[str, int]]:
    """The mons' addresses, one per mon (its v2 address where it has one): `[v2:a:3300,v1:a:6789],b:6789,c`.
    A bare address means both default ports; 3300 (msgr2) is probed."""
    out: list[tuple[str, int]] = []
    for mon in re.findall(r"\[[^\]]*v[12]:[^\]]*\]|[^,\s]+", mon_host):
        addrs = [(m.group(1).strip("[]"), int(m.group(2) or 3300)) for m in
                 (_ADDR.fullmatch(a.strip().split("/")[0]) for a in mon.strip("[]").split(",")) if m]
        if addrs:
            out.append(addrs[0])
    return out
