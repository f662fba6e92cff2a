"""Fixed log latency buckets for Prometheus, from the engines' HDR histograms.

Prometheus' histogram_quantile adds buckets across series (hosts, engines, op kinds) only when every series
has the same bounds, so the bounds are fixed here, not derived from a run: five per decade from 10 us to
100 s (1, 1.58, 2.51, 3.98, 6.31 x 10^k), 36 bounds. histogram_quantile interpolates linearly inside a
bucket, so a quantile read back is within its bucket: at most 58% above the bucket's lower bound.
"""

from __future__ import annotations

import bisect

from hdrh.histogram import HdrHistogram

PER_DECADE = 5
BOUNDS_S: tuple[float, ...] = tuple(float(f"{10 ** (k / PER_DECADE - 5):.6g}") for k in range(0, 7 * PER_DECADE + 1))
BOUNDS_NS: tuple[int, ...] = tuple(round(b * 1e9) for b in BOUNDS_S)


def counts(h: HdrHistogram) -> tuple[list[int], int, float]:
    """Per-bucket counts (not cumulative; the last entry is above the highest bound, +Inf), the total and the
    sum of latencies in seconds (from each HDR bucket's middle value)."""
    out = [0] * (len(BOUNDS_NS) + 1)
    total, total_ns = 0, 0.0
    for item in h.get_recorded_iterator():
        c = item.count_at_value_iterated_to
        v = item.value_iterated_to  # the HDR bucket's highest equivalent value
        out[bisect.bisect_left(BOUNDS_NS, v)] += c
        total += c
        total_ns += c * (h.get_lowest_equivalent_value(v) + v) / 2
    return out, total, total_ns / 1e9


def quantile(cum: list[int], q: float) -> float | None:
    """histogram_quantile's rule on cumulative bucket counts (for tests and the page's check): seconds."""
    total = cum[-1]
    if total <= 0:
        return None
    rank = q * total
    i = bisect.bisect_left(cum, rank)
    if i >= len(BOUNDS_S):
        return BOUNDS_S[-1]
    lo = BOUNDS_S[i - 1] if i > 0 else 0.0
    below = cum[i - 1] if i > 0 else 0
    inside = cum[i] - below
    return lo + (BOUNDS_S[i] - lo) * ((rank - below) / inside if inside else 0.0)
