"""The client's S3 requests against RGW's own perf counters over the same span.

RGW (Pacific) counts in its `rgw` perf section every request it received (`req`, counted before anything
else), the requests it refused before running their op (`failed_req`: refused keys, a rate limit's 503, a
missing bucket; an op's own error such as NoSuchKey, or a timeout on the client's side, is not one), the
object GETs whose op ran (`get`: a HEAD is RGW's GET op without a body) and the body bytes they sent
(`get_b`), the PUTs whose op ran (`put`: each multipart part is one) and their bytes (`put_b`). The counters
are read before the engine is spawned and after it has exited, so none of the point's requests is in flight
at either edge: the deltas must match every request the engines made, ramp, prefill and multipart parts
included. Per counter the client's side is a range, from what surely reached RGW to that plus every request
that failed (a failure may or may not have reached RGW, or the op):

    put, put_b    writes and prefill puts that succeeded (bytes: the object size each); a multipart upload
                  is its parts (Pacific's count) or one put (a release that counts the upload once);
                  top: plus the writes' errors and the retries
    get, get_b    reads and heads that succeeded (bytes: the reads' bodies); top: plus their errors and
                  the retries
    req           every op that succeeded, each prefill put, each multipart upload's parts and complete, each
                  aborted upload's create, each setup request RGW refused with a 503 (and that the engine
                  sent again); top: plus every error, retry and abort
    failed_req    those setup 503s, up to them plus the client's errors and its retries (each retry followed
                  a failure)

Squid moved the op counters into a section of their own, `rgw_op` (the global instance of RGW's labelled op
counters, beside per-bucket and per-user ones when their caches are on): put_obj_ops/_bytes/_lat,
get_obj_ops/_bytes/_lat, del_obj_ops/_bytes/_lat, list_obj_ops/_lat and more; Tentacle has no get, get_b, put,
put_b in `rgw` at all, only req, failed_req and the queue gauges. Either set is read (OP_SETS): the rgw_op one
where its counters moved, else the rgw one; with rgw_op also del_obj_ops against the client's removes and
list_obj_ops against its lists. The result names the set it used (`counters`), and its rows the counters by
their own names.

Slack around each range: TOLERANCE of its top, at least a floor of CONTROL requests, two per bucket (a
probe, a create) and the ops the engines abandoned in flight at exit (RGW may have counted them, the client
never did); bytes: that many objects. No slack for requests in flight at the edges: there are none. A
larger gap means one side's numbers are not what they seem: traffic from elsewhere, failures the client
never saw, retries hidden in a client, a proxy in between.
"""

from __future__ import annotations

from typing import Any, Callable

COUNTERS = ("req", "failed_req", "get", "get_b", "put", "put_b", "qlen", "qactive")
REQUESTS = ("req", "failed_req", "qlen", "qactive")  # the rgw section's in every release
# a set of op counters: its perf section, and fathom's name of each counter -> the set's own name
OP_SETS: dict[str, tuple[str, dict[str, str]]] = {
    # Pacific to Reef (Squid keeps them beside rgw_op): the rgw section's op counters
    "rgw": ("rgw", {"get": "get", "get_b": "get_b", "put": "put", "put_b": "put_b"}),
    # Squid and later (Tentacle's only ones): the global instance of the labelled op counters
    "rgw_op": ("rgw_op", {"put": "put_obj_ops", "put_b": "put_obj_bytes", "get": "get_obj_ops",
                          "get_b": "get_obj_bytes", "del": "del_obj_ops", "list": "list_obj_ops"}),
}
PREFERRED = ("rgw_op", "rgw")  # the newer set where both counted
# RGW op counter -> (the client op kinds it counts, its bytes counter, the kind whose bytes those are)
OPS: dict[str, tuple[tuple[str, ...], str | None, str | None]] = {
    "put": (("write",), "put_b", "write"), "get": (("read", "stat"), "get_b", "read"),
    "del": (("remove",), None, None), "list": (("list",), None, None)}
TOLERANCE = 0.01  # of the expected count: both sides count exactly; this absorbs what is only bounded (parts
# failing alongside the one that aborts an upload, a retried upload's requests)
CONTROL = 4  # the metadata object's put, get or delete, a probe or two
NO_KIND = {"ops": 0, "bytes": 0, "errors": 0}


def _value(v: Any) -> float | None:
    """A counter's value (a latency average as its count)."""
    if isinstance(v, dict):
        v = v.get("avgcount", v.get("count"))
    return v if isinstance(v, (int, float)) else None


def choose(sections: dict[str, dict[str, Any]]) -> tuple[dict[str, float], str | None]:
    """RGW's counters under fathom's names (req, failed_req, qlen, qactive, get, get_b, put, put_b[, del, list])
    from its perf sections (`rgw`, `rgw_op`: counter -> value), and the op set they came from: the first of
    PREFERRED whose op counters moved, else the first that is there (None: neither is)."""
    rgw = sections.get("rgw") or {}
    out = {k: v for k in REQUESTS if (v := _value(rgw.get(k))) is not None}
    found: list[tuple[str, dict[str, float]]] = []
    for name in PREFERRED:
        section, names = OP_SETS[name]
        sec = sections.get(section) or {}
        got = {ours: v for ours, theirs in names.items() if (v := _value(sec.get(theirs))) is not None}
        if got:
            found.append((name, got))
    name, got = next(((n, g) for n, g in found if any(g.values())), found[0] if found else (None, {}))
    return {**out, **got}, name


