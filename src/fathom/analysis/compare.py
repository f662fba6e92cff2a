"""BASE against NEW, per workload: every matched level judged on throughput and latency, and a verdict.

The rule follows criterion.rs and airspeed velocity (asv): a verdict only where the data
can carry it. For each figure (throughput and latency at every level both runs have, and
their geometric mean over the levels), with t the tolerance:
- one trial on either side: no interval can be had, and run-to-run noise on a busy host is
  often 5-15%, so "no verdict (1 trial)" unless the change is beyond FACTOR (2x) either
  way, as asv's factor rule for single samples. That rule judges throughput only: the p99
  of identical runs differs by more than 2x often (an outside check found verdicts on 59 of
  276 identical pairs when it judged p99), and a tail's spread cannot be known from one
  trial, so latency is shown with its ratio and no verdict;
- two or more trials per side: a Student t interval of the ratio of geometric means
  NEW / BASE (Welch on the logs, honest for small n), at a confidence corrected for the m
  figures judged in the workload (Bonferroni: 1 - 0.05/m). better / worse only when the
  WHOLE interval lies beyond the tolerance (above 1+t, below 1-t), equivalent only when it
  lies wholly inside it, otherwise inconclusive (more trials needed).
Latency figures are turned round (BASE / NEW), so above 1 is better for every figure.
A workload is worse if any figure is; else better if any is; else equivalent when its
throughput and latency over the levels are; else inconclusive (or no verdict).
`--fail-on-regression F` fires only for a worse figure whose whole interval lies below 1-F
(one trial: a change beyond FACTOR that is also beyond F).
Points that failed are left out of the statistics; anomalies are listed, not hidden.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from fathom.analysis import anomalies as anom
from fathom.analysis.data import (Level, RunData, StoredPoint, Throughput, assign_levels, level_axis_name, levels,
                                  throughput_for)
from fathom.analysis.stats import LogDiff, Summary, geomean, log_diff, pooled, ratio_interval, summarize

FACTOR = 2.0  # one trial: a verdict only beyond this factor
FAMILY_CONFIDENCE = 0.95
NO_VERDICT = "no verdict (1 trial)"
VERDICT_RULES = (
    "Every matched level's throughput and latency (p99 where every point has it, else mean latency), and their "
    "geometric means over the levels, are judged as ratios NEW / BASE (latency BASE / NEW: above 1 is better). "
    f"One trial: throughput alone is judged, and only beyond {FACTOR:g}x; latency (a tail above all) is not "
    "judged from one trial. Two or more: a Welch t interval on the "
    "logs at confidence 1 - 0.05/m (m figures judged); better or worse only when the whole interval lies beyond "
    "the tolerance, equivalent when it lies wholly inside it, else inconclusive. The workload is worse if any "
    "figure is."
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
    trials: tuple[int, int] = (1, 1)  # points BASE, NEW
    tp: Judgment | None = None
    lat: Judgment | None = None  # on p99 (or clat)


@dataclass
class Judgment:
    """One figure: ratio of geometric means (above 1 = NEW better), its interval, the verdict."""

    what: str  # "throughput" | "p99 latency" | "mean latency", "... over levels"
    ratio: float
    ci: tuple[float, float] | None
    confidence: float | None
    verdict: str
    worse_than: float | None = None  # the interval's upper end (or the 1-trial ratio): the regression gate's test
    level: str | None = None  # the level's label; None for a figure over the levels


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
    trials: tuple[int, int] = (1, 1)  # the fewest points of any matched level, BASE and NEW
    confidence: float | None = None  # of the intervals (1 - 0.05/m); None with one trial
    tp_all: Judgment | None = None  # throughput over the levels (geometric mean of their ratios)
    lat_all: Judgment | None = None
    fired: list[Judgment] = field(default_factory=list)  # the figures that fired --fail-on-regression

    def fired_text(self) -> str:
        """The figures that fired the gate, quoted: 'p99 latency at level 16: 0.450x [0.40, 0.52]'."""
        return "; ".join(describe(j) for j in self.fired)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci"] = list(self.ci) if self.ci else None
        return d

    @property
    def figures(self) -> list[Judgment]:
        return [j for r in self.levels for j in (r.tp, r.lat) if j] + [j for j in (self.tp_all, self.lat_all) if j]


def _usable(curve: list[StoredPoint]) -> list[StoredPoint]:
    return [p for p in curve if p.status == "done"]


def _peak(lv: list[Level], tp: Throughput) -> tuple[float, str, Level] | None:
    best = None
    for level in lv:
        m = level.mean(tp)
        if m is not None and (best is None or m > best[0]):
            best = (m, level.label, level)
    return best


def judge(x: LogDiff | None, single: tuple[list[float], list[float]] | None, tolerance: float, confidence: float,
          what: str, lower_better: bool = False, level: str | None = None) -> Judgment | None:
    """One figure's verdict. x: the log ratio with repetitions; single: (BASE, NEW) values when a side has one
    trial. lower_better (latency): the ratio is turned round, so above 1 is NEW better for every figure.
    Latency from one trial gets its ratio and no verdict (the module's docstring says why)."""
    sign = -1.0 if lower_better else 1.0
    eps = 1e-9  # a ratio exactly at the tolerance counts as inside it
    if x is None:
        if not single or not single[0] or not single[1] or min(*single[0], *single[1]) <= 0:
            return None
        b, n = geomean(single[0]), geomean(single[1])
        r = (n / b) ** sign  # type: ignore[operator]
        if lower_better:
            return Judgment(what, r, None, None, NO_VERDICT, None, level)
        v = "better" if r >= FACTOR - eps else ("worse" if r <= 1 / FACTOR + eps else NO_VERDICT)
        return Judgment(what, r, None, None, v, r, level)
    lo, hi = ratio_interval(LogDiff(sign * x.d, x.var, x.df, x.n), confidence)
    r = math.exp(sign * x.d)
    if lo > 1 + tolerance + eps:
        v = "better"
    elif hi < 1 - tolerance - eps:
        v = "worse"
    elif lo >= 1 - tolerance - eps and hi <= 1 + tolerance + eps:
        v = "equivalent"
    else:
        v = "inconclusive"
    return Judgment(what, r, (lo, hi), confidence, v, hi, level)


def _latency_key(points: list[StoredPoint]) -> tuple[str, str] | None:
    """p99 where every point has it, else the mean completion latency."""
    if points and all(p.m("p99_ms") for p in points):
        return "p99_ms", "p99 latency"
    if points and all(p.m("clat_ms") for p in points):
        return "clat_ms", "mean latency"
    return None


def overall(figures: list[Judgment]) -> str:
    vs = [j.verdict for j in figures]
    if "worse" in vs:
        return "worse"
    if "better" in vs:
        return "better"
    if vs and all(v == NO_VERDICT for v in vs):
        return NO_VERDICT
    return "equivalent" if vs and all(v == "equivalent" for v in vs[-2:]) and "inconclusive" not in vs \
        else ("inconclusive" if vs else NO_VERDICT)


def compare_workload(base: RunData, new: RunData, workload: str, tolerance: float,
                     fail_on_regression: float | None = None,
                     find: Callable[[RunData, str], list[anom.Anomaly]] = anom.find) -> WorkloadCmp | None:
    """Call assign_levels([base, new, ...]) first, so that levels match across runs. find: a run's anomalies in
    one workload (compare() hands one that finds each run's once)."""
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

    flags: dict[tuple[str, str], list[str]] = {}
    for run in (base, new):
        for a in find(run, workload):
            flags.setdefault((run.name, a.level), []).append(a.kind)
    nmap = {lv.level: lv for lv in nlv}
    pairs = [(b, nmap[b.level]) for b in blv if b.level in nmap]
    lat_key = _latency_key([p for b, n in pairs for p in b.points + n.points])
    m = len(pairs) * (2 if lat_key else 1) + (2 if lat_key else 1)  # the figures judged: levels and over levels
    conf = 1 - (1 - FAMILY_CONFIDENCE) / max(m, 1)
    rows: list[LevelCmp] = []
    lat_ratios, tp_diffs, lat_diffs = [], [], []
    tp_single: tuple[list[float], list[float]] = ([], [])
    lat_single: tuple[list[float], list[float]] = ([], [])
    for blevel, nlevel in pairs:
        bt, nt = blevel.mean(tp), nlevel.mean(tp)
        bl, nl = blevel.clat_ms()[0], nlevel.clat_ms()[0]
        fl = sorted(set(flags.get((base.name, blevel.label), []) + flags.get((new.name, nlevel.label), [])))
        bv, nv = blevel.values(tp), nlevel.values(tp)
        tdiff = log_diff(bv, nv)
        tj = judge(tdiff, (bv, nv), tolerance, conf, "throughput", level=blevel.label)
        lj = None
        if lat_key:
            blat, nlat = blevel.values(lat_key[0]), nlevel.values(lat_key[0])
            ldiff = log_diff(blat, nlat)
            lj = judge(ldiff, (blat, nlat), tolerance, conf, lat_key[1], lower_better=True, level=blevel.label)
            if ldiff is not None:
                lat_diffs.append(ldiff)
            lat_single[0].extend(blat[:1])
            lat_single[1].extend(nlat[:1])
        if tdiff is not None:
            tp_diffs.append(tdiff)
        tp_single[0].extend(bv[:1])
        tp_single[1].extend(nv[:1])
        rows.append(LevelCmp(
            blevel.label, blevel.points[0].iodepth, bt, nt, bl, nl, blevel.percentile_ms("p99"),
            nlevel.percentile_ms("p99"),
            (nt / bt - 1) * 100 if bt and nt is not None else None,
            (bl / nl - 1) * 100 if bl and nl else None, fl, (len(blevel.points), len(nlevel.points)), tj, lj))
        if bl and nl and not UNRELIABLE & set(fl):
            lat_ratios.append(bl / nl)
    figures = [j for r in rows for j in (r.tp, r.lat) if j is not None]
    repeated = bool(pairs) and len(tp_diffs) == len(pairs)
    tp_all = judge(pooled(tp_diffs) if repeated else None, None if repeated else tp_single, tolerance, conf,
                   "throughput over levels") if pairs else None
    lat_all = None
    if lat_key and pairs:
        lrep = len(lat_diffs) == len(pairs)
        lat_all = judge(pooled(lat_diffs) if lrep else None, None if lrep else lat_single, tolerance, conf,
                        f"{lat_key[1]} over levels", lower_better=True)
    figures += [j for j in (tp_all, lat_all) if j is not None]
    v = overall(figures)
    trials = (min((r.trials[0] for r in rows), default=0), min((r.trials[1] for r in rows), default=0))
    why = _reason(v, figures, trials, conf, tolerance)
    gm = geomean(lat_ratios)
    fired = fired_figures(figures, fail_on_regression) if fail_on_regression is not None else []
    return WorkloadCmp(
        workload=workload, base=base.name, new=new.name, axis=axis, unit=tp.unit, base_peak=bp[0], base_peak_at=bp[1],
        new_peak=np_[0], new_peak_at=np_[1], ratio=ratio, ci=tp_all.ci if tp_all else None,
        tp_gain_pct=(ratio - 1) * 100, lat_gain_pct=(gm - 1) * 100 if gm else None, lat_levels_used=len(lat_ratios),
        verdict=v, reason=why, base_peak_stats=summarize(bp[2].values(tp)),
        new_peak_stats=summarize(np_[2].values(tp)), levels=rows, regression=bool(fired), fired=fired, trials=trials,
        confidence=conf if repeated else None, tp_all=tp_all, lat_all=lat_all)


def fired_figures(figures: list[Judgment], gate: float) -> list[Judgment]:
    """Worse figures whose whole interval (one trial: the ratio) lies below 1 - gate."""
    return [j for j in figures if j.verdict == "worse" and j.worse_than is not None and j.worse_than < 1 - gate]


def describe(j: Judgment) -> str:
    where = f" at level {j.level}" if j.level is not None else ""
    ci = f" [{j.ci[0]:.3f}, {j.ci[1]:.3f}]" if j.ci else " (1 trial)"
    return f"{j.what}{where}: {j.ratio:.3f}x of BASE{ci}"


def _reason(v: str, figures: list[Judgment], trials: tuple[int, int], conf: float, tolerance: float) -> str:
    if min(trials) < 2:
        n = f"{trials[0]} and {trials[1]} trial(s)"
        if v in ("better", "worse"):
            bad = [j for j in figures if j.verdict == v]
            return (f"{n}: {bad[0].what} at {bad[0].ratio:.2f}x of BASE (above 1 = better), beyond the {FACTOR:g}x a "
                    "single trial needs")
        return (f"{n}: a single trial cannot tell a change under {FACTOR:g}x from noise, nor judge latency at "
                "all (the tails of identical runs differ by more than that); repeat (--repeat N)")
    hit = [j for j in figures if j.verdict == v]
    what = ", ".join(sorted({j.what for j in hit})) if hit else ""
    rule = {"better": f"whole {conf:.1%} interval above 1+{tolerance:g}",
            "worse": f"whole {conf:.1%} interval below 1-{tolerance:g}",
            "equivalent": f"{conf:.1%} intervals inside ±{tolerance:g}",
            "inconclusive": f"a {conf:.1%} interval crosses the tolerance: more trials needed"}.get(v, "")
    return f"{trials[0]} and {trials[1]} trials; {rule}" + (f" ({what})" if what and v != "equivalent" else "")


@dataclass
class Comparison:
    base: RunData
    news: list[RunData]
    tolerance: float
    fail_on_regression: float | None
    workloads: list[WorkloadCmp]
    unmatched: list[dict[str, str]]
    anomalies: list[anom.Anomaly]
    environment: list[dict[str, Any]] = field(default_factory=list)  # env_differences: what differs, per run

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
                "ratio": "peak throughput NEW / BASE (peak = highest mean throughput over the sweep), for reading",
                "ci": "t interval of throughput over the levels (NEW / BASE geometric mean), at `confidence`; "
                      "null with one trial",
                "tp_gain_pct": "(ratio - 1) x 100; positive = NEW better",
                "lat_gain_pct": "(BASE / NEW mean latency - 1) x 100, geometric mean over matched levels "
                                "without collapse/short-window/failed points; positive = NEW better",
                "verdict": VERDICT_RULES,
            },
            "workloads": [w.to_dict() for w in self.workloads],
            "unmatched": self.unmatched,
            "anomalies": [a.to_dict() for a in self.anomalies],
            "environment_differs": self.environment,
            "regressions": [{"workload": w.workload, "new": w.new, "ratio": w.ratio,
                             "figures": [asdict(j) for j in w.fired]}
                            for w in self.regressed],
        }


