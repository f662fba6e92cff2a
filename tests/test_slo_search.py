"""SLO search logic on synthetic latency curves: monotone, noisy, with a cliff; and its error cases."""

from __future__ import annotations

import math
import random
from typing import Callable

import pytest

from fathom.analysis import slo
from fathom.units import format_rate

P99_5MS = slo.Targets({"p99": 5.0})


def probe(curve: Callable[[float], float], load: float, ci: float = 0.03, ops: int = 20_000,
          kept: Callable[[float], bool] = lambda r: True, client: Callable[[float], float] = lambda r: 20.0,
          noise: Callable[[], float] = lambda: 1.0) -> slo.Observation:
    est = curve(load) * noise()
    return slo.Observation(load, ops, 0, {"p99": (est, est * (1 - ci), est * (1 + ci))}, schedule_kept=kept(load),
                           achieved=load if kept(load) else load * 0.8, client_thread_pct=client(load))


def search(curve: Callable[[float], float], targets: slo.Targets = P99_5MS, start: float = 100, lo: float = 10,
           hi: float = 100_000, integer: bool = False, **kw) -> slo.Search:
    s = slo.Search(targets, start=start, lo=lo, hi=hi, integer=integer)
    while (load := s.next_load()) is not None:
        assert len(s.probes) < 40, "the search must end"
        s.record(slo.judge(probe(curve, load, **kw), targets, s.unit, final=s.final(load)))
    return s


def test_monotone_curve_is_found_within_the_resolution():
    curve = lambda r: 1 + 4 * (r / 1000) ** 3  # noqa: E731  p99 5 ms at exactly 1000 ops/s
    s = search(curve)
    r = s.result()
    assert r.status == "found" and 950 <= r.load <= 1000 and r.failed_at is not None
    assert (r.failed_at - r.load) / r.load <= 0.05 and "p99" in r.why[0] and "> 5 ms" in r.why[0]
    # bracketing doubles from 100 and bisection narrows: far fewer probes than a 5% grid up to 1000 would take
    assert len(r.probes) <= 12
    assert "p99 <= 5 ms up to" in r.message


def test_a_cliff_is_found_where_it_is():
    curve = lambda r: 1.0 if r < 3000 else 50.0  # noqa: E731
    r = search(curve).result()
    assert r.status == "found" and 3000 * 0.95 <= r.load < 3000 <= r.failed_at


def test_noisy_curve_lands_near_the_truth():
    curve = lambda r: 1 + 4 * (r / 1000) ** 3  # noqa: E731
    rng = random.Random(7)
    close = 0
    for _ in range(100):
        r = search(curve, noise=lambda: math.exp(rng.gauss(0, 0.05))).result()
        assert r.status == "found"
        close += abs(r.load - 1000) / 1000 <= 0.10
    assert close >= 90, close


def test_a_schedule_not_kept_fails_the_probe_even_with_low_latency():
    r = search(lambda r: 1.0, kept=lambda r: r < 2000).result()
    assert r.status == "found" and 1900 <= r.load < 2000 and "schedule not kept" in r.why[0]


def test_no_load_meets_the_target():
    # p99 falls with the load but not far enough: halved down to the lower bound
    r = search(lambda r: 6.0 + r / 10).result()
    assert r.status == "none" and r.load is None and r.failed_at == 10 and r.to_dict()["floor"] is None
    assert r.message.startswith("no load meets p99 <= 5 ms: the lowest probe, 10 ops/s, failed")


def test_every_load_meets_the_target_up_to_the_bound():
    r = search(lambda r: 1.0, hi=50_000).result()
    assert r.status == "ceiling" and r.load == 50_000 and "raise the bound" in r.message


def test_a_client_bound_probe_is_not_the_clusters_limit():
    r = search(lambda r: 1 + 4 * (r / 1000) ** 3, client=lambda r: 97.0 if r >= 800 else 30.0).result()
    assert r.status == "client" and r.load == 800 and r.failed_at == 1600  # a met probe counts, bound or not
    assert "not the cluster's" in r.message and "97%" in r.why[-1]


def test_iodepth_search_ends_on_neighbours():
    curve = lambda qd: 0.5 * qd  # noqa: E731  p99 5 ms at iodepth 10
    r = search(curve, start=1, lo=1, hi=256, integer=True).result()
    assert r.status == "found" and r.load == 10 and r.failed_at == 11
    assert "iodepth 10" in r.message


