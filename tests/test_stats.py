"""Statistics used by reports and comparisons: bootstrap intervals, knee, saturation, summaries."""

from __future__ import annotations

import pytest

from fathom.analysis.stats import bootstrap_ci, geomean, knee_index, saturation_index, summarize


def test_summary_mean_stdev_outliers():
    s = summarize([10, 11, 9, 10, 10, 10, 50])
    assert s.n == 7 and s.min == 9 and s.max == 50
    assert s.mean == pytest.approx(110 / 7)
    assert s.outliers == 1  # 50 is beyond 1.5 IQR
    one = summarize([3.0])
    assert one.stdev is None and one.outliers == 0


def test_bootstrap_none_without_repetitions():
    assert bootstrap_ci([[[1.0], [2.0]], [[3.0]]], lambda g: 1.0) is None


def test_bootstrap_is_deterministic_and_brackets_the_estimate():
    base = [[100.0, 101.0, 99.0, 100.5]]
    new = [[110.0, 111.0, 109.0, 110.5]]
    stat = lambda g: (sum(g[1][0]) / len(g[1][0])) / (sum(g[0][0]) / len(g[0][0]))  # noqa: E731
    ci1 = bootstrap_ci([base, new], stat)
    ci2 = bootstrap_ci([base, new], stat)
    assert ci1 == ci2
    lo, hi = ci1
    assert lo < 1.1 < hi
    assert lo > 1.08 and hi < 1.12  # tight data, tight interval


def test_knee_is_max_power_point():
    # Classic randread 4k (published): power = IOPS / clat: 373.7k at qd1, 244.7k at qd2 ... -> qd1
    tp = [108365.87, 124779.61, 130072.33]
    lat = [0.29, 0.51, 0.98]
    assert knee_index(tp, lat) == 0
    # SeaStore randread 4k: 504k, 548k, 579k, 387k -> qd4 (index 2)
    assert knee_index([126108.05, 186270.38, 272327.60, 313378.57], [0.25, 0.34, 0.47, 0.81]) == 2
    assert knee_index([None, 5.0], [1.0, None]) is None


def test_saturation_first_level_at_90pct_of_peak():
    assert saturation_index([10, 50, 89, 90, 100]) == 3
    assert saturation_index([None, None]) is None


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
