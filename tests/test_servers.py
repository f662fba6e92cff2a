"""Server hosts over SSH (fathom.servers): a cluster whose daemons run on network-namespace hosts, each with
its own address, hostname and sshd, attached through its conf as a user's cluster is. fathom-sampler is
uploaded to each host, daemons are attributed by the cluster's metadata, and one host's SSH session is
killed mid-point. The pure attribution rules are tested on metadata shaped as Ceph's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FATHOM, export_table, kill_after_first_point, perf_rows, run_fathom

from fathom.hosts import netns
from fathom import servers
from fathom.results import usage
from fathom.servers import telemetry
from fathom.servers import inventory
from fathom.cluster.local import LocalCluster
from fathom.hosts.ssh import HostError
from fathom.errors import UsageError
from fathom.results.store import Store

# ---- pure: attribution by metadata ----------------------------------------------------------------


def _placed() -> dict[str, list[inventory.ClusterDaemon]]:
    raw = {"osd": [{"id": 0, "hostname": "hosta", "front_addr": "[v2:10.0.0.1:6800/701,v1:10.0.0.1:6801/701]"},
                   {"id": 1, "hostname": "hostb", "front_addr": "[v2:10.0.0.2:6800/802,v1:10.0.0.2:6801/802]"}],
           "mon": [{"name": "a", "hostname": "hosta", "addrs": "[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]"}]}
    return inventory.placement(raw)


def _proc(daemon: str, pid: int, kind: str = "osd") -> dict:
    return {"daemon": daemon, "pid": pid, "kind": kind, "name": f"ceph-{kind}"}


def test_attribution_follows_the_metadata_not_proc():
    placed = _placed()
    assert servers.match_host(placed, "hostb.example.com", "192.0.2.9") == "hostb"  # by short hostname
    assert servers.match_host(placed, "other", "10.0.0.2") == "hostb"  # by the address SSH reached
    assert servers.match_host(placed, "other", "192.0.2.9") is None
    # hostb's /proc shows osd.0 (another cluster's, or a shared pid namespace) and two osd.1 processes
    procs = [_proc("osd.0", 701), _proc("osd.1", 802), _proc("osd.1", 999), _proc("ganesha.5", 5, "ganesha")]
    a = servers.attribute(procs, "hostb", placed)
    assert a.found == {"osd.1": [802]}  # the pid the addresses carry settles osd.1
    assert a.keep == {802}
    # osd.1's namesake is not it: listed, not counted; nor is a ganesha nothing ties to the cluster
    assert a.foreign == {"osd.0": [701], "osd.1": [999], "ganesha.5": [5]}
    assert a.missing == [] and a.ambiguous == []
    # hosta: osd.0 there by name only (a random nonce, as in containers), mon.a not running
    a = servers.attribute([_proc("osd.0", 42)], "hosta", placed)
    assert a.found == {"osd.0": [42]} and a.missing == ["mon.a"]
    a = servers.attribute([_proc("osd.0", 42), _proc("osd.0", 43)], "hosta", placed)
    assert a.ambiguous == ["osd.0"] and a.keep == {42, 43}
    # RGW as the service map names it (client.rgw.ID) and as a cephadm unit does (rgw.ID)
    placed_rgw = inventory.placement({"service": {"services": {"rgw": {"daemons": {"4123": {
        "metadata": {"id": "s3.hostb.xyz", "hostname": "hostb", "pid": "77"}, "addr": "10.0.0.2:0/77"}}}}}})
    a = servers.attribute([_proc("rgw.s3.hostb.xyz", 77, "rgw")], "hostb", placed_rgw)
    assert a.found == {"rgw.s3.hostb.xyz": [77]} and a.missing == [] and a.foreign == {}
    # a host of no metadata: no Ceph daemon counts there
    a = servers.attribute([_proc("osd.1", 802)], None, placed)
    assert a.keep == set() and a.foreign == {"osd.1": [802]}


def test_gateways_and_clients_count_only_when_tied_to_this_run_or_cluster():
    """nfs-ganesha, ceph-fuse and rbd-fuse are placed by no metadata: on a server host one counts only by a pid
    fathom started, or the cluster's fsid (its cephadm unit, as the sampler reads it); another NFS server there
    is listed as foreign, as another cluster's mon is, never counted as the cluster's."""
    from fathom.servers.attribution import Ours

    placed = _placed()
    ours = Ours(fsid="9f1c-ours", pids=frozenset({8}))
    procs = [_proc("ganesha.5", 5, "ganesha"),  # another NFS server on the host
             {**_proc("nfs.a.0.0.hostb.xyz", 6, "ganesha"), "fsid": "9f1c-ours"},  # the cluster's (cephadm)
             {**_proc("client.admin", 7, "fuse"), "fsid": "0000-theirs"},  # another cluster's client
             {**_proc("client.admin", 9, "fuse"), "conf": "/etc/ceph/ceph.conf"},  # a conf path says nothing here
             _proc("client.admin", 8, "rbd_fuse")]  # one fathom started
    a = servers.attribute(procs, "hostb", placed, ours)
    assert a.found == {"nfs.a.0.0.hostb.xyz": [6], "client.admin": [8]} and a.keep == {6, 8}
    assert a.foreign == {"ganesha.5": [5], "client.admin": [7, 9]}
    assert servers.attribute(procs, "hostb", placed).keep == set()  # nothing ties any of them: none counts


def test_this_hosts_gateways_count_by_the_runs_conf_or_fsid(tmp_path, monkeypatch):
    """On fathom's own host a gateway or client counts when its command line names the run's conf (or its
    cephadm unit the cluster's fsid, or fathom started it); others are recorded as not counted."""
    from fathom.cluster.attach import cephadm_fsid, conf_arg
    from fathom.cluster.local import Daemon

    assert conf_arg(["-c", "/a.conf", "/mnt"]) == "/a.conf" and conf_arg(["--conf=/b.conf"]) == "/b.conf"
    assert conf_arg(["--conf", "/a.conf", "-c", "/b.conf"]) == "/b.conf" and conf_arg(["--", "-c", "/a"]) is None
    assert cephadm_fsid("0::/system.slice/ceph-9f1c@nfs.a.0.0.h.xyz.service/libpod-payload\n") == "9f1c"
    assert cephadm_fsid("0::/user.slice/session-3.scope\n") is None
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\n")
    cov = servers.Coverage(_placed(), ours=servers.Ours(fsid="9f1c", confs=frozenset({str(conf)}),
                                                        pids=frozenset({44})))
    monkeypatch.setattr(inventory, "this_host", lambda: inventory.ThisHost("hostc", frozenset({"127.0.0.1"})))
    here = [Daemon("client.admin", "fuse", 41, conf=str(conf)),  # mounts this cluster's CephFS
            Daemon("client.admin", "fuse", 42, conf="/etc/ceph/other.conf"),  # another cluster's
            Daemon("ganesha.43", "ganesha", 43),  # another NFS server
            Daemon("ganesha.44", "ganesha", 44),  # one fathom started
            Daemon("nfs.a.0.0.hostc.xyz", "ganesha", 45, fsid="9f1c")]  # the cluster's, by cephadm
    assert [(d.name, d.pid) for d in cov.local(here)] == [("client.admin", 41), ("ganesha.44", 44),
                                                          ("nfs.a.0.0.hostc.xyz", 45)]
    cov.pick_here(here)
    assert cov.env["here"]["not_counted"] == {"client.admin": [42], "ganesha.43": [43]}
    assert cov.env["here"]["daemons"] == {"client.admin": 41, "ganesha.44": 44, "nfs.a.0.0.hostc.xyz": 45}
    cov.gateways_here = False  # another source samples this host: its gateways are that source's
    assert cov.local(here) == []


def test_a_foreign_process_counted_on_its_own_host_is_not_listed_as_not_counted():
    # hosta's /proc shows osd.1 (pid 802) and mon.b (pid 903): hostb counted pid 802 started at 12.5 s after a
    # boot a second apart (btime read twice), so it is osd.1 itself through a shared PID namespace; nobody
    # counted a mon.b started then
    mine = (1_700_000_000, {802: 12.5, 903: 40.25})
    others = [(1_700_000_001, {802: 12.5}), (1_700_000_000, {903: 41.0})]
    assert servers.not_counted({"osd.1": [802], "mon.b": [903]}, mine, others) == {"mon.b": [903]}
    # another kernel (boot time), or the same pid started at another time (a reused pid), is another process
    assert servers.not_counted({"osd.1": [802]}, mine, [(1_600_000_000, {802: 12.5})]) == {"osd.1": [802]}
    assert servers.not_counted({"osd.1": [802]}, mine, [(1_700_000_000, {802: 13.0})]) == {"osd.1": [802]}
    boot, starts = servers.this_host_identities([os.getpid()])
    assert boot > 1_000_000_000 and 0 < starts[os.getpid()] < time.time() - boot


def test_this_host_is_never_a_server_host_over_ssh():
    placed = _placed()
    here = inventory.ThisHost("hosta", frozenset({"127.0.0.1", "::1", "10.0.0.1"}))
    spec = servers.ServersSpec(hosts=[servers.ClientHost(host="10.0.0.1"), servers.ClientHost(host="localhost"),
                                      servers.ClientHost(host="10.0.0.9")], discover=True, user="root")
    said: list[str] = []
    remote, local = servers._remote(spec, placed, here, ["hosta"], said.append)
    assert [h.host for h in remote] == ["10.0.0.9", "10.0.0.2"]  # hostb discovered; hosta is this host
    assert local == ["10.0.0.1", "localhost", "hosta"] and "not over SSH" in said[0]
    # every host of the metadata is this one: nothing over SSH
    assert servers._remote(servers.ServersSpec(discover=True), {"hosta": placed["hosta"]}, here, ["hosta"],
                           None) == ([], ["hosta"])
def test_a_lost_hosts_figures_are_marked_partial_or_missing():
    """Per-host figures over a window of 10 s: a host lost 4 s in covers 4 of 10 s; one lost before it has none
    in the window (its earlier samples are not taken for the window's, as a host with none would be)."""
    def rec(host: str, ts: float) -> dict:
        return {"ts": ts, "dt": 1.0, "host": host, "via": "ssh", "kind": "osd", "source": "osd.1", "pid": 7,
                "cpu_pct": 50.0, "rss_mib": 100.0}

    t0 = 1000.0
    whole = [rec("a", t0 + i) for i in range(1, 11)]
    partial = [rec("b", t0 + i) for i in range(1, 5)]
    gone = [rec("c", t0 - 5 + i) for i in range(1, 4)]  # samples only before the window
    out = usage.per_host(whole + partial + gone, t0, t0 + 10, {"b": "connection lost", "c": "connection lost"})
    assert out["a"]["coverage"] == "whole" and out["a"]["osd_cpu"] == 50.0
    assert out["b"] == {**out["b"], "coverage": "partial", "covered_s": 4.0, "window_s": 10.0, "osd_cpu": 50.0}
    assert out["c"] == {"via": "ssh", "coverage": "missing", "covered_s": 0.0, "window_s": 10.0,
                        "lost": "connection lost"}


class _FakeShell:
    """A server host's shell as ServerHost.look and the removal command use it: files by path, directories."""

    def __init__(self, spec: servers.ClientHost, dirs: set[str]):
        self.spec, self.files, self.dirs = spec, {}, dirs

    async def connect(self) -> None:
        return None

    async def run(self, cmd: str) -> tuple[int, str, str]:
        import shlex

        out = []
        for part in cmd.split("; "):
            words = shlex.split(part.replace("2>/dev/null", ""))
            if words[:1] == ["sha256sum"] and words[1] in self.files:
                out.append(f"{self.files[words[1]]}  {words[1]}")
            elif words[:2] == ["rm", "-f"]:
                self.files.pop(words[2], None)
            elif words[:1] == ["for"]:
                out += [f"missing {d}" for d in words[3:] if d not in self.dirs]
        return 0, "\n".join(out) + "\n", ""


def test_runs_on_a_shared_host_never_remove_each_others_sampler():
    """Two runs sample one host: each uploads to a directory of its own (its data tag), journals that path, and
    removes only it; run A's end (or restore) left run B's sampler alone. A kept sampler is the shared one."""
    import asyncio

    from fathom.cluster.journal import SAMPLER_KIND, Journal
    from fathom.servers.host import remove_command

    host = servers.ClientHost(host="10.0.0.5", user="root", engine_dir="/var/tmp/fathom")
    spec = servers.ServersSpec(hosts=[host])
    sha = "ab" * 32
    fs = _FakeShell(host, {"/var", "/var/tmp", "/var/tmp/fathom", f"/var/tmp/fathom/{sha[:16]}"})
    journals = {}
    for run in ("fathom-1-aaaaaa", "fathom-2-bbbbbb"):  # B looks after A uploaded
        srv = servers.Servers(spec, {}, journal=Journal(fsid="f"), run=run)
        h = srv.hosts[0]
        h.ssh = fs  # type: ignore[assignment]
        asyncio.run(h.look(sha))
        srv._own(srv.hosts)
        assert h.placed is not None and not h.had_file, run  # its own, not the other run's
        fs.files[h.path] = sha  # the upload
        journals[run] = srv.journal
    (a,), (b,) = (journals[r].pending(SAMPLER_KIND) for r in ("fathom-1-aaaaaa", "fathom-2-bbbbbb"))
    assert a.data["path"] == f"/var/tmp/fathom/{sha[:16]}/fathom-1-aaaaaa/fathom-sampler"
    assert b.data["path"] == f"/var/tmp/fathom/{sha[:16]}/fathom-2-bbbbbb/fathom-sampler"
    assert a.data["dirs"] == [f"/var/tmp/fathom/{sha[:16]}/fathom-1-aaaaaa"]
    asyncio.run(fs.run(remove_command(a.data["path"], a.data["dirs"])))  # run A's end
    assert b.data["path"] in fs.files and a.data["path"] not in fs.files
    # --keep-sampler: the shared path, never journalled as a run's
    kept = servers.Servers(spec.model_copy(update={"keep_sampler": True}), {}, journal=Journal(fsid="f"),
                           run="fathom-3-cccccc")
    kept.hosts[0].ssh = fs  # type: ignore[assignment]
    asyncio.run(kept.hosts[0].look(sha))
    kept._own(kept.hosts)
    assert kept.hosts[0].path == f"/var/tmp/fathom/{sha[:16]}/fathom-sampler" and not kept.journal.entries


def test_server_host_options(tmp_path):
    k = tmp_path / "k"
    k.write_text("")  # the options check that it exists; its content is read when connecting
    spec = servers.servers_from_args(["root@10.0.0.1", "cluster", "ceph@[fd00::2]:2222"], key_file=str(k),
                                     accept_new=True)
    assert spec is not None and spec.discover and spec.accept_new_host_keys
    assert [(h.host, h.user, h.port, h.key_file) for h in spec.hosts] == [("10.0.0.1", "root", 22, str(k)),
                                                                          ("fd00::2", "ceph", 2222, str(k))]
    assert servers.servers_from_args(None) is None
    keep = servers.servers_from_args(["root@10.0.0.1"], keep_sampler=True)
    assert keep is not None and keep.keep_sampler and not spec.keep_sampler
    with pytest.raises(UsageError, match="server host"):
        servers.servers_from_args(["a b@c"])
    # a servers file: the mapping, a list, or one host per line
    f = tmp_path / "servers.yaml"
    f.write_text("hosts: [root@10.0.0.9, cluster]\nuser: ceph\naddresses: {hostb: 192.0.2.7}\ninterval_s: 2\n")
    spec = servers.servers_from_args(["root@10.0.0.1"], base=servers.servers_file(str(f)))
    assert spec is not None and spec.discover and spec.interval_s == 2 and spec.addresses == {"hostb": "192.0.2.7"}
    assert [h.host for h in spec.hosts] == ["10.0.0.1"]  # the command line's hosts replace the file's
    f.write_text("# cluster hosts\nroot@10.0.0.9\nroot@10.0.0.10:2222\n")
    assert [(h.host, h.port) for h in servers.servers_file(str(f)).hosts] == [("10.0.0.9", 22), ("10.0.0.10", 2222)]
    f.write_text("hosts: [root@10.0.0.9]\ninterval_s: 0\n")
    with pytest.raises(UsageError, match="interval_s"):
        servers.servers_file(str(f))
    # a key file that is not there: named with its path and the fix, before any host is connected
    missing = tmp_path / "no_such_key"
    with pytest.raises(UsageError, match=f"--server-key: the key file {missing} does not exist") as exc:
        servers.servers_from_args(["root@10.0.0.1"], key_file=str(missing))
    assert "existing private key" in (exc.value.hint or "")
    f.write_text(f"hosts: [{{host: 10.0.0.9, key_file: {missing}}}]\n")
    with pytest.raises(UsageError, match=f"servers.yaml: 10.0.0.9: the key file {missing} does not exist"):
        servers.servers_file(str(f))
    f.write_text(f"hosts: [cluster]\nkey_file: {missing}\n")
    with pytest.raises(UsageError, match=f"servers.yaml: key_file: the key file {missing} does not exist"):
        servers.servers_file(str(f))
    # a spec made otherwise (no option checked it): the host is not connected to (192.0.2.1 answers nobody)
    spec = servers.ServersSpec(hosts=[servers.ClientHost(host="192.0.2.1", user="root", key_file=str(missing))],
                               connect_timeout_s=2)
    with pytest.raises(HostError, match=f"server host 192.0.2.1: the key file {missing} does not exist") as exc:
        servers.Servers.open(spec, {})
    assert "--server-key FILE" in (exc.value.hint or "") and "unreachable" not in str(exc.value)
    conf = tmp_path / "ceph.conf"
    conf.write_text("")
    p = subprocess.run([FATHOM, "run", "osd-classic", "--conf", str(conf), "--db", str(tmp_path / "r.db"),
                        "--server-host", "root@192.0.2.1", "--server-key", str(missing)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and f"--server-key: the key file {missing} does not exist" in p.stderr, p.stderr
    # discovery: each metadata host at its daemons' first address, or where the spec says
    spec = servers.ServersSpec(discover=True, user="root", addresses={"hostb": "192.0.2.7"})
    found = {h.host for h in servers.discovered(spec, _placed())}
    assert found == {"10.0.0.1", "192.0.2.7"}


# ---- real: a cluster over two namespace hosts ------------------------------------------------------

needs_bed = pytest.mark.skipif(netns.available() is not None, reason=f"server hosts: {netns.available()}")

SUITE = """\
name: servers
cluster: {{kind: attached, conf: {conf}, keyring: {keyring}}}
prep: {{pools: [{{name: srv, application: rados, pg_num: 16, size: 1}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: srv, bs: 4k, iodepth: 16, runtime: 9s}}
workloads: [{{name: a, rw: write}}, {{name: b, rw: write}}]
"""


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    """mon.a and mgr.x on this host (at the bridge address), osd.0 on namespace host 0, osd.1 on host 1."""
    with netns.Testbed(hosts=2) as tb:
        c = LocalCluster(tmp_path_factory.mktemp("servers") / "cluster", progress=lambda m: print(m, file=sys.stderr))
        places = {f"osd.{i}": {"prefix": ["nsenter", "-t", str(h.pid), "-n", "-u", "--"], "addr": h.addr}
                  for i, h in enumerate(tb.hosts)}
        c.up(osds=2, osd_size=2 * 1024**3, objectstore="memstore", bind=tb.bridge_addr, places=places)
        try:
            yield tb, c
        finally:
            c.down()


@pytest.fixture(scope="module")
def other_cluster(tmp_path_factory):
    """A second, independent cluster on this host (127.0.0.1) with its own mon.a, mgr.x and osd.0."""
    c = LocalCluster(tmp_path_factory.mktemp("other") / "cluster", progress=lambda m: print(m, file=sys.stderr))
    c.up(osds=1, osd_size=1024**3, objectstore="memstore")
    try:
        yield c
    finally:
        c.down()


def _as_users(c: LocalCluster, tmp_path: Path, workloads: str = "[{name: a, rw: write}]") -> Path:
    """A suite attaching c through a copy of its conf, as a user's cluster: fathom does not know its daemons,
    so every Ceph process on this host (the other clusters' too) is a candidate for its daemons here."""
    conf = tmp_path / "ceph.conf"
    shutil.copy(c.conf_path, conf)
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(conf=conf, keyring=c.keyring_path).replace(
        "workloads: [{name: a, rw: write}, {name: b, rw: write}]", f"workloads: {workloads}"))
    return suite


def _sessions(listener: int) -> list[int]:
    """Every process under a testbed host's listening sshd: its SSH sessions and what they run."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    out, todo = [], [listener]
    while todo:
        cur = todo.pop()
        kids = [pid for pid, pp in parent.items() if pp == cur]
        out += kids
        todo += kids
    return out


def _nets(tb: netns.Testbed) -> set[str]:
    """The testbed hosts' network namespaces ('net:[INODE]'), which outlive the testbed while a process holds one."""
    return {os.readlink(f"/proc/{h.pid}/ns/net") for h in tb.hosts}


def _samplers(nets: set[str]) -> list[int]:
    """fathom-sampler processes alive in those namespaces (not zombies: a reparented one may wait for a reaper);
    another run's samplers on this machine, in namespaces of their own, are not this test's."""
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/comm").read_text().strip() == "fathom-sampler" and \
                    Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" and \
                    os.readlink(f"/proc/{d}/ns/net") in nets:
                out.append(int(d))
        except OSError:
            pass
    return out


def _window_means(samples: list[dict], name: str, t0: float, t1: float) -> float:
    xs = [s["cpu_pct"] for s in samples if s.get("source") == name and t0 + 0.5 <= s["ts"] - s["dt"] / 2 <= t1 - 0.5]
    assert len(xs) >= 5, (name, len(xs))
    return sum(xs) / len(xs)


SUITE4 = """\
name: servers-lost
cluster: {{kind: attached, conf: {conf}, keyring: {keyring}}}
prep: {{pools: [{{name: srv, application: rados, pg_num: 16, size: 1}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: srv, bs: 4k, iodepth: 16, runtime: 9s}}
workloads: [{{name: a, rw: write}}, {{name: b, rw: write}}, {{name: c, rw: write}}, {{name: d, rw: write}}]
"""


@needs_bed
@pytest.mark.cluster
def test_a_lost_server_host_is_flagged_until_it_answers_again(topology, tmp_path):
    """Host 1's sshd and its sessions are killed by pid 5 s into point b: b is flagged and host 1's figures
    there are partial; at point c it does not answer, so c is flagged and has none of host 1 (no 'not
    running' note for its osd.1); its sshd is back during c, so d has host 1 again, unflagged."""
    from fathom.analysis import anomalies
    from fathom.analysis.data import load_run

    tb, c = topology
    nets = _nets(tb)  # read while every host's sshd runs
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE4.format(conf=c.conf_path, keyring=c.keyring_path))
    hosts_file = tmp_path / "servers.yaml"  # the sampler in the testbed's directory, not root's ~/.cache
    hosts_file.write_text(json.dumps({"hosts": [{"host": h.addr, "user": "root", "engine_dir": f"{tb.dir}/srv"}
                                                for h in tb.hosts]}))
    db = tmp_path / "r.db"
    argv = [FATHOM, "run", str(suite), "--db", str(db), "--known-hosts", tb.known_hosts, "--server-key", tb.key_file,
            "--server-hosts-file", str(hosts_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    seen = threading.Condition()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            with seen:
                lines.append(line)
                seen.notify_all()
        proc.wait()
        with seen:  # the run ended: a wait for a line that never came ends too
            seen.notify_all()

    def wait_for(pattern: str) -> bool:
        with seen:
            return seen.wait_for(lambda: any(re.search(pattern, ln) for ln in lines) or proc.poll() is not None,
                                 timeout=300) and any(re.search(pattern, ln) for ln in lines)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    lost_addr = tb.hosts[1].addr
    down = False
    try:
        assert wait_for(r"^\[2/4\] "), "".join(lines)
        time.sleep(5)  # into point b's measured phase
        tb.stop_sshd(1)
        down, t_kill = True, time.time()
        # point c begins: fathom tries host 1 again, finds no sshd, and says so; then its sshd comes back
        assert wait_for(rf"server host {re.escape(lost_addr)}.*(does not answer|not reconnected)"), "".join(lines)
        assert wait_for(r"^\[3/4\] "), "".join(lines)
        tb.start_sshd(1)
        down = False
        assert proc.wait(400) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if down:
            tb.start_sshd(1)  # the module's other tests need host 1
    reader.join(10)
    out = "".join(lines)
    # the console said so when it happened
    assert re.search(rf"server host {re.escape(lost_addr)} lost \d+\.\d s into the point", out), out
    assert re.search(rf"server host {re.escape(lost_addr)}.*answers again", out), out
    h1 = tb.hosts[1].name
    with Store(db) as st:
        run = st.run("latest")
        pts = {p["workload"]: p for p in st.points(run.id)}
        assert [pts[w]["status"] for w in "abcd"] == ["done"] * 4
        ev = st.events(run.id)

        def of(w: str, kind: str) -> list[dict]:
            return [e for e in ev if e["kind"] == kind and e["point_id"] == pts[w]["id"]]

        lost_b, lost_c = of("b", "server_lost"), of("c", "server_lost")
        assert [e["data"]["host"] for e in lost_b] == [lost_addr] and lost_b[0]["data"]["partial"]
        assert 0 < lost_b[0]["data"]["into_point_s"] and lost_b[0]["data"]["lost_at"] <= t_kill + 1.0
        assert [e["data"]["host"] for e in lost_c] == [lost_addr] and not lost_c[0]["data"]["partial"]
        assert lost_c[0]["data"]["daemons"] == ["osd.1"] and "lack" in lost_c[0]["message"]
        assert not of("a", "server_lost") and not of("d", "server_lost")
        assert [pts[w]["metrics"]["server_hosts_lost"] for w in "abcd"] == [0, 1, 1, 0]
        # no note calls osd.1 'not running': its host was not sampled, which is another thing
        assert not [e["message"] for e in ev if "not running" in e["message"]]
        # host 1's figures: partial on b (covering part of the window), missing on c, whole again on d
        per = {w: pts[w]["result"]["extra"]["server_hosts"] for w in "abcd"}
        b1 = per["b"][h1]
        assert b1["coverage"] == "partial" and 0 < b1["covered_s"] < b1["window_s"] and b1["osd_cpu"] > 0
        assert per["c"][h1]["coverage"] == "missing" and "osd_cpu" not in per["c"][h1]
        assert per["d"][h1]["coverage"] == "whole" and per["d"][h1]["osd_cpu"] > 0
        assert per["a"][h1]["coverage"] == "whole"
        osd_d = [s for s in st.telemetry(pts["d"]["id"]) if s.get("via") == "ssh" and s["kind"] == "osd"]
        assert {s["source"] for s in osd_d} == {"osd.0", "osd.1"}
        # the flags: b and c, by the anomaly rules the reports use
        runs = load_run(st, "latest")
    flagged = {a.workload for a in anomalies.find_all(runs) if a.kind == "server_lost"}
    assert flagged == {"b", "c"}
    rep = tmp_path / "r.md"
    p = subprocess.run([FATHOM, "report", "latest", "--db", str(db), "-o", str(rep)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    n = int(re.search(r"(\d+) points flagged", p.stdout).group(1))  # type: ignore[union-attr]
    assert n >= 2, p.stdout
    text = rep.read_text()
    assert "server_lost" in text and "partial" in text and "missing" in text
    shown = run_fathom("show", "latest", "--db", str(db), check=True).stdout
    assert len(re.findall(r"done, 1 server host lost", shown)) == 2, shown
    assert not _samplers(nets)
    assert not (Path(tb.dir) / "srv").exists(), "the samplers fathom uploaded were left"


@needs_bed
def test_the_sampler_fathom_uploaded_is_removed_at_the_end(tmp_path):
    """The fathom-sampler fathom uploads to a server host goes at the end, with the directories made for it; one
    that was there before, or kept with keep_sampler, stays. The run's journal names it from before the upload
    until it is removed, so the next attempt of a killed run (--resume) removes it."""
    import shutil

    from fathom.cluster.journal import SAMPLER_KIND, Journal
    from fathom.hosts.ssh import sha256_file

    with netns.Testbed(hosts=1) as tb:
        h, nets = tb.hosts[0], _nets(tb)
        base = Path(tb.dir) / "srv"  # none of it exists yet: fathom makes srv/fathom/<hash>/
        spec = servers.ServersSpec(hosts=[servers.ClientHost(host=h.addr, user="root", key_file=tb.key_file,
                                                             engine_dir=f"{base}/fathom")],
                                   known_hosts=tb.known_hosts)
        shared = base / "fathom" / sha256_file(servers.sampler_path())[:16] / "fathom-sampler"
        path = shared.parent / "fathom-7-abc123" / "fathom-sampler"  # the run's own directory
        saved: list[tuple[dict, bool]] = []  # each journal record as persisted, and whether the file was there
        journal = Journal(persist=lambda rec: saved.append((json.loads(json.dumps(rec)), path.exists())), fsid="f")
        srv = servers.Servers.open(spec, {}, journal=journal, run="fathom-7-abc123")
        assert path.is_file()
        (e,) = journal.pending(SAMPLER_KIND)
        assert e.what == f"{h.addr}:{path}" and e.data["dirs"] == [str(base), f"{base}/fathom", str(shared.parent),
                                                                   str(path.parent)]
        assert e.data["key_file"] == tb.key_file and "PRIVATE" not in json.dumps(e.to_dict())
        assert saved[0][0]["entries"][0]["kind"] == SAMPLER_KIND and not saved[0][1]  # written before the upload
        srv.close()
        assert not path.exists() and not base.exists()  # the file, and the directories made for it
        assert not journal.pending(SAMPLER_KIND) and journal.entries[0].undone
        # kept on request: nothing journalled, the file stays, where every run that keeps one shares it
        kept = Journal(fsid="f")
        servers.Servers.open(spec.model_copy(update={"keep_sampler": True}), {}, journal=kept,
                             run="fathom-7-abc123").close()
        assert shared.is_file() and not kept.entries
        # a sampler that was there before fathom looked is not fathom's to remove
        path.parent.mkdir(parents=True)
        shutil.copy(servers.sampler_path(), path)
        before = Journal(fsid="f")
        servers.Servers.open(spec, {}, journal=before, run="fathom-7-abc123").close()
        assert path.is_file() and shared.is_file() and not before.entries
        # a killed run: its connection ends with no cleanup; the file and the journal's entry stay
        shutil.rmtree(base)
        saved.clear()
        killed = servers.Servers.open(spec, {}, journal=Journal(persist=lambda rec: saved.append((rec, True)),
                                                                fsid="f"), run="fathom-7-abc123")
        killed.hosts[0].ssh.close()
        assert path.is_file()
        # the next attempt reads the run's journal: the file is the run's, so it removes it at its end
        resumed = Journal.from_dict(saved[-1][0])
        assert [x.what for x in resumed.pending(SAMPLER_KIND)] == [f"{h.addr}:{path}"]
        servers.Servers.open(spec, {}, journal=resumed, run="fathom-7-abc123").close()
        assert not path.exists() and not base.exists() and not resumed.pending(SAMPLER_KIND)
    deadline = time.monotonic() + 30
    while _samplers(nets) and time.monotonic() < deadline:  # the killed run's ends at its next write
        time.sleep(0.2)
    assert not _samplers(nets)


@needs_bed
@pytest.mark.cluster
@pytest.mark.parametrize("undo", ["resume", "restore"])
def test_a_killed_runs_samplers_are_removed_by_its_resume(topology, tmp_path, undo):
    """A run killed (SIGKILL) mid-way leaves the samplers it uploaded, named in its journal; `--resume` adopts
    them as the run's and removes them at its end; `fathom cluster restore` removes them over SSH from what
    the journal names, and says so."""
    tb, c = topology
    nets = _nets(tb)
    suite = tmp_path / "suite.yaml"
    # 2 s points (SUITE4's are 9 s): what is asserted is the samplers' removal, which no point's length changes
    suite.write_text(SUITE4.format(conf=c.conf_path, keyring=c.keyring_path).replace("runtime: 9s", "runtime: 2s"))
    base = Path(tb.dir) / "srv-resume"
    hosts_file = tmp_path / "servers.yaml"
    hosts_file.write_text(json.dumps({"hosts": [{"host": h.addr, "user": "root", "engine_dir": str(base)}
                                                for h in tb.hosts]}))
    db = tmp_path / "r.db"
    opts = ["--db", str(db), "--known-hosts", tb.known_hosts, "--server-key", tb.key_file,
            "--server-hosts-file", str(hosts_file)]
    kill_after_first_point(["run", str(suite), *opts], db)
    placed = sorted(base.rglob("fathom-sampler"))
    assert len(placed) == 1  # both hosts' share this file system: one file
    with Store(db) as st:
        run = st.run("latest")
        pending = [e for e in run.state["journal"]["entries"] if e["kind"] == "sampler" and not e["undone"]]
    assert {e["what"] for e in pending} <= {f"{h.addr}:{placed[0]}" for h in tb.hosts} and pending
    if undo == "resume":
        p = run_fathom("run", "--resume", str(run.id), *opts, timeout=400)
    else:
        p = run_fathom("cluster", "restore", "--conf", str(c.conf_path), "--keyring", str(c.keyring_path),
                       "--db", str(db), timeout=300)
        assert f"removed the fathom-sampler fathom put at {pending[0]['what']}" in p.stdout, p.stdout
    assert p.returncode == 0, p.stdout + p.stderr
    assert not base.exists(), "the killed run's sampler was left"
    with Store(db) as st:
        entries = [e for e in st.run(run.id).state["journal"]["entries"] if e["kind"] == "sampler"]
    assert entries and all(e["undone"] for e in entries)
    deadline = time.monotonic() + 30
    while _samplers(nets) and time.monotonic() < deadline:  # the killed run's end at their next write
        time.sleep(0.2)
    assert not _samplers(nets)


@needs_bed
@pytest.mark.cluster
def test_daemons_sampled_on_their_hosts_over_ssh(topology, tmp_path):
    tb, c = topology
    # the metadata places each OSD on its namespace host (hostname and address)
    placed = inventory.placement(inventory.gather_raw(c.ceph())[0])
    assert {d.name for d in placed[tb.hosts[0].name]} == {"osd.0"}
    assert {d.name for d in placed[tb.hosts[1].name]} == {"osd.1"}
    osd_pids = {d.name: d.pid for d in c.daemons() if d.kind == "osd"}
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(conf=c.conf_path, keyring=c.keyring_path))
    db = tmp_path / "r.db"
    # this test's own /proc sampler of the same processes (one pid namespace), for the 10% agreement
    local = telemetry.Sampler([d for d in c.daemons() if d.kind == "osd"])
    local.start()
    argv = [FATHOM, "run", str(suite), "--db", str(db), "--known-hosts", tb.known_hosts, "--server-key", tb.key_file]
    for h in tb.hosts:
        argv += ["--server-host", f"root@{h.addr}"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed: list[float] = []

    def lose_host_1() -> None:  # once the first point is stored: 4 s on (into the second), host 1's SSH goes
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with Store(db) as st:
                    run = st.run("latest")
                    if run is not None and any(p["status"] == "done" for p in st.points(run.id)):
                        break
            except Exception:  # noqa: BLE001 (the store may not exist yet)
                pass
            time.sleep(0.5)
        # the second point measuring (its seconds stored as they come), then 3 s on: the loss falls inside it however
        # long the gate and the companions' starts took on a loaded machine (else the host has no sample in it)
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with Store(db, read_only=True) as st:
                    done = {p["key"] for p in st.points(st.run("latest").id)}
                    live = {k for (k,) in st.db.execute("SELECT key FROM live_seconds WHERE kind = 'second'")}
                if live - done:
                    break
            except Exception:  # noqa: BLE001 (the store being written)
                pass
            time.sleep(0.2)
        time.sleep(3)
        for pid in _sessions(tb.hosts[1].pid):  # the host is gone for fathom: its sessions and sampler end
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed.append(time.time())

    t = threading.Thread(target=lose_host_1, daemon=True)
    t.start()
    out, _ = proc.communicate(timeout=400)
    t.join(5)
    samples = local.stop()
    assert proc.returncode == 0, out
    assert killed, out
    with Store(db) as st:
        run = st.run("latest")
        env = run.env
        first, second = st.points(run.id)
        hosts = {h["hostname"]: h for h in env["servers"]["hosts"]}
        assert set(hosts) == {h.name for h in tb.hosts}
        assert all(h["metadata_host"] == name for name, h in hosts.items())
        assert all(abs(h["clock_offset_s"]) < 0.1 for h in hosts.values())  # one kernel: one clock
        # point 1: each OSD from its own host only, though both hosts' /proc show both
        tel = st.telemetry(first["id"])
        ssh = [s for s in tel if s.get("via") == "ssh" and s["kind"] == "osd"]
        assert {(s["host"], s["source"]) for s in ssh} == {(tb.hosts[0].name, "osd.0"), (tb.hosts[1].name, "osd.1")}
        assert all(s["pid"] == osd_pids[s["source"]] for s in ssh)
        win = first["result"]["extra"]["telemetry_window"]
        for name in ("osd.0", "osd.1"):
            remote = _window_means(ssh, name, win["from"], win["to"])
            mine = _window_means(samples, name, win["from"], win["to"])
            print(f"{name}: {remote:.1f}% of one core over SSH, {mine:.1f}% from this host's /proc")
            assert remote > 5.0, (name, remote)  # under load: a figure worth comparing
            assert abs(remote - mine) <= 0.10 * mine, (name, remote, mine)
        m = first["metrics"]
        # the namespace hosts, and this one: the metadata places mon.a and mgr.x here
        assert m["osd_cpu"] is not None and m["server_hosts"] == 3
        srcs = [e for e in st.events(run.id) if e["kind"] == "sources" and e["point_id"] == first["id"]]
        assert srcs and set(srcs[0]["data"]["hosts"]) == {h.name for h in tb.hosts}
        # point 2: host 1 lost mid-point, flagged; host 0 whole, host 1 up to the loss
        lost = [e for e in st.events(run.id) if e["kind"] == "server_lost" and e["point_id"] == second["id"]]
        assert lost and tb.hosts[1].addr in lost[0]["message"], [e["message"] for e in st.events(run.id)]
        assert second["status"] == "done"
        tel2 = [s for s in st.telemetry(second["id"]) if s.get("via") == "ssh" and s["kind"] == "osd"]
        last = {h: max(s["ts"] for s in tel2 if s["host"] == h) for h in {s["host"] for s in tel2}}
        assert last[tb.hosts[0].name] >= second["ended"] - 2.0
        assert last.get(tb.hosts[1].name, 0.0) <= killed[0] + 1.0
    # the report names each host's source and gives the per-host figures
    rep = tmp_path / "r.md"
    p = subprocess.run([FATHOM, "report", "latest", "--db", str(db), "-o", str(rep)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    text = rep.read_text()
    assert "Server measurements: sources" in text and "fathom-sampler over SSH" in text
    assert "server hosts" in text and all(h.name in text for h in tb.hosts)
    assert "s into the point (at " in text  # host 1's loss, in the sources section's notes
    assert "NIC bytes counted on each byte's interface at the top of its stack" in text
    assert all(f"{h.name}: {h.veth}p" in text for h in tb.hosts)  # each host's end of its link
    _check_host_exports(db, tmp_path, lost=tb.hosts[1].name,
                        placed={f"osd.{i}": h.name for i, h in enumerate(tb.hosts)})
    # no sampler is left on either host
    assert not _samplers(_nets(tb)), "a fathom-sampler was left running"
    assert json.dumps(env).find(Path(tb.key_file).read_text().strip()[:40]) < 0  # never the key itself


def _check_host_exports(db: Path, tmp_path: Path, lost: str, placed: dict[str, str]) -> None:
    """Each host's and daemon's figures and the perf counters: long tables in CSV, JSON and Parquet holding what
    the store holds (the per-host figures stored with each point; its perf counters), and `show`'s per-host rows."""
    srv = export_table(db, "servers", tmp_path)
    counters = export_table(db, "counters", tmp_path)
    show = subprocess.run([FATHOM, "show", "latest", "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    with Store(db) as st:
        run = st.run("latest")
        points = st.points(run.id)
        for pt in points:
            stored = pt["result"]["extra"]["server_hosts"]
            mine = [r for r in srv if r["idx"] == pt["idx"]]
            assert mine and {r["host"] for r in mine} == set(stored)
            assert all(r["unit"] and r["key"] == pt["key"] and r["workload"] == pt["workload"] for r in mine)
            for host, h in stored.items():
                rows = [r for r in mine if r["host"] == host]
                assert {r["source"] for r in rows} == {h["via"]}
                # a host lost in the point is marked partial on every row of it in that point, and only there
                assert {r["partial"] for r in rows} == {host == lost and pt["idx"] == 1}, (pt["idx"], host)
                by = {(r["daemon"], r["figure"]): r["value"] for r in rows}
                for k, v in h.items():
                    if k in ("host_cpu_pct", "net_rx_mib_s", "net_tx_mib_s"):
                        assert by[("", k)] == pytest.approx(v, rel=1e-9), (host, k)
                    elif k.endswith(("_cpu", "_mem_mib")):  # a kind's sum on the host: its daemons' rows add up
                        kind, figure = (k[:-4], "cpu_pct") if k.endswith("_cpu") else (k[:-8], "rss_mib")
                        parts = [r["value"] for r in rows if r["kind"] == kind and r["figure"] == figure]
                        assert parts and sum(parts) == pytest.approx(v, rel=1e-9), (host, k)
                line = next(ln for ln in show.stdout.splitlines()
                            if re.match(rf"\s+{pt['idx'] + 1}\s+{re.escape(host)}\b", ln))
                assert f"{h['host_cpu_pct']:.1f}" in line and ("(partial)" in line) == (host == lost and pt["idx"] == 1)
            # each OSD on the host the metadata places it on
            assert {(r["daemon"], r["host"]) for r in mine if r["kind"] == "osd"} == set(placed.items())
            assert {(r["daemon"], r["figure"]): r["value"] for r in counters if r["idx"] == pt["idx"]} == \
                perf_rows(st.perf_counters(pt["id"]))
    assert "per host, over each point's telemetry window" in show.stdout


@needs_bed
def test_crimson_threads_and_a_foreign_daemon_over_ssh(tmp_path):
    """One namespace host sampled over SSH (no cluster): a crimson-osd stand-in is recognised and its threads
    reported busiest first; with metadata placing osd.7 elsewhere it is not counted on this host."""
    from test_hostsample import SPIN, _start, _stop

    link = tmp_path / "crimson-osd"
    link.symlink_to(os.path.realpath(sys.executable))
    crimson = _start([str(link), "-c", SPIN, "-i", "7"], str(link))
    try:
        with netns.Testbed(hosts=1) as tb:
            h, nets = tb.hosts[0], _nets(tb)
            spec = servers.ServersSpec(hosts=[servers.ClientHost(host=h.addr, user="root", key_file=tb.key_file,
                                                                 engine_dir=f"{tb.dir}/srv")],
                                       known_hosts=tb.known_hosts)
            # named errors: nothing listens at the address; a host key not in known_hosts
            gone = servers.ServersSpec(hosts=[servers.ClientHost(host=f"{tb.prefix}.99", user="root",
                                                                 key_file=tb.key_file)],
                                       known_hosts=tb.known_hosts, connect_timeout_s=2)
            with pytest.raises(HostError, match=rf"server host {tb.prefix}\.99 is unreachable over SSH"):
                servers.Servers.open(gone, {})
            empty = tmp_path / "known_hosts"
            empty.write_text("")
            with pytest.raises(HostError, match=f"server host {h.addr}: not in {empty}") as exc:
                servers.Servers.open(spec.model_copy(update={"known_hosts": str(empty)}), {})
            assert "--accept-new-host-keys" in (exc.value.hint or "")
            # a server host's hints name the server options, never a suite's clients: section
            assert "--server-hosts-file" in (exc.value.hint or "") and "clients." not in (exc.value.hint or "")
            other = tmp_path / "other_key"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
            refused = servers.ServersSpec(hosts=[spec.hosts[0].model_copy(update={"key_file": str(other)})],
                                          known_hosts=tb.known_hosts)
            with pytest.raises(HostError, match=f"server host {h.addr}: the SSH login as root was refused") as exc:
                servers.Servers.open(refused, {})
            assert "--server-key FILE" in (exc.value.hint or "") and "clients" not in (exc.value.hint or "")
            srv = servers.Servers.open(spec, {})
            try:
                (desc,) = srv.describe()["hosts"]
                assert desc["hostname"] == h.name and abs(desc["clock_offset_s"]) <= desc["clock_rtt_s"] / 2 + 0.01
                t0 = time.time()
                time.sleep(3.5)
                recs, events = srv.window(t0, time.time())
                mine = [r for r in recs if r["pid"] == crimson.pid]
                assert mine and all(r["source"] == "osd.7" and r["host"] == h.name and r["via"] == "ssh"
                                    for r in mine)
                assert max(r["cpu_pct"] for r in mine) > 50  # the spinning reactor
                (th,) = [e for e in events if e["kind"] == "threads" and e["data"]["daemon"] == "osd.7"]
                assert th["data"]["threads"][0]["comm"] == "reactor-1" and "reactor-1" in th["message"]
                # the metadata puts osd.7 on another host: here it is foreign, not counted
                srv.placed = inventory.placement({"osd": [{"id": 7, "hostname": "elsewhere"}]})
                recs, events = srv.window(time.time() - 2, time.time())
                assert not [r for r in recs if r["pid"] == crimson.pid]
                src = next(e for e in events if e["kind"] == "sources")["data"]["hosts"][h.name]
                assert src["foreign"]["osd.7"] == [crimson.pid] and src["metadata_host"] is None
                # the interfaces whose bytes count there, named: the host's end of its link (lo left out)
                assert src["nics"] == {"counted": [f"{h.veth}p"], "left_out": {"lo": "loopback"}}
                # a host holding none of the cluster's daemons is not one of the cluster's hosts
                assert usage.summarize(recs, 0.0, float("inf"))["server_hosts"] == 0
                assert any("not counted as one of the cluster's hosts" in e["message"] for e in events)
                # the metadata places osd.7 on it: one of the cluster's hosts, its daemon counted
                srv.placed = inventory.placement({"osd": [{"id": 7, "hostname": h.name}]})
                recs, _ = srv.window(time.time() - 2, time.time())
                assert {r["source"] for r in recs if r["pid"] == crimson.pid} == {"osd.7"}
                m = usage.summarize(recs, 0.0, float("inf"))
                assert m["server_hosts"] == 1 and m["host_cpu_pct"] is not None
            finally:
                srv.close()
    finally:
        _stop(crimson)
    assert not _samplers(nets)


@needs_bed
def test_a_lost_server_host_is_placed_in_the_point_and_in_time(tmp_path):
    """A host whose SSH sessions end mid-point: the event says when, as seconds into the point and as a full
    date and time with its zone (a time of day alone names neither)."""
    with netns.Testbed(hosts=1) as tb:
        h, nets = tb.hosts[0], _nets(tb)
        spec = servers.ServersSpec(hosts=[servers.ClientHost(host=h.addr, user="root", key_file=tb.key_file,
                                                             engine_dir=f"{tb.dir}/srv")],
                                   known_hosts=tb.known_hosts)
        srv = servers.Servers.open(spec, {})
        try:
            t0 = time.time()
            while not [s for s in srv.hosts[0].samples if s["ts"] > t0]:  # a sample inside the point first
                time.sleep(0.1)
            for pid in _sessions(h.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            while srv.hosts[0].lost is None:  # the reader sees its stream end
                time.sleep(0.1)
            _, events = srv.window(t0, time.time())
        finally:
            srv.close()
    (lost,) = [e for e in events if e["kind"] == "server_lost"]
    assert re.search(rf"server host {re.escape(h.addr)} lost \d+\.\d s into the point \(at "
                     r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d\)", lost["message"]), lost["message"]
    assert lost["data"]["into_point_s"] >= 0 and lost["data"]["lost_at"] >= t0
    assert not _samplers(nets)


@needs_bed
@pytest.mark.cluster
def test_this_hosts_daemons_are_the_attached_clusters_beside_another_cluster(topology, other_cluster, tmp_path):
    """mon.a and mgr.x run on this host twice (the attached cluster's and another's): with the OSDs' hosts over
    SSH, this host's sampler counts the attached cluster's processes only (the mgr by the pid its addresses
    carry, the mon by the address it listens on), and the report's not-counted note names the other
    cluster's, never a process that was counted (the namespace hosts see every process: one PID namespace)."""
    tb, c = topology
    mine = {d.name: d.pid for d in c.daemons() if d.kind in ("mon", "mgr")}
    theirs = {d.name: d.pid for d in other_cluster.daemons() if d.kind in ("mon", "mgr")}
    assert set(mine) == set(theirs) == {"mon.a", "mgr.x"}
    osd_pids = {d.name: d.pid for d in c.daemons() if d.kind == "osd"}
    db = tmp_path / "r.db"
    argv = [FATHOM, "run", str(_as_users(c, tmp_path)), "--db", str(db), "--known-hosts", tb.known_hosts,
            "--server-key", tb.key_file]
    for h in tb.hosts:
        argv += ["--server-host", f"root@{h.addr}"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(db) as st:
        run = st.run("latest")
        (point,) = st.points(run.id)
        here = [s for s in st.telemetry(point["id"]) if s["host"] == "local" and s["source"] in mine]
        assert {(s["source"], s["pid"]) for s in here} == set(mine.items())  # one process each, the attached's
        assert run.env["here"]["daemons"] == mine and run.env["here"]["missing"] == {}
        others = run.env["here"]["not_counted"]
        assert all(theirs[n] in others[n] for n in theirs)  # named, not counted
        srcs = [e for e in st.events(run.id) if e["kind"] == "sources" and e["point_id"] == point["id"]]
        foreign = {(n, pid) for h in srcs[0]["data"]["hosts"].values() for n, pids in h["foreign"].items()
                   for pid in pids}
    counted = set(mine.items()) | set(osd_pids.items())
    assert not foreign & counted, foreign & counted  # each is counted on its own host
    assert set(theirs.items()) <= foreign  # the other cluster's, seen from the namespace hosts
    rep = tmp_path / "r.md"
    p = subprocess.run([FATHOM, "report", "latest", "--db", str(db), "-o", str(rep)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    (note,) = [ln for ln in rep.read_text().splitlines() if "Not counted:" in ln]
    assert all(f"(pid {pid} on" not in note for _, pid in counted), note
    assert all(f"{n} (pid {pid} on " in note for n, pid in theirs.items()), note
    assert f"mon.a (pid {mine['mon.a']})" in rep.read_text()  # this host's row: the process counted


@pytest.mark.cluster
def test_server_host_cluster_samples_this_host_here_without_ssh(other_cluster, tmp_path):
    """A cluster whose daemons all run on this host, where no sshd listens: `--server-host cluster` samples
    them here from /proc (the attached cluster's processes, among other clusters' namesakes)."""
    pids = {d.name: d.pid for d in other_cluster.daemons()}
    db = tmp_path / "r.db"
    p = subprocess.run([FATHOM, "run", str(_as_users(other_cluster, tmp_path)), "--db", str(db),
                        "--server-host", "cluster"], capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "this host, whose daemons fathom samples here from /proc, not over SSH" in p.stdout + p.stderr
    with Store(db) as st:
        run = st.run("latest")
        (point,) = st.points(run.id)
        assert "servers" not in run.env and run.env["here"]["daemons"] == pids
        here = [s for s in st.telemetry(point["id"]) if s["host"] == "local" and s["source"] in pids]
        assert {(s["source"], s["pid"]) for s in here} == set(pids.items())
        assert point["metrics"]["osd_cpu"] is not None and point["metrics"]["mon_mem_mib"] is not None


def test_an_attached_run_without_server_sources_picks_this_hosts_daemons_as_status_does(tmp_path, monkeypatch):
    """Without --server-host, an attached run's /proc sampler counts the daemons the cluster's metadata places on
    this host, each process picked by inventory.local_process (the pid its addresses carry, else the address it
    listens on), never every process of a name: another cluster's mon.a and mgr.x here are not counted."""
    from types import SimpleNamespace

    from fathom.cluster.attach import Attachment
    from fathom.cluster.ceph import Connection
    from fathom.cluster.local import Daemon
    from fathom.errors import ClusterError
    from fathom.run.runner import Held, Phases
    from fathom.run.work import RunOptions

    raw = {"mon": [{"name": "a", "hostname": "hosta"}],
           "mon_dump": {"mons": [{"name": "a", "public_addrs": {"addrvec": [
               {"type": "v2", "addr": "10.0.0.1:3300", "nonce": 0},
               {"type": "v1", "addr": "10.0.0.1:6789", "nonce": 0}]}}]},
           "mgr": [{"name": "x", "hostname": "hosta", "addr": "10.0.0.1:0/4242"}],
           "mgr_dump": {"active_name": "x", "active_addrs": {"addrvec": [
               {"type": "v2", "addr": "10.0.0.1:6800", "nonce": 4242}]}},
           "osd": [{"id": 0, "hostname": "hostb", "front_addr": "[v2:10.0.0.2:6800/77,v1:10.0.0.2:6801/77]"}],
           "mds": [], "service": {}}
    failing: set[str] = set()

    class FakeCeph:
        conn = Connection(conf=str(tmp_path / "ceph.conf"))

        def ceph(self, *args: str, timeout: float = 0) -> object:
            key = next(k for k, v in inventory.COMMANDS.items() if v == args)
            if key in failing:
                raise ClusterError(f"`ceph {' '.join(args)}` failed: access denied")
            return raw.get(key)

    here = [Daemon("mon.a", "mon", 100), Daemon("mon.a", "mon", 200),  # ours listens on 10.0.0.1:3300
            Daemon("mgr.x", "mgr", 4242), Daemon("mgr.x", "mgr", 300)]  # ours: the pid its addresses carry
    monkeypatch.setattr(inventory, "this_host", lambda: inventory.ThisHost("hosta", frozenset({"127.0.0.1",
                                                                                               "10.0.0.1"})))
    monkeypatch.setattr(inventory, "listening", lambda pids: {100: {("10.0.0.1", 3300)}, 200: {("127.0.0.1", 3300)},
                                                             4242: set(), 300: set()})
    monkeypatch.setattr(Attachment, "ceph", lambda self, timeout=60.0: FakeCeph())
    monkeypatch.setattr(Attachment, "local_daemons", lambda self: list(here))
    said: list[str] = []
    monkeypatch.setattr("fathom.run.runner._say", said.append)

    def phases() -> Phases:
        st = Store(tmp_path / f"r{len(said)}-{len(failing)}.db")
        run = st.create_run("attached", suite="s")
        return Phases(RunOptions(suite_ref=None), st, SimpleNamespace(points=[], todo=[]), run,
                      Held(attached=Attachment(conn=FakeCeph.conn)), True, None)

    p = phases()
    p.connect_servers()
    assert p.held.coverage is not None  # an attached cluster's daemons are placed by its metadata
    assert [(d.name, d.pid) for d in p.local_daemons()] == [("mon.a", 100), ("mgr.x", 4242)]
    here_env = p.store.run(p.run_id).env["here"]
    assert here_env["daemons"] == {"mon.a": 100, "mgr.x": 4242}
    assert here_env["not_counted"] == {"mon.a": [200], "mgr.x": [300]}
    # metadata partly unreadable (no mgr caps): what was read places this host's daemons, and the rest is said
    failing.add("service")
    p = phases()
    p.connect_servers()
    assert [(d.name, d.pid) for d in p.local_daemons()] == [("mon.a", 100), ("mgr.x", 4242)]
    assert "access denied" in said[-1] and "not sampled" in said[-1]
    assert p.store.run(p.run_id).env["here"]["metadata_errors"]


SUITE_CAP = """\
name: servers-cap
cluster: {{kind: attached, conf: {conf}, keyring: {keyring}}}
prep: {{pools: [{{name: srv, application: rados, pg_num: 16, size: 1}}]}}
defaults: {{engine: fathom-engine, interface: rados, pool: srv, bs: 4k, iodepth: 4, rate: 200, runtime: 60s}}
workloads:
  - name: capped
    rw: write
    faults:
      - {{at_s: 2, action: nic_cap, host: "{host}", rate: 8mbit}}
      - {{at_s: 50, action: link_reset, host: "{host}"}}
"""


def _qdisc(h: netns.NsHost) -> str:
    return subprocess.run(["ip", "netns", "exec", h.name, "tc", "qdisc", "show", "dev", f"{h.veth}p"],
                          capture_output=True, text=True).stdout


@needs_bed
@pytest.mark.cluster
@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_a_nic_cap_over_ssh_is_put_back_after_ctrl_c_and_by_restore_after_kill_9(topology, tmp_path, how):
    """nic_cap on a server host over SSH (tc tbf on the interface holding its address), journaled before it is
    made: Ctrl-C mid-point puts it back at once; a kill -9 leaves it, and `fathom cluster restore` puts it back
    from the run's journal, over SSH; the journal holds paths and names, never a key."""
    tb, c = topology
    h = tb.hosts[1]
    assert "tbf" not in _qdisc(h)
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE_CAP.format(conf=c.conf_path, keyring=c.keyring_path, host=h.addr))
    hosts_file = tmp_path / "servers.yaml"
    base = str(Path(tb.dir) / "cap")
    hosts_file.write_text(json.dumps({"hosts": [{"host": x.addr, "user": "root", "engine_dir": base}
                                                for x in tb.hosts]}))
    db = tmp_path / "r.db"
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), "--known-hosts", tb.known_hosts,
                             "--server-key", tb.key_file, "--server-hosts-file", str(hosts_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while "tbf" not in _qdisc(h) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "rate 8Mbit" in _qdisc(h), proc.communicate(timeout=60)[0] if proc.poll() is not None else ""
        proc.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
        out = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    with Store(db) as st:
        entries = [e for e in st.run("latest").state["journal"]["entries"] if e["kind"] == "fault"]
    assert [e["what"] for e in entries] == [f"{h.addr} {h.veth}p qdisc"]
    assert entries[0]["data"]["place"]["ssh"]["key_file"] == tb.key_file and "PRIVATE" not in json.dumps(entries)
    if how == "ctrl-c":
        assert "tbf" not in _qdisc(h), out[-3000:]
        assert entries[0]["undone"], out[-3000:]
        return
    assert "rate 8Mbit" in _qdisc(h) and not entries[0]["undone"]  # killed: nothing could put it back
    p = run_fathom("cluster", "restore", "--conf", str(c.conf_path), "--keyring", str(c.keyring_path),
                   "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"put back {h.addr} {h.veth}p qdisc" in p.stdout
    assert "tbf" not in _qdisc(h)
