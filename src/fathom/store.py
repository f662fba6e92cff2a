"""The results store: one SQLite file with every run, point, interval, histogram and sample.

Each write commits at once, so an interrupted run loses nothing that finished.
Secrets never reach this file: callers store Connection.describe(), not keys.

Runs are referred to by id (an integer), by name, or as "latest".
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from fathom import __version__
from fathom.errors import FathomError

DEFAULT_DB = Path("fathom-results.db")
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'suite',      -- suite | bench | import
    suite TEXT,                              -- suite name or file
    suite_yaml TEXT,                         -- the suite as run
    source TEXT,                             -- for imports: where the numbers came from, what is missing
    status TEXT NOT NULL DEFAULT 'running',  -- running | done | failed | interrupted
    created REAL NOT NULL,
    finished REAL,
    fathom_version TEXT,
    env_json TEXT,                           -- versions, host facts, cluster config, hygiene settings
    notes TEXT
);
CREATE TABLE IF NOT EXISTS points (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,                    -- order in the plan
    key TEXT NOT NULL,                       -- stable identity within the run (for resume)
    workload TEXT NOT NULL,
    engine TEXT NOT NULL,
    params_json TEXT NOT NULL,               -- rw, bs, iodepth, numjobs, ...
    status TEXT NOT NULL,                    -- done | failed | interrupted
    started REAL,
    ended REAL,
    metrics_json TEXT,                       -- METRIC_COLUMNS of fathom.model
    result_json TEXT,                        -- PointResult.to_dict()
    gate_json TEXT,                          -- health gate verdict before the point
    error TEXT,
    UNIQUE (run_id, key)
);
CREATE TABLE IF NOT EXISTS intervals (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    ts REAL NOT NULL,                        -- unix epoch seconds (engine clock)
    t REAL,                                  -- seconds since the point started
    ramp INTEGER NOT NULL DEFAULT 0,
    data_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS histograms (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    op TEXT NOT NULL,                        -- read | write | ... ; 'all' = merged
    hist TEXT NOT NULL,                      -- base64 HDR V2 deflate, values in ns
    PRIMARY KEY (point_id, op)
);
CREATE TABLE IF NOT EXISTS telemetry (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    ts REAL NOT NULL,                        -- unix epoch seconds, same clock as intervals
    source TEXT NOT NULL,                    -- daemon name (osd.0, mon.a, ...), 'host' or 'engine'
    pid INTEGER,
    cpu_pct REAL,                            -- % of one core since the previous sample
    rss_mib REAL,
    vctx_s REAL,                             -- voluntary context switches per second
    nvctx_s REAL,                            -- involuntary context switches per second
    data_json TEXT                           -- anything else (host memory, ...)
);
CREATE TABLE IF NOT EXISTS perf_counters (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    daemon TEXT NOT NULL,
    deltas_json TEXT NOT NULL,               -- counter -> delta over the point
    PRIMARY KEY (point_id, daemon)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    point_id INTEGER REFERENCES points(id) ON DELETE CASCADE,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,                      -- health | error | warning | gate | interrupt | ...
    message TEXT NOT NULL,
    data_json TEXT
);
CREATE INDEX IF NOT EXISTS points_run ON points(run_id, idx);
CREATE INDEX IF NOT EXISTS intervals_point ON intervals(point_id, ts);
CREATE INDEX IF NOT EXISTS telemetry_point ON telemetry(point_id, ts);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, ts);
"""


@dataclass
class Run:
    id: int
    name: str
    kind: str
    suite: str | None
    suite_yaml: str | None
    source: str | None
    status: str
    created: float
    finished: float | None
    fathom_version: str | None
    env: dict[str, Any]
    notes: str | None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


