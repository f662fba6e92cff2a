#!/usr/bin/env python3
"""The orchestrator with many engines on client hosts: its CPU, the merge, the start skew (`make bench-hosts`).

    sudo .venv/bin/python bench/hosts_scale.py [--hosts 8] [--per-host 8] [--seconds 300] [--delay-us 1000]
                                               [--server-hosts 8] [--daemons 16]
                                               [--json bench/results/hosts-scale.json] [--docs docs/benchmarks.md]

Client hosts are network namespaces on a bridge, each with its own sshd
(fathom.hosts.netns; needs root). The engines run the null target (no cluster, no I/O;
each op completes `delay_us` after it was issued, so 64 engines do not saturate
the 2 cores the orchestrator is measured on), one point of `--seconds`, started
together over SSH exactly as `fathom run` starts a many-host point
(fathom.engines.clients / group: upload, barrier, clock offsets, one start time,
heartbeats, live merge of every interval).

Measured:
- orchestrator CPU: the fathom process's own CPU (every thread: the SSH
  connections' crypto, record parsing, the live merge) from the first merged
  interval to the last, as % of one core, and per engine;
- merge_s: the exact merge of the whole point after it ran, engines x intervals
  records aligned by index with their histograms added (fathom.results.merge);
- with --server-hosts: that many more namespace hosts sampled over SSH for the whole point as `fathom run
  --server-host` samples a cluster's hosts (fathom.servers: fathom-sampler uploaded, clocks, one stream
  per host read on the orchestrator's loop), with --daemons stand-in `ceph-osd -i N` processes on the
  machine, which every server host's sampler lists (one PID namespace); their stream is inside the CPU
  figure, and server_window_s is the per-point work after it (the hosts' records over the point);
- start skew: how far apart the engines' measured phases began (first
  interval's `ts - t`, both read at the interval's end; host clock offsets
  removed). The namespaces share one kernel clock, so this is the spread of
  the engines' wake-ups after one start time, not a clock error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

import subprocess  # noqa: E402

from fathom.results import merge
from fathom.hosts import netns
from fathom import servers
from fathom.engine_spec import Control, EngineSpec, Load  # noqa: E402
from fathom.engines import group as group_mod  # noqa: E402
from fathom.engines.clients import Clients, _result  # noqa: E402
from fathom.engines.fathom_engine import check_engine  # noqa: E402
from fathom.hosts.clients import ClientHost, ClientsSpec  # noqa: E402
from fathom.interfaces.null import Null  # noqa: E402

TITLE = "## Many client hosts: what the orchestrator costs"
TARGETS = {"orchestrator_cpu_pct_of_core": 25.0, "merge_s": 2.0, "start_skew_ms": 5.0}


STANDIN = "import sys; print('ready', flush=True); sys.stdin.read()"


def standins(n: int) -> list[subprocess.Popen]:
    """n sleeping processes named `ceph-osd -i N` (python with argv[0] set), each ready when returned."""
    out = []
    for i in range(n):
        p = subprocess.Popen(["ceph-osd", "-c", STANDIN, "-i", str(i)], executable=os.path.realpath(sys.executable),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        out.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return out


def measure(hosts: int, per_host: int, seconds: float, delay_us: int, server_hosts: int = 0,
            daemons: int = 0) -> dict:
    with netns.Testbed(hosts=hosts + server_hosts, max_sessions=per_host + 10) as tb:
        spec = ClientsSpec.model_validate({
            "hosts": [{"host": h.addr, "user": "root", "key_file": tb.key_file, "instances": per_host,
                       "engine_dir": f"{tb.dir}/engine-{i}"} for i, h in enumerate(tb.hosts[:hosts])],
            "known_hosts": tb.known_hosts})
        fakes = standins(daemons)
        srv = None
        if server_hosts:
            srv = servers.Servers.open(servers.ServersSpec(
                hosts=[ClientHost(host=h.addr, user="root", key_file=tb.key_file, engine_dir=f"{tb.dir}/srv-{i}")
                       for i, h in enumerate(tb.hosts[hosts:])], known_hosts=tb.known_hosts), {})
        t0 = time.monotonic()
        clients = Clients.open(spec)
        connect_s = time.monotonic() - t0
        t_point = time.time()
        window: dict = {}

        def after() -> None:
            if srv is not None:
                t = time.perf_counter()
                recs, _ = srv.window(t_point, time.time())
                window.update(server_window_s=round(time.perf_counter() - t, 3), server_records=len(recs))

        try:
            r = point(clients, seconds, delay_us, after)
        finally:
            if srv is not None:
                srv.close()
            for f in fakes:
                f.kill()
                f.wait()
        return {**r, "hosts": hosts, "per_host": per_host, "connect_and_install_s": round(connect_s, 2),
                "server_hosts": server_hosts, "daemons": daemons, "server_window_s": None, "server_records": None,
                **window}


def point(clients: Clients, seconds: float, delay_us: int, after=lambda: None) -> dict:
    """One null-target point of `seconds` on every engine of clients, started together as `fathom run` starts
    a many-host point; clients closed at the end. The orchestrator's CPU, the merge, the start skew."""
    spec = clients.spec
    doc = EngineSpec(target=Null(rw="randread", bs=4096, delay_us=delay_us),
                     load=Load(iodepth=1, duration_s=seconds),
                     control=Control(wait=True, heartbeat_timeout_s=group_mod.HEARTBEAT_TIMEOUT_S)).to_json()
    instances = [group_mod.Instance(host=h.name, index=n, spec=doc, transport=clients.hosts[h.name])
                 for h in spec.hosts for n in range(h.instances)]
    marks: list[tuple[float, float]] = []  # (process CPU, monotonic) at each merged interval
    events: list[dict] = []
    g = group_mod.Group(instances, str(check_engine()), 1.0, "continue",
                        lambda rec: marks.append((time.process_time(), time.monotonic())), events.append)
    try:
        group_mod.run_group(g, 120.0, seconds + 180.0)
        after()
    finally:
        clients.close()
    if len(marks) < 3 or g.failed or g.lost_hosts:
        raise SystemExit(f"the point did not run through: {g.failed or g.lost_hosts or 'too few intervals'}")
    (c0, w0), (c1, w1) = marks[0], marks[-2]  # the last merged interval is the engines' partial one
    cpu_pct = 100.0 * (c1 - c0) / (w1 - w0)
    per = [i.run.intervals for i in instances]
    offsets = [g.clocks[i.host].offset_s if i.host in g.clocks else 0.0 for i in instances]
    t = time.perf_counter()
    merged = merge.merge_intervals(per, offsets)
    merge_s = time.perf_counter() - t
    t = time.perf_counter()
    res, _ = _result(g)
    result_s = time.perf_counter() - t
    ops = sum(o.ops for o in res.ops.values())
    # each engine's start after the common start time, on our clock (ms): where the skew comes from
    late = sorted((float(x[0]["ts"]) - float(x[0]["t"]) - g.start_at) * 1e3 for x in per if x)
    return {"engines": len(instances), "seconds": seconds,
            "delay_us": delay_us, "intervals_per_engine": min(len(x) for x in per),
            "merged_intervals": len(merged), "orchestrator_cpu_pct_of_core": round(cpu_pct, 2),
            "orchestrator_cpu_pct_per_engine": round(cpu_pct / len(instances), 3),
            "merge_s": round(merge_s, 3), "point_result_s": round(result_s, 3),
            "start_skew_ms": round(res.extra["start_skew_ms"], 3),
            "start_after_go_ms": {"min": round(late[0], 3), "median": round(late[len(late) // 2], 3),
                                  "p90": round(late[int(len(late) * 0.9)], 3), "max": round(late[-1], 3)},
            "max_clock_offset_ms": round(max(abs(c.offset_s) for c in g.clocks.values()) * 1e3, 3),
            "max_rtt_ms": round(max(c.rtt_s for c in g.clocks.values()) * 1e3, 3),
            "ops": ops, "iops": round(ops / res.runtime_s)}


def section(r: dict) -> str:
    ok = {k: r[k] <= v for k, v in TARGETS.items()}
    late, one = r["start_after_go_ms"], r.get("one_per_host")
    mark = {True: "met", False: "NOT met"}
    return "\n".join([
        TITLE, "",
        f"`make bench-hosts` (bench/hosts_scale.py), measured on {platform.node()} ({os.cpu_count()} CPUs, Linux "
        f"{platform.release()}): {r['engines']} engines ({r['hosts']} client hosts x {r['per_host']}, network "
        f"namespaces with their own sshd on one bridge), the null target with a {r['delay_us']} µs op delay, "
        f"iodepth 1, one point of {r['seconds']:g} s started together over SSH as `fathom run` starts a many-host "
        f"point ({r['iops']:,} IOPS merged)"
        + (f", while {r['server_hosts']} more namespace hosts were sampled as a cluster's hosts over SSH "
           f"(`--server-host`: fathom-sampler every second, each listing {r['daemons']} stand-in OSD processes)"
           if r.get("server_hosts") else "") + ".", "",
        "| figure | value | target |", "|---|---|---|",
        f"| orchestrator CPU, % of one core, every thread (SSH, records, live merge) | "
        f"{r['orchestrator_cpu_pct_of_core']:.2f} ({r['orchestrator_cpu_pct_per_engine']:.3f} per engine) | "
        f"under 25 ({mark[ok['orchestrator_cpu_pct_of_core']]}) |",
        f"| merge of the point, {r['engines']} x {r['intervals_per_engine']} intervals, s | {r['merge_s']:.3f} | "
        f"under 2 ({mark[ok['merge_s']]}) |",
        f"| the point's result from every engine's summary, s | {r['point_result_s']:.3f} | |",
        f"| start skew across engines, ms | {r['start_skew_ms']:.3f} | under 5 ({mark[ok['start_skew_ms']]}) |",
        f"| each engine's start after the start time: min / median / p90 / max, ms | "
        f"{late['min']:.3f} / {late['median']:.3f} / {late['p90']:.3f} / {late['max']:.3f} | |",
        *([f"| the same start with one engine per host ({one['engines']} engines, 10 s): start skew, ms | "
           f"{one['start_skew_ms']:.3f} | |"] if one else []),
        f"| largest clock offset measured / round trip, ms | {r['max_clock_offset_ms']:.3f} / {r['max_rtt_ms']:.3f}"
        " | |",
        f"| connecting to {r['hosts']} hosts and installing the engine, s | {r['connect_and_install_s']:.2f} | |",
        *([f"| the server hosts' records over the point ({r['server_records']:,} records), s | "
           f"{r['server_window_s']:.3f} | |"] if r.get("server_hosts") else []),
        "",
        "The namespaces share one kernel clock, so the offsets are what the NTP-style measurement over SSH reads "
        "when there is none (its error is half the round trip), and the start skew is the spread of the engines' "
        "own starts after one start time was sent. An engine's start is its first interval's `ts - t`, both read "
        "at the interval's end, so a record written late (every engine encodes its histograms at the same tick) "
        "does not move it. Every engine sleeps until the start time on CLOCK_REALTIME; here "
        f"{r['engines']} processes wake at the same instant on {os.cpu_count()} cores and each starts when the "
        "scheduler gets to it, so the spread grows with engines per core (one engine per host: the row above). "
        "On real client hosts, with a few engines per host on their own cores, the skew is the clock offsets' "
        "error plus one wake-up. "
        "Merge: every interval index of every engine aligned on the common start, its histograms added "
        "(fathom.results.hdr decodes each into one scratch array and adds the non-empty range, hdrh's C helpers). The "
        "live merge during the point does the same work once per second and is inside the CPU figure.", ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--delay-us", type=int, default=1000)
    ap.add_argument("--server-hosts", type=int, default=8, help="cluster hosts sampled over SSH during the point")
    ap.add_argument("--daemons", type=int, default=16, help="stand-in OSD processes each server host lists")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--docs", type=Path)
    a = ap.parse_args()
    why = netns.available()
    if why:
        raise SystemExit(f"bench-hosts {why}")
    r = measure(a.hosts, a.per_host, a.seconds, a.delay_us, a.server_hosts, a.daemons)
    if a.per_host > 1:  # the same start with one engine per host: the mechanism without the wake-up storm
        one = measure(a.hosts, 1, 10.0, a.delay_us)
        r["one_per_host"] = {k: one[k] for k in ("engines", "start_skew_ms", "start_after_go_ms",
                                                 "orchestrator_cpu_pct_of_core")}
    print(json.dumps(r, indent=1))
    publish(section(r), TITLE, a.docs, a.json, {k: r[k] for k in ("engines", "orchestrator_cpu_pct_of_core",
                                                                  "merge_s", "start_skew_ms")} | {"detail": r})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
