"""What a report says, independent of its format: the generic sections of every workload and the assembler.

The document model is doc.py; the SLO search's section (slo.py), the studies' own (registered by name in
studies.py) and the timeline's and the per-host tables (perhost.py) come from their modules, which import the
model, never this file.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from fathom.analysis import anomalies as anom
from fathom.analysis.data import (Level, RunData, StoredPoint, Throughput, assign_levels, level_axis_name, levels,
                                  throughput_for)
from fathom.analysis.stats import KNEE_DEFINITION, knee_index, saturation_index
from fathom.results.model import DAEMON_KINDS, FIGURE_WINDOWS, daemon_columns, daemon_kinds_in, daemon_label
from fathom.report import perhost, phases, slo, sources, studies, svg, timeline
from fathom.report.doc import INTENDED, NA, ChartOut, ReportDoc, Section, Table, fmt, fmt_tp
from fathom.suite.steady import Criteria, outcome_text

RING_EXEMPT = {"host_busy"}  # a property of the whole box, listed in tables but not ringed on every point


def _names(cols: tuple[str, ...]) -> str:
    """A group's column names, the per-daemon-kind ones once as a pattern."""
    kinds = {c for c in cols for k in DAEMON_KINDS for suffix in daemon_columns(k) if c == suffix}
    shown = [c for c in cols if c not in kinds]
    return ", ".join(shown + (["each daemon kind's {kind}_cpu, _cores, _mem_mib and _ctx_switches_s"] if kinds else []))


DEFINITIONS = [
    KNEE_DEFINITION,
    "Throughput is IOPS for blocks under 64 KiB and MiB/s (2^20 bytes per second) from 64 KiB up, as the OSD study "
    "reports it. Peak is the highest throughput over the sweep (the mean when a level was repeated).",
    "clat is the mean completion latency; its stdev is pooled over jobs, weighted by I/O count. Percentiles come "
    "from merged latency histograms only; sources without histograms show n/a, never an average of percentiles.",
    "usr_cpu and sys_cpu are the load generator's CPU as it reports it, % of one core (fio: summed over jobs; fio "
    "does not count all of librbd's threads). Load generator process CPU, where shown, is fathom's own /proc "
    "measurement of the whole engine process tree. OSD CPU is % of one "
    "core summed over the OSD's threads (400% = 4 cores busy); OSD mem is resident memory in MiB. Other daemon "
    "kinds (RGW, MDS, MON, MGR, ...) are measured the same way; every daemon figure is summed over the daemons of "
    "its kind and averaged over the point's measured window. Efficiency is "
    "throughput per OSD core = throughput / (OSD CPU / 100).",
    "Client CPU (usr_cpu, sys_cpu, CPU per op) of fathom-engine is its measured phase's, from the ramp's end to the "
    "last measured completion (no connect, prefill, ramp or teardown), over that phase's seconds and ops, summed "
    "over engines on several client hosts. Measured time (runtime_s) is the window to the stop plus the drain to the "
    "last measured op's return (drain_s); IOPS divides by both, as rados bench does.",
    "p99 incl. errors is the 99th percentile of every op of the point, failed and timed-out ones included (their "
    "latency to the failure or the timeout), from the merged histograms; the other latency figures are of "
    "successful ops only.",
    "Open loop (a fixed arrival rate): offered is the rate asked for, achieved the successful measured ops per "
    "second, unissued the arrivals never issued once the window's backlog had its drain; the schedule was kept "
    "when at most 1% (or one op) were left and the achieved rate was at least 95% of the rate the window's "
    "arrivals came at (one op spared). A point that did not keep it measured the cluster under a backlog.",
    "Anomaly rules: " + " ".join(f"- {rule}" for rule in anom.RULES),
    *(f"Window of {_names(cols)}: {window}; source: {source}." for cols, window, source in FIGURE_WINDOWS),
]