def test_a_borderline_probe_is_repeated_then_decided_by_its_estimate():
    targets = slo.Targets({"p99": 5.0})
    s = slo.Search(targets, start=1000, lo=10, hi=1000)
    calls = 0
    while (load := s.next_load()) is not None:
        calls += 1
        est = 4.9 if load == 1000 else 1.0  # 5 ms inside the interval at 1000 ops/s
        s.record(slo.judge(slo.Observation(load, 20_000, 0, {"p99": (est, est * 0.9, est * 1.1)}), targets,
                           s.unit, final=s.final(load)))
    outcomes = [p.outcome for p in s.probes]
    assert outcomes == ["borderline"] * (slo.MAX_REPEATS - 1) + ["meets"] and calls == slo.MAX_REPEATS
    r = s.result()
    assert r.status == "ceiling" and s.probes[-1].decided_by_estimate


def test_short_probes_errors_and_interval_bounds():
    t = slo.Targets({"p99": 5.0, "p999": 20.0}, error_rate=0.001)
    assert t.min_ops() == 10_000 and slo.Targets({"p99": 1.0}).min_ops() == 1_000
    assert t.describe() == "p99 <= 5 ms, p99.9 <= 20 ms, errors <= 0.1%"
    v = slo.judge(slo.Observation(100, 5_000, 0, {"p99": (1, 1, 1), "p999": (2, 2, 2)}), t, "ops/s")
    assert v.outcome == "short" and "10,000" in v.reasons[0]
    v = slo.judge(slo.Observation(100, 20_000, 40, {"p99": (1, 1, 1), "p999": (2, 2, 2)}), t, "ops/s")
    assert v.outcome == "fails" and v.reasons == ["errors 0.2% > 0.1%"]
    lo, hi = slo.quantile_bounds(10_000, 0.999)
    assert 0.9983 <= lo < 0.999 < hi <= 0.9998
    lo, hi = slo.quantile_bounds(1_000_000, 0.99)
    assert hi - lo < 0.0005
    assert slo.quantile_bounds(10, 0.99)[1] == 1.0  # never beyond the largest sample


@pytest.mark.parametrize("outcome", ["meets", "fails"])
def test_verdicts_serialise(outcome):
    est = 1.0 if outcome == "meets" else 9.0
    v = slo.judge(slo.Observation(100, 20_000, 0, {"p99": (est, est, est)}), P99_5MS, "ops/s")
    assert v.outcome == outcome and v.to_dict()["obs"]["percentiles"]["p99"] == [est, est, est]


def test_answers_compare_only_beyond_their_brackets():
    def ans(load, failed_at, status="found", p99=5.0):
        return {"settings": {"targets": {"latency_ms": {"p99": p99}, "error_rate": None}}, "unit": "ops/s",
                "result": {"status": status, "load": load, "failed_at": failed_at}}

    got = slo.compare_answers(ans(1000, 1050), ans(1180, 1240))
    assert (got["base_load"], got["new_load"]) == (1000, 1180)
    assert got["verdict"] == "more load" and got["ratio"] == pytest.approx(1.18)
    assert slo.compare_answers(ans(1000, 1050), ans(1020, 1070))["verdict"] == "same within the searches' resolution"
    worse = slo.compare_answers(ans(1000, 1050), ans(700, 740), gate=0.10)
    assert worse["verdict"] == "less load" and worse["regressed"]
    assert not slo.compare_answers(ans(1000, 1050), ans(950, 990), gate=0.10)["regressed"]  # within the gate
    assert slo.compare_answers(ans(1000, 1050), ans(None, 10, "none"))["verdict"] == "no verdict"
    assert not slo.compare_answers(ans(1000, 1050), ans(900, 950, p99=9.0))["comparable"]


