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
# p-values below it are printed as a bound: a t test's tail that far out says 'far beyond chance', no finer
# (its model is not that exact), and a zero spread gives p = 0, which is no probability to print
P_FLOOR = 0.001
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


def p_cell(p: float) -> str:
    """A p-value for a table's cell: '< 0.001' below P_FLOOR, else two significant digits ('0.012')."""
    return f"< {P_FLOOR:g}" if p < P_FLOOR else f"{p:.2g}"


def p_text(p: float) -> str:
    """A p-value in a sentence: 'p < 0.001', 'p = 0.012'."""
    return f"p < {P_FLOOR:g}" if p < P_FLOOR else f"p = {p:.2g}"


def geomean(values: Sequence[float]) -> float | None:
    v = [x for x in values if x is not None and x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in v)) if v else None


# ---- small-n intervals: Student's t ---------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom (df may be fractional: Welch)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), not {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass
class LogDiff:
    """mean(log NEW) - mean(log BASE) of one figure, with its variance and Welch degrees of freedom."""

    d: float
    var: float  # of d
    df: float  # Welch-Satterthwaite (inf when both sides have no spread)
    n: tuple[int, int]  # samples BASE, NEW


def log_diff(base: Sequence[float], new: Sequence[float]) -> LogDiff | None:
    """The log ratio of two samples' geometric means (None with a sample under 2 values or a value <= 0)."""
    if len(base) < 2 or len(new) < 2 or min(*base, *new) <= 0:
        return None
    lb, ln = [math.log(x) for x in base], [math.log(x) for x in new]
    vb, vn = statistics.variance(lb) / len(lb), statistics.variance(ln) / len(ln)
    var = vb + vn
    den = (vb * vb / (len(lb) - 1)) + (vn * vn / (len(ln) - 1))
    return LogDiff(statistics.fmean(ln) - statistics.fmean(lb), var, var * var / den if den > 0 else math.inf,
                   (len(lb), len(ln)))


def pooled(diffs: Sequence[LogDiff]) -> LogDiff | None:
    """The mean of several independent log ratios (the geometric mean ratio over levels): variances added over
    the count squared, degrees of freedom by Welch-Satterthwaite over their parts."""
    if not diffs:
        return None
    k = len(diffs)
    var = sum(x.var for x in diffs) / (k * k)
    den = sum((x.var / (k * k)) ** 2 / x.df for x in diffs if math.isfinite(x.df) and x.df > 0)
    return LogDiff(statistics.fmean(x.d for x in diffs), var, var * var / den if den > 0 else math.inf,
                   (min(x.n[0] for x in diffs), min(x.n[1] for x in diffs)))


def ratio_interval(x: LogDiff, confidence: float) -> tuple[float, float]:
    """The t interval of exp(d): the ratio of geometric means NEW / BASE at this confidence."""
    if x.var <= 0:
        return math.exp(x.d), math.exp(x.d)
    q = t_quantile(0.5 + confidence / 2.0, x.df) if math.isfinite(x.df) else _z(0.5 + confidence / 2.0)
    half = q * math.sqrt(x.var)
    return math.exp(x.d - half), math.exp(x.d + half)


def _z(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)
