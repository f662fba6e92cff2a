"""The mgr's Prometheus module as a source of every daemon's perf counters: the mapping of its metrics to a
perf dump's shape on text captured from a real Ceph 16 cluster, and on the session cluster its OSD op counts
against the admin socket's, enabled through the undo journal and put back as it was found."""

from __future__ import annotations

import time

import pytest
from conftest import QUICK_MGR_STATS

from fathom.results import usage
from fathom.servers import mgrprom, telemetry
from fathom.interfaces import reconcile
from fathom.cluster.ceph import Ceph, Connection
from fathom.cluster.journal import Journal
from fathom.cluster.local import LOOPBACK, LocalCluster, free_port
from fathom.cluster.restore import Restorer, module_entry
from fathom.companion import Live
from fathom.errors import ClusterError

# An excerpt of /metrics from a one-OSD cluster with an MDS and an RGW (Ceph 16.2.15), the metadata trimmed to
# a few labels; AFTER: the samples that changed by the next collection, after three 4 KiB
# `rados put`s, one `rados get` and two anonymous S3 requests.
BEFORE = """\
# HELP ceph_mon_quorum_status Monitors in quorum
# TYPE ceph_mon_quorum_status gauge
ceph_mon_quorum_status{ceph_daemon="mon.a"} 1.0
# HELP ceph_osd_metadata OSD Metadata
# TYPE ceph_osd_metadata untyped
ceph_osd_metadata{ceph_daemon="osd.0",hostname="vm",objectstore="bluestore",public_addr="127.0.0.1"} 1.0
# HELP ceph_rgw_metadata RGW Metadata
# TYPE ceph_rgw_metadata untyped
ceph_rgw_metadata{ceph_daemon="rgw.fathom",hostname="vm",instance_id="4148"} 1.0
# HELP ceph_osd_up OSD status up
# TYPE ceph_osd_up untyped
ceph_osd_up{ceph_daemon="osd.0"} 1.0
# HELP ceph_pool_wr DF pool wr
# TYPE ceph_pool_wr counter
ceph_pool_wr{pool_id="1"} 0.0
# HELP ceph_prometheus_collect_duration_seconds_count The amount of metrics gathered for this exporter
# TYPE ceph_prometheus_collect_duration_seconds_count counter
ceph_prometheus_collect_duration_seconds_count{method="get_health"} 24.0
# HELP ceph_mds_caps Capabilities
# TYPE ceph_mds_caps gauge
ceph_mds_caps{ceph_daemon="mds.a"} 0.0
# HELP ceph_mds_reply_latency_sum Reply latency Total
# TYPE ceph_mds_reply_latency_sum counter
ceph_mds_reply_latency_sum{ceph_daemon="mds.a"} 0.000301826
# HELP ceph_mds_reply_latency_count Reply latency Count
# TYPE ceph_mds_reply_latency_count counter
ceph_mds_reply_latency_count{ceph_daemon="mds.a"} 2.0
# HELP ceph_mds_cache_num_strays Stray dentries
# TYPE ceph_mds_cache_num_strays gauge
ceph_mds_cache_num_strays{ceph_daemon="mds.a"} 0.0
# HELP ceph_mds_mem_cap_plus Capabilities added
# TYPE ceph_mds_mem_cap_plus counter
ceph_mds_mem_cap_plus{ceph_daemon="mds.a"} 2.0
# HELP ceph_mds_sessions_session_count Session count
# TYPE ceph_mds_sessions_session_count gauge
ceph_mds_sessions_session_count{ceph_daemon="mds.a"} 0.0
# HELP ceph_objecter_op_r Read operations
# TYPE ceph_objecter_op_r counter
ceph_objecter_op_r{ceph_daemon="mds.a"} 0.0
ceph_objecter_op_r{ceph_daemon="osd.0"} 0.0
ceph_objecter_op_r{ceph_daemon="4148"} 304.0
# HELP ceph_mon_num_sessions Open sessions
# TYPE ceph_mon_num_sessions gauge
ceph_mon_num_sessions{ceph_daemon="mon.a"} 8.0
# HELP ceph_paxos_commit Commits
# TYPE ceph_paxos_commit counter
ceph_paxos_commit{ceph_daemon="mon.a"} 418.0
# HELP ceph_bluestore_pricache_cache_bytes current memory available for caches.
# TYPE ceph_bluestore_pricache_cache_bytes gauge
ceph_bluestore_pricache_cache_bytes{ceph_daemon="osd.0"} 2845415833.0
# HELP ceph_bluestore_pricache:data_committed_bytes total bytes committed,
# TYPE ceph_bluestore_pricache:data_committed_bytes gauge
ceph_bluestore_pricache:data_committed_bytes{ceph_daemon="osd.0"} 218103808.0
# HELP ceph_bluestore_commit_lat_sum Average commit latency Total
# TYPE ceph_bluestore_commit_lat_sum counter
ceph_bluestore_commit_lat_sum{ceph_daemon="osd.0"} 1.119531182
# HELP ceph_bluestore_commit_lat_count Average commit latency Count
# TYPE ceph_bluestore_commit_lat_count counter
ceph_bluestore_commit_lat_count{ceph_daemon="osd.0"} 701.0
# HELP ceph_osd_op Client operations
# TYPE ceph_osd_op counter
ceph_osd_op{ceph_daemon="osd.0"} 1359.0
# HELP ceph_osd_op_in_bytes Client operations total write size
# TYPE ceph_osd_op_in_bytes counter
ceph_osd_op_in_bytes{ceph_daemon="osd.0"} 21219.0
# HELP ceph_osd_op_out_bytes Client operations total read size
# TYPE ceph_osd_op_out_bytes counter
ceph_osd_op_out_bytes{ceph_daemon="osd.0"} 13311.0
# HELP ceph_osd_op_r Client read operations
# TYPE ceph_osd_op_r counter
ceph_osd_op_r{ceph_daemon="osd.0"} 916.0
# HELP ceph_osd_op_w Client write operations
# TYPE ceph_osd_op_w counter
ceph_osd_op_w{ceph_daemon="osd.0"} 63.0
# HELP ceph_osd_op_w_latency_sum Latency of write operation (including queue time) Total
# TYPE ceph_osd_op_w_latency_sum counter
ceph_osd_op_w_latency_sum{ceph_daemon="osd.0"} 1.167456622
# HELP ceph_osd_op_w_latency_count Latency of write operation (including queue time) Count
# TYPE ceph_osd_op_w_latency_count counter
ceph_osd_op_w_latency_count{ceph_daemon="osd.0"} 63.0
# HELP ceph_objecter_0x563bdd17f390_op_r Read operations
# TYPE ceph_objecter_0x563bdd17f390_op_r counter
ceph_objecter_0x563bdd17f390_op_r{instance_id="4148"} 140.0
# HELP ceph_rgw_failed_req Aborted requests
# TYPE ceph_rgw_failed_req counter
ceph_rgw_failed_req{instance_id="4148"} 0.0
# HELP ceph_rgw_get Gets
# TYPE ceph_rgw_get counter
ceph_rgw_get{instance_id="4148"} 0.0
# HELP ceph_rgw_get_b Size of gets
# TYPE ceph_rgw_get_b counter
ceph_rgw_get_b{instance_id="4148"} 0.0
# HELP ceph_rgw_get_initial_lat_sum Get latency Total
# TYPE ceph_rgw_get_initial_lat_sum counter
ceph_rgw_get_initial_lat_sum{instance_id="4148"} 0.0
# HELP ceph_rgw_get_initial_lat_count Get latency Count
# TYPE ceph_rgw_get_initial_lat_count counter
ceph_rgw_get_initial_lat_count{instance_id="4148"} 0.0
# HELP ceph_rgw_put Puts
# TYPE ceph_rgw_put counter
ceph_rgw_put{instance_id="4148"} 0.0
# HELP ceph_rgw_put_b Size of puts
# TYPE ceph_rgw_put_b counter
ceph_rgw_put_b{instance_id="4148"} 0.0
# HELP ceph_rgw_qlen Queue length
# TYPE ceph_rgw_qlen gauge
ceph_rgw_qlen{instance_id="4148"} 1.0
# HELP ceph_rgw_req Requests
# TYPE ceph_rgw_req counter
ceph_rgw_req{instance_id="4148"} 1.0
"""
AFTER_CHANGED = """\
ceph_prometheus_collect_duration_seconds_count{method="get_health"} 26.0
ceph_paxos_commit{ceph_daemon="mon.a"} 448.0
ceph_bluestore_commit_lat_sum{ceph_daemon="osd.0"} 1.122194864
ceph_bluestore_commit_lat_count{ceph_daemon="osd.0"} 704.0
ceph_osd_op{ceph_daemon="osd.0"} 1417.0
ceph_osd_op_in_bytes{ceph_daemon="osd.0"} 33507.0
ceph_osd_op_out_bytes{ceph_daemon="osd.0"} 17407.0
ceph_osd_op_r{ceph_daemon="osd.0"} 971.0
ceph_osd_op_w{ceph_daemon="osd.0"} 66.0
ceph_osd_op_w_latency_sum{ceph_daemon="osd.0"} 1.171447177
ceph_osd_op_w_latency_count{ceph_daemon="osd.0"} 66.0
ceph_objecter_0x563bdd17f390_op_r{instance_id="4148"} 141.0
ceph_rgw_req{instance_id="4148"} 3.0
"""


