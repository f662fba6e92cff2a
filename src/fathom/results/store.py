"""The results store: one SQLite file with every run, point, interval, histogram and sample.

Each write is one short transaction committed at once, so an interrupted run loses nothing
that finished. Any number of fathom processes (runs, benches, imports, reports, exports) may
share one file: it is in WAL mode (readers never wait for writers), and a writer waits for
another's transaction up to the busy timeout, then fails with a message that says so.
Secrets never reach this file: callers store Connection.describe(), not keys.

The file carries its schema version (table meta). Opening an older file upgrades it in one
transaction, one function per step (fathom.results.migrate); a newer file is refused.

Runs are referred to by id (an integer), by name, or as "latest".
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from fathom.version import __version__
from fathom.errors import FathomError
from fathom.results.migrate import UPDATES

DEFAULT_DB = Path("fathom-results.db")
SCHEMA_VERSION = 6
BUSY_TIMEOUT_S = 60.0  # how long a process waits for another's write transaction (they last milliseconds)
LOCAL_HOST = "local"  # host of an interval or sample that does not name one (one engine, on this host)
# The histograms of a point merged over every engine instance: what readers by (point_id, op) get.
MERGED_HOST = ""
MERGED_INSTANCE = -1

# Histograms given to record_point/add_histograms: op -> merged histogram, or
# (op, host, instance) -> the histogram of one engine instance.
Histograms = Mapping[str | tuple[str, str, int], str]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);  -- schema_version
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
    notes TEXT,
    state_json TEXT                          -- what the run's attempts leave for the next: data tag, attempts,
                                             -- data lost, what they made and changed (fathom.run.attempt)
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
    metrics_json TEXT,                       -- METRIC_COLUMNS of fathom.results.model
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
    data_json TEXT NOT NULL,                 -- the engine's interval record as sent
    host TEXT NOT NULL DEFAULT 'local',      -- host of the engine that sent it (schema 2)
    instance INTEGER NOT NULL DEFAULT 0      -- which engine instance on that host, from 0 (schema 2)
);
CREATE TABLE IF NOT EXISTS histograms (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    op TEXT NOT NULL,                        -- read | write | ... ; 'all' = merged over the ops
    host TEXT NOT NULL DEFAULT 'local',      -- engine host; '' (with instance -1) = merged over every engine
    instance INTEGER NOT NULL DEFAULT 0,     -- engine instance on that host; -1 = merged over every engine
    hist TEXT NOT NULL,                      -- base64 HDR V2 deflate, values in ns
    PRIMARY KEY (point_id, op, host, instance)
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
    data_json TEXT,                          -- anything else (host memory, ...)
    host TEXT NOT NULL DEFAULT 'local'       -- daemon or client host the sample is from (schema 2)
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
CREATE TABLE IF NOT EXISTS live_seconds (  -- the running point's seconds as they come (schema 6), for `fathom watch`
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,                       -- the running point's key (points.key once it is stored)
    kind TEXT NOT NULL,                      -- point (its header: n, label, ...; t NULL) | second | mark
    t REAL,                                  -- seconds since the point started
    data_json TEXT NOT NULL                  -- a second as the live page has it (fathom.live.state.second)
);                                           -- a point's rows go when it is stored, a run's when it ends
CREATE INDEX IF NOT EXISTS points_run ON points(run_id, idx);
CREATE INDEX IF NOT EXISTS live_seconds_run ON live_seconds(run_id, key);
CREATE INDEX IF NOT EXISTS intervals_point ON intervals(point_id, ts);
CREATE INDEX IF NOT EXISTS telemetry_point ON telemetry(point_id, ts);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, ts);
"""


assert sorted(UPDATES) == list(range(2, SCHEMA_VERSION + 1))


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
    state: dict[str, Any] = field(default_factory=dict)  # the attempts' record (fathom.run.attempt), not the env


class StoreBusyError(FathomError):
    """Another process held the results store's write lock for longer than the busy timeout."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


def _statements(script: str) -> list[str]:
    """The statements of a DDL script, to run inside a transaction (executescript would commit first)."""
    out, cur = [], ""
    for line in script.splitlines(keepends=True):
        cur += line
        if sqlite3.complete_statement(cur):
            out.append(cur.strip())
            cur = ""
    return out


def _is_busy(exc: BaseException) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (any extended code): another connection holds a lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _not_a_database(exc: BaseException) -> bool:
    """SQLITE_NOTADB or SQLITE_CORRUPT: the file is not (or no longer) an SQLite database."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (26, 11)
    return "not a database" in str(exc) or "malformed" in str(exc)


