"""One row per point, as CSV, JSON or Parquet: identity, parameters, then METRIC_COLUMNS (units in the names).

Columns: run_id, run, suite, idx, key, workload, engine, rep, status, rw, bs
(bytes), iodepth, numjobs, rwmixread, runtime_s, ramp_s, target, pool, then every
metric of fathom.results.model.METRIC_COLUMNS (iops, bw_mib_s, total_ios, clat_ms,
clat_stdev_ms, p50/p90/p99/p999_ms, p99_all_ms, drain_s, the open-loop
offered_rate_ops_s, achieved_rate_ops_s, intended_ops, issued_ops, unissued_ops and
schedule_kept (empty in closed loop), usr_cpu, sys_cpu, ...), then for every daemon
kind of fathom.results.model.DAEMON_KINDS (osd, rgw, mds, mon, mgr, ganesha, fuse) its
{kind}_cpu (% of one core summed over the threads of all daemons of that kind),
{kind}_cores (the same in cores), {kind}_mem_mib (RSS MiB, summed) and
{kind}_ctx_switches_s (per second, summed), empty where the kind was not sampled;
then host_cpu_pct, engine_cpu_pct, started, ended (epoch s) and error.

Every metric's window (what span of time it covers) and source (merged histograms,
summed counts, sampled /proc) come with it: `dictionary()` (`fathom export
--columns`) and, in Parquet, each field's metadata (description, window, source).

Two long tables beside the points (`fathom export --table servers|counters`), one
row per figure, each row with the point's identity columns:
- servers: per point, host and daemon, each daemon's CPU, RSS and context switches
  and each host's CPU busy, memory in use and NIC bytes, over the point's
  telemetry window, from the samples stored with the point (`host_figures()`);
- counters: per point and daemon, the perf counter deltas over the point, as stored
  (admin sockets or the mgr's prometheus module).
And, one row each: intervals (per point, engine interval and op kind: ops, IOPS, MiB/s and the
percentiles of that second's histogram), events (the run's), runs (every run of the store).

fathom.api (`fathom.open`) gives the same tables as DataFrames, made from these rows through
arrow_table, the Parquet export's typed table: change a column here and the API changes with it
(docs/api.md says how the API is versioned).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from typing import Any

from fathom.results import usage
from fathom.results.model import METRIC_COLUMNS, figure_window, open_loop_metrics
from fathom.results.store import LOCAL_HOST, Store

ID_COLUMNS = ("run_id", "run", "suite", "idx", "key", "workload", "engine", "rep", "status")
PARAM_COLUMNS = {"rw": "rw", "bs": "bs", "iodepth": "iodepth", "numjobs": "numjobs", "rwmixread": "rwmixread",
                 "runtime": "runtime_s_planned", "ramp_time": "ramp_s", "target": "target", "pool": "pool"}
TAIL_COLUMNS = ("engine_cpu_pct", "started", "ended", "error")


def columns() -> list[str]:
    cols = [*ID_COLUMNS, *PARAM_COLUMNS.values(), *METRIC_COLUMNS, *TAIL_COLUMNS]
    return list(dict.fromkeys(cols))  # a metric may also be a tail column (engine_cpu_pct): once


DICTIONARY_COLUMNS = ["column", "meaning", "window", "source"]
_ID_MEANINGS = {"run_id": "the run's id in the store", "run": "the run's name", "suite": "the suite it ran",
                "idx": "the point's position in the run", "key": "the point's key (its parameters)",
                "workload": "the workload's name", "engine": "the load generator", "rep": "the repetition, from 1",
                "status": "done, failed or skipped", "engine_cpu_pct": METRIC_COLUMNS["engine_cpu_pct"],
                "started": "when the point started, epoch s", "ended": "when it ended, epoch s",
                "error": "why the point failed"}


def dictionary() -> list[dict[str, Any]]:
    """Every export column: its meaning, the window it covers and its source (empty for identity columns)."""
    out = []
    params = {v: k for k, v in PARAM_COLUMNS.items()}
    for c in columns():
        meaning = METRIC_COLUMNS.get(c) or _ID_MEANINGS.get(c) or f"the workload's {params.get(c, c)} parameter"
        window, source = figure_window(c) or ("", "")
        out.append({"column": c, "meaning": meaning, "window": window, "source": source})
    return out


def rows(store: Store, run_id: int) -> list[dict[str, Any]]:
    run = store.run(run_id)
    out = []
    for p in store.points(run_id):
        m = p["metrics"] or {}
        q = p["params"] or {}
        row: dict[str, Any] = {"run_id": run.id, "run": run.name, "suite": run.suite, "idx": p["idx"],
                               "key": p["key"], "workload": p["workload"], "engine": p["engine"],
                               "rep": _rep(p["key"]), "status": p["status"]}
        for k, col in PARAM_COLUMNS.items():
            row[col] = q.get(k)
        for k in (*METRIC_COLUMNS, "engine_cpu_pct"):
            row[k] = m.get(k)
        # points stored before intended_ops and issued_ops were metrics: from the schedule stored in the result
        sched = ((p["result"] or {}).get("extra") or {}).get("schedule")
        for k, v in open_loop_metrics(sched).items():
            if row.get(k) is None:
                row[k] = v
        row["started"], row["ended"], row["error"] = p["started"], p["ended"], p["error"]
        out.append(row)
    return out


def _rep(key: str) -> int:
    for part in key.split("/"):
        if part.startswith("rep="):
            return int(part[4:])
    return 1


def write(rs: list[dict[str, Any]], fmt: str, path: str | None, cols: list[str] | None = None,
          table: str = "points") -> int:
    cols = cols or table_columns(table)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rs:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
        _emit(buf.getvalue(), path)
    elif fmt == "json":
        _emit(json.dumps([{k: r.get(k) for k in cols} for r in rs], indent=1) + "\n", path)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(arrow_table(rs, cols, table), path)  # type: ignore[arg-type]
    else:
        raise ValueError(fmt)
    return len(rs)


# typed columns of every table (the others are floats): the Parquet schema and fathom.api's DataFrames
INT_COLUMNS = {"run_id", "idx", "rep", "bs", "iodepth", "numjobs", "rwmixread", "total_ios", "errors", "intended_ops",
               "issued_ops", "unissued_ops", "tick", "ops", "bytes", "points", "points_done"}
BOOL_COLUMNS = {"schedule_kept", "partial", "ramp", "tail"}
# text-valued metrics too (a float column would refuse "reached", "ok")
STRING_COLUMNS = {"run", "suite", "key", "workload", "engine", "status", "rw", "target", "pool", "error",
                  "steady_state", "rgw_reconciled", "host", "source", "daemon", "kind", "figure", "unit", "op",
                  "message", "data", "fathom_version", "ceph_version", "labels", "bound"}


def arrow_table(rs: list[dict[str, Any]], cols: list[str] | None = None, table: str = "points") -> Any:
    """The rows as a typed Arrow table, each field's meaning, window and source in its metadata: what a
    Parquet export writes and what fathom.api's DataFrames are made from (one definition for both)."""
    import pyarrow as pa

    cols = cols or table_columns(table)
    about = {d["column"]: d for d in table_dictionary(table)}
    about.update({c: {"meaning": "", "window": "", "source": ""} for c in cols if c not in about})
    fields = [pa.field(c, pa.int64() if c in INT_COLUMNS else pa.bool_() if c in BOOL_COLUMNS
                       else pa.string() if c in STRING_COLUMNS else pa.float64(),
                       metadata={k: about[c][k] for k in ("meaning", "window", "source") if about[c][k]})
              for c in cols]
    schema = pa.schema(fields)
    return pa.table({c: [_cast(r.get(c), schema.field(c).type) for r in rs] for c in cols}, schema=schema)


