"""Per-daemon perf counters from the mgr's Prometheus module: every OSD, MON, MDS and RGW without host access.

On an attached multi-host cluster there is no local admin socket to read (fathom.servers.telemetry.perf_dump). The
active mgr already holds every daemon's counters (each daemon reports them every `mgr_stats_period` s, 5 by
default) and its `prometheus` module serves them over HTTP. This module finds that endpoint (`ceph mgr
services`), enables the module when it is off (a recorded change, undone with the run's other settings:
fathom.cluster.restore), reads `/metrics` with prometheus_client's text parser and turns each read into a
`perf dump`'s shape ({daemon: {section: {counter: value}}}), so fathom.results.usage.perf_deltas makes the point's
deltas and the store and the RGW reconciliation take them unchanged.

What the module exports, against a `perf dump` (checked on Ceph 16):
    only counters of priority PRIO_USEFUL or more, never histograms. OSD: op, op_r, op_w, op_rw, op_wip,
    op_in_bytes, op_out_bytes, op_r_out_bytes, op_w_in_bytes, op_rw_in_bytes, op_rw_out_bytes, the op*
    latency, process_latency and prepare_latency averages, recovery_ops, recovery_bytes, numpg,
    numpg_removing, stat_bytes, stat_bytes_used; bluestore: commit_lat, kv_flush_lat, kv_sync_lat,
    kv_final_lat, state_aio_wait_lat, throttle_lat, submit_lat, read_lat, onode hits and misses, compressed
    sizes; most of bluefs; objecter: op_active, op_r, op_w, op_rmw. RGW: req, failed_req, get, get_b, put,
    put_b, qlen, qactive, get_initial_lat, put_initial_lat, cache, gc, lc and pubsub counters. MON: mon
    sessions and elections, paxos. MDS: mds (requests, reply latency, caps, inodes), mds_cache, mds_log,
    mds_mem, mds_server, mds_sessions.
    Not exported (read them through the admin socket where there is one): osd subop*, pull/push, tier and
    agent counters, map and crc caches; bluestore kv_commit_lat and the state_*_lat but aio_wait, deferred
    and allocation counters; rocksdb.*; objecter op_send, op_reply and osdop_*; purge_queue.
Units are a perf dump's: a time average's sum is in seconds (the module divides nanoseconds by 1e9 as perf
dump does), bytes are bytes. An average comes as a _sum/_count pair, without avgtime: the deltas carry
{count, sum, avg = Δsum/Δcount} as for the admin socket. A gauge's delta is its change, as perf_deltas makes it.

From Reef (18) on, the module leaves the perf counters out by default (`mgr/prometheus/exclude_perf_counters`
true: cephadm clusters serve them from ceph-exporter daemons). Where that option is true, `enable` sets it to
false for the run, a recorded change put back at the end like the module's enabling, and says so (Exporter.via).

Values are as of each daemon's last report to the mgr and of the module's last collection (every
`scrape_interval`, 15 s by default): `Exporter.read_settled` waits for a collection that began after a
report the daemons made after a given moment, so nothing before that moment is missing.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families

from fathom.results import usage
from fathom.cluster.ceph import Ceph
from fathom.cluster.restore import Restorer, ceph_cmd, config_entry, module_entry, setting
from fathom.companion import Companion, Contribution, Live
from fathom.errors import ClusterError, FathomError

SOURCE = "mgr-prometheus"  # where a contribution's perf counters came from (its event's data.source)
MODULE = "prometheus"
# perf sections, as the module spells them (longest match wins: mds_cache before mds)
SECTIONS = ("osd", "bluestore", "bluefs", "rocksdb", "objecter", "mon", "paxos", "rgw", "rgw_op", "mds", "mds_cache",
            "mds_log", "mds_mem", "mds_server", "mds_sessions", "purge_queue")
OTHER_SECTIONS = ("bluestore_pricache",)  # bluestore-pricache(:data, :kv, ...): caches' sizes, not bluestore's
# the module's own figures under a perf section's prefix: from the OSD map, osd stats and health, not counters
NOT_COUNTERS = frozenset({"ceph_osd_up", "ceph_osd_in", "ceph_osd_weight", "ceph_osd_apply_latency_ms",
                          "ceph_osd_commit_latency_ms", "ceph_mon_quorum_status"})
COLLECTIONS = "ceph_prometheus_collect_duration_seconds_count"  # +1 per collection: how fresh a read is
DEFAULT_STATS_PERIOD = 5.0


@dataclass
class Scrape:
    """One read of /metrics: counters in a perf dump's shape, and which collection of the module they are."""

    dumps: dict[str, dict[str, dict[str, Any]]]  # daemon -> section -> counter -> value or {avgcount, sum}
    collections: float | None  # the module's collections so far (None: not exported)
    ts: float = field(default_factory=time.time)


