"""Mounts fathom makes on its local cluster: CephFS through ceph-fuse, and ext4 on an RBD image without krbd.
(nfs-ganesha, which serves CephFS and a local directory over NFS, is in cluster.ganesha; it is
recorded and torn down here like the FUSE daemons.)

- `ceph_fuse(cluster)`: the cluster's file system (it needs `mds`) mounted by
  ceph-fuse at DIR/mnt/cephfs.
- `rbd_ext4(cluster, size)`: an RBD image shown as a file by rbd-fuse
  (DIR/mnt/rbd-fuse/<image>), a loop device on that file, ext4 made on it and
  mounted at DIR/mnt/rbd-ext4 (what cbt does; this kernel has no krbd).

The FUSE daemons run in the foreground in their own session, started like the
cluster's daemons (pid file in DIR/run, listed in the cluster's state, so
telemetry samples them and `down` stops them by pid). Every step is written to
the cluster's undo journal (fathom.cluster.journal, in DIR/journal.json: kinds
fuse, loop, mount, daemon) *before* it is taken, so whatever a crash or a SIGKILL
of fathom leaves behind is known: `teardown` (run by `fathom cluster down`, and by
the next mount or run on that cluster) lazily unmounts each mount point, detaches
each loop device and stops each FUSE daemon, newest first, touching nothing that
is not in the journal. A `daemon` entry (ganesha) is a daemon with no mount of its
own, stopped by pid the same way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from fathom.cluster.ceph import require_binaries
from fathom.cluster.journal import MOUNT_KINDS, Journal, file_journal
from fathom.errors import ClusterError



class LocalCluster(Protocol):
    """What mounting needs of fathom's local cluster (fathom.cluster.local.LocalCluster fills it; that module
    tears the mounts down when it stops its daemons, so this one does not import it)."""

    root: Path
    log_dir: Path
    progress: Callable[[str], None]

    def state(self) -> dict[str, Any] | None: ...
    def spawn(self, name: str, argv: list[str]) -> int: ...
    def log_tail(self, name: str) -> str: ...
    def ceph(self) -> Any: ...
    def daemons(self) -> list[Any]: ...
    def owns(self, d: Any) -> bool: ...
    def forget(self, name: str, *keys: str) -> None: ...

JOURNAL = "journal.json"
LEGACY = "mounts.json"  # the record of fathom 0.x before the journal: read once, then replaced
# daemon names (kind = the part before the dot, as telemetry groups them)
CEPH_FUSE = "fuse.cephfs"
RBD_FUSE = "rbd_fuse.fs"
RBD_POOL = "fathom-fs"
RBD_IMAGE = "fathom-fs0"
MOUNT_TIMEOUT_S = 60.0


def mount_table() -> dict[str, str]:
    """Mount point -> filesystem type, from /proc/self/mounts (octal escapes decoded)."""
    out = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out[parts[1].encode().decode("unicode_escape")] = parts[2]
    return out


def journal(cluster: LocalCluster) -> Journal:
    """The cluster's own undo journal: the mounts and daemons fathom added to it."""
    j = file_journal(cluster.root / JOURNAL)
    legacy = cluster.root / LEGACY
    if legacy.is_file():
        try:
            steps = json.loads(legacy.read_text())
        except (OSError, json.JSONDecodeError):
            steps = []
        for st in steps:
            kind = st.get("kind")
            if kind == "loop":
                j.note("loop", st["file"], **({"dev": st["dev"]} if st.get("dev") else {}))
            elif kind in ("fuse", "daemon"):
                j.note(kind, st["name"], **({"path": st["path"]} if st.get("path") else {}))
            elif kind == "mount":
                j.note("mount", st["path"])
        legacy.unlink()
    return j


def _run(argv: list[str], what: str, timeout: float = 120) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise ClusterError(f"{what} failed: `{' '.join(argv)}` exited {p.returncode}: "
                           f"{(p.stderr or p.stdout).strip()[-600:]}")
    return p.stdout