def _cast(v: Any, t: Any) -> Any:
    import pyarrow as pa

    if v is None:
        return None
    if t == pa.int64():
        return int(v)
    if t == pa.float64():
        return float(v)
    if t == pa.bool_():
        return bool(v)
    return str(v)


def _emit(text: str, path: str | None) -> None:
    if path:
        with open(path, "w", newline="") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


# ---- long tables: per host and daemon, and perf counters -------------------------------------

TABLES = ("points", "servers", "counters", "intervals", "events", "runs")
SERVER_COLUMNS = [*ID_COLUMNS, "host", "source", "daemon", "kind", "figure", "value", "unit", "partial", "summed"]
COUNTER_COLUMNS = [*ID_COLUMNS, "host", "source", "daemon", "kind", "figure", "value", "unit"]
# figure -> (unit, meaning); a daemon's figures, then a host's (daemon empty, kind "host")
DAEMON_FIGURES = {"cpu_pct": ("% of one core", "the daemon's CPU, over all its threads"),
                  "cores": ("cores", "the same CPU in cores"),
                  "rss_mib": ("MiB", "resident memory (RSS)"),
                  "ctx_switches_s": ("1/s", "context switches, voluntary and involuntary")}
HOST_FIGURES = {"host_cpu_pct": ("% of the host's cores", "CPU busy over all the host's cores"),
                "mem_used_mib": ("MiB", "memory in use (total less available)"),
                "net_rx_mib_s": ("MiB/s", "NIC bytes received: ssh and k8s sources on the interfaces at the top of "
                                 "their stack, each byte once; prometheus on every interface but loopback, stacked "
                                 "ones each (node-exporter does not say how they stack)"),
                "net_tx_mib_s": ("MiB/s", "NIC bytes sent, the same interfaces")}