def _level_stats(lv: Level, tp: Throughput) -> dict[str, float | None]:
    x = lv.mean(tp)
    cpu = lv.mean("osd_cpu")
    lat, sd = lv.clat_ms()
    return {"tp": x, "lat": lat, "sd": sd, "p99": lv.percentile_ms("p99"),
            "cpu": cpu, "eff": x / (cpu / 100.0) if x is not None and cpu else None}


def summary_rows(run: RunData, wl: str, axis: str, found: list[anom.Anomaly] | None = None) -> list[str] | None:
    """found: anomalies.find(run, wl) when the caller has it (build() runs the rules once for every place)."""
    curve = run.curve(wl)
    if not curve:
        return None
    tp = throughput_for(curve)
    lv = levels([p for p in curve if p.status == "done"])
    st = [_level_stats(level, tp) for level in lv]
    tps = [s["tp"] for s in st]
    if not any(t is not None for t in tps):
        return None
    peak_i = max((i for i, t in enumerate(tps) if t is not None), key=lambda i: tps[i])  # type: ignore[arg-type,return-value]
    ki = knee_index(tps, [s["lat"] for s in st])
    si = saturation_index(tps)
    flags = anom.find(run, wl) if found is None else found
    return [wl, run.name, fmt_tp(tps[peak_i], tp), lv[peak_i].label,
            lv[ki].label if ki is not None else NA, lv[si].label if si is not None else NA,
            fmt(st[peak_i]["lat"]), fmt(st[peak_i]["cpu"]),
            (fmt(st[peak_i]["eff"], "int") + (" IOPS" if tp.unit == "IOPS" else " MiB/s")) if st[peak_i]["eff"]
            else NA, _flag_cell(flags, lv[peak_i].label)]


def _flag_cell(flags: list[anom.Anomaly], peak_label: str) -> str:
    if not flags:
        return "0"
    at_peak = sorted({a.kind for a in flags if a.level == peak_label})
    n = len({(a.level, a.kind) for a in flags})
    return f"{n} (at peak: {', '.join(at_peak)})" if at_peak else str(n)


def server_kinds(points: list[StoredPoint]) -> list[str]:
    """Daemon kinds whose CPU/memory columns a detail table shows: OSD always (the study's table has it,
    n/a where unknown), then every other kind with a figure in these points, in model.DAEMON_KINDS order."""
    found = daemon_kinds_in(p.metrics for p in points)
    return ["osd"] + [k for k in found if k != "osd"]


