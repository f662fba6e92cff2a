"""How a point's figures are computed from engine records (no engine, no cluster): the open-loop schedule,
the measured phase's CPU, window and drain, p99 including errors, intervals merged by grid tick, and the
ramp flag in a lost engine's totals. Each test pins a defect of the numbers audit (truth-w3)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fathom.results import hdr, merge
from fathom.analysis import anomalies as anom
from fathom.analysis.data import StoredPoint
from fathom.dropin import multihost
from fathom.dropin import output as fmt
from fathom.engines import group as group_mod
from fathom.engines.fathom_engine import EngineRun, result_from_summary
from fathom.results.model import base_metrics

MS = 1_000_000


def _hist(values: list[int]) -> str:
    h = hdr.new()
    for v in values:
        h.record_value(v)
    return hdr.encode(h)


def _summary(ops: int = 4000, measured_s: float = 4.0, **kw) -> dict:
    """An engine summary: `ops` reads of 1-2 ms over measured_s, whole-process CPU 2 + 1 s."""
    vals = [MS + (i % 1000) * 1000 for i in range(ops)]
    s = {"type": "summary", "measured_s": measured_s, "ramp_s": 2.0,
         "ops": {"read": {"ops": ops, "bytes": ops * 4096, "errors": 0, "hist": _hist(vals),
                          "lat_ns": hdr.summary(_hist(vals))}},
         "errors": [], "cpu": {"user_s": 2.0, "sys_s": 1.0}}
    s.update(kw)
    return s


def _schedule(offered: float, achieved: float, intended: int, issued: int, unissued: int, kept: bool,
              max_lag: int = 1000, mean_lag: float = 100.0) -> dict:
    return {"rate": offered, "arrival": "poisson", "offered_rate": offered, "intended_ops": intended,
            "issued_ops": issued, "unissued_ops": unissued, "achieved_rate": achieved, "schedule_kept": kept,
            "ops": issued, "max_lag_ns": max_lag, "mean_lag_ns": mean_lag}


def _point(metrics: dict) -> StoredPoint:
    return StoredPoint(run="r", run_id=1, workload="w", params={"iodepth": 4}, metrics=metrics, label="4")


# ---- 1. open loop: the schedule is kept with the point, summed over engines, flagged when not kept ----------

def test_one_engine_keeps_its_schedule_and_shows_offered_and_achieved():
    s = _summary(schedule=_schedule(800.0, 395.0, 1600, 790, 810, False))
    r = result_from_summary(s, wall_s=7.0, user_s=2.5, sys_s=1.2)
    assert r.extra["schedule"]["offered_rate"] == 800.0
    m = base_metrics(r)
    assert (m["offered_rate_ops_s"], m["achieved_rate_ops_s"], m["unissued_ops"], m["schedule_kept"]) == \
        (800.0, 395.0, 810, False)
    closed = base_metrics(result_from_summary(_summary(schedule=None), None, None, None))
    assert [closed[k] for k in ("offered_rate_ops_s", "achieved_rate_ops_s", "unissued_ops", "schedule_kept")] \
        == [None] * 4


def test_many_engines_sum_their_schedules():
    scheds = [_schedule(400.0, 390.0, 800, 800, 0, True, 5000, 100.0),
              _schedule(400.0, 300.0, 800, 600, 200, False, 9000, 400.0)]
    totals = [merge.engine_totals(_summary(schedule=sc), []) for sc in scheds]
    res = merge.point_result(totals)
    sch = res.extra["schedule"]
    assert (sch["offered_rate"], sch["achieved_rate"], sch["intended_ops"], sch["issued_ops"],
            sch["unissued_ops"]) == (800.0, 690.0, 1600, 1400, 200)
    assert sch["schedule_kept"] is False and sch["max_lag_ns"] == 9000
    assert sch["mean_lag_ns"] == pytest.approx((100.0 * 800 + 400.0 * 600) / 1400)  # weighted by ops
    m = base_metrics(res)
    assert (m["offered_rate_ops_s"], m["achieved_rate_ops_s"], m["schedule_kept"]) == (800.0, 690.0, False)
    # every engine kept it: kept; an engine lost before its summary: not known to be kept
    kept = [_schedule(400.0, 400.0, 800, 800, 0, True)] * 2
    assert merge.merge_schedules(kept)["schedule_kept"] is True
    lost = merge.merge_schedules([kept[0], None])
    assert lost["schedule_kept"] is False and lost["engines_missing"] == 1
    assert merge.merge_schedules([None, None]) is None


def test_the_merged_schedule_is_kept_by_the_engines_rule_on_the_sums():
    def sched(achieved: float, kept: bool = True) -> dict:  # 4,000 arrivals in a 10 s window, none left over
        return {**_schedule(400.0, achieved, 4000, 4000, 0, kept), "intended_rate": 400.0}

    # each engine within 5% of its arrivals' rate: kept, the rates summed
    ok = merge.merge_schedules([sched(390.0), sched(385.0)])
    assert ok["schedule_kept"] is True and ok["intended_rate"] == 800.0 and ok["achieved_rate"] == 775.0
    # engines that call themselves kept (records without the rate rule) but achieved 10% under their arrivals'
    # rate: the point did not keep its schedule
    short = merge.merge_schedules([sched(362.0), sched(360.0)])
    assert short["schedule_kept"] is False and short["unissued_ops"] == 0
    assert base_metrics(merge.point_result([merge.engine_totals(_summary(schedule=s), [])
                                            for s in (sched(362.0), sched(360.0))]))["schedule_kept"] is False
    # one op spared per engine: 20 arrivals each in 2 s, 18 done over 2 s is within 5% less one op
    few = {**_schedule(10.0, 9.0, 20, 20, 0, True), "intended_rate": 10.0}
    assert merge.merge_schedules([few, few])["schedule_kept"] is True
    assert merge.schedule_rate_kept(8.9, 10.0, 20) is False and merge.schedule_rate_kept(9.0, 10.0, 20) is True


def _group(summaries: list[dict | None], intervals: list[list[dict]] | None = None) -> SimpleNamespace:
    ivs = intervals or [[] for _ in summaries]
    return SimpleNamespace(instances=[SimpleNamespace(run=EngineRun(summary=s, intervals=iv))
                                      for s, iv in zip(summaries, ivs)], stop_reason=None, lost_hosts={})


def test_a_bench_on_many_hosts_sums_the_schedules_not_the_first_engines():
    sums = [_summary(schedule=_schedule(400.0, 390.0, 800, 800, 0, True)),
            _summary(schedule=_schedule(400.0, 300.0, 800, 600, 200, False))]
    g = _group(sums)
    res = merge.point_result([merge.engine_totals(s, []) for s in sums])
    out = multihost._summary(g, res)
    assert out["schedule"]["offered_rate"] == 800.0 and out["schedule"]["unissued_ops"] == 200
    assert out["schedule"]["schedule_kept"] is False


def test_a_schedule_not_kept_is_flagged_and_warned():
    p = _point({"schedule_kept": False, "offered_rate_ops_s": 800.0, "achieved_rate_ops_s": 395.0,
                "unissued_ops": 810, "runtime_s": 4.0})
    (kind, msg), = anom.measurement_flags(p)
    assert kind == "schedule_not_kept" and "offered 800 ops/s" in msg and "810" in msg
    assert anom.measurement_flags(_point({"schedule_kept": True, "runtime_s": 4.0})) == []
    tab = fmt.RadosTable("read")
    s = fmt.rados_summary("seq", _summary(schedule=_schedule(800.0, 395.0, 1600, 790, 810, False)), tab, 4096, 4096)
    text = "\n".join(fmt.format_rados_summary("seq", s))
    assert "Offered rate (op/s):  800" in text and "Achieved rate (op/s): 395" in text
    assert "Unissued ops:" in text and "Warning: the open-loop schedule was not kept: 810 of the 1600" in text
    closed = fmt.rados_summary("seq", _summary(), fmt.RadosTable("read"), 4096, 4096)
    assert "schedule" not in closed and "Offered" not in "\n".join(fmt.format_rados_summary("seq", closed))


# ---- 4. client CPU: the measured phase's, on one base for one engine and many ------------------------

_MEASURED = {"seconds": 4.0, "user_s": 0.8, "sys_s": 0.4, "voluntary_ctx": 2000, "involuntary_ctx": 400}


def test_one_engine_cpu_per_op_is_the_measured_phases():
    s = _summary(cpu={"user_s": 2.0, "sys_s": 1.0, "measured": _MEASURED, "voluntary_ctx_per_op": 0.5,
                      "involuntary_ctx_per_op": 0.1})
    r = result_from_summary(s, wall_s=10.0, user_s=2.5, sys_s=1.2)  # wait4: the whole process
    m = base_metrics(r)
    assert m["client_cpu_us_per_op"] == pytest.approx(1.2 / 4000 * 1e6)  # not (2.5 + 1.2) / 4000
    assert m["usr_cpu"] == pytest.approx(20.0) and m["sys_cpu"] == pytest.approx(10.0)  # / 4 s, not / 10 s
    assert (r.client_user_s, r.client_sys_s) == (2.5, 1.2)  # the whole process's is kept beside it
    assert m["client_ctx_per_op"] == pytest.approx(0.6)
    # an older record without cpu.measured: as before
    old = base_metrics(result_from_summary(_summary(), wall_s=10.0, user_s=2.5, sys_s=1.2))
    assert old["client_cpu_us_per_op"] == pytest.approx(3.7 / 4000 * 1e6) and old["usr_cpu"] == pytest.approx(25.0)


def _iv(tick: int, ops: int, dt: float = 1.0, ramp: bool = False, user: float = 0.1, **kw) -> dict:
    r = {"type": "interval", "ts": 1000.0 + tick, "t": float(tick), "dt": dt, "tick": tick, "ticks": 1,
         "ramp": ramp, "in_flight": 4, "started": 0, "finished": 0, "cpu": {"user_s": user, "sys_s": user / 2},
         "ops": {"read": {"ops": ops, "bytes": ops * 4096, "errors": 0, "lat_mean_ns": 1e6, "lat_max_ns": 2 * MS,
                          "hist": _hist([MS] * ops) if ops else None}}}
    r.update(kw)
    return r


def test_many_engines_cpu_on_the_same_base_and_a_lost_engine_without_its_ramp():
    s = _summary(cpu={"user_s": 2.0, "sys_s": 1.0, "measured": _MEASURED})
    lost = [_iv(1, 500, ramp=True, user=0.5), _iv(2, 500, ramp=True, user=0.5), _iv(3, 1000, user=0.2),
            _iv(4, 1000, user=0.2)]
    totals = [merge.engine_totals(s, []), merge.engine_totals(s, []), merge.engine_totals(None, lost)]
    t = totals[2]
    # 13: a lost engine's ops and measured CPU are its non-ramp intervals' only
    assert t["ops"]["read"]["ops"] == 2000 and t["measured_s"] == 2.0
    assert (t["user_s"], t["sys_s"]) == pytest.approx((0.4, 0.2))
    assert t["process_user_s"] == pytest.approx(1.4)
    res = merge.point_result(totals)
    m = base_metrics(res)
    cpu = 2 * 1.2 + 0.6
    assert m["client_cpu_us_per_op"] == pytest.approx(cpu / 10000 * 1e6)
    assert m["usr_cpu"] == pytest.approx(100 * (0.8 * 2 + 0.4) / 4.0)  # % of one core, the measured seconds
    assert res.client_user_s == pytest.approx(2 * 2.0 + 1.4)  # the processes' CPU kept apart
    # per host: the measured CPU over the host's measured seconds, as usr_cpu is
    rows = merge.host_rows([{"host": "h1", "ops": 4000, "bytes": 0, "measured_s": 4.0, "hist": None,
                             "cpu_s": totals[0]["user_s"] + totals[0]["sys_s"]}])
    assert rows[0]["client_cpu_pct"] == pytest.approx(100 * 1.2 / 4.0)


def test_switches_per_op_of_many_engines():
    s = _summary(cpu={"user_s": 2.0, "sys_s": 1.0, "measured": _MEASURED})
    res = merge.point_result([merge.engine_totals(s, []), merge.engine_totals(s, [])])
    assert res.extra["ctx_per_op"] == pytest.approx({"voluntary": 0.5, "involuntary": 0.1})
    assert base_metrics(res)["client_ctx_per_op"] == pytest.approx(0.6)


# ---- 10. the window and the drain the rates divide by ---------------------------------------------------

def test_window_and_drain_are_kept_and_a_long_drain_is_flagged():
    r = result_from_summary(_summary(measured_s=40.0, window_s=30.0, drain_s=10.0), None, None, None)
    assert (r.extra["window_s"], r.extra["drain_s"]) == (30.0, 10.0)
    m = base_metrics(r)
    assert m["drain_s"] == 10.0 and m["runtime_s"] == 40.0
    (kind, msg), = anom.measurement_flags(_point(m))
    assert kind == "long_drain" and msg.startswith("IOPS divides by 30 s of window plus 10 s waiting for the slowest")
    short = base_metrics(result_from_summary(_summary(measured_s=30.1, window_s=30.0, drain_s=0.1), None, None, None))
    assert anom.measurement_flags(_point(short)) == []
    # many engines: the longest engine's split, since its measured time is the point's
    totals = [merge.engine_totals(_summary(measured_s=30.2, window_s=30.0, drain_s=0.2), []),
              merge.engine_totals(_summary(measured_s=40.0, window_s=30.0, drain_s=10.0), [])]
    assert merge.point_result(totals).extra["drain_s"] == 10.0
    s = fmt.rbd_summary(_summary(measured_s=40.0, window_s=30.0, drain_s=10.0))
    assert "Note: the rates divide by 30 s of window plus 10 s waiting" in "\n".join(fmt.format_rbd_summary(s, "read"))


# ---- 11. p99 including failed and timed-out ops -----------------------------------------------------------

def test_p99_including_errors():
    s = _summary(ops=980)  # 2% of the ops timed out after 30 s: the p99 of all ops is one of them
    s["errors"] = [{"op": "read", "kind": "ETIMEDOUT", "count": 20, "first": "x", "hist": _hist([30_000 * MS] * 20)}]
    m = base_metrics(result_from_summary(s, None, None, None))
    assert m["p99_ms"] < 3 and m["p99_all_ms"] == pytest.approx(30_000, rel=0.01)
    assert base_metrics(result_from_summary(_summary(), None, None, None))["p99_all_ms"] is None
    # many engines: the errors of each are concatenated, so their histograms merge too
    ok = _summary(ops=990)
    res = merge.point_result([merge.engine_totals(s, []), merge.engine_totals(ok, [])])
    want = hdr.percentile(hdr.merge([s["ops"]["read"]["hist"], ok["ops"]["read"]["hist"], s["errors"][0]["hist"]]), 99)
    assert base_metrics(res)["p99_all_ms"] == pytest.approx(want / 1e6)
    assert fmt.rados_summary("seq", s, fmt.RadosTable("read"), 4096, 4096)["latency_p99_all"] == \
        pytest.approx(30, rel=0.01)


# ---- 12. intervals of many engines merged by grid tick -------------------------------------------------------

def _engine(rate: int, skip: int | None = None) -> list[dict]:
    """Four 1 s ticks at `rate` ops/s; skip: the tick whose record was folded into the next (one record, 2 s)."""
    out = []
    for k in range(1, 5):
        if k == skip:
            continue
        two = skip is not None and k == skip + 1
        out.append(_iv(k, rate * (2 if two else 1), dt=2.0 if two else 1.0, ticks=2 if two else 1))
    return out


def _rates(merged: list[dict]) -> list[float]:
    return [sum(o["ops"] for o in r["ops"].values()) / r["dt"] for r in merged]


def test_a_skipped_tick_does_not_shift_an_engine():
    per = [_engine(500), _engine(500), _engine(1000, skip=2)]
    out = merge.merge_intervals(per)
    assert _rates(out) == [2000.0, 2000.0, 2000.0]  # by index: 2000, 1500, 2000, 1000
    assert [(r["tick"], r["ticks"], r["dt"]) for r in out] == [(1, 1, 1.0), (3, 2, 2.0), (4, 1, 1.0)]
    assert out[1]["ops"]["read"]["ops"] == 4000 and hdr.count(out[1]["ops"]["read"]["hist"]) == 4000
    assert sum(r["ops"]["read"]["ops"] for r in out) == sum(r["ops"]["read"]["ops"] for e in per for r in e)
    # records without a tick (older engines): by index, as before
    old = [[{k: v for k, v in r.items() if k not in ("tick", "ticks")} for r in e] for e in per]
    assert _rates(merge.merge_intervals(old)) == [2000.0, 1500.0, 2000.0, 1000.0]


def test_the_live_merge_waits_for_the_engine_that_skipped():
    insts = [group_mod.Instance(host=f"h{e}", index=0, spec={}) for e in range(3)]
    seen: list[dict] = []
    g = group_mod.Group(insts, "x", 1.0, "continue", seen.append, lambda e: None)
    per = [_engine(500), _engine(500), _engine(1000, skip=2)]
    for k in range(3):  # ticks 1..3 of the first two engines, the third's ticks 1 and (1, 3]
        for e in range(2):
            insts[e].run.intervals.append(per[e][k])
            g._merge_ready()
    assert [r["tick"] for r in seen] == [] and len(g.merged) == 0  # the third has sent nothing yet
    insts[2].run.intervals.append(per[2][0])
    g._merge_ready()
    assert [r["tick"] for r in seen] == [1]
    insts[2].run.intervals.append(per[2][1])
    g._merge_ready()
    assert [r["tick"] for r in seen] == [1, 3] and _rates(seen) == [2000.0, 2000.0]
    insts[0].run.intervals.append(per[0][3])
    insts[2].run.intervals.append(per[2][2])
    insts[1].lost = "cut"  # lost: what it sent is merged, nothing more is waited for
    g._merge_ready()
    assert [r["tick"] for r in seen] == [1, 3, 4] and seen[-1]["engines"] == 2


def test_next_span_takes_a_lost_engines_records_up_to_the_span():
    per = [[_iv(1, 10), _iv(2, 10), _iv(3, 10)], [_iv(1, 10)]]
    assert merge.next_span(per, [0, 0], [True, True]) == [1, 1]
    assert merge.next_span(per, [1, 1], [True, True]) is None  # the second may still send tick 2
    assert merge.next_span(per, [1, 1], [True, False]) == [1, 0]


# ---- 13. the ramp flag: a ramp interval is never measured ---------------------------------------------------

def test_coalesced_and_merged_records_keep_the_ramp_flag():
    per = [[_iv(1, 10, ramp=True), _iv(2, 10)], [_iv(1, 10, ramp=True), _iv(2, 10)]]
    out = merge.merge_intervals(per)
    assert [r["ramp"] for r in out] == [True, False]
    t = merge.engine_totals(None, per[0])
    assert t["ops"]["read"]["ops"] == 10 and t["cpu_measured"]["user_s"] == pytest.approx(0.1)


# ---- the report: columns shown when a point has the figure, flags where the figure qualifies it ------------------

def test_report_shows_open_loop_p99_with_errors_and_drain_columns_and_flags():
    from fathom.analysis.data import RunData
    from fathom.report.tables import detail_table

    kept = {"iops": 800.0, "total_ios": 3200, "runtime_s": 4.0, "drain_s": 0.01, "offered_rate_ops_s": 800.0,
            "achieved_rate_ops_s": 800.0, "unissued_ops": 0, "schedule_kept": True, "p99_all_ms": None}
    behind = {**kept, "iops": 395.0, "runtime_s": 5.0, "drain_s": 1.0, "achieved_rate_ops_s": 395.0,
              "unissued_ops": 810, "schedule_kept": False, "errors": 3, "p99_all_ms": 30_000.0}
    pts = [StoredPoint(run="r", run_id=1, workload="w", params={"iodepth": d, "bs": 4096}, metrics=m, label=str(d),
                 level=(d,), point_id=d, engine="fathom-engine") for d, m in ((4, kept), (8, behind))]
    run = RunData("r", [1], "suite", "done", None, {}, None, pts, [])
    t = detail_table(run, "w", "iodepth")
    rows = [dict(zip(t.headers, r)) for r in t.rows]
    assert [r["schedule kept"] for r in rows] == ["yes", "NO"] and rows[1]["unissued ops"] == "810"
    assert [r["p99 incl. errors (ms)"] for r in rows] == ["n/a", "30,000"]
    assert [r["drain after the stop (s)"] for r in rows] == ["0.01", "1.00"]
    assert "schedule_not_kept" in rows[1]["flags"] and "long_drain" in rows[1]["flags"]
    assert "schedule_not_kept" not in rows[0]["flags"]


def test_the_busiest_thread_of_any_engine_over_its_measured_phase():
    threads = [{"tid": 11, "name": "submit", "cpu_s": 3.88}, {"tid": 12, "name": "msgr-worker-0", "cpu_s": 1.0}]
    one = result_from_summary(_summary(cpu={"user_s": 6.0, "sys_s": 1.0, "measured": _MEASURED,
                                            "threads": threads}), wall_s=10.0, user_s=None, sys_s=None)
    assert base_metrics(one)["client_thread_max_pct"] == pytest.approx(100 * 3.88 / _MEASURED["seconds"])
    assert one.extra["busiest_thread"]["name"] == "submit"
    calm = _summary(cpu={"user_s": 2.0, "sys_s": 1.0, "measured": _MEASURED,
                         "threads": [{"tid": 5, "name": "submit", "cpu_s": 0.4}]})
    busy = _summary(cpu={"user_s": 6.0, "sys_s": 1.0, "measured": _MEASURED, "threads": threads})
    res = merge.point_result([merge.engine_totals(calm, []), merge.engine_totals(busy, [])])
    assert base_metrics(res)["client_thread_max_pct"] == pytest.approx(97.0)  # the max, not a sum or a mean
    assert base_metrics(result_from_summary(_summary(), None, None, None))["client_thread_max_pct"] is None