WINDOW = "the point's telemetry window (ramp excluded): the mean over the host's sample times in it"
_LONG_MEANINGS = {
    "host": "the host the figure is from ('local': fathom's own host)",
    "daemon": "the daemon (osd.0, mon.a, ...); empty for a figure of the whole host",
    "kind": "the daemon's kind (osd, mon, mgr, rgw, mds, ...); 'host' for a figure of the whole host",
    "figure": "what is measured (see its unit)", "value": "the figure's value, in its unit",
    "unit": "the value's unit",
}


def table_columns(table: str) -> list[str]:
    return {"points": columns(), "servers": SERVER_COLUMNS, "counters": COUNTER_COLUMNS,
            "intervals": INTERVAL_COLUMNS, "events": EVENT_COLUMNS, "runs": RUN_COLUMNS}[table]


def table_dictionary(table: str) -> list[dict[str, Any]]:
    """Every column of a table: its meaning, window and source (as dictionary() for points)."""
    if table == "points":
        return dictionary()
    if table in SERIES_ABOUT:
        return [{"column": c, **dict(zip(("meaning", "window", "source"),
                                         SERIES_ABOUT[table].get(c) or (_ID_MEANINGS.get(c, ""), "", "")))}
                for c in table_columns(table)]
    ids = {d["column"]: d for d in dictionary() if d["column"] in ID_COLUMNS}
    if table == "servers":
        figures = "; ".join(f"{f} ({u}): {m}" for f, (u, m) in DAEMON_FIGURES.items()) + "; of a host: " + \
            "; ".join(f"{f} ({u}): {m}" for f, (u, m) in HOST_FIGURES.items())
        more = {"source": ("where the samples came from: local (this host's /proc), ssh (fathom-sampler on the host), "
                           "prometheus (node-exporter)", "", ""),
                "figure": (f"what is measured: {figures}", "", ""),
                "value": (_LONG_MEANINGS["value"], WINDOW, "per-second samples stored with the point"),
                "partial": ("true when the host was lost (or sent no sample past the point's end): its figures cover "
                            "the point up to its last sample", "", ""),
                "summed": ("true when several processes on the host bore the daemon's name and none the pid the "
                           "cluster gives for it: all are counted (another cluster's daemon of that name among them)",
                           "", "")}
    else:
        more = {"source": ("where the counters were read: admin socket (this host's OSDs and RGWs), mgr-prometheus "
                           "(the mgr's prometheus module) or ceph-tell (through the mons)", "", ""),
                "host": ("the host the daemon was sampled on in the point; empty when no sample placed it", "", ""),
                "figure": ("the counter, section.name as `ceph daemon X perf dump` names it; an average counter "
                           "gives three rows: .count, .sum and .avg (sum / count)", "", ""),
                "unit": ("the value's unit, from the counter's name: s for latencies (sums and averages), bytes for "
                         "byte counts, count otherwise", "", ""),
                "value": ("the counter's change over the point", "the point: read before it started and after it "
                          "ended", "perf counters stored with the point")}
    out = []
    for c in table_columns(table):
        if c in ids:
            out.append(ids[c])
            continue
        meaning, window, source = more.get(c) or (_LONG_MEANINGS.get(c, ""), "", "")
        out.append({"column": c, "meaning": meaning, "window": window, "source": source})
    return out


def table_rows(store: Store, run_id: int, table: str) -> list[dict[str, Any]]:
    """A table's rows for one run (runs: that run's row; run_rows(store) gives every run's)."""
    return {"points": rows, "servers": server_rows, "counters": counter_rows, "intervals": interval_rows,
            "events": event_rows, "runs": run_rows}[table](store, run_id)


