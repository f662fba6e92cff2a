"""Interval records as a rate series: the one place an engine's per-second records become rates.

An interval record (PROTOCOL.md) holds, per op kind, the ops, bytes and errors
completed in (t - dt, t] and their latency histogram. A Sample is one such
record (or several engines' records of one span, merged) as IOPS, MiB/s and p99:
the steady-state watch judges the merged series of a running point (steady.py),
recovery judges a faulted point's stored series (analysis/recovery.py) and the
report draws it (report/timeline.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fathom.results import hdr
from fathom.results.merge import coalesce, next_span


@dataclass
class Sample:
    """One interval as rates: it covers (t - dt, t], t on the clock of the records it came from."""

    t: float
    dt: float
    ops: int
    bytes: int
    errors: int = 0
    hists: list[str] = field(default_factory=list)  # every op kind's (and engine's) histogram of the interval
    ramp: bool = False
    _p99_ms: float | None = field(default=None, repr=False)
    _p99_done: bool = field(default=False, repr=False)

    @property
    def iops(self) -> float:
        return self.ops / self.dt if self.dt > 0 else 0.0

    @property
    def mib_s(self) -> float:
        return self.bytes / self.dt / 2**20 if self.dt > 0 else 0.0

    @property
    def p99_ms(self) -> float | None:
        """The 99th percentile of the interval's histograms merged (None without ops)."""
        if not self._p99_done:
            merged = hdr.merge(self.hists) if self.hists else None
            self._p99_ms = hdr.percentile(merged, 99.0) / 1e6 if merged and merged.get_total_count() else None
            self._p99_done = True
        return self._p99_ms

    def value(self, metric: str) -> float | None:
        """iops, bw (MiB/s) or p99 (ms); None for an interval of no length."""
        if self.dt <= 0:
            return None
        if metric == "iops":
            return self.iops
        if metric == "bw":
            return self.mib_s
        if metric == "p99":
            return self.p99_ms
        raise ValueError(f"unknown metric {metric!r}")


def merged(records: Iterable[Mapping[str, Any]], t: float, dt: float | None = None, ramp: bool = False) -> Sample:
    """Records of one span as one sample: ops, bytes and errors summed over op kinds (and the records),
    histograms together; dt the longest record's unless given."""
    ops = nbytes = errors = 0
    hists: list[str] = []
    longest = 0.0
    for r in records:
        longest = max(longest, float(r.get("dt") or 0.0))
        for o in (r.get("ops") or {}).values():
            ops += int(o.get("ops") or 0)
            nbytes += int(o.get("bytes") or 0)
            errors += int(o.get("errors") or 0)
            if o.get("hist"):
                hists.append(o["hist"])
    return Sample(t, longest if dt is None else dt, ops, nbytes, errors, hists, ramp)


def samples(intervals: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """One series of interval records (a point's merged ones) as samples in time order; records without `t`
    are skipped, one without `dt` counts as a second."""
    recs = sorted((r for r in intervals if r.get("t") is not None), key=lambda r: float(r["t"]))
    return [merged([r], float(r["t"]), float(r.get("dt") or 1.0), bool(r.get("ramp"))) for r in recs]


# ---- a point's engines' records as one merged series (steady state, recovery, the timeline) ----

LOCAL_ENGINE = ("local", 0)  # (host, instance) of a record that names none: the store's default


def engine_of(rec: Mapping[str, Any]) -> tuple[str, int]:
    """(host, instance) of an interval record: which engine of the point sent it (as the store keys it)."""
    return (rec.get("host") or LOCAL_ENGINE[0], int(rec.get("instance") or 0))


def by_engine(records: Iterable[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """A point's interval records (stored or live, any order by engine) as one time-ordered list per engine."""
    out: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in records:
        out.setdefault(engine_of(r), []).append(r)
    return [sorted(v, key=lambda r: float(r.get("t") or r.get("ts") or 0.0)) for _, v in sorted(out.items())]


def _measured(recs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in recs if not r.get("ramp")]


def _merge_span(recs: Sequence[Mapping[str, Any]], t_s: float) -> Sample:
    """One span of several engines' measured intervals as one sample (ops and bytes summed, histograms
    together), dt the longest of them, ending dt after the last."""
    dt = max((float(r.get("dt") or 0.0) for r in recs), default=0.0)
    return merged(recs, t_s + dt, dt)


def merged_series(per_engine: Sequence[Sequence[Mapping[str, Any]]]) -> list[Sample]:
    """The merged series of a point: measured (non-ramp) intervals aligned by tick across engines (a record
    one engine sent for several ticks takes the others' records under it), as far as every engine has
    reported."""
    measured = [_measured(recs) for recs in per_engine]
    out: list[Sample] = []
    extend(out, measured, [0] * len(measured))
    return out


def extend(samples: list[Sample], measured: Sequence[Sequence[Mapping[str, Any]]], pos: list[int]) -> None:
    """Append to samples every merged span the engines' measured records (from pos[e] on, advanced) complete;
    every engine may still report, so a span waits for all of them (merge.next_span)."""
    still = [True] * len(measured)
    while (takes := next_span(measured, pos, still)) is not None:
        recs = []
        for e, n in enumerate(takes):
            if n:
                recs.append(coalesce([dict(r) for r in measured[e][pos[e]:pos[e] + n]]))
                pos[e] += n
        samples.append(_merge_span(recs, samples[-1].t if samples else 0.0))
