"""Server figures on Kubernetes (fathom.servers.k8s): fathom-sampler in a DaemonSet (hostPID, read-only, no
capability) on the real test bed (tests/k8sbed.py), whose node is this host, beside a real local Ceph
cluster bound to the bed's node address. The OSD's CPU read through the DaemonSet's exec streams agrees with
this host's own sampler; nothing is left after a run, and `fathom cluster restore` removes what a killed run
left (and never an object fathom did not make). The pure rules (nodes to metadata hosts, the DaemonSet's
body, whose object is whose) are tested without a bed.

The bed's tests only with FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes first, minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import k8sbed
import pytest
from conftest import FATHOM, kill_after_first_point, run_fathom

from fathom import servers
from fathom.results import usage
from fathom.servers import telemetry
from fathom.servers import inventory
from fathom.cluster.journal import K8S_KIND, Journal
from fathom.cluster.local import LocalCluster
from fathom.hosts.pods import K8sError
from fathom.errors import UsageError
from fathom.hosts.k8s import journaled
from fathom.servers import k8s as sampler
from fathom.results.store import Store



def needs_bed(test):
    """Only with FATHOM_TEST_K8S=1, where a bed can start (the pure tests run everywhere)."""
    test = pytest.mark.skipif(k8sbed.available() is not None, reason=f"Kubernetes test bed: {k8sbed.available()}")(test)
    return pytest.mark.skipif(os.environ.get("FATHOM_TEST_K8S") != "1",
                              reason="Kubernetes test bed: set FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes "
                                     "once, 6 to 12 minutes)")(test)


# ---- pure ---------------------------------------------------------------------------------------------
def _placed() -> dict[str, list[inventory.ClusterDaemon]]:
    raw = {"osd": [{"id": 0, "hostname": "node-a.example.com", "front_addr": "[v2:10.1.0.7:6800/701]"},
                   {"id": 1, "hostname": "vm", "front_addr": "[v2:10.247.0.1:6800/802]"}]}
    return inventory.placement(raw)


def test_nodes_are_the_metadatas_hosts_by_name_address_or_the_users_map():
    placed = _placed()
    # Rook: NODE_NAME is the pod's node, and Ceph reports it as the daemon's hostname (short names equal)
    assert sampler.node_host(sampler.Node("node-a", ("10.9.9.9",)), placed, {}) == "node-a.example.com"
    # a node whose name differs, reached at one of its daemons' addresses (host networking; the test bed)
    assert sampler.node_host(sampler.Node("fathom-k8sbed", ("10.247.0.1",)), placed, {}) == "vm"
    assert sampler.node_host(sampler.Node("other", ("10.9.9.9",)), placed, {}) is None
    # the user's map wins, and names only hosts the metadata has
    assert sampler.node_host(sampler.Node("other"), placed, {"other": "vm"}) == "vm"
    assert sampler.node_host(sampler.Node("node-a"), placed, {"node-a": "nowhere"}) is None
    spec = servers.ServersSpec(kubernetes={"image": "i"}).kubernetes
    nodes = [sampler.Node("node-a"), sampler.Node("spare", ("10.2.2.2",)),
             sampler.Node("fathom-k8sbed", ("10.247.0.1",))]
    assert sampler.choose_nodes(spec, nodes, placed) == ["node-a", "fathom-k8sbed"]
    with pytest.raises(K8sError, match="none of the Kubernetes nodes .spare. is a host of the cluster's metadata") as e:
        sampler.choose_nodes(spec, nodes[1:2], placed)
    assert "node_hosts" in (e.value.hint or "")
    named = spec.model_copy(update={"nodes": ["spare"]})
    assert sampler.choose_nodes(named, nodes, placed) == ["spare"]
    with pytest.raises(K8sError, match="no node named gone"):
        sampler.choose_nodes(spec.model_copy(update={"nodes": ["gone"]}), nodes, placed)
    assert sampler.choose_nodes(spec.model_copy(update={"node_selector": {"ceph": "yes"}}), nodes, placed) == []


def test_the_daemonset_shares_the_nodes_pids_and_nothing_else():
    spec = servers.ServersSpec(kubernetes={"image": "localhost/s:1", "namespace": "bench",
                                           "tolerations": [{"operator": "Exists"}]}).kubernetes
    body = sampler.daemonset(spec, "fathom-7-ab12cd", ["n1", "n2"])
    assert body["metadata"]["name"] == "fathom-sampler-fathom-7-ab12cd" and body["metadata"]["namespace"] == "bench"
    labels = body["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/managed-by": "fathom", "app.kubernetes.io/name": "fathom-sampler",
                      "fathom.io/run": "fathom-7-ab12cd"}
    pod = body["spec"]["template"]["spec"]
    assert body["spec"]["template"]["metadata"]["labels"] == labels
    assert pod["hostPID"] is True and not pod.get("hostNetwork") and not pod.get("hostIPC") and "volumes" not in pod
    assert pod["automountServiceAccountToken"] is False and pod["tolerations"] == [{"operator": "Exists"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"] and not sc["privileged"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] and sc["runAsUser"] == 65534
    assert sampler.daemonset(spec, "r", [])["spec"]["template"]["spec"]["affinity"] is None


def test_only_an_object_with_fathoms_labels_and_uid_is_fathoms():
    want = sampler.labels("run-1")
    assert journaled.fathoms(want, want, "u1", "u1") is None
    assert journaled.fathoms(want, want, "u1", None) is None  # killed before the uid came back: the labels say
    assert "uid is u2" in (journaled.fathoms(want, want, "u2", "u1") or "")  # same name, made anew by someone
    assert "labels" in (journaled.fathoms({**want, "fathom.io/run": "run-2"}, want, "u1", "u1") or "")
    assert "labels" in (journaled.fathoms({}, want, "u1", None) or "")


def test_server_k8s_options(tmp_path):
    spec = servers.servers_from_args(None, k8s_image="localhost/s:1")
    assert spec is not None and spec.kubernetes is not None and spec.kubernetes.image == "localhost/s:1"
    f = tmp_path / "servers.yaml"
    f.write_text("kubernetes: {kubeconfig: /k/config, namespace: rook-ceph, node_hosts: {n1: host1}}\ninterval_s: 2\n")
    spec = servers.servers_from_args(None, base=servers.servers_file(str(f)), k8s_image="localhost/s:2")
    assert spec is not None and spec.interval_s == 2 and spec.kubernetes is not None
    assert (spec.kubernetes.image, spec.kubernetes.namespace, spec.kubernetes.node_hosts) == (
        "localhost/s:2", "rook-ceph", {"n1": "host1"})
    with pytest.raises(UsageError, match="not both"):
        servers.servers_from_args(["root@10.0.0.1"], k8s_image="localhost/s:1")
    f.write_text("kubernetes: {image: i, nodes: [a], bogus: 1}\n")
    with pytest.raises(UsageError, match="bogus"):
        servers.servers_file(str(f))


# ---- on the bed ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bed_cluster(k8s_bed, k8s_cluster, tmp_path_factory):
    """The bed, a one-OSD cluster bound to its node address (the pods reach it), the sampler's image imported."""
    out = tmp_path_factory.mktemp("img")
    tree = k8sbed.busybox_tree()
    tree["usr/bin/fathom-sampler"] = servers.sampler_path()
    image = "localhost/fathom-sampler-test:1"
    k8sbed.write_image(out / "sampler.tar", image, tree, ["/bin/sh"])
    k8s_bed.import_image(out / "sampler.tar")
    return k8s_bed, k8s_cluster, image