def _ids(run: Any, p: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": run.id, "run": run.name, "suite": run.suite, "idx": p["idx"], "key": p["key"],
            "workload": p["workload"], "engine": p["engine"], "rep": _rep(p["key"]), "status": p["status"]}


def _window(p: dict[str, Any]) -> tuple[float, float] | None:
    """The point's telemetry window as stored with it; its start to end for points stored before it was."""
    win = ((p["result"] or {}).get("extra") or {}).get("telemetry_window")
    if win:
        return float(win["from"]), float(win["to"])
    if p["started"] is None or p["ended"] is None:
        return None
    return float(p["started"]) + float((p["params"] or {}).get("ramp_time") or 0.0), float(p["ended"])


def _cut_short(store: Store, run: Any, point_id: int) -> set[str]:
    """Hosts (by the hostname their samples carry) lost or late in the point: their figures stop early."""
    names = {h.get("name"): h.get("hostname") for h in ((run.env.get("servers") or {}).get("hosts") or [])}
    out = set()
    for e in store.events(run.id):
        if e["point_id"] == point_id and e["kind"] in ("server_lost", "server_late"):
            h = (e["data"] or {}).get("host")
            out.add(names.get(h) or h)
    return out


def host_figures(store: Store, run: Any, p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One point's figures per host: {host: {source, partial, host: {figure: value}, daemons: {name: {kind,
    figure: value}}}} over its telemetry window, from the samples stored with it (usage.summarize, as the
    point's own metrics and the report's per-host tables are made). Hosts with neither a daemon nor a host
    figure (a client host) are left out."""
    win = _window(p)
    samples = store.telemetry(p["id"]) if win else []
    by_host: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_host.setdefault(s.get("host") or "local", []).append(s)
    short = _cut_short(store, run, p["id"]) if by_host else set()
    # daemons whose figures sum several processes of their name (none with the pid the cluster gives)
    summed = {h: set(v.get("ambiguous") or []) for h, v in
              (((p.get("result") or {}).get("extra") or {}).get("server_hosts") or {}).items()}
    out: dict[str, dict[str, Any]] = {}
    for host, mine in sorted(by_host.items()):
        assert win is not None
        daemons: dict[str, dict[str, Any]] = {}
        for name in sorted({s["source"] for s in mine if s.get("kind") not in usage.NOT_DAEMONS}):
            one = [s for s in mine if s["source"] == name]
            kind = one[0]["kind"]
            m = usage.summarize(one, *win)
            vals = {"cpu_pct": m.get(f"{kind}_cpu"), "cores": m.get(f"{kind}_cores"),
                    "rss_mib": m.get(f"{kind}_mem_mib"), "ctx_switches_s": m.get(f"{kind}_ctx_switches_s")}
            daemons[name] = {"kind": kind, **{k: v for k, v in vals.items() if v is not None}}
            if name in summed.get(host, ()):
                daemons[name]["summed"] = True
        hs = [s for s in mine if s.get("kind") == "host"]
        whole: dict[str, Any] = {}
        if hs:
            m = usage.summarize(hs, *win)
            vals = {"host_cpu_pct": m.get("host_cpu_pct"), "mem_used_mib": usage.window_mean(hs, *win, "rss_mib"),
                    "net_rx_mib_s": m.get("net_rx_mib_s"), "net_tx_mib_s": m.get("net_tx_mib_s")}
            whole = {k: v for k, v in vals.items() if v is not None}
        if daemons or whole:
            out[host] = {"source": ", ".join(sorted({str(s.get("via") or "local") for s in mine})),
                         "partial": host in short, "host": whole, "daemons": daemons}
    return out


def server_rows(store: Store, run_id: int) -> list[dict[str, Any]]:
    """The servers table: per point, host and daemon, one row per figure (long format)."""
    run = store.run(run_id)
    out = []
    for p in store.points(run_id):
        ids = _ids(run, p)
        for host, h in host_figures(store, run, p).items():
            base = {**ids, "host": host, "source": h["source"], "partial": h["partial"]}
            for name, d in h["daemons"].items():
                out += [{**base, "daemon": name, "kind": d["kind"], "figure": f, "value": d[f], "unit": u,
                         "summed": bool(d.get("summed"))} for f, (u, _) in DAEMON_FIGURES.items() if f in d]
            out += [{**base, "daemon": "", "kind": "host", "figure": f, "value": h["host"][f], "unit": u,
                     "summed": False} for f, (u, _) in HOST_FIGURES.items() if f in h["host"]]
    return out


def counter_unit(counter: str, part: str | None = None) -> str:
    """A perf counter's unit from its name: Ceph's time counters (latencies) are sums of seconds, byte counters
    are named so (op_r_outb, op_w_inb, *_bytes); an average's count counts events."""
    if part == "count":
        return "count"
    leaf = counter.rsplit(".", 1)[-1]
    if re.search(r"(^|_)(lat|latency)($|_)", leaf):
        return "s"
    if re.search(r"bytes|(^|_)(inb|outb)$", leaf):
        return "bytes" if part != "avg" else "bytes/event"
    return "count" if part != "avg" else "count/event"