def rgw_section(dump: dict[str, Any]) -> dict[str, float]:
    """The counters of a `perf dump`'s rgw and rgw_op sections under fathom's names (choose)."""
    return choose({k: dump.get(k) or {} for k in ("rgw", "rgw_op")})[0]


def deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """after - before of the counters both dumps have (qlen and qactive are gauges: their after-value), the op
    counters from the set that moved (choose, on the differences)."""
    secs = ("rgw", "rgw_op")
    diff: dict[str, dict[str, float]] = {}
    for sec in secs:
        b, a = before.get(sec) or {}, after.get(sec) or {}
        for k, v in a.items():
            av, bv = _value(v), _value(b.get(k))
            if av is not None:
                diff.setdefault(sec, {})[k] = av if k in ("qlen", "qactive") else av - (bv or 0)
    return choose(diff)[0]


def counter_set(rgw: dict[str, float]) -> str | None:
    """Which op set RGW's counters (under fathom's names) came from: rgw_op has del and list, rgw never."""
    return "rgw_op" if "del" in rgw or "list" in rgw else "rgw" if any(k in rgw for k in OPS) else None


def set_text(name: str | None) -> str:
    """The op set a check used, in words."""
    if name is None:
        return "no op counters (req and failed_req only)"
    section, names = OP_SETS[name]
    when = "Squid and later" if name == "rgw_op" else "Pacific to Reef"
    return f"RGW's {section} section ({when}): {', '.join(names.values())}"


def beyond_ops(engines: list[dict[str, Any] | None]) -> dict[str, int]:
    """Requests the engines made beyond their ops, from their summaries' `prefill`, `s3` ({multipart: uploads,
    parts, aborted; retries; setup_503s}) and `in_flight_abandoned`, summed."""
    out = {"prefill": 0, "uploads": 0, "parts": 0, "aborted": 0, "retries": 0, "setup_503s": 0, "abandoned": 0}
    for e in engines:
        e = e or {}
        out["prefill"] += int((e.get("prefill") or {}).get("ops") or 0)
        s3 = e.get("s3") or {}
        mp = s3.get("multipart") or {}
        for k in ("uploads", "parts", "aborted"):
            out[k] += int(mp.get(k) or 0)
        out["retries"] += sum(int(v) for v in (s3.get("retries") or {}).values())
        out["setup_503s"] += int(s3.get("setup_503s") or 0)  # bucket and metadata requests RGW refused
        out["abandoned"] += int(e.get("in_flight_abandoned") or 0)
    return out


def _row(what: str, counter: str, low: float, high: float, rgw: float, allowed: float) -> dict[str, Any]:
    """One comparison of RGW's count with the client's range [low, high] (client: its top)."""
    diff = rgw - high if rgw > high else (rgw - low if rgw < low else 0.0)
    return {"what": what, "counter": counter, "client": high, "low": low, "rgw": rgw, "diff": diff,
            "allowed": allowed, "ok": abs(diff) <= allowed}


def describe(row: dict[str, Any]) -> str:
    """'get 230 vs client 100 (off by +130, 6 allowed)'; a range as 'client 90..100'."""
    low = row.get("low", row["client"])
    client = f"{low:g}..{row['client']:g}" if low != row["client"] else f"{row['client']:g}"
    return f"{row['counter']} {row['rgw']:g} vs client {client} (off by {row['diff']:+g}, {row['allowed']:g} allowed)"


def _tally(client: dict[str, dict[str, Any]], kinds: tuple[str, ...]) -> tuple[int, int]:
    """(successful ops, errors) of the client's op kinds."""
    cs = [client.get(k) or NO_KIND for k in kinds]
    return sum(int(c.get("ops", 0)) for c in cs), sum(int(c.get("errors", 0)) for c in cs)


