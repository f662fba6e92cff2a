"""Current Ceph: a local cluster whose daemons run from a cached root file system (fathom.cluster.rootfs,
fathom.cluster.cephsrc), Ceph 20 (Tentacle, from Debian sid) by default, with its OSDs on two network-namespace
hosts, attached and measured by fathom with that release's own client (fathom.cluster.client): the ceph tools and
the engine's librados and librbd from the same root. Tentacle keeps its default aes256k keys, and this host's Ceph
16 client is refused by a message that names the key type and the fix. The root is built once per machine (about
1 min from deb.debian.org); only an unreachable mirror with no cached root skips, and says so.
FATHOM_TEST_REEF=1 runs the same tests on Ceph 18 (Reef, from Debian 13) as well.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from conftest import QUICK_MGR_STATS, release_root, run_fathom

from fathom.hosts import netns
from fathom.cluster import cephsrc, keys, rootfs
from fathom.cluster.local import LocalCluster, pid_alive
from fathom.cluster.localconf import free_port
from fathom.errors import ClusterError
from fathom.servers.mgrprom import EXCLUDE, Exporter
from fathom.results.store import Store

pytestmark = pytest.mark.cluster
needs_bed = pytest.mark.skipif(netns.available() is not None, reason=f"namespace hosts: {netns.available()}")


RELEASES = ["tentacle"] + (["reef"] if os.environ.get("FATHOM_TEST_REEF") else [])


def mounts_of(path: Path) -> list[str]:
    """This host's mount table lines under path (the cluster's mounts must live in its own namespace only)."""
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if f" {path}" in ln]


@pytest.fixture(scope="module", params=RELEASES)
def newer(request, tmp_path_factory):
    """mon.a, mgr.x, an MDS and an RGW on this host (at the bridge address), osd.0 and osd.1 on namespace hosts 0 and 1,
    all from the release's root, its client the release's. At the end every daemon and the namespace holder are
    gone, and nothing is mounted."""
    root = release_root(request.param)
    with netns.Testbed(hosts=2) as tb:
        d = tmp_path_factory.mktemp(request.param) / "cluster"
        c = LocalCluster(d, progress=lambda m: print(m, file=sys.stderr))
        places = {f"osd.{i}": {"prefix": ["nsenter", "-t", str(h.pid), "-n", "-u", "--"], "addr": h.addr}
                  for i, h in enumerate(tb.hosts)}
        c.up(osds=2, osd_size=3 * 1024**3, rgw=True, mds=True, bind=tb.bridge_addr, places=places, ceph=str(root),
             settings={"osd": {"osd_memory_target": "939524096"}})
        pids = [dm.pid for dm in c.daemons() if dm.pid] + [(c.state() or {})["holder"]["pid"]]
        try:
            # each of a point's two settled reads of the module waits up to one collection and one report
            for opt, value in QUICK_MGR_STATS:
                c.ceph().ceph("config", "set", "mgr", opt, value, fmt_json=False)
            yield tb, c, rootfs.RELEASES[request.param]
        finally:
            stopped = run_fathom("cluster", "down", "--dir", str(d), timeout=300)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            assert not [p for p in pids if p and pid_alive(p)], "a daemon or the namespace holder is left running"
            assert not mounts_of(d)


def wait_versions(c: LocalCluster, kinds: set[str], timeout: float = 60) -> dict:
    """`ceph versions` once every kind shows (an RGW enters the mgr's service map some seconds after it starts)."""
    deadline = time.monotonic() + timeout
    while True:
        v = c.ceph().ceph("versions")
        if set(v) >= kinds or time.monotonic() > deadline:
            return v
        time.sleep(1)


@needs_bed
def test_the_daemons_are_chrooted_in_a_namespace_and_the_client_and_its_keys_are_the_release_s(newer):
    tb, c, rel = newer
    merged = cephsrc.rootfs_paths(c.root)["merged"]
    assert c.source().kind == "rootfs"
    # every daemon runs in the root (its /proc/PID/root), and nothing shows in this host's mount table
    holder = (c.state() or {})["holder"]["pid"]
    ns = os.readlink(f"/proc/{holder}/ns/mnt")
    for dm in c.daemons():  # one namespace, the holder's, for all
        assert os.readlink(f"/proc/{dm.pid}/root") == str(merged), dm
        assert os.readlink(f"/proc/{dm.pid}/ns/mnt") == ns, dm
    assert not mounts_of(c.root)
    versions = wait_versions(c, {"mon", "mgr", "osd", "rgw"})
    assert set(versions) >= {"mon", "mgr", "osd", "rgw"}
    assert all(v.startswith(f"ceph version {rel.major}.") for v in versions["overall"]), versions
    assert sum(versions["osd"].values()) == 2
    assert (c.state() or {})["holder"]["pid"] == holder  # the tools run in it too: no second namespace
    p = run_fathom("cluster", "status", "--dir", str(c.root), "--json", check=True)
    st = json.loads(p.stdout)
    assert st["health"] == "HEALTH_OK" and st["osds_up"] == 2, st
    assert st["ceph_source"] == {"kind": "rootfs", "dir": str(rootfs.root_path(rel.name))}
    # the OSDs are on their namespace hosts by the cluster's metadata
    by_host = {h["host"]: h for h in st["hosts"]}
    for i, h in enumerate(tb.hosts):
        assert [dm["name"] for dm in by_host[h.name]["daemons"]] == [f"osd.{i}"], by_host
    assert st["client"]["dir"] == str(rootfs.root_path(rel.name)), st["client"]
    assert st["client"]["version"].startswith(f"ceph version {rel.major}."), st["client"]
    text = run_fathom("cluster", "status", "--dir", str(c.root), check=True).stdout
    assert f"daemons from the Ceph rootfs {rootfs.root_path(rel.name)}" in text
    assert f"client: ceph version {rel.major}." in text
    # the release's own key type (Tentacle: aes256k), nothing muted for an older client
    assert keys.key_type(str(c.keyring_path), "client.admin") == ("aes256k" if rel.major >= 20 else "aes")
    assert not (c.state() or {}).get("aes_for_old_clients")
    assert not c.ceph().ceph("health").get("mutes"), c.ceph().ceph("health")


@needs_bed
def test_this_host_s_ceph_16_client_is_refused_by_a_message_naming_the_key_type_and_the_fix(newer, tmp_path):
    tb, c, rel = newer
    if rel.major < 20:
        pytest.skip(f"Ceph {rel.major} keys are aes, which every client reads")
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.format())
    conn = ["--conf", str(c.conf_path), "--keyring", str(c.keyring_path), "--client-ceph", "host"]
    for argv in (["run", str(suite), "--db", str(tmp_path / "r.db"), *conn],
                 ["bench", "rados", "-p", "rbd", "2", "write", "--db", str(tmp_path / "b.db"), *conn]):
        t0 = time.monotonic()
        p = run_fathom(*argv, timeout=120)
        took = time.monotonic() - t0
        assert p.returncode == 3 and took < 30, (argv[0], took, p.stdout, p.stderr[-2000:])
        assert "client.admin's key is aes256k, which this Ceph 16 client cannot read" in p.stderr, p.stderr[-2000:]
        assert "--client-ceph tentacle" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "r.db").exists()  # refused before anything was made


