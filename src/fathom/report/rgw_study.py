"""The RGW study's own tables (study `rgw-study`, fathom.report.studies): from the runs that name it, the
rgw suite's and the imported replica 3 vs EC 2+2 table.

What the study published (IBM, ceph.io 2025), in its forms: the replica 3 vs EC 2+2 relative differences
per object size (positive = replica 3 better), headline maxima per operation and size, the TLS delta table
with RGW CPU, a scaling curve (here client scaling on one host, not node scaling), RGW CPU in cores and
memory in MiB per daemon. Plus what it lacked: percentiles, time to first byte, errors and a check of the
client's counts against RGW's own counters. With the published table imported into the same store
(`fathom import table rgw-replica3-vs-ec22-2025.csv`) and reported beside a run: the signs and trends of
the gains here and there, never the magnitudes.
"""

from __future__ import annotations

import statistics
from typing import Any

from fathom.suite import labels
from fathom.analysis import rgw_gains
from fathom.analysis.data import RunData, StoredPoint
from fathom.report import svg
from fathom.report.doc import NA, ChartOut, Section, Table, fmt

WORKLOADS = (rgw_gains.STUDY_WORKLOAD, "tls", "client-scaling", "node-scaling")  # the rgw and rgw-scaling suites
SIZE_CLASSES = (("small (≤ 64 KiB)", 0, 64 * 1024), ("medium (1-4 MiB)", 64 * 1024 + 1, 4 * 2**20),
                ("large (≥ 32 MiB)", 4 * 2**20 + 1, 2**62))
NOTES = [
    "Differences from the study: one host with 2 shared cores runs the cluster (4 OSDs on files, one RGW) and "
    "the client; clients are the engine's jobs, a bucket each; concurrency is far lower (the study: up to "
    "1024 threads on 13 client hosts against 4-12 nodes of 24 NVMe OSDs and 4 RGWs each, 100 GbE). Here every "
    "component is CPU-bound, so the replica 3 vs EC 2+2 differences measure CPU cost per request, where the "
    "study's large objects were NIC-bound.",
    "RGW CPU is in cores (1.0 = one core busy) and RGW memory is resident MiB, of the RGW daemons together (one, "
    "or one per emulated host), means over the point's measured window (sampled from /proc once a second).",
]


def _op(p: StoredPoint) -> str | None:
    return rgw_gains.OPS.get(str(p.params.get("rw")))


def _size(p: StoredPoint) -> int:
    return int(p.params.get("object_size") or p.params.get("bs") or 0)


def _mean(points: list[StoredPoint], key: str) -> float | None:
    vals = [p.m(key) for p in points if p.m(key) is not None]
    return statistics.fmean(vals) if vals else None  # type: ignore[arg-type]


def _measured(runs: list[RunData]) -> list[StoredPoint]:
    return [p for r in runs for p in r.points if p.workload in WORKLOADS and p.status == "done"
            and not p.published and p.params.get("interface") == "s3"]


def _group(points: list[StoredPoint], *keys: str) -> dict[tuple, list[StoredPoint]]:
    out: dict[tuple, list[StoredPoint]] = {}
    for p in points:
        k = tuple(_size(p) if key == "object_size" else _op(p) if key == "op" else p.run_id if key == "run_id"
                  else p.params.get(key) for key in keys)
        out.setdefault(k, []).append(p)
    return out


def _reconciled(points: list[StoredPoint]) -> str:
    vals = [p.metrics.get("rgw_reconciled") for p in points]
    if not any(vals):
        return NA
    bad = sum(v == "mismatch" for v in vals)
    return "ok" if not bad else f"MISMATCH ({bad} of {len(vals)})"


def _gain_table(runs: list[RunData]) -> Table | None:
    gains = rgw_gains.measured_gains(runs)
    if not gains:
        return None
    rows = []
    for s, g in sorted(gains.items()):
        rows.append([rgw_gains.size_label(s)] + [fmt(g.get(k), "pct") for k in (
            "put_throughput_gain_pct", "get_throughput_gain_pct", "put_latency_gain_pct", "get_latency_gain_pct",
            "put_p99_gain_pct", "get_p99_gain_pct", "get_ttfb_p50_gain_pct", "put_littles_residual_pct",
            "get_littles_residual_pct")])
    return Table("Replica 3 vs EC 2+2: relative difference per object size (positive = replica 3 better)",
                 ["object size", "PUT throughput", "GET throughput", "PUT latency", "GET latency", "PUT p99",
                  "GET p99", "GET TTFB p50", "PUT Little residual", "GET Little residual"], rows,
                 ["l"] + ["r"] * 9, list(rgw_gains.DEFINITIONS)
                 + ["The study's four columns come first; p99, TTFB and the residuals are what it lacked. "
                    "Throughput: means over repetitions; mean latency weighted by ops; p99 from the merged "
                    "histograms; TTFB p50 a mean over repetitions."])


