"""The live view (fathom.live): Prometheus metrics and the live page during a run, and `fathom watch`.

Real components only: Debian's Prometheus scrapes `fathom run --metrics` during a run on the session's local
cluster, headless Chromium loads the page while the run goes and `fathom watch`'s page of a finished run, and
the figures each shows are checked against what the store holds.
"""

from __future__ import annotations

import errno
import itertools
import json
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FATHOM, run_fathom
from test_promquery import _stop, free_port
from test_report import CHROMIUM

from fathom.results import hdr
from fathom.errors import FathomError, UsageError
from fathom.live import buckets
from fathom.live.server import _bind_error, parse_addr
from fathom.live.state import second
from fathom.servers.promquery import PromSource
from fathom.results.store import Store

NULL_SUITE = """\
name: null-live
defaults: {engine: fathom-engine, interface: "null", runtime: RUNTIME, ramp_time: 0.5s, bs: 4k, iodepth: 4}
workloads:
  - {name: rr, rw: randread}
  - {name: mix, rw: randrw, rwmixread: 70, numjobs: 2}
"""


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _state(port: int) -> dict[str, Any]:
    return json.loads(_get(f"http://127.0.0.1:{port}/state"))


def _runs(db: Path) -> int:
    if not db.exists():
        return 0
    with Store(db) as st:
        return len(st.runs())


def _live_rows(db: Path, key: str | None = None) -> int:
    with Store(db, read_only=True) as st:
        sql, args = "SELECT count(*) FROM live_seconds", ()
        if key is not None:
            sql, args = sql + " WHERE key = ?", (key,)
        return int(st.db.execute(sql, args).fetchone()[0])


def _closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _wait(cond: Any, limit: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            if cond():
                return
        except (OSError, FathomError):  # not up yet
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"fathom ended before {what}: {proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, f"no {what} within {limit} s"
        time.sleep(0.2)


def _dom(url: str, tmp: Path) -> str:
    """The page as Chromium has it after its script ran (its timers given 2.5 s of virtual time)."""
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                        f"--user-data-dir={tmp / 'chromium-profile'}", "--virtual-time-budget=2500", "--dump-dom",
                        url], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "<body" in p.stdout, p.stderr[-2000:]
    return p.stdout


def _text(dom: str, el_id: str) -> str:
    m = re.search(rf'id="{el_id}"[^>]*>([^<]*)<', dom)
    assert m, f"no #{el_id} in the page"
    return m.group(1)


def _no_external(dom: str) -> None:
    """Nothing in the page names a resource elsewhere: no src/href/url() to another origin, no <link>."""
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', dom) + re.findall(r"url\(([^)]*)\)", dom)
    assert not [r for r in refs if "//" in r or r.startswith("http")], refs
    assert "<link" not in dom and "<script src" not in dom and "@import" not in dom


def _second(rec: dict[str, Any]) -> tuple[float, float | None]:
    ops = sum(int(o.get("ops") or 0) for o in rec["ops"].values())
    hists = [o["hist"] for o in rec["ops"].values() if o.get("hist")]
    h = hdr.merge(hists) if hists else None
    p99 = hdr.percentile(h, 99) / 1e6 if h is not None and h.get_total_count() else None
    return ops / float(rec.get("dt") or 1.0), p99


# --- the pieces ------------------------------------------------------------------------------------------------


def test_buckets_and_quantile_follow_the_hdr_histogram() -> None:
    """Bucket counts are exact counts of the HDR histogram; the quantile by Prometheus's rule lies in the
    bucket that holds the HDR histogram's own p99."""
    h = hdr.new()
    for v in [30_000] * 500 + [900_000] * 450 + [4_000_000] * 49 + [70_000_000]:
        h.record_value(v)
    counts, total = buckets.counts(h)
    assert total == 1000 and sum(counts) == 1000
    assert [(buckets.BOUNDS_S[i] if i < len(buckets.BOUNDS_S) else None, n) for i, n in enumerate(counts) if n] == \
        [(3.98107e-05, 500), (0.001, 450), (0.00630957, 49), (0.1, 1)]  # each value at most its bucket's bound
    cum = list(itertools.accumulate(counts))
    p99 = buckets.quantile(cum, 0.99)
    true_s = hdr.percentile(h, 99) / 1e9
    i = next(k for k, b in enumerate(buckets.BOUNDS_S) if b >= true_s)
    assert buckets.BOUNDS_S[i - 1] <= p99 <= buckets.BOUNDS_S[i], (p99, true_s)


def test_fast_percentiles_are_hdr_percentiles() -> None:
    """The page's per-second p50/p99 (one pass over the counts) are hdr.percentile's, the stored figures' rule."""
    rng = random.Random(7)
    for _ in range(100):
        h = hdr.new()
        for _ in range(rng.randint(1, 3000)):
            h.record_value(min(int(rng.lognormvariate(12, 2)) + 1, hdr.HIGHEST_NS))
        ps = (0.1, 50.0, 99.0, 99.9, 100.0)
        assert buckets.percentiles_ns(h, ps) == [hdr.percentile(h, p) for p in ps]


def _rec(host: str, ops: int, lat_ns: int, ramp: bool = False) -> dict[str, Any]:
    h = hdr.new()
    h.record_value(lat_ns, ops)
    return {"type": "interval", "t": 2.0, "dt": 1.0, "ts": 100.0, "ramp": ramp, "host": host,
            "ops": {"read": {"ops": ops, "bytes": ops * 4096, "errors": 1, "lat_mean_ns": lat_ns,
                             "hist": hdr.encode(h)}}, "cpu": {"user_s": 0.25, "sys_s": 0.25}}


