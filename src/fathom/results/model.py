"""The shapes every engine adapter, the store, analysis and reports agree on.

An engine adapter (fathom-engine, fio, rados bench) turns its own output into a
`PointResult`. The runner adds server-side figures and flattens it into a
`metrics` dict whose keys are METRIC_COLUMNS: that dict is what the store keeps
per point, what exports print and what reports and comparisons read. Imports of
published tables fill the same dict, leaving unknown figures as None.
Latency is kept in ns inside PointResult; metrics carry ms, named so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# Daemon kinds the telemetry sampler may see, in report order (Daemon.kind; the sampler's "kind" field).
DAEMON_KINDS = ("osd", "rgw", "mds", "mon", "mgr", "ganesha", "fuse", "rbd_fuse")
DAEMON_LABELS = {"osd": "OSD", "rgw": "RGW", "mds": "MDS", "mon": "MON", "mgr": "MGR", "ganesha": "NFS-Ganesha",
                 "fuse": "ceph-fuse", "rbd_fuse": "rbd-fuse"}


def daemon_label(kind: str) -> str:
    """How reports name a daemon kind ("OSD", "RGW"); an unknown kind keeps its own name."""
    return DAEMON_LABELS.get(kind, kind)


def daemon_columns(kind: str) -> dict[str, str]:
    """The server-side metric columns of one daemon kind -> unit/meaning (any kind string, known or not).

    Every figure is summed over the kind's daemons (and their threads) at each sample, then averaged
    over the point's measured window.
    """
    who = daemon_label(kind)
    return {
        f"{kind}_cpu": f"{who} CPU, % of one core summed over the threads of every {who} daemon, mean over the point",
        f"{kind}_cores": f"{who} CPU in cores (= {kind}_cpu / 100), summed over {who} daemons, mean over the point",
        f"{kind}_mem_mib": f"{who} resident memory, MiB, summed over {who} daemons, mean over the point",
        f"{kind}_ctx_switches_s": f"{who} context switches per second (voluntary + involuntary), summed over "
                                  f"{who} daemons and their threads",
    }


def daemon_kind_order(kinds: Iterable[str]) -> list[str]:
    """Kinds in report order: DAEMON_KINDS first (OSD leading), then any other kind alphabetically."""
    ks = set(kinds)
    return [k for k in DAEMON_KINDS if k in ks] + sorted(ks - set(DAEMON_KINDS))


def daemon_kinds_in(metrics: Iterable[Mapping[str, Any]]) -> list[str]:
    """Daemon kinds with a CPU or memory figure in any of these metrics dicts, in report order.

    A kind is recognised by its `{kind}_cpu`, `{kind}_cores` or `{kind}_mem_mib` column; a kind outside
    DAEMON_KINDS only by the latter two (`usr_cpu`/`sys_cpu` are client columns).
    """
    found: set[str] = set()
    for m in metrics:
        for key, v in m.items():
            if v is None:
                continue
            for suffix in ("_cores", "_mem_mib", "_cpu"):
                kind = key[:-len(suffix)] if key.endswith(suffix) else None
                if kind and (suffix != "_cpu" or kind in DAEMON_KINDS):
                    found.add(kind)
    return daemon_kind_order(found)


# Column -> unit/meaning, in export order. Units live in the names where it matters.
METRIC_COLUMNS: dict[str, str] = {
    "iops": "operations per second, all op kinds",
    "bw_mib_s": "MiB/s, all op kinds",
    "total_ios": "operations completed in the measured window",
    "clat_ms": "mean completion latency, ms (weighted over op kinds)",
    "clat_stdev_ms": "stdev of completion latency, ms (pooled over jobs and op kinds)",
    "lat_min_ms": "minimum latency, ms",
    "lat_max_ms": "maximum latency, ms",
    "p50_ms": "median latency, ms, from the merged histogram",
    "p90_ms": "90th percentile latency, ms",
    "p99_ms": "99th percentile latency, ms",
    "p999_ms": "99.9th percentile latency, ms",
    "p99_all_ms": "99th percentile latency of every op, failed and timed-out ones included (their own histograms "
                  "merged with the successes'), ms; null for a point without errors or without histograms",
    "read_iops": "read operations per second",
    "write_iops": "write operations per second",
    "read_bw_mib_s": "read MiB/s",
    "write_bw_mib_s": "write MiB/s",
    "errors": "failed operations",
    "runtime_s": "measured seconds (ramp excluded): the window to the stop plus the drain to the last "
                 "measured completion (the IOPS divisor, as rados bench counts)",
    "drain_s": "seconds from the stop to the last measured completion (part of runtime_s); one op slow to "
               "return (up to the op timeout) lengthens it, and in open loop so does the window's backlog, "
               "issued and measured after the stop (for at most a tenth of the window, 1 to 30 s)",
    # open-loop points (load.rate; null in closed loop): what the schedule asked and what ran
    "offered_rate_ops_s": "open loop: the rate the schedule asked for, ops/s, summed over engines",
    "achieved_rate_ops_s": "open loop: successful measured ops per measured second (the point's IOPS), summed "
                           "over engines",
    "intended_ops": "open loop: arrivals the schedule intended from the ramp's end to the stop, summed over "
                    "engines (offered_rate_ops_s over the window)",
    "issued_ops": "open loop: ops issued after the ramp's end (the window's arrivals, the ramp's backlog issued "
                  "late, and the window's backlog issued in the drain), summed over engines",
    "unissued_ops": "open loop: arrivals intended before the stop that were never issued (the backlog left "
                    "once the drain's time was up)",
    "schedule_kept": "open loop: true when every engine kept its schedule: at most 1% of the window's arrivals (or "
                     "one op) left unissued after the drain, and the achieved rate at least 95% of the rate the "
                     "window's arrivals came at (intended_ops / window_s, one op spared; the point's summed rates "
                     "held to the same); false: the offered rate was not delivered",
    "steady_state": "with a workload's steady_state: 'reached' (the point stopped early) or 'not reached' (by max_s)",
    "steady_s": "measured seconds until the steady-state criteria held (the stop request); ramp excluded",
    # points with faults (fathom.suite.faults; figures from fathom.analysis.recovery, on the engine's clock)
    "faults": "faults run during the point",
    "fault_at_s": "engine time of the first fault, s",
    "prefault_iops": "median IOPS of the measured seconds before the first fault",
    "fault_first_error_s": "s from the first fault to the end of the first second with an op error",
    "fault_min_iops": "lowest IOPS in a second after a fault, until recovery (the dip)",
    "fault_min_mib_s": "lowest MiB/s in a second after a fault, until recovery",
    "fault_max_p99_ms": "highest per-second p99 latency after a fault, until recovery, ms",
    "fault_recovery_s": "s from the last fault until IOPS is back to at least 90% of the pre-fault median "
                        "(3 s in a row, no fall below 50% after); none: not recovered",
    "fault_recovered": "IOPS came back to at least 90% of the pre-fault median after the last fault",
    "usr_cpu": "client user CPU, % of one core: fathom-engine's measured phase (summed over engines) over its "
               "seconds; fio's as fio reports it",
    "sys_cpu": "client system CPU, % of one core, on usr_cpu's base",
    "client_cpu_us_per_op": "client CPU (user+sys) microseconds per operation: the measured phase's CPU (no "
                            "connect, prefill, ramp or teardown) over its ops",
    "client_ctx_per_op": "client context switches (voluntary + involuntary, the whole load generator) of the "
                         "measured phase per operation",
    "client_thread_max_pct": "fathom-engine's busiest thread over the measured phase, % of one core (the most "
                             "of any engine): near 100 the load generator, not the cluster, set the pace",
    # points on several engines (client hosts; fathom.engines.clients)
    "client_hosts": "client hosts the point ran on",
    "engines": "engine processes the point ran on, over every client host",
    "start_skew_ms": "how far apart the engines' measured phases began, ms (host clock offsets removed)",
    "clients_lost": "client hosts lost during the point (their data up to the loss is kept)",
    # s3 points (GET): time to first body byte, from the engine's ttfb histogram
    "ttfb_ms": "GET time to first body byte, mean, ms",
    "ttfb_p50_ms": "GET time to first body byte, median, ms",
    "ttfb_p99_ms": "GET time to first body byte, 99th percentile, ms",
    # s3 points on an RGW fathom can read: client counts against RGW's perf counters (fathom.interfaces.reconcile)
    "rgw_reconciled": "'ok': the client's ops and bytes match RGW's counters over the point (within the requests "
                      "in flight at the edges); 'mismatch' otherwise",
    "rgw_failed_req": "RGW failed_req counter delta over the point",
    "rgw_initial_lat_ms": "RGW's own mean time to the first byte of its answer (perf counter get_initial_lat for "
                          "GETs, put_initial_lat for PUTs) over the point, ms",
    # server hosts sampled over SSH (fathom.servers): the cluster's hosts, each on its own clock moved onto this one's
    "server_hosts": "the cluster's hosts sampled for the point, each counted once: hosts its metadata places "
                    "daemons on whose CPU was sampled (fathom-sampler over SSH, node-exporter via Prometheus, or this "
                    "host's /proc when the metadata places daemons here that no other source samples). fathom's own "
                    "host counts only as such a host; a host holding none of the cluster's daemons (a client, even "
                    "one named with --server-host) is not counted, nor in host_cpu_pct and the NIC figures",
    "server_hosts_lost": "server hosts sampled over SSH that were lost during the point (their figures partial, "
                         "up to the loss) or before it and not reached again (none of their figures): the sums over "
                         "hosts (daemon CPU and memory, host_cpu_pct, NIC) lack them; the point is flagged server_lost",
    "net_rx_mib_s": "MiB/s received by the sampled hosts, summed over hosts: each byte once, on the interfaces at "
                    "the top of their stack (a bridge, not its ports; a bond, not its members; loopback excluded; "
                    "--prometheus hosts: every interface but loopback)",
    "net_tx_mib_s": "MiB/s sent by the sampled hosts, summed over hosts: each byte once, on the interfaces at the "
                    "top of their stack (a bridge, not its ports; a bond, not its members; loopback excluded; "
                    "--prometheus hosts: every interface but loopback)",
    "net_busiest_host_mib_s": "the busiest sampled host's NIC MiB/s (received or sent, whichever is higher): "
                              "near the NIC's line rate, the network sets the limit",
    **{c: d for kind in DAEMON_KINDS for c, d in daemon_columns(kind).items()},
    "host_cpu_pct": "CPU busy on the cluster's sampled hosts, % of all their cores (this host alone on a local "
                    "cluster)",
    "engine_cpu_pct": "load generator process CPU, % of one core, sampled like the daemons",
    "bound": "what bounds the point (fathom.analysis.bound): cpu, network or client when a resource is at 90% of "
             "its ceiling or more; latency (closed loop) or rate (open loop) when none is; unknown when nothing "
             "was measured. The evidence is the result's extra.bound",
    "bound_use_pct": "the busiest resource's use, % of its ceiling (a daemon's allowed cores, a host's cores, a "
                     "NIC's link speed or tc cap, one core for the engine's busiest thread)",
}

# What span of time each figure covers and where it comes from, by group: the reports' definitions and
# `fathom export --columns` state it per figure (docs/measurement.md explains the rules).
MEASURED = "the measured phase: ops issued from the ramp's end to the stop, counted as they complete (the drain " \
           "to the last completion included)"
FIGURE_WINDOWS: list[tuple[tuple[str, ...], str, str]] = [
    (("iops", "bw_mib_s", "total_ios", "read_iops", "write_iops", "read_bw_mib_s", "write_bw_mib_s", "errors",
      "runtime_s", "drain_s", "achieved_rate_ops_s"),
     MEASURED, "counts summed over op kinds, engines and client hosts, over the longest engine's measured seconds"),
    (("clat_ms", "clat_stdev_ms", "lat_min_ms", "lat_max_ms", "ttfb_ms"),
     MEASURED, "successful ops; means weighted by ops, stdev pooled over engines and op kinds"),
    (("p50_ms", "p90_ms", "p99_ms", "p999_ms", "ttfb_p50_ms", "ttfb_p99_ms"),
     MEASURED, "merged latency histograms of successful ops (over op kinds, engines and hosts; percentiles are "
               "never averaged); n/a for sources without histograms"),
    (("p99_all_ms",), MEASURED, "merged histograms of successful, failed and timed-out ops"),
    (("offered_rate_ops_s", "intended_ops", "issued_ops", "unissued_ops", "schedule_kept"),
     "the open-loop schedule's arrivals from the ramp's end to the stop", "each engine's schedule, summed"),
    (("usr_cpu", "sys_cpu", "client_cpu_us_per_op", "client_ctx_per_op", "client_thread_max_pct"),
     "fathom-engine: the measured phase (ramp's end to the last measured completion); fio and rados bench: "
     "their whole run", "the engine process's own CPU and context switches, summed over engines"),
    (("steady_state", "steady_s", "faults", "fault_at_s", "prefault_iops", "fault_first_error_s", "fault_min_iops",
      "fault_min_mib_s", "fault_max_p99_ms", "fault_recovery_s", "fault_recovered"),
     "the measured intervals (ramp excluded), on the engine's clock", "interval records merged over engines by "
                                                                      "tick; p99 from each second's merged histograms"),
    (("server_hosts_lost",), "the point: from its start (when fathom reaches a lost host again) to its end",
     "each server host's SSH connection and sampler stream"),
    (("rgw_reconciled", "rgw_failed_req", "rgw_initial_lat_ms"),
     "the RGW counters read before the engine starts and after it ends", "RGW perf counter deltas"),
    (("bound", "bound_use_pct"), "the telemetry window (as the server figures)",
     "each resource's mean use over the window against its ceiling (the point's capacity event)"),
    (("host_cpu_pct", "engine_cpu_pct", "server_hosts", "net_rx_mib_s", "net_tx_mib_s", "net_busiest_host_mib_s",
      *[c for kind in DAEMON_KINDS for c in daemon_columns(kind)]),
     "the telemetry window: the ramp's end to the last measured interval's end (the engine's phase clock)",
     "per-second samples of /proc (this host's, and fathom-sampler's on server hosts over SSH), averaged per host "
     "over the window (RSS: mean), summed over hosts"),
]


def figure_window(col: str) -> tuple[str, str] | None:
    """(window, source) of a figure, None for one without a window (counts of hosts, engines)."""
    for cols, window, source in FIGURE_WINDOWS:
        if col in cols:
            return window, source
    return None


PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


@dataclass
class OpStats:
    """One op kind (read, write, ...) of one point, in the measured window."""

    ops: int
    bytes: int
    runtime_s: float
    lat_mean_ns: float | None = None
    lat_stdev_ns: float | None = None
    lat_min_ns: float | None = None
    lat_max_ns: float | None = None
    percentiles_ns: dict[str, float] = field(default_factory=dict)  # keys of PERCENTILES
    hist: str | None = None  # base64 HDR V2 (deflate); None when the source has no histogram
    errors: int = 0

    @property
    def iops(self) -> float:
        return self.ops / self.runtime_s if self.runtime_s > 0 else 0.0

    @property
    def bw_bytes_s(self) -> float:
        return self.bytes / self.runtime_s if self.runtime_s > 0 else 0.0


@dataclass
class PointResult:
    """What any engine adapter returns for one point."""

    engine: str
    ops: dict[str, OpStats]
    runtime_s: float
    client_user_s: float | None = None  # CPU seconds of the whole client process tree
    client_sys_s: float | None = None
    wall_s: float | None = None  # wall time of the client, ramp included (fio's usr_cpu base)
    errors: list[dict[str, Any]] = field(default_factory=list)  # {op, kind, count, hist (fathom-engine)}
    stopped_early: bool = False
    stop_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific facts worth keeping
    # extra keys base_metrics reads (fathom-engine): cpu_measured {seconds, user_s, sys_s, ...} (the measured
    # phase's CPU: the base of usr_cpu and CPU per op when present), ctx_per_op, schedule (open loop), drain_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "PointResult":
        d = dict(d)
        d["ops"] = {k: OpStats(**v) for k, v in d.get("ops", {}).items()}
        return PointResult(**d)


def pooled_mean_stdev(parts: list[tuple[int, float, float]]) -> tuple[float | None, float | None]:
    """Combine (count, mean, stdev) groups into one mean and stdev (n-1 pooled, as fio-parse-jsons does)."""
    parts = [p for p in parts if p[0] > 0 and p[1] is not None]
    n = sum(p[0] for p in parts)
    if n == 0:
        return None, None
    mean = sum(c * m for c, m, _ in parts) / n
    if n < 2:
        return mean, 0.0
    ss = sum((c - 1) * (s or 0.0) ** 2 + c * (m - mean) ** 2 for c, m, s in parts)
    return mean, math.sqrt(ss / (n - 1))


def p99_with_errors_ms(ok: Iterable[str | None], errors: Iterable[Mapping[str, Any]]) -> float | None:
    """p99 over successes and errors together, ms: the success histograms (one per op kind that completed ops)
    merged with the errors' (`errors[].hist`: failed and timed-out ops, timed from their start). None without
    errors, or when a histogram is missing (a p99 of the errors alone would pass for all ops)."""
    err = [e["hist"] for e in errors if e.get("hist") and int(e.get("count") or 0)]
    oks = list(ok)
    if not err or any(h is None for h in oks):
        return None
    import zlib

    from fathom.results import hdr

    try:
        h = hdr.merge([*oks, *err])
    except (ValueError, zlib.error):
        return None
    return hdr.percentile(h, 99) / 1e6 if hdr.count(h) else None


def p99_all_ms(r: PointResult) -> float | None:
    """A point's p99 including its failed and timed-out ops (p99_with_errors_ms)."""
    return p99_with_errors_ms([o.hist for o in r.ops.values() if o.ops], r.errors)


