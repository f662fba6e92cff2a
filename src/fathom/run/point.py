"""One point's lifecycle: health gate, the engine with its companions, health after, metrics, one atomic store.

Phases, in order (each a named step, as hyperfine names the phases around a
measurement):
    gate       hold until the cluster is clean (skipped without a cluster)
    start      companions start: telemetry (with perf counters before), live progress, ...
    engine     the adapter runs the point; every interval record goes to each companion
    stop       companions stop and hand over what they saw (samples, counters, events)
    health     the cluster's state right after (it serves as the next point's gate when clean)
    record     metrics computed, the point stored whole or not at all

Companions (companion.py: telemetry, progress, the fault schedule, the steady-state
watch) start with the point, see each interval record and stop with it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fathom import engines, interfaces
from fathom.analysis import bound
from fathom.run import faults
from fathom.results import usage
from fathom.servers import telemetry
from fathom.servers.tell import NodeList, TellCompanion
from fathom.companion import Companion, Contribution, Live
from fathom.cluster import full, health
from fathom.cluster.local import Daemon
from fathom.errors import FathomError
from fathom.results.model import METRIC_COLUMNS, PointResult
from fathom.suite import plan
from fathom.suite.plan import Point
from fathom.run.progress import Progress
from fathom.results.store import Store


class TelemetryCompanion(Companion):
    """Per-daemon CPU, memory and context switches on the engine's clock, and perf counter deltas over the point."""

    def __init__(self, sampler: telemetry.Sampler, daemons: list[Daemon], run_dir: Path | None,
                 refresh: Callable[[], list[Daemon]] | None = None, sockets: list[Daemon] | None = None):
        self.sampler, self.daemons, self.run_dir = sampler, daemons, run_dir
        # whose admin sockets give counters: fathom's own cluster's daemons all have theirs here, also those
        # placed on other (namespace) hosts and sampled there
        self.sockets = daemons if sockets is None else sockets
        # the daemons running now: a point's engine spec may start some (a FUSE mount, nfs-ganesha)
        self.refresh = refresh
        self.asok_cpu_s = 0.0  # admin-socket reads run on this thread: their cost is counted apart
        self._before: dict[str, dict[str, Any]] = {}

    def start(self, live: Live) -> None:
        c0 = time.thread_time()
        self._before = telemetry.perf_dump(self.sockets, self.run_dir)
        self.asok_cpu_s += time.thread_time() - c0
        self.sampler.start()

    def on_child(self, pid: int | None) -> None:
        if pid is not None and self.refresh is not None:
            self.sampler.set_daemons(self.refresh())
        self.sampler.set_engine_pid(pid)

    def stop(self) -> Contribution:
        samples = self.sampler.stop()
        c0 = time.thread_time()
        deltas = usage.perf_deltas(self._before, telemetry.perf_dump(self.sockets, self.run_dir))
        self.asok_cpu_s += time.thread_time() - c0
        return Contribution(samples=samples, perf_counters=deltas, counter_source="admin socket")


def tell_readers(ceph: Any, local: Any, counters: bool) -> tuple[Companion | None, Companion]:
    """The point's readers of the daemons through the mons: every OSD's and MDS's perf counters by `ceph tell`
    (when `counters`: a cluster with no host access, fathom.servers.tell), and the OSDs' latency histograms
    (osd_latency). Those through `ceph tell` share one `ceph node ls` per point end."""
    nodes = NodeList(ceph)
    return (TellCompanion(ceph, nodes=nodes) if counters else None), osd_latency(ceph, local, nodes)


def osd_latency(ceph: Any, local: Any, nodes: NodeList | None = None) -> Companion:
    """The OSDs' latency histograms over each point (fathom.servers.osdlat): from the admin sockets of fathom's own
    cluster, else through `ceph tell`, the OSDs named by `nodes` (a fathom.servers.tell.NodeList the run's other
    `ceph tell` reader shares: one `ceph node ls` per point end; default: one of its own)."""
    from fathom.servers import osdlat

    if local is not None:
        def sockets(live: Live, end: str) -> dict[str, Any]:
            return osdlat.asok_dump({d.name: telemetry.asok_path(d, local.run_dir) for d in local.daemons()
                                     if d.kind == "osd" and d.running})

        return osdlat.OsdLatencyCompanion(sockets, osdlat.SOURCE_ASOK)
    listed = nodes if nodes is not None else NodeList(ceph)
    return osdlat.OsdLatencyCompanion(lambda live, end: osdlat.tell_dump(ceph, lambda: listed.at(live, end)),
                                      osdlat.SOURCE_TELL)


