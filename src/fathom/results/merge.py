"""The exact merge of many engines' records into one point: histograms added, counts summed, never averaged.

Engines that started together (one start time, converted to each host's clock)
share one grid of interval boundaries (`tick`, engine/PROTOCOL.md), so records
of several engines ending at the same tick cover the same span, whatever their
position in each stream: a submitter late by more than an interval sends one
record for several ticks (`ticks` >= 2), and the other engines' records over
that span are coalesced with it, so every merged record covers one span for all
engines. Records without `tick` (older engines) are aligned by index. Hosts'
clocks do not enter the alignment (a host's clock may be off by its measured
offset). Pure functions: the group runner (fathom.engines.group) calls them
live and at the end, the scale benchmark times them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fathom.results import hdr
from fathom.results.model import PERCENTILES, OpStats, PointResult


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


def _cpu(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The records' `cpu` summed; the busiest thread is the one with the most CPU in any of them."""
    cpus = [r.get("cpu") or {} for r in recs]
    out: dict[str, Any] = {"user_s": sum(float(c.get("user_s") or 0.0) for c in cpus),
                           "sys_s": sum(float(c.get("sys_s") or 0.0) for c in cpus)}
    busy = [c for c in cpus if c.get("thread_max_s") is not None]
    if busy:
        top = max(busy, key=lambda c: float(c["thread_max_s"]))
        out["thread_max_s"], out["thread_max"] = float(top["thread_max_s"]), top.get("thread_max")
    return out


def merge_interval(recs: Sequence[dict[str, Any]], index: int, ts: float | None = None) -> dict[str, Any]:
    """Records of several engines over one span as one record (ts: on the orchestrator's clock, when known)."""
    out = {"type": "interval", "index": index,
           "ts": ts if ts is not None else max(float(r["ts"]) for r in recs),
           "t": max(float(r.get("t") or 0.0) for r in recs), "dt": max(float(r.get("dt") or 0.0) for r in recs),
           "ramp": any(r.get("ramp") for r in recs),
           "in_flight": sum(int(r.get("in_flight") or 0) for r in recs),
           "started": sum(int(r.get("started") or 0) for r in recs),
           "finished": sum(int(r.get("finished") or 0) for r in recs),
           "ops": merge_ops(r.get("ops") or {} for r in recs), "cpu": _cpu(recs), "engines": len(recs)}
    if any("tick" in r for r in recs):
        out["tick"] = max(int(r.get("tick") or 0) for r in recs)
        out["ticks"] = max(int(r.get("ticks") or 1) for r in recs)
    if any(r.get("tail") for r in recs):
        out["tail"] = True
    return out