def test_cephfs_mounts_through_the_release_s_ceph_fuse_and_this_host_s_gateways_are_refused_by_name(newer):
    # a cluster whose client is the release's mounts CephFS with the release's ceph-fuse (this host's Ceph 16 one
    # could not read Tentacle's keys); rbd-fuse and nfs-ganesha are this host's only: refused at once on aes256k
    from fathom.cluster import ganesha, mounts

    tb, c, rel = newer
    try:
        mnt = mounts.ceph_fuse(c)
        (mnt / "f").write_bytes(b"x" * 65536)
        assert (mnt / "f").stat().st_size == 65536
        (fuse,) = [d for d in c.daemons() if d.name == mounts.CEPH_FUSE]
        argv = Path(f"/proc/{fuse.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1] == b"--library-path" and argv[0].startswith(str(rootfs.root_path(rel.name)).encode()), argv
        assert argv[3] == str(rootfs.root_path(rel.name) / "usr/bin/ceph-fuse").encode(), argv
    finally:
        mounts.teardown(c)
    assert mounts.leftovers(c) == []
    if rel.major < 20:
        return
    for start, program in ((lambda: mounts.rbd_ext4(c, size=256 << 20), "rbd-fuse"),
                           (lambda: ganesha.ganesha(c), "ganesha.nfsd")):
        t0 = time.monotonic()
        with pytest.raises(ClusterError) as e:
            start()
        assert time.monotonic() - t0 < 20, program
        assert f"{program} runs from this host's Ceph" in e.value.message and "aes256k" in e.value.message, e.value
        assert "--client-ceph host" in e.value.hint
    mounts.teardown(c)
    assert mounts.leftovers(c) == [] and not [d for d in c.daemons() if d.name.startswith(("ganesha", "rbd_fuse"))]


SUITE = """\
name: release
cluster: {{kind: attached}}
prep:
  pools: [{{name: rp, application: rados, pg_num: 8, size: 1}}, {{name: bp, application: rbd, pg_num: 8, size: 1}}]
  images: {{pool: bp, count: 1, size: 64MiB}}
defaults: {{engine: fathom-engine, iodepth: 8, runtime: 4s}}
workloads:
  - {{name: rados, interface: rados, pool: rp, rw: write, bs: 64k}}
  - {{name: rbd, interface: rbd, pool: bp, rw: randwrite, bs: 4k}}
  - {{name: s3, interface: s3, rw: write, object_size: 64KiB}}
"""


def cluster_config(c: LocalCluster) -> list[tuple[str, str, str]]:
    return sorted((o["section"], o["name"], o["value"]) for o in c.ceph().ceph("config", "dump"))


@needs_bed
def test_fathom_measures_it_with_its_own_client_server_figures_and_perf_counters_and_puts_it_back(newer, engine_ready,
                                                                                                tmp_path):
    tb, c, rel = newer
    # the user's module is on (their Prometheus scrapes it), without perf counters, as the release ships it
    port = free_port(tb.bridge_addr)
    c.ceph().ceph("config", "set", "mgr", "mgr/prometheus/server_addr", tb.bridge_addr, fmt_json=False)
    c.ceph().ceph("config", "set", "mgr", "mgr/prometheus/server_port", str(port), fmt_json=False)
    c.ceph().ceph("mgr", "module", "enable", "prometheus", fmt_json=False)
    before = cluster_config(c)
    assert c.ceph().ceph("config", "get", "mgr", EXCLUDE, fmt_json=False).strip() == "true"
    suite = tmp_path / "release.yaml"
    suite.write_text(SUITE.format())
    db = tmp_path / "r.db"
    argv = ["run", str(suite), "--db", str(db), "--conf", str(c.conf_path), "--keyring", str(c.keyring_path),
            "--client-ceph", rel.name, "--mgr-prometheus", "--known-hosts", tb.known_hosts, "--server-key", tb.key_file]
    for h in tb.hosts:
        argv += ["--server-host", f"root@{h.addr}"]
    p = run_fathom(*argv, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    with Store(db) as st:
        run = st.run("latest")
        env = run.env
        pts = {q["workload"]: q for q in st.points(run.id)}
        events = st.events(run.id)
        assert set(pts) == {"rados", "rbd", "s3"} and all(q["status"] == "done" for q in pts.values()), pts
        for name, q in pts.items():
            ops = sum(o["ops"] for o in q["result"]["ops"].values())
            assert ops > 0 and not q["result"]["errors"], (name, q["result"])
        # the environment: a cluster from the cached root, measured by that root's client: its tools and the
        # engine's librados and librbd (the files the engine loaded)
        root = str(rootfs.root_path(rel.name))
        assert env["ceph_version"].startswith(f"ceph version {rel.major}."), env["ceph_version"]
        assert env["ceph_client_version"].startswith(f"ceph version {rel.major}."), env["ceph_client_version"]
        assert env["ceph_client"]["dir"] == root and env["ceph_client"]["release"] == rel.name, env["ceph_client"]
        for name in ("rados", "rbd"):
            libs = pts[name]["result"]["extra"]["libraries"]
            assert libs["librados"].startswith(root + "/") and libs["librbd"].startswith(root + "/"), libs
        assert env["cluster"]["ceph_source"] == {"kind": "rootfs", "dir": str(rootfs.root_path(rel.name))}
        # server figures over SSH from the namespace hosts, each OSD on its own
        assert {h["hostname"] for h in env["servers"]["hosts"]} == {h.name for h in tb.hosts}
        for q in pts.values():
            ssh = {(s["host"], s["source"]) for s in st.telemetry(q["id"]) if s.get("via") == "ssh"
                   and s["kind"] == "osd"}
            assert ssh == {(tb.hosts[0].name, "osd.0"), (tb.hosts[1].name, "osd.1")}, ssh
            assert q["metrics"]["osd_cpu"] is not None
        # perf counters through the mgr's module, turned on for the run: Reef leaves them out by default
        assert "exclude_perf_counters was true" in env["mgr_prometheus"]["perf_counters"]
        perf = [e for e in events if e["kind"] == "perf_counters" and e["point_id"] == pts["rados"]["id"]]
        assert perf and perf[0]["data"]["source"] == "mgr-prometheus", perf
        assert "exclude_perf_counters" in perf[0]["data"]["via"]
        counters = st.perf_counters(pts["rados"]["id"])
        writes = sum((v.get("osd.op_w") or 0) for k, v in counters.items() if k.startswith("osd."))
        assert writes >= pts["rados"]["result"]["ops"]["write"]["ops"], counters
    # the report's sources section says which it was
    run_fathom("report", "--db", str(db), "latest", "-o", str(tmp_path / "r.md"), check=True)
    assert "exclude_perf_counters was true" in (tmp_path / "r.md").read_text()
    # put back as found: the module on, exclude_perf_counters and every other option as before, and the running
    # module's output without perf counters again (a `config rm` alone leaves it exporting them)
    assert cluster_config(c) == before
    assert "prometheus" in c.ceph().ceph("mgr", "module", "ls")["enabled_modules"]
    with Store(db) as st:
        checked = [e["message"] for e in st.events(st.run("latest").id) if e["kind"] in ("restore", "warning")
                   and "perf counters" in e["message"]]
    assert checked and "leaves the perf counters out again" in checked[0], checked
    exporter = Exporter(c.ceph(), f"http://{tb.bridge_addr}:{port}/", period=2.0)
    assert not [d for d, secs in exporter.read_settled(time.time(), counters=False).dumps.items() if secs.get("osd")]
    c.ceph().ceph("mgr", "module", "disable", "prometheus", fmt_json=False)
    for opt in ("server_addr", "server_port"):
        c.ceph().ceph("config", "rm", "mgr", f"mgr/prometheus/{opt}", fmt_json=False)


TELL_SUITE = """\
name: tell
cluster: {kind: attached}
prep:
  pools: [{name: tp, application: rados, pg_num: 8, size: 1}]
workloads:
  - {name: w, engine: fathom-engine, interface: rados, pool: tp, rw: write, bs: 4k, iodepth: 4, runtime: 3s}
"""


@needs_bed
def test_a_cluster_fathom_did_not_start_gives_its_counters_through_ceph_tell(newer, engine_ready, tmp_path):
    """Attached by a conf of the user's (not fathom's own cluster's: no admin socket fathom knows, no server host):
    every OSD's perf counters come through the mons (`ceph tell osd.* perf dump`), no setting changed."""
    tb, c, rel = newer
    conf = tmp_path / "theirs.conf"
    conf.write_text(c.conf_path.read_text())
    before = cluster_config(c)
    (tmp_path / "s.yaml").write_text(TELL_SUITE)
    db = tmp_path / "t.db"
    p = run_fathom("run", str(tmp_path / "s.yaml"), "--db", str(db), "--conf", str(conf), "--keyring",
                   str(c.keyring_path), "--client-ceph", rel.name, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    with Store(db) as st:
        run = st.run("latest")
        (q,) = st.points(run.id)
        perf = [e for e in st.events(run.id) if e["kind"] == "perf_counters" and e["point_id"] == q["id"]]
        assert [e["data"]["source"] for e in perf] == ["ceph-tell"], perf
        assert perf[0]["data"]["daemons"] == ["mds.a", "osd.0", "osd.1"], perf  # the MDS too
        counters = st.perf_counters(q["id"])
        (lat,) = [e["data"] for e in st.events(run.id) if e["kind"] == "osd_latency"]
    writes = sum(v.get("osd.op_w") or 0 for k, v in counters.items() if k.startswith("osd."))
    assert writes >= q["result"]["ops"]["write"]["ops"] > 0, (writes, q["result"]["ops"])
    # the OSDs' own write latency through the mons too: every write counted, within the client's
    assert lat["source"] == "ceph-tell" and lat["osds"] == ["osd.0", "osd.1"], lat
    assert lat["ops"]["write"]["ops"] == writes and lat["ops"]["write"]["p50_low_s"] * 1e3 <= q["metrics"]["p99_ms"]
    assert cluster_config(c) == before
