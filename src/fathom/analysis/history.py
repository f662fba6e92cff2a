"""History: the matching points of many runs lined up in order, where their figures changed, and the gate.

Runs are chosen by suite (every stored run of it) or named; `--since` drops older ones. Within a suite, a
point of one run meets the points of the others by workload and level, by the rule `compare` uses
(`data.assign_levels`: the sweep axes that vary within a run make the level). A *position* is one place on
the series: a run (`--by time`, in the order they were made) or one value of a label (`--by nodes`: every
run labelled nodes=8 is one position, numbers ordered as numbers, versions as versions). Repetitions within
a run, and runs that share a position, are that position's samples.

Each (workload, level, figure) series goes to `changes.detect` (E-Divisive means with a significance test;
the method, and what it cannot see, are in that module). A change is *worse* when the figure moved in its
bad direction: down for throughput, up for latency and CPU per op.

The gate (`--fail-on-change T`) asks one question per series: does the newest position begin a change? It
compares the newest position's value (the geometric mean of its samples) with the positions of the
segment before it (back to the last change point) by a t prediction test on the logs: is the newest one
more draw from that segment? At 0.05 / m for the m series judged (Bonferroni, so a hundred figures do not
fire five times a night on noise). It fires when that test is significant, the move is in the bad
direction and beyond T, and the position before the newest did not already show it (a step fires once,
on the run that shows it first). The segment must hold at least GATE_BASELINE (5) positions: a
spread from fewer is too unsure a yardstick. Only the newest position of the series' suite is judged: a series
that position has no point for (a failed or left-out point) is named as lacking it, not judged on an older
position (which would fire again on a step already reported). A new step at the newest run is one run long,
shorter than change detection's shortest segment, which is why the gate tests it on its own; a single noisy
newest run looks the same, and the next runs tell them apart.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom.suite import labels as lab
from fathom.analysis import changes
from fathom.analysis.data import RunData, StoredPoint, assign_workload_levels, axis_name, throughput_for
from fathom.analysis.stats import LogDiff, p_text, ratio_interval, t_cdf
from fathom.errors import FathomError, UsageError
from fathom.fields import suggest
from fathom.results.model import DAEMON_KINDS, METRIC_COLUMNS
from fathom.results.store import Run, Store
from fathom.units import format_number

GATE_ALPHA = 0.05  # the family's: divided by the series judged
# positions the newest is judged against, at least: a spread from two or three runs is too unsure a yardstick
# for tails (a loaded host's p99 jumps by half now and then), and a gate that fires on it is not believed
GATE_BASELINE = 5
METHOD = (f"E-Divisive means on the logs of each position's value, splits kept by a Student t test at "
          f"{changes.ALPHA:g} (Bonferroni over the places a split could take), segments of at least "
          f"{changes.MIN_SIZE} positions; ratio intervals are 95% Welch t")
TIME = "time"
KINDS = ("suite", "bench", "import")  # the runs a history may line up (named), by the store's kind
OVERVIEW_KINDS = ("suite", "import")  # those `fathom history` with no SUITE or RUN lines up: every suite and table
# a figure's good direction: named where its name does not say it (a later first error after a fault is
# better, though it is seconds; a lost host, a failed RGW request, an op the schedule never issued are worse)
_HIGHER = ("iops", "bw_mib_s", "achieved_rate_ops_s", "prefault_iops", "fault_min_iops", "fault_min_mib_s",
           "fault_first_error_s")
_LOWER = ("errors", "rgw_failed_req", "clients_lost", "server_hosts_lost", "unissued_ops")
_LOWER_SUFFIX = ("_ms", "_us_per_op", "_ctx_per_op", "_cpu", "_cores", "_mem_mib", "_pct", "_s")
# counts and settings (fault_at_s: when the schedule put the first fault), no better or worse
_NEUTRAL = ("total_ios", "runtime_s", "offered_rate_ops_s", "server_hosts", "client_hosts", "engines",
            "net_rx_mib_s", "net_tx_mib_s", "net_busiest_host_mib_s", "fault_at_s", "bound_use_pct")
_NAME = re.compile(r"^name:\s*['\"]?([^'\"#\n]+?)['\"]?\s*(?:#.*)?$", re.M)


def direction(figure: str) -> int:
    """+1: higher is better; -1: lower is better; 0: neither (a count, a setting): no gate, no better/worse."""
    if figure in _NEUTRAL:
        return 0
    if figure in _HIGHER or figure.endswith(("_iops", "_bw_mib_s")):
        return 1
    if figure in _LOWER or figure.endswith(_LOWER_SUFFIX):
        return -1
    return 0


@dataclass
class HistRun:
    id: int
    name: str
    created: float
    suite: str
    labels: dict[str, str]


@dataclass
class Position:
    """One place on a series: a run, or one value of the --by label with every run that has it."""

    key: str  # the run's name, or 'nodes=8'
    x: float | None  # the label's value where it is a number; the run's time with --by time
    runs: list[str]
    samples: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)


@dataclass
class Change:
    at: int  # the first position after the change
    first: str  # that position's key
    last_before: str  # the key of the position before it
    before: float  # mean of the adjacent segment before
    after: float  # and after
    ratio: float  # after / before
    ci: tuple[float, float] | None  # of the ratio
    p_value: float
    verdict: str  # better | worse | changed (a figure with no better direction)


@dataclass
class Series:
    suite: str
    workload: str
    level: str  # the level's label ('-' when the workload has one level)
    axis: str  # what the level label means (iodepth, ...)
    figure: str  # the metric column (iops, p99_ms, ...)
    direction: int
    positions: list[Position]
    changes: list[Change]
    segments: list[tuple[int, int, float]]  # [start, end) over positions, mean
    note: str = ""  # why no change point could be looked for
    newest: str = ""  # the key of its suite's newest position, which the series may lack (the gate judges only it)

    @property
    def name(self) -> str:
        lvl = "" if self.level == "-" else f" {self.axis}={self.level}" if self.axis != "level" else f" {self.level}"
        return f"{self.workload}{lvl} {self.figure}"


@dataclass
class Fired:
    series: Series
    newest: str  # the newest position's key
    value: float
    before: float  # the segment before it: mean
    before_from: str  # its first position's key
    ratio: float
    ci: tuple[float, float] | None
    p_value: float

    def text(self) -> str:
        ci = f" [{self.ci[0]:.3f}, {self.ci[1]:.3f}]" if self.ci else ""
        fig = self.series.figure
        return (f"{self.series.suite}: {self.series.name}: {self.newest} at {value_text(self.value, fig)} is "
                f"{self.ratio:.3f}x{ci} of {value_text(self.before, fig)}, the mean from {self.before_from} on"
                f" ({p_text(self.p_value)})")


@dataclass
class History:
    by: str
    runs: list[HistRun]
    series: list[Series]
    left_out: list[str]  # runs not drawn, and why
    tolerance: float | None = None
    fired: list[Fired] = field(default_factory=list)
    gate_alpha: float | None = None  # the per-series level the gate used
    judged: int = 0  # the series the gate judged
    lacking: list[Series] = field(default_factory=list)  # series with a direction their suite's newest position lacks

    @property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(s.suite for s in self.series))

    def to_dict(self) -> dict[str, Any]:
        return {
            "by": self.by, "method": METHOD,
            "runs": [{"id": r.id, "name": r.name, "created": r.created, "suite": r.suite, "labels": r.labels}
                     for r in self.runs],
            "left_out": self.left_out,
            "series": [{"suite": s.suite, "workload": s.workload, "level": s.level, "axis": s.axis,
                        "figure": s.figure, "name": s.name, "direction": s.direction, "note": s.note,
                        "changes": [vars(c) for c in s.changes],
                        "segments": [{"start": a, "end": b, "mean": m} for a, b, m in s.segments],
                        "positions": [{"key": p.key, "x": p.x, "runs": p.runs, "samples": p.samples}
                                      for p in s.positions]} for s in self.series],
            "gate": None if self.tolerance is None else {
                "tolerance_pct": self.tolerance * 100, "alpha_per_series": self.gate_alpha, "judged": self.judged,
                "lacking": [{"suite": s.suite, "series": s.name, "figure": s.figure, "workload": s.workload,
                             "level": s.level, "newest": s.newest, "last_seen": s.positions[-1].key}
                            for s in self.lacking],
                "fired": [{"suite": f.series.suite, "series": f.series.name, "figure": f.series.figure,
                           "workload": f.series.workload, "level": f.series.level, "newest": f.newest,
                           "value": f.value, "before": f.before, "ratio": f.ratio, "ci": f.ci,
                           "p_value": f.p_value, "text": f.text()} for f in self.fired]},
        }


UNITS = {"iops": "IOPS", "bw_mib_s": "MiB/s", "errors": "ops", "total_ios": "ops"}


def unit(figure: str) -> str:
    if figure in UNITS:
        return UNITS[figure]
    for suffix, u in (("_ms", "ms"), ("_mib_s", "MiB/s"), ("_iops", "IOPS"), ("_ops_s", "ops/s"), ("_s", "s"),
                      ("_us_per_op", "µs/op"), ("_mib", "MiB"), ("_pct", "%"), ("_cpu", "% of a core")):
        if figure.endswith(suffix):
            return u
    return ""


def value_text(v: float, figure: str) -> str:
    """'999.8 IOPS', '1,690 IOPS', '0.0123 ms': the reports' plain numbers (report.doc.fmt), with the unit."""
    return f"{format_number(v)} {unit(figure)}".rstrip()


