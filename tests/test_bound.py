"""What bounds a point (fathom.analysis.bound) and the ceilings it is set against (fathom.servers.capacity):
pure logic on samples shaped as the samplers store them."""

from __future__ import annotations

import os

from fathom.analysis import bound
from fathom.servers import capacity

TC = """\
nic eth0 10000
nic lo
nic br0 -1
qdisc noqueue 0: dev lo root refcnt 2
qdisc tbf 8001: dev eth0 root refcnt 2 rate 80Mbit burst 32Kb lat 50ms
qdisc fq_codel 0: dev br0 root refcnt 2 limit 10240p flows 1024 quantum 1514
cpus 4
"""


def test_the_probe_reads_link_speeds_tc_rate_caps_and_cores():
    got = capacity.parse(TC)
    assert got["cores"] == 4
    eth = got["nics"]["eth0"]
    assert eth["speed_mbit"] == 10000 and eth["cap_mbit"] == 80.0 and eth["ceiling_mbit"] == 80.0
    assert eth["cap"] == "tc tbf rate 80Mbit"
    assert got["nics"]["lo"]["ceiling_mbit"] is None and got["nics"]["br0"]["speed_mbit"] is None
    assert capacity.parse("qdisc netem 1: dev v1 root refcnt 2 limit 1000 rate 1.5Gbit\n")["nics"]["v1"][
        "cap_mbit"] == 1500.0


def test_a_cgroup_quota_up_the_tree_and_the_affinity_bound_a_process_s_cores(tmp_path):
    assert capacity.quota("max 100000\n") is None and capacity.quota("50000 100000") == 0.5
    assert capacity.quota("150000 100000") == 1.5 and capacity.quota("junk") is None
    assert capacity.quota_v1("-1", "100000") is None and capacity.quota_v1("20000\n", "100000\n") == 0.2
    me = os.getpid()
    lines = open(f"/proc/{me}/cgroup").read().splitlines()
    v1 = next((ln.split(":", 2) for ln in lines if "cpu" in ln.split(":")[1].split(",")), None)
    root = tmp_path / "cg"
    if v1 is not None:  # this host's own layout (v1's cpu controller, or v2's unified tree), in a scratch root
        leaf = root / v1[1] / v1[2].strip("/")

        def limit(d, q):
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpu.cfs_quota_us").write_text(f"{q}\n")
            (d / "cpu.cfs_period_us").write_text("100000\n")
        top = root / v1[1]
    else:
        cg = next(ln for ln in lines if ln.startswith("0::"))[3:].strip("/")
        leaf = root / cg

        def limit(d, q):
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpu.max").write_text("max 100000\n" if q < 0 else f"{q} 100000\n")
        top = root
        top.mkdir(parents=True)
        (top / "cgroup.controllers").write_text("cpu\n")
    limit(leaf, -1)
    if leaf != top:  # a parent's quota binds the process below it
        limit(leaf.parent, 25000)
        cores, why = capacity.daemon_cores(me, root)
        assert cores == 0.25 and "CPU quota 0.25 core(s)" in why, why
        limit(leaf.parent, -1)
    limit(leaf, 10000)
    cores, why = capacity.daemon_cores(me, root)
    assert cores == 0.1 and "CPU quota 0.1 core(s)" in why, why
    limit(leaf, -1)
    cores, why = capacity.daemon_cores(me, root)
    assert cores == len(os.sched_getaffinity(me)) and "CPU(s) it may run on" in why


def _host(ts: float, cpu: float, rx: float = 0.0, tx: float = 0.0, host: str = "h1", ncpu: int = 4) -> dict:
    return {"ts": ts, "dt": 1.0, "kind": "host", "source": "host", "host": host, "cpu_pct": cpu, "ncpu": ncpu,
            "net_rx_bytes_s": rx, "net_tx_bytes_s": tx}


def _osd(ts: float, cpu: float, name: str = "osd.0", host: str = "h1") -> dict:
    return {"ts": ts, "dt": 1.0, "kind": "osd", "source": name, "host": host, "cpu_pct": cpu}


