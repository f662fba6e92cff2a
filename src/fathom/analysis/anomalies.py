"""Points that should not be read at face value, with the rule that caught each one.

The rules are RULES (the report's definitions quote them); their thresholds are deliberately loose: a clean
sweep must pass untouched.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from fathom.analysis.data import RunData, StoredPoint, Throughput, throughput_for
from fathom.suite.steady import reached
from fathom.analysis.recovery import expected_checks

COLLAPSE_FACTOR = 3.0
WINDOW_FACTOR = 3.0
CPU_DROPOUT_FACTOR = 3.0
CLIENT_CPU_FRACTION = 0.9
HOST_BUSY_PCT = 95.0
HEALTH_EVENT_KINDS = {"health", "warning"}
SERVER_LOSS_KINDS = ("server_lost", "server_late")  # fathom.servers: a host's figures partial or missing

# One entry per rule, its name first, then the faults' exemption: the text the report's definitions quote (kept
# out of the docstring, which `python -OO` strips).
RULES: tuple[str, ...] = (
    "collapse: a point's throughput is below 1/3 of what its neighbours (the points that differ from it in "
    "concurrency only: same rw, block and object size, placement, TLS) say it should reach. In a closed loop more "
    "outstanding ops never legitimately cut throughput by 3x, and fewer ops cut it at most in proportion "
    "(Little's law: X = N / R, R does not fall as N grows). So the bound for a point at concurrency N is the "
    "largest of: throughput of any point at concurrency <= N, and throughput x N/M of any point at concurrency M "
    "> N. Without a numeric concurrency, the bound is the median of the other points. Open-loop points (rate set) "
    "are not judged so: their offered rate sets their throughput (see schedule_not_kept).",
    "short_window: total_ios / throughput (or runtime_s) implies a measured window under 1/3 of the run's median "
    "window: the figures of that row do not describe the same interval.",
    "osd_cpu_dropout: OSD CPU under 1/3 of the curve's median while throughput held: the CPU sample is likely "
    "missing or misaligned with the point.",
    "errors / failed / stopped_early: the engine counted errors, the point failed, or it ended before its planned "
    "time. A point its steady-state watch stopped ended as intended: it is neither stopped_early nor a "
    "short_window (its window is as long as its numbers needed).",
    "health: the cluster's health changed while the point ran (status after != before, or the set of health "
    "checks differs from the one the health gate saw before the point). A warning that was already there (e.g. "
    "OSDMAP_FLAGS for the noscrub hygiene flags) is not a change.",
    "client_bound: the load generator was the bottleneck: its CPU reached 90% of what it could use. "
    "fathom-engine: its busiest thread over the measured phase at 90% of one core or more (client_thread_max_pct: "
    "one submitter or callback thread at a full core limits the load however many cores the host has); without "
    "it, the engine process tree's CPU (engine_cpu_pct) against all host cores, or fio's usr+sys (% of one core, "
    "summed over jobs) against 100% per job.",
    "host_busy: the host was over 95% busy during the point: client and cluster competed for cores, so neither "
    "side's figures are a clean limit.",
    "schedule_not_kept: an open-loop point whose engines left arrivals unissued or achieved over 5% under their "
    "arrivals' rate (schedule_kept false): its rates are what the cluster took under a backlog, not its behaviour "
    "at the offered rate.",
    "long_drain: the wait from the stop to the slowest measured op's return (in open loop, also the window's "
    "backlog, issued after the stop) is over 5% of the measured time the point's rates divide by.",
    "server_lost / server_late: a server host sampled over SSH was lost during the point (its figures partial: "
    "the sums over hosts lack it from the loss on) or before it and not reached again (none of its figures: the "
    "sums lack it), or sent no sample after the point's end (its figures stop early).",
    "A point with intended faults (a `faults:` schedule) is labelled as such, not flagged: its dip (collapse), "
    "its errors and the health checks its faults raise are what it measures. A health check its faults do not "
    "explain (analysis.recovery.EXPECTED_CHECKS) is still flagged.",
)


@dataclass
class Anomaly:
    run: str
    workload: str
    iodepth: int | None
    level: str
    kind: str
    message: str
    point_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _concurrency(p: StoredPoint) -> float | None:
    qd = p.params.get("iodepth")
    if not isinstance(qd, (int, float)):
        return None
    jobs = p.params.get("numjobs") or 1
    clients = p.params.get("clients") or 1
    return float(qd) * float(jobs if isinstance(jobs, (int, float)) else 1) * float(
        clients if isinstance(clients, (int, float)) else 1)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


FAMILY_KEYS = ("rw", "bs", "object_size", "placement", "tls")  # a sweep over these is not a concurrency curve


def _families(curve: list[StoredPoint]) -> list[list[int]]:
    """Indexes of the curve's points grouped by what is not concurrency (a PUT and a GET, two object sizes
    or two placements of one workload do not bound each other's throughput)."""
    out: dict[tuple, list[int]] = {}
    for i, p in enumerate(curve):
        out.setdefault(tuple(repr(p.params.get(k)) for k in FAMILY_KEYS), []).append(i)
    return list(out.values())