# figures a series can be drawn of: the numeric metric columns, and any daemon kind's (a kind fathom does not
# know by name still has them); text and true/false columns have no series
DAEMON_SUFFIXES = ("_cpu", "_cores", "_mem_mib", "_ctx_switches_s")
FIGURES = [c for c in METRIC_COLUMNS if c not in ("steady_state", "schedule_kept", "fault_recovered", "rgw_reconciled",
                                                  "bound")
           and not any(c == f"{k}{s}" for k in DAEMON_KINDS for s in DAEMON_SUFFIXES)]


def figures_of(text: str | None) -> list[str]:
    """--figure F,F as a list (None: the defaults); an empty list or an unknown name is a usage error naming the
    figures there are."""
    if text is None:
        return []
    figs = [f.strip() for f in text.split(",") if f.strip()]
    listed = (f"{', '.join(FIGURES)}; per daemon kind KIND{', KIND'.join(DAEMON_SUFFIXES)} "
              f"(KIND: {', '.join(DAEMON_KINDS)} or another)")
    if not figs:
        raise UsageError(f"--figure {text!r}: name one or more figures, comma-separated",
                         hint=f"figures: {listed}; leave --figure out for throughput and p99")
    for f in figs:
        if f not in FIGURES and not re.fullmatch(r"[a-z][a-z0-9_]*(" + "|".join(DAEMON_SUFFIXES) + ")", f):
            raise UsageError(f"--figure {f!r}: no such figure" + suggest(f, FIGURES, "figures", [listed]))
    return figs


