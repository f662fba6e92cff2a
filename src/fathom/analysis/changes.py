"""Change points in a history of runs: E-Divisive means (Matteson & James 2014) with a significance test.

The series is one figure (a workload's throughput or latency at one level) over runs, oldest first. Each
run gives one or more samples; the run's value is the mean of the logs of its samples (the log of their
geometric mean), so the statistics read ratios (5% up and 5% down weigh the same) and a run is one
observation however many repetitions it had. Repetitions make a run's value sharper but are not counted
as more observations: runs differ from one another by more than repetitions within a run do (the cluster,
the host, the day), and counting them would make every run-to-run wobble a change (with 5% between runs
and three samples of 2% within each, pooling samples finds a change in 35% of stationary series, run
values in none).

The statistic. For a split of a segment of runs into X (the m runs before a place) and Y (the n after),
the divergence is Matteson & James's energy statistic with alpha = 1, on absolute differences of the
runs' log values:

    Q(X, Y) = mn/(m+n) * ( 2/(mn) sum|x-y| - 1/C(m,2) sum_{i<k}|x_i-x_k| - 1/C(n,2) sum_{j<k}|y_j-y_k| )

The split of a segment is at the place that maximises Q (each part at least MIN_SIZE runs). The sums for
every place are kept incrementally (a Fenwick tree over the ranks of the values gives each run's distance
to the runs before it), so a segment of L runs costs O(L log L), not the O(L^3) of summing each place.

The test. A split is kept when Student's t test on the runs' log values (each held within ROBUST_K robust
spreads of its part's median: `clipped`) says the two parts differ, its
two-sided p-value multiplied by the number of places the split could have taken (Bonferroni: the place
was chosen as the most divergent, and this bounds the chance that a stationary segment is split at all
by ALPHA = 0.05, whichever place was chosen), and when Welch's t test (unequal spreads, not corrected)
agrees at the same level: a short part that differs only through one wild run has a wide spread of its
own, and Welch's test sees no difference there where the pooled test would. The reported p-value is the
larger of the two. Apache Otava (formerly Hunter) likewise replaced the permutation test by a t test for
speed. Kept splits are searched again on each side (recursive bisection). When a segment's best split
fails, a pair of changes is looked for (a level that dips and comes back, which one split across the
whole segment averages away): the failed split with the best split of either part, or those two, the
pair kept when both its changes pass between their neighbours at the segment's correction for one split.
That is no Bonferroni bound over the pairs of places; measured, the pair search splits 7 more in 1,000
stationary series of 50 runs in 5% noise (18 in all, 1.8%). Then each change is tested again between
the two segments that finally lie beside it (the places counted over their union) and the weakest removed
while any fails, so every reported p-value is that of the segments reported beside it.
Alternatively test="permutation", Matteson & James's own test: the largest Q of the segment against the
largest Q of PERMUTATIONS (199) shufflings of it from a fixed seed, p = (1 + as large) / (1 + 199); it
needs no normality, has no pair search, and costs 200 scans a test (seconds over 1,000 runs, where the t
test takes milliseconds).

The place. The divergence's place is the best guess of a split's existence, not of where it lies to the
run: each change is finally moved to where a single change between its two neighbours most probably lies
within PLACE_WINDOW (2) runs, by the posterior of the place under normal log values (flat prior on the
place; the two means and the log of the spread integrated out), when it still passes the test there.
With a 10% step in 5% noise in the middle of 50 runs, the largest Q lies within 2 runs of the step in 92%
of series, the placed change in 96% (1,000 series).

The minimum segment is MIN_SIZE = 3 runs: the divergence needs two runs in a part to have a spread, the
test needs a degree of freedom beyond that, and one or two odd runs (a noisy neighbour, a scrub) should
not stand as a level of their own. So a new level is seen from its third run on, and a series needs
2 x 3 = 6 runs with values before any change can be looked for.

Each change point gives the first run after it, the geometric means of the segments before and after it,
their ratio (after / before) and in percent, the Welch t interval of that ratio over the two segments'
run values (fathom.analysis.stats.log_diff and ratio_interval, 95%), the p-value and the test.
The gate on the newest run (`fathom history --fail-on-change`) is fathom.analysis.history's: a new level
is seen here from its third run only, and the gate must speak on the first.

Pure Python (no numpy): one series of 1,000 runs takes about 5 ms of CPU with no change in it, 10 ms with
one, 25 ms with twenty (2-core machine); the permutation test takes seconds there.

What it cannot see:
- drift slower than the series: a figure that slides a little each run is one level while its whole slide
  is small against the noise (a 5% slide over 50 runs in 5% noise is cut in a quarter of series), and once
  the slide is larger it is cut into steps at places the noise picks, not at a run where something changed;
- a single noisy run: one outlier is not a change (it cannot fill a segment, and Welch's test discounts
  a short segment it widens), and it is not flagged either (fathom.analysis.anomalies names odd points);
- a change within MIN_SIZE - 1 runs of either end: there is no segment to hold it yet;
- a small change near an end: a 10% step in 5% noise is found (within 2 runs) in more than 9 of 10 series
  of 50 runs when it lies 8 runs or more from either end, in 2 of 3 at 5 runs from an end (the test needs
  about t > 4 over 45 places).
Samples that are zero, negative or not finite cannot be read as ratios: they are dropped and counted, and a
run left without a sample is skipped (listed); indices always name runs of the input.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from fathom.analysis.stats import CONFIDENCE, SEED, LogDiff, betainc, log_diff, p_text, ratio_interval, t_cdf

MIN_SIZE = 3
ALPHA = 0.05
PERMUTATIONS = 199
ROBUST_K = 4.0  # the tests see each run value within this many robust spreads of its part (clipped)
SD_FLOOR = 0.6  # ... the robust spread never under this share of the plain one
TESTS = ("t", "permutation")
PLACE_WINDOW = 2  # a change is placed where it most probably lies within this many runs
SETTLE_ROUNDS = 5

Run = float | Sequence[float] | None  # one run: a value, its samples, or nothing


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first run after the change
    before: float  # geometric mean of the runs of the segment before (run values are their samples' geomeans)
    after: float  # the same of the segment after
    ratio: float  # after / before
    pct: float  # (ratio - 1) * 100
    interval: tuple[float, float]  # Welch t interval of the ratio at `confidence`, over the two segments' runs
    confidence: float
    p_value: float  # between the two adjacent segments: the larger of Student's x places (or the permutation p)
    # and Welch's
    test: str  # the test that gave p_value, in words
    before_runs: tuple[int, int]  # the segment before, [start, end) in run indices
    after_runs: tuple[int, int]  # the segment after

    def describe(self, figure: str = "") -> str:
        name = f"{figure} " if figure else ""
        return (f"{name}{self.pct:+.1f}% from run {self.index} ({self.ratio:.3f}x "
                f"[{self.interval[0]:.3f}, {self.interval[1]:.3f}], {p_text(self.p_value)})")


@dataclass(frozen=True)
class Segment:
    start: int  # first run index
    end: int  # one past the last (the next segment's start: runs skipped at a boundary fall in the earlier one)
    mean: float  # geometric mean of its runs' values
    runs: int  # runs with a value in it


@dataclass
class Changes:
    runs: int  # runs in the input
    points: list[ChangePoint]
    segments: list[Segment]  # levels between change points, in order (one when there is no change)
    skipped: list[int] = field(default_factory=list)  # runs without a usable sample
    dropped: int = 0  # samples dropped: zero, negative, not finite
    note: str | None = None  # why no change point could be looked for, when none could
    min_size: int = MIN_SIZE
    alpha: float = ALPHA
    test: str = "t"

    @property
    def newest(self) -> int | None:
        """The newest run with a value."""
        return self.segments[-1].end - 1 if self.segments else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_changes(series: Sequence[Run], *, min_size: int = MIN_SIZE, alpha: float = ALPHA, test: str = "t",
                 permutations: int = PERMUTATIONS, seed: int = SEED, confidence: float = CONFIDENCE) -> Changes:
    """The change points of a series of runs (oldest first), each run a value or a list of samples.

    test: "t" (Student t between the two parts, Bonferroni over the places a split could take: the default,
    milliseconds over 1,000 runs) or "permutation" (Matteson & James's permutation test of the largest
    divergence, `permutations` shufflings from `seed`); either with Welch's t as a guard (the module's
    docstring says why). min_size: the fewest runs a segment may have (>= 2). alpha: the level a change
    must pass. confidence: of the ratio intervals. Fewer than 2 x min_size runs with values, or a constant
    series, give no change point and a note saying why; the segments are there all the same.
    """
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2 (a segment needs a spread), not {min_size}")
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}, not {test!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    idx, x, dropped = _run_values(series)
    skipped = sorted(set(range(len(series))) - set(idx))
    out = Changes(len(series), [], [], skipped, dropped, None, min_size, alpha, test)
    n = len(x)
    tester = _Tester(x, min_size, alpha, test, permutations, seed)
    if n == 0:
        out.note = "no run has a usable value"
        return out
    if n < 2 * min_size:
        out.note = f"{n} run(s) with values, fewer than 2 x {min_size}: no change point can be found"
        cuts: list[int] = []
    elif max(x) - min(x) <= _FLAT:
        out.note = "the series is constant: no change"
        cuts = []
    else:
        cuts = tester.settle(tester.bisect())
    bounds = [0, *cuts, n]
    for a, b in zip(bounds, bounds[1:]):
        end = idx[b] if b < n else idx[-1] + 1
        out.segments.append(Segment(idx[a], end, math.exp(statistics.fmean(x[a:b])), b - a))
    for j, c in enumerate(cuts):
        lo, hi = bounds[j], bounds[j + 2]
        p = tester.p(lo, c, hi)
        out.points.append(_point(x, idx, out.segments[j], out.segments[j + 1], (lo, c, hi), p, tester.name(lo, hi),
                                 confidence))
    return out


_FLAT = 1e-12  # log differences below this are no difference (a constant series, rounding)


def _run_values(series: Sequence[Run]) -> tuple[list[int], list[float], int]:
    """(indices of the runs with a usable sample, their mean log values, samples dropped)."""
    idx: list[int] = []
    x: list[float] = []
    dropped = 0
    for i, run in enumerate(series):
        samples: Sequence[Any] = () if run is None else (run,) if isinstance(run, (int, float)) else run
        logs = []
        for v in samples:
            if v is not None and isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
                logs.append(math.log(v))
            else:
                dropped += 1
        if logs:
            idx.append(i)
            x.append(math.fsum(logs) / len(logs))
    return idx, x, dropped


def _point(x: list[float], idx: list[int], seg_b: Segment, seg_a: Segment, cut: tuple[int, int, int], p: float,
           test: str, confidence: float) -> ChangePoint:
    lo, c, hi = cut
    before, after = [math.exp(v) for v in x[lo:c]], [math.exp(v) for v in x[c:hi]]
    d = statistics.fmean(x[c:hi]) - statistics.fmean(x[lo:c])
    ld = log_diff(before, after)
    interval = interval_of(ld, confidence) if ld is not None else (math.exp(d), math.exp(d))
    ratio = math.exp(d)
    return ChangePoint(idx[c], seg_b.mean, seg_a.mean, ratio, (ratio - 1.0) * 100.0, interval, confidence, p, test,
                       (seg_b.start, seg_b.end), (seg_a.start, seg_a.end))


def interval_of(x: LogDiff, confidence: float) -> tuple[float, float]:
    """stats.ratio_interval, with the t quantile found by Newton's method (a few t_cdf calls, not stats'
    bisection's forty): the same interval to 1e-9, a tenth of the time, which a history of many runs needs."""
    if x.var <= 0 or not math.isfinite(x.df):
        return ratio_interval(x, confidence)
    p, df = 0.5 + confidence / 2.0, x.df
    t = statistics.NormalDist().inv_cdf(p)  # below the t quantile; cdf concave above 0: Newton climbs to it
    norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(60):
        step = (t_cdf(t, df) - p) / math.exp(norm - (df + 1) / 2 * math.log1p(t * t / df))
        t -= step
        if abs(step) < 1e-12 * t:
            break
    else:
        return ratio_interval(x, confidence)
    half = t * math.sqrt(x.var)
    return math.exp(x.d - half), math.exp(x.d + half)


