"""BASE against NEW, per workload: peak throughput ratio, latency at matched levels, a verdict.

Verdict (like airspeed velocity, with a tolerance instead of a fixed factor), where
ratio = peak throughput NEW / BASE and t the tolerance:
- one measurement per level (no repetitions): the point estimate decides:
  better if ratio > 1+t, worse if ratio < 1-t, else equivalent;
- with repetitions (several points with the same parameters, or run groups `a,b`):
  a 95% percentile-bootstrap interval of the ratio, each level resampled on its own;
  equivalent needs the whole interval inside [1-t, 1+t]; better needs ratio > 1+t and the
  interval above 1; worse needs ratio < 1-t and the interval below 1; anything else is
  inconclusive (more repetitions needed).
Points that failed are left out of the statistics; anomalies are listed, not hidden.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from fathom.analysis import anomalies as anom
from fathom.analysis.data import (Level, Point, RunData, Throughput, assign_levels, level_axis_name, levels,
                                  throughput_for)
from fathom.analysis.stats import Summary, bootstrap_ci, geomean, summarize

VERDICT_RULES = (
    "ratio = peak throughput NEW / BASE, t = tolerance. Without repetitions the point estimate decides: better if "
    "ratio > 1+t, worse if ratio < 1-t, else equivalent. With repetitions a 95% percentile-bootstrap interval of "
    "the ratio (each level resampled on its own) is required: equivalent needs it inside [1-t, 1+t], better needs "
    "ratio > 1+t and the interval above 1, worse needs ratio < 1-t and the interval below 1; otherwise inconclusive."
)
UNRELIABLE = {"collapse", "short_window", "failed", "stopped_early"}
EXIT_REGRESSION = 5  # exit code of `fathom compare --fail-on-regression` when a workload regressed


@dataclass
class LevelCmp:
    label: str
    iodepth: int | None
    base_tp: float | None
    new_tp: float | None
    base_clat_ms: float | None
    new_clat_ms: float | None
    base_p99_ms: float | None
    new_p99_ms: float | None
    tp_gain_pct: float | None
    lat_gain_pct: float | None  # positive = NEW has lower latency
    flagged: list[str] = field(default_factory=list)  # anomaly kinds at this level, either run


@dataclass
class WorkloadCmp:
    workload: str
    base: str
    new: str
    axis: str  # what level labels mean (iodepth, ...)
    unit: str
    base_peak: float
    base_peak_at: str
    new_peak: float
    new_peak_at: str
    ratio: float
    ci: tuple[float, float] | None
    tp_gain_pct: float
    lat_gain_pct: float | None  # geomean over reliable matched levels
    lat_levels_used: int
    verdict: str
    reason: str
    base_peak_stats: Summary | None
    new_peak_stats: Summary | None
    levels: list[LevelCmp]
    regression: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci"] = list(self.ci) if self.ci else None
        return d


def _usable(curve: list[Point]) -> list[Point]:
    return [p for p in curve if p.status == "done"]


def _peak(lv: list[Level], tp: Throughput) -> tuple[float, str, Level] | None:
    best = None
    for level in lv:
        m = level.mean(tp)
        if m is not None and (best is None or m > best[0]):
            best = (m, level.label, level)
    return best


def _peak_of_samples(strata: list[list[float]]) -> float:
    return max(statistics.fmean(s) for s in strata if s)


def verdict(ratio: float, ci: tuple[float, float] | None, tolerance: float) -> tuple[str, str]:
    lo_t, hi_t = 1 - tolerance, 1 + tolerance
    eps = 1e-9  # a ratio exactly at the tolerance counts as inside it
    if ci is None:
        why = "one measurement per level, so no confidence interval: the point estimate decides"
        if ratio > hi_t + eps:
            return "better", why
        if ratio < lo_t - eps:
            return "worse", why
        return "equivalent", why
    lo, hi = ci
    if lo >= lo_t - eps and hi <= hi_t + eps:
        return "equivalent", "95% interval of the ratio lies inside the tolerance"
    if ratio > hi_t + eps and lo > 1:
        return "better", "ratio beyond the tolerance and its 95% interval above 1"
    if ratio < lo_t - eps and hi < 1:
        return "worse", "ratio beyond the tolerance and its 95% interval below 1"
    return "inconclusive", "95% interval of the ratio crosses the tolerance or 1: repeat the points"


def compare_workload(base: RunData, new: RunData, workload: str, tolerance: float,
                     fail_on_regression: float | None = None) -> WorkloadCmp | None:
    """Call assign_levels([base, new, ...]) first, so that levels match across runs."""
    bc, nc = _usable(base.curve(workload)), _usable(new.curve(workload))
    if not bc or not nc:
        return None
    tp = throughput_for(bc + nc)
    axis = level_axis_name([base, new], workload)
    blv, nlv = levels(bc), levels(nc)
    bp, np_ = _peak(blv, tp), _peak(nlv, tp)
    if bp is None or np_ is None or bp[0] <= 0:
        return None
    ratio = np_[0] / bp[0]
    strata = [[lv.values(tp) for lv in blv], [lv.values(tp) for lv in nlv]]
    ci = bootstrap_ci(strata, lambda g: _peak_of_samples(g[1]) / _peak_of_samples(g[0]))
    v, why = verdict(ratio, ci, tolerance)

    flags: dict[tuple[str, str], list[str]] = {}
    for run in (base, new):
        for a in anom.find(run, workload):
            flags.setdefault((run.name, a.level), []).append(a.kind)
    nmap = {lv.level: lv for lv in nlv}
    rows: list[LevelCmp] = []
    lat_ratios = []
    for blevel in blv:
        nlevel = nmap.get(blevel.level)
        if nlevel is None:
            continue
        bt, nt = blevel.mean(tp), nlevel.mean(tp)
        bl, nl = blevel.clat_ms()[0], nlevel.clat_ms()[0]
        fl = sorted(set(flags.get((base.name, blevel.label), []) + flags.get((new.name, nlevel.label), [])))
        rows.append(LevelCmp(
            blevel.label, blevel.points[0].iodepth, bt, nt, bl, nl, blevel.percentile_ms("p99"),
            nlevel.percentile_ms("p99"),
            (nt / bt - 1) * 100 if bt and nt is not None else None,
            (bl / nl - 1) * 100 if bl and nl else None, fl))
        if bl and nl and not UNRELIABLE & set(fl):
            lat_ratios.append(bl / nl)
    gm = geomean(lat_ratios)
    regression = False
    if fail_on_regression is not None:
        regression = ratio < 1 - fail_on_regression - 1e-9 and (ci is None or ci[1] < 1)
    return WorkloadCmp(
        workload=workload, base=base.name, new=new.name, axis=axis, unit=tp.unit, base_peak=bp[0], base_peak_at=bp[1],
        new_peak=np_[0], new_peak_at=np_[1], ratio=ratio, ci=ci, tp_gain_pct=(ratio - 1) * 100,
        lat_gain_pct=(gm - 1) * 100 if gm else None, lat_levels_used=len(lat_ratios), verdict=v, reason=why,
        base_peak_stats=summarize(bp[2].values(tp)), new_peak_stats=summarize(np_[2].values(tp)), levels=rows,
        regression=regression)


@dataclass
class Comparison:
    base: RunData
    news: list[RunData]
    tolerance: float
    fail_on_regression: float | None
    workloads: list[WorkloadCmp]
    unmatched: list[dict[str, str]]
    anomalies: list[anom.Anomaly]

    @property
    def regressed(self) -> list[WorkloadCmp]:
        return [w for w in self.workloads if w.regression]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base.name,
            "new": [n.name for n in self.news],
            "tolerance_pct": self.tolerance * 100,
            "fail_on_regression_pct": self.fail_on_regression * 100 if self.fail_on_regression is not None else None,
            "definitions": {
                "ratio": "peak throughput NEW / BASE (peak = highest mean throughput over the sweep)",
                "ci": "95% percentile-bootstrap interval of the ratio; null without repetitions",
                "tp_gain_pct": "(ratio - 1) x 100; positive = NEW better",
                "lat_gain_pct": "(BASE / NEW mean latency - 1) x 100, geometric mean over matched levels "
                                "without collapse/short-window/failed points; positive = NEW better",
                "verdict": VERDICT_RULES,
            },
            "workloads": [w.to_dict() for w in self.workloads],
            "unmatched": self.unmatched,
            "anomalies": [a.to_dict() for a in self.anomalies],
            "regressions": [{"workload": w.workload, "new": w.new, "ratio": w.ratio} for w in self.regressed],
        }


def compare(base: RunData, news: list[RunData], tolerance: float = 0.10,
            fail_on_regression: float | None = None) -> Comparison:
    assign_levels([base, *news])
    results: list[WorkloadCmp] = []
    unmatched: list[dict[str, str]] = []
    for new in news:
        nw = set(new.workloads())
        for wl in base.workloads():
            if wl not in nw:
                unmatched.append({"workload": wl, "only_in": base.name, "other": new.name})
                continue
            c = compare_workload(base, new, wl, tolerance, fail_on_regression)
            if c is None:
                unmatched.append({"workload": wl, "only_in": "", "other": new.name,
                                  "why": "no completed points with throughput in one of the runs"})
            else:
                results.append(c)
        for wl in new.workloads():
            if wl not in set(base.workloads()):
                unmatched.append({"workload": wl, "only_in": new.name, "other": base.name})
    found: list[anom.Anomaly] = []
    seen: set[tuple[int, ...]] = set()
    for run in [base, *news]:
        if tuple(run.ids) not in seen:  # comparing a run with itself lists its flags once
            seen.add(tuple(run.ids))
            found.extend(anom.find_all(run))
    return Comparison(base, news, tolerance, fail_on_regression, results, unmatched, found)
