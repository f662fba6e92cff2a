"""The client's S3 requests against RGW's own perf counters over the same span.

RGW counts, in its `rgw` perf section, the object GETs and PUTs it served (`get`,
`put`), their bytes (`get_b`, `put_b`), every request (`req`) and failed ones
(`failed_req`). The counters are read before the engine starts and after it ends,
so no request of the point is in flight at either edge: over a point the deltas
must match what the client did, all of it, ramp and prefill included:

    get, get_b      the client's reads (ops + errors) and their bytes
    put, put_b      its writes and prefill puts; a multipart upload is one write to the
                    client and CreateMultipartUpload + its parts + Complete to RGW,
                    which counts each part as a put (or the upload as one: either is
                    accepted), with the same bytes
    req             every request: ops of every kind, prefill, each multipart upload's
                    parts + 1 more, each abort, each retry
    failed_req      the client's errors plus its retries (each followed a failure)

The client's control requests (bucket probes, the metadata object) and RGW's rounding
are allowed by a tolerance: TOLERANCE of the expected count, at least a floor of
CONTROL requests plus two per bucket (bytes: that many objects). A larger gap means
one side's numbers are not what they seem: traffic from elsewhere, failures the client
never saw, retries hidden in a client, a proxy in between.
"""

from __future__ import annotations

from typing import Any

# client op kind -> (RGW ops counter, RGW bytes counter)
PAIRS = {"write": ("put", "put_b"), "read": ("get", "get_b")}
COUNTERS = ("req", "failed_req", "get", "get_b", "put", "put_b", "qlen", "qactive")
TOLERANCE = 0.01  # of the expected count
CONTROL = 4  # the metadata object's put/get, a probe or two


def rgw_section(dump: dict[str, Any]) -> dict[str, float]:
    """The counters of a `perf dump`'s rgw section (latency averages as their count)."""
    sec = dump.get("rgw") or {}
    out: dict[str, float] = {}
    for k in COUNTERS:
        v = sec.get(k)
        if isinstance(v, dict):
            v = v.get("avgcount")
        if isinstance(v, (int, float)):
            out[k] = v
    return out


def deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """after - before of the counters both dumps have (qlen and qactive are gauges: their after-value)."""
    b, a = rgw_section(before), rgw_section(after)
    return {k: (a[k] if k in ("qlen", "qactive") else a[k] - b.get(k, 0)) for k in a}


def beyond_ops(engines: list[dict[str, Any] | None]) -> dict[str, int]:
    """Requests the engines made beyond their ops, from their summaries' `prefill` and `s3` ({prefill: puts,
    uploads, parts, aborted: multipart, retries}), summed."""
    out = {"prefill": 0, "uploads": 0, "parts": 0, "aborted": 0, "retries": 0}
    for e in engines:
        e = e or {}
        out["prefill"] += int((e.get("prefill") or {}).get("ops") or 0)
        s3 = e.get("s3") or {}
        mp = s3.get("multipart") or {}
        for k in ("uploads", "parts", "aborted"):
            out[k] += int(mp.get(k) or 0)
        out["retries"] += sum(int(v) for v in (s3.get("retries") or {}).values())
    return out


def _row(what: str, counter: str, client: float, rgw: float, allowed: float, low: float | None = None) -> dict:
    """One comparison: RGW's count against the client's (or the range [low, client] when both are right)."""
    lo = client if low is None else low
    diff = rgw - client if rgw > client else (rgw - lo if rgw < lo else 0.0)
    return {"what": what, "counter": counter, "client": client, "rgw": rgw, "diff": diff, "allowed": allowed,
            "ok": abs(diff) <= allowed}