def _detail_table(runs: list[RunData]) -> Table | None:
    cells = rgw_gains.study_cells(runs)
    if not cells:
        return None
    rows = []
    for (pl, s, op), c in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][2] != "PUT", kv[0][0])):
        ps = c.points
        rows.append([rgw_gains.size_label(s), op, pl, str(len(ps)), fmt(c.value("bw_mib_s"), "bw"),
                     fmt(c.value("iops"), "int"), fmt(c.value("clat_ms")), fmt(c.value("p50_ms")),
                     fmt(c.value("p99_ms")), fmt(c.value("p999_ms")), fmt(c.mean("ttfb_p50_ms")) if op == "GET" else "",
                     fmt(c.mean("ttfb_p99_ms")) if op == "GET" else "", fmt(c.mean("rgw_initial_lat_ms")),
                     fmt(c.mean("errors"), "int"), _reconciled(ps)])
    return Table("Per object size, operation and placement: throughput, latency percentiles, TTFB",
                 ["size", "op", "placement", "reps", "MiB/s", "IOPS", "mean (ms)", "p50 (ms)", "p99 (ms)",
                  "p99.9 (ms)", "TTFB p50 (ms)", "TTFB p99 (ms)", "RGW initial (ms)", "errors", "RGW counters"], rows,
                 ["l", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "l"],
                 ["Latency percentiles from the repetitions' latency histograms merged (the study published "
                  "averages only); mean latency weighted by each repetition's ops; MiB/s and IOPS means over the "
                  "repetitions. TTFB: time to the first body byte of a GET; its p50 and p99 are means over the "
                  "repetitions (their histograms are not stored apart). RGW counters: every request of the point "
                  "(ramp, prefill, multipart parts, retries) against RGW's perf counters over the same span, 'ok' "
                  "within 1% (at least a few control requests). RGW initial: RGW's own mean time to its first "
                  "byte out (perf counters get_initial_lat, put_initial_lat); a client TTFB below it would be "
                  "wrong."])


def _headline_table(points: list[StoredPoint]) -> Table | None:
    rows = []
    for op in ("PUT", "GET"):
        for label, lo, hi in SIZE_CLASSES:
            ps = [p for p in points if _op(p) == op and lo <= _size(p) <= hi and p.m("bw_mib_s") is not None]
            if not ps:
                continue
            best = max(ps, key=lambda p: p.m("bw_mib_s") or 0.0)
            top_iops = max(ps, key=lambda p: p.m("iops") or 0.0)
            where = (f"{rgw_gains.size_label(_size(best))}, {best.params.get('placement')}, "
                     f"{'TLS' if best.params.get('tls') else 'no TLS'}, {best.params.get('numjobs')} clients x "
                     f"{best.params.get('iodepth')}")
            rows.append([op, label, fmt(best.m("bw_mib_s"), "bw"), fmt(top_iops.m("iops"), "int"),
                         fmt(best.m("clat_ms")), fmt(best.m("p99_ms")), fmt(best.m("rgw_cores")), where])
    if not rows:
        return None
    return Table("Headline maxima per operation and size class (every block of the run)",
                 ["op", "size class", "max MiB/s", "max IOPS", "mean latency at max MiB/s (ms)", "p99 there (ms)",
                  "RGW cores there", "where (size, placement, TLS, clients x iodepth)"], rows,
                 ["l", "l", "r", "r", "r", "r", "r", "l"],
                 ["The study's headline: 111 GiB/s GET and 65.8 GiB/s PUT (32 MiB, EC 2+2, 12 nodes); about 391K "
                  "GET/s and 86.6K PUT/s at 64 KiB. Not comparable in magnitude with one 2-core host."])


