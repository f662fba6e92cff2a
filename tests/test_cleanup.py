"""`fathom cleanup` removes only its own run's objects: two concurrent runs, a user's objects, rados bench's."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import FATHOM, run_fathom

pytestmark = pytest.mark.cluster


def conn_args(cluster) -> list[str]:
    return ["--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path)]


def test_concurrent_runs_and_foreign_objects_survive_cleanup(cluster, ceph, engine_ready, tmp_path):
    pool = "fathom-cleanup-test"
    ceph.ceph("osd", "pool", "create", pool, "8", fmt_json=False)
    try:
        ceph.ceph("osd", "pool", "application", "enable", pool, "rados", fmt_json=False)
        # a user's objects, including names that resemble fathom's
        src = tmp_path / "data"
        src.write_bytes(b"user data\n")
        foreign = ["user-object", "fathom_bench.alpha", "fathom_bench.alpha.x1", "fathom_bench.alpha-2.0",
                   "fathom_bench.alphabet.0", "my.fathom_bench.alpha.0"]
        for name in foreign:
            ceph.rados("-p", pool, "put", name, str(src), fmt_json=False)
        # real rados bench objects with its own prefix
        rb = subprocess.run(["rados", "-c", str(cluster.conf_path), "-p", pool, "bench", "1", "write", "-b", "4096",
                             "-t", "4", "--no-cleanup", "--run-name", "rbrun"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "CEPH_CONF": str(cluster.conf_path)})
        assert rb.returncode == 0, rb.stderr
        rados_bench_objs = {n for n in ceph.rados("-p", pool, "ls", fmt_json=False).split()
                            if n.startswith("benchmark_data_") or n == "rbrun"}
        assert len(rados_bench_objs) > 1

        # two fathom writes at the same time, different run names
        argv = [FATHOM, "bench", "rados", *conn_args(cluster), "-p", pool, "2", "write", "-b", "4K", "-t", "4",
                "--no-cleanup", "--db", str(tmp_path / "r.db")]
        procs = [subprocess.Popen(argv + ["--run-name", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for name in ("alpha", "beta")]
        made = {}
        for name, p in zip(("alpha", "beta"), procs):
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
            made[name] = int(next(line for line in out.splitlines()
                                  if line.startswith("Total writes made:")).split()[-1])
        names = set(ceph.rados("-p", pool, "ls", fmt_json=False).split())
        for run in ("alpha", "beta"):
            mine = {n for n in names if n.startswith(f"fathom_bench.{run}.") and n[len(f"fathom_bench.{run}."):]
                    .isdigit()}
            assert len(mine) == made[run] and f"fathom_bench.{run}.meta" in names

        r = run_fathom("cleanup", *conn_args(cluster), "-p", pool, "--run-name", "alpha")
        assert r.returncode == 0, r.stderr
        assert f"Removed {made['alpha']} objects" in r.stdout
        after = set(ceph.rados("-p", pool, "ls", fmt_json=False).split())
        assert not {n for n in after if n.startswith("fathom_bench.alpha.") and n not in foreign}
        assert set(foreign) <= after
        assert rados_bench_objs <= after
        # the other run is untouched and still readable in full
        seq = run_fathom("bench", "rados", *conn_args(cluster), "-p", pool, "60", "seq", "--run-name", "beta",
                         "--db", str(tmp_path / "r.db"), timeout=180)
        assert seq.returncode == 0, seq.stderr
        assert f"Total reads made:     {made['beta']}" in seq.stdout

        # a prefix that is not fathom's is refused, and nothing is removed
        r = run_fathom("cleanup", *conn_args(cluster), "-p", pool, "--prefix", "benchmark_data_host_1")
        assert r.returncode != 0 and "not the prefix of a fathom bench" in r.stderr
        r = run_fathom("cleanup", *conn_args(cluster), "-p", pool, "--prefix", "fathom_bench.beta")
        assert r.returncode == 0, r.stderr
        after = set(ceph.rados("-p", pool, "ls", fmt_json=False).split())
        assert not {n for n in after if n.startswith("fathom_bench.beta.")}
        assert set(foreign) <= after and rados_bench_objs <= after
        # cleaning an already clean run is not an error
        r = run_fathom("cleanup", *conn_args(cluster), "-p", pool, "--run-name", "beta")
        assert r.returncode == 0 and "nothing to clean up" in r.stderr
        r = run_fathom("cleanup", *conn_args(cluster), "-p", "no-such-pool", "--run-name", "beta")
        assert r.returncode != 0 and "'no-such-pool' does not exist" in r.stderr
    finally:
        ceph.ceph("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", fmt_json=False)


def test_cleanup_without_metadata_uses_the_exact_name_pattern(cluster, ceph, engine_ready, tmp_path):
    """A write that died before leaving its metadata is still cleaned, by exact names only."""
    pool = "fathom-cleanup-test2"
    ceph.ceph("osd", "pool", "create", pool, "8", fmt_json=False)
    try:
        ceph.ceph("osd", "pool", "application", "enable", pool, "rados", fmt_json=False)
        src = tmp_path / "d"
        src.write_bytes(b"x")
        for name in ("fathom_bench.orphan.0", "fathom_bench.orphan.1", "fathom_bench.orphan.keep",
                     "fathom_bench.orphan2.0"):
            ceph.rados("-p", pool, "put", name, str(src), fmt_json=False)
        r = run_fathom("cleanup", *conn_args(cluster), "-p", pool, "--run-name", "orphan")
        assert r.returncode == 0, r.stderr
        assert "Removed 2 objects" in r.stdout
        left = set(ceph.rados("-p", pool, "ls", fmt_json=False).split())
        assert left == {"fathom_bench.orphan.keep", "fathom_bench.orphan2.0"}
    finally:
        ceph.ceph("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", fmt_json=False)