def counter_path(metric: str) -> tuple[str, str] | None:
    """('osd', 'op_r') for `ceph_osd_op_r`; None for what is not a daemon's perf counter.

    The module writes section.counter as section_counter ('-' and '.' become '_', a trailing '+' or '-'
    `_plus` or `_minus`): the section is the longest known one the name starts with, and a counter's own
    '-' cannot be told from '_' (none of the exported ones has one).
    """
    if not metric.startswith("ceph_") or metric in NOT_COUNTERS or metric.endswith("_metadata"):
        return None
    rest = metric[len("ceph_"):]
    sec = max((s for s in SECTIONS + OTHER_SECTIONS if rest.startswith(s + "_")), key=len, default=None)
    if sec is None or sec in OTHER_SECTIONS or ":" in rest:
        return None
    name = rest[len(sec) + 1:]
    if name.startswith("0x"):  # a section per instance (RGW's objecter-0x...): its fixed-name twin is read
        return None
    for suffix, char in (("_plus", "+"), ("_minus", "-")):
        if name.endswith(suffix):
            name = name[: -len(suffix)] + char
    return sec, name


def _rgw_names(families: list[Any]) -> dict[str, str]:
    """RGW's instance ids (its mgr service id) -> its client name (client.rgw.NAME, as its admin socket has it)."""
    out = {}
    for fam in families:
        if fam.name == "ceph_rgw_metadata":
            for s in fam.samples:
                iid, daemon = s.labels.get("instance_id"), s.labels.get("ceph_daemon")
                if iid and daemon:
                    out[iid] = f"client.{daemon}"
    return out


def _daemon(labels: dict[str, str], rgw: dict[str, str]) -> str | None:
    """The daemon a sample is of. RGW's are labelled by instance id (`instance_id`, or `ceph_daemon` in a
    family an OSD created first, e.g. objecter's); other labels (per image, per pool) are not per daemon."""
    if set(labels) - {"ceph_daemon", "instance_id"}:
        return None
    who = labels.get("ceph_daemon") or labels.get("instance_id")
    if not who:
        return None
    return who if "." in who else rgw.get(who, f"rgw.{who}")


def parse(text: str) -> Scrape:
    """The daemons' perf counters in a /metrics text, as perf dumps (pairs X_sum/X_count as {avgcount, sum})."""
    families = list(text_string_to_metric_families(text))
    # the parser drops a counter's _total suffix from its family's name: the TYPE lines keep the true name
    totals = set(re.findall(r"^# TYPE (\S+_total) counter$", text, re.M))
    names = {f.name for f in families}
    rgw = _rgw_names(families)
    dumps: dict[str, dict[str, dict[str, Any]]] = {}
    collections: float | None = None
    for fam in families:
        if fam.name == COLLECTIONS:
            collections = max((s.value for s in fam.samples), default=None)
            continue
        name = fam.name + "_total" if fam.name + "_total" in totals else fam.name
        path = counter_path(name) if fam.type in ("counter", "gauge") else None
        if path is None:
            continue
        sec, counter = path
        half = None  # X_sum beside X_count: half of a long-running average, not a counter of its own
        for part, key, other in (("_sum", "sum", "_count"), ("_count", "avgcount", "_sum")):
            if name.endswith(part) and name[: -len(part)] + other in names:
                counter, half = counter[: -len(part)], key
        for s in fam.samples:
            daemon = _daemon(s.labels, rgw)
            if daemon is None:
                continue
            section = dumps.setdefault(daemon, {}).setdefault(sec, {})
            if half:
                section.setdefault(counter, {})[half] = _number(s.value)
            else:
                section[counter] = _number(s.value)
    return Scrape(dumps, collections)


