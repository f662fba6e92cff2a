"""promquery: host windows from Prometheus's raw node-exporter samples. Pure tests on API answers built as
Prometheus writes them; then a real Prometheus and node-exporter (Debian's packages, started here on free
ports, stopped by pid) measuring a CPU spinner and bytes sent over loopback, checked against /proc."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fathom.results import usage
from fathom.servers import hostsample, promquery
from fathom.errors import FathomError
from fathom.servers.promquery import PrometheusError, PromSource

MIB = 2**20
INST = "10.0.0.1:9100"
T0 = 1000.0  # the first scrape of the made-up host; one every second (a little late now and then)
STAMPS = [T0 + i + (0.04 if i % 3 == 0 else 0.0) for i in range(12)]


def answer(*series: tuple[dict[str, str], list[tuple[float, float]]]) -> dict[str, Any]:
    """A range selector's answer as Prometheus sends it (values as strings), through JSON and back."""
    body = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": m, "values": [[t, repr(float(v))] for t, v in vals]} for m, vals in series]}}
    return json.loads(json.dumps(body))


def s(name: str, per_s: float, stamps: list[float] = STAMPS, start: float = 100.0, inst: str = INST,
      job: str = "node", **labels: str) -> tuple[dict[str, str], list[tuple[float, float]]]:
    """One counter growing at `per_s` from `start`."""
    return ({"__name__": name, "instance": inst, "job": job, **labels},
            [(t, start + per_s * (t - T0)) for t in stamps])


def host_series(inst: str = INST, **over: Any) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """A 2-CPU host: cpu0 user 0.5/s idle 0.3/s iowait 0.2/s, cpu1 user 0.1/s idle 0.9/s (0.6 cores busy of 2:
    30 %, iowait 10 %); lo 1000 B/s and 10 packets/s each way; vda reading 4096 B/s, busy 25 %, queue 2."""
    cpu = [("0", "user", 0.5), ("0", "idle", 0.3), ("0", "iowait", 0.2), ("0", "system", 0.0), ("0", "steal", 0.0),
           ("1", "user", 0.1), ("1", "idle", 0.9), ("1", "system", 0.0), ("1", "steal", 0.0)]
    out = [s("node_cpu_seconds_total", r, inst=inst, cpu=c, mode=m) for c, m, r in cpu]
    out.append(s("node_memory_MemTotal_bytes", 0, start=8192 * MIB, inst=inst))
    out.append(({"__name__": "node_memory_MemAvailable_bytes", "instance": inst, "job": "node"},
                [(t, (6144 - 100 * i) * MIB) for i, t in enumerate(STAMPS)]))
    for name, r in (("receive_bytes", 1000), ("transmit_bytes", 1000), ("receive_packets", 10),
                    ("transmit_packets", 10), ("receive_drop", 0), ("transmit_drop", 0), ("receive_errs", 0),
                    ("transmit_errs", 0)):
        out.append(s(f"node_network_{name}_total", r, inst=inst, device="lo"))
    for name, r in (("read_bytes", 4096), ("written_bytes", 0), ("reads_completed", 1), ("writes_completed", 0),
                    ("io_time_seconds", 0.25), ("io_time_weighted_seconds", 2.0)):
        out.append(s(f"node_disk_{name}_total", r, inst=inst, device="vda"))
    for name, vals in over.items():  # replace a series' samples: name__label=value
        metric, _, lv = name.partition("__")
        for labels, samples in out:
            if labels["__name__"] == metric and (not lv or labels.get(lv.split("_")[0]) == lv.split("_")[1]):
                samples[:] = vals
    return out


def window(t_from: float, t_to: float, all_series: list | None = None, interval: float | None = 1.0) -> dict:
    data = answer(*(all_series if all_series is not None else host_series()))["data"]
    [w] = promquery.host_windows(promquery.series(data), t_from, t_to, {INST: "node1"}, interval)
    return w