def detail_table(run: RunData, wl: str, axis: str, kinds: list[str] | None = None,
                 found: list[anom.Anomaly] | None = None) -> Table:
    """One row per point. kinds: the daemon kinds given a CPU/memory column pair (build() passes the kinds of
    the whole section so every run's table has the same columns); by default the kinds of this run's points.
    found: anomalies.find(run, wl) when the caller has it."""
    curve = run.curve(wl)
    tp = throughput_for(curve)
    kinds = kinds if kinds is not None else server_kinds(curve)
    flags: dict[int | None, list[str]] = {}
    for a in anom.find(run, wl) if found is None else found:
        flags.setdefault(id_of(a), []).append(a.kind)
    has_pub_mem = any("osd_mem" in p.published for p in curve)
    extra = optional_columns(curve)
    reps = len({p.level for p in curve}) < len(curve)
    server: list[str] = []
    for kind in kinds:
        who = daemon_label(kind)
        server += [f"{who} CPU (% of one core)", f"{who} mem (RSS MiB)"]
        if kind == "osd" and has_pub_mem:
            server.append("OSD_mem as published (%MEM x threads, not a size)")
    headers = [axis] + (["rep"] if reps else []) + [
        "IOPS" if tp.unit == "IOPS" else "bw (MiB/s)", "total_ios", "clat (ms)", "clat stdev (ms)", "p99 (ms)",
        "usr_cpu (% of one core)", "sys_cpu (% of one core)", *server, *(h for h, _ in extra)]
    has_steady = any(outcome_text(p.metrics, p.params) for p in curve)
    if has_steady:
        headers.append("steady state")
    headers.append("flags")
    rows, seen = [], {}
    for p in curve:
        seen[p.level] = seen.get(p.level, 0) + 1
        row = [p.label] + ([str(seen[p.level])] if reps else []) + [
            fmt(tp.of(p), "int") if tp.unit == "IOPS" else fmt(tp.of(p), "bw"), fmt(p.m("total_ios"), "int"),
            fmt(p.m("clat_ms")), fmt(p.m("clat_stdev_ms")), fmt(p.m("p99_ms")), fmt(p.m("usr_cpu")),
            fmt(p.m("sys_cpu"))]
        for kind in kinds:
            row += [fmt(p.m(f"{kind}_cpu")), fmt(p.m(f"{kind}_mem_mib"))]
            if kind == "osd" and has_pub_mem:
                row.append(fmt(p.published.get("osd_mem")))
        row += [cell(p) for _, cell in extra]
        if has_steady:
            row.append(outcome_text(p.metrics, p.params) or NA)
        fl = sorted(set(flags.get(p.point_id, [])))
        if anom.fault_data(run, p):
            fl.insert(0, INTENDED)
        if p.status != "done" and "failed" not in fl:
            fl.append(p.status)
        row.append(", ".join(fl))
        rows.append(row)
    notes = []
    if has_pub_mem:
        notes.append("OSD mem in MiB is unknown for this source: the published OSD_mem column is top's %MEM summed "
                     "over threads (see the run's source).")
    if has_steady:
        crits = {Criteria.of(p.params).describe() for p in curve if p.params.get("steady_state")}  # type: ignore[union-attr]
        notes.append("Steady state: each point stopped once its criteria held on the latest window, measured "
                     "seconds after the ramp (" + "; ".join(sorted(crits)) + "); slope is |least-squares slope| "
                     "in % of the window mean per second, deviation the largest |value - mean| in % of the mean.")
    return Table(f"{wl}: {run.name}", headers, rows, ["r"] * (len(headers) - 1) + ["l"], notes)


def _kept(p: StoredPoint) -> str:
    v = p.metrics.get("schedule_kept")
    return NA if v is None else ("yes" if v else "NO")


def optional_columns(curve: list[StoredPoint]) -> list[tuple[str, Callable[[StoredPoint], str]]]:
    """Detail-table columns shown only when a point of the curve has the figure: the load generator's own
    process CPU, the p99 including failed and timed-out ops, the open-loop schedule's figures, and the drain
    where one is a sizeable part of the measured time (anomalies.long_drain)."""
    out: list[tuple[str, Callable[[StoredPoint], str]]] = []

    def has(key: str) -> bool:
        return any(p.metrics.get(key) is not None for p in curve)

    if has("engine_cpu_pct"):
        out.append(("load generator process CPU (% of one core)", lambda p: fmt(p.m("engine_cpu_pct"))))
    if has("p99_all_ms"):
        out.append(("p99 incl. errors (ms)", lambda p: fmt(p.m("p99_all_ms"))))
    if has("offered_rate_ops_s"):
        out += [("offered (ops/s)", lambda p: fmt(p.m("offered_rate_ops_s"), "int")),
                ("achieved (ops/s)", lambda p: fmt(p.m("achieved_rate_ops_s"), "int")),
                ("unissued ops", lambda p: fmt(p.m("unissued_ops"), "int")), ("schedule kept", _kept)]
    if any(anom.long_drain(p) for p in curve):
        out.append(("drain after the stop (s)", lambda p: fmt(p.m("drain_s"))))
    return out


def id_of(a: anom.Anomaly) -> int | None:
    return a.point_id


