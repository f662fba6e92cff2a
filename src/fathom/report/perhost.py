"""Points run from several client hosts: one table per point of what each host did.

The point's own row (curves, summary) is the exact merge of every engine; this
table shows the parts: throughput, p99 and client CPU per host, the host's clock
offset, and whether it was lost or much slower than the others (a slow client
host caps the point, and a report that only showed the merge would hide it).
"""

from __future__ import annotations


from fathom.analysis.data import RunData, throughput_for
from fathom.results.model import daemon_kind_order, daemon_label
from fathom.results.usage import nic_rule
from fathom.report.doc import Table, fmt, fmt_tp


def tables(runs: list[RunData], wl: str) -> list[Table]:
    out = []
    for r in runs:
        tp = throughput_for(r.curve(wl))
        for p in r.curve(wl):
            hosts = p.clients.get("hosts") if p.clients else None
            if not hosts:
                continue
            clocks = p.clients.get("clocks") or {}
            rows = []
            for h in hosts:
                c = clocks.get(h["host"]) or {}
                status = "lost" if h.get("lost") else ("much slower" if h.get("slow") else "ok")
                value = h["iops"] if tp.unit == "IOPS" else h["mib_s"]
                rows.append([h["host"], str(h["engines"]), fmt_tp(value, tp), fmt(h.get("p99_ms")),
                             fmt(h.get("client_cpu_pct")),
                             f"{c['offset_ms']:+.3f} ± {c['rtt_ms'] / 2:.3f}" if c else "n/a", status])
            skew = p.clients.get("start_skew_ms")
            notes = [f"Start skew {skew:.3f} ms: how far apart the engines' measured phases began (host clock "
                     "offsets removed)." if skew is not None else "Start skew: not measured.",
                     "The point's own figures are the exact merge of every engine (histograms added). 'much "
                     "slower': under half the median host's throughput per engine."]
            lost = p.clients.get("clients_lost") or {}
            if lost:
                notes.append("Lost: " + "; ".join(f"{h}: {why}" for h, why in lost.items())
                             + " (its data up to the loss is kept).")
            out.append(Table(f"{wl} {p.label}: {r.name}: client hosts",
                             ["host", "engines", f"throughput ({tp.unit})", "p99 (ms)",
                              "client CPU (% of one core)", "clock offset (ms)", "status"],
                             rows, ["l", "r", "r", "r", "r", "r", "l"], notes))
    return out


def _coverage(h: dict) -> str:
    """How much of the point's window a host's figures cover."""
    c = h.get("coverage", "whole")
    if c == "partial":
        return f"partial: {h['covered_s']:.1f} of {h['window_s']:.1f} s (lost)"
    return "missing (lost)" if c == "missing" else c


def _nics(servers: dict[str, dict]) -> str:
    """How the hosts' NIC figures count bytes, per source when the sources count them differently."""
    vias = sorted({str(h.get("via", "")) for h in servers.values() if h.get("net_rx_mib_s") is not None})
    rules = {nic_rule(v) for v in vias}
    if len(rules) <= 1:
        return next(iter(rules), "none sampled")
    return "; ".join(f"{v} hosts: {nic_rule(v)}" for v in vias)