def counter_rows(store: Store, run_id: int) -> list[dict[str, Any]]:
    """The counters table: per point and daemon, each counter's change over the point (long format)."""
    run = store.run(run_id)
    events = store.events(run_id)
    mgr = {e["point_id"]: set((e["data"] or {}).get("daemons") or []) for e in events
           if e["kind"] == "perf_counters" and (e["data"] or {}).get("source") == "mgr-prometheus"}
    # each daemon's source as the point chose it (runs before that event: the mgr module's daemons, else a socket)
    chosen = {e["point_id"]: e["data"] or {} for e in events if e["kind"] == "counter_sources"}
    out = []
    for p in store.points(run_id):
        perf = store.perf_counters(p["id"])
        if not perf:
            continue
        ids = _ids(run, p)
        placed = {s["source"]: (s.get("host") or "local", s["kind"]) for s in store.telemetry(p["id"])
                  if s.get("kind") not in usage.NOT_DAEMONS}
        for daemon in sorted(perf):
            host, kind = placed.get(daemon) or ("", daemon.split(".", 1)[0])
            base = {**ids, "host": host, "daemon": daemon, "kind": kind,
                    "source": chosen.get(p["id"], {}).get(daemon) or (
                        "mgr-prometheus" if daemon in mgr.get(p["id"], ()) else "admin socket")}
            for counter, v in sorted(perf[daemon].items()):
                if isinstance(v, dict):
                    out += [{**base, "figure": f"{counter}.{part}", "value": v[part],
                             "unit": counter_unit(counter, part)} for part in ("count", "sum", "avg") if part in v]
                else:
                    out.append({**base, "figure": counter, "value": v, "unit": counter_unit(counter)})
    return out


# ---- per-second intervals, events and the runs themselves -----------------------------------

INTERVAL_COLUMNS = [*ID_COLUMNS, "host", "tick", "t_s", "dt_s", "ts", "ramp", "tail", "op", "ops", "bytes", "errors",
                    "iops", "bw_mib_s", "lat_mean_ms", "lat_max_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms"]
EVENT_COLUMNS = [*ID_COLUMNS, "ts", "kind", "message", "data"]
RUN_COLUMNS = ["run_id", "run", "kind", "suite", "status", "created", "finished", "fathom_version", "ceph_version",
               "labels", "points", "points_done"]