def _tls_table(points: list[StoredPoint]) -> Table | None:
    g = _group([p for p in points if p.workload == "tls"], "object_size", "op", "tls")
    keys = sorted({(s, op) for s, op, _ in g}, key=lambda k: (k[0], k[1] != "PUT"))
    rows = []
    for s, op in keys:
        off, on = g.get((s, op, False)), g.get((s, op, True))
        if not off or not on:
            continue

        def pair(key: str, kind: str = "g", off: list[StoredPoint] = off, on: list[StoredPoint] = on) -> list[str]:
            a, b = _mean(off, key), _mean(on, key)
            delta = (b / a - 1) * 100 if a and b is not None else None
            return [fmt(a, kind), fmt(b, kind), fmt(delta, "pct")]

        rows.append([rgw_gains.size_label(s), op, *pair("bw_mib_s", "bw"), *pair("iops", "int"), *pair("clat_ms"),
                     *pair("p99_ms"), *pair("rgw_cores")])
    if not rows:
        return None
    return Table("TLS at RGW off vs on (the study's part 3 form)",
                 ["size", "op", "MiB/s off", "MiB/s on", "Δ", "IOPS off", "IOPS on", "Δ", "mean ms off",
                  "mean ms on", "Δ", "p99 ms off", "p99 ms on", "Δ", "RGW cores off", "RGW cores on", "Δ"], rows,
                 ["l", "l"] + ["r"] * 15,
                 ["Δ = (on / off - 1) x 100. TLS is terminated by RGW's beast frontend (ssl_endpoint) with a "
                  "throwaway CA; the client offers AES-128-GCM first. The study (12 nodes, EC 8+3, 4 MiB): GET "
                  "-0.4 %, PUT -4.2 % MiB/s; RGW CPU GET 3.19 -> 4.46, PUT 3.62 -> 6.19 cores."])


def _scaling(points: list[StoredPoint]) -> tuple[Table | None, ChartOut | None]:
    g = _group([p for p in points if p.workload == "client-scaling"], "object_size", "op", "numjobs")
    if not g:
        return None, None
    rows, series = [], []
    colors = svg.PALETTE
    curves = sorted({(s, op) for s, op, _ in g}, key=lambda k: (k[0], k[1] != "PUT"))
    for i, (s, op) in enumerate(curves):
        pts = []
        for (s2, op2, n), ps in sorted(g.items(), key=lambda kv: int(kv[0][2] or 0)):
            if (s2, op2) != (s, op):
                continue
            bw, lat = _mean(ps, "bw_mib_s"), _mean(ps, "clat_ms")
            rows.append([rgw_gains.size_label(s), op, str(n), str(ps[0].params.get("iodepth")),
                         fmt(bw, "bw"), fmt(_mean(ps, "iops"), "int"), fmt(lat), fmt(_mean(ps, "p99_ms")),
                         fmt(_mean(ps, "rgw_cores")), fmt(_mean(ps, "rgw_mem_mib"), "int"),
                         fmt(_mean(ps, "host_cpu_pct"), "int")])
            if bw is not None:
                pts.append(svg.SPoint(float(n), bw, str(n)))
        if pts:
            series.append(svg.Series(f"{op} {rgw_gains.size_label(s)}", pts, colors[i % len(colors)]))
    table = Table("Client scaling (clients on one host; not the study's node scaling)",
                  ["size", "op", "clients", "iodepth each", "MiB/s", "IOPS", "mean (ms)", "p99 (ms)", "RGW cores",
                   "RGW MiB", "host CPU %"], rows, ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r"],
                  ["The study scaled nodes 4 -> 12 (GET 39 -> 113 GiB/s at 4 MiB, EC 2+2, SSL). One host cannot: "
                   "this block adds clients (a bucket each) against the same single-host cluster, so it shows "
                   "where the host saturates, not how a cluster scales."])
    chart = None
    if series:
        chart = ChartOut("rgw-scaling", "Client scaling: throughput vs clients", svg.render(svg.Chart(
            "Client scaling: throughput vs clients (one host)", "clients (a bucket each)", "MiB/s", series,
            log_y=False, note="not node scaling: every client runs against the same one-host cluster")))
    return table, chart


def _nodes_of(runs: list[RunData]) -> dict[int, float]:
    """run id -> its numeric `nodes` label (fathom run --label nodes=8), for the runs that carry one."""
    out: dict[int, float] = {}
    for r in runs:
        envs = [r.env] if len(r.ids) == 1 else list(r.env.values())
        for rid, env in zip(r.ids, envs):
            v = labels.numeric(((env or {}).get("labels") or {}).get("nodes"))
            if v is not None:
                out[rid] = v
    return out


STUDY_EFFICIENCY = {"GET": 0.97, "PUT": 1.07}  # 4 -> 12 nodes: GET 39 -> 113 GiB/s, PUT 15.5 -> 50 GiB/s


def efficiency(n0: float, t0: float, n: float, t: float) -> float | None:
    """Per-node scaling efficiency from the smallest level: the throughput's gain over the nodes' (1.0: linear)."""
    return (t / t0) / (n / n0) if t0 > 0 and n0 > 0 and n != n0 else None


