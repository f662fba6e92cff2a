"""Recovery figures, fault schedules in suites, the fault label in anomalies and the timeline (pure logic)."""

from __future__ import annotations

import pytest

from fathom.results import hdr
from fathom.suite import spec
from fathom.analysis import anomalies, recovery
from fathom.analysis.data import RunData, StoredPoint
from fathom.report import html, timeline
from fathom.report.tables import build


def rec(t: float, iops: float, errors: int = 0, lat_ms: float | None = None, dt: float = 1.0) -> dict:
    op = {"ops": int(iops * dt), "bytes": int(iops * dt) * 4096, "errors": errors}
    if lat_ms is not None:
        h = hdr.new()
        h.record_value(int(lat_ms * 1e6), int(iops * dt) or 1)
        op["hist"] = hdr.encode(h)
    return {"type": "interval", "ts": 1000.0 + t, "t": t, "dt": dt, "ramp": False, "ops": {"write": op}}


# 10 s at 1000 IOPS, a fault at 10.2 s: 3 s at zero with errors, then back (two 900s, then 1000)
SERIES = ([rec(t, 1000, lat_ms=2) for t in range(1, 11)] + [rec(11, 100, 5, 40), rec(12, 0, 8), rec(13, 0, 3)]
          + [rec(14, 900, lat_ms=3), rec(15, 950, lat_ms=3)] + [rec(t, 1000, lat_ms=2) for t in range(16, 25)])
KILL = {"t_s": 10.2, "action": "kill", "daemon": "osd.1"}


def test_dip_first_error_and_recovery():
    m, ws = recovery.point_metrics(SERIES, [KILL])
    assert m["faults"] == 1 and m["prefault_iops"] == 1000
    assert m["fault_first_error_s"] == pytest.approx(0.8)  # the end of the second that counted it
    assert m["fault_min_iops"] == 0 and m["fault_max_p99_ms"] == pytest.approx(40, rel=0.01)
    # 900 and 950 are within 10% of 1000: the first run of 3 such seconds starts at 13 s
    assert m["fault_recovery_s"] == pytest.approx(13 - 10.2) and m["fault_recovered"] is True
    assert len(ws) == 1 and ws[0].action == "kill"


def test_not_recovered_and_windows_per_fault():
    series = [rec(t, 1000) for t in range(1, 11)] + [rec(t, 200) for t in range(11, 30)]
    m, _ = recovery.point_metrics(series, [KILL])
    assert m["fault_recovery_s"] is None and m["fault_recovered"] is False and m["fault_first_error_s"] is None
    start = {"t_s": 20.0, "action": "start", "daemon": "osd.1"}
    m, ws = recovery.point_metrics(SERIES, [start, KILL])  # any order in, time order out
    assert [w.action for w in ws] == ["kill", "start"]
    assert ws[0].recovery_s == pytest.approx(13 - 10.2) and ws[1].recovery_s == pytest.approx(0.0)
    assert m["fault_recovery_s"] == pytest.approx(0.0)  # after the last fault
    assert recovery.point_metrics(SERIES, []) == ({}, [])


def test_more_than_before_counts_as_recovered():
    # with an OSD down a replicated write goes to fewer replicas and can run faster than before
    series = [rec(t, 1000) for t in range(1, 11)] + [rec(11, 0, 4)] + [rec(t, 1500) for t in range(12, 20)]
    m, _ = recovery.point_metrics(series, [KILL])
    assert m["fault_recovery_s"] == pytest.approx(11 - 10.2) and m["fault_min_iops"] == 0


def test_a_relapse_after_a_first_return_is_not_recovery():
    # back for 3 s, then a stall (a restarted OSD peering), then slow: not recovered; back later: counted from there
    head = [rec(t, 1000) for t in range(1, 11)] + [rec(11, 0, 3)] + [rec(t, 1000) for t in range(12, 16)]
    slow = [rec(16, 100), rec(17, 0)] + [rec(t, 700) for t in range(18, 25)]
    m, _ = recovery.point_metrics(head + slow, [KILL])
    assert m["fault_recovery_s"] is None and m["fault_recovered"] is False
    m, _ = recovery.point_metrics(head + slow + [rec(t, 990) for t in range(25, 30)], [KILL])
    assert m["fault_recovery_s"] == pytest.approx(24 - 10.2)  # the run after the last relapse (17 s) starts at 24 s
    # a dip that stays above half the median is noise within recovery, not a relapse
    m, _ = recovery.point_metrics(head + [rec(16, 600)] + [rec(t, 1000) for t in range(17, 25)], [KILL])
    assert m["fault_recovery_s"] == pytest.approx(11 - 10.2)