CAP = {"here": "client", "hosts": {"h1": capacity.parse(TC)}, "daemons": {}}


def ev(cap: dict) -> list[dict]:
    return [{"kind": "capacity", "data": cap}]
WIN = {"from": 100.0, "to": 110.0}


def test_a_nic_at_its_tc_cap_is_the_bound_with_its_evidence():
    samples = [_host(100.0 + i, 20.0, rx=1e6, tx=9.6e6) for i in range(1, 11)] + \
              [_osd(100.0 + i, 30.0) for i in range(1, 11)]
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 20.0}, {"iodepth": 16})
    assert v["bound"] == "network", v
    assert v["summary"].startswith("NIC tx of h1 at 96% of 80 Mbit/s (tc tbf rate 80Mbit)"), v["summary"]
    assert v["at_limit"] == ["h1 NIC tx"]


def test_a_daemon_at_its_cgroup_quota_is_the_bound_and_the_host_is_not():
    cap = {**CAP, "daemons": {"osd.0": {"cores": 0.5, "why": "cgroup /t CPU quota 0.5 core(s)"}}}
    samples = [_host(100.0 + i, 15.0) for i in range(1, 11)] + [_osd(100.0 + i, 48.0) for i in range(1, 11)]
    v = bound.judge(samples, WIN, ev(cap), {"client_thread_max_pct": 30.0}, {"iodepth": 16})
    assert v["bound"] == "cpu" and v["at_limit"] == ["osd.0 CPU"], v
    assert "osd.0 CPU at 96% of 0.5 core(s) (cgroup /t CPU quota 0.5 core(s))" in v["summary"]
    # the same daemon with no known limit: set against its host's cores, and said so
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 30.0}, {"iodepth": 16})
    assert v["bound"] == "latency" and any("not read" in m for m in v["missing"]), v


def test_nothing_saturated_is_latency_at_the_ops_in_flight_or_the_offered_rate():
    samples = [_host(100.0 + i, 10.0) for i in range(1, 11)] + [_osd(100.0 + i, 12.0) for i in range(1, 11)]
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 8.0, "engines": 2}, {"iodepth": 1, "numjobs": 1})
    assert v["bound"] == "latency"
    assert v["summary"].startswith("nothing saturated: latency-bound at 2 op(s) in flight (iodepth 1 x 2 engines)")
    assert "busiest:" in v["summary"]
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 8.0, "offered_rate_ops_s": 500.0}, {"iodepth": 64})
    assert v["bound"] == "rate"


def test_the_engine_s_busiest_thread_at_a_full_core_is_a_client_bound():
    v = bound.judge([], None, [], {"client_thread_max_pct": 99.0}, {"iodepth": 2})
    assert v["bound"] == "client" and "busiest thread at 99% of one core" in v["summary"]
    assert any("no server samples" in m for m in v["missing"])
    v = bound.judge([], None, [{"kind": "sources", "data": {"hosts": ["h1"]}}], {"client_thread_max_pct": 9.0}, {})
    assert v["bound"] == "latency"  # Prometheus's sources event lists its hosts: no NICs counted there
    assert bound.judge([], None, [], {}, {})["bound"] == "unknown"
    # the null target has nothing but the client: its bound whatever share of a core a busy host gave it
    v = bound.judge([_host(100.0 + i, 80.0, host="c") for i in range(1, 11)], WIN, [],
                    {"client_thread_max_pct": 70.0}, {"interface": "null", "iodepth": 4})
    assert v["bound"] == "client" and v["summary"].startswith("the null target: the client alone (fathom-engine's")


def test_samples_outside_the_window_do_not_count_and_two_at_their_limit_are_both_named():
    samples = [_host(100.0 + i, 97.0 if i <= 10 else 5.0, tx=9.7e6) for i in range(1, 20)]
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 10.0}, {"iodepth": 8})
    assert len(v["at_limit"]) == 2 and set(v["at_limit"]) == {"h1 CPU", "h1 NIC tx"}, v
    assert v["summary"].count(" at ") == 2


