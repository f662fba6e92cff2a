"""The disposable local cluster, preparation, the health gate and attach mode, on real daemons."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fathom.cluster.ceph import Ceph, Connection
from fathom.cluster.health import assess, gate
from fathom.cluster.local import LocalCluster, free_port, pid_alive
from fathom.cluster.prep import Prep
from fathom.errors import ClusterError, FathomError, UsageError

from conftest import run_fathom, session_wants


def _status(d: Path) -> dict:
    return json.loads(run_fathom("cluster", "status", "--dir", str(d), "--json", check=True).stdout)


def test_lifecycle_up_status_second_up_down(tmp_path: Path, cluster: LocalCluster) -> None:
    """up, status, a second up (no-op), down: no daemon and no state left. Runs beside the session cluster."""
    d = tmp_path / "c1"
    up = run_fathom("cluster", "up", "--dir", str(d), check=True)
    assert "HEALTH_OK" in up.stdout
    st = _status(d)
    assert st["health"] == "HEALTH_OK"
    assert st["osds_up"] == 1
    names = {x["name"]: x["pid"] for x in st["daemons"]}
    assert set(names) == {"mon.a", "mgr.x", "osd.0"}
    assert all(pid_alive(p) for p in names.values())
    # two clusters side by side: different fsids and mon ports, both healthy
    other = cluster.status()
    assert other["health"] == "HEALTH_OK"
    assert other["fsid"] != st["fsid"] and other["mon_host"] != st["mon_host"]
    # nothing under /etc/ceph was needed: the conf is the cluster's own
    assert Path(st["conf"]).parent == d

    again = run_fathom("cluster", "up", "--dir", str(d), check=True)
    assert "already up" in again.stdout
    assert {x["name"]: x["pid"] for x in _status(d)["daemons"]} == names

    env = run_fathom("cluster", "env", "--dir", str(d), check=True).stdout
    assert f"export CEPH_CONF='{d}/ceph.conf'" in env

    down = run_fathom("cluster", "down", "--dir", str(d), check=True)
    assert "removed" in down.stdout
    assert not d.exists()
    assert not any(pid_alive(p) for p in names.values())
    assert cluster.is_up()  # the neighbour was not touched


def test_up_refuses_foreign_directory_and_down_refuses_to_delete_it(tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "precious.txt").write_text("user data")
    r = run_fathom("cluster", "up", "--dir", str(d))
    assert r.returncode != 0 and "not a fathom cluster directory" in r.stderr
    r = run_fathom("cluster", "down", "--dir", str(d))
    assert r.returncode != 0 and "removes nothing" in r.stderr
    assert (d / "precious.txt").read_text() == "user data"


@pytest.mark.parametrize("args, option", [
    (["--osds", "-3"], "--osds"),
    (["--osds", "two"], "--osds"),
    (["--osd-size", "12XB"], "--osd-size"),
    (["--osd-size", "100M"], "--osd-size"),
    (["--set", "nonsense"], "--set"),
    (["--set", "bogus.key=1"], "--set"),
])
def test_bad_options_name_the_option(tmp_path: Path, args: list[str], option: str) -> None:
    r = run_fathom("cluster", "up", "--dir", str(tmp_path / "x"), *args)
    assert r.returncode == 2
    assert option in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()


def test_missing_ceph_binaries_name_make_install(tmp_path: Path) -> None:
    r = run_fathom("cluster", "up", "--dir", str(tmp_path / "x"), env={"PATH": str(tmp_path)})
    assert r.returncode == 4
    assert "ceph-mon" in r.stderr and "make install" in r.stderr
    assert "Traceback" not in r.stderr


def test_log_tail_keeps_the_error_that_scrolled_out_of_the_tail(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "c")
    c.log_dir.mkdir(parents=True)
    noise = [f"2026-01-01T00:00:00.{i:03d}+0000 7f 1 shutting down part {i}" for i in range(40)]
    err = "2026-01-01T00:00:00.000+0000 7f -1  Processor -- bind unable to bind: (98) Address already in use"
    (c.log_dir / "osd.0.log").write_text("\n".join(["starting", err] + noise) + "\n")
    tail = c.log_tail("osd.0", lines=15)
    assert "last error lines" in tail and err in tail
    assert noise[-1] in tail and noise[0] not in tail
    (c.log_dir / "osd.0.log").write_text("\n".join(noise[:5] + [err]) + "\n")
    tail = c.log_tail("osd.0", lines=15)
    assert "last error lines" not in tail and tail.count(err) == 1  # already in the tail: shown once


def test_daemon_that_fails_to_start_shows_its_log_and_stops_the_others(tmp_path: Path) -> None:
    """The OSD cannot bind its only allowed port: the error shows its log; mon and mgr are stopped."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    d = tmp_path / "bad"
    try:
        r = run_fathom("cluster", "up", "--dir", str(d), "--set", f"osd.ms_bind_port_min={port}",
                       "--set", f"osd.ms_bind_port_max={port}", "--set", "osd.ms_bind_retry_count=1",
                       "--set", "osd.ms_bind_retry_delay=1")
    finally:
        held.close()
    assert r.returncode == 3, r.stderr
    assert "osd.0 exited during start-up" in r.stderr, r.stderr
    # its log's tail, and in it the cause when Ceph wrote it (a daemon that exits may lose its last queued lines)
    assert "--- last lines of" in r.stderr and "osd.0.log" in r.stderr, r.stderr
    if "Address already in use" in (d / "log" / "osd.0.log").read_text(errors="replace"):
        assert "Address already in use" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    state = json.loads((d / "fathom-cluster.json").read_text())
    pids = [int((d / "run" / f"{n}.pid").read_text()) for n in state["daemons"]]
    assert pids and not any(pid_alive(p) for p in pids)
    assert (d / "log" / "osd.0.log").exists()  # kept for debugging
    assert run_fathom("cluster", "down", "--dir", str(d)).returncode == 0
    assert not d.exists()