def test_metrics_are_formatted_outside_the_states_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape holds the live state's lock only to copy what it shows: not one value of /metrics is formatted
    under it (the run's records wait on that lock), and concurrent scrapes of an unchanged state share one text."""
    import prometheus_client.exposition as pe

    from fathom.live import exposition
    from fathom.live.state import LiveState

    st = LiveState()
    st.run_start(1, "r", "s", "suite", 1)
    st.point_start(1, "w/iodepth=4", "w", "w read", {}, 10.0)
    st.interval({**_rec("local", 100, 200_000), "host": ""})
    held: list[bool] = []
    real = pe.floatToGoString
    monkeypatch.setattr(pe, "floatToGoString", lambda v: (held.append(st.lock.locked()), real(v))[1])
    body, ctype = exposition.render(exposition.registry(st))
    assert held and not any(held)
    assert b'fathom_ops_total{host="local"' in body and ctype.startswith("text/plain")
    render = exposition.Renderer(st)
    body = render()[0]
    n = len(held)
    assert render()[0] is body and len(held) == n  # nothing moved: the same text, not formatted again
    st.interval({**_rec("local", 100, 200_000), "host": ""})
    assert render()[0] != body and len(held) > n


def test_metrics_do_not_grow_with_the_points_finished() -> None:
    """A finished point's per-point series leave /metrics when the next point starts: after 5 points or 60 the
    text has the same lines (the running or last point's, the last finished point's figures, the run's series),
    and the run's own counters add every point's ops."""
    from fathom.live import exposition
    from fathom.live.state import LiveState

    def after(n: int) -> str:
        st = LiveState()
        st.run_start(1, "r", "s", "suite", n)
        for i in range(1, n + 1):
            st.point_start(i, f"w/iodepth={i}", "w", f"w read {i}", {}, 10.0)
            st.interval({**_rec("local", 100, 200_000), "host": ""})
            st.point_end("done", {"iops": 100.0, "bw_mib_s": 0.4, "p99_ms": 0.2}, None)
        return exposition.render(exposition.registry(st))[0].decode()

    few, many = after(5), after(60)
    assert len(many.splitlines()) == len(few.splitlines())
    assert 'point="w/iodepth=60"' in many and 'point="w/iodepth=59"' not in many
    assert 'fathom_run_ops_total{host="local",op="read",run="r",suite="s"} 6000.0' in many
    assert 'fathom_points_finished{run="r",suite="s"} 60.0' in many


def test_watch_flags_a_schedule_not_kept_as_the_runs_page_does(tmp_path: Path) -> None:
    """An open-loop point that did not keep its schedule is a flag on `fathom watch`'s page, the same flag the
    run's own page raises."""
    from fathom.live.state import LiveState
    from fathom.live.watch import StoreView

    m = {"iops": 900.0, "total_ios": 9000, "offered_rate_ops_s": 1000.0, "achieved_rate_ops_s": 900.0,
         "unissued_ops": 1000, "schedule_kept": False}
    db = tmp_path / "r.db"
    with Store(db) as st:
        run_id = st.create_run("open")
        st.record_point(run_id, 0, "w/rate=1000", "w", "fathom-engine", {"rw": "randread", "rate": 1000.0}, "done",
                        metrics=m)
        st.record_point(run_id, 1, "w/rate=10", "w", "fathom-engine", {"rw": "randread", "rate": 10.0}, "done",
                        metrics={**m, "schedule_kept": True})
    live = LiveState()
    for key, kept in (("w/rate=1000", False), ("w/rate=10", True)):
        live.point_start(1, key, "w", key, {"rate": 1000.0}, 10.0)
        live.point_end("done", {**m, "schedule_kept": kept}, None)
    view = StoreView(db, None)
    try:
        flags = view.snapshot()["flags"]
    finally:
        view.close()
    want = [{k: f[k] for k in ("kind", "what", "point", "message")} for f in live.snapshot()["flags"]]
    assert [{k: f[k] for k in ("kind", "what", "point", "message")} for f in flags] == want
    assert [f["kind"] for f in flags] == ["schedule"] and "1000 unissued" in flags[0]["message"]


def test_a_partial_last_second_is_counted_but_not_plotted(tmp_path: Path) -> None:
    """The engine's last, partial record (`tail`: a few ms of drain) is no second of the page's series, on the
    run's own page, in the seconds stored for `fathom watch` and on watch's page of a finished point; its ops
    are in the counters all the same."""
    from types import SimpleNamespace

    from fathom.live import exposition, seconds
    from fathom.live.state import LiveState
    from fathom.live.watch import StoreView

    recs = [{**_rec("", 100, 200_000), "t": float(i), "ts": 100.0 + i, "tick": i} for i in (1, 2, 3)]
    recs.append({**_rec("", 2, 9_000_000), "t": 3.004, "dt": 0.004, "ts": 103.004, "tick": 4, "tail": True})
    live = LiveState()
    live.point_start(1, "w/1", "w", "w", {}, 3.0)
    for r in recs:
        live.interval(r)
    assert [x["t"] for x in live.snapshot()["point"]["series"]] == [1.0, 2.0, 3.0]
    text = exposition.render(exposition.registry(live))[0].decode()
    assert 'fathom_ops_total{host="local",op="read",point="w/1"' in text and "} 302.0" in text

    db = tmp_path / "r.db"
    with Store(db) as st:
        run_id = st.create_run("r")
    w = seconds.Writer(db, run_id)
    w.point_start(SimpleNamespace(key="w/1", workload="w", label=lambda: "w", est_s=3.0, params={}), 1, 1)
    for r in recs:
        w.interval(r)
    w.close()  # every record queued has been handled
    assert w.seconds == 3
    with Store(db) as st:
        st.record_point(run_id, 0, "w/1", "w", "fathom-engine", {"rw": "randread"}, "done", intervals=recs)
        st.finish_run(run_id, "done")
    view = StoreView(db, None)
    try:
        assert [x["t"] for x in view.snapshot()["point"]["series"]] == [1.0, 2.0, 3.0]
    finally:
        view.close()


def test_the_running_points_seconds_are_stored_until_the_point_is(tmp_path: Path) -> None:
    """fathom.live.seconds: the running point's header, seconds and marks in the store as they come, the page's
    shape (LiveState.snapshot's point, the marks where the run's page puts them); gone when the point is stored,
    when the writer ends, when a new attempt of the run starts and when the run ends; a reader's open read
    transaction does not hold the writer up."""
    from types import SimpleNamespace

    from fathom.live import seconds
    from fathom.live.state import LiveState

    db = tmp_path / "r.db"
    with Store(db) as st:
        run_id, other = st.create_run("r"), st.create_run("other")
    pt = SimpleNamespace(key="rr/1", workload="rr", label=lambda: "rr randread", est_s=3.0,
                         params={"rate": 500, "ramp_time": 1.0})
    recs = [{**_rec("local", 100 * i, 1000 * i), "t": float(i), "ts": 100.0 + i} for i in (1, 2, 3)]
    reader = Store(db, read_only=True)
    reader.db.execute("BEGIN")  # a reader in the middle of a read, all along
    reader.db.execute("SELECT count(*) FROM live_seconds").fetchone()
    w = seconds.Writer(db, run_id)
    w.point_start(pt, 1, 2)
    for r in recs:
        w.interval(r)
    events = [{"kind": "fault", "message": "osd.0 down", "data": {"t_s": 1.5}},
              {"kind": "warning", "message": "not a mark"},
              {"kind": "steady", "message": "steady state at 2 s", "data": {"at_s": 2.0}}]  # 2 s after the ramp
    live = LiveState()
    live.point_start(1, pt.key, pt.workload, pt.label(), pt.params, pt.est_s)
    for r in recs:
        live.interval(r)
    for e in events:
        w.event(e)
        live.event(e)
    _wait(lambda: _live_rows(db) == 6, 10, "the header, 3 seconds and 2 marks")
    reader.db.execute("COMMIT")
    p = seconds.rows(reader.db, run_id, set(), 900)
    assert p is not None and (p["n"], p["key"], p["label"], p["offered_rate"], p["status"]) == (
        1, "rr/1", "rr randread", 500, "running")
    assert p["series"] == [second(r) for r in recs]
    assert p["marks"] == [{"t": 1.5, "kind": "fault", "message": "osd.0 down"},
                          {"t": 3.0, "kind": "steady", "message": "steady state at 2 s"}]
    assert p["marks"] == live.snapshot()["point"]["marks"]
    assert seconds.rows(reader.db, run_id, set(), 2)["series"] == [second(r) for r in recs[1:]]
    assert seconds.rows(reader.db, run_id, {"rr/1"}, 900) is None  # stored already: not the running point
    assert seconds.rows(reader.db, other, set(), 900) is None
    with Store(db) as st:
        st.record_point(run_id, 0, "rr/1", "rr", "fathom-engine", {}, "done", intervals=recs)
    assert _live_rows(db) == 0  # in the point's own transaction
    w.point_end(pt, "done", None, None)
    w.point_start(SimpleNamespace(**{**vars(pt), "key": "rr/2"}), 2, 2)
    w.interval(recs[0])
    _wait(lambda: _live_rows(db, "rr/2") == 2, 10, "the next point's rows")
    w.close()
    assert _live_rows(db) == 0 and w.seconds == 4 and w.cpu_s > 0
    with Store(db) as st:  # a killed attempt's rows: the next attempt's writer clears them; so does the run's end
        st.db.execute("INSERT INTO live_seconds (run_id, key, kind, t, data_json) VALUES (?, 'k', 'point', NULL, "
                      "'{}')", (run_id,))
        seconds.Writer(db, run_id).close()
        assert _live_rows(db) == 0
        st.db.execute("INSERT INTO live_seconds (run_id, key, kind, t, data_json) VALUES (?, 'k', 'point', NULL, "
                      "'{}')", (run_id,))
        st.finish_run(run_id, "done")
        assert _live_rows(db) == 0
    reader.close()


def test_many_hosts_are_series_of_their_own_and_counted_once() -> None:
    """A span of two hosts: one series per host from the engines' records, the merged record not added again;
    the ramp's latencies stay out of the histogram; histogram_quantile over both hosts sees both."""
    from fathom.live import exposition
    from fathom.live.observer import Observer
    from fathom.live.state import LiveState

    st = LiveState()
    obs = Observer(st)
    st.point_start(1, "w/iodepth=4", "w", "w read", {"rate": 500.0}, 10.0)
    for ramp in (True, False):
        recs = [_rec("root@a", 100, 200_000, ramp), _rec("root@b", 300, 5_000_000, ramp)]
        obs.span(recs)
        h = hdr.merge([r["ops"]["read"]["hist"] for r in recs])
        obs.interval({**recs[0], "host": "", "ops": {"read": {"ops": 400, "bytes": 400 * 4096, "errors": 2,
                                                                "hist": hdr.encode(h)}}})
    text = exposition.render(exposition.registry(st))[0].decode()

    def val(metric: str, **labels: str) -> float:
        sel = [ln for ln in text.splitlines() if ln.startswith(metric + "{")
               and all(f'{k}="{v}"' in ln for k, v in labels.items())]
        assert len(sel) == 1, (metric, labels, sel)
        return float(sel[0].rsplit(" ", 1)[1])

    assert val("fathom_ops_total", host="root@a") == 200 and val("fathom_ops_total", host="root@b") == 600
    assert val("fathom_errors_total", host="root@b") == 2
    assert val("fathom_latency_seconds_count", host="root@a") == 100  # the ramp's second left out
    assert val("fathom_engine_cpu_seconds_total", host="root@a") == 1.0
    assert val("fathom_ops_per_second") == 400 and val("fathom_offered_ops_per_second") == 500
    assert 'host=""' not in text and 'host="local"' not in text
    cum = [0] * (len(buckets.BOUNDS_S) + 1)
    for host in ("root@a", "root@b"):
        for i, le in enumerate([f"{b:g}" for b in buckets.BOUNDS_S] + ["+Inf"]):
            cum[i] += int(val("fathom_latency_seconds_bucket", host=host, le=le))
    assert 3.98e-3 <= buckets.quantile(cum, 0.5) <= 6.31e-3  # b's 300 ops at 5 ms hold the median
    assert 1.58e-4 <= buckets.quantile(cum, 0.2) <= 2.52e-4  # a's at 0.2 ms the lowest quarter


def test_addresses_and_bind_errors_are_clear() -> None:
    assert parse_addr("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_addr("[::1]:9") == ("::1", 9)
    assert parse_addr(":9464") == ("127.0.0.1", 9464)  # no address: loopback, never every interface
    for bad in ("9464", "host:port", "1.2.3.4:70000"):
        with pytest.raises(UsageError, match="expected ADDR:PORT"):
            parse_addr(bad)
    # root may bind any port, so the refusal a user gets below 1024 is checked on its errno
    e = _bind_error(OSError(errno.EACCES, "Permission denied"), "0.0.0.0:80", "0.0.0.0", 80, "--metrics")
    assert "not allowed" in e.message and "above 1024" in (e.hint or "")


def test_a_scrape_abandoned_mid_response_is_dropped_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    """A client that asks for /metrics and closes at once (a scrape past its timeout): no traceback, nothing at
    all on the run's stderr, and the server goes on answering."""
    import threading

    from fathom.live.server import LiveServer

    gone = threading.Event()

    def metrics() -> tuple[bytes, str]:
        gone.wait(30)  # answered once the client has gone (if answered at all)
        return b"x" * (8 << 20), "text/plain"

    server = LiveServer("127.0.0.1:0", lambda: {"ok": 1}, metrics)
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port)) as c:
                c.sendall(b"GET /metrics HTTP/1.1\r\nHost: fathom\r\n\r\n")
        gone.set()
        assert json.loads(_get(f"http://127.0.0.1:{server.port}/state")) == {"ok": 1}
    finally:
        server.close()  # waits for every request's thread
    assert capfd.readouterr().err == ""


