"""The live state of one run: what the page and /metrics show, fed by the run's lifecycle (observer.py).

Two kinds of figures are kept, each under one lock:
- for the page: the suite's progress, the running point's per-second series (ops/s, MiB/s, p50/p99, errors)
  with its fault and steady-state marks, the finished points (a curve), the flags raised so far;
- for Prometheus: counters that only grow (ops, bytes, errors, engine CPU seconds) and latency bucket counts
  per (workload, point, op, host), so rate() and histogram_quantile() work across scrapes and hosts. Only the
  running (or last) point's are kept: the next point's start drops them (Prometheus has what it scraped), so
  what a scrape formats does not grow with the points finished; the run's own counters per (op, host) stay.

The lock is held only to copy or to add: the histogram work of a second is done before it is taken, and
`snapshot()` (the page's JSON) and `metrics_view()` (what /metrics formats, exposition.py) copy under it and
nothing more, so a scrape never holds up the records' path (and the run) for longer than a copy.
`from_store` (watch.py) builds the page's shape from the results store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from fathom.results import hdr, series
from fathom.live import buckets

SERIES_KEEP = 900  # seconds of the running point's series the page gets (a long point: its last 15 minutes)
FLAG_KINDS = {"gate": "health gate", "client_lost": "client host lost", "server_lost": "server host lost",
              "server_late": "server host late", "error": "error", "warning": "warning", "full": "cluster full"}


@dataclass
class OpSeries:
    """One (workload, point, op, host)'s counters since the run started (Prometheus counters never go down)."""

    ops: int = 0
    bytes: int = 0
    errors: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(buckets.BOUNDS_S) + 1))
    lat_count: int = 0
    lat_sum_s: float = 0.0


def flag_of(e: dict[str, Any], point: str | None = None) -> dict[str, Any] | None:
    """An event that is a flag on the page (a gate not passed, a host lost, an error), or None."""
    kind = e.get("kind") or ""
    if kind not in FLAG_KINDS:
        return None
    return {"kind": kind, "what": FLAG_KINDS[kind], "message": e.get("message") or "", "point": point,
            "ts": e.get("ts")}


def schedule_flag(m: dict[str, Any], point: str, ts: float | None) -> dict[str, Any] | None:
    """An open-loop point that did not keep its schedule (its stored metrics say so) as a flag, or None."""
    if m.get("schedule_kept") is None or m["schedule_kept"]:
        return None
    return {"kind": "schedule", "what": "open-loop schedule not kept", "point": point, "ts": ts,
            "message": f"offered {m.get('offered_rate_ops_s')} ops/s, achieved {m.get('achieved_rate_ops_s')}, "
                       f"{m.get('unissued_ops') or 0} unissued"}


def point_row(n: int, key: str, workload: str, label: str, status: str, metrics: dict[str, Any] | None,
              error: str | None) -> dict[str, Any]:
    """A finished point as the page's curve has it: its workload (a curve of its own), the rate it was offered
    (open loop) and whether it reached steady state (`steady_s`, measured seconds) stay with it after it ended."""
    m = metrics or {}
    return {"n": n, "key": key, "workload": workload, "label": label, "status": status, "error": error,
            **{k: m.get(k) for k in ("iops", "bw_mib_s", "p50_ms", "p99_ms", "clat_ms", "osd_cpu",
                                     "offered_rate_ops_s", "achieved_rate_ops_s", "unissued_ops",
                                     "steady_state", "steady_s")}}


def mark_t(e: dict[str, Any], ramp_s: float, last_t: float | None) -> float | None:
    """Where an event's mark stands on the point's seconds, whose `t` counts from the engine's start, ramp
    included: a fault at its time on that clock, steady state at the ramp plus the measured seconds the watch
    counts (its `at_s` starts after the ramp), anything else at the last second plotted."""
    data = e.get("data") or {}
    if e.get("kind") == "fault":
        return data.get("t_s", last_t)
    if e.get("kind") == "steady" and data.get("at_s") is not None:
        return round(ramp_s + float(data["at_s"]), 3)
    return last_t


def steady_mark(metrics: dict[str, Any] | None, ramp_s: float) -> dict[str, Any] | None:
    """A stored point's steady-state mark, where the steady-state watch's own stood on the running point's
    seconds, or None (not reached, or no steady_state)."""
    at_s = (metrics or {}).get("steady_s")
    if at_s is None:
        return None
    return {"t": mark_t({"kind": "steady", "data": {"at_s": at_s}}, ramp_s, None), "kind": "steady",
            "message": f"steady state at {float(at_s):.0f} s"}


def plotted(rec: dict[str, Any]) -> bool:
    """A record that is a second of the page's series: not the engine's partial last one (`tail`, a few ms of
    drain whose rate and percentiles are noise), whose ops the counters take all the same."""
    return not rec.get("tail")


