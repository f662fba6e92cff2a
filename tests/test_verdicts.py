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
