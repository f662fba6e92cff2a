"""A point's telemetry samples summed up over its window: per daemon kind and per host (CPU, memory, context
switches, NICs), and perf counter deltas. Pure: the samples come from any source (fathom.servers: this host's
/proc, fathom-sampler on SSH hosts or in a DaemonSet, Prometheus), stored or live."""

from __future__ import annotations

import os
from typing import Any

from fathom.results.hdr import with_merged
from fathom.results.model import METRIC_COLUMNS, PointResult, base_metrics

NCPU = os.cpu_count() or 1  # a host sample stored without its `ncpu` (this host's /proc sampler adds it)
NOT_DAEMONS = ("host", "engine", "client_host")  # sample kinds that are not Ceph (or gateway) daemons
MIB = 2**20
# how a source counts a host's NIC bytes (fathom-sampler knows how interfaces stack; node-exporter does not)
NIC_TOP = ("each byte once, on the interfaces at the top of their stack (a bridge, not its ports; a bond, not its "
           "members; a VLAN, not its parent; loopback left out)")
NIC_ALL = ("node-exporter's per-device counters summed over every interface but loopback: it does not say how "
           "interfaces stack, so a byte through a bond and its member, a bridge and its port or a VLAN and its "
           "parent counts on each")


def nic_rule(via: str) -> str:
    """How the NIC figures of a host sampled by `via` (a per-host row's source) count its bytes."""
    return NIC_ALL if via == "prometheus" else NIC_TOP


def overlap(s: dict[str, Any], t_from: float, t_to: float) -> float:
    """Seconds of [t_from, t_to] a sample covers: a rate sampled at ts over dt covers [ts - dt, ts]."""
    return max(0.0, min(s["ts"], t_to) - max(s["ts"] - (s.get("dt") or 1.0), t_from))


def weighted(samples: list[dict[str, Any]], t_from: float, t_to: float) -> list[tuple[dict[str, Any], float]]:
    """Each sample that covers part of [t_from, t_to], with the seconds of it it covers (its weight in the window's
    means); every sample at its own span when none does (a window outside the samples: what there is)."""
    win = [(s, w) for s in samples if (w := overlap(s, t_from, t_to)) > 0]
    return win or [(s, s.get("dt") or 1.0) for s in samples]


def window_mean(samples: list[dict[str, Any]], t_from: float, t_to: float, key: str) -> float | None:
    """One figure's mean over [t_from, t_to], each sample weighted by the seconds of the window it covers."""
    got = [(s[key], w) for s, w in weighted(samples, t_from, t_to) if s.get(key) is not None]
    total = sum(w for _, w in got)
    return sum(v * w for v, w in got) / total if total else None