# ---- the divergence, incrementally ----------------------------------------------------------------------------

def divergences(z: Sequence[float], min_size: int) -> list[float]:
    """Q of every split of z into z[:t] and z[t:], for t = min_size .. len(z) - min_size (alpha = 1).

    Within-part sums of |differences| for every prefix come from a Fenwick tree over the ranks (count and sum of
    the earlier values below each one), those of every suffix from each value's sum of differences to all
    others (sorted prefix sums) less its part to the earlier ones; the between-part sum is the rest.
    O(L log L).
    """
    n = len(z)
    if n < 2 * min_size:
        return []
    order = sorted(range(n), key=z.__getitem__)
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    sv = [z[i] for i in order]
    pre = [0.0] * (n + 1)
    acc = 0.0
    for r, v in enumerate(sv):
        acc += v
        pre[r + 1] = acc
    total = acc
    cnt = [0] * (n + 1)
    sm = [0.0] * (n + 1)
    left = [0.0] * (n + 1)  # within-sum of z[:t]
    to_later = [0.0] * n  # each value's sum of |differences| to the later values
    run_sum = 0.0
    w = 0.0
    for k in range(n):
        v, r = z[k], rank[k]
        c, s, j = 0, 0.0, r
        while j > 0:
            c += cnt[j]
            s += sm[j]
            j &= j - 1
        earlier = (c * v - s) + (run_sum - s) - (k - c) * v
        w += earlier
        left[k + 1] = w
        everyone = (r * v - pre[r]) + (total - pre[r + 1]) - (n - 1 - r) * v
        to_later[k] = everyone - earlier
        j = r + 1
        while j <= n:
            cnt[j] += 1
            sm[j] += v
            j += j & -j
        run_sum += v
    right = [0.0] * (n + 1)  # within-sum of z[t:]
    w = 0.0
    for k in range(n - 1, -1, -1):
        w += to_later[k]
        right[k] = w
    out = []
    for t in range(min_size, n - min_size + 1):
        a, b = t, n - t
        between = left[n] - left[t] - right[t]
        e = 2.0 * between / (a * b) - 2.0 * left[t] / (a * (a - 1)) - 2.0 * right[t] / (b * (b - 1))
        out.append(a * b / (a + b) * e)
    return out


