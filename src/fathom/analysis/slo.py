"""SLO search: the highest load that meets latency (and error) targets, by bracketing and bisection.

The load is an open-loop rate (ops/s over all engines; latency from each op's intended start, so queueing
is in it) or a closed-loop iodepth. Each probe is judged on its own figures:

    fails       a percentile's whole 95% interval is above its target, errors above the error target, or
                (open loop) the schedule was not kept: arrivals were left unissued, the cluster fell behind
    meets       every percentile's whole interval at or below its target, errors within theirs
    borderline  a target inside a percentile's interval: the probe is repeated at the same load (the
                repeats' histograms and intervals merged, so the interval narrows); after MAX_REPEATS it is
                decided by the estimate and the answer says so
    client      the probe would fail but the client's busiest engine thread was saturated: the load
                generator's limit, not the cluster's; the search stops there and says so
    short       fewer ops than the percentiles need (min_ops); the driver runs it longer

A percentile's 95% interval is the wider of two, both read from the probe's merged histogram as the
quantiles q - h .. q + h (the estimate is the q-quantile):

- order statistics (`quantile_bounds`): h = 1.96 binomial standard deviations of the rank, sqrt(q(1-q)/n).
  Distribution-free, but it takes the n ops as independent draws.
- batch means (`batch_bounds`): the probe's per-second intervals, consecutive ones grouped into at most
  MAX_BATCHES batches; per batch the ops and how many of them took longer than the estimate (a fraction
  of ops over a latency is what a target is about: "p99 <= T" is "at most 1% of ops over T"). That
  fraction's standard error comes from how the batches disagree (a ratio estimator: batches weigh by their
  ops), and h is Student's t (b - 1 degrees of freedom) times it: the order statistics' construction with
  the spread measured instead of assumed. Latency that comes in bursts (a flush, a compaction: slow seconds
  among fast ones) makes the batches disagree and widens h; independent latencies give about the
  order-statistic width (t_9 / 1.96 = 1.15 times it, give or take the variance's own noise).

Why the wider (the union of the two): each is valid under its own assumption, independence or batches
longer than a burst; the union covers the percentile whenever either does, without having to know which
holds. The binomial width is a floor the batches cannot go under: a few batches can agree by chance, and
a probe cannot be more precise than its op count allows. A probe with fewer than MIN_BATCHES intervals
(or without per-interval histograms) has the order-statistic interval alone.

A percentile q needs at least 10 ops beyond it to mean anything: MIN_TAIL / (1 - q) ops (p99: 1,000;
p99.9: 10,000).

Search: from `start`, double while a probe meets (up to `hi`), halve while it fails (down to `lo`); then
bisect the bracket [highest meeting, lowest failing] until it is narrower than `resolution` of its low end
(iodepth: until they are neighbours). The answer is the highest meeting load, but never above the rate
that probe achieved: a kept schedule allows the achieved rate to fall short of the offered one by a little
(engine/PROTOCOL.md, summary `schedule_kept`), and a load that was not carried is not an answer. The next
failing probe and its reasons say why the step above failed.

A floor the load does not move ends the halving: once FLAT_HALVINGS successive halvings (the last
FLAT_HALVINGS + 1 failing probes) leave each percentile that fails its target where it was (consecutive
estimates whose 95% intervals overlap, or within FLAT_FRACTION of each other, each interval within
FLAT_WIDTH of its estimate: wide intervals overlap whatever the estimates), with every schedule kept,
the percentile is not load-driven there: halving further to the lower bound (at probes that grow to
max_probe_s at low rates) would not meet it. The answer is none, and says where the percentile stays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from fathom.units import format_rate

Z95 = 1.959964
MIN_TAIL = 10  # ops beyond a percentile for it to mean anything
MAX_REPEATS = 3  # probes at one borderline load, merged, before the estimate decides
CLIENT_BOUND_PCT = 90.0  # busiest engine thread, % of one core (as anomalies.client_bound)
MIN_BATCHES = 5  # fewer per-second intervals: their variance is too noisy to say anything (t_4 = 2.78)
MAX_BATCHES = 30  # longer probes get longer batches, which span longer bursts
FLAT_HALVINGS = 2  # successive halvings that leave a failing percentile where it was: the floor is not the load's
FLAT_FRACTION = 0.10  # estimates this close agree even where their intervals do not overlap
FLAT_WIDTH = 0.25  # an estimate whose 95% interval reaches further than this from it cannot show a floor
# Student t, two-sided 95% (the 97.5% quantile), by degrees of freedom 1..30
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
NAMES = {"p50": "p50", "p90": "p90", "p99": "p99", "p999": "p99.9"}
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}
Outcome = Literal["meets", "fails", "borderline", "client", "short"]


@dataclass(frozen=True)
class Targets:
    """Latency targets in ms per percentile key (p50, p90, p99, p999) and the highest error fraction."""

    latency_ms: dict[str, float] = field(default_factory=dict)
    error_rate: float | None = None

    def min_ops(self) -> int:
        """Ops a probe needs for every targeted percentile to mean something (at least 100)."""
        return max([100, *(math.ceil(MIN_TAIL / (1 - QUANTILES[k])) for k in self.latency_ms)])

    def describe(self) -> str:
        parts = [f"{NAMES[k]} <= {v:g} ms" for k, v in sorted(self.latency_ms.items(), key=lambda kv: QUANTILES[kv[0]])]
        if self.error_rate is not None:
            parts.append(f"errors <= {self.error_rate * 100:g}%")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"latency_ms": dict(self.latency_ms), "error_rate": self.error_rate}


@dataclass
class Observation:
    """One probe's figures (several probes at one load merged): ops, errors, per targeted percentile its
    estimate and 95% interval in ms (the wider of the two: module doc), the open-loop schedule and the
    client's busiest thread. `batch`: per percentile the batch-means interval alone (ms), over `batches`
    batches; empty (and None) without per-interval histograms, as in runs stored before it."""

    load: float
    ops: int
    errors: int = 0
    percentiles: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # key -> (est, lo, hi)
    schedule_kept: bool | None = None
    achieved: float | None = None  # ops/s (open loop; repeats merged: the lowest)
    client_thread_pct: float | None = None
    probes: int = 1  # how many probes were merged into this one
    batch: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (lo, hi), batch means only
    batches: int | None = None


@dataclass
class Verdict:
    load: float
    outcome: Outcome
    reasons: list[str]
    obs: Observation
    decided_by_estimate: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["obs"]["percentiles"] = {k: list(v) for k, v in self.obs.percentiles.items()}
        d["obs"]["batch"] = {k: list(v) for k, v in self.obs.batch.items()}
        return d


def quantile_bounds(n: int, q: float) -> tuple[float, float]:
    """The quantiles (0..1) whose order statistics bound the q-quantile of n samples with 95% confidence
    (normal approximation of the binomial rank; a rank is never below 1 or above n)."""
    half = Z95 * math.sqrt(n * q * (1 - q))
    lo_rank = max(1.0, math.floor(n * q - half))
    hi_rank = min(float(n), math.ceil(n * q + half) + 1)
    return lo_rank / n, hi_rank / n


def batch_bounds(q: float, ops: Sequence[int], over: Sequence[int]) -> tuple[float, float, int] | None:
    """The batch-means 95% interval of the q-quantile as quantiles (module doc), and its number of batches.

    ops, over: per consecutive interval, its ops and how many took longer than the q-quantile's estimate.
    Intervals without ops are left out; None with fewer than MIN_BATCHES left."""
    got = [(n, e) for n, e in zip(ops, over) if n > 0]
    if len(got) < MIN_BATCHES:
        return None
    b = min(len(got), MAX_BATCHES)
    cuts = [round(i * len(got) / b) for i in range(b + 1)]
    ns = [sum(n for n, _ in got[cuts[i]:cuts[i + 1]]) for i in range(b)]
    es = [sum(e for _, e in got[cuts[i]:cuts[i + 1]]) for i in range(b)]
    total = sum(ns)
    frac = sum(es) / total
    # the ratio estimator's variance: a stall second completes few ops (closed loop), and weighs as few
    var = b / (b - 1) * sum((e - frac * n) ** 2 for n, e in zip(ns, es)) / total ** 2
    half = T975[min(b - 1, len(T975)) - 1] * math.sqrt(var)
    return max(q - half, 0.0), min(q + half, 1.0), b


def bounds(n: int, q: float, ops: Sequence[int] = (), over: Sequence[int] = ()) \
        -> tuple[float, float, tuple[float, float, int] | None]:
    """A percentile's 95% interval as quantiles: the wider of the order-statistic and the batch-means
    interval (module doc), with the batch-means one (None: too few intervals, or none given)."""
    lo, hi = quantile_bounds(n, q)
    b = batch_bounds(q, ops, over)
    if b is not None:
        lo, hi = min(lo, b[0]), max(hi, b[1])
    return lo, hi, b


def judge(obs: Observation, targets: Targets, unit: str, final: bool = False) -> Verdict:
    """A probe against the targets (module doc). final: a borderline probe is decided by its estimates."""
    fails: list[str] = []
    border: list[str] = []
    total = obs.ops + obs.errors
    if total < targets.min_ops():
        return Verdict(obs.load, "short", [f"{total:,} ops, fewer than the {targets.min_ops():,} the targets need"],
                       obs)
    if obs.schedule_kept is False:
        got = f"achieved {format_rate(obs.achieved)}" if obs.achieved is not None else "fell behind"
        fails.append(f"schedule not kept: {got} of {format_rate(obs.load)} offered")
    if targets.error_rate is not None and total:
        frac = obs.errors / total
        if frac > targets.error_rate:
            fails.append(f"errors {frac * 100:.3g}% > {targets.error_rate * 100:g}%")
    for key, limit in targets.latency_ms.items():
        if key not in obs.percentiles:
            fails.append(f"no {NAMES[key]} measured")
            continue
        est, lo, hi = obs.percentiles[key]
        b = obs.batch.get(key)
        by = f" from {obs.batches} batches" if b is not None and (b[0] <= lo or b[1] >= hi) else ""
        text = f"{NAMES[key]} {est:.3g} ms (95% CI {lo:.3g}-{hi:.3g}{by})"
        if lo > limit:
            fails.append(f"{text} > {limit:g} ms")
        elif hi > limit:
            border.append(f"{text} around {limit:g} ms")
    if fails and obs.client_thread_pct is not None and obs.client_thread_pct >= CLIENT_BOUND_PCT:
        return Verdict(obs.load, "client", [*fails, f"the client's busiest engine thread at "
                                                    f"{obs.client_thread_pct:.0f}% of a core: the load generator's "
                                                    "limit, not the cluster's"], obs)
    if fails:
        return Verdict(obs.load, "fails", fails + border, obs)
    if border and not final:
        return Verdict(obs.load, "borderline", border, obs)
    if border:  # decided by the estimates after MAX_REPEATS merged probes
        over = [r for r, (k, limit) in zip(border, _border_keys(obs, targets)) if obs.percentiles[k][0] > limit]
        return Verdict(obs.load, "fails" if over else "meets", over or border, obs, decided_by_estimate=True)
    return Verdict(obs.load, "meets", [], obs)


def _border_keys(obs: Observation, targets: Targets) -> list[tuple[str, float]]:
    return [(k, v) for k, v in targets.latency_ms.items()
            if k in obs.percentiles and obs.percentiles[k][1] <= v < obs.percentiles[k][2]]


@dataclass
class Result:
    status: Literal["found", "none", "ceiling", "client"]
    load: float | None  # the highest load that met every target (open loop: at most what its probe achieved)
    failed_at: float | None  # the lowest load above it that failed
    why: list[str]  # why the step above failed (or why there is no answer)
    message: str
    probes: list[Verdict]
    offered: float | None = None  # the meeting probe's offered rate, when it achieved less (the answer)
    floor: dict[str, Any] | None = None  # none: the percentile halving did not move (percentile, ms, from, to)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "load": self.load, "failed_at": self.failed_at, "why": self.why,
                "message": self.message, "probes": [p.to_dict() for p in self.probes], "offered": self.offered,
                "floor": self.floor}


def _tight(e: tuple[float, float, float]) -> bool:
    """An estimate (est, lo, hi) precise enough to say where a percentile stays: its 95% interval within
    FLAT_WIDTH of it (wide intervals overlap whatever the estimates: 7.5, 28.8 and 14.5 ms are no floor)."""
    est, lo, hi = e
    return est > 0 and lo >= est * (1 - FLAT_WIDTH) and hi <= est * (1 + FLAT_WIDTH)


def _agree(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Two estimates (est, lo, hi) of one percentile agree: their intervals overlap, or they are within
    FLAT_FRACTION of each other."""
    return (a[1] <= b[2] and b[1] <= a[2]) or abs(a[0] - b[0]) <= FLAT_FRACTION * max(a[0], b[0])