def _node_scaling(runs: list[RunData], points: list[StoredPoint]) -> tuple[Table | None, ChartOut | None]:
    """The study's node scaling (4, 8, 12 nodes): runs labelled nodes=N on clusters of those sizes, each
    (size, op)'s peak throughput over its client levels, the mean over the runs of one size, its per-node
    efficiency from the smallest level beside the study's, and what bounded the peak point."""
    nodes = _nodes_of(runs)
    if len(set(nodes.values())) < 2:
        return None, None
    peaks: dict[tuple[int, str, float], list[float]] = {}
    bounds: dict[tuple[int, str, float], list[str]] = {}
    for (size, op, rid), ps in _group([p for p in points if p.run_id in nodes], "object_size", "op",
                                      "run_id").items():
        bw = [(p.m("bw_mib_s"), p) for p in ps if p.m("bw_mib_s") is not None]
        if op and bw:
            top = max(bw, key=lambda x: x[0])
            peaks.setdefault((size, op, nodes[rid]), []).append(top[0])  # type: ignore[type-var]
            bounds.setdefault((size, op, nodes[rid]), []).append(  # type: ignore[arg-type]
                (top[1].bound or {}).get("bound") or "not judged")
    if not peaks:
        return None, None
    rows, series = [], []
    curves = sorted({(s, op) for s, op, _ in peaks}, key=lambda k: (k[0], k[1] != "PUT"))
    for i, (s, op) in enumerate(curves):
        pts = []
        levels = sorted((k[2], statistics.fmean(v)) for k, v in peaks.items() if k[:2] == (s, op))
        n0, t0 = levels[0]
        for n, mean in levels:
            eff = efficiency(n0, t0, n, mean)
            study = STUDY_EFFICIENCY.get(str(op))
            rows.append([rgw_gains.size_label(s), str(op), f"{n:g}", fmt(mean, "bw"),
                         f"{eff:.0%}" if eff is not None else "-", f"{study:.0%}" if study and eff is not None else "-",
                         ", ".join(sorted(set(bounds[(s, op, n)]))), str(len(peaks[(s, op, n)]))])
            pts.append(svg.SPoint(n, mean, f"{n:g}"))
        series.append(svg.Series(f"{op} {rgw_gains.size_label(s)}", pts, svg.PALETTE[i % len(svg.PALETTE)]))
    table = Table("Node scaling (runs labelled nodes=N)", ["size", "op", "nodes", "peak MiB/s",
                                                           "per-node efficiency", "study", "bound by", "runs"], rows,
                  ["l", "l", "r", "r", "r", "r", "l", "r"],
                  ["Each run's peak over its client levels, the mean over the runs with that label. Per-node "
                   "efficiency: the throughput's gain from the smallest level over the nodes' gain (100%: linear). "
                   "The study: GET 39 -> 113 GiB/s (97%) and PUT 15.5 -> 50 GiB/s (107%) at 4 MiB from 4 to 12 "
                   "nodes (EC 2+2, SSL), its NICs the limit. 'Bound by': the peak point's verdict "
                   "(docs/measurement.md, \"What bounds a point\"). `fathom run rgw-scaling` makes the levels on "
                   "emulated hosts; `fathom history rgw --by nodes` draws every figure against nodes."])
    chart = ChartOut("rgw-nodes", "Node scaling: peak throughput vs nodes", svg.render(svg.Chart(
        "Node scaling: peak throughput vs nodes", "nodes (label)", "MiB/s", series, log_y=False)))
    return table, chart