def collapse(curve: list[StoredPoint], tp: Throughput, factor: float = COLLAPSE_FACTOR) -> dict[int, str]:
    """Indexes of collapsed points in `curve`, with the reason."""
    vals = [(i, tp.of(p), _concurrency(p)) for i, p in enumerate(curve)]
    vals = [(i, x, n) for i, x, n in vals if x is not None]
    out: dict[int, str] = {}
    numeric = all(n is not None for _, _, n in vals)
    for i, x, n in vals:
        others = [(j, y, m) for j, y, m in vals if j != i]
        if not others:
            continue
        if numeric:
            bound, src, src_x = 0.0, 0, 0.0
            for j, y, m in others:
                b = y if m <= n else y * n / m  # type: ignore[operator]
                if b > bound:
                    bound, src, src_x = b, j, y
            why = f"expected at least {_fmt(bound)} {tp.unit} given {_fmt(src_x)} {tp.unit} at {curve[src].label}"
        else:
            bound = statistics.median(y for _, y, _ in others)
            why = f"median of the other points {_fmt(bound)} {tp.unit}"
        if bound > 0 and x < bound / factor:
            out[i] = f"throughput {_fmt(x)} {tp.unit} is {x / bound:.0%} of the bound; {why}"
    return out


def _window(p: StoredPoint, tp: Throughput) -> float | None:
    rt = p.m("runtime_s")
    if rt:
        return rt
    n, x = p.m("total_ios"), p.m("iops")
    if n is not None and x:
        return n / x
    return None


def _client_cpu(run: RunData, p: StoredPoint) -> tuple[float, float, str] | None:
    """(CPU used, capacity, what was measured), both in % of one core."""
    thread = p.m("client_thread_max_pct")
    if thread is not None:
        return thread, 100.0, "busiest load-generator thread"
    eng = p.m("engine_cpu_pct")
    cores = _host_cpus(run.env)
    if eng is not None and cores:
        return eng, 100.0 * cores, "load generator process CPU"
    usr, sys_ = p.m("usr_cpu"), p.m("sys_cpu")
    if usr is None or sys_ is None:
        return None
    jobs = p.params.get("numjobs")
    if p.engine == "fio" and isinstance(jobs, (int, float)) and jobs > 0:
        cap = 100.0 * float(jobs) * float(p.params.get("clients") or 1)
    elif cores:
        cap = 100.0 * cores
    else:
        return None
    return usr + sys_, cap, "client usr+sys CPU"


def _host_cpus(env: Any) -> float | None:
    if isinstance(env, dict):
        host = env.get("host")
        if isinstance(host, dict) and isinstance(host.get("cores"), (int, float)) and host["cores"] > 0:
            return float(host["cores"])  # fathom.run.envinfo.host_facts
        for k in ("cpus", "nproc", "cpu_count", "ncpu", "host_cpus", "logical_cpus"):
            v = env.get(k)
            if isinstance(v, (int, float)) and v > 0:
                return float(v)
        for v in env.values():
            found = _host_cpus(v)
            if found:
                return found
    return None


def _health_changed(e: dict[str, Any], p: StoredPoint) -> bool:
    data = e.get("data")
    if not isinstance(data, dict):
        return True  # no detail (e.g. the cluster did not answer): report it
    if data.get("before") != data.get("after") or data.get("clean") is False:
        return True
    before = (p.gate or {}).get("checks")
    after = data.get("checks")  # a list of names or a {name: summary} dict, depending on the runner version
    if isinstance(before, dict) and isinstance(after, (list, dict)):
        return set(before) != set(after)
    return False


