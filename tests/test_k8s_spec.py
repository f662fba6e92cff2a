"""The pure logic of pods as client hosts: the `clients.kubernetes` section and its options, the names and labels
of what fathom makes, Ceph access (mon addresses, Rook's endpoints, the key kept out of every repr), the
access read from a real conf and keyring with Ceph's own tools, and the errors said before any API answers (a
missing kubeconfig) or of what it answered (a refusal)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import subprocess

import pytest
from conftest import SRC, run_fathom
from kubernetes_asyncio.client.exceptions import ApiException

from fathom.cli.clientargs import add_client_args
from fathom.errors import UsageError
from fathom.hosts.clients import ClientChoice, ClientsSpec, clients_from_args
from fathom.hosts.k8s import access, objects
from fathom.hosts.k8s.api import Api, K8sError


def test_the_pods_are_the_hosts_unless_hosts_are_named_and_survive_a_round_trip():
    cs = ClientsSpec.model_validate({"kubernetes": {"pods": 3, "engines_per_pod": 2}})
    assert [h.name for h in cs.hosts] == ["pod-0", "pod-1", "pod-2"]
    assert cs.ssh == [] and len(cs.remote) == 3 and not cs.only_local
    assert sum(h.instances for h in cs.hosts) == 6
    again = ClientsSpec.model_validate(cs.model_dump())
    assert again == cs  # a dumped spec (as a resumed run stores it) validates to the same hosts
    both = ClientsSpec.model_validate({"hosts": ["local", "root@10.0.0.2"], "kubernetes": {"pods": 1}})
    assert [h.name for h in both.hosts] == ["local", "10.0.0.2", "pod-0"] and [h.name for h in both.ssh] == ["10.0.0.2"]
    d = cs.describe()
    assert d["engines"] == 6 and d["kubernetes"]["pods"] == 3 and d["hosts"][0] == {"name": "pod-0", "pod": 0,
                                                                                    "instances": 2}


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_client_args(p)
    return p.parse_args(list(argv))


def test_k8s_options_override_the_suites_section_and_replace_its_ssh_hosts():
    suite = ClientsSpec.model_validate({"hosts": ["root@10.0.0.2"], "kubernetes": None})
    a = _args("--k8s-pods", "2", "--k8s-namespace", "bench", "--k8s-node-selector", "role=client",
              "--k8s-requests", "cpu=1,memory=512Mi", "--rook-namespace", "rook-ceph", "--k8s-spread", "one-per-node")
    cs = ClientChoice.of(a).over(suite)
    assert cs is not None and [h.name for h in cs.hosts] == ["pod-0", "pod-1"]
    k = cs.kubernetes
    assert k is not None and (k.namespace, k.spread, k.rook and k.rook.namespace) == ("bench", "one-per-node",
                                                                                     "rook-ceph")
    assert k.node_selector == {"role": "client"} and k.requests == {"cpu": "1", "memory": "512Mi"}
    over = ClientChoice.of(_args("--k8s-pods", "5")).over(cs)
    assert over is not None and over.kubernetes is not None and over.kubernetes.namespace == "bench"
    assert len(over.hosts) == 5
    assert ClientChoice.of(_args()).over(None) is None  # nothing named: one engine on this host
    with pytest.raises(UsageError, match="--k8s-node-selector: 'role' is not KEY=VALUE"):
        ClientChoice.of(_args("--k8s-node-selector", "role"))
    with pytest.raises(UsageError, match="pods"):
        clients_from_args(None, None, None, kube={"pods": 0})


def test_names_and_labels_are_dns_labels_of_the_run():
    n = objects.Names("12-ab3f9c-a1", 3)
    assert (n.owner, n.secret, n.pod(2)) == ("fathom-12-ab3f9c-a1", "fathom-12-ab3f9c-a1-ceph", "fathom-12-ab3f9c-a1-2")
    assert n.selector == "fathom.io/run=12-ab3f9c-a1"
    assert objects.dns("Bench_RUN.7") == "bench-run-7" and objects.dns("--") == "run"
    assert len(objects.dns("x" * 100)) == 40
    assert objects.labels("r")["app.kubernetes.io/managed-by"] == "fathom"


def test_mon_addresses_one_per_mon_and_rooks_endpoints():
    assert access.mon_addrs("[v2:10.0.0.1:3300,v1:10.0.0.1:6789],[v2:10.0.0.2:3300/0,v1:10.0.0.2:6789/0]") == [
        ("10.0.0.1", 3300), ("10.0.0.2", 3300)]
    assert access.mon_addrs("10.0.0.1:6789, 10.0.0.2") == [("10.0.0.1", 6789), ("10.0.0.2", 3300)]
    assert access.rook_mon_host("a=10.0.0.1:6789,b-2=10.0.0.2:6789,c_x=10.0.0.3:3300") == \
        "10.0.0.1:6789,10.0.0.2:6789,10.0.0.3:3300"
    assert access.rook_mon_host("") == ""


def test_the_key_is_in_the_secret_and_in_no_repr_or_record():
    a = access.CephAccess(name="client.admin", fsid="f", mon_host="10.0.0.1:6789", source="conf /x", key="SEKRIT==")
    assert "SEKRIT" not in repr(a) and "SEKRIT" not in str(a.describe()) and "SEKRIT" not in str(a.connection())
    data = {k: base64.b64decode(v).decode() for k, v in a.secret_data().items()}
    assert data["keyring"] == "[client.admin]\n\tkey = SEKRIT==\n"
    assert "mon_host = 10.0.0.1:6789" in data["ceph.conf"] and "fsid = f" in data["ceph.conf"]
    assert a.connection() == {"conf": "/etc/fathom-ceph/ceph.conf", "keyring": "/etc/fathom-ceph/keyring",
                              "name": "client.admin"}


@pytest.mark.skipif(shutil.which("ceph-authtool") is None, reason="needs ceph-authtool (ceph-common)")
def test_access_from_a_conf_and_keyring_with_cephs_own_tools(tmp_path):
    kr = tmp_path / "keyring"
    subprocess.run(["ceph-authtool", "--create-keyring", str(kr), "--gen-key", "-n", "client.bench"], check=True,
                   capture_output=True)
    key = subprocess.run(["ceph-authtool", str(kr), "-n", "client.bench", "-p"], check=True, capture_output=True,
                         text=True).stdout.strip()
    conf = tmp_path / "ceph.conf"
    conf.write_text(f"[global]\nfsid = 1234\nmon host = [v2:10.1.0.1:3300,v1:10.1.0.1:6789]\n"
                    f"[client.bench]\nkeyring = {kr}\n")
    a = access.from_conn(str(conf), "client.bench", None)  # the keyring the conf names for the entity
    assert (a.name, a.fsid, a.key) == ("client.bench", "1234", key)
    assert access.mon_addrs(a.mon_host) == [("10.1.0.1", 3300)]
    with pytest.raises(access.AccessError, match="client.other"):
        access.from_conn(str(conf), "client.other", str(kr))


def test_show_has_a_row_per_pod_as_per_ssh_host(tmp_path, capsys):
    """`fathom show` of a run on pods (and an SSH host) lists each point's client hosts, as `--json` and the report
    have them: a stored run is built here, nothing is started."""
    from fathom.cli.main import main
    from fathom.results.store import Store

    db = tmp_path / "pods.db"
    clients = ClientsSpec.model_validate({"hosts": ["root@10.0.0.2"], "kubernetes": {"pods": 2}})
    hosts = [{"host": h, "engines": 1, "ops": 4000 * (i + 1), "iops": 1000.0 * (i + 1), "mib_s": 3.9 * (i + 1),
              "p99_ms": 2.5, "client_cpu_pct": 40.0 + i, "lost": h == "pod-1", "slow": False}
             for i, h in enumerate(["10.0.0.2", "pod-0", "pod-1"])]
    extra = {"hosts": hosts, "engines": [], "clocks": {"pod-0": {"offset_ms": 0.25, "rtt_ms": 0.5}},
             "clients_lost": {"pod-1": "the pod was deleted"}}
    with Store(db) as st:
        run = st.create_run("on-pods", suite="s")
        st.merge_env(run, clients=clients.describe())
        st.record_point(run, 0, "rr", "rr", "fathom-engine", {"rw": "randread", "iodepth": 4, "numjobs": 1}, "done",
                        metrics={"iops": 6000.0}, result={"extra": extra})
    assert main(["show", "on-pods", "--db", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.split()[:3] == ["#", "client", "host"])
    rows = [line.split() for line in out[at + 1:at + 4]]
    assert [r[:4] for r in rows] == [["1", "10.0.0.2", "ssh", "1"], ["1", "pod-0", "pod", "1"],
                                     ["1", "pod-1", "pod", "1"]]
    assert rows[1][4:] == ["2000", "7.8", "2.500", "41.0", "+0.250", "±", "0.250", "ok"] and rows[2][-1] == "lost"


def test_a_missing_kubeconfig_is_named_with_its_path_and_the_fix(tmp_path, monkeypatch):
    """The Kubernetes client skips a kubeconfig that is not there and then says `Invalid kube-config file.
    Expected key current-context`: fathom says which file does not exist, who named it, and how to name one."""
    missing = tmp_path / "no.kubeconfig"
    with pytest.raises(K8sError) as given:
        asyncio.run(Api.open(str(missing), None))
    with pytest.raises(K8sError) as env:
        monkeypatch.setenv("KUBECONFIG", f"{missing}:{tmp_path / 'nor.this'}")
        asyncio.run(Api.open(None, None))
    with pytest.raises(K8sError) as default:
        monkeypatch.delenv("KUBECONFIG")
        monkeypatch.setenv("HOME", str(tmp_path))
        asyncio.run(Api.open(None, None))
    for exc, path, who in ((given, missing, "--kubeconfig"), (env, missing, "which KUBECONFIG names"),
                           (default, tmp_path / ".kube" / "config", "KUBECONFIG is not set")):
        text = str(exc.value)
        assert f"{path} does not exist" in text or f"{path}, " in text, text
        assert who in text and "current-context" not in text, text
        assert "hint: give an existing kubeconfig with --kubeconfig" in text and "set KUBECONFIG" in text, text


def test_a_run_on_pods_with_a_missing_kubeconfig_says_so_before_anything_is_made(tmp_path, engine_ready):
    """`fathom run --k8s-pods N --kubeconfig PATH` with no file at PATH: named as the run's checks find it, before a
    cluster or a results store is made (a suite on the null interface: no cluster, no Kubernetes reached)."""
    suite, db, missing = tmp_path / "null.yaml", tmp_path / "r.db", tmp_path / "no.kubeconfig"
    suite.write_text('name: n\ndefaults: {engine: fathom-engine, interface: "null", runtime: 1s}\n'
                     'workloads: [{name: n, rw: randread}]\n')
    p = run_fathom("run", str(suite), "--db", str(db), "--k8s-pods", "1", "--kubeconfig", str(missing), env=SRC,
                   timeout=120)
    assert p.returncode == 4, p.stdout + p.stderr
    assert f"no usable kubeconfig: {missing} does not exist" in p.stderr and "--kubeconfig" in p.stderr, p.stderr
    assert "current-context" not in p.stderr and not db.exists()


def _refusal(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="Forbidden" if status == 403 else "Not Found")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return exc


def test_a_forbidden_call_says_the_namespace_may_be_missing_and_how_to_check():
    """To a user bound only to a Role in a namespace, the API answers a namespace that is not there with 403: the
    error names the namespace and `kubectl get namespace NS` besides the RBAC, for the run's pods (objects.Call)
    and for a single object fathom makes (the sampler's DaemonSet, journaled.create) alike."""
    forbidden = _refusal(403, 'pods is forbidden: User "bench" cannot create resource "pods" in API group "" in '
                              'the namespace "nowhere"')
    pods = str(objects.Call("https://k8s:6443", "nowhere").error("create pod fathom-r-0", forbidden))
    assert pods.startswith("forbidden to create pod fathom-r-0: pods is forbidden"), pods
    assert "namespace nowhere may also not exist" in pods and "`kubectl get namespace nowhere`" in pods, pods
    assert "pods/exec (create, get)" in pods and "kubernetes.namespace (--k8s-namespace)" in pods, pods
    ds = str(objects.api_error("make DaemonSet nowhere/fathom-sampler-r", forbidden, "nowhere",
                               "daemonsets (apps: get, create, delete)", "the servers file's kubernetes.namespace"))
    assert "namespace nowhere may also not exist" in ds and "`kubectl get namespace nowhere`" in ds, ds
    assert "daemonsets (apps: get, create, delete)" in ds and "the servers file's kubernetes.namespace" in ds, ds
    # where the API can say so (a user allowed to read namespaces), a missing namespace is named as such
    gone = str(objects.Call("", "nowhere").error("create pod p", _refusal(404, 'namespaces "nowhere" not found')))
    assert gone.startswith("namespace nowhere does not exist") and "kubectl create namespace nowhere" in gone, gone