def _cpu_table(points: list[StoredPoint]) -> Table | None:
    g = _group(points, "object_size", "op", "placement", "tls", "numjobs")
    rows = []
    for (s, op, pl, tls, n), ps in sorted(g.items(), key=lambda kv: (kv[0][0], kv[0][1] != "PUT",
                                                                      str(kv[0][2]), bool(kv[0][3]), kv[0][4] or 0)):
        bw = _mean(ps, "bw_mib_s")
        cores = _mean(ps, "rgw_cores")
        rows.append([rgw_gains.size_label(s), op, str(pl), "on" if tls else "off", str(n), fmt(cores),
                     fmt(_mean(ps, "rgw_mem_mib"), "int"), fmt(bw / cores if bw is not None and cores else None, "bw"),
                     fmt(_mean(ps, "osd_cores")), fmt(_mean(ps, "engine_cpu_pct"), "int"),
                     fmt(_mean(ps, "host_cpu_pct"), "int"), fmt(_mean(ps, "rgw_failed_req"), "int")])
    if not rows or all(r[5] == NA for r in rows):
        return None
    return Table("RGW CPU and memory per point (the study's per-daemon form)",
                 ["size", "op", "placement", "TLS", "clients", "RGW cores", "RGW RSS (MiB)", "MiB/s per RGW core",
                  "OSD cores (all OSDs)", "client CPU %", "host CPU %", "RGW failed_req"], rows,
                 ["l", "l", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r"],
                 ["RGW cores and RSS: the run's RGW daemons together (one, or one per emulated host). Client CPU: "
                  "the engine process, % of one core. Host CPU: % of all the cluster hosts' cores. RGW failed_req "
                  "on a PUT point counts the engine's probe of each client's bucket before making it (404 "
                  "NoSuchBucket, one per client): expected, not an error of the load; the load's own errors are in "
                  "the table above."])


def _shape_table(runs: list[RunData]) -> Table | None:
    pub = [r for r in runs if rgw_gains.is_gains_table(r)]
    ours = rgw_gains.measured_gains(runs)
    if not pub or not ours:
        return None
    sh = rgw_gains.shape(rgw_gains.published_gains(pub[0]), ours)
    if not sh["rows"]:
        return None
    names = {"put_throughput_gain_pct": "PUT throughput", "get_throughput_gain_pct": "GET throughput",
             "put_latency_gain_pct": "PUT latency", "get_latency_gain_pct": "GET latency"}
    rows = [[r["size"], names[r["gain"]], fmt(r["study_pct"], "pct"), fmt(r["fathom_pct"], "pct"),
             {True: "same", False: "DIFFERS", None: NA}[r["sign_agrees"]]] for r in sh["rows"]]
    trends = "; ".join(f"{names[c]}: study {t['study']}, fathom {t['fathom']} with size"
                       for c, t in sh["trends"].items())
    return Table(f"Shape against the study ({pub[0].name})", ["size", "gain", "study", "fathom", "sign"], rows,
                 ["l", "l", "r", "r", "l"],
                 [f"Signs agree in {sh['signs_agree']} of {sh['signs_compared']} cells (within ±"
                  f"{sh['tolerance_pct_points']:g} points counts as no difference). Trends: {trends or 'n/a'}.",
                  sh["note"] + "."])


def _published_table(runs: list[RunData]) -> Table | None:
    pub = [r for r in runs if rgw_gains.is_gains_table(r)]
    if not pub:
        return None
    g = rgw_gains.published_gains(pub[0])
    return Table(f"Replica 3 vs EC 2+2 as published ({pub[0].name}; positive = replica 3 better)",
                 ["object size", "PUT throughput", "GET throughput", "PUT latency", "GET latency"],
                 [[rgw_gains.size_label(s)] + [fmt(g[s].get(c), "pct") for c in rgw_gains.GAIN_COLUMNS]
                  for s in sorted(g)], ["l", "r", "r", "r", "r"],
                 ["4 nodes, SSL at the gateway, 512 threads (part 2). The study does not say how its latency gain "
                  "was computed; its rows do not satisfy Little's law at a fixed concurrency."])


def sections(runs: list[RunData]) -> list[Section]:
    points = _measured(runs)
    if not points:
        pub = _published_table(runs)
        return [Section("RGW study (rgw)", "MiB/s", [], [pub], [])] if pub else []
    tables = [t for t in (_gain_table(runs), _published_table(runs), _shape_table(runs), _detail_table(runs),
                          _headline_table(points), _tls_table(points)) if t is not None]
    scale_table, chart = _scaling(points)
    if scale_table is not None:
        tables.append(scale_table)
    node_table, node_chart = _node_scaling(runs, points)
    if node_table is not None:
        tables.append(node_table)
    cpu = _cpu_table(points)
    if cpu is not None:
        tables.append(cpu)
    if tables:
        tables[0].notes.extend(NOTES)
    return [Section("RGW study (rgw)", "MiB/s", [c for c in (chart, node_chart) if c], tables, [])]


def summary(runs: list[RunData]) -> dict[str, Any]:
    """The study's figures as data (for tests and JSON): gains per size and the shape against a published run."""
    out: dict[str, Any] = {"gains": {rgw_gains.size_label(s): g for s, g in rgw_gains.measured_gains(runs).items()}}
    pub = [r for r in runs if rgw_gains.is_gains_table(r)]
    if pub:
        out["shape"] = rgw_gains.shape(rgw_gains.published_gains(pub[0]), rgw_gains.measured_gains(runs))
    return out
