"""The client's S3 counts against RGW's own perf counters over the same window.

RGW counts, in its `rgw` perf section, the object GETs and PUTs it served (`get`,
`put`), their bytes (`get_b`, `put_b`), all requests (`req`) and failed ones
(`failed_req`). Over a point, the deltas must match what the client says it did:
differences are allowed only for requests in flight when the window opened or
closed (at most one per slot at each edge) and the client's own control requests
(metadata object, bucket probes). A larger gap is flagged: the numbers of one side
are not what they seem (retries hidden in a client, requests from elsewhere, a
proxy in between).
"""

from __future__ import annotations

from typing import Any

# client op kind -> (RGW ops counter, RGW bytes counter)
PAIRS = {"write": ("put", "put_b"), "read": ("get", "get_b")}
COUNTERS = ("req", "failed_req", "get", "get_b", "put", "put_b", "qlen", "qactive")


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


def reconcile(client: dict[str, dict[str, Any]], rgw: dict[str, float], slots: int, control: int = 4,
              max_object: int = 0) -> dict[str, Any]:
    """Compare the client's ops and bytes per kind ({"write": {"ops", "bytes", "errors"}, ...}) with RGW's deltas.

    Allowed gap per counter: 2 x slots (in flight at either edge) + `control` requests, and that many objects
    of `max_object` bytes for the byte counters. Returns {"ok", "rows": [...], "failed_req", "client_errors"}."""
    slack_ops = 2 * slots + control
    rows = []
    for kind, (ops_key, bytes_key) in PAIRS.items():
        c = client.get(kind)
        if not c or ops_key not in rgw:
            continue
        for what, cv, key, slack in (("ops", c.get("ops", 0) + c.get("errors", 0), ops_key, slack_ops),
                                     ("bytes", c.get("bytes", 0), bytes_key, slack_ops * max(max_object, 1024))):
            if key not in rgw:
                continue
            diff = rgw[key] - cv
            rows.append({"kind": kind, "what": what, "client": cv, "rgw": rgw[key], "counter": key, "diff": diff,
                         "allowed": slack, "ok": abs(diff) <= slack})
    client_errors = sum(int(c.get("errors", 0)) for c in client.values())
    failed = rgw.get("failed_req")
    ok = all(r["ok"] for r in rows) and bool(rows)
    return {"ok": ok, "rows": rows, "failed_req": failed, "client_errors": client_errors,
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


def point_check(result: Any, intervals: list[dict[str, Any]], perf: dict[str, dict[str, Any]],
                slots: int, object_size: int) -> dict[str, Any] | None:
    """A suite point's reconciliation: the engine's ops and bytes (the ramp's included: RGW counts them too)
    against RGW's deltas over the same point. None without RGW counters."""
    rgw = from_perf_deltas(perf)
    if rgw is None:
        return None
    client: dict[str, dict[str, Any]] = {}
    for kind, o in result.ops.items():
        client[kind] = {"ops": int(o.ops), "bytes": int(o.bytes), "errors": int(o.errors)}
    for rec in intervals:
        if not rec.get("ramp"):
            continue
        for kind, o in (rec.get("ops") or {}).items():
            c = client.setdefault(kind, {"ops": 0, "bytes": 0, "errors": 0})
            c["ops"] += int(o.get("ops", 0))
            c["bytes"] += int(o.get("bytes", 0))
            c["errors"] += int(o.get("errors", 0))
    out = reconcile(client, rgw, slots=slots, max_object=object_size)
    out["rgw"] = rgw
    return out
