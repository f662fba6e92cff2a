"""`fathom watch`: the live page for a run in a results store, from the store alone.

Another process may be writing the run (its points are committed as they end) or it has finished. The
store is opened read-only (SQLite `mode=ro`): in WAL mode a reader sees the last committed state and
never takes the write lock, so a watcher never blocks the writer, and any number of watchers can read.
The page shows what the store holds: the run's status and progress, the finished points (a curve), the
running point's seconds as the run stores them while it goes (table live_seconds, fathom.live.seconds) or else
the last finished point's per-second series with its faults, and the flags from the stored points (failed,
schedules not kept) and events.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from fathom.errors import FathomError
from fathom.live import seconds
from fathom.live.state import SERIES_KEEP, flag_of, plotted, point_row, schedule_flag, second, steady_mark
from fathom.results.store import Store, StoreBusyError

CACHE_S = 0.5  # one store read serves every watcher's request within this long


class ReadOnlyStore(Store):
    """The results store opened read-only: Store's readers, no schema set-up, no write lock ever taken."""

    def __init__(self, path: Path | str):  # noqa: D107 - Store's readers need only self.db, self.path
        self.path = Path(path)
        self.busy_timeout_s = 5.0
        if not self.path.is_file():
            raise FathomError(f"no results store at {self.path}", hint="pass --db with the file the run writes")
        try:
            self.db = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True, timeout=5.0,
                                      isolation_level=None, check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self._schema_version()
        except sqlite3.Error as exc:
            raise FathomError(f"cannot read results store {self.path}: {exc}") from None


class StoreView:
    """Snapshots of one run (or the newest, following new runs) for the page, cached briefly."""

    def __init__(self, db: Path | str, run: str | None):
        self.store = ReadOnlyStore(db)
        self.ref = run
        self.store.run(run or "latest")  # a run that is not there is an error now, not on the page
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._series: dict[int, list[dict[str, Any]]] = {}  # a finished point's seconds never change
        self._live_table = self.store.db.execute(  # a store of schema 5 or before has no running point's seconds
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'live_seconds'").fetchone() is not None

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < CACHE_S:
                return self._cached[1]
            try:
                snap = self._read()
            except (sqlite3.Error, StoreBusyError) as exc:  # a moment the file was in flux: the last one stands
                if self._cached is None:
                    raise
                snap = {**self._cached[1], "warning": f"store read failed: {exc}"}
            self._cached = (now, snap)
            return snap

    def _read(self) -> dict[str, Any]:
        st = self.store
        run = st.run(self.ref or "latest")
        pts = st.points(run.id)
        events = st.events(run.id)
        key_of = {p["id"]: p["key"] for p in pts}
        finished = [point_row(p["idx"] + 1, p["key"], p["workload"], _label(p), p["status"], p["metrics"], p["error"])
                    for p in pts]
        flags = [{"kind": p["status"], "what": f"point {p['status']}", "message": p["error"] or p["status"],
                  "point": p["key"], "ts": p["ended"]} for p in pts if p["status"] != "done"]
        flags += [f for p in pts if (f := schedule_flag(p["metrics"] or {}, p["key"], p["ended"])) is not None]
        flags += [f for e in events if (f := flag_of(e, key_of.get(e["point_id"]))) is not None]
        point = None
        running = seconds.rows(st.db, run.id, {p["key"] for p in pts}, SERIES_KEEP) \
            if run.status == "running" and self._live_table else None
        if running is not None:
            point = running
        elif pts:
            last = pts[-1]
            if last["id"] not in self._series:
                self._series[last["id"]] = [second(r) for r in st.timeline(last["id"])
                                            if r.get("t") is not None and plotted(r)]
            marks = [{"t": (e.get("data") or {}).get("t_s"), "kind": e["kind"], "message": e["message"]}
                     for e in events if e["point_id"] == last["id"] and e["kind"] in ("fault", "recovery")]
            ramp_s = float(last["params"].get("ramp_time") or 0.0)
            steady = steady_mark(last["metrics"], ramp_s)  # the stored point's, where the run's page had its own
            marks += [steady] if steady is not None else []
            point = {"n": last["idx"] + 1, "key": last["key"], "workload": last["workload"], "label": _label(last),
                     "status": last["status"], "series": self._series[last["id"]], "marks": marks,
                     "offered_rate": last["params"].get("rate"), "ramp_s": ramp_s,
                     "unissued_ops": (last["metrics"] or {}).get("unissued_ops")}
        planned = None if run.env.get("slo") else run.env.get("plan_points", len(pts) if run.kind != "suite" else None)
        snap_run = {"id": run.id, "name": run.name, "suite": run.suite, "kind": run.kind, "status": run.status,
                    "started": run.created, "planned": planned}
        now_at = (running["key"], running["series"][-1]["t"] if running["series"] else None,
                  len(running["marks"])) if running else None  # the series keeps 900 s: its last second moves
        version = hash((run.status, len(pts), len(events), run.finished, now_at))
        return {"source": "store", "version": version, "now": time.time(), "run": snap_run, "done": len(pts),
                "point": point, "finished": finished, "flags": flags,
                "lost_hosts": {}, "faults": sum(1 for e in events if e["kind"] == "fault")}

    def close(self) -> None:
        self.store.close()


def _label(p: dict[str, Any]) -> str:
    q = p["params"]
    parts = [p["workload"], str(q.get("rw") or ""), f"bs={q.get('bs')}" if q.get("bs") else "",
             f"iodepth={q.get('iodepth')}" if q.get("iodepth") is not None else "",
             f"rate={q['rate']:g}/s" if q.get("rate") is not None else ""]
    return " ".join(x for x in parts if x)
