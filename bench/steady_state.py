#!/usr/bin/env python3
"""Steady-state stop vs fixed time: the OSD study (osd-classic) swept both ways on one fresh local cluster.

    .venv/bin/python bench/steady_state.py [--iodepths 1,16] [--seconds 300] [--ramp 5]
        [--window 10] [--slope 1] [--deviation 10] [--min 10] [--workloads randread4k,...]
        [--images 4] [--image-size 1GiB] [--numjobs 4] [--json bench/results/steady-state.json]
        [--docs docs/benchmarks.md] [--keep-db PATH]

One `fathom run` of a suite derived from osd-classic (its pool, prefill, hygiene and
workloads): every chosen point runs twice, back to back, once for a fixed `--seconds`
measured seconds and once with `steady_state` (max_s = --seconds, so it can never run
longer than the fixed one); which of the two goes first alternates from point to point.
fathom starts its own disposable cluster (one BlueStore OSD) and stops it at the end.

The full study is 40 points of 5 min (3.5 h); on a 2-core machine the default is a subset
at the study's length, about 55 min: the four workloads at iodepth 1 and 16, 300 s each,
images 4 x 1 GiB instead of 32 x 2 GiB, with BlueStore's cache held to 64 MiB (the study's
images outgrew its OSD cache; 4 GiB would fit in the default one, and reads would speed up
as it warmed). The choice is printed and written into the docs section.

A point's time is what the sweep spent on it: from the end of the point before it (the
engine start of the first point) to its own end, so the health gate, engine start, ramp
and drain are counted. fixed_s / steady_s are the sums over the fixed and steady points.
Targets (issue #16): steady_s <= fixed_s / 5, and every point's throughput and mean
latency within 5% of the fixed-time run's.

Writes --json: {"fixed_s", "steady_s", "points": [{"workload", "iodepth", "fixed_iops",
"steady_iops", "fixed_lat_ms", "steady_lat_ms"}]}.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fathom.results import hdr  # noqa: E402
from fathom.results import series as rseries  # noqa: E402
from fathom.suite import spec, steady  # noqa: E402
from fathom.results.store import Store  # noqa: E402
from fathom.units import format_size, parse_size  # noqa: E402
from docsection import update_docs  # noqa: E402  (bench/ is on sys.path: the script runs from it)

FATHOM = str(REPO / ".venv" / "bin" / "fathom")
SECTION = "## Steady-state stop vs fixed time (OSD study)"
TOLERANCE_PCT = 5.0
SPREAD_WINDOW_S = 30.0  # the scale of a steady-state stop, for the fixed points' spread
# BlueStore's cache held to 64 MiB, so reads reach the device as the study's did (32 x 2 GiB of images)
CACHE = ("osd.bluestore_cache_autotune=false", "osd.bluestore_cache_size=67108864")
SPEEDUP = 5.0


def build_suite(args: argparse.Namespace) -> dict[str, Any]:
    """osd-classic's cluster, prep and workloads; each chosen point as a fixed and a steady workload."""
    study = spec.load("osd-classic").suite
    pool = study.prep.pools[0]
    hy = study.prep.hygiene
    ss = {"metric": args.metric, "window_s": args.window, "criteria": {}, "min_s": args.min, "max_s": args.seconds}
    if args.slope:
        ss["criteria"]["slope"] = args.slope
    if args.deviation:
        ss["criteria"]["deviation"] = args.deviation
    chosen = [w for w in study.workloads if not args.workloads or w.name in args.workloads]
    missing = set(args.workloads or []) - {w.name for w in chosen}
    if missing:
        raise SystemExit(f"no workload {', '.join(sorted(missing))} in osd-classic "
                         f"({', '.join(w.name for w in study.workloads)})")
    workloads = []
    n = 0
    for w in chosen:
        for qd in args.iodepths:
            base = {"rw": w.rw, "bs": w.bs, "iodepth": qd}
            fixed = {"name": f"{w.name}-qd{qd}-fixed", **base, "runtime": args.seconds}
            steady = {"name": f"{w.name}-qd{qd}-steady", **base, "steady_state": copy.deepcopy(ss)}
            workloads += [fixed, steady] if n % 2 == 0 else [steady, fixed]
            n += 1
    return {
        "name": "osd-classic-steady-bench",
        "description": "osd-classic points, fixed time against steady-state stop (bench/steady_state.py)",
        "cluster": {"kind": "local", "osds": 1, "objectstore": "bluestore", "osd_size": args.osd_size,
                    "settings": settings(CACHE if args.set is None else args.set)},
        "prep": {"pools": [{"name": pool.name, "pg_num": pool.pg_num, "size": pool.size,
                            "application": pool.application}],
                 "images": {"pool": pool.name, "count": args.images, "size": args.image_size},
                 "prefill": True,
                 "hygiene": {"enabled": hy.enabled, "rbd_cache": hy.rbd_cache,
                             "rbd_io_scheduler": hy.rbd_io_scheduler}},
        "defaults": {"engine": "fathom-engine", "interface": "rbd", "pool": pool.name, "numjobs": args.numjobs,
                     "ramp_time": args.ramp},
        "workloads": workloads,
    }