def test_the_suite_field_and_the_command_line_over_it():
    import textwrap

    from fathom.run import probes
    from fathom.suite import spec

    text = textwrap.dedent("""\
        name: s
        defaults: {engine: fathom-engine, interface: "null"}
        workloads: [{name: a}]
        slo: {p99: 5ms, p999: 0.02s, error_rate: 0.1%, resolution: 10%, probe: 5s}
        """)
    s = spec.parse(text, "s.yaml").slo
    assert (s.p99, s.p999, s.error_rate, s.resolution, s.probe) == (5.0, 20.0, 0.001, 0.1, 5.0)
    got = probes.settings(s, {"p99": "2ms", "max": "8k", "p50": None})
    assert got.targets.latency_ms == {"p99": 2.0, "p999": 20.0} and got.hi == 8000 and got.resolution == 0.1
    with pytest.raises(spec.SuiteError) as ei:
        spec.parse(text.replace("p99: 5ms", "p99: soon"), "s.yaml")
    assert "s.yaml:4" in str(ei.value) and "slo.p99" in str(ei.value)
    with pytest.raises(Exception) as ei:
        probes.settings(None, {"max_probe": "1s", "p99": "1ms"})
    assert "max_probe (1 s) is shorter than probe (10 s)" in str(ei.value)


def test_rates_are_probed_at_four_significant_digits_and_the_bound_ends_the_bracket():
    s = search(lambda r: 1.0, start=3482.2499680023284, lo=54.41, hi=13928.999872)
    assert [p.load for p in s.probes] == [3482.0, 6964.0, 13930.0] and s.result().status == "ceiling"


# ---- batch means: per-second intervals of synthetic probes, through the run side's own observation ----

def records(seconds: list[list[float]]) -> tuple[str, list[dict]]:
    """Per-second latencies in ms as a point's merged histogram and its engine interval records."""
    from fathom.results import hdr

    hists = []
    for lat in seconds:
        h = hdr.new()
        for v in lat:
            h.record_value(int(v * 1e6))
        hists.append(hdr.encode(h))
    recs = [{"t": i + 1.0, "ramp": False, "ops": {"write": {"ops": len(lat), "hist": h}}}
            for i, (lat, h) in enumerate(zip(seconds, hists))]
    return hdr.encode(hdr.merge(hists)), recs


def sampled(seconds: list[list[float]], load: float = 1000.0) -> dict:
    """A probe as Probes merges it, from per-second latencies in ms."""
    from fathom.run import probes

    hist, recs = records(seconds)
    return {"ops": sum(map(len, seconds)), "errors": 0, "hist": hist, "ivals": probes.interval_hists(recs),
            "kept": True, "achieved": load}


def seconds_of(rng: random.Random, p99_ms: float, n: int = 10, per_s: int = 1000,
               slow: set[int] = frozenset(), factor: float = 3.0) -> list[list[float]]:
    """n seconds of lognormal latencies whose p99 is p99_ms; the seconds in `slow` are `factor` times slower."""
    sigma = 0.25
    scale = p99_ms / math.exp(2.326 * sigma)
    return [[scale * (factor if i in slow else 1.0) * rng.lognormvariate(0, sigma) for _ in range(per_s)]
            for i in range(n)]


def observe(got: dict, targets: slo.Targets = P99_5MS, batches: bool = True, load: float = 1000.0) \
        -> slo.Observation:
    from fathom.run import probes

    return probes.observation(load, got if batches else {**got, "ivals": None}, targets)


def width(iv: tuple[float, ...]) -> float:
    return iv[-1] - iv[-2]


def test_independent_latencies_give_a_batch_interval_about_as_wide_as_the_order_statistics():
    ratios = []
    for seed in range(8):
        got = sampled(seconds_of(random.Random(seed), 5.0))
        with_b, order = observe(got), observe(got, batches=False)
        assert with_b.batches == 10 and order.batches is None and not order.batch
        ratios.append(width(with_b.batch["p99"]) / width(order.percentiles["p99"]))
    # t_9 / 1.96 = 1.15 times the binomial width on average, scattered by the batches' own variance
    assert all(0.5 <= r <= 2.0 for r in ratios), ratios
    assert 0.9 <= sum(ratios) / len(ratios) <= 1.5, ratios


def test_independent_latencies_leave_the_search_where_it_was():
    curve = lambda r: 1 + 4 * (r / 1000) ** 3  # noqa: E731  p99 5 ms at exactly 1000 ops/s
    answers = {}
    for batches in (False, True):
        rng = random.Random(11)
        s = slo.Search(P99_5MS, start=100, lo=10, hi=100_000)
        while (load := s.next_load()) is not None:
            assert len(s.probes) < 40, "the search must end"
            obs = observe(sampled(seconds_of(rng, curve(load))), batches=batches, load=load)
            s.record(slo.judge(obs, P99_5MS, s.unit, final=s.final(load)))
        r = s.result()
        assert r.status == "found" and 900 <= r.load <= 1050, r.message
        answers[batches] = r.load
    assert abs(answers[True] / answers[False] - 1) <= 0.05, answers


