"""Feeds a LiveState from a run's lifecycle.

A suite run (`fathom run`, `fathom slo`): the runner attaches the observer to its Progress, which hands over
each point's start and end, every merged interval record, the engines' own records of a many-engine span
(per host) and structured events (a fault, steady state, a lost client host) as they happen. A bench
(`fathom bench ...`): the drop-in's engine records (start, interval, summary) go through `bench_record`.
Every hook runs on the engine's reader thread and must stay cheap: one histogram merge per op and host.
"""

from __future__ import annotations

from typing import Any

from fathom.live.state import LiveState


class Observer:
    def __init__(self, state: LiveState):
        self.state = state
        self.store: Any = None
        self.run_id: int | None = None

    # ---- a suite run (fathom.run.progress.Progress observers) -------------------------
    def attach(self, prog: Any, store: Any, run_id: int, work: Any) -> None:
        """The runner's progress is created: the run is known (its id, name, suite, planned points)."""
        self.store, self.run_id = store, run_id
        run = store.run(run_id)
        slo = work.source is not None
        self.state.run_start(run_id, run.name, work.suite.name, "slo" if slo else "suite",
                             None if slo else len(work.points), len(work.points) - len(work.todo) if not slo else 0)
        prog.observers.append(self)

    def point_start(self, point: Any, n: int, total: int | None) -> None:  # noqa: ARG002
        self.state.point_start(n, point.key, point.workload, point.label(), point.params, point.est_s)

    def interval(self, rec: dict[str, Any]) -> None:
        self.state.interval(rec)

    def span(self, recs: list[dict[str, Any]]) -> None:
        hosts = {r.get("host") for r in recs}
        if len(hosts) > 1:
            self.state.span(recs)
        else:  # one host: its merged record says the same, cheaper; only its name is needed
            self.state.host_name = str(next(iter(hosts)) or "local")

    def event(self, e: dict[str, Any]) -> None:
        self.state.event(e)

    def point_end(self, point: Any, status: str, metrics: dict[str, Any] | None, error: str | None) -> None:
        self.state.point_end(status, metrics, error, self._stored_events(point.key))

    def _stored_events(self, key: str) -> list[dict[str, Any]]:
        """The events the store holds for the point just recorded (its gate, health after, warnings)."""
        if self.store is None or self.run_id is None:
            return []
        row = self.store.db.execute("SELECT id FROM points WHERE run_id = ? AND key = ?",
                                    (self.run_id, key)).fetchone()
        if row is None:
            return []
        return [e for e in self.store.events(self.run_id) if e["point_id"] == row[0]]

    def finish(self, status: str) -> None:
        self.state.finish(status)

    # ---- a bench (fathom.dropin.engine.run_engine) ---------------------------------
    def bench_start(self, name: str, workload: str, label: str, params: dict[str, Any]) -> None:
        self.state.run_start(None, name, None, "bench", 1)
        self._bench = (workload, label, params)

    def bench_record(self, rec: dict[str, Any]) -> None:
        t = rec.get("type")
        if t == "start" and self.state.point is None:
            workload, label, params = getattr(self, "_bench", ("bench", "bench", {}))
            self.state.point_start(1, workload, workload, label, params, params.get("runtime"))
        elif t == "interval" and self.state.point is not None:
            self.state.interval(rec)
        elif t == "summary" and self.state.point is not None:
            self.state.point_end("done", _summary_metrics(rec), None)


def _summary_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The few figures the page's curve shows, from an engine summary (a bench stores its own in full)."""
    ops = summary.get("ops") or {}
    out: dict[str, Any] = {"iops": sum(float(o.get("iops") or 0) for o in ops.values()),
                           "bw_mib_s": sum(float(o.get("bw_bytes_s") or 0) for o in ops.values()) / 2**20}
    from fathom.results import hdr

    hists = [o["hist"] for o in ops.values() if o.get("hist")]
    if hists:
        h = hdr.merge(hists)
        if h.get_total_count():
            out.update(p50_ms=hdr.percentile(h, 50) / 1e6, p99_ms=hdr.percentile(h, 99) / 1e6)
    return out
