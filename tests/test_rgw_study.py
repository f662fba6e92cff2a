"""The RGW study's pure logic: suite validation, the in-flight cap, the gains table import, the replica 3 vs
EC 2+2 gains and their shape against the study, and the report section (points built here: no cluster)."""

from __future__ import annotations

import pytest

from fathom.results import importers
from fathom.suite import plan, spec
from fathom.analysis import rgw_gains
from fathom.analysis.data import RunData, StoredPoint, load_run
from fathom.report import rgw_study
from fathom.results.store import Store
from test_rgw_suite import STUDY_CSV

BASE = """
name: t
cluster: {kind: local, osds: 4, rgw: true}
prep:
  pools:
    - {name: idx, size: 3, application: rgw}
    - {name: d, ec_k: 2, ec_m: 2, application: rgw}
  rgw:
    placements:
      ec22: {data_pool: d, index_pool: idx, data_extra_pool: idx}
defaults: {interface: s3, object_size: 64MiB, numjobs: 2, iodepth: 8, max_inflight: 256MiB}
workloads:
  - {name: w, placement: ec22, rw: write}
"""


def test_suite_rgw_fields_and_cross_checks():
    s = spec.parse(BASE)
    (p,) = plan.expand(s)
    assert p.params["placement"] == "ec22" and p.params["iodepth"] == 2 and p.params["iodepth_asked"] == 8
    with pytest.raises(spec.SuiteError, match=r"placement 'rep3' is not one of prep.rgw.placements \(defined: ec22\)"):
        spec.parse(BASE.replace("placement: ec22, rw", "placement: rep3, rw"))
    with pytest.raises(spec.SuiteError, match="the local cluster needs rgw: true"):
        spec.parse(BASE.replace("rgw: true}", "rgw: false}"))
    with pytest.raises(spec.SuiteError, match="'nope' is not one of prep.pools"):
        spec.parse(BASE.replace("data_pool: d,", "data_pool: nope,"))
    with pytest.raises(spec.SuiteError, match="tls applies to the s3 interface, not to rbd"):
        spec.parse("name: t\nworkloads: [{name: w, tls: true}]\n")
    swept = BASE.replace("placement: ec22, rw: write}", "rw: write, sweep: {placement: [ec22, rep9]}}")
    with pytest.raises(spec.SuiteError, match="placement 'rep9'"):
        spec.parse(swept)


def test_builtin_suite_blocks():
    s = spec.load("rgw").suite
    names = [w.name for w in s.workloads]
    assert names == ["rep3-vs-ec22", "tls", "client-scaling"]
    pts = plan.expand(s)
    study = [p for p in pts if p.workload == "rep3-vs-ec22" and p.rep == 1]
    assert len(study) == 2 * 6 * 2  # placements x sizes x (PUT, GET)
    # PUT then GET of the same set, back to back
    assert [p.params["rw"] for p in study[:2]] == ["write", "randread"]
    assert {p.params["iodepth"] for p in study if p.params["object_size"] == 256 * 2**20} == {1}


def test_import_gains_table_without_split_by(tmp_path):
    with Store(tmp_path / "s.db") as st:
        (rid,) = importers.import_table(st, str(STUDY_CSV))
        run = load_run(st, str(rid))
    assert run.name == "rgw-replica3-vs-ec22-2025" and rgw_gains.is_gains_table(run)
    g = rgw_gains.published_gains(run)
    assert g[64 * 1024] == {"put_throughput_gain_pct": 18, "get_throughput_gain_pct": 37,
                            "put_latency_gain_pct": 18, "get_latency_gain_pct": 33}
    assert sorted(g) == [64 * 1024, 4 * 2**20, 64 * 2**20, 256 * 2**20]
    assert "positive = replica 3 better" in (run.source or "")


