"""Hosts, daemons and sources of a cluster (fathom.servers.inventory), and `fathom cluster status` showing them.

The pure tests read excerpts of what a real one-OSD cluster with an MDS and an RGW printed (Ceph 16.2.15,
host "vm", everything on 127.0.0.1), and a two-host variant made from them; the cluster test reads the
session cluster through the CLI, attached by --conf.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fathom.servers import inventory as inv
from fathom.cluster.local import Daemon, LocalCluster
from fathom.servers.mgrprom import MODULE

from conftest import run_fathom

VERSION = "ceph version 16.2.15 (618f440892089921c3e944a991122ddc44e60516) pacific (stable)"
COMMON = {"ceph_release": "pacific", "ceph_version": VERSION, "ceph_version_short": "16.2.15", "hostname": "vm",
          "arch": "x86_64", "os": "Linux"}
CAPTURED: dict[str, Any] = {
    "osd": [{**COMMON, "id": 0, "osd_objectstore": "bluestore", "bluestore_bdev_type": "hdd",
             "front_addr": "[v2:127.0.0.1:6834/12068,v1:127.0.0.1:6835/12068]",
             "back_addr": "[v2:127.0.0.1:6836/12068,v1:127.0.0.1:6837/12068]",
             "hb_front_addr": "[v2:127.0.0.1:6838/12068,v1:127.0.0.1:6839/12068]", "front_iface": ""}],
    "mon": [{**COMMON, "name": "a", "addrs": "[v2:127.0.0.1:59907/0,v1:127.0.0.1:41817/0]"}],
    "mgr": [{**COMMON, "name": "x", "addr": "127.0.0.1", "addrs": "127.0.0.1:0/11137"}],
    "mds": [{**COMMON, "name": "a", "addr": "[v2:127.0.0.1:6844/1851008792,v1:127.0.0.1:6845/1851008792]"}],
    "service": {"epoch": 2, "services": {
        "mon": {"daemons": {"summary": "", "a": {"gid": 0, "addr": "(unrecognized address family 0)/0",
                                                 "metadata": {}}}},
        "rgw": {"daemons": {"summary": "", "4146": {
            "gid": 4146, "addr": "127.0.0.1:0/1010523964",
            "metadata": {**COMMON, "id": "fathom", "pid": "13632", "frontend_type#0": "beast",
                         "frontend_config#0": "beast endpoint=127.0.0.1:60131 ssl_endpoint=127.0.0.1:44375 "
                                              "ssl_certificate=/c/rgw.crt ssl_private_key=/c/rgw.key tcp_nodelay=1",
                         "zone_name": "default"}}}}}},
    "mon_dump": {"epoch": 1, "mons": [{"rank": 0, "name": "a", "public_addrs": {"addrvec": [
        {"type": "v2", "addr": "127.0.0.1:59907", "nonce": 0}, {"type": "v1", "addr": "127.0.0.1:41817", "nonce": 0}]},
        "addr": "127.0.0.1:41817/0", "public_addr": "127.0.0.1:41817/0"}], "quorum": [0]},
    "mgr_dump": {"active_name": "x", "available": True, "standbys": [], "modules": ["iostat"], "services": {},
                 "active_addrs": {"addrvec": [{"type": "v2", "addr": "127.0.0.1:6842", "nonce": 11137},
                                              {"type": "v1", "addr": "127.0.0.1:6843", "nonce": 11137}]},
                 "always_on_modules": {"pacific": ["balancer", "crash", "status", "volumes"]},
                 "available_modules": [{"name": "iostat", "can_run": True, "error_string": ""},
                                       {"name": "prometheus", "can_run": True, "error_string": ""}]},
}
PROCS = [Daemon("mon.a", "mon", 11049), Daemon("mgr.x", "mgr", 11137), Daemon("osd.0", "osd", 12068),
         Daemon("mds.a", "mds", 12977), Daemon("client.rgw.fathom", "rgw", 13632)]
VM = inv.ThisHost("vm", frozenset({"127.0.0.1", "::1", "192.0.2.2"}))


def two_hosts() -> dict[str, Any]:
    """The capture with a second OSD whose metadata puts it on host b, 10.0.0.2."""
    raw = copy.deepcopy(CAPTURED)
    raw["osd"].append({**COMMON, "id": 1, "hostname": "b", "osd_objectstore": "bluestore",
                       "front_addr": "[v2:10.0.0.2:6800/4242,v1:10.0.0.2:6801/4242]",
                       "back_addr": "[v2:10.0.0.2:6802/4242,v1:10.0.0.2:6803/4242]"})
    return raw


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: {**d, "host": h["host"]} for h in result["hosts"] for d in h["daemons"]}


def sources(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["source"]: s for s in d["sources"]}


def test_one_host_capture_every_daemon_placed_with_addresses_versions_and_local_pids() -> None:
    r = inv.inventory(CAPTURED, VM, PROCS)
    assert [h["host"] for h in r["hosts"]] == ["vm"]
    vm = r["hosts"][0]
    assert vm["this_host"] and vm["matched_by"] == "hostname vm" and vm["addresses"] == ["127.0.0.1"]
    assert [d["name"] for d in vm["daemons"]] == ["mon.a", "mgr.x", "osd.0", "mds.a", "client.rgw.fathom"]
    assert vm["missing"] == []
    d = by_name(r)
    assert d["osd.0"]["addrs"] == {"front": ["v2:127.0.0.1:6834", "v1:127.0.0.1:6835"],
                                   "back": ["v2:127.0.0.1:6836", "v1:127.0.0.1:6837"]}
    assert d["osd.0"]["objectstore"] == "bluestore" and d["osd.0"]["version"] == "16.2.15"
    assert "osd_type" not in d["osd.0"]  # a classic OSD does not say
    assert d["mon.a"]["addrs"] == {"public": ["v2:127.0.0.1:59907", "v1:127.0.0.1:41817"]}
    assert d["mgr.x"]["addrs"] == {"public": ["v2:127.0.0.1:6842", "v1:127.0.0.1:6843"]}  # the mgr map's
    assert d["mgr.x"]["state"] == "active"
    assert d["client.rgw.fathom"]["addrs"] == {"frontend": ["http://127.0.0.1:60131", "https://127.0.0.1:44375"]}
    assert {n: sources(x)["local"]["pid"] for n, x in d.items()} == {p.name: p.pid for p in PROCS}
    # the module's counters cover OSD, MON, MDS and RGW, not the mgr; it is off here and able to run
    assert {n for n, x in d.items() if "mgr-prometheus" in sources(x)} == {"mon.a", "osd.0", "mds.a",
                                                                           "client.rgw.fathom"}
    assert sources(d["osd.0"])["mgr-prometheus"]["state"] == "off"
    assert "perf counters" in sources(d["osd.0"])["local"]["gives"]  # its admin socket
    assert "perf counters" not in sources(d["mon.a"])["local"]["gives"]
    assert r["mgr_prometheus"]["enabled"] is False and r["mgr_prometheus"]["can_run"] is True


def test_a_daemon_is_on_the_host_its_metadata_names_whatever_this_hosts_proc_shows() -> None:
    # this host runs a process named osd.1 (another cluster's): the metadata puts this cluster's osd.1 on b
    r = inv.inventory(two_hosts(), VM, PROCS + [Daemon("osd.1", "osd", 777)])
    assert [h["host"] for h in r["hosts"]] == ["vm", "b"]
    b = r["hosts"][1]
    assert not b["this_host"] and b["matched_by"] is None and b["addresses"] == ["10.0.0.2"]
    osd1 = by_name(r)["osd.1"]
    assert osd1["host"] == "b" and set(sources(osd1)) == {"mgr-prometheus"}
    assert b["missing"] == [f"CPU and memory of the host and its daemons: {inv.NO_SSH}"]
    assert "--server-host" in inv.NO_SSH
    assert "10.0.0.2" not in r["hosts"][0]["addresses"]
    text = "\n".join(inv.text_lines(r))
    assert "  b (not this host): 10.0.0.2" in text
    assert f"missing: CPU and memory of the host and its daemons: {inv.NO_SSH}" in text
    assert "front 10.0.0.2:6800 back 10.0.0.2:6802" in text
    # seen from b (by its address, whatever its name), b is this host and vm is not
    from_b = inv.inventory(two_hosts(), inv.ThisHost("client-b", frozenset({"10.0.0.2"})), [])
    assert [(h["host"], h["matched_by"]) for h in from_b["hosts"]] == [("b", "address 10.0.0.2"), ("vm", None)]
    assert from_b["hosts"][0]["missing"] == ["osd.1: on this host by the metadata, but no such process here "
                                             "(not running, or in a PID namespace fathom cannot see)"]


def test_the_pid_in_a_daemons_addresses_picks_its_process_among_namesakes() -> None:
    namesakes = PROCS + [Daemon("osd.0", "osd", 555), Daemon("mon.a", "mon", 556)]
    d = by_name(inv.inventory(CAPTURED, VM, namesakes))
    assert sources(d["osd.0"])["local"]["pid"] == 12068  # its addresses' nonce
    assert sources(d["mgr.x"])["local"]["pid"] == 11137
    assert sources(d["client.rgw.fathom"])["local"]["pid"] == 13632  # the service map's pid
    # a mon's nonce is 0: of two mon.a here, the one listening on its address is it
    listens = {11049: {("127.0.0.1", 59907), ("127.0.0.1", 41817)}, 556: {("127.0.0.1", 3300)}}
    d = by_name(inv.inventory(CAPTURED, VM, namesakes, listens=listens))
    assert sources(d["mon.a"])["local"]["pid"] == 11049
    assert inv.local_process(inv.mons([], CAPTURED["mon_dump"])[0], namesakes, {556: {("0.0.0.0", 59907)}})[0] \
        == Daemon("mon.a", "mon", 556)  # listening on every address, at its port
    # neither listens on it (nor carries a pid): neither is known to be it
    r = inv.inventory(CAPTURED, VM, namesakes, listens={})
    assert "local" not in sources(by_name(r)["mon.a"])
    assert r["hosts"][0]["missing"] == ["mon.a: on this host by the metadata, but 2 processes here have its name, "
                                        "and none the pid its addresses carry nor listens on its addresses"]


def test_a_process_listening_addresses_from_proc() -> None:
    import os
    import socket

    with socket.socket() as s4, socket.socket(socket.AF_INET6) as s6:
        s4.bind(("127.0.0.1", 0))
        s4.listen()
        s6.bind(("::1", 0))
        s6.listen()
        mine = inv.listening([os.getpid()])[os.getpid()]
        assert ("127.0.0.1", s4.getsockname()[1]) in mine and ("::1", s6.getsockname()[1]) in mine


def test_module_states_in_words() -> None:
    dump = CAPTURED["mgr_dump"]
    on = inv.module_state({**dump, "modules": ["iostat", MODULE], "services": {MODULE: "http://10.0.0.1:9283/"}})
    assert on["enabled"] and on["url"] == "http://10.0.0.1:9283/" and on["state"] == "enabled at http://10.0.0.1:9283/"
    assert inv.module_state({**dump, "modules": [MODULE]})["state"].startswith("enabled, no endpoint")
    assert inv.module_state(dump)["state"].startswith("off (its counters reach fathom only once it is enabled")
    broken = {**dump, "available_modules": [{"name": MODULE, "can_run": False, "error_string": "no cherrypy"}]}
    assert inv.module_state(broken) == {"enabled": False, "url": None, "can_run": False, "active_mgr": "x",
                                        "usable": False, "state": "off and cannot run: no cherrypy"}
    assert inv.module_state({**dump, "available_modules": []})["state"] == "not installed on the mgr"
    assert inv.module_state(None)["usable"] is False
    # a module that cannot run is no source: the counters of b's OSD are missing, and the line says why
    raw = {**two_hosts(), "mgr_dump": broken}
    r = inv.inventory(raw, VM, PROCS)
    assert "mgr-prometheus" not in sources(by_name(r)["osd.1"])
    assert r["hosts"][1]["missing"][-1] == "perf counters of osd.1: mgr-prometheus off and cannot run: no cherrypy, " \
                                           "not this host"
    assert r["hosts"][0]["missing"] == ["perf counters of mon.a, mds.a: mgr-prometheus off and cannot run: "
                                        "no cherrypy"]  # fathom reads only OSDs' and RGWs' admin sockets


@pytest.mark.parametrize("text, expected", [
    ("[v2:127.0.0.1:6834/12068,v1:127.0.0.1:6835/12068]", ["v2:127.0.0.1:6834", "v1:127.0.0.1:6835"]),
    ("127.0.0.1:6789/0", ["127.0.0.1:6789"]),
    ("[v2:[fd00::2]:3300/0,v1:[fd00::2]:6789/0]", ["v2:[fd00::2]:3300", "v1:[fd00::2]:6789"]),
    ("10.0.0.5", ["10.0.0.5"]),
    ("-", []), ("", []), (None, []), ("(unrecognized address family 0)/0", []), ("0.0.0.0:0/0", []),
])
def test_address_strings(text: Any, expected: list[str]) -> None:
    assert [str(a) for a in inv.parse_addrs(text)] == expected


def test_metadata_of_other_releases_and_crimson() -> None:
    raw = {
        "osd": [{"id": 3}, {"id": 4, "hostname": "c", "ceph_version": "ceph version 19.3.0-1 (abc) squid (dev)",
                            "osd_objectstore": "seastore", "osd_type": "crimson", "front_addr": "10.0.0.3:6800/0"}],
        "mon_dump": {"mons": [{"name": "b", "public_addr": "10.0.0.3:6789/0"}]},  # no public_addrs, no metadata
        "service": {"services": {"rgw": {"daemons": {"gw1": {  # keyed by name, civetweb, before Octopus
            "addr": "10.0.0.3:0/77", "metadata": {"hostname": "c", "frontend_config#0": "civetweb port=7480+443s"}}}}}},
    }
    d = by_name(inv.inventory(raw, VM, []))
    assert d["osd.3"]["host"] == inv.UNKNOWN_HOST and d["osd.3"]["addrs"] == {} and "version" not in d["osd.3"]
    assert (d["osd.4"]["version"], d["osd.4"]["objectstore"], d["osd.4"]["osd_type"]) == ("19.3.0-1", "seastore",
                                                                                          "crimson")
    assert d["mon.b"]["addrs"] == {"public": ["10.0.0.3:6789"]} and d["mon.b"]["host"] == inv.UNKNOWN_HOST
    assert d["client.rgw.gw1"]["addrs"] == {"frontend": ["http://10.0.0.3:7480", "https://10.0.0.3:443"]}
    r = inv.inventory(raw, VM, [])
    assert [h["host"] for h in r["hosts"]] == ["c", inv.UNKNOWN_HOST]
    assert "seastore crimson front 10.0.0.3:6800" in "\n".join(inv.text_lines(r))
    assert r["mgr_prometheus"]["state"] == "unknown: no mgr map"
    # a command that failed or answered something else contributes nothing, and breaks nothing
    junk = inv.inventory({"osd": {"error": "EACCES"}, "mon": None, "mon_dump": [], "mgr": ["x"],
                          "service": "", "mgr_dump": "junk"}, VM, PROCS, ["`ceph osd metadata` failed: EACCES"])
    assert junk["hosts"] == [] and junk["inventory_errors"] == ["`ceph osd metadata` failed: EACCES"]
    assert "inventory: `ceph osd metadata` failed: EACCES" in inv.text_lines(junk)


def test_this_host_knows_its_loopback_and_name() -> None:
    here = inv.this_host()
    assert {"127.0.0.1", "::1"} <= here.addresses and here.hostname
    assert here.claims(here.hostname, set()) == f"hostname {here.hostname}"
    assert VM.claims("vm.example.com", set()) == "hostname vm.example.com"  # a short name against a long one
    assert VM.claims("b", {"10.0.0.2"}) is None and VM.claims("b", {"10.0.0.2", "192.0.2.2"}) == "address 192.0.2.2"


def _prometheus(ceph: Any) -> tuple[bool, str | None]:
    """The module as the cluster has it: enabled, and its URL."""
    ls = ceph.ceph("mgr", "module", "ls")
    return MODULE in ls.get("enabled_modules", []), (ceph.ceph("mgr", "services") or {}).get(MODULE)


@pytest.mark.cluster
def test_status_of_an_attached_cluster_lists_this_host_its_daemons_and_sources(
        cluster: LocalCluster, ceph: Any, tmp_path: Path) -> None:
    opts = ["--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path)]
    st = json.loads(run_fathom("cluster", "status", *opts, "--json", check=True).stdout)
    assert st["health"] == "HEALTH_OK" and st["osds_up"] == 1  # the fields before the hosts are kept
    enabled, url = _prometheus(ceph)
    assert (st["mgr_prometheus"]["enabled"], st["mgr_prometheus"]["url"]) == (enabled, url)
    assert [h["this_host"] for h in st["hosts"]] == [True]
    here = st["hosts"][0]
    assert here["addresses"] == ["127.0.0.1"] and here["missing"] == []
    pids = {d.name: d.pid for d in cluster.daemons()}
    daemons = {d["name"]: d for d in here["daemons"]}
    assert set(daemons) == {"mon.a", "mgr.x", "osd.0"}
    assert {n: sources(d)["local"]["pid"] for n, d in daemons.items()} == pids
    assert all(a.startswith(("v2:127.0.0.1:", "v1:127.0.0.1:")) for d in daemons.values()
               for vec in d["addrs"].values() for a in vec)
    assert daemons["osd.0"]["objectstore"] == "bluestore"
    assert sources(daemons["osd.0"])["mgr-prometheus"]["state"] == ("enabled" if enabled else "off")
    text = run_fathom("cluster", "status", *opts, check=True).stdout
    assert f"    {here['host']} (this host, by {here['matched_by']}): 127.0.0.1" in text
    assert f"local pid {pids['osd.0']}, mgr-prometheus ({'enabled' if enabled else 'off'})" in text
    assert f"  mgr-prometheus: {st['mgr_prometheus']['state']}" in text

    # the same cluster through a conf fathom does not recognise as its own: every ceph process on this host
    # is a candidate (other clusters' too); the pid in the OSD's and mgr's addresses picks theirs
    conf = tmp_path / "ceph.conf"
    shutil.copy(cluster.conf_path, conf)
    other = json.loads(run_fathom("cluster", "status", "--conf", str(conf), "--keyring", str(cluster.keyring_path),
                                  "--json", check=True).stdout)
    assert other["dir"] is None and [h["this_host"] for h in other["hosts"]] == [True]
    found = {d["name"]: sources(d).get("local", {}).get("pid") for d in other["hosts"][0]["daemons"]}
    assert (found["osd.0"], found["mgr.x"]) == (pids["osd.0"], pids["mgr.x"])
    assert found["mon.a"] == pids["mon.a"]  # a mon's nonce is 0: the address it listens on picks it
