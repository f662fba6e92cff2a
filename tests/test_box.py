"""Hosts in a box (fathom.cluster.box): `fathom cluster up --hosts N` puts the OSDs on emulated hosts, network
namespaces with their own hostnames on a bridge fathom makes, each host's NIC capped by tc; CRUSH sees the hosts;
`cluster down` leaves no namespace, bridge, holder or daemon, also after `cluster up` was killed with -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import FATHOM, run_fathom

from fathom.cluster import box
from fathom.cluster.local import LocalCluster
from fathom.errors import UsageError
from fathom.hosts import netns

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(netns.available() is not None, reason=f"namespaces: {netns.available()}")]


def test_the_rate_and_the_shape_are_checked_before_anything_is_made():
    assert box.tc_rate("10Gbit") == "10gbit" and box.tc_rate("2.5gbit/s") == "2.5gbit"
    with pytest.raises(UsageError, match="such as 10gbit"):
        box.tc_rate("fast")
    p = box.plan("1a2b3c4d-0000", 3, "100mbit", 2)
    assert [h["hostname"] for h in p["hosts"]] == ["host1", "host2", "host3"] and p["bridge"] == "fx1a2b3cbr"
    assert all(len(n) <= 15 for h in p["hosts"] for n in (h["ns"], h["veth"] + "p"))  # interface names fit
    p["hosts"] = [{**h, "pid": 1, "addr": f"10.0.0.{i}"} for i, h in enumerate(p["hosts"])]
    placed = box.placement(p, 4, mds=True, rgw=True)
    assert [placed[f"osd.{i}"]["host"] for i in range(4)] == ["host1", "host2", "host3", "host1"]
    assert [placed[f"client.rgw.host{i}"]["addr"] for i in (1, 2, 3)] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    st = {"box": p, "places": placed, "rgw": True}
    assert box.homes(st)["osd.3"] == "host1" and box.homes(st)["client.rgw.host3"] == "host3"
    cap = box.capacity(st)["host2"]
    assert cap["cores"] is None and cap["nics"] == {f"{p['hosts'][1]['veth']}p": {
        "speed_mbit": 100.0, "cap_mbit": 100.0, "cap": "tc tbf rate 100mbit both ways, an emulated NIC"}}
    assert placed["mon.a"]["host"] == placed["mgr.x"]["host"] == placed["mds.a"]["host"] == "host1"
    assert box.qdisc("1gbit", None) == ["tbf", "rate", "1gbit", "burst", "1250000b", "latency", "50ms"]
    assert box.qdisc(None, 5) == ["netem", "delay", "5ms"] and box.qdisc(None, None) == []
    bad = run_fathom("cluster", "up", "--dir", "/nonexistent/x", "--host-nic", "1gbit")
    assert bad.returncode == 2 and "give --hosts N too" in bad.stderr


def test_three_hosts_with_capped_nics_are_crush_hosts_and_leave_nothing(tmp_path):
    d = tmp_path / "c"
    up = run_fathom("cluster", "up", "--dir", str(d), "--osds", "3", "--osd-size", "2GiB", "--hosts", "3",
                    "--host-nic", "200mbit", "--rgw", timeout=300)
    c = LocalCluster(d)
    b = (c.state() or {}).get("box")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "(client.rgw.host2, osd.1)" in up.stdout, up.stdout
        tree = c.ceph().ceph("osd", "tree")
        hosts = {n["name"]: n["children"] for n in tree["nodes"] if n["type"] == "host"}
        assert sorted(hosts) == ["host1", "host2", "host3"] and all(len(v) == 1 for v in hosts.values()), hosts
        for h in b["hosts"]:
            qd = subprocess.run(["ip", "netns", "exec", h["ns"], "tc", "qdisc", "show", "dev", h["veth"] + "p"],
                                capture_output=True, text=True).stdout
            assert "tbf" in qd and "rate 200Mbit" in qd, qd
            uts = subprocess.run(["nsenter", "-t", str(h["pid"]), "-u", "hostname"], capture_output=True, text=True)
            assert uts.stdout.strip() == h["hostname"]
        osd1 = next(x for x in c.daemons() if x.name == "osd.1")  # in host2's namespaces
        assert os.readlink(f"/proc/{osd1.pid}/ns/net") == os.readlink(f"/proc/{b['hosts'][1]['pid']}/ns/net")
        _gateways(c, b)
        _host_faults(c, b)
    finally:
        down = run_fathom("cluster", "down", "--dir", str(d), timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert box.left(b) == [] and not d.exists()


def _gateways(c: LocalCluster, b: dict) -> None:
    """An RGW on every host, in its namespaces, answering on its address over plain HTTP and over TLS with the
    cluster's CA (one certificate names every host); the keys file lists them for the engines to share."""
    import ssl
    import urllib.request

    keys = c.s3() or {}
    assert keys["endpoints"] == [f"http://{h['addr']}:{c.state()['rgw_port']}" for h in b["hosts"]], keys
    assert len(keys["tls_endpoints"]) == 3 and keys["endpoint"] == keys["endpoints"][0]
    ctx = ssl.create_default_context(cafile=keys["ca_file"])
    for h, plain, tls in zip(b["hosts"], keys["endpoints"], keys["tls_endpoints"]):
        rgw = next(x for x in c.daemons() if x.name == f"client.rgw.{h['hostname']}")
        assert os.readlink(f"/proc/{rgw.pid}/ns/net") == os.readlink(f"/proc/{h['pid']}/ns/net")
        for url, kw in ((plain, {}), (tls, {"context": ctx})):
            with urllib.request.urlopen(url, timeout=10, **kw) as r:  # anonymous: an empty bucket list
                assert r.status == 200 and b"ListAllMyBucketsResult" in r.read(), url