def compare(base: RunData, news: list[RunData], tolerance: float = 0.10,
            fail_on_regression: float | None = None) -> Comparison:
    assign_levels([base, *news])
    memo: dict[tuple[tuple[int, ...], str], list[anom.Anomaly]] = {}

    def find(run: RunData, wl: str) -> list[anom.Anomaly]:  # each run's anomalies once per workload
        key = (tuple(run.ids), wl)
        if key not in memo:
            memo[key] = anom.find(run, wl)
        return memo[key]

    results: list[WorkloadCmp] = []
    unmatched: list[dict[str, str]] = []
    for new in news:
        nw = set(new.workloads())
        for wl in base.workloads():
            if wl not in nw:
                unmatched.append({"workload": wl, "only_in": base.name, "other": new.name})
                continue
            c = compare_workload(base, new, wl, tolerance, fail_on_regression, find)
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
            found.extend(a for wl in run.workloads() for a in find(run, wl))
    return Comparison(base, news, tolerance, fail_on_regression, results, unmatched, found,
                      env_differences([base, *news]))


# what of a run's environment a comparison names when it differs: (name, dotted path in the run's env)
ENV_FIELDS = (("Ceph (cluster)", "ceph_version"), ("Ceph daemons from", "cluster.ceph_source"),
              ("Ceph (client)", "ceph_client_version"), ("cluster", "cluster.kind"),
              ("objectstore", "cluster.objectstore"), ("OSDs", "cluster.osds"), ("fathom", "fathom_version"),
              ("kernel", "host.kernel"), ("CPU", "host.cpu_model"), ("cores", "host.cores"), ("--quick", "quick"),
              ("--engine", "engine_override"), ("labels", "labels"))