def settings(given: list[str]) -> dict[str, dict[str, str]]:
    """--set osd.name=value ... -> the suite's cluster.settings."""
    out: dict[str, dict[str, str]] = {}
    for g in given:
        key, eq, value = g.partition("=")
        section, dot, name = key.partition(".")
        if not eq or not dot or not section or not name:
            raise SystemExit(f"--set {g!r}: expected SECTION.OPTION=VALUE, e.g. osd.bluestore_cache_size=134217728")
        out.setdefault(section, {})[name] = value
    return out


def point_times(points: list[dict[str, Any]]) -> dict[int, float]:
    """Seconds the sweep spent on each point: from the previous point's end (the first: its start) to its end."""
    out: dict[int, float] = {}
    prev: float | None = None
    for p in sorted(points, key=lambda p: p["idx"]):
        begin = prev if prev is not None else p["started"]
        out[p["idx"]] = p["ended"] - begin
        prev = p["ended"]
    return out


def pct(new: float | None, base: float | None) -> float | None:
    return 100.0 * (new - base) / base if new is not None and base else None


def replay(intervals: list[dict[str, Any]], crit: steady.Criteria) -> tuple[float | None, float | None, float | None]:
    """The fixed point's own series, stopped where the steady-state watch would have stopped it:
    (measured s at the stop, IOPS and mean latency ms up to it), all None when it never settles.
    Against the fixed point's whole figures this is the criteria's own error, free of the drift
    between two runs of the same point."""
    series = rseries.merged_series(rseries.by_engine(intervals))
    v = steady.first_steady(series, crit)
    if v is None or v.at_s is None:
        return None, None, None
    upto = [x for x in series if x.t_s <= v.at_s + 1e-9]
    dt = sum(x.dt_s for x in upto)
    ops = sum(x.ops for x in upto)
    lat = hdr.merge([h for x in upto for h in x.hists])
    return v.at_s, ops / dt if dt else None, (lat.get_mean_value() / 1e6 if lat.get_total_count() else None)


def replay_grid(db: Path, top: int = 8) -> str:
    """Every fixed point replayed through each criteria of a grid: how many land within the tolerance, and the
    mean stop. What criteria could do on this machine's series, free of the drift between two runs."""
    with Store(db) as st:
        run = st.run("latest")
        fixed = [(p, st.intervals(p["id"])) for p in st.points(run.id) if p["workload"].endswith("-fixed")]
    rows = []
    for w in (10.0, 20.0, 30.0):
        for m in (10.0, 30.0, 60.0):
            for sl in (1.0, 0.5):
                for dv in (10.0, 5.0):
                    ok, stops = 0, []
                    for p, iv in fixed:
                        c = steady.Criteria(metric="iops", window_s=w, max_s=float(p["params"]["runtime"]), min_s=m,
                                            slope_pct=sl, deviation_pct=dv)
                        at, iops, lat = replay(iv, c)
                        stops.append(at if at is not None else c.max_s)
                        ok += at is not None and within(pct(iops, p["metrics"]["iops"])) and \
                            within(pct(lat, p["metrics"]["clat_ms"]))
                    rows.append((ok, -statistics.mean(stops), w, m, sl, dv))
    rows.sort(reverse=True)
    lines = [f"{len(rows)} criteria, {len(fixed)} fixed points of {run.name}; the {top} with most points within "
             f"{TOLERANCE_PCT:g}%:", "",
             "| window (s) | min (s) | slope (%/s) | deviation (%) | within | mean stop (s) |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {w:g} | {m:g} | {sl:g} | {dv:g} | {ok} of {len(fixed)} | {-neg:.0f} |"
              for ok, neg, w, m, sl, dv in rows[:top]]
    return "\n".join(lines)


def window_means(intervals: list[dict[str, Any]], window_s: float) -> tuple[list[float], float]:
    """A point's consecutive whole windows' mean ops/s, and its whole mean."""
    series = rseries.merged_series(rseries.by_engine(intervals))
    n = max(1, round(window_s))
    means = []
    for i in range(0, len(series) - n + 1, n):  # whole windows only
        chunk = series[i:i + n]
        dt = sum(x.dt_s for x in chunk)
        if dt > 0:
            means.append(sum(x.ops for x in chunk) / dt)
    dt = sum(x.dt_s for x in series)
    return means, (sum(x.ops for x in series) / dt if dt else 0.0)


