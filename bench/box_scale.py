#!/usr/bin/env python3
"""Emulated hosts: time and memory to bring N hosts up and down, and the sampler's CPU over them
(`make bench-box`; `make bench-hosts` runs it after the client-host benchmark).

    sudo .venv/bin/python bench/box_scale.py [--hosts 4 --hosts 12] [--repeat 2] [--sample-seconds 30]
                                             [--json bench/results/box-scale.json] [--docs docs/benchmarks.md]

For each N, --repeat times: `fathom cluster up --hosts N --osds N --rgw --host-nic 200mbit` (the rgw-scaling
suite's shape: one OSD and one RGW on each host, 896 MiB OSD caches, 8 GiB sparse OSD files) through the CLI,
timed to HEALTH_OK; the machine's memory in use (MemTotal - MemAvailable) read every 0.2 s from before `up`
to after `down`: its peak above what was in use before `up`, and the cluster's daemons' RSS summed once it is up.
Then the sampler fathom runs beside every point (fathom.servers.telemetry.Sampler: each daemon's /proc, and with
the box each host's NIC read in its own namespace), --sample-seconds with the box's hosts and as many without
them: its thread's CPU as % of one core. Then `fathom cluster down`, timed, and a check that no namespace, bridge
or holder of the box is left. Idle clusters: what a load adds to the OSDs' memory is bounded by
osd_memory_target (the rgw-scaling run at that shape is the test of its fit under load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsection import publish  # noqa: E402

from fathom.cluster import box  # noqa: E402
from fathom.cluster.local import LocalCluster  # noqa: E402
from fathom.hosts import netns  # noqa: E402
from fathom.servers import telemetry  # noqa: E402

TITLE = "## Emulated hosts: bringing them up and down, sampling them"
FATHOM = str(Path(sys.executable).parent / "fathom")
OSD_CACHE = 939524096  # the rgw-scaling suite's osd_memory_target: 896 MiB
MIB = 2**20


def in_use() -> int:
    """The machine's memory in use, bytes (MemTotal - MemAvailable)."""
    mem = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            mem[k] = int(v.split()[0]) * 1024
    return mem["MemTotal"] - mem["MemAvailable"]


class Peak(threading.Thread):
    """The highest memory in use while it runs, read every 0.2 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = in_use()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak = max(self.peak, in_use())


def sampler_cpu(local: LocalCluster, seconds: float, boxed: bool) -> float:
    """The point sampler's thread CPU over `seconds`, % of one core."""
    s = telemetry.Sampler(local.daemons(), **(telemetry.boxed(local) if boxed else {}))
    s.start()
    time.sleep(seconds)
    s.stop()
    assert s.samples, "the sampler took no samples"
    if boxed:
        assert any(x.get("shared") for x in s.samples), "no emulated host's NIC was sampled"
    return s.cost_pct or 0.0