def test_rates_shape_and_summarize() -> None:
    w = window(1002.2, 1007.8)
    assert (w["host"], w["instance"], w["source"]) == ("node1", INST, "prometheus")
    assert (w["ts_from"], w["ts_to"]) == (STAMPS[2], STAMPS[8]) and w["dt"] == pytest.approx(6.0)
    assert w["samples"] == 7 and w["ncpu"] == 2
    assert w["cpu_pct"] == pytest.approx(30.0) and w["cores"] == pytest.approx(0.6)
    assert w["iowait_pct"] == pytest.approx(10.0) and w["steal_pct"] == pytest.approx(0.0)
    assert w["mem_total_mib"] == 8192.0
    assert w["mem_used_mib"] == pytest.approx(8192 - (6144 - 500))  # mean over the 7 samples (i = 2..8)
    assert w["net"]["lo"] == pytest.approx({"rx_bytes_s": 1000, "tx_bytes_s": 1000, "rx_packets_s": 10,
                                            "tx_packets_s": 10, "rx_drop_s": 0, "tx_drop_s": 0, "rx_errs_s": 0,
                                            "tx_errs_s": 0})
    assert w["disk"]["vda"] == pytest.approx({"read_bytes_s": 4096, "write_bytes_s": 0, "reads_s": 1,
                                              "writes_s": 0, "util_pct": 25.0, "queue": 2.0})
    assert w["daemons"] == {} and w["sampler_cpu_pct"] is None
    # the keys hostsample.window gives, so that summarize reads it unchanged
    assert {"host", "ts_from", "ts_to", "dt", "samples", "ncpu", "cpu_pct", "cores", "iowait_pct", "steal_pct",
            "mem_total_mib", "mem_used_mib", "net", "disk", "daemons", "sampler_cpu_pct"} <= set(w)
    summary = hostsample.summarize([w, {**w, "host": "node2", "cores": 1.4, "samples": 5}])
    assert summary["host_cpu_pct"] == pytest.approx(50.0) and summary["hosts"] == 2
    assert summary["telemetry_samples"] == 5 and summary["sampler_cpu_pct"] is None
    assert not [k for k in summary if k.endswith("_cpu") and k != "host_cpu_pct"]  # no daemon kinds


def test_interval_records_per_host_on_its_own_scrapes() -> None:
    # two hosts scraped at different phases: node2's scrapes fall half a second after node1's
    other = "10.0.0.2:9100"
    late = [t + 0.5 for t in STAMPS]
    node2 = [(labels | {"instance": other}, [(t + 0.5, v) for t, v in vals]) for labels, vals in host_series()]
    data = answer(*host_series(), *node2)["data"]
    recs = promquery.interval_records(promquery.series(data), 1002.0, 1006.0, {INST: "node1", other: "node2"}, 1.0)
    by = {h: [r for r in recs if r["host"] == h] for h in ("node1", "node2")}
    assert [r["ts"] for r in by["node1"]] == STAMPS[3:7] and [r["ts"] for r in by["node2"]] == late[2:6]
    assert all(r["cpu_pct"] == pytest.approx(30.0) and r["net_tx_bytes_s"] == 0.0 for r in recs)  # lo left out
    assert all(r["via"] == "prometheus" and r["kind"] == "host" and r["ncpu"] == 2 for r in recs)
    # usage.summarize sums the hosts: 0.6 busy cores each of 2
    m = usage.summarize(recs, 1002.0, 1006.0)
    assert m["host_cpu_pct"] == pytest.approx(30.0) and m["server_hosts"] == 2


def test_nearest_samples_and_their_times() -> None:
    """Each end is the scrape nearest it; the rate is (last - first) / their own time difference, with no
    extrapolation to the window's ends (a quadratic counter tells which samples were used)."""
    quad = [(t, (t - T0) ** 2) for t in STAMPS]
    w = window(1002.45, 1006.6, host_series(node_network_transmit_bytes_total=quad))
    assert (w["ts_from"], w["ts_to"]) == (STAMPS[2], STAMPS[7])
    a, b = STAMPS[2], STAMPS[7]
    assert w["net"]["lo"]["tx_bytes_s"] == pytest.approx(((b - T0) ** 2 - (a - T0) ** 2) / (b - a))
    w = window(1002.55, 1006.4, host_series(node_network_transmit_bytes_total=quad))
    assert (w["ts_from"], w["ts_to"]) == (STAMPS[3], STAMPS[6]) and w["samples"] == 4