class ProgressCompanion(Companion):
    """Live IOPS and latency on the terminal (or one line per event in logs)."""

    def __init__(self, prog: Progress):
        self.prog = prog

    def on_interval(self, rec: dict[str, Any]) -> None:
        self.prog.interval(rec)

    def on_span(self, recs: list[dict[str, Any]]) -> None:
        self.prog.span(recs)

    def on_notice(self, event: dict[str, Any]) -> None:
        self.prog.event(event)


@dataclass
class PointOutcome:
    status: str  # done | failed | interrupted
    metrics: dict[str, Any] | None
    error: str | None
    next_gate: health.GateVerdict | None  # the clean state seen right after, for the next point
    faulted: bool = False  # faults ran: the next point's gate must wait for a clean cluster itself
    full: dict[str, str] | None = None  # the cluster's full states when the point failed on them
    hist: str | None = None  # every op kind's latency histogram merged (HDR, base64), as stored
    intervals: list[dict[str, Any]] | None = None  # the engine's interval records (an SLO probe's batches)


def run_point(store: Store, run_id: int, point: Point, ctx: engines.PointContext, companions: list[Companion],
              ceph: Any | None, gate_timeout: float, gate: health.GateVerdict | None = None) -> PointOutcome:
    """Run one point through its phases and store it; KeyboardInterrupt is stored as an interrupted point."""
    params = point.params
    adapter = engines.get(point.engine)
    live = Live(point)
    intervals: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    got = Contribution()
    started = time.time()
    result: PointResult | None = None
    status, error = "done", None
    full_now: dict[str, str] = {}

    def on_interval(rec: dict[str, Any]) -> None:
        intervals.append(rec)
        for c in companions:
            c.on_interval(rec)

    live.notify = notify = _each(companions, "on_notice")
    ctx.on_interval, ctx.on_control = on_interval, live.attach
    ctx.on_child, ctx.on_span = _each(companions, "on_child"), _each(companions, "on_span")
    engine_rows: dict[str, Any] = {}  # a many-engine point's records per engine (and merged, host '')

    def on_event(e: dict[str, Any]) -> None:  # from the engines' side during the point (a client host lost)
        events.append(e)
        notify(e)
        print(f"  {e['message']}", file=sys.stderr, flush=True)

    ctx.on_event, ctx.on_engines = on_event, engine_rows.update
    ctx.seed = plan.seed(point)
    started_companions: list[Companion] = []
    try:
        # ---- prepare: what the interface needs made (a mount, a server, empty buckets), before the gate ----
        error = _prepare(params, ctx, on_event)
        if error is not None:  # nothing was made to measure on: no gate, no companions, no engine
            status = "failed"
        else:
            # ---- gate ----
            if ceph is not None:
                gate = _gate(ceph, interfaces.get(params["interface"]).rgw, gate, gate_timeout, events, notify)
            # ---- start ----
            for c in companions:
                c.start(live)
                started_companions.append(c)
            # ---- engine ----
            started = time.time()
            try:
                result = adapter.run(params, ctx)
                early = ended_early(result, point, live.stop_reason)
                if early is not None:  # stored with what it measured, never as done
                    status, error = "failed", early
            except FathomError as exc:
                status, error = "failed", exc.message
                full_now = full.full_state(ceph) if ceph is not None else {}
                if full_now:
                    error = f"the cluster is full ({full.describe(full_now)}): {error}"
    except KeyboardInterrupt as exc:
        # the point in progress is kept, marked interrupted, with what was measured so far
        _record_interrupted(store, run_id, point, started_companions, gate, started, intervals, events, engine_rows,
                            getattr(exc, "result", None))
        raise
    # ---- stop ----
    ended = time.time()
    got = _stop_all(started_companions)
    events += got.events
    if live.stop_reason:
        events.append({"kind": "stop", "message": f"stopped early: {live.stop_reason}"})
    # ---- health ----
    next_gate = None
    faulted = faults.faulted(events)
    if ceph is not None:
        next_gate = _health_after(ceph, gate, events)
        if faulted:
            next_gate = None  # clean now or not, a cluster that was just faulted is checked again before use
    # ---- record ----
    metrics, hists = None, {}
    if result is not None:
        metrics, hists = usage.point_metrics(result, params, got.samples, started, ended, intervals, events)
        metrics.update({k: v for k, v in got.metrics.items() if k in METRIC_COLUMNS})
        more = interfaces.get(params["interface"]).metrics
        if more is not None:  # the interface's own figures (s3: TTFB, the check against RGW's counters)
            more(metrics, result, params, intervals, got.perf_counters, events)
        if metrics.get("total_ios", 0) == 0:
            status, error = "failed", "the engine completed no I/O in the measured window"
        _judge(result, got.samples, events, metrics, params, got.perf_counters)
    if error:
        events.append({"kind": "error", "message": error})
    point_hist = hists.get("all") or (next(iter(hists.values())) if len(hists) == 1 else None)
    hists = {**hists, **engine_rows.get("histograms", {})}  # and each engine's own
    store.record_point(run_id, point.idx, point.key, point.workload, point.engine, params, status,
                       metrics=metrics, result=result.to_dict() if result else None,
                       gate=gate.to_dict() if gate else None, error=error, started=started, ended=ended,
                       intervals=engine_rows.get("intervals", intervals), histograms=hists, telemetry=got.samples,
                       perf_counters=got.perf_counters, events=events)
    return PointOutcome(status, metrics, error, next_gate, faulted,
                        full_now if status == "failed" and ceph is not None and full_now else None,
                        point_hist, intervals)