def reconcile(client: dict[str, dict[str, Any]], rgw: dict[str, float], buckets: int = 1,
              max_object: int = 0, extra: dict[str, int] | None = None) -> dict[str, Any]:
    """Compare the client's requests per kind ({"write": {"ops", "bytes", "errors"}, ...}, every op the point
    made) and beyond its ops (`extra`, beyond_ops) with RGW's deltas. Returns {"ok", "rows", "failed_req",
    "client_errors", "note"}; a row that fails names its counter and by how much."""
    x = extra or beyond_ops([])
    floor = CONTROL + 2 * max(buckets, 1)

    def allowed(n: float, size: int = 1) -> float:  # n requests (or objects of `size` bytes)
        return max(floor, TOLERANCE * n) * size

    rows = []
    obj = max(max_object, 1024)
    for kind, (ops_key, bytes_key) in PAIRS.items():
        c = client.get(kind) or {"ops": 0, "bytes": 0, "errors": 0}
        n = c.get("ops", 0) + c.get("errors", 0)
        if kind == "write":
            n += x["prefill"]
            if ops_key in rgw and (client.get(kind) or n or rgw[ops_key] > floor):
                # each part a put, or the upload one: both are RGW's ways
                many = n - x["uploads"] + x["parts"]
                rows.append(_row(kind, ops_key, max(n, many), rgw[ops_key], allowed(n), min(n, many)))
        elif ops_key in rgw and (client.get(kind) or rgw[ops_key] > floor):
            rows.append(_row(kind, ops_key, n, rgw[ops_key], allowed(n)))
        if bytes_key in rgw and (client.get(kind) or rgw[bytes_key] > floor * obj):
            b = c.get("bytes", 0) + (x["prefill"] * max_object if kind == "write" else 0)
            rows.append(_row(kind, bytes_key, b, rgw[bytes_key], allowed(b / obj, obj)))
    client_errors = sum(int(c.get("errors", 0)) for c in client.values())
    total = sum(c.get("ops", 0) + c.get("errors", 0) for c in client.values()) + x["prefill"] + x["parts"] \
        + x["uploads"] + x["aborted"] + x["retries"]
    if "req" in rgw:
        rows.append(_row("all", "req", total, rgw["req"], allowed(total)))
    if "failed_req" in rgw:
        failed = client_errors + x["retries"]
        rows.append(_row("failed", "failed_req", failed, rgw["failed_req"], allowed(failed)))
    ok = all(r["ok"] for r in rows) and bool(rows)
    return {"ok": ok, "rows": rows, "failed_req": rgw.get("failed_req"), "client_errors": client_errors,
            "note": None if rows else "no RGW counters to compare"}


def from_perf_deltas(perf: dict[str, dict[str, Any]]) -> dict[str, float] | None:
    """RGW's counters over a point from the stored per-daemon deltas (fathom.telemetry.perf_deltas), summed over
    RGW daemons; None when no RGW was read. Zero deltas are stored as absent: they count as 0."""
    rgws = [d for name, d in perf.items() if name.startswith("client.rgw") or name.startswith("rgw")]
    if not rgws:
        return None
    out: dict[str, float] = {k: 0.0 for k in COUNTERS if k not in ("qlen", "qactive")}
    for d in rgws:
        for k in out:
            v = d.get(f"rgw.{k}")
            out[k] += float(v.get("count", 0) if isinstance(v, dict) else (v or 0))
    return out


def client_ops(intervals: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Every op the point's engines completed, per kind, from their interval records (the main phase's, ramp
    and drain included: they add up to all its completions; merged records are left out, engines' own counted
    once)."""
    out: dict[str, dict[str, int]] = {}
    for rec in intervals:
        if rec.get("host") == "" and rec.get("instance") == -1:
            continue
        for kind, o in (rec.get("ops") or {}).items():
            c = out.setdefault(kind, {"ops": 0, "bytes": 0, "errors": 0})
            c["ops"] += int(o.get("ops") or 0)
            c["bytes"] += int(o.get("bytes") or 0)
            e = o.get("errors") or 0
            c["errors"] += int(e if isinstance(e, (int, float)) else sum(e.values()))
    return out


def point_check(result: Any, intervals: list[dict[str, Any]], perf: dict[str, dict[str, Any]],
                buckets: int, object_size: int) -> dict[str, Any] | None:
    """A suite point's reconciliation: every request its engines made against RGW's deltas over the same
    span. None without RGW counters."""
    rgw = from_perf_deltas(perf)
    if rgw is None:
        return None
    extra = result.extra or {}
    engines = extra.get("engine_requests") or [{k: extra.get(k) for k in ("s3", "prefill")}]
    out = reconcile(client_ops(intervals), rgw, buckets=buckets, max_object=object_size, extra=beyond_ops(engines))
    out["rgw"] = rgw
    return out