def _median(v: Sequence[float]) -> float:
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def clipped(left: Sequence[float], right: Sequence[float], k: float | None = None) -> tuple[list[float], list[float]]:
    """Both parts with each value held within k robust spreads of its part's median (winsorized): the spread is
    1.4826 x the median absolute deviation of every value from its own part's median (a normal sample's sigma,
    and a step between the parts does not widen it). Normal noise goes past 4 sigma in 0.006% of runs, so the
    tests see the same values; a rare wild run (a host's bad night) no longer widens the spread the tests
    divide by, which hid real changes in heavy-tailed series (bench/changes_power.py, 1,000 series each: a 10%
    step in 5% noise with 5% of runs wild is found in 76% of series rather than 61%; changes in flat series
    1.3% rather than 0.6%, under normal noise's 2.3%; normal noise unchanged)."""
    k = ROBUST_K if k is None else k
    if not k:
        return list(left), list(right)
    ml, mr = _median(left), _median(right)
    res = [v - ml for v in left] + [v - mr for v in right]
    sd = math.sqrt(math.fsum(d * d for d in res) / max(len(res) - 2, 1))
    # the MAD's sigma, but never under SD_FLOOR of the plain spread: a small part's MAD can be a third of its
    # sigma by chance (two equal runs), and clipping normal runs would make a change of noise
    sigma = max(1.4826 * _median([abs(d) for d in res]), SD_FLOOR * sd)
    if sigma <= 0.0:
        return list(left), list(right)
    lim = k * sigma
    return ([min(max(v, ml - lim), ml + lim) for v in left], [min(max(v, mr - lim), mr + lim) for v in right])


