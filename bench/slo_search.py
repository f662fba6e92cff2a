#!/usr/bin/env python3
"""SLO search against an exhaustive rate sweep: does `fathom slo` find what a fine sweep finds, in less time?

    .venv/bin/python bench/slo_search.py [--cases rbd,rados,s3] [--probe 10] [--step 5] [--low 10] [--high 150]
        [--json bench/results/slo.json] [--docs docs/benchmarks.md] [--keep-db PATH] [--merge EARLIER.json]
    .venv/bin/python bench/slo_search.py --render --json bench/results/slo.json --docs docs/benchmarks.md

One disposable local cluster (one BlueStore OSD, RGW), attached by every run. Per case (rbd randwrite 4K,
rados read 4M, S3 GET 64K) with a p99 target:
0. A closed-loop pilot at the workload's iodepth: the p99 target is the case's factor (--target-factor, 1.0,
   for rados and S3; 6 for rbd) x its p99, a load the cluster meets somewhere below its capacity (measured,
   so it fits this machine). rbd's own factor: at 1x (53 ms) its target fell in a band where rbd randwrite's
   p99 is flat within its noise (30-160 ms from 750 to 4,800 ops/s on this box, the sweep of 2026-11-27
   12:17), where neither a sweep judging each rate once nor a search defines the answer to 10%; at 6x it
   falls where the p99 climbs steeply (the schedule stops being kept), as rados's and S3's 1x targets do.
1. `fathom slo` searches the open-loop rate (its own closed-loop calibration C, bracketing, bisection to
   5%); search_s is the wall time of its probes (calibration included; the write a read needs is not).
2. `fathom run` sweeps the rate over a fine geometric grid: from --low % of C up to --high %, each rate
   --step % above the one before (geometric_grid: 56 rates by default), so the grid's step is --step % of
   the answer wherever it lies (a linear grid in steps of C is coarse for an answer far below C: rbd's was
   C / 4.8, where 5% of C is 24% of the answer). Each point runs as long as the search's probe at that rate
   (the same ops rule, at most 120 s) and is judged by the search's own rule (analysis.slo.judge with the
   point's interval histograms, an interval straddling the target decided by the estimate); the reference
   answer is the highest grid rate that met the target below the first that failed. sweep_s: its points'
   wall time. Expected, from points x length (+ ~2.5 s of ramp, gate and start each) at this box's C
   (rbd ~8,000, rados 4M ~280, S3 ~1,500 ops/s): rbd and S3 ~12 min (every point 10 s), rados ~19 min (its
   rates below 125 ops/s need 1,250 / rate s for 1,250 ops); with the pilots and searches about 65 min.
3. `fathom slo` again. The cluster drifts on this box (capacity moved by a quarter within ten minutes in
   earlier runs), so the search runs before and after the sweep (A B A, which cancels a linear drift):
   found_rate is the mean of the two answers, search_s the mean of their times; both answers are kept.
Target (issue #25): found within 10% of the reference, search_s under a third of sweep_s.

Writes --json: a list of {"case", "target_p99_ms", "found_rate", "found_rates", "reference_rate", "search_s",
"searches_s", "sweep_s", "probes", "batched_probes", "sweep_points", "capacity", "grid"} and the docs section.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fathom.run import probes  # noqa: E402
from fathom.analysis import slo  # noqa: E402
from fathom.results.store import Store  # noqa: E402
from docsection import update_docs  # noqa: E402  (bench/ is on sys.path: the script runs from it)

FATHOM = str(REPO / ".venv" / "bin" / "fathom")
SECTION = "## SLO search against a fine rate sweep"
WITHIN = 0.10
SPEEDUP = 3.0

# case -> prep, setup workloads run first, the searched workload (its p99 target from a pilot: pilot_p99_ms)
CASES: dict[str, dict[str, Any]] = {
    "rbd randwrite 4K": {
        "prep": {"pools": [{"name": "rbd", "pg_num": 16, "size": 1, "application": "rbd"}],
                 # prefilled: every run writes over allocated blocks, not the first pass's allocation
                 "images": {"pool": "rbd", "count": 1, "size": "2GiB"}, "prefill": True},
        "setup": [],
        "workload": {"name": "rw4k", "interface": "rbd", "pool": "rbd", "rw": "randwrite", "bs": "4k",
                     "iodepth": 128},
        # at 1x the target fell in rbd's flat, noisy p99 band (see the docstring); 6x puts it at the knee
        "target_factor": 6.0},
    "rados read 4M": {
        "prep": {"pools": [{"name": "bench", "pg_num": 16, "size": 1, "application": "rados"}]},
        # 1 GiB of objects to read (a longer write would fill the OSD: 4 MiB writes run at ~185/s here)
        "setup": [{"name": "put4m", "interface": "rados", "pool": "bench", "rw": "write", "bs": "4M", "iodepth": 16,
                   "runtime": "60s", "size": "1GiB"}],
        "workload": {"name": "get4m", "interface": "rados", "pool": "bench", "rw": "randread", "bs": "4M",
                     "iodepth": 64}},
    "S3 GET 64K": {
        "prep": {},
        "setup": [{"name": "put64k", "interface": "s3", "rw": "write", "bs": "64k", "object_size": "64k",
                   "numjobs": 2, "iodepth": 8, "runtime": "20s", "size": "256MiB"}],
        "workload": {"name": "get64k", "interface": "s3", "rw": "randread", "bs": "64k", "object_size": "64k",
                     "numjobs": 2, "iodepth": 64}},
}


def suite(case: dict[str, Any], name: str, args: argparse.Namespace, sweep: dict[str, Any] | None = None) \
        -> dict[str, Any]:
    base = {"engine": "fathom-engine", "runtime": f"{args.probe}s", "ramp_time": "2s", "on_error": "continue"}
    wl = {**case["workload"]}
    if sweep:
        wl["sweep"] = {"mode": "zip", **sweep}
    out = {"name": name, "cluster": {"kind": "attached"}, "prep": case["prep"], "defaults": base,
           "workloads": [*case["setup"], wl]}
    if "p99_ms" in case:
        out["slo"] = {"p99": f"{case['p99_ms']}ms", "probe": f"{args.probe}s", "workload": wl["name"]}
    return out


def fathom(args: list[str], what: str) -> None:
    t0 = time.monotonic()
    p = subprocess.run([FATHOM, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(f"  {what}: exit {p.returncode} in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    if p.returncode != 0:
        raise SystemExit(f"{what} failed:\n{p.stderr[-4000:]}")
    for line in p.stderr.splitlines():
        if "SLO search:" in line or "closed loop at" in line:
            print(f"   {line.strip()}", file=sys.stderr)


def wall_s(points: list[dict[str, Any]], workload: str) -> float:
    """From the end of the last point before the workload's first (its start, without one) to its last end:
    gates, engine start, ramp and drain counted."""
    mine = [i for i, p in enumerate(points) if p["workload"] == workload]
    first = mine[0]
    t0 = points[first - 1]["ended"] if first else points[first]["started"]
    return points[mine[-1]]["ended"] - t0


def geometric_grid(capacity: float, step_pct: float, low_pct: float, high_pct: float) -> list[float]:
    """Rates from low_pct % of the capacity up to high_pct %, each step_pct % above the one before, to 4
    significant digits as the search probes them: the step is the same fraction of the rate everywhere."""
    ratio = 1 + step_pct / 100
    n = math.floor(math.log(high_pct / low_pct) / math.log(ratio) + 1e-9) + 1
    return [float(f"{capacity * low_pct / 100 * ratio ** k:.4g}") for k in range(n)]


def reference(points: list[dict[str, Any]], workload: str, targets: slo.Targets, hists: dict[int, str | None],
              ivals: dict[int, list[list[str]] | None]) -> tuple[float | None, list[dict[str, Any]]]:
    """The highest grid rate that met the target below the first that failed (a point too short for its
    percentile skipped), and every grid point's verdict. Decided by the estimate where an interval straddles
    the target, so the interval rule only shows in the reasons (the batch means: how much the seconds of a
    point disagreed)."""
    rows, best = [], None
    for p in sorted((p for p in points if p["workload"] == workload), key=lambda p: p["params"]["rate"]):
        m, rate = p["metrics"] or {}, p["params"]["rate"]
        got = {"ops": int(m.get("total_ios") or 0), "errors": int(m.get("errors") or 0), "hist": hists[p["id"]],
               "kept": m.get("schedule_kept"), "achieved": m.get("achieved_rate_ops_s"),
               "client": m.get("client_thread_max_pct"), "ivals": ivals[p["id"]]}
        v = slo.judge(probes.observation(rate, got, targets), targets, "ops/s", final=True)
        rows.append({"rate": rate, "outcome": v.outcome, "reasons": v.reasons})
    for r in rows:
        if r["outcome"] == "short":  # too few ops for its percentile (capped length): neither met nor failed
            continue
        if r["outcome"] != "meets":
            break
        best = r["rate"]
    return best, rows


def pilot_p99_ms(case: dict[str, Any], args: argparse.Namespace, conn: list[str], db: Path, tmp: Path) -> float:
    """The p99 target: the case's factor (--target-factor unless the case has its own) of the p99 the workload
    shows flat out (closed loop at its iodepth, one --probe run), to two significant digits: a load the
    cluster meets somewhere below its capacity."""
    wl = case["workload"]["name"]
    f = tmp / f"{wl}-pilot.yaml"
    f.write_text(yaml.safe_dump(suite(case, f"{wl}-pilot", args)))
    fathom(["run", str(f), "--db", str(db), "--name", f"{wl}-pilot", *conn], "closed-loop pilot")
    with Store(db) as st:
        p99 = st.points(st.run(f"{wl}-pilot").id)[-1]["metrics"]["p99_ms"]
    return float(f"{p99 * factor(case, args):.2g}")


def factor(case: dict[str, Any], args: argparse.Namespace) -> float:
    return float(case.get("target_factor", args.target_factor))


def run_case(label: str, case: dict[str, Any], args: argparse.Namespace, conn: list[str], db: Path,
             tmp: Path) -> dict[str, Any]:
    case = {**case, "p99_ms": pilot_p99_ms(case, args, conn, db, tmp)}
    print(f"{label}: p99 <= {case['p99_ms']:g} ms", file=sys.stderr, flush=True)
    wl = case["workload"]["name"]
    targets = slo.Targets({"p99": case["p99_ms"]})
    first = search(case, args, conn, db, tmp, "search-before")
    cap = float(first["calibration"]["iops"])
    rates = geometric_grid(cap, args.step, args.low, args.high)
    runtimes = [probes.probe_runtime(r, targets, args.probe, 120.0) for r in rates]
    f = tmp / f"{wl}-sweep.yaml"
    f.write_text(yaml.safe_dump(suite(case, f"{wl}-sweep", args, {"rate": rates, "runtime": runtimes})))
    fathom(["run", str(f), "--db", str(db), "--name", f"{wl}-sweep", *conn], f"sweep of {len(rates)} rates")
    with Store(db) as st:
        run = st.run(f"{wl}-sweep")
        pts = st.points(run.id)
        hists = {p["id"]: _point_hist(st.histograms(p["id"])) for p in pts}
        ivals = {p["id"]: probes.interval_hists(st.timeline(p["id"])) for p in pts}
    ref, grid = reference(pts, wl, targets, hists, ivals)
    second = search(case, args, conn, db, tmp, "search-after")
    both = [first, second]
    found = [s["result"]["load"] for s in both]
    out = {"case": label, "target_p99_ms": case["p99_ms"], "target_factor": factor(case, args),
           "found_rate": round(sum(found) / 2, 1) if None not in found else None, "found_rates": found,
           "reference_rate": ref, "search_s": round(sum(s["wall_s"] for s in both) / 2, 1),
           "searches_s": [round(s["wall_s"], 1) for s in both], "sweep_s": round(wall_s(pts, wl), 1),
           "status": [s["result"]["status"] for s in both], "probes": [len(s["result"]["probes"]) for s in both],
           "sweep_points": len(rates), "capacity": round(cap, 1),
           "capacities": [round(float(s["calibration"]["iops"]), 1) for s in both],
           # probes judged with batch means too (0: the runner gave the search no interval records)
           "batched_probes": [sum(1 for p in s["result"]["probes"] if p["obs"].get("batches")) for s in both],
           "answer": [s["result"]["message"] for s in both], "grid": grid}
    if not all(out["batched_probes"]):
        print("  warning: a search judged its probes without batch means (no interval records reached it)",
              file=sys.stderr, flush=True)
    print(f"  found {out['found_rate']} ops/s, reference {ref} ops/s; search {out['search_s']} s, sweep "
          f"{out['sweep_s']} s", file=sys.stderr, flush=True)
    return out


def search(case: dict[str, Any], args: argparse.Namespace, conn: list[str], db: Path, tmp: Path, name: str) \
        -> dict[str, Any]:
    """One `fathom slo` of the case: its stored `slo` record plus wall_s, its probes' wall time."""
    wl = case["workload"]["name"]
    f = tmp / f"{wl}-{name}.yaml"
    f.write_text(yaml.safe_dump(suite(case, f"{wl}-{name}", args)))
    fathom(["slo", str(f), "--db", str(db), "--name", f"{wl}-{name}", *conn], name)
    with Store(db) as st:
        run = st.run(f"{wl}-{name}")
        return {**run.env["slo"], "wall_s": wall_s(st.points(run.id), wl)}


