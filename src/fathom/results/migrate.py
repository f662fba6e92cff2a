"""Upgrading an older results store: one function per schema step, run in one transaction by Store.
A step writes the values of its own schema (literals, not today's constants), so it means the same forever.

Each step changes what it must and nothing measured silently: where a stored figure or record
changes its meaning or its place, the run gets a `migration` event that says how.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from fathom.cluster.journal import SETTING, Entry



def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


def _update_to_2(db: sqlite3.Connection) -> None:
    """Schema 1 -> 2: many engines per point. Intervals, histograms and telemetry name their host
    (and engine instance); the histograms a point had become its merged ones (host '', instance -1)."""
    db.execute("ALTER TABLE intervals ADD COLUMN host TEXT NOT NULL DEFAULT 'local'")
    db.execute("ALTER TABLE intervals ADD COLUMN instance INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE telemetry ADD COLUMN host TEXT NOT NULL DEFAULT 'local'")
    # a primary key cannot be altered: a new table, the rows copied, the old one dropped
    db.execute("""CREATE TABLE histograms_v2 (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    op TEXT NOT NULL,                        -- read | write | ... ; 'all' = merged over the ops
    host TEXT NOT NULL DEFAULT 'local',      -- engine host; '' (with instance -1) = merged over every engine
    instance INTEGER NOT NULL DEFAULT 0,     -- engine instance on that host; -1 = merged over every engine
    hist TEXT NOT NULL,                      -- base64 HDR V2 deflate, values in ns
    PRIMARY KEY (point_id, op, host, instance)
)""")
    db.execute("INSERT INTO histograms_v2 (point_id, op, host, instance, hist) "
               "SELECT point_id, op, ?, ?, hist FROM histograms", ("", -1))  # store.MERGED_HOST, _INSTANCE
    db.execute("DROP TABLE histograms")
    db.execute("ALTER TABLE histograms_v2 RENAME TO histograms")


def _measured_cpu(db: sqlite3.Connection, point_id: int) -> tuple[float, float, float] | None:
    """(user s, sys s, seconds) of a stored point's measured intervals: CPU summed over engines, the
    longest engine's measured seconds; None when its intervals carry no CPU."""
    user = sys_ = 0.0
    seconds: dict[tuple[str, int], float] = {}
    seen = False
    for data, host, inst in db.execute("SELECT data_json, host, instance FROM intervals WHERE point_id = ? AND "
                                       "ramp = 0", (point_id,)):
        rec = json.loads(data)
        cpu = rec.get("cpu") or {}
        if cpu.get("user_s") is None or cpu.get("sys_s") is None:
            return None
        seen = True
        user, sys_ = user + float(cpu["user_s"]), sys_ + float(cpu["sys_s"])
        seconds[(host, inst)] = seconds.get((host, inst), 0.0) + float(rec.get("dt") or 0.0)
    return (user, sys_, max(seconds.values())) if seen else None


MIGRATED_3 = ("store schema 3: client CPU of this run's fathom-engine points (usr_cpu, sys_cpu, "
              "client_cpu_us_per_op) recomputed from their measured intervals (it was the whole process's, "
              "start-up, prefill, ramp and teardown included); client_ctx_per_op, which counted the same, cleared "
              "(the measured phase's was not stored); rgw_reconciled as stored compared GET/PUT counts only")


def _update_to_3(db: sqlite3.Connection) -> None:
    """Schema 2 -> 3: the measured phase is the base of client CPU per op (fathom-engine). Figures that can be
    recomputed from the stored intervals are; the one that cannot is cleared; each run changed says so in an
    event, so no stored number changes its meaning silently."""
    runs: set[int] = set()
    rows = db.execute("SELECT id, run_id, metrics_json FROM points WHERE engine = 'fathom-engine' AND "
                      "metrics_json IS NOT NULL").fetchall()
    for pid, run_id, mj in rows:
        m = json.loads(mj)
        if not any(m.get(k) is not None for k in ("usr_cpu", "client_cpu_us_per_op", "client_ctx_per_op")):
            continue
        got = _measured_cpu(db, pid)
        for k in ("usr_cpu", "sys_cpu", "client_cpu_us_per_op", "client_ctx_per_op"):
            m[k] = None
        if got is not None:
            user, sys_, seconds = got
            if seconds > 0:
                m["usr_cpu"], m["sys_cpu"] = 100.0 * user / seconds, 100.0 * sys_ / seconds
            if m.get("total_ios"):
                m["client_cpu_us_per_op"] = (user + sys_) / float(m["total_ios"]) * 1e6
        db.execute("UPDATE points SET metrics_json = ? WHERE id = ?", (_dumps(m), pid))
        runs.add(run_id)
    for run_id in sorted(runs):
        db.execute("INSERT INTO events (run_id, point_id, ts, kind, message, data_json) VALUES (?, NULL, ?, "
                   "'migration', ?, NULL)", (run_id, time.time(), MIGRATED_3))