def once(n: int, seconds: float) -> dict:
    d = Path(tempfile.mkdtemp(prefix=f"fathom-box{n}-")) / "c"
    base = in_use()
    peak = Peak()
    peak.start()
    t0 = time.monotonic()
    up = subprocess.run([FATHOM, "cluster", "up", "--dir", str(d), "--hosts", str(n), "--osds", str(n), "--rgw",
                         "--osd-size", "8GiB", "--host-nic", "200mbit", "--set", f"osd.osd_memory_target={OSD_CACHE}"],
                        capture_output=True, text=True, timeout=1800)
    up_s = time.monotonic() - t0
    local = LocalCluster(d)
    st = local.state() or {}
    try:
        if up.returncode != 0:
            raise SystemExit(f"cluster up --hosts {n} failed:\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
        rss = sum((telemetry.proc_sample(x.pid) or {}).get("rss", 0) for x in local.daemons() if x.pid)
        with_box = sampler_cpu(local, seconds, True)
        without = sampler_cpu(local, seconds, False)
    finally:
        t1 = time.monotonic()
        down = subprocess.run([FATHOM, "cluster", "down", "--dir", str(d)], capture_output=True, text=True,
                              timeout=600)
        down_s = time.monotonic() - t1
        peak.done.set()
        peak.join()
    left = box.left(st["box"]) if st.get("box") else []
    if down.returncode != 0 or left:  # a defect: said (what is left, `fathom cluster down --dir` removes)
        raise SystemExit(f"cluster down left something: {down.stderr[-1000:]} {left}")
    shutil.rmtree(d.parent)  # the bench's own directory (the cluster's logs and data in it)
    return {"hosts": n, "daemons": len(st.get("daemons") or []), "up_s": round(up_s, 1),
            "ready_s": st.get("ready_s"), "down_s": round(down_s, 1),
            "peak_mib": round((peak.peak - base) / MIB), "daemons_rss_mib": round(rss / MIB),
            "sampler_cpu_pct": round(with_box, 3), "sampler_cpu_pct_daemons_only": round(without, 3)}


def spread(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.1f} ({min(xs):g}–{max(xs):g})" if len(xs) > 1 else f"{xs[0]:g}"


def section(rows: list[dict], seconds: float) -> str:
    out = [TITLE, "",
           f"`make bench-box` (bench/box_scale.py), measured on {platform.node()} ({os.cpu_count()} CPUs, "
           f"{round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, Linux "
           f"{platform.release()}): `fathom cluster up --hosts N --osds N --rgw --host-nic 200mbit` (one OSD and "
           "one RGW on each emulated host, 896 MiB OSD caches: the rgw-scaling suite's shape), then "
           "`fathom cluster down`. Mean and range over the repeats; memory is the machine's in use "
           "(MemTotal - MemAvailable) above what it was before `up`, at its highest from `up` to the end of "
           f"`down`; the sampler runs {seconds:g} s on the idle cluster.", "",
           "| hosts | daemons | runs | up to HEALTH_OK, s | down, s | peak memory, MiB | daemons' RSS once up, MiB "
           "| sampler CPU, % of one core (with the hosts' NICs / daemons only) |",
           "|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["hosts"] for r in rows}):
        rs = [r for r in rows if r["hosts"] == n]
        out.append(f"| {n} | {rs[0]['daemons']} | {len(rs)} | {spread([r['up_s'] for r in rs])} | "
                   f"{spread([r['down_s'] for r in rs])} | {spread([r['peak_mib'] for r in rs])} | "
                   f"{spread([r['daemons_rss_mib'] for r in rs])} | "
                   f"{spread([r['sampler_cpu_pct'] for r in rs])} / "
                   f"{spread([r['sampler_cpu_pct_daemons_only'] for r in rs])} |")
    top = max(r["hosts"] for r in rows)
    out += ["", "Up is the daemons' start one after another (each OSD's mkfs and start on the shared cores), to "
            "HEALTH_OK. Peak memory is what the machine lost (page cache the daemons displaced is not in it); the "
            "daemons' RSS counts the pages they share once per daemon, so it can be the larger. The clusters are "
            f"idle here: under a load each OSD's caches may grow to osd_memory_target, {OSD_CACHE // MIB} MiB, at "
            f"{top} hosts up to {top * OSD_CACHE / 2**30:.1f} GiB for the OSDs together. The sampler's cost is its "
            "thread's CPU (time.thread_time) over the time it ran: one /proc read per daemon and, with the hosts' "
            "NICs, one /proc/<pid>/net/dev per emulated host each second.", ""]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, action="append")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sample-seconds", type=float, default=30.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--docs", type=Path)
    a = ap.parse_args()
    why = netns.available()
    if why:
        raise SystemExit(f"bench-box {why}")
    rows = []
    for _ in range(a.repeat):  # alternated, so a drift of the machine falls on both shapes
        for n in a.hosts or [4, 12]:
            r = once(n, a.sample_seconds)
            print(json.dumps(r), flush=True)
            rows.append(r)
    publish(section(rows, a.sample_seconds), TITLE, a.docs, a.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
