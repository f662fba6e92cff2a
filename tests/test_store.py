"""Store additions: a point and its detail in one transaction; env merging; resume keys."""

from __future__ import annotations

import sqlite3

import pytest

from fathom.store import Store


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
