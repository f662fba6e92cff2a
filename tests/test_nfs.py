"""NFS: nfs-ganesha on loopback exporting CephFS and a local directory, and the engine's nfs target (libnfs).

One cluster with an MDS for the module; ganesha and the engine are real, never mocks.
The nfs target round-trips data with verify through both exports; a file changed
behind its back is caught; ganesha that cannot start shows its log; a SIGKILLed
fathom leaves ganesha running, and `fathom cluster umount` stops it by pid. At the
end no daemon, mount or loop device of the module is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import SRC, mds_cluster, run_fathom
from fathom.cluster import ganesha, mounts
from fathom.cluster.local import LocalCluster, pid_alive
from fathom.errors import ClusterError
from fathom.report import files_study
from fathom.results.store import Store

@pytest.fixture(scope="module")
def nfs_cluster(tmp_path_factory):
    with mds_cluster(tmp_path_factory, "nfs") as cp:
        yield cp


def test_ganesha_config_is_nfsv4_only_on_loopback(tmp_path):
    text = ganesha.config(LocalCluster(tmp_path / "c"), 20490, cephfs=True)
    for line in ("Protocols = 4;", "Bind_Addr = 127.0.0.1;", "NFS_Port = 20490;", "Enable_RQUOTA = false;",
                 "Minor_Versions = 0, 1, 2;", f"RecoveryRoot = {tmp_path}/c/ganesha/recovery;",
                 "Pseudo = /cephfs;", "Name = CEPH;", "Pseudo = /local;", "Name = VFS;"):
        assert line in text, line
    assert "Name = CEPH" not in ganesha.config(LocalCluster(tmp_path / "c"), 20490, cephfs=False)


def test_nfs_workload_fields():
    from fathom.interfaces.nfs import split_server
    from fathom.suite.spec import SuiteError, parse

    assert split_server("10.0.0.5") == ("10.0.0.5", 2049) and split_server("h:2050") == ("h", 2050)
    base = "name: t\nworkloads:\n  - {{name: w, interface: {iface}, rw: read, {extra}}}\n"
    ok = parse(base.format(iface="nfs", extra="export: cephfs"))
    assert ok.workloads[0].params()["export"] == "cephfs"
    for iface, extra, said in (("nfs", "export: /x", "pseudo path with server"),
                               ("nfs", "server: h, export: cephfs", "pseudo path"),
                               ("posix", "path: /tmp, export: local", "applies to the nfs interface")):
        with pytest.raises(SuiteError) as e:
            parse(base.format(iface=iface, extra=extra))
        assert said in str(e.value), str(e.value)


def attach(c: LocalCluster) -> list[str]:
    return ["--conf", str(c.conf_path), "--keyring", str(c.keyring_path)]


def ganesha_pid(c: LocalCluster) -> int | None:
    return next((d.pid for d in c.daemons() if d.name == ganesha.GANESHA and d.running), None)


def engine(binary: Path, spec: dict) -> tuple[int, list[dict]]:
    p = subprocess.run([str(binary), "-"], input=json.dumps(spec), capture_output=True, text=True, timeout=180)
    return p.returncode, [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]


def round_trip(binary: Path, srv: ganesha.Server, export: str, path: str) -> dict:
    """Write a shared file set with verify (8 KiB writes: three WRITE RPCs each), read it back with verify."""
    base = {"kind": "nfs", "server": srv.host, "port": srv.port, "export": srv.export(export), "path": path,
            "bs": 8192, "numjobs": 4, "nrfiles": 2, "filesize": 64 << 10, "file_service": "shared",
            "connections": 2}
    summary: dict = {}
    for rw, load in (("write", {"iodepth": 2, "bytes": 64 << 10}), ("randread", {"iodepth": 2, "ops": 40})):
        rc, recs = engine(binary, {"target": {**base, "rw": rw}, "load": load, "verify": True})
        assert rc == 0, recs[-2:]
        summary = next(r for r in recs if r["type"] == "summary")
    return summary


def test_ganesha_serves_both_exports_and_the_nfs_target_round_trips(nfs_cluster, engine_ready):
    c, pids = nfs_cluster
    system_dir = Path("/run/ganesha").exists()  # ganesha's default credential cache directory
    srv = ganesha.ganesha(c, need_cephfs=True)
    pid = ganesha_pid(c)
    # nothing of it outside the cluster's directory: its own cache directory is made, the system's is not
    assert (c.root / "ganesha" / "krb5").is_dir() and Path("/run/ganesha").exists() == system_dir
    assert pid is not None and pid not in pids
    pids.append(pid)
    d = next(d for d in c.daemons() if d.name == ganesha.GANESHA)
    assert d.kind == "ganesha" and c.owns(d)  # sampled by telemetry like the cluster's daemons
    assert ganesha.ganesha(c) == srv and ganesha_pid(c) == pid  # idempotent: the running one is kept
    for export, where in (("local", "/t-local"), ("cephfs", "/t-cephfs")):
        s = round_trip(engine_ready, srv, export, where)
        assert s["verify"]["checked"] == 4 * 40 * (8192 // 512) and s["verify"]["mismatches"] == 0, s["verify"]
        assert s["nfs"]["connections"] == 2 and s["nfs"]["page_cache"] is False
        assert s["nfs"]["write_rpc_bytes"] == 3072
    # the local export is a directory of the cluster's: the files are there, whole
    f = ganesha.local_export_dir(c) / "t-local" / "fathom.0"
    assert f.stat().st_size == 64 << 10
    # a missing export is named
    rc, recs = engine(engine_ready, {"target": {"kind": "nfs", "server": srv.host, "port": srv.port,
                                                "export": "/nosuch", "rw": "write", "filesize": 8192},
                                     "load": {"ops": 1}})
    err = next(r for r in recs if r["type"] == "error")
    assert rc == 3 and "/nosuch" in err["message"], err


def test_a_server_of_your_own_runs_without_a_cluster(nfs_cluster, engine_ready, tmp_path):
    """An nfs workload with server: needs no Ceph cluster: the run starts none and attaches to none."""
    c, pids = nfs_cluster
    srv = ganesha.ganesha(c)
    pids += [d for d in [ganesha_pid(c)] if d]
    suite = tmp_path / "own.yaml"
    suite.write_text(f"""
