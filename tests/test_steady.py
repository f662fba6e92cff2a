"""Steady state: the criteria on a series, the merged series of several engines, the watch that stops a
point, and how suites declare it (pure logic, no cluster)."""

from __future__ import annotations

import textwrap

import pytest

from fathom.results import hdr
from fathom.suite import plan, spec, steady
from fathom.companion import Live
from fathom.suite.spec import SuiteError
from fathom.results.series import Sample
from fathom.results import series as rseries
from fathom.run.steady import SteadyStateCompanion
from fathom.suite.steady import Criteria, check, first_steady


def series(values: list[float | None], metric: str = "iops") -> list[Sample]:
    """One sample a second with these values of `metric` (iops: ops; bw: MiB)."""
    out = []
    for i, v in enumerate(values):
        ops = int(v) if v is not None and metric == "iops" else 0
        nbytes = int(v * 2**20) if v is not None and metric == "bw" else 0
        out.append(Sample(float(i + 1), 1.0, ops, nbytes))
    return out


def crit(**kw) -> Criteria:
    base = {"metric": "iops", "window_s": 5.0, "max_s": 60.0}
    return Criteria(**{**base, **kw})


def hist(values_ns: list[int]) -> str:
    h = hdr.new()
    for v in values_ns:
        h.record_value(v)
    return hdr.encode(h)


def interval(ops: dict[str, tuple[int, int, list[int]]], ramp: bool = False, dt: float = 1.0) -> dict:
    """An engine interval record: op kind -> (ops, bytes, latencies for its histogram)."""
    return {"type": "interval", "dt": dt, "ramp": ramp,
            "ops": {k: {"ops": n, "bytes": b, "hist": hist(lat) if lat else None} for k, (n, b, lat) in ops.items()}}


# ---- the criteria -------------------------------------------------------------------


def test_a_flat_series_is_steady_once_the_window_is_full():
    c = crit(slope_pct=1.0, deviation_pct=5.0)
    s = series([1000.0] * 7)
    v = check(s[:4], c)
    assert not v.steady and "window not full (4 of 5" in v.why
    v = check(s, c)
    assert v.steady and v.mean == 1000.0 and v.slope_pct == 0.0 and v.deviation_pct == 0.0 and v.at_s == 7.0
    assert first_steady(s, c).at_s == 5.0  # the first full window


def test_slope_is_percent_of_the_window_mean_per_second():
    # 100 + 2 t: slope 2/s on a window mean of 100 + 2 x 5.5 = 111 -> 1.8018 %/s
    s = series([100.0 + 2 * t for t in range(1, 11)])
    v = check(s, crit(window_s=10.0, slope_pct=2.0))
    assert v.slope_pct == pytest.approx(100 * 2 / 111) and v.steady
    v = check(s, crit(window_s=10.0, slope_pct=1.8))
    assert not v.steady and "slope 1.8 %/s > 1.8 %/s" in v.why
    # a falling trend counts the same (|slope|)
    assert check(series([200.0 - 2 * t for t in range(1, 11)]), crit(window_s=10.0)).slope_pct == \
        pytest.approx(100 * 2 / 189)


def test_deviation_is_the_largest_distance_from_the_mean_in_percent():
    s = series([100.0, 100.0, 130.0, 100.0, 70.0])  # mean 100; the farthest is 30 away
    v = check(s, crit(deviation_pct=30.0))
    assert v.deviation_pct == pytest.approx(30.0) and v.steady
    v = check(s, crit(deviation_pct=29.9))
    assert not v.steady and "deviation 30 % > 29.9 %" in v.why
    # only the latest window counts: an early spike ages out
    s = series([500.0, 100.0, 100.0, 100.0, 100.0, 100.0])
    assert check(s, crit(deviation_pct=1.0)).steady and first_steady(s, crit(deviation_pct=1.0)).at_s == 6.0


def test_both_criteria_must_hold():
    s = series([100.0 + t for t in range(5)])  # slope 1/s on a mean of 102: 0.98 %/s; deviation 1.96 %
    assert check(s, crit(slope_pct=1.0, deviation_pct=2.0)).steady
    assert not check(s, crit(slope_pct=0.5, deviation_pct=2.0)).steady
    assert not check(s, crit(slope_pct=1.0, deviation_pct=1.0)).steady


