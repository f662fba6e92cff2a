"""Client hosts for real: network namespaces on a bridge, each with its own sshd, and one local cluster bound
to the bridge address (fathom.hosts.netns). Nothing is mocked: engines are uploaded over SFTP, run over SSH,
cut off by taking a link down, stopped by Ctrl-C, refused for a wrong host key or missing Ceph libraries.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import conftest
from conftest import FATHOM, run_fathom

from fathom.results import hdr
from fathom.hosts import netns
from fathom.cluster.local import LocalCluster
from fathom.results.store import Store

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=f"client hosts: {netns.available()}")

RADOS_SUITE = """\
name: hosts
cluster: {{kind: attached, conf: {conf}, keyring: {keyring}}}
prep: {{pools: [{{name: hosts, application: rados, pg_num: 8}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: hosts, bs: 4k, iodepth: 4, runtime: {runtime}}}
workloads: [{{name: w, rw: write}}]
"""
NULL_SUITE = """\
name: hosts-null
defaults: {engine: fathom-engine, interface: "null", bs: 4k, iodepth: 1, runtime: 2s}
workloads: [{name: n, rw: randread}]
"""


@pytest.fixture(scope="module")
def bed():
    with netns.Testbed(hosts=3, no_ceph_libs=(2,)) as tb:
        yield tb


@pytest.fixture(scope="module")
def bound_cluster(bed, tmp_path_factory):
    with conftest.bound_cluster(tmp_path_factory, "hosts", bed.bridge_addr) as c:
        yield c


def _clients_file(bed, tmp: Path, hosts: list[int], local: bool = True) -> Path:
    doc = {"hosts": (["local"] if local else []) + [
        {"host": bed.hosts[i].addr, "user": "root", "key_file": bed.key_file,
         "engine_dir": f"{bed.dir}/engine-{i}"} for i in hosts], "known_hosts": bed.known_hosts}
    f = tmp / "clients.yaml"
    f.write_text(json.dumps(doc))
    return f


def _suite(tmp: Path, cluster: LocalCluster, runtime: str) -> Path:
    s = tmp / "suite.yaml"
    s.write_text(RADOS_SUITE.format(conf=cluster.conf_path, keyring=cluster.keyring_path, runtime=runtime))
    return s


def _engine_pids(bed, i: int) -> list[int]:
    """fathom-engine processes running a point in host i's namespace (its pids are pids here too; the
    spec comes on fd 3, which tells a point from the `--version` check)."""
    out = subprocess.run(["ip", "netns", "pids", bed.hosts[i].name], capture_output=True, text=True).stdout
    pids = []
    for p in out.split():
        try:
            if os.readlink(f"/proc/{p}/exe").endswith("/fathom-engine") and \
                    b"/dev/fd/3" in Path(f"/proc/{p}/cmdline").read_bytes():
                pids.append(int(p))
        except OSError:
            pass
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait(cond, limit: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def test_two_hosts_and_local_merge_exactly(bed, bound_cluster, tmp_path):
    db = tmp_path / "r.db"
    p = run_fathom("run", str(_suite(tmp_path, bound_cluster, "3s")), "--db", str(db),
                   "--clients-file", str(_clients_file(bed, tmp_path, [0, 1])), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(db) as st:
        run = st.run("latest")
        (pt,) = st.points(run.id)
        assert pt["status"] == "done"
        res, m = pt["result"], pt["metrics"]
        names = ["local", bed.hosts[0].addr, bed.hosts[1].addr]
        assert [e["host"] for e in res["extra"]["engines"]] == names
        assert m["engines"] == 3 and m["client_hosts"] == 3 and m["clients_lost"] == 0
        # one start time: the skew is recorded, and offsets per host with their round trip
        assert m["start_skew_ms"] is not None and 0 <= m["start_skew_ms"] < 1000
        assert set(res["extra"]["clocks"]) == set(names)
        # the merged histogram is the histogram of every op of every engine
        per = st.histograms_by_instance(pt["id"])
        assert sorted(k[1] for k in per) == sorted(names)
        merged = st.histograms(pt["id"])["write"]
        assert hdr.encode(hdr.merge(per.values())) == merged
        assert hdr.count(merged) == m["total_ios"] == sum(e["ops"] for e in res["extra"]["engines"]) > 0
        # every engine's intervals are kept by host, and the merged stream beside them
        rows = {h: st.intervals(pt["id"], host=h) for h in names}
        assert all(rows.values())
        assert sum(r["ops"]["write"]["ops"] for rs in rows.values() for r in rs if not r.get("ramp")) == m["total_ios"]
        timeline = st.timeline(pt["id"])
        assert [r["index"] for r in timeline] == list(range(len(timeline)))
        assert run.env["clients"]["engines"] == 3
    # writers never collide: each engine wrote under its own object-name prefix, naming its host
    prefixes = [e["prefix"] for e in res["extra"]["engines"]]
    assert len(set(prefixes)) == 3 and all(n.replace(".", "_") in p for n, p in zip(names, prefixes))
    assert not any(_alive(e["pid"]) for e in res["extra"]["engines"])


def test_a_host_cut_mid_point_is_lost_and_stops_itself(bed, bound_cluster, tmp_path):
    db = tmp_path / "r.db"
    proc = subprocess.Popen([FATHOM, "run", str(_suite(tmp_path, bound_cluster, "15s")), "--db", str(db),
                             "--clients-file", str(_clients_file(bed, tmp_path, [0, 1]))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert _wait(lambda: _engine_pids(bed, 1), 120) is not None, "no engine started on host 1"
        (remote,) = _engine_pids(bed, 1)
        time.sleep(4)  # the point is running
        t_cut = time.time()
        bed.cut(1)
        took = _wait(lambda: not _alive(remote), 20)
        assert took is not None and took <= 10, f"the cut-off engine ran on {took} s after the cut"
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "link", "set", bed.hosts[1].veth, "up"], capture_output=True)
    assert proc.returncode == 0, out + err
    with Store(db) as st:
        run = st.run("latest")
        (pt,) = st.points(run.id)
        lost = [e for e in st.events(run.id) if e["kind"] == "client_lost"]
        assert [e["data"]["host"] for e in lost] == [bed.hosts[1].addr]
        assert lost[0]["ts"] - t_cut <= 10
        assert pt["status"] == "done" and pt["metrics"]["clients_lost"] == 1
        assert pt["result"]["extra"]["clients_lost"].keys() == {bed.hosts[1].addr}
        # the others ran the whole point; the lost host's intervals up to the cut are kept
        kept = {h: len([r for r in st.intervals(pt["id"], host=h) if not r.get("ramp")])
                for h in ("local", bed.hosts[0].addr, bed.hosts[1].addr)}
        assert kept["local"] >= 14 and kept[bed.hosts[0].addr] >= 14 and 1 <= kept[bed.hosts[1].addr] < 12
        rows = {r["host"]: r for r in pt["result"]["extra"]["hosts"]}
        assert rows[bed.hosts[1].addr]["lost"] and not rows["local"]["lost"]


def test_ctrl_c_leaves_no_engine_on_any_host(bed, bound_cluster, tmp_path):
    db = tmp_path / "r.db"
    proc = subprocess.Popen([FATHOM, "run", str(_suite(tmp_path, bound_cluster, "60s")), "--db", str(db),
                             "--clients-file", str(_clients_file(bed, tmp_path, [0, 1]))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert _wait(lambda: _engine_pids(bed, 0) and _engine_pids(bed, 1), 120) is not None
        pids = _engine_pids(bed, 0) + _engine_pids(bed, 1)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert not any(_alive(p) for p in pids)
    assert not _engine_pids(bed, 0) and not _engine_pids(bed, 1)
    with Store(db) as st:
        (pt,) = st.points(st.run("latest").id)
        assert pt["status"] == "interrupted"
        extra = pt["result"]["extra"]
        assert extra["interrupted"] and extra["left_running"] == []
        engines = extra["engines"]
        assert len(engines) == 3 and all(e["stop"] == "control" for e in engines)
        assert not any(_alive(e["pid"]) for e in engines)


def _null_run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    suite = tmp / "null.yaml"
    suite.write_text(NULL_SUITE)
    t0 = time.monotonic()
    p = run_fathom("run", str(suite), "--db", str(tmp / "r.db"), *args, timeout=120)
    return p, time.monotonic() - t0


def test_a_host_without_the_ceph_libraries_is_named(bed, tmp_path):
    p, _ = _null_run(tmp_path, "--clients-file", str(_clients_file(bed, tmp_path, [2], local=False)),
                     "--known-hosts", bed.known_hosts)
    assert p.returncode == 4, p.stdout + p.stderr
    assert f"client host {bed.hosts[2].addr}" in p.stderr and "librados.so.2" in p.stderr
    assert "librados2" in p.stderr and "Traceback" not in p.stderr


def test_wrong_host_key_and_new_host_keys(bed, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "known_wrong"
    wrong.write_text(f"{bed.hosts[0].addr} {' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n")
    cf = str(_clients_file(bed, tmp_path, [0], local=False))
    p, _ = _null_run(tmp_path, "--clients-file", cf, "--known-hosts", str(wrong))
    assert p.returncode == 4 and "host key does not match" in p.stderr, p.stderr
    # a host that is not in known_hosts: refused, unless new keys are accepted (then it is added)
    empty = tmp_path / "known_empty"
    p, _ = _null_run(tmp_path, "--clients-file", cf, "--known-hosts", str(empty))
    assert p.returncode == 4 and "new host keys are not accepted" in p.stderr, p.stderr
    p, _ = _null_run(tmp_path, "--clients-file", cf, "--known-hosts", str(empty), "--accept-new-host-keys")
    assert p.returncode == 0, p.stderr
    assert empty.read_text().split()[0] == bed.hosts[0].addr
    # accepting new keys never accepts a changed one
    p, _ = _null_run(tmp_path, "--clients-file", cf, "--known-hosts", str(wrong), "--accept-new-host-keys")
    assert p.returncode == 4 and "host key does not match" in p.stderr, p.stderr


def test_a_missing_key_file_is_named_before_any_connection(bed, tmp_path):
    """A key file that is not there is said to be missing (with its path), not taken for an unreachable host:
    from a clients file before the run starts, and from a suite's clients: before any host is connected."""
    missing = tmp_path / "no_such_key"
    host = {"host": bed.hosts[0].addr, "user": "root", "key_file": str(missing), "engine_dir": f"{bed.dir}/e0"}
    f = tmp_path / "clients.yaml"
    f.write_text(json.dumps({"hosts": [host]}))
    p, _ = _null_run(tmp_path, "--clients-file", str(f), "--known-hosts", bed.known_hosts)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"--clients-file {f}: {bed.hosts[0].addr}: the key file {missing} does not exist" in p.stderr, p.stderr
    assert "hint: give the path of an existing private key" in p.stderr and "unreachable" not in p.stderr
    # in a suite (read where no option checks it), with a second host whose key is fine: no host is reached
    suite = tmp_path / "clients-suite.yaml"
    ok = {**host, "host": bed.hosts[1].addr, "key_file": bed.key_file, "engine_dir": f"{bed.dir}/e1"}
    suite.write_text(NULL_SUITE + f"clients: {json.dumps({'hosts': [host, ok], 'known_hosts': bed.known_hosts})}\n")
    p = run_fathom("run", str(suite), "--db", str(tmp_path / "r.db"), timeout=120)
    assert p.returncode == 4, p.stdout + p.stderr
    assert f"client host {bed.hosts[0].addr}: the key file {missing} does not exist" in p.stderr, p.stderr
    assert "key_file (--clients-file, or the suite's clients.hosts)" in p.stderr and "unreachable" not in p.stderr
    assert not Path(f"{bed.dir}/e1").exists()  # the other host was not connected to (no engine uploaded)


def test_an_unreachable_host_fails_in_bounded_time(bed, tmp_path):
    f = tmp_path / "clients.yaml"
    f.write_text(json.dumps({"hosts": [f"root@{bed.prefix}.99"], "connect_timeout_s": 3}))
    p, took = _null_run(tmp_path, "--clients-file", str(f), "--known-hosts", bed.known_hosts)
    assert p.returncode == 4 and f"client host {bed.prefix}.99 is unreachable" in p.stderr, p.stderr
    assert took < 60


# ---- fathom bench on client hosts --------------------------------------------------------

def _bench_pool(cluster: LocalCluster) -> str:
    ceph = cluster.ceph()
    ceph.ceph("osd", "pool", "create", "benchc", "8", fmt_json=False)
    ceph.ceph("osd", "pool", "application", "enable", "benchc", "rados", fmt_json=False)
    return "benchc"


def _bench_setup(bed, cluster: LocalCluster, tmp: Path, db_name: str) -> tuple[str, Path, list[str], str]:
    """The bench pool, a results store, the connection options with it, and a clients file of two hosts + local."""
    db = tmp / db_name
    conn = ["-c", str(cluster.conf_path), "-k", str(cluster.keyring_path), "--db", str(db)]
    return _bench_pool(cluster), db, conn, str(_clients_file(bed, tmp, [0, 1]))


def _fathom_objects(cluster: LocalCluster, pool: str) -> list[str]:
    out = cluster.ceph().call("rados", "-p", pool, "ls", fmt_json=False)
    return [n for n in out.splitlines() if n.startswith("fathom_bench.")]


def test_bench_rados_on_two_hosts_and_local(bed, bound_cluster, tmp_path):
    pool, db, conn, cf = _bench_setup(bed, bound_cluster, tmp_path, "b.db")
    p = run_fathom("bench", "rados", "-p", pool, "3", "write", "-b", "4K", "-t", "4", "--no-cleanup",
                   "--run-name", "mh", "-f", "json", "--clients-file", cf, *conn, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    names = ["local", bed.hosts[0].addr, bed.hosts[1].addr]
    hosts = doc["fathom"]["clients"]["hosts"]
    assert [h["host"] for h in hosts] == names and all(h["ops"] > 0 and h["p99_ms"] for h in hosts)
    # the merged result is the sum of the hosts' (counts add; nothing is averaged)
    assert doc["total_writes_made"] == sum(h["ops"] for h in hosts)
    assert doc["fathom"]["clients"]["start_skew_ms"] is not None
    with Store(db) as st:
        (pt,) = st.points(st.run("latest").id)
        assert [h["host"] for h in pt["result"]["extra"]["hosts"]] == names
        assert pt["metrics"]["total_ios"] == doc["total_writes_made"]
        per = st.histograms_by_instance(pt["id"])
        assert sorted(k[1] for k in per) == sorted(names)
        assert hdr.count(st.histograms(pt["id"])["write"]) == doc["total_writes_made"]
        assert all(st.intervals(pt["id"], host=h) for h in names)
    # each engine wrote under its own prefix; fathom cleanup removes every client's objects
    left = _fathom_objects(bound_cluster, pool)
    assert {n.rsplit(".", 1)[0] for n in left} == {f"fathom_bench.mh.{h.replace('.', '_')}.0" for h in names}
    assert len(left) == doc["total_writes_made"] + 3  # every object, and one metadata object per engine
    p = run_fathom("cleanup", "-p", pool, "--run-name", "mh", "-c", str(bound_cluster.conf_path),
                   "-k", str(bound_cluster.keyring_path), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _fathom_objects(bound_cluster, pool) == []
    # plain output: the per-second rows name the slowest host, the summary has the per-host table; the
    # bench's own cleanup removes every client's objects
    p = run_fathom("bench", "rados", "-p", pool, "2", "write", "-b", "4K", "-t", "2", "--clients-file", cf,
                   *conn, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "slowest: " in p.stdout and "Client hosts (the figures above" in p.stdout, p.stdout
    assert all(n in p.stdout for n in names)
    assert _fathom_objects(bound_cluster, pool) == []


def test_bench_reads_and_rbd_on_client_hosts(bed, bound_cluster, tmp_path):
    pool, db, conn, cf = _bench_setup(bed, bound_cluster, tmp_path, "r.db")
    w = run_fathom("bench", "rados", "-p", pool, "2", "write", "-b", "4K", "-t", "2", "--no-cleanup",
                   "--run-name", "rd", "-f", "json", "--clients-file", cf, *conn, timeout=180)
    assert w.returncode == 0, w.stdout + w.stderr
    written = {h["host"]: h["ops"] for h in json.loads(w.stdout)["fathom"]["clients"]["hosts"]}
    # seq reads each engine's own objects (found through its metadata object), rand reads among them
    for mode in ("seq", "rand"):
        r = run_fathom("bench", "rados", "-p", pool, "2", mode, "-t", "2", "--run-name", "rd", "-f", "json",
                       "--clients-file", cf, *conn, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        hosts = doc["fathom"]["clients"]["hosts"]
        assert sorted(h["host"] for h in hosts) == sorted(written) and all(h["ops"] > 0 for h in hosts)
        assert doc["total_reads_made"] == sum(h["ops"] for h in hosts)
        if mode == "seq":  # a sequential pass reads no more than the engine wrote
            assert all(h["ops"] <= written[h["host"]] for h in hosts), (hosts, written)
    p = run_fathom("cleanup", "-p", pool, "--run-name", "rd", "-c", str(bound_cluster.conf_path),
                   "-k", str(bound_cluster.keyring_path), timeout=120)
    assert p.returncode == 0 and _fathom_objects(bound_cluster, pool) == [], p.stdout + p.stderr
    # rbd bench: every engine writes and reads its share of --io-total on one image
    ceph = bound_cluster.ceph()
    ceph.ceph("osd", "pool", "application", "enable", pool, "rbd", "--yes-i-really-mean-it", fmt_json=False)
    ceph.rbd("create", f"{pool}/mh", "--size", "32M", fmt_json=False)
    try:
        for io_type in ("write", "read"):
            r = run_fathom("bench", "rbd", f"{pool}/mh", "--io-type", io_type, "--io-size", "4K", "--io-threads",
                           "2", "--io-total", "3M", "--io-pattern", "rand", "-f", "json", "--clients-file", cf,
                           *conn, timeout=180)
            assert r.returncode == 0, r.stdout + r.stderr
            doc = json.loads(r.stdout)
            hosts = doc["fathom"]["clients"]["hosts"]
            assert sorted(h["host"] for h in hosts) == sorted(written)
            # 3 MiB over three engines: 256 ops of 4 KiB each, summed exactly
            assert [h["ops"] for h in hosts] == [256] * 3 and doc["ops"] == 768, hosts
            assert doc[io_type]["ops"] == 768 and doc[io_type]["latency"]["p99"] > 0
        with Store(db) as st:
            (pt,) = st.points(st.run("latest").id)
            assert hdr.count(st.histograms(pt["id"])["read"]) == 768
            assert sorted(k[1] for k in st.histograms_by_instance(pt["id"])) == sorted(written)
    finally:
        ceph.rbd("rm", f"{pool}/mh", fmt_json=False)


def test_bench_with_an_unreachable_client_fails_in_bounded_time(bed, bound_cluster, tmp_path):
    t0 = time.monotonic()
    p = run_fathom("bench", "rados", "-p", "nopool", "2", "write", "--client", f"root@{bed.prefix}.99",
                   "--known-hosts", bed.known_hosts, "-c", str(bound_cluster.conf_path),
                   "-k", str(bound_cluster.keyring_path), "--db", str(tmp_path / "b.db"), timeout=120)
    took = time.monotonic() - t0
    assert p.returncode == 4 and f"client host {bed.prefix}.99 is unreachable" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and took < 30