def open_loop_metrics(schedule: Mapping[str, Any] | None) -> dict[str, Any]:
    """The open-loop columns from a point's `schedule` (one engine's or merge.merge_schedules'); all None in
    closed loop. Records from before the offered/achieved fields give the offered rate only."""
    if not schedule:
        return {}
    offered = schedule.get("offered_rate", schedule.get("rate"))
    return {"offered_rate_ops_s": float(offered) if offered is not None else None,
            "achieved_rate_ops_s": schedule.get("achieved_rate"), "intended_ops": schedule.get("intended_ops"),
            "issued_ops": schedule.get("issued_ops"), "unissued_ops": schedule.get("unissued_ops"),
            "schedule_kept": schedule.get("schedule_kept")}


def _client_cpu(m: dict[str, Any], r: PointResult, total_ops: int) -> None:
    """usr_cpu, sys_cpu and CPU per op. fathom-engine's measured-phase CPU (extra cpu_measured) over the
    measured seconds and ops, for one engine and many alike; else (fio, rados bench, older engine records)
    the whole process's over its wall time."""
    cm = (r.extra or {}).get("cpu_measured")
    if cm and cm.get("user_s") is not None and cm.get("sys_s") is not None:
        user, sys_, base = float(cm["user_s"]), float(cm["sys_s"]), float(cm.get("seconds") or r.runtime_s)
    elif r.client_user_s is not None and r.client_sys_s is not None:
        user, sys_, base = r.client_user_s, r.client_sys_s, r.wall_s or r.runtime_s
    else:
        return
    if base > 0:
        m["usr_cpu"] = 100.0 * user / base
        m["sys_cpu"] = 100.0 * sys_ / base
    if total_ops:
        m["client_cpu_us_per_op"] = (user + sys_) / total_ops * 1e6