def after_text() -> str:
    """BEFORE with AFTER_CHANGED's samples in place of the same series'."""
    new = {line.rsplit(" ", 1)[0]: line for line in AFTER_CHANGED.splitlines()}
    return "\n".join(new.get(line.rsplit(" ", 1)[0], line) for line in BEFORE.splitlines()) + "\n"


# ---- the mapping (no cluster) -----------------------------------------------------------------------


def test_metric_names_map_to_perf_sections_and_the_modules_own_figures_are_left_out():
    assert mgrprom.counter_path("ceph_osd_op_r") == ("osd", "op_r")
    assert mgrprom.counter_path("ceph_osd_op_w_latency_sum") == ("osd", "op_w_latency_sum")
    assert mgrprom.counter_path("ceph_mds_cache_num_strays") == ("mds_cache", "num_strays")  # longest section
    assert mgrprom.counter_path("ceph_mds_caps") == ("mds", "caps")
    assert mgrprom.counter_path("ceph_mds_mem_cap_plus") == ("mds_mem", "cap+")
    assert mgrprom.counter_path("ceph_mds_mem_cap_minus") == ("mds_mem", "cap-")
    assert mgrprom.counter_path("ceph_paxos_commit") == ("paxos", "commit")
    for other in ("ceph_osd_up", "ceph_osd_metadata", "ceph_rgw_metadata", "ceph_mon_quorum_status", "ceph_pool_wr",
                  "ceph_osd_apply_latency_ms", "ceph_bluestore_pricache_cache_bytes",
                  "ceph_bluestore_pricache:data_committed_bytes", "ceph_objecter_0x563bdd17f390_op_r",
                  "ceph_health_status", "ceph_mgr_status"):
        assert mgrprom.counter_path(other) is None, other


