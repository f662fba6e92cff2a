"""Steady state: when a point's numbers have settled, so it can stop early (fio's `ss=`, warp's autoterm).

A workload's `steady_state:` names a metric, a window and criteria; after each
measured interval the watch looks at the latest window of the point's series
and asks the point to stop once every given criterion holds and at least
`min_s` measured seconds have passed. The point runs at most `max_s` measured
seconds (its runtime).

Definitions (fio's, with limits as % of the window mean, as `ss=iops_slope:0.3%`):
    series     one value per measured interval (ramp intervals excluded), on the
               *merged* series: every engine's measured interval ending at the same
               tick of the engines' common grid summed (ops, bytes) and its
               histograms merged (a record an engine sent late for several ticks
               takes the others' records under it), so many engines or client
               hosts are judged as the one load they make.
    metric     iops: ops/s over all op kinds; bw: MiB/s over all op kinds;
               p99: 99th percentile latency in ms of that interval's histograms
               merged over op kinds (and engines).
    window     the latest round(window_s / 1 s) intervals (engines report once a second).
    slope      |b| / mean x 100, in % of the window mean per second, where b is the
               least-squares slope of value against measured time (units/s).
    deviation  max |value - mean| / mean x 100, in % of the window mean.
    steady     every criterion given holds, the window is full, its mean is above 0
               (a stalled point is not steady), and measured time >= min_s.

The model and pure logic here (Criteria, check, first_steady, on series.merged_series); the companion
that watches a running point is fathom.run.steady.SteadyStateCompanion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fathom.results.series import Sample

INTERVAL_S = 1.0  # fathom-engine's interval_s as fathom runs it
METRICS: dict[str, str] = {
    "iops": "IOPS",  # metric -> unit
    "bw": "MiB/s",
    "p99": "ms",
}
CRITERIA = ("slope", "deviation")
STOPPABLE_ENGINES = ("fathom-engine",)  # engines with a control channel: a point can be stopped cleanly
REACHED, NOT_REACHED = "reached", "not reached"


@dataclass(frozen=True)
class Criteria:
    """A workload's steady_state, in seconds and percent."""

    metric: str
    window_s: float
    max_s: float
    min_s: float = 0.0
    slope_pct: float | None = None  # max |slope|, % of the window mean per second
    deviation_pct: float | None = None  # max |value - mean|, % of the window mean

    @property
    def window_n(self) -> int:
        """Intervals in the window."""
        return max(2, round(self.window_s / INTERVAL_S))

    @property
    def unit(self) -> str:
        return METRICS[self.metric]

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Criteria | None:
        """The criteria of a planned point (its params as workload.Workload.params() writes them), or None."""
        ss = params.get("steady_state")
        if not ss:
            return None
        crit = ss.get("criteria") or {}
        return cls(metric=ss["metric"], window_s=float(ss["window_s"]),
                   max_s=float(ss.get("max_s") or params["runtime"]), min_s=float(ss.get("min_s") or 0.0),
                   slope_pct=crit.get("slope"), deviation_pct=crit.get("deviation"))

    def describe(self) -> str:
        """'iops over 10 s: slope <= 1 %/s, deviation <= 5 %; 10..300 s'."""
        parts = []
        if self.slope_pct is not None:
            parts.append(f"slope <= {self.slope_pct:g} %/s")
        if self.deviation_pct is not None:
            parts.append(f"deviation <= {self.deviation_pct:g} %")
        return (f"{self.metric} ({self.unit}) over a {self.window_s:g} s window: {', '.join(parts)}; "
                f"min {self.min_s:g} s, max {self.max_s:g} s")


