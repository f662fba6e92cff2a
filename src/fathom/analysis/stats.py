"""Small statistics, stated plainly: means, spreads, bootstrap intervals, the knee of a curve.

Pure Python with a fixed seed, so the same data always gives the same interval.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20251


@dataclass
class Summary:
    n: int
    mean: float
    stdev: float | None  # None with one sample
    min: float
    max: float
    outliers: int  # beyond 1.5 IQR of the quartiles (Tukey), only counted with n >= 4

    def cv(self) -> float | None:
        return self.stdev / self.mean if self.stdev is not None and self.mean else None


def summarize(values: Sequence[float]) -> Summary | None:
    v = [float(x) for x in values if x is not None]
    if not v:
        return None
    out = 0
    if len(v) >= 4:
        q1, _, q3 = statistics.quantiles(v, n=4)
        iqr = q3 - q1
        out = sum(1 for x in v if x < q1 - 1.5 * iqr or x > q3 + 1.5 * iqr)
    return Summary(len(v), statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else None, min(v), max(v), out)


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1) of already sorted values."""
    if not sorted_vals:
        raise ValueError("no values")
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def bootstrap_ci(groups: Sequence[Sequence[Sequence[float]]], statistic: Callable[[list[list[list[float]]]], float],
                 resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
                 seed: int = SEED) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `statistic`.

    groups: independent sample sets, each a list of strata (e.g. one stratum per iodepth), each
    stratum a list of repeated measurements. Every stratum is resampled with replacement on its
    own, so the structure of the sweep is kept. Returns None when nothing can vary (no stratum
    has two samples): a single measurement has no interval.
    """
    if not any(len(s) > 1 for g in groups for s in g):
        return None
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        sample = [[[s[rng.randrange(len(s))] for _ in s] if s else [] for s in g] for g in groups]
        try:
            val = statistic(sample)
        except (ZeroDivisionError, ValueError):
            continue
        if val is not None and math.isfinite(val):
            stats.append(val)
    if len(stats) < resamples // 2:
        return None
    stats.sort()
    alpha = (1 - confidence) / 2
    return percentile(stats, alpha), percentile(stats, 1 - alpha)


KNEE_DEFINITION = (
    "The knee is the level with the highest power, throughput divided by mean latency (Kleinrock). "
    "In a closed loop (outstanding ops = throughput x latency) this is the last point before each further "
    "step adds more latency than throughput, in relative terms: past it, extra queue depth mostly queues. "
    "Saturation is the first level that reaches 90% of the curve's peak throughput."
)
SATURATION_FRACTION = 0.9


def knee_index(throughput: Sequence[float | None], latency: Sequence[float | None]) -> int | None:
    """Index of the highest-power point (throughput / latency), or None without usable points."""
    best, best_i = -1.0, None
    for i, (x, r) in enumerate(zip(throughput, latency)):
        if x is None or r is None or r <= 0:
            continue
        power = x / r
        if power > best:
            best, best_i = power, i
    return best_i


def saturation_index(throughput: Sequence[float | None], fraction: float = SATURATION_FRACTION) -> int | None:
    vals = [x for x in throughput if x is not None]
    if not vals:
        return None
    peak = max(vals)
    for i, x in enumerate(throughput):
        if x is not None and x >= fraction * peak:
            return i
    return None


def geomean(values: Sequence[float]) -> float | None:
    v = [x for x in values if x is not None and x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in v)) if v else None
