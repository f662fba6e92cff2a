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
    buckets(h) -> list[(int, int)]              non-empty buckets: (highest value in ns, count), by value
    percentiles(h, ps=(50, 90, 99, 99.9)) -> dict[str, int] keys "p50", "p90", "p99", "p999"
    summary(h, ps=(50, 90, 99, 99.9)) -> dict   count, mean, stdev, min, max (ns) and the percentiles
    count(h) -> int, mean(h) -> float, stdev(h) -> float, min_ns(h) -> int, max_ns(h) -> int
"""

from __future__ import annotations

import base64
import ctypes
import math
import struct
import threading
import zlib
from typing import Iterable, Union

from hdrh.histogram import HdrHistogram
from pyhdrh import add_array as _add_array  # the C helpers hdrh itself decodes and adds with
from pyhdrh import decode as _decode_counts

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


_COMPRESSED_COOKIE = 0x1C849314  # V2 compressed, 8-byte words (what the engine and hdrh write)
_PAYLOAD_HEADER = struct.Struct(">iiiiqqd")  # cookie, length, normalizing offset, digits, lowest, highest, ratio


def merge(hists: Iterable[Hist]) -> HdrHistogram:
    """Exact merge (counts add) of encoded or decoded histograms into a new one.

    Encoded histograms with the engine's bounds are added without building a histogram
    object each: their counts are decoded into one scratch array and added to the sum
    (hdrh's own C helpers). A point of 64 engines x 300 intervals merges in seconds, not
    minutes, that way. Anything else goes through hdrh.
    """
    out = new()
    n = out.counts_len
    acc = out.encoder.get_counts()
    scratch = _scratch(n)
    total, lo, hi = 0, -1, -1
    for h in hists:
        idx = _add_encoded(h, scratch, acc, n) if isinstance(h, (str, bytes)) else None
        if idx is None:
            d = _h(h)
            if not d.get_total_count():
                continue
            if (d.counts_len, d.unit_magnitude, d.sub_bucket_count) != (n, out.unit_magnitude, out.sub_bucket_count):
                d = _rebased(d)
            _add_array(ctypes.addressof(acc), ctypes.addressof(d.encoder.get_counts()), n, 8)
            idx = (int(d.get_total_count()), out.get_counts_array_index(d.get_min_value()),
                   out.get_counts_array_index(d.get_max_value()))
        t, a, b = idx
        if t:
            total += t
            lo = a if lo < 0 else min(lo, a)
            hi = max(hi, b)
    out.set_internal_tacking_values(lo, hi, total)
    if total == 0:
        out.min_value, out.max_value = new().min_value, 0
    return out


_local = threading.local()


def _scratch(n: int) -> ctypes.Array:
    """A zeroed counts array per thread, kept zero between uses (a fresh one costs as much as a decode)."""
    s = getattr(_local, "scratch", None)
    if s is None or len(s) != n:
        s = _local.scratch = (ctypes.c_uint64 * n)()
    return s


def _rebased(d: HdrHistogram) -> HdrHistogram:
    """A histogram of other bounds recorded into one of the engine's bounds."""
    out = new()
    out.add(d)
    return out


def _add_encoded(h: str | bytes, scratch: ctypes.Array, acc: ctypes.Array, n: int) -> tuple[int, int, int] | None:
    """Add one base64 V2 histogram's counts to acc: (count, lowest and highest non-empty index), or None when
    it is not of the engine's bounds (the caller decodes it the slow way)."""
    raw = base64.b64decode(h)
    if len(raw) < 8 or struct.unpack_from(">i", raw)[0] != _COMPRESSED_COOKIE:
        return None
    data = zlib.decompress(raw[8:])
    if len(data) < _PAYLOAD_HEADER.size:
        return None
    _, _, norm, digits, lowest, highest, _ = _PAYLOAD_HEADER.unpack_from(data)
    if (norm, digits, lowest, highest) != (0, SIGNIFICANT_DIGITS, LOWEST_NS, HIGHEST_NS):
        return None
    if len(data) == _PAYLOAD_HEADER.size:
        return 0, -1, -1  # no counts at all (an op kind with no ops): hdrh's decoder must not see it
    r = _decode_counts(data, _PAYLOAD_HEADER.size, ctypes.addressof(scratch), n, 8)
    total, lo, hi = int(r["total"]), int(r["min_nonzero_index"]), int(r["max_nonzero_index"])
    if not total:
        return 0, -1, -1  # only runs of zeros (the decoder then reports indexes -1..0): nothing was written
    if not (0 <= lo <= hi < n):  # an index outside the array would add to and zero memory beyond it
        raise ValueError(f"histogram counts out of range (indexes {lo}..{hi} of {n})")
    # only the non-empty range is added, and zeroed again for the next one (decode writes no zeros)
    at = lo * 8
    _add_array(ctypes.addressof(acc) + at, ctypes.addressof(scratch) + at, hi - lo + 1, 8)
    ctypes.memset(ctypes.addressof(scratch) + at, 0, (hi - lo + 1) * 8)
    return total, lo, hi


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


def buckets(h: Hist) -> list[tuple[int, int]]:
    """The non-empty buckets in value order, each as (the highest value it holds in ns, its count): the
    histogram's exact distribution, at its precision (3 significant digits). A CDF read from it agrees with
    percentile(): the p-th percentile is the first bucket whose cumulative count reaches ceil(p/100 * count)."""
    d = _h(h)
    if not d.get_total_count():
        return []
    # the counts from the lowest to the highest value, as one slice of the C array (a call per index is slower)
    lo, hi = d.get_counts_array_index(d.get_min_value()), d.get_counts_array_index(d.get_max_value())
    hi = min(hi, d.counts_len - 1, d.encoder.payload.counts_len - 1)  # a decoded histogram's array may be shorter
    return [(int(d.get_highest_equivalent_value(d.get_value_from_index(i))), int(c))
            for i, c in enumerate(d.counts[lo:hi + 1], lo) if c]


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