def test_min_s_holds_a_steady_window_back():
    s = series([100.0] * 12)
    c = crit(slope_pct=1.0, min_s=10.0)
    assert not check(s[:9], c).steady and "9 s measured < min_s 10 s" in check(s[:9], c).why
    assert first_steady(s, c).at_s == 10.0


def test_a_stalled_or_empty_window_is_never_steady():
    assert not check(series([0.0] * 5), crit(slope_pct=1.0)).steady  # a stall: mean 0
    s = series([100.0] * 5)
    s[2] = Sample(3.0, 1.0, 0, 0)  # p99 of an interval with no ops is undefined
    v = check(s, crit(metric="p99", slope_pct=100.0))
    assert not v.steady and "no p99" in v.why
    assert first_steady(series([100.0, 0.0] * 5), crit(deviation_pct=50.0)) is None


def test_bw_is_mib_per_second():
    s = series([64.0] * 5, metric="bw")
    assert check(s, crit(metric="bw", deviation_pct=1.0)).mean == pytest.approx(64.0)


# ---- the merged series --------------------------------------------------------------


def test_engines_are_merged_by_interval_index_without_their_ramps():
    a = [interval({"read": (999, 0, [])}, ramp=True),
         interval({"read": (100, 409600, [1_000_000] * 99 + [9_000_000])}),
         interval({"read": (110, 450560, [1_000_000] * 110)})]
    b = [interval({"write": (50, 204800, [2_000_000] * 50)}, dt=1.002),  # this engine had a shorter ramp
         interval({"write": (60, 245760, [2_000_000] * 60)}),
         interval({"write": (70, 286720, [2_000_000] * 70)})]  # no partner yet in engine a
    s = rseries.merged_series([a, b])
    assert [(x.ops, x.bytes) for x in s] == [(150, 614400), (170, 696320)]
    assert s[0].dt == 1.002 and s[0].t == pytest.approx(1.002) and s[1].t == pytest.approx(2.002)
    assert s[0].value("iops") == pytest.approx(150 / 1.002)
    # stored records of two engines, interleaved by time, come apart by (host, instance)
    stored = [{**r, "t": float(i), "host": h} for i, (x, y) in enumerate(zip(a, b)) for r, h in ((x, "h1"), (y, "h2"))]
    assert [len(e) for e in rseries.by_engine(stored)] == [3, 3]
    assert [(x.ops, x.bytes) for x in rseries.merged_series(rseries.by_engine(stored))] == \
        [(150, 614400), (170, 696320)]
    assert s[0].value("bw") == pytest.approx(614400 / 1.002 / 2**20)
    # p99 of the histograms merged over op kinds and engines: 150 values, rank ceil(0.99 x 150) = 149 is 2 ms
    merged = hdr.merge([hist([1_000_000] * 99 + [9_000_000]), hist([2_000_000] * 50)])
    assert s[0].value("p99") == hdr.percentile(merged, 99) / 1e6 == pytest.approx(2.0, rel=1e-3)


def test_a_skipped_tick_merges_the_same_seconds_not_the_same_index():
    def at(tick: int, n: int, ticks: int = 1, ramp: bool = False) -> dict:
        return {**interval({"read": (n, 0, [])}, ramp=ramp, dt=float(ticks)), "tick": tick, "ticks": ticks}

    a = [at(1, 9, ramp=True), at(2, 100), at(3, 100), at(4, 100), at(5, 100)]
    b = [at(1, 9, ramp=True), at(2, 10), at(4, 20, ticks=2), at(5, 10)]  # late past tick 3: one record for 3-4
    s = rseries.merged_series([a, b])
    # by index b's 3-4 record would pair with a's second, and b's tick-5 one with a's tick 4
    assert [(x.ops, x.dt) for x in s] == [(110, 1.0), (220, 2.0), (110, 1.0)]
    assert [x.t for x in s] == [1.0, 3.0, 4.0]
    w = SteadyStateCompanion(crit(window_s=2.0, deviation_pct=50.0), engines=(("a", 0), ("b", 0)))
    w.start(None)
    for ra, rb in zip(a, b + [None]):
        w.on_interval({**ra, "host": "a"})
        if rb is not None:
            w.on_interval({**rb, "host": "b"})
    assert [(x.ops, x.dt) for x in w.samples] == [(110, 1.0), (220, 2.0), (110, 1.0)]


