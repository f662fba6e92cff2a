"""The RGW study's node scaling on emulated hosts (the rgw-scaling suite, --quick, here at 2 and 4 hosts): one
disposable cluster per level of cluster.hosts, each run labelled nodes=N with its shape stored, the clients'
engines scaled with the hosts; GET throughput held under the hosts' NIC caps; the report's node-scaling table
with each level's efficiency beside the study's. (Whether it grows with the hosts is what the table measures: here
it does not yet, docs/suites.md says why as far as it is known.)"""

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
            get[n] = {pt["params"]["rw"]: pt for pt in pts}["randread"]["metrics"]["bw_mib_s"]
            # what the OSD hosts send is capped: GET (k=2 of 4 shards read) cannot pass n caps
            assert get[n] <= 1.1 * n * CAP_MIB_S, (n, get[n])
    md = tmp_path / "r.md"
    run_fathom("report", ",".join(ids.groups()), "--db", str(db), "-o", str(md), check=True)
    table = md.read_text().split("### Node scaling (runs labelled nodes=N)")[1].split("###")[0]
    assert re.search(r"\| 256KiB \| GET \| 4 \| [\d.]+ \| \d+% \| 97% \|", table), table
    assert re.search(r"\| 256KiB \| PUT \| 4 \| [\d.]+ \| \d+% \| 107% \|", table), table
