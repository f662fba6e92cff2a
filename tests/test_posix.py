"""The posix target on real files: data round-trips with verify, corruption is caught, and every error names its cause.

No cluster: the engine runs against directories, a regular file, a small tmpfs
mount made (and unmounted) here, and under another user or a lowered
descriptor limit. A test that mounts asserts that nothing is left mounted.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_fathom


def engine(engine_ready: Path, tmp_path: Path, target: dict[str, Any], load: dict[str, Any], verify: bool = False,
           prefix: list[str] | None = None, preexec: Any = None) -> tuple[int, dict[str, Any] | None, list[dict]]:
    """Run one posix point: (exit code, summary or None, error records)."""
    spec = {"target": {"kind": "posix", **target}, "load": load, "verify": verify}
    f = tmp_path / f"spec-{os.getpid()}-{len(list(tmp_path.glob('spec-*')))}.json"
    f.write_text(json.dumps(spec))
    os.chmod(f, 0o644)
    p = subprocess.run([*(prefix or []), str(engine_ready), str(f)], capture_output=True, text=True, timeout=120,
                       preexec_fn=preexec, stdin=subprocess.DEVNULL)
    recs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    summary = next((r for r in recs if r["type"] == "summary"), None)
    return p.returncode, summary, [r for r in recs if r["type"] == "error"]


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


@pytest.mark.parametrize("ioengine,direct", [("sync", False), ("io_uring", True)])
def test_file_set_round_trips_with_verify(engine_ready, tmp_path, ioengine, direct):
    d = tmp_path / "set"
    d.mkdir()
    t = {"path": str(d), "bs": 4096, "numjobs": 2, "nrfiles": 3, "filesize": 256 << 10, "ioengine": ioengine,
         "direct": direct}
    # One sequential pass over each job's files: 3 files x 256 KiB per job.
    code, s, errs = engine(engine_ready, tmp_path, {**t, "rw": "write"}, {"iodepth": 4, "bytes": 3 * 256 << 10},
                           verify=True)
    assert code == 0, errs
    assert s["ops"]["write"]["ops"] == 2 * 3 * 64 and s["posix"]["files"] == 6 and s["posix"]["fds"] == 6
    assert sorted(p.name for p in d.iterdir()) == [f"fathom.{j}.{n}" for j in range(2) for n in range(3)]
    assert all(p.stat().st_size == 256 << 10 for p in d.iterdir())
    code, s, errs = engine(engine_ready, tmp_path, {**t, "rw": "randread"}, {"iodepth": 4, "ops": 200}, verify=True)
    assert code == 0, errs
    assert s["verify"]["checked"] == 2 * 200 * 8 and s["verify"]["mismatches"] == 0
    assert s["posix"]["laid_out"] == 0  # the files were whole: nothing rewritten
    if ioengine == "sync":
        assert s["posix"]["uring"] is None
    else:  # a single-issuer ring from Linux 6.1; no IOSQE_ASYNC off FUSE
        kernel = tuple(int(x) for x in os.uname().release.split(".")[:2])
        assert s["posix"]["uring"] == {"single_issuer": kernel >= (6, 1), "force_async": False}
    cpu = s["cpu"]
    assert cpu["voluntary_ctx_per_op"] is not None and cpu["voluntary_ctx"] >= 0


def test_layout_then_mixed_with_fsync_on_a_shared_set(engine_ready, tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    t = {"path": str(d), "rw": "randrw", "rwmixread": 67, "bs": 8192, "numjobs": 10, "nrfiles": 5,
         "filesize": 64 << 10, "file_service": "shared", "fsync": 4}
    code, s, errs = engine(engine_ready, tmp_path, t, {"iodepth": 1, "bytes": 64 << 10}, verify=True)
    assert code == 0, errs
    # read files are laid out first, with verify blocks, so every read checks
    assert s["posix"]["laid_out"] == 5 and sorted(p.name for p in d.iterdir()) == [f"fathom.{n}" for n in range(5)]
    assert s["verify"]["mismatches"] == 0 and s["verify"]["checked"] > 0
    assert set(s["ops"]) == {"read", "write", "fsync"} and s["ops"]["fsync"]["ops"] > 0
    assert s["ops"]["read"]["bytes"] + s["ops"]["write"]["bytes"] == 10 * (64 << 10)


def test_a_regular_file_is_split_into_job_regions(engine_ready, tmp_path):
    f = tmp_path / "img"
    f.write_bytes(b"")
    t = {"path": str(f), "rw": "write", "bs": 4096, "numjobs": 4, "filesize": 1 << 20}
    code, s, errs = engine(engine_ready, tmp_path, t, {"iodepth": 2, "bytes": 256 << 10}, verify=True)
    assert code == 0, errs
    assert f.stat().st_size == 1 << 20 and s["posix"]["layout"] == "file"
    code, s, errs = engine(engine_ready, tmp_path, {**t, "rw": "read"}, {"iodepth": 2, "bytes": 256 << 10},
                           verify=True)
    assert code == 0 and s["verify"]["checked"] == 2048 and s["verify"]["mismatches"] == 0, errs


def test_a_corrupted_file_is_caught(engine_ready, tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    t = {"path": str(d), "bs": 4096, "nrfiles": 2, "filesize": 64 << 10}
    code, _, errs = engine(engine_ready, tmp_path, {**t, "rw": "write"}, {"iodepth": 1, "bytes": 128 << 10},
                           verify=True)
    assert code == 0, errs
    victim = d / "fathom.0.1"
    with open(victim, "r+b") as fh:
        fh.seek(5 * 4096 + 100)
        b = fh.read(1)
        fh.seek(5 * 4096 + 100)
        fh.write(bytes([b[0] ^ 0xFF]))
    code, s, errs = engine(engine_ready, tmp_path, {**t, "rw": "read"}, {"iodepth": 1, "bytes": 128 << 10},
                           verify=True)
    assert code == 5
    assert s["verify"]["mismatches"] == 1
    assert s["verify"]["first_mismatch"]["object"] == str(victim)
    assert s["verify"]["first_mismatch"]["offset"] == 5 * 4096
    assert errs[-1]["kind"] == "verify"


def test_missing_path_and_short_files_are_named(engine_ready, tmp_path):
    missing = tmp_path / "nope"
    code, _, errs = engine(engine_ready, tmp_path, {"path": str(missing), "rw": "read", "filesize": 8192},
                           {"ops": 1})
    assert code == 3 and errs[0]["kind"] == "ENOENT" and str(missing) in errs[0]["message"]
    d = tmp_path / "short"
    d.mkdir()
    (d / "fathom.0.0").write_bytes(b"x" * 100)
    code, _, errs = engine(engine_ready, tmp_path, {"path": str(d), "rw": "read", "filesize": 8192,
                                                    "prefill": False}, {"ops": 1})
    assert code == 3 and errs[0]["kind"] == "ENODATA" and "run a write first" in errs[0]["message"]


def test_permission_denied_is_named(engine_ready, tmp_path):
    top = Path(tempfile.mkdtemp(prefix="fathom-posix-perm-"))
    try:
        os.chmod(top, 0o755)
        code, _, errs = engine(engine_ready, top, {"path": str(top), "rw": "write", "filesize": 8192},
                               {"ops": 1}, prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        assert code == 3 and errs[0]["kind"] == "EACCES", errs
        assert "permission denied" in errs[0]["message"] and str(top) in errs[0]["message"]
    finally:
        for p in top.iterdir():
            p.unlink()
        top.rmdir()


def test_no_space_left_is_named_and_nothing_stays_mounted(engine_ready, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "fathom-test-posix", str(mnt)], check=True)
    try:
        # laying out a read set larger than the filesystem
        code, _, errs = engine(engine_ready, tmp_path, {"path": str(mnt), "rw": "read", "nrfiles": 2,
                                                        "filesize": 1 << 20}, {"ops": 1})
        assert code == 3 and errs[0]["kind"] == "ENOSPC", errs
        assert "no space left" in errs[0]["message"] and "2 x 1048576" in errs[0]["message"]
        for p in mnt.iterdir():
            p.unlink()
        # running out during the measured phase: the summary is kept, the error names ENOSPC
        code, s, errs = engine(engine_ready, tmp_path, {"path": str(mnt), "rw": "write", "filesize": 2 << 20,
                                                        "bs": 65536}, {"iodepth": 1, "bytes": 2 << 20})
        assert code == 3 and errs[-1]["kind"] == "ENOSPC", errs
        assert s is not None and s["ops"]["write"]["ops"] > 0 and s["errors"][0]["kind"] == "ENOSPC"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
    assert not mounted(mnt)


def _nofile(n: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def test_descriptor_limit_shares_or_refuses(engine_ready, tmp_path):
    d = tmp_path / "fds"
    d.mkdir()
    # 4 jobs x 50 own files = 200 files > 200 - 64: no way to fit, named with the numbers
    code, _, errs = engine(engine_ready, tmp_path, {"path": str(d), "rw": "write", "numjobs": 4, "nrfiles": 50,
                                                    "filesize": 4096}, {"iodepth": 1, "ops": 1},
                           preexec=_nofile(200))
    assert code == 3 and errs[0]["kind"] == "EMFILE" and "200 open files" in errs[0]["message"], errs
    # 150 jobs sharing 10 files: 150 (job, file) descriptors do not fit, 10 shared ones do; the summary says so
    code, s, errs = engine(engine_ready, tmp_path, {"path": str(d), "rw": "randwrite", "numjobs": 150, "nrfiles": 10,
                                                    "file_service": "shared", "filesize": 65536},
                           {"iodepth": 1, "ops": 2}, preexec=_nofile(200))
    assert code == 0, errs
    assert s["posix"]["fd_shared"] is True and s["posix"]["fds"] == 10 and "shared" in s["posix"]["fd_note"]
    assert s["ops"]["write"]["ops"] == 300


def test_fathom_run_drives_a_posix_workload(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    suite = tmp_path / "files.yaml"
    suite.write_text(f"""
