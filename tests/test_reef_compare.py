"""The OSD study across Ceph releases: the session's `fathom run osd-classic --quick` (Pacific, this host's Ceph 16)
and the same suite with `--ceph reef` (its disposable cluster's daemons and fathom's client from the cached Debian 13
root file system), compared as the OSD study compared two builds. The session runs the two side by side into one
store (conftest's `quick_runs`): their points are time based, and nothing here depends on speed.

Opt-in (FATHOM_TEST_REEF=1; about 3.5 min): the default run covers current Ceph with Tentacle (test_releases)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_fathom

from fathom.cluster import rootfs
from fathom.results.store import Store

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(not os.environ.get("FATHOM_TEST_REEF"), reason="opt-in: FATHOM_TEST_REEF=1")]


def test_osd_classic_quick_on_reef_compared_with_pacific(quick_osd_run, quick_reef_run, engine_ready):
    db = quick_reef_run["db"]  # the session's store: the Pacific run "oc" and the Reef run "oc-reef"
    root = str(rootfs.root_path("reef"))
    with Store(db) as st:
        runs = {name: st.run(name) for name in ("oc", "oc-reef")}
        for name, run in runs.items():
            pts = st.points(run.id)
            assert len(pts) == 40 and {q["status"] for q in pts} == {"done"}, (name, [q["status"] for q in pts])
            assert all(q["metrics"]["iops"] > 0 for q in pts), name
    pacific, reef = runs["oc"].env, runs["oc-reef"].env
    assert pacific["ceph_version"].startswith("ceph version 16.")
    assert pacific["cluster"]["ceph_source"]["kind"] == "host"
    assert reef["ceph_version"].startswith("ceph version 18.")
    assert reef["cluster"]["ceph_source"] == {"kind": "rootfs", "dir": root} and reef["ceph_override"] == "reef"
    # the client goes with the release: this host's 16 for Pacific, the root's 18 for Reef
    assert pacific["ceph_client_version"].startswith("ceph version 16.")
    assert reef["ceph_client_version"].startswith("ceph version 18.") and reef["ceph_client"]["dir"] == root

    c = run_fathom("compare", "oc", "oc-reef", "--db", str(db), "--format", "json", check=True)
    out = json.loads(c.stdout)
    assert {w["workload"] for w in out["workloads"]} == {"randread4k", "randwrite4k", "seqread64k", "seqwrite64k"}
    assert all(w["ratio"] > 0 and len(w["levels"]) == 10 for w in out["workloads"]), out["workloads"]
    differs = {d["field"]: d["values"] for d in out["environment_differs"]}
    assert differs["Ceph (cluster)"] == [pacific["ceph_version"], reef["ceph_version"]]
    assert differs["Ceph daemons from"] == ["host", f"rootfs {root}"]
    assert differs["Ceph (client)"] == [pacific["ceph_client_version"], reef["ceph_client_version"]]
    text = run_fathom("compare", "oc", "oc-reef", "--db", str(db), check=True).stdout
    assert "Environments differ" in text and "ceph version 18." in text
