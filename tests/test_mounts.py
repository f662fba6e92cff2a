"""Mounts fathom makes on its local cluster (ceph-fuse, ext4 on rbd-fuse + loop), with real daemons and mounts.

One cluster with an MDS for the module. The posix target round-trips data with
verify through each mount; a killed FUSE daemon leaves a stale mount that the
engine names and `fathom cluster umount`/`down` cleans; a FUSE daemon that fails
to mount shows its log. At the end nothing is left: no mount, no loop device,
no daemon.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SRC, mds_cluster, run_fathom
from fathom.cluster import mounts
from fathom.cluster.local import FS_NAME, pid_alive
from fathom.errors import ClusterError

@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory):
    """The module's cluster, and whether a test stopped and started its MDS again (not yet active after it)."""
    with mds_cluster(tmp_path_factory, "mounts") as cp:
        yield cp, {"mds_restarted": False}


@pytest.fixture
def fs_cluster(module_cluster):
    """The module's cluster with an active MDS: after a test that restarted it, a wait until it is active again
    (it takes a while: the new MDS waits out the reconnect of the clients the earlier tests had)."""
    cp, state = module_cluster
    if state["mds_restarted"]:
        c = cp[0]
        ceph = c.ceph()
        deadline = time.monotonic() + 90
        while not any(m.get("state") == "active" for m in (ceph.ceph("fs", "status", FS_NAME, timeout=10) or {}).get(
                "mdsmap", [])) and time.monotonic() < deadline:
            time.sleep(1)
        state["mds_restarted"] = False
    return cp


def posix_round_trip(engine: Path, d: Path, direct: bool) -> dict:
    """Write a small file set with verify, then read it back with verify; the read's summary."""
    base = {"kind": "posix", "path": str(d), "bs": 4096, "numjobs": 2, "nrfiles": 2, "filesize": 128 << 10,
            "direct": direct}
    out = {}
    for rw, load in (("write", {"iodepth": 2, "bytes": 256 << 10}), ("randread", {"iodepth": 2, "ops": 100})):
        spec = {"target": {**base, "rw": rw}, "load": load, "verify": True}
        p = subprocess.run([str(engine), "-"], input=json.dumps(spec), capture_output=True, text=True, timeout=120)
        recs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        assert p.returncode == 0, recs[-1:]
        out = next(r for r in recs if r["type"] == "summary")
    return out