def student_p(left: Sequence[float], right: Sequence[float]) -> float:
    """Two-sided p of Student's t (pooled variance) between two samples; 1 without a difference, 0 for a
    difference without any spread."""
    a, b = len(left), len(right)
    ma, mb = math.fsum(left) / a, math.fsum(right) / b
    d = mb - ma
    if abs(d) <= _FLAT:
        return 1.0
    ss = math.fsum((v - ma) ** 2 for v in left) + math.fsum((v - mb) ** 2 for v in right)
    df = a + b - 2
    var = ss / df * (1.0 / a + 1.0 / b)
    if var <= 0.0:
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + d * d / var))


def welch_p(left: Sequence[float], right: Sequence[float]) -> float:
    """Two-sided p of Welch's t (each sample its own spread) between two samples of two or more values."""
    a, b = len(left), len(right)
    ma, mb = math.fsum(left) / a, math.fsum(right) / b
    d = mb - ma
    if abs(d) <= _FLAT:
        return 1.0
    va = math.fsum((v - ma) ** 2 for v in left) / ((a - 1) * a)
    vb = math.fsum((v - mb) ** 2 for v in right) / ((b - 1) * b)
    var = va + vb
    if var <= 0.0:
        return 0.0
    df = var * var / (va * va / (a - 1) + vb * vb / (b - 1))
    return betainc(df / 2.0, 0.5, df / (df + d * d / var))