def test_a_dip_that_starts_seconds_after_the_fault_is_measured_not_taken_for_recovery():
    late = {"t_s": 30.5, "action": "out", "target": "osd.1"}
    base = [rec(t, 1000, lat_ms=2) for t in range(1, 31)]
    # unchanged for 5 s after the fault, then 60% for 20 s (backfill), then back
    series = base + [rec(t, 1000, lat_ms=2) for t in range(31, 36)] + [rec(t, 600, lat_ms=9) for t in range(36, 56)] \
        + [rec(t, 1000, lat_ms=2) for t in range(56, 66)]
    m, ws = recovery.point_metrics(series, [late])
    assert m["fault_min_iops"] == 600 and m["fault_max_p99_ms"] == pytest.approx(9, rel=0.01)
    assert m["fault_recovery_s"] == pytest.approx(55 - 30.5) and m["fault_recovered"] is True
    assert ws[0].below_band_s == pytest.approx(20.0) and ws[0].note is None
    # the same dip at once: measured alike
    now = base + [rec(t, 600) for t in range(31, 51)] + [rec(t, 1000) for t in range(51, 60)]
    m, ws = recovery.point_metrics(now, [late])
    assert m["fault_recovery_s"] == pytest.approx(50 - 30.5) and m["fault_min_iops"] == 600
    assert ws[0].below_band_s == pytest.approx(20.0)
    # a fault that never shows: recovered at once, no dip below the band, and the window says so
    m, ws = recovery.point_metrics(base + [rec(t, 990) for t in range(31, 40)], [late])
    assert m["fault_recovery_s"] == 0.0 and m["fault_min_iops"] == 990
    assert ws[0].below_band_s == 0.0 and ws[0].note == recovery.NEVER_LEFT and "no dip" in ws[0].to_dict()["note"]


def test_a_late_dip_after_a_short_first_return_is_still_the_windows_dip():
    # at once to 70% for 2 s, back for 4 s, then a deeper late dip (50.5%: above a relapse) for 10 s
    late = {"t_s": 30.5, "action": "out", "target": "osd.1"}
    series = [rec(t, 1000) for t in range(1, 31)] + [rec(31, 700), rec(32, 700)] \
        + [rec(t, 1000) for t in range(33, 37)] + [rec(t, 505) for t in range(37, 47)] \
        + [rec(t, 1000) for t in range(47, 55)]
    m, ws = recovery.point_metrics(series, [late])
    assert m["fault_min_iops"] == 505  # the whole window, not only up to the first return
    assert m["fault_recovery_s"] == pytest.approx(32 - 30.5)  # the first sustained return counts
    assert ws[0].below_band_s == pytest.approx(12.0)


def test_short_last_interval_is_not_judged():
    series = [rec(t, 1000) for t in range(1, 11)] + [rec(11, 1000), rec(12, 1000), rec(12.1, 10, dt=0.1)]
    _, ws = recovery.point_metrics(series, [KILL])
    assert ws[0].min_iops == 1000


def test_expected_checks_by_fault():
    assert "OSD_DOWN" in recovery.expected_checks([KILL])
    assert "MON_DOWN" not in recovery.expected_checks([KILL])
    assert "OSDMAP_FLAGS" in recovery.expected_checks([{"action": "pause"}])
    assert "MON_DOWN" in recovery.expected_checks([{"action": "kill", "daemon": "mon.a"}])


def point(pid: int, iodepth: int, iops: float, intervals: list | None = None, errors: int = 0) -> StoredPoint:
    return StoredPoint(run="r", run_id=1, workload="w", params={"iodepth": iodepth, "bs": 4096}, point_id=pid,
                 metrics={"iops": iops, "errors": errors, "runtime_s": 20, "total_ios": iops * 20},
                 started=100.0 * pid, ended=100.0 * pid + 30, intervals=intervals or [], label=str(iodepth))


def run_with(events: list[dict]) -> RunData:
    pts = [point(1, 1, 1000), point(2, 2, 2000), point(3, 4, 300, SERIES, errors=16)]
    pts[2].metrics.update(recovery.point_metrics(SERIES, [KILL])[0])  # as the fault companion stores them
    return RunData("r", [1], "suite", "done", None, {}, "s", pts, events)


def health(pid: int, checks: list[str]) -> dict:
    return {"kind": "health", "point_id": pid, "ts": 100.0 * pid + 31, "message": "after point: HEALTH_WARN",
            "data": {"before": "HEALTH_OK", "after": "HEALTH_WARN", "checks": checks, "clean": False}}


