"""s3: objects over S3 (Ceph RGW): PUT, GET (whole or byte ranges), HEAD, DELETE, LIST, signed with SigV4.

The endpoint and keys come from a keys file (JSON with access_key, secret_key and
optionally endpoint and region); the spec carries its path only, so no secret is
ever echoed into the store. By default that is the local cluster's s3.json, which
`fathom cluster up --rgw` writes beside its ceph.conf (mode 0600).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import field_validator

from fathom.errors import FathomError
from fathom.interfaces.base import SWEEP, Interface, OwnFields
from fathom.fields import size_value

# fio rw name -> (engine op, pattern)
MODES = {"write": ("put", "seq"), "read": ("get", "seq"), "randread": ("get", "rand")}

KEYS_FILE = "s3.json"  # the local cluster's keys file, beside its ceph.conf


class Fields(OwnFields):
    """s3's workload fields: the RGW placement of prep.rgw the buckets are made on, TLS at RGW, a cap on the
    bytes in flight (jobs x iodepth x object size; iodepth is lowered to fit, never below 1), and a bucket the
    user names for every job (made when missing; one that exists keeps all but the run's own objects)."""

    placement: Annotated[str | None, SWEEP] = None
    tls: Annotated[bool | None, SWEEP] = None
    max_inflight: int | None = None
    bucket: str | None = None

    @field_validator("max_inflight", mode="before")
    @classmethod
    def _s3_inflight(cls, v: Any) -> Any:
        return None if v is None else size_value(v, "max_inflight")


BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def check(w: Any) -> None:
    """A workload's bucket: a valid name (as the engine checks it), and not with a placement."""
    if w.bucket is not None and not BUCKET_RE.fullmatch(w.bucket):
        raise ValueError(f"bucket {w.bucket!r} is not an S3 bucket name: 3 to 63 of a-z 0-9 . -, starting and "
                         "ending with a letter or digit")
    if w.bucket is not None and w.placement is not None:
        raise ValueError(BOTH)


BOTH = ("bucket and placement: a placement applies to the buckets fathom makes for its clients; "
        "leave bucket out, or placement")


@dataclass
class Range:
    """GET `size` bytes at `offset`, or (offset None) at a random multiple of size inside the object."""

    size: int
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "offset": self.offset}


@dataclass
class Mix:
    """A mixed run's op weights (warp's --get-distrib, --stat-distrib, --put-distrib, --delete-distrib)."""

    get: int = 0
    head: int = 0
    put: int = 0
    delete: int = 0

    def to_json(self) -> dict[str, int]:
        return {"get": self.get, "head": self.head, "put": self.put, "delete": self.delete}