def problems(ss: Mapping[str, Any], runtime_s: float, engine: str) -> list[tuple[str | None, str]]:
    """(field of steady_state or None, what is wrong) for rules between a steady_state's values and its
    workload; each value on its own (positive, a known metric) is checked by the suite's model."""
    out: list[tuple[str | None, str]] = []
    window, min_s = float(ss["window_s"]), float(ss.get("min_s") or 0.0)
    max_s = float(ss.get("max_s") or runtime_s)
    limit = f"the point's maximum ({'steady_state.max_s' if ss.get('max_s') else 'runtime'}: {max_s:g} s)"
    if window > max_s:
        out.append(("window_s", f"steady_state.window_s ({window:g} s) is longer than {limit}: the criteria can "
                                "never hold; shorten the window or raise the maximum"))
    if min_s > max_s:
        out.append(("min_s", f"steady_state.min_s ({min_s:g} s) is longer than {limit}; lower min_s or raise "
                             "the maximum"))
    crit = ss.get("criteria") or {}
    if not any(crit.get(c) is not None for c in CRITERIA):
        out.append(("criteria", "steady_state.criteria: give slope (max %/s), deviation (max %) or both"))
    if engine not in STOPPABLE_ENGINES:
        out.append((None, f"steady_state needs an engine that can be stopped cleanly mid-point "
                          f"({', '.join(STOPPABLE_ENGINES)}); engine {engine!r} has no control channel"))
    return out


@dataclass
class Verdict:
    """The criteria on one window."""

    steady: bool
    at_s: float | None  # measured seconds at the window's end
    n: int  # values in the window
    mean: float | None = None
    slope_pct: float | None = None  # |slope| as % of the mean per second
    deviation_pct: float | None = None  # max |value - mean| as % of the mean
    why: str = ""  # why not steady ("" when steady)

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def slope_per_s(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (t, value) pairs, value units per second."""
    n = len(points)
    tm = sum(t for t, _ in points) / n
    vm = sum(v for _, v in points) / n
    sxx = sum((t - tm) ** 2 for t, _ in points)
    if sxx == 0:
        return 0.0
    return sum((t - tm) * (v - vm) for t, v in points) / sxx


def check(samples: Sequence[Sample], c: Criteria) -> Verdict:
    """The criteria on the latest window of `samples` (the whole series so far)."""
    at = samples[-1].t if samples else None
    if len(samples) < c.window_n:
        return Verdict(False, at, len(samples), why=f"window not full ({len(samples)} of {c.window_n} intervals)")
    win = samples[-c.window_n:]
    vals = [(s.t, s.value(c.metric)) for s in win]
    if any(v is None for _, v in vals):
        return Verdict(False, at, len(win), why=f"an interval in the window has no {c.metric} (no ops completed)")
    pts = [(t, float(v)) for t, v in vals]  # type: ignore[arg-type]
    mean = sum(v for _, v in pts) / len(pts)
    if not mean > 0 or not math.isfinite(mean):
        return Verdict(False, at, len(win), mean=mean, why=f"window mean {c.metric} is {mean:g}")
    slope = 100.0 * abs(slope_per_s(pts)) / mean
    dev = 100.0 * max(abs(v - mean) for _, v in pts) / mean
    why = []
    if c.slope_pct is not None and slope > c.slope_pct:
        why.append(f"slope {slope:.3g} %/s > {c.slope_pct:g} %/s")
    if c.deviation_pct is not None and dev > c.deviation_pct:
        why.append(f"deviation {dev:.3g} % > {c.deviation_pct:g} %")
    if not why and at is not None and at < c.min_s:
        why.append(f"{at:.3g} s measured < min_s {c.min_s:g} s")
    return Verdict(not why, at, len(win), mean, slope, dev, "; ".join(why))


def first_steady(samples: Sequence[Sample], c: Criteria) -> Verdict | None:
    """The first window (walking forward, as the live watch does) at which the criteria hold, or None."""
    for i in range(c.window_n, len(samples) + 1):
        v = check(samples[:i], c)
        if v.steady:
            return v
    return None


def reached(metrics: Mapping[str, Any] | None) -> bool:
    """Whether a stored point stopped because its steady state was reached (an intended early stop)."""
    return bool(metrics) and metrics.get("steady_state") == REACHED  # type: ignore[union-attr]


def outcome_text(metrics: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """How a report says a point's steady state: 'reached at 42 s' or 'not reached by 300 s (max_s)'."""
    state = metrics.get("steady_state")
    if state == REACHED and isinstance(metrics.get("steady_s"), (int, float)):
        return f"reached at {metrics['steady_s']:.0f} s"
    if state == NOT_REACHED:
        c = Criteria.of(params) if params.get("steady_state") else None
        return f"not reached by {c.max_s:g} s (max_s)" if c else "not reached by max_s"
    return None