def test_a_port_alone_listens_on_loopback_and_the_address_printed_is_the_one_bound() -> None:
    """`--metrics :PORT` binds 127.0.0.1 only; the URL printed names the address the socket really has (every
    address when that was asked for, the address a name resolved to)."""
    from fathom.live.server import LiveServer

    for addr, bound, shown in ((":0", "127.0.0.1", "127.0.0.1"), ("0.0.0.0:0", "0.0.0.0", "0.0.0.0"),
                               ("localhost:0", "127.0.0.1", "127.0.0.1")):
        server = LiveServer(addr, dict, None)
        try:
            host, port = server.httpd.socket.getsockname()[:2]
            assert host == bound, (addr, host)
            assert server.url == f"http://{shown}:{port}/", (addr, server.url)
        finally:
            server.close()


def test_busy_port_and_bad_address_fail_before_the_run(tmp_path: Path, engine_ready: Path) -> None:
    suite = tmp_path / "null.yaml"
    suite.write_text(NULL_SUITE.replace("RUNTIME", "2s"))
    db = tmp_path / "r.db"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        p = run_fathom("run", str(suite), "--db", str(db), "--metrics", f"127.0.0.1:{port}", timeout=60)
    assert p.returncode == 2 and f"port {port} is busy" in p.stderr and "choose a free port" in p.stderr, p.stderr
    p = run_fathom("run", str(suite), "--db", str(db), "--metrics", "192.0.2.1:9464", timeout=60)
    assert p.returncode == 2 and "not an address of this host" in p.stderr, p.stderr
    p = run_fathom("watch", "--db", str(db), "--listen", "nonsense", timeout=60)
    assert p.returncode != 0
    assert _runs(db) == 0  # nothing was run


