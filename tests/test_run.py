"""End to end on real local clusters: osd-classic --quick, resume after SIGKILL, Ctrl-C, export.

The long run attaches to the session cluster (fast); the Ctrl-C test uses no
target options, so fathom starts and must stop its own disposable cluster.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FATHOM, run_fathom

from fathom.store import Store

pytestmark = pytest.mark.cluster

MINI = """\
name: mini
prep:
  pools: [{name: rbd, pg_num: 16}]
  images: {pool: rbd, count: 1, size: 32MiB}
  prefill: true
defaults: {engine: fio, runtime: 2s, ramp_time: 1s}
workloads:
  - {name: rr, rw: randread, bs: 4k}
  - {name: rw, rw: randwrite, bs: 4k}
sweep: {iodepth: [1, 4, 16]}
"""


def attach(cluster) -> list[str]:
    return ["--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path)]


def env_without_ceph() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CEPH_CONF", "CEPH_ARGS")}


def points_done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return c.execute("SELECT count(*) FROM points WHERE status = 'done'").fetchone()[0]
    except sqlite3.Error:
        return 0


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def sigkill_after_points(argv: list[str], db: Path, n: int, timeout: float, **popen) -> None:
    """Start `fathom run`, wait until n points are done, then SIGKILL it (nothing can clean up)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)
    try:
        wait_for(lambda: points_done(db) >= n, timeout, f"{n} point(s) done")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def our_pools(ceph) -> list[str]:
    return [p for p in ceph.ceph("osd", "pool", "ls") if p.startswith("fathom-")]


def test_osd_classic_quick_end_to_end(quick_osd_run, tmp_path):
    """The user's path: no target options, fathom's own disposable cluster, all 40 points."""
    db = quick_osd_run["db"]
    m = re.search(r"starting a disposable local cluster in (\S+)", quick_osd_run["stderr"])
    assert m, quick_osd_run["stderr"][-2000:]
    cdir = m.group(1)
    assert not Path(cdir).exists()  # stopped and removed at the end
    assert not [line for line in os.popen("ps -eo args").read().splitlines() if cdir in line]
    with Store(db) as st:
        run = st.run("oc")
        assert run.status == "done"
        pts = st.points(run.id)
        assert len(pts) == 40 and all(pt["status"] == "done" for pt in pts)
        for pt in pts:
            m = pt["metrics"]
            assert m["iops"] > 0 and m["total_ios"] > 0, pt["key"]
            assert m["osd_cpu"] and m["osd_cpu"] > 0, pt["key"]
            assert m["osd_mem_mib"] and m["osd_mem_mib"] > 10, pt["key"]
            # every sampled daemon kind has its columns; kinds the cluster does not run stay empty
            assert m["mon_mem_mib"] > 10 and m["mgr_mem_mib"] > 10 and m["osd_cores"] > 0, pt["key"]
            assert m["rgw_cpu"] is None and m["mds_mem_mib"] is None, pt["key"]
            assert m["clat_ms"] > 0 and m["p99_ms"] >= m["p50_ms"] > 0
            assert pt["params"]["numjobs"] == 1 and pt["gate"]["ok"] in (True, False)
            tel = st.telemetry(pt["id"])
            assert {"osd.0", "host", "mon.a", "mgr.x"} <= {t["source"] for t in tel}, pt["key"]
            assert any(t["source"] == "engine" and t["cpu_pct"] > 0 for t in tel)
            perf = st.perf_counters(pt["id"])["osd.0"]
            kind = "osd.op_r" if pt["params"]["rw"] in ("read", "randread") else "osd.op_w"
            assert perf[kind] > 0 and perf[kind + "_latency"]["count"] > 0
            assert st.histograms(pt["id"])
        assert [pt["params"]["iodepth"] for pt in pts[:10]] == [1, 2, 4, 8, 16, 24, 32, 40, 52, 64]
        env = run.env
        assert env["ceph_version"].startswith("ceph version") and env["ceph_build"]
        assert env["host"]["cores"] >= 1 and env["host"]["cpu_model"] is not None
        assert env["hygiene"]["osd flag noscrub"] == "set" and env["hygiene"]["client rbd_io_scheduler"] == "none"
        assert env["prefill"]["images"] == 2
        assert env["telemetry_cost"]["cost_pct_of_one_core"] is not None
        assert env["target"]["kind"] == "local (disposable)"
        kinds = {e["kind"] for e in st.events(run.id)}
        assert {"health", "telemetry"} <= kinds

    # export: one row per point, the study's columns, units as documented
    out = tmp_path / "r.csv"
    run_fathom("export", "--db", str(db), "--format", "csv", "-o", str(out), check=True)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 40
    need = ["workload", "iodepth", "numjobs", "bs", "iops", "bw_mib_s", "total_ios", "clat_ms", "clat_stdev_ms",
            "p50_ms", "p99_ms", "p999_ms", "usr_cpu", "sys_cpu", "osd_cpu", "osd_mem_mib"]
    assert all(c in rows[0] for c in need)
    r = rows[0]
    assert r["workload"] == "randread4k" and r["bs"] == "4096" and r["numjobs"] == "1"
    assert abs(float(r["bw_mib_s"]) - float(r["iops"]) * 4096 / 2**20) < 0.01 * float(r["bw_mib_s"]) + 1e-9
    seq = rows[30]
    assert seq["workload"] == "seqwrite64k"
    assert abs(float(seq["bw_mib_s"]) - float(seq["iops"]) * 65536 / 2**20) < 0.01 * float(seq["bw_mib_s"])
    p = run_fathom("ls", "--db", str(db), check=True)
    assert "oc" in p.stdout and "40/40" in p.stdout
    p = run_fathom("show", "oc", "--db", str(db), check=True)
    assert "randread4k" in p.stdout