def _checks_note(e: dict[str, Any], p: StoredPoint) -> str:
    data = e.get("data") if isinstance(e.get("data"), dict) else {}
    before = set((p.gate or {}).get("checks") or {})
    after = set(data.get("checks") or [])
    new, gone = sorted(after - before), sorted(before - after)
    parts = ([f"new checks {', '.join(new)}"] if new else []) + ([f"cleared {', '.join(gone)}"] if gone else [])
    if data.get("clean") is False and data.get("reason"):
        parts.append(f"not clean after it: {data['reason']}")
    return f" ({'; '.join(parts)})" if parts else ""


def fault_data(run: RunData, p: StoredPoint) -> list[dict[str, Any]]:
    """The `data` of the fault events of a point (its intended faults)."""
    return [e["data"] for e in run.events if e["kind"] == "fault" and isinstance(e.get("data"), dict)
            and _in_point(e, p)]


def phase_data(run: RunData, p: StoredPoint) -> dict[str, Any] | None:
    """The `data` of a point's phases event (fathom.analysis.phases), if it has one."""
    return next((e["data"] for e in run.events if e["kind"] == "phases" and isinstance(e.get("data"), dict)
                 and _in_point(e, p)), None)


def _unexplained(e: dict[str, Any], p: StoredPoint, faults: list[dict[str, Any]]) -> set[str]:
    """Health checks after a faulted point that were not there before and that its faults do not explain."""
    data = e.get("data") if isinstance(e.get("data"), dict) else {}
    after = set(data.get("checks") or [])
    return after - set((p.gate or {}).get("checks") or {}) - expected_checks(faults)


def _in_point(e: dict[str, Any], p: StoredPoint) -> bool:
    if e.get("point_id") is not None:
        return e["point_id"] == p.point_id
    return p.started is not None and p.ended is not None and p.started <= e["ts"] <= p.ended


def find(run: RunData, workload: str, curve: list[StoredPoint] | None = None,
         tp: Throughput | None = None) -> list[Anomaly]:
    curve = curve if curve is not None else run.curve(workload)
    tp = tp or throughput_for(curve)
    out: list[Anomaly] = []

    def add(p: StoredPoint, kind: str, msg: str) -> None:
        out.append(Anomaly(run.name, workload, p.iodepth, p.label, kind, msg, p.point_id))

    faulted = {id(p): fault_data(run, p) for p in curve}
    collapsed = {}
    for idxs in _families(curve):  # only points that differ in concurrency bound each other
        idxs = [i for i in idxs if curve[i].params.get("rate") is None]  # open loop: the rate sets throughput
        for j, msg in collapse([curve[i] for i in idxs], tp).items():
            collapsed[idxs[j]] = msg
    for i, msg in collapsed.items():
        if not faulted[id(curve[i])]:  # an intended fault's dip is the measurement
            add(curve[i], "collapse", msg)

    windows = [w for w in (_window(p, tp) for p in run.points if not reached(p.metrics)) if w]
    if windows:
        med = statistics.median(windows)
        for p in curve:
            w = _window(p, tp) if not reached(p.metrics) else None
            if w and w < med / WINDOW_FACTOR:
                add(p, "short_window", f"measured window {w:.3g} s (total_ios / IOPS or runtime) against a "
                                       f"median of {med:.3g} s for the run's points")

    cpus = [(p, p.m("osd_cpu")) for p in curve]
    for i, (p, c) in enumerate(cpus):
        rest = [v for j, (_, v) in enumerate(cpus) if j != i and v is not None]
        if c is None or len(rest) < 2 or i in collapsed:
            continue
        med = statistics.median(rest)
        if c < med / CPU_DROPOUT_FACTOR:
            add(p, "osd_cpu_dropout", f"OSD CPU {c:,.0f}% of one core against a median of {med:,.0f}% on this "
                                      "curve while throughput held: the CPU sample is likely missing or misaligned")

    for p in curve:
        errs = p.m("errors")
        if p.status == "failed":
            add(p, "failed", f"point failed: {p.error or 'no reason recorded'}")
        elif p.error:
            add(p, "errors", f"error during the point: {p.error}")
        fs = faulted[id(p)]
        if errs and not fs:
            add(p, "errors", f"{errs:,.0f} failed operations")
        if (p.stopped_early and not reached(p.metrics)) or p.status == "interrupted":
            add(p, "stopped_early", f"ended before its planned time: {p.stop_reason or p.status}")
        for e in run.events:
            if _in_point(e, p):
                if e["kind"] in HEALTH_EVENT_KINDS and fs:
                    extra = _unexplained(e, p, fs)
                    if extra or not isinstance(e.get("data"), dict):
                        add(p, "health", f"cluster health changed beyond what the point's faults explain: "
                            f"{e['message']}" + (f" (unexplained checks {', '.join(sorted(extra))})" if extra else ""))
                elif e["kind"] in HEALTH_EVENT_KINDS and _health_changed(e, p):
                    add(p, "health", f"cluster health changed during the point: {e['message']}"
                        + _checks_note(e, p))
                elif e["kind"] == "error" and not p.error:
                    add(p, "errors", f"error event during the point: {e['message']}")
                elif e["kind"] in SERVER_LOSS_KINDS:
                    add(p, e["kind"], e["message"])
                elif e["kind"] == "fault" and (e.get("data") or {}).get("outcome") == "no effect within the point":
                    add(p, "fault_no_effect", e["message"])
        client = _client_cpu(run, p)
        if client is not None:
            used, cap, what = client
            if used >= CLIENT_CPU_FRACTION * cap:
                add(p, "client_bound", f"{what} {used:.0f}% of one core against a capacity of {cap:.0f}%: "
                                       "the load generator may be the bottleneck")
        host = p.m("host_cpu_pct")
        if host is not None and host >= HOST_BUSY_PCT:
            add(p, "host_busy", f"host CPU {host:.0f}% busy: client and cluster competed for cores")
        for kind, msg in measurement_flags(p):
            add(p, kind, msg)
    return out