def _env_value(env: dict[str, Any], path: str) -> str:
    v: Any = env
    for part in path.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    if isinstance(v, dict) and "kind" in v:  # a Ceph source: this host's, or a build or root's directory
        return v["kind"] + (f" {v['dir']}" if v.get("dir") else "")
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in sorted(v.items())) or "-"
    return "-" if v is None or v == "" else str(v)


def env_differences(runs: list[RunData]) -> list[dict[str, Any]]:
    """The environment fields whose values differ between the runs (a group by its first run's), each with
    every run's value in the runs' order: a ratio between two Ceph releases or two builds says so beside it."""
    out = []
    for name, path in ENV_FIELDS:
        values = [_env_value(r.env, path) for r in runs]
        if len(set(values)) > 1:
            out.append({"field": name, "key": path, "values": values})
    return out


def comparison_rows(c: Comparison, levels: bool = False) -> list[dict[str, Any]]:
    """The comparison as flat rows (fathom.api): one per workload and NEW run, or (levels) one per matched
    level, with the fields of to_dict() (intervals as their low and high ends)."""
    out: list[dict[str, Any]] = []
    for w in c.workloads:
        ids = {"workload": w.workload, "base": w.base, "new": w.new}
        if not levels:
            out.append({**ids, "axis": w.axis, "unit": w.unit, "base_peak": w.base_peak,
                        "base_peak_at": w.base_peak_at, "new_peak": w.new_peak, "new_peak_at": w.new_peak_at,
                        "ratio": w.ratio, "ci_low": w.ci[0] if w.ci else None, "ci_high": w.ci[1] if w.ci else None,
                        "confidence": w.confidence, "tp_gain_pct": w.tp_gain_pct, "lat_gain_pct": w.lat_gain_pct,
                        "trials_base": w.trials[0], "trials_new": w.trials[1], "verdict": w.verdict,
                        "reason": w.reason, "regression": w.regression})
            continue
        for lv in w.levels:
            row = {**ids, "axis": w.axis, "level": lv.label, "iodepth": lv.iodepth, "unit": w.unit,
                   "base_tp": lv.base_tp, "new_tp": lv.new_tp, "base_clat_ms": lv.base_clat_ms,
                   "new_clat_ms": lv.new_clat_ms, "base_p99_ms": lv.base_p99_ms, "new_p99_ms": lv.new_p99_ms,
                   "tp_gain_pct": lv.tp_gain_pct, "lat_gain_pct": lv.lat_gain_pct, "trials_base": lv.trials[0],
                   "trials_new": lv.trials[1], "flagged": ", ".join(lv.flagged)}
            for name, j in (("tp", lv.tp), ("lat", lv.lat)):
                row.update({f"{name}_ratio": j.ratio if j else None, f"{name}_verdict": j.verdict if j else None})
            out.append(row)
    return out
