"""`fathom bench rbd` against the session's real local cluster."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from conftest import run_fathom

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def image(ceph, rbd_pool, engine_ready):
    name = "fathom-bench-rbd-test"
    ceph.rbd("create", f"{rbd_pool}/{name}", "--size", "64M", fmt_json=False)
    yield name
    ceph.rbd("rm", f"{rbd_pool}/{name}", fmt_json=False)


def rbd(cluster, db, *args):
    return run_fathom("bench", "rbd", "--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path),
                      "--db", str(db), *args, timeout=180)


def test_rbd_write_then_read_like_rbd_bench(cluster, rbd_pool, image, tmp_path):
    db = tmp_path / "r.db"
    w = rbd(cluster, db, f"{rbd_pool}/{image}", "--io-type", "write", "--io-size", "4K", "--io-threads", "8",
            "--io-total", "8M", "--io-pattern", "rand")
    assert w.returncode == 0, w.stderr
    lines = w.stdout.splitlines()
    assert lines[0] == "bench  type write io_size 4096 io_threads 8 bytes 8388608 pattern random"
    assert lines[1] == "  SEC       OPS   OPS/SEC   BYTES/SEC"
    for row in lines[2:]:
        if row.startswith("elapsed:"):
            break
        assert re.match(r"^ {0,4}\d+ +\d+ +\S+ +\S+ (B|KiB|MiB|GiB)/s$", row), row
    summary = next(line for line in lines if line.startswith("elapsed:"))
    assert re.match(r"^elapsed: \d+   ops: 2048   ops/sec: \S+   bytes/sec: \S+ (B|KiB|MiB|GiB)/s$", summary), summary
    assert any(line.startswith("lat p50(s): ") and "p99.9(s): " in line for line in lines)

    r = rbd(cluster, db, f"{rbd_pool}/{image}", "--io-type", "rw", "--io-total", "4M", "--rw-mix-read", "70",
            "--io-pattern", "full-seq", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["io_type"] == "readwrite" and doc["rw_mix_read"] == 70 and doc["ops"] == 1024
    assert doc["read"]["ops"] + doc["write"]["ops"] == 1024
    assert doc["read"]["latency"]["p99"] > 0 and doc["latency_percentiles"]["p50"] > 0
    assert isinstance(doc["datas"], list)

    s = rbd(cluster, db, f"{rbd_pool}/{image}", "--io-type", "read", "--io-total", "4M", "--format", "json",
            "--rbd-cache")
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["read"]["ops"] == 1024
    with sqlite3.connect(db) as con:
        kinds = con.execute("SELECT kind, status FROM runs").fetchall()
        assert kinds == [("bench", "done")] * 3


def test_rbd_errors_name_the_cause(cluster, rbd_pool, image, tmp_path):
    db = tmp_path / "r.db"
    r = rbd(cluster, db, f"{rbd_pool}/no-such-image", "--io-type", "read", "--io-total", "1M")
    assert r.returncode != 0 and "no-such-image" in r.stderr and "does not exist" in r.stderr
    assert "Traceback" not in r.stderr
    r = rbd(cluster, db, "no-such-pool/img", "--io-type", "read", "--io-total", "1M")
    assert r.returncode != 0 and "'no-such-pool' does not exist" in r.stderr
    r = rbd(cluster, db, f"{rbd_pool}/{image}", "--io-type", "sideways")
    assert r.returncode == 2 and "--io-type" in r.stderr
