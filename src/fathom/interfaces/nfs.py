"""nfs: files on an NFSv4.0 export through libnfs in the engine: a user-space client with no page cache.

The same file sets as posix and cephfs (numjobs, nrfiles, filesize, file_service,
fsync/fdatasync, end_fsync; fio's names) in a directory of the export: `path`
(default `/fathom.<run tag>`, so every point of a run finds what earlier points
wrote). Which export:

- `export: cephfs` or `export: local` (the default): nfs-ganesha that fathom starts on
  its local cluster (cluster.ganesha), serving the cluster's CephFS (needs `mds: true`)
  or a local directory in the cluster's directory (the NFS baseline without Ceph).
- `server: HOST[:PORT]` with `export: /pseudo/path`: an NFSv4 server of your own
  (port 2049 by default); it must allow NFSv4.0, which libnfs 4.0 speaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fathom import engine_spec
from fathom.errors import FathomError
from fathom.interfaces.base import Interface, OwnFields, engine_rw
from fathom.interfaces.posix import DEFAULT_FILESIZE, fileset_fields, run_dir

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
OWN_EXPORTS = ("cephfs", "local")  # exports of the ganesha fathom runs on its local cluster


class Fields(OwnFields):
    """nfs's workload fields: `export: cephfs | local` (nfs-ganesha fathom runs on its local cluster), or server
    HOST[:PORT] with the export's pseudo path (checked by check())."""

    server: str | None = None
    export: str | None = None


@dataclass
class Nfs:
    """The engine's nfs target section (engine/src/targets/nfs.rs)."""

    export: str
    rw: engine_spec.Rw
    filesize: int
    server: str = "127.0.0.1"
    port: int = 2049
    path: str = "/fathom"
    bs: int = 4096
    rwmixread: int = 50
    numjobs: int = 1
    nrfiles: int = 1
    file_service: Literal["job", "shared"] = "job"
    fsync: int = 0
    fdatasync: int = 0
    end_fsync: bool = False
    prefill: bool | None = None
    prefix: str = "fathom"
    connections: int | None = None
    timeout_s: float = 10.0
    kind: str = field(default="nfs", init=False)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"server": self.server, "port": self.port, "export": self.export, "path": self.path,
                               **fileset_fields(self), "timeout_s": self.timeout_s}
        if self.connections is not None:
            out["connections"] = self.connections
        return out

    @property
    def jobs(self) -> int:
        return self.numjobs


def split_server(text: str) -> tuple[str, int]:
    """'host[:port]' -> (host, port); port 2049 when not given."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, 2049
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FathomError(f"server {text!r}: expected HOST or HOST:PORT")
    return host, int(port)


def check(w: Any) -> None:
    """A workload's export: a server's pseudo path, or one of fathom's own."""
    if w.server and not (w.export or "").startswith("/"):
        raise ValueError("with server, export is the export's pseudo path (e.g. /export)")
    if not w.server and (w.export or "local") not in OWN_EXPORTS:
        raise ValueError(f"export is {' or '.join(OWN_EXPORTS)} (nfs-ganesha on fathom's local cluster), "
                         "or a pseudo path with server: HOST[:PORT]")


def prepare(p: dict[str, Any], ctx: Any) -> str | None:
    """Before the point: fathom's nfs-ganesha started (kept for the run) when the export is one of its."""
    if not p.get("server"):
        ctx.prepared["endpoint"] = endpoint(p, ctx, start=True)
    return None


def endpoint(p: dict[str, Any], ctx: Any, start: bool = False) -> tuple[str, int, str]:
    """(host, port, export pseudo path) of the workload's export: a server's own, or fathom's ganesha's as
    prepare() started it (with start, it starts it; before, as planned: its default port)."""
    export = p.get("export") or "local"
    if p.get("server"):
        if not str(export).startswith("/"):
            raise FathomError(f"export {export!r} with server {p['server']}: give the export's pseudo path, "
                              "e.g. /export")
        host, port = split_server(str(p["server"]))
        return host, port, str(export)
    if export not in OWN_EXPORTS:
        raise FathomError(f"export {export!r}: without server, export is {' or '.join(OWN_EXPORTS)} "
                          "(served by the nfs-ganesha fathom starts on its local cluster)")
    from fathom.cluster import ganesha
    from fathom.cluster.attach import local_for

    if not start:
        return ctx.prepared.get("endpoint") or ("127.0.0.1", 2049, ganesha.EXPORTS[export])
    lc = local_for(ctx.conn.conf) if ctx.conn is not None and ctx.conn.conf else None
    if lc is None:
        raise FathomError(f"export {export} is served by nfs-ganesha on fathom's own local cluster, and this run "
                          "attached to another one", hint="give server: HOST[:PORT] and the export's pseudo path")
    srv = ganesha.ganesha(lc, need_cephfs=export == "cephfs")
    return srv.host, srv.port, srv.export(export)


def section(p: dict[str, Any], ctx: Any) -> Nfs:
    host, port, export = endpoint(p, ctx)
    nrfiles = int(p.get("nrfiles") or 1)
    filesize = p.get("filesize") or (int(p["size"]) // nrfiles if p.get("size") else DEFAULT_FILESIZE)
    path = str(run_dir(p.get("path") or "/", ctx.run_tag))
    opt = {k: p[k] for k in ("file_service", "fsync", "fdatasync", "end_fsync") if p.get(k) is not None}
    return Nfs(export=export, server=host, port=port, rw=engine_rw(p["rw"]),  # type: ignore[arg-type]
               filesize=int(filesize), path=path, bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),
               numjobs=int(p["numjobs"]), nrfiles=nrfiles, **opt)


INTERFACE = Interface(name="nfs", needs_cluster=True, rw_modes=RW, section=section, prepare=prepare, files=True,
                      fields=Fields, check=check,
                      cluster_free=lambda p: bool(p.get("server")))