name: files-local
workloads:
  - name: mixed
    interface: posix
    path: {data}
    rw: randrw
    bs: 4k
    iodepth: 2
    numjobs: 2
    nrfiles: 2
    filesize: 1m
    ioengine: io_uring
    runtime: 2
""")
    db = tmp_path / "r.db"
    proc = run_fathom("run", str(suite), "--db", str(db), "--name", "f1", timeout=300,
                      env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (run_dir,) = [p for p in data.iterdir() if p.name.startswith("fathom.")]
    assert sorted(p.name for p in run_dir.iterdir()) == [f"fathom.{j}.{n}" for j in range(2) for n in range(2)]
    out = run_fathom("export", "--db", str(db), "f1", "--format", "json", check=True,
                     env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}).stdout
    (row,) = json.loads(out)
    assert row["rw"] == "randrw" and row["status"] == "done" and row["read_iops"] > 0 and row["write_iops"] > 0
    assert row["client_ctx_per_op"] is not None


def test_a_posix_workload_needs_a_path(tmp_path):
    suite = tmp_path / "bad.yaml"
    suite.write_text("name: x\nworkloads:\n  - name: w\n    interface: posix\n    rw: read\n")
    proc = run_fathom("plan", str(suite), env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert proc.returncode == 2 and "needs path" in proc.stdout + proc.stderr
    suite.write_text("name: x\nworkloads:\n  - name: w\n    interface: null\n    rw: read\n    nrfiles: 3\n")
    proc = run_fathom("plan", str(suite), env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert proc.returncode == 2 and "nrfiles applies to file interfaces" in proc.stdout + proc.stderr


def test_fs_apps_suite_plans_the_2014_grid():
    from fathom.suite import plan, spec

    full = plan.expand(spec.load("fs-apps").suite)
    assert len(full) == 4 * 6 * 5
    grid = sorted({(p.params["numjobs"], p.params["nrfiles"]) for p in full})
    assert grid == [(10, 10), (100, 10), (100, 100), (300, 300), (1000, 100)]
    db = next(p.params for p in full if p.workload == "db-cephfs")
    assert (db["rw"], db["bs"], db["filesize"], db["size"], db["rwmixread"]) == ("randrw", 8192, 65536, 65536, 67)
    assert {p.params.get("mount") for p in full} == {None, "ceph-fuse", "rbd-ext4"}
    assert {p.params.get("export") for p in full if p.params["interface"] == "nfs"} == {"cephfs", "local"}
    assert len(plan.expand(spec.load("fs-apps", quick=True).suite)) == 24


@pytest.mark.parametrize("ioengine", ["sync", "io_uring"])
def test_the_engines_own_io_threads_keep_the_normal_policy(engine_ready, tmp_path, ioengine):
    """SCHED_BATCH (callback_sched's default) is for library callback threads; the posix workers and the io_uring
    reaper are the engine's own and complete ops too, yet keep SCHED_OTHER (on a FUSE mount SCHED_BATCH there made
    the kernel spin on the file's lock)."""
    d = tmp_path / "sched"
    d.mkdir()
    spec = {"target": {"kind": "posix", "path": str(d), "rw": "randwrite", "bs": 4096, "filesize": 1 << 20,
                       "ioengine": ioengine},
            "load": {"iodepth": 4, "duration_s": 3}}
    p = subprocess.Popen([str(engine_ready), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps(spec))
    p.stdin.close()
    assert '"type":"start"' in p.stdout.readline()  # running: its threads have completed ops by now or soon
    time.sleep(1.5)
    policies = {}
    for t in Path(f"/proc/{p.pid}/task").iterdir():
        comm = (t / "comm").read_text().strip()
        stat = (t / "stat").read_text()
        policies[comm] = int(stat.rsplit(")", 1)[1].split()[38])  # field 41: policy (0 other, 3 batch)
    p.stdout.read()
    assert p.wait(timeout=60) == 0
    own = {c: v for c, v in policies.items() if c.startswith(("posix-", "posix-uring"))}
    assert own and set(own.values()) == {0}, policies