def server_tables(runs: list[RunData], wl: str) -> list[Table]:
    """Per point measured on several cluster hosts: each host's CPU, NIC bytes and daemons (per node, as the
    RGW study gives RGW CPU and memory per node and the NIC limit per node)."""
    out = []
    for r in runs:
        for p in r.curve(wl):
            if not p.servers:
                continue
            kinds = daemon_kind_order({k[:-4] for h in p.servers.values() for k in h if k.endswith("_cpu")
                                       and k != "host_cpu_pct"})
            rows = [[host, h.get("via", ""), fmt(h.get("host_cpu_pct")), fmt(h.get("net_rx_mib_s")),
                     fmt(h.get("net_tx_mib_s"))]
                    + [x for k in kinds for x in (fmt(h.get(f"{k}_cpu")), fmt(h.get(f"{k}_mem_mib"), "int"))]
                    for host, h in p.servers.items()]
            heads = ["host", "source", "CPU busy (% of its cores)", "NIC rx (MiB/s)", "NIC tx (MiB/s)"] + [
                x for k in kinds for x in (f"{daemon_label(k)} CPU (% of one core)", f"{daemon_label(k)} RSS (MiB)")]
            notes = ["Each host's figures over the point's telemetry window, from its own samples (see "
                     f"'Server measurements: sources'); NIC: {_nics(p.servers)}. The point's row sums the hosts."]
            summed = {host: h["ambiguous"] for host, h in p.servers.items() if h.get("ambiguous")}
            if summed:  # another cluster's daemon of the same name on the host: its figures are in the sums
                notes.append("Summed, not told apart: " + "; ".join(f"{host}: {', '.join(names)}" for host, names
                                                                     in summed.items())
                             + " (several processes on the host bear the name and none the pid the cluster gives "
                               "for it: all are counted, so its CPU and RSS may hold another cluster's daemon).")
                for row, (host, h) in zip(rows, p.servers.items()):
                    row[0] = f"{host} (summed: {', '.join(h['ambiguous'])})" if h.get("ambiguous") else host
            short = {host: h for host, h in p.servers.items() if h.get("coverage", "whole") != "whole"}
            if short:  # a lost server host: say what its figures cover, and what the sums lack
                heads.append("coverage")
                for row, h in zip(rows, p.servers.values()):
                    row.append(_coverage(h))
                notes.append("The point's sums over hosts lack " + "; ".join(
                    f"{host} from its loss on (its figures cover {h['covered_s']:.1f} of {h['window_s']:.1f} s)"
                    if h["coverage"] == "partial" else f"{host} wholly (no sample in the window)"
                    for host, h in short.items()) + ": " + "; ".join(
                    f"{host}: {h.get('lost')}" for host, h in short.items()) + ".")
            out.append(Table(f"{wl} {p.label}: {r.name}: server hosts", heads, rows,
                             ["l", "l"] + ["r"] * (len(heads) - 2), notes))
    return out


def osd_latency_tables(runs: list[RunData], wl: str) -> list[Table]:
    """Per run, the client's p50 and p99 beside the OSDs' own (fathom.servers.osdlat): how much of a point's latency
    is spent inside the OSDs, and what is left for the network, the messengers and the client."""
    out = []
    for r in runs:
        by_point = {e["point_id"]: e["data"] or {} for e in r.events
                    if e["kind"] == "osd_latency" and e.get("point_id") is not None}
        rows = []
        for p in r.curve(wl):
            ops = (by_point.get(p.point_id) or {}).get("ops") or {}
            for op, f in ops.items():
                share = (f["p99_s"] * 1e3 / p.m("p99_ms") * 100) if f.get("p99_s") and p.m("p99_ms") else None
                rows.append([p.label, op, str(f["ops"]), fmt(p.m("p50_ms")), fmt(p.m("p99_ms")),
                             f"{_ms(f, 'p50_low_s')}–{_ms(f, 'p50_s')}", f"{_ms(f, 'p99_low_s')}–{_ms(f, 'p99_s')}",
                             fmt(min(share, 100.0)) if share is not None else "n/a"])
        if rows:
            src = next((d.get("source") for d in by_point.values() if d.get("source")), "?")
            out.append(Table(f"{wl}: {r.name}: latency inside the OSDs", [
                "level", "op", "OSD ops", "client p50 (ms)", "client p99 (ms)", "OSD p50 (ms)", "OSD p99 (ms)",
                "OSD p99 / client p99 (%, at most)"], rows, ["l", "l", "r", "r", "r", "r", "r", "r"],
                [f"The OSDs' latency (arrival at the primary to its reply) from the delta of their op latency "
                 f"histograms over the point ({src}), all OSDs added up. The histograms' buckets double in width: "
                 "each OSD percentile is given as the bucket that holds it (low–high); the share uses the high "
                 "edge, so the OSDs' part of the client's p99 is at most that. The rest is the network, the "
                 "messengers and the client."]))
    return out


