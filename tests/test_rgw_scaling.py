"""The RGW study's node scaling on emulated hosts (the rgw-scaling suite, --quick, here at 2 and 4 hosts): one
disposable cluster per level of cluster.hosts, each run labelled nodes=N with its shape stored, the clients'
engines scaled with the hosts, each talking to its host's RGW; GET throughput held under the hosts' NIC caps and
growing with them, each host's NIC measured in its namespace and named as the bound; the report's node-scaling
table with each level's efficiency beside the study's."""

from __future__ import annotations

import re

import pytest
from conftest import run_fathom

from fathom.hosts import netns
from fathom.results.store import Store
from fathom.suite import spec

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(netns.available() is not None, reason=f"namespaces: {netns.available()}")]

CAP_MIB_S = 40e6 / 8 / 2**20  # the quick level's host_nic, 40mbit, in MiB/s


def test_two_levels_of_hosts_each_on_its_own_cluster_under_the_nic_caps(tmp_path):
    text = spec.builtin_text("rgw-scaling").replace("    hosts: [2, 3, 4]\n", "    hosts: [2, 4]\n")
    assert "hosts: [2, 4]" in text and "host_nic: 40mbit" in text
    suite = tmp_path / "rgw-scaling.yaml"
    suite.write_text(text)
    db = tmp_path / "s.db"
    p = run_fathom("run", str(suite), "--quick", "--db", str(db), timeout=1500)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    ids = re.search(r"cluster shape sweep done: runs (\d+),(\d+) ", p.stdout)
    assert ids, p.stdout[-2000:]
    get: dict[int, float] = {}
    with Store(db) as st:
        for rid, n in zip(ids.groups(), (2, 4)):
            run = st.run(int(rid))
            assert run.env["labels"]["nodes"] == str(n) and run.env["cluster"]["hosts"]["n"] == n
            pts = st.points(run.id)
            assert {pt["params"]["rw"] for pt in pts} == {"write", "randread"}
            read = {pt["params"]["rw"]: pt for pt in pts}["randread"]
            get[n] = read["metrics"]["bw_mib_s"]
            # what the hosts send is capped: GET cannot pass n caps (each object also crosses between hosts)
            assert get[n] <= 1.1 * n * CAP_MIB_S, (n, get[n])
            # each host's NIC is measured where it is (its namespace) and set against its cap
            nics = {r["resource"]: r for r in read["result"]["extra"]["bound"]["resources"]
                    if r["kind"] == "network"}
            assert {f"host{i} NIC tx" for i in range(1, n + 1)} <= set(nics), nics
            assert max(r["ratio"] for r in nics.values()) > 0.6, nics
            # every host's RGW served its share of the GETs (its own counters)
            served = {name: d.get("rgw.get") or 0 for name, d in st.perf_counters(read["id"]).items()
                      if name.startswith("client.rgw.")}
            assert set(served) == {f"client.rgw.host{i}" for i in range(1, n + 1)}, served
            assert min(served.values()) > 0.5 * max(served.values()), served
    # the clients' engines spread over the hosts' RGWs, so the GETs grow with the hosts' NICs
    assert get[4] > 1.2 * get[2], get
    md = tmp_path / "r.md"
    run_fathom("report", ",".join(ids.groups()), "--db", str(db), "-o", str(md), check=True)
    table = md.read_text().split("### Node scaling (runs labelled nodes=N)")[1].split("###")[0]
    assert re.search(r"\| 256KiB \| GET \| 4 \| [\d.]+ \| \d+% \| 97% \|", table), table
    assert re.search(r"\| 256KiB \| PUT \| 4 \| [\d.]+ \| \d+% \| 107% \|", table), table