def _judge(result: PointResult, samples: list[dict[str, Any]], events: list[dict[str, Any]],
           metrics: dict[str, Any], params: dict[str, Any], perf: dict[str, dict[str, Any]]) -> None:
    """What bounds the point (fathom.analysis.bound): its verdict in the result, its kind and use in the metrics."""
    verdict = bound.judge(samples, result.extra.get("telemetry_window"), events, metrics, params, perf)
    result.extra["bound"] = verdict
    metrics["bound"] = verdict["bound"]
    metrics["bound_use_pct"] = round(100 * verdict["resources"][0]["ratio"], 1) if verdict["resources"] else None


# the engine's own early stops (engine/PROTOCOL.md, summary `stop`): none of them is a stop fathom asked for
EARLY_STOPS = ("orchestrator_lost", "error", "stall", "signal")
SHORT = 0.5  # a measured time under this share of the runtime, unexplained, is an early end


def ended_early(result: PointResult, point: Point, asked: str | None) -> str | None:
    """Why a point whose engines ended before their time of their own accord is not done, or None.

    An early stop an engine names (its heartbeats lost, an error, a stall, a signal) of any engine whose host was
    not lost; or, from fathom-engine, a measured time under SHORT of the planned runtime that nothing explains:
    no stop asked for (`asked`: steady state, a companion, the user), no ops or bytes cap, no object set done."""
    x = result.extra
    rows = [e for e in x.get("engines") or [] if not e.get("lost")] or [{"stop": x.get("stop")}]
    stops = [e.get("stop") for e in rows]
    own = next((s for s in stops if s in EARLY_STOPS), None)
    if own is not None:
        return (f"the engines stopped before their end on their own ({own}: {result.stop_reason or 'no reason given'})"
                f"; measured {result.runtime_s:.1f} s of {float(point.params.get('runtime') or 0):g} s")
    if asked is not None or point.capped or result.engine != "fathom-engine" or \
            any(s in ("ops", "bytes", "done") for s in stops):
        return None
    runtime = float(point.params.get("runtime") or 0)
    if runtime > 0 and result.runtime_s < SHORT * runtime:
        return f"the engines ended early: measured {result.runtime_s:.1f} s of its {runtime:g} s, no stop asked for"
    return None


def _each(companions: list[Companion], hook: str) -> Callable[[Any], None]:
    """One argument handed to every companion's `hook`, in order."""
    def call(arg: Any) -> None:
        for c in companions:
            getattr(c, hook)(arg)

    return call


def _prepare(params: dict[str, Any], ctx: engines.PointContext, on_event: Callable[[dict[str, Any]], None]) \
        -> str | None:
    """Make what the point's interface needs (interfaces.prepare); the error that stops the point, or None."""
    try:
        said = interfaces.prepare(params, ctx)
    except FathomError as exc:
        return exc.message
    if said:
        on_event({"kind": "prepare", "message": said})
    return None


