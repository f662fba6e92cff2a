"""Runs as analysis and reports see them: points grouped into per-workload curves.

A *level* is a point's position on the sweep (usually its iodepth). Points of one
run (or of several runs given as one group) with the same workload and level are
repetitions of one measurement; analysis keeps them apart as samples.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from fathom import interfaces
from fathom.results.store import Store

# Parameters that may vary over a curve: every field a suite may sweep (workload.SWEEPABLE) and the imported tables'
# axes. The ones that vary within a run's workload make the level, so points of different configurations are
# never taken as repetitions of one; the order is the labels'.
SWEEP_KEYS = ("numjobs", "iodepth", "clients", "threads", "files", "rate", "placement", "object_size", "tls", "rw",
              "bs", "rwmixread", "nrfiles", "filesize", "size", "engine", "ioengine", "direct", "file_service",
              "runtime", "ramp_time", "delay_us")
# an SLO search's probes (params `slo_probe`) run as long as their percentiles need: not a level axis
_PROBE_SET = ("runtime", "ramp_time")
_UNSEEN = object()
LARGE_BLOCK = 64 * 1024  # from this size up, throughput is reported in MiB/s (as the OSD study does)


@dataclass
class StoredPoint:
    """A point of the results store as analysis sees it (the planned one is fathom.suite.plan.Point)."""

    run: str
    run_id: int
    workload: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    engine: str = ""
    status: str = "done"
    error: str | None = None
    stopped_early: bool = False
    stop_reason: str | None = None
    point_id: int | None = None
    started: float | None = None
    ended: float | None = None
    published: dict[str, Any] = field(default_factory=dict)  # raw row of an imported table
    hists: dict[str, str] = field(default_factory=dict)  # op -> base64 HDR V2 ('all' = merged over ops)
    gate: dict[str, Any] = field(default_factory=dict)  # health gate verdict before the point
    intervals: list[dict[str, Any]] = field(default_factory=list)  # engine records, loaded for points with faults
    # a point on several engines: per-host rows, host clocks, start skew (fathom.engines.clients)
    clients: dict[str, Any] = field(default_factory=dict)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> its figures (usage.per_host)
    bound: dict[str, Any] = field(default_factory=dict)  # what bounds it (fathom.analysis.bound.judge)
    level: tuple[Any, ...] = ()
    label: str = ""

    def m(self, key: str) -> float | None:
        v = self.metrics.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def iodepth(self) -> int | None:
        v = self.params.get("iodepth")
        return int(v) if isinstance(v, (int, float)) else None


@dataclass
class RunData:
    """One run, or a group of runs taken as repetitions of one configuration (`a,b`)."""

    name: str
    ids: list[int]
    kind: str
    status: str
    source: str | None
    env: dict[str, Any]
    suite: str | None
    points: list[StoredPoint]
    events: list[dict[str, Any]]

    def workloads(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self.points:
            seen.setdefault(p.workload, None)
        return list(seen)

    def curve(self, workload: str) -> list[StoredPoint]:
        return sorted((p for p in self.points if p.workload == workload), key=lambda p: p.level)


def load_run(store: Store, ref: str) -> RunData:
    """A run by id/name/'latest', or a comma-separated group of them."""
    refs = [r for r in str(ref).split(",") if r]
    runs = [store.run(r) for r in refs]
    points: list[StoredPoint] = []
    events: list[dict[str, Any]] = []
    name = ",".join(r.name for r in runs) if len(runs) > 1 else runs[0].name
    for r in runs:
        for p in store.points(r.id):
            res = p.get("result") or {}
            points.append(StoredPoint(
                run=name, run_id=r.id, workload=p["workload"], params=p["params"] or {}, metrics=p["metrics"] or {},
                engine=p.get("engine") or "", status=p["status"], error=p.get("error"),
                stopped_early=bool(res.get("stopped_early")),
                stop_reason=res.get("stop_reason"), point_id=p["id"], started=p.get("started"),
                ended=p.get("ended"), published=res.get("published_row") or {}, hists=store.histograms(p["id"]),
                gate=p.get("gate") or {},
                clients={k: (res.get("extra") or {}).get(k) for k in ("hosts", "clocks", "start_skew_ms",
                                                                      "clients_lost")}
                if (res.get("extra") or {}).get("hosts") else {},
                servers=(res.get("extra") or {}).get("server_hosts") or {},
                bound=(res.get("extra") or {}).get("bound") or {}))
        run_events = store.events(r.id)
        events.extend({**e, "run_id": r.id} for e in run_events)
        faulted = {e["point_id"] for e in run_events if e["kind"] == "fault"}
        for pt in points:
            if pt.run_id == r.id and pt.point_id in faulted:
                pt.intervals = store.timeline(pt.point_id)  # for the point's timeline
    first = runs[0]
    return RunData(name=name, ids=[r.id for r in runs], kind=first.kind,
                   status=",".join(sorted({r.status for r in runs})),
                   source="\n".join(r.source for r in runs if r.source) or None,
                   env=first.env if len(runs) == 1 else {r.name: r.env for r in runs},
                   suite=first.suite, points=points, events=events)


def assign_levels(runs: list[RunData]) -> None:
    """Give every point its level, using the sweep keys that vary within its workload across all runs."""
    by_wl: dict[str, list[StoredPoint]] = {}
    for r in runs:
        for p in r.points:
            by_wl.setdefault(p.workload, []).append(p)
    for pts in by_wl.values():
        assign_workload_levels(pts)


def assign_workload_levels(pts: list[StoredPoint]) -> list[str]:
    """The points of one workload (over any runs) their levels; returns the level's keys (level_keys)."""
    keys = level_keys(pts)
    if not keys:
        keys = ["iodepth"] if any("iodepth" in p.params for p in pts) else []
    for p in pts:
        vals = tuple(p.params.get(k) for k in keys)
        p.level = tuple((v is None, v if isinstance(v, (int, float)) else str(v)) for v in vals)
        if len(keys) == 1:
            p.label = str(vals[0]) if vals[0] is not None else "-"
        elif keys:
            p.label = " ".join(f"{_short(k)}={v}" for k, v in zip(keys, vals))
        else:
            p.label = "-"
    return keys