def flat_floor(down: Sequence[Verdict], targets: Targets) -> dict[str, Any] | None:
    """The floor (module doc) shown by the last FLAT_HALVINGS + 1 failing probes of a search halving down
    (highest load first): the percentiles over their targets in all of them, each agreeing from probe to
    probe, with every schedule kept. {percentile, ms (its estimates), from, to} of the first such
    percentile, or None."""
    last = list(down[-(FLAT_HALVINGS + 1):])
    if len(last) <= FLAT_HALVINGS or any(v.obs.schedule_kept is False for v in last):
        return None
    over = [k for k, limit in targets.latency_ms.items()
            if all(k in v.obs.percentiles and v.obs.percentiles[k][0] > limit for v in last)]
    flat = [k for k in over if all(_tight(v.obs.percentiles[k]) for v in last)
            and all(_agree(a.obs.percentiles[k], b.obs.percentiles[k]) for a, b in zip(last, last[1:]))]
    if not flat:
        return None
    k = min(flat, key=lambda x: QUANTILES[x])
    return {"percentile": k, "ms": [v.obs.percentiles[k][0] for v in last], "from": last[0].load, "to": last[-1].load}


def achieved_text(x: float) -> str:
    """An answer held to what its probe achieved: all 4 of its significant digits, so '999.9 ops/s' does not
    read as the '1,000 ops/s' offered (format_rate rounds to whole ops/s)."""
    return f"{x:,.0f} ops/s" if x >= 1000 else f"{x:.4g} ops/s"


