"""Telemetry: /proc sampling of real processes, perf-counter deltas from a real OSD's admin socket, window means."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from fathom.results import model
from fathom.results import usage
from fathom.servers import telemetry
from fathom.cluster.local import Daemon, LocalCluster


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
    d = usage.perf_deltas(before, after)["osd.0"]
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
    m = usage.summarize(s, t0 + 2, t0 + 6)  # ramp of 2 s excluded: samples covering (2,3] .. (5,6]
    assert m["osd_cpu"] == pytest.approx((30 + 40 + 50 + 60) / 4 + 10)  # summed over OSDs, mean over time
    assert m["osd_mem_mib"] == 150 and m["osd_ctx_switches_s"] == 8 and m["host_cpu_pct"] == 50



def _proc(ts: float, kind: str, source: str, cpu: float, rss: float, vctx: float = 0.0, nvctx: float = 0.0) -> dict:
    return {"ts": ts, "dt": 1.0, "kind": kind, "source": source, "cpu_pct": cpu, "cores": cpu / 100, "rss_mib": rss,
            "vctx_s": vctx, "nvctx_s": nvctx, "threads": 10}


def test_summarize_every_daemon_kind():
    """Two OSDs, one RGW, one MDS (seen at 2 of 3 sample times), host and engine: per-kind sums, means over time."""
    t0 = 2000.0
    s = []
    for i in range(1, 4):
        ts = t0 + i
        s += [_proc(ts, "osd", "osd.0", 100.0 * i, 400.0, 10.0, 2.0),
              _proc(ts, "osd", "osd.1", 50.0, 300.0, 4.0, 0.0),
              _proc(ts, "rgw", "client.rgw.fathom", 20.0 * i, 80.0 + i, 30.0, 3.0),
              _proc(ts, "engine", "engine", 150.0, 60.0, 1.0, 1.0),
              {"ts": ts, "dt": 1.0, "kind": "host", "source": "host", "cpu_pct": 40.0 + i, "rss_mib": 3000.0}]
        if i != 2:  # the MDS was missing from one sample: the mean is over the times it was seen
            s.append(_proc(ts, "mds", "mds.a", 6.0 * i, 25.0, 2.0, 0.0))
    m = usage.summarize(s, t0, t0 + 3)
    assert m["osd_cpu"] == pytest.approx((150 + 250 + 350) / 3)  # (100i + 50) summed over OSDs, mean over time
    assert m["osd_cores"] == pytest.approx(2.5) and m["osd_mem_mib"] == 700 and m["osd_ctx_switches_s"] == 16
    assert m["rgw_cpu"] == pytest.approx(40) and m["rgw_cores"] == pytest.approx(0.4)
    assert m["rgw_mem_mib"] == pytest.approx(82) and m["rgw_ctx_switches_s"] == 33
    assert m["mds_cpu"] == pytest.approx((6 + 18) / 2) and m["mds_mem_mib"] == 25 and m["mds_ctx_switches_s"] == 2
    assert m["host_cpu_pct"] == pytest.approx(42) and m["engine_cpu_pct"] == 150
    assert m["telemetry_samples"] == 3
    # kinds that were not sampled have no keys (not zeros); host and engine are not daemon kinds
    assert not any(k.startswith(("mon_", "mgr_", "ganesha_", "fuse_", "host_cores", "engine_cores")) for k in m)
    daemon_keys = {k for k in m if k not in ("host_cpu_pct", "engine_cpu_pct", "telemetry_samples")}
    assert daemon_keys == {c for kind in ("osd", "rgw", "mds") for c in model.daemon_columns(kind)}


def test_summarize_any_kind_string_and_window():
    """A kind fathom does not know yet gets the same columns; samples outside the window are left out."""
    s = [_proc(10.0, "ganesha", "ganesha.a", 999.0, 1.0),  # before the window (covers 9.5 .. 10.0)
         _proc(12.0, "ganesha", "ganesha.a", 30.0, 40.0, 5.0, 5.0),
         _proc(12.0, "newd", "newd.0", 12.0, 8.0)]
    m = usage.summarize(s, 11.0, 12.0)
    assert (m["ganesha_cpu"], m["ganesha_mem_mib"], m["ganesha_ctx_switches_s"]) == (30.0, 40.0, 10.0)
    assert (m["newd_cpu"], m["newd_cores"], m["newd_mem_mib"]) == (12.0, 0.12, 8.0)
    assert m["host_cpu_pct"] is None and m["engine_cpu_pct"] is None and "osd_cpu" not in m


def test_metric_columns_cover_every_known_kind():
    for kind in model.DAEMON_KINDS:
        cols = model.daemon_columns(kind)
        assert list(cols) == [f"{kind}_cpu", f"{kind}_cores", f"{kind}_mem_mib", f"{kind}_ctx_switches_s"]
        assert all(c in model.METRIC_COLUMNS for c in cols)
    d = model.METRIC_COLUMNS
    assert "% of one core" in d["rgw_cpu"] and "MiB" in d["mds_mem_mib"] and "per second" in d["mon_ctx_switches_s"]
    assert "cores" in d["fuse_cores"] and "NFS-Ganesha" in d["ganesha_cpu"]
    assert model.daemon_kinds_in([{"usr_cpu": 5.0, "mgr_cpu": 1.0, "osd_mem_mib": None},
                                  {"zeta_cores": 0.1, "mds_mem_mib": 3.0, "osd_cpu": 9.0}]) == ["osd", "mds", "mgr",
                                                                                                   "zeta"]

@pytest.mark.cluster
def test_admin_socket_perf_dump_of_a_real_osd(cluster, ceph, rados_pool):
    osds = [d for d in cluster.daemons() if d.kind == "osd"]
    before = telemetry.perf_dump(osds, cluster.run_dir)
    assert "osd" in before["osd.0"] and "bluestore" in before["osd.0"]
    ceph.rados("-p", rados_pool, "bench", "2", "write", "-t", "4", "-b", "4096", "--run-name", "telemetry-test",
               fmt_json=False, timeout=60)
    ceph.rados("-p", rados_pool, "cleanup", "--run-name", "telemetry-test", fmt_json=False, timeout=60)
    d = usage.perf_deltas(before, telemetry.perf_dump(osds, cluster.run_dir))["osd.0"]
    assert d["osd.op_w"] > 0 and d["osd.op_w_latency"]["count"] > 0 and d["osd.op_w_latency"]["avg"] > 0
    assert any(k.startswith("bluestore.") for k in d)
    s = telemetry.Sampler(cluster.daemons())
    s.start()
    time.sleep(2.2)
    samples = s.stop()
    assert {"osd.0", "mon.a", "mgr.x", "host"} <= {x["source"] for x in samples}
    osd = [x for x in samples if x["source"] == "osd.0"]
    assert osd and all(x["rss_mib"] > 10 and x["threads"] > 10 for x in osd)


@pytest.mark.cluster
def test_sampler_sees_rgw_and_mds_of_a_real_cluster(tmp_path):
    """A cluster of its own with RGW and an MDS (~25 s): every daemon kind is sampled and summarized."""
    c = LocalCluster(tmp_path / "gw")
    c.up(osds=1, rgw=True, mds=True)
    try:
        daemons = c.daemons()
        assert {d.kind for d in daemons} == {"mon", "mgr", "osd", "rgw", "mds"}
        s = telemetry.Sampler(daemons)
        s.start()
        t0 = time.time()
        time.sleep(3.2)
        samples = s.stop()
        t1 = time.time()
        for kind in ("rgw", "mds", "mon", "mgr", "osd"):
            rows = [x for x in samples if x["kind"] == kind]
            assert len(rows) >= 3, (kind, rows)
            assert all(x["cpu_pct"] >= 0 and x["rss_mib"] > 5 and x["threads"] > 1 for x in rows), rows
        m = usage.summarize(samples, t0, t1)
        assert m["rgw_mem_mib"] > 0 and m["mds_mem_mib"] > 0 and m["mon_mem_mib"] > 0 and m["mgr_mem_mib"] > 0
        assert m["rgw_cpu"] is not None and m["rgw_cores"] == pytest.approx(m["rgw_cpu"] / 100)
        assert m["mds_ctx_switches_s"] > 0  # an idle MDS still ticks (beacons, log flushes)
    finally:
        c.down()


def test_summarize_hosts_each_on_its_own_sample_times():
    """Two cluster hosts sampling half a second apart (never at one instant) and this host as a client: each
    kind is summed over hosts of each host's mean; host CPU is busy cores over all cores; NIC bytes add up;
    the client host's own CPU is left out of host_cpu_pct."""
    t0 = 3000.0
    s = []
    for i in range(1, 6):
        for host, shift, osd_cpu, busy, ncpu, rx in (("a", 0.0, 80.0, 1.0, 4, 100 * 2**20),
                                                     ("b", 0.5, 40.0, 3.0, 8, 300 * 2**20)):
            ts = t0 + i + shift
            s.append({**_proc(ts, "osd", f"osd.{host}", osd_cpu, 1000.0), "host": host, "via": "ssh"})
            s.append({"ts": ts, "dt": 1.0, "kind": "host", "source": "host", "cpu_pct": 100.0 * busy / ncpu,
                      "cores": busy, "ncpu": ncpu, "rss_mib": 1.0, "host": host, "via": "ssh",
                      "net_rx_bytes_s": rx, "net_tx_bytes_s": rx / 2})
        s.append({"ts": t0 + i + 0.2, "dt": 1.0, "kind": "client_host", "source": "host", "cpu_pct": 99.0,
                  "cores": 1.98, "ncpu": 2, "rss_mib": 1.0})
    m = usage.summarize(s, t0 + 1, t0 + 5)
    assert m["osd_cpu"] == pytest.approx(120.0)  # 80 + 40: summed over hosts (matching by time would average)
    assert m["osd_mem_mib"] == 2000.0
    assert m["host_cpu_pct"] == pytest.approx(100.0 * (1 + 3) / (4 + 8))  # busy cores over all cores
    assert m["server_hosts"] == 2
    assert m["net_rx_mib_s"] == pytest.approx(400.0) and m["net_tx_mib_s"] == pytest.approx(200.0)
    assert m["net_busiest_host_mib_s"] == pytest.approx(300.0)
    per = usage.per_host(s, t0 + 1, t0 + 5)
    assert per["a"]["osd_cpu"] == pytest.approx(80.0) and per["b"]["host_cpu_pct"] == pytest.approx(37.5)
    assert per["a"]["via"] == "ssh" and set(per) == {"a", "b"}  # the client host has no cluster figures


