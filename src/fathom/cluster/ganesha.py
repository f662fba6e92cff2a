"""nfs-ganesha on loopback, serving the local cluster's CephFS (FSAL_CEPH) and a local directory (FSAL_VFS).

The engine's nfs target (libnfs, NFSv4.0) is the client. Ganesha runs NFSv4 only
on 127.0.0.1 at a free port, so it needs neither rpcbind (only NFSv3, MOUNT, NLM and
RQUOTA register with it; RQUOTA is off) nor dbus (its absence is logged, then
ignored). Everything it writes is under DIR/ganesha: its config, its pid file, the
NFSv4 recovery directory and the Kerberos credential cache directory it makes even
with Kerberos off (by default /var/run/ganesha); its log is DIR/log/ganesha.nfs.log.
Exports (pseudo paths, NFSv4 has no MOUNT protocol):

- `/cephfs`: the root of the cluster's file system (needs `mds`), through
  libcephfs inside ganesha as client.admin.
- `/local`: DIR/nfs-local, a directory on the cluster directory's disk: the NFS
  baseline without Ceph.

Started like the FUSE daemons (cluster.mounts): it goes into the cluster's journal (DIR/journal.json)
before the process starts, the pid into DIR/run/ganesha.nfs.pid right after, and
the daemon is listed in the cluster's state, so telemetry samples it (kind
`ganesha`) and `mounts.teardown` (`fathom cluster down`, `cluster umount`, the next
run) stops it by pid, also after fathom was killed.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.cluster import mounts
from fathom.cluster.ceph import require_binaries
from fathom.errors import ClusterError

if TYPE_CHECKING:
    from fathom.cluster.local import LocalCluster

GANESHA = "ganesha.nfs"  # daemon name; kind "ganesha"
START_TIMEOUT_S = 60.0
EXPORTS = {"cephfs": "/cephfs", "local": "/local"}


@dataclass(frozen=True)
class Server:
    host: str
    port: int

    def export(self, which: str) -> str:
        """The pseudo path of an export ("cephfs" or "local")."""
        return EXPORTS[which]


def conf_path(cluster: LocalCluster) -> Path:
    return cluster.root / "ganesha" / "ganesha.conf"


def local_export_dir(cluster: LocalCluster) -> Path:
    return cluster.root / "nfs-local"


def config(cluster: LocalCluster, port: int, cephfs: bool) -> str:
    """Ganesha's whole configuration: NFSv4 only on loopback, the local export, and CephFS when asked."""
    from fathom.cluster.local import FS_NAME

    d = cluster.root / "ganesha"
    text = f"""# written by fathom for the disposable cluster in {cluster.root}
NFS_CORE_PARAM {{
    Protocols = 4;            # v4 only: no MOUNT, NLM or RQUOTA listeners, nothing registers with rpcbind
    Bind_Addr = 127.0.0.1;
    NFS_Port = {port};
    Enable_NLM = false;
    Enable_RQUOTA = false;    # its rpcbind registration is fatal when rpcbind does not run
    Enable_UDP = false;
}}
NFSv4 {{
    Graceless = true;         # no 90 s grace period at start
    Minor_Versions = 0, 1, 2; # libnfs speaks 4.0
    RecoveryBackend = fs;
    RecoveryRoot = {d}/recovery;
    Only_Numeric_Owners = true;
}}
EXPORT_DEFAULTS {{
    Protocols = 4;
    Transports = TCP;
    SecType = sys;
    Squash = No_Root_Squash;
    Access_Type = None;       # only loopback clients below may use the exports
}}
EXPORT {{
    Export_Id = 1;
    Path = {local_export_dir(cluster)};
    Pseudo = {EXPORTS['local']};
    CLIENT {{ Clients = 127.0.0.1; Access_Type = RW; }}
    FSAL {{ Name = VFS; }}
}}
NFS_KRB5 {{
    Active_krb5 = false;      # AUTH_SYS only
    CCacheDir = {d}/krb5;     # made at start even so; its default is /var/run/ganesha
}}
LOG {{ Default_Log_Level = EVENT; }}
"""
    if cephfs:
        text += f"""EXPORT {{
    Export_Id = 2;
    Path = /;
    Pseudo = {EXPORTS['cephfs']};
    Attr_Expiration_Time = 0;
    CLIENT {{ Clients = 127.0.0.1; Access_Type = RW; }}
    FSAL {{ Name = CEPH; User_Id = "admin"; Filesystem = "{FS_NAME}"; }}
}}
CEPH {{ Ceph_Conf = {cluster.conf_path}; }}
"""
    return text


