"""HDR latency histograms as the engines ship them: decode, merge, summarise.

fathom-engine sends one histogram per op kind and interval as HdrHistogram V2
(deflate, base64: "HISTFAAA..."), values in ns, 3 significant digits, range
1 ns .. 1 hour. Merging histograms is exact (counts add), so percentiles of a
point run by several engines, or of several intervals, never average
percentiles. All functions are pure; an empty input gives zeros.

Public API (stable):
    LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS
    new() -> HdrHistogram                       empty histogram with the engine's bounds
    decode(b64: str) -> HdrHistogram            one encoded histogram
    encode(h: HdrHistogram) -> str              back to base64 V2+deflate
    merge(hists: Iterable[str | HdrHistogram]) -> HdrHistogram
    merge_b64(hists: Iterable[str | None]) -> (str | None, dict)   merged encoding and its percentiles (ns)
    with_merged(hists: dict[str, str]) -> (dict, dict | None)      op kinds plus their merge as "all"
    percentile(h: str | HdrHistogram, p: float) -> int      p in 0..100, ns
    percentiles(h, ps=(50, 90, 99, 99.9)) -> dict[str, int] keys "p50", "p90", "p99", "p999"
    summary(h, ps=(50, 90, 99, 99.9)) -> dict   count, mean, stdev, min, max (ns) and the percentiles
    count(h) -> int, mean(h) -> float, stdev(h) -> float, min_ns(h) -> int, max_ns(h) -> int
"""

from __future__ import annotations

import math
from typing import Iterable, Union

from hdrh.histogram import HdrHistogram

LOWEST_NS = 1
HIGHEST_NS = 3_600_000_000_000  # 1 hour
SIGNIFICANT_DIGITS = 3

Hist = Union[str, bytes, HdrHistogram]


def new() -> HdrHistogram:
    """An empty histogram with the engine's bounds and precision."""
    return HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)


def decode(b64: str | bytes) -> HdrHistogram:
    """Decode one base64 V2 (deflate) histogram."""
    if isinstance(b64, str):
        b64 = b64.encode("ascii")
    return HdrHistogram.decode(b64)


def encode(h: HdrHistogram) -> str:
    return h.encode().decode("ascii")


def _h(h: Hist) -> HdrHistogram:
    return h if isinstance(h, HdrHistogram) else decode(h)


def merge(hists: Iterable[Hist]) -> HdrHistogram:
    """Exact merge (counts add) of encoded or decoded histograms into a new one."""
    out = new()
    for h in hists:
        d = _h(h)
        if d.get_total_count():
            out.add(d)
    return out


def merge_b64(hists: Iterable[str | None]) -> tuple[str | None, dict[str, float]]:
    """Merge the non-empty encoded histograms: (the merged one encoded, its percentiles and max in ns).

    (None, {}) when there is nothing to merge. One op kind's histogram or several
    (read and write of a mix, or many engines): percentiles always come from the
    merged counts, never from averaging percentiles.
    """
    hs = [h for h in hists if h]
    if not hs:
        return None, {}
    m = merge(hs)
    if not m.get_total_count():
        return None, {}
    pct: dict[str, float] = {k: float(v) for k, v in percentiles(m).items()}
    pct["max"] = float(max_ns(m))
    return encode(m), pct


def with_merged(hists: dict[str, str]) -> tuple[dict[str, str], dict[str, float] | None]:
    """Per-op-kind histograms plus their exact merge as "all" when there are several, and the merged
    percentiles (None for a single kind: its own percentiles are the point's)."""
    if len(hists) < 2:
        return dict(hists), None
    all_h, pct = merge_b64(hists.values())
    return ({**hists, "all": all_h} if all_h else dict(hists)), pct


def count(h: Hist) -> int:
    return int(_h(h).get_total_count())


def percentile(h: Hist, p: float) -> int:
    """Value at percentile p (0..100) in ns; 0 for an empty histogram.

    The rank rule is the engine's (Rust hdrhistogram's value_at_quantile): the
    first value whose cumulative count reaches ceil(q * total), with q = p / 100
    as the engine writes it (0.999, not 0.9990000000000001). The Python hdrh
    library rounds the rank instead, which in a histogram of a few thousand
    values can land a tail percentile on the neighbouring value; this way a
    percentile fathom computes from merged histograms follows the rule of the
    percentiles the engine reports.
    """
    d = _h(h)
    total = d.get_total_count()
    if not total:
        return 0
    q = min(float(f"{p / 100:.12g}"), 1.0)
    rank = max(math.ceil(q * total), 1)
    seen = 0
    for i in range(d.counts_len):
        seen += d.get_count_at_index(i)
        if seen >= rank:
            v = d.get_value_from_index(i)
            return int(d.get_highest_equivalent_value(v) if q else d.get_lowest_equivalent_value(v))
    return 0


def _pkey(p: float) -> str:
    return "p" + f"{p:g}".replace(".", "")


def percentiles(h: Hist, ps: Iterable[float] = (50, 90, 99, 99.9)) -> dict[str, int]:
    """{"p50": ns, "p90": ns, "p99": ns, "p999": ns} (keys drop the decimal point)."""
    d = _h(h)
    return {_pkey(p): percentile(d, p) for p in ps}


def mean(h: Hist) -> float:
    d = _h(h)
    return float(d.get_mean_value()) if d.get_total_count() else 0.0


def stdev(h: Hist) -> float:
    d = _h(h)
    return float(d.get_stddev()) if d.get_total_count() else 0.0


def min_ns(h: Hist) -> int:
    d = _h(h)
    return int(d.get_min_value()) if d.get_total_count() else 0


def max_ns(h: Hist) -> int:
    d = _h(h)
    return int(d.get_max_value()) if d.get_total_count() else 0


def summary(h: Hist, ps: Iterable[float] = (50, 90, 99, 99.9)) -> dict[str, float | int]:
    """count, mean, stdev, min, max and percentiles, all in ns."""
    d = _h(h)
    out: dict[str, float | int] = {"count": count(d), "mean": mean(d), "stdev": stdev(d),
                                   "min": min_ns(d), "max": max_ns(d)}
    out.update(percentiles(d, ps))
    return out