_INTERVAL = "the interval (t_s - dt_s, t_s] on the engine's clock: ops completed in it, whenever issued"
_INTERVAL_SOURCE = "the engine's interval record (merged over engines by tick when the point had several)"
SERIES_ABOUT: dict[str, dict[str, tuple[str, str, str]]] = {
    "intervals": {
        "host": ("the engine's host; empty when the point ran several engines: their records merged by tick", "", ""),
        "tick": ("the grid point the record ends at, from 1 (records of engines started together share it)", "", ""),
        "t_s": ("seconds from the start of the engine's phase (ramp included) to the interval's end", "", ""),
        "dt_s": ("the interval's length in seconds (the last, partial one shorter)", "", ""),
        "ts": ("the interval's end, epoch s (the engine host's clock)", "", ""),
        "ramp": ("true for an interval inside the ramp (not in the point's measured window)", "", ""),
        "tail": ("true for the last, partial interval (the drain after the stop)", "", ""),
        "op": ("the op kind (read, write, ...): one row per interval and op kind", "", ""),
        "ops": ("successful ops completed", _INTERVAL, _INTERVAL_SOURCE),
        "bytes": ("bytes moved by them", _INTERVAL, _INTERVAL_SOURCE),
        "errors": ("failed and timed-out ops", _INTERVAL, _INTERVAL_SOURCE),
        "iops": ("ops / dt_s", _INTERVAL, _INTERVAL_SOURCE),
        "bw_mib_s": ("bytes / dt_s in MiB/s", _INTERVAL, _INTERVAL_SOURCE),
        "lat_mean_ms": ("mean latency of the successful ops, ms", _INTERVAL, _INTERVAL_SOURCE),
        "lat_max_ms": ("highest latency, ms", _INTERVAL, _INTERVAL_SOURCE),
        **{f"{p}_ms": (f"{p[1:3]}{'.9' if p == 'p999' else ''}th percentile latency, ms", _INTERVAL,
                       "the interval's HDR histogram (the engines' merged)") for p in ("p50", "p90", "p99", "p999")},
    },
    "events": {
        "idx": ("the point's position in the run; empty for an event of the run", "", ""),
        "ts": ("when it happened, epoch s", "", ""), "kind": ("health, gate, fault, warning, ...", "", ""),
        "message": ("what happened, as fathom said it", "", ""),
        "data": ("the event's details as JSON (never a secret)", "", ""),
    },
    "runs": {
        "kind": ("suite, bench or import", "", ""), "status": ("running, done, failed or interrupted", "", ""),
        "created": ("when the run was created, epoch s", "", ""),
        "finished": ("when it finished, epoch s; empty while it runs", "", ""),
        "fathom_version": ("the fathom that made it", "", ""),
        "ceph_version": ("the cluster's Ceph version; empty without a cluster", "", ""),
        "labels": ("its labels (KEY=VALUE) as JSON", "", ""),
        "points": ("points stored (any status)", "", ""), "points_done": ("points done", "", ""),
    },
}


def interval_rows(store: Store, run_id: int) -> list[dict[str, Any]]:
    """The intervals table: per point, each interval record of its timeline (store.timeline), one row per op
    kind, as rates by series.py (the one place records become rates) and percentiles of its histogram."""
    from fathom.results import hdr, series

    run = store.run(run_id)
    out = []
    for p in store.points(run_id):
        ids = _ids(run, p)
        for r in store.timeline(p["id"]):
            base = {**ids, "host": r.get("host", LOCAL_HOST), "tick": r.get("tick"), "t_s": r.get("t"),
                    "dt_s": r.get("dt"), "ts": r.get("ts"), "ramp": bool(r.get("ramp")), "tail": bool(r.get("tail"))}
            for op, o in sorted((r.get("ops") or {}).items()):
                s = series.merged([{"dt": r.get("dt"), "ops": {op: o}}], float(r.get("t") or 0.0))
                pct = {f"{k}_ms": v / 1e6 for k, v in hdr.percentiles(o["hist"]).items()} if o.get("hist") else {}
                out.append({**base, "op": op, "ops": s.ops, "bytes": s.bytes, "errors": s.errors,
                            "iops": s.value("iops"), "bw_mib_s": s.value("bw"),
                            "lat_mean_ms": _ms(o.get("lat_mean_ns")), "lat_max_ms": _ms(o.get("lat_max_ns")), **pct})
    return out


def _ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


def event_rows(store: Store, run_id: int) -> list[dict[str, Any]]:
    """The events table: the run's events in time order, each with its point's identity (empty for the run's)."""
    run = store.run(run_id)
    points = {p["id"]: p for p in store.points(run_id)}
    out = []
    for e in store.events(run_id):
        p = points.get(e["point_id"])
        ids = _ids(run, p) if p else {"run_id": run.id, "run": run.name, "suite": run.suite}
        out.append({**ids, "ts": e["ts"], "kind": e["kind"], "message": e["message"],
                    "data": json.dumps(e["data"], sort_keys=True) if e["data"] else None})
    return out


def run_rows(store: Store, run_id: int | None = None) -> list[dict[str, Any]]:
    """The runs table: one row per run of the store (or the one run_id), in the order they were made."""
    out = []
    for r in ([store.run(run_id)] if run_id is not None else store.runs()):
        status = [p["status"] for p in store.points(r.id)]
        out.append({"run_id": r.id, "run": r.name, "kind": r.kind, "suite": r.suite, "status": r.status,
                    "created": r.created, "finished": r.finished, "fathom_version": r.fathom_version,
                    "ceph_version": r.env.get("ceph_version"),
                    "labels": json.dumps(r.env["labels"], sort_keys=True) if r.env.get("labels") else None,
                    "points": len(status), "points_done": status.count("done")})
    return out
