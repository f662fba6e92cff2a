"""The live state as Prometheus metrics (prometheus_client's collector protocol, its text format).

Names and units are listed in docs/live.md: Prometheus' conventions (`promtool check metrics` has nothing to
say), base units (bytes, seconds), ratios rather than percent. The names of fathom 0.1.0 that broke them are
exported as well, beside their new ones, for one version (DEPRECATED in their HELP).
Every series carries `run` and `suite`; per-point series add `workload` and `point` (the point's key), per-op
series `op`, per-engine-host series `host`. Per-point series
are the running (or last) point's only: they leave when the next point starts, so a scrape costs the same
after a thousand points as after one; the run's own counters (`fathom_run_ops_total`...) add every point's.
The latency histogram has fixed bounds (buckets.py) so `histogram_quantile` adds hosts and op kinds up.
No secret is a label or a value: run, suite, workload and point names, op kinds and host labels only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from fathom.live import buckets
from fathom.live.state import LiveState

_LE = [f"{b:g}" for b in buckets.BOUNDS_S] + ["+Inf"]
_STATES = ("running", "done", "failed", "interrupted")
# new name -> (old name, the factor from the new unit to the old one, the old unit): each old one still exported, a
# dashboard or alert on it working on, until the next version (docs/live.md has the table)
DEPRECATED: dict[str, tuple[str, float, str]] = {
    "fathom_ops_per_second": ("fathom_iops", 1.0, "ops/s"),
    "fathom_bytes_per_second": ("fathom_mib_s", 2.0**-20, "MiB/s"),
    "fathom_offered_ops_per_second": ("fathom_offered_rate_ops", 1.0, "ops/s"),
    "fathom_achieved_ops_per_second": ("fathom_achieved_rate_ops", 1.0, "ops/s"),
    "fathom_point_ops_per_second": ("fathom_point_iops", 1.0, "ops/s"),
    "fathom_point_bytes_per_second": ("fathom_point_mib_s", 2.0**-20, "MiB/s"),
    "fathom_point_osd_cpu_ratio": ("fathom_point_osd_cpu_percent", 100.0, "% of one core"),
}


class LiveCollector(Collector):
    def __init__(self, state: LiveState):
        self.state = state

    def collect(self) -> Iterator[Metric]:
        # the state's lock is held for the copy only: the families are built and formatted without it, so a
        # scrape never holds up the records of the running point (nor the run's thread that hands them over)
        yield from families(self.state.metrics_view())


def families(v: dict[str, Any]) -> Iterator[Metric]:
    """The metric families of one metrics_view() (LiveState), which nothing else holds; a renamed one followed by
    its deprecated old name."""
    for m in _families(v):
        yield m
        if m.name in DEPRECATED:
            yield _deprecated(m, *DEPRECATED[m.name])


def _deprecated(m: Metric, old: str, factor: float, unit: str) -> Metric:
    """A renamed gauge under its old name, its figures in the old unit."""
    out = Metric(old, f"DEPRECATED: use {m.name}, the same figure in base units; this name, in {unit}, goes in "
                      f"fathom's next version", m.type)
    out.samples = [s._replace(name=old, value=s.value * factor) for s in m.samples]
    return out


def _families(v: dict[str, Any]) -> Iterator[Metric]:
    r = v["run"]
    run = [str(r.get("name") or ""), str(r.get("suite") or r.get("kind") or "")]
    base = ["run", "suite"]
    info = GaugeMetricFamily("fathom_run_info", "the run being measured (1)", labels=[*base, "kind", "status"])
    info.add_metric([*run, str(r.get("kind") or ""), str(r.get("status") or "")], 1)
    yield info
    planned = GaugeMetricFamily("fathom_points_planned", "points the run plans (absent in an SLO search)",
                                labels=base)
    if r.get("planned") is not None:
        planned.add_metric(run, float(r["planned"]))
    yield planned
    yield _gauge("fathom_points_finished", "points finished so far (any status)", base, run, v["done"])
    p = v["point"]
    pl = [*base, "workload", "point"]
    pv = [*run, p["workload"], p["key"]] if p else []
    idx = GaugeMetricFamily("fathom_point_index", "the running (or last) point's position in the run, from 1",
                            labels=pl)
    state = GaugeMetricFamily("fathom_point_state", "1 for the running (or last) point's state",
                              labels=[*pl, "state"])
    sec = v["last"]
    g = {k: GaugeMetricFamily(f"fathom_{k}", h, labels=pl) for k, h in (
        ("ops_per_second", "ops completed in the last second, all op kinds and engines"),
        ("bytes_per_second", "bytes moved per second in the last second, all op kinds and engines"),
        ("latency_p50_seconds", "median latency of the last second (merged HDR histograms), s"),
        ("latency_p99_seconds", "99th percentile latency of the last second (merged HDR histograms), s"),
        ("offered_ops_per_second", "open loop: the offered rate, ops per second over all engines"),
        ("achieved_ops_per_second", "open loop: the ops per second achieved in the last second"),
        ("unissued_ops", "open loop: ops the point's schedule never issued (known when it ends)"),
        ("ramp", "1 while the running point is in its ramp"))}
    if p is not None:
        idx.add_metric(pv, p["n"])
        for s in _STATES:
            state.add_metric([*pv, s], 1.0 if p["status"] == s else 0.0)
        if sec:
            g["ops_per_second"].add_metric(pv, sec["iops"])
            g["bytes_per_second"].add_metric(pv, sec["mib_s"] * 2**20)  # a power of 2: exactly the bytes/s
            g["ramp"].add_metric(pv, 1.0 if sec["ramp"] else 0.0)
            for q in ("p50", "p99"):
                if sec[f"{q}_ms"] is not None:
                    g[f"latency_{q}_seconds"].add_metric(pv, sec[f"{q}_ms"] / 1e3)
        if p.get("offered_rate") is not None:
            g["offered_ops_per_second"].add_metric(pv, float(p["offered_rate"]))
            if sec:
                g["achieved_ops_per_second"].add_metric(pv, sec["iops"])
        if p.get("unissued_ops") is not None:
            g["unissued_ops"].add_metric(pv, float(p["unissued_ops"]))
    yield idx
    yield state
    yield from g.values()
    ol = [*pl, "op", "host"]
    c = {k: CounterMetricFamily(f"fathom_{k}", h, labels=ol) for k, h in (
        ("ops", "ops completed (the interval records' ops), ramp included"),
        ("bytes", "bytes moved by completed ops"),
        ("errors", "ops that failed (errors and timeouts), by op kind"))}
    hist = HistogramMetricFamily("fathom_latency_seconds", "latency of successful ops after the ramp, s "
                                 "(fixed log buckets from the engines' HDR histograms)", labels=ol)
    for (wl, key, op, host), s in v["series"]:
        lv = [*run, wl, key, op, host]
        c["ops"].add_metric(lv, s.ops)
        c["bytes"].add_metric(lv, s.bytes)
        c["errors"].add_metric(lv, s.errors)
        cum, acc = [], 0
        for le, n in zip(_LE, s.buckets):
            acc += n
            cum.append((le, float(acc)))
        hist.add_metric(lv, cum, s.lat_sum_s)
    yield from c.values()
    yield hist
    rl = [*base, "op", "host"]
    rc = {k: CounterMetricFamily(f"fathom_run_{k}", h, labels=rl) for k, h in (
        ("ops", "ops completed over the run (every point's), ramp included"),
        ("bytes", "bytes moved by completed ops over the run"),
        ("errors", "ops that failed over the run (errors and timeouts), by op kind"))}
    for (op, host), counts in v["run_series"]:
        for k, n in zip(("ops", "bytes", "errors"), counts):
            rc[k].add_metric([*run, op, host], n)
    yield from rc.values()
    cpu = CounterMetricFamily("fathom_engine_cpu_seconds", "the engines' own CPU (user + system), s",
                              labels=[*base, "host"])
    for host, x in v["cpu_s"].items():
        cpu.add_metric([*run, host], x)
    yield cpu
    yield _counter("fathom_faults", "faults run so far", base, run, v["faults"])
    lost = GaugeMetricFamily("fathom_client_host_lost", "1 for each client host lost", labels=[*base, "host"])
    for host in v["lost_hosts"]:
        lost.add_metric([*run, host], 1)
    yield lost
    yield _gauge("fathom_flags", "flags raised so far (failed points, gates not passed, lost hosts, errors)",
                 base, run, v["flags"])
    yield from _finished(v["finished"], base, run)


def _finished(rows: list[dict[str, Any]], base: list[str], run: list[str]) -> Iterator[Metric]:
    """The last finished point's stored figures, server ones included where fathom measured them (each point's
    are exposed from its end until the next one ends: Prometheus keeps one series per point)."""
    # stored figure -> (name, what the stored unit is divided by for the base unit, help)
    names = {"iops": ("fathom_point_ops_per_second", 1.0, "a finished point's ops per second (measured window)"),
             "bw_mib_s": ("fathom_point_bytes_per_second", 2.0**-20, "a finished point's bytes per second"),
             "p99_ms": ("fathom_point_latency_p99_seconds", 1e3, "a finished point's p99 latency, s"),
             "osd_cpu": ("fathom_point_osd_cpu_ratio", 100.0, "a finished point's OSD CPU, seconds busy per second "
                                                             "summed over its OSDs (1: one core's worth)")}
    fams = {k: GaugeMetricFamily(n, h, labels=[*base, "workload", "point"]) for k, (n, _, h) in names.items()}
    for row in rows:
        for k, (_, div, _) in names.items():
            if row.get(k) is not None:
                fams[k].add_metric([*run, row["workload"], row["key"]], float(row[k]) / div)
    yield from fams.values()


def _gauge(name: str, doc: str, labels: list[str], values: list[str], v: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=labels)
    g.add_metric(values, float(v))
    return g


def _counter(name: str, doc: str, labels: list[str], values: list[str], v: float) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=labels)
    c.add_metric(values, float(v))
    return c


def registry(state: LiveState) -> CollectorRegistry:
    """A registry of fathom's live metrics only (no process or platform collectors: the page is the run's)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LiveCollector(state))
    return reg


def render(reg: CollectorRegistry) -> tuple[bytes, str]:
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(reg), CONTENT_TYPE_LATEST


class Renderer:
    """/metrics for the server: one render at a time (concurrent scrapes wait here, on a lock of their own, never
    on the state's), and the text reused while the state has not changed since (its `version`)."""

    def __init__(self, state: LiveState):
        self.state = state
        self.reg = registry(state)
        self._lock = threading.Lock()
        self._cached: tuple[int, tuple[bytes, str]] | None = None

    def __call__(self) -> tuple[bytes, str]:
        with self._lock:
            version = self.state.version  # read before the copy: a text is never kept under a newer version
            if self._cached is None or self._cached[0] != version:
                self._cached = (version, render(self.reg))
            return self._cached[1]


__all__: list[Any] = ["DEPRECATED", "LiveCollector", "Renderer", "families", "registry", "render"]
