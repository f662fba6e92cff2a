"""`fathom slo`: a search on a real cluster ends with a stored answer, its probes and a report; the cases
with no answer say why; mistakes are named before anything runs."""

from __future__ import annotations

import json

import pytest
from conftest import run_fathom
from test_run import attach

from fathom.results.store import Store

RADOS = """\
name: slo-rados
prep:
  pools: [{name: bench, pg_num: 16, size: 1, application: rados}]
defaults: {engine: fathom-engine, interface: rados, pool: bench, bs: 4k, iodepth: 64, runtime: 3s}
workloads:
  - {name: put, rw: write}
slo: {p99: 200ms, probe: 3s, resolution: 25%}
"""

NULL = """\
name: slo-null
defaults: {engine: fathom-engine, interface: null, runtime: 2s, iodepth: 8}
workloads:
  - {name: a, rw: randread}
  - {name: b, rw: randwrite}
"""


def test_a_search_on_a_cluster_is_stored_and_reported(cluster, tmp_path, engine_ready):
    suite = tmp_path / "slo.yaml"
    suite.write_text(RADOS)
    db = tmp_path / "s.db"
    p = run_fathom("slo", str(suite), "--db", str(db), "--name", "s1", *attach(cluster), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "closed loop at iodepth 64" in p.stderr and "SLO search: p99 <= 200 ms" in p.stderr
    with Store(db) as st:
        run = st.run("s1")
        found = run.env["slo"]
        res = found["result"]
        points = st.points(run.id)
    assert res["status"] in ("found", "ceiling"), res["message"]
    cap = found["calibration"]["iops"]
    assert points[0]["params"].get("rate") is None and points[0]["metrics"]["iops"] == pytest.approx(cap)
    probes = res["probes"]
    assert len(points) == len(probes) + 1 and [pt["params"]["rate"] for pt in points[1:]] == \
        [pr["load"] for pr in probes]
    # the answer is the highest probe that met every target, at most what it achieved; every probe above it
    # failed or was not decided
    top = max((pr for pr in probes if pr["outcome"] == "meets"), key=lambda pr: pr["load"])
    assert (res["offered"] or res["load"]) == top["load"] and res["load"] <= top["load"]
    assert res["offered"] is None or res["load"] <= top["obs"]["achieved"]
    if res["status"] == "found":
        assert res["failed_at"] > top["load"] and res["why"]
        assert (res["failed_at"] - top["load"]) / top["load"] <= 0.25
    for pr, pt in zip(probes, points[1:]):
        # each probe ran long enough for its p99 (1,000 ops), its interval brackets its estimate
        est, lo, hi = pr["obs"]["percentiles"]["p99"]
        assert pr["obs"]["ops"] + pr["obs"]["errors"] >= 1000 or pr["outcome"] == "short"
        assert lo <= est <= hi
        assert pt["metrics"]["offered_rate_ops_s"] == pytest.approx(pr["load"])
    rep = tmp_path / "r.md"
    run_fathom("report", "s1", "--db", str(db), "-o", str(rep), check=True)
    text = rep.read_text()
    assert "## SLO search (s1)" in text and "p99 ms (95% CI)" in text and res["message"] in text
    # the search against itself: no verdict beyond its own resolution
    c = run_fathom("compare", "s1", "s1", "--db", str(db), "--format", "json", check=True)
    got = json.loads(c.stdout)["results"][0]
    assert got["verdict"] in ("same within the searches' resolution", "no verdict") and not got["regressed"]


def test_a_target_no_load_meets_names_the_lowest_probe(cluster, tmp_path, engine_ready):
    suite = tmp_path / "slo.yaml"
    suite.write_text(RADOS)
    db = tmp_path / "s.db"
    # 10 µs p99 for a write through one OSD: nothing meets it
    p = run_fathom("slo", str(suite), "--db", str(db), "--p99", "0.01ms", "--from", "400", "--min", "100",
                   *attach(cluster), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    with Store(db) as st:
        res = st.run("latest").env["slo"]["result"]
    assert res["status"] == "none" and res["load"] is None and res["failed_at"] == 100
    assert [pr["load"] for pr in res["probes"]] == [400, 200, 100]
    # the 100 ops/s probe ran >= 10 s for its 1,000 ops: its interval took its per-second batches into account
    assert (res["probes"][-1]["obs"]["batches"] or 0) >= 5
    # (where p99 stayed put from 400 to 100 ops/s, the answer says so before naming the lowest probe)
    assert "SLO search: no load meets p99 <= 0.01 ms: " in p.stderr
    assert "the lowest probe, 100 ops/s, failed" in p.stderr


@pytest.mark.parametrize("args, expected", [
    ([], ["needs a target", "--p99 5ms"]),
    (["--p99", "5ms"], ["2 workloads (a, b)", "--workload NAME"]),
    (["--p99", "5ms", "--workload", "c"], ["no workload 'c'", "a, b"]),
    (["--p99", "soon", "--workload", "a"], ["--p99", "duration"]),
    (["--p99", "5ms", "--workload", "a", "--error-rate", "200%"], ["--error-rate", "percentage"]),
    (["--p99", "5ms", "--workload", "a", "--from", "100", "--max", "50"], ["starts at 100", "50"]),
])
def test_mistakes_are_named_before_anything_runs(tmp_path, args, expected):
    suite = tmp_path / "n.yaml"
    suite.write_text(NULL)
    db = tmp_path / "n.db"
    p = run_fathom("slo", str(suite), "--db", str(db), *args, timeout=120)
    assert p.returncode != 0
    for part in expected:
        assert part in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_sweep_other_than_the_load_and_a_resume_are_refused(tmp_path, engine_ready):
    suite = tmp_path / "n.yaml"
    suite.write_text(NULL.replace("  - {name: b, rw: randwrite}\n", "") + "sweep: {bs: [4k, 8k]}\n")
    p = run_fathom("slo", str(suite), "--db", str(tmp_path / "n.db"), "--p99", "5ms", timeout=120)
    assert p.returncode == 2 and "sweeps bs: an SLO search loads one configuration" in p.stderr
    ok = tmp_path / "ok.yaml"
    ok.write_text(NULL.replace("  - {name: b, rw: randwrite}\n", ""))
    db = tmp_path / "ok.db"
    p = run_fathom("slo", str(ok), "--db", str(db), "--p99", "100ms", "--from", "500", "--max", "1000",
                   "--probe", "1s", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "every load met p99 <= 100 ms up to the search's bound, 1,000 ops/s" in p.stderr
    p = run_fathom("run", "--resume", "latest", "--db", str(db), timeout=60)
    assert p.returncode == 2 and "is an SLO search" in p.stderr


def test_show_prints_the_search_its_probes_and_their_rates(tmp_path, engine_ready):
    """`fathom show` of an SLO run: what was searched, the answer and why, a line per probe with its load,
    figures and verdict, and the probes' offered rate as a column of the point table (null interface: no
    cluster; a 1 µs p99 no load meets)."""
    suite = tmp_path / "n.yaml"
    suite.write_text(NULL.replace("  - {name: b, rw: randwrite}\n", ""))
    db = tmp_path / "n.db"
    p = run_fathom("slo", str(suite), "--db", str(db), "--p99", "0.001ms", "--from", "1000", "--min", "500",
                   "--max", "1000", "--probe", "1s", timeout=180)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        res = st.run("latest").env["slo"]["result"]
    assert res["status"] == "none" and [pr["load"] for pr in res["probes"]] == [1000, 500]
    out = run_fathom("show", "latest", "--db", str(db), check=True).stdout.splitlines()
    at = out.index("  SLO search: p99 <= 0.001 ms, workload a, by rate (open loop)")
    assert out[at + 1].startswith("    answer: none; failed at 500 ops/s; why: p99 ")
    assert out[at + 2] == f"    {res['message']}"
    head = out[at + 3].split()
    assert head[:4] == ["probe", "load", "ops", "p99"] and head[-3:] == ["merged", "verdict", "why"]
    for i, (line, pr) in enumerate(zip(out[at + 4:at + 6], res["probes"]), start=1):
        est, lo, hi = pr["obs"]["percentiles"]["p99"]
        assert line.split()[:4] == [str(i), f"{pr['load']:,.0f}", "ops/s", f"{pr['obs']['ops']:,}"]
        assert f"{est:.3g} ({lo:.3g}-{hi:.3g})" in line and "  fails  " in line and pr["reasons"][0] in line
    table = out[at + 6:]
    assert table[0].split()[:5] == ["#", "workload", "engine", "rate", "ops/s"]
    rows = [row for row in table[1:] if row.split() and row.split()[0].isdigit()]  # the points table's rows
    assert [row.split()[3] for row in rows] == ["1,000", "500"]


def test_a_null_target_search_never_answers_above_what_it_achieved(tmp_path, engine_ready):
    """4 slots of 10 ms complete at most 400 ops/s. A probe offered 6% or more over that cannot keep its
    schedule, although the drain at its window's end issues its whole backlog, and the answer is at most the
    rate its meeting probe achieved (no cluster: the null interface's delay_us). From 500 ops/s down and
    bisecting up again, the search probes above 425 ops/s however busy the host."""
    suite = tmp_path / "cap.yaml"
    suite.write_text("name: cap\ndefaults: {engine: fathom-engine, interface: null, rw: randread, iodepth: 4, "
                     "delay_us: 10000}\nworkloads:\n  - {name: a}\n"
                     "slo: {p99: 2s, start: 500, max: 500, resolution: 10%, probe: 3s}\n")
    db = tmp_path / "c.db"
    p = run_fathom("slo", str(suite), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        run = st.run("latest")
        res = run.env["slo"]["result"]
        achieved = {pt["params"]["rate"]: pt["metrics"]["achieved_rate_ops_s"] for pt in st.points(run.id)}
        seeds = [pt["result"]["extra"]["spec"]["seed"] for pt in st.points(run.id)]
    assert res["status"] == "found", res["message"]
    # each probe its own draw of arrivals (one seed replays one sequence: repeats would not be independent)
    assert len(set(seeds)) == len(seeds) == len(res["probes"]), seeds
    met = next(pr for pr in res["probes"] if pr["outcome"] == "meets" and pr["load"] == (res["offered"] or res["load"]))
    assert res["load"] <= met["obs"]["achieved"] <= achieved[met["load"]] and res["load"] <= 400
    over = [pr for pr in res["probes"] if pr["load"] >= 425]
    assert over and all(pr["outcome"] == "fails" and "schedule not kept" in pr["reasons"][0] for pr in over)


def test_a_floor_the_load_does_not_move_ends_the_search_and_says_so(tmp_path, engine_ready):
    """Ops of 20 ms (null interface, delay_us) have a p50 of 20 ms at any load below the 3,200 ops/s 64 slots
    complete: two halvings that leave it there end the search, which says why, instead of halving on down
    to its lower bound at ever longer probes."""
    suite = tmp_path / "floor.yaml"
    suite.write_text("name: floor\ndefaults: {engine: fathom-engine, interface: null, rw: randread, iodepth: 64, "
                     "delay_us: 20000}\nworkloads:\n  - {name: a}\n")
    db = tmp_path / "f.db"
    p = run_fathom("slo", str(suite), "--db", str(db), "--p50", "5ms", "--from", "400", "--probe", "1s",
                   timeout=300)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        res = st.run("latest").env["slo"]["result"]
    assert res["status"] == "none" and [pr["load"] for pr in res["probes"]] == [400, 200, 100]
    assert res["floor"]["percentile"] == "p50" and all(20 <= ms < 25 for ms in res["floor"]["ms"])
    assert "SLO search: no load meets p50 <= 5 ms: p50 stays at ~2" in p.stderr
    assert "from 400 ops/s down to 100 ops/s; the floor is not load-driven" in p.stderr