# --- Prometheus and the page during a run on the local cluster ---------------------------------------------------


@pytest.fixture
def prom_scraping(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """Debian's Prometheus scraping a port fathom will serve on, every second; yields (its URL, that port)."""
    assert shutil.which("prometheus"), "prometheus not installed: `make deps` installs it (Debian package)"
    tmp = Path(tempfile.mkdtemp(prefix="fathom-live-prom-"))
    port, prom_port = free_port(), free_port()
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: fathom\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
    p = subprocess.Popen(["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                          "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "w"),
                         stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{prom_port}"
        _wait(lambda: PromSource(url, timeout=2).query("up") is not None, 60, "Prometheus answering")
        yield url, port
    finally:
        _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def test_prometheus_and_the_page_during_a_cluster_run(prom_scraping, cluster, rados_pool, tmp_path: Path) -> None:
    url, port = prom_scraping
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: live\ncluster: {{kind: attached, conf: {cluster.conf_path}, keyring: "
                     f"{cluster.keyring_path}}}\ndefaults: {{engine: fathom-engine, interface: rados, pool: "
                     f"{rados_pool}, bs: 4k, iodepth: 4, runtime: 12s, ramp_time: 1s}}\n"
                     "workloads: [{name: w, rw: write}]\n")
    db = tmp_path / "r.db"
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), "--metrics", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: len((_state(port)["point"] or {}).get("series") or []) >= 3, 120, "3 seconds of the point",
              proc)
        page = f"http://127.0.0.1:{port}/"
        dom1 = _dom(page, tmp_path)
        time.sleep(2.5)
        dom2 = _dom(page, tmp_path)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert _closed(port), "the run ended and left its port open"
    with Store(db) as st:
        run = st.run("latest")
        pt = st.points(run.id)[0]
        recs = [r for r in st.timeline(pt["id"]) if r.get("t") is not None]
    by_t = {round(float(r["t"])): r for r in recs}

    # the page: it changed, and the second it shows is the stored second, to the digits it shows
    for dom in (dom1, dom2):
        _no_external(dom)
        assert _text(dom, "status") == "running" and run.name in _text(dom, "title")
        iops, p99 = _second(by_t[int(_text(dom, "now-t"))])
        assert _text(dom, "now-iops") == f"{iops:.0f}" and _text(dom, "now-p99") == f"{p99:.3f}"
    assert int(_text(dom2, "now-t")) > int(_text(dom1, "now-t"))
    assert "<svg" in dom1 and "polyline" in dom2

    prom = PromSource(url, timeout=10)
    # IOPS: every scraped value of fathom_ops_per_second is the stored figure of a second that had ended by the scrape
    got = prom.query("fathom_ops_per_second[5m]")["result"]
    assert len(got) == 1 and got[0]["metric"]["run"] == run.name and got[0]["metric"]["point"] == pt["key"]
    samples = [(float(ts), float(v)) for ts, v in got[0]["values"]]
    assert len(samples) >= 8, samples
    for ts, v in samples:
        near = [_second(r)[0] for r in recs if ts - 3.0 <= float(r["ts"]) <= ts + 0.5]
        assert any(abs(v - s) <= 1e-6 * max(s, 1) for s in near), (ts, v, near)
    # p99: histogram_quantile over the last scrape's buckets is the stored seconds' histograms, bucketed
    q = "histogram_quantile(0.99, sum by (le) (last_over_time(fathom_latency_seconds_bucket[5m])))"
    p99_prom = float(prom.query(q)["result"][0]["value"][1])
    n_prom = int(float(prom.query("sum(last_over_time(fathom_latency_seconds_count[5m]))")["result"][0]["value"][1]))
    measured = [r for r in recs if not r.get("ramp")]
    cum_n = list(itertools.accumulate(sum(hdr.count(o["hist"]) for o in r["ops"].values() if o.get("hist"))
                                      for r in measured))
    assert n_prom in cum_n, (n_prom, cum_n)  # a scrape sees whole seconds
    k = cum_n.index(n_prom) + 1
    assert k >= len(measured) - 2  # the last scrape came within the point's last seconds
    counts = [0] * (len(buckets.BOUNDS_S) + 1)
    for r in measured[:k]:
        for o in r["ops"].values():
            counts = [a + b for a, b in zip(counts, buckets.counts(hdr.decode(o["hist"]))[0])]
    assert p99_prom == pytest.approx(buckets.quantile(list(itertools.accumulate(counts)), 0.99), rel=1e-6)
    stored_p99_s = pt["metrics"]["p99_ms"] / 1e3
    assert stored_p99_s / 1.6 <= p99_prom <= stored_p99_s * 1.6  # within one bucket's width of the point's p99
    assert "fathom_engine_cpu_seconds_total" in str(prom.query("fathom_engine_cpu_seconds_total[5m]"))


# --- Ctrl-C, and watchers ----------------------------------------------------------------------------------------


def test_ctrl_c_closes_the_port(tmp_path: Path, engine_ready: Path) -> None:
    suite = tmp_path / "null.yaml"
    suite.write_text(NULL_SUITE.replace("RUNTIME", "60s"))
    port = free_port()
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(tmp_path / "r.db"), "--metrics",
                             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: b"fathom_ops_total{" in _get(f"http://127.0.0.1:{port}/metrics"), 60, "ops exposed", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _closed(port)


def test_the_final_state_is_served_after_the_run_ends(tmp_path: Path, engine_ready: Path) -> None:
    """--metrics-linger: once the run has ended its server goes on answering, with the run's final status, the
    last point's state and every op of its last second; a Ctrl-C ends the wait, and the run's exit code stands."""
    suite = tmp_path / "null.yaml"
    suite.write_text(NULL_SUITE.replace("RUNTIME", "2s"))
    db = tmp_path / "r.db"
    port = free_port()
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), "--metrics", f"127.0.0.1:{port}",
                             "--metrics-linger", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        _wait(lambda: b"fathom_ops_total{" in _get(url), 60, "ops exposed", proc)  # someone scrapes during the run
        _wait(lambda: b'status="done"' in _get(url), 120, "the run's final status", proc)
        text = _get(url).decode()
        assert proc.poll() is None  # still serving
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "serving the final state 600 s more" in err
    assert _closed(port)
    with Store(db) as st:
        last = st.points(st.run("latest").id)[-1]
        ops = sum(int(o.get("ops") or 0) for r in st.intervals(last["id"]) for o in (r.get("ops") or {}).values())

    def values(metric: str) -> list[float]:
        return [float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(metric + "{")]

    assert values("fathom_points_finished") == [2.0]
    states = [ln for ln in text.splitlines() if ln.startswith("fathom_point_state{") and ln.endswith(" 1.0")]
    assert len(states) == 1 and 'state="done"' in states[0] and f'point="{last["key"]}"' in states[0], states
    assert 'fathom_run_info{kind="suite",run=' in text and 'status="done"' in text
    assert ops > 0 and sum(values("fathom_ops_total")) == ops  # the last second's ops included


