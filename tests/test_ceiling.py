"""A point's ceiling from a baseline's figures and the pool's layout (fathom.analysis.ceiling), and the baseline's
plan and iperf3 reading (fathom.dropin.baseline): pure logic."""

from __future__ import annotations

from pathlib import Path

from fathom.analysis import ceiling
from fathom.dropin import baseline
from fathom.hosts.clients import ClientHost

MIB = 1 << 20
GBIT = 1e9 / 8  # bytes/s


def _p(kind: str, host: str, mib_s: float | None = None, iops: float | None = None, **params) -> dict:
    return {"status": "done", "params": {"baseline": kind, "host": host, **params},
            "metrics": {"bw_mib_s": mib_s, "iops": iops}}


def _net(c: str, s: str, up_gbit: float, down_gbit: float) -> list[dict]:
    return [_p("network", c, up_gbit * GBIT / MIB, server=s, direction="client->server"),
            _p("network", c, down_gbit * GBIT / MIB, server=s, direction="server->client")]


FIG = ceiling.figures(
    _net("c1", "s1", 10, 10) + _net("c1", "s2", 10, 10) + _net("c2", "s1", 10, 10) + _net("c2", "s2", 10, 10)
    + [_p("device", "s1", 500, device="sdb", rw="read", osds=["osd.0"]),
       _p("device", "s2", 500, device="sdb", rw="read", osds=["osd.1"]),
       _p("engine", "c1", iops=1e6), _p("engine", "c2", iops=1e6),
       {"status": "failed", "params": {"baseline": "device", "host": "s3", "device": "sdc", "rw": "read"},
        "metrics": None}])


def test_the_figures_keep_each_measured_item_and_leave_out_failed_ones():
    assert FIG["engine"] == {"c1": 1e6, "c2": 1e6}
    assert [(d["host"], d["device"], d["read"]) for d in FIG["devices"]] == [("s1", "sdb", 500 * MIB),
                                                                               ("s2", "sdb", 500 * MIB)]
    assert FIG["network"][("c2", "s1")] == {"up": 10 * GBIT, "down": 10 * GBIT}


def test_writes_with_three_replicas_on_two_hosts_cross_the_servers_nics_twice():
    lay = ceiling.layout({"pool_name": "p", "size": 3, "erasure_code_profile": ""})
    assert lay == {"size": 3, "label": "3 replicas"}
    c = ceiling.ceiling(FIG, "write", lay, hosts=2, bs=4 * MIB)
    # clients send 20 Gbit/s; servers take in 20 Gbit/s, each client byte twice (itself and one copy to the
    # other host): 10 Gbit/s; they send 20 Gbit/s of copies: 20 Gbit/s; device writes were not measured
    assert c["limit"] == "the servers' NICs" and c["bytes_s"] == 10 * GBIT, c
    assert "the devices' writes, as a device holding data is only read" in c["missing"]
    said = ceiling.against(8 * GBIT, c, "write")
    assert said == ("write 954 MiB/s = 80% of the 1.16 GiB/s the servers' NICs allow with 3 replicas (not measured: "
                    "the devices' writes, as a device holding data is only read)"), said


def test_reads_are_bound_by_the_devices_and_ec_reads_gather_shards_over_the_nics():
    c = ceiling.ceiling(FIG, "read", {"size": 3, "label": "3 replicas"}, hosts=2, bs=4 * MIB)
    assert c["limit"] == "the devices" and c["bytes_s"] == 1000 * MIB
    ec = ceiling.layout({"pool_name": "e", "size": 6, "erasure_code_profile": "p42", "k": 4, "m": 2})
    assert ec == {"k": 4, "m": 2, "label": "EC 4+2"}
    assert ceiling.layout({"pool_name": "e", "size": 6, "erasure_code_profile": "p42"}) is None  # k, m not read
    fast = {**FIG, "devices": []}
    c = ceiling.ceiling(fast, "read", ec, hosts=6, bs=4 * MIB)
    # a read gathers 3 of its 4 shards from other hosts: servers send 1.75 bytes per byte read, 20 / 1.75
    assert c["limit"] == "the servers' NICs" and abs(c["bytes_s"] - 20 * GBIT / 1.75) < 1, c
    w = ceiling.ceiling(fast, "write", ec, hosts=6, bs=4 * MIB)
    assert abs(w["bytes_s"] - 20 * GBIT / 2.25) < 1  # 1 + 5/4 per byte written into the servers


def test_a_small_op_is_bound_by_the_engine_and_nothing_measured_says_so():
    c = ceiling.ceiling(FIG, "read", {"size": 1, "label": "1 replica"}, hosts=2, bs=256)
    assert c["limit"] == "the engine" and c["bytes_s"] == 2e6 * 256
    none = ceiling.ceiling({"engine": {}, "devices": [], "network": {}}, "read", {"size": 1, "label": "1"}, 1, None)
    assert none["bytes_s"] is None and ceiling.against(MIB, none, "read").startswith("read 1 MiB/s: no ceiling")


def test_the_plan_measures_each_device_once_and_the_network_both_ways():
    c, s = ClientHost(host="local"), ClientHost(host="10.0.0.2", user="root")
    osds = {"osd.0": {"host": "n2", "devices": ["sdb"]}, "osd.1": {"host": "n2", "devices": ["sdb"]},
            "osd.2": {"host": "n9", "devices": ["sdc"]}}
    items, skipped = baseline.plan([c], [s], None, osds, {"n2": s.name})
    keys = [i.key for i in items]
    assert keys == ["engine@local", f"device-sdb@{s.name}", f"network local->{s.name}", f"network local<-{s.name}"]
    assert items[1].osds == ["osd.0", "osd.1"] and items[1].path == "/dev/sdb"
    assert skipped == ["osd.2's devices: its host n9 is not among the --server-host hosts"]
    local, skipped = baseline.plan([c], [], Path("/x"), {"osd.0": {"host": None, "devices": ["vda"]}}, {})
    assert [i.key for i in local] == ["engine@local", "filesystem-write", "filesystem-read"]
    assert local[1].path.startswith("/x/baseline-") and "no --server-host" in skipped[0]


def test_iperf3_s_receiver_rate_or_its_error():
    ok = '{"end": {"sum_received": {"bits_per_second": 9.4e9}, "sum_sent": {"bits_per_second": 9.5e9}}}'
    assert baseline.iperf3_rate(ok) == (9.4e9, None)
    assert baseline.iperf3_rate('{"error": "unable to connect to server: Connection refused"}') == (
        None, "unable to connect to server: Connection refused")
    assert baseline.iperf3_rate("sh: iperf3: not found\n")[1] == "sh: iperf3: not found"
