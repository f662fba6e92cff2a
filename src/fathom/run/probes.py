"""An SLO search as a run: each probe a point of the run, built when the last one has been judged.

The runner asks `points()` for its next point and tells `record()` how it went; between the two the
search (fathom.analysis.slo) decides the next load. Probes at one load are merged (their histograms, ops,
errors and per-second intervals) before they are judged again, so a borderline answer narrows instead of
flipping. A percentile's interval is the wider of the order-statistic one and the batch-means one from the
probe's per-second interval histograms (slo's module doc): the outcome's `intervals`, the engine's interval
records as the point stores them (one stream, merged over engines); without them (an outcome that does not
carry them, an engine whose records have no histograms) the order statistics alone judge. Each probe
runs long enough for the targeted percentiles: MIN_TAIL ops beyond the highest one (a p99.9 needs 10,000
ops), at least `probe_s`, at most `max_probe_s`. The suite's workloads before the searched one run once
first, as `fathom run` runs them (the write whose objects a searched read reads).

Open loop (by rate) without a start: a first, closed-loop probe at the workload's iodepth measures what
the cluster completes flat out (C); the search starts at C/2 and is bounded by 2 C. Give an open-loop
workload an iodepth above what its rate needs (rate x latency, Little's law), else the iodepth, not the
cluster, stops the schedule.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from fathom.results import hdr
from fathom.analysis import slo
from fathom.errors import UsageError
from fathom.suite.plan import Point
from fathom.units import format_rate

MIN_RAMP_S = 2.0  # an open-loop schedule settles after its first second or two


@dataclass
class Settings:
    """What to search and how (the suite's `slo:` section, the command line over it)."""

    targets: slo.Targets
    workload: str | None = None
    by: Literal["rate", "iodepth"] = "rate"
    start: float | None = None  # None: rate from a closed-loop probe; iodepth from the workload's
    lo: float | None = None
    hi: float | None = None
    resolution: float = 0.05
    probe_s: float = 10.0
    max_probe_s: float = 120.0

    def to_dict(self) -> dict[str, Any]:
        return {"targets": self.targets.to_dict(), "workload": self.workload, "by": self.by, "start": self.start,
                "lo": self.lo, "hi": self.hi, "resolution": self.resolution, "probe_s": self.probe_s,
                "max_probe_s": self.max_probe_s}


def settings(suite: Any, given: dict[str, Any]) -> Settings:
    """The search's settings: the suite's `slo:` section (spec.SloSpec or None) with the command line's values
    (the same names, as typed; None: not given) over it. At least one target is needed."""
    from fathom.suite.spec import SloSpec

    try:
        cli = SloSpec.model_validate({k: v for k, v in given.items() if v is not None})
    except Exception as exc:  # pydantic's ValidationError: the first problem, named as its option
        errs = getattr(exc, "errors", lambda: [])()
        first = errs[0] if errs else {"loc": ("?",), "msg": str(exc)}
        flag = "--" + str(first["loc"][0]).replace("_", "-").replace("start", "from") if first["loc"] else "slo"
        raise UsageError(f"{flag}: {first['msg']}".replace("Value error, ", "")) from None
    merged = (suite or SloSpec()).model_copy(update={k: getattr(cli, k) for k in cli.model_fields_set})
    latency = {k: getattr(merged, k) for k in slo.QUANTILES if getattr(merged, k) is not None}
    if not latency and merged.error_rate is None:
        raise UsageError("an SLO search needs a target", hint="e.g. --p99 5ms (also --p50, --p90, --p999, "
                                                              "--error-rate 0.1%), or slo: {p99: 5ms} in the suite")
    if merged.max_probe < merged.probe:
        raise UsageError(f"slo: max_probe ({merged.max_probe:g} s) is shorter than probe ({merged.probe:g} s)")
    return Settings(slo.Targets(latency, merged.error_rate), merged.workload, merged.by, merged.start, merged.min,
                    merged.max, merged.resolution, merged.probe, merged.max_probe)


def setup_points(points: list[Point], base: Point) -> list[Point]:
    """The suite's workloads before the searched one, every point of them, run once first as `fathom run`
    would (the write whose objects a searched read reads)."""
    order = list(dict.fromkeys(p.workload for p in points))
    before = set(order[:order.index(base.workload)])
    return [p for p in points if p.workload in before]


def base_point(points: list[Point], workload: str | None) -> Point:
    """The one configuration the search loads: the named workload's (or the suite's only one) first point.
    A sweep of anything but rate or iodepth is refused: the search itself varies the load."""
    names = list(dict.fromkeys(p.workload for p in points))
    name = workload or (names[0] if len(names) == 1 else None)
    if name is None:
        raise UsageError(f"the suite has {len(names)} workloads ({', '.join(names)}): name the one to search",
                         hint="--workload NAME, or slo.workload in the suite")
    mine = [p for p in points if p.workload == name]
    if not mine:
        raise UsageError(f"the suite has no workload {name!r}; workloads: {', '.join(names)}")
    swept = sorted({k for p in mine for k in p.swept} - {"rate", "iodepth"})
    if swept:
        raise UsageError(f"workload {name!r} sweeps {', '.join(swept)}: an SLO search loads one configuration",
                         hint="fix those fields in the workload (or search each value in its own run)")
    if mine[0].params.get("steady_state") or mine[0].params.get("faults"):
        raise UsageError(f"workload {name!r} has steady_state or faults: a probe runs a fixed length, no faults")
    return mine[0]


@dataclass
class Probes:
    """The runner's point source for an SLO search (see the module doc)."""

    settings: Settings
    base: Point
    say: Callable[[str], None] = lambda msg: None
    setup: list[Point] = field(default_factory=list)  # run once before the first probe (setup_points)
    search: slo.Search | None = None
    calibration: dict[str, Any] | None = None  # the closed-loop probe's figures (rate search without start)
    _merged: dict[float, dict[str, Any]] = field(default_factory=dict)  # load -> merged ops, errors, hist, ...
    _last: tuple[Point, Any] | None = None
    _n: int = 0
    _length: dict[float, float] = field(default_factory=dict)  # load -> the next probe's runtime (short: longer)

    @property
    def unit(self) -> str:
        return "ops/s" if self.settings.by == "rate" else "iodepth"

    def points(self) -> Iterator[Point]:
        s = self.settings
        for p in self.setup:
            self._n += 1
            yield Point(idx=self._n - 1, key=p.key, workload=p.workload, engine=p.engine, rep=p.rep,
                        params=p.params, swept=p.swept)
            _, out = self._outcome()
            if out.status != "done":
                raise UsageError(f"{p.key}, run before the search, {out.status}: {out.error or 'no figures'}")
        if s.by == "rate" and s.start is None:
            yield self._point(None, s.probe_s)
            self._calibrate()
        elif s.by == "iodepth":
            self._begin(float(s.start or self.base.params["iodepth"]))
        else:
            self._begin(float(s.start))  # type: ignore[arg-type]
        assert self.search is not None
        while (load := self.search.next_load()) is not None:
            yield self._point(load, self._runtime(load))
            self._judge(load)

    def record(self, point: Point, outcome: Any) -> None:
        """The runner's report of a finished point (fathom.run.point.PointOutcome)."""
        self._last = (point, outcome)

    # ---- probes ----
    def _point(self, load: float | None, runtime: float) -> Point:
        self._n += 1
        n = self._n - len(self.setup)
        params = dict(self.base.params)
        params["runtime"] = runtime
        params["slo_probe"] = n  # its length is the search's choice, not a level (analysis.data)
        if load is not None and self.settings.by == "rate":
            params["rate"] = load
            params["arrival"] = params.get("arrival") or "uniform"
            params["ramp_time"] = max(float(params.get("ramp_time") or 0.0), MIN_RAMP_S)
        elif self.settings.by == "rate":  # the calibration: closed loop
            params.pop("rate", None)
            params.pop("arrival", None)
        else:
            params["iodepth"] = int(load)  # type: ignore[arg-type]
        what = "calibrate" if load is None else (f"rate={load:g}" if self.settings.by == "rate" else
                                                 f"iodepth={int(load)}")
        return Point(idx=self._n - 1, key=f"{self.base.workload}/slo/{n}/{what}", workload=self.base.workload,
                     engine=self.base.engine, rep=1, params=params, swept={} if load is None else
                     {self.settings.by: load})

    def _outcome(self) -> tuple[Point, Any]:
        if self._last is None:
            raise RuntimeError("a probe ended without the runner's record")
        got, self._last = self._last, None
        return got

    def _calibrate(self) -> None:
        point, out = self._outcome()
        m = out.metrics or {}
        cap = m.get("iops")
        if out.status != "done" or not cap:
            raise UsageError(f"the closed-loop probe did not complete: {out.error or out.status}",
                             hint="give the search a start with --from RATE")
        self.calibration = {"iops": cap, "iodepth": point.params["iodepth"], "p99_ms": m.get("p99_ms")}
        self._begin(cap / 2, hi=2 * cap)
        assert self.search is not None
        self.say(f"closed loop at iodepth {point.params['iodepth']}: {format_rate(cap)} "
                 f"(p99 {m.get('p99_ms') or 0:.3g} ms); searching the rate from {format_rate(self.search.start)} "
                 f"up to {format_rate(self.search.hi)}")

    def _begin(self, start: float, hi: float | None = None) -> None:
        s = self.settings
        integer = s.by == "iodepth"
        top = s.hi if s.hi is not None else (hi if hi is not None else (4096.0 if integer else start * 64))
        if s.start is None:
            start = min(start, top)  # a calibrated start stays within the bound given
        lo = s.lo if s.lo is not None else (1.0 if integer else max(start / 64, 1.0))
        if not lo <= start <= top:
            raise UsageError(f"the search starts at {start:g} {self.unit}, outside its bounds {lo:g}..{top:g}")
        self.search = slo.Search(s.targets, start=start, lo=lo, hi=top, resolution=s.resolution, integer=integer,
                                 unit=self.unit)

    def _runtime(self, load: float) -> float:
        """Long enough for the percentiles: min_ops at the load's rate (closed loop: the last rate seen)."""
        if load in self._length:
            return self._length[load]
        rate = load if self.settings.by == "rate" else self._rate_guess(load)
        return probe_runtime(rate, self.settings.targets, self.settings.probe_s, self.settings.max_probe_s)

    def _rate_guess(self, iodepth: float) -> float | None:
        """Closed loop: the rate expected at this iodepth from the nearest probe so far (rate scales at most
        linearly with iodepth)."""
        seen = [(abs(k - iodepth), v["iops"] * min(iodepth / k, 1.0)) for k, v in self._merged.items() if v["iops"]]
        return min(seen)[1] if seen else None

    def _judge(self, load: float) -> None:
        assert self.search is not None
        point, out = self._outcome()
        m = out.metrics or {}
        if out.status != "done":
            raise UsageError(f"probe {point.key} {out.status}: {out.error or 'no figures'}; the search stops",
                             hint="see `fathom show` for the run's events")
        merged = self._merge(load, m, out.hist, point, interval_hists(out.intervals))
        obs = self._observation(load, merged)
        v = slo.judge(obs, self.settings.targets, self.unit, final=self.search.final(load))
        if v.outcome == "short":
            total = obs.ops + obs.errors
            want = float(point.params["runtime"]) * self.settings.targets.min_ops() * 1.25 / max(total, 1)
            self._length[load] = min(max(math.ceil(want), self.settings.probe_s), self.settings.max_probe_s)
            if float(point.params["runtime"]) >= self.settings.max_probe_s:
                v.reasons.append(f"a probe of {self.settings.max_probe_s:g} s (--max-probe) is not long enough")
        self.search.record(v)
        what = f"{format_rate(load)}" if self.settings.by == "rate" else f"iodepth {int(load)}"
        self.say(f"probe {len(self.search.probes)}: {what}: {v.outcome}"
                 + (f" ({'; '.join(v.reasons)})" if v.reasons else ""))

    def _merge(self, load: float, m: dict[str, Any], hist: str | None, point: Point,
               ivals: list[list[str]] | None = None) -> dict[str, Any]:
        prev = self._merged.get(load)
        cur = {"ops": int(m.get("total_ios") or 0), "errors": int(m.get("errors") or 0),
               "hist": hist, "kept": m.get("schedule_kept"), "achieved": m.get("achieved_rate_ops_s"),
               "client": m.get("client_thread_max_pct"), "iops": m.get("iops") or 0.0, "probes": 1,
               "keys": [point.key], "ivals": ivals}
        if prev is not None:
            cur = {"ops": prev["ops"] + cur["ops"], "errors": prev["errors"] + cur["errors"],
                   "hist": hdr.encode(hdr.merge([h for h in (prev["hist"], hist) if h])) if hist or prev["hist"]
                   else None,
                   "kept": None if prev["kept"] is None and cur["kept"] is None else
                   bool(prev["kept"] is not False and cur["kept"] is not False),
                   # the lowest: the answer is never above what a probe at this load achieved
                   "achieved": min((x for x in (prev["achieved"], cur["achieved"]) if x is not None), default=None),
                   "client": max((x for x in (prev["client"], cur["client"]) if x is not None), default=None),
                   "iops": _mean(prev["iops"], cur["iops"]), "probes": prev["probes"] + 1,
                   "keys": prev["keys"] + cur["keys"],
                   # one probe without them and the merged histogram has ops the intervals lack
                   "ivals": prev["ivals"] + ivals if prev["ivals"] is not None and ivals is not None else None}
        self._merged[load] = cur
        return cur

    def _observation(self, load: float, merged: dict[str, Any]) -> slo.Observation:
        return observation(load, merged, self.settings.targets)

    def result(self) -> dict[str, Any]:
        """The search's answer for the store: settings, calibration, result with every probe."""
        assert self.search is not None
        r = self.search.result()
        return {"settings": self.settings.to_dict(), "calibration": self.calibration, "unit": self.unit,
                "result": r.to_dict(), "probe_keys": {f"{k:g}": v["keys"] for k, v in self._merged.items()}}


def observation(load: float, got: dict[str, Any], targets: slo.Targets) -> slo.Observation:
    """A probe's figures for the search: ops, errors, schedule and busiest client thread from `got` (as
    Probes merges them), each targeted percentile with its 95% interval from the histogram `got["hist"]`
    (and, given `got["ivals"]` from interval_hists, the batch means of its per-second intervals)."""
    pct: dict[str, tuple[float, float, float]] = {}
    batch: dict[str, tuple[float, float]] = {}
    batches = None
    d = hdr.decode(got["hist"]) if got.get("hist") else None
    ivals = got.get("ivals")
    for key in targets.latency_ms:
        if d is None or not d.get_total_count():
            break
        q = slo.QUANTILES[key]
        est = hdr.percentile(d, 100 * q)
        per = [_over(hs, est) for hs in ivals] if ivals else []
        lo, hi, b = slo.bounds(int(d.get_total_count()), q, [o for o, _ in per], [e for _, e in per])
        pct[key] = (est / 1e6, hdr.percentile(d, 100 * lo) / 1e6, hdr.percentile(d, 100 * hi) / 1e6)
        if b is not None:
            batch[key] = (hdr.percentile(d, 100 * b[0]) / 1e6, hdr.percentile(d, 100 * b[1]) / 1e6)
            batches = b[2]
    return slo.Observation(load, got["ops"], got["errors"], pct, got.get("kept"), got.get("achieved"),
                           got.get("client"), got.get("probes", 1), batch, batches)


def interval_hists(records: list[dict[str, Any]] | None) -> list[list[str]] | None:
    """Per measured interval, its op kinds' latency histograms, from a point's interval records in time order
    (the ramp's left out; a last partial one joins the one before it, too short to be a batch of its own).
    None when a record with ops has no histogram (fio's estimated records): partial intervals would not
    add up to the probe's histogram."""
    out: list[list[str]] = []
    for rec in records or []:
        if rec.get("ramp"):
            continue
        ops = (rec.get("ops") or {}).values()
        if rec.get("approx") or any(o.get("ops") and not o.get("hist") for o in ops):
            return None
        hists = [o["hist"] for o in ops if o.get("ops") and o.get("hist")]
        if rec.get("tail") and out:
            out[-1] = out[-1] + hists
        else:
            out.append(hists)
    return out or None


def _over(hists: list[str], value_ns: int) -> tuple[int, int]:
    """One interval's ops and how many took longer than value_ns: beyond the histogram bucket that holds
    value_ns (hdr.percentile's estimate is that bucket's highest value, so no op of it counts as over)."""
    if not hists:
        return 0, 0
    m = hdr.merge(hists)
    total = int(m.get_total_count())
    if not total:
        return 0, 0
    at = m.get_counts_array_index(value_ns)
    top = m.get_counts_array_index(m.get_max_value())
    return total, int(sum(m.counts[at + 1:top + 1])) if top > at else 0


def probe_runtime(load: float | None, targets: slo.Targets, probe_s: float, max_probe_s: float) -> float:
    """Seconds a probe at `load` ops/s runs: enough for the targets' ops (min_ops, 25% over), at least
    probe_s, at most max_probe_s (no load known: probe_s)."""
    need = 1.25 * targets.min_ops() / load if load else 0.0
    return min(max(probe_s, math.ceil(need)), max_probe_s)


def _mean(a: float | None, b: float | None) -> float | None:
    vals = [x for x in (a, b) if x is not None]
    return sum(vals) / len(vals) if vals else None