# ---- the watch ----------------------------------------------------------------------


def point(**ss) -> plan.Point:
    params = {"runtime": 30.0, "steady_state": {"metric": "iops", "window_s": 3.0, "criteria": ss,
                                                "min_s": 0.0, "max_s": None}}
    return plan.Point(0, "w", "w", "fathom-engine", 1, params, {})


def test_the_watch_asks_the_point_to_stop_once_and_reports_it():
    p = point(deviation=5.0)
    c = Criteria.of(p.params)
    assert c == Criteria("iops", 3.0, 30.0, 0.0, None, 5.0)
    live = Live(p)
    w = SteadyStateCompanion(c)
    w.start(live)
    for n in (999, 100, 300, 150):  # a ramp interval, then unsettled
        w.on_interval(interval({"read": (n, 0, [])}, ramp=n == 999))
    assert live.stop_reason is None
    for _ in range(3):
        w.on_interval(interval({"read": (101, 0, [])}))
    assert live.stop_reason is not None and live.stop_reason.startswith("steady state reached at 6 s: iops mean 101")
    first = live.stop_reason
    w.on_interval(interval({"read": (500, 0, [])}))  # the drain's last interval changes nothing
    got = w.stop()
    assert live.stop_reason == first
    assert got.metrics == {"steady_state": "reached", "steady_s": 6.0}
    (ev,) = got.events
    assert ev["kind"] == "steady" and "reached at 6 s" in ev["message"] and "deviation 0 %" in ev["message"]
    assert ev["data"]["verdict"]["deviation_pct"] == 0.0 and ev["data"]["criteria"]["deviation_pct"] == 5.0


def test_a_point_that_never_settles_says_not_reached_with_its_last_window():
    p = point(deviation=0.0001)
    live = Live(p)
    w = SteadyStateCompanion(Criteria.of(p.params))
    w.start(live)
    for i in range(10):
        w.on_interval(interval({"read": (100 + i % 2, 0, [])}))
    got = w.stop()
    assert live.stop_reason is None and got.metrics == {"steady_state": "not reached", "steady_s": None}
    msg = got.events[0]["message"]
    assert msg.startswith("steady state not reached by 30 s") and "deviation 0.662 % > 0.0001 %" in msg


def test_several_engines_are_judged_as_one_series():
    p = point(deviation=1.0)
    live = Live(p)
    w = SteadyStateCompanion(Criteria.of(p.params), engines=(("a", 0), ("b", 0)))
    w.start(live)
    for _ in range(3):  # host a alone: nothing is judged until host b has reported the same interval
        w.on_interval({**interval({"read": (100, 0, [])}), "host": "a"})
    w.on_interval({**interval({"read": (100, 0, [])}), "host": "b"})
    assert len(w.samples) == 1 and w.samples[0].ops == 200
    for _ in range(2):
        w.on_interval({**interval({"read": (100, 0, [])}), "host": "b"})
    assert live.stop_reason is not None and "iops mean 200" in live.stop_reason


def test_outcome_text_for_reports():
    p = point(deviation=1.0).params
    assert steady.outcome_text({"steady_state": "reached", "steady_s": 41.7}, p) == "reached at 42 s"
    assert steady.outcome_text({"steady_state": "not reached", "steady_s": None}, p) == \
        "not reached by 30 s (max_s)"
    assert steady.outcome_text({"iops": 1.0}, {}) is None


# ---- suites -------------------------------------------------------------------------

SUITE = """\
name: t
prep: {pools: [{name: rbd}], images: {pool: rbd, size: 64MiB}}
defaults: {engine: fathom-engine, interface: null, runtime: 20s}
workloads:
"""


def parse(workloads: str) -> spec.Suite:
    return spec.parse(SUITE + textwrap.dedent(workloads), "s.yaml")


def error_of(workloads: str) -> str:
    with pytest.raises(SuiteError) as ei:
        parse(workloads)
    return str(ei.value)