def test_a_read_has_a_perf_dumps_shape_per_daemon():
    s = mgrprom.parse(BEFORE)
    assert set(s.dumps) == {"osd.0", "mon.a", "mds.a", "client.rgw.fathom"}
    assert s.collections == 24
    osd = s.dumps["osd.0"]
    assert osd["osd"] == {"op": 1359, "op_r": 916, "op_w": 63, "op_in_bytes": 21219, "op_out_bytes": 13311,
                          "op_w_latency": {"sum": 1.167456622, "avgcount": 63}}  # not up, not the metadata
    assert isinstance(osd["osd"]["op_w"], int)  # counts as a perf dump prints them
    assert osd["bluestore"] == {"commit_lat": {"sum": 1.119531182, "avgcount": 701}}  # no pricache sizes
    assert osd["objecter"] == {"op_r": 0}
    rgw = s.dumps["client.rgw.fathom"]  # named from ceph_rgw_metadata's instance id
    assert rgw["rgw"] == {"req": 1, "failed_req": 0, "get": 0, "get_b": 0, "put": 0, "put_b": 0, "qlen": 1,
                          "get_initial_lat": {"sum": 0, "avgcount": 0}}
    assert rgw["objecter"] == {"op_r": 304}  # the family an OSD labelled first, not the per-instance twin
    mds = s.dumps["mds.a"]
    assert mds["mds"] == {"caps": 0, "reply_latency": {"sum": 0.000301826, "avgcount": 2}}
    assert mds["mds_mem"] == {"cap+": 2} and mds["mds_cache"] == {"num_strays": 0}
    assert mds["mds_sessions"] == {"session_count": 0}  # a _count without a _sum is a counter of its own
    assert s.dumps["mon.a"] == {"mon": {"num_sessions": 8}, "paxos": {"commit": 418}}