def carried(v: Verdict) -> tuple[float, float | None]:
    """A meeting probe's answer: its load, or in open loop the rate it achieved when that is lower (a kept
    schedule may fall a little short), with the offered rate then (else None)."""
    got = v.obs.achieved
    if got is None or got >= v.load:
        return v.load, None
    if got <= 0:
        return 0.0, v.load
    digits = 3 - math.floor(math.log10(got))  # 4 significant digits, as probes are, rounded down
    return min(round(math.floor(got * 10.0 ** digits) / 10.0 ** digits, max(digits, 0)), got), v.load


@dataclass
class Search:
    """Bracketing then bisection over a load (module doc). Feed it `record(verdict)` for each probe it
    asks for with `next_load()`; `result()` once next_load() is None."""

    targets: Targets
    start: float
    lo: float
    hi: float
    resolution: float = 0.05
    integer: bool = False  # iodepth
    unit: str = "ops/s"
    probes: list[Verdict] = field(default_factory=list)
    best: Verdict | None = None  # highest meeting
    worst: Verdict | None = None  # lowest failing
    stop: Verdict | None = None  # a client-bound probe ends the search
    floor: dict[str, Any] | None = None  # halving down: a percentile the load does not move (flat_floor)
    _down: list[Verdict] = field(default_factory=list)  # decided failing probes while bracketing down
    _next: float | None = None
    _repeats: int = 0

    def __post_init__(self) -> None:
        if not self.integer:  # the bounds in the probes' own rounding, so a probe at a bound equals it
            self.lo, self.hi = float(f"{self.lo:.4g}"), float(f"{self.hi:.4g}")
        self._next = self._clamp(self.start)

    def _clamp(self, x: float) -> float:
        x = min(max(x, self.lo), self.hi)
        # a rate to 4 significant digits (0.1% steps, far below any resolution): readable keys and labels
        return float(max(1, round(x))) if self.integer else float(f"{x:.4g}")

    def final(self, load: float) -> bool:
        """The next probe at this load is the last repeat: a borderline is decided by its estimates."""
        return self._repeats + 1 >= MAX_REPEATS

    def next_load(self) -> float | None:
        return self._next

    def record(self, v: Verdict) -> None:
        self.probes.append(v)
        if v.outcome in ("borderline", "short"):
            self._repeats += 1
            self._next = v.load  # again, merged with what ran there (short: longer)
            if self._repeats >= MAX_REPEATS + (1 if v.outcome == "short" else 0):
                self._next = None  # cannot decide here: stop with what is known
                self.stop = self.stop or v
            return
        self._repeats = 0
        if v.outcome == "client":
            self.stop, self._next = v, None
            return
        if v.outcome == "meets" and (self.best is None or v.load > self.best.load):
            self.best = v
        if v.outcome == "fails" and (self.worst is None or v.load < self.worst.load):
            self.worst = v
        if v.outcome == "fails" and self.best is None:
            self._down.append(v)
        self._next = self._step(v)

    def _step(self, v: Verdict) -> float | None:
        if self.worst is None:  # bracketing up
            if v.load >= self.hi:
                return None
            return self._clamp(v.load * 2)
        if self.best is None:  # bracketing down
            self.floor = flat_floor(self._down, self.targets)
            if v.load <= self.lo or self.floor is not None:
                return None
            return self._clamp(v.load / 2)
        lo, hi = self.best.load, self.worst.load
        if hi <= lo or (self.integer and hi - lo <= 1) or (not self.integer and (hi - lo) / lo <= self.resolution):
            return None
        mid = self._clamp((lo + hi) / 2)
        return None if mid in (lo, hi) else mid

    def result(self) -> Result:
        fmt = (lambda x: f"iodepth {x:g}") if self.integer else format_rate
        best, worst, stop = self.best, self.worst, self.stop
        estimate = any(p.decided_by_estimate for p in self.probes)
        load, offered = carried(best) if best is not None and not self.integer else \
            (best.load if best else None, None)
        upto = f"{achieved_text(load)} (achieved at {fmt(offered)} offered)" \
            if offered is not None and load is not None else fmt(load) if load is not None else ""
        if stop is not None and stop.outcome == "client":
            why = stop.reasons
            msg = (f"{self.targets.describe()} held up to {upto}; " if best else "") + \
                f"at {fmt(stop.load)} the client was the limit: not the cluster's answer (add engines or hosts)"
            return Result("client", load, stop.load, why, msg, self.probes, offered)
        if best is None:
            low = worst or stop
            why = low.reasons if low else []
            lowest = f"the lowest probe, {fmt(low.load) if low else '?'}, failed ({'; '.join(why)})"
            f = self.floor
            if f is None:
                return Result("none", None, low.load if low else None, why,
                              f"no load meets {self.targets.describe()}: {lowest}", self.probes)
            ms = f["ms"]
            spread = f" ({min(ms):.3g}-{max(ms):.3g})" if f"{min(ms):.2g}" != f"{max(ms):.2g}" else ""
            return Result("none", None, low.load if low else None, why,
                          f"no load meets {self.targets.describe()}: {NAMES[f['percentile']]} stays at "
                          f"~{sorted(ms)[len(ms) // 2]:.2g} ms{spread} from {fmt(f['from'])} down to {fmt(f['to'])}; "
                          f"the floor is not load-driven ({FLAT_HALVINGS} halvings left it within its intervals or "
                          f"{FLAT_FRACTION:.0%}), so the search stopped halving; {lowest}", self.probes, floor=f)
        if worst is None and stop is None:
            got = f" (achieved {achieved_text(load)})" if offered is not None and load is not None else ""
            return Result("ceiling", load, None, [],
                          f"every load met {self.targets.describe()} up to the search's bound, {fmt(best.load)}{got}: "
                          "the answer is above it (raise the bound)", self.probes, offered)
        above = worst or stop
        why = above.reasons if above else []
        width = (f"the next step, {fmt(above.load)}, failed" if above and above.outcome == "fails"
                 else f"{fmt(above.load)} could not be decided" if above else "")
        msg = f"{self.targets.describe()} up to {upto}; {width} ({'; '.join(why)})"
        if estimate:
            msg += "; a borderline probe was decided by its estimate after merged repeats"
        return Result("found", load, above.load if above else None, why, msg, self.probes, offered)


