"""Faults during load and a full cluster, on real local clusters.

One `fathom run` on a disposable 3-OSD cluster (pool size 3, min_size 2) runs two
short points: osd.1 is SIGKILLed at 5 s and started at 12 s (pids checked, the
stored timeline shows the dip), then a point whose cluster is paused for good at
6 s with a 4 s op timeout (it ends instead of hanging, counts ETIMEDOUT errors,
and the pause is undone at its end). The second point's gate is a fresh wait for
a clean cluster. The full-pool case and the attached-cluster checks use the
session cluster. Assertions are on events, pids, orderings and generous bounds,
never on how fast this machine is: so the faults run starts with the module and goes
on beside the module's other tests (its test is the last).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import FATHOM, run_fathom, session_wants
from test_run import attach, env_without_ceph

from fathom.cluster.local import LocalCluster
from fathom.results.store import Store

pytestmark = pytest.mark.cluster

FAULTS = """\
name: faults-test
cluster: {kind: local, osds: 3, osd_size: 4GiB}
prep:
  pools: [{name: rbd, pg_num: 16, size: 3, min_size: 2, application: rbd}]
  images: {pool: rbd, count: 1, size: 64MiB}
defaults: {interface: rbd, pool: rbd, rw: randwrite, bs: 4k, iodepth: 8, on_error: continue, op_timeout: 4s}
workloads:
  - name: kill
    runtime: 22s
    faults: [{at_s: 5, action: kill, daemon: osd.1}, {at_s: 12, action: start, daemon: osd.1}]
  - name: pause
    runtime: 14s
    faults: [{at_s: 6, action: pause}]
"""


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory: pytest.TempPathFactory):
    """`fathom run` of FAULTS on its own disposable cluster (kept: the test looks at it, then stops it), started
    in the background: "wait" gives its completed process. At the end nothing of it is left running."""
    tmp = tmp_path_factory.mktemp("faults")
    suite, db = tmp / "faults.yaml", tmp / "f.db"
    suite.write_text(FAULTS)
    with open(tmp / "out", "w") as out, open(tmp / "err", "w") as err:
        argv = [FATHOM, "run", str(suite), "--db", str(db), "--keep-cluster"]
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env_without_ceph(), cwd=tmp,
                                stdin=subprocess.DEVNULL)

    def wait() -> subprocess.CompletedProcess:
        proc.wait(timeout=900)
        return subprocess.CompletedProcess(argv, proc.returncode, (tmp / "out").read_text(), (tmp / "err").read_text())

    try:
        yield {"wait": wait, "db": db}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        m = re.search(r"starting a disposable local cluster in (\S+)", (tmp / "err").read_text())
        if m and LocalCluster(m.group(1)).exists():  # the test stops it; this, if the test did not get so far
            LocalCluster(m.group(1)).down()


@pytest.fixture(scope="module", autouse=True)
def _faults_run_starts_with_the_module(request):
    """The faults run starts when the module does and goes on beside the module's other tests (its test comes
    last): its cluster is its own, its points are time based, and what its test asserts (events, pids,
    orderings, generous bounds) never depends on how fast the machine is; the others' runs are on the session
    cluster, asserted the same way."""
    if session_wants(request, "faults_run"):
        request.getfixturevalue("faults_run")


def fault_events(events: list[dict], point_id: int) -> list[dict]:
    return [e for e in events if e["kind"] == "fault" and e["point_id"] == point_id]


FULL = """\
name: full-test
cluster: {kind: attached}
workloads:
  - {name: first, interface: null, rw: randread, runtime: 2s}
  - {name: fill, interface: rados, pool: full-test, rw: write, bs: 1MiB, iodepth: 4, runtime: 120s,
     stall_timeout: 8s, op_timeout: null}
  - {name: after, interface: rados, pool: full-test, rw: write, bs: 1MiB, runtime: 5s}
  - {name: reads, interface: null, rw: randread, runtime: 2s}