def test_the_nics_a_host_counts_are_the_ones_set_against_their_speeds():
    bonded = capacity.parse("nic bond0 20000\nnic eth0 10000\nnic eth1 10000\ncpus 8\n")
    cap = {"hosts": {"h1": bonded}}
    sources = {"kind": "sources", "data": {"hosts": {"h1": {"nics": {"counted": ["bond0"], "left_out": {}}}}}}
    samples = [_host(100.0 + i, 10.0, tx=2.3e9) for i in range(1, 11)]
    v = bound.judge(samples, WIN, [*ev(cap), sources], {"client_thread_max_pct": 10.0}, {"iodepth": 8})
    assert v["at_limit"] == ["h1 NIC tx"] and "of 20 Gbit/s" in v["summary"], v  # not 40: members not summed
    v = bound.judge(samples, WIN, ev(cap), {"client_thread_max_pct": 10.0}, {"iodepth": 8})
    assert v["bound"] == "latency"  # without the sources event all three are summed: 40 Gbit/s


def test_a_throttle_most_gets_wait_on_is_the_bound_and_a_quiet_one_is_not():
    perf = {"osd.0": {"throttle-osd_client_bytes.get": 1000, "throttle-osd_client_bytes.wait":
                      {"count": 950, "sum": 4.75, "avg": 0.005},
                      "throttle-msgr_dispatch_throttler-client.get": 2000, "osd.op_w": 1000},
            "osd.1": {"throttle-osd_client_bytes.get": 10, "throttle-osd_client_bytes.wait":
                      {"count": 40, "sum": 0.1, "avg": 0.0025}}}  # more waits than gets: never above all of them
    samples = [_host(100.0 + i, 10.0) for i in range(1, 11)]
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 10.0}, {"iodepth": 16}, perf)
    assert v["bound"] == "throttle", v
    assert v["summary"] == ("osd.1's throttle osd_client_bytes: 100% of 10 gets waited, 2.5 ms each on average; "
                            "osd.0's throttle osd_client_bytes: 95% of 1,000 gets waited, 5 ms each on average")
    quiet = [r for r in bound.throttles(perf) if r["resource"] == "osd.0 throttle msgr_dispatch_throttler-client"]
    assert len(quiet) == 1 and quiet[0]["ratio"] == 0.0  # no wait: judged, at 0%
    # the messenger's tries: refused ones are tried again, so there can be more than one per get
    tried = {"osd.2": {"throttle-osd_client_messages.get": 1909, "throttle-osd_client_messages.get_or_fail_fail": 3404,
                       "throttle-osd_client_messages.get_or_fail_success": 1909}}
    (t,) = bound.throttles(tried)
    assert t["ratio"] == 1.0 and t["evidence"] == ("osd.2's throttle osd_client_messages: 3,404 tries refused for "
                                                   "1,909 gets (1.8 per get)"), t
    assert not any("throttles" in m for m in v["missing"])
    v = bound.judge(samples, WIN, ev(CAP), {"client_thread_max_pct": 10.0}, {"iodepth": 16})
    assert v["bound"] == "latency" and any("throttles" in m for m in v["missing"])


def test_ops_in_flight_by_little_s_law_under_those_asked_for_is_the_client_holding_them_back():
    samples = [_host(100.0 + i, 10.0) for i in range(1, 11)]
    full = {"client_thread_max_pct": 10.0, "iops": 1000.0, "clat_ms": 15.9}  # 15.9 of 16 in flight
    v = bound.judge(samples, WIN, ev(CAP), full, {"iodepth": 16})
    assert v["bound"] == "latency" and v["in_flight"]["measured"] == 15.9 and v["in_flight"]["asked"] == 16
    assert "latency-bound at 16 op(s) in flight (iodepth 16), 15.9 measured (1,000 ops/s x 15.9 ms)" in v["summary"]
    held = {**full, "clat_ms": 6.25}  # 6.25 of 16: something in the client kept the rest from being issued
    v = bound.judge(samples, WIN, ev(CAP), held, {"iodepth": 16})
    assert v["bound"] == "client", v
    assert v["summary"].startswith("the client kept 6.25 of the 16 op(s) in flight it asked for (iodepth 16; "
                                   "Little's law: 1,000 ops/s x 6.25 ms)"), v["summary"]
    assert bound.judge(samples, WIN, ev(CAP), {**held, "offered_rate_ops_s": 900.0}, {"iodepth": 16})[
        "bound"] == "rate"  # open loop keeps what the rate asks, not the iodepth