def bound_tables(runs: list[RunData], wl: str) -> list[Table]:
    """Per run, what bounds each point (fathom.analysis.bound): the verdict, its evidence, and what was not judged."""
    out = []
    for r in runs:
        rows = [[p.label, p.bound["bound"], p.bound.get("summary", ""), "; ".join(p.bound.get("missing") or []) or "-"]
                for p in r.curve(wl) if p.bound]
        if rows:
            out.append(Table(f"{wl}: {r.name}: what bounds each point", ["level", "bound", "evidence", "not judged"],
                             rows, ["l", "l", "l", "l"],
                             ["Each resource's mean use over the point's telemetry window against its ceiling: a "
                              "daemon's allowed cores (its CPU affinity and cgroup cpu.max), a host's cores, a NIC's "
                              "link speed (and a tc rate cap on what it sends), one core for the engine's busiest "
                              "thread. At 90% or more a resource bounds the point; when none does, a closed-loop "
                              "point is bound by its latency at the ops it keeps in flight, an open-loop one by its "
                              "offered rate. docs/measurement.md, \"What bounds a point\"."]))
    return out


def _ms(f: dict, key: str) -> str:
    return fmt(f[key] * 1e3) if f.get(key) is not None else "n/a"


def ceiling_tables(runs: list[RunData], wl: str, base: RunData | None) -> list[Table]:
    """Per run, each point's throughput against the ceiling the baseline run's figures allow with the pool's layout
    (fathom.analysis.ceiling)."""
    if base is None:
        return []
    from fathom.analysis import ceiling

    fig = ceiling.figures([{"metrics": p.metrics, "params": p.params, "status": p.status} for p in base.points])
    hosts = len((base.env.get("baseline") or {}).get("osd_hosts") or []) or 1
    out = []
    for r in runs:
        rows = []
        for p in r.curve(wl):
            rw = str(p.params.get("rw") or "")
            op = "read" if rw in ("read", "randread") else "write" if rw in ("write", "randwrite") else None
            bw = p.m("bw_mib_s")
            layouts = r.env.get("layouts") or {}
            key = f"placement:{p.params['placement']}" if p.params.get("placement") else str(p.params.get("pool"))
            lay = ceiling.layout(layouts.get(key) or (next(iter(layouts.values())) if len(layouts) == 1 else None))
            if op is None or bw is None or lay is None:
                why = "reads and writes mixed" if op is None else "no throughput" if bw is None else \
                    "the pool's layout is not in the run's environment"
                rows.append([p.label, "-", "-", "-", why])
                continue
            c = ceiling.ceiling(fig, op, lay, hosts, p.params.get("bs") if isinstance(p.params.get("bs"), int)
                                else None)
            said = ceiling.against(bw * ceiling.MIB, c, ({"write": "PUT", "read": "GET"}[op]
                                                         if p.params.get("interface") == "s3" else op))
            rows.append([p.label, fmt(bw), fmt(c["bytes_s"] / ceiling.MIB) if c["bytes_s"] else "-",
                         f"{100 * bw * ceiling.MIB / c['bytes_s']:.0f}%" if c["bytes_s"] else "-",
                         said + ("; terms: " + ", ".join(f"{t['name']} {fmt(t['bytes_s'] / ceiling.MIB)} MiB/s "
                                                         f"({t['how']})" for t in c["terms"]) if c["terms"] else "")])
        if rows:
            out.append(Table(f"{wl}: {r.name}: against the ceiling of baseline {base.name}",
                             ["level", "MiB/s", "ceiling (MiB/s)", "of the ceiling", "how"], rows,
                             ["l", "r", "r", "r", "l"],
                             ["The ceiling is the lowest of what the baseline's NICs, devices and engine allow for "
                              "the pool's layout: docs/measurement.md, \"The ceiling of a point\"."]))
    return out