_T = TypeVar("_T")
_TEL_COLS = ("ts", "source", "pid", "cpu_pct", "rss_mib", "vctx_s", "nvctx_s", "host")


def _interval_rows(point_id: int, records: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(point_id, r["ts"], r.get("t"), int(bool(r.get("ramp"))), _dumps(r),
             LOCAL_HOST if r.get("host") is None else r["host"], int(r.get("instance") or 0))
            for r in records if r.get("ts") is not None]


def _telemetry_rows(point_id: int, samples: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(point_id, *(s.get(c) for c in _TEL_COLS[:-1]), s.get("host") or LOCAL_HOST,
             _dumps({k: v for k, v in s.items() if k not in _TEL_COLS})) for s in samples]


def _histogram_rows(point_id: int, hists: Histograms | None) -> list[tuple[Any, ...]]:
    """Rows of the histograms table. An op given only per engine instance also gets its merged
    histogram (the exact merge, counts add), so readers by (point_id, op) always find one."""
    merged: dict[str, str] = {}
    per: dict[tuple[str, str, int], str] = {}
    for k, h in (hists or {}).items():
        if not h:
            continue
        if isinstance(k, tuple):
            op, host, inst = str(k[0]), str(k[1]), int(k[2])
            if (host, inst) == (MERGED_HOST, MERGED_INSTANCE):
                raise ValueError(f"histogram key {k!r}: host {MERGED_HOST!r} instance {MERGED_INSTANCE} is the merged "
                                 f"histogram; give it as {op!r}")
            per[(op, host, inst)] = h
        else:
            merged[k] = h
    for op in sorted({k[0] for k in per} - set(merged)):
        hs = [h for k, h in per.items() if k[0] == op]
        if len(hs) == 1:
            merged[op] = hs[0]
        else:  # hdrh imported only when several engines' histograms need merging
            from fathom.results import hdr

            merged[op] = hdr.encode(hdr.merge(hs))
    return ([(point_id, op, MERGED_HOST, MERGED_INSTANCE, h) for op, h in merged.items()]
            + [(point_id, op, host, inst, h) for (op, host, inst), h in per.items()])


_INSERT_INTERVALS = "INSERT INTO intervals (point_id, ts, t, ramp, data_json, host, instance) VALUES (?,?,?,?,?,?,?)"
_INSERT_TELEMETRY = ("INSERT INTO telemetry (point_id, ts, source, pid, cpu_pct, rss_mib, vctx_s, nvctx_s, host, "
                     "data_json) VALUES (?,?,?,?,?,?,?,?,?,?)")
_INSERT_HISTOGRAMS = "INSERT OR REPLACE INTO histograms (point_id, op, host, instance, hist) VALUES (?,?,?,?,?)"
_INSERT_PERF = "INSERT OR REPLACE INTO perf_counters (point_id, daemon, deltas_json) VALUES (?,?,?)"
_INSERT_EVENT = "INSERT INTO events (run_id, point_id, ts, kind, message, data_json) VALUES (?,?,?,?,?,?)"


# ---- live_seconds: the running point's seconds (fathom.live.seconds) ----
# Its writer runs them on a connection of its own, in its own thread and transactions (batches of one second):
# these give it the statements, (sql, args), so the table's SQL stays with its schema.
Statement = tuple[str, tuple[Any, ...]]


def live_insert(run_id: int, key: str, kind: str, t: float | None, data_json: str) -> Statement:
    """A row of the running point `key`: kind point (its header, t None), second or mark."""
    return "INSERT INTO live_seconds (run_id, key, kind, t, data_json) VALUES (?,?,?,?,?)", (
        run_id, key, kind, t, data_json)


def live_delete_point(run_id: int, key: str) -> Statement:
    """The rows of one point: it is stored, or it ended."""
    return "DELETE FROM live_seconds WHERE run_id = ? AND key = ?", (run_id, key)


def live_delete_run(run_id: int) -> Statement:
    """Every row of a run: it ended, or a new attempt of it starts."""
    return "DELETE FROM live_seconds WHERE run_id = ?", (run_id,)


def live_rows(db: sqlite3.Connection, run_id: int) -> list[tuple[str, str, str]]:
    """(key, kind, data_json) of a run's live rows in the order they were written."""
    return [(r[0], r[1], r[2]) for r in db.execute(
        "SELECT key, kind, data_json FROM live_seconds WHERE run_id = ? ORDER BY rowid", (run_id,))]