def test_an_osd_device_busy_all_the_time_is_the_bound_and_one_device_under_two_osds_is_one_resource(tmp_path):
    def h(ts, util, host="h1"):
        return {**_host(ts, 10.0, host=host), "disks": {"sdb": {"util_pct": util, "queue": 3.5}} if util else {}}
    osds = {"osd.0": {"host": "h1", "devices": ["sdb"], "why": "x"},
            "osd.1": {"host": "h1", "devices": ["sdb"], "why": "x"},
            "osd.2": {"host": "h9", "devices": ["sdc"], "why": "x"},
            "osd.3": {"host": "h1", "devices": [], "why": "`ceph osd metadata` names no device"}}
    cap = {**CAP, "osds": osds}
    samples = [h(100.0 + i, 99.0 if i % 10 else 0.0) for i in range(1, 11)]  # one idle second: 89.1% busy
    v = bound.judge(samples, WIN, ev(cap), {"client_thread_max_pct": 5.0}, {"iodepth": 16}, {"osd.0": {}})
    disks = [r for r in v["resources"] if r["kind"] == "disk"]
    assert len(disks) == 1 and disks[0]["resource"] == "h1 disk sdb" and round(disks[0]["ratio"], 3) == 0.891
    assert disks[0]["evidence"] == "disk sdb of osd.0, osd.1 on h1 busy 89% of the time (3.15 requests in flight " \
                                   "on average)", disks[0]
    assert v["bound"] == "latency" and v["near"] == ["h1 disk sdb"]
    assert "osd.2's device sdc: its host h9 is not sampled" in v["missing"]
    assert "osd.3: no device to judge (`ceph osd metadata` names no device)" in v["missing"]
    busy = [h(100.0 + i, 100.0) for i in range(1, 11)]
    assert bound.judge(busy, WIN, ev(cap), {}, {"iodepth": 16}, {"osd.0": {}})["bound"] == "disk"
    # fathom's own cluster: no host named (one kernel under every namespace host), the host that saw it busy
    own = {"osd.0": {"host": None, "devices": ["sdb"], "why": "its BlueStore file"}}
    v = bound.judge([h(100.0 + i, 0.0, "a") for i in range(1, 11)] + busy, WIN, ev({**CAP, "osds": own}), {},
                    {"iodepth": 16}, {"osd.0": {}})
    assert v["bound"] == "disk" and v["at_limit"] == ["h1 disk sdb"], v


def test_a_file_s_block_device_is_found_by_its_file_system_and_the_metadata_s_devices_by_osd(tmp_path):
    (tmp_path / "osd.0").mkdir()
    (tmp_path / "osd.0" / "block.data").write_bytes(b"x")
    got = capacity.local_osd_devices(tmp_path, ["osd.0", "osd.1"])
    assert list(got) == ["osd.0"]  # osd.1 has no block file (memstore)
    dev = capacity.block_device(tmp_path)
    assert got["osd.0"]["devices"] == ([dev] if dev else [])
    if dev:  # the name is one /proc/diskstats uses
        assert any(line.split()[2] == dev for line in open("/proc/diskstats"))
    meta = [{"id": 3, "hostname": "n1", "devices": "dm-0,sdb"}, {"id": 4, "hostname": "n2"}, "junk"]
    assert capacity.metadata_osd_devices(meta) == {
        "osd.3": {"host": "n1", "devices": ["dm-0", "sdb"], "why": "its devices by `ceph osd metadata`"},
        "osd.4": {"host": "n2", "devices": [], "why": "`ceph osd metadata` names no device"}}
