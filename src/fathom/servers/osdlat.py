"""OSD-side latency percentiles per point: the delta of each OSD's op latency histograms over the point.

Every OSD keeps two-dimensional histograms of its client ops (`perf histogram dump`, section `osd`):
`op_r_latency_out_bytes_histogram` and `op_w_latency_in_bytes_histogram`, latency by op size. The latency axis
is log2-scaled: bucket edges double (the dump's `ranges` give each bucket's bounds, in nanoseconds), so a
percentile read from it is known to within its bucket: fathom gives the bucket's upper edge, an upper bound
(the OSDs' p99 is at most this), with the bucket's lower edge beside it. Read at the point's start and end
(from the admin socket of each OSD on this host, or `ceph tell osd.N perf histogram dump` for any attached
cluster), the difference is the point's own ops; the OSDs' histograms are added up for the cluster's figure.

The OSD's latency is from the op's arrival at the primary to its reply: what the client's latency spends
outside it is the network, the messenger queues and the client itself.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from fathom.companion import Companion, Contribution, Live

SOURCE_ASOK, SOURCE_TELL = "admin socket", "ceph-tell"
HISTOGRAMS = {"read": "op_r_latency_out_bytes_histogram", "write": "op_w_latency_in_bytes_histogram"}
PERCENTILES = (50.0, 99.0)

Buckets = list[tuple[float, float, int]]  # (lower edge s, upper edge s, count), in order


def latency_buckets(h: dict[str, Any]) -> Buckets:
    """One histogram's latency axis (its first), summed over the size axis: (lower s, upper s, count) per bucket.
    Bucket 0 (below the axis' minimum) has lower edge 0; the last is open above (upper edge inf)."""
    axes = h.get("axes") or []
    values = h.get("values") or []
    if not axes or not values:
        return []
    ranges = axes[0].get("ranges") or []
    out: Buckets = []
    for i, row in enumerate(values):
        n = sum(int(v) for v in row) if isinstance(row, list) else int(row)
        r = ranges[i] if i < len(ranges) else {}
        lo = max(0.0, float(r.get("min", 0))) / 1e9
        hi = float(r["max"] + 1) / 1e9 if "max" in r and r["max"] >= 0 else float("inf")
        out.append((lo, hi, n))
    return out


def per_osd(dump: dict[str, Any]) -> dict[str, Buckets]:
    """The read and write latency buckets of one OSD's `perf histogram dump`."""
    sec = dump.get("osd") or {}
    return {op: latency_buckets(sec[name]) for op, name in HISTOGRAMS.items() if isinstance(sec.get(name), dict)}


def delta(before: Buckets, after: Buckets) -> Buckets:
    """after - before, bucket by bucket (a restarted OSD's smaller counts: after alone)."""
    if len(before) != len(after) or any(a[2] < b[2] for a, b in zip(after, before)):
        return list(after)
    return [(lo, hi, n - b[2]) for (lo, hi, n), b in zip(after, before)]


def add(parts: list[Buckets]) -> Buckets:
    parts = [p for p in parts if p]
    if not parts:
        return []
    out = list(parts[0])
    for p in parts[1:]:
        if len(p) != len(out):
            continue
        out = [(lo, hi, n + q[2]) for (lo, hi, n), q in zip(out, p)]
    return out


def percentile(b: Buckets, p: float) -> tuple[float, float] | None:
    """The bucket holding the p-th percentile: (lower edge s, upper edge s); None without ops."""
    total = sum(n for _, _, n in b)
    if total == 0:
        return None
    rank, seen = p / 100.0 * total, 0
    for lo, hi, n in b:
        seen += n
        if n and seen >= rank:
            return lo, hi
    return b[-1][0], b[-1][1]


def figures(b: Buckets) -> dict[str, Any]:
    """{ops, p50_s, p50_low_s, p99_s, p99_low_s}: each percentile's bucket edges, the upper one as the figure."""
    out: dict[str, Any] = {"ops": sum(n for _, _, n in b)}
    for p in PERCENTILES:
        got = percentile(b, p)
        key = f"p{p:g}"
        out[f"{key}_s"] = got[1] if got and got[1] != float("inf") else None
        out[f"{key}_low_s"] = got[0] if got else None
    return out


def summary(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each op's figures over every OSD read at both ends, and each OSD's own."""
    osds = sorted(set(before) & set(after))
    out: dict[str, Any] = {"osds": osds, "ops": {}, "per_osd": {}}
    for op in HISTOGRAMS:
        parts = []
        for osd in osds:
            b, a = per_osd(before[osd]).get(op), per_osd(after[osd]).get(op)
            if a is None:
                continue
            d = delta(b or [], a) if b else a
            parts.append(d)
            f = figures(d)
            if f["ops"]:
                out["per_osd"].setdefault(osd, {})[op] = f
        total = add(parts)
        if total and sum(n for _, _, n in total):
            out["ops"][op] = figures(total)
    return out


def tell_dump(ceph: Any, nodes: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every OSD's `perf histogram dump` through the mons (nodes: `ceph node ls`'s answer, as fathom.servers.tell.dump
    takes it)."""
    from fathom.servers.tell import dump

    return dump(ceph, ("osd",), ("perf", "histogram", "dump"), nodes=nodes)[0]


def asok_dump(sockets: dict[str, Any]) -> dict[str, Any]:
    """The `perf histogram dump` of each OSD whose admin socket is given ({osd: path})."""
    from fathom.servers.telemetry import asok_command

    out = {}
    for osd, path in sockets.items():
        try:
            out[osd] = asok_command(path, "perf histogram dump")
        except (OSError, ValueError, json.JSONDecodeError):
            continue
    return out


class OsdLatencyCompanion(Companion):
    """The OSDs' read and write latency percentiles over a point: an `osd_latency` event. read(live, end): every
    OSD's histogram dump at that end ("start", "stop") of the point `live` is (the end lets readers through the
    mons share one `ceph node ls`: fathom.servers.tell.NodeList)."""

    def __init__(self, read: Callable[[Live, str], dict[str, Any]], source: str):
        self.read, self.source = read, source
        self._live: Live | None = None
        self._before: dict[str, Any] = {}

    def start(self, live: Live) -> None:
        self._live = live
        try:
            self._before = self.read(live, "start")
        except Exception:  # noqa: BLE001 - a figure missing is said at the end, never a failed point
            self._before = {}

    def stop(self) -> Contribution:
        try:
            after = self.read(self._live, "stop")  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001
            return Contribution(events=[{"kind": "osd_latency", "data": {"source": self.source, "error": str(exc)},
                                         "message": f"no OSD latency histograms: {exc}"}])
        s = summary(self._before, after)
        s["source"] = self.source
        parts = [f"{op} p50 ≤ {_ms(f['p50_s'])} p99 ≤ {_ms(f['p99_s'])} ({f['ops']} ops)"
                 for op, f in s["ops"].items()]
        msg = (f"OSD-side latency over {len(s['osds'])} OSD(s) ({self.source}): " + "; ".join(parts)) if parts \
            else f"OSD-side latency: no client op in the OSDs' histograms ({self.source})"
        return Contribution(events=[{"kind": "osd_latency", "data": s, "message": msg}])


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.3g} ms"
