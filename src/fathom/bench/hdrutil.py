"""The few histogram reads the bench commands need (min latency, merged percentiles).

Uses fathom.hdr when it is there (the shared decoder), else the hdrh package directly.
"""

from __future__ import annotations

from typing import Iterable

PCT = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def _decode(h: str):
    from hdrh.histogram import HdrHistogram

    return HdrHistogram.decode(h)


def merged(hists: Iterable[str]):
    out = None
    for h in hists:
        if not h:
            continue
        x = _decode(h)
        if out is None:
            out = x
        else:
            out.add(x)
    return out


def min_ns(hists: Iterable[str]) -> float | None:
    m = merged(hists)
    if m is None or m.get_total_count() == 0:
        return None
    return float(m.get_min_value())


def merged_percentiles_ns(hists: Iterable[str]) -> dict[str, float] | None:
    """Percentiles of several op kinds' histograms merged exactly (never an average of percentiles)."""
    m = merged(hists)
    if m is None or m.get_total_count() == 0:
        return None
    out = {k: float(m.get_value_at_percentile(p)) for k, p in PCT.items()}
    out["max"] = float(m.get_max_value())
    return out
