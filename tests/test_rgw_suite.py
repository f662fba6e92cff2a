"""The rgw suite end to end on a real 4-OSD local cluster with RGW: its prep (placements rep3 and ec22, a user,
buckets with LocationConstraint), PUT then GET per size, the TLS and client-scaling blocks, RGW CPU, memory and
counters per point, the study's report rendered in Chromium, the published table imported and compared, and a
cleanup that leaves nothing of what the run made.

The suite runs as written except for its quick section, shrunk here through the suite's own mechanism (a copy
of rgw.yaml with a smaller `quick:`), so the module stays within a few minutes on 2 cores."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import yaml
from conftest import run_fathom
from test_report import _check_renders

from fathom.suite import spec

STUDY_CSV = Path(__file__).resolve().parents[1] / "tests" / "data" / "rgw-replica3-vs-ec22-2025.csv"


@pytest.fixture(scope="module")
def rgw_cluster(shared_rgw_cluster4):
    """conftest's 4-OSD cluster with RGW, shared with test_rgw_prep (the test compares with what it found)."""
    return shared_rgw_cluster4


def small_suite(tmp_path: Path) -> Path:
    """rgw.yaml with a smaller quick section: two sizes on both placements, TLS off/on, one to two clients."""
    doc = yaml.safe_load(spec.builtin_text("rgw"))
    doc["quick"] = {
        "defaults": {"numjobs": 2, "iodepth": 4, "max_inflight": "16MiB", "size": "16MiB", "runtime": "2s",
                     "ramp_time": "1s"},
        "workloads": [
            {"name": "rep3-vs-ec22", "sweep": {"placement": ["rep3", "ec22"], "object_size": ["64KiB", "4MiB"],
                                               "rw": ["write", "randread"]}},
            {"name": "tls", "sweep": {"object_size": ["64KiB"], "tls": [False, True], "rw": ["write", "randread"]}},
            {"name": "client-scaling", "sweep": {"object_size": ["64KiB"], "numjobs": [1, 2],
                                                 "rw": ["write", "randread"]}}],
        "repetitions": 1}
    f = tmp_path / "rgw-small.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


def test_quick_plan_fits_ten_minutes():
    from fathom.suite import plan

    pts = plan.expand(spec.load("rgw", quick=True).suite)
    assert plan.total_estimate_s(pts) < 420  # points only; the cluster start and prep come on top
    big = [p for p in pts if p.params["object_size"] == 256 * 2**20]
    # in-flight bytes capped the same for both placements
    assert {(p.params["placement"], p.params["iodepth"]) for p in big} == {("rep3", 1), ("ec22", 1)}
    # the published table's sizes, so a quick run compares with all of it
    assert {p.params["object_size"] for p in pts if p.workload == "rep3-vs-ec22"} == {
        64 * 1024, 4 * 2**20, 64 * 2**20, 256 * 2**20}


def test_rgw_suite_report_import_compare_cleanup(rgw_cluster, engine_ready, tmp_path):
    ceph = rgw_cluster.ceph()
    db = tmp_path / "r.db"
    users0 = set(ceph.radosgw_admin("user", "list", timeout=60))
    pools0 = set(ceph.ceph("osd", "pool", "ls"))
    placements0 = {p["key"] for p in ceph.radosgw_admin("zone", "get", timeout=60)["placement_pools"]}
    p = run_fathom("run", str(small_suite(tmp_path)), "--quick", "--conf", str(rgw_cluster.conf_path),
                   "--db", str(db), "--name", "rgw-small", timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]

    show = json.loads(run_fathom("show", "rgw-small", "--db", str(db), "--json", check=True).stdout)
    pts = show["points"]
    assert len(pts) == 16 and all(x["status"] == "done" for x in pts), [x["status"] for x in pts]
    for x in pts:
        m = x["metrics"]
        assert m["rgw_cores"] and m["rgw_cores"] > 0 and m["rgw_mem_mib"] > 10, (x["key"], m)
        assert m["rgw_reconciled"] == "ok", (x["key"], x["result"]["extra"].get("rgw_reconcile"))
        assert m["errors"] == 0
        if x["params"]["rw"] == "randread":
            assert 0 < m["ttfb_p50_ms"] <= m["p99_ms"]
    # GETs read what the PUT before them wrote, on the placement asked for
    rgw_env = show["run"]["env"]["rgw"]
    assert set(rgw_env["placements"]) == {"rep3", "ec22"} and "keys_file" not in rgw_env
    tls_on = [x for x in pts if x["params"].get("tls")]
    assert tls_on and all(x["result"]["extra"]["s3"]["tls"] for x in tls_on)
    capped = [x for x in pts if x["params"]["object_size"] == 4 * 2**20]
    assert {x["params"]["iodepth"] for x in capped} == {2}  # 16 MiB in flight / (2 clients x 4 MiB)

    # the study's report, with the published table beside it
    run_fathom("import", "table", str(STUDY_CSV), "--db", str(db), check=True)
    html = tmp_path / "rgw.html"
    run_fathom("report", "rgw-small", "rgw-replica3-vs-ec22-2025", "--db", str(db), "-o", str(html), check=True)
    text = html.read_text()
    for title in ("Replica 3 vs EC 2+2: relative difference", "Shape against the study", "TTFB p50",
                  "TLS at RGW off vs on", "Client scaling (clients on one host; not the study",
                  "RGW CPU and memory per point", "positive = replica 3 better"):
        assert title in text, title
    _check_renders(html, tmp_path, min_charts=1)
    md = tmp_path / "rgw.md"
    run_fathom("report", "rgw-small", "--db", str(db), "-o", str(md), check=True)
    assert "Headline maxima per operation and size class" in md.read_text()

    cmp = run_fathom("compare", "rgw-replica3-vs-ec22-2025", "rgw-small", "--db", str(db), check=True)
    assert "signs agree in" in cmp.stdout and re.search(r"^64KiB +PUT throughput +\+18\.0%", cmp.stdout, re.M), \
        cmp.stdout
    js = json.loads(run_fathom("compare", "rgw-replica3-vs-ec22-2025", "rgw-small", "--db", str(db),
                               "--format", "json", check=True).stdout)
    (res,) = js["results"]
    assert res["sizes"] == ["64KiB", "4MiB"] and res["signs_compared"] == 8

    # nothing of the run is left: users, buckets, placement targets, pools; settings put back
    assert set(ceph.radosgw_admin("user", "list", timeout=60)) == users0
    assert {p["key"] for p in ceph.radosgw_admin("zone", "get", timeout=60)["placement_pools"]} == placements0
    assert set(ceph.ceph("osd", "pool", "ls")) == pools0
    assert not [b for b in ceph.radosgw_admin("bucket", "list", timeout=60) if b.startswith("fathom-")]
    dump = ceph.ceph("config", "dump")
    assert not [c for c in dump if c["name"] == "rgw_override_bucket_index_max_shards"]
    # no S3 secret reached the store
    secret = rgw_cluster.s3()["secret_key"]
    con = sqlite3.connect(db)
    blob = b"".join(str(row).encode() for t in ("runs", "points", "events")
                    for row in con.execute(f"SELECT * FROM {t}"))  # noqa: S608
    assert secret.encode() not in blob and b"secret_key" not in blob
