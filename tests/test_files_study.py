"""The 2014 file study's report tables, from points built here (pure logic: no engine, no cluster)."""

from __future__ import annotations

from fathom.analysis.data import RunData, StoredPoint
from fathom.report import files_study


def measured(workload: str, jobs: int, files: int, read: float | None, write: float | None) -> StoredPoint:
    return StoredPoint(run="fs", run_id=1, workload=workload, params={"numjobs": jobs, "nrfiles": files},
                 metrics={"read_bw_mib_s": read, "write_bw_mib_s": write, "client_ctx_per_op": 2.5, "p99_ms": 1.0})


def published(target: str, scen: str, d: str, jobs: int, files: int, kib: float) -> StoredPoint:
    return StoredPoint(run=target, run_id=2, workload=f"{scen}-{d}", engine="published",
                 params={"scenario": scen, "direction": d, "numjobs": jobs, "files": files},
                 metrics={f"{d}_bw_mib_s": kib / 1024}, published={"scenario": scen, "kib_s": kib})


def run(name: str, points: list[StoredPoint], env: dict | None = None) -> RunData:
    return RunData(name=name, ids=[1], kind="run", status="done", source=None, env=env or {}, suite="fs-apps",
                   points=points, events=[])


def test_throughput_in_kib_s_and_ranking_against_2014():
    ours = run("fs", [measured("db-local", 10, 10, 2.0, 1.0), measured("db-fuse", 10, 10, 4.0, 0.5),
                      measured("blob-local", 10, 10, 8.0, None)])
    pub = [run("local", [published("local", "db", "read", 10, 10, 1478)], {"target": "local"}),
           run("cephfs_fuse", [published("cephfs_fuse", "db", "read", 10, 10, 4223)], {"target": "cephfs_fuse"})]
    (sec,) = files_study.sections([ours, *pub])
    tp, ctx, rank = sec.tables
    assert tp.headers[3:] == ["local", "fuse"]
    db_read = next(r for r in tp.rows if r[:3] == ["db", "read", "10/10"])
    assert db_read[3:] == ["2,048", "4,096"]  # MiB/s -> KiB/s
    assert next(r for r in tp.rows if r[0] == "blob")[3:] == ["8,192", "n/a"]
    assert {r[3] for r in ctx.rows} == {"2.50"}
    (row,) = rank.rows
    assert row[3] == "fuse > local" and row[4] == "fuse > local" and row[5] == "same"
    assert "1 of 1" in rank.notes[0]


def test_no_fs_apps_points_no_section():
    assert files_study.sections([run("x", [measured("randread4k", 1, 1, 1.0, None)])]) == []


def test_nfs_targets_the_local_one_stands_in_for_2014_nfs_and_the_notes_say_no_page_cache():
    ours = run("fs", [measured("db-local", 10, 10, 2.0, 1.0), measured("db-nfslocal", 10, 10, 1.0, 0.5),
                      measured("db-nfscephfs", 10, 10, 0.5, 0.25)])
    pub = [run("local", [published("local", "db", "read", 10, 10, 1478)], {"target": "local"}),
           run("nfs", [published("nfs", "db", "read", 10, 10, 2162)], {"target": "nfs"})]
    (sec,) = files_study.sections([ours, *pub])
    tp, _, rank = sec.tables
    assert tp.headers[3:] == ["local", "nfslocal", "nfscephfs"]
    assert any("no page cache" in n for n in tp.notes)
    (row,) = rank.rows
    assert row[3] == "local > nfslocal" and row[4] == "nfslocal > local" and row[5] == "differs"
