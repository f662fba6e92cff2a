"""The results store: a point and its detail in one transaction; env merging; resume keys; many engines per
point; schema upgrades; many processes on one file."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import fathom
from fathom.results import hdr
from fathom.errors import FathomError
from fathom.results.store import (
    LOCAL_HOST,
    MERGED_HOST,
    MERGED_INSTANCE,
    SCHEMA_VERSION,
    Store,
    StoreBusyError,
)

DATA = Path(__file__).with_name("data")


def test_record_point_is_all_or_nothing(tmp_path):
    st = Store(tmp_path / "s.db")
    run = st.create_run("r", suite="x", suite_yaml="name: x\n", env={"quick": True})
    pid = st.record_point(run, 0, "a/iodepth=1", "a", "fio", {"iodepth": 1}, "done", metrics={"iops": 5.0},
                          intervals=[{"ts": 1.0, "t": 1.0, "ramp": True}, {"ts": 2.0, "t": 2.0}],
                          histograms={"read": "HISTFAAA"}, telemetry=[{"ts": 1.5, "source": "osd.0", "cpu_pct": 3.0,
                                                                       "kind": "osd", "cores": 0.03}],
                          perf_counters={"osd.0": {"osd.op_r": 4}}, events=[{"kind": "health", "message": "ok"}])
    assert st.intervals(pid)[0]["ramp"] is True and len(st.intervals(pid)) == 2
    assert st.histograms(pid) == {"read": "HISTFAAA"}
    assert st.telemetry(pid)[0]["cores"] == 0.03 and st.perf_counters(pid) == {"osd.0": {"osd.op_r": 4}}
    assert st.events(run)[0]["point_id"] == pid
    assert st.done_keys(run) == {"a/iodepth=1"}
    # a failure half way through leaves nothing of the point behind
    with pytest.raises(sqlite3.Error):
        st.record_point(run, 1, "b", "b", "fio", {}, "done", intervals=[{"ts": 1.0}],
                        telemetry=[{"source": "osd.0"}])  # no timestamp: NOT NULL violated
    assert [p["key"] for p in st.points(run)] == ["a/iodepth=1"]
    # replacing an interrupted attempt keeps one row per key
    st.record_point(run, 1, "b", "b", "fio", {}, "interrupted")
    st.record_point(run, 1, "b", "b", "fio", {}, "done", metrics={"iops": 1.0})
    assert [(p["key"], p["status"]) for p in st.points(run)] == [("a/iodepth=1", "done"), ("b", "done")]
    st.close()


def test_merge_env(tmp_path):
    with Store(tmp_path / "s.db") as st:
        run = st.create_run("r", env={"quick": True})
        st.merge_env(run, host={"cores": 2})
        st.merge_env(run, telemetry_cost={"cost_pct_of_one_core": 0.5})
        assert st.run(run).env == {"quick": True, "host": {"cores": 2},
                                   "telemetry_cost": {"cost_pct_of_one_core": 0.5}}


# ---- many engines per point ------------------------------------------------------------------

def hist(values_ns: list[int]) -> str:
    h = hdr.new()
    for v in values_ns:
        h.record_value(v)
    return hdr.encode(h)


def test_intervals_histograms_and_telemetry_name_their_engine_and_host(tmp_path):
    with Store(tmp_path / "s.db") as st:
        run = st.create_run("r")
        a0, a1, b0 = hist([1000, 2000]), hist([3000]), hist([4000, 5000, 6000])
        pid = st.record_point(
            run, 0, "p", "w", "fathom-engine", {}, "done",
            intervals=[{"ts": 1.0, "iops": 1.0, "host": "a", "instance": 0},
                       {"ts": 1.0, "iops": 2.0, "host": "a", "instance": 1},
                       {"ts": 1.0, "iops": 3.0, "host": "b"}, {"ts": 2.0, "iops": 4.0}],
            histograms={("read", "a", 0): a0, ("read", "a", 1): a1, ("read", "b", 0): b0, ("write", "a", 0): a1,
                        "all": b0},
            telemetry=[{"ts": 1.0, "source": "osd.0", "host": "server-1", "cpu_pct": 5.0},
                       {"ts": 1.0, "source": "engine", "cpu_pct": 7.0}])
        raw = st.db.execute("SELECT host, instance FROM intervals WHERE point_id = ? ORDER BY rowid", (pid,)).fetchall()
        assert [tuple(r) for r in raw] == [("a", 0), ("a", 1), ("b", 0), (LOCAL_HOST, 0)]
        assert [r["iops"] for r in st.intervals(pid, host="a")] == [1.0, 2.0]
        assert [r["iops"] for r in st.intervals(pid, host="a", instance=1)] == [2.0]
        assert len(st.intervals(pid)) == 4
        # readers by (point_id, op) get the merged histograms: merged here over the engines (counts add),
        # a single engine's copied, and one given merged kept as given
        merged = st.histograms(pid)
        assert set(merged) == {"read", "write", "all"}
        assert hdr.count(merged["read"]) == 6 and hdr.max_ns(merged["read"]) == hdr.max_ns(b0)
        assert merged["write"] == a1 and merged["all"] == b0
        assert st.histograms_by_instance(pid) == {("read", "a", 0): a0, ("read", "a", 1): a1, ("read", "b", 0): b0,
                                                  ("write", "a", 0): a1}
        assert [(t["source"], t["host"]) for t in st.telemetry(pid)] == [("engine", LOCAL_HOST), ("osd.0", "server-1")]
        # the merged histogram has its own key: an engine cannot be given it
        with pytest.raises(ValueError, match="merged"):
            st.record_point(run, 1, "q", "w", "fathom-engine", {}, "done",
                            histograms={("read", MERGED_HOST, MERGED_INSTANCE): a0})
        # add_histograms (the bench path) takes the same forms
        pid2 = st.record_point(run, 1, "q", "w", "fathom-engine", {}, "done")
        st.add_histograms(pid2, {("read", "a", 0): a0})
        assert st.histograms(pid2) == {"read": a0} and st.histograms_by_instance(pid2) == {("read", "a", 0): a0}


# ---- schema versions -----------------------------------------------------------------------------

def schema_of(path: Path) -> dict[str, Any]:
    db = sqlite3.connect(path)
    tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    out = {t: [tuple(r) for r in db.execute(f"PRAGMA table_info({t})")] for t in tables}
    out["indexes"] = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'"))
    db.close()
    return out


def test_schema_1_store_is_upgraded_with_its_data(tmp_path):
    # written by the schema 1 code (commit 0d9d53f), see tests/data/make_results_v1.py
    path = tmp_path / "v1.db"
    shutil.copyfile(DATA / "results-v1.db", path)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
        v1_hists = db.execute("SELECT point_id, op, hist FROM histograms ORDER BY point_id, op").fetchall()
    with Store(path) as st:
        assert st.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert [(r.name, r.kind, r.status) for r in st.runs()] == [("v1-suite", "suite", "done"),
                                                                   ("v1-bench", "bench", "done")]
        suite, bench = st.runs()
        assert suite.env == {"host": {"cores": 2}} and suite.suite_yaml == "name: quick\n"
        pts = st.points(suite.id)
        assert [(p["key"], p["metrics"]["iops"], p["params"]["iodepth"]) for p in pts] == [
            ("randread4k/iodepth=1", 1000.0, 1), ("randread4k/iodepth=4", 4000.0, 4)]
        p1 = pts[1]
        assert st.intervals(p1["id"]) == [{"ts": 1002.0, "t": 1.0, "ramp": True, "iops": 3600.0},
                                          {"ts": 1003.0, "t": 2.0, "iops": 4000.0}]
        assert [(t["source"], t["host"], t["cores"]) for t in st.telemetry(p1["id"])] == [("osd.0", LOCAL_HOST, 0.3)]
        assert st.perf_counters(p1["id"]) == {"osd.0": {"osd.op_r": 400}}
        assert [e["message"] for e in st.events(suite.id)] == ["ok", "ok"]
        # every histogram of schema 1 is now the merged one of its point, unchanged
        assert sorted((pid, op, h) for pid in (1, 2, 3) for op, h in st.histograms(pid).items()) == \
            sorted(tuple(r) for r in v1_hists)
        assert hdr.percentiles(st.histograms(p1["id"])["read"])["p50"] == pytest.approx(800_000, rel=0.001)
        assert st.histograms_by_instance(p1["id"]) == {}
        bpt = st.points(bench.id)[0]
        assert set(st.histograms(bpt["id"])) == {"read", "write", "all"} and st.intervals(bpt["id"])[0]["iops"] == 320.0
        # and it takes schema 2 data from now on
        pid = st.record_point(suite.id, 2, "new", "randread4k", "fathom-engine", {}, "done",
                              intervals=[{"ts": 5.0, "host": "b", "instance": 1}], histograms={("read", "b", 1): "H"})
        assert st.histograms(pid) == {"read": "H"} and st.intervals(pid, host="b", instance=1) == [
            {"ts": 5.0, "host": "b", "instance": 1}]
    # readers above the store take it as they did
    from fathom.analysis.data import load_run
    from fathom.results.export import rows

    with Store(path) as st:
        assert len(load_run(st, "v1-suite").points) == 3
        assert len(rows(st, suite.id)) == 3
    # an upgraded store and a new one have the same tables, columns, keys and indexes
    with Store(tmp_path / "new.db"):
        pass
    assert schema_of(path) == schema_of(tmp_path / "new.db")


def test_schema_2_client_cpu_is_recomputed_from_the_measured_intervals_and_the_run_says_so(tmp_path):
    path = tmp_path / "v2.db"
    with Store(path) as st:
        run = st.create_run("old", suite="q")
        ivs = [{"ts": float(i), "t": float(i), "dt": 1.0, "ramp": i < 2, "host": h, "instance": 0,
                "cpu": {"user_s": 0.5 if i < 2 else 0.2, "sys_s": 0.1}} for h in ("a", "b") for i in range(4)]
        # as schema 2 stored it: the whole process's CPU (ramp and start-up) per measured op
        old = {"total_ios": 1000, "usr_cpu": 70.0, "sys_cpu": 20.0, "client_cpu_us_per_op": 3600.0,
               "client_ctx_per_op": 2.5, "iops": 500.0}
        st.record_point(run, 0, "k", "w", "fathom-engine", {}, "done", metrics=old, intervals=ivs)
        st.record_point(run, 1, "f", "w", "fio", {}, "done", metrics=dict(old))
        other = st.create_run("no-cpu", suite="q")
        st.record_point(other, 0, "k", "w", "fathom-engine", {}, "done", metrics={"iops": 1.0})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        db.execute("ALTER TABLE runs DROP COLUMN state_json")  # schema 4's
    with Store(path) as st:
        m = st.points(run)[0]["metrics"]
        # measured intervals: 2 engines x 2 s, each 0.2 user + 0.1 sys a second; the longest engine's 2 s
        assert m["usr_cpu"] == pytest.approx(100 * 0.8 / 2) and m["sys_cpu"] == pytest.approx(100 * 0.4 / 2)
        assert m["client_cpu_us_per_op"] == pytest.approx(1.2 / 1000 * 1e6) and m["client_ctx_per_op"] is None
        assert m["iops"] == 500.0 and st.points(run)[1]["metrics"] == old  # fio's own figures are untouched
        assert [e["kind"] for e in st.events(run)] == ["migration"] and "recomputed" in st.events(run)[0]["message"]
        assert st.events(other) == []
        from fathom.analysis.data import load_run
        from fathom.report.tables import build

        notes = build([load_run(st, "old")]).runs_table.notes
        assert any("recomputed from their measured intervals" in n for n in notes)


def test_schema_3_attempt_state_moves_out_of_the_environment(tmp_path):
    path = tmp_path / "v3.db"
    env = {"quick": False, "host": {"cores": 2}, "data_tag": "fathom-1-abc", "attempts": [{"tag": "fathom-1-abc-a1"}],
           "data_lost": {}, "pools": {"p": "fathom-1-abc-p"}, "prep_created": {"pools": ["fathom-1-abc-p"]},
           "restore": {"entries": []}}
    with Store(path) as st:
        run = st.create_run("old", suite="q", env=env)
        plain = st.create_run("plain", suite="q", env={"quick": True})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        db.execute("ALTER TABLE runs DROP COLUMN state_json")
    with Store(path) as st:
        old = st.run(run)
        assert old.env == {"quick": False, "host": {"cores": 2}}
        moved = ("quick", "host", "prep_created", "restore")  # the last two: into the journal by schema 5
        assert {k: v for k, v in old.state.items() if k != "journal"} == {k: v for k, v in env.items()
                                                                           if k not in moved}
        assert [(e["kind"], e["what"]) for e in old.state["journal"]["entries"]] == [("pool", "fathom-1-abc-p")]
        assert st.run(plain).env == {"quick": True} and st.run(plain).state == {}
        assert st.merge_state(run, data_lost={"k": "gone"})["data_tag"] == "fathom-1-abc"
        assert st.run(run).state["data_lost"] == {"k": "gone"} and "data_lost" not in st.run(run).env
    with Store(tmp_path / "new.db"):
        pass
    assert schema_of(path) == schema_of(tmp_path / "new.db")  # as a new store's


def test_schema_5_store_gets_the_live_seconds_table(tmp_path):
    """Schema 5 -> 6 adds an empty table (the running point's seconds, fathom.live.seconds): nothing stored changes."""
    path = tmp_path / "v5.db"
    with Store(path) as st:
        run = st.create_run("old", suite="q")
        st.record_point(run, 0, "k", "w", "fio", {"bs": "4k"}, "done", metrics={"iops": 1.0})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        db.execute("DROP TABLE live_seconds")
    with Store(path) as st:
        assert st.db.execute("SELECT count(*) FROM live_seconds").fetchone()[0] == 0
        assert [(p["key"], p["metrics"]) for p in st.points(run)] == [("k", {"iops": 1.0})]
        assert st.events(run) == []  # no migration event: nothing measured changed
    with Store(tmp_path / "new.db"):
        pass
    assert schema_of(path) == schema_of(tmp_path / "new.db")


def test_upgrade_is_one_transaction(tmp_path):
    path = tmp_path / "v1.db"
    shutil.copyfile(DATA / "results-v1.db", path)
    with sqlite3.connect(path) as db:  # in the way of the histograms rebuild: the upgrade fails half way
        db.execute("CREATE TABLE histograms_v2 (a)")
    before = schema_of(path)
    with pytest.raises(FathomError, match="histograms_v2 already exists"):
        Store(path)
    assert schema_of(path) == before  # the columns added before the failure are gone too
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    with pytest.raises(FathomError) as ei:
        Store(path)
    msg = str(ei.value)
    assert "schema version 7" in msg and f"schema version {SCHEMA_VERSION}" in msg and "upgrade fathom" in msg


def test_a_file_that_is_not_a_store(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("these are notes, not SQLite\n" * 100)
    with pytest.raises(FathomError, match="is not a fathom results store"):
        Store(text)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (a)")
    with pytest.raises(FathomError, match="is not a fathom results store: an SQLite database without fathom's"):
        Store(other)
    with sqlite3.connect(other) as db:  # and it was left as it was
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["t"]


# ---- many processes on one store -----------------------------------------------------------------

def test_a_locked_store_says_busy_not_foreign(tmp_path):
    # a new file locked before it became a store (no WAL yet): opening it waits, then says busy
    path = tmp_path / "s.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreBusyError) as ei:
        Store(path, busy_timeout_s=0.2)
    msg = str(ei.value)
    assert f"results store {path} is busy: another fathom process held it for" in msg
    assert "not a fathom results store" not in msg and "--db" in msg
    holder.execute("ROLLBACK")
    # a store whose write lock another process holds: reads go on, a write waits, then says busy
    with Store(path) as st:
        run = st.create_run("r")
    holder.execute("BEGIN IMMEDIATE")
    with Store(path, busy_timeout_s=0.2) as st:
        assert [r.name for r in st.runs()] == ["r"]
        with pytest.raises(StoreBusyError, match="is busy"):
            st.record_point(run, 0, "p", "w", "fio", {}, "done")
        holder.execute("ROLLBACK")
        st.record_point(run, 0, "p", "w", "fio", {}, "done")  # the same connection, once the lock is free
        assert st.done_keys(run) == {"p"}
    holder.close()


def test_opening_a_new_store_waits_for_another_process_to_finish(tmp_path):
    # Switching a file to WAL fails at once, without waiting, while another connection writes to it
    # in rollback mode, as the first fathom process does for a moment when it makes a new file WAL.
    path = tmp_path / "s.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE t (a)")
    release = threading.Timer(0.3, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        with Store(path) as st:
            assert st.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            st.create_run("r")
    finally:
        release.join()
        holder.close()


def test_a_write_waits_for_another_process_to_finish(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO runs (name, created) VALUES ('held', 0)")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        with Store(path) as st:  # waits for the holder (up to the busy timeout), then writes
            st.create_run("after")
            assert [r.name for r in st.runs()] == ["held", "after"]
    finally:
        release.join()
        holder.close()


def test_many_processes_share_one_store(tmp_path):
    """8 writers x 3 rounds (a run and its points with detail each) and a reader, all started on a file
    that does not exist yet, at the same moment. Every point is stored, and no process sees an error."""
    writers, rounds, points = 8, 3, 4
    db = tmp_path / "shared.db"
    src = str(Path(fathom.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    worker = str(Path(__file__).with_name("store_worker.py"))
    procs = [subprocess.Popen([sys.executable, worker, "write", str(db), str(n), str(rounds), str(points),
                               str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for n in range(writers)]
    reader = subprocess.Popen([sys.executable, worker, "read", str(db), str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    while len(list(tmp_path.glob("ready-*"))) < writers + 1 and all(p.poll() is None for p in [*procs, reader]):
        time.sleep(0.01)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=600) for p in procs]
    (tmp_path / "stop").touch()
    rout, rerr = reader.communicate(timeout=600)
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0 and not err, err
    assert reader.returncode == 0 and not rerr, rerr
    assert int(rout) >= 1
    with Store(db) as st:
        runs = st.runs()
        assert sorted(r.name for r in runs) == sorted(f"w{n}-r{r}" for n in range(writers) for r in range(rounds))
        for r in runs:
            assert r.status == "done" and r.env["rounds_done"] == int(r.name.split("-r")[1]) + 1
            pts = st.points(r.id)
            assert [p["key"] for p in pts] == [f"p{i}" for i in range(points)]
            for p in pts:
                assert len(st.intervals(p["id"])) == 12 and len(st.intervals(p["id"], host="client-b")) == 6
                assert set(st.histograms(p["id"])) == {"read", "write"}
                assert hdr.count(st.histograms(p["id"])["read"]) == 2 * 4
                assert len(st.histograms_by_instance(p["id"])) == 8
                assert {t["host"] for t in st.telemetry(p["id"])} == {"client-a", "client-b"}
            assert len(st.events(r.id)) == points