name: nfs-own
workloads:
  - name: w
    interface: nfs
    server: {srv.host}:{srv.port}
    export: /local
    path: /t-own
    rw: randwrite
    bs: 4k
    filesize: 256k
    runtime: 2
""")
    p = run_fathom("plan", str(suite), env=SRC, cwd=tmp_path)
    assert p.returncode == 0 and "no cluster needed" in p.stdout, p.stdout + p.stderr
    db = tmp_path / "own.db"
    p = run_fathom("run", str(suite), "--db", str(db), env=SRC, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    store = Store(db)
    run = store.run("latest")
    assert run.env["cluster"]["kind"] == "none"
    (q,) = store.points(run.id)
    assert q["status"] == "done" and q["metrics"]["write_iops"] > 0
    assert any(ganesha.local_export_dir(c).glob("t-own/fathom.*/fathom.*"))


def test_a_corrupted_file_is_caught(nfs_cluster, engine_ready):
    c, pids = nfs_cluster
    srv = ganesha.ganesha(c)
    pids += [p for p in [ganesha_pid(c)] if p]
    base = {"kind": "nfs", "server": srv.host, "port": srv.port, "export": srv.export("local"), "path": "/t-bad",
            "bs": 4096, "numjobs": 1, "nrfiles": 1, "filesize": 32 << 10}
    rc, recs = engine(engine_ready, {"target": {**base, "rw": "write"}, "load": {"iodepth": 1, "bytes": 32 << 10},
                                     "verify": True})
    assert rc == 0, recs[-2:]
    f = ganesha.local_export_dir(c) / "t-bad" / "fathom.0.0"
    with open(f, "r+b") as fh:  # behind the server's back: one block's bytes changed
        fh.seek(3 * 4096 + 100)
        fh.write(b"\xff" * 16)
    rc, recs = engine(engine_ready, {"target": {**base, "rw": "read"}, "load": {"iodepth": 1, "ops": 8},
                                     "verify": True})
    assert rc == 5 and recs[-1]["type"] == "error" and recs[-1]["kind"] == "verify", recs[-2:]
    v = next(r for r in recs if r["type"] == "summary")["verify"]
    assert v["mismatches"] == 1 and v["checked"] >= 7 * 8, v  # the other 7 blocks, and the bad one up to its fault
    assert v["first_mismatch"]["object"] == "/t-bad/fathom.0.0" and v["first_mismatch"]["offset"] == 3 * 4096


def test_ganesha_that_cannot_start_shows_its_log(nfs_cluster):
    c, pids = nfs_cluster
    mounts.teardown(c, only=ganesha.GANESHA)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ClusterError) as e:
            ganesha.ganesha(c, port=port)
    msg = str(e.value)
    assert "exited during start-up" in msg and "Address already in use" in msg and ":FATAL :" in msg, msg
    assert ganesha.GANESHA not in (c.state() or {})["daemons"] and not (c.root / mounts.JOURNAL).exists()


def test_quick_fs_apps_nfs_workloads_end_to_end_with_the_report(nfs_cluster, engine_ready, tmp_path):
    """The built-in suite's NFS workloads, --quick (10 jobs on 10 files), on the module's cluster."""
    from importlib import resources

    c, pids = nfs_cluster
    doc = yaml.safe_load((resources.files("fathom.suites") / "fs-apps.yaml").read_text())
    doc["workloads"] = [w for w in doc["workloads"] if w["interface"] == "nfs"]
    assert sorted(w["name"].split("-")[1] for w in doc["workloads"]) == ["nfscephfs"] * 4 + ["nfslocal"] * 4
    suite = tmp_path / "fs-nfs.yaml"
    suite.write_text(yaml.safe_dump(doc))
    db = tmp_path / "fs.db"
    p = run_fathom("run", str(suite), "--quick", "--db", str(db), *attach(c), env=SRC, cwd=tmp_path, timeout=600)
    pids += [d for d in [ganesha_pid(c)] if d]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    store = Store(db)
    pts = {q["workload"]: q for q in store.points(store.run("latest").id)}
    assert len(pts) == 8 and all(q["status"] == "done" for q in pts.values())
    for name, q in pts.items():
        m = q["metrics"]
        for d in files_study.DIRECTIONS[name.split("-")[0]]:
            assert m[f"{d}_bw_mib_s"] > 0, (name, m)
    # ganesha is sampled, though the run itself started it. These points last 5 to 160 ms: one that ends within
    # 50 ms of the sampler's baseline for ganesha (taken once the point's daemons are listed, later on a busy
    # machine) is too short for a rate from /proc's 10 ms ticks and is left unsampled, so only some are
    sampled = {n for n, q in pts.items() if q["metrics"].get("ganesha_cpu") is not None}
    assert {n.split("-")[1] for n in sampled} == {"nfscephfs", "nfslocal"}, sorted(sampled)
    md = tmp_path / "r.md"
    run_fathom("report", "latest", "--db", str(db), "-o", str(md), env=SRC, check=True)
    text = md.read_text()
    assert "2014 file study" in text and "nfscephfs" in text and "nfslocal" in text and "no page cache" in text


SUITE = """
name: nfs-kill
cluster: {kind: local, mds: true}
defaults: {engine: fathom-engine, iodepth: 1, numjobs: 2, nrfiles: 2, file_service: shared, op_timeout: 30s}
workloads:
  - {name: long-nfslocal, interface: nfs, export: local, rw: randread, bs: 4k, filesize: 64k, runtime: 120s}