def suite_name(r: Run) -> str:
    """The suite's own name (a moved or renamed file still matches), else what the run recorded. An import's is
    table:FILE as stored, or import:SOURCE (import:fio): an imported rados bench is no run of the rados-bench
    suite, and is not lined up with its runs."""
    if r.kind == "import":
        return r.suite if (r.suite or "").startswith("table:") else f"import:{r.suite or r.name}"
    if r.suite_yaml:
        m = _NAME.search(r.suite_yaml)
        if m:
            return m.group(1).strip()
    return Path(r.suite).stem if r.suite and r.suite.endswith((".yaml", ".yml")) else (r.suite or r.name)


def _names(r: Run) -> set[str]:
    """What a SUITE argument may call a run's suite: its name; a suite run's file as recorded; an imported table
    without its extension (table:crimson-vs-classic-2025)."""
    name = suite_name(r)
    if r.kind == "import":
        return {name, f"table:{Path(name[6:]).stem}"} if name.startswith("table:") else {name}
    return {name, r.suite} if r.suite else {name}


def parse_since(text: str, now: float | None = None) -> float:
    """'7d', '12h', '30m' before now, or a date '2026-11-01' / '2026-11-01T06:00' (local time)."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([dhm])", text.strip())
    if m:
        return now - float(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"):
        try:
            return time.mktime(time.strptime(text.strip(), fmt))
        except ValueError:
            continue
    raise UsageError(f"--since {text!r}: expected a date (2026-11-01, 2026-11-01T06:00) or an age (7d, 12h, 30m)")


def select(store: Store, refs: Sequence[str], since: float | None = None) -> tuple[list[Run], list[str]]:
    """The runs to line up: every run of each named suite, or the named runs; none named: every suite run.
    Returns them and the runs left out with why (an SLO search's probes are not a sweep's points)."""
    every = [r for r in store.runs() if r.kind in KINDS]
    chosen: dict[int, Run] = {}
    for ref in refs:
        found = [r for r in every if ref in _names(r)]
        if not found:
            try:
                found = [store.run(x) for x in ref.split(",") if x]
            except FathomError:
                suites = sorted({suite_name(r) for r in every})
                raise FathomError(f"no suite or run named {ref!r} in {store.path}",
                                  hint=f"suites there: {', '.join(suites) or 'none'}; runs: `fathom ls`") from None
        chosen.update((r.id, r) for r in found)
    if not refs:
        chosen = {r.id: r for r in every if r.kind in OVERVIEW_KINDS}
    left: list[str] = []
    out = []
    for r in sorted(chosen.values(), key=lambda r: (r.created, r.id)):
        if since is not None and r.created < since:
            continue
        if (r.env.get("slo") or {}).get("result") is not None:
            left.append(f"{r.name}: an SLO search (its answer is compared with `fathom compare`)")
        elif r.status == "running":
            left.append(f"{r.name}: still running")
        else:
            out.append(r)
    if not out:
        what = ", ".join(refs) if refs else "any suite"
        raise FathomError(f"no stored runs of {what}" + (" since then" if since is not None else ""),
                          hint="see `fathom ls`; name suites (by their name:) or runs")
    return out, left


def build(store: Store, refs: Sequence[str] = (), by: str = TIME, workloads: Sequence[str] = (),
          figures: Sequence[str] = (), since: float | None = None, tolerance: float | None = None) -> History:
    runs, left = select(store, refs, since)
    hruns = [HistRun(r.id, r.name, r.created, suite_name(r), lab.of_run(r.env)) for r in runs]
    if by != TIME:
        have = [h for h in hruns if by in h.labels]
        if not have:
            known = sorted({k for h in hruns for k in h.labels})
            raise UsageError(f"--by {by}: no chosen run has that label",
                             hint=f"labels on these runs: {', '.join(known) or 'none'} (or --by time); "
                                  "tag runs with `fathom run --label KEY=VALUE`")
        left += [f"{h.name}: no label {by}" for h in hruns if by not in h.labels]
        hruns = have
    # only the figures drawn (the defaults: both throughputs, p99 and mean latency): not a point's whole metrics
    rows = store.done_points([h.id for h in hruns], keys=list(figures) or ["iops", "bw_mib_s", "p99_ms", "clat_ms"])
    series: list[Series] = []
    for suite in dict.fromkeys(h.suite for h in hruns):
        group = [h for h in hruns if h.suite == suite]
        ids = {h.id for h in group}
        series += _suite_series(suite, group, [r for r in rows if r["run_id"] in ids], by, workloads, figures)
    if not series:
        raise FathomError("no figure to line up: the chosen runs have no completed points"
                          + (f" of workload {', '.join(workloads)}" if workloads else "")
                          + (f" with {', '.join(figures)}" if figures else ""))
    h = History(by, hruns, series, left, tolerance)
    if tolerance is not None:
        h.lacking = [s for s in series if s.direction and s.positions[-1].key != s.newest]
        judged = [s for s in series if s.direction and len(s.positions) >= 2 and s.positions[-1].key == s.newest]
        h.judged = len(judged)
        h.gate_alpha = GATE_ALPHA / max(len(judged), 1)
        h.fired = [f for s in judged if (f := gate(s, tolerance, h.gate_alpha)) is not None]
    return h


def _suite_series(suite: str, group: list[HistRun], rows: list[dict[str, Any]], by: str, workloads: Sequence[str],
                  figures: Sequence[str]) -> list[Series]:
    by_id = {h.id: h for h in group}
    data = {h.id: RunData(h.name, [h.id], "suite", "done", None, {}, suite, [], []) for h in group}
    for r in rows:
        if workloads and r["workload"] not in workloads:
            continue
        h = by_id[r["run_id"]]
        data[h.id].points.append(StoredPoint(run=h.name, run_id=h.id, workload=r["workload"], params=r["params"],
                                             metrics=r["metrics"]))
    order = _positions(group, by)
    out: list[Series] = []
    by_wl: dict[str, list[StoredPoint]] = {}
    for r in data.values():
        for p in r.points:
            by_wl.setdefault(p.workload, []).append(p)
    for wl, pts in by_wl.items():
        axis = axis_name(assign_workload_levels(pts))  # compare's rule (data.assign_levels), one workload
        levels: dict[tuple[Any, ...], str] = {}
        cells: dict[tuple[tuple[Any, ...], int], list[StoredPoint]] = {}  # (level, run id) -> its points
        for p in sorted(pts, key=lambda p: p.level):
            levels.setdefault(p.level, p.label)
            cells.setdefault((p.level, p.run_id), []).append(p)
        for fig in figures or _default_figures(pts):
            for level, label in levels.items():
                positions = []
                for key, x, members in order:
                    vals = [float(v) for h in members for p in cells.get((level, h.id), ())
                            if type(v := p.metrics.get(fig)) in (int, float) and math.isfinite(v)]
                    if vals:
                        positions.append(Position(key, x, [h.name for h in members], vals))
                if positions:
                    out.append(_detect(Series(suite, wl, label, axis, fig, direction(fig), positions, [], [],
                                              newest=order[-1][0])))
    return out


def _default_figures(pts: list[StoredPoint]) -> list[str]:
    lat = "p99_ms" if any(p.m("p99_ms") is not None for p in pts) else "clat_ms"
    return [throughput_for(pts).key, lat]


def _positions(group: list[HistRun], by: str) -> list[tuple[str, float | None, list[HistRun]]]:
    if by == TIME:
        return [(h.name, h.created, [h]) for h in group]
    values: dict[str, list[HistRun]] = {}
    for h in group:
        values.setdefault(h.labels[by], []).append(h)
    keys, nums = lab.ordered(values)  # numbers as numbers, versions as versions (3.9 before 3.10)
    return [(f"{by}={v}", nums[v] if nums else None, values[v]) for v in keys]


def _detect(s: Series) -> Series:
    found = changes.find_changes([p.samples for p in s.positions])
    s.note = found.note or ""
    s.segments = [(g.start, g.end, g.mean) for g in found.segments]
    for c in found.points:
        bad = (c.ratio < 1) if s.direction > 0 else (c.ratio > 1) if s.direction < 0 else None
        s.changes.append(Change(c.index, s.positions[c.index].key, s.positions[c.index - 1].key, c.before,
                                c.after, c.ratio, c.interval, c.p_value,
                                "changed" if bad is None else ("worse" if bad else "better")))
    return s


def gate(s: Series, tolerance: float, alpha: float) -> Fired | None:
    """Does the newest position begin a change beyond the tolerance in the bad direction? (The module's
    docstring says how it is tested.) A series its suite's newest position lacks is not judged."""
    if s.newest and s.positions[-1].key != s.newest:
        return None
    fired = _newest(s, len(s.positions), tolerance, alpha)
    if fired is None or _newest(s, len(s.positions) - 1, tolerance, alpha) is not None:
        return None
    return fired