def base_metrics(r: PointResult, merged_percentiles_ns: dict[str, float] | None = None) -> dict[str, Any]:
    """Client-side metrics of one point. Server-side columns are added by the runner.

    merged_percentiles_ns: percentiles from the histogram merged over op kinds, when the
    caller has decoded it (see fathom.results.hdr). Without it, a single op kind's own percentiles
    are used; a mix with no histogram gets none (never an average of percentiles).
    """
    m: dict[str, Any] = {k: None for k in METRIC_COLUMNS}
    ops = r.ops
    total_ops = sum(o.ops for o in ops.values())
    total_bytes = sum(o.bytes for o in ops.values())
    rt = r.runtime_s
    m["runtime_s"] = rt
    m["total_ios"] = total_ops
    m["iops"] = total_ops / rt if rt > 0 else 0.0
    m["bw_mib_s"] = total_bytes / rt / 2**20 if rt > 0 else 0.0
    for kind in ("read", "write"):
        if kind in ops:
            m[f"{kind}_iops"] = ops[kind].iops
            m[f"{kind}_bw_mib_s"] = ops[kind].bw_bytes_s / 2**20
    mean, stdev = pooled_mean_stdev([(o.ops, o.lat_mean_ns, o.lat_stdev_ns or 0.0) for o in ops.values()])
    m["clat_ms"] = mean / 1e6 if mean is not None else None
    m["clat_stdev_ms"] = stdev / 1e6 if stdev is not None else None
    mins = [o.lat_min_ns for o in ops.values() if o.lat_min_ns is not None]
    maxs = [o.lat_max_ns for o in ops.values() if o.lat_max_ns is not None]
    m["lat_min_ms"] = min(mins) / 1e6 if mins else None
    m["lat_max_ms"] = max(maxs) / 1e6 if maxs else None
    pct = merged_percentiles_ns
    if pct is None and len([o for o in ops.values() if o.ops]) == 1:
        pct = next(o for o in ops.values() if o.ops).percentiles_ns
    for key in PERCENTILES:
        m[f"{key}_ms"] = pct[key] / 1e6 if pct and key in pct else None
    m["errors"] = sum(o.errors for o in ops.values()) + sum(int(e.get("count", 0)) for e in r.errors
                                                           if e.get("op") not in ops)
    _client_cpu(m, r, total_ops)
    extra = r.extra or {}
    ctx = extra.get("ctx_per_op") or {}
    if ctx.get("voluntary") is not None and ctx.get("involuntary") is not None:
        m["client_ctx_per_op"] = ctx["voluntary"] + ctx["involuntary"]
    busy = extra.get("busiest_thread") or {}
    m["client_thread_max_pct"] = busy.get("pct")
    m["p99_all_ms"] = p99_all_ms(r)
    m["drain_s"] = extra.get("drain_s")
    m.update(open_loop_metrics(extra.get("schedule")))
    return m