def server(cluster: LocalCluster) -> Server | None:
    """The running ganesha of this cluster, if any."""
    st = cluster.state() or {}
    port = st.get("ganesha_port")
    if port and _alive(cluster):
        return Server("127.0.0.1", int(port))
    return None


def ganesha(cluster: LocalCluster, need_cephfs: bool = False, port: int | None = None) -> Server:
    """Start ganesha for this cluster (or keep the running one); returns where it listens."""
    require_binaries("ganesha.nfsd")
    st = cluster.state()
    if st is None:
        raise ClusterError(f"no fathom cluster in {cluster.root}")
    if need_cephfs and not st.get("mds"):
        raise ClusterError("the NFS export of CephFS needs the cluster's file system: start the cluster with an MDS",
                           hint="`fathom cluster up --mds`, or `mds: true` under the suite's cluster")
    running = server(cluster)
    if running is not None and (not need_cephfs or st.get("ganesha_cephfs")):
        return running
    mounts.teardown(cluster, only=GANESHA)
    cephfs = bool(st.get("mds"))
    if port is None:
        from fathom.cluster.localconf import free_port

        port = free_port()
    d = cluster.root / "ganesha"
    (d / "recovery").mkdir(parents=True, exist_ok=True)
    local_export_dir(cluster).mkdir(exist_ok=True)
    conf_path(cluster).write_text(config(cluster, port, cephfs))
    log = cluster.log_dir / f"{GANESHA}.log"
    log.unlink(missing_ok=True)  # the tail shown on failure is this start's
    mounts.journal(cluster).note("daemon", GANESHA)
    pid = cluster.spawn(GANESHA, ["ganesha.nfsd", "-F", "-f", str(conf_path(cluster)), "-L", str(log), "-N",
                                  "NIV_EVENT", "-p", str(d / "ganesha.pid")], ceph_args=False,
                        ganesha_port=port, ganesha_cephfs=cephfs)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        from fathom.cluster.local import pid_alive

        if not pid_alive(pid):
            tail = log_tail(cluster)
            mounts.teardown(cluster, only=GANESHA)  # the cluster's state lists no dead daemon
            raise ClusterError(f"nfs-ganesha exited during start-up\n{tail}",
                               hint=f"its config is {conf_path(cluster)}; logs are in {cluster.log_dir}")
        if _initialized(log) and _listens("127.0.0.1", port):
            cluster.progress(f"nfs-ganesha serving {', '.join(EXPORTS[e] for e in EXPORTS if cephfs or e != 'cephfs')}"
                             f" on 127.0.0.1:{port} (NFSv4)")
            return Server("127.0.0.1", port)
        time.sleep(0.2)
    tail = log_tail(cluster)
    mounts.teardown(cluster, only=GANESHA)
    raise ClusterError(f"nfs-ganesha did not serve 127.0.0.1:{port} within {START_TIMEOUT_S:.0f} s\n{tail}",
                       hint=f"logs are in {cluster.log_dir}")


def _alive(cluster: LocalCluster) -> bool:
    return any(d.name == GANESHA and d.running and cluster.owns(d) for d in cluster.daemons())


def _initialized(log: Path) -> bool:
    try:
        return "NFS SERVER INITIALIZED" in log.read_text(errors="replace")
    except OSError:
        return False


def _listens(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def log_tail(cluster: LocalCluster, lines: int = 15) -> str:
    """The last lines of ganesha's log and output, and its fatal and major lines if the tail does not hold them
    (dbus and Kerberos complaints at start-up are expected and harmless here)."""
    parts = []
    for f in (cluster.log_dir / f"{GANESHA}.out", cluster.log_dir / f"{GANESHA}.log"):
        try:
            all_lines = f.read_text(errors="replace").splitlines()
        except OSError:
            continue
        bad = [ln for ln in all_lines[:-lines] if ":FATAL :" in ln or ":MAJ :" in ln][-5:]
        if bad:
            parts.append(f"--- fatal and major lines of {f} ---\n" + "\n".join(bad))
        if all_lines:
            parts.append(f"--- last lines of {f} ---\n" + "\n".join(all_lines[-lines:]))
    return "\n".join(parts) or f"(no log for {GANESHA} in {cluster.log_dir})"
