"""The few histogram reads the bench commands need, on the shared decoder fathom.hdr."""

from __future__ import annotations

from typing import Iterable

from fathom import hdr


def merged(hists: Iterable[str | None]):
    """Exact merge of the non-empty encoded histograms, or None when there are none."""
    hs = [h for h in hists if h]
    if not hs:
        return None
    return hdr.merge(hs)


def min_ns(hists: Iterable[str | None]) -> float | None:
    m = merged(hists)
    if m is None or hdr.count(m) == 0:
        return None
    return float(hdr.min_ns(m))


def merged_percentiles_ns(hists: Iterable[str | None]) -> dict[str, float] | None:
    """Percentiles of several op kinds' histograms merged exactly (never an average of percentiles)."""
    m = merged(hists)
    if m is None or hdr.count(m) == 0:
        return None
    out: dict[str, float] = {k: float(v) for k, v in hdr.percentiles(m).items()}
    out["max"] = float(hdr.max_ns(m))
    return out