def test_steady_state_in_a_suite_sets_the_runtime_to_max_s():
    s = parse("""\
      - name: a
        steady_state: {metric: p99, window_s: 10s, criteria: {slope: 0.5%, deviation: "5%"}, min_s: 15s, max_s: 2m}
      - name: b
        steady_state: {metric: iops, window_s: 10, criteria: {slope: 1}}
      - {name: c}
    """)
    a, b, c = s.workloads
    assert a.runtime == 120.0 and a.steady_state.max_s == 120.0 and a.steady_state.criteria.slope == 0.5
    assert (a.steady_state.min_s, a.steady_state.window_s, a.steady_state.criteria.deviation) == (15.0, 10.0, 5.0)
    assert b.runtime == 20.0 and b.steady_state.max_s is None  # the runtime is the maximum
    assert c.steady_state is None
    pts = plan.expand(s)
    assert Criteria.of(pts[0].params) == Criteria("p99", 10.0, 120.0, 15.0, 0.5, 5.0)
    assert Criteria.of(pts[1].params).max_s == 20.0 and Criteria.of(pts[2].params) is None
    assert pts[0].est_s >= 120.0  # the plan's estimate is the maximum


def test_steady_state_from_defaults_applies_to_every_workload():
    s = spec.parse("name: t\ndefaults: {engine: fathom-engine, interface: null, steady_state: {metric: bw, "
                   "window_s: 5s, criteria: {deviation: 10}, max_s: 1m}}\nworkloads: [{name: a}, {name: b}]\n")
    assert [w.runtime for w in s.workloads] == [60.0, 60.0]


def test_every_steady_state_problem_at_once_by_line():
    msg = error_of("""\
      - name: a
        steady_state: {metric: iosp, window_s: 5s, criteria: {slope: 1}}
      - name: b
        steady_state: {metric: iops, window_s: 0, criteria: {deviation: -1}, max_s: -5}
      - name: c
        steady_state: {metric: bw, window_s: 30s, criteria: {}, min_s: 40s}
      - name: d
        runtime: 10s
        steady_state: {metric: bw, window_s: 5s, criteria: {slope: 2}, max_s: 60}
      - name: e
        engine: fio
        interface: rbd
        steady_state: {metric: iops, window_s: 5s, criteria: {slope: 2}}
      - name: f
        steady_state: {metric: iops, window_s: 5s, criteria: {slope: 2}, max_s: 1m}
        sweep: {runtime: [10s, 20s]}
    """)
    head, *problems = msg.splitlines()
    assert head == "s.yaml: 10 problems:", msg
    text = "\n".join(problems)
    assert "s.yaml:6: workload 'a': workloads[0].steady_state.metric: 'iosp' is not allowed; did you mean 'iops'? " \
           "(metrics: iops, bw, p99)" in text
    assert "s.yaml:8: workload 'b': workloads[1].steady_state.window_s: 0 is not allowed; must be more than 0 s" \
        in text
    assert "workloads[1].steady_state.max_s: -5 is not allowed; must be more than 0 s" in text
    assert "workloads[1].steady_state.criteria.deviation: -1 is not allowed; input should be greater than 0" in text
    assert "s.yaml:10: workload 'c': steady_state.window_s (30 s) is longer than the point's maximum " \
           "(runtime: 20 s): the criteria can never hold" in text
    assert "s.yaml:10: workload 'c': steady_state.min_s (40 s) is longer than the point's maximum" in text
    assert "s.yaml:10: workload 'c': steady_state.criteria: give slope (max %/s), deviation (max %) or both" in text
    assert "s.yaml:12: workload 'd': runtime (10 s) and steady_state.max_s (60 s) differ" in text
    assert "s.yaml:17: workload 'e': steady_state needs an engine that can be stopped cleanly mid-point " \
           "(fathom-engine); engine 'fio' has no control channel" in text
    assert "s.yaml:20: workload 'f': workloads[5].sweep.runtime: runtime cannot be swept with steady_state.max_s" \
        in text


def test_a_window_of_one_interval_is_refused():
    assert "a window needs at least 2 intervals (2 s)" in error_of("""\
      - {name: a, steady_state: {metric: iops, window_s: 1s, criteria: {slope: 1}}}
    """)
