"""The comparison rule on simulated runs: how often it gives a verdict the data cannot carry, and how often it
catches a real regression (pure logic, fixed seed)."""

from __future__ import annotations

import random

from fathom.analysis.compare import compare
from fathom.analysis.data import RunData, StoredPoint

LEVELS = [(1, 1000.0), (4, 3000.0), (16, 4000.0), (64, 4100.0)]  # iodepth, IOPS: three on the plateau
NOISE = 0.05  # coefficient of variation of one trial, throughput and latency alike
TOLERANCE = 0.10  # fathom compare's default
TRIALS = 200  # comparisons per case


def _run(name: str, rid: int, n: int, scale: float, rng: random.Random) -> RunData:
    pts = []
    for qd, iops in LEVELS:
        for _ in range(n):
            x = iops * scale * rng.lognormvariate(0.0, NOISE)
            p99 = qd / (iops * scale) * 3e3 * rng.lognormvariate(0.0, NOISE)  # ms: slower when throughput falls
            pts.append(StoredPoint(run=name, run_id=rid, workload="w", params={"iodepth": qd},
                             metrics={"iops": x, "p99_ms": p99, "clat_ms": p99 / 3, "total_ios": int(x * 60)}))
    return RunData(name, [rid], "suite", "done", None, {}, None, pts, [])


def _verdicts(n: int, scale: float, seed: int) -> list[tuple[str, bool]]:
    rng = random.Random(seed)
    out = []
    for i in range(TRIALS):
        c = compare(_run("base", 2 * i, n, 1.0, rng), [_run("new", 2 * i + 1, n, scale, rng)], TOLERANCE,
                    fail_on_regression=0.10)
        (w,) = c.workloads
        out.append((w.verdict, w.regression))
    return out


def test_the_same_system_rarely_gets_a_verdict():
    for n in (1, 2, 3, 5):
        got = _verdicts(n, 1.0, seed=n)
        wrong = sum(v in ("better", "worse") for v, _ in got) / len(got)
        assert wrong <= 0.05, (n, wrong)
        assert not any(reg for _, reg in got), n  # and the gate never fires on noise
        if n == 1:
            assert all(v == "no verdict (1 trial)" for v, _ in got)


def test_a_twenty_percent_regression_at_every_level_is_caught_at_three_trials():
    got = _verdicts(3, 0.8, seed=99)
    caught = sum(v == "worse" for v, _ in got) / len(got)
    assert caught >= 0.9, caught
    assert sum(reg for _, reg in got) / len(got) >= 0.9  # --fail-on-regression 10% fires on it too
    # one trial cannot tell it from noise, and says so rather than guess
    assert all(v == "no verdict (1 trial)" for v, _ in _verdicts(1, 0.8, seed=7))


def _tail_noisy_run(name: str, rid: int, rng: random.Random) -> RunData:
    """One trial of the same system as a busy host gives it: throughput within about 10%, p99 spread so wide
    that identical runs differ by more than 2x about one time in four (as an outside check found on real runs)."""
    pts = []
    for qd, iops in LEVELS:
        x = iops * rng.lognormvariate(0.0, 0.10)
        p99 = qd / iops * 3e3 * rng.lognormvariate(0.0, 0.45)
        pts.append(StoredPoint(run=name, run_id=rid, workload="w", params={"iodepth": qd},
                               metrics={"iops": x, "p99_ms": p99, "clat_ms": qd / x * 1e3, "total_ios": int(x * 60)}))
    return RunData(name, [rid], "suite", "done", None, {}, None, pts, [])


def test_one_trial_gives_no_tail_verdict_and_at_most_one_percent_false_verdicts():
    rng = random.Random(35)
    pairs = 1000
    wrong = fired = 0
    tail_gaps = 0
    for i in range(pairs):
        base, new = _tail_noisy_run("base", 2 * i, rng), _tail_noisy_run("new", 2 * i + 1, rng)
        (w,) = compare(base, [new], TOLERANCE, fail_on_regression=0.10).workloads
        wrong += w.verdict in ("better", "worse")
        fired += w.regression
        tail_gaps += any(max(lv.lat.ratio, 1 / lv.lat.ratio) > 2 for lv in w.levels)
        assert all(lv.lat.verdict == "no verdict (1 trial)" for lv in w.levels)
    assert tail_gaps > pairs * 0.3  # the simulation does put identical runs' tails beyond 2x apart
    assert wrong <= pairs * 0.01 and fired <= pairs * 0.01, (wrong, fired)


def test_the_gate_quotes_the_figure_that_fired():
    rng = random.Random(3)
    base = _run("base", 1, 3, 1.0, rng)
    new = _run("new", 2, 3, 1.0, rng)
    for p in new.points:
        if p.params["iodepth"] == 16:
            p.metrics["p99_ms"] *= 3  # only the tail at one level got worse
    (w,) = compare(base, [new], TOLERANCE, fail_on_regression=0.10).workloads
    assert w.regression and w.fired
    assert all(j.what == "p99 latency" for j in w.fired if j.level is not None)
    text = w.fired_text()
    assert "p99 latency at level 16: 0.3" in text and "throughput" not in text
