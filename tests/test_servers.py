"""Server hosts over SSH (fathom.servers): a cluster whose daemons run on network-namespace hosts, each with
its own address, hostname and sshd, attached through its conf as a user's cluster is. fathom-sampler is
uploaded to each host, daemons are attributed by the cluster's metadata, and one host's SSH session is
killed mid-point. The pure attribution rules are tested on metadata shaped as Ceph's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FATHOM, export_table, perf_rows

from fathom import netns, servers, telemetry
from fathom.cluster import inventory
from fathom.cluster.local import LocalCluster
from fathom.engines.ssh import HostError
from fathom.errors import UsageError
from fathom.store import Store

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
    assert a.found == {"osd.1": [802], "ganesha.5": [5]}  # the pid the addresses carry settles osd.1
    assert a.keep == {802, 5}
    assert a.foreign == {"osd.0": [701]}
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


def test_server_host_options(tmp_path):
    k = tmp_path / "k"
    k.write_text("")  # the options check that it exists; its content is read when connecting
    spec = servers.servers_from_args(["root@10.0.0.1", "cluster", "ceph@[fd00::2]:2222"], key_file=str(k),
                                     accept_new=True)
    assert spec is not None and spec.discover and spec.accept_new_host_keys
    assert [(h.host, h.user, h.port, h.key_file) for h in spec.hosts] == [("10.0.0.1", "root", 22, str(k)),
                                                                          ("fd00::2", "ceph", 2222, str(k))]
    assert servers.servers_from_args(None) is None
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


def _samplers() -> list[int]:
    """fathom-sampler processes alive (not zombies: a reparented one may wait for a reaper)."""
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/comm").read_text().strip() == "fathom-sampler" and \
                    Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(int(d))
        except OSError:
            pass
    return out


def _window_means(samples: list[dict], name: str, t0: float, t1: float) -> float:
    xs = [s["cpu_pct"] for s in samples if s.get("source") == name and t0 + 0.5 <= s["ts"] - s["dt"] / 2 <= t1 - 0.5]
    assert len(xs) >= 5, (name, len(xs))
    return sum(xs) / len(xs)


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
        time.sleep(4)
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
    assert not _samplers(), "a fathom-sampler was left running"
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
            h = tb.hosts[0]
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
                assert telemetry.summarize(recs, 0.0, float("inf"))["server_hosts"] == 0
                assert any("not counted as one of the cluster's hosts" in e["message"] for e in events)
                # the metadata places osd.7 on it: one of the cluster's hosts, its daemon counted
                srv.placed = inventory.placement({"osd": [{"id": 7, "hostname": h.name}]})
                recs, _ = srv.window(time.time() - 2, time.time())
                assert {r["source"] for r in recs if r["pid"] == crimson.pid} == {"osd.7"}
                m = telemetry.summarize(recs, 0.0, float("inf"))
                assert m["server_hosts"] == 1 and m["host_cpu_pct"] is not None
            finally:
                srv.close()
    finally:
        _stop(crimson)
    assert not _samplers()


@needs_bed
def test_a_lost_server_host_is_placed_in_the_point_and_in_time(tmp_path):
    """A host whose SSH sessions end mid-point: the event says when, as seconds into the point and as a full
    date and time with its zone (a time of day alone names neither)."""
    with netns.Testbed(hosts=1) as tb:
        h = tb.hosts[0]
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
    assert not _samplers()
