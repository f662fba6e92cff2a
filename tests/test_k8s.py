"""Kubernetes pods as client hosts (fathom.hosts.pods, fathom.hosts.k8s) on the real test bed (tests/k8sbed.py) and a
real local Ceph cluster bound to the bed's bridge address, which the pods reach: suites and benches with engines
in pods, a pod deleted mid-point, Ctrl-C and kill -9 then restore, a Rook-style layout, each named error.

Only with FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes first, minutes).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
import signal
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import k8sbed
import pytest
from conftest import FATHOM, release_root, run_fathom

from fathom.results import hdr
from fathom.hosts import netns
from fathom.cluster.local import LocalCluster
from fathom.engines.fathom_engine import check_engine
from fathom.hosts.k8s.objects import LABEL_RUN
from fathom.results.store import Store

pytestmark = [
    pytest.mark.skipif(os.environ.get("FATHOM_TEST_K8S") != "1",
                       reason="Kubernetes test bed: set FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes once, "
                              "6 to 12 minutes)"),
    pytest.mark.skipif(k8sbed.available() is not None, reason=f"Kubernetes test bed: {k8sbed.available()}"),
]

NULL_SUITE = """\
name: pods-null
defaults: {engine: fathom-engine, interface: "null", bs: 4k, iodepth: 2, delay_us: 200, runtime: 3s}
workloads: [{name: n, rw: randread}]
"""
RADOS_SUITE = """\
name: pods
cluster: {{kind: attached, conf: {conf}, keyring: {keyring}}}
prep: {{pools: [{{name: pods, application: rados, pg_num: 8}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: pods, bs: 4k, iodepth: 4, runtime: {runtime}}}
workloads: [{{name: w, rw: write}}]
"""


@pytest.fixture(scope="module")
def bed(k8s_bed):
    return k8s_bed


@pytest.fixture(scope="module")
def image(bed) -> str:
    tar, name = k8sbed.engine_image(check_engine(), k8sbed.cache_dir() / "test-images")
    bed.import_image(tar)
    return name


@pytest.fixture(scope="module")
def pod_cluster(k8s_cluster):
    return k8s_cluster


def _k8s(bed, image: str, *more: str) -> list[str]:
    return ["--kubeconfig", str(bed.kubeconfig), "--k8s-image", image, *more]


def _rados_suite(tmp: Path, cluster: LocalCluster, runtime: str) -> Path:
    s = tmp / "suite.yaml"
    s.write_text(RADOS_SUITE.format(conf=cluster.conf_path, keyring=cluster.keyring_path, runtime=runtime))
    return s


def _left(bed, namespace: str = "default") -> str:
    """Every object fathom made that is still there (pods, ConfigMaps, Secrets with its label)."""
    p = bed.kubectl("-n", namespace, "get", "pods,configmaps,secrets", "-l", LABEL_RUN, "-o", "name")
    return p.stdout.strip()


def _wait(cond, limit: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return True
        time.sleep(0.2)
    return False


def _shape(db: Path) -> tuple[dict, dict, dict]:
    with Store(db) as st:
        (pt,) = st.points(st.run("latest").id)
        assert pt["status"] == "done"
        res, m = pt["result"], pt["metrics"]
        per = st.histograms_by_instance(pt["id"])
        (merged,) = st.histograms(pt["id"]).values()
        assert hdr.encode(hdr.merge(per.values())) == merged  # the merge is the histogram of every op
        assert hdr.count(merged) == m["total_ios"] == sum(e["ops"] for e in res["extra"]["engines"]) > 0
        hosts = sorted({e["host"] for e in res["extra"]["engines"]})
        rows = {h: st.intervals(pt["id"], host=h) for h in hosts}
        assert all(rows.values())
        return res, m, rows


def test_a_suite_in_four_pods_has_the_shape_of_the_same_run_over_ssh(bed, image, tmp_path):
    suite = tmp_path / "null.yaml"
    suite.write_text(NULL_SUITE)
    pods_db, ssh_db = tmp_path / "pods.db", tmp_path / "ssh.db"
    p = run_fathom("run", str(suite), "--db", str(pods_db), *_k8s(bed, image, "--k8s-pods", "4"), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 pod(s) running" in p.stderr + p.stdout
    assert _left(bed) == ""
    with netns.Testbed(hosts=4) as tb:
        f = tmp_path / "clients.yaml"
        f.write_text(json.dumps({"hosts": [{"host": h.addr, "user": "root", "key_file": tb.key_file,
                                            "engine_dir": f"{tb.dir}/engine-{i}"} for i, h in enumerate(tb.hosts)],
                                 "known_hosts": tb.known_hosts}))
        p = run_fathom("run", str(suite), "--db", str(ssh_db), "--clients-file", str(f), timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    pres, pm, prows = _shape(pods_db)
    sres, sm, srows = _shape(ssh_db)
    assert sorted(prows) == [f"pod-{i}" for i in range(4)]
    assert set(pm) == set(sm) and set(pres["extra"]) == set(sres["extra"])
    assert pm["engines"] == sm["engines"] == 4 and pm["client_hosts"] == sm["client_hosts"] == 4
    assert pm["clients_lost"] == sm["clients_lost"] == 0
    assert set(pres["extra"]["clocks"]) == set(prows)
    assert sorted(len(r) for r in prows.values())[0] >= 2 and sorted(len(r) for r in srows.values())[0] >= 2
    with Store(pods_db) as st:
        env = st.run("latest").env["clients"]
    assert env["kubernetes"]["pods"] == 4 and [h["name"] for h in env["hosts"]] == sorted(prows)
    assert all(h["pod"].startswith("fathom-") and "engine_version" in h for h in env["hosts"])


def test_bench_rados_from_pods_reaches_the_cluster_through_a_secret_that_goes_with_them(bed, image, pod_cluster,
                                                                                         tmp_path):
    c = pod_cluster
    c.ceph().ceph("osd", "pool", "create", "podbench", "8", fmt_json=False)
    c.ceph().ceph("osd", "pool", "application", "enable", "podbench", "rados", fmt_json=False)
    p = run_fathom("bench", "rados", "-p", "podbench", "2", "write", "-b", "4K", "-t", "4", "--no-cleanup",
                   "--run-name", "pods", "-f", "json", "-c", str(c.conf_path), "-k", str(c.keyring_path),
                   "--db", str(tmp_path / "b.db"), *_k8s(bed, image, "--k8s-pods", "2"), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    hosts = doc["fathom"]["clients"]["hosts"]
    assert [h["host"] for h in hosts] == ["pod-0", "pod-1"] and all(h["ops"] > 0 for h in hosts)
    assert doc["total_writes_made"] == sum(h["ops"] for h in hosts)
    with Store(tmp_path / "b.db", read_only=True) as st:  # stored from its start; its journal emptied at its end
        run = st.run("latest")
        assert run.status == "done" and run.kind == "bench" and run.state["journal"]["fsid"]
        assert not [e for e in run.state["journal"]["entries"] if not e.get("undone")], run.state["journal"]
    out = c.ceph().call("rados", "-p", "podbench", "ls", fmt_json=False)
    left = [n for n in out.splitlines() if n.startswith("fathom_bench.pods.")]
    assert len(left) == doc["total_writes_made"] + 2  # every write is an object, and each engine's metadata
    key = c.ceph().ceph("auth", "print-key", "client.admin", fmt_json=False).strip()
    assert key not in p.stdout + p.stderr
    assert _left(bed) == ""


def test_pods_of_a_tentacle_client_run_its_image_and_its_ceph_libraries(bed, pod_cluster, tmp_path):
    """`fathom k8s image --ceph tentacle` imported into the node; a bench with `--client-ceph tentacle` makes its pods
    of that image by default (its name ends in -cephVERSION; the run records it and the kubelet's image ID), and
    their engines load the root's librados and librbd, not this host's Ceph 16 ones. The cluster is the bed's
    Pacific one: its aes keys are read by every client, and one cluster less to start."""
    from fathom.cluster import client
    from fathom.hosts.k8s.image import default_tag

    release_root("tentacle")
    tentacle = client.resolve("tentacle")
    tar = tmp_path / "tentacle.tar"
    made = run_fathom("k8s", "image", "--ceph", "tentacle", "-o", str(tar), check=True)
    name = made.stdout.split()[0]
    version = re.search(r"ceph version (\S+)", tentacle.version() or "").group(1)  # type: ignore[union-attr]
    assert name == default_tag(check_engine(), tentacle) and name.endswith(f"-ceph{version}"), made.stdout
    bed.import_image(tar)
    c, db = pod_cluster, tmp_path / "b.db"
    c.ceph().ceph("osd", "pool", "create", "podceph", "8", fmt_json=False)
    c.ceph().ceph("osd", "pool", "application", "enable", "podceph", "rados", fmt_json=False)
    p = run_fathom("bench", "rados", "-p", "podceph", "2", "write", "-b", "4K", "-t", "4", "-f", "json",
                   "-c", str(c.conf_path), "-k", str(c.keyring_path), "--client-ceph", "tentacle", "--db", str(db),
                   "--kubeconfig", str(bed.kubeconfig), "--k8s-pods", "1", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # the pod ran that image (the kubelet's ID of it: the digest of its config, which names its layer's) ...
    config, layer = _image_parts(tar)
    with Store(db, read_only=True) as st:
        run = st.run("latest")
        (pt,) = st.points(run.id)
        (host,) = run.env["clients"]["hosts"]
        engines = pt["result"]["extra"]["engines"]
    assert host["image"] == name and host["image_id"] == config, (host, config)
    # ... and its engine mapped librados and librbd at their sonames' paths in the root, where that layer holds the
    # root's files (this host's Ceph 16 image holds its own there)
    multi = f"/usr/lib/{platform.machine()}-linux-gnu"
    (engine,) = json.loads(p.stdout)["fathom"]["clients"]["engines"]
    assert engine["host"] == "pod-0" and engine["ops"] > 0, engine
    libs = {"librados": f"{multi}/librados.so.2", "librbd": f"{multi}/librbd.so.1"}
    assert engine["libraries"] == libs and [e["libraries"] for e in engines] == [libs], engines
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        for path in libs.values():
            f = t.extractfile(path.lstrip("/"))
            assert f is not None and f.read() == Path(f"{tentacle.dir}{path}").read_bytes() != Path(path).read_bytes()
    assert _left(bed) == ""


def _image_parts(oci: Path) -> tuple[str, bytes]:
    """A single-layer OCI archive's config digest (the image's ID to a runtime) and its layer (uncompressed),
    checked to be the layer that config names."""
    with tarfile.open(oci) as t:
        def blob(digest: str) -> bytes:
            f = t.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert f is not None, digest
            return f.read()

        f = t.extractfile("index.json")
        assert f is not None
        manifest = json.loads(blob(json.load(f)["manifests"][0]["digest"]))
        config = manifest["config"]["digest"]
        layer = gzip.decompress(blob(manifest["layers"][0]["digest"]))
        assert json.loads(blob(config))["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer).hexdigest()}"]
    return config, layer


def test_a_pod_deleted_mid_point_is_a_lost_host(bed, image, pod_cluster, tmp_path):
    db = tmp_path / "r.db"

    def delete() -> None:
        pod = bed.kubectl("get", "pods", "-l", LABEL_RUN, "-o", "jsonpath={.items[1].metadata.name}").stdout
        bed.kubectl("delete", "pod", pod, "--grace-period=0", "--force", "--wait=false")

    _mid_point(["run", str(_rados_suite(tmp_path, pod_cluster, "12s")), "--db", str(db),
                *_k8s(bed, image, "--k8s-pods", "2")], db, delete)
    with Store(db) as st:
        (pt,) = st.points(st.run("latest").id)
        m = pt["metrics"]
        assert m["clients_lost"] == 1 and m["total_ios"] > 0
        lost = pt["result"]["extra"]["clients_lost"]
        assert list(lost) == ["pod-1"] and "deleted" in lost["pod-1"], lost
    assert _left(bed) == ""


def test_a_node_gone_silent_mid_point_is_a_lost_host(bed, image, pod_cluster, tmp_path):
    # the node's kubelet frozen: the pod's exec streams stall; this host's engine runs on
    suite = _rados_suite(tmp_path, pod_cluster, "20s")
    clients = {"hosts": ["local"], "kubernetes": {"pods": 1, "image": image, "kubeconfig": str(bed.kubeconfig)}}
    suite.write_text(suite.read_text() + f"clients: {json.dumps(clients)}\n")
    db = tmp_path / "r.db"
    cut: list[float] = []

    def freeze() -> None:
        cut.append(time.time())
        with bed.frozen("kubelet"):
            time.sleep(12)  # silent for 5 s is lost; the kubelet back before the point ends

    _mid_point(["run", str(suite), "--db", str(db)], db, freeze)
    t_cut = cut[0]
    with Store(db) as st:
        (pt,) = st.points(st.run("latest").id)
        assert pt["status"] == "done" and pt["metrics"]["clients_lost"] == 1 and pt["metrics"]["total_ios"] > 0
        assert list(pt["result"]["extra"]["clients_lost"]) == ["pod-0"], pt["result"]["extra"]["clients_lost"]
        (lost,) = [e for e in st.events(st.run("latest").id) if e["kind"] == "client_lost"]
        assert lost["data"]["host"] == "pod-0" and lost["ts"] - t_cut <= 10, lost
        local = [r for r in st.intervals(pt["id"], host="local") if not r.get("ramp")]
        assert len(local) >= 18  # this host's engine ran the whole point
    assert _left(bed) == ""


def _mid_point(argv: list[str], db: Path, act) -> str:
    """`fathom ARGV` run; act() 3 s into its first point; the run's output once it ended, with status 0."""
    proc = subprocess.Popen([FATHOM, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert _wait(lambda: db.exists() and _point_started(db), 180)
        time.sleep(3)
        act()
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    return out


def _point_started(db: Path) -> bool:
    try:
        with Store(db, read_only=True) as st:
            return bool(st.db.execute("SELECT 1 FROM live_seconds WHERE kind = 'second' LIMIT 1").fetchall())
    except Exception:  # noqa: BLE001 - the store is being made
        return False


def test_ctrl_c_leaves_nothing_and_kill_9_is_undone_by_restore(bed, image, pod_cluster, tmp_path):
    suite = _rados_suite(tmp_path, pod_cluster, "30s")
    for sig in (signal.SIGINT, signal.SIGKILL):
        db = tmp_path / f"r{sig}.db"
        proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), *_k8s(bed, image, "--k8s-pods", "2")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert _wait(lambda db=db: db.exists() and _point_started(db), 180)
            proc.send_signal(sig)
            out, _ = proc.communicate(timeout=120)
        finally:
            proc.kill()
        if sig == signal.SIGINT:
            assert _left(bed) == "", out
            continue
        assert "pod/" in _left(bed)  # a killed run cannot clean up: its journal names what it made
        p = run_fathom("cluster", "restore", "--conf", str(pod_cluster.conf_path), "--db", str(db), timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "removed the Kubernetes objects" in p.stdout
        assert _wait(lambda: _left(bed) == "", 30), _left(bed)


def test_a_bench_killed_with_9_leaves_what_restore_removes_and_ends(bed, image, pod_cluster, tmp_path):
    # a bench is stored from its start when it makes pods: its journal names them, its Secret (the key) too
    c, db = pod_cluster, tmp_path / "b.db"
    c.ceph().ceph("osd", "pool", "create", "podkill", "8", fmt_json=False)
    c.ceph().ceph("osd", "pool", "application", "enable", "podkill", "rados", fmt_json=False)
    proc = subprocess.Popen([FATHOM, "bench", "rados", "-p", "podkill", "60", "write", "-b", "4K", "-t", "2",
                             "--run-name", "killed", "-c", str(c.conf_path), "-k", str(c.keyring_path),
                             "--db", str(db), *_k8s(bed, image, "--k8s-pods", "2")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert _wait(lambda: _left(bed).count("pod/") == 2, 180), _left(bed)
        with Store(db, read_only=True) as st:
            run = st.run("latest")
            assert run.kind == "bench" and run.status == "running"
            (made,) = run.state["journal"]["entries"]
            assert made["what"].startswith("pods ") and len(made["data"]["pods"]) == 2 and made["data"]["secret"]
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "secret/" in _left(bed) and "pod/" in _left(bed)
    p = run_fathom("cluster", "restore", "--conf", str(c.conf_path), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "removed the Kubernetes objects" in p.stdout and "marked interrupted" in p.stdout.lower(), p.stdout
    assert _wait(lambda: _left(bed) == "", 30), _left(bed)
    with Store(db, read_only=True) as st:
        assert st.run("latest").status == "interrupted"


def test_rook_style_mon_endpoints_and_secret_give_the_pods_access(bed, image, pod_cluster, tmp_path):
    c = pod_cluster
    key = c.ceph().ceph("auth", "print-key", "client.admin", fmt_json=False).strip()
    # Rook writes a=IP:PORT; a port other than 6789 is taken for msgr2: the mon's v2 address
    mon = next(a["addr"] for a in c.ceph().ceph("mon", "dump")["mons"][0]["public_addrs"]["addrvec"]
               if a["type"] == "v2")
    bed.kubectl("create", "namespace", "rook-ceph")
    try:
        bed.kubectl("-n", "rook-ceph", "create", "configmap", "rook-ceph-mon-endpoints",
                    f"--from-literal=data=a={mon}")
        bed.kubectl("-n", "rook-ceph", "create", "secret", "generic", "rook-ceph-mon",
                    "--from-literal=ceph-username=client.admin", f"--from-literal=ceph-secret={key}",
                    f"--from-literal=fsid={c.ceph().ceph('fsid')['fsid']}")
        db = tmp_path / "r.db"
        p = run_fathom("run", str(_rados_suite(tmp_path, c, "2s")), "--db", str(db),
                       *_k8s(bed, image, "--k8s-pods", "1", "--rook-namespace", "rook-ceph"), timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "Ceph access from rook rook-ceph/rook-ceph-mon" in p.stdout + p.stderr
        with Store(db) as st:
            (pt,) = st.points(st.run("latest").id)
            assert pt["status"] == "done" and pt["metrics"]["total_ios"] > 0
        stored = b"".join(f.read_bytes() for f in tmp_path.glob("r.db*"))
        assert key.encode() not in stored and key not in p.stdout + p.stderr  # the key is in the Secret alone
        assert _left(bed) == ""
    finally:
        bed.kubectl("delete", "namespace", "rook-ceph", "--wait=false", check=False)


def _null(bed, image: str, tmp: Path, *opts: str) -> subprocess.CompletedProcess:
    suite = tmp / "null.yaml"
    suite.write_text(NULL_SUITE)
    return run_fathom("run", str(suite), "--db", str(tmp / "e.db"), "--k8s-pods", "1", *opts, timeout=300)


def test_each_named_error_names_the_problem_and_the_fix(bed, image, tmp_path, cluster):
    kc = ["--kubeconfig", str(bed.kubeconfig)]
    cases = [
        (["--kubeconfig", str(tmp_path / "none"), "--k8s-image", image], "no usable kubeconfig", "KUBECONFIG"),
        (_k8s(bed, image, "--k8s-namespace", "nowhere"), "namespace nowhere does not exist",
         "kubectl create namespace nowhere"),
        ([*kc, "--k8s-image", "localhost/fathom-absent:1"], "is not on node", "fathom k8s image"),
        (_k8s(bed, image, "--k8s-node-selector", "fathom-test=none", "--k8s-ready-timeout", "5"), "FailedScheduling",
         "node_selector"),
    ]
    # the API refusing the credentials (a token it does not know), and no API at the kubeconfig's address
    cfg = json.loads(bed.kubeconfig.read_text())
    cfg["users"][0]["user"] = {"token": "not-a-token-the-api-knows"}
    refused = tmp_path / "refused.kubeconfig"
    refused.write_text(json.dumps(cfg))
    with socket.socket() as sock:  # a port of this host nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = json.loads(bed.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    nowhere = tmp_path / "nowhere.kubeconfig"
    nowhere.write_text(json.dumps(cfg))
    cases += [
        (["--kubeconfig", str(refused), "--k8s-image", image], "refused the kubeconfig's credentials",
         "renew the kubeconfig's credentials"),
        (["--kubeconfig", str(nowhere), "--k8s-image", image], f"API at https://127.0.0.1:{port} is unreachable",
         "kubectl cluster-info"),
    ]
    for opts, problem, fix in cases:
        p = _null(bed, image, tmp_path, *opts)
        assert p.returncode != 0 and problem in p.stderr and fix in p.stderr, (opts, p.stdout, p.stderr)
        assert _left(bed) == ""
    # forbidden: a user the API knows, with no role
    user = bed.user_kubeconfig("fathom-nobody")
    p = _null(bed, image, tmp_path, "--kubeconfig", str(user), "--k8s-image", image)
    assert p.returncode != 0 and "forbidden" in p.stderr and "pods/exec (create, get)" in p.stderr, p.stderr
    # the session's cluster listens on 127.0.0.1 only: pods cannot reach its mons
    suite = tmp_path / "unreach.yaml"
    suite.write_text(RADOS_SUITE.format(conf=cluster.conf_path, keyring=cluster.keyring_path, runtime="2s"))
    p = run_fathom("run", str(suite), "--db", str(tmp_path / "u.db"), *_k8s(bed, image, "--k8s-pods", "1"),
                   timeout=300)
    assert p.returncode != 0 and "cannot reach any of the cluster's mons" in p.stderr and "--bind" in p.stderr, \
        p.stderr
    assert _left(bed) == ""
