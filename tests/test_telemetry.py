"""Telemetry: /proc sampling of real processes, perf-counter deltas from a real OSD's admin socket, window means."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from fathom import telemetry
from fathom.cluster.local import Daemon


def test_proc_sample_of_a_busy_child():
    p = subprocess.Popen(["python3", "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    try:
        s = telemetry.Sampler([Daemon("osd.fake", "osd", p.pid)], interval=0.5)
        s.start()
        time.sleep(2.0)
        samples = s.stop()
    finally:
        p.kill()
        p.wait()
    own = [x for x in samples if x["source"] == "osd.fake"]
    assert len(own) >= 3
    # a spinning process is close to one core; sampling noise aside it is far above zero and not above 2 cores
    assert all(0 < x["cpu_pct"] <= 200 for x in own[1:])
    assert all(x["rss_mib"] > 1 and x["vctx_s"] >= 0 and x["threads"] == 1 for x in own)
    assert any(x["source"] == "host" and 0 <= x["cpu_pct"] <= 100 for x in samples)
    assert s.cpu_s > 0 and s.cost_pct is not None
    assert telemetry.proc_sample(2**22 + 12345) is None  # a pid that does not exist


def test_ctx_switches_are_summed_over_threads():
    s = telemetry.proc_sample(os.getpid())
    one = open(f"/proc/{os.getpid()}/status").read()
    main_vol = int(one.split("voluntary_ctxt_switches:")[1].split()[0])
    assert s["vctx"] >= main_vol and s["threads"] >= 1


def test_perf_deltas_averages_and_counters():
    before = {"osd.0": {"osd": {"op_r": 10, "op_r_latency": {"avgcount": 10, "sum": 0.01, "avgtime": 0.001},
                                "numpg": 8},
                        "bluestore": {"commit_lat": {"avgcount": 5, "sum": 0.5}}}}
    after = {"osd.0": {"osd": {"op_r": 110, "op_r_latency": {"avgcount": 110, "sum": 0.21, "avgtime": 0.0019},
                               "numpg": 8},
                       "bluestore": {"commit_lat": {"avgcount": 5, "sum": 0.5}}}}
    d = telemetry.perf_deltas(before, after)["osd.0"]
    assert d["osd.op_r"] == 100
    assert d["osd.op_r_latency"]["count"] == 100 and d["osd.op_r_latency"]["avg"] == pytest.approx(0.002)
    assert "osd.numpg" not in d and "bluestore.commit_lat" not in d  # unchanged


def test_summarize_window():
    t0 = 1000.0
    s = []
    for i in range(1, 7):
        s.append({"ts": t0 + i, "dt": 1.0, "kind": "osd", "source": "osd.0", "cpu_pct": 10.0 * i, "rss_mib": 100.0,
                  "vctx_s": 5.0, "nvctx_s": 1.0})
        s.append({"ts": t0 + i, "dt": 1.0, "kind": "osd", "source": "osd.1", "cpu_pct": 10.0, "rss_mib": 50.0,
                  "vctx_s": 1.0, "nvctx_s": 1.0})
        s.append({"ts": t0 + i, "dt": 1.0, "kind": "host", "source": "host", "cpu_pct": 50.0, "rss_mib": 1.0})
    m = telemetry.summarize(s, t0 + 2, t0 + 6)  # ramp of 2 s excluded: samples covering (2,3] .. (5,6]
    assert m["osd_cpu"] == pytest.approx((30 + 40 + 50 + 60) / 4 + 10)  # summed over OSDs, mean over time
    assert m["osd_mem_mib"] == 150 and m["osd_ctx_switches_s"] == 8 and m["host_cpu_pct"] == 50


@pytest.mark.cluster
def test_admin_socket_perf_dump_of_a_real_osd(cluster, ceph, rados_pool):
    osds = [d for d in cluster.daemons() if d.kind == "osd"]
    before = telemetry.perf_dump(osds, cluster.run_dir)
    assert "osd" in before["osd.0"] and "bluestore" in before["osd.0"]
    ceph.rados("-p", rados_pool, "bench", "2", "write", "-t", "4", "-b", "4096", "--run-name", "telemetry-test",
               fmt_json=False, timeout=60)
    ceph.rados("-p", rados_pool, "cleanup", "--run-name", "telemetry-test", fmt_json=False, timeout=60)
    d = telemetry.perf_deltas(before, telemetry.perf_dump(osds, cluster.run_dir))["osd.0"]
    assert d["osd.op_w"] > 0 and d["osd.op_w_latency"]["count"] > 0 and d["osd.op_w_latency"]["avg"] > 0
    assert any(k.startswith("bluestore.") for k in d)
    s = telemetry.Sampler(cluster.daemons())
    s.start()
    time.sleep(2.2)
    samples = s.stop()
    assert {"osd.0", "mon.a", "mgr.x", "host"} <= {x["source"] for x in samples}
    osd = [x for x in samples if x["source"] == "osd.0"]
    assert osd and all(x["rss_mib"] > 10 and x["threads"] > 10 for x in osd)