def _start_fuse(cluster: LocalCluster, name: str, argv: list[str], mnt: Path) -> int:
    """Start a FUSE daemon like the cluster's own daemons, and wait until its mount point is mounted."""
    st = cluster.state()
    if st is None:
        raise ClusterError(f"no fathom cluster in {cluster.root}")
    if str(mnt) in mount_table():
        raise ClusterError(f"{mnt} is mounted already (a stale mount?)",
                           hint=f"`fathom cluster down --dir {cluster.root}` cleans the mounts fathom made")
    mnt.mkdir(parents=True, exist_ok=True)
    journal(cluster).note("fuse", name, path=str(mnt))
    pid = cluster.spawn(name, argv)
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while time.monotonic() < deadline:
        if mount_table().get(str(mnt), "").startswith("fuse"):
            return pid
        d = next(d for d in cluster.daemons() if d.name == name)
        if not d.running:
            raise ClusterError(f"{name} exited before mounting {mnt}\n{cluster.log_tail(name)}",
                               hint=f"logs are in {cluster.log_dir}")
        time.sleep(0.2)
    raise ClusterError(f"{name} did not mount {mnt} within {MOUNT_TIMEOUT_S:.0f} s\n{cluster.log_tail(name)}")


def ceph_fuse(cluster: LocalCluster) -> Path:
    """CephFS of the local cluster mounted by ceph-fuse; returns the mount point."""
    require_binaries("ceph-fuse")
    st = cluster.state() or {}
    if not st.get("mds"):
        raise ClusterError("a ceph-fuse mount needs the cluster's file system: start the cluster with an MDS",
                           hint="`fathom cluster up --mds`, or `mds: true` under the suite's cluster")
    mnt = cluster.root / "mnt" / "cephfs"
    if mount_table().get(str(mnt), "").startswith("fuse") and _alive(cluster, CEPH_FUSE):
        return mnt
    teardown(cluster, only=CEPH_FUSE)
    _start_fuse(cluster, CEPH_FUSE, ["ceph-fuse", "-n", "client.admin", str(mnt)], mnt)
    cluster.progress(f"CephFS mounted by ceph-fuse at {mnt}")
    return mnt


def rbd_ext4(cluster: LocalCluster, size: int = 4 << 30) -> Path:
    """ext4 on an RBD image through rbd-fuse and a loop device; returns the ext4 mount point."""
    require_binaries("rbd-fuse", "losetup", "mkfs.ext4", "mount", "umount")
    mnt = cluster.root / "mnt" / "rbd-ext4"
    if mount_table().get(str(mnt)) == "ext4" and _alive(cluster, RBD_FUSE):
        return mnt
    teardown(cluster, only=RBD_FUSE)
    ceph = cluster.ceph()
    pools = set(ceph.ceph("osd", "pool", "ls") or [])
    if RBD_POOL not in pools:
        ceph.ceph("osd", "pool", "create", RBD_POOL, "16", fmt_json=False)
        ceph.ceph("osd", "pool", "application", "enable", RBD_POOL, "rbd", fmt_json=False)
        ceph.rbd("pool", "init", RBD_POOL, fmt_json=False)
    images = ceph.rbd("ls", RBD_POOL) or []
    if RBD_IMAGE not in images:
        ceph.rbd("create", f"{RBD_POOL}/{RBD_IMAGE}", "--size", f"{size >> 20}M", fmt_json=False)
    fuse_dir = cluster.root / "mnt" / "rbd-fuse"
    _start_fuse(cluster, RBD_FUSE, ["rbd-fuse", "-p", RBD_POOL, "-r", RBD_IMAGE, str(fuse_dir)], fuse_dir)
    backing = fuse_dir / RBD_IMAGE
    j = journal(cluster)
    j.note("loop", str(backing))
    dev = _run(["losetup", "--find", "--show", str(backing)], "attaching a loop device to the RBD image").strip()
    j.note("loop", str(backing), dev=dev)
    _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", dev],
         f"mkfs.ext4 on {dev}", timeout=600)
    mnt.mkdir(parents=True, exist_ok=True)
    j.note("mount", str(mnt))
    _run(["mount", "-t", "ext4", dev, str(mnt)], f"mounting {dev} at {mnt}")
    cluster.progress(f"ext4 on rbd {RBD_POOL}/{RBD_IMAGE} (rbd-fuse, {dev}) mounted at {mnt}")
    return mnt