@pytest.mark.parametrize("side", ["meets", "fails"])
def test_bursty_latency_turns_a_clear_probe_borderline_and_it_is_repeated(side):
    rng = random.Random(3)
    got = sampled(seconds_of(rng, 5.0, slow=set(rng.sample(range(10), 5))))
    with_b, order = observe(got), observe(got, batches=False)
    _, o_lo, o_hi = order.percentiles["p99"]
    b_lo, b_hi = with_b.batch["p99"]
    assert b_hi - b_lo >= 3 * (o_hi - o_lo)  # the seconds disagree: the batches see it, the ranks do not
    assert with_b.percentiles["p99"][1:] == (min(o_lo, b_lo), max(o_hi, b_hi))  # the wider of the two
    limit = (o_hi + b_hi) / 2 if side == "meets" else (o_lo + b_lo) / 2
    targets = slo.Targets({"p99": limit})
    assert slo.judge(order, targets, "ops/s").outcome == side
    v = slo.judge(with_b, targets, "ops/s")
    assert v.outcome == "borderline" and "from 10 batches" in v.reasons[0]
    s = slo.Search(targets, start=1000, lo=10, hi=100_000)
    s.record(v)
    assert s.next_load() == 1000  # run again there, merged with this one


def test_batch_intervals_never_go_under_the_order_statistics_and_need_enough_intervals():
    n, q = 20_000, 0.99
    # every second alike (no spread between batches): the binomial width stands
    lo, hi, b = slo.bounds(n, q, [2000] * 10, [20] * 10)
    assert (lo, hi) == slo.quantile_bounds(n, q) and b is not None and b[:2] == (q, q)
    assert slo.batch_bounds(q, [2000] * 4, [20] * 4) is None  # 4 seconds: too few to say anything
    assert slo.batch_bounds(q, [2000] * 4 + [0] * 6, [20] * 4 + [0] * 6) is None  # seconds without ops left out
    # a long probe's seconds are grouped: at most MAX_BATCHES batches
    assert slo.batch_bounds(q, [100] * 120, [1, 0] * 60)[2] == slo.MAX_BATCHES
    # a stall second of few, slow ops weighs by its ops (ratio estimator), not as much as a full second
    lo_w, hi_w, _ = slo.batch_bounds(q, [2000] * 9 + [20], [20] * 9 + [20])
    lo_u, hi_u, _ = slo.batch_bounds(q, [2000] * 10, [20] * 9 + [2000])
    assert hi_w - lo_w < hi_u - lo_u


def test_interval_records_to_batches():
    from fathom.results import hdr
    from fathom.run import probes

    h = hdr.new()
    h.record_value(1_000_000)
    one = hdr.encode(h)
    rec = lambda **kw: {"ops": {"read": {"ops": 1, "hist": one}}, **kw}  # noqa: E731
    got = probes.interval_hists([rec(ramp=True), rec(), rec(), rec(tail=True)])
    assert got == [[one], [one, one]]  # the ramp left out, the partial last interval joined to the one before
    fio = {"approx": True, "ops": {"read": {"ops": 5.0, "bytes": None}}}
    assert probes.interval_hists([rec(), fio]) is None and probes.interval_hists([]) is None
    assert probes._over([one], 500_000) == (1, 1) and probes._over([one], 1_000_000) == (1, 0)


def test_batch_figures_serialise_and_old_observations_still_judge():
    got = sampled(seconds_of(random.Random(5), 2.0))
    v = slo.judge(observe(got), P99_5MS, "ops/s")
    d = v.to_dict()
    assert v.outcome == "meets" and d["obs"]["batches"] == 10 and len(d["obs"]["batch"]["p99"]) == 2
    old = slo.judge(slo.Observation(100, 20_000, 0, {"p99": (4.0, 3.9, 4.1)}), P99_5MS, "ops/s")
    assert old.outcome == "meets" and old.to_dict()["obs"]["batch"] == {} and old.obs.batches is None


