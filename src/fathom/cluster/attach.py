"""The cluster a command measures, as attached: an existing one, or fathom's own local one.

Attach options follow the ceph tools: --conf (or CEPH_CONF, then /etc/ceph/ceph.conf),
--id or --name, --keyring. Attaching never creates or removes daemons; telemetry
covers whichever Ceph daemons run on this host.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from fathom.cluster import client
from fathom.cluster.ceph import Ceph, Connection
from fathom.cluster.local import Daemon, LocalCluster, pid_alive

DAEMON_PROGRAMS = {"ceph-osd": "osd", "ceph-mon": "mon", "ceph-mgr": "mgr", "ceph-mds": "mds", "radosgw": "rgw",
                   "ceph-fuse": "fuse", "rbd-fuse": "rbd_fuse", "ganesha.nfsd": "ganesha"}


CLIENT_NAME = "--client-name"  # the Ceph client's full name on every command (run and slo's --name is the run's)


def add_attach_args(parser: argparse.ArgumentParser, name_alias: bool = True) -> None:
    """--conf/--id/--client-name/--keyring; --name too, as the ceph tools spell it, unless the command's --name
    means something else (run, slo: the run's name)."""
    g = parser.add_argument_group("existing cluster (attach); without these, fathom starts its own local cluster")
    g.add_argument("-c", "--conf", help="ceph.conf of the cluster (default: $CEPH_CONF)")
    g.add_argument("--id", dest="client_id", help="client id, e.g. admin (default admin)")
    flags = [CLIENT_NAME, "--name"] if name_alias else [CLIENT_NAME]
    g.add_argument(*flags, dest="client_name", metavar="NAME",
                   help="full client name, e.g. client.admin" + (" (--name: the same)" if name_alias else ""))
    g.add_argument("--keyring", help="keyring holding the client's key")
    parser.add_argument("--client-ceph", metavar="host|RELEASE|DIR",
                        help="whose Ceph client fathom uses (every ceph, rados, rbd, radosgw-admin call and the "
                             "engine's librados, librbd, libcephfs): host (this host's), a release built by `fathom "
                             "cluster rootfs` (reef, tentacle), a root file system or a Ceph build directory; "
                             "default: a local cluster's own release, else this host's")


@dataclass
class Attachment:
    """How fathom reaches the cluster it measures, and, when it is fathom's own local cluster, that cluster."""

    conn: Connection
    local: LocalCluster | None = None

    def ceph(self, timeout: float = 60.0) -> Ceph:
        return Ceph(self.conn, timeout=timeout)

    def local_daemons(self) -> list[Daemon]:
        """Daemons on this host: exactly ours for a local cluster, else every ceph daemon found in /proc."""
        if self.local is not None:
            return [d for d in self.local.daemons() if d.running]
        return scan_local_daemons()


def attach_from_args(args: argparse.Namespace, probe_timeout: float | None = 30.0) -> Attachment | None:
    """The attached cluster the options name (checked reachable, unless probe_timeout is None), or None when
    none was named."""
    conf = getattr(args, "conf", None)
    cid, name, keyring = (getattr(args, a, None) for a in ("client_id", "client_name", "keyring"))
    if not any((conf, cid, name, keyring)) and not os.environ.get("CEPH_CONF"):
        return None
    conn = Connection.from_args(conf, cid, name, keyring)
    local = local_for(conn.conf)
    conn = conn.with_client(client_for(getattr(args, "client_ceph", None), conn.conf))
    attached = Attachment(conn=conn, local=local)
    if probe_timeout is not None:
        attached.ceph().probe(timeout=probe_timeout)
    return attached


def client_for(asked: str | None, conf: str) -> client.Client:
    """Whose Ceph client reaches the cluster of `conf`: the one asked for (--client-ceph, clients.ceph), else
    fathom's own local cluster's (its daemons' release), else this host's."""
    if asked:
        return client.resolve(asked)
    local = local_for(conf)
    return local.client() if local else client.HOST


def local_for(conf: str) -> LocalCluster | None:
    """If the conf belongs to a fathom local cluster, know its daemons exactly."""
    root = Path(conf).parent
    lc = LocalCluster(root)
    return lc if lc.exists() and Path(conf) == lc.conf_path else None


def scan_local_daemons() -> list[Daemon]:
    """Every Ceph daemon, gateway and client process in this host's /proc, with what its command line and
    cgroup say of its cluster (conf_arg, cephadm_fsid); which of them are the cluster's is for the caller."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        prog = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else ""
        kind = DAEMON_PROGRAMS.get(prog)
        if not kind or not pid_alive(int(proc.name)):
            continue
        args = [a.decode(errors="replace") for a in argv[1:]]
        ident = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-i", "--id", "-n", "--name")), proc.name)
        name = ident if "." in ident else f"{kind}.{ident}"
        try:
            cgroup = (proc / "cgroup").read_text(errors="replace")
        except OSError:
            cgroup = ""
        out.append(Daemon(name=name, kind=kind, pid=int(proc.name), fsid=cephadm_fsid(cgroup), conf=conf_arg(args)))
    return sorted(out, key=lambda d: d.name)


def conf_arg(args: list[str]) -> str | None:
    """The conf a command line names (`-c PATH`, `--conf PATH`, `--conf=PATH`; the last wins, `--` ends the
    options), as Ceph's own parsing reads it; None when it names none."""
    conf = None
    it = iter(args)
    for a in it:
        if a == "--":
            break
        if a.startswith("--conf="):
            conf = a[len("--conf="):]
        elif a in ("-c", "--conf"):
            conf = next(it, conf)
    return conf or None


def cephadm_fsid(cgroup: str) -> str | None:
    """The cluster of a cephadm unit the process runs in (`ceph-FSID@NAME.service` in /proc/PID/cgroup)."""
    for seg in cgroup.replace("\n", "/").split("/"):
        if seg.startswith("ceph-") and "@" in seg and seg.endswith(".service"):
            fsid = seg[len("ceph-"):seg.index("@")]
            if fsid:
                return fsid
    return None