def summarize(samples: list[dict[str, Any]], t_from: float, t_to: float) -> dict[str, Any]:
    """Server-side metrics over [t_from, t_to]: per host, means over its sample times of per-kind sums; then
    summed over the hosts (each host samples at its own instants, so times are never matched across hosts).

    For every daemon kind in the samples (osd, mon, mgr, rgw, mds, or any other Daemon.kind):
    `{kind}_cpu` (% of one core), `{kind}_cores`, `{kind}_mem_mib` (RSS) and `{kind}_ctx_switches_s`
    (voluntary + involuntary), each summed over that kind's daemons at a host's sample time, averaged over
    that host's sample times where the kind was seen, and summed over hosts. A sample's weight in a mean is the
    part of the window its interval [ts - dt, ts] covers: one that straddles the window's start or end counts
    for its share of the window, neither whole nor not at all (a short point's edges are a large part of it).
    A kind with no samples gets no keys at all. Plus host_cpu_pct (busy cores of the sampled hosts over all
    their cores), server_hosts (hosts with a host sample: the cluster's hosts, since a server source's host
    holding none of the cluster's daemons is `client_host`, as this host is when it is a client; given whenever
    a server source sampled),
    net_rx_mib_s / net_tx_mib_s (each host's interfaces that count, hostsample.nics, summed),
    net_busiest_host_mib_s (the host whose received or sent MiB/s was highest), engine_cpu_pct (% of one core)
    and telemetry_samples (the fewest sample times of a host). A sample's `host` (default: this host) names
    its host; kind `client_host` is a host that is not one of the cluster's (left out of host_cpu_pct). A host
    sample marked `shared` (an emulated host: fathom.cluster.box) gives its NIC's figures and no CPU.
    """
    win = weighted(samples, t_from, t_to)
    hosts: dict[str, dict[float, dict[str, list[tuple[dict[str, Any], float]]]]] = {}
    for s, w in win:
        hosts.setdefault(s.get("host") or "local", {}).setdefault(s["ts"], {}).setdefault(s["kind"], []).append((s, w))

    def mean_of(by_ts: dict[float, dict[str, list[tuple[dict[str, Any], float]]]], kind: str,
                value: Any) -> float | None:
        """Mean over one host's sample times of value(sample) summed over the kind's sources at that time, each
        sample's rate weighted by the seconds of the window it covers (a time's weight: its widest sample's)."""
        num = den = 0.0
        for group in by_ts.values():
            if kind in group:
                num += sum(value(x) * w for x, w in group[kind])
                den += max(w for _, w in group[kind])
        return num / den if den else None

    def total(kind: str, value: Any) -> float | None:
        means = [m for by_ts in hosts.values() if (m := mean_of(by_ts, kind, value)) is not None]
        return sum(means) if means else None

    out: dict[str, Any] = {}
    kinds = {s["kind"] for s, _ in win} - set(NOT_DAEMONS)
    for kind in sorted(kinds):
        cpu = total(kind, lambda x: x["cpu_pct"])
        out[f"{kind}_cpu"] = cpu
        out[f"{kind}_cores"] = cpu / 100.0 if cpu is not None else None
        out[f"{kind}_mem_mib"] = total(kind, lambda x: x["rss_mib"])
        out[f"{kind}_ctx_switches_s"] = total(kind, lambda x: (x.get("vctx_s") or 0.0) + (x.get("nvctx_s") or 0.0))
    busy = ncpu = 0.0
    rx = tx = None
    busiest: float | None = None
    for by_ts in hosts.values():
        recs = [g["host"][0][0] for g in by_ts.values() if "host" in g]
        if not recs:
            continue
        if not recs[-1].get("shared"):  # an emulated host's cores are this machine's: counted with it, once
            cores = mean_of(by_ts, "host", lambda x: x.get("cores", x["cpu_pct"] / 100.0 * (x.get("ncpu") or NCPU)))
            busy += cores or 0.0
            ncpu += recs[-1].get("ncpu") or NCPU
        if any("net_rx_bytes_s" in r for r in recs):
            r_ = (mean_of(by_ts, "host", lambda x: x.get("net_rx_bytes_s") or 0.0) or 0.0) / MIB
            t_ = (mean_of(by_ts, "host", lambda x: x.get("net_tx_bytes_s") or 0.0) or 0.0) / MIB
            rx, tx = (rx or 0.0) + r_, (tx or 0.0) + t_
            busiest = max(busiest or 0.0, r_, t_)
    server_hosts = sum(1 for by_ts in hosts.values() if any("host" in g for g in by_ts.values()))
    out["host_cpu_pct"] = 100.0 * busy / ncpu if ncpu else None
    if server_hosts > 1 or rx is not None or any(s.get("via") for s, _ in win):  # a server source sampled
        out["server_hosts"] = server_hosts
    if rx is not None:
        out["net_rx_mib_s"], out["net_tx_mib_s"], out["net_busiest_host_mib_s"] = rx, tx, busiest
    engine = [m for by_ts in hosts.values() if (m := mean_of(by_ts, "engine", lambda x: x["cpu_pct"])) is not None]
    out["engine_cpu_pct"] = sum(engine) if engine else None
    out["telemetry_samples"] = min((len(by_ts) for by_ts in hosts.values()), default=0)
    return out