def coalesce(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One engine's consecutive records as one over their whole span: counts summed, histograms added, dt
    summed; the last record's time, cumulative counts and in-flight ops."""
    if len(recs) == 1:
        return recs[0]
    last = recs[-1]
    out = {**last, "dt": sum(float(r.get("dt") or 0.0) for r in recs), "ramp": any(r.get("ramp") for r in recs),
           "ops": merge_ops(r.get("ops") or {} for r in recs), "cpu": _cpu(recs)}
    if "tick" in last:
        out["ticks"] = sum(int(r.get("ticks") or 1) for r in recs)
    for kind, o in out["ops"].items():  # "last lat" is the latest record's, not the slowest of them
        lasts = [r["ops"][kind]["last_lat_ns"] for r in recs if (r.get("ops") or {}).get(kind, {}).get("last_lat_ns")
                 is not None]
        if lasts:
            o["last_lat_ns"] = lasts[-1]
    return out


def next_span(per_engine: Sequence[Sequence[dict[str, Any]]], pos: Sequence[int],
              open_: Sequence[bool]) -> list[int] | None:
    """The next merged record: how many of each engine's records from pos[e] on it takes, or None when there is
    none yet (an engine that may still send records, open_[e], has not reached the span's end).

    The span ends at the first grid point past the last merged one at which every engine still reporting has a
    record boundary: records of all engines ending at the same `tick` merge as one, and a record spanning several
    ticks widens the span so the other engines' records under it are taken whole. An engine that ended (lost)
    gives what it has. Without `tick` (older engines) records are aligned by position.
    """
    by_tick = all("tick" in recs[0] for recs in per_engine if recs)

    def tick(e: int, j: int) -> int:
        return int(per_engine[e][j]["tick"]) if by_tick else j + 1

    pending = [e for e in range(len(per_engine)) if pos[e] < len(per_engine[e])]
    if not pending:
        return None
    g = min(tick(e, pos[e]) for e in pending)
    while True:
        takes: list[int] = []
        for e, recs in enumerate(per_engine):
            j = pos[e]
            while j < len(recs) and tick(e, j) < g:
                j += 1
            if j < len(recs) and tick(e, j) > g:  # this engine's record spans g: the span runs to its end
                g = tick(e, j)
                break
            if j == len(recs) and open_[e]:
                return None  # wait: this engine's records up to g have not all arrived
            takes.append(j - pos[e] + (1 if j < len(recs) else 0))
        else:
            return takes


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
    """Every engine's intervals merged span by span (next_span). offsets_s[i]: engine i's host clock minus the
    orchestrator's, so the merged `ts` is on the orchestrator's clock (the latest engine's end)."""
    offsets = list(offsets_s) if offsets_s is not None else [0.0] * len(per_engine)
    pos = [0] * len(per_engine)
    closed = [False] * len(per_engine)
    out: list[dict[str, Any]] = []
    while (takes := next_span(per_engine, pos, closed)) is not None:
        recs, ts = [], []
        for e, n in enumerate(takes):
            if n:
                rec = coalesce(per_engine[e][pos[e]:pos[e] + n])
                recs.append(rec)
                ts.append(float(rec["ts"]) - offsets[e])
                pos[e] += n
        out.append(merge_interval(recs, len(out), max(ts)))
    return out


def start_skew_s(per_engine: Sequence[Sequence[dict[str, Any]]], offsets_s: Sequence[float]) -> float | None:
    """How far apart the engines' measured phases began, on the orchestrator's clock (first interval's
    `ts - t`, less the host's clock offset); None with fewer than two engines that reported an interval."""
    starts = [float(x[0]["ts"]) - float(x[0].get("t") or 0.0) - off for x, off in zip(per_engine, offsets_s) if x]
    return max(starts) - min(starts) if len(starts) > 1 else None


def engine_totals(summary: dict[str, Any] | None, intervals: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One engine's totals: its summary's, or (an engine lost before its summary) the sum of the measured
    (non-ramp) intervals it sent: ops, measured_s, per-kind entries with histograms and CPU.

    user_s/sys_s: the measured phase's CPU (the summary's `cpu.measured`; for a lost engine its measured
    intervals' `cpu`), the base of CPU per op; the whole process's (`process_user_s`/`process_sys_s`) when an
    older engine gave nothing else. cpu_measured: the measured phase's {seconds, user_s, sys_s,
    voluntary_ctx, involuntary_ctx} (None when unknown). A lost engine's intervals count every completion,
    ramp-issued ops that complete after the ramp included: its ops are those completions.
    """
    if summary is not None:
        cpu = summary.get("cpu") or {}
        cm = measured_cpu(cpu.get("measured"))
        proc = float(cpu.get("user_s") or 0.0), float(cpu.get("sys_s") or 0.0)
        return {"ops": summary.get("ops") or {}, "measured_s": float(summary.get("measured_s") or 0.0),
                "user_s": cm["user_s"] if cm else proc[0], "sys_s": cm["sys_s"] if cm else proc[1],
                "process_user_s": proc[0], "process_sys_s": proc[1], "cpu_measured": cm,
                "schedule": summary.get("schedule"), "window_s": summary.get("window_s"), "cpu": cpu,
                "requests": {k: summary.get(k) for k in ("s3", "prefill")},
                "drain_s": summary.get("drain_s"), "errors": list(summary.get("errors") or []), "complete": True}
    measured = [r for r in intervals if not r.get("ramp")]
    seconds = sum(float(r.get("dt") or 0.0) for r in measured)
    mcpu, pcpu = _cpu(measured), _cpu(intervals)
    cm = {"seconds": seconds, "user_s": mcpu["user_s"], "sys_s": mcpu["sys_s"], "voluntary_ctx": None,
          "involuntary_ctx": None}  # lost in the ramp or before: no measured CPU, none spent
    return {"ops": merge_ops(r.get("ops") or {} for r in measured), "measured_s": seconds,
            "user_s": mcpu["user_s"], "sys_s": mcpu["sys_s"], "process_user_s": pcpu["user_s"],
            "process_sys_s": pcpu["sys_s"], "cpu_measured": cm, "schedule": None, "window_s": None,
            "drain_s": None, "errors": [], "complete": False}


def measured_cpu(m: Any) -> dict[str, Any] | None:
    """A summary's `cpu.measured` in a fixed shape (None when absent: an older engine, or a run that ended in
    its ramp)."""
    if not isinstance(m, dict) or m.get("user_s") is None or m.get("sys_s") is None:
        return None
    return {"seconds": float(m.get("seconds") or 0.0), "user_s": float(m["user_s"]), "sys_s": float(m["sys_s"]),
            **{k: (int(m[k]) if m.get(k) is not None else None) for k in ("voluntary_ctx", "involuntary_ctx")}}


def busiest_thread(cpus: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The busiest thread of any engine over its measured phase, from summaries' `cpu` ({measured, threads}):
    {name, cpu_s, seconds, pct} (pct: % of one core), None when no engine says. One thread at a full core
    limits the load however many cores the host has."""
    best: dict[str, Any] | None = None
    for cpu in cpus:
        m = (cpu or {}).get("measured") or {}
        seconds = float(m.get("seconds") or 0.0)
        for t in (cpu or {}).get("threads") or []:
            if seconds > 0 and t.get("cpu_s") is not None:
                pct = 100.0 * float(t["cpu_s"]) / seconds
                if best is None or pct > best["pct"]:
                    best = {"name": t.get("name"), "cpu_s": float(t["cpu_s"]), "seconds": seconds, "pct": pct}
    return best