def test_a_counter_named_total_keeps_its_name():
    # the parser drops `_total` from a counter family's name; osd.object_ctx_cache_total is one such counter
    text = ("# HELP ceph_osd_object_ctx_cache_total Object context cache lookups\n"
            "# TYPE ceph_osd_object_ctx_cache_total counter\n"
            'ceph_osd_object_ctx_cache_total{ceph_daemon="osd.3"} 5.0\n')
    assert mgrprom.parse(text).dumps == {"osd.3": {"osd": {"object_ctx_cache_total": 5}}}


def test_deltas_have_the_admin_sockets_shape_and_feed_the_rgw_reconciliation():
    d = mgrprom.deltas(mgrprom.parse(BEFORE), mgrprom.parse(after_text()))
    osd = d["osd.0"]
    assert osd["osd.op_w"] == 3 and osd["osd.op_in_bytes"] == 3 * 4096 and osd["osd.op_out_bytes"] == 4096
    lat = osd["osd.op_w_latency"]
    assert lat["count"] == 3 and lat["sum"] == pytest.approx(0.003990555) and lat["avg"] == pytest.approx(
        0.003990555 / 3)
    assert "osd.op_rw" not in osd and "objecter.op_r" not in osd  # unchanged: left out, as perf_deltas does
    assert d["mds.a"] == {} and d["mon.a"] == {"paxos.commit": 30}
    assert d["client.rgw.fathom"] == {"rgw.req": 2}
    assert reconcile.from_perf_deltas(d) == {"req": 2.0, "failed_req": 0.0, "get": 0.0, "get_b": 0.0, "put": 0.0,
                                             "put_b": 0.0}


# ---- enabling the module through the undo journal (no cluster) ------------------------------------

MODULE_LS = {  # `ceph mgr module ls` of the session cluster, module options left out
    "always_on_modules": ["balancer", "crash", "devicehealth", "orchestrator", "pg_autoscaler", "progress",
                          "rbd_support", "status", "telemetry", "volumes"],
    "enabled_modules": ["iostat"],
    "disabled_modules": [{"name": "prometheus", "can_run": True, "error_string": ""},
                         {"name": "dashboard", "can_run": False, "error_string": "No module named 'routes'"}],
}


def test_a_module_that_is_off_is_recorded_with_its_disable_as_the_undo():
    e = module_entry(MODULE_LS, "prometheus")
    assert e is not None and e.kind == "setting" and e.what == "mgr module prometheus"
    assert (e.prior, e.wanted, e.undo) == ("disabled", "enabled", "ceph mgr module disable prometheus")
    assert module_entry(MODULE_LS, "iostat") is None  # enabled already: nothing to undo
    assert module_entry(MODULE_LS, "balancer") is None  # always on
    assert module_entry({**MODULE_LS, "always_on_modules": {"pacific": ["prometheus"]}}, "prometheus") is None


def test_a_module_that_cannot_run_or_does_not_exist_is_an_error_naming_why():
    with pytest.raises(ClusterError, match="No module named 'routes'"):
        module_entry(MODULE_LS, "dashboard")
    with pytest.raises(ClusterError, match="no module named 'nosuch'"):
        module_entry(MODULE_LS, "nosuch")


# ---- on the session cluster ----------------------------------------------------------------------------

OSD_OPS = ("op", "op_r", "op_w", "op_rw", "op_in_bytes", "op_out_bytes", "op_w_in_bytes", "op_r_out_bytes",
           "op_latency", "op_r_latency", "op_w_latency")