def test_the_run_side_merges_a_repeated_probes_intervals():
    from types import SimpleNamespace

    from fathom.run import probes
    from fathom.suite.plan import Point

    rng = random.Random(3)
    base = Point(0, "w/1", "w", "fathom-engine", 1, {"iodepth": 64, "runtime": 10.0, "ramp_time": 2.0}, {})
    src = probes.Probes(probes.Settings(slo.Targets({"p99": 15.0}), "w", start=1000, lo=10, hi=1000), base)
    gen = src.points()
    point = next(gen)
    for _ in range(2):
        assert point.params["rate"] == 1000  # the second: the first was borderline, so it runs again there
        seconds = seconds_of(rng, 5.0, slow=set(rng.sample(range(10), 5)))
        hist, recs = records([[0.5]] + seconds)  # a ramp second first: left out
        recs[0]["ramp"] = True
        m = {"total_ios": 10_000, "errors": 0, "schedule_kept": True, "achieved_rate_ops_s": 1000.0, "iops": 1000.0,
             "client_thread_max_pct": 20.0}
        src.record(point, SimpleNamespace(status="done", metrics=m, error=None, hist=hist, intervals=recs))
        point = next(gen, None)  # the probe judged, the next one made
    first, merged = (p.obs for p in src.search.probes[:2])
    assert src.search.probes[0].outcome == "borderline" and first.batches == 10
    assert merged.probes == 2 and merged.batches == 20 and merged.ops == 20_000


def test_the_answer_is_never_above_what_its_probe_achieved():
    # a cluster that completes 399 ops/s: a probe within 5% over it keeps its schedule (the rule's tolerance)
    # and meets a loose target, yet achieved 399. The answer is what the meeting probe achieved, not its offer.
    cap = 399.0
    s = slo.Search(P99_5MS, start=200, lo=10, hi=1600, resolution=0.02)
    while (load := s.next_load()) is not None:
        achieved = min(load, cap) * 0.999  # the drain's last op lengthens the measured time a little
        obs = slo.Observation(load, 20_000, 0, {"p99": (1.0, 0.9, 1.1)}, schedule_kept=achieved >= 0.95 * load,
                              achieved=achieved)
        s.record(slo.judge(obs, P99_5MS, s.unit, final=s.final(load)))
    r = s.result()
    met = [p for p in s.probes if p.outcome == "meets"]
    best = max(met, key=lambda p: p.load)
    assert r.status == "found" and best.load > cap  # the highest probe that met offered more than was done
    assert r.load <= best.obs.achieved <= cap and r.load == pytest.approx(best.obs.achieved, rel=1e-3)
    assert r.offered == best.load
    assert all(r.load <= p.obs.achieved for p in met if p.load == best.load)
    assert f"up to {slo.achieved_text(r.load)} (achieved at {format_rate(best.load)} offered)" in r.message
    assert r.to_dict()["offered"] == best.load
    # the answer's text does not round up to the offer: 999.9 achieved of 1,000 offered reads as such
    v = slo.judge(slo.Observation(1000, 20_000, 0, {"p99": (1.0, 0.9, 1.1)}, schedule_kept=True, achieved=999.97),
                  P99_5MS, "ops/s")
    top = slo.Search(P99_5MS, start=1000, lo=10, hi=1000)
    top.record(v)
    assert top.result().message == ("every load met p99 <= 5 ms up to the search's bound, 1,000 ops/s (achieved "
                                    "999.9 ops/s): the answer is above it (raise the bound)")
    assert top.result().load == 999.9 and slo.achieved_text(12_340.0) == "12,340 ops/s"
    # closed loop (iodepth) has no achieved rate to hold it to
    q = search(lambda qd: 0.5 * qd, start=1, lo=1, hi=256, integer=True).result()
    assert q.load == 10 and q.offered is None