# The keys of a run's attempt state, kept in its env by schema 3 and before
STATE_KEYS = ("data_tag", "attempts", "data_lost", "pools", "prefill", "prep_created", "prep_removed", "restore")


def _update_to_4(db: sqlite3.Connection) -> None:
    """Schema 3 -> 4: a run's attempt state (what a resumed attempt and `fathom cluster restore` need) moves out
    of its environment record into its own. Nothing measured changes."""
    db.execute("ALTER TABLE runs ADD COLUMN state_json TEXT")
    for run_id, ej in db.execute("SELECT id, env_json FROM runs").fetchall():
        env = json.loads(ej or "{}")
        state = {k: env.pop(k) for k in STATE_KEYS if k in env}
        if state:
            db.execute("UPDATE runs SET env_json = ?, state_json = ? WHERE id = ?", (_dumps(env), _dumps(state),
                                                                                    run_id))


def _studies_5(db: sqlite3.Connection, env: dict[str, Any], run_id: int) -> str | None:
    """The run's studies (fathom.report.studies) named in its env's `report`, found by the rule reports used until
    then: fs-apps points '<scenario>-<target>' with files, the rgw suite's s3 blocks, the studies' published rows."""
    scenarios, blocks = ("db", "logs", "office", "blob"), ("rep3-vs-ec22", "tls", "client-scaling")
    gains = {f"{op}_{figure}_gain_pct" for op in ("put", "get") for figure in ("throughput", "latency")}
    pub = "published_table" in env  # only an import's points carry published rows
    found: dict[str, None] = {}
    for wl, pj, rj in db.execute(f"SELECT workload, params_json, {'result_json' if pub else 'NULL'} FROM points "
                                 "WHERE run_id = ?", (run_id,)).fetchall():
        params, (scen, _, rest) = json.loads(pj or "{}"), wl.partition("-")
        row = json.loads(rj or "{}").get("published_row") or {}
        if (params.get("scenario") in scenarios) if pub else (scen in scenarios and rest and "nrfiles" in params):
            found["files-study"] = None
        if (gains <= set(row)) if pub else (wl in blocks and params.get("interface") == "s3"):
            found["rgw-study"] = None
    if not found or "report" in env:
        return None
    env["report"] = list(found)
    return f"its study sections ({', '.join(found)}) are named in its environment (report), as reports found them"


def _targets_5(db: sqlite3.Connection, env: dict[str, Any], run_id: int) -> str | None:
    """`target` keeps the engine's meaning: the env's (the cluster measured; not an import's, the 2014 table's
    column) becomes `cluster`, a fault's (its events, recovery windows) `daemon`."""
    what = []
    if "target" in env and "published_table" not in env and "cluster" not in env:
        env["cluster"] = env.pop("target")
        what.append("its environment's target (the cluster measured) is now cluster")
    for eid, kind, dj in db.execute("SELECT id, kind, data_json FROM events WHERE run_id = ? AND kind IN ('fault', "
                                    "'recovery') AND data_json IS NOT NULL", (run_id,)).fetchall():
        data = json.loads(dj)
        recs = [r for r in ([data] if kind == "fault" else data.get("windows") or []) if "target" in r]
        for r in recs:
            r["daemon"] = r.pop("target")
        if recs:
            db.execute("UPDATE events SET data_json = ? WHERE id = ?", (_dumps(data), eid))
            what.append("its faults name their daemon as daemon (was target)")
    return "; ".join(dict.fromkeys(what)) or None