def second(rec: dict[str, Any]) -> dict[str, Any]:
    """One interval record (a point's merged one) as the page's per-second figures."""
    dt = float(rec.get("dt") or 1.0) or 1.0
    s = series.merged([rec], float(rec.get("t") or 0.0), dt)  # op kinds summed, histograms together
    ops, nbytes, errors = s.ops, s.bytes, s.errors
    h = hdr.merge(s.hists) if s.hists else None
    p50 = p99 = None
    if h is not None and h.get_total_count() > 0:
        p50, p99 = (v / 1e6 for v in buckets.percentiles_ns(h, (50.0, 99.0)))
    return {"t": round(float(rec.get("t") or 0.0), 3), "ts": rec.get("ts"), "ramp": bool(rec.get("ramp")),
            "iops": ops / dt, "mib_s": nbytes / dt / 2**20, "errors": errors, "p50_ms": p50, "p99_ms": p99}


class LiveState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = 0  # grows with every change: the page redraws only when it moved
        self.run: dict[str, Any] = {"id": None, "name": None, "suite": None, "kind": None, "status": "starting",
                                    "started": time.time(), "planned": None}
        self.done = 0
        self.point: dict[str, Any] | None = None
        self.finished: list[dict[str, Any]] = []
        self.flags: list[dict[str, Any]] = []
        self.lost_hosts: dict[str, str] = {}
        self.faults = 0
        self.series: dict[tuple[str, str, str, str], OpSeries] = {}  # the running (or last) point's only
        self.run_series: dict[tuple[str, str], OpSeries] = {}  # (op, host): the run's, every point's added
        self.cpu_s: dict[str, float] = {}  # host -> engine CPU seconds (user + system)
        self.last: dict[str, Any] = {}  # the last second's point-level figures (gauges)
        self.host_name = "local"  # the one client host of a point whose engines all ran there
        self._spans = False  # the running point's per-host records come from on_span (a many-engine point)

    def _changed(self) -> None:
        self.version += 1

    # ---- the run -------------------------------------------------------------------
    def run_start(self, run_id: int | None, name: str | None, suite: str | None, kind: str,
                  planned: int | None, done: int = 0) -> None:
        with self.lock:
            self.run.update(id=run_id, name=name, suite=suite, kind=kind, planned=planned, status="running")
            self.done = done  # a resumed run's points done before
            self._changed()

    def finish(self, status: str) -> None:
        with self.lock:
            self.run["status"] = status
            if self.point is not None and status != "done":
                self.point["status"] = status
            self._changed()

    # ---- points --------------------------------------------------------------------
    def point_start(self, n: int, key: str, workload: str, label: str, params: dict[str, Any],
                    est_s: float | None) -> None:
        with self.lock:
            self.point = {"n": n, "key": key, "workload": workload, "label": label, "status": "running",
                          "started": time.time(), "est_s": est_s, "offered_rate": params.get("rate"),
                          "ramp_s": float(params.get("ramp_time") or 0.0), "series": [], "marks": [],
                          "unissued_ops": None}
            self.last = {}
            self._spans = False
            self.series = {}  # the last point's per-point series leave /metrics (the run's totals stay)
            self._changed()

    def point_end(self, status: str, metrics: dict[str, Any] | None, error: str | None,
                  events: Iterable[dict[str, Any]] = ()) -> None:
        with self.lock:
            p = self.point
            if p is None:
                return
            self.done += 1
            m = metrics or {}
            row = point_row(p["n"], p["key"], p["workload"], p["label"], status, m, error)
            self.finished.append(row)
            if status != "done":
                self.flags.append({"kind": status, "what": f"point {status}", "message": error or status,
                                   "point": p["key"], "ts": time.time()})
            sched = schedule_flag(m, p["key"], time.time())
            if sched is not None:
                self.flags.append(sched)
            for e in events:  # what the stored point says (a gate not passed, health after, warnings)
                f = flag_of(e, p["key"])
                if f is not None and not any(x["message"] == f["message"] for x in self.flags):
                    self.flags.append(f)
            p["status"], p["unissued_ops"] = status, m.get("unissued_ops")
            self.last = {}
            self._changed()

    # ---- each second ---------------------------------------------------------------
    def interval(self, rec: dict[str, Any]) -> None:
        """The point's merged record of one span (a partial last one: counted, not plotted)."""
        sec = second(rec) if plotted(rec) else None
        # one engine: its record is the only host's (counted before the lock is taken)
        add = None if self._spans else _delta([rec], self.host_name)
        with self.lock:
            p = self.point
            if p is None:
                return
            if sec is not None:
                p["series"].append(sec)
                del p["series"][:-SERIES_KEEP]
                self.last = sec
            if add is not None:
                self._apply(add)
            self._changed()

    def span(self, recs: list[dict[str, Any]]) -> None:
        """The engines' own records of one span (a many-engine point): the per-host counters and buckets."""
        add = _delta(recs, self.host_name)
        with self.lock:
            self._spans = True
            if self.point is not None:
                self._apply(add)
                self._changed()

    def _apply(self, add: Delta) -> None:
        """A span's counts added (under the lock: additions only, the histogram work is done)."""
        p = self.point
        assert p is not None
        for host, v in add.cpu_s.items():
            self.cpu_s[host] = self.cpu_s.get(host, 0.0) + v
        for (host, op), d in add.ops.items():
            r = self.run_series.setdefault((op, host), OpSeries())
            r.ops, r.bytes, r.errors = r.ops + d.ops, r.bytes + d.bytes, r.errors + d.errors
            s = self.series.setdefault((p["workload"], p["key"], op, host), OpSeries())
            s.ops += d.ops
            s.bytes += d.bytes
            s.errors += d.errors
            if d.lat_count:
                s.buckets = [a + b for a, b in zip(s.buckets, d.buckets)]
                s.lat_count += d.lat_count
                s.lat_sum_s += d.lat_sum_s

    # ---- events as they happen -----------------------------------------------------
    def event(self, e: dict[str, Any]) -> None:
        with self.lock:
            p = self.point
            last_t = p["series"][-1]["t"] if p is not None and p["series"] else None
            t = mark_t(e, p["ramp_s"] if p is not None else 0.0, last_t)
            kind = e.get("kind")
            data = e.get("data") or {}
            if kind == "fault":
                self.faults += 1
            elif kind == "client_lost":
                host = data.get("host") or data.get("hostname") or "?"
                self.lost_hosts[str(host)] = e.get("message") or ""
            if p is not None and kind in ("fault", "steady", "client_lost", "recovery"):
                p["marks"].append({"t": t, "kind": kind, "message": e.get("message") or ""})
            f = flag_of(e, p["key"] if p else None)
            if f is not None:
                self.flags.append(f)
            self._changed()

    # ---- the page's JSON -----------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            p = None
            if self.point is not None:
                p = {**self.point, "series": list(self.point["series"]), "marks": list(self.point["marks"])}
            return {"source": "live", "version": self.version, "now": time.time(), "run": dict(self.run),
                    "done": self.done, "point": p, "finished": list(self.finished), "flags": list(self.flags),
                    "lost_hosts": dict(self.lost_hosts), "faults": self.faults}

    # ---- what /metrics formats -----------------------------------------------------
    def metrics_view(self) -> dict[str, Any]:
        """The figures /metrics exposes, copied under the lock; exposition.py formats them once it is released."""
        with self.lock:
            p = self.point
            return {"run": dict(self.run), "done": self.done, "last": dict(self.last),
                    "point": None if p is None else {k: p.get(k) for k in ("n", "key", "workload", "status",
                                                                           "offered_rate", "unissued_ops")},
                    "series": [(k, replace(s, buckets=list(s.buckets))) for k, s in self.series.items()],
                    "run_series": [(k, (s.ops, s.bytes, s.errors)) for k, s in self.run_series.items()],
                    "cpu_s": dict(self.cpu_s), "faults": self.faults, "lost_hosts": list(self.lost_hosts),
                    "flags": len(self.flags), "finished": self.finished[-1:]}  # the last finished point's figures