def test_counter_reset_gives_none() -> None:
    down = [(t, 5000.0 + 1000 * (t - T0) if t < 1005 else 1000 * (t - 1005)) for t in STAMPS]
    w = window(1002.0, 1008.0, host_series(node_network_transmit_bytes_total=down))
    assert w["net"]["lo"]["tx_bytes_s"] is None and w["net"]["lo"]["rx_bytes_s"] == pytest.approx(1000)
    # ... but a reset before the window does not matter
    w = window(1005.5, 1010.0, host_series(node_network_transmit_bytes_total=down))
    assert w["net"]["lo"]["tx_bytes_s"] == pytest.approx(1000)
    # a reset in one CPU's counter: no CPU figures at all, never a negative or partial one
    cpu_reset = [(t, 500.0 + 0.5 * (t - T0) if t < 1004 else 0.5 * (t - 1004)) for t in STAMPS]
    w = window(1002.0, 1008.0, host_series(node_cpu_seconds_total__mode_user=cpu_reset))
    assert w["cpu_pct"] is None and w["cores"] is None and w["iowait_pct"] is None
    assert w["net"]["lo"]["tx_bytes_s"] == pytest.approx(1000)


def test_iowait_counts_idle() -> None:
    """A host waiting on I/O all the time is idle (as hostsample.host_cpu counts it), 100 % iowait."""
    series = [s("node_cpu_seconds_total", 1.0, cpu="0", mode="iowait"), s("node_cpu_seconds_total", 0.0, cpu="0",
                                                                            mode="idle")]
    w = window(1001.0, 1009.0, series)
    assert w["cpu_pct"] == pytest.approx(0.0) and w["cores"] == pytest.approx(0.0)
    assert w["iowait_pct"] == pytest.approx(100.0) and w["ncpu"] == 1
    assert w["mem_total_mib"] is None and w["net"] == {} and w["disk"] == {}


def test_series_missing_at_an_end_gives_none() -> None:
    """A NIC that appeared mid-window has no sample near the window's start: None, not a rate over part of it."""
    late = [(t, 1000 * (t - T0)) for t in STAMPS[5:]]
    w = window(1002.0, 1008.0, host_series(node_network_transmit_bytes_total=late))
    assert w["net"]["lo"]["tx_bytes_s"] is None and w["net"]["lo"]["tx_packets_s"] == pytest.approx(10)


def test_too_few_scrapes_names_the_interval() -> None:
    with pytest.raises(PrometheusError) as e:  # no scrape within half an interval of 1003.2..1003.3 but one
        window(1003.3, 1003.4)
    msg = str(e.value)
    assert "1 scrape(s)" in msg and "scrape interval 1 s" in msg and "longer than two scrape intervals" in msg
    with pytest.raises(PrometheusError, match="scrape interval 15 s"):  # the interval as configured, when given
        window(2000.0, 2010.0, interval=15.0)
    with pytest.raises(PrometheusError, match=r"0 scrape\(s\).*scrape interval 1 s"):  # from the spacing
        window(2000.0, 2010.0, interval=None)
    with pytest.raises(PrometheusError, match="no node_cpu_seconds_total"):
        window(1002.0, 1008.0, [])
    assert isinstance(e.value, FathomError) and e.value.hint


