"""Engine adapters: registry, output parsing (fio json+ from a real fio run, rados bench JSON), job files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fathom import engines
from fathom.cluster.ceph import Connection
from fathom.engines import fathom_engine
from fathom.engines import fio, rados_bench
from fathom.interfaces.base import PointContext
from fathom.engines.base import last_json, run_child
from fathom.results.model import base_metrics


def test_registry_has_the_three_engines():
    assert {"fathom-engine", "fio", "rados-bench"} <= set(engines.names())
    for name in engines.names():
        a = engines.get(name)
        assert a.name == name and a.binary_hint
    with pytest.raises(Exception, match="unknown engine"):
        engines.get("iometer")


def ctx(tmp_path: Path, images=("img0", "img1")) -> PointContext:
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\n")
    return PointContext(conn=Connection(conf=str(conf), name="client.bench"), pool="p", images=list(images),
                        run_tag="fathom-1-abc", workdir=tmp_path, timeout=60)


PARAMS = {"engine": "fio", "interface": "rbd", "pool": "p", "rw": "randread", "bs": 4096, "iodepth": 8, "numjobs": 2,
          "rwmixread": 70, "runtime": 3.0, "ramp_time": 1.5, "size": None, "object_size": None, "drop_caches": False}


def test_fio_job_file_one_section_per_image(tmp_path):
    text = fio.job_file(PARAMS, ctx(tmp_path))
    assert "ioengine=rbd" in text and "clientname=bench" in text and "pool=p" in text
    assert "numjobs=2" in text and "iodepth=8" in text and "runtime=3000ms" in text and "ramp_time=1500ms" in text
    assert text.count("rbdname=") == 2 and "[img1]" in text
    assert "rwmixread" not in text and "offset_increment" not in text
    c = ctx(tmp_path)
    c.image_size = 64 * 2**20
    sliced = fio.job_file(PARAMS, c)  # two jobs per image: each its own half, as fathom-engine does
    assert f"size={32 * 2**20}" in sliced and f"offset_increment={32 * 2**20}" in sliced
    assert "rwmixread=70" in fio.job_file({**PARAMS, "rw": "randrw"}, ctx(tmp_path))


def test_fio_json_plus_from_a_real_run(tmp_path):
    """fio's null engine gives a real json+ document: jobs summed, bins merged into one histogram."""
    out = subprocess.run(["fio", "--ioengine=null", "--rw=randread", "--bs=4k", "--size=64m", "--number_ios=20000",
                          "--output-format=json+", "--name=a", "--name=b"],
                         capture_output=True, text=True, check=True).stdout
    doc = fio._fio_json("fio: some warning line\n" + out)
    ops, extra = fio.parse_output(doc)
    r = ops["read"]
    per_job = [j["read"] for j in doc["jobs"]]
    n = sum(j["total_ios"] for j in per_job)
    assert r.ops == n > 0 and r.bytes == n * 4096 and extra["jobs"] == 2
    assert r.hist and r.hist.startswith("HISTFAA")
    assert set(r.percentiles_ns) == {"p50", "p90", "p99", "p999"}
    assert r.lat_min_ns <= r.percentiles_ns["p50"] <= r.percentiles_ns["p999"] <= r.lat_max_ns * 1.01
    assert extra["fio_usr_cpu"] == pytest.approx(sum(j["usr_cpu"] for j in doc["jobs"]))
    assert "write" not in ops


def test_hdr_from_bins_percentiles():
    hist, pct = fio.hdr_from_bins({1000: 90, 2000: 9, 100000: 1})
    assert hist and pct["p50"] == pytest.approx(1000, rel=0.01) and pct["p99"] == pytest.approx(2000, rel=0.01)
    assert pct["p999"] == pytest.approx(100000, rel=0.01)
    assert fio.hdr_from_bins({}) == (None, {})


RADOS_JSON = ('hints = 1\n{"concurrent_ios":"16","object_size":"4194304","op_size":"4194304","seconds_to_run":"3",'
              '"total_time_run":"3.1","total_writes_made":"62","write_size":"4194304","object_size":"4194304",'
              '"bandwidth":"80.0","stddev_bandwidth":"5.1","max_bandwidth":"88","min_bandwidth":"72",'
              '"average_iops":20,"stddev_iops":"3.2e+278","max_iops":22,"min_iops":18,"average_latency":"0.75",'
              '"stddev_latency":"0.1","max_latency":"1.2","min_latency":"0.3"}\n')