def osd_ops(dumps: dict, osd: str) -> dict:
    """The OSD op counters of a perf dump or a module read; an average as (count, sum to the nanosecond)."""
    sec = dumps[osd]["osd"]
    return {k: (sec[k]["avgcount"], round(sec[k]["sum"], 9)) if isinstance(sec[k], dict) else sec[k]
            for k in OSD_OPS if k in sec}


def agreeing_reads(exporter: mgrprom.Exporter, cluster: LocalCluster, timeout: float = 120.0):
    """An admin socket dump and a module read with the same OSD op counts. The module has the OSDs' last
    report to the mgr (every stats period) as of its last collection, so reads are repeated until one agrees
    with the socket read just before it, i.e. no op came between the OSD's report and that read."""
    osds = [d for d in cluster.daemons() if d.kind == "osd"]
    deadline = time.monotonic() + timeout
    while True:
        sock = telemetry.perf_dump(osds, cluster.run_dir)
        try:
            read = exporter.read()
        except OSError as exc:  # 503 until the module's first collection
            read = mgrprom.Scrape({}, None)
            print(f"module not ready: {exc}")
        if all(o.name in read.dumps and osd_ops(read.dumps, o.name) == osd_ops(sock, o.name) for o in osds):
            return read, sock
        if time.monotonic() > deadline:
            pytest.fail(f"the module never agreed with the admin socket: {read.dumps.get('osd.0')} vs {sock}")
        time.sleep(1)


def prometheus_config(ceph: Ceph) -> list:
    return [e for e in ceph.ceph("config", "dump") if e.get("name", "").startswith("mgr/prometheus/")]