class Store:
    def __init__(self, path: Path | str = DEFAULT_DB, busy_timeout_s: float = BUSY_TIMEOUT_S, read_only: bool = False):
        """read_only: SQLite's mode=ro, for readers beside a running writer (fathom.api, a notebook): it never
        creates, upgrades or writes the file, and in WAL mode it never blocks the writer nor waits for it."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        try:
            if read_only:
                if not self.path.is_file():
                    raise FathomError(f"no results store at {self.path}",
                                      hint="name a file `fathom run` wrote (--db; default fathom-results.db)")
                self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                          timeout=busy_timeout_s, isolation_level=None)
            else:  # any thread may write (a transport's undo journal, on the hosts' loop): one at a time
                self.db = sqlite3.connect(str(self.path), timeout=busy_timeout_s, isolation_level=None,
                                          check_same_thread=False)
        except sqlite3.Error as exc:
            raise FathomError(f"cannot open results store {self.path}: {exc}", hint="pass --db with another file") \
                from None
        self.db.row_factory = sqlite3.Row
        try:
            self._setup_read_only() if read_only else self._setup()
        except BaseException:
            self.db.close()
            raise

    def _setup_read_only(self) -> None:
        try:
            self.db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            version = self._schema_version()
        except sqlite3.Error as exc:
            if _not_a_database(exc):
                raise self._not_ours(str(exc)) from None
            raise FathomError(f"cannot read results store {self.path}: {exc}",
                              hint="check the file and its directory are readable") from None
        if version != SCHEMA_VERSION:  # an upgrade writes; a reader must not
            raise FathomError(f"results store {self.path} has schema version {version}; this fathom reads "
                              f"{SCHEMA_VERSION} and a read-only open does not upgrade it",
                              hint=f"upgrade it once by opening it for writing (e.g. `fathom ls --db {self.path}`)")

    def _setup(self) -> None:
        t0 = time.monotonic()
        try:
            self.db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            self.db.execute("PRAGMA foreign_keys = ON")
            # Switching to WAL fails at once, without the busy handler, while another connection writes
            # in rollback mode (the first process switching a new file to WAL does, for a moment):
            # retry until the busy timeout. A store already in WAL answers at once.
            self._retry_busy(lambda: self.db.execute("PRAGMA journal_mode = WAL").fetchone(), t0)
            if self._schema_version() == SCHEMA_VERSION:
                return
            # create or upgrade under the write lock, looking again: another process may have done it meanwhile
            with self._write(t0):
                version = self._schema_version()
                if version is None:
                    for stmt in _statements(SCHEMA):
                        self.db.execute(stmt)
                else:
                    for n in range(version + 1, SCHEMA_VERSION + 1):
                        UPDATES[n](self.db)
                self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                                (str(SCHEMA_VERSION),))
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise self._busy(t0) from None
            if _not_a_database(exc):
                raise self._not_ours(str(exc)) from None
            raise FathomError(f"cannot use results store {self.path}: {exc}",
                              hint="check the file and its directory are writable, or pass --db with another file") \
                from None

    def _schema_version(self) -> int | None:
        """The file's schema version; None for an empty file. Refuses other files and newer schemas."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if not tables:
            return None
        if not {"meta", "runs", "points"} <= tables:
            raise self._not_ours(f"an SQLite database without fathom's tables (it has {', '.join(sorted(tables))})")
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:  # schema 1 wrote its version after its tables
            return 1
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise self._not_ours(f"schema version {row[0]!r} is not a number") from None
        if version > SCHEMA_VERSION:
            raise FathomError(f"results store {self.path} has schema version {version}, newer than this fathom "
                              f"{__version__} reads (schema version {SCHEMA_VERSION})",
                              hint="upgrade fathom to read it, or pass --db with another file")
        return version

    def _not_ours(self, why: str) -> FathomError:
        return FathomError(f"{self.path} is not a fathom results store: {why}", hint="pass --db with another file name")

    def _busy(self, t0: float) -> StoreBusyError:
        return StoreBusyError(
            f"results store {self.path} is busy: another fathom process held it for {time.monotonic() - t0:.1f} s "
            f"(fathom waits up to {self.busy_timeout_s:g} s for another's write to finish)",
            hint=f"let the other process finish (`fuser {self.path}` names it), or pass --db with another file")

    def _retry_busy(self, fn: Callable[[], _T], t0: float) -> _T:
        delay = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() - t0 + delay > self.busy_timeout_s:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 0.05)

    @contextmanager
    def _write(self, t0: float | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction: waits for the write lock up to the busy timeout, commits at the end,
        rolls back on any error. Keep them short: every other writer of the file waits meanwhile."""
        t0 = time.monotonic() if t0 is None else t0
        with self._lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_busy(exc):
                    raise self._busy(t0) from None
                raise
            try:
                yield self.db
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """A query's rows, read at once (an open cursor would keep a read snapshot open)."""
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise self._busy(time.monotonic() - self.busy_timeout_s) from None
            raise

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- runs ----------------------------------------------------------------
    def create_run(self, name: str, kind: str = "suite", suite: str | None = None, suite_yaml: str | None = None,
                   env: dict[str, Any] | None = None, source: str | None = None, status: str = "running") -> int:
        with self._write() as db:
            cur = db.execute(
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
        if not fields:
            return
        cols = [("env_json", _dumps(v)) if k == "env" else (k, v) for k, v in fields.items()]
        with self._write() as db:
            db.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c, _ in cols)} WHERE id = ?",
                       (*(v for _, v in cols), run_id))

    def finish_run(self, run_id: int, status: str) -> None:
        with self._write() as db:  # the running point's live seconds go with the run's end (fathom.live.seconds)
            db.execute("UPDATE runs SET status = ?, finished = ? WHERE id = ?", (status, time.time(), run_id))
            db.execute(*live_delete_run(run_id))

    def runs(self) -> list[Run]:
        return [self._run(r) for r in self._rows("SELECT * FROM runs ORDER BY id")]

    def run(self, ref: str | int) -> Run:
        """A run by id, name (the newest of that name) or 'latest' (the newest, but for a baseline run that a
        later-numbered run's `baseline:` made: the run it belongs to stands for it)."""
        rows: list[sqlite3.Row] = []
        s = str(ref)
        if s == "latest":  # not a baseline a suite's run made for itself (`baseline:`): that run is the latest
            rows = self._rows("SELECT * FROM runs WHERE id NOT IN (SELECT json_extract(env_json, '$.baseline_run') "
                              "FROM runs WHERE json_extract(env_json, '$.baseline_run') IS NOT NULL) "
                              "ORDER BY id DESC LIMIT 1")
        elif s.isdigit():
            rows = self._rows("SELECT * FROM runs WHERE id = ?", (int(s),))
        if not rows and s != "latest":
            rows = self._rows("SELECT * FROM runs WHERE name = ? ORDER BY id DESC LIMIT 1", (s,))
        if not rows:
            known = ", ".join(f"{r.id}:{r.name}" for r in self.runs()[-8:]) or "none"
            raise FathomError(f"no run {ref!r} in {self.path}", hint=f"runs there (id:name): {known}; see `fathom ls`")
        return self._run(rows[0])

    @staticmethod
    def _run(r: sqlite3.Row) -> Run:
        return Run(id=r["id"], name=r["name"], kind=r["kind"], suite=r["suite"], suite_yaml=r["suite_yaml"],
                   source=r["source"], status=r["status"], created=r["created"], finished=r["finished"],
                   fathom_version=r["fathom_version"], env=json.loads(r["env_json"] or "{}"), notes=r["notes"],
                   state=json.loads(r["state_json"] or "{}"))

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
        for r in self._rows("SELECT * FROM points WHERE run_id = ? ORDER BY idx", (run_id,)):
            out.append({
                "id": r["id"], "idx": r["idx"], "key": r["key"], "workload": r["workload"], "engine": r["engine"],
                "params": json.loads(r["params_json"]), "status": r["status"], "started": r["started"],
                "ended": r["ended"], "metrics": json.loads(r["metrics_json"]) if r["metrics_json"] else {},
                "result": json.loads(r["result_json"]) if r["result_json"] else None,
                "gate": json.loads(r["gate_json"]) if r["gate_json"] else None, "error": r["error"],
            })
        return out

    def done_points(self, run_ids: Iterable[int], keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The completed points of many runs, lean (run_id, workload, params, metrics; no results, intervals or
        histograms): what a history over a thousand runs needs, in one query per 500 runs. Points with the
        same params share one dict: read them, do not change them. keys: only these metrics, taken out of the
        stored JSON by SQLite (a real point's metrics are about 2 KB: parsing them all in Python costs a
        thousand runs' history seconds and hundreds of MiB)."""
        ids = list(run_ids)
        out: list[dict[str, Any]] = []
        params: dict[str, dict[str, Any]] = {}  # runs of one suite repeat their points' params: parse each once
        wanted = [k for k in dict.fromkeys(keys or ()) if re.fullmatch(r"[a-z][a-z0-9_]*", k)]
        cols = ", ".join(f"json_extract(metrics_json, '$.{k}') AS m{i}" for i, k in enumerate(wanted))
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = self._rows(f"SELECT run_id, workload, params_json, {cols or 'metrics_json'} FROM points "
                              f"WHERE status = 'done' AND run_id IN ({','.join('?' * len(chunk))}) "
                              "ORDER BY run_id, idx", tuple(chunk))
            for r in rows:
                if keys is None:
                    metrics = json.loads(r["metrics_json"]) if r["metrics_json"] else {}
                else:
                    metrics = {k: r[f"m{j}"] for j, k in enumerate(wanted) if r[f"m{j}"] is not None}
                out.append({"run_id": r["run_id"], "workload": r["workload"],
                            "params": params.get(r["params_json"]) or params.setdefault(r["params_json"],
                                                                                       json.loads(r["params_json"])),
                            "metrics": metrics})
        return out

    def record_point(self, run_id: int, idx: int, key: str, workload: str, engine: str, params: dict[str, Any],
                     status: str, metrics: dict[str, Any] | None = None, result: dict[str, Any] | None = None,
                     gate: dict[str, Any] | None = None, error: str | None = None, started: float | None = None,
                     ended: float | None = None, intervals: Iterable[dict[str, Any]] = (),
                     histograms: Histograms | None = None, telemetry: Iterable[dict[str, Any]] = (),
                     perf_counters: dict[str, dict[str, Any]] | None = None,
                     events: Iterable[dict[str, Any]] = ()) -> int:
        """A finished (or failed, or interrupted) point with all its detail, in one transaction.

        Either everything of the point is stored or nothing is, so a run killed at any
        moment never holds a point marked done without its intervals and telemetry.
        intervals: engine records; their `host` and `instance` keys (default 'local', 0) name the engine.
        histograms: op -> merged histogram, and/or (op, host, instance) -> one engine instance's.
        telemetry: samples; a `host` key (default 'local') names the host of the daemon or client.
        events: {kind, message, data?, ts?}.
        """
        # rows built (and histograms merged) before taking the write lock, to keep the transaction short
        hist_rows = _histogram_rows(0, histograms)
        interval_rows = _interval_rows(0, intervals)
        telemetry_rows = _telemetry_rows(0, telemetry)
        perf_rows = [(0, d, _dumps(v)) for d, v in (perf_counters or {}).items()]
        now = time.time()
        event_rows = [(run_id, 0, e.get("ts") or now, e["kind"], e["message"],
                       _dumps(e["data"]) if e.get("data") else None) for e in events]
        with self._write() as db:
            db.execute("DELETE FROM points WHERE run_id = ? AND key = ?", (run_id, key))
            db.execute(*live_delete_point(run_id, key))  # stored now
            cur = db.execute(
                "INSERT INTO points (run_id, idx, key, workload, engine, params_json, status, started, ended, "
                "metrics_json, result_json, gate_json, error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, idx, key, workload, engine, _dumps(params), status, started, ended,
                 _dumps(metrics) if metrics is not None else None, _dumps(result) if result is not None else None,
                 _dumps(gate) if gate is not None else None, error),
            )
            pid = int(cur.lastrowid)  # type: ignore[arg-type]
            db.executemany(_INSERT_INTERVALS, [(pid, *r[1:]) for r in interval_rows])
            db.executemany(_INSERT_HISTOGRAMS, [(pid, *r[1:]) for r in hist_rows])
            db.executemany(_INSERT_TELEMETRY, [(pid, *r[1:]) for r in telemetry_rows])
            db.executemany(_INSERT_PERF, [(pid, *r[1:]) for r in perf_rows])
            db.executemany(_INSERT_EVENT, [(r[0], pid, *r[2:]) for r in event_rows])
        return pid

    def merge_env(self, run_id: int, **fields: Any) -> dict[str, Any]:
        """Add or replace keys of a run's env (versions, host, prep, telemetry cost, ...)."""
        return self._merge(run_id, "env_json", fields)

    def merge_state(self, run_id: int, **fields: Any) -> dict[str, Any]:
        """Add or replace keys of a run's attempt state (fathom.run.attempt)."""
        return self._merge(run_id, "state_json", fields)

    def _merge(self, run_id: int, column: str, fields: dict[str, Any]) -> dict[str, Any]:
        with self._write() as db:  # read and write in one transaction: no other writer's keys are lost
            row = db.execute(f"SELECT {column} FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise FathomError(f"no run {run_id} in {self.path}")
            doc = json.loads(row[0] or "{}")
            doc.update(fields)
            db.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (_dumps(doc), run_id))
        return doc

    def done_keys(self, run_id: int) -> set[str]:
        return {r[0] for r in self._rows("SELECT key FROM points WHERE run_id = ? AND status = 'done'", (run_id,))}

    # ---- per-point detail ----------------------------------------------------
    def add_intervals(self, point_id: int, records: Iterable[dict[str, Any]]) -> None:
        self._many(_INSERT_INTERVALS, _interval_rows(point_id, records))

    def add_histograms(self, point_id: int, hists: Histograms) -> None:
        self._many(_INSERT_HISTOGRAMS, _histogram_rows(point_id, hists))

    def add_telemetry(self, point_id: int, samples: Iterable[dict[str, Any]]) -> None:
        self._many(_INSERT_TELEMETRY, _telemetry_rows(point_id, samples))

    def add_perf_counters(self, point_id: int, deltas: dict[str, dict[str, Any]]) -> None:
        self._many(_INSERT_PERF, [(point_id, d, _dumps(v)) for d, v in deltas.items()])

    def add_event(self, run_id: int, kind: str, message: str, point_id: int | None = None,
                  data: dict[str, Any] | None = None, ts: float | None = None) -> None:
        self._many(_INSERT_EVENT,
                   [(run_id, point_id, ts or time.time(), kind, message, _dumps(data) if data else None)])

    def intervals(self, point_id: int, host: str | None = None, instance: int | None = None) -> list[dict[str, Any]]:
        """The interval records of a point (of every engine, or of one host and/or instance), by time."""
        sql, args = "SELECT data_json FROM intervals WHERE point_id = ?", [point_id]
        if host is not None:
            sql, args = sql + " AND host = ?", [*args, host]
        if instance is not None:
            sql, args = sql + " AND instance = ?", [*args, instance]
        return [json.loads(r[0]) for r in self._rows(sql + " ORDER BY ts, host, instance", tuple(args))]

    def timeline(self, point_id: int) -> list[dict[str, Any]]:
        """The point's intervals as one stream: merged over its engines when it had several (host ''),
        else its one engine's."""
        merged = self.intervals(point_id, host=MERGED_HOST)
        return merged or self.intervals(point_id)

    def histograms(self, point_id: int) -> dict[str, str]:
        """op -> the point's histogram merged over every engine instance."""
        return {r[0]: r[1] for r in self._rows("SELECT op, hist FROM histograms WHERE point_id = ? AND host = ? "
                                                "AND instance = ?", (point_id, MERGED_HOST, MERGED_INSTANCE))}

    def histograms_by_instance(self, point_id: int) -> dict[tuple[str, str, int], str]:
        """(op, host, instance) -> one engine instance's histogram (empty when only merged ones were given)."""
        return {(r[0], r[1], r[2]): r[3] for r in
                self._rows("SELECT op, host, instance, hist FROM histograms WHERE point_id = ? "
                           "AND NOT (host = ? AND instance = ?) ORDER BY op, host, instance",
                           (point_id, MERGED_HOST, MERGED_INSTANCE))}

    def telemetry(self, point_id: int) -> list[dict[str, Any]]:
        out = []
        for r in self._rows("SELECT * FROM telemetry WHERE point_id = ? ORDER BY ts, host, source", (point_id,)):
            d = {k: r[k] for k in _TEL_COLS}
            d.update(json.loads(r["data_json"] or "{}"))
            out.append(d)
        return out

    def perf_counters(self, point_id: int) -> dict[str, dict[str, Any]]:
        return {r[0]: json.loads(r[1]) for r in
                self._rows("SELECT daemon, deltas_json FROM perf_counters WHERE point_id = ?", (point_id,))}

    def events(self, run_id: int) -> list[dict[str, Any]]:
        return [{"ts": r["ts"], "point_id": r["point_id"], "kind": r["kind"], "message": r["message"],
                 "data": json.loads(r["data_json"]) if r["data_json"] else None}
                for r in self._rows("SELECT * FROM events WHERE run_id = ? ORDER BY ts, id", (run_id,))]

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with self._write() as db:
            db.executemany(sql, rows)