def merge_cpu_measured(parts: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Several engines' measured-phase CPU as the point's: CPU and context switches summed, seconds the longest
    engine's (so CPU / seconds is % of one core summed over engines). None unless every engine has one."""
    if not parts or any(p is None for p in parts):
        return None
    ps = [p for p in parts if p is not None]
    out: dict[str, Any] = {"seconds": max(p["seconds"] for p in ps), "user_s": sum(p["user_s"] for p in ps),
                           "sys_s": sum(p["sys_s"] for p in ps)}
    for k in ("voluntary_ctx", "involuntary_ctx"):
        vals = [p.get(k) for p in ps]
        out[k] = sum(vals) if all(v is not None for v in vals) else None  # type: ignore[misc]
    return out


def ctx_per_op(cm: dict[str, Any] | None, ops: dict[str, Any]) -> dict[str, float | None]:
    """Context switches of the measured phase per op, errors included (the engine's rule), from merged op
    entries; None where unknown."""
    n = sum(int(o.get("ops") or 0) + _errors(o.get("errors")) for o in ops.values())
    return {k: (cm[f"{k}_ctx"] / n if cm and cm.get(f"{k}_ctx") is not None and n else None)
            for k in ("voluntary", "involuntary")}


_SCHEDULE_SUMS = ("rate", "offered_rate", "achieved_rate", "intended_ops", "issued_ops", "unissued_ops", "ops",
                  "intended_rate")
# the achieved rate's shortfall against the arrivals' rate a kept schedule allows (engine/src/rate.rs KEPT_TOLERANCE)
KEPT_TOLERANCE = 0.05


def _rate_floor(intended_rate: float, intended_ops: int) -> float:
    """The lowest achieved rate one engine's window keeps its schedule at: (1 - KEPT_TOLERANCE) of its arrivals'
    rate, one op of the window spared (the window is intended_ops / intended_rate)."""
    if intended_ops <= 0 or intended_rate <= 0:
        return 0.0
    return ((1 - KEPT_TOLERANCE) * intended_ops - 1) * intended_rate / intended_ops


def schedule_rate_kept(achieved: float, intended_rate: float, intended_ops: int) -> bool:
    """The rate half of a kept schedule for one engine's window (engine/src/rate.rs schedule_kept)."""
    return achieved >= _rate_floor(intended_rate, intended_ops)


def merge_schedules(schedules: Sequence[dict[str, Any] | None], engines: int | None = None) -> dict[str, Any] | None:
    """Several engines' open-loop `schedule` as the point's (None in closed loop): rates and op counts summed
    (each engine runs its own schedule), the largest lag, the mean lag weighted by each engine's ops. Kept only
    if every engine kept it and the summed achieved rate is within the engines' rule of the summed arrivals'
    rate (KEPT_TOLERANCE, one op spared per engine; implied by every engine keeping it, checked so that the
    point's figures hold it whatever an engine's record says). engines: how many engines ran; one without a
    schedule (lost before its summary) leaves the sums partial and the schedule not known to be kept."""
    got = [s for s in schedules if s]
    if not got:
        return None
    n = engines if engines is not None else len(schedules)
    out: dict[str, Any] = {"arrival": got[0].get("arrival"), "engines": len(got)}
    for k in _SCHEDULE_SUMS:
        if all(s.get(k) is not None for s in got):
            out[k] = sum(s[k] for s in got)
    if all(s.get("schedule_kept") is not None for s in got):
        out["schedule_kept"] = all(bool(s["schedule_kept"]) for s in got) and len(got) >= n
        if all(s.get(k) is not None for s in got for k in ("intended_rate", "intended_ops", "achieved_rate")):
            floor = sum(_rate_floor(float(s["intended_rate"]), int(s["intended_ops"])) for s in got)
            out["schedule_kept"] = out["schedule_kept"] and out["achieved_rate"] >= floor
    if any(s.get("max_lag_ns") is not None for s in got):
        out["max_lag_ns"] = max(int(s.get("max_lag_ns") or 0) for s in got)
    w = [(float(s.get("mean_lag_ns") or 0.0), int(s.get("ops", s.get("issued_ops")) or 0)) for s in got]
    if any(s.get("mean_lag_ns") is not None for s in got):
        total = sum(c for _, c in w)
        out["mean_lag_ns"] = sum(m * c for m, c in w) / total if total else 0.0
    if len(got) < n:
        out["engines_missing"] = n - len(got)
    return out


def point_result(totals: Sequence[dict[str, Any]], engine: str = "fathom-engine") -> PointResult:
    """The point as one result from every engine's totals: counts summed, histograms added, latency
    figures from the merged histogram, the longest engine's measured time as the point's (its window and
    drain the point's). client_user_s/sys_s: the whole processes' CPU; extra: the measured phase's
    (`cpu_measured`, the base of CPU per op), `ctx_per_op`, the merged open-loop `schedule`."""
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
    cm = merge_cpu_measured([t.get("cpu_measured") for t in totals])
    extra: dict[str, Any] = {"cpu_measured": cm, "schedule": merge_schedules([t.get("schedule") for t in totals],
                                                                             len(totals)),
                             "busiest_thread": busiest_thread([t.get("cpu") for t in totals]),
                             # each engine's requests beyond its ops (prefill, multipart parts, retries)
                             "engine_requests": [t.get("requests") for t in totals]}
    if cm is not None:
        extra["ctx_per_op"] = ctx_per_op(cm, merged)
    longest = max(totals, key=lambda t: t["measured_s"], default=None)
    if longest is not None and longest.get("window_s") is not None:
        extra["window_s"], extra["drain_s"] = longest["window_s"], longest.get("drain_s")
    proc = [(t.get("process_user_s", t["user_s"]), t.get("process_sys_s", t["sys_s"])) for t in totals]
    return PointResult(engine=engine, ops=ops, runtime_s=runtime, client_user_s=sum(u for u, _ in proc),
                       client_sys_s=sum(s for _, s in proc), wall_s=runtime or None, errors=errors, extra=extra)


def _errors(v: Any) -> int:
    if isinstance(v, dict):
        return sum(int(x) for x in v.values())
    return int(v or 0)


def host_rows(engines: Sequence[dict[str, Any]], slow_ratio: float = 0.5) -> list[dict[str, Any]]:
    """Per-host figures from per-engine rows ({host, ops, bytes, measured_s, cpu_s, hist, lost}): throughput,
    p99 from the host's merged histogram, client CPU (cpu_s: the engine's measured-phase CPU, engine_totals'
    user_s + sys_s, over the host's measured seconds: % of one core, the base of the point's usr_cpu); `slow`
    flags a host whose throughput per engine is under slow_ratio of the median host's."""
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
