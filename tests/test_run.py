"""End to end on real local clusters: osd-classic --quick, resume after SIGKILL, Ctrl-C, export.

The long run attaches to the session cluster (fast); the Ctrl-C test uses no
target options, so fathom starts and must stop its own disposable cluster.
The rados-bench resume tests check that reads after a resume read what the
write of an earlier attempt left, in the same pool (attached) or the same
disposable cluster (adopted), and that lost data is written again, said so.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from conftest import FATHOM, export_table, kill_after_first_point, perf_rows, run_fathom

import fathom
from fathom.cluster.ceph import Connection
from fathom.cluster.local import LocalCluster
from fathom.interfaces.base import PointContext
from fathom.engines.rados_bench import RadosBenchAdapter
from fathom.errors import FathomError
from fathom.analysis import bound
from fathom.results.store import Store

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
sweep: {iodepth: [1, 4]}
"""


def attach(cluster) -> list[str]:
    return ["--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path)]


def env_without_ceph() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CEPH_CONF", "CEPH_ARGS")}


def points_done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        # closed here: a connection is otherwise closed only by the cyclic GC (its statement cache refers to it),
        # and any close of a file descriptor of the store in this process (db.read_bytes()) drops the POSIX locks of
        # the connections left open, so that a fathom process ending removes the WAL they still map: "database disk
        # image is malformed" at this test's next open
        with closing(sqlite3.connect(db, timeout=5)) as c:
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
            # the OSD's own latency over the point, from its histograms (admin socket): as many ops as the
            # counter says, the percentiles inside the client's (a 4 KiB op's OSD time is below its round trip)
            (lat,) = [e["data"] for e in st.events(run.id) if e["kind"] == "osd_latency" and e["point_id"] == pt["id"]]
            op = kind.removeprefix("osd.op_").replace("r", "read").replace("w", "write")
            assert lat["source"] == "admin socket" and lat["ops"][op]["ops"] == perf[kind], (lat, perf[kind])
            assert lat["ops"][op]["p50_low_s"] * 1e3 <= m["p99_ms"] and lat["ops"][op]["p99_s"], (lat, m["p99_ms"])
            # the device under the OSD's BlueStore file is judged, busy while the point wrote
            evs = [e for e in st.events(run.id) if e["point_id"] == pt["id"]]
            res, missing = bound.resources(tel, pt["result"]["extra"]["telemetry_window"], bound.capacity_of(evs), m)
            (disk,) = [r for r in res if r["kind"] == "disk"]
            assert "of osd.0 on " in disk["evidence"] and not [x for x in missing if "device" in x], (res, missing)
            if kind == "osd.op_w":
                assert disk["use"] > 0, disk
        assert [pt["params"]["iodepth"] for pt in pts[:10]] == [1, 2, 4, 8, 16, 24, 32, 40, 52, 64]
        env = run.env
        assert env["ceph_version"].startswith("ceph version") and env["ceph_build"]
        assert env["host"]["cores"] >= 1 and env["host"]["cpu_model"] is not None
        assert env["hygiene"]["osd flag noscrub"] == "set" and env["hygiene"]["client rbd_io_scheduler"] == "none"
        assert run.state["prefill"]["images"] == 2 and "prefill" not in env  # the attempts' record, not the environment
        assert env["telemetry_cost"]["cost_pct_of_one_core"] is not None
        assert env["cluster"]["kind"] == "local (disposable)"
        kinds = {e["kind"] for e in st.events(run.id)}
        assert {"health", "telemetry"} <= kinds

    # export: one row per point, the study's columns, units as documented
    out = tmp_path / "r.csv"
    run_fathom("export", "oc", "--db", str(db), "--format", "csv", "-o", str(out), check=True)  # the store may
    # hold the session's Reef run too (conftest's quick_runs): name the run
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
    assert any(line.split()[1:2] == ["oc"] and "40/40" in line for line in p.stdout.splitlines()), p.stdout
    p = run_fathom("show", "oc", "--db", str(db), check=True)
    assert "randread4k" in p.stdout

    # the perf counters and each daemon's figures: long tables (CSV, JSON and Parquet agree) of what is stored
    counters = export_table(db, "counters", tmp_path, run="oc")
    srv = export_table(db, "servers", tmp_path, run="oc")
    with Store(db) as st:
        for pt in st.points(st.run("oc").id):
            got = {(r["daemon"], r["figure"]): r for r in counters if r["idx"] == pt["idx"]}
            assert {k: r["value"] for k, r in got.items()} == perf_rows(st.perf_counters(pt["id"])), pt["key"]
            op = "osd.op_r" if pt["params"]["rw"] in ("read", "randread") else "osd.op_w"
            assert got[("osd.0", op)]["unit"] == "count" and got[("osd.0", f"{op}_latency.sum")]["unit"] == "s"
            assert got[("osd.0", op)]["source"] == "admin socket" and got[("osd.0", op)]["host"] == "local"
            mine = {(r["daemon"], r["figure"]): r["value"] for r in srv if r["idx"] == pt["idx"]}
            m = pt["metrics"]  # one daemon of each kind, all on this host: each kind's figure is its daemon's
            assert mine[("osd.0", "cpu_pct")] == pytest.approx(m["osd_cpu"], rel=1e-9)
            assert mine[("mon.a", "rss_mib")] == pytest.approx(m["mon_mem_mib"], rel=1e-9)
            assert mine[("osd.0", "ctx_switches_s")] == pytest.approx(m["osd_ctx_switches_s"], rel=1e-9)
            assert mine[("", "host_cpu_pct")] == pytest.approx(m["host_cpu_pct"], rel=1e-9)
    assert any(r["figure"].endswith("_bytes") and r["unit"] == "bytes" for r in counters)
    assert "per host, over each point's telemetry window" in p.stdout


def test_resume_after_sigkill(cluster, ceph, tmp_path):
    suite = tmp_path / "mini.yaml"
    suite.write_text(MINI)
    db = tmp_path / "k.db"
    sigkill_after_points([FATHOM, "run", str(suite), "--db", str(db), *attach(cluster)], db, 2, 180)
    with Store(db) as st:
        run = st.run("latest")
        assert run.status == "running"  # killed: nobody could mark it
        first = {pt["key"]: pt["started"] for pt in st.points(run.id) if pt["status"] == "done"}
    assert 2 <= len(first) < 4
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
        assert len(pts) == 4 and all(pt["status"] == "done" for pt in pts)
        for pt in pts:  # finished points were kept, not run again
            if pt["key"] in first:
                assert pt["started"] == first[pt["key"]]
        assert len(run.state["attempts"]) == 2
    assert not our_pools(ceph)  # the killed attempt's pools were removed by the resumed run
    # no secret anywhere in the store, and the stored connection is paths and names only
    secret = re.search(r"key = (\S+)", cluster.keyring_path.read_text()).group(1)
    assert secret.encode() not in db.read_bytes()
    with Store(db) as st:
        assert "key" not in json.dumps(st.run("latest").env["cluster"]["connection"]).replace("keyring", "")
    p = run_fathom("run", "--resume", str(run.id), "--db", str(db), *attach(cluster))
    assert p.returncode == 0 and "nothing to resume" in p.stderr


REATTACH = """\
name: reattach
prep:
  pools: [{name: p, pg_num: 8, size: 1, application: rados}]
defaults: {engine: fathom-engine, interface: rados, pool: p, bs: 4k, runtime: 2s, ramp_time: 0s}
workloads:
  - {name: w, rw: write}
sweep: {iodepth: [1, 2, 4, 8]}
"""


def test_a_bare_resume_goes_on_against_the_cluster_the_run_was_attached_to(cluster, ceph, engine_ready, tmp_path):
    """A run attached with --conf and --keyring, killed after its first point, is resumed with no option but
    --db: it goes on against the same cluster, saying which stored options it used (it started a disposable
    cluster and ran the rest there, or, where the killed attempt had changed settings on the attached cluster,
    stopped with rc 3); and the resume line an interrupted attempt prints names them."""
    suite = tmp_path / "reattach.yaml"
    suite.write_text(REATTACH)
    db = tmp_path / "ra.db"
    fsid = ceph.ceph("fsid")["fsid"]
    bare = [FATHOM, "run", "--resume", "ra", "--db", str(db)]
    try:
        kill_after_first_point(["run", str(suite), "--db", str(db), "--name", "ra", *attach(cluster)], db)
        first = points_done(db)
        with Store(db) as st:
            run = st.run("ra")
            assert run.status == "running"
            conn = run.state["attached_with"]["conn"]
        assert conn == {"conf": str(cluster.conf_path), "name": "client.admin", "keyring": str(cluster.keyring_path)}
        secret = re.search(r"key = (\S+)", cluster.keyring_path.read_text()).group(1)
        assert secret.encode() not in db.read_bytes()

        # a bare resume, interrupted after a point of its own: the line it prints resumes against the cluster
        proc = subprocess.Popen(bare, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env_without_ceph(), cwd=tmp_path)
        try:
            wait_for(lambda: points_done(db) > first or proc.poll() is not None, 180, "a point of the resume")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, out + err
        assert "starting a disposable local cluster" not in err
        assert (f"with what it was attached with, stored with the run, as the command line gives none of it: "
                f"--conf {cluster.conf_path} --client-name client.admin --keyring {cluster.keyring_path}") in err
        said = [line for line in err.splitlines() if line.startswith("resume with: ")]
        assert said == [f"resume with: fathom run --resume {run.id} --db {db} --conf {cluster.conf_path} "
                        f"--client-name client.admin --keyring {cluster.keyring_path}"], err

        # the bare resume again: it finishes the points against the same cluster
        p = subprocess.run(bare, capture_output=True, text=True, env=env_without_ceph(), cwd=tmp_path,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "starting a disposable local cluster" not in p.stderr
        with Store(db) as st:
            run = st.run("ra")
            pts = st.points(run.id)
            assert run.status == "done" and len(pts) == 4 and all(pt["status"] == "done" for pt in pts)
            assert len(run.state["attempts"]) == 3
            assert run.state["journal"]["fsid"] == fsid  # every attempt's journal on the session cluster
            assert run.env["cluster"]["kind"] == "attached"
            assert run.env["cluster"]["connection"]["conf"] == str(cluster.conf_path)
            resumes = [e for e in st.events(run.id) if e["kind"] == "resume" and "attached with" in e["message"]]
            assert len(resumes) == 2 and resumes[0]["data"]["used"][:2] == ["--conf", str(cluster.conf_path)]
        assert not [pl for pl in our_pools(ceph) if pl.startswith(run.state["data_tag"])]
    finally:  # the session cluster as found, whatever failed: the run's settings back, its pools gone
        if db.exists():
            run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))