def charts(runs: list[RunData], wl: str, axis: str, found: list[list[anom.Anomaly]] | None = None) -> list[ChartOut]:
    """found: anomalies.find(r, wl) of each of runs, in order, when the caller has them."""
    found = found if found is not None else [anom.find(r, wl) for r in runs]
    flags_of = {id(r): f for r, f in zip(runs, found)}
    curves = [(r, r.curve(wl)) for r in runs]
    curves = [(r, c) for r, c in curves if c]
    tp = throughput_for([p for _, c in curves for p in c])
    tunit = tp.unit
    lat, cpu, eff = [], [], []
    cats: dict[tuple[Any, ...], str] = {}
    for _, c in curves:
        for p in c:
            cats.setdefault(p.level, p.label)
    cat_keys = sorted(cats)
    has_p99 = False
    for i, (r, c) in enumerate(curves):
        color = svg.PALETTE[i % len(svg.PALETTE)]
        flagged = {a.level for a in flags_of[id(r)] if a.kind not in RING_EXEMPT}
        lp, cp, ep = [], [], []
        for level in levels([p for p in c if p.status == "done"]):
            s = _level_stats(level, tp)
            if s["tp"] is None:
                continue
            fl = level.label in flagged
            if s["lat"] is not None:
                sd = s["sd"]
                has_p99 = has_p99 or s["p99"] is not None
                lp.append(svg.SPoint(s["tp"], s["lat"], level.label,
                                     max(s["lat"] - sd, s["lat"] * 0.05) if sd is not None else None,
                                     s["lat"] + sd if sd is not None else None, s["p99"], fl))
            if s["cpu"] is not None:
                cp.append(svg.SPoint(s["tp"], s["cpu"], level.label, flagged=fl))
            if s["eff"] is not None:
                ep.append(svg.SPoint(cat_keys.index(level.level), s["eff"], "", flagged=fl))
        lat.append(svg.Series(r.name, lp, color))
        cpu.append(svg.Series(r.name, cp, color))
        eff.append(svg.Series(r.name, ep, color))
    out = [ChartOut("lat", f"{wl}: latency vs throughput", svg.render(svg.Chart(
        f"{wl}: latency vs throughput", f"throughput ({tunit})", "mean completion latency (ms)", lat,
        note=f"labels: {axis}; bars: ±1 stdev" + ("; triangles: p99" if has_p99 else "")
        + "; red rings: anomalies")))]
    offered = offered_chart(curves, wl)
    if offered is not None:
        out.append(offered)
    if any(s.points for s in cpu):
        out.append(ChartOut("cpu", f"{wl}: OSD CPU vs throughput", svg.render(svg.Chart(
            f"{wl}: OSD CPU vs throughput", f"throughput ({tunit})", "OSD CPU (% of one core)", cpu,
            note=f"labels: {axis}; 100% = one core busy"))))
    if any(s.points for s in eff):
        out.append(ChartOut("eff", f"{wl}: throughput per OSD core", svg.render(svg.Chart(
            f"{wl}: throughput per OSD core", axis, f"{tunit} per OSD core", eff,
            x_categories=[cats[k] for k in cat_keys], note="throughput / (OSD CPU / 100)", log_y=False))))
    return out


OFFERED_PERCENTILES = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"))


def offered_chart(curves: list[tuple[RunData, list[StoredPoint]]], wl: str) -> ChartOut | None:
    """Open-loop points: latency percentiles (from each op's intended start) against the offered rate, a
    series per percentile and run; a level that did not keep its schedule is ringed, its label gives the
    achieved rate, so the knee shows where the cluster stopped keeping up, not where the backlog hid it."""
    series: list[svg.Series] = []
    for i, (r, c) in enumerate(curves):
        lvs = [lv for lv in levels([p for p in c if p.status == "done"]) if lv.mean("offered_rate_ops_s")]
        for j, (key, name) in enumerate(OFFERED_PERCENTILES):
            pts = []
            for lv in lvs:
                y = lv.percentile_ms(key)
                if y is None:
                    continue
                kept = all(p.metrics.get("schedule_kept") is not False for p in lv.points)
                achieved = lv.mean("achieved_rate_ops_s")
                label = "" if j != 1 else (f"{achieved:,.0f}/s" if achieved is not None else "")
                pts.append(svg.SPoint(lv.mean("offered_rate_ops_s") or 0.0, y, label, flagged=not kept))
            if pts:
                series.append(svg.Series(f"{r.name} {name}" if len(curves) > 1 else name, pts,
                                         svg.PALETTE[(i * len(OFFERED_PERCENTILES) + j) % len(svg.PALETTE)]))
    if not series:
        return None
    title = f"{wl}: latency vs offered load"
    return ChartOut("offered", title, svg.render(svg.Chart(
        title, "offered rate (ops/s, all engines)", "latency from intended start (ms)", series,
        note="labels on p99: achieved ops/s; red rings: schedule not kept (arrivals left unissued, or "
             "achieved over 5% short)")))


def flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(d, dict):
        for k, v in d.items():
            out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list) and d and all(isinstance(x, (dict, list)) for x in d):
        for i, v in enumerate(d):
            out.extend(flatten(v, f"{prefix}[{i}]"))
    else:
        out.append((prefix, d if isinstance(d, str) else json.dumps(d, default=str)))
    return out


def build(runs: list[RunData], title: str | None = None, baseline: RunData | None = None) -> ReportDoc:
    """The report of runs; baseline: a run of kind baseline each point is set against (perhost.ceiling_tables)."""
    assign_levels(runs)
    wls: dict[str, None] = {}
    for r in runs:
        for w in r.workloads():
            wls.setdefault(w, None)
    runs_table = Table("Runs", ["run", "id", "kind", "suite", "status", "points", "source"],
                       [[r.name, ",".join(map(str, r.ids)), r.kind, r.suite or "", r.status, str(len(r.points)),
                         r.source or "measured by fathom"] for r in runs], ["l", "r", "l", "l", "l", "r", "l"],
                       [f"{r.name}: {e['message']}" for r in runs for e in r.events if e["kind"] == "migration"])
    srows, sections, all_flags = [], [], []
    for wl in wls:
        axis = level_axis_name(runs, wl)
        found = [anom.find(r, wl) for r in runs]  # once: the summary, charts, tables and anomaly list share it
        for r, f in zip(runs, found):
            row = summary_rows(r, wl, axis, f)
            if row:
                srows.append(row)
        wl_flags = [a for f in found for a in f]
        all_flags.extend(wl_flags)
        tp = throughput_for([p for r in runs for p in r.curve(wl)])
        kinds = server_kinds([p for r in runs for p in r.curve(wl)])
        sections.append(Section(wl, tp.unit, charts(runs, wl, axis, found) + timeline.charts(runs, wl),
                                [detail_table(r, wl, axis, kinds, f) for r, f in zip(runs, found) if r.curve(wl)]
                                + timeline.tables(runs, wl) + phases.tables(runs, wl) + perhost.tables(runs, wl)
                                + perhost.server_tables(runs, wl) + perhost.osd_latency_tables(runs, wl)
                                + perhost.bound_tables(runs, wl) + perhost.ceiling_tables(runs, wl, baseline),
                                wl_flags))
    sections = slo.sections(runs) + studies.sections(runs) + phases.sections(runs) + sections + \
        sources.sections(runs)  # studies first
    summary = Table("Summary", ["workload", "run", "peak throughput", "peak at", "knee at", "90% of peak at",
                                "clat at peak (ms)", "OSD CPU at peak (% of one core)", "per OSD core at peak",
                                "anomalies"], srows, ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r"],
                    ["'at' columns give the sweep level (iodepth unless stated).", KNEE_DEFINITION])
    atable = None
    if all_flags:
        atable = Table("Anomalies", ["run", "workload", "kind", "levels", "what"],
                       [[run, wl, kind, ", ".join(lv), what] for run, wl, kind, lv, what in anom.grouped(all_flags)],
                       ["l", "l", "l", "l", "l"])
    env = [(r.name, flatten(r.env)) for r in runs]
    return ReportDoc(title or "fathom report: " + " vs ".join(r.name for r in runs),
                     time.strftime("%Y-%m-%d %H:%M:%S %Z"), runs, runs_table, Table("", [], [], []) if not srows
                     else summary, atable, sections, DEFINITIONS, env)