def _alive(cluster: LocalCluster, name: str) -> bool:
    return any(d.name == name and d.running and cluster.owns(d) for d in cluster.daemons())


def _loops_of(backing: str) -> list[str]:
    """Loop devices whose backing file is `backing` (as losetup recorded the name; the file may be gone)."""
    p = subprocess.run(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"], capture_output=True, text=True,
                       timeout=30)
    if p.returncode != 0 or not p.stdout.strip():
        return []
    devs = json.loads(p.stdout).get("loopdevices", [])
    return [d["name"] for d in devs if (d.get("back-file") or "").removesuffix(" (deleted)") == backing]


def teardown(cluster: LocalCluster, only: str | None = None) -> list[str]:
    """Undo every journal entry, newest first (only the FUSE daemon or daemon `only` and what was built on it,
    when given): lazy unmounts, loop detaches, daemons stopped by pid. Returns what was undone."""
    j = journal(cluster)
    todo = list(reversed(j.pending(*MOUNT_KINDS)))  # oldest first
    if only is not None:
        first = next((i for i, e in enumerate(todo) if e.kind in ("fuse", "daemon") and e.what == only), None)
        todo = [] if first is None else todo[first:]
    done = []
    table = mount_table() if todo else {}
    for e in reversed(todo):
        path = e.data.get("path") if e.kind == "fuse" else e.what
        if e.kind in ("mount", "fuse") and path in table:
            # lazy: a dead FUSE daemon's mount (ENOTCONN) or a busy one still goes away
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)
            done.append(f"unmounted {path}")
        if e.kind == "loop":
            for dev in _loops_of(e.what):
                subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=60)
                done.append(f"detached {dev}")
        if e.kind in ("fuse", "daemon") and _stop(cluster, e.what):
            done.append(f"stopped {e.what}")
        j.mark(e)
    # what is undone has no use in the cluster's journal (a run's own keeps its history)
    j.entries = [e for e in j.entries if not e.undone]
    if j.entries:
        j.save()
    else:
        (cluster.root / JOURNAL).unlink(missing_ok=True)
    return done


def _stop(cluster: LocalCluster, name: str) -> bool:
    """SIGTERM the daemon by its pid file (if it is still ours), SIGKILL after 10 s; drop it from the state."""
    stopped = False
    for d in cluster.daemons():
        if d.name != name or d.pid is None or not d.running or not cluster.owns(d):
            continue
        os.kill(d.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while d.running and time.monotonic() < deadline:
            time.sleep(0.1)
        if d.running:
            os.kill(d.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while d.running and time.monotonic() < deadline:
                time.sleep(0.1)
        stopped = True
    cluster.forget(name, *(("ganesha_port", "ganesha_cephfs") if name.startswith("ganesha.") else ()))
    return stopped


def leftovers(cluster: LocalCluster) -> list[str]:
    """Mounts under the cluster's directory and loop devices on its files: what teardown must leave none of."""
    root = str(cluster.root) + "/"
    out = [f"mount {p}" for p in mount_table() if p.startswith(root)]
    p = subprocess.run(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"], capture_output=True, text=True,
                       timeout=30)
    if p.returncode == 0 and p.stdout.strip():
        out += [f"loop {d['name']}" for d in json.loads(p.stdout).get("loopdevices", [])
                if (d.get("back-file") or "").startswith(root)]
    return out
