"""The exact merge of many engines' records into one point: histograms added, counts summed, never averaged.

Engines that started together (one start time, converted to each host's clock)
tick their intervals at the same instants, so interval k of every engine covers
the same second: intervals are aligned by index on the common start, not by
their timestamps (a host's clock may be off by its measured offset). Pure
functions: the group runner (fathom.engines.group) calls them live and at the
end, the scale benchmark times them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fathom import hdr
from fathom.model import PERCENTILES, OpStats, PointResult


def merge_ops(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per-op-kind entries of interval records (`ops`) merged: counts add, histograms add, mean weighted by
    ops, max of maxima. Latency phases (s3) merge the same way."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for ops in parts:
        for kind, o in (ops or {}).items():
            kinds.setdefault(kind, []).append(o)
    return {kind: _merge_op(os_) for kind, os_ in kinds.items()}


def _merge_op(os_: list[dict[str, Any]]) -> dict[str, Any]:
    n = sum(int(o.get("ops") or o.get("count") or 0) for o in os_)
    out: dict[str, Any] = {}
    for key in ("ops", "bytes", "errors", "count"):
        if any(key in o for o in os_):
            out[key] = sum(int(o.get(key) or 0) for o in os_)
    mean = sum(float(o.get("lat_mean_ns") or 0.0) * int(o.get("ops") or o.get("count") or 0) for o in os_)
    out["lat_mean_ns"] = mean / n if n else 0.0
    out["lat_max_ns"] = max((int(o.get("lat_max_ns") or 0) for o in os_), default=0)
    if any(o.get("last_lat_ns") is not None for o in os_):  # a per-second table's "last lat": the slowest engine's
        out["last_lat_ns"] = max(int(o.get("last_lat_ns") or 0) for o in os_)
    hists = [o["hist"] for o in os_ if o.get("hist")]
    if len(hists) == 1:
        out["hist"] = hists[0]
    elif hists:
        out["hist"] = hdr.encode(hdr.merge(hists))
    phases: dict[str, list[dict[str, Any]]] = {}
    for o in os_:
        for name, p in (o.get("phases") or {}).items():
            phases.setdefault(name, []).append(p)
    if phases:
        out["phases"] = {name: _merge_op(ps) for name, ps in phases.items()}
    return out


def merge_interval(recs: Sequence[dict[str, Any]], index: int, ts: float | None = None) -> dict[str, Any]:
    """Interval `index` of several engines as one record (ts: on the orchestrator's clock, when known)."""
    cpu = {"user_s": sum(float((r.get("cpu") or {}).get("user_s") or 0.0) for r in recs),
           "sys_s": sum(float((r.get("cpu") or {}).get("sys_s") or 0.0) for r in recs)}
    return {"type": "interval", "index": index,
            "ts": ts if ts is not None else max(float(r["ts"]) for r in recs),
            "t": max(float(r.get("t") or 0.0) for r in recs), "dt": max(float(r.get("dt") or 0.0) for r in recs),
            "ramp": any(r.get("ramp") for r in recs),
            "in_flight": sum(int(r.get("in_flight") or 0) for r in recs),
            "started": sum(int(r.get("started") or 0) for r in recs),
            "finished": sum(int(r.get("finished") or 0) for r in recs),
            "ops": merge_ops(r.get("ops") or {} for r in recs), "cpu": cpu, "engines": len(recs)}


def slowest_host(recs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Of one interval's records from several hosts (`host` keys): the host with the fewest ops per engine
    per second, {host, iops} (IOPS of one of its engines); None with a single host."""
    by: dict[str, list[float]] = {}
    for r in recs:
        dt = float(r.get("dt") or 1.0) or 1.0
        by.setdefault(str(r.get("host")), []).append(sum(int(o.get("ops") or 0) for o in
                                                         (r.get("ops") or {}).values()) / dt)
    if len(by) < 2:
        return None
    host, v = min(((h, sum(v) / len(v)) for h, v in by.items()), key=lambda x: x[1])
    return {"host": host, "iops": v}


def merge_intervals(per_engine: Sequence[Sequence[dict[str, Any]]],
                    offsets_s: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """Every engine's intervals merged by index. offsets_s[i]: engine i's host clock minus the
    orchestrator's, so the merged `ts` is on the orchestrator's clock (the latest engine's end)."""
    offsets = list(offsets_s) if offsets_s is not None else [0.0] * len(per_engine)
    out = []
    for k in range(max((len(x) for x in per_engine), default=0)):
        recs = [x[k] for x in per_engine if k < len(x)]
        ts = max(float(x[k]["ts"]) - offsets[i] for i, x in enumerate(per_engine) if k < len(x))
        out.append(merge_interval(recs, k, ts))
    return out


def start_skew_s(per_engine: Sequence[Sequence[dict[str, Any]]], offsets_s: Sequence[float]) -> float | None:
    """How far apart the engines' measured phases began, on the orchestrator's clock (first interval's
    `ts - t`, less the host's clock offset); None with fewer than two engines that reported an interval."""
    starts = [float(x[0]["ts"]) - float(x[0].get("t") or 0.0) - off for x, off in zip(per_engine, offsets_s) if x]
    return max(starts) - min(starts) if len(starts) > 1 else None


def engine_totals(summary: dict[str, Any] | None, intervals: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One engine's totals: its summary's, or (an engine lost before its summary) the sum of the measured
    intervals it sent: ops, measured_s, cpu and per-kind entries with histograms."""
    if summary is not None:
        cpu = summary.get("cpu") or {}
        return {"ops": summary.get("ops") or {}, "measured_s": float(summary.get("measured_s") or 0.0),
                "user_s": float(cpu.get("user_s") or 0.0), "sys_s": float(cpu.get("sys_s") or 0.0),
                "errors": list(summary.get("errors") or []), "complete": True}
    measured = [r for r in intervals if not r.get("ramp")]
    return {"ops": merge_ops(r.get("ops") or {} for r in measured),
            "measured_s": sum(float(r.get("dt") or 0.0) for r in measured),
            "user_s": sum(float((r.get("cpu") or {}).get("user_s") or 0.0) for r in intervals),
            "sys_s": sum(float((r.get("cpu") or {}).get("sys_s") or 0.0) for r in intervals),
            "errors": [], "complete": False}


def point_result(totals: Sequence[dict[str, Any]], engine: str = "fathom-engine") -> PointResult:
    """The point as one result from every engine's totals: counts summed, histograms added, latency
    figures from the merged histogram, the longest engine's measured time as the point's."""
    runtime = max((t["measured_s"] for t in totals), default=0.0)
    merged = merge_ops(t["ops"] for t in totals)
    ops: dict[str, OpStats] = {}
    for kind, o in merged.items():
        h = o.get("hist")
        s = hdr.summary(h) if h else {}
        ops[kind] = OpStats(ops=int(o.get("ops") or 0), bytes=int(o.get("bytes") or 0), runtime_s=runtime,
                            lat_mean_ns=s.get("mean"), lat_stdev_ns=s.get("stdev"), lat_min_ns=s.get("min"),
                            lat_max_ns=s.get("max"),
                            percentiles_ns={k: float(s[k]) for k in PERCENTILES if k in s}, hist=h,
                            errors=_errors(o.get("errors")))
    errors: list[dict[str, Any]] = []
    for t in totals:
        errors += t["errors"]
    return PointResult(engine=engine, ops=ops, runtime_s=runtime, client_user_s=sum(t["user_s"] for t in totals),
                       client_sys_s=sum(t["sys_s"] for t in totals), wall_s=runtime or None, errors=errors)


def _errors(v: Any) -> int:
    if isinstance(v, dict):
        return sum(int(x) for x in v.values())
    return int(v or 0)


def host_rows(engines: Sequence[dict[str, Any]], slow_ratio: float = 0.5) -> list[dict[str, Any]]:
    """Per-host figures from per-engine rows ({host, ops, bytes, measured_s, cpu_s, hist, lost}): throughput,
    p99 from the host's merged histogram, client CPU; `slow` flags a host whose throughput per engine is
    under slow_ratio of the median host's."""
    by: dict[str, list[dict[str, Any]]] = {}
    for e in engines:
        by.setdefault(e["host"], []).append(e)
    rows = []
    for host, es in by.items():
        rt = max((e["measured_s"] for e in es), default=0.0)
        ops = sum(e["ops"] for e in es)
        hists = [e["hist"] for e in es if e.get("hist")]
        p99 = hdr.percentile(hdr.merge(hists), 99) / 1e6 if hists else None
        cpu = sum(e["cpu_s"] for e in es)
        rows.append({"host": host, "engines": len(es), "ops": ops, "iops": ops / rt if rt > 0 else 0.0,
                     "mib_s": sum(e["bytes"] for e in es) / rt / 2**20 if rt > 0 else 0.0, "p99_ms": p99,
                     "client_cpu_pct": 100.0 * cpu / rt if rt > 0 else None,
                     "lost": any(e.get("lost") for e in es), "slow": False})
    per_engine = sorted(r["iops"] / r["engines"] for r in rows if not r["lost"])
    if len(per_engine) >= 2:
        median = per_engine[len(per_engine) // 2]
        for r in rows:
            r["slow"] = not r["lost"] and median > 0 and r["iops"] / r["engines"] < slow_ratio * median
    return rows