def test_ctrl_c_on_own_disposable_cluster(tmp_path):
    """No target options: fathom starts its own cluster; SIGINT marks the point, keeps the rest, stops the cluster
    (with it the data the write left, which the remaining reads need: the user is told what --resume does)."""
    db = tmp_path / "c.db"
    proc = subprocess.Popen([FATHOM, "run", str(rados_bench_suite(tmp_path)), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_without_ceph(),
                            cwd=tmp_path)
    try:
        wait_for(lambda: points_done(db) >= 1, 240, "first point done")
        with Store(db) as st:
            data_tag = st.run("latest").state["data_tag"]
        wait_for(lambda: rados_bench_of(data_tag, "seq"), 30, "the seq point to run")
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
    assert "2 remaining read point(s) read data that finished write points left; it goes now with the run's " \
           "disposable cluster, so `--resume` writes it again (unmeasured" in err
    with Store(db) as st:
        run = st.run("latest")
        pts = st.points(run.id)
        statuses = [pt["status"] for pt in pts]
        assert statuses == ["done", "interrupted"], statuses
        assert pts[0]["metrics"]["iops"] > 0
        assert any(e["kind"] == "interrupt" for e in st.events(run.id))
        assert run.env["cluster"]["kind"] == "local (disposable)"


def rados_bench_suite(tmp_path: Path, hygiene: bool = True) -> Path:
    """The built-in rados-bench suite, small: 3 s points of 1 MiB objects on a 4 GiB OSD.

    hygiene=False on the shared session cluster: its scrub flags would stay set for the tests after.
    """
    text = (Path(fathom.__file__).parent / "suites" / "rados-bench.yaml").read_text()
    for old, new in (("osd_size: 20GiB", "osd_size: 4GiB"), ("bs: 4MiB", "bs: 1MiB"), ("runtime: 60s", "runtime: 3s"),
                     ("hygiene: true", f"hygiene: {str(hygiene).lower()}")):
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "rb.yaml"
    path.write_text(text)
    return path


def rados_bench_of(data_tag: str, mode: str = "") -> list[str]:
    """Command lines of the `rados bench` processes of a run (read whole from /proc: ps cuts long lines)."""
    out = []
    for f in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = f.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if Path(argv[0]).name == "rados" and data_tag in argv and (not mode or mode in argv):
            out.append(" ".join(argv))
    return out


def rados_bench_gone(data_tag: str) -> bool:
    """No `rados bench` of this run still runs (the engine dies with a SIGKILLed fathom)."""
    return not rados_bench_of(data_tag)


def left_by_write(ceph, pool: str, data_tag: str) -> int:
    """Objects a `rados bench write --run-name data_tag` left in pool (its metadata object checked too)."""
    names = ceph.rados("-p", pool, "ls", fmt_json=False).split()
    assert data_tag in names  # rados bench's metadata object: what seq and rand read from
    return len([n for n in names if n.startswith("benchmark_data_")])


def assert_reads_read_the_write(pts: dict, written: int) -> None:
    """seq and rand done with ops; seq read the write's objects (all of them, unless its 3 s ran out first)."""
    for key in ("write", "seq", "rand"):
        assert pts[key]["status"] == "done", (key, pts[key]["error"])
        assert pts[key]["metrics"]["total_ios"] > 0, key
    seq = pts["seq"]["result"]["extra"]["rados_bench"]
    assert int(seq["total_reads_made"]) == written or float(seq["total_time_run"]) >= 3.0, (seq, written)


def test_rados_bench_resume_reads_what_the_write_left(cluster, ceph, tmp_path):
    """SIGKILL after the write point; the resume adopts the run's pool and its reads read the write's objects."""
    db = tmp_path / "rb.db"
    sigkill_after_points([FATHOM, "run", str(rados_bench_suite(tmp_path, hygiene=False)), "--db", str(db),
                          *attach(cluster)], db, 1, 180)
    with Store(db) as st:
        run = st.run("latest")
        write = {pt["key"]: pt for pt in st.points(run.id)}["write"]
        data_tag, pool = run.state["data_tag"], run.state["pools"]["bench"]
    assert write["status"] == "done"
    wait_for(lambda: rados_bench_gone(data_tag), 10, "rados bench to stop")
    written = left_by_write(ceph, pool, data_tag)
    assert written == write["metrics"]["total_ios"] > 0
    pool_id = {p["pool_name"]: p["pool_id"] for p in ceph.ceph("osd", "pool", "ls", "detail")}[pool]
    pool_max = ceph.ceph("osd", "dump")["pool_max"]
    p = run_fathom("run", "--resume", str(run.id), "--db", str(db), *attach(cluster), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"adopted pool {pool} (id {pool_id})" in p.stderr
    assert ceph.ceph("osd", "dump")["pool_max"] == pool_max  # the resume made no pool: it read the one left
    assert pool not in ceph.ceph("osd", "pool", "ls")  # and removed it when the run ended
    with Store(db) as st:
        run = st.run(run.id)
        pts = {pt["key"]: pt for pt in st.points(run.id)}
        assert run.status == "done" and pts["write"]["started"] == write["started"]
        assert_reads_read_the_write(pts, written)
        kinds = [e["kind"] for e in st.events(run.id)]
        assert "rewrite" not in kinds


def test_a_read_with_nothing_written_fails_naming_the_cause(cluster, rados_pool, tmp_path):
    conn = Connection(conf=str(cluster.conf_path), name="client.admin", keyring=str(cluster.keyring_path))
    ctx = PointContext(conn=conn, pool=rados_pool, images=[], run_tag="fathom-0-nothing", workdir=tmp_path,
                       timeout=60)
    params = {"rw": "read", "runtime": 1.0, "iodepth": 4, "bs": 2**20, "drop_caches": False}
    with pytest.raises(FathomError, match=f"found nothing to read in pool {rados_pool}.*rw: write before the reads"):
        RadosBenchAdapter().run(params, ctx)


# the tests that resume a killed attempt's disposable cluster, and the store each one's attempt writes
KILLED = {"test_resume_adopts_the_cluster_a_killed_attempt_left": "o.db",
          "test_resume_stops_an_unusable_cluster_a_killed_attempt_left": "u.db"}


@pytest.fixture(scope="module")
def killed_attempts(request, tmp_path_factory) -> dict[str, tuple[Path, BaseException | None]]:
    """For each test of KILLED the session collected, a `fathom run` of the small rados-bench suite with no target
    options, SIGKILLed once its first point is stored: its disposable cluster is left running, with the write's
    data. The attempts go side by side (each is a cluster start and a 3 s point; what the tests assert of them is
    stores, pids, clusters and data, never speed). Returns each test's directory (its suite, its store, the run's
    cwd) and what went wrong making its attempt. At the end no cluster of them is left running."""
    names = [n for n in KILLED if any(it.name == n for it in request.session.items)]
    dirs = {n: tmp_path_factory.mktemp("killed") for n in names}
    errors: dict[str, BaseException] = {}

    def attempt(name: str) -> None:
        d = dirs[name]
        try:
            sigkill_after_points([FATHOM, "run", str(rados_bench_suite(d)), "--db", str(d / KILLED[name])],
                                 d / KILLED[name], 1, 240, env=env_without_ceph(), cwd=d)
        except BaseException as exc:  # noqa: BLE001 (the test that takes this attempt raises it)
            errors[name] = exc

    threads = [threading.Thread(target=attempt, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        yield {n: (dirs[n], errors.get(n)) for n in names}
    finally:
        for n, d in dirs.items():  # never leave daemons behind, whatever failed
            try:
                with Store(d / KILLED[n]) as st:
                    attempts = st.run("latest").state["attempts"]
            except Exception:  # noqa: BLE001 (no store or no run: no attempt got so far)
                continue
            for a in attempts:
                if a.get("cluster_dir") and LocalCluster(a["cluster_dir"]).exists():
                    LocalCluster(a["cluster_dir"]).down()


def test_resume_adopts_the_cluster_a_killed_attempt_left(killed_attempts):
    """SIGKILL cannot be caught: its disposable cluster still runs, with the write's data; the resume reads it."""
    tmp_path, err = killed_attempts["test_resume_adopts_the_cluster_a_killed_attempt_left"]
    if err:
        raise err
    db = tmp_path / "o.db"
    with Store(db) as st:
        run = st.run("latest")
        cdir, workdir = run.state["attempts"][0]["cluster_dir"], run.state["attempts"][0]["workdir"]
        write = {pt["key"]: pt for pt in st.points(run.id)}["write"]
        data_tag = run.state["data_tag"]
    assert Path(workdir).is_dir()  # the killed attempt's scratch directory, left behind
    lc = LocalCluster(cdir)
    pids = {d.name: d.pid for d in lc.daemons()}
    assert pids and all(d.running for d in lc.daemons())  # orphaned, still running
    try:
        wait_for(lambda: rados_bench_gone(data_tag), 10, "rados bench to stop")
        ceph = lc.ceph()
        written = left_by_write(ceph, "bench", data_tag)
        assert written == write["metrics"]["total_ios"] > 0
        pool_id = {p["pool_name"]: p["pool_id"] for p in ceph.ceph("osd", "pool", "ls", "detail")}["bench"]
        p = run_fathom("run", "--resume", str(run.id), "--db", str(db), env=env_without_ceph(), cwd=tmp_path,
                       timeout=600)
    finally:
        left = lc.exists()
        if left:  # never leave daemons behind, whatever failed
            lc.down()
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"adopted the disposable cluster an interrupted attempt left in {cdir}" in p.stderr
    assert "starting a disposable local cluster" not in p.stderr
    assert f"adopted pool bench (id {pool_id})" in p.stderr
    assert not Path(workdir).exists()
    assert not left  # the resumed attempt owned it, and stopped it at the end
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
    with Store(db) as st:
        run = st.run(run.id)
        pts = {pt["key"]: pt for pt in st.points(run.id)}
        assert run.status == "done" and pts["write"]["started"] == write["started"]
        assert_reads_read_the_write(pts, written)
        # the same OSD process served the reads: the cluster was adopted, not started anew
        osd_pids = {t["pid"] for t in st.telemetry(pts["seq"]["id"]) if t["source"] == "osd.0"}
        assert osd_pids == {pids["osd.0"]}
        assert "rewrite" not in [e["kind"] for e in st.events(run.id)]
        assert run.env["cluster"]["adopted_from_attempt"] == run.state["attempts"][0]["tag"]


def test_resume_stops_an_unusable_cluster_a_killed_attempt_left(killed_attempts):
    """A left-behind cluster whose mon is dead is stopped; on the new one the write's data is written again."""
    tmp_path, err = killed_attempts["test_resume_stops_an_unusable_cluster_a_killed_attempt_left"]
    if err:
        raise err
    db = tmp_path / "u.db"
    with Store(db) as st:
        run = st.run("latest")
        cdir = run.state["attempts"][0]["cluster_dir"]
        write = {pt["key"]: pt for pt in st.points(run.id)}["write"]
    lc = LocalCluster(cdir)
    pids = {d.name: d.pid for d in lc.daemons()}
    os.kill(pids["mon.a"], signal.SIGKILL)  # a daemon fathom's own test run started
    wait_for(lambda: not next(d for d in lc.daemons() if d.name == "mon.a").running, 10, "mon.a to stop")
    try:
        p = run_fathom("run", "--resume", str(run.id), "--db", str(db), env=env_without_ceph(), cwd=tmp_path,
                       timeout=600)
    finally:
        left = lc.exists()
        if left:
            lc.down()
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"stopping the disposable cluster an interrupted attempt left in {cdir}: mon.a not running" in p.stderr
    assert "starting a disposable local cluster" in p.stderr
    assert not left
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
    with Store(db) as st:
        run = st.run(run.id)
        pts = {pt["key"]: pt for pt in st.points(run.id)}
        assert run.status == "done" and pts["write"]["started"] == write["started"]  # the measured write is kept
        rewrites = [e for e in st.events(run.id) if e["kind"] == "rewrite"]
        assert len(rewrites) == 1 and rewrites[0]["data"]["write"] == "write"
        assert rewrites[0]["data"]["before"] == "seq" and "on a new disposable cluster" in rewrites[0]["message"]
        assert_reads_read_the_write(pts, rewrites[0]["data"]["ops"])
        assert not run.state["data_lost"]