def test_a_floor_the_load_does_not_move_ends_the_search_early():
    # p99 stays at ~20 ms whatever the load below 1,000 ops/s (an OSD's own latency, not a queue): once two
    # successive halvings leave it where it was, halving further will not meet 5 ms
    rng = random.Random(5)
    s = search(lambda r: 20.0 if r < 1000 else 20.0 + r / 50, start=800, lo=3, noise=lambda: rng.uniform(0.97, 1.03))
    r = s.result()
    assert [p.load for p in r.probes] == [800, 400, 200]  # not on down to 3 ops/s
    assert r.status == "none" and r.load is None and r.failed_at == 200
    assert r.message.startswith("no load meets p99 <= 5 ms: p99 stays at ~20 ms from 800 ops/s down to "
                                "200 ops/s; the floor is not load-driven"), r.message
    assert "the lowest probe, 200 ops/s, failed (p99 " in r.message
    floor = r.to_dict()["floor"]
    assert floor["percentile"] == "p99" and (floor["from"], floor["to"]) == (800, 200)
    assert [round(x) for x in floor["ms"]] == [20, 20, 20]


def test_halvings_that_lower_the_percentile_go_on():
    # load-driven: each halving lowers p99 well beyond its interval, so the search goes down until it meets
    r = search(lambda r: 1 + 4 * (r / 1000) ** 3, start=8000, lo=3).result()
    assert r.status == "found" and 950 <= r.load <= 1000
    # one halving that agrees is not enough: 30 ms, 30 ms, then 3 ms
    s = search(lambda r: 3.0 if r < 300 else 30.0, start=1000, lo=3)
    assert [p.load for p in s.probes][:4] == [1000, 500, 250, 500 * 0.75] and s.result().status == "found"


def test_the_floor_rule_judges_only_the_failing_percentiles_and_kept_schedules():
    t = slo.Targets({"p50": 1.0, "p99": 5.0})

    def obs(load, p50, p99, kept=True):
        return slo.judge(slo.Observation(load, 20_000, 0, {"p50": (p50, p50 * 0.98, p50 * 1.02),
                                                           "p99": (p99, p99 * 0.98, p99 * 1.02)},
                                         schedule_kept=kept), t, "ops/s")

    s = slo.Search(t, start=800, lo=3, hi=1600)
    for v in (obs(800, 0.5, 20.0), obs(400, 0.3, 19.0), obs(200, 0.2, 20.5)):  # p50 meets and moves: no matter
        s.record(v)
    assert s.next_load() is None and "p99 stays at ~20 ms" in s.result().message
    s = slo.Search(t, start=800, lo=3, hi=1600)
    for v in (obs(800, 0.5, 20.0, kept=False), obs(400, 0.3, 19.0), obs(200, 0.2, 20.5)):  # a backlog's latency
        s.record(v)
    assert s.next_load() == 100


def test_the_reports_method_note_names_both_intervals():
    from fathom.run import probes
    from fathom.analysis.data import RunData
    from fathom.report import slo as report_slo

    s = search(lambda r: 1 + 4 * (r / 1000) ** 3)
    env = {"slo": {"settings": probes.Settings(P99_5MS).to_dict(), "calibration": None, "unit": "ops/s",
                   "result": s.result().to_dict()}}
    (section,) = report_slo.sections([RunData("s1", [1], "suite", "done", None, env, "s", [], [])])
    rule = section.tables[0].notes[1]
    assert rule == report_slo.RULE
    assert "order statistics" in rule and "batch means" in rule and "the wider of two" in rule
    assert "per-second" in rule and "docs/slo.md" in rule


def test_the_floor_rule_needs_intervals_that_carry_it():
    """p99 at 7.5, 28.8 and 14.5 ms with wide intervals (they overlap whatever the estimates) is noise, not a
    floor: the search halves on; estimates with tight intervals that stay put are one."""
    def run(at: dict[float, tuple[float, float, float]]) -> slo.Search:
        s = slo.Search(P99_5MS, start=800, lo=3, hi=1600)
        while (load := s.next_load()) is not None and load in at:
            s.record(slo.judge(slo.Observation(load, 20_000, 0, {"p99": at[load]}, schedule_kept=True), P99_5MS,
                               "ops/s", final=s.final(load)))
        return s

    noisy = run({800: (7.5, 5.5, 15.0), 400: (28.8, 14.0, 45.0), 200: (14.5, 7.0, 22.0)})
    assert noisy.next_load() == 100  # each fails, and the three overlap: before, "p99 stays at ~15 ms"
    tight = run({800: (15.0, 14.5, 15.5), 400: (15.5, 15.0, 16.0), 200: (14.8, 14.3, 15.3)})
    assert tight.next_load() is None and "p99 stays at ~15 ms" in tight.result().message