def wander(intervals: list[dict[str, Any]], window_s: float) -> tuple[float, float] | None:
    """How far a point's consecutive window means stray: (lowest, highest) as % of the whole point's mean.
    The noise floor of any comparison of two runs of the point, and of any stop on one window."""
    means, whole = window_means(intervals, window_s)
    if not means or not whole:
        return None
    return 100.0 * (min(means) - whole) / whole, 100.0 * (max(means) - whole) / whole


def spread(intervals: list[dict[str, Any]], window_s: float) -> float | None:
    """Standard deviation of a point's consecutive window means, % of its whole mean: what a stop after
    about one such window may be off by, one time in three."""
    means, whole = window_means(intervals, window_s)
    if len(means) < 2 or not whole:
        return None
    return 100.0 * statistics.stdev(means) / whole


def collect(db: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The results document (--json) and one row per point with its detail."""
    with Store(db) as st:
        run = st.run("latest")
        pts = st.points(run.id)
        series = {p["id"]: st.intervals(p["id"]) for p in pts}
    bad = [p for p in pts if p["status"] != "done"]
    if bad:
        raise SystemExit(f"{len(bad)} point(s) not done: " + "; ".join(f"{p['key']}: {p['error']}" for p in bad))
    spent = point_times(pts)
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for p in pts:
        base, _, variant = p["workload"].rpartition("-")
        pairs.setdefault((base.rsplit("-qd", 1)[0], int(p["params"]["iodepth"])), {})[variant] = p
    rows, doc_points = [], []
    fixed_s = steady_s = 0.0
    for (wl, qd), two in pairs.items():
        f, s = two["fixed"], two["steady"]
        fm, sm = f["metrics"], s["metrics"]
        fixed_s += spent[f["idx"]]
        steady_s += spent[s["idx"]]
        doc_points.append({"workload": wl, "iodepth": qd, "fixed_iops": fm["iops"], "steady_iops": sm["iops"],
                           "fixed_lat_ms": fm["clat_ms"], "steady_lat_ms": sm["clat_ms"]})
        r_at, r_iops, r_lat = replay(series[f["id"]], steady.Criteria.of(s["params"]))  # type: ignore[arg-type]
        rows.append({"workload": wl, "iodepth": qd, "fixed_point_s": spent[f["idx"]],
                     "fixed_wander_pct": wander(series[f["id"]], s["params"]["steady_state"]["window_s"]),
                     "fixed_spread_pct": spread(series[f["id"]], SPREAD_WINDOW_S),
                     "replay_at_s": r_at, "replay_iops_diff_pct": pct(r_iops, fm["iops"]),
                     "replay_lat_diff_pct": pct(r_lat, fm["clat_ms"]),
                     "steady_point_s": spent[s["idx"]], "steady_state": sm.get("steady_state"),
                     "steady_at_s": sm.get("steady_s"), "fixed_runtime_s": fm["runtime_s"],
                     "steady_runtime_s": sm["runtime_s"], "iops_diff_pct": pct(sm["iops"], fm["iops"]),
                     "lat_diff_pct": pct(sm["clat_ms"], fm["clat_ms"]), **doc_points[-1]})
    return {"fixed_s": round(fixed_s, 3), "steady_s": round(steady_s, 3), "points": doc_points}, rows


def within(v: float | None) -> bool:
    return v is not None and abs(v) <= TOLERANCE_PCT


def markdown(doc: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace, facts: dict[str, Any],
             wall_s: float) -> str:
    ratio = doc["steady_s"] / doc["fixed_s"] if doc["fixed_s"] else float("nan")
    crit = ", ".join(f"{k} <= {v:g} {'%/s' if k == 'slope' else '%'}"
                     for k, v in (("slope", args.slope), ("deviation", args.deviation)) if v)
    lines = [SECTION, "",
             f"Measured {time.strftime('%Y-%m-%d')} on {facts['host']} ({facts['cpus']} CPUs, {facts['ceph']}), "
             f"one fresh local BlueStore OSD started by fathom; {facts['engine']}, fathom at commit "
             f"{facts['commit']}. Whole run (cluster, prefill, both sweeps): {wall_s / 60:.1f} min.",
             f"Points: osd-classic's {', '.join(sorted({r['workload'] for r in rows}))} at iodepth "
             f"{', '.join(map(str, args.iodepths))}; numjobs {args.numjobs}, {args.images} image(s) of "
             f"{format_size(args.image_size)} prefilled (the study: 32 x 2 GiB, ten iodepths, 5 min per point: a "
             f"subset sized for this machine); cluster options "
             f"{', '.join(CACHE if args.set is None else args.set)}. "
             f"Fixed: {args.seconds:g} s measured after a {args.ramp:g} s ramp. "
             f"Steady: {args.metric} over a {args.window:g} s window, {crit}, min {args.min:g} s, "
             f"max {args.seconds:g} s. Each point ran both ways back to back, the order alternating.", "",
             "Command:", "", "```", f"make bench-steady   # = .venv/bin/python bench/steady_state.py "
             f"{' '.join(args.argv)}".rstrip(), "```", ""] + (
                 ["(The tables were computed again from that run's kept results store with `--from-db`.)", ""]
                 if args.from_db else []) + [
             f"Sweep time: fixed {doc['fixed_s']:.0f} s, steady {doc['steady_s']:.0f} s, ratio {ratio:.2f} "
             f"(target <= {1 / SPEEDUP:.2f}: {'met' if ratio <= 1 / SPEEDUP else 'NOT met'}). A point's time runs "
             "from the end of the point before it to its own end (gate, engine start, ramp and drain included).", "",
             "| workload | iodepth | fixed IOPS | steady IOPS | IOPS diff | fixed clat (ms) | steady clat (ms) "
             "| clat diff | steady state | fixed point (s) | steady point (s) | within 5% "
             f"| replay: stop at | replay: IOPS diff | replay: clat diff | fixed: window means "
             f"| fixed: stdev of {SPREAD_WINDOW_S:g} s means |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---|---:|"]
    for r in rows:
        state = f"reached at {r['steady_at_s']:.0f} s" if r["steady_state"] == "reached" else \
            f"not reached by {args.seconds:g} s"
        ok = within(r["iops_diff_pct"]) and within(r["lat_diff_pct"])
        lines.append(f"| {r['workload']} | {r['iodepth']} | {r['fixed_iops']:,.0f} | {r['steady_iops']:,.0f} | "
                     f"{r['iops_diff_pct']:+.1f}% | {r['fixed_lat_ms']:.3f} | {r['steady_lat_ms']:.3f} | "
                     f"{r['lat_diff_pct']:+.1f}% | {state} | {r['fixed_point_s']:.0f} | {r['steady_point_s']:.0f} | "
                     f"{'yes' if ok else 'NO'} | " + (
                         f"{r['replay_at_s']:.0f} s | {r['replay_iops_diff_pct']:+.1f}% | "
                         f"{r['replay_lat_diff_pct']:+.1f}% |" if r["replay_at_s"] is not None else
                         "never | | |") + (f" {r['fixed_wander_pct'][0]:+.0f}% .. {r['fixed_wander_pct'][1]:+.0f}% |"
                                            if r["fixed_wander_pct"] else " |")
                     + (f" {r['fixed_spread_pct']:.1f}% |" if r["fixed_spread_pct"] is not None else " |"))
    met = sum(within(r["iops_diff_pct"]) and within(r["lat_diff_pct"]) for r in rows)
    rmet = sum(within(r["replay_iops_diff_pct"]) and within(r["replay_lat_diff_pct"]) for r in rows)
    lines += ["", f"{met} of {len(rows)} points within {TOLERANCE_PCT:g}% on both IOPS and mean latency.", "",
              "Replay: the fixed point's own interval series run through the same criteria "
              "(`steady.first_steady`, as the live watch walks it), cut where the watch would have stopped "
              "it, against that fixed point's whole figures: the criteria's own error, without the drift "
              f"between two runs of one point. {rmet} of {len(rows)} points within {TOLERANCE_PCT:g}% that way.",
              "",
              f"Fixed: window means: the fixed point's consecutive {args.window:g} s means, lowest and highest, "
              "against its whole mean. Where they stray by more than the tolerance, the point has no steady "
              "state at that tolerance within its run: no stop on one window can match the whole mean, and "
              "two runs of the point need not agree either.", "",
              f"Fixed: stdev of {SPREAD_WINDOW_S:g} s means: how much the fixed point's throughput wanders on the "
              f"scale of a steady-state stop. A stop after about {SPREAD_WINDOW_S:g} s is off the whole mean by "
              "that much one time in three, so the 5% tolerance holds one time in twenty only where it is "
              "under 2.5%.", ""]
    return "\n".join(lines)




def facts() -> dict[str, Any]:
    from fathom.binaries import engine_path

    def out(argv: list[str]) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return ""

    return {"engine": out([str(engine_path()), "--version"]), "host": platform.node(), "cpus": os.cpu_count(),
            "commit": out(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) or "unknown",
            "ceph": out(["ceph", "--version"]).split("(")[0].strip()}


def _ran_with(argv: list[str]) -> list[str]:
    """The command line of the run itself: without --from-db, which only analyses a kept store again."""
    out, skip = [], False
    for a in argv:
        if skip or a.startswith("--from-db"):
            skip = a == "--from-db"
            continue
        out.append(a)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iodepths", default="1,16", help="comma-separated iodepths of the study to run (default 1,16)")
    ap.add_argument("--workloads", default="", help="comma-separated osd-classic workloads (default: all four)")
    ap.add_argument("--seconds", type=float, default=300.0, help="fixed measured seconds per point = steady max_s")
    ap.add_argument("--ramp", type=float, default=5.0, help="ramp seconds before measuring, both ways")
    ap.add_argument("--metric", default="iops", choices=("iops", "bw", "p99"))
    ap.add_argument("--window", type=float, default=10.0, help="steady-state window, s")
    ap.add_argument("--slope", type=float, default=1.0, help="max |slope|, %% of the window mean per s (0: none)")
    ap.add_argument("--deviation", type=float, default=10.0, help="max deviation, %% of the window mean (0: none)")
    ap.add_argument("--min", type=float, default=10.0, help="steady-state min_s")
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--image-size", default="1GiB")
    ap.add_argument("--numjobs", type=int, default=4, help="jobs per image (the study: 4)")
    ap.add_argument("--osd-size", default="20GiB")
    ap.add_argument("--set", action="append", default=None, metavar="SECTION.OPTION=VALUE",
                    help="a Ceph option for the bench's cluster (repeatable; default: "
                         f"{' '.join(CACHE)}): the study's 64 GiB of images outgrew the OSD's cache, this "
                         "machine's 4 GiB would not")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "steady-state.json"))
    ap.add_argument("--docs", default=None, help="replace this section of that Markdown file (docs/benchmarks.md)")
    ap.add_argument("--keep-db", default=None, help="keep the results store here (default: a temporary file)")
    ap.add_argument("--replay-grid", default=None, metavar="DB",
                    help="no run: replay the fixed points of this kept store through a grid of criteria (window "
                         "10/20/30 s, min 10/30/60 s, slope 1/0.5 %%/s, deviation 10/5 %%) and print the best")
    ap.add_argument("--from-db", default=None, help="no run: analyse the latest run of this kept store again "
                                                    "(the other options must be the ones it ran with)")
    args = ap.parse_args()
    args.argv = _ran_with(sys.argv[1:])
    args.iodepths = [int(x) for x in args.iodepths.split(",") if x]
    args.workloads = [x for x in args.workloads.split(",") if x]
    args.image_size = parse_size(args.image_size, "--image-size")

    if args.replay_grid:
        print(replay_grid(Path(args.replay_grid)))
        return 0
    if args.from_db:
        with Store(Path(args.from_db)) as st:
            run = st.run("latest")
        return report(Path(args.from_db), args, float(run.finished or 0) - float(run.created))

    suite = build_suite(args)
    n = len(suite["workloads"]) // 2
    est = n * (args.seconds + args.ramp + 4) + n * (args.ramp + args.window + 8)
    print(f"bench-steady: {n} points x (fixed {args.seconds:g} s, steady <= {args.seconds:g} s), ramp {args.ramp:g} s, "
          f"{args.images} images x {format_size(args.image_size)} prefilled, numjobs {args.numjobs}; "
          f"about {est / 60 + 2:.0f} min if points settle early", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-steady-"))
    path = tmp / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    spec.load(str(path))  # a bad derived suite fails here, before a cluster starts
    db = Path(args.keep_db) if args.keep_db else tmp / "results.db"
    env = {k: v for k, v in os.environ.items() if k not in ("CEPH_CONF", "CEPH_ARGS")}
    t0 = time.monotonic()
    proc = subprocess.run([FATHOM, "run", str(path), "--db", str(db), "--name", "steady-bench"], env=env,
                          stdin=subprocess.DEVNULL, cwd=tmp)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(f"fathom run exited {proc.returncode}; results store: {db}", file=sys.stderr)
        return proc.returncode
    code = report(db, args, wall)
    shutil.rmtree(tmp, ignore_errors=True)
    return code


def report(db: Path, args: argparse.Namespace, wall: float) -> int:
    doc, rows = collect(db)
    md = markdown(doc, rows, args, facts(), wall)
    print(md)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    if args.docs:
        update_docs(Path(args.docs), SECTION, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