def _left(bed: k8sbed.K8sBed, run: str) -> str:
    return bed.kubectl("get", "daemonsets,pods", "-A", "-l", f"fathom.io/run={run}", "-o", "name").stdout.strip()


def _bench(c: LocalCluster, pool: str, seconds: int) -> subprocess.Popen:
    return subprocess.Popen(["rados", "-c", str(c.conf_path), "--keyring", str(c.keyring_path), "-p", pool, "bench",
                             str(seconds), "write", "-t", "16", "-b", "4096", "--no-cleanup"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@needs_bed
def test_the_daemonset_samplers_osd_cpu_agrees_with_this_hosts_and_nothing_is_left(bed_cluster):
    bed, c, image = bed_cluster
    ceph = c.ceph()
    ceph.ceph("osd", "pool", "create", "k8s", "16", fmt_json=False)
    ceph.ceph("osd", "pool", "set", "k8s", "size", "1", "--yes-i-really-mean-it", fmt_json=False)
    ceph.ceph("osd", "pool", "application", "enable", "k8s", "rados", fmt_json=False)
    raw, errors = inventory.gather_raw(ceph)
    assert not errors
    placed = inventory.placement(raw)
    saved: list[dict] = []
    journal = Journal(persist=saved.append)
    spec = servers.ServersSpec(kubernetes={"image": image, "kubeconfig": str(bed.kubeconfig), "ready_timeout_s": 90})
    t = time.monotonic()
    srv = sampler.DaemonSetServers.open(spec, placed, "agree", print, journal)
    opened_s = time.monotonic() - t
    try:
        (h,) = srv.hosts
        assert h.hostname == bed.node and h.meta in placed  # the node, matched to the metadata's host by address
        assert abs(h.offset_s) <= (h.rtt_s or 0) / 2 + 0.01  # the node is this host: the same clock
        (e,) = journal.pending(K8S_KIND)
        assert e.data["uid"] and e.data["kind"] == "DaemonSet" and e.data["kubeconfig"] == str(bed.kubeconfig)
        ds = json.loads(bed.kubectl("get", "daemonset", srv.name, "-o", "json").stdout)
        pod = ds["spec"]["template"]["spec"]
        assert pod["hostPID"] and pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        (osd,) = [d for d in c.daemons() if d.name == "osd.0"]
        here = telemetry.Sampler([osd], interval=1.0)
        here.start()
        bench = _bench(c, "k8s", 14)
        time.sleep(3)
        t0 = time.time()
        time.sleep(9)
        t1 = time.time()
        assert bench.wait(60) == 0, bench.stderr.read() if bench.stderr else ""
        mine = here.stop()
        records, events = srv.window(t0, t1)
    finally:
        srv.close()
    ours = usage.summarize(mine, t0, t1)["osd_cpu"]
    theirs = usage.summarize(records, t0, t1)["osd_cpu"]
    print(f"osd.0 CPU over {t1 - t0:.1f} s: this host's sampler {ours:.1f}%, the DaemonSet's {theirs:.1f}% "
          f"(DaemonSet up and sampling in {opened_s:.1f} s)")
    assert ours > 5, "no load on the OSD"
    assert abs(theirs - ours) <= 0.10 * ours, (ours, theirs)
    assert all(r["via"] == "k8s" and r["host"] == bed.node for r in records)
    src = next(ev for ev in events if ev["kind"] == "sources")["data"]
    assert src["source"] == "k8s" and "osd.0" in src["hosts"][bed.node]["daemons"]
    assert src["hosts"][bed.node]["nics"]["counted"] == []  # the pod's own network namespace: left out
    assert _left(bed, "agree") == ""
    assert not journal.pending(K8S_KIND)


SUITE = """\
name: k8s-servers
cluster: {{kind: attached, conf: {conf}, keyring: {keyring}}}
prep: {{pools: [{{name: srv, application: rados, pg_num: 16, size: 1}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: srv, bs: 4k, iodepth: 8, runtime: 6s}}
workloads: [{{name: a, rw: write}}, {{name: b, rw: write}}, {{name: c, rw: write}}]
"""


@needs_bed
def test_a_killed_runs_daemonset_is_removed_by_restore_and_anothers_object_never(bed_cluster, tmp_path):
    bed, c, image = bed_cluster
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(conf=c.conf_path, keyring=c.keyring_path))
    servers_file = tmp_path / "servers.yaml"
    servers_file.write_text(json.dumps({"kubernetes": {"kubeconfig": str(bed.kubeconfig)}}))
    db = tmp_path / "k.db"
    out = kill_after_first_point(["run", str(suite), "--db", str(db), "--server-k8s", image,
                                  "--server-hosts-file", str(servers_file)], db)
    assert "sampling the cluster's nodes from DaemonSet" in out, out
    with Store(db) as st:
        run = st.run("latest")
        (entry,) = [e for e in run.state["journal"]["entries"] if e["kind"] == K8S_KIND and not e["undone"]]
        env = run.env
    assert env["servers"]["source"] == "k8s" and env["servers"]["hosts"][0]["hostname"] == bed.node
    tag = entry["data"]["labels"]["fathom.io/run"]
    assert _left(bed, tag)  # the killed run's DaemonSet and pod
    # an object of the same kind and namespace fathom did not make, named in a journal: never touched
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-fathoms", "labels": {"a": "b"}}}
    bed.kubectl("apply", "-f", "-", input=json.dumps(other))
    foreign = Journal()
    foreign.write(journaled.entry(str(bed.kubeconfig), None, "default", "ConfigMap", "not-fathoms",
                                sampler.labels(tag)))
    removed, failed = journaled.remove_left(foreign, print)
    assert removed == failed == [] and not foreign.pending()
    assert bed.kubectl("get", "configmap", "not-fathoms", "-o", "name").stdout.strip() == "configmap/not-fathoms"
    bed.kubectl("delete", "configmap", "not-fathoms")
    p = run_fathom("cluster", "restore", "--conf", str(c.conf_path), "--keyring", str(c.keyring_path),
                   "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"removed {entry['what']}, which fathom made" in p.stdout, p.stdout
    assert _left(bed, tag) == ""
    with Store(db) as st:
        entries = [e for e in st.run(run.id).state["journal"]["entries"] if e["kind"] == K8S_KIND]
    assert entries and all(e["undone"] for e in entries)


@needs_bed
def test_a_sampler_pod_deleted_mid_point_flags_that_point_and_samples_again_from_its_replacement(bed_cluster,
                                                                                                   tmp_path):
    import re
    import threading

    bed, c, image = bed_cluster
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(conf=c.conf_path, keyring=c.keyring_path))
    servers_file = tmp_path / "servers.yaml"
    servers_file.write_text(json.dumps({"kubernetes": {"kubeconfig": str(bed.kubeconfig), "image": image}}))
    db = tmp_path / "k.db"
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), "--server-hosts-file", str(servers_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    second = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith("[2/3] "):
                second.set()
        second.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert second.wait(300) and proc.poll() is None, "".join(lines)
        time.sleep(3)  # into point b's measured phase
        t_cut = time.time()
        bed.kubectl("delete", "pod", "-l", "app.kubernetes.io/name=fathom-sampler", "--wait=false")
        assert proc.wait(300) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    out = "".join(lines)
    assert re.search(r"server host \S+ lost \d+\.\d s into the point", out), out
    assert re.search(rf"node {bed.node} sampled again from pod \S+", out), out
    with Store(db) as st:
        run = st.run("latest")
        pts = {p["workload"]: p for p in st.points(run.id)}
        assert [pts[w]["status"] for w in "abc"] == ["done"] * 3
        lost = [e for e in st.events(run.id) if e["kind"] == "server_lost"]
        assert [e["point_id"] for e in lost] == [pts["b"]["id"]] and lost[0]["data"]["partial"], lost
        # lost at its last sample: within a sampling interval (1 s) before the delete
        assert lost[0]["data"]["lost_at"] >= t_cut - 2 and "osd.0" in lost[0]["data"]["daemons"], lost
        assert [pts[w]["metrics"]["server_hosts_lost"] for w in "abc"] == [0, 1, 0]
        per = {w: pts[w]["result"]["extra"]["server_hosts"] for w in "abc"}
        # NICs: not seen from the pod's own network namespace, so no figure at all (never a 0 that was not read)
        assert not any(k.startswith("net_") for w in "abc" for k in per[w][bed.node]), per
        assert all(v is None for w in "abc" for k, v in pts[w]["metrics"].items() if k.startswith("net_")), \
            {k: v for k, v in pts["a"]["metrics"].items() if k.startswith("net_")}
        assert per["b"][bed.node]["coverage"] == "partial" and per["c"][bed.node]["coverage"] == "whole"
        assert per["a"][bed.node]["osd_cpu"] > 0 and per["c"][bed.node]["osd_cpu"] > 0
    p = run_fathom("report", "latest", "--db", str(db), "-o", str(tmp_path / "r.md"), timeout=120)
    n = re.search(r"(\d+) points flagged", p.stdout)
    assert p.returncode == 0 and n and int(n.group(1)) >= 1, p.stdout + p.stderr
    left = bed.kubectl("get", "daemonsets,pods", "-A", "-l", "app.kubernetes.io/managed-by=fathom", "-o", "name")
    assert left.stdout.strip() == ""