def level_keys(pts: list[StoredPoint]) -> list[str]:
    """The parameters that vary within any one run among these points (one workload's): a level is every
    such axis. A field that differs only between runs (a changed default) does not split the levels, so
    the runs' points still meet level by level in a comparison."""
    by_run: dict[int, list[StoredPoint]] = {}
    for p in pts:
        by_run.setdefault(p.run_id, []).append(p)

    def varies(k: str, group: list[StoredPoint]) -> bool:
        probe_set = k in _PROBE_SET
        first: Any = _UNSEEN
        for p in group:
            if probe_set and "slo_probe" in p.params:
                continue
            v = _hashable(p.params.get(k))
            if first is _UNSEEN:
                first = v
            elif v != first:
                return True
        return False

    # a key with one value over all the points varies within no run: one pass rules it out (histories of
    # a thousand runs would otherwise look at every run for every key)
    # points that share one params dict (fathom.results.store.done_points) are one point to this question
    distinct = list({id(p.params): p for p in pts}.values())
    return [k for k in SWEEP_KEYS if varies(k, distinct) and any(varies(k, group) for group in by_run.values())]


def level_axis_name(runs: list[RunData], workload: str) -> str:
    """What the level labels of a workload mean, e.g. 'iodepth' or 'jobs/files'."""
    return axis_name(level_keys([p for r in runs for p in r.points if p.workload == workload]))


def axis_name(keys: list[str]) -> str:
    if len(keys) == 1:
        return keys[0]
    if not keys:
        return "iodepth"
    return "level"


def _short(k: str) -> str:
    return {"numjobs": "jobs", "iodepth": "qd", "nrfiles": "files", "rwmixread": "read%"}.get(k, k)


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, type(None))) else repr(v)


@dataclass(frozen=True)
class Throughput:
    key: str  # metric column
    unit: str  # for headers and axes
    label: str  # short column name

    def of(self, p: StoredPoint) -> float | None:
        return p.m(self.key)


IOPS = Throughput("iops", "IOPS", "IOPS")
BW = Throughput("bw_mib_s", "MiB/s", "bw")


def throughput_for(points: list[StoredPoint]) -> Throughput:
    """IOPS for small blocks, MiB/s from 64 KiB up (or when a source has no IOPS at all)."""
    for p in points:
        bs = interfaces.op_size(p.params)
        if isinstance(bs, (int, float)) and bs >= LARGE_BLOCK:
            return BW
    if points and all(p.m("iops") is None for p in points) and any(p.m("bw_mib_s") is not None for p in points):
        return BW
    return IOPS


@dataclass
class Level:
    """All samples of one level of one curve, and their means."""

    level: tuple[Any, ...]
    label: str
    points: list[StoredPoint]

    def values(self, key: str | Throughput) -> list[float]:
        if isinstance(key, Throughput):
            vals = [key.of(p) for p in self.points]
        else:
            vals = [p.m(key) for p in self.points]
        return [v for v in vals if v is not None]

    def mean(self, key: str | Throughput) -> float | None:
        v = self.values(key)
        return statistics.fmean(v) if v else None

    def clat_ms(self) -> tuple[float | None, float | None]:
        """Mean and stdev of completion latency over all samples, pooled (weighted by I/O count)."""
        if len(self.points) == 1:
            return self.points[0].m("clat_ms"), self.points[0].m("clat_stdev_ms")
        from fathom.results.model import pooled_mean_stdev
        parts = [(int(p.m("total_ios") or 0), p.m("clat_ms"), p.m("clat_stdev_ms") or 0.0) for p in self.points]
        if any(n == 0 for n, m, _ in parts if m is not None):
            return self.mean("clat_ms"), None  # without counts no honest pooled stdev
        return pooled_mean_stdev(parts)  # type: ignore[arg-type]

    def percentile_ms(self, key: str) -> float | None:
        """p50/p90/p99/p999 of the level: the point's own with one sample; with repetitions, from their
        histograms merged (never an average of percentiles), or None without histograms."""
        if len(self.points) == 1:
            return self.points[0].m(f"{key}_ms")
        return merged_percentile_ms(self.points, key)


def merged_percentile_ms(points: list[StoredPoint], key: str) -> float | None:
    from fathom.results.model import PERCENTILES
    try:
        from fathom.results import hdr
    except ImportError:  # histogram support not installed in this tree
        return None
    hs = []
    for p in points:
        if not p.hists:
            return None
        hs.extend([p.hists["all"]] if "all" in p.hists else p.hists.values())
    merged = hdr.merge(hs)
    if not hdr.count(merged):
        return None
    return hdr.percentile(merged, PERCENTILES[key]) / 1e6


def levels(curve: list[StoredPoint]) -> list[Level]:
    out: dict[tuple[Any, ...], Level] = {}
    for p in curve:
        out.setdefault(p.level, Level(p.level, p.label, [])).points.append(p)
    return [out[k] for k in sorted(out)]