def _op_rows(client: dict[str, dict[str, Any]], rgw: dict[str, float], x: dict[str, int], max_object: int,
             allowed: Callable[..., float], floor: float, names: dict[str, str]) -> list[dict[str, Any]]:
    """The put, put_b, get, get_b (and with rgw_op del and list) rows, each named by its set's own counter
    (names); a counter neither side used is left out."""
    rows = []
    obj = max(max_object, 1024)
    for counter, (kinds, bytes_key, bytes_kind) in OPS.items():
        if counter not in rgw:
            continue
        ok, err = _tally(client, kinds)
        nbytes = int((client.get(bytes_kind) or NO_KIND).get("bytes", 0)) if bytes_kind else 0
        low = high = ok
        if counter == "put":
            ok += x["prefill"]
            nbytes += x["prefill"] * max_object
            parts = ok - x["uploads"] + x["parts"]  # each part a put (Pacific), or the upload one
            low, high = min(ok, parts), max(ok, parts)
        failed = err + x["retries"]  # requests that may have reached RGW's op, or not
        if high + failed or rgw[counter] > floor:
            rows.append(_row("+".join(kinds), names.get(counter, counter), low, high + failed, rgw[counter],
                             allowed(high + failed)))
        if bytes_key and bytes_kind and bytes_key in rgw and (nbytes or rgw[bytes_key] > floor * obj):
            top = nbytes + failed * max_object
            rows.append(_row(bytes_kind, names.get(bytes_key, bytes_key), nbytes, top, rgw[bytes_key],
                             allowed(top / obj, obj)))
    return rows


def reconcile(client: dict[str, dict[str, Any]], rgw: dict[str, float], buckets: int = 1,
              max_object: int = 0, extra: dict[str, int] | None = None) -> dict[str, Any]:
    """Compare the client's ops per kind ({"write": {"ops", "bytes", "errors"}, ...}, every op the point
    made, ramp included) and its requests beyond them (`extra`, beyond_ops) with RGW's deltas. Returns {"ok",
    "rows", "failed_req", "client_errors", "note"}; a row that fails says by how much (describe)."""
    x = {**beyond_ops([]), **(extra or {})}
    floor = CONTROL + 2 * max(buckets, 1) + x["abandoned"]

    def allowed(n: float, size: int = 1) -> float:  # n requests (or objects of `size` bytes)
        return max(floor, TOLERANCE * n) * size

    note = None
    used = counter_set(rgw)
    names = OP_SETS[used][1] if used else {}
    if any(rgw.get(k) for k in OPS) or any(rgw.get(k) for k in ("get_b", "put_b")) or not rgw.get("req"):
        rows = _op_rows(client, rgw, x, max_object, allowed, floor, names)
    else:  # neither set's op counters moved (or RGW has neither): only req and failed_req say anything
        rows, note = [], (f"RGW counted requests but no op in {set_text(used)}: compared req and failed_req only"
                          if used else "RGW has no op counters (neither get/put in its rgw section nor an rgw_op "
                          "section): compared req and failed_req only")
        used = None
    client_errors = sum(int(c.get("errors", 0)) for c in client.values())
    ok_ops = sum(int(c.get("ops", 0)) for c in client.values())
    sure = ok_ops + x["prefill"] + x["parts"] + x["uploads"] + x["aborted"]  # the creates of aborted uploads
    sure += x["setup_503s"]  # answered, so counted by RGW, and refused
    failed = client_errors + x["retries"] + x["setup_503s"]
    if "req" in rgw:
        top = sure + failed + x["aborted"]  # and their aborts
        rows.append(_row("all", "req", sure, top, rgw["req"], allowed(top)))
    if "failed_req" in rgw:
        rows.append(_row("failed", "failed_req", x["setup_503s"], failed, rgw["failed_req"], allowed(failed)))
    ok = all(r["ok"] for r in rows) and bool(rows)
    return {"ok": ok, "rows": rows, "failed_req": rgw.get("failed_req"), "client_errors": client_errors,
            "counters": set_text(used), "note": note if rows else "no RGW counters to compare"}


def from_perf_deltas(perf: dict[str, dict[str, Any]]) -> dict[str, float] | None:
    """RGW's counters over a point from the stored per-daemon deltas (fathom.results.usage.perf_deltas), summed over
    RGW daemons; None when no RGW was read. Zero deltas are stored as absent: they count as 0."""
    rgws = [d for name, d in perf.items() if name.startswith("client.rgw") or name.startswith("rgw")]
    if not rgws:
        return None
    sums: dict[str, dict[str, float]] = {}
    for d in rgws:
        for key, v in d.items():
            sec, _, counter = key.partition(".")
            if sec in ("rgw", "rgw_op") and (n := _value(v)) is not None:
                sums.setdefault(sec, {})[counter] = sums.get(sec, {}).get(counter, 0.0) + float(n)
    if not any(sums.get("rgw_op", {}).get(c) for c in OP_SETS["rgw_op"][1].values()):  # the set that moved
        sums.pop("rgw_op", None)
    # absent is zero: the requests, and the set's op counters (the rgw section's when none moved)
    name = "rgw_op" if "rgw_op" in sums else "rgw"
    for sec, names in (("rgw", {k: k for k in REQUESTS if k not in ("qlen", "qactive")}), OP_SETS[name]):
        for counter in names.values():
            sums.setdefault(sec, {}).setdefault(counter, 0.0)
    return choose(sums)[0]


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
    engines = extra.get("engine_requests") or [{k: extra.get(k) for k in ("s3", "prefill", "in_flight_abandoned")}]
    out = reconcile(client_ops(intervals), rgw, buckets=buckets, max_object=object_size, extra=beyond_ops(engines))
    out["rgw"] = rgw
    return out