def _number(v: float) -> float | int:
    """Whole numbers as ints, as a perf dump prints counts and bytes (the module writes every value as a float)."""
    return int(v) if v.is_integer() else v


def deltas(before: Scrape, after: Scrape) -> dict[str, dict[str, Any]]:
    """Per daemon, the counters' changes between two reads, as fathom.results.usage.perf_deltas gives them."""
    return usage.perf_deltas(before.dumps, after.dumps)


# ---- finding and enabling the module ---------------------------------------------------------

def find_endpoint(ceph: Ceph, timeout: float = 60.0, poll: float = 1.0) -> str:
    """The module's URL (`http://host:port/`) from `ceph mgr services`, waiting for it after an enable
    (the mgr restarts to load the module, then publishes it)."""
    deadline = time.monotonic() + timeout
    while True:
        url = (ceph.ceph("mgr", "services", timeout=30) or {}).get(MODULE)
        if url:
            return str(url) if str(url).endswith("/") else f"{url}/"
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"the mgr's {MODULE} module published no endpoint in `ceph mgr services` within {timeout:.0f} s",
                hint=f"enable it (`ceph mgr module enable {MODULE}`), check `ceph mgr module ls` (can_run) "
                     "and the active mgr's log; its python3-cherrypy3 must be installed")
        time.sleep(poll)


def enable(restorer: Restorer, bind: str | None = None, port: int | None = None, timeout: float = 60.0) -> str:
    """The module's URL, enabling it first when it is off: a change recorded in the restorer's journal.

    bind, port: where a module fathom enables listens (server_addr, server_port; recorded config changes
    too, set before it starts), e.g. the loopback address of fathom's own cluster and a free port, as the
    default port may be another cluster's on the same host. A module already on is left as it is.
    """
    if module_entry(restorer.ceph.ceph("mgr", "module", "ls"), MODULE) is not None:  # off, and able to run
        try:
            if bind is not None:
                restorer.config_set("mgr", f"mgr/{MODULE}/server_addr", bind)
            if port is not None:
                restorer.config_set("mgr", f"mgr/{MODULE}/server_port", str(port))
            restorer.mgr_module_enable(MODULE)
        except ClusterError as exc:
            if not DENIED.search(exc.message):
                raise
            raise ClusterError(f"the mgr's {MODULE} module is off and this client may not enable it: {exc.message}",
                               hint=f"have an admin enable it (`ceph mgr module enable {MODULE}`; fathom then "
                                    "leaves it on), give the client `mon 'allow *'`, or run without "
                                    "--mgr-prometheus") from None
    return find_endpoint(restorer.ceph, timeout)


EXCLUDE = f"mgr/{MODULE}/exclude_perf_counters"
SET_FOR_RUN = "set to false for the run"  # in Exporter.via when fathom changed EXCLUDE (check_put_back reads it)


def include_perf_counters(restorer: Restorer) -> str:
    """Make the module export perf counters, and say how they come: on a release whose module has
    exclude_perf_counters (Reef and later) and has it true, it is set false, a recorded change."""
    try:
        value = str(restorer.ceph.ceph("config", "get", "mgr", EXCLUDE, fmt_json=False, timeout=30)).strip()
    except ClusterError as exc:
        if "ENOENT" not in exc.message and "unrecognized" not in exc.message:
            raise
        return "the module exports them (this release has no exclude_perf_counters option)"
    if value.lower() != "true":
        return f"the module exports them ({EXCLUDE} is {value or 'unset'} on this cluster)"
    dump = restorer.ceph.ceph("config", "dump") or []
    cfg = config_entry(dump, "mgr", EXCLUDE, "false")
    entries = [cfg]
    if cfg is not None and cfg.prior is None:
        # the running module keeps the false it was told after a `config rm` (checked on Ceph 20): put back, the
        # default is set first, then removed (newest first), so the module stops exporting and the db is as found
        entries.append(setting(f"{EXCLUDE} in the running module", "true", "false",
                               ceph_cmd("config", "set", "mgr", EXCLUDE, "true")))
    try:
        restorer.record_and_apply(entries, "config", "set", "mgr", EXCLUDE, "false")
    except ClusterError as exc:
        if not DENIED.search(exc.message):
            raise
        raise ClusterError(f"the mgr's {MODULE} module leaves out the perf counters ({EXCLUDE} is true, this "
                           f"release's default) and this client may not change that: {exc.message}",
                           hint=f"have an admin run `ceph config set mgr {EXCLUDE} false`, give the client "
                                "`mon 'allow *'`, or run without --mgr-prometheus") from None
    return (f"{EXCLUDE} was true (this release's default: ceph-exporter serves them), {SET_FOR_RUN} "
            "and put back at its end")