def test_free_port_never_returns_a_port_in_use() -> None:
    held = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        for _ in range(50):
            assert free_port() not in taken
    finally:
        for s in held:
            s.close()


def test_free_ports_are_below_the_ephemeral_range() -> None:
    """Never a port an outgoing connection may be given as its source port before the daemon binds it."""
    from fathom.cluster.localconf import PORT_MIN, ephemeral_range

    low, _ = ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert all(PORT_MIN <= p < low for p in ports), (low, ports)


def test_replicated_pool_images_prefill_and_hygiene(ceph: Ceph) -> None:
    prep = Prep(ceph, owner_prefix="fathom-t")
    try:
        prep.pool("fathom-t-rep", pg_num=16, size=1, application="rbd")
        pools = {p["pool_name"]: p for p in ceph.ceph("osd", "pool", "ls", "detail")}
        rep = pools["fathom-t-rep"]
        assert rep["size"] == 1 and rep["min_size"] == 1 and rep["pg_num"] == 16
        assert rep["pg_autoscale_mode"] == "off" and rep["type"] == 1  # replicated
        assert rep["application_metadata"] == {"rbd": {}}

        size = 8 * 2**20
        prep.images("fathom-t-rep", ["img0", "img1"], size)
        assert ceph.rbd("info", "fathom-t-rep/img0")["size"] == size
        with pytest.raises(ClusterError, match="already exists"):
            prep.images("fathom-t-rep", ["img0"], size)
        fill = prep.prefill("fathom-t-rep", ["img0", "img1"], size)
        assert fill["method"].startswith("rbd bench") and fill["images"] == 2 and fill["seconds"] > 0
        du = {i["name"]: i for i in ceph.rbd("du", "-p", "fathom-t-rep")["images"]}
        assert du["img0"]["used_size"] == size and du["img1"]["used_size"] == size

        applied = prep.hygiene(["fathom-t-rep"])
        assert applied["client rbd_cache"] == "false" and prep.settings == applied
        flags = ceph.ceph("osd", "dump")["flags_set"]
        assert "noscrub" in flags and "nodeep-scrub" in flags
        assert ceph.ceph("balancer", "status")["active"] is False
        assert ceph.ceph("config", "get", "client", "rbd_cache", fmt_json=False).strip() == "false"
        assert {"osd flag noscrub", "config client rbd_cache"} <= {e.what for e in prep.restorer.pending()}
    finally:
        removed = prep.cleanup()
        left = prep.restorer.restore(lambda m: None)  # the session cluster as this test found it
    assert left == []
    assert removed["pools"] == ["fathom-t-rep"]
    assert "fathom-t-rep" not in {p["pool_name"] for p in ceph.ceph("osd", "pool", "ls", "detail")}