class Store:
    def __init__(self, path: Path | str = DEFAULT_DB):
        self.path = Path(path)
        try:
            self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise FathomError(f"cannot open results store {self.path}: {exc}") from None
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise FathomError(f"{self.path} is not a fathom results store: {exc}",
                              hint="pass --db with another file name") from None
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- runs ----------------------------------------------------------------
    def create_run(self, name: str, kind: str = "suite", suite: str | None = None, suite_yaml: str | None = None,
                   env: dict[str, Any] | None = None, source: str | None = None, status: str = "running") -> int:
        cur = self.db.execute(
            "INSERT INTO runs (name, kind, suite, suite_yaml, source, status, created, fathom_version, env_json) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (name, kind, suite, suite_yaml, source, status, time.time(), __version__, _dumps(env or {})),
        )
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def update_run(self, run_id: int, **fields: Any) -> None:
        allowed = {"name", "status", "finished", "env", "notes", "source", "suite_yaml"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update run fields {bad}")
        for k, v in fields.items():
            col, val = ("env_json", _dumps(v)) if k == "env" else (k, v)
            self.db.execute(f"UPDATE runs SET {col} = ? WHERE id = ?", (val, run_id))

    def finish_run(self, run_id: int, status: str) -> None:
        self.update_run(run_id, status=status, finished=time.time())

    def runs(self) -> list[Run]:
        return [self._run(r) for r in self.db.execute("SELECT * FROM runs ORDER BY id")]

    def run(self, ref: str | int) -> Run:
        """A run by id, name (the newest of that name) or 'latest'."""
        row = None
        s = str(ref)
        if s == "latest":
            row = self.db.execute("SELECT * FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        elif s.isdigit():
            row = self.db.execute("SELECT * FROM runs WHERE id = ?", (int(s),)).fetchone()
        if row is None and s != "latest":
            row = self.db.execute("SELECT * FROM runs WHERE name = ? ORDER BY id DESC LIMIT 1", (s,)).fetchone()
        if row is None:
            known = ", ".join(f"{r.id}:{r.name}" for r in self.runs()[-8:]) or "none"
            raise FathomError(f"no run {ref!r} in {self.path}", hint=f"runs there (id:name): {known}; see `fathom ls`")
        return self._run(row)

    @staticmethod
    def _run(r: sqlite3.Row) -> Run:
        return Run(id=r["id"], name=r["name"], kind=r["kind"], suite=r["suite"], suite_yaml=r["suite_yaml"],
                   source=r["source"], status=r["status"], created=r["created"], finished=r["finished"],
                   fathom_version=r["fathom_version"], env=json.loads(r["env_json"] or "{}"), notes=r["notes"])

    # ---- points --------------------------------------------------------------
    def save_point(self, run_id: int, idx: int, key: str, workload: str, engine: str, params: dict[str, Any],
                   status: str, metrics: dict[str, Any] | None = None, result: dict[str, Any] | None = None,
                   gate: dict[str, Any] | None = None, error: str | None = None, started: float | None = None,
                   ended: float | None = None) -> int:
        """Insert or replace the point `key` of a run (a resumed run overwrites an interrupted attempt)."""
        return self.record_point(run_id, idx, key, workload, engine, params, status, metrics=metrics, result=result,
                                 gate=gate, error=error, started=started, ended=ended)

    def points(self, run_id: int) -> list[dict[str, Any]]:
        """Points in plan order: id, idx, key, workload, engine, params, status, metrics, result, gate, ..."""
        out = []
        for r in self.db.execute("SELECT * FROM points WHERE run_id = ? ORDER BY idx", (run_id,)):
            out.append({
                "id": r["id"], "idx": r["idx"], "key": r["key"], "workload": r["workload"], "engine": r["engine"],
                "params": json.loads(r["params_json"]), "status": r["status"], "started": r["started"],
                "ended": r["ended"], "metrics": json.loads(r["metrics_json"]) if r["metrics_json"] else {},
                "result": json.loads(r["result_json"]) if r["result_json"] else None,
                "gate": json.loads(r["gate_json"]) if r["gate_json"] else None, "error": r["error"],
            })
        return out

    def record_point(self, run_id: int, idx: int, key: str, workload: str, engine: str, params: dict[str, Any],
                     status: str, metrics: dict[str, Any] | None = None, result: dict[str, Any] | None = None,
                     gate: dict[str, Any] | None = None, error: str | None = None, started: float | None = None,
                     ended: float | None = None, intervals: list[dict[str, Any]] = (),  # type: ignore[assignment]
                     histograms: dict[str, str] | None = None, telemetry: list[dict[str, Any]] = (),  # type: ignore[assignment]
                     perf_counters: dict[str, dict[str, Any]] | None = None,
                     events: list[dict[str, Any]] = ()) -> int:  # type: ignore[assignment]
        """A finished (or failed, or interrupted) point with all its detail, in one transaction.

        Either everything of the point is stored or nothing is, so a run killed at any
        moment never holds a point marked done without its intervals and telemetry.
        events: {kind, message, data?, ts?}.
        """
        cols = ("ts", "source", "pid", "cpu_pct", "rss_mib", "vctx_s", "nvctx_s")
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM points WHERE run_id = ? AND key = ?", (run_id, key))
            cur = self.db.execute(
                "INSERT INTO points (run_id, idx, key, workload, engine, params_json, status, started, ended, "
                "metrics_json, result_json, gate_json, error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, idx, key, workload, engine, _dumps(params), status, started, ended,
                 _dumps(metrics) if metrics is not None else None, _dumps(result) if result is not None else None,
                 _dumps(gate) if gate is not None else None, error),
            )
            pid = int(cur.lastrowid)  # type: ignore[arg-type]
            self.db.executemany("INSERT INTO intervals VALUES (?,?,?,?,?)",
                                [(pid, r["ts"], r.get("t"), int(bool(r.get("ramp"))), _dumps(r)) for r in intervals
                                 if r.get("ts") is not None])
            self.db.executemany("INSERT OR REPLACE INTO histograms VALUES (?,?,?)",
                                [(pid, op, h) for op, h in (histograms or {}).items() if h])
            self.db.executemany("INSERT INTO telemetry VALUES (?,?,?,?,?,?,?,?,?)",
                                [(pid, *(t.get(c) for c in cols),
                                  _dumps({k: v for k, v in t.items() if k not in cols})) for t in telemetry])
            self.db.executemany("INSERT OR REPLACE INTO perf_counters VALUES (?,?,?)",
                                [(pid, d, _dumps(v)) for d, v in (perf_counters or {}).items()])
            self.db.executemany(
                "INSERT INTO events (run_id, point_id, ts, kind, message, data_json) VALUES (?,?,?,?,?,?)",
                [(run_id, pid, e.get("ts") or time.time(), e["kind"], e["message"],
                  _dumps(e["data"]) if e.get("data") else None) for e in events])
        return pid

    def merge_env(self, run_id: int, **fields: Any) -> dict[str, Any]:
        """Add or replace keys of a run's env (versions, host, prep, telemetry cost, ...)."""
        env = self.run(run_id).env
        env.update(fields)
        self.update_run(run_id, env=env)
        return env

    def done_keys(self, run_id: int) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT key FROM points WHERE run_id = ? AND status = 'done'",
                                              (run_id,))}

    # ---- per-point detail ----------------------------------------------------
    def add_intervals(self, point_id: int, records: Iterable[dict[str, Any]]) -> None:
        rows = [(point_id, r["ts"], r.get("t"), int(bool(r.get("ramp"))), _dumps(r)) for r in records]
        self._many("INSERT INTO intervals VALUES (?,?,?,?,?)", rows)

    def add_histograms(self, point_id: int, hists: dict[str, str]) -> None:
        self._many("INSERT OR REPLACE INTO histograms VALUES (?,?,?)", [(point_id, op, h) for op, h in hists.items()])

    def add_telemetry(self, point_id: int, samples: Iterable[dict[str, Any]]) -> None:
        cols = ("ts", "source", "pid", "cpu_pct", "rss_mib", "vctx_s", "nvctx_s")
        rows = [(point_id, *(s.get(c) for c in cols),
                 _dumps({k: v for k, v in s.items() if k not in cols}) or None) for s in samples]
        self._many("INSERT INTO telemetry VALUES (?,?,?,?,?,?,?,?,?)", rows)

    def add_perf_counters(self, point_id: int, deltas: dict[str, dict[str, Any]]) -> None:
        self._many("INSERT OR REPLACE INTO perf_counters VALUES (?,?,?)",
                   [(point_id, d, _dumps(v)) for d, v in deltas.items()])

    def add_event(self, run_id: int, kind: str, message: str, point_id: int | None = None,
                  data: dict[str, Any] | None = None, ts: float | None = None) -> None:
        self.db.execute("INSERT INTO events (run_id, point_id, ts, kind, message, data_json) VALUES (?,?,?,?,?,?)",
                        (run_id, point_id, ts or time.time(), kind, message, _dumps(data) if data else None))

    def intervals(self, point_id: int) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in
                self.db.execute("SELECT data_json FROM intervals WHERE point_id = ? ORDER BY ts", (point_id,))]

    def histograms(self, point_id: int) -> dict[str, str]:
        return {r[0]: r[1] for r in self.db.execute("SELECT op, hist FROM histograms WHERE point_id = ?",
                                                    (point_id,))}

    def telemetry(self, point_id: int) -> list[dict[str, Any]]:
        out = []
        for r in self.db.execute("SELECT * FROM telemetry WHERE point_id = ? ORDER BY ts, source", (point_id,)):
            d = {k: r[k] for k in ("ts", "source", "pid", "cpu_pct", "rss_mib", "vctx_s", "nvctx_s")}
            d.update(json.loads(r["data_json"] or "{}"))
            out.append(d)
        return out

    def perf_counters(self, point_id: int) -> dict[str, dict[str, Any]]:
        return {r[0]: json.loads(r[1]) for r in
                self.db.execute("SELECT daemon, deltas_json FROM perf_counters WHERE point_id = ?", (point_id,))}

    def events(self, run_id: int) -> list[dict[str, Any]]:
        return [{"ts": r["ts"], "point_id": r["point_id"], "kind": r["kind"], "message": r["message"],
                 "data": json.loads(r["data_json"]) if r["data_json"] else None}
                for r in self.db.execute("SELECT * FROM events WHERE run_id = ? ORDER BY ts, id", (run_id,))]

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with self.db:  # one transaction, committed at once
            self.db.execute("BEGIN")
            self.db.executemany(sql, rows)