@dataclass
class Delta:
    """One span's additions to the counters, computed before the lock is taken: per (host, op) ops, bytes,
    errors and the measured latencies in the fixed buckets; per host the engines' CPU seconds."""

    ops: dict[tuple[str, str], OpSeries] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)


def _delta(recs: list[dict[str, Any]], default_host: str) -> Delta:
    out = Delta()
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in recs:
        host = str(r.get("host") or default_host)
        cpu = r.get("cpu") or {}
        out.cpu_s[host] = out.cpu_s.get(host, 0.0) + float(cpu.get("user_s") or 0) + float(cpu.get("sys_s") or 0)
        for op, o in (r.get("ops") or {}).items():
            by.setdefault((host, op), []).append({**o, "_ramp": bool(r.get("ramp"))})
    for key, os_ in by.items():
        d = out.ops[key] = OpSeries()
        d.ops = sum(int(o.get("ops") or 0) for o in os_)
        d.bytes = sum(int(o.get("bytes") or 0) for o in os_)
        d.errors = sum(int(o.get("errors") or 0) for o in os_)
        # the ramp's latencies stay out, as they stay out of the point's stored percentiles
        measured = [o for o in os_ if o.get("hist") and not o["_ramp"]]
        if measured:
            d.buckets, d.lat_count = buckets.counts(hdr.merge([o["hist"] for o in measured]))
            # the sum from the engines' own means (exact), weighted by ops: no pass over the histogram
            w = sum(int(o.get("ops") or 0) for o in measured)
            if w:
                d.lat_sum_s = d.lat_count * sum(float(o.get("lat_mean_ns") or 0) * int(o.get("ops") or 0)
                                                for o in measured) / w / 1e9
    return out