@pytest.fixture(scope="module")
def ec_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A 3-OSD cluster of its own (EC 2+1 needs three OSDs, failure domain osd), started in the background: "wait"
    gives it once up. It starts with the module and beside the tests before its test (they assert nothing of
    speed, and the lifecycle test already runs beside the session cluster). Its test stops it."""
    c = LocalCluster(tmp_path_factory.mktemp("ec") / "ec")
    failed: list[BaseException] = []

    def up() -> None:
        try:
            c.up(osds=3, osd_size=2 * 1024**3)
        except BaseException as exc:  # noqa: BLE001 (raised by "wait", in the test)
            failed.append(exc)

    starting = threading.Thread(target=up)
    starting.start()

    def wait() -> LocalCluster:
        starting.join()
        if failed:
            raise failed[0]
        return c

    try:
        yield wait
    finally:
        starting.join()
        if c.exists():  # the test stops it; this, if the test did not get so far
            c.down()


@pytest.fixture(scope="module", autouse=True)
def _ec_cluster_starts_with_the_module(request) -> None:
    if session_wants(request, "ec_cluster"):
        request.getfixturevalue("ec_cluster")


def test_ec_pool_backs_an_rbd_image(ec_cluster) -> None:
    """EC 2+1 needs three OSDs (failure domain osd): a cluster of its own (ec_cluster)."""
    c = ec_cluster()
    try:
        ceph = c.ceph()
        prep = Prep(ceph)
        prep.ec_profile("fathom-ec21", k=2, m=1, failure_domain="osd")
        prep.pool("fathom-ec", pg_num=8, ec_profile="fathom-ec21", allow_ec_overwrites=True, application="rbd")
        prep.pool("fathom-meta", pg_num=8, size=1, application="rbd")
        ec = {p["pool_name"]: p for p in ceph.ceph("osd", "pool", "ls", "detail")}["fathom-ec"]
        assert ec["type"] == 3 and ec["erasure_code_profile"] == "fathom-ec21" and ec["size"] == 3
        assert "ec_overwrites" in ec["flags_names"]
        profile = ceph.ceph("osd", "erasure-code-profile", "get", "fathom-ec21")
        assert (profile["k"], profile["m"], profile["crush-failure-domain"]) == ("2", "1", "osd")
        assert gate(ceph, timeout=120).ok
        size = 4 * 2**20
        prep.images("fathom-meta", ["img-ec"], size, data_pool="fathom-ec")
        assert ceph.rbd("info", "fathom-meta/img-ec")["data_pool"] == "fathom-ec"
        prep.prefill("fathom-meta", ["img-ec"], size)
        assert ceph.rbd("du", "fathom-meta/img-ec")["images"][0]["used_size"] == size
        removed = prep.cleanup()
        assert removed["ec_profiles"] == ["fathom-ec21"]
        assert "fathom-ec21" not in ceph.ceph("osd", "erasure-code-profile", "ls")
    finally:
        c.down()


def test_bad_prep_values_are_usage_errors(ceph: Ceph) -> None:
    prep = Prep(ceph)
    with pytest.raises(UsageError, match="pg_num"):
        prep.pool("fathom-x", pg_num=12)
    with pytest.raises(UsageError, match="k and m"):
        prep.ec_profile("fathom-x", k=0, m=1)
    with pytest.raises(UsageError, match="allow_ec_overwrites"):
        prep.pool("fathom-x2", pg_num=8, allow_ec_overwrites=True)
    assert prep.made("pool") == ["fathom-x2"]  # created before the bad flag was seen: cleanup owns it
    prep.cleanup()


def test_health_gate_holds_on_unsettled_pgs_and_passes_after(ceph: Ceph) -> None:
    prep = Prep(ceph)
    try:
        # size 2 on one OSD: PGs stay undersized, so the gate must hold and say why
        prep.pool("fathom-gate", pg_num=16, size=2, min_size=1, application="rados")
        deadline = time.monotonic() + 60
        while "undersized" not in assess(ceph.ceph("status"))[1]:  # the mon has caught up with the resize
            assert time.monotonic() < deadline, "PGs of a size-2 pool on one OSD never showed as undersized"
            time.sleep(0.5)
        held = gate(ceph, timeout=3, poll=0.5)
        assert not held.ok
        assert "undersized" in held.reason
        assert held.waited_s >= 3
        with pytest.raises(ClusterError, match="not clean after"):
            gate(ceph, timeout=1, poll=0.5, require=True)
        ceph.ceph("osd", "pool", "set", "fathom-gate", "size", "1", "--yes-i-really-mean-it", fmt_json=False)
        passed = gate(ceph, timeout=120, poll=0.5, settle=2)
        assert passed.ok, passed.reason
        assert passed.waited_s >= 2  # clean readings must span the settle window
        assert passed.pg_states and set(passed.pg_states) == {"active+clean"}
        assert passed.to_dict()["ok"] is True
    finally:
        prep.cleanup()  # never leave an unclean pool for the tests after this one


def test_gate_sees_a_newly_created_pool_peer() -> None:
    """assess() on the status a mon reports right after pool creation: not clean until PGs are active."""
    status = {"pgmap": {"num_pgs": 40, "pgs_by_state": [
        {"state_name": "active+clean", "count": 8}, {"state_name": "creating+peering", "count": 32}]},
        "health": {"status": "HEALTH_WARN", "checks": {}}, "osdmap": {"num_osds": 1, "num_up_osds": 1}}
    ok, reason, states, _ = assess(status)
    assert not ok and "32 creating+peering" in reason and states["active+clean"] == 8
    status["pgmap"]["pgs_by_state"] = [{"state_name": "active+clean", "count": 40}]
    status["health"] = {"status": "HEALTH_WARN", "checks": {"OSDMAP_FLAGS": {"summary": {"message": "noscrub"}}}}
    assert assess(status)[0]
    status["pgmap"]["pgs_by_state"] = [{"state_name": "active+clean+scrubbing", "count": 40}]
    assert not assess(status)[0]
    status["pgmap"]["pgs_by_state"] = [{"state_name": "active+clean", "count": 40}]
    status["health"]["checks"]["SLOW_OPS"] = {"summary": {"message": "1 slow ops"}}
    assert "SLOW_OPS" in assess(status)[1]


def test_attach_creates_prefixed_pools_and_removes_only_its_own(cluster: LocalCluster, ceph: Ceph) -> None:
    conn = Connection.from_args(str(cluster.conf_path), "admin", None, str(cluster.keyring_path))
    attached = Ceph(conn)
    attached.probe(timeout=30)
    # the user's own pool and data, which fathom must never remove
    ceph.ceph("osd", "pool", "create", "users-pool", "8", fmt_json=False)
    ceph.ceph("osd", "pool", "application", "enable", "users-pool", "rados", fmt_json=False)
    ceph.rados("-p", "users-pool", "put", "precious", "/etc/hostname", fmt_json=False)
    prep = Prep(attached, owner_prefix="fathom")
    with pytest.raises(ClusterError, match="already exists"):
        prep.pool("users-pool", pg_num=8)
    assert prep.pool("users-pool", pg_num=8, explicit=True) == "users-pool"
    prep.pool("fathom-attach", pg_num=8, application="rados")
    assert prep.made("pool") == ["fathom-attach"]
    prep.cleanup()
    pools = {p["pool_name"] for p in ceph.ceph("osd", "pool", "ls", "detail")}
    assert "users-pool" in pools and "fathom-attach" not in pools
    assert "precious" in ceph.rados("-p", "users-pool", "ls", fmt_json=False).split()
    # the CLI attaches the same way
    r = run_fathom("cluster", "status", "--conf", str(cluster.conf_path), "--id", "admin",
                   "--keyring", str(cluster.keyring_path), "--json", check=True)
    st = json.loads(r.stdout)
    assert st["health"] == "HEALTH_OK" and st["osds_up"] == 1
    assert {"osd.0", "mon.a", "mgr.x"} <= {d["name"] for d in st["daemons"]}
    ceph.ceph("osd", "pool", "rm", "users-pool", "users-pool", "--yes-i-really-really-mean-it", fmt_json=False)


def test_attach_errors_are_bounded_and_name_what_was_tried(tmp_path: Path, cluster: LocalCluster) -> None:
    r = run_fathom("cluster", "status", "--conf", str(tmp_path / "nope.conf"))
    assert r.returncode == 3 and "nope.conf" in r.stderr and "does not exist" in r.stderr
    # a conf whose mon nobody listens on
    port = free_port()
    conf = tmp_path / "dead.conf"
    conf.write_text(f"[global]\nmon_host = 127.0.0.1:{port}\nkeyring = {cluster.keyring_path}\n")
    t0 = time.monotonic()
    with pytest.raises(ClusterError) as exc:
        Ceph(Connection(conf=str(conf), keyring=str(cluster.keyring_path))).probe(timeout=5)
    assert time.monotonic() - t0 < 60  # bounded, not a hang (a generous bound, not a speed target)
    assert str(conf) in exc.value.message and f"127.0.0.1:{port}" in exc.value.message
    with pytest.raises(FathomError, match="keyring"):
        Connection.from_args(str(cluster.conf_path), "admin", None, str(tmp_path / "no.keyring"))


def test_ceph_etc_untouched(cluster: LocalCluster) -> None:
    conf = cluster.conf_path.read_text()
    assert "/etc/ceph" not in conf
    for line in conf.splitlines():
        if "=" in line and line.split("=")[0].strip() in ("keyring", "run_dir", "admin_socket", "log_file"):
            assert str(cluster.root) in line
    assert oct(os.stat(cluster.keyring_path).st_mode)[-3:] == "600"


def test_gate_passes_a_muted_check_and_ceph_20s_checks_on_older_clients_keys() -> None:
    """A check the cluster's admin muted does not block a point, nor Ceph 20's reports on the aes keys and tickets
    that clients before 20 need (fathom's own cluster from a Ceph 20 root mutes them; a user's may not)."""
    clean = {"pgmap": {"num_pgs": 8, "pgs_by_state": [{"state_name": "active+clean", "count": 8}]},
             "osdmap": {"num_osds": 1, "num_up_osds": 1}}
    muted = {**clean, "health": {"status": "HEALTH_OK", "checks": {
        "OSD_SLOW_PING_TIME_BACK": {"summary": {"message": "slow heartbeats"}, "muted": True}}}}
    assert assess(muted)[0]
    ceph20 = {**clean, "health": {"status": "HEALTH_ERR", "checks": {
        "AUTH_INSECURE_SERVICE_TICKETS": {"summary": {"message": "Monitors are configured to issue insecure "
                                                                 "service tickets"}}}}}
    assert assess(ceph20)[0]


def test_a_probe_that_fails_early_says_how_long_it_waited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ceph status` refused at once (bad key, no mon_host) is no timeout: the error says when it gave up, not
    "within 30 s"; one that used its time says so."""
    from fathom.cluster import ceph as ceph_mod

    conf = tmp_path / "c.conf"
    conf.write_text("[global]\nmon_host = 192.0.2.1\n")
    clock = iter([100.0, 101.0])
    # the module's clock only (raising=False: a module that never reads one is the case this test catches)
    monkeypatch.setattr(ceph_mod, "time", SimpleNamespace(monotonic=lambda: next(clock)), raising=False)

    def refused(self: Ceph, *args: str, **kw: object) -> None:
        raise ClusterError("`ceph status` failed: monclient(hunting): handle_auth_bad_method")

    monkeypatch.setattr(Ceph, "ceph", refused)
    with pytest.raises(ClusterError) as exc:
        Ceph(Connection(conf=str(conf))).probe(timeout=30)
    assert "within 30 s" not in exc.value.message
    assert "after 1.0 s (the command failed before its 30 s limit" in exc.value.message
    assert "handle_auth_bad_method" in exc.value.message and "192.0.2.1" in exc.value.message
    clock = iter([100.0, 130.2])
    with pytest.raises(ClusterError, match="within 30 s: "):
        Ceph(Connection(conf=str(conf))).probe(timeout=30)
