"""Steady state end to end: `fathom run` stops a settled point through the engine's control channel, stores
when (and values that agree with its intervals), runs an unsettled one to its maximum, and reports both.

The null interface (no cluster) proves the runner, companion, store and report path in seconds; one
rbd point on the session's real cluster proves it against Ceph.
"""

from __future__ import annotations

import pytest
from conftest import run_fathom

from fathom.results import series
from fathom.suite import steady
from fathom.analysis import anomalies
from fathom.analysis.data import load_run
from fathom.results.store import Store

NULL_SUITE = """\
name: steady-null
defaults: {engine: fathom-engine, interface: null, bs: 4k}
workloads:
  - name: settles
    rw: randrw
    ramp_time: 1s
    steady_state: {metric: p99, window_s: 3s, criteria: {deviation: 90%}, min_s: 4s, max_s: 60s}
  - name: never
    steady_state: {metric: iops, window_s: 3s, criteria: {deviation: 0.0001%}, max_s: 4s}
  - {name: plain, runtime: 2s}
"""


def measured(intervals: list[dict]) -> list[dict]:
    return [i for i in intervals if not i.get("ramp")]


def check_matches_intervals(pt: dict, intervals: list[dict]) -> None:
    """The stored figures are the intervals' figures: the same ops over the same measured time. Without a ramp
    exactly; with one, up to the ops at its end (the summary leaves ops issued before the ramp's end to the ramp,
    an interval belongs to the ramp by its midpoint, and a tick may come late), within 1% here."""
    m = pt["metrics"]
    ops = sum(o["ops"] for i in measured(intervals) for o in i["ops"].values())
    if pt["params"]["ramp_time"]:
        assert ops == pytest.approx(m["total_ios"], rel=0.01), (ops, m["total_ios"])
    else:
        assert ops == m["total_ios"]
    assert m["iops"] == pytest.approx(m["total_ios"] / m["runtime_s"])
    dt = sum(i["dt"] for i in measured(intervals))
    assert m["runtime_s"] == pytest.approx(dt, abs=0.5)  # ramp boundary and drain, both under one interval


def steady_event(st: Store, run_id: int, point_id: int) -> dict:
    (ev,) = [e for e in st.events(run_id) if e["point_id"] == point_id and e["kind"] == "steady"]
    return ev


def test_null_points_stop_when_steady_or_run_to_their_maximum(tmp_path, engine_ready):
    suite = tmp_path / "steady.yaml"
    suite.write_text(NULL_SUITE)
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        run = st.run("latest")
        pts = {pt["workload"]: pt for pt in st.points(run.id)}
        assert all(pt["status"] == "done" for pt in pts.values())

        # settles: stopped cleanly through the control channel once the criteria held, after min_s
        pt = pts["settles"]
        m, res, ivs = pt["metrics"], pt["result"], st.intervals(pt["id"])
        assert m["steady_state"] == "reached" and 4.0 <= m["steady_s"] < 60.0
        assert res["stopped_early"] is True and res["extra"]["stop"] == "control"
        # p99 of each interval's read and write histograms merged, in ms
        assert res["stop_reason"].startswith(f"steady state reached at {m['steady_s']:.0f} s: p99 mean")
        assert m["steady_s"] <= m["runtime_s"] < 60.0
        check_matches_intervals(pt, ivs)
        # the stored intervals reproduce the decision: the same first steady window
        crit = steady.Criteria.of(pt["params"])
        got = steady.first_steady(series.merged_series(series.by_engine(ivs)), crit)
        assert got is not None and got.at_s == pytest.approx(m["steady_s"], abs=1e-3)
        ev = steady_event(st, run.id, pt["id"])
        assert ev["message"].startswith(f"steady state reached at {m['steady_s']:.0f} s")
        assert ev["data"]["verdict"]["deviation_pct"] == pytest.approx(got.deviation_pct, abs=1e-3)
        assert any(e["kind"] == "stop" and e["point_id"] == pt["id"] for e in st.events(run.id))

        # never: impossible criteria (three intervals' IOPS within 1 ppm); runs to max_s (its runtime) and
        # says so, with its last window
        pt = pts["never"]
        m, res, ivs = pt["metrics"], pt["result"], st.intervals(pt["id"])
        assert m["steady_state"] == "not reached" and m["steady_s"] is None
        assert res["stopped_early"] is False and res["extra"]["stop"] == "duration" and pt["params"]["runtime"] == 4
        check_matches_intervals(pt, ivs)
        samples = series.merged_series(series.by_engine(ivs))
        crit = steady.Criteria.of(pt["params"])
        assert steady.first_steady(samples, crit) is None
        ev = steady_event(st, run.id, pt["id"])
        assert ev["message"].startswith("steady state not reached by 4 s")
        # the last window the watch judged, as the stored intervals give it
        last = ev["data"]["verdict"]
        n = ev["data"]["intervals"]
        assert last["mean"] == pytest.approx(steady.check(samples[:n], crit).mean, rel=1e-6)

        # plain: no watch, no outcome
        pt = pts["plain"]
        assert pt["metrics"]["steady_state"] is None and pt["metrics"]["steady_s"] is None
        assert not [e for e in st.events(run.id) if e["point_id"] == pt["id"] and e["kind"] == "steady"]

        # an intended early stop is not an anomaly
        data = load_run(st, str(run.id))
        assert not {a.kind for a in anomalies.find(data, "settles")} & {"stopped_early", "short_window"}

    for ext in ("html", "md"):
        rep = tmp_path / f"report.{ext}"
        run_fathom("report", "latest", "--db", str(db), "-o", str(rep), check=True)
        text = rep.read_text()
        assert f"reached at {pts['settles']['metrics']['steady_s']:.0f} s" in text
        assert "not reached by 4 s (max_s)" in text
        assert ("<th>steady state</th>" if ext == "html" else "| steady state |") in text


RBD_SUITE = """\
name: steady-rbd
prep:
  pools: [{name: rbd, pg_num: 16}]
  images: {pool: rbd, count: 1, size: 64MiB}
workloads:
  - name: rw
    engine: fathom-engine
    interface: rbd
    rw: randwrite
    bs: 4k
    iodepth: 8
    steady_state: {metric: iops, window_s: 4s, criteria: {deviation: 60%}, min_s: 4s, max_s: 90s}
"""


@pytest.mark.cluster
def test_rbd_point_stops_at_steady_state_on_a_real_cluster(cluster, tmp_path, engine_ready):
    suite = tmp_path / "steady-rbd.yaml"
    suite.write_text(RBD_SUITE)
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), "--conf", str(cluster.conf_path), "--keyring",
                   str(cluster.keyring_path), timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(db) as st:
        run = st.run("latest")
        (pt,) = st.points(run.id)
        m, res, ivs = pt["metrics"], pt["result"], st.intervals(pt["id"])
        assert pt["status"] == "done" and m["steady_state"] == "reached", steady_event(st, run.id, pt["id"])
        assert res["extra"]["stop"] == "control" and m["steady_s"] <= m["runtime_s"] < 90.0
        check_matches_intervals(pt, ivs)
        got = steady.first_steady(series.merged_series(series.by_engine(ivs)), steady.Criteria.of(pt["params"]))
        assert got is not None and got.at_s == pytest.approx(m["steady_s"], abs=1e-3)