def place_posterior(z: Sequence[float], min_size: int) -> list[float]:
    """Relative posterior weight of a single change in mean before each place t = min_size .. len(z) - min_size
    of z (normal values, a flat prior on the place, the two means and the log of the spread integrated out):
    proportional to (t (n - t))^-1/2 RSS(t)^-(n-2)/2, RSS(t) the squares left about the two parts' means."""
    n = len(z)
    mu = math.fsum(z) / n
    pre = [0.0]
    for v in z:
        pre.append(pre[-1] + (v - mu))
    s2 = math.fsum((v - mu) ** 2 for v in z)
    floor = s2 * 1e-12 + 1e-300
    lp = []
    for t in range(min_size, n - min_size + 1):
        a, b = t, n - t
        ma, mb = pre[t] / a, (pre[n] - pre[t]) / b
        rss = max(s2 - a * ma * ma - b * mb * mb, floor)
        lp.append(-0.5 * math.log(a * b) - (n - 2) / 2.0 * math.log(rss))
    top = max(lp)
    return [math.exp(v - top) for v in lp]


class _Tester:
    """Splits and tests over one series of run values, with the p-values it computed kept."""

    def __init__(self, x: list[float], min_size: int, alpha: float, test: str, permutations: int, seed: int) -> None:
        self.x, self.m, self.alpha, self.test, self.perms, self.seed = x, min_size, alpha, test, permutations, seed
        self.cache: dict[tuple[int, int, int], tuple[float, float]] = {}
        self.places_found: dict[tuple[int, int], int] = {}

    def places(self, lo: int, hi: int) -> int:
        return hi - lo - 2 * self.m + 1

    def name(self, lo: int, hi: int) -> str:
        if self.test == "t":
            return f"Student t x {self.places(lo, hi)} places (Bonferroni) and Welch t, on run log means"
        return f"permutation of the largest divergence ({self.perms}, seed {self.seed}) and Welch t"

    def raw(self, lo: int, c: int, hi: int, q: list[float] | None = None) -> tuple[float, float]:
        """(Student's or the permutation p, Welch's p) of a change at c between [lo, c) and [c, hi)."""
        key = (lo, c, hi)
        if key not in self.cache:
            left, right = clipped(self.x[lo:c], self.x[c:hi])
            first = student_p(left, right) if self.test == "t" else self._permutation_p(lo, c, hi, q)
            self.cache[key] = (first, welch_p(left, right))
        return self.cache[key]

    def p(self, lo: int, c: int, hi: int, q: list[float] | None = None, factor: int | None = None) -> float:
        """The p-value of a change at c between [lo, c) and [c, hi): Student's corrected for the places it could
        take (or `factor` of them), or the permutation p, and Welch's, the larger."""
        first, welch = self.raw(lo, c, hi, q)
        if self.test == "t":
            first = min(1.0, first * (self.places(lo, hi) if factor is None else factor))
        return max(first, welch)

    def _permutation_p(self, lo: int, c: int, hi: int, q: list[float] | None) -> float:
        z = self.x[lo:hi]
        observed = (q if q is not None else divergences(z, self.m))[c - lo - self.m]
        rng = random.Random(self.seed * 1_000_003 + lo * 10_007 + hi)
        tol = 1e-12 * max(1.0, abs(observed))
        hits = 0
        for _ in range(self.perms):
            rng.shuffle(z)
            if max(divergences(z, self.m)) >= observed - tol:
                hits += 1
        return (1 + hits) / (1 + self.perms)

    def split(self, lo: int, hi: int) -> tuple[int, list[float]] | None:
        """The place where [lo, hi) diverges most, and every place's Q."""
        q = divergences(self.x[lo:hi], self.m)
        if not q:
            return None
        best = max(range(len(q)), key=q.__getitem__)
        return (lo + self.m + best, q) if q[best] > 0.0 else None

    def bisect(self) -> list[int]:
        """Recursive bisection: each segment split where Q is largest, kept when the test says so; when it
        does not, a pair of changes looked for (pair)."""
        cuts: list[int] = []
        stack = [(0, len(self.x))]
        while stack:
            lo, hi = stack.pop()
            found = self.split(lo, hi)
            if found is None:
                continue
            c, q = found
            if self.p(lo, c, hi, q) < self.alpha:
                cuts.append(c)
                stack += [(lo, c), (c, hi)]
                continue
            if self.test != "t":
                continue
            pair = self.pair(lo, c, hi)
            if pair is not None:
                cuts += pair
                stack += [(lo, pair[0]), (pair[0], pair[1]), (pair[1], hi)]
        return sorted(cuts)

    def pair(self, lo: int, c: int, hi: int) -> list[int] | None:
        """Two changes in [lo, hi) whose failed best split is c: of c with the best split of either part, or
        of those two, the pair whose weaker change is strongest, when both its changes pass against the
        number of places (as one change would)."""
        inner = [found[0] for a, b in ((lo, c), (c, hi)) if (found := self.split(a, b)) is not None]
        pairs = [sorted((c, i)) for i in inner] + ([sorted(inner)] if len(inner) == 2 else [])
        k = self.places(lo, hi)
        best, best_p = None, self.alpha
        for c1, c2 in pairs:
            p = max(self.p(lo, c1, c2, factor=k), self.p(c1, c2, hi, factor=k))
            if p < best_p:
                best, best_p = [c1, c2], p
        return best

    def settle(self, cuts: list[int]) -> list[int]:
        """Prune and place again until neither changes anything (a few rounds at most)."""
        for _ in range(SETTLE_ROUNDS):
            cuts = self.prune(cuts)
            placed = self.place(cuts)
            if placed == cuts:
                break
            cuts = placed
        return self.prune(cuts)

    def place(self, cuts: list[int]) -> list[int]:
        """Each change moved to where a single change between its neighbours most probably lies within
        PLACE_WINDOW runs (place_posterior), one after another with the neighbours as they stand."""
        cuts = list(cuts)
        for j in range(len(cuts)):
            lo = cuts[j - 1] if j else 0
            hi = cuts[j + 1] if j + 1 < len(cuts) else len(self.x)
            if (lo, hi) not in self.places_found:
                w = place_posterior(self.x[lo:hi], self.m)
                acc = [0.0]
                for v in w:
                    acc.append(acc[-1] + v)
                mass = [acc[min(len(w), i + PLACE_WINDOW + 1)] - acc[max(0, i - PLACE_WINDOW)] for i in range(len(w))]
                best = max(range(len(w)), key=lambda i: (mass[i], w[i]))  # ties: the likelier place
                self.places_found[lo, hi] = lo + self.m + best
            c = self.places_found[lo, hi]
            if c != cuts[j] and self.p(lo, c, hi) < self.alpha:
                cuts[j] = c
        return cuts

    def prune(self, cuts: list[int]) -> list[int]:
        """Each change tested again between the segments that finally lie beside it; the weakest failing one
        removed until all pass."""
        cuts = list(cuts)
        while cuts:
            bounds = [0, *cuts, len(self.x)]
            ps = [self.p(bounds[j], c, bounds[j + 2]) for j, c in enumerate(cuts)]
            worst = max(range(len(ps)), key=ps.__getitem__)
            if ps[worst] < self.alpha:
                break
            del cuts[worst]
        return cuts
