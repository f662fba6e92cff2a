"""Where a local cluster's daemons come from: this host's Ceph, a Ceph build directory, or a root file system.

- host:   the programs on PATH (the default).
- build:  a build directory as vstart.sh runs it: DIR/bin's programs with LD_LIBRARY_PATH=DIR/lib, plugins,
          erasure codes and object classes from DIR/lib, the mgr's Python modules from the source tree
          (CMakeCache.txt's ceph_SOURCE_DIR, or DIR/../src/pybind/mgr).
- rootfs: a root file system with its own Ceph (DIR/usr/bin/ceph-mon; `fathom cluster rootfs` builds one).
          Its daemons run chrooted, in a private mount namespace that one holder process keeps: the root
          is mounted as an overlay (the cached root is never written), with proc, sys, /dev and a tmpfs
          /dev/shm, and the cluster directory bound at its own path, so paths in ceph.conf mean the same
          inside and out. Nothing appears in this host's mount table; the namespace and its mounts end
          when the holder and the daemons in it end.

Only the daemons and their own tools (mkfs, keyrings, radosgw-admin) come from the source here. fathom's client
side (the ceph CLI, the engine's librados and librbd) is fathom.cluster.client's: by default the same release,
or this host's Ceph when asked (an older client meets a newer cluster, as it does in production).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.errors import ClusterError, UsageError

# programs run from the source; everything else (ceph, rados, rbd) is the host's
DAEMON_TOOLS = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "radosgw", "radosgw-admin", "ceph-authtool",
                "monmaptool")
# programs that take Ceph config options on their command line (plugin paths for a build directory)
CONFIGURED = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "radosgw", "radosgw-admin")


@dataclass(frozen=True)
class CephSource:
    kind: str  # host, build, rootfs
    dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dir": self.dir}

    @staticmethod
    def from_dict(d: dict[str, Any] | None) -> CephSource:
        d = d or {}
        return CephSource(kind=d.get("kind") or "host", dir=d.get("dir"))


HOST = CephSource("host")


def resolve(spec: str | None) -> CephSource:
    """--ceph / cluster.ceph: a directory (build tree or root file system) or a cached release's name."""
    if not spec:
        return HOST
    from fathom.cluster import rootfs

    if spec in rootfs.RELEASES and not Path(spec).exists():
        rec = rootfs.info(spec)
        if rec is None:
            raise UsageError(f"--ceph {spec}: no cached {spec} root file system on this machine",
                             hint=f"build it once with `fathom cluster rootfs {spec}` (about 1 min, needs network)")
        return CephSource("rootfs", str(rootfs.root_path(spec)))
    d = Path(spec).expanduser().absolute()
    if (d / "usr/bin/ceph-mon").is_file():
        return CephSource("rootfs", str(d))
    if (d / "bin/ceph-mon").is_file():
        return CephSource("build", str(d))
    raise UsageError(f"--ceph {spec}: neither a Ceph build directory (bin/ceph-mon) nor a root file system "
                     "(usr/bin/ceph-mon)",
                     hint="give a build directory as vstart.sh uses it, a root file system, or a release built "
                          "with `fathom cluster rootfs` (e.g. reef)")


def missing_programs(src: CephSource, names: list[str]) -> list[str]:
    base = {"build": "bin", "rootfs": "usr/bin"}.get(src.kind)
    if base is None:
        return []
    return [n for n in names if n in DAEMON_TOOLS and not (Path(src.dir or "") / base / n).is_file()]


# ---- build directory ----------------------------------------------------------------------------------------
def mgr_module_path(build: Path) -> Path | None:
    """The mgr's Python modules for a build directory, as vstart.sh finds them."""
    cands = []
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith("ceph_SOURCE_DIR:"):
                cands.append(Path(line.split("=", 1)[1].strip()) / "src/pybind/mgr")
    cands += [build.parent / "src/pybind/mgr", build / "share/ceph/mgr"]
    return next((c for c in cands if c.is_dir()), None)


def build_args(build: Path) -> list[str]:
    """Config options a daemon from a build directory needs (vstart.sh's), on its command line rather than in
    ceph.conf: the host's older clients read that conf and must not load the build's plugins."""
    lib = str(build / "lib")
    args = ["--plugin-dir", lib, "--erasure-code-dir", lib, "--osd-class-dir", lib,
            "--osd-class-load-list", "*", "--osd-class-default-list", "*"]
    mgr = mgr_module_path(build)
    if mgr is not None:
        args += ["--mgr-module-path", str(mgr)]
    return args