def test_select_hosts() -> None:
    inst = {"10.0.0.1:9100": "node1", "node2.lab:9100": "node2.lab", "10.0.0.9:9100": "node1"}
    assert promquery.select(inst) == {"10.0.0.1:9100": "node1", "node2.lab:9100": "node2.lab"}  # one per host
    assert promquery.select(inst, ["node1"]) == {"10.0.0.1:9100": "node1"}
    assert promquery.select(inst, ["node2", "10.0.0.1:9100"]) == {"node2.lab:9100": "node2.lab",
                                                                 "10.0.0.1:9100": "node1"}
    assert promquery.select(inst, ["node1.lab"]) == {"10.0.0.1:9100": "node1"}
    with pytest.raises(PrometheusError) as e:
        promquery.select(inst, ["node1", "node7"])
    assert "node7" in str(e.value) and "node1 (10.0.0.1:9100)" in str(e.value) and "node-exporter" in str(e.value)


def test_host_windows_one_per_instance_first_job() -> None:
    """A target scraped by two jobs counts once; windows come by host name."""
    other = [(dict(labels, job="node-again"), vals) for labels, vals in host_series()]
    data = answer(*host_series("10.0.0.2:9100"), *other, *host_series())["data"]
    ws = promquery.host_windows(promquery.series(data), 1002.0, 1008.0,
                                {INST: "zeta", "10.0.0.2:9100": "alpha"}, 1.0)
    assert [w["host"] for w in ws] == ["alpha", "zeta"] and ws[1]["ncpu"] == 2
    assert ws[1]["cpu_pct"] == pytest.approx(30.0)  # not the two jobs' counters added up


def test_api_pieces() -> None:
    assert [promquery.parse_duration(d) for d in ("1s", "15s", "1m30s", "500ms", "2h", "x", "")] == \
        [1, 15, 90, 0.5, 7200, None, None]
    targets = {"activeTargets": [
        {"labels": {"job": "node", "instance": "h1:9100"}, "health": "up", "scrapeInterval": "10s", "lastError": "",
         "scrapeUrl": "http://h1:9100/metrics"},
        {"labels": {"job": "node", "instance": "h2:9100"}, "health": "down", "lastError": "connection refused",
         "discoveredLabels": {"__scrape_interval__": "10s"}},
        {"labels": {"job": "ceph", "instance": "mgr:9283"}, "health": "up", "scrapeInterval": "10s"}]}
    uname = {"resultType": "vector", "result": [{"metric": {"__name__": "node_uname_info", "job": "node",
                                                            "instance": "h1:9100", "nodename": "host1"},
                                                 "value": [1.0, "1"]}]}
    t = promquery.node_targets(targets, uname)
    assert [(x["instance"], x["host"], x["health"], x["scrape_interval_s"], x["last_error"]) for x in t] == \
        [("h1:9100", "host1", "up", 10, None), ("h2:9100", None, "down", 10, "connection refused")]
    assert promquery.names(uname) == {"h1:9100": "host1"}
    with pytest.raises(PrometheusError, match="bad_data: parse error"):
        promquery._data({"status": "error", "errorType": "bad_data", "error": "parse error"}, "q", "http://p")
    with pytest.raises(PrometheusError, match="other than Prometheus"):
        promquery._data(["not", "an", "api"], "q", "http://p")
    assert promquery._promql_regex(["a.b:1"]) == '"a\\\\.b:1"'


# --- a real Prometheus and node-exporter ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Prom:
    url: str
    exporter_url: str
    started: float  # before the first scrape