def journal_from_legacy(state: dict[str, Any], run_id: int) -> dict[str, Any] | None:
    """A run's journal record from the two records stores of schema 4 and before kept (`prep_created`, the
    ledger of what prep made; `restore`, the settings record), or None when the run kept neither. The ledger
    kept no order across kinds: entries are put in the order a run makes them (profiles, pools, images, RGW
    placements and users, then settings), which is the order undoing them needs, reversed."""
    led, rest = state.get("prep_created") or {}, state.get("restore") or {}
    if not led and not rest:
        return None
    settings = [Entry(SETTING, e["what"], undo=e.get("command") or "", prior=e.get("prior"), wanted=e.get("wanted"),
                      undone=bool(e.get("restored")), error=e.get("error")) for e in rest.get("entries") or []]
    fsid = rest.get("fsid") if settings else None
    fsid = fsid or led.get("fsid")
    objects: list[Entry] = []
    if led.get("fsid") in (None, fsid):
        mine = f"fathom-{run_id}-"
        for kind, key in (("ec_profile", "ec_profiles"), ("pool", "pools"), ("image", "images"),
                          ("rgw_placement", "rgw_placements"), ("rgw_user", "rgw_users")):
            # a ledger that named no cluster: only what carries the run's name is surely the run's
            objects += [Entry(kind, str(w)) for w in led.get(key) or []
                        if led.get("fsid") is not None or str(w).startswith(mine)]
    return {"fsid": fsid, "conn": rest.get("conn") or {}, "disposable": bool(rest.get("disposable")),
            "host": rest.get("host"), "pid": rest.get("pid"), "moot": rest.get("moot"),
            "entries": [e.to_dict() for e in objects + settings]}


def _journal_5(state: dict[str, Any], run_id: int) -> str | None:
    """What prep made (`prep_created`, `prep_removed`) and the settings it changed (`restore`), two records until
    then, become the run's one undo journal (fathom.cluster.journal)."""
    if not any(k in state for k in ("prep_created", "prep_removed", "restore")):
        return None
    journal = journal_from_legacy(state, run_id)
    for k in ("prep_created", "prep_removed", "restore"):
        state.pop(k, None)
    if journal is not None:
        state["journal"] = journal
    return "what it made and the settings it changed on the cluster are in one undo journal (its state's journal)"


def _update_to_5(db: sqlite3.Connection) -> None:
    """Schema 4 -> 5, one meaning per word: each step changes a run's env or state (written once) and says how in
    its event."""
    for run_id, ej, sj in db.execute("SELECT id, env_json, state_json FROM runs").fetchall():
        env, state = json.loads(ej or "{}"), json.loads(sj or "{}")
        what = [w for step in (_studies_5, _targets_5) if (w := step(db, env, run_id))]  # a new step: its name here
        if what:
            db.execute("UPDATE runs SET env_json = ? WHERE id = ?", (_dumps(env), run_id))
        if moved := _journal_5(state, run_id):
            db.execute("UPDATE runs SET state_json = ? WHERE id = ?", (_dumps(state), run_id))
            what.append(moved)
        if what:
            db.execute("INSERT INTO events (run_id, point_id, ts, kind, message, data_json) VALUES (?, NULL, ?, "
                       "'migration', ?, NULL)", (run_id, time.time(), "store schema 5: " + "; ".join(what)))


def _update_to_6(db: sqlite3.Connection) -> None:
    """Schema 5 -> 6: the running point's seconds as they come (fathom.live.seconds), for `fathom watch` in another
    process. A new, empty table: nothing stored changes."""
    db.execute("""CREATE TABLE IF NOT EXISTS live_seconds (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    t REAL,
    data_json TEXT NOT NULL
)""")
    db.execute("CREATE INDEX IF NOT EXISTS live_seconds_run ON live_seconds(run_id, key)")


# UPDATES[n] takes a store at schema n-1 to schema n
UPDATES: dict[int, Callable[[sqlite3.Connection], None]] = {2: _update_to_2, 3: _update_to_3, 4: _update_to_4,
                                                            5: _update_to_5, 6: _update_to_6}