def answer_of(env: dict[str, Any]) -> dict[str, Any] | None:
    """A stored run's SLO search (its env's `slo`, with the result), or None."""
    found = (env or {}).get("slo")
    return found if isinstance(found, dict) and found.get("result") else None


def compare_answers(base: dict[str, Any], new: dict[str, Any], gate: float | None = None) -> dict[str, Any]:
    """Two searches' answers: the ratio of their highest loads, and a verdict only where the searches'
    brackets [load, failed_at) do not overlap (each answer is known to its resolution, no finer). A
    regression (gate: the fraction of load it may lose) is only a 'less' verdict below 1 - gate."""
    b, n = base["result"], new["result"]
    same = base["settings"]["targets"] == new["settings"]["targets"] and base.get("unit") == new.get("unit")
    out: dict[str, Any] = {"base_load": b["load"], "new_load": n["load"], "unit": base.get("unit"), "ratio": None,
                           "verdict": "no verdict", "regressed": False, "comparable": same}
    if not same:
        out["why"] = "the searches have different targets or loads"
        return out
    if b["status"] != "found" or n["status"] != "found":
        out["why"] = f"answers: {b['status']} (base), {n['status']} (new); both must be found to compare"
        return out
    out["ratio"] = n["load"] / b["load"]
    b_top, n_top = b["failed_at"] or b["load"], n["failed_at"] or n["load"]
    if n["load"] >= b_top:
        out["verdict"] = "more load"
    elif n_top <= b["load"]:
        out["verdict"] = "less load"
        out["regressed"] = gate is not None and out["ratio"] < 1 - gate
    else:
        out["verdict"] = "same within the searches' resolution"
    return out