def test_an_intended_fault_is_labelled_not_flagged():
    fault = {"kind": "fault", "point_id": 3, "ts": 310.0, "message": "t=10.2 s: kill osd.1", "data": KILL}
    found = anomalies.find(run_with([fault, health(3, ["OSD_DOWN", "PG_DEGRADED"])]), "w")
    assert not [a for a in found if a.point_id == 3]
    # without the fault, the same point is a collapse with errors and a health change
    kinds = {a.kind for a in anomalies.find(run_with([health(3, ["OSD_DOWN"])]), "w") if a.point_id == 3}
    assert {"collapse", "errors", "health"} <= kinds
    # a check its faults do not explain is still flagged
    odd = anomalies.find(run_with([fault, health(3, ["OSD_DOWN", "MON_DOWN"])]), "w")
    assert [a.kind for a in odd if a.point_id == 3] == ["health"] and "MON_DOWN" in odd[0].message


def test_timeline_chart_and_tables():
    fault = {"kind": "fault", "point_id": 3, "ts": 310.0, "message": "kill", "data": KILL}
    undo = {"kind": "fault", "point_id": 3, "ts": 330.0, "message": "start",
            "data": {"t_s": 24.5, "action": "start", "daemon": "osd.1", "undo": True}}
    run = run_with([fault, undo])
    charts = timeline.charts([run], "w")
    assert len(charts) == 1 and charts[0].svg.count('class="fault"') == 2
    assert "kill osd.1 @ 10.2 s" in charts[0].svg and "start osd.1 (at end)" in charts[0].svg
    assert charts[0].svg.count('class="series"') == 3
    # the engine's last, partial interval (a few ops over a sliver of a second) is not drawn as a rate spike
    tp = timeline.throughput_for(run.curve("w"))
    sliver = recovery.samples(SERIES + [rec(24.05, 50000, dt=0.05)])
    assert timeline.chart("t", sliver, [KILL], tp) == timeline.chart("t", recovery.samples(SERIES), [KILL], tp)
    rec_table, around = timeline.tables([run], "w")
    assert rec_table.rows[0][1] == "4" and rec_table.rows[0][8] == "2.8"
    assert rec_table.headers[7] == "below band (s)" and float(rec_table.rows[0][7]) > 0
    ts = [int(r[0]) for r in around.rows]
    assert ts[0] == 8 and 11 in ts and ts == sorted(ts)  # from 3 s before the fault
    assert next(r for r in around.rows if r[0] == "11")[4] == "kill osd.1"
    doc = build([run])
    table = next(t for t in doc.sections[0].tables if t.headers[-1] == "flags")
    assert table.rows[-1][-1].startswith("fault (intended)")
    # in HTML the intended fault is not drawn in the anomaly colour; a real flag beside it still is
    table.rows[-1][-1] = "fault (intended), failed"
    cells = html.table_html(table)
    assert '<span class="intended">fault (intended)</span>, <span class="flag">failed</span>' in cells


def test_fault_schedules_in_a_suite():
    text = """
name: s
cluster: {osds: 3}
prep: {pools: [{name: p, size: 3}]}
defaults: {on_error: continue, op_timeout: 5s, stall_timeout: 20s}
workloads:
  - {name: a, interface: rados, pool: p, rw: write, runtime: 30s,
     faults: [{at_s: 20s, action: start, daemon: osd.1}, {at_s: 5, action: kill, target: osd.1},
              {at_s: 6, action: osd_out, daemon: 2}, {at_s: 7, action: pause}]}
"""
    w = spec.parse(text).workloads[0]
    assert (w.on_error, w.op_timeout, w.stall_timeout) == ("continue", 5.0, 20.0)
    assert [f.daemon for f in w.faults] == ["osd.1", "osd.1", "osd.2", None]  # `target:`, the former name, too
    with pytest.raises(spec.SuiteError) as e:
        spec.parse(text.replace("20s, action: start", "31s, action: start").replace("osd_out, daemon: 2",
                                                                                   "osd_out, daemon: mon.a"))
    msg = e.value.message
    assert "2 problems" in msg and "past the point's end (30 s" in msg and "osd_out needs an OSD" in msg
    with pytest.raises(spec.SuiteError, match="op_timeout: 0 is not allowed"):
        spec.parse(text.replace("op_timeout: 5s", "op_timeout: 0"))
    assert spec.parse(text.replace("op_timeout: 5s", "op_timeout: null")).workloads[0].op_timeout is None