def _stop(p: subprocess.Popen) -> None:
    """This process, by its pid: SIGTERM, then SIGKILL if it lingers."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(15)


@pytest.fixture(scope="module")
def prom() -> Iterator[Prom]:
    """node-exporter and a Prometheus scraping it (only it) every second, on free loopback ports, in a temporary
    directory; the packaged services (ports 9090, 9100), running or not, play no part."""
    missing = [b for b in ("prometheus", "prometheus-node-exporter") if not shutil.which(b)]
    assert not missing, f"{missing} not installed: `make deps` installs them (Debian packages)"
    tmp = Path(tempfile.mkdtemp(prefix="fathom-prom-"))
    procs: list[subprocess.Popen] = []
    try:
        ne_port, prom_port = free_port(), free_port()
        started = time.time()
        # the cpu, meminfo, netdev, diskstats and uname collectors only (light); Debian leaves lo out by default
        procs.append(subprocess.Popen(
            ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{ne_port}", "--collector.disable-defaults",
             "--collector.cpu", "--collector.meminfo", "--collector.netdev", "--collector.diskstats",
             "--collector.uname", "--collector.netdev.device-exclude="],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "node-exporter.log", "w"), stdin=subprocess.DEVNULL))
        (tmp / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: node\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{ne_port}']\n")
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "w"), stdin=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{prom_port}"
        src = PromSource(url, timeout=5)
        deadline = time.time() + 90
        while True:  # up, and three scrapes of the exporter stored
            assert all(p.poll() is None for p in procs), (tmp / "prometheus.log").read_text()[-2000:] + \
                (tmp / "node-exporter.log").read_text()[-2000:]
            try:
                src.check()
                r = src.query("count_over_time(node_uname_info[10s])")["result"]
                if r and float(r[0]["value"][1]) >= 3:
                    break
            except PrometheusError:
                pass
            assert time.time() < deadline, "Prometheus did not scrape node-exporter three times in 90 s"
            time.sleep(0.5)
        yield Prom(url, f"http://127.0.0.1:{ne_port}", started)
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def _proc_sample() -> tuple[float, float, float, int, int]:
    """(time, busy s, total s, lo tx bytes, lo rx bytes) from /proc: all CPUs, iowait counted idle."""
    t = time.time()
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    with open("/proc/net/dev") as f:
        lo = next(line.split(":", 1)[1].split() for line in f if line.strip().startswith("lo:"))
    return t, sum(v) - v[3] - v[4], sum(v), int(lo[8]), int(lo[0])


def _send_loopback(nbytes: int) -> int:
    """nbytes over a TCP connection on 127.0.0.1 (so through lo); the bytes the other end received."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        got = [0]

        def receive() -> None:
            conn, _ = srv.accept()
            with conn:
                while data := conn.recv(1 << 20):
                    got[0] += len(data)

        th = threading.Thread(target=receive)
        th.start()
        with socket.create_connection(srv.getsockname()) as c:
            chunk = b"\0" * MIB
            for _ in range(nbytes // MIB):
                c.sendall(chunk)
        th.join(30)
    return got[0]


@pytest.mark.timeout(180)
def test_real_prometheus_measures_cpu_and_loopback(prom: Prom) -> None:
    src = PromSource(prom.url)
    info = src.check()
    assert info["version"] and info["scrape_interval_s"] == 1.0
    [target] = info["targets"]
    assert target["health"] == "up" and target["host"] == os.uname().nodename
    assert src.hosts() == {target["instance"]: os.uname().nodename}
    assert abs(promquery.clock_offset(src)) < 0.1  # the same host's clock

    samples: list[tuple[float, float, float, int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_proc_sample())
            stop.wait(0.1)

    sampler = threading.Thread(target=sample)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sampler.start()
    try:
        time.sleep(1.0)  # spinning: the scrapes nearest the window's ends (half a second off at most) see it
        t0 = time.time()
        time.sleep(2.0)
        sent = _send_loopback(64 * MIB)
        time.sleep(max(0.0, t0 + 6.0 - time.time()))
        t1 = time.time()
        time.sleep(1.0)
    finally:
        spinner.kill()
        spinner.wait()
        stop.set()
        sampler.join()
    assert sent == 64 * MIB
    time.sleep(0.5)  # a scrape after t1 is stored
    [w] = src.window(t0, t1)
    # /proc over the same interval: the test's samples nearest the scrapes Prometheus's window used
    a = min(samples, key=lambda x: abs(x[0] - w["ts_from"]))
    b = min(samples, key=lambda x: abs(x[0] - w["ts_to"]))
    proc_pct = 100.0 * (b[1] - a[1]) / (b[2] - a[2])
    lo_tx = w["net"]["lo"]["tx_bytes_s"] * w["dt"]
    print(f"\nwindow {t1 - t0:.2f} s -> scrapes {w['ts_from'] - t0:+.3f} s .. {w['ts_to'] - t1:+.3f} s, dt "
          f"{w['dt']:.3f} s, {w['samples']} samples; cpu {w['cpu_pct']:.1f} % ({w['cores']:.2f} of {w['ncpu']} "
          f"cores), /proc/stat {proc_pct:.1f} %; iowait {w['iowait_pct']:.1f} %; lo tx {lo_tx / MIB:.1f} MiB "
          f"(/proc/net/dev {(b[3] - a[3]) / MIB:.1f} MiB, sent {sent / MIB:.0f} MiB); mem used "
          f"{w['mem_used_mib']:.0f} of {w['mem_total_mib']:.0f} MiB")
    assert w["host"] == os.uname().nodename and w["source"] == "prometheus" and w["daemons"] == {}
    assert w["ncpu"] == os.cpu_count()
    assert abs(w["ts_from"] - t0) <= 0.6 and abs(w["ts_to"] - t1) <= 0.6 and 4.8 <= w["dt"] <= 7.2
    assert w["samples"] >= 5
    # the spinner keeps a core busy throughout; the benchmark sharing the box only adds
    assert w["cores"] >= 0.7
    assert abs(w["cpu_pct"] - proc_pct) <= 15.0, (w["cpu_pct"], proc_pct)
    assert lo_tx >= sent and w["net"]["lo"]["rx_bytes_s"] * w["dt"] >= sent
    with open("/proc/meminfo") as f:
        total_kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal:")))
    assert w["mem_total_mib"] == pytest.approx(total_kib / 1024)
    assert 0 < w["mem_used_mib"] < w["mem_total_mib"]
    assert hostsample.summarize([w])["host_cpu_pct"] == pytest.approx(w["cpu_pct"])

    # the named errors: a host it does not scrape, a window before any scrape
    with pytest.raises(PrometheusError) as e:
        src.window(t0, t1, hosts=["no-such-host"])
    assert "no-such-host" in str(e.value) and os.uname().nodename in str(e.value)
    with pytest.raises(PrometheusError, match="no node-exporter samples around the window.*scrape interval 1 s"):
        src.window(prom.started - 120, prom.started - 60)


def test_real_errors(prom: Prom) -> None:
    with pytest.raises(PrometheusError, match="cannot reach Prometheus at http://127.0.0.1:") as e:
        PromSource(f"http://127.0.0.1:{free_port()}", timeout=5).check()
    assert "9095" in (e.value.hint or "")
    with pytest.raises(PrometheusError, match="is not a Prometheus"):  # node-exporter's own port
        PromSource(prom.exporter_url, timeout=5).check()
    with pytest.raises(PrometheusError, match="bad_data"):
        PromSource(prom.url).query("node_cpu_seconds_total[")


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_run_reads_host_figures_from_prometheus(prom: Prom, cluster, rados_pool, tmp_path: Path) -> None:
    """`fathom run --prometheus URL` on an attached cluster: this host's CPU comes from Prometheus (one record
    per scrape, via "prometheus"), its OSD from this host's /proc (node-exporter has no per-process figures);
    the report names the source."""
    from conftest import run_fathom

    from fathom.results.store import Store

    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: prom\ncluster: {{kind: attached, conf: {cluster.conf_path}, keyring: "
                     f"{cluster.keyring_path}}}\ndefaults: {{engine: fathom-engine, interface: rados, pool: "
                     f"{rados_pool}, bs: 4k, iodepth: 4, runtime: 5s}}\nworkloads: [{{name: w, rw: write}}]\n")
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), "--prometheus", prom.url, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(db) as st:
        run = st.run("latest")
        assert run.env["prometheus"]["hosts"] == [os.uname().nodename]
        (pt,) = st.points(run.id)
        tel = st.telemetry(pt["id"])
        via = [s for s in tel if s.get("via") == "prometheus"]
        assert len(via) >= 4 and all(s["kind"] == "host" and s["host"] == os.uname().nodename for s in via)
        # this host's own host sample steps aside (Prometheus stands for it); its OSD is still sampled here
        assert {s["kind"] for s in tel if s.get("via") is None} >= {"osd", "client_host"}
        assert "host" not in {s["kind"] for s in tel if s.get("via") is None}
        m = pt["metrics"]
        assert m["host_cpu_pct"] is not None and 0 < m["host_cpu_pct"] <= 100 and m["osd_cpu"] is not None
    out = tmp_path / "rep.md"
    p = run_fathom("report", "latest", "--db", str(db), "-o", str(out), timeout=120)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert "Server measurements: sources" in text and "node-exporter via Prometheus" in text and prom.url in text


def test_two_node_exporters_with_one_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two targets reporting one hostname are one host scraped twice only when their hosts booted together;
    otherwise the run is refused with both named (one's figures would have been the other's)."""
    seen = {"10.0.0.1:9100": "node1", "10.0.0.9:9100": "node1", "10.0.0.2:9100": "node2"}
    boots: dict[str, float] = {}

    def query(self: PromSource, promql: str, at: float | None = None) -> dict[str, Any]:
        if promql == "time()":
            return {"resultType": "scalar", "result": [time.time(), str(time.time())]}
        assert promql.startswith("node_boot_time_seconds{instance=~") and "9:9100" in promql
        return {"resultType": "vector", "result": [{"metric": {"instance": i}, "value": [1.0, str(b)]}
                                                   for i, b in boots.items()]}

    monkeypatch.setattr(PromSource, "check", lambda self: {"url": self.url, "version": "2.45", "targets": [],
                                                            "scrape_interval_s": 1.0})
    monkeypatch.setattr(PromSource, "hosts", lambda self: dict(seen))
    monkeypatch.setattr(PromSource, "query", query)
    boots.update({"10.0.0.1:9100": 1_700_000_000.0, "10.0.0.9:9100": 1_700_050_000.0})
    with pytest.raises(PrometheusError) as e:
        promquery.connect("http://prom:9095", ["node1", "node2"], set())
    assert "node1 at 10.0.0.1:9100 and 10.0.0.9:9100 (booted at different times)" in e.value.message
    assert "nodename" in (e.value.hint or "")
    del boots["10.0.0.9:9100"]  # no boot time to tell: refused too
    with pytest.raises(PrometheusError, match="no node_boot_time_seconds to tell"):
        promquery.connect("http://prom:9095", ["node1", "node2"], set())
    boots["10.0.0.9:9100"] = 1_700_000_000.4  # one host under two targets: counted once, and said
    source, desc = promquery.connect("http://prom:9095", ["node1", "node2"], set())
    assert source.chosen == {"10.0.0.1:9100": "node1", "10.0.0.2:9100": "node2"}
    assert promquery.shared_names(seen, ["node1", "node2"]) == {"node1": ["10.0.0.1:9100", "10.0.0.9:9100"]}
    assert promquery.shared_names(seen, ["node2"]) == {}
    assert desc["scraped_twice"] == {"node1": ["10.0.0.1:9100", "10.0.0.9:9100"]}
    # a window asks for the chosen target, not whichever other reports its hostname
    assert promquery.select({"10.0.0.0:9100": "node1", **seen}, ["10.0.0.1:9100"]) == {"10.0.0.1:9100": "node1"}


def test_prometheus_nic_figures_say_how_node_exporter_counts() -> None:
    """node-exporter's per-device counters do not say how interfaces stack: its hosts' NIC figures are not
    'each byte once, at the top of the stack', and the per-host table and sources section say what they are."""
    from fathom.report import perhost

    prom = {"node1": {"via": "prometheus", "net_rx_mib_s": 10.0}, "node2": {"via": "prometheus", "net_rx_mib_s": 3.0}}
    assert perhost._nics(prom) == usage.NIC_ALL and "top of their stack" not in perhost._nics(prom)
    ssh = {"a": {"via": "ssh", "net_rx_mib_s": 1.0}}
    assert perhost._nics(ssh) == usage.NIC_TOP
    both = perhost._nics({**prom, **ssh})
    assert both.startswith("prometheus hosts: node-exporter's") and "; ssh hosts: each byte once" in both
