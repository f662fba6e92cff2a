"""The built-in `degraded` suite (--quick) end to end: three emulated hosts, each point under one fault (a host
frozen, a slowed link, the leader mon killed, the host-down story under two mClock profiles); every point's phases
(before, fault, recovery, after) with their figures, the report's per-phase tables and its mClock table; nothing
of the hosts left afterwards, every journaled change put back."""

from __future__ import annotations

import subprocess

import pytest
from conftest import run_fathom

from fathom.analysis.anomalies import phase_data
from fathom.analysis.data import load_run
from fathom.hosts import netns
from fathom.results.store import Store

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(netns.available() is not None, reason=f"namespaces: {netns.available()}")]


@pytest.fixture(scope="module")
def degraded(tmp_path_factory):
    db = tmp_path_factory.mktemp("degraded") / "d.db"
    p = run_fathom("run", "degraded", "--quick", "--db", str(db), timeout=1200)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return db, p.stdout


def _faults(run, point) -> list[dict]:
    return [e["data"] for e in run.events if e["kind"] == "fault" and point.started <= e["ts"] <= point.ended + 900]


def test_each_fault_has_its_phases(degraded):
    db, out = degraded
    with Store(db) as st:
        run = load_run(st, "latest")
    pts = {p.workload: p for p in run.points}
    assert set(pts) == {"hostdown", "slowlink", "monfail", "mclock-client", "mclock-recovery"}
    for wl in ("hostdown", "mclock-client", "mclock-recovery"):
        d = phase_data(run, pts[wl])
        by = {ph["phase"]: ph for ph in d["phases"]}
        # a cluster clean again by the first PG sample after the host's return has no recovery phase
        assert {"before", "fault"} <= set(by) and {"recovery", "after"} & set(by), (wl, d["phases"])
        # a frozen host holds the writes whose PGs it is primary of: clients see the fault
        assert by["fault"]["iops"] < 0.5 * by["before"]["iops"], (wl, by)
        assert by["before"]["p99_ms"] and by["before"]["p50_ms"] <= by["before"]["p99_ms"] <= by["before"]["p999_ms"]
        assert d["stall_s"] >= 1 and d["clean_s"] is not None and d["clean_s"] >= by["fault"]["seconds"]
    mon = phase_data(run, pts["monfail"])
    assert mon["quorum_s"] is not None and mon["quorum_s"] > 0
    assert {phase_data(run, pts[w])["profile"] for w in ("mclock-client", "mclock-recovery")} == \
        {"high_client_ops", "high_recovery_ops"}
    netem = next(f for f in _faults(run, pts["slowlink"]) if f["action"] == "netem")
    if netem.get("error"):  # a kernel without sch_netem: refused, named, and the point has no phases
        assert "no sch_netem qdisc" in netem["error"] and phase_data(run, pts["slowlink"]) is None
    else:
        assert phase_data(run, pts["slowlink"])["phases"]


def test_the_report_has_the_phases_and_the_profiles(degraded, tmp_path):
    db, _ = degraded
    md = tmp_path / "r.md"
    run_fathom("report", "latest", "--db", str(db), "-o", str(md), check=True)
    text = md.read_text()
    assert "hostdown 16: " in text and ": phases" in text and "time to active+clean" in text
    section = text[text.index("## mClock profiles during recovery"):]
    assert "| high_client_ops |" in section and "| high_recovery_ops |" in section


def test_nothing_of_the_hosts_is_left_and_every_change_is_put_back(degraded):
    db, _ = degraded
    with Store(db) as st:
        journal = st.run("latest").state["journal"]
    tag = "fx" + journal["fsid"].replace("-", "")[:6]
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert tag not in names and tag not in links
    faults = [e for e in journal["entries"] if e["kind"] == "fault"]
    assert faults and all(e["undone"] for e in faults)
    mclock = [e for e in journal["entries"] if e["what"] == "config osd osd_mclock_profile"]
    assert len(mclock) == 2 and all(e["undone"] for e in mclock)