def find_all(run: RunData) -> list[Anomaly]:
    out: list[Anomaly] = []
    for wl in run.workloads():
        out.extend(find(run, wl))
    return out


def grouped(found: list[Anomaly]) -> list[tuple[str, str, str, list[str], str]]:
    """(run, workload, kind, levels, what) with one row per run, workload and kind: a rule that fires
    on every point of a curve (e.g. host_busy on a small shared box) reads as one line, not ten."""
    groups: dict[tuple[str, str, str], list[Anomaly]] = {}
    for a in found:
        groups.setdefault((a.run, a.workload, a.kind), []).append(a)
    out = []
    for (run, wl, kind), items in groups.items():
        levels = list(dict.fromkeys(a.level for a in items))
        what = items[0].message if len(items) == 1 else (
            f"{items[0].message} (at {items[0].level}; {len(items) - 1} more like it)")
        out.append((run, wl, kind, levels, what))
    return out


# ---- what a point's own measurement qualifies (open-loop schedule, drain; fathom.results.model's columns) ----
DRAIN_FRACTION = 0.05  # of the measured time


def long_drain(p: StoredPoint) -> tuple[float, float] | None:
    """(window s, drain s) of a point whose drain is over DRAIN_FRACTION of its measured time, else None."""
    drain, rt = p.m("drain_s"), p.m("runtime_s")
    if drain is None or not rt or drain <= DRAIN_FRACTION * rt:
        return None
    return rt - drain, drain


def measurement_flags(p: StoredPoint) -> list[tuple[str, str]]:
    """(kind, message) of schedule_not_kept and long_drain (see RULES) for one point."""
    out = []
    if p.metrics.get("schedule_kept") is False:
        offered, achieved, left = p.m("offered_rate_ops_s"), p.m("achieved_rate_ops_s"), p.m("unissued_ops")
        out.append(("schedule_not_kept",
                    f"open loop: schedule not kept: offered {_fmt(offered) if offered is not None else 'n/a'} "
                    f"ops/s, achieved {_fmt(achieved) if achieved is not None else 'n/a'} ops/s, "
                    f"{_fmt(left) if left is not None else 'n/a'} arrivals never issued: the figures are the "
                    "cluster under a backlog, not at the offered rate"))
    d = long_drain(p)
    if d is not None:
        window, drain = d
        backlog = " and the window's backlog" if p.metrics.get("offered_rate_ops_s") is not None else ""
        out.append(("long_drain", f"IOPS divides by {window:.3g} s of window plus {drain:.3g} s waiting for the "
                                  f"slowest op{backlog} ({drain / (window + drain):.0%} of the measured time)"))
    return out