def test_two_watchers_follow_a_run_and_show_its_final_state(tmp_path: Path, engine_ready: Path) -> None:
    """Two `fathom watch` and a reader holding a read transaction open beside a run another process writes: the
    watchers show the running point's seconds as they come (they are what is stored when it ends), a point's live
    rows are gone once it is stored, and the run is not slowed: its seconds keep coming while the reader reads."""
    suite = tmp_path / "null.yaml"
    suite.write_text(NULL_SUITE.replace("RUNTIME", "4s"))
    db = tmp_path / "r.db"
    run = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    ports = [free_port(), free_port()]
    watchers: list[subprocess.Popen] = []
    seen: dict[str, list[dict[str, Any]]] = {}  # point key -> the seconds a watcher showed while it ran

    def running_seconds(port: int, n: int) -> bool:
        p = _state(port)["point"]
        if p is not None and p["status"] == "running" and len(p["series"]) >= n:
            seen[p["key"]] = p["series"]
            return True
        return False

    try:
        _wait(lambda: _runs(db) > 0, 30, "the run in the store", run)
        for port in ports:
            watchers.append(subprocess.Popen([FATHOM, "watch", "--db", str(db), "--listen", f"127.0.0.1:{port}"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        for port, w in zip(ports, watchers):
            _wait(lambda port=port: _state(port)["run"]["status"] == "running", 30, "a watcher's page", w)
        reader = Store(db, read_only=True)  # a read transaction held open while the run writes
        reader.db.execute("BEGIN")
        reader.db.execute("SELECT count(*) FROM intervals").fetchone()
        _wait(lambda: running_seconds(ports[0], 2), 30, "the running point's seconds in a watcher", run)
        _wait(lambda: running_seconds(ports[1], 3), 30, "more of them in the other watcher", run)
        reader.db.execute("COMMIT")
        reader.close()
        _wait(lambda: all(_state(p)["done"] >= 1 for p in ports), 60, "the first point in both watchers", run)
        with Store(db, read_only=True) as st:
            first = st.points(st.run("latest").id)[0]["key"]
        _wait(lambda: _live_rows(db, first) == 0, 10, "the stored point's live rows deleted", run)
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err  # the readers never blocked the writer
        _wait(lambda: all(_state(p)["run"]["status"] == "done" for p in ports), 10, "the final state")
        dom = _dom(f"http://127.0.0.1:{ports[1]}/", tmp_path)
    finally:
        for p in [run, *watchers]:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
    assert all(_closed(p) for p in ports)
    _no_external(dom)
    with Store(db) as st:
        pts = st.points(st.run("latest").id)
        stored = {p["key"]: [second(r) for r in st.timeline(p["id"]) if r.get("t") is not None] for p in pts}
    assert _live_rows(db) == 0  # the run ended: no live row is left
    assert seen
    for key, series in seen.items():  # what the watchers showed of a running point is what its stored point says
        by_t = {x["t"]: x for x in stored[key]}
        assert [x["t"] for x in series] == [x["t"] for x in stored[key]][:len(series)]
        assert all(x == by_t[x["t"]] for x in series), (series, stored[key])
    assert _text(dom, "status") == "done" and _text(dom, "done") == "2" and _text(dom, "planned") == "2"
    rows = re.findall(r'<tr data-key="([^"]+)">.*?<td class="iops">([^<]*)</td>.*?<td class="p99">([^<]*)</td>',
                      dom)
    # the page rounds as JavaScript's toFixed does (a half up; Python's format: a half to even)
    assert [k for k, _, _ in rows] == [p["key"] for p in pts]
    for (_, i, p99), p in zip(rows, pts):
        assert abs(float(i) - p["metrics"]["iops"]) <= 0.5 and abs(float(p99) - p["metrics"]["p99_ms"]) <= 5e-4


# --- the page's charts in Chromium, on a null run --------------------------------------------------------------

# two workloads of two points: closed loop, then open loop (each point offered its rate) stopping at steady state
PAGE_SUITE = """\
name: page-live
defaults: {engine: fathom-engine, interface: "null", ramp_time: 0.5s, bs: 4k, iodepth: 4, rw: randread}
workloads:
  - {name: closed, runtime: 2s, sweep: {iodepth: [2, 4]}}
  - name: open
    delay_us: 1000
    steady_state: {metric: iops, window_s: 2s, criteria: {deviation: 50%}, max_s: 4s}
    sweep: {rate: [300, 600]}
"""


def _svg(dom: str, el_id: str) -> str:
    m = re.search(rf'<svg id="{el_id}"[^>]*>(.*?)</svg>', dom, re.S)
    assert m, f"no svg #{el_id} in the page"
    return m.group(1)


def _elements(svg: str, tag: str) -> list[dict[str, str]]:
    """Each <tag> of an svg as its attributes."""
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', a)) for a in re.findall(rf"<{tag}\b([^>]*)>", svg)]


def _xy(polyline: dict[str, str]) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in polyline["points"].split())]


def _cells(dom: str, key: str) -> dict[str, str]:
    """A finished point's row of the page's table: its cells by class."""
    m = re.search(rf'<tr data-key="{re.escape(key)}">(.*?)</tr>', dom, re.S)
    assert m, f"no row of {key}"
    return {c.split()[-1]: v for c, v in re.findall(r'<td class="([^"]+)">([^<]*)</td>', m.group(1))}


@pytest.fixture(scope="module")
def page_run(tmp_path_factory: pytest.TempPathFactory, engine_ready: Path) -> dict[str, Any]:
    """A real null-target `fathom run --metrics` of PAGE_SUITE: its page as Chromium draws it once the run has
    ended (the final state, served on by --metrics-linger), the same run's page from `fathom watch`, and the stored
    points."""
    tmp = tmp_path_factory.mktemp("page")
    suite, db, port, wport = tmp / "page.yaml", tmp / "r.db", free_port(), free_port()
    suite.write_text(PAGE_SUITE)
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), "--metrics", f"127.0.0.1:{port}",
                             "--metrics-linger", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watch = None
    try:
        _wait(lambda: _state(port)["run"]["status"] == "done", 120, "the run's final state", proc)
        got: dict[str, Any] = {"dom": _dom(f"http://127.0.0.1:{port}/", tmp)}
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        watch = subprocess.Popen([FATHOM, "watch", "--db", str(db), "--listen", f"127.0.0.1:{wport}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait(lambda: _state(wport)["run"]["status"] == "done", 30, "watch's page", watch)
        got["watch_dom"] = _dom(f"http://127.0.0.1:{wport}/", tmp)
    finally:
        for p in (proc, watch):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
    with Store(db) as st:
        got["points"] = st.points(st.run("latest").id)
    return got


@pytest.mark.parametrize("page", ["dom", "watch_dom"])
def test_the_finished_points_are_a_curve_per_workload(page_run: dict[str, Any], page: str) -> None:
    """The finished points' chart draws each workload as a curve of its own, named in its legend, and each point as
    a dot of its own (its key): no line runs from one workload's points to another's."""
    pts = page_run["points"]
    curve = _svg(page_run[page], "chart-curve")
    workloads = ["closed", "open"]
    assert [p["workload"] for p in pts] == ["closed", "closed", "open", "open"]
    lines = [x for x in _elements(curve, "polyline") if not x.get("stroke-dasharray")]
    assert max(len(_xy(x)) for x in lines) == 2, lines  # one workload's two points, never the run's four
    assert [x.get("data-series") for x in lines] == workloads
    assert [t for t in re.findall(r'<text class="legend"[^>]*>([^<]*)<', curve) if t in workloads] == workloads
    for w in workloads:
        dots = [d["data-key"] for d in _elements(curve, "circle") if d.get("data-series") == w]
        assert dots == [p["key"] for p in pts if p["workload"] == w]


@pytest.mark.parametrize("page", ["dom", "watch_dom"])
def test_a_point_that_reached_steady_state_shows_it_after_it_ended(page_run: dict[str, Any], page: str) -> None:
    """A point that stopped at steady state keeps its mark once the next point has started and after the run: its
    row says when, its dot is ringed, and the last point's chart marks it at its second (the ramp plus the measured
    seconds the watch counts)."""
    dom, pts = page_run[page], page_run["points"]
    steady = [p for p in pts if p["metrics"].get("steady_s") is not None]
    assert [p["workload"] for p in steady] == ["open", "open"], [p["metrics"].get("steady_state") for p in pts]
    for p in pts:
        want = f"reached at {p['metrics']['steady_s']:.0f} s" if p in steady else "-"
        assert _cells(dom, p["key"])["steady"] == want
    ringed = [d["data-key"] for d in _elements(_svg(dom, "chart-curve"), "circle") if d.get("data-steady")]
    assert ringed == [p["key"] for p in steady]
    last = pts[-1]
    at = last["params"]["ramp_time"] + last["metrics"]["steady_s"]
    marks = [m for m in _elements(_svg(dom, "chart-ops"), "line") if m.get("data-kind") == "steady"]
    assert [float(m["data-t"]) for m in marks] == [pytest.approx(at, abs=1e-3)], marks
    assert f"steady at {at:.1f} s" in _text(dom, "marks")


@pytest.mark.parametrize("page", ["dom", "watch_dom"])
def test_an_open_loop_points_offered_rate_is_drawn_beside_what_it_achieved(page_run: dict[str, Any],
                                                                          page: str) -> None:
    """The running (here the last) open-loop point's chart draws its offered rate, a level line named in the legend,
    beside the ops/s achieved each second; the finished points' chart draws each open-loop workload's offered rates
    beside its IOPS, and the table has them as stored."""
    dom, pts = page_run[page], page_run["points"]
    last = pts[-1]
    assert last["params"]["rate"] == 600 and _text(dom, "now-offered") == "600"
    ops = {x["data-series"]: _xy(x) for x in _elements(_svg(dom, "chart-ops"), "polyline")}
    assert set(ops) == {"achieved ops/s", "offered ops/s"}
    assert len(ops["offered ops/s"]) == len(ops["achieved ops/s"]) >= 2
    assert len({y for _, y in ops["offered ops/s"]}) == 1  # the one rate offered all along
    offered = [x for x in _elements(_svg(dom, "chart-curve"), "polyline") if x.get("data-series") == "open offered"]
    assert len(offered) == 1 and len(_xy(offered[0])) == 2 and offered[0].get("stroke-dasharray")
    for p in pts:
        rate = p["metrics"].get("offered_rate_ops_s")
        assert _cells(dom, p["key"])["offered"] == ("-" if rate is None else f"{rate:.0f}")


def test_bench_metrics_during_a_rados_bench(cluster, rados_pool, tmp_path: Path) -> None:
    """`fathom bench rados --metrics`: the bench's seconds are exposed while it runs, the port closed after."""
    port = free_port()
    proc = subprocess.Popen([FATHOM, "bench", "rados", "-p", rados_pool, "4", "write", "-t", "4", "-b", "4K",
                             "--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path), "--db",
                             str(tmp_path / "b.db"), "--metrics", f"127.0.0.1:{port}", "--run-name", "live"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: list[float] = []
    try:
        def exposed() -> bool:
            s = _state(port)
            if s["point"] and s["point"]["series"]:
                seen.append(s["point"]["series"][-1]["iops"])
            return len(seen) >= 2

        _wait(exposed, 60, "two seconds of the bench", proc)
        metrics = _get(f"http://127.0.0.1:{port}/metrics").decode()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert _closed(port)
    assert all(v > 0 for v in seen)
    with Store(tmp_path / "b.db") as st:
        run = st.run("latest")
        pt = st.points(run.id)[0]
        recs = st.timeline(pt["id"])
    # the labels are the names the bench is stored under (`fathom ls`, `fathom show`)
    assert run.name == "bench-rados-write-live"
    assert f'fathom_run_info{{kind="bench",run="{run.name}"' in metrics
    ops = [ln for ln in metrics.splitlines() if ln.startswith("fathom_ops_total{")]
    assert ops and all(f'point="{pt["key"]}"' in ln and f'run="{run.name}"' in ln for ln in ops), ops
    stored = {round(_second(r)[0], 6) for r in recs}
    assert all(round(v, 6) in stored for v in seen), (seen, stored)  # the page's seconds are the stored ones
    run_fathom("cleanup", "-p", rados_pool, "--run-name", "live", "--conf", str(cluster.conf_path), "--keyring",
               str(cluster.keyring_path), timeout=120)


# --- the exposition by Prometheus' own rules: promtool, histogram_quantile ---------------------------------------

# the names renamed to Prometheus' conventions (base units, ratios): old -> new, each old one still exported for one
# version (DEPRECATED in its HELP); the factor takes an old name's figure to its new unit
RENAMED = {"fathom_iops": ("fathom_ops_per_second", 1.0), "fathom_mib_s": ("fathom_bytes_per_second", 2.0**20),
           "fathom_offered_rate_ops": ("fathom_offered_ops_per_second", 1.0),
           "fathom_achieved_rate_ops": ("fathom_achieved_ops_per_second", 1.0),
           "fathom_point_iops": ("fathom_point_ops_per_second", 1.0),
           "fathom_point_mib_s": ("fathom_point_bytes_per_second", 2.0**20),
           "fathom_point_osd_cpu_percent": ("fathom_point_osd_cpu_ratio", 0.01)}


def _families(text: str) -> dict[str, tuple[str, dict[str, float]]]:
    """An exposition's families: name -> (its HELP text, {sample name and labels: value})."""
    out: dict[str, tuple[str, dict[str, float]]] = {}
    name = ""
    for ln in text.splitlines():
        if ln.startswith("# HELP "):
            name, _, doc = ln[len("# HELP "):].partition(" ")
            out[name] = (doc, {})
        elif ln and not ln.startswith("#"):
            series, _, value = ln.rpartition(" ")
            out[name][1][series] = float(value)
    return out


def _without_deprecated(text: str) -> str:
    """The exposition without the families whose HELP says DEPRECATED (the old names, kept for one version)."""
    keep, drop = [], False
    for ln in text.splitlines():
        if ln.startswith("# HELP "):
            drop = ln.split(" ", 3)[3].startswith("DEPRECATED")
        if not drop:
            keep.append(ln)
    return "\n".join(keep) + "\n"


def _promtool(text: str) -> tuple[int, str]:
    """`promtool check metrics` (Debian's prometheus package) on an exposition: its exit code and what it said."""
    assert shutil.which("promtool"), "promtool not installed: `make deps` installs it (Debian's prometheus package)"
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


def _check_names(text: str) -> set[str]:
    """promtool has nothing to say of the text without its deprecated families, and of the whole text only of
    deprecated names; each old name exported carries the figures of its new name, in its old unit. The names
    with samples (promtool skips a family without any)."""
    assert _promtool(_without_deprecated(text)) == (0, "")
    fams = _families(text)
    said = _promtool(text)[1]
    assert {ln.split()[0] for ln in said.splitlines()} <= set(RENAMED), said
    for old, (new, factor) in RENAMED.items():
        assert fams[old][0].startswith(f"DEPRECATED: use {new}"), fams[old][0]
        renamed = {s.replace(old, new, 1): v * factor for s, v in fams[old][1].items()}
        assert renamed == pytest.approx(fams[new][1], rel=1e-12), (old, new)
    return {name for name, (_, samples) in fams.items() if samples}


def _histogram_quantile(q: float, by_le: dict[str, float]) -> float:
    """Prometheus' histogram_quantile on cumulative bucket counts by `le` (promql/quantile.go, bucketQuantile): the
    bucket that holds the rank, linear inside it (from 0 in the first one); in +Inf, the highest finite bound."""
    bs = sorted((float(le), n) for le, n in by_le.items())
    rank = q * bs[-1][1]
    b = next((i for i, (_, n) in enumerate(bs[:-1]) if n >= rank), len(bs) - 1)
    if b == len(bs) - 1:
        return bs[-2][0]
    start, below = (0.0, 0.0) if b == 0 else bs[b - 1]
    end, n = bs[b]
    return start + (end - start) * (rank - below) / (n - below)


@pytest.fixture(scope="module")
def null_run_metrics(tmp_path_factory: pytest.TempPathFactory, engine_ready: Path) -> dict[str, Any]:
    """A real null-target `fathom run --metrics`: /metrics as scraped during a measured second of a point and once
    the run has ended (served on by --metrics-linger), and the last point as stored."""
    tmp = tmp_path_factory.mktemp("null-metrics")
    suite, db, port = tmp / "null.yaml", tmp / "r.db", free_port()
    suite.write_text(NULL_SUITE.replace("RUNTIME", "2s"))
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db), "--metrics", f"127.0.0.1:{port}",
                             "--metrics-linger", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    got: dict[str, Any] = {}

    def scraped(when: str, pattern: str) -> bool:
        text = _get(url).decode()
        if re.search(pattern, text, re.M):
            got[when] = text
        return when in got

    try:
        _wait(lambda: scraped("during", r"^fathom_ramp\{.*\} 0\.0$"), 60, "a measured second exposed", proc)
        _wait(lambda: scraped("after", r'^fathom_run_info\{.*status="done"'), 120, "the run's final status", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    with Store(db) as st:
        got["last"] = st.points(st.run("latest").id)[-1]
    return got


def test_a_null_runs_exposition_passes_promtool(null_run_metrics: dict[str, Any]) -> None:
    """`promtool check metrics` finds nothing to say of a real run's names, during a point and after the run; the
    old names it would flag are exported beside their new ones for one version, the same figures in the old units."""
    during = _check_names(null_run_metrics["during"])
    after = _check_names(null_run_metrics["after"])
    assert {"fathom_ops_per_second", "fathom_bytes_per_second", "fathom_latency_seconds"} <= during
    assert {"fathom_point_ops_per_second", "fathom_point_bytes_per_second"} <= after


def test_every_name_passes_promtool_and_the_old_ones_are_documented() -> None:
    """Every family with samples (a running open-loop point, a finished one with its OSD CPU, a lost host, a fault):
    promtool has nothing to say of the names, the old names carry the new ones' figures in their old units, and
    docs/live.md lists each old name with its new one."""
    from fathom.live import exposition
    from fathom.live.state import LiveState

    st = LiveState()
    st.run_start(1, "r", "s", "suite", 2)
    st.point_start(1, "w/rate=500", "w", "w read", {"rate": 500.0}, 10.0)
    st.interval({**_rec("local", 400, 200_000), "host": ""})
    st.point_end("done", {"iops": 400.0, "bw_mib_s": 1.5625, "p99_ms": 0.2, "osd_cpu": 250.0, "unissued_ops": 100,
                          "offered_rate_ops_s": 500.0, "achieved_rate_ops_s": 400.0, "schedule_kept": False}, None)
    ended = exposition.render(exposition.registry(st))[0].decode()
    st.point_start(2, "w/rate=1000", "w", "w read", {"rate": 1000.0}, 10.0)
    st.event({"kind": "fault", "message": "osd.0 down", "data": {"t_s": 1.0}})
    st.event({"kind": "client_lost", "message": "root@b is gone", "data": {"host": "root@b"}})
    st.interval({**_rec("local", 400, 200_000), "host": ""})
    running = exposition.render(exposition.registry(st))[0].decode()
    sampled = _check_names(ended) | _check_names(running)
    assert sampled == set(_families(running)), set(_families(running)) - sampled  # promtool saw every name
    fams = _families(running)
    assert list(fams["fathom_bytes_per_second"][1].values()) == [400 * 4096]
    assert list(fams["fathom_point_osd_cpu_ratio"][1].values()) == [2.5]
    docs = (Path(__file__).resolve().parents[1] / "docs" / "live.md").read_text()
    for old, (new, _) in RENAMED.items():
        assert f"| `{old}` | `{new}` |" in docs, old


def test_histogram_quantile_of_a_null_point_is_near_its_stored_p99(null_run_metrics: dict[str, Any]) -> None:
    """The exposed latency buckets reach down to a null target's ops (tens of ns): histogram_quantile's p99 over the
    last point's buckets, computed from the exposition as Prometheus does, is within a factor of 2 of its stored p99."""
    by_le: dict[str, float] = {}
    for series, n in _families(null_run_metrics["after"])["fathom_latency_seconds"][1].items():
        m = re.match(r'fathom_latency_seconds_bucket\{.*le="([^"]+)"', series)
        if m:
            by_le[m.group(1)] = by_le.get(m.group(1), 0.0) + n
    assert by_le["+Inf"] > 0
    p99 = _histogram_quantile(0.99, by_le)
    stored = null_run_metrics["last"]["metrics"]["p99_ms"] / 1e3
    assert stored / 2 <= p99 <= stored * 2, (p99, stored)


# --- a bench's labels are its stored names ----------------------------------------------------------------------


@pytest.mark.parametrize("argv, stored", [
    (["rados", "-p", "pool", "60", "write", "--run-name", "live"], "bench-rados-write-live"),
    (["rbd", "pool/img", "--io-type", "rw", "--io-pattern", "RAND"], "bench-rbd-readwrite-rand-img"),
    (["s3", "put", "--duration", "60s", "--run-name", "live", "--bucket", "fathom-live"], "bench-s3-put-live"),
], ids=["rados", "rbd", "s3"])
def test_a_benchs_run_label_is_the_name_it_is_stored_under(argv: list[str], stored: str, tmp_path: Path,
                                                           engine_ready: Path) -> None:
    """`fathom bench ... --metrics`: the `run` label on /metrics is the name the bench's run is stored under (the one
    `fathom ls` shows; test_bench_rados and test_s3 check those names on a cluster, and
    test_bench_metrics_during_a_rados_bench both on one). No cluster here: the monitors and the S3 endpoint are a
    socket that takes connections and never answers, so the bench gives up connecting after --connect-timeout,
    while /metrics is read; its final state is served on (--metrics-linger) until a Ctrl-C."""
    (tmp_path / "keyring").write_text("[client.admin]\nkey = AQAAAAAAAAAAABAAAAECAwQFBgcICQoLDA0ODw==\n")  # well formed
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections queue, nothing answers
        where = f"127.0.0.1:{silent.getsockname()[1]}"
        (tmp_path / "ceph.conf").write_text(f"[global]\nmon_host = {where}\n")
        (tmp_path / "s3.json").write_text(json.dumps({"access_key": "a", "secret_key": "b",
                                                      "endpoint": f"http://{where}"}))
        conn = ["--keys-file", str(tmp_path / "s3.json")] if argv[0] == "s3" else \
            ["--conf", str(tmp_path / "ceph.conf"), "--keyring", str(tmp_path / "keyring")]
        proc = subprocess.Popen([FATHOM, "bench", *argv, *conn, "--connect-timeout", "3", "--stall-timeout", "3",
                                 "--db", str(tmp_path / "b.db"), "--metrics", f"127.0.0.1:{port}",
                                 "--metrics-linger", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        try:  # asked while the bench runs, the server serves its final state until the Ctrl-C
            _wait(lambda: 'run="bench-' in _get(url).decode(), 60, "the bench named", proc)
            _wait(lambda: 'status="failed"' in _get(url).decode(), 60, "the bench given up", proc)
            info = _families(_get(url).decode())["fathom_run_info"][1]
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 3 and "cannot reach" in err, err
    assert [re.search(r'run="([^"]*)"', s).group(1) for s in info] == [stored], info  # type: ignore[union-attr]
