"""`fathom bench ... --client USER@HOST[:PORT]`: one bench on many client hosts, merged exactly.

The hosts are parsed, connected and checked as for `fathom run` (fathom.hosts.clients,
fathom.engines.clients); every engine gets the bench's spec with its own object
prefix (`<prefix>.<host>.<n>`), they start together and their records are merged
as they arrive (histograms added, counts summed). What the bench commands get
back is a ClientsRun: an EngineRun whose records are the merged ones (so the
per-second table, the summary and the JSON read it as they read one engine's)
plus the per-host figures and the per-engine rows the store keeps.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fathom.results import hdr, merge
from fathom.engine_spec import EngineSpec
from fathom.engines.records import EngineRun
from fathom.hosts.clients import ClientChoice, ClientsSpec

# summary keys that are per-engine facts, not amounts: the first engine's value stands for all (not `schedule`:
# each engine runs its own, so the point's is their sum, merge.merge_schedules)
_SAME = ("ramp_s", "verify", "prefill", "s3")
_NORMAL_STOPS = (None, "duration", "ops", "bytes", "done")


@dataclass
class ClientsRun(EngineRun):
    """The merged run of every engine of every client host."""

    clients: dict[str, Any] = field(default_factory=dict)  # hosts, engines, clocks, start skew, losses
    rows: dict[str, Any] = field(default_factory=dict)  # per-engine intervals and histograms for the store
    prefixes: list[str] = field(default_factory=list)  # each engine's object prefix (what cleanup removes)
    objects: list[dict[str, Any]] = field(default_factory=list)  # each engine's summary `objects`


def from_args(a: Any) -> ClientsSpec | None:
    """The bench's client hosts from --client/--clients-file (as `fathom run` parses them); None for the
    single local engine."""
    cs = ClientChoice.of(a).over(None)
    return None if cs is None or cs.only_local else cs


def run(spec: EngineSpec, cs: ClientsSpec, timeout: float,
        on_record: Callable[[dict[str, Any]], None] | None = None, conn: Any = None,
        journal: Any = None) -> ClientsRun:
    """The bench's spec on every engine of cs; on_record gets one `start` record, then the merged
    intervals (with `slowest`: the slowest host) as they complete. conn: the cluster's connection, which pods
    get as a Secret. journal: where the pods are named before they are made (fathom.dropin.record.open_run)."""
    from fathom.engines.clients import Clients
    from fathom.hosts.transport import OpenContext

    emit = on_record or (lambda rec: None)
    started = [False]

    def on_interval(rec: dict[str, Any]) -> None:
        if not started[0]:
            started[0] = True
            emit({"type": "start", "ts": rec["ts"] - float(rec.get("t") or 0.0)})
        emit(rec)

    def say(message: str) -> None:  # the group's events and the pods' progress alike
        sys.stderr.write(f"fathom: {message}\n")
        sys.stderr.flush()

    def on_event(e: dict[str, Any]) -> None:
        say(e["message"])

    clients = Clients.open(cs, OpenContext(f"bench-{os.getpid()}", conn, journal=journal, say=say))
    try:
        t0 = time.time()
        g, res, rows = clients.run_specs(lambda: copy.deepcopy(spec), timeout, on_interval, on_event)
        described = clients.describe()
    finally:
        clients.close()
    out = ClientsRun(started=t0, wall_s=time.time() - t0)
    runs = [(i.label, i.run) for i in g.instances]
    out.intervals = list(g.merged)
    out.prefixes = [str(i.spec["target"].get("prefix")) for i in g.instances if i.spec["target"].get("prefix")]
    for label, r in runs:
        out.errors += [{**e, "message": f"{label}: {e.get('message', '')}", "host": label} for e in r.errors]
        out.stderr += "".join(f"{label}: {ln}\n" for ln in r.stderr.splitlines())
    if g.failed and not out.fatal:
        out.errors.insert(0, {"type": "error", "kind": "clients", "fatal": True, "message": g.failed})
    starts = [r.start for _, r in runs]
    if all(starts) and g.start_at is not None:
        out.start = {**starts[0], "ts": g.start_at, "engines": len(starts)}
    codes = [r.exit_code for _, r in runs if not _lost(g, r)]
    out.exit_code = next((c for c in codes if c != 0), 0 if codes else None)
    if any(r.summary for _, r in runs):
        out.summary = _summary(g, res)
        out.objects = [(r.summary or {}).get("objects") or {} for _, r in runs]
    out.user_s = float(res.client_user_s or 0.0)
    out.sys_s = float(res.client_sys_s or 0.0)
    out.clients = {**{k: res.extra.get(k) for k in ("hosts", "engines", "clocks", "start_at", "start_skew_ms",
                                                    "clients_lost", "left_running")}, "setup": described}
    out.rows = rows
    return out


def preamble(cs: ClientsSpec) -> str:
    """The line naming where the load runs."""
    hosts = ", ".join(h.name + (f" ({h.instances} engines)" if h.instances > 1 else "") for h in cs.hosts)
    return f"Client hosts: {hosts}; {sum(h.instances for h in cs.hosts)} engines, started together, merged exactly"


def _lost(g: Any, r: EngineRun) -> bool:
    return any(i.run is r and i.lost for i in g.instances)


def _with_lat(o: dict[str, Any], measured_s: float) -> dict[str, Any]:
    """A merged op entry in the engine summary's shape: latency figures from the merged histogram."""
    out = dict(o)
    if o.get("hist"):
        s = hdr.summary(o["hist"])
        out["lat_ns"] = {k: v for k, v in s.items() if k != "count"}
    if measured_s > 0 and "ops" in o:
        out["iops"] = int(o.get("ops") or 0) / measured_s
        out["bw_bytes_s"] = int(o.get("bytes") or 0) / measured_s
    if o.get("phases"):
        out["phases"] = {n: _with_lat(p, 0.0) for n, p in o["phases"].items()}
    return out