def test_resume_after_sigkill(cluster, ceph, tmp_path):
    suite = tmp_path / "mini.yaml"
    suite.write_text(MINI)
    db = tmp_path / "k.db"
    sigkill_after_points([FATHOM, "run", str(suite), "--db", str(db), *attach(cluster)], db, 2, 180)
    with Store(db) as st:
        run = st.run("latest")
        assert run.status == "running"  # killed: nobody could mark it
        first = {pt["key"]: pt["started"] for pt in st.points(run.id) if pt["status"] == "done"}
    assert 2 <= len(first) < 6
    leftovers = our_pools(ceph)
    assert leftovers  # the killed attempt could not clean up
    # PR_SET_PDEATHSIG: the engine died with fathom
    wait_for(lambda: not [p for p in os.popen("ps -eo args").read().splitlines()
                          if p.startswith("fio ") and str(tmp_path) in p], 10, "fio to stop")
    p = run_fathom("run", "--resume", str(run.id), "--db", str(db), *attach(cluster), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(db) as st:
        run = st.run(run.id)
        assert run.status == "done"
        pts = st.points(run.id)
        assert len(pts) == 6 and all(pt["status"] == "done" for pt in pts)
        for pt in pts:  # finished points were kept, not run again
            if pt["key"] in first:
                assert pt["started"] == first[pt["key"]]
        assert len(run.env["attempts"]) == 2
    assert not our_pools(ceph)  # the killed attempt's pools were removed by the resumed run
    # no secret anywhere in the store, and the stored connection is paths and names only
    secret = re.search(r"key = (\S+)", cluster.keyring_path.read_text()).group(1)
    assert secret.encode() not in db.read_bytes()
    with Store(db) as st:
        assert "key" not in json.dumps(st.run("latest").env["target"]["connection"]).replace("keyring", "")
    p = run_fathom("run", "--resume", str(run.id), "--db", str(db), *attach(cluster))
    assert p.returncode == 0 and "nothing to resume" in p.stderr


def test_ctrl_c_on_own_disposable_cluster(tmp_path):
    """No target options: fathom starts its own cluster; SIGINT marks the point, keeps the rest, stops the cluster."""
    suite = tmp_path / "mini.yaml"
    suite.write_text(MINI.replace("runtime: 2s", "runtime: 4s"))
    db = tmp_path / "c.db"
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_without_ceph(), cwd=tmp_path)
    try:
        wait_for(lambda: points_done(db) >= 1, 240, "first point done")
        time.sleep(2.5)  # well inside the second point
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    m = re.search(r"starting a disposable local cluster in (\S+)", err)
    assert m, err
    cdir = m.group(1)
    assert not Path(cdir).exists()  # down() removed it
    assert not [line for line in os.popen("ps -eo args").read().splitlines() if cdir in line]
    assert "resume with: fathom run --resume" in err
    with Store(db) as st:
        run = st.run("latest")
        assert run.status == "interrupted"
        pts = st.points(run.id)
        statuses = [pt["status"] for pt in pts]
        assert statuses[0] == "done" and statuses[-1] == "interrupted", statuses
        assert st.points(run.id)[0]["metrics"]["iops"] > 0
        assert any(e["kind"] == "interrupt" for e in st.events(run.id))
        assert run.env["target"]["kind"] == "local (disposable)"


def test_resume_stops_the_cluster_a_killed_attempt_left(tmp_path):
    """SIGKILL cannot be caught: the next --resume finds the recorded cluster dir and stops that cluster."""
    suite = tmp_path / "mini.yaml"
    suite.write_text(MINI)
    db = tmp_path / "o.db"
    sigkill_after_points([FATHOM, "run", str(suite), "--db", str(db)], db, 1, 240, env=env_without_ceph(),
                         cwd=tmp_path)
    with Store(db) as st:
        run = st.run("latest")
        cdir = run.env["attempts"][0]["cluster_dir"]
        workdir = run.env["attempts"][0]["workdir"]
    assert Path(workdir).is_dir()  # the killed attempt's scratch directory, left behind
    pids = [int(p.read_text()) for p in (Path(cdir) / "run").glob("*.pid")]
    assert pids and any(os.path.exists(f"/proc/{p}") for p in pids)  # orphaned, still running
    p = run_fathom("run", "--resume", str(run.id), "--db", str(db), env=env_without_ceph(), cwd=tmp_path,
                   timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"stopping the disposable cluster an interrupted attempt left in {cdir}" in p.stderr
    assert not Path(cdir).exists()
    assert not Path(workdir).exists()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
    with Store(db) as st:
        run = st.run(run.id)
        assert run.status == "done" and len(st.points(run.id)) == 6