DENIED = re.compile(r"EACCES|access denied|permission denied|not authorized", re.I)


def own_endpoint(attached: Any) -> tuple[str | None, int | None]:
    """Where a module fathom enables should listen: on fathom's own cluster, its address and a free port (the
    default 9283 may be another cluster's on this host); on a user's cluster, the module's own defaults."""
    local = getattr(attached, "local", None)
    if local is None:
        return None, None
    from fathom.cluster.localconf import LOOPBACK, free_port

    bind = (local.state() or {}).get("bind") or LOOPBACK
    return bind, free_port(bind)


def stats_period(ceph: Ceph) -> float:
    """How often the daemons report their counters to the mgr (`mgr_stats_period`, s)."""
    try:
        return float(ceph.ceph("config", "get", "mgr", "mgr_stats_period", timeout=30))
    except (FathomError, TypeError, ValueError):
        return DEFAULT_STATS_PERIOD


# ---- reading -------------------------------------------------------------------------------------

class Exporter:
    """Reads the module's /metrics; finds the endpoint again when the active mgr has moved."""

    def __init__(self, ceph: Ceph, url: str | None = None, period: float | None = None,
                 http_timeout: float = 10.0):
        self.ceph = ceph
        self.url = url or find_endpoint(ceph)
        self.period = period if period is not None else stats_period(ceph)
        self.http_timeout = http_timeout
        self.via: str | None = None  # how the module came to export perf counters (include_perf_counters)

    def text(self) -> str:
        try:
            return self._get()
        except urllib.error.HTTPError:
            raise  # the module answered (503: no collection yet)
        except OSError:
            self.url = find_endpoint(self.ceph, timeout=30)  # a failover moves the module to another mgr
            return self._get()

    def _get(self) -> str:
        with urllib.request.urlopen(self.url + "metrics", timeout=self.http_timeout) as r:
            return r.read().decode()

    def read(self) -> Scrape:
        return parse(self.text())

    def read_settled(self, since: float, timeout: float = 120.0, slack: float = 2.0, poll: float = 1.0,
                     counters: bool = True) -> Scrape:
        """A read holding every count made before `since` (epoch s).

        The daemons' next report after `since` reaches the mgr within the stats period; a collection seen
        to finish after that (and `slack` s more, for the collection's own run) began after it. The wait is
        up to a stats period plus a scrape interval (5 + 15 s by default). counters: wait for a collection that
        holds perf counters (False: any newer one, as when checking that they are gone).
        """
        deadline = time.monotonic() + timeout
        time.sleep(max(0.0, since + self.period + slack - time.time()))
        first: float | None = None
        last_error = "no read"
        while time.monotonic() < deadline:
            try:
                s = self.read()
            except (OSError, ValueError) as exc:  # 503 before the first collection, a restarting mgr
                last_error = str(exc)
            else:
                if s.collections is None:
                    return s  # a release without the count: as fresh as the wait made it
                if first is None or s.collections < first:  # the first seen, or a restarted module's
                    first = s.collections
                elif s.collections > first and (s.dumps or not counters):
                    return s
                last_error = f"collection {s.collections:g} still the one of before" if s.collections <= first \
                    else "a newer collection holds no perf counters"
            time.sleep(poll)
        raise ClusterError(f"the mgr's {MODULE} module at {self.url} gave no collection newer than "
                           f"{time.strftime('%H:%M:%S', time.localtime(since))} within {timeout:.0f} s "
                           f"({last_error})",
                           hint="check the active mgr's log and `ceph config get mgr mgr/prometheus/scrape_interval`")


