"""`fathom history` over 1,000 runs x 100 figures: how long the whole command takes (target: under 5 s).

Builds a results store with RUNS runs of one suite, each with 10 workloads x 5 iodepths (IOPS and p99: 100
series), 5% noise and a 10% step after run 700 in one workload, then times `fathom history SUITE` as a user
runs it (a new process: start-up, reading the store, change points, the gate, text out) REPEATS times, and
`-o page.html` once more. Prints the times, their mean and spread; --docs writes the section of
docs/benchmarks.md. The store is written straight through SQLite in one transaction (a bench fixture: the
runner's per-point transactions would take minutes and measure nothing this bench is about).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from docsection import update_docs  # noqa: E402

from fathom.results.store import Store  # noqa: E402

FATHOM = str(REPO / ".venv" / "bin" / "fathom")
WORKLOADS = 10
IODEPTHS = (1, 4, 16, 64, 128)
HEADING = "## History over many runs (`fathom history`)"
SUITE_YAML = "name: nightly\nworkloads: []\n"


def filler(rng: random.Random) -> dict[str, object]:
    """A real point's other metrics: every column fathom stores (numbers, texts, flags), about 2 KB of JSON, as a
    point of a run with server figures holds; the history must not pay for what it does not draw."""
    from fathom.results.model import METRIC_COLUMNS

    out: dict[str, object] = {}
    for i, c in enumerate(METRIC_COLUMNS):
        out[c] = ("reached" if c == "steady_state" else "latency" if c == "bound" else True) \
            if c in ("steady_state", "bound", "schedule_kept", "fault_recovered") else rng.uniform(0, 1e4) + i
    return out


def build(db: Path, runs: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with Store(db):
        pass  # the schema
    import sqlite3

    con = sqlite3.connect(db)
    t0 = time.time() - runs * 86400
    with con:
        for r in range(runs):
            cur = con.execute("INSERT INTO runs (name, kind, suite, suite_yaml, status, created, finished, "
                              "fathom_version, env_json) VALUES (?, 'suite', 'nightly.yaml', ?, 'done', ?, ?, "
                              "'0.1.0', ?)", (f"nightly-{r:04d}", SUITE_YAML, t0 + r * 86400, t0 + r * 86400 + 600,
                                              json.dumps({"labels": {"build": f"b{r}"}})))
            rid = cur.lastrowid
            rows = []
            for w in range(WORKLOADS):
                for i, qd in enumerate(IODEPTHS):
                    step = 0.9 if (w == 0 and r >= int(runs * 0.7)) else 1.0
                    iops = 1000.0 * (i + 1) * step * rng.lognormvariate(0, 0.05)
                    p99 = qd / iops * 3e3 * rng.lognormvariate(0, 0.05)
                    rows.append((rid, w * len(IODEPTHS) + i, f"w{w}/iodepth={qd}", f"w{w}", "fathom-engine",
                                 json.dumps({"rw": "randread", "bs": 4096, "iodepth": qd}), "done",
                                 json.dumps({**filler(rng), "iops": iops, "bw_mib_s": iops * 4096 / 2**20,
                                             "p99_ms": p99, "clat_ms": p99 / 3})))
            con.executemany("INSERT INTO points (run_id, idx, key, workload, engine, params_json, status, "
                            "metrics_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.close()


def timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    p = subprocess.run([FATHOM, *args], capture_output=True, text=True, timeout=600)
    return time.perf_counter() - t, p


def peak_rss_mib() -> float:
    """The largest resident set of a child so far (the history commands), MiB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--docs", type=Path, help="write the section into this file (docs/benchmarks.md)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "history.db"
        t = time.perf_counter()
        build(db, a.runs)
        print(f"store: {a.runs} runs x {WORKLOADS * len(IODEPTHS)} points, built in {time.perf_counter() - t:.1f} s, "
              f"{db.stat().st_size / 2**20:.1f} MiB (each point's metrics about "
              f"{len(json.dumps({**filler(random.Random(1)), 'iops': 1.0})):,} bytes)")
        times = []
        for i in range(a.repeats):
            s, p = timed(["history", "nightly", "--db", str(db), "--fail-on-change", "5", "--format", "json"])
            if p.returncode not in (0, 5):
                print(p.stderr, file=sys.stderr)
                return 1
            h = json.loads(p.stdout)
            times.append(s)
            print(f"  history {i + 1}: {s:.2f} s, {len(h['series'])} series, "
                  f"{sum(len(x['changes']) for x in h['series'])} change points")
        page_s, p = timed(["history", "nightly", "--db", str(db), "-o", str(Path(d) / "page.html")])
        page_kib = (Path(d) / "page.html").stat().st_size / 1024 if p.returncode == 0 else 0
        found = [x for x in h["series"] if x["changes"]]
        at = sorted({c["at"] for x in found for c in x["changes"]})
    mean, sd = statistics.fmean(times), statistics.stdev(times) if len(times) > 1 else 0.0
    rss = peak_rss_mib()
    point_bytes = len(json.dumps({**filler(random.Random(1)), "iops": 1.0}))
    print(f"fathom history over {a.runs} runs x {len(h['series'])} series: mean {mean:.2f} s, stdev {sd:.2f} s, "
          f"min {min(times):.2f}, max {max(times):.2f}; with the HTML page: {page_s:.2f} s ({page_kib:,.0f} KiB); "
          f"peak resident memory {rss:.0f} MiB")
    if a.docs:
        section = "\n".join([
            HEADING, "",
            f"`{Path(sys.argv[0]).name}` (`make bench-history`): a store of {a.runs} runs of one suite, 10 workloads x "
            f"5 iodepths, IOPS and p99 (100 series), 5% noise, a 10% step in one workload at run "
            f"{int(a.runs * 0.7) + 1}; each point holds every metric column ({point_bytes:,} bytes of JSON; a "
            "real point with server figures holds about 2 KB). The whole command, a new process each time "
            "(start-up, reading the store, change points, the gate, JSON out), on this 2-core machine:", "",
            "| runs | series | runs of the command | mean | stdev | min | max | with `-o page.html` | peak RSS |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {a.runs:,} | {len(h['series'])} | {len(times)} | {mean:.2f} s | {sd:.2f} s | {min(times):.2f} s | "
            f"{max(times):.2f} s | {page_s:.2f} s ({page_kib:,.0f} KiB) | {rss:.0f} MiB |", "",
            f"Change points found: {sum(len(x['changes']) for x in found)} in {len(found)} series, at positions "
            f"{', '.join(str(i + 1) for i in at[:12])}{' ...' if len(at) > 12 else ''} (the step is at "
            f"{int(a.runs * 0.7) + 1}). Measured {time.strftime('%Y-%m-%d')}.", ""])
        update_docs(a.docs, HEADING, section)
    return 0 if mean < 5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