def test_emulated_hosts_add_their_nics_and_no_cores():
    """A machine sampled by its own /proc and two emulated hosts on it (fathom.cluster.box): the hosts' NIC bytes
    add up, their daemons are theirs, and host CPU stays the machine's (their cores are its cores)."""
    t0, s = 5000.0, []
    for i in range(1, 6):
        ts = t0 + i
        s.append({"ts": ts, "dt": 1.0, "kind": "host", "source": "host", "cpu_pct": 50.0, "cores": 1.0, "ncpu": 2,
                  "rss_mib": 1.0})
        for host, tx in (("host1", 4 * 2**20), ("host2", 2 * 2**20)):
            s.append({**_proc(ts, "osd", f"osd.{host[-1]}", 30.0, 500.0), "host": host})
            s.append({"ts": ts, "dt": 1.0, "kind": "host", "source": "host", "host": host, "pid": None, "ncpu": 2,
                      "shared": True, "net_rx_bytes_s": tx / 4, "net_tx_bytes_s": tx})
    m = usage.summarize(s, t0 + 1, t0 + 5)
    assert m["host_cpu_pct"] == pytest.approx(50.0)  # the machine's 1 of 2 cores, not 1 of 6
    assert m["osd_cpu"] == pytest.approx(60.0) and m["server_hosts"] == 3
    assert m["net_tx_mib_s"] == pytest.approx(6.0) and m["net_busiest_host_mib_s"] == pytest.approx(4.0)
    per = usage.per_host(s, t0 + 1, t0 + 5)
    assert per["host1"]["osd_cpu"] == pytest.approx(30.0) and "host_cpu_pct" not in per["host1"]
    assert per["host2"]["net_tx_mib_s"] == pytest.approx(2.0)


def test_a_namespace_s_nic_is_read_as_its_namespace_sees_it():
    """nic_bytes reads /proc/<pid>/net/dev: this process's loopback counts what it sends itself."""
    import socket

    before = telemetry.nic_bytes(os.getpid(), "lo")
    assert before is not None and telemetry.nic_bytes(os.getpid(), "no-such-nic") is None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
        a.sendto(b"x" * 60000, ("127.0.0.1", 9))
    after = telemetry.nic_bytes(os.getpid(), "lo")
    assert after is not None and after[1] - before[1] >= 60000 and after[0] - before[0] >= 60000