def _summary(g: Any, res: Any) -> dict[str, Any]:
    """One summary record for the whole bench, in the engine's shape: counts summed, histograms added; CPU,
    open-loop schedule, window and drain as merge.point_result made them (res.extra)."""
    summaries = [i.run.summary for i in g.instances if i.run.summary]
    totals = [merge.engine_totals(i.run.summary, i.run.intervals) for i in g.instances]
    measured = max((t["measured_s"] for t in totals), default=0.0)
    ops = {k: _with_lat(o, measured) for k, o in merge.merge_ops(t["ops"] for t in totals).items()}
    stops = [s.get("stop") for s in summaries]
    odd = [s for s in summaries if s.get("stop") not in _NORMAL_STOPS]
    first = summaries[0]
    out: dict[str, Any] = {
        "type": "summary", "measured_s": measured, "ops": ops,
        "wall_s": max(float(s.get("wall_s") or 0.0) for s in summaries),
        "errors": [e for t in totals for e in t["errors"]],
        "cpu": _cpu(res),
        "schedule": res.extra.get("schedule"),
        "started": sum(int(s.get("started") or 0) for s in summaries),
        "finished": sum(int(s.get("finished") or 0) for s in summaries),
        "in_flight_abandoned": sum(int(s.get("in_flight_abandoned") or 0) for s in summaries),
        "max_rss_kib": max(int(s.get("max_rss_kib") or 0) for s in summaries),
        "connect_s": max(float(s.get("connect_s") or 0.0) for s in summaries),
        "stop": odd[0].get("stop") if odd else stops[0],
        "stopped_early": bool(odd) or bool(g.stop_reason) or len(summaries) < len(g.instances),
        "stop_reason": (odd[0].get("stop_reason") if odd else None) or g.stop_reason
                       or (f"client lost: {', '.join(g.lost_hosts)}" if g.lost_hosts else None),
        "engines": len(g.instances),
    }
    out.update({k: first.get(k) for k in _SAME if k in first})
    if res.extra.get("window_s") is not None:
        out["window_s"], out["drain_s"] = res.extra["window_s"], res.extra.get("drain_s")
    objs = [s.get("objects") for s in summaries if s.get("objects")]
    if objs:
        o = dict(objs[0])
        for k in ("count", "removed", "prefilled", "deleted"):
            if any(k in x for x in objs):
                o[k] = sum(int(x.get(k) or 0) for x in objs)
        o["prefix"] = [x.get("prefix") for x in objs]
        out["objects"] = o
    return out


def _cpu(res: Any) -> dict[str, Any]:
    """The merged summary's `cpu`: the processes' CPU, and the measured phase's with its switches per op."""
    out: dict[str, Any] = {"user_s": res.client_user_s or 0.0, "sys_s": res.client_sys_s or 0.0}
    cm = res.extra.get("cpu_measured")
    if cm is not None:
        out["measured"] = cm
        out.update({f"{k}_ctx_per_op": v for k, v in (res.extra.get("ctx_per_op") or {}).items()})
    return out


def host_lines(c: dict[str, Any]) -> list[str]:
    """The per-host table under a bench's summary: throughput, p99, client CPU, and a flag for a host much
    slower than the others (the merged figures above would hide it)."""
    hosts = c.get("hosts") or []
    if not hosts:
        return []
    clocks = c.get("clocks") or {}
    lines = ["Client hosts (the figures above are the exact merge of every engine):",
             f"  {'host':<24} {'engines':>7} {'ops/s':>10} {'MiB/s':>9} {'p99 ms':>9} {'client CPU %':>12} "
             f"{'clock offset ms':>15}  status"]
    for h in hosts:
        off = clocks.get(h["host"])
        status = "LOST" if h.get("lost") else ("MUCH SLOWER" if h.get("slow") else "ok")
        p99 = f"{h['p99_ms']:.3f}" if h.get("p99_ms") is not None else "-"
        cpu = f"{h['client_cpu_pct']:.1f}" if h.get("client_cpu_pct") is not None else "-"
        offset = f"{off['offset_ms']:+.3f}" if off else "-"
        lines.append(f"  {h['host']:<24} {h['engines']:>7} {h['iops']:>10.1f} {h['mib_s']:>9.2f} {p99:>9} "
                     f"{cpu:>12} {offset:>15}  {status}")
    skew = c.get("start_skew_ms")
    lines.append(f"Start skew: {skew:.3f} ms" if skew is not None else "Start skew: not measured")
    slow = [h["host"] for h in hosts if h.get("slow")]
    if slow:
        lines.append(f"Warning: {', '.join(slow)} much slower than the others (under half the median host's "
                     "ops/s per engine): the client, not the cluster, may cap this result")
    for h, why in (c.get("clients_lost") or {}).items():
        lines.append(f"Warning: client host {h} lost mid-run ({why}); its data up to the loss is kept")
    return lines


def json_part(c: dict[str, Any]) -> dict[str, Any]:
    """What -f json carries of the client hosts: per-host and per-engine results, clocks, skew."""
    return {k: c.get(k) for k in ("hosts", "engines", "clocks", "start_skew_ms", "clients_lost", "left_running")}