def wait_mgr_without_module(ceph: Ceph, timeout: float = 120.0) -> None:
    """The mgr restarts when a module is disabled: until it is back and publishes no prometheus endpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ceph.ceph("mgr", "dump").get("available") and "prometheus" not in (ceph.ceph("mgr", "services") or {}):
            return
        time.sleep(1)
    pytest.fail("the mgr did not come back without its prometheus endpoint")


def write_objects(ceph: Ceph, pool: str, names: list[str], path: str) -> None:
    for n in names:
        ceph.rados("-p", pool, "put", n, path, fmt_json=False)
    ceph.rados("-p", pool, "get", names[0], "/dev/null", fmt_json=False)


@pytest.fixture
def quick_mgr_stats(ceph: Ceph):
    """The session cluster's mgr collects every 5 s and its daemons report every 2 s (defaults 15 s and 5 s), for
    the test: each wait for a fresh collection waits up to one of each, never for a count it would miss. Removed
    again after it (the test compares the module's options with what it found, these among them)."""
    for opt, value in QUICK_MGR_STATS:
        ceph.ceph("config", "set", "mgr", opt, value, fmt_json=False)
    try:
        yield
    finally:
        for opt, _ in QUICK_MGR_STATS:
            ceph.ceph("config", "rm", "mgr", opt, fmt_json=False)


@pytest.mark.cluster
def test_module_counts_equal_the_admin_sockets_and_the_module_is_put_back(cluster, ceph, rados_pool, quick_mgr_stats,
                                                                          tmp_path):
    assert "prometheus" not in ceph.ceph("mgr", "module", "ls")["enabled_modules"]  # as found: off
    config_found = prometheus_config(ceph)
    with pytest.raises(ClusterError, match="published no endpoint") as exc:
        mgrprom.find_endpoint(ceph, timeout=0)
    assert "ceph mgr module enable prometheus" in (exc.value.hint or "")  # the error names the fix
    journal = Journal()
    restorer = Restorer(ceph, journal)
    names = [f"mgrprom-{i}" for i in range(8)]
    blob = tmp_path / "blob"
    blob.write_bytes(bytes(range(256)) * 256)  # 64 KiB
    try:
        url = mgrprom.enable(restorer, bind=LOOPBACK, port=free_port())
        assert url.startswith(f"http://{LOOPBACK}:")
        assert [(e.what, e.undo) for e in journal.entries] == [
            ("config mgr mgr/prometheus/server_addr", "ceph config rm mgr mgr/prometheus/server_addr"),
            ("config mgr mgr/prometheus/server_port", "ceph config rm mgr mgr/prometheus/server_port"),
            ("mgr module prometheus", "ceph mgr module disable prometheus")]
        assert mgrprom.enable(restorer, bind=LOOPBACK, port=free_port()) == url  # on now: left as it is
        assert len(journal.entries) == 3
        # Ceph 16's module exports the perf counters and has no option to leave them out: nothing to change
        assert "no exclude_perf_counters option" in mgrprom.include_perf_counters(restorer)
        assert len(journal.entries) == 3
        exporter = mgrprom.Exporter(ceph, url)

        read0, sock0 = agreeing_reads(exporter, cluster)
        companion = mgrprom.MgrPrometheusCompanion(exporter)
        companion.start(Live(None))  # type: ignore[arg-type]  # the companion reads nothing of the point
        write_objects(ceph, rados_pool, names, str(blob))
        got = companion.stop()
        read1, sock1 = agreeing_reads(exporter, cluster)
    finally:
        left = restorer.restore(lambda msg: None)
        for n in names:
            ceph.rados("-p", rados_pool, "rm", n, fmt_json=False, check=False)
    # the deltas of the same window, one from the module and one from the socket, agree counter by counter
    by_module, by_socket = mgrprom.deltas(read0, read1)["osd.0"], usage.perf_deltas(sock0, sock1)["osd.0"]
    for k in OSD_OPS:
        assert by_module.get(f"osd.{k}") == pytest.approx(by_socket.get(f"osd.{k}")), k
    assert by_socket["osd.op_w"] >= len(names) and by_socket["osd.op_w_in_bytes"] >= len(names) * blob.stat().st_size
    assert by_socket["osd.op_r"] >= 1
    # the companion's window lies inside that one and holds every write: its reads waited for fresh counts
    event = got.events[0]
    assert event["kind"] == "perf_counters" and event["data"]["source"] == "mgr-prometheus", event
    assert len(names) <= got.perf_counters["osd.0"]["osd.op_w"] <= by_socket["osd.op_w"]
    assert got.perf_counters["osd.0"]["osd.op_w_in_bytes"] >= len(names) * blob.stat().st_size
    # put back as found: the module off, its options not set, every entry marked undone
    assert left == [] and journal.pending() == [] and all(e.undone for e in journal.entries)
    wait_mgr_without_module(ceph)
    assert "prometheus" not in ceph.ceph("mgr", "module", "ls")["enabled_modules"]
    assert prometheus_config(ceph) == config_found


@pytest.mark.cluster
def test_a_client_that_may_not_enable_the_module_is_told_so(cluster, ceph, tmp_path):
    """A read-only client (`mon 'allow r'`): the enable is refused by the cluster, and the error says the module
    is off and this client may not enable it, with the fix; the module stays off."""
    keyring = tmp_path / "ro.keyring"
    ceph.ceph("auth", "get-or-create", "client.fathom-ro", "mon", "allow r", "mgr", "allow r", "-o", str(keyring),
              fmt_json=False)
    try:
        ro = Ceph(Connection(conf=str(cluster.conf_path), name="client.fathom-ro", keyring=str(keyring)))
        with pytest.raises(ClusterError, match="is off and this client may not enable it") as exc:
            mgrprom.enable(Restorer(ro, Journal()), bind=LOOPBACK, port=free_port())
        assert "ceph mgr module enable prometheus" in (exc.value.hint or "")
        assert "prometheus" not in ceph.ceph("mgr", "module", "ls")["enabled_modules"]
        assert prometheus_config(ceph) == []
    finally:
        ceph.ceph("auth", "rm", "client.fathom-ro", fmt_json=False)


def test_rgw_op_counters_have_a_section_of_their_own():
    """Squid's and Tentacle's RGW op counters (ceph_rgw_op_*) are rgw_op's, not the rgw section's op_* ones."""
    assert mgrprom.counter_path("ceph_rgw_op_put_obj_ops") == ("rgw_op", "put_obj_ops")
    assert mgrprom.counter_path("ceph_rgw_op_get_obj_lat_sum") == ("rgw_op", "get_obj_lat_sum")
    assert mgrprom.counter_path("ceph_rgw_req") == ("rgw", "req")
