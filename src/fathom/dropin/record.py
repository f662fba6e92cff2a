"""Every bench is also a run in the results store (kind "bench"), in the shape reports read.

A bench stores its run when it ends, except one whose client hosts are made for it (Kubernetes pods, their owner
ConfigMap and the Secret holding the client's key): that one is in the store from its start, marked running, with
an undo journal naming each object before it is made (`open_run`), so a bench killed with -9 leaves what
`fathom cluster restore` removes, and restore marks it interrupted.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fathom.results import hdr
from fathom.cluster.ceph import Connection
from fathom.errors import FathomError
from fathom.results.store import Store

if TYPE_CHECKING:
    from fathom.cluster.journal import Journal
    from fathom.engines.records import EngineRun


@dataclass
class Opened:
    """The bench's run, stored at its start (open_run): save_bench fills it in."""

    db: str
    run_id: int


OPENED: Opened | None = None  # one bench per process


def open_run(db: str, name: str, conn: Connection | None) -> "Journal":
    """The bench's run stored now, running, and its undo journal (persisted in the run's state at every entry).
    The journal names the cluster (fsid) the pods reach, so restore run against it finds them; a bench with no
    Ceph connection (S3) records none, and any cluster's restore finds it."""
    global OPENED
    from fathom.cluster.ceph import Ceph
    from fathom.cluster.journal import Journal
    from fathom.cluster.restore import read_fsid

    fsid = None
    if conn is not None:
        try:
            fsid = read_fsid(Ceph(conn))
        except FathomError:  # the engine names why the cluster cannot be reached; restore finds the run anyway
            pass
    with Store(db) as store:
        run_id = store.create_run(name, kind="bench", env=bench_env(conn, None, {}))

    def persist(rec: dict[str, Any]) -> None:
        with Store(db) as store:
            store.merge_state(run_id, journal=rec)

    OPENED = Opened(db, run_id)
    journal = Journal(persist, fsid=fsid, conn=conn.describe() if conn else {})
    journal.save()  # the process that holds the run, for restore's "is it still running" (restore.run_alive)
    return journal


def abandon(status: str, exc: BaseException) -> None:
    """The opened run ended without a result (Ctrl-C, an error before the engines finished): marked so, with why.
    What its journal still holds was removed by the pods' own end, or is left for `fathom cluster restore`."""
    global OPENED
    if OPENED is None:
        return
    why = "interrupted (Ctrl-C or SIGTERM)" if isinstance(exc, KeyboardInterrupt) else \
        (getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
    with Store(OPENED.db) as store:
        store.add_event(OPENED.run_id, "interrupt" if status == "interrupted" else "error", f"bench {why}")
        store.finish_run(OPENED.run_id, status)
    OPENED = None


def bench_env(conn: Connection | None, outcome: "EngineRun | None", extra: dict[str, Any]) -> dict[str, Any]:
    """What a reader needs to trust the numbers later. Paths and names only: no key material."""
    env: dict[str, Any] = {
        "command": ["fathom", *sys.argv[1:]],
        "host": os.uname().nodename,  # what socket.gethostname() returns, without importing socket
        "os": " ".join(os.uname()[i] for i in (0, 2, 4)),  # not platform.platform(): it runs `uname -p`
        "python": "%d.%d.%d" % sys.version_info[:3],  # platform.python_version(), without importing platform
        "cpus": os.cpu_count(),
        "connection": conn.describe() if conn else None,  # None: not a Ceph client (S3)
    }
    clients = getattr(outcome, "clients", None)
    if clients:
        env["clients"] = clients.get("setup")
    if outcome and outcome.start:
        env["engine"] = {"name": outcome.start.get("engine"), "version": outcome.start.get("version"),
                         "protocol": outcome.start.get("protocol"), "spec": outcome.start.get("spec")}
    env.update(extra)
    return env


@dataclass
class Measured:
    """One engine run as a stored point's parts (metrics, result, histograms, records, events)."""

    metrics: dict[str, Any] | None
    result: dict[str, Any] | None
    hists: dict[Any, str]
    intervals: list[dict[str, Any]]
    events: list[dict[str, Any]]
    started: float


def measured(outcome: "EngineRun | None", params: dict[str, Any], status: str, error: str | None = None,
             result_extra: dict[str, Any] | None = None) -> Measured:
    """What a point stores of an engine run, as a suite's point gets it from the same result (no server samples:
    a bench has no companions)."""
    from fathom.engines.fathom_engine import result_from_summary
    from fathom.results import usage

    metrics = result = None
    hists: dict[Any, str] = {}
    started = outcome.started if outcome and outcome.started else time.time()
    rows = getattr(outcome, "rows", None) or {}  # several engines: per-engine records beside the merged ones
    intervals = rows.get("intervals") or ([r for r in outcome.intervals if "ts" in r] if outcome else [])
    events = [{"kind": "error", "message": e.get("message", ""), "data": e, "ts": e.get("ts")}
              for e in (outcome.errors if outcome else [])]
    if outcome and outcome.summary:
        res = result_from_summary(outcome.summary, outcome.wall_s, outcome.user_s, outcome.sys_s)
        res.stopped_early = bool(outcome.summary.get("stopped_early")) or status != "done"
        res.stop_reason = outcome.summary.get("stop_reason") or error
        res.extra.update(result_extra or {})
        clients = getattr(outcome, "clients", None)
        if clients:  # per-host rows, clocks, start skew: what reports' client-host tables read
            res.extra.update({k: v for k, v in clients.items() if k != "setup"})
        metrics, hists = usage.point_metrics(res, params, [], started, time.time(), intervals, events)
        result = res.to_dict()
    hists.update(rows.get("histograms") or {})
    return Measured(metrics, result, hists, intervals, events, started)


def save_bench(db: str, name: str, workload: str, params: dict[str, Any], conn: Connection | None,
               outcome: "EngineRun | None", status: str, error: str | None = None,
               extra_env: dict[str, Any] | None = None, result_extra: dict[str, Any] | None = None) -> int:
    """Store one bench as a run with one point, through the same atomic path as suite points; returns the run id."""
    m = measured(outcome, params, status, error, result_extra)
    with Store(db) as store:
        env = bench_env(conn, outcome, extra_env or {})
        if OPENED is not None and OPENED.db == db:  # stored at its start: its pods are journaled there
            run_id = OPENED.run_id
            store.update_run(run_id, env=env)
        else:
            run_id = store.create_run(name, kind="bench", env=env)
        store.record_point(run_id, 0, workload, workload, "fathom-engine", params, status, metrics=m.metrics,
                           result=m.result, error=error, started=m.started, ended=time.time(),
                           intervals=m.intervals, histograms=m.hists, events=m.events)
        store.finish_run(run_id, status)
    return run_id


def check_db(db: str) -> None:
    """Fail before the load starts when the results store cannot be opened."""
    Store(db).close()


def merged_pct(summary: dict[str, Any]) -> dict[str, float] | None:
    """Percentiles over every op kind of a summary, from the merged histograms (None for a single kind)."""
    ops = [o for o in (summary.get("ops") or {}).values() if o.get("ops")]
    if len(ops) < 2:
        return None
    try:
        return hdr.merge_b64(o.get("hist") for o in ops)[1] or None
    except (ValueError, zlib.error):  # a histogram we cannot read leaves percentiles empty, never fails a bench
        return None
