"""How often `fathom history` finds a 10% step, and how often it finds one where there is none, in normal and in
heavy-tailed noise: the change-point test with its robust clipping (fathom.analysis.changes.ROBUST_K) and without.

Series of RUNS runs, one value each. Noise: lognormal 5% (normal); or lognormal 5% with, in each run at
probability P_WILD, a wild factor drawn from lognormal 40% (heavy-tailed: a host's bad night, a scrub). A step
of 10% (down) after the middle run; "found" means a change point within 2 runs of it; "false" means any change
point in a series without a step. SERIES series of each kind from a fixed seed, so every run of this script
gives the same counts. Prints a table; --docs writes the section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from docsection import update_docs  # noqa: E402

from fathom.analysis import changes  # noqa: E402

HEADING = "## Change points in heavy-tailed noise (`fathom history`)"
RUNS, STEP, SIGMA, WILD_SIGMA, P_WILD = 50, 0.9, 0.05, 0.40, 0.05
K = changes.ROBUST_K  # fathom's setting, against 0 (off)


def series(rng: random.Random, step: bool, heavy: bool) -> list[float]:
    out = []
    for i in range(RUNS):
        v = 1000.0 * (STEP if step and i >= RUNS // 2 else 1.0) * rng.lognormvariate(0, SIGMA)
        if heavy and rng.random() < P_WILD:
            v *= rng.lognormvariate(0, WILD_SIGMA)
        out.append(v)
    return out


def rates(n: int, heavy: bool, k: float) -> tuple[float, float]:
    """(share of stepped series with the step found within 2 runs, share of flat series with any change)."""
    changes.ROBUST_K = k
    rng = random.Random(20261202 + heavy)
    found = false = 0
    for _ in range(n):
        got = changes.find_changes(series(rng, True, heavy))
        found += any(abs(c.index - RUNS // 2) <= 2 for c in got.points)
        false += bool(changes.find_changes(series(rng, False, heavy)).points)
    return found / n, false / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--docs", type=Path, help="write the section into this file (docs/benchmarks.md)")
    a = ap.parse_args()
    rows = []
    t0 = time.perf_counter()
    for heavy in (False, True):
        for k in (0.0, K):
            f, x = rates(a.series, heavy, k)
            rows.append((heavy, k, f, x))
            print(f"{'heavy-tailed' if heavy else 'normal':>12} noise, clipping {'at %g' % k if k else 'off':>8}: "
                  f"step found {f:.1%}, change in a flat series {x:.1%}")
    took = time.perf_counter() - t0
    if a.docs:
        lines = [HEADING, "",
                 f"`{Path(sys.argv[0]).name}`: {a.series} series of {RUNS} runs per row and kind, a "
                 f"{1 - STEP:.0%} step after run {RUNS // 2} (found: a change point within 2 runs of it) and flat "
                 f"series (false: any change point). Noise: lognormal {SIGMA:.0%}; heavy-tailed: the same, and in "
                 f"{P_WILD:.0%} of runs "
                 f"a wild factor from lognormal {WILD_SIGMA:.0%}. Clipping: the tests see each run value within "
                 f"{K:g} robust spreads of its part's median (`ROBUST_K`; the spread is the MAD's sigma, never under "
                 f"{changes.SD_FLOOR:g} of the plain one); off: as before it.", "",
                 "| noise | clipping | step found | change in a flat series |", "|---|---|---:|---:|"]
        lines += [f"| {'heavy-tailed' if h else 'normal'} | {f'{k:g} spreads' if k else 'off'} | {f:.1%} | {x:.1%} |"
                  for h, k, f, x in rows]
        lines += ["", f"Fixed seeds: the same counts on every run ({took:.0f} s here). "
                  f"Measured {time.strftime('%Y-%m-%d')}.", ""]
        update_docs(a.docs, HEADING, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
