"""What bounds a point, on runs whose bound is set by the test (fathom.analysis.bound, fathom.servers.capacity):
the OSD's host NIC capped by a tc qdisc in its network namespace (network), the OSD in a CPU-quota cgroup of the
test's own (cpu), iodepth 1 with nothing capped (latency), and the null engine (client). A local cluster of this
host's Ceph with its one OSD on a network-namespace host, sampled over SSH; the cap and the cgroup are removed
at each test's end, and nothing of this host's settings changes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import run_fathom

from fathom.analysis import bound
from fathom.cluster.local import LocalCluster
from fathom.hosts import netns
from fathom.results.store import Store

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(netns.available() is not None, reason=f"namespace hosts: {netns.available()}")]

SUITE = """\
name: bound
cluster: {{kind: attached}}
prep: {{pools: [{{name: bp, application: rados, pg_num: 8, size: 1}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: bp, runtime: {runtime}, ramp_time: 1s}}
workloads: {workloads}
"""


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with netns.Testbed(hosts=1) as tb:
        d = tmp_path_factory.mktemp("bound") / "cluster"
        c = LocalCluster(d, progress=lambda m: print(m, file=sys.stderr))
        h = tb.hosts[0]
        c.up(osds=1, osd_size=4 * 1024**3, bind=tb.bridge_addr,
             places={"osd.0": {"prefix": ["nsenter", "-t", str(h.pid), "-n", "-u", "--"], "addr": h.addr}})
        try:
            yield tb, c
        finally:
            run_fathom("cluster", "down", "--dir", str(d), timeout=300, check=True)


def _run(tb, c, tmp_path: Path, workloads: list[dict], runtime: str = "6s", more: str = "") -> list[dict]:
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.format(runtime=runtime, workloads=json.dumps(workloads)) + more)
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), "--conf", str(c.conf_path), "--keyring", str(c.keyring_path),
                   "--server-host", f"root@{tb.hosts[0].addr}", "--known-hosts", tb.known_hosts,
                   "--server-key", tb.key_file, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    shown = run_fathom("show", "--db", str(db), "latest", check=True).stdout
    assert "what bounds each point" in shown, shown
    with Store(db) as st:
        pts = st.points(st.run("latest").id)
    for q in pts:
        assert q["metrics"]["bound"] == q["result"]["extra"]["bound"]["bound"], q["metrics"]
        assert f"#{q['idx'] + 1} {q['metrics']['bound']}: " in shown
    return pts


def test_a_nic_capped_by_tc_bounds_the_reads_its_host_sends(bed, engine_ready, tmp_path):
    tb, c = bed
    h = tb.hosts[0]
    dev = f"{h.veth}p"  # the namespace's end of its link: what the OSD's host sends leaves through it
    tc = ["ip", "netns", "exec", h.name, "tc", "qdisc"]
    subprocess.run([*tc, "add", "dev", dev, "root", "tbf", "rate", "40mbit", "burst", "256k", "latency", "400ms"],
                   check=True)
    try:
        # the hosts' ceilings first: iperf3 both ways, the OSD's device read-only, the engine on the null target
        base = run_fathom("baseline", "--conf", str(c.conf_path), "--keyring", str(c.keyring_path), "--runtime", "2",
                          "--server-host", f"root@{h.addr}", "--known-hosts", tb.known_hosts, "--server-key",
                          tb.key_file, "--db", str(tmp_path / "r.db"), "--name", "base", timeout=300)
        assert base.returncode == 0, base.stdout + base.stderr
        # the write at 40 ops/s leaves about 300 MiB to read (a free-running one would fill the OSD)
        pts = _run(tb, c, tmp_path, [{"name": "w", "rw": "write", "bs": "1MiB", "iodepth": 4, "rate": 40},
                                     {"name": "r", "rw": "read", "bs": "1MiB", "iodepth": 4}])
    finally:
        subprocess.run([*tc, "del", "dev", dev, "root"], check=True)
    with Store(tmp_path / "r.db") as st:
        got = {q["key"]: q for q in st.points(st.run("base").id)}
    down = got[f"network local<-{h.addr}"]["metrics"]["bw_mib_s"] * 8 * 2**20 / 1e6
    up = got[f"network local->{h.addr}"]["metrics"]["bw_mib_s"] * 8 * 2**20 / 1e6
    assert 30 <= down <= 44 and up > 200, (down, up, base.stdout)  # the tc cap shapes what the OSD's host sends
    assert got["engine@local"]["metrics"]["iops"] > 0 and any(k.startswith("device-") for k in got), base.stdout
    md = tmp_path / "r.md"
    run_fathom("report", "--db", str(tmp_path / "r.db"), "--baseline", "base", "-o", str(md), "latest", check=True)
    said = md.read_text().split("### r: ")[-1].split("against the ceiling of baseline base")[1]
    m = re.search(r"read ([\d.]+) MiB/s = (\d+)% of the ([\d.]+) MiB/s the (\S+ NICs) allow with 1 replica", said)
    assert m and 80 <= int(m.group(2)) <= 115, said[:1500]  # the reads fill what the capped NIC carries
    read = next(q for q in pts if q["workload"] == "r")
    v = read["result"]["extra"]["bound"]
    # the NIC at its limit (a host's CPU may be at its own from the other test lane's work, and named beside it)
    nic = next(r for r in v["resources"] if r["resource"] == f"{h.name} NIC tx")
    assert f"{h.name} NIC tx" in v["at_limit"][:2] and 0.9 <= nic["ratio"] <= 1.1, v
    assert v["bound"] in ("network", "cpu") and "of 40 Mbit/s (tc tbf rate 40Mbit)" in v["summary"], v
    # what the engine saw agrees: about 40 Mbit/s of reads
    assert 3.0 <= read["metrics"]["bw_mib_s"] <= 5.5, read["metrics"]


def test_an_osd_held_by_its_cgroup_s_cpu_quota_is_the_bound(bed, engine_ready, tmp_path):
    tb, c = bed
    (osd,) = [d for d in c.daemons() if d.name == "osd.0"]
    top = next((Path("/sys/fs/cgroup") / n for n in ("cpu", "cpu,cpuacct") if (Path("/sys/fs/cgroup") / n /
                                                                                "cpu.cfs_quota_us").exists()), None)
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if top is None and not (v2.exists() and "cpu" in (Path("/sys/fs/cgroup/cgroup.subtree_control").read_text())):
        pytest.skip("no cgroup CPU controller to put the OSD under")
    own = top or Path("/sys/fs/cgroup")
    cg = own / f"fathom-test-{uuid.uuid4().hex[:8]}"
    line = next(ln for ln in Path(f"/proc/{osd.pid}/cgroup").read_text().splitlines()
                if (top is not None and "cpu" in ln.split(":")[1].split(",")) or (top is None and ln.startswith("0::")))
    back = own / line.split(":", 2)[2].strip().lstrip("/")
    cg.mkdir()
    try:
        if top is not None:
            (cg / "cpu.cfs_period_us").write_text("100000\n")
            (cg / "cpu.cfs_quota_us").write_text("15000\n")
        else:
            (cg / "cpu.max").write_text("15000 100000\n")
        (cg / "cgroup.procs").write_text(f"{osd.pid}\n")
        pts = _run(tb, c, tmp_path, [{"name": "w", "rw": "write", "bs": "4KiB", "iodepth": 16}])
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():
            (back / "cgroup.procs").write_text(f"{pid}\n")
        cg.rmdir()
    v = pts[0]["result"]["extra"]["bound"]
    assert v["bound"] == "cpu" and "osd.0 CPU" in v["at_limit"][:2], v
    assert f"of 0.15 core(s) (cgroup /{cg.name} CPU quota 0.15 core(s))" in v["summary"], v


def test_a_throttle_every_op_waits_on_is_the_bound(bed, engine_ready, tmp_path):
    tb, c = bed
    ceph = c.ceph()
    cap = ceph.ceph("config", "get", "osd.0", "osd_client_message_cap", fmt_json=False).strip()
    # one client message at a time into the OSD: each of the 16 ops in flight waits for the one before it
    ceph.ceph("tell", "osd.0", "config", "set", "osd_client_message_cap", "1", fmt_json=False)
    try:
        pts = _run(tb, c, tmp_path, [{"name": "w", "rw": "write", "bs": "4KiB", "iodepth": 16}], runtime="5s")
    finally:
        ceph.ceph("tell", "osd.0", "config", "set", "osd_client_message_cap", cap, fmt_json=False)
    v = pts[0]["result"]["extra"]["bound"]
    assert v["bound"] == "throttle" and v["at_limit"][0] == "osd.0 throttle osd_client_messages", v
    assert v["summary"].startswith("osd.0's throttle osd_client_messages: "), v
    assert not any("throttles" in m for m in v["missing"]), v


def test_iodepth_1_with_nothing_capped_is_latency_bound(bed, engine_ready, tmp_path):
    tb, c = bed
    pts = _run(tb, c, tmp_path, [{"name": "w", "rw": "write", "bs": "4KiB", "iodepth": 1}], runtime="5s",
               more="baseline: {runtime_s: 1}\n")  # the suite's baseline: measured first, linked, reported
    v = pts[0]["result"]["extra"]["bound"]
    # the OSD, its NIC and the engine are far from their limits at one op in flight; a host's CPU can still be at
    # its limit from the other test lane's work on this 2-core machine, and is then named as the bound
    hosts = {f"{h} CPU" for h in (tb.hosts[0].name, os.uname().nodename)}
    assert not set(v["at_limit"]) - hosts, v
    if v["at_limit"]:
        assert v["bound"] == "cpu" and v["summary"].startswith(v["at_limit"][0]), v
    else:
        assert v["bound"] == "latency", v
        assert v["summary"].startswith("nothing saturated: latency-bound at 1 op(s) in flight (iodepth 1)"), v
    assert v["resources"] and "osd.0 CPU" not in v["at_limit"] + v["near"], v
    # the OSD's device is judged from its host's sampler over SSH (one kernel: the device under its file)
    with Store(tmp_path / "r.db") as st:
        tel, evs = st.telemetry(pts[0]["id"]), st.events(st.run("latest").id)
    res, missing = bound.resources(tel, pts[0]["result"]["extra"]["telemetry_window"], bound.capacity_of(evs),
                                   pts[0]["metrics"])
    (disk,) = [r for r in res if r["kind"] == "disk"]
    assert disk["host"] == tb.hosts[0].name and "of osd.0 on " in disk["evidence"] and disk["use"] > 0, disk
    with Store(tmp_path / "r.db") as st:
        run = st.run("latest")
        base = st.run(int(run.env["baseline_run"]))
        assert base.kind == "baseline" and {q["key"] for q in st.points(base.id)} >= {
            f"network local->{tb.hosts[0].addr}", "engine@local"}
    md = tmp_path / "r.md"
    run_fathom("report", "--db", str(tmp_path / "r.db"), "-o", str(md), str(run.id), check=True)
    assert re.search(r"write [\d.]+ [KMG]iB/s = \d+% of the [\d.]+ [KMG]iB/s the \S+ \S+ allow with 1 replica",
                     md.read_text().split(f"against the ceiling of baseline {base.name}")[1]), md.read_text()[-3000:]


def test_the_null_engine_is_bound_by_the_client(engine_ready, tmp_path):
    suite = tmp_path / "null.yaml"
    suite.write_text("name: null-bound\ndefaults: {engine: fathom-engine, interface: \"null\", bs: 4k, iodepth: 4, "
                     "runtime: 3s}\nworkloads: [{name: n, rw: randread}]\n")
    db = tmp_path / "n.db"
    run_fathom("run", str(suite), "--db", str(db), check=True, timeout=120)
    with Store(db) as st:
        (q,) = st.points(st.run("latest").id)
    v = q["result"]["extra"]["bound"]
    assert v["bound"] == "client" and v["at_limit"][0] == "fathom-engine's busiest thread", v
    out = run_fathom("export", "--db", str(db), "latest", "--format", "csv", check=True).stdout
    head, row = out.splitlines()[:2]
    assert "bound" in head.split(",") and "client" in row.split(","), (head, row)
