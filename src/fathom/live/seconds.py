"""The running point's seconds in the results store, for `fathom watch` in another process.

A suite run (`fathom run`, `fathom slo`), with or without --metrics, writes each second of its running point as it
comes into the store's `live_seconds` table: the point's header when it starts (kind `point`), each merged interval
record as the live page has it (kind `second`, fathom.live.state.second: ops/s, MiB/s, errors, p50/p99 of the
merged HDR histograms), faults and steady state as they happen (kind `mark`). `fathom watch` reads them
(watch.py) and shows the running point as the run's own page does.

They are never a stored point: a point's rows are deleted in the transaction that stores it (Store.record_point),
again when the point ends here (a second still queued), the run's when it ends (Store.finish_run) and when an
attempt starts (a killed run's, before `--resume`). No reader of points or intervals sees them, and the file does
not grow by them.

The Progress hooks run on the engine's reader thread and only queue; one thread of ours computes the figures and
writes them, one small transaction per batch (normally one second), on a connection of its own (`synchronous =
NORMAL`: these rows need no fsync). It never stops the run: a write that fails is said once and the rest dropped.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fathom.live.state import mark_t, plotted, second
from fathom.results import store

MARKS = ("fault", "steady", "client_lost", "recovery")
BUSY_MS = 10_000  # a write of ours waits this long for the run's own (a point's commit): then that batch is dropped


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


class Writer:
    """A Progress observer that stores the running point's seconds (one per run attempt)."""

    def __init__(self, path: Path | str, run_id: int):
        self.path, self.run_id = Path(path).resolve(), run_id  # the run may change its directory
        self.q: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.cpu_s = 0.0  # this thread's CPU, computing and writing (thread_time): the cost, docs/live.md
        self.seconds = 0
        self._failed = False
        self._thread = threading.Thread(target=self._loop, name="fathom-live-seconds", daemon=True)
        self.q.put(("clear", None))  # a killed attempt's rows (the run resumed)
        self._thread.start()

    # ---- fathom.run.progress.Progress hooks: queue only --------------------------------
    def point_start(self, point: Any, n: int, total: int | None) -> None:  # noqa: ARG002
        self.q.put(("point", {"n": n, "key": point.key, "workload": point.workload, "label": point.label(),
                              "est_s": point.est_s, "offered_rate": point.params.get("rate"),
                              "ramp_s": float(point.params.get("ramp_time") or 0.0), "started": time.time()}))

    def interval(self, rec: dict[str, Any]) -> None:
        if plotted(rec):  # a partial last second is no second of the page
            self.q.put(("second", rec))

    def event(self, e: dict[str, Any]) -> None:
        if e.get("kind") in MARKS:
            self.q.put(("mark", e))

    def point_end(self, point: Any, status: str, metrics: Any, error: Any) -> None:  # noqa: ARG002
        self.q.put(("end", point.key))

    def close(self) -> None:
        self.q.put(("close", None))
        self._thread.join(timeout=BUSY_MS / 1000 + 5)

    # ---- the writer thread -----------------------------------------------------------
    def _loop(self) -> None:
        try:
            db = sqlite3.connect(str(self.path), timeout=BUSY_MS / 1000, isolation_level=None)
            db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            db.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            self._fail(exc)
            return
        key: str | None = None
        last_t: float | None = None
        ramp_s = 0.0
        done = False
        while not done:
            batch = [self.q.get()]
            while True:  # what queued meanwhile goes in the same transaction
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            c0 = time.thread_time()
            stmts: list[store.Statement] = []  # the SQL is the store's (it owns the table)
            for op, arg in batch:
                if op == "point":
                    key, last_t, ramp_s = arg["key"], None, arg["ramp_s"]
                    stmts.append(store.live_insert(self.run_id, key, "point", None, _dumps(arg)))
                elif op == "second" and key is not None:
                    sec = second(arg)
                    last_t = sec["t"]
                    self.seconds += 1
                    stmts.append(store.live_insert(self.run_id, key, "second", sec["t"], _dumps(sec)))
                elif op == "mark" and key is not None:
                    t = mark_t(arg, ramp_s, last_t)
                    stmts.append(store.live_insert(self.run_id, key, "mark", t, _dumps(
                        {"t": t, "kind": arg["kind"], "message": arg.get("message") or ""})))
                elif op == "end":
                    stmts.append(store.live_delete_point(self.run_id, arg))
                    key = None
                elif op in ("clear", "close"):
                    stmts.append(store.live_delete_run(self.run_id))
                    done = done or op == "close"
            if stmts and not self._failed:
                try:
                    db.execute("BEGIN IMMEDIATE")
                    for sql, args in stmts:
                        db.execute(sql, args)
                    db.execute("COMMIT")
                except sqlite3.Error as exc:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    self._fail(exc)
            self.cpu_s += time.thread_time() - c0
        db.close()

    def _fail(self, exc: BaseException) -> None:
        if not self._failed:
            print(f"  live view: the running point's seconds are not stored for `fathom watch`: {exc}",
                  file=sys.stderr, flush=True)
        self._failed = True


def rows(db: sqlite3.Connection, run_id: int, stored: set[str], keep: int) -> dict[str, Any] | None:
    """The running point as the page's state has it (LiveState.snapshot's `point`) from the live rows of a run,
    or None: no running point, or its rows are of a point already stored (deleted a moment later)."""
    got = store.live_rows(db, run_id)
    head = next((json.loads(r[2]) for r in reversed(got) if r[1] == "point" and r[0] not in stored), None)
    if head is None:
        return None
    mine = [(r[1], r[2]) for r in got if r[0] == head["key"]]
    series = [json.loads(d) for k, d in mine if k == "second"][-keep:]
    marks = [json.loads(d) for k, d in mine if k == "mark"]
    return {**head, "status": "running", "series": series, "marks": marks, "unissued_ops": None}