def build_env(build: Path, env: dict[str, str], python: bool = True) -> dict[str, str]:
    """The environment a build's programs run with: its lib/ on the loader's path, and (python) the Python
    modules its ceph CLI and mgr import."""
    env = dict(env)
    lib = str(build / "lib")
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if not python:
        return env
    py = [str(p) for p in (build / "lib/cython_modules/lib.3",) if p.is_dir()]
    mgr = mgr_module_path(build)
    if mgr is not None:
        py.append(str(mgr.parent))  # src/pybind: the ceph_argparse and ceph modules the mgr imports
    if py:
        env["PYTHONPATH"] = ":".join(py + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


# ---- root file system: one holder process keeps the mount namespace ------------------------------------------
def rootfs_paths(cluster_dir: Path) -> dict[str, Path]:
    base = cluster_dir / "rootfs"
    return {"base": base, "upper": base / "upper", "work": base / "work", "merged": base / "merged",
            "ready": base / "ready"}


def holder_script(root: Path, cluster_dir: Path) -> str:
    """Shell run by `unshare --mount --propagation private`: mount, say ready, then hold the namespace."""
    p = rootfs_paths(cluster_dir)
    m = p["merged"]
    inside = f"{m}{cluster_dir}"
    return (f"set -e; mount -t overlay fathom-ceph -o lowerdir={root},upperdir={p['upper']},workdir={p['work']} {m}; "
            f"mount -t proc proc {m}/proc; mount -t sysfs sysfs {m}/sys; mount --bind /dev {m}/dev; "
            f"mount -t tmpfs -o mode=1777 tmpfs {m}/dev/shm; mkdir -p {inside}; mount --bind {cluster_dir} {inside}; "
            f"touch {p['ready']}; exec sleep infinity")


def start_holder(root: Path, cluster_dir: Path, timeout: float = 15.0) -> dict[str, int]:
    """Start the holder; returns its identity ({pid, start}: the pid and its start time, as a pid alone may be
    reused once it ends, and its command line becomes `sleep infinity`)."""
    p = rootfs_paths(cluster_dir)
    for k in ("upper", "work", "merged"):
        p[k].mkdir(parents=True, exist_ok=True)
    p["ready"].unlink(missing_ok=True)
    with open(cluster_dir / "log" / "rootfs-holder.out", "ab") as out:
        # stdio away from fathom's: a holder keeping a caller's pipe open would hang it
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                                 holder_script(root, cluster_dir)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    holder = {"pid": proc.pid, "start": _start_time(proc.pid)}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p["ready"].exists():
            return holder
        if proc.poll() is not None:
            err = (cluster_dir / "log" / "rootfs-holder.out").read_text(errors="replace")[-500:]
            raise ClusterError(f"could not set up the mount namespace for the root file system {root}: {err}",
                               hint="needs root (mount namespaces) and overlayfs")
        time.sleep(0.05)
    stop_holder(holder, cluster_dir)
    raise ClusterError(f"the mount namespace for {root} was not ready within {timeout:.0f} s")


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot; /proc/PID/stat field 22), None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]) if fields[0] != "Z" else None


def holder_alive(holder: dict[str, Any] | None, cluster_dir: Path) -> bool:
    """The holder still runs: its pid, with the start time recorded (not a recycled pid)."""
    if not holder or not holder.get("pid"):
        return False
    return _start_time(int(holder["pid"])) == holder.get("start") is not None


def stop_holder(holder: dict[str, Any] | None, cluster_dir: Path) -> None:
    """Undo the mounts (inside the namespace) and end the holder; the namespace goes with its last process."""
    if not holder_alive(holder, cluster_dir):
        return
    pid = int(holder["pid"])  # type: ignore[index]
    m = rootfs_paths(cluster_dir)["merged"]
    subprocess.run(["nsenter", "-t", str(pid), "-m", "--", "umount", "-R", "-l", str(m)],
                   capture_output=True, timeout=30)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and holder_alive(holder, cluster_dir):
        time.sleep(0.05)


def in_root(pid: int, cluster_dir: Path) -> bool:
    """The process runs chrooted in this cluster's root (its /proc/PID/root)."""
    try:
        return os.readlink(f"/proc/{pid}/root") == str(rootfs_paths(cluster_dir)["merged"])
    except OSError:
        return False


def rootfs_prefix(holder: int, cluster_dir: Path) -> list[str]:
    """argv prefix that runs a program of the root (nsenter and chroot exec: the pid is the program's)."""
    return ["nsenter", "-t", str(holder), "-m", "--", "chroot", str(rootfs_paths(cluster_dir)["merged"])]