def _gate(ceph: Any, rgw: bool, gate: health.GateVerdict | None, timeout: float, events: list[dict[str, Any]],
          notify: Callable[[Any], None] = lambda e: None) -> health.GateVerdict:
    """The cluster clean before the point (the last point's clean verdict stands; with rgw, RGW's reshard queue
    and GC must be empty too); a gate not passed in time is an event, and the point is measured anyway."""
    if gate is not None and rgw and not health.rgw_idle(ceph)[0]:
        gate = None
    gate = gate or health.gate(ceph, timeout=timeout, rgw=rgw)
    if not gate.ok:
        events.append({"kind": "gate", "message": f"health gate not passed after {gate.waited_s:.0f} s: "
                                                  f"{gate.reason}; measured anyway", "data": gate.to_dict()})
        notify(events[-1])  # the live view flags it as the point starts
    return gate


def _record_interrupted(store: Store, run_id: int, point: Point, started_companions: list[Companion],
                        gate: health.GateVerdict | None, started: float, intervals: list[dict[str, Any]],
                        events: list[dict[str, Any]], engine_rows: dict[str, Any], partial: PointResult | None) -> None:
    """Stop the companions and store the point in progress as interrupted, with what was measured so far
    (`partial`: the engine's result up to the interrupt, if it had one)."""
    params = point.params
    for c in started_companions:
        c.interrupted = True
    got = _stop_all(started_companions)
    metrics, hists = usage.point_metrics(partial, params, got.samples, started, time.time(), intervals,
                                         got.events) \
        if partial else (None, {})
    store.record_point(run_id, point.idx, point.key, point.workload, point.engine, params, "interrupted",
                       metrics=metrics, result=partial.to_dict() if partial else None,
                       gate=gate.to_dict() if gate else None, error="interrupted (Ctrl-C or SIGTERM)",
                       started=started, ended=time.time(), intervals=engine_rows.get("intervals", intervals),
                       histograms={**hists, **engine_rows.get("histograms", {})},
                       telemetry=got.samples, perf_counters=got.perf_counters,
                       events=[*events, *got.events,
                               {"kind": "interrupt", "message": f"point {point.key} interrupted"}])


def _stop_all(companions: list[Companion]) -> Contribution:
    """Every companion's hand-over, the last stopped first: an earlier companion's counters of a daemon win (the
    admin sockets', then the mgr module's, then `ceph tell`'s); which source each daemon's came from is an event."""
    out = Contribution()
    sources: dict[str, str] = {}
    for c in reversed(companions):
        got = c.stop()
        out.events += got.events
        out.samples += got.samples
        out.perf_counters.update(got.perf_counters)
        sources.update(dict.fromkeys(got.perf_counters, got.counter_source or "unknown"))
        out.metrics.update(got.metrics)
    if len(set(sources.values())) > 1 or set(sources.values()) - {"admin socket"}:
        out.events.append({"kind": "counter_sources", "data": dict(sorted(sources.items())),
                           "message": "perf counters per daemon from: " + ", ".join(
                               f"{d} {src}" for d, src in sorted(sources.items()))[:400]})
    return out


def _health_after(ceph: Any, gate: health.GateVerdict | None, events: list[dict[str, Any]]) \
        -> health.GateVerdict | None:
    try:
        st = ceph.ceph("status", timeout=30)
    except FathomError as exc:
        events.append({"kind": "health", "message": f"after point: cluster did not answer: {exc.message}"})
        return None
    ok, reason, pgs, checks = health.assess(st)
    after_status = st.get("health", {}).get("status")
    events.append({"kind": "health", "message": f"after point: {after_status}",
                   "data": {"before": gate.health if gate else None, "after": after_status, "checks": checks,
                            "clean": ok, "reason": reason}})
    return health.GateVerdict(True, 0.0, reason, after_status, pgs, checks) if ok else None


def record_cost(store: Store, run_id: int, sampler: telemetry.Sampler, asok_cpu_s: float) -> float | None:
    """What telemetry cost: the sampler thread's CPU plus admin-socket reads, % of one core while sampling."""
    wall = sampler.wall_s
    cost = 100.0 * (sampler.cpu_s + asok_cpu_s) / wall if wall > 0 else None
    info = {"sampler_cpu_s": round(sampler.cpu_s, 4), "asok_cpu_s": round(asok_cpu_s, 4), "sampled_s": round(wall, 2),
            "cost_pct_of_one_core": round(cost, 3) if cost is not None else None, "interval_s": sampler.interval,
            "daemons": [d.name for d in sampler.daemons]}
    store.merge_env(run_id, telemetry_cost=info)
    store.add_event(run_id, "telemetry", f"telemetry cost {cost:.2f}% of one core over {wall:.0f} s sampled"
                    if cost is not None else "no telemetry sampled", data=info)
    return cost
