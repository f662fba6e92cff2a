"""Study sections named by the suite (fathom.report.studies), `daemon:` of a fault, and store schema 5, which
names the studies of runs stored before and leaves `target` to the engine (pure: no engine, no cluster)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import run_fathom

from fathom.results import importers
from fathom.suite import spec
from fathom.analysis.data import RunData, StoredPoint, load_run
from fathom.run.faults import Executor, FaultCompanion
from fathom.suite.faults import Fault
from fathom.report import studies
from fathom.results import studies as names
from fathom.report.tables import build
from fathom.results.store import SCHEMA, SCHEMA_VERSION, Store, _statements

DATA = Path(__file__).with_name("data")
SUITE = "name: s\nworkloads: [{name: w, interface: null, rw: randread, runtime: 1s}]\n"


# ---- the registry and the suite's `report:` ----------------------------------------------------------

def test_built_in_study_suites_name_their_studies():
    assert spec.load("fs-apps").suite.report == [studies.FILES_STUDY]
    assert spec.load("rgw").suite.report == [studies.RGW_STUDY]
    assert spec.load("osd-classic").suite.report == []
    assert spec.parse(SUITE + "report: [rgw-study, files-study, rgw-study]\n").report == ["rgw-study", "files-study"]


def test_an_unknown_study_is_an_error_naming_the_known_ones():
    with pytest.raises(spec.SuiteError) as e:
        spec.parse(SUITE + "report: [file-study]\n", "s.yaml")
    msg = e.value.message
    assert "s.yaml:3" in msg and "unknown study 'file-study'" in msg and "did you mean 'files-study'?" in msg
    assert "files-study, rgw-study" in msg
    with pytest.raises(ValueError, match="unknown study 'x'; studies: files-study, rgw-study"):
        names.check(["x"])


def test_every_study_name_has_its_sections_in_order():
    assert tuple(studies.STUDIES) == names.NAMES


def fs_point(run_id: int, wl: str, kib_s: float) -> StoredPoint:
    return StoredPoint(run="r", run_id=run_id, workload=wl, engine="fathom-engine", status="done",
                       params={"numjobs": 10, "nrfiles": 10}, metrics={"read_bw_mib_s": kib_s / 1024})


def rd(name: str, ids: list[int], env: dict[str, Any], points: list[StoredPoint]) -> RunData:
    return RunData(name, ids, "suite", "done", None, env, "fs-apps", points, [])


def test_a_study_gets_the_runs_that_name_it_and_no_other():
    pts = [fs_point(1, "db-local", 1000.0), fs_point(1, "db-fuse", 500.0)]
    (sec,) = studies.sections([rd("a", [1], {"report": ["files-study"]}, pts)])
    assert sec.workload.startswith("2014 file study") and sec.tables[0].headers[-2:] == ["local", "fuse"]
    # the same points in a run that does not name the study: no study section (workload names decide nothing)
    assert studies.sections([rd("b", [2], {}, pts)]) == []
    # a group of runs (`a,b`: env per run) carries the studies any of them names
    group = rd("a,b", [1, 2], {"a": {"report": ["files-study"]}, "b": {}}, pts)
    assert studies.named(group) == ["files-study"] and len(studies.sections([group])) == 1


def test_imported_tables_name_their_study(tmp_path):
    with Store(tmp_path / "s.db") as st:
        ids = importers.import_table(st, str(DATA / "cephfs-rbd-nfs-local-2014.csv"))
        (gains,) = importers.import_table(st, str(DATA / "rgw-replica3-vs-ec22-2025.csv"))
        (other,) = importers.import_table(st, str(DATA / "crimson-vs-classic-2025.csv"), split_by="workload")[:1]
        local = next(st.run(i) for i in ids if st.run(i).name == "local")
        assert local.env == {"published_table": "cephfs-rbd-nfs-local-2014.csv", "target": "local",
                             "report": ["files-study"]}  # `target`: the 2014 table's own column
        assert st.run(gains).env["report"] == ["rgw-study"] and "report" not in st.run(other).env


# ---- a fault's `daemon:` ---------------------------------------------------------------------------------

def test_fault_daemon_and_its_former_name_target():
    assert Fault.model_validate({"at_s": 5, "action": "kill", "daemon": "osd.1"}).daemon == "osd.1"
    assert Fault.model_validate({"at_s": 5, "action": "kill", "target": "osd.1"}).daemon == "osd.1"
    assert Fault.model_validate({"at_s": 5, "action": "osd_out", "daemon": 2}).model_dump() == {
        "at_s": 5.0, "action": "osd_out", "daemon": "osd.2"}
    with pytest.raises(ValueError, match="kill needs a daemon"):
        Fault.model_validate({"at_s": 5, "action": "kill"})
    with pytest.raises(ValueError, match="pause acts on the whole cluster: leave out daemon"):
        Fault.model_validate({"at_s": 5, "action": "pause", "target": "osd.1"})
    w = spec.parse("name: s\ncluster: {osds: 2}\nprep: {pools: [{name: p}]}\nworkloads:\n"
                   "  - {name: w, interface: rados, pool: p, rw: write, runtime: 30s,\n"
                   "     faults: [{at_s: 5, action: kill, target: osd.1}, {at_s: 9, action: start, daemon: osd.1}]}\n"
                   ).workloads[0]
    assert [f.daemon for f in w.faults] == ["osd.1", "osd.1"]
    assert [f["daemon"] for f in w.params()["faults"]] == ["osd.1", "osd.1"]  # stored with the point as `daemon`
    # a fault the point did not reach is still an event naming its daemon
    out = FaultCompanion([Fault(at_s=5, action="kill", daemon="osd.1")], Executor(None)).stop()
    assert [(e["kind"], e["data"]["daemon"], e["data"]["outcome"]) for e in out.events] == [
        ("fault", "osd.1", "not run")]


# ---- store schema 5 -----------------------------------------------------------------------------------

def _run(db: sqlite3.Connection, name: str, kind: str, env: dict[str, Any]) -> int:
    return int(db.execute("INSERT INTO runs (name, kind, status, created, env_json) VALUES (?, ?, 'done', 1.0, ?)",
                          (name, kind, json.dumps(env))).lastrowid)  # type: ignore[arg-type]


def _point(db: sqlite3.Connection, run: int, wl: str, params: dict[str, Any], metrics: dict[str, Any] | None = None,
           published: dict[str, Any] | None = None) -> int:
    idx = db.execute("SELECT COUNT(*) FROM points WHERE run_id = ?", (run,)).fetchone()[0]
    res = {"published_row": published} if published else {}
    return int(db.execute("INSERT INTO points (run_id, idx, key, workload, engine, params_json, status, metrics_json, "
                          "result_json) VALUES (?, ?, ?, ?, 'x', ?, 'done', ?, ?)",
                          (run, idx, f"{wl}-{idx}", wl, json.dumps(params), json.dumps(metrics or {}),
                           json.dumps(res))).lastrowid)  # type: ignore[arg-type]


def _event(db: sqlite3.Connection, run: int, point: int, kind: str, data: dict[str, Any]) -> None:
    db.execute("INSERT INTO events (run_id, point_id, ts, kind, message, data_json) VALUES (?, ?, 2.0, ?, 'm', ?)",
               (run, point, kind, json.dumps(data)))


def schema_4_store(path: Path) -> dict[str, int]:
    """A store as schema 4 wrote it (its tables are schema 5's), made row by row with sqlite."""
    cluster = {"kind": "local (disposable)", "osds": 1}
    with sqlite3.connect(path) as db:
        for stmt in _statements(SCHEMA):
            db.execute(stmt)
        db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '4')")
        ids = {"fs": _run(db, "fs", "suite", {"quick": True, "target": cluster}),
               "rgw": _run(db, "rgw", "suite", {"target": cluster}),
               "y2014": _run(db, "y2014-local", "import", {"published_table": "t.csv", "target": "local"}),
               "gains": _run(db, "gains", "import", {"published_table": "g.csv", "gains": "replica 3 vs EC 2+2"}),
               "faulted": _run(db, "faulted", "suite", {"target": cluster}),
               "bench": _run(db, "bench", "bench", {"host": "h"})}
        for wl, kib in (("db-local", 2048.0), ("db-fuse", 1024.0)):
            _point(db, ids["fs"], wl, {"numjobs": 10, "nrfiles": 10}, {"read_bw_mib_s": kib / 1024})
        _point(db, ids["fs"], "db-nofiles", {"numjobs": 1})  # not a study point: no files
        _point(db, ids["rgw"], "rep3-vs-ec22", {"interface": "s3", "placement": "rep3", "rw": "write"})
        _point(db, ids["y2014"], "db-read", {"scenario": "db", "direction": "read", "numjobs": 10, "files": 10},
               {"read_bw_mib_s": 1.0}, {"target": "local", "kib_s": 1024})
        _point(db, ids["gains"], "rep3-vs-ec22", {"interface": "s3", "object_size": 65536},
               published={"object_size": "64KiB", "put_throughput_gain_pct": 18, "get_throughput_gain_pct": 37,
                          "put_latency_gain_pct": 18, "get_latency_gain_pct": 33})
        pid = _point(db, ids["faulted"], "randread4k", {"iodepth": 1, "faults": [{"at_s": 5, "action": "pause"}]})
        _event(db, ids["faulted"], pid, "fault", {"t_s": 5.1, "action": "kill", "target": "osd.1"})
        _event(db, ids["faulted"], pid, "fault", {"t_s": 9.0, "action": "pause", "target": None})
        _event(db, ids["faulted"], pid, "recovery", {"windows": [{"t_s": 5.1, "action": "kill", "target": "osd.1"}]})
        _event(db, ids["faulted"], pid, "health", {"target": "kept: not a fault's"})
        _point(db, ids["bench"], "rados-bench-write", {"iodepth": 16})
        state = {"data_tag": "fathom-5-ab", "prep_created": {"pools": ["fathom-5-ab-p"], "fsid": "f-1"},
                 "prep_removed": {}, "restore": {"fsid": "f-1", "conn": {"conf": "/c"}, "entries": [
                     {"what": "osd flag noscrub", "prior": "unset", "wanted": "set",
                      "command": "ceph osd unset noscrub", "restored": False}]}}
        db.execute("UPDATE runs SET state_json = ? WHERE id = ?", (json.dumps(state), ids["faulted"]))
    return ids