def test_ceph_fuse_mount_carries_data_and_is_a_sampled_daemon(fs_cluster, engine_ready):
    c, pids = fs_cluster
    mnt = mounts.ceph_fuse(c)
    assert mounts.mount_table()[str(mnt)] == "fuse.ceph-fuse"
    d = next(d for d in c.daemons() if d.name == mounts.CEPH_FUSE)
    assert d.running and d.kind == "fuse"
    pids.append(d.pid)
    s = posix_round_trip(engine_ready, mnt, direct=False)
    assert s["verify"]["checked"] == 2 * 100 * 8 and s["verify"]["mismatches"] == 0
    # io_uring on FUSE: every op goes to the kernel's workers (IOSQE_ASYNC), so the queue depth is real; run
    # inline, one op at a time would be in flight (Little's law: about 2 of 32 here before the flag).
    spec = {"target": {"kind": "posix", "path": str(mnt), "bs": 4096, "numjobs": 2, "nrfiles": 2,
                       "filesize": 128 << 10, "direct": True, "rw": "randread", "ioengine": "io_uring"},
            "load": {"iodepth": 16, "duration_s": 2}, "verify": True}
    p = subprocess.run([str(engine_ready), "-"], input=json.dumps(spec), capture_output=True, text=True, timeout=120)
    u = next(json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"type":"summary"'))
    assert p.returncode == 0 and u["posix"]["uring"]["force_async"] and u["verify"]["mismatches"] == 0
    r = u["ops"]["read"]
    assert r["ops"] * r["lat_ns"]["mean"] / 1e9 / u["measured_s"] > 8, r
    assert mounts.ceph_fuse(c) == mnt  # idempotent: the live mount is kept
    proc = run_fathom("cluster", "umount", "--dir", str(c.root), env=SRC, check=True)
    assert f"unmounted {mnt}" in proc.stdout and not pid_alive(d.pid)
    assert not mounts.leftovers(c) and mounts.CEPH_FUSE not in (c.state() or {})["daemons"]


def test_ext4_on_rbd_through_rbd_fuse_and_a_loop_device(fs_cluster, engine_ready):
    c, pids = fs_cluster
    mnt = mounts.rbd_ext4(c, size=1 << 30)
    assert mounts.mount_table()[str(mnt)] == "ext4"
    pids += [d.pid for d in c.daemons() if d.name == mounts.RBD_FUSE]
    assert any(x.startswith("loop ") for x in mounts.leftovers(c))
    s = posix_round_trip(engine_ready, mnt, direct=True)
    assert s["verify"]["mismatches"] == 0 and s["verify"]["checked"] > 0
    done = mounts.teardown(c)
    assert f"unmounted {mnt}" in done and any(x.startswith("detached /dev/loop") for x in done)
    assert not mounts.leftovers(c)


def test_cephfs_target_round_trips_through_libcephfs(fs_cluster, engine_ready):
    c, _ = fs_cluster
    conn = {"conf": str(c.conf_path), "name": "client.admin", "keyring": str(c.keyring_path)}
    base = {"kind": "cephfs", "connection": conn, "path": "/fathom-test", "bs": 4096, "numjobs": 2, "nrfiles": 2,
            "filesize": 64 << 10, "file_service": "shared"}
    recs = {}
    for rw, load in (("write", {"iodepth": 2, "bytes": 64 << 10}), ("randread", {"iodepth": 2, "ops": 50})):
        spec = {"target": {**base, "rw": rw}, "load": load, "verify": True}
        p = subprocess.run([str(engine_ready), "-"], input=json.dumps(spec), capture_output=True, text=True,
                           timeout=120)
        recs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        assert p.returncode == 0, recs[-1:]
    s = next(r for r in recs if r["type"] == "summary")
    assert s["verify"]["checked"] == 2 * 50 * 8 and s["verify"]["mismatches"] == 0
    assert s["cephfs"]["files"] == 2 and s["cephfs"]["nonblocking"] is False  # Pacific: no non-blocking call
    # a file system that does not exist is named
    spec = {"target": {**base, "rw": "read", "fs": "nosuchfs"}, "load": {"ops": 1}}
    p = subprocess.run([str(engine_ready), "-"], input=json.dumps(spec), capture_output=True, text=True, timeout=120)
    err = [json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"type":"error"')][0]
    assert p.returncode == 3 and "nosuchfs" in err["message"], err


def test_a_killed_fuse_daemon_is_a_named_stale_mount_and_is_cleaned(fs_cluster, engine_ready, tmp_path):
    c, pids = fs_cluster
    mnt = mounts.ceph_fuse(c)
    d = next(d for d in c.daemons() if d.name == mounts.CEPH_FUSE)
    pids.append(d.pid)
    os.kill(d.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(d.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    spec = {"target": {"kind": "posix", "path": str(mnt), "rw": "write", "filesize": 8192}, "load": {"ops": 1}}
    p = subprocess.run([str(engine_ready), "-"], input=json.dumps(spec), capture_output=True, text=True, timeout=60)
    err = [json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"type":"error"')][0]
    assert p.returncode == 3 and err["kind"] == "ENOTCONN" and "stale mount" in err["message"]
    # a new mount over a stale one: the record says what was there, so it is cleaned first
    mnt2 = mounts.ceph_fuse(c)
    assert mnt2 == mnt and mounts.mount_table()[str(mnt)] == "fuse.ceph-fuse"
    pids += [d.pid for d in c.daemons() if d.name == mounts.CEPH_FUSE]
    mounts.teardown(c)
    assert not mounts.leftovers(c)


def test_a_fuse_daemon_that_cannot_mount_shows_its_log(fs_cluster):
    c, _ = fs_cluster
    mnt = c.root / "mnt" / "bad"
    with pytest.raises(ClusterError) as e:
        mounts._start_fuse(c, "fuse.bad", ["ceph-fuse", "--client_fs=nosuchfs", str(mnt)], mnt)
    assert "exited before mounting" in str(e.value) and "fuse.bad" in str(e.value)
    mounts.teardown(c)
    assert not mounts.leftovers(c) and "fuse.bad" not in (c.state() or {})["daemons"]


def test_no_active_mds_is_named_in_bounded_time(module_cluster, fs_cluster, engine_ready):
    c, pids = fs_cluster
    assert c.stop_daemons(names=["mds.a"]) == ["mds.a"]
    try:
        conn = {"conf": str(c.conf_path), "name": "client.admin", "keyring": str(c.keyring_path), "timeout_s": 5}
        spec = {"target": {"kind": "cephfs", "connection": conn, "path": "/fathom-nomds", "rw": "write",
                           "filesize": 8192}, "load": {"ops": 1}}
        t0 = time.monotonic()
        p = subprocess.run([str(engine_ready), "-"], input=json.dumps(spec), capture_output=True, text=True,
                           timeout=120)
        took = time.monotonic() - t0
        errs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"type":"error"')]
        assert p.returncode == 3 and errs and "active MDS" in errs[0]["message"], (p.returncode, p.stdout[-2000:])
        assert took < 2 * 5 + 10 + 5, took  # the mount timeout, bounded by the engine's watchdog
    finally:
        pids.append(c.start_daemon("mds.a"))
        module_cluster[1]["mds_restarted"] = True  # a test after this one waits for it to be active (fs_cluster)