def _newest(s: Series, n: int, tolerance: float, alpha: float) -> Fired | None:
    """Position n-1 against the positions of the segment before it (back to the last change point before it):
    a t prediction test on the positions' values (the mean log of each one's samples: repetitions sharpen a
    position's value, and runs, not repetitions, are the observations, as in change detection)."""
    if n < GATE_BASELINE + 1:
        return None
    start = max((c.at for c in s.changes if c.at < n - 1), default=0)
    before = [_logmean(p.samples) for p in s.positions[start:n - 1]]
    before = [x for x in before if x is not None]
    y = _logmean(s.positions[n - 1].samples)
    if len(before) < GATE_BASELINE or y is None:
        return None
    m = statistics.fmean(before)
    d = y - m
    ratio = math.exp(d)
    if not (ratio < 1 - tolerance if s.direction > 0 else ratio > 1 + tolerance):
        return None
    k = len(before)
    var = statistics.variance(before) * (1 + 1 / k)  # a new draw from the segment, and the segment's mean
    df = k - 1
    if var == 0:
        p, ci = 0.0, (ratio, ratio)
    else:
        p = 2 * (1 - t_cdf(abs(d) / math.sqrt(var), df))
        ci = ratio_interval(LogDiff(d, var, df, (k, 1)), 1 - alpha)
    if p >= alpha:
        return None
    return Fired(s, s.positions[n - 1].key, math.exp(y), math.exp(m), s.positions[start].key, ratio, ci, p)


def _logmean(samples: list[float]) -> float | None:
    good = [math.log(x) for x in samples if x > 0 and math.isfinite(x)]
    return statistics.fmean(good) if good else None