def test_rados_bench_json_with_stray_line_and_garbage_stddev():
    doc = last_json(RADOS_JSON)
    op, extra = rados_bench.parse_output({k: _num(v) for k, v in doc.items()}, "write")
    assert op.ops == 62 and op.bytes == 62 * 4194304 and op.runtime_s == pytest.approx(3.1)
    assert op.lat_mean_ns == pytest.approx(0.75e9) and op.lat_min_ns == pytest.approx(0.3e9)
    assert "stddev_iops" not in extra["rados_bench"]  # not trusted, kept apart
    assert extra["rados_bench_stddev_iops_untrusted"] is not None


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def test_rados_bench_unsupported_explains():
    from fathom.suite import spec

    text = ("name: x\nprep: {pools: [{name: b, application: rados}]}\n"
            "workloads: [{name: w, engine: rados-bench, interface: rados, pool: b, rw: randwrite}]\n")
    with pytest.raises(spec.SuiteError, match="rados-bench runs rw write"):
        spec.parse(text, "x.yaml")


def test_fathom_engine_point_spec(tmp_path):
    s = fathom_engine.point_spec({**PARAMS, "engine": "fathom-engine"}, ctx(tmp_path)).to_json()
    t = s["target"]
    assert t["kind"] == "rbd" and t["images"] == ["img0", "img1"] and t["numjobs"] == 2
    assert s["load"] == {"iodepth": 8, "duration_s": 4.5, "ramp_s": 1.5, "arrival": "uniform"}
    assert t["connection"]["name"] == "client.bench" and "key" not in t["connection"]
    r = fathom_engine.point_spec({**PARAMS, "interface": "rados", "rw": "write", "bs": 65536}, ctx(tmp_path)).to_json()
    assert {k: v for k, v in r["target"].items() if k != "connection"} == {
        "kind": "rados", "pool": "p", "op": "write", "pattern": "seq", "prefix": "fathom-1-abc", "op_size": 65536,
        "object_size": 65536}
    assert "bytes" not in r["load"]
    # size bounds a rados write as it bounds an s3 put: new objects until each job wrote size bytes.
    b = fathom_engine.point_spec({**PARAMS, "interface": "rados", "rw": "write", "size": 1 << 30}, ctx(tmp_path))
    assert b.to_json()["load"]["bytes"] == 1 << 30
    rd = fathom_engine.point_spec({**PARAMS, "interface": "rados", "rw": "read", "size": 1 << 30}, ctx(tmp_path))
    assert "bytes" not in rd.to_json()["load"]
    n = fathom_engine.point_spec({**PARAMS, "interface": "null", "rw": "readwrite"}, ctx(tmp_path)).to_json()
    assert n["target"] == {"kind": "null", "rw": "rw", "rwmixread": 70, "bs": 4096, "numjobs": 2, "delay_us": 0}


def test_fathom_engine_summary_to_point_result():
    summary = {"type": "summary", "measured_s": 2.0, "ramp_s": 1.0, "cpu": {"user_s": 0.5, "sys_s": 0.25},
               "ops": {"read": {"ops": 2000, "bytes": 2000 * 4096, "errors": 0,
                                "lat_ns": {"mean": 1e6, "stdev": 2e5, "min": 1e5, "max": 5e6, "p50": 9e5,
                                           "p90": 1.2e6, "p99": 2e6, "p999": 4e6}}}}
    r = fathom_engine.result_from_summary(summary, wall_s=3.2, user_s=0.6, sys_s=0.3)
    m = base_metrics(r)
    assert m["iops"] == 1000 and m["clat_ms"] == 1.0 and m["p99_ms"] == 2.0 and m["total_ios"] == 2000
    assert m["usr_cpu"] == pytest.approx(100 * 0.6 / 3.2)


def test_run_child_measures_cpu_and_streams(tmp_path):
    seen: list[str] = []
    pids: list = []
    c = ctx(tmp_path)
    c.on_child = pids.append
    res = run_child(["python3", "-c", "import sys\nfor i in range(3): print('line', i, end='\\r')\n"
                                       "sum(range(3_000_000))\nprint(json := 1)"], c, on_chunk=seen.append)
    assert res.rc == 0 and seen[:3] == ["line 0", "line 1", "line 2"]
    assert res.user_s > 0 and pids[0] > 0 and pids[-1] is None
    assert json.loads("1") == 1