"""


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


def test_a_sigkilled_fathom_leaves_ganesha_that_umount_stops_by_pid(nfs_cluster, engine_ready, tmp_path):
    c, pids = nfs_cluster
    mounts.teardown(c)
    suite = tmp_path / "kill.yaml"
    suite.write_text(SUITE)
    env = dict(os.environ, **SRC)
    env.pop("CEPH_CONF", None)
    proc = subprocess.Popen([sys.executable, "-m", "fathom", "run", str(suite), "--db", str(tmp_path / "k.db"),
                             *attach(c)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    engine_pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            engine_pids = [p for p in children(proc.pid) if "fathom-engine" in _cmd(p)]
            if ganesha_pid(c) and engine_pids:
                break
            time.sleep(0.2)
        gpid = ganesha_pid(c)
        assert gpid is not None and engine_pids, (proc.poll(), proc.stdout.read() if proc.poll() is not None else "")
        pids.append(gpid)
        time.sleep(2)  # the engine is reading through ganesha
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert pid_alive(gpid)  # in its own session: the killed fathom did not take it along
        assert json.loads((c.root / mounts.JOURNAL).read_text())["entries"]  # the journal says what to undo
        p = run_fathom("cluster", "umount", "--dir", str(c.root), env=SRC, check=True)
        assert f"stopped {ganesha.GANESHA}" in p.stdout
        assert not pid_alive(gpid) and ganesha_pid(c) is None
        assert not mounts.leftovers(c) and not (c.root / mounts.JOURNAL).exists()
        # the run was stored up to the kill; its point never finished
        run = Store(tmp_path / "k.db").run("latest")
        assert run is not None
    finally:
        for p in engine_pids:  # the orphaned engine would stop by itself once heartbeats stop
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