def perf_counters_left(exporter: Exporter, timeout: float = 120.0) -> str | None:
    """After the run put exclude_perf_counters back: None when a collection begun after that leaves the perf
    counters out, as the user's setting says; else what the module still exports (the put-back did not take)."""
    try:
        scrape = exporter.read_settled(time.time(), timeout=timeout, counters=False)
    except (FathomError, OSError, ValueError) as exc:
        return f"the module could not be read to check: {getattr(exc, 'message', None) or exc}"
    left = sorted(d for d, secs in scrape.dumps.items() if d.startswith("osd.") and secs.get("osd"))
    return f"it still exports the perf counters of {', '.join(left[:5])}" if left else None


def check_put_back(ceph: Ceph, exporter: Exporter, event: Callable[[str, str], None],
                   say: Callable[[str], None]) -> None:
    """After the run put exclude_perf_counters back (it had set it false): when the module stays on (it was on
    before the run), its output must leave the perf counters out again, as the user's setting says: checked on a
    collection begun after the put-back, and recorded (`restore`), or warned of (`warning`)."""
    if SET_FOR_RUN not in (exporter.via or ""):
        return
    try:
        if MODULE not in (ceph.ceph("mgr", "module", "ls", timeout=30) or {}).get("enabled_modules", []):
            return
    except FathomError:
        return
    say(f"checking that the mgr's {MODULE} module leaves the perf counters out again (one collection)")
    left = perf_counters_left(exporter)
    if left is None:
        event("restore", f"the mgr's {MODULE} module leaves the perf counters out again, as {EXCLUDE} says "
                         "(checked on its output)")
    else:
        msg = (f"{EXCLUDE} is put back, but the running {MODULE} module does not follow it: {left}; "
               f"`ceph mgr module disable {MODULE}` and `enable` reload it")
        event("warning", msg)
        say(f"warning: {msg}")


# ---- the companion ------------------------------------------------------------------------------

class MgrPrometheusCompanion(Companion):
    """Every daemon's perf counter deltas over a point, from the mgr's prometheus module.

    Reads at start and stop, each settled (read_settled: up to a stats period plus a scrape interval), so the
    deltas hold exactly the point's counts when nothing else uses the cluster. Its perf_counters have the
    admin socket's shape; where they came from is in its event: kind `perf_counters`, data.source
    "mgr-prometheus" (SOURCE). A failed read is an event too, never a failed point.
    """

    def __init__(self, exporter: Exporter, timeout: float = 120.0):
        self.exporter = exporter
        self.timeout = timeout
        self._before: Scrape | None = None
        self._error: str | None = None

    def start(self, live: Live) -> None:
        self._before, self._error = None, None
        try:
            self._before = self.exporter.read_settled(time.time(), timeout=self.timeout)
        except (FathomError, OSError, ValueError) as exc:
            self._error = getattr(exc, "message", None) or str(exc)

    def stop(self) -> Contribution:
        after = None
        if self._before is not None:
            try:
                after = self.exporter.read_settled(time.time(), timeout=self.timeout)
            except (FathomError, OSError, ValueError) as exc:
                self._error = getattr(exc, "message", None) or str(exc)
        data: dict[str, Any] = {"source": SOURCE, "endpoint": self.exporter.url, "via": self.exporter.via}
        if after is None or self._before is None:
            return Contribution(events=[{"kind": "perf_counters", "data": {**data, "error": self._error},
                                         "message": f"no perf counters from the mgr's {MODULE} module: {self._error}"}])
        perf = deltas(self._before, after)
        data.update(daemons=sorted(perf), collections=[self._before.collections, after.collections],
                    read_at=[self._before.ts, after.ts])
        return Contribution(perf_counters=perf, counter_source=SOURCE, events=[
            {"kind": "perf_counters", "data": data,
             "message": f"perf counters of {len(perf)} daemon(s) from the mgr's {MODULE} module ({SOURCE})"}])
