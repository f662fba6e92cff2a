"""cephfs: CephFS through libcephfs in the engine, no mount: one client session, a thread per op in flight.

The same file sets as posix (numjobs, nrfiles, filesize, file_service, direct,
fsync/fdatasync, end_fsync; fio's names), in a directory of the file system:
`path` (default `/fathom.<run tag>`, so every point of a run finds what earlier
points wrote). The local cluster's file system needs `mds: true` under the
suite's cluster (or `fathom cluster up --mds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fathom import engine_spec
from fathom.errors import FathomError
from fathom.interfaces.base import Interface, engine_rw
from fathom.interfaces.posix import DEFAULT_FILESIZE, fileset_fields, run_dir

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")


@dataclass
class Cephfs:
    """The engine's cephfs target section (engine/src/targets/cephfs.rs)."""

    connection: engine_spec.Connection
    rw: engine_spec.Rw
    filesize: int
    path: str = "/fathom"
    fs: str | None = None
    bs: int = 4096
    rwmixread: int = 50
    numjobs: int = 1
    nrfiles: int = 1
    file_service: Literal["job", "shared"] = "job"
    direct: bool = False
    fsync: int = 0
    fdatasync: int = 0
    end_fsync: bool = False
    prefill: bool | None = None
    prefix: str = "fathom"
    kind: str = field(default="cephfs", init=False)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"connection": self.connection.to_json(), "path": self.path, **fileset_fields(self),
                               "direct": self.direct}
        if self.fs is not None:
            out["fs"] = self.fs
        return out

    @property
    def jobs(self) -> int:
        return self.numjobs


def section(p: dict[str, Any], ctx: Any) -> Cephfs:
    if ctx.conn is None:
        raise FathomError("cephfs needs a cluster with a file system: set `mds: true` under the suite's cluster")
    nrfiles = int(p.get("nrfiles") or 1)
    filesize = p.get("filesize") or (int(p["size"]) // nrfiles if p.get("size") else DEFAULT_FILESIZE)
    path = str(run_dir(p.get("path") or "/", ctx.run_tag))
    opt = {k: p[k] for k in ("file_service", "direct", "fsync", "fdatasync", "end_fsync") if p.get(k) is not None}
    return Cephfs(connection=engine_spec.Connection.of(ctx.conn), rw=engine_rw(p["rw"]),  # type: ignore[arg-type]
                  filesize=int(filesize), path=path, bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),
                  numjobs=int(p["numjobs"]), nrfiles=nrfiles, **opt)


INTERFACE = Interface(name="cephfs", needs_cluster=True, rw_modes=RW, section=section, files=True)
