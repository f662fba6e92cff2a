"""posix: files in a directory, or one file or block device, through the kernel (local disk, FUSE mounts).

fio's model and names: `numjobs` jobs of `iodepth` ops each, `nrfiles` files of
`filesize` bytes per job (`file_service: job`, fio's default) or shared by the jobs
(`shared`: job j on file j mod nrfiles when there are at least as many jobs as files,
the 2014 file study's mapping), `ioengine` sync (a thread per op in flight, fio's
psync) or io_uring, `direct` (O_DIRECT) or buffered with the page cache dropped for
the files first (`invalidate`, fio's default), fsync/fdatasync every N writes and
`end_fsync`. In a directory, a run's files live in their own subdirectory
`fathom.<run tag>`, so every point of the run finds what earlier points wrote and
nothing of the user's is touched; it is left there for the user to remove.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fathom import engine_spec
from fathom.errors import FathomError
from fathom.interfaces.base import Interface, engine_rw

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
DEFAULT_FILESIZE = 64 << 20  # bytes per file in a directory when neither filesize nor size is given


@dataclass
class Posix:
    """The engine's posix target section (engine/src/targets/posix.rs)."""

    path: str
    rw: engine_spec.Rw
    bs: int = 4096
    rwmixread: int = 50
    numjobs: int = 1
    nrfiles: int = 1
    filesize: int | None = None
    file_service: Literal["job", "shared"] = "job"
    ioengine: Literal["sync", "io_uring"] = "sync"
    direct: bool = False
    invalidate: bool = True
    fsync: int = 0
    fdatasync: int = 0
    end_fsync: bool = False
    prefill: bool | None = None
    prefix: str = "fathom"
    kind: str = field(default="posix", init=False)

    def fields(self) -> dict[str, Any]:
        return {"path": self.path, **fileset_fields(self), "ioengine": self.ioengine, "direct": self.direct,
                "invalidate": self.invalidate}

    @property
    def jobs(self) -> int:
        return self.numjobs


def fileset_fields(t: Any) -> dict[str, Any]:
    """The file-set fields the posix, cephfs and nfs targets share (fileset.rs); unset optional ones left out."""
    out: dict[str, Any] = {"rw": t.rw, "rwmixread": t.rwmixread, "bs": t.bs, "numjobs": t.numjobs,
                           "nrfiles": t.nrfiles, "file_service": t.file_service, "fsync": t.fsync,
                           "fdatasync": t.fdatasync, "end_fsync": t.end_fsync, "prefix": t.prefix}
    if t.filesize is not None:
        out["filesize"] = t.filesize
    if t.prefill is not None:
        out["prefill"] = t.prefill
    return out


def run_dir(path: str, run_tag: str) -> Path:
    """The directory a run's files live in, under the workload's directory."""
    return Path(path) / ("fathom." + (re.sub(r"[^A-Za-z0-9._-]+", "-", run_tag).strip("-") or "run"))


def mounted_path(p: dict[str, Any], ctx: Any) -> str:
    """The workload's path: its own, or the mount fathom makes on its local cluster (kept for the run,
    undone with the cluster)."""
    if not p.get("mount"):
        return str(p["path"])
    from fathom.cluster import mounts
    from fathom.cluster.attach import local_for

    lc = local_for(ctx.conn.conf) if ctx.conn is not None and ctx.conn.conf else None
    if lc is None:
        raise FathomError(f"mount {p['mount']} is made on fathom's own local cluster, and this run attached to "
                          "another one", hint="mount it yourself and give its directory as path")
    mnt = mounts.ceph_fuse(lc) if p["mount"] == "ceph-fuse" else mounts.rbd_ext4(lc)
    return str(mnt / p["path"].lstrip("/")) if p.get("path") else str(mnt)


def prepare(p: dict[str, Any], ctx: Any) -> str | None:
    """The point's path made ready before it runs: the mount fathom makes, and the run's directory under a
    directory; kept in ctx.prepared for section()."""
    path = mounted_path(p, ctx)
    if not os.path.exists(path):
        raise FathomError(f"path {path} does not exist",
                          hint="create the directory first, or name an existing file or block device")
    if not os.path.isdir(path):
        ctx.prepared["path"] = (path, False)
        return None
    d = run_dir(path, ctx.run_tag)
    try:
        d.mkdir(exist_ok=True)
    except PermissionError:
        raise FathomError(f"permission denied creating {d}",
                          hint="run as a user who may write there, or choose a directory this user owns") from None
    except OSError as exc:
        raise FathomError(f"cannot create {d}: {exc.strerror}") from None
    ctx.prepared["path"] = (str(d), True)
    return None


def planned_path(p: dict[str, Any], ctx: Any) -> tuple[str, bool]:
    """(path, whether it is the run's directory) as prepare() made it; before it (`fathom plan`, tests), as
    planned: a mount named for what makes it."""
    if "path" in ctx.prepared:
        return ctx.prepared["path"]
    if p.get("mount"):
        base = f"/<{p['mount']} mount>" + ("/" + p["path"].lstrip("/") if p.get("path") else "")
        return str(run_dir(base, ctx.run_tag)), True
    if os.path.isdir(str(p["path"])):
        return str(run_dir(str(p["path"]), ctx.run_tag)), True
    return str(p["path"]), False


def section(p: dict[str, Any], ctx: Any) -> Posix:
    path, is_dir = planned_path(p, ctx)
    nrfiles = int(p.get("nrfiles") or 1)
    filesize = p.get("filesize")
    if is_dir and filesize is None:
        filesize = int(p["size"]) // nrfiles if p.get("size") else DEFAULT_FILESIZE
    elif filesize is None and p.get("size"):
        filesize = int(p["size"])
    opt = {k: p[k] for k in ("file_service", "ioengine", "direct", "invalidate", "fsync", "fdatasync", "end_fsync")
           if p.get(k) is not None}
    return Posix(path=path, rw=engine_rw(p["rw"]), bs=int(p["bs"]),  # type: ignore[arg-type]
                 rwmixread=int(p["rwmixread"]), numjobs=int(p["numjobs"]), nrfiles=nrfiles,
                 filesize=int(filesize) if filesize is not None else None, **opt)


INTERFACE = Interface(name="posix", needs_cluster=False, rw_modes=RW, section=section, prepare=prepare, files=True,
                      needs_path=True)