def per_host(samples: list[dict[str, Any]], t_from: float, t_to: float,
             lost: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """summarize() per host (the cluster's hosts and this one), for tables per node: each host's CPU busy %
    of its cores, NIC MiB/s, and per daemon kind its CPU and RSS; `via` names the source of its samples.

    `coverage` says how much of the window a host's figures cover: `whole`, or for a host in `lost` (hostname ->
    why it was lost during or before the point) `partial` (covered_s of window_s: its samples stop at the loss)
    or `missing` (no sample in the window: no figures at all, where summarize would take any it has)."""
    hosts: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        hosts.setdefault(s.get("host") or "local", []).append(s)
    lost = lost or {}
    window_s = round(t_to - t_from, 1)
    out: dict[str, dict[str, Any]] = {}
    for host, mine in sorted(hosts.items()):
        inside = [s for s in mine if overlap(s, t_from, t_to) > 0]
        if host in lost and not inside:
            continue
        m = summarize(mine, t_from, t_to)
        keep = {k: v for k, v in m.items() if v is not None and (k in ("host_cpu_pct", "net_rx_mib_s", "net_tx_mib_s")
                                                                  or k.endswith(("_cpu", "_mem_mib")))}
        if keep:  # a client host (this one, when it holds no daemon) has none
            out[host] = {**keep, "via": ", ".join(sorted({str(s.get("via") or "local") for s in mine})),
                         "coverage": "whole"}
            if host in lost:
                first = max(t_from, min(s["ts"] - (s.get("dt") or 1.0) for s in inside))
                last = min(t_to, max(s["ts"] for s in inside))
                out[host].update(coverage="partial", covered_s=round(max(0.0, last - first), 1), window_s=window_s,
                                 lost=lost[host])
    for host, why in sorted(lost.items()):
        if host not in out:
            out[host] = {"via": "ssh", "coverage": "missing", "covered_s": 0.0, "window_s": window_s, "lost": why}
    return out


# ---- admin socket perf counters ----------------------------------------------------


def perf_deltas(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Counter deltas per daemon ('section.counter'); averages as {count, sum, avg} with avg = Δsum/Δcount.

    Zero deltas are left out; gauges (values that can fall) keep their after-value under 'gauge'.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, a in after.items():
        b = before.get(name) or {}
        d: dict[str, Any] = {}
        for sec, counters in a.items():
            if not isinstance(counters, dict):
                continue
            bsec = b.get(sec) or {}
            for key, v in counters.items():
                bv = bsec.get(key)
                full = f"{sec}.{key}"
                if isinstance(v, dict) and "avgcount" in v:
                    bc = (bv or {}).get("avgcount", 0)
                    bs = (bv or {}).get("sum", 0.0)
                    dc = v["avgcount"] - bc
                    ds = v.get("sum", 0.0) - bs
                    if dc:
                        d[full] = {"count": dc, "sum": ds, "avg": ds / dc}
                elif isinstance(v, (int, float)) and isinstance(bv, (int, float)):
                    if v != bv:
                        d[full] = v - bv
        out[name] = d
    return out


# ---- a point's metrics, over its window ----------------------------------------------------------------

def telemetry_window(intervals: list[dict[str, Any]], started: float, ended: float,
                     ramp_s: float) -> dict[str, Any]:
    """The span server samples are averaged over: {from, to (epoch s), source}.

    From the engine's own records (source "engine phase"): the phase start on the wall clock is any record's
    `ts - t`, the ramp ends at the last ramp record's `t` (a grid point falls on it) or at ramp_s, and the
    window ends with the last record (the last measured completion). Connect, prefill, a many-host start's
    SSH and go delay, and teardown stay out. Without exact records (fio's are estimates from its progress
    line): the spawn time plus the ramp to the engine's exit (source "spawn to exit")."""
    exact = [r for r in intervals if r.get("t") is not None and r.get("ts") is not None and not r.get("approx")]
    if not exact:
        return {"from": started + ramp_s, "to": ended, "source": "spawn to exit"}
    last = max(exact, key=lambda r: float(r["t"]))
    phase0 = float(last["ts"]) - float(last["t"])
    ramps = [float(r["t"]) for r in exact if r.get("ramp")]
    ramp_end = max(ramps) if ramps else ramp_s
    return {"from": phase0 + ramp_end, "to": float(last["ts"]), "source": "engine phase"}


def point_metrics(r: PointResult, params: dict[str, Any], samples: list[dict[str, Any]], started: float,
             ended: float, intervals: list[dict[str, Any]] | None = None,
             events: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """A point's metrics (METRIC_COLUMNS) from its result, its server samples over its telemetry window and the
    events that flag lost server hosts; and its histograms with the merged one (`all`). Suite points and the
    drop-ins' benches both store what this gives."""
    hists, merged_pct = with_merged({k: o.hist for k, o in r.ops.items() if o.hist and o.ops})
    m = base_metrics(r, merged_pct)
    # fio reports client CPU itself (% of runtime per job; summed over jobs as fio-parse-jsons does)
    if "fio_usr_cpu" in r.extra:
        m["usr_cpu"] = r.extra["fio_usr_cpu"]
        m["sys_cpu"] = r.extra["fio_sys_cpu"]
    if r.extra.get("engines"):  # a point on several engines (client hosts)
        m["client_hosts"] = len(r.extra.get("hosts") or [])
        m["engines"] = len(r.extra["engines"])
        m["start_skew_ms"] = r.extra.get("start_skew_ms")
        m["clients_lost"] = len(r.extra.get("clients_lost") or {})
    win = telemetry_window(intervals or [], started, ended, float(params.get("ramp_time") or 0.0))
    r.extra["telemetry_window"] = win
    srv = summarize(samples, win["from"], win["to"])
    m.update({k: v for k, v in srv.items() if k in METRIC_COLUMNS})
    # server hosts lost during the point (or before it, not reached again): their figures partial or missing
    lost = {e["data"]["hostname"]: e["data"].get("why") or e["message"] for e in events or []
            if e["kind"] in ("server_lost", "server_late") and (e.get("data") or {}).get("hostname")}
    if srv.get("server_hosts") or lost:  # the cluster's hosts measured one by one, for per-node tables
        r.extra["server_hosts"] = per_host(samples, win["from"], win["to"], lost)
        # daemons whose name several processes on a host bore, none by the pid the cluster gives: all summed
        for e in events or []:
            hosts = (e.get("data") or {}).get("hosts") if e["kind"] == "sources" else None
            if isinstance(hosts, dict):  # the samplers' (SSH, DaemonSet) by hostname; Prometheus' is a list
                for host, c in hosts.items():
                    if isinstance(c, dict) and c.get("ambiguous") and host in r.extra["server_hosts"]:
                        r.extra["server_hosts"][host]["ambiguous"] = sorted(c["ambiguous"])
    return m, hists