def test_schema_4_runs_name_their_studies_and_target_keeps_the_engines_meaning(tmp_path):
    path = tmp_path / "v4.db"
    ids = schema_4_store(path)
    with Store(path) as st:
        assert st.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "6" == \
            str(SCHEMA_VERSION)
        env = {name: st.run(i).env for name, i in ids.items()}
        # the studies, by the workload-name rule reports used before
        assert env["fs"] == {"quick": True, "cluster": {"kind": "local (disposable)", "osds": 1},
                             "report": ["files-study"]}
        assert env["rgw"]["report"] == ["rgw-study"] and env["gains"]["report"] == ["rgw-study"]
        assert env["y2014"] == {"published_table": "t.csv", "target": "local", "report": ["files-study"]}
        assert "report" not in env["faulted"] and env["bench"] == {"host": "h"}
        # the cluster measured is `cluster`; a fault's daemon is `daemon`; other events are left alone
        assert env["faulted"]["cluster"]["kind"] == "local (disposable)" and "target" not in env["faulted"]
        data = [e["data"] for e in st.events(ids["faulted"]) if e["kind"] != "migration"]
        assert data == [{"t_s": 5.1, "action": "kill", "daemon": "osd.1"},
                        {"t_s": 9.0, "action": "pause", "daemon": None},
                        {"windows": [{"t_s": 5.1, "action": "kill", "daemon": "osd.1"}]},
                        {"target": "kept: not a fault's"}]
        # each run changed says how, once; a run left as it was has no event
        said = {name: [e["message"] for e in st.events(i) if e["kind"] == "migration"] for name, i in ids.items()}
        assert said["bench"] == [] and all(len(m) == 1 for n, m in said.items() if n != "bench")
        assert "study sections (files-study)" in said["fs"][0] and "is now cluster" in said["fs"][0]
        assert "cluster" not in said["y2014"][0]  # an import's `target` is the 2014 table's own column
        assert "name their daemon as daemon" in said["faulted"][0] and "one undo journal" in said["faulted"][0]
        # what prep made and the settings it changed: one journal, oldest first
        state = st.run(ids["faulted"]).state
        assert set(state) == {"data_tag", "journal"} and state["journal"]["fsid"] == "f-1"
        assert [(e["kind"], e["what"], e["undone"]) for e in state["journal"]["entries"]] == [
            ("pool", "fathom-5-ab-p", False), ("setting", "osd flag noscrub", False)]
        # the report: the study's section from the migrated runs, and the Runs table says what changed
        doc = build([load_run(st, "fs"), load_run(st, "y2014-local")])
        assert doc.sections[0].workload.startswith("2014 file study")
        assert any("fs: store schema 5" in n for n in doc.runs_table.notes)
    with Store(tmp_path / "new.db"):
        pass
    db = sqlite3.connect(path)
    new = sqlite3.connect(tmp_path / "new.db")
    assert [r for r in db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name")] == \
        [r for r in new.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name")]
    db.close()
    new.close()
    show = run_fathom("show", "fs", "--db", str(path), check=True).stdout
    assert '  cluster: {"kind": "local (disposable)", "osds": 1}' in show and "  report: files-study" in show
