"""Anomaly rules on the published tables (must flag exactly the collapsed SeaStore points) and on
stored points with errors, health events, early stops and a saturated client."""

from __future__ import annotations

from pathlib import Path

import pytest

from fathom.analysis import anomalies as anom
from fathom.analysis.data import assign_levels, load_run
from fathom.results.importers import import_table
from fathom.results.store import Store

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    st = Store(tmp_path_factory.mktemp("anom") / "pub.db")
    import_table(st, str(DATA / "crimson-vs-classic-2025.csv"))
    runs = {n: load_run(st, n) for n in ("classic", "seastore")}
    assign_levels(list(runs.values()))
    return runs


def test_clean_classic_tables_flag_nothing(published):
    assert anom.find_all(published["classic"]) == []


def test_seastore_randwrite_collapse_flags_40_52_64(published):
    found = anom.find(published["seastore"], "randwrite4k")
    assert sorted(a.iodepth for a in found if a.kind == "collapse") == [40, 52, 64]
    # total_ios says those rows cover about 0.3 s of a 300 s point
    assert sorted(a.iodepth for a in found if a.kind == "short_window") == [40, 52, 64]
    # the OSD CPU sample at iodepth 32 (390% against ~4,700%) is the other published glitch
    assert [(a.iodepth, a.kind) for a in found if a.kind not in ("collapse", "short_window")] == \
        [(32, "osd_cpu_dropout")]


@pytest.mark.parametrize("wl", ["randread4k", "seqread64k", "seqwrite64k"])
def test_other_seastore_curves_do_not_collapse(published, wl):
    # seqwrite64k drops to ~63% of its peak past qd24 and seqread64k starts at 64%: real, not collapses
    assert anom.find(published["seastore"], wl) == []


def test_collapse_rule_on_hand_made_curve():
    from fathom.analysis.data import IOPS, StoredPoint
    pts = [StoredPoint("r", 1, "w", {"iodepth": qd}, {"iops": x}, label=str(qd))
           for qd, x in [(1, 100.0), (2, 190.0), (4, 30.0), (8, 200.0)]]
    assert list(anom.collapse(pts, IOPS)) == [2]  # 30 < 190/3
    # a point at 1/3 of the bound or more is not a collapse
    pts[2].metrics["iops"] = 64.0  # 64 >= 190/3
    assert list(anom.collapse(pts, IOPS)) == []


def test_little_law_bound_for_low_first_point():
    from fathom.analysis.data import IOPS, StoredPoint
    pts = [StoredPoint("r", 1, "w", {"iodepth": qd}, {"iops": x}, label=str(qd))
           for qd, x in [(1, 5.0), (2, 190.0), (8, 200.0)]]
    # bound for qd1 = max(190 * 1/2, 200 * 1/8) = 95; 5 < 95/3 -> flagged
    assert list(anom.collapse(pts, IOPS)) == [0]


def test_errors_health_early_stop_and_client_bound(tmp_path):
    st = Store(tmp_path / "x.db")
    rid = st.create_run("r", kind="suite", env={"host": {"cpus": 2}}, status="done")
    base = {"iops": 1000.0, "total_ios": 60000, "runtime_s": 60.0, "clat_ms": 1.0, "usr_cpu": 10.0,
            "sys_cpu": 5.0, "errors": 0}
    st.save_point(rid, 0, "a", "randread4k", "fathom-engine", {"iodepth": 1, "rw": "randread", "bs": 4096},
                  "done", metrics=base, started=100.0, ended=160.0)
    st.save_point(rid, 1, "b", "randread4k", "fathom-engine", {"iodepth": 2, "rw": "randread", "bs": 4096},
                  "done", metrics={**base, "errors": 12}, started=200.0, ended=260.0)
    pid = st.save_point(rid, 2, "c", "randread4k", "fathom-engine", {"iodepth": 4, "rw": "randread", "bs": 4096},
                        "done", metrics=base, started=300.0, ended=360.0,
                        result={"stopped_early": True, "stop_reason": "latency ceiling"})
    st.add_event(rid, "health", "HEALTH_WARN: 1 slow ops", point_id=pid, ts=310.0)
    st.add_event(rid, "health", "outside any point", ts=50.0)
    st.save_point(rid, 3, "d", "randread4k", "fathom-engine", {"iodepth": 8, "rw": "randread", "bs": 4096},
                  "done", metrics={**base, "usr_cpu": 150.0, "sys_cpu": 40.0}, started=400.0, ended=460.0)
    st.save_point(rid, 4, "e", "randread4k", "fathom-engine", {"iodepth": 16, "rw": "randread", "bs": 4096},
                  "failed", metrics={}, error="engine exited 134", started=500.0, ended=501.0)
    run = load_run(st, "r")
    assign_levels([run])
    got = sorted((a.iodepth, a.kind) for a in anom.find(run, "randread4k"))
    assert got == [(2, "errors"), (4, "health"), (4, "stopped_early"), (8, "client_bound"), (16, "failed")]