"""


def test_full_pool_ends_the_point_and_the_run_by_policy(cluster, ceph, tmp_path):
    pool = "full-test"
    ceph.ceph("osd", "pool", "create", pool, "8", fmt_json=False)
    ceph.ceph("osd", "pool", "application", "enable", pool, "rados", fmt_json=False)
    ceph.ceph("osd", "pool", "set-quota", pool, "max_bytes", str(8 << 20), fmt_json=False)
    suite = tmp_path / "full.yaml"
    suite.write_text(FULL)
    db = tmp_path / "full.db"
    try:
        # the full pool's POOL_FULL keeps the gate from passing: it waits briefly, then measures anyway
        p = run_fathom("run", str(suite), "--db", str(db), "--name", "stop", "--gate-timeout", "5s",
                       *attach(cluster), timeout=600)
        assert p.returncode != 0 and "Traceback" not in p.stderr
        assert "POOL_FULL" in p.stderr and "finished points kept" in p.stderr, p.stderr[-2000:]
        with Store(db) as store:
            pts = {q["workload"]: q for q in store.points(store.run("stop").id)}
        assert pts["first"]["status"] == "done"  # finished points are kept
        assert pts["fill"]["status"] == "failed" and "POOL_FULL" in pts["fill"]["error"]
        assert "the cluster is full" in pts["fill"]["error"]
        assert pts["fill"]["ended"] - pts["fill"]["started"] < 100  # well before its 120 s runtime
        assert "after" not in pts and "reads" not in pts  # the run stopped there

        p = run_fathom("run", str(suite), "--db", str(db), "--name", "skip", "--on-full", "skip",
                       "--gate-timeout", "5s", *attach(cluster), timeout=600)
        assert p.returncode != 0 and "Traceback" not in p.stderr
        with Store(db) as store:
            pts = {q["workload"]: q for q in store.points(store.run("skip").id)}
        assert pts["fill"]["status"] == "failed"
        assert pts["after"]["status"] == "skipped" and "POOL_FULL" in pts["after"]["error"]
        assert pts["reads"]["status"] == "done"  # a read still runs on a full cluster
    finally:
        ceph.ceph("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", fmt_json=False)


def test_faults_the_attached_cluster_cannot_take(cluster, tmp_path):
    suite = tmp_path / "bad.yaml"
    suite.write_text("name: bad\ncluster: {kind: attached}\nworkloads:\n"
                     "  - {name: w, interface: rados, pool: rados-x, rw: write, runtime: 5s,\n"
                     "     faults: [{at_s: 1, action: osd_down, target: osd.7}]}\n")
    p = run_fathom("run", str(suite), "--db", str(tmp_path / "b.db"), *attach(cluster), timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "no daemon 'osd.7'" in p.stderr and "osd.0" in p.stderr, p.stderr
    assert not (tmp_path / "b.db").exists() or not Store(tmp_path / "b.db").runs()  # refused before any run


def test_fault_schedule_errors_are_reported_at_once(tmp_path):
    suite = tmp_path / "bad.yaml"
    suite.write_text(json.dumps({
        "name": "bad", "cluster": {"kind": "local", "osds": 2},
        "prep": {"pools": [{"name": "p"}]},
        "workloads": [
            {"name": "a", "interface": "rados", "pool": "p", "rw": "write", "runtime": "20s",
             "faults": [{"at_s": 5, "action": "kill", "target": "osd.2"}, {"at_s": 30, "action": "start",
                                                                        "target": "osd.1"}]}]}))
    p = run_fathom("plan", str(suite))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "2 problems" in p.stderr and "no daemon 'osd.2'" in p.stderr and "past the point's end" in p.stderr
    att = Path(tmp_path / "att.yaml")
    att.write_text("name: att\ncluster: {kind: attached, conf: /nonexistent.conf}\nworkloads:\n"
                   "  - {name: w, interface: rados, pool: p, rw: write, runtime: 20s,\n"
                   "     faults: [{at_s: 5, action: restart, target: osd.0}]}\n")
    p = run_fathom("plan", str(att))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "att.yaml:5" in p.stderr and "attached cluster's daemons are not fathom's" in p.stderr


def test_kill_restart_and_pause_on_schedule(faults_run, tmp_path):
    p, db = faults_run["wait"](), faults_run["db"]
    store = Store(db)
    run = store.run("latest")
    cdir = next(a["cluster_dir"] for a in run.state["attempts"] if a.get("cluster_dir"))
    lc = LocalCluster(cdir)
    try:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        pts = {q["workload"]: q for q in store.points(run.id)}
        events = store.events(run.id)

        # ---- kill at 5 s, start at 12 s, by pid, in that order ----
        kill, start = fault_events(events, pts["kill"]["id"])[:2]
        assert kill["data"]["action"] == "kill" and kill["data"]["outcome"] == "done"
        assert kill["data"]["daemon"] == start["data"]["daemon"] == "osd.1"
        assert start["data"]["action"] == "start" and start["data"]["outcome"] == "done"
        assert 5.0 <= kill["data"]["t_s"] < start["data"]["t_s"] and start["data"]["t_s"] >= 12.0
        # each timed when it was issued and when it took effect: the kill's pid gone, the start's new pid running
        assert 5.0 <= kill["data"]["issued_t_s"] <= kill["data"]["t_s"], kill["data"]
        assert kill["data"]["effect"] == f"pid {kill['data']['pid']} gone"
        assert start["data"]["effect"] == f"pid {start['data']['pid']} running"
        assert kill["data"]["pid"] == start["data"]["pid_before"] != start["data"]["pid"]
        osd1 = next(d for d in lc.daemons() if d.name == "osd.1")
        assert osd1.pid == start["data"]["pid"] and osd1.running  # the started daemon is the one running now
        assert pts["kill"]["started"] < kill["ts"] < start["ts"] < pts["kill"]["ended"]
        said = p.stderr + p.stdout  # each fault on the run's progress as it happens
        assert f"fault t={kill['data']['issued_t_s']:.1f} s: kill osd.1 (pid {kill['data']['pid']}): done (took " \
               f"effect at t={kill['data']['t_s']:.1f} s: pid {kill['data']['pid']} gone)" in said, said

        # ---- the stored timeline shows the dip and what came after it ----
        m = pts["kill"]["metrics"]
        assert m["faults"] == 2 and m["fault_at_s"] == kill["data"]["t_s"]
        assert m["prefault_iops"] > 0 and m["fault_min_iops"] < m["prefault_iops"]
        ivs = store.intervals(pts["kill"]["id"])
        after = [sum(o["ops"] for o in r["ops"].values()) / r["dt"] for r in ivs if r["t"] > start["data"]["t_s"]]
        assert after and max(after) > m["fault_min_iops"]
        assert isinstance(m["fault_recovered"], bool)
        assert any(e["kind"] == "recovery" and e["point_id"] == pts["kill"]["id"] for e in events)

        # ---- the next point's gate was a wait for a clean cluster, not the state handed over ----
        gate = pts["pause"]["gate"]
        assert gate["ok"] and gate["waited_s"] >= 2.0  # a real gate: clean for its 2 s settle time
        assert pts["pause"]["started"] > pts["kill"]["ended"]

        # ---- pause with no unpause: ops time out, the point ends, the pause is undone ----
        pause_evs = fault_events(events, pts["pause"]["id"])
        assert [e["data"]["action"] for e in pause_evs] == ["pause", "unpause"]
        assert pause_evs[1]["data"].get("undo") and "unpaused" in pause_evs[1]["message"]
        # the pause took effect with the osdmap epoch that carries its flags; on a loaded host that can come after
        # the point's last record: then the point is flagged and no recovery is reported (never "back after 0 s")
        paused = pause_evs[0]["data"]
        assert paused["effect"].startswith("osdmap epoch ") and "pauserd,pausewr" in paused["effect"], paused
        last_t = max(r["t"] for r in store.intervals(pts["pause"]["id"]))
        if paused["t_s"] <= last_t:
            assert paused["outcome"] == "done" and pts["pause"]["metrics"]["fault_at_s"] == paused["t_s"]
        else:
            assert paused["outcome"] == "no effect within the point" and pts["pause"]["metrics"]["faults"] is None
        res = pts["pause"]["result"]
        assert any(e["kind"] == "ETIMEDOUT" and e["count"] > 0 for e in res["errors"]), res["errors"]
        # no hang: the engine ends within its op timeout after the runtime (bound kept generous)
        assert pts["pause"]["ended"] - pts["pause"]["started"] < 14 + 4 + 60
        flags = lc.ceph().ceph("osd", "dump")["flags"]
        assert "pauserd" not in flags and "pausewr" not in flags
        assert lc.ceph().ceph("osd", "stat")["num_up_osds"] == 3

        # ---- reports: timeline with fault markers; the fault is labelled, not an anomaly ----
        html = tmp_path / "r.html"
        md = tmp_path / "r.md"
        run_fathom("report", "latest", "--db", str(db), "-o", str(html), check=True)
        run_fathom("report", "latest", "--db", str(db), "-o", str(md), check=True)
        text = html.read_text()
        assert 'data-chart="timeline' in text and "kill osd.1" in text and "start osd.1" in text
        mdt = md.read_text()
        assert "kill osd.1" in mdt and "timeline" in mdt
    finally:
        store.close()
        lc.down()