def _point_hist(h: dict[str, str]) -> str | None:
    """The point's own histogram: every op kind merged ('all'), or its one kind's (not each engine's)."""
    own = {k: v for k, v in h.items() if k in ("all", "read", "write")}
    return own.get("all") or (next(iter(own.values())) if len(own) == 1 else None)


def verdicts(r: dict[str, Any]) -> tuple[str, str]:
    if r["found_rate"] is None or not r["reference_rate"]:
        close = "n/a"
    else:
        off = r["found_rate"] / r["reference_rate"] - 1
        close = f"{off * 100:+.1f}% ({'yes' if abs(off) <= WITHIN else 'NO'})"
    ratio = r["sweep_s"] / r["search_s"] if r["search_s"] else 0.0
    return close, f"{ratio:.2f}x ({'yes' if ratio >= SPEEDUP else 'NO'})"


def _frac(x: float | None, of: float | None) -> str:
    return f"{x / of:.2f}" if x is not None and of else "n/a"


def _n(x: float | None) -> str:
    return f"{x:,.0f}" if x is not None else "none"


def docs_section(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    rows = []
    for r in results:
        close, speed = verdicts(r)
        before, after = r["found_rates"]
        t0, t1 = r["searches_s"]
        c0, c1 = r["capacities"]
        pilot = f"{r.get('target_factor', 1.0):g}x pilot"
        rows.append(f"| {r['case']}{' (' + r['measured'] + ')' if r.get('measured') else ''} | "
                    f"p99 <= {r['target_p99_ms']:g} ms ({pilot}) | {_n(c0)} / {_n(c1)} | {_n(before)} / "
                    f"{_n(after)} | {_frac(before, c0)} / {_frac(after, c1)} | {_n(r['found_rate'])} | "
                    f"{_n(r['reference_rate'])} | {close} | {t0:.0f} / "
                    f"{t1:.0f} s ({r['probes'][0]} / {r['probes'][1]} probes) | {r['sweep_s']:.0f} s "
                    f"({r['sweep_points']} points) | {speed} |")
    return "\n".join([
        SECTION, "",
        f"`make bench-slo` ({time.strftime('%Y-%m-%d')}, {platform.node()}): `fathom slo` against a fine open-loop "
        "rate sweep of the same workload on one local cluster (one BlueStore OSD, RGW, 2 cores shared with the "
        "client). Per case the search runs before and after the sweep (the cluster drifts on this box; A B A "
        "cancels a linear drift), and the search's figure is the mean of the two. The sweep's grid is "
        f"geometric: from {args.low:g}% to {args.high:g}% of the first search's closed-loop rate C, each rate "
        f"{args.step:g}% above the one before ({len(geometric_grid(1.0, args.step, args.low, args.high))} rates), "
        f"so wherever the answer lies the grid's step is {args.step:g}% of it. Each point runs as long as the "
        f"search's probe at that rate (at least {args.probe:g} s, 1,250 ops) and is judged by the search's own "
        "rule (with its interval histograms; an interval around the target decided by the estimate). Reference: "
        "the highest grid rate that met the target below the first that failed. Targets (#25): within 10% of "
        "the reference in under a third of the sweep's time (the sweep's time grows with its grid's points). "
        "The p99 target is a factor x the p99 of a closed-loop pilot at the workload's iodepth (measured here, "
        "so the answer lies below capacity), each row's factor in its target column: --target-factor "
        f"({args.target_factor:g}x) unless the case has its own (rbd: "
        f"{factor(CASES['rbd randwrite 4K'], args):g}x). At 1x rbd's target fell in a band "
        "where its p99 is flat within its noise (30-160 ms from 750 to 4,800 ops/s in its sweep of 2026-11-27 "
        "12:17, under earlier runs below), where no method that "
        "judges a rate from 10-30 s of it defines the answer to 10%; at its own factor, as rados's and S3's at 1x, "
        "the target lies where the p99 climbs steeply. Times include gates, engine starts, ramps and "
        "drains; the search's includes its calibration. Before / after: the two searches.", "",
        "| case | target | C before / after (ops/s) | search before / after (ops/s) | search / C | search mean "
        "| sweep (ops/s) | search vs sweep | search time | sweep time | sweep / search |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *rows, "",
        *(["Rows without a time, and earlier runs before 15:03 on 2026-11-27, were measured before 4453f0a: an "
            "open-loop point's backlog at its end was then counted unissued instead of being issued and measured "
            "(docs/slo.md, \"A stall at a probe's end\").", ""] if any(not r.get("measured") for r in results)
          else []),
        "search / C: each search's answer over its own closed-loop rate. Where C moved between the two searches "
        "and the answers moved with it, the cluster drifted (the mean is then the estimate for the sweep, which "
        "ran between them); where C held and the answers did not, the search did.", "",
        "The searches' answers: " + "; ".join(f"{r['case']}: {' / '.join(r['answer'])}" for r in results) + ".",
        "", *first_failures(results), *history(results)])


SUMMARY = ("measured", "target_p99_ms", "target_factor", "found_rate", "reference_rate", "search_s", "sweep_s")


def merge(earlier: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This run's cases over an earlier run's: the earlier cases it did not repeat kept as they were, the ones
    it did summed up in the new result's `earlier` (with their own earlier ones), so the docs keep a case's
    history when its settings change."""
    ran = {r["case"]: r for r in results}
    for old in earlier:
        new = ran.get(old["case"])
        if new is not None:
            new["earlier"] = [{k: old.get(k) for k in SUMMARY}, *old.get("earlier", [])]
    order = list(CASES)
    return sorted([r for r in earlier if r["case"] not in ran] + results, key=lambda r: order.index(r["case"]))


def first_failures(results: list[dict[str, Any]]) -> list[str]:
    """Each sweep's first failing rate and why, and the rates above it that met anyway (the sweep not monotone
    there: the reference stops at the first failure)."""
    out = []
    for r in results:
        grid = [g for g in r.get("grid", []) if g["outcome"] != "short"]
        first = next((i for i, g in enumerate(grid) if g["outcome"] != "meets"), None)
        if first is None:
            continue
        g = grid[first]
        above = [x["rate"] for x in grid[first + 1:] if x["outcome"] == "meets"]
        out.append(f"{r['case']}: {_n(g['rate'])} ops/s ({'; '.join(g['reasons']) or g['outcome']})"
                   + (f"; above it met: {', '.join(_n(x) for x in above)} ops/s" if above else ""))
    return ["The sweeps' first failures: " + "; ".join(out) + ".", ""] if out else []


def history(results: list[dict[str, Any]]) -> list[str]:
    rows = [f"| {r['case']} | {e.get('measured') or 'earlier'} | p99 <= {e['target_p99_ms']:g} ms "
            f"({e.get('target_factor') or 1:g}x pilot) | {_n(e['found_rate'])} | {_n(e['reference_rate'])} | "
            f"{verdicts(e)[0]} | {e['sweep_s'] / e['search_s']:.2f}x |"
            for r in results for e in r.get("earlier", [])]
    if not rows:
        return []
    return ["Earlier runs of a case that ran again (their settings differed or they were re-measured):", "",
            "| case | measured | target | search mean (ops/s) | sweep (ops/s) | search vs sweep | sweep / search |",
            "|---|---|---|---:|---:|---:|---:|", *rows, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="rbd,rados,s3", help="which of: rbd, rados, s3")
    ap.add_argument("--probe", type=float, default=10.0, help="shortest probe, seconds (search and sweep)")
    ap.add_argument("--step", type=float, default=5.0, help="sweep grid step, %% of the rate below it")
    ap.add_argument("--low", type=float, default=10.0, help="sweep grid's lowest rate, %% of the closed-loop rate")
    ap.add_argument("--high", type=float, default=150.0, help="sweep grid's highest rate, %% of the closed-loop rate")
    ap.add_argument("--target-factor", type=float, default=1.0,
                    help="p99 target = this x the p99 of a closed-loop pilot at the workload's iodepth")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--docs", type=Path)
    ap.add_argument("--keep-db", type=Path)
    ap.add_argument("--merge", type=Path, help="an earlier --json: its cases this run does not repeat are kept "
                                               "(each result carries the date it was measured)")
    ap.add_argument("--render", action="store_true", help="only write --docs from --json (running nothing)")
    args = ap.parse_args()
    if args.render:
        if not (args.json and args.docs):
            ap.error("--render needs --json and --docs")
        update_docs(args.docs, SECTION, docs_section(json.loads(args.json.read_text()), args))
        return
    keys = {"rbd": "rbd randwrite 4K", "rados": "rados read 4M", "s3": "S3 GET 64K"}
    chosen = [keys[c.strip()] for c in args.cases.split(",") if c.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-slo-"))
    cdir = tmp / "cluster"
    db = args.keep_db or tmp / "slo.db"
    results = []
    try:
        subprocess.run([FATHOM, "cluster", "up", "--dir", str(cdir), "--osds", "1", "--osd-size", "20GiB", "--rgw"],
                       check=True, stdin=subprocess.DEVNULL)
        conn = ["--conf", str(cdir / "ceph.conf"), "--keyring", str(cdir / "keyring")]
        for label in chosen:
            results.append(run_case(label, CASES[label], args, conn, db, tmp))
    finally:
        subprocess.run([FATHOM, "cluster", "down", "--dir", str(cdir)], stdin=subprocess.DEVNULL)
        if not args.keep_db:
            shutil.rmtree(tmp, ignore_errors=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    for r in results:
        r["measured"] = time.strftime("%Y-%m-%d %H:%M") + (f", {commit}" if commit else "")
    if args.merge:
        results = merge(json.loads(args.merge.read_text()), results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.docs:
        update_docs(args.docs, SECTION, docs_section(results, args))
    for r in results:
        close, speed = verdicts(r)
        print(f"{r['case']}: found {r['found_rate']}, reference {r['reference_rate']}: {close}; time {speed}")


if __name__ == "__main__":
    main()
