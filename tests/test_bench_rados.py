"""`fathom bench rados` against the session's real local cluster: study 3's procedure end to end."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import run_fathom
from fathom.cluster.local import free_port

pytestmark = pytest.mark.cluster


def bench(cluster, db: Path, *args: str, timeout: float = 180):
    return run_fathom("bench", "rados", "--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path),
                      "--db", str(db), *args, timeout=timeout)


def objects(ceph, pool: str) -> list[str]:
    return ceph.rados("-p", pool, "ls", fmt_json=False).split()


def test_write_seq_rand_plain_like_rados_bench(cluster, ceph, rados_pool, engine_ready, tmp_path):
    db = tmp_path / "r.db"
    w = bench(cluster, db, "-p", rados_pool, "2", "write", "-b", "4K", "-t", "8", "--no-cleanup",
              "--run-name", "plain")
    assert w.returncode == 0, w.stderr
    lines = w.stdout.splitlines()
    assert lines[0] == "hints = 1"  # writes carry rados bench's allocation hint unless --no-hints
    assert lines[1] == ("Maintaining 8 concurrent writes of 4096 bytes to objects of size 4096 for up to 2 seconds "
                        "or 0 objects")
    assert lines[2] == "Object prefix: fathom_bench.plain"
    assert lines[3] == "  sec Cur ops   started  finished  avg MB/s  cur MB/s last lat(s)  avg lat(s)"
    assert lines[4].split()[:4] == ["0", "0", "0", "0"]
    assert lines[5].split()[0] == "1"
    labels = [line.split(":")[0] for line in lines if ":" in line and not line.startswith("Object prefix")]
    for label in ("Total time run", "Total writes made", "Write size", "Object size", "Bandwidth (MB/sec)",
                  "Stddev Bandwidth", "Max bandwidth (MB/sec)", "Min bandwidth (MB/sec)", "Average IOPS",
                  "Stddev IOPS", "Max IOPS", "Min IOPS", "Average Latency(s)", "Stddev Latency(s)",
                  "Max latency(s)", "Min latency(s)", "Latency p50(s)", "Latency p90(s)", "Latency p99(s)",
                  "Latency p99.9(s)", "Latency max(s)"):
        assert label in labels, label
    made = int(next(line for line in lines if line.startswith("Total writes made:")).split()[-1])
    assert made > 0
    names = objects(ceph, rados_pool)
    assert "fathom_bench.plain.meta" in names
    assert sum(1 for n in names if n.startswith("fathom_bench.plain.") and n != "fathom_bench.plain.meta") == made

    s = bench(cluster, db, "-p", rados_pool, "30", "seq", "--run-name", "plain", "--no-hints")
    assert s.returncode == 0, s.stderr
    assert s.stdout.splitlines()[0] == "hints = 0"
    reads = int(next(line for line in s.stdout.splitlines() if line.startswith("Total reads made:")).split()[-1])
    assert reads == made  # one pass over what the write left, as rados bench's seq

    r = bench(cluster, db, "-p", rados_pool, "2", "rand", "--run-name", "plain")
    assert r.returncode == 0, r.stderr
    assert "Total reads made:" in r.stdout and "Latency p99.9(s):" in r.stdout

    with sqlite3.connect(db) as con:
        runs = con.execute("SELECT name, kind, status FROM runs ORDER BY id").fetchall()
        assert runs == [("bench-rados-write-plain", "bench", "done"), ("bench-rados-seq-plain", "bench", "done"),
                        ("bench-rados-rand-plain", "bench", "done")]
        m = json.loads(con.execute("SELECT metrics_json FROM points ORDER BY id LIMIT 1").fetchone()[0])
        assert m["total_ios"] == made and m["iops"] > 0 and m["p99_ms"] > 0
        assert con.execute("SELECT count(*) FROM intervals").fetchone()[0] >= 3
        assert con.execute("SELECT count(*) FROM histograms").fetchone()[0] == 3
    clean = run_fathom("cleanup", "--conf", str(cluster.conf_path), "-p", rados_pool, "--run-name", "plain")
    assert clean.returncode == 0, clean.stderr
    assert f"Removed {made} objects" in clean.stdout, clean.stdout
    assert not [n for n in objects(ceph, rados_pool) if n.startswith("fathom_bench.plain.")]


def test_json_is_the_only_thing_on_stdout(cluster, ceph, rados_pool, engine_ready, tmp_path):
    db = tmp_path / "r.db"
    w = bench(cluster, db, "-p", rados_pool, "2", "write", "-b", "8K", "-O", "32K", "-f", "json",
              "--run-name", "js")  # with cleanup: rados bench's JSON breaks here, ours must not
    assert w.returncode == 0, w.stderr
    doc = json.loads(w.stdout)
    for key in ("concurrent_ios", "object_size", "op_size", "seconds_to_run", "max_objects", "object_prefix",
                "datas", "total_time_run", "total_writes_made", "write_size", "bandwidth", "stddev_bandwidth",
                "max_bandwidth", "min_bandwidth", "average_iops", "stddev_iops", "max_iops", "min_iops",
                "average_latency", "stddev_latency", "max_latency", "min_latency", "latency_percentiles"):
        assert key in doc, key
    assert doc["write_size"] == 8192 and doc["object_size"] == 32768
    assert isinstance(doc["stddev_iops"], float) and doc["stddev_iops"] < doc["max_iops"] + 1
    assert set(doc["latency_percentiles"]) == {"p50", "p90", "p99", "p99.9", "max"}
    p = doc["latency_percentiles"]
    assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["p99.9"] <= p["max"] * 1.01
    assert doc["fathom"]["cleanup"]["removed"] >= doc["total_writes_made"] // 4
    assert "Removed" in w.stderr  # cleanup progress went to stderr
    assert not [n for n in objects(ceph, rados_pool) if n.startswith("fathom_bench.js.")]
    pretty = bench(cluster, db, "-p", rados_pool, "1", "write", "-b", "4K", "-f", "json-pretty", "--run-name",
                   "jp", "--max-objects", "20")
    assert pretty.returncode == 0, pretty.stderr
    d = json.loads(pretty.stdout)
    assert d["total_writes_made"] == 20 and d["max_objects"] == 20
    assert pretty.stdout.startswith("{\n")


def test_nothing_to_read_and_missing_pool(cluster, rados_pool, engine_ready, tmp_path):
    db = tmp_path / "r.db"
    r = bench(cluster, db, "-p", rados_pool, "2", "seq", "--run-name", "never-written")
    assert r.returncode != 0
    assert "nothing to read" in r.stderr and "never-written" in r.stderr and "Traceback" not in r.stderr
    r = bench(cluster, db, "-p", "no-such-pool", "2", "write")
    assert r.returncode != 0 and "'no-such-pool' does not exist" in r.stderr and "Traceback" not in r.stderr
    r = bench(cluster, db, "-p", "no-such-pool", "2", "rand")
    assert r.returncode != 0 and "'no-such-pool' does not exist" in r.stderr
    r = bench(cluster, db, "-p", rados_pool, "2", "write", "--run-name", "a.b")
    assert r.returncode == 2 and "--run-name" in r.stderr


def test_unreachable_mon_is_reported_in_bounded_time(cluster, rados_pool, engine_ready, tmp_path):
    conf = tmp_path / "dead.conf"
    port = free_port()
    conf.write_text("\n".join(f"mon_host = 127.0.0.1:{port}" if line.startswith("mon_host") else line
                              for line in cluster.conf_path.read_text().splitlines()) + "\n")
    for mode in ("write", "seq"):
        t0 = time.monotonic()
        r = run_fathom("bench", "rados", "--conf", str(conf), "--connect-timeout", "5", "-p", rados_pool, "3", mode,
                       "--db", str(tmp_path / "r.db"), timeout=120)
        assert r.returncode != 0
        assert "cannot reach the cluster" in r.stderr and f"127.0.0.1:{port}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert time.monotonic() - t0 < 90


def test_stall_on_full_pool_reports_health_and_stops(cluster, ceph, engine_ready, tmp_path):
    pool = "fathom-stall-test"
    ceph.ceph("osd", "pool", "create", pool, "8", fmt_json=False)
    try:
        ceph.ceph("osd", "pool", "application", "enable", pool, "rados", fmt_json=False)
        for i in range(12):
            ceph.rados("-p", pool, "put", f"filler-{i}", "/dev/null", fmt_json=False)
        ceph.ceph("osd", "pool", "set-quota", pool, "max_objects", "10", fmt_json=False)
        deadline = time.monotonic() + 90
        while "POOL_FULL" not in json.dumps(ceph.ceph("health", "detail")):
            assert time.monotonic() < deadline, "the quota never made the pool full"
            time.sleep(1)
        t0 = time.monotonic()
        r = bench(cluster, tmp_path / "r.db", "-p", pool, "60", "write", "-b", "4K", "--stall-timeout", "3",
                  "-f", "json", "--run-name", "stall")
        took = time.monotonic() - t0
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "ops stopped completing" in r.stderr and "POOL_FULL" in r.stderr and "Traceback" not in r.stderr
        doc = json.loads(r.stdout)
        assert doc["fathom"]["status"] == "failed" and "POOL_FULL" in doc["fathom"]["error"]["health"]
        assert took < 50
        with sqlite3.connect(tmp_path / "r.db") as con:
            assert con.execute("SELECT status FROM runs").fetchone()[0] == "failed"
    finally:
        ceph.ceph("osd", "pool", "set-quota", pool, "max_objects", "0", fmt_json=False)
        ceph.ceph("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", fmt_json=False)