def _reaches(ns: str, addr: str, port: int) -> bool:
    code = f"import socket; socket.create_connection(('{addr}', {port}), timeout=2).close()"
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True).returncode == 0


def _host_faults(c: LocalCluster, b: dict) -> None:
    """The fault schedule's host actions on these hosts (fathom.run.actions), each journaled and put back."""
    from fathom.cluster.journal import Journal
    from fathom.hosts import impair
    from fathom.run.faults import Executor
    from fathom.suite.faults import Fault

    j = Journal()
    ex = Executor(c.ceph(), c, j, None)
    h1, h2, h3 = b["hosts"]
    mon_port = int(c.state()["mon_host"].split(":")[-1].rstrip("]"))
    assert _reaches(h3["ns"], h1["addr"], mon_port)
    ex.run(Fault(at_s=0, action="partition", host="host3"))
    assert not _reaches(h3["ns"], h1["addr"], mon_port) and _reaches(h2["ns"], h1["addr"], mon_port)
    ex.run(Fault(at_s=0, action="heal", host="host3"))
    assert _reaches(h3["ns"], h1["addr"], mon_port)
    ex.run(Fault(at_s=0, action="nic_cap", host="host2", rate="50mbit"))
    qdisc = ["ip", "netns", "exec", h2["ns"], "tc", "qdisc", "show", "dev", h2["veth"] + "p"]
    assert "rate 50Mbit" in subprocess.run(qdisc, capture_output=True, text=True).stdout
    ex.run(Fault(at_s=0, action="link_reset", host="host2"))  # the host's own cap again
    assert "rate 200Mbit" in subprocess.run(qdisc, capture_output=True, text=True).stdout
    mgr = ex.run(Fault(at_s=0, action="mgr_failover"))
    assert mgr["outcome"] == "done" and mgr["failover_s"] > 0, mgr
    ex.run(Fault(at_s=0, action="partition", host="host2"))  # left cut: what Ctrl-C and restore put back
    assert not _reaches(h2["ns"], h1["addr"], mon_port)
    assert impair.undo_all(j, lambda m: None) == [] and not j.pending()
    assert _reaches(h2["ns"], h1["addr"], mon_port)


def test_cluster_up_killed_with_9_leaves_what_down_removes(tmp_path):
    d = tmp_path / "c"
    proc = subprocess.Popen([FATHOM, "cluster", "up", "--dir", str(d), "--osds", "2", "--osd-size", "2GiB",
                             "--hosts", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # killed once both hosts are made and a daemon starts on them
            st = json.loads((d / "fathom-cluster.json").read_text()) if (d / "fathom-cluster.json").exists() else {}
            if all(h.get("pid") for h in (st.get("box") or {}).get("hosts") or [{}]) and st.get("daemons"):
                break
            time.sleep(0.1)
        else:
            pytest.fail("cluster up made no host within 120 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    b = st["box"]
    assert box.left(b), "the box was there when cluster up was killed"
    down = run_fathom("cluster", "down", "--dir", str(d), timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert box.left(b) == [] and not d.exists()


def test_a_suite_on_emulated_hosts_reads_at_what_their_nic_caps_let_them_send(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("""\
name: boxed
cluster: {kind: local, osds: 2, osd_size: 2GiB, hosts: 2, host_nic: 80mbit}
prep: {pools: [{name: bp, application: rados, pg_num: 16, size: 1}]}
defaults: {engine: fathom-engine, interface: rados, pool: bp, bs: 1MiB, iodepth: 8, ramp_time: 1s}
workloads:
  - {name: w, rw: write, runtime: 6s, rate: 40}   # about 240 MiB to read back; a free-running write fills 2 GiB OSDs
  - {name: r, rw: read, runtime: 5s}
""")
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    from fathom.results.store import Store

    from fathom.results.export import host_figures

    with Store(db) as st:
        run = st.run("latest")
        points = st.points(run.id)
        pts = {q["workload"]: q["metrics"] for q in points}
        read = next(q for q in points if q["workload"] == "r")
        figures = host_figures(st, run, read)
    assert run.env["cluster"]["hosts"] == {"n": 2, "nic": "80mbit", "delay_ms": None}
    # two hosts, each sending at most 80 Mbit/s: reads at most 160 Mbit/s (19.1 MiB/s), and near it
    assert 12.0 <= pts["r"]["bw_mib_s"] <= 19.5, pts["r"]
    # each emulated host is a row of its own: its OSD, and what its NIC sent (the reads' bytes and their headers,
    # at most its cap); the NICs counted once: the hosts' sum is the point's
    for h in ("host1", "host2"):
        assert set(figures[h]["daemons"]) == {f"osd.{int(h[-1]) - 1}"} | ({"mon.a", "mgr.x"} if h == "host1"
                                                                          else set()), figures[h]
        assert "host_cpu_pct" not in figures[h]["host"], "an emulated host's cores are the machine's"
        assert 4.0 < figures[h]["host"]["net_tx_mib_s"] <= 80e6 / 8 / 2**20 * 1.05, figures[h]
    sent = sum(figures[h]["host"]["net_tx_mib_s"] for h in ("host1", "host2"))
    assert pts["r"]["bw_mib_s"] <= sent <= 1.1 * pts["r"]["bw_mib_s"] and abs(pts["r"]["net_tx_mib_s"] - sent) < 0.01
    v = read["result"]["extra"]["bound"]
    assert any(r["resource"].startswith("host") and r["resource"].endswith("NIC tx") and r["ceiling"] == 80.0
               for r in v["resources"]), v
    assert v["bound"] != "network" or "of 80 Mbit/s (tc tbf rate 80mbit both ways, an emulated NIC)" in v["summary"], v
    assert not [ln for ln in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
                if ln.startswith("fx")], "the disposable cluster's hosts are gone with it"