@dataclass
class S3:
    """S3 objects `<prefix>/<job>/<n>`, job j in buckets[j % len]; metadata in `<prefix>.meta` of the first bucket."""

    keys_file: str  # a path; the keys never go into the spec
    buckets: list[str]
    op: Literal["put", "get", "head", "delete", "list", "mixed"]
    endpoint: str | None = None  # None: the keys file's endpoint
    region: str | None = None  # None: the keys file's region, else us-east-1
    ca_file: str | None = None
    create_buckets: bool = False
    location_constraint: str | None = None  # RGW: "<zonegroup>:<placement-id>"
    pattern: Literal["seq", "rand"] = "seq"
    prefix: str | None = None
    object_size: int | None = None  # put only (reads take it from the metadata)
    objects: int | None = None  # per job, put only
    jobs: int = 1
    prefill: bool = False
    range: Range | None = None  # get only
    mix: Mix | None = None  # mixed only
    # {"buckets": [[size, weight], ...]} or {"log_uniform": {"min": a, "max": b}} (put, mixed; not with object_size)
    sizes: dict[str, Any] | None = None
    multipart: dict[str, int] | None = None  # {"threshold", "part_size", "parts_in_flight"}
    retry: dict[str, Any] | None = None  # {"max", "on": [error kinds], "backoff_ms"}; None: never retried
    max_keys: int = 1000
    payload: Literal["unsigned", "sha256"] = "unsigned"
    io_threads: int = 1
    connect_timeout_s: float = 10.0
    # the cluster's RGWs, one per emulated host (the keys file's `endpoints`): engine k of a point talks to the
    # k-th (mod their number), so the engines spread over the gateways; not part of the engine's spec
    endpoints: list[str] = field(default_factory=list)
    kind: str = field(default="s3", init=False)

    def spread(self, k: int) -> None:
        """This spec for a point's k-th engine: its share of the RGWs."""
        if self.endpoints:
            self.endpoint = self.endpoints[k % len(self.endpoints)]

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"keys_file": self.keys_file, "buckets": list(self.buckets), "op": self.op,
                               "pattern": self.pattern, "jobs": self.jobs, "max_keys": self.max_keys,
                               "payload": self.payload, "io_threads": self.io_threads,
                               "connect_timeout_s": self.connect_timeout_s}
        for k in ("endpoint", "region", "ca_file", "location_constraint", "prefix", "object_size", "objects"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        for k in ("create_buckets", "prefill"):
            if getattr(self, k):
                out[k] = True
        if self.range is not None:
            out["range"] = self.range.to_json()
        if self.mix is not None:
            out["mix"] = self.mix.to_json()
        for k in ("sizes", "multipart", "retry"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


def bucket_name(tag: str, job: int) -> str:
    """A valid S3 bucket name for the run's job: lowercase letters, digits and '-', 3..63 characters."""
    base = re.sub(r"[^a-z0-9-]+", "-", tag.lower()).strip("-") or "fathom"
    suffix = f"-{job}"
    return base[: 63 - len(suffix)].rstrip("-") + suffix


def set_prefix(tag: str, p: dict[str, Any]) -> str:
    """The object set of a point with a placement: what tells its PUT and the GET after it from other sets."""
    size = int(p.get("object_size") or p["bs"])
    return f"{tag}/{p.get('placement') or 'default'}/{size}/j{int(p.get('numjobs') or 1)}/tls{int(bool(p.get('tls')))}"


def section(p: dict[str, Any], ctx: Any) -> S3:
    if ctx.conn is None or not getattr(ctx.conn, "conf", None):
        raise FathomError("s3 needs an S3 endpoint: run on a local cluster with RGW (cluster rgw: true), "
                          "whose keys file is s3.json beside its ceph.conf")
    op, pattern = MODES[p["rw"]]
    jobs = int(p.get("numjobs") or 1)
    rgw = getattr(ctx, "s3", None)
    placement = p.get("placement")
    if placement is not None and (not rgw or placement not in rgw.get("placements", {})):
        raise FathomError(f"placement {placement!r} is not prepared: the suite's prep.rgw must define it")
    if placement is not None and p.get("bucket"):
        raise FathomError(BOTH)
    if rgw and placement is not None:
        tag = f"{rgw['bucket_tag']}-{placement}"
        t = S3(keys_file=rgw["keys_file"], buckets=[bucket_name(tag, j) for j in range(jobs)],
               op=op, pattern=pattern, prefix=set_prefix(rgw["bucket_tag"], p), jobs=jobs)  # type: ignore[arg-type]
        if op == "put":  # buckets are made by the PUT, on the placement's pools
            t.location_constraint = rgw["placements"][placement]
    else:
        t = S3(keys_file=rgw["keys_file"] if rgw else str(Path(ctx.conn.conf).parent / KEYS_FILE),
               buckets=[p["bucket"]] if p.get("bucket") else [bucket_name(ctx.run_tag, j) for j in range(jobs)],
               op=op, pattern=pattern, prefix=ctx.run_tag, jobs=jobs)  # type: ignore[arg-type]
    local = rgw or _local_s3(ctx) or {}
    if p.get("tls"):
        if not local.get("tls_endpoint"):
            raise FathomError("tls: true needs RGW's TLS endpoint; this cluster has none",
                              hint="a local cluster with rgw: true has one (`fathom cluster up --rgw`)")
        t.endpoint, t.ca_file = local["tls_endpoint"], local.get("ca_file")
    t.endpoints = list(local.get("tls_endpoints" if p.get("tls") else "endpoints") or [])
    if op == "put":
        t.object_size = int(p.get("object_size") or p["bs"])
        t.create_buckets = True
    return t


def prepare(p: dict[str, Any], ctx: Any) -> str | None:
    """A PUT's buckets are written to the run's undo journal before its engine makes them or writes into them
    (fathom.cluster.buckets: removed at the run's end, or by `fathom cluster restore`; one that was there keeps
    all but the run's objects). With prep.rgw it starts on empty buckets: what earlier points wrote goes first,
    bypassing GC (never overwriting: overwritten tails would go to GC; never short of space). Only the run's own
    user's buckets."""
    if ctx.prep is None or p["rw"] != "write":
        return None
    from fathom.cluster import buckets, rgw

    gone = rgw.purge_user_buckets(ctx.prep, ctx.s3["user"]) if ctx.s3 is not None else []
    t = section(p, ctx)
    for b in dict.fromkeys(t.buckets):
        buckets.claim(ctx.prep.journal, b, ctx.run_tag, t.endpoint, t.keys_file, t.ca_file,
                      user=ctx.s3["user"] if ctx.s3 is not None else None)
    return f"purged {len(gone)} bucket(s) of user {ctx.s3['user']}" if gone else None


def _local_s3(ctx: Any) -> dict[str, Any] | None:
    import json

    try:
        return json.loads((Path(ctx.conn.conf).parent / KEYS_FILE).read_text())
    except (OSError, ValueError):
        return None


def metrics(m: dict[str, Any], r: Any, params: dict[str, Any], intervals: list[dict[str, Any]],
            perf: dict[str, dict[str, Any]], events: list[dict[str, Any]]) -> None:
    """A point's s3 figures (m, its metrics; r, its PointResult): GET time to first byte (the engine's ttfb
    phase) and the check against RGW's own counters."""
    from fathom.interfaces import reconcile

    ttfb = ((r.extra.get("phases") or {}).get("read") or {}).get("ttfb") or {}
    lat = ttfb.get("lat_ns") or {}
    for key, col in (("mean", "ttfb_ms"), ("p50", "ttfb_p50_ms"), ("p99", "ttfb_p99_ms")):
        if lat.get(key) is not None:
            m[col] = float(lat[key]) / 1e6
    # RGW's own time to its first byte out (get_initial_lat / put_initial_lat): the client's TTFB less the wire
    lat_key = "rgw.get_initial_lat" if params.get("rw") != "write" else "rgw.put_initial_lat"
    lats = [d[lat_key] for name, d in perf.items() if name.startswith("client.rgw") and isinstance(d.get(lat_key),
                                                                                                   dict)]
    if lats and sum(x["count"] for x in lats):
        m["rgw_initial_lat_ms"] = sum(x["sum"] for x in lats) / sum(x["count"] for x in lats) * 1e3
    buckets = int(params.get("numjobs") or 1) * max(len(r.extra.get("engines") or []), 1)  # a bucket per job
    check = reconcile.point_check(r, intervals, perf, buckets,
                                  int(params.get("object_size") or params.get("bs") or 0))
    if check is None:
        return
    m["rgw_reconciled"] = "ok" if check["ok"] else "mismatch"
    m["rgw_failed_req"] = check.get("failed_req")
    r.extra["rgw_reconcile"] = check
    if not check["ok"]:
        bad = "; ".join(reconcile.describe(x) for x in check["rows"] if not x["ok"])
        events.append({"kind": "reconcile", "message": f"client and RGW counters disagree ({check['counters']}): {bad}"
                                                      + (f" ({check['note']})" if check.get("note") else ""),
                       "data": check})


# run_data: a GET reads what the run's last PUT left (its prefix is the run's data tag, its buckets the run's)
INTERFACE = Interface(name="s3", needs_cluster=True, rw_modes=tuple(MODES), section=section, prepare=prepare,
                      fields=Fields, check=check, rgw=True, run_data=True,
                      metrics=metrics, op_size_key="object_size")