def test_table_without_a_split_column_is_one_run(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("workload,iodepth,iops\nrandread4k,1,100\nrandread4k,2,180\n")
    with Store(tmp_path / "s.db") as st:
        (rid,) = importers.import_table(st, str(f))
        assert st.run(rid).name == "t" and len(st.points(rid)) == 2


def pt(placement: str, size: int, rw: str, bw: float, lat: float, **extra: float) -> StoredPoint:
    return StoredPoint(run="r", run_id=1, workload="rep3-vs-ec22",
                 params={"interface": "s3", "placement": placement, "object_size": size, "rw": rw, "numjobs": 2,
                         "iodepth": 4, "tls": False},
                 metrics={"bw_mib_s": bw, "iops": bw * 2**20 / size, "clat_ms": lat, "p99_ms": lat * 2,
                          "rgw_cores": 0.5, "rgw_mem_mib": 200.0, "rgw_reconciled": "ok", **extra})


def test_gains_definitions_and_shape():
    k64, m4 = 64 * 1024, 4 * 2**20
    run = RunData("r", [1], "suite", "done", None, {}, "rgw", [
        pt("rep3", k64, "write", 12.0, 10.0), pt("ec22", k64, "write", 10.0, 12.0),
        pt("rep3", k64, "randread", 30.0, 4.0, ttfb_p50_ms=2.0), pt("ec22", k64, "randread", 20.0, 5.0,
                                                                       ttfb_p50_ms=3.0),
        pt("rep3", m4, "write", 40.0, 100.0), pt("ec22", m4, "write", 50.0, 80.0),
        pt("rep3", m4, "randread", 90.0, 40.0), pt("ec22", m4, "randread", 80.0, 45.0)], [])
    g = rgw_gains.measured_gains([run])
    assert g[k64]["put_throughput_gain_pct"] == pytest.approx(20.0)  # 12 / 10 - 1
    assert g[k64]["put_latency_gain_pct"] == pytest.approx(20.0)  # 12 / 10 - 1: replica 3 lower latency
    assert g[k64]["get_ttfb_p50_gain_pct"] == pytest.approx(50.0)
    assert g[m4]["put_throughput_gain_pct"] == pytest.approx(-20.0)
    assert g[k64]["put_littles_residual_pct"] == pytest.approx(0.0)
    study = {k64: {c: 18.0 for c in rgw_gains.GAIN_COLUMNS}, m4: {c: 6.0 for c in rgw_gains.GAIN_COLUMNS}}
    sh = rgw_gains.shape(study, g)
    assert sh["signs_compared"] == 8
    bad = {(r["size"], r["gain"]) for r in sh["rows"] if r["sign_agrees"] is False}
    assert bad == {("4MiB", "put_throughput_gain_pct"), ("4MiB", "put_latency_gain_pct")}
    assert sh["trends"]["put_throughput_gain_pct"] == {"study": "falls", "fathom": "falls"}
    (sec,) = rgw_study.sections([run])
    titles = [t.title for t in sec.tables]
    assert titles[0].startswith("Replica 3 vs EC 2+2") and any("Headline" in t for t in titles)
    assert sec.tables[0].rows[0][:3] == ["64KiB", "+20.0%", "+50.0%"]
    assert rgw_study.sections([RunData("x", [1], "suite", "done", None, {}, "x", [], [])]) == []


def test_repetitions_merge_their_histograms_not_their_percentiles():
    from fathom.results import hdr

    def hist(values_ms: list[float]) -> str:
        h = hdr.new()
        for v in values_ms:
            h.record_value(int(v * 1e6))
        return hdr.encode(h)

    k64 = 64 * 1024
    # two repetitions: one calm (p99 1 ms, 9000 ops), one with a slow tail (p99 50 ms, 1000 ops)
    calm = pt("rep3", k64, "write", 10.0, 1.0, total_ios=9000.0, p99_ms=1.0)
    calm.hists = {"all": hist([1.0] * 9000)}
    slow = pt("rep3", k64, "write", 10.0, 10.0, total_ios=1000.0, p99_ms=50.0)
    slow.hists = {"all": hist([1.0] * 900 + [50.0] * 100)}
    cell = rgw_gains.Cell([calm, slow])
    # merged: 100 slow of 10000 ops is exactly the 1% tail, so the p99 is 1 ms; the mean of p99s says 25.5 ms
    assert cell.value("p99_ms") == pytest.approx(1.0, rel=0.01) and cell.mean("p99_ms") == 25.5
    assert cell.value("clat_ms") == pytest.approx((1.0 * 9000 + 10.0 * 1000) / 10000)  # weighted by ops
    cell.points[1].hists = {}
    assert cell.value("p99_ms") is None  # without every histogram: n/a, never an average of percentiles


def test_node_scaling_from_runs_labelled_nodes():
    m4 = 4 * 2**20

    def run(rid: int, nodes: str | None, bws: list[float]) -> RunData:
        pts = [pt("ec22", m4, "randread", bw, 40.0) for bw in bws]
        for i, p in enumerate(pts):
            p.run_id, p.workload, p.params = rid, "client-scaling", {**p.params, "numjobs": 2 ** i}
        return RunData(f"r{rid}", [rid], "suite", "done", None, {"labels": {"nodes": nodes}} if nodes else {},
                       "rgw", pts, [])

    runs = [run(1, "4", [100.0, 150.0]), run(2, "12", [300.0, 410.0]), run(3, "8", [200.0, 260.0]),
            run(4, "4", [120.0, 170.0])]
    (sec,) = rgw_study.sections(runs)
    (t,) = [t for t in sec.tables if t.title.startswith("Node scaling")]
    # each run's peak over its client levels, the mean over runs of one node count, nodes in numeric order
    assert [r[2:4] + r[-1:] for r in t.rows] == [["4", "160.00", "2"], ["8", "260.00", "1"], ["12", "410.00", "1"]]
    # per-node efficiency from the smallest level: 260/160 over 8/4 is 81%, 410/160 over 12/4 is 85%
    assert [r[4:6] for r in t.rows] == [["-", "-"], ["81%", "97%"], ["85%", "97%"]]  # GET: the study's 97%
    assert any(c.slug == "rgw-nodes" for c in sec.charts)
    # one node count, or no labels: no node scaling
    (sec,) = rgw_study.sections([run(1, "4", [100.0]), run(2, None, [300.0])])
    assert not any(t.title.startswith("Node scaling") for t in sec.tables)