def test_health_flags_changes_not_standing_warnings(tmp_path):
    st = Store(tmp_path / "h.db")
    rid = st.create_run("h", env={"host": {"cores": 4}}, status="done")
    gate = {"ok": True, "health": "HEALTH_WARN", "checks": {"OSDMAP_FLAGS": "noscrub,nodeep-scrub flag(s) set"}}
    m = {"iops": 1000.0, "total_ios": 3000, "runtime_s": 3.0, "clat_ms": 1.0, "engine_cpu_pct": 50.0,
         "host_cpu_pct": 60.0}
    ids = [st.save_point(rid, i, f"p{i}", "randread4k", "fio", {"iodepth": qd, "numjobs": 1}, "done",
                         metrics=m if qd != 4 else {**m, "engine_cpu_pct": 390.0, "host_cpu_pct": 99.0},
                         gate=gate, started=100.0 * i, ended=100.0 * i + 3)
           for i, qd in enumerate([1, 2, 4])]
    same = {"before": "HEALTH_WARN", "after": "HEALTH_WARN", "checks": ["OSDMAP_FLAGS"]}
    st.add_event(rid, "health", "after point: HEALTH_WARN", point_id=ids[0], data=same)
    st.add_event(rid, "health", "after point: HEALTH_WARN", point_id=ids[1],
                 data={**same, "checks": {"OSDMAP_FLAGS": "noscrub", "SLOW_OPS": "1 slow ops"}, "clean": True})
    run = load_run(st, "h")
    assign_levels([run])
    got = sorted((a.iodepth, a.kind) for a in anom.find(run, "randread4k"))
    # qd1: standing warning, no flag; qd2: SLOW_OPS appeared; qd4: engine at 390% of 400%, host 99% busy
    assert got == [(2, "health"), (4, "client_bound"), (4, "host_busy")]
    msg = next(a.message for a in anom.find(run, "randread4k") if a.kind == "health")
    assert "new checks SLOW_OPS" in msg


def test_client_bound_judges_the_busiest_engine_thread(tmp_path):
    st = Store(tmp_path / "c.db")
    rid = st.create_run("c", env={"host": {"cores": 16}}, status="done")
    m = {"iops": 1000.0, "total_ios": 3000, "runtime_s": 3.0, "clat_ms": 1.0}
    # qd1: one thread at 97% of a core (the process at 200% of a 16-core host: the old rule's blind spot)
    # qd2: the busiest thread at half a core; qd4: an older record without the thread figure
    for i, (qd, extra) in enumerate([(1, {"client_thread_max_pct": 97.0, "engine_cpu_pct": 200.0}),
                                     (2, {"client_thread_max_pct": 50.0, "engine_cpu_pct": 200.0}),
                                     (4, {"engine_cpu_pct": 200.0})]):
        st.save_point(rid, i, f"p{i}", "randread4k", "fathom-engine", {"iodepth": qd, "numjobs": 1}, "done",
                      metrics={**m, **extra}, started=100.0 * i, ended=100.0 * i + 3)
    run = load_run(st, "c")
    assign_levels([run])
    got = [(a.iodepth, a.kind, a.message) for a in anom.find(run, "randread4k") if a.kind == "client_bound"]
    assert [(qd, kind) for qd, kind, _ in got] == [(1, "client_bound")]
    assert "busiest load-generator thread 97% of one core" in got[0][2]