def probe_rows(found: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored search's probes (answer_of) as flat rows, in the order run (fathom.api): load, verdict and
    reasons, ops and errors, the open-loop schedule, and per targeted percentile its estimate and 95% interval
    in ms (`{key}_ms`, `{key}_lo_ms`, `{key}_hi_ms`)."""
    probes = found["result"]["probes"]
    keys = sorted({k for p in probes for k in p["obs"]["percentiles"]}, key=lambda k: QUANTILES.get(k, 1.0))
    rows = []
    for i, p in enumerate(probes, start=1):
        o = p["obs"]
        row: dict[str, Any] = {
            "probe": i, "load": p["load"], "unit": found.get("unit", "ops/s"), "outcome": p["outcome"],
            "decided_by_estimate": bool(p.get("decided_by_estimate")), "reasons": "; ".join(p["reasons"]),
            "ops": o["ops"], "errors": o.get("errors", 0), "merged": o.get("probes", 1),
            "schedule_kept": o.get("schedule_kept"), "achieved_ops_s": o.get("achieved"),
            "client_thread_pct": o.get("client_thread_pct")}
        for k in keys:
            est, lo, hi = o["percentiles"].get(k) or (None, None, None)
            row.update({f"{k}_ms": est, f"{k}_lo_ms": lo, f"{k}_hi_ms": hi})
        rows.append(row)
    return rows
