#!/usr/bin/env python3
"""The host sampler's own cost: `fathom-engine --sample` with N stand-in daemons, its CPU read from /proc.

    PYTHONPATH=src .venv/bin/python bench/sampler_cost.py [--seconds 60] [--interval 1] [--daemons 16]
                                                          [--threads 1] [--engine PATH] [--isolate]

Starts --daemons cheap sleeping processes named `ceph-osd -i N` (python with argv[0] set) with --threads
threads each (a real OSD has 60 or more). The sampler reads the status of every thread that ran since the
last sample, for its context switches; with --wake S each extra thread wakes every S seconds, so with S
below the interval every thread has run at every sample: the costliest case. Runs the sampler for
--seconds at --interval, then reads the sampler's CPU from /proc/PID/schedstat (ns, precise) and
/proc/PID/stat (utime+stime, clock ticks) while it sleeps between samples, and stops it with SIGTERM.
Reports % of one core over its whole life (exec, loading its shared libraries and the first full /proc
scan included) and in steady state (from its first sample on), plus the CPU it reports itself
(self_cpu_s, getrusage). Only the processes it started are stopped.

The sampler reads every Ceph daemon of the host, not only the stand-ins: the report says how many
processes and threads it saw. --isolate (root) runs the whole measurement in a new PID namespace with
its own /proc (`unshare --pid --fork --mount-proc`), so it sees the stand-ins alone even on a host
that runs other clusters; the host-wide files (/proc/stat, net/dev, diskstats) are the host's still.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STANDIN = """
import sys, threading, time
def wake():
    while True:
        time.sleep({wake})
for _ in range({threads} - 1):
    threading.Thread(target=wake if {wake} > 0 else threading.Event().wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def cpu_from_proc(pid: int) -> tuple[float, float]:
    """(schedstat CPU s, stat utime+stime s) of a process."""
    with open(f"/proc/{pid}/schedstat") as f:
        ns = int(f.read().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return ns / 1e9, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--daemons", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="threads per stand-in daemon")
    ap.add_argument("--wake", type=float, default=0.0, help="the extra threads wake every this many s (0: never)")
    ap.add_argument("--engine", default=os.environ.get("FATHOM_ENGINE",
                                                       str(REPO / "engine/target/release/fathom-engine")))
    ap.add_argument("--isolate", action="store_true", help="in a PID namespace of its own (root)")
    a = ap.parse_args()
    if a.isolate:
        argv = [x for x in sys.argv[1:] if x != "--isolate"]
        return subprocess.call(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                                os.path.abspath(__file__), *argv, "--engine", os.path.abspath(a.engine)])
    python = os.path.realpath(sys.executable)
    standins: list[subprocess.Popen] = []
    sampler: subprocess.Popen | None = None
    try:
        for n in range(a.daemons):
            p = subprocess.Popen(["ceph-osd", "-c", STANDIN.format(threads=a.threads, wake=a.wake), "-i", str(n)],
                                 executable=python, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            standins.append(p)
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        sampler = subprocess.Popen([a.engine, "--sample", "--interval", str(a.interval)],
                                   stdout=subprocess.PIPE, text=True)
        assert sampler.stdout is not None
        want = round(a.seconds / a.interval)  # the sample at t = seconds is number want (from 0)
        pids = {p.pid for p in standins}
        first = last = None
        for line in sampler.stdout:
            rec = json.loads(line)
            if rec["type"] != "sample":
                continue
            seen = {p["pid"] for p in rec["procs"]}
            if not pids <= seen:
                print(f"sample {rec['seq']} is missing stand-ins {sorted(pids - seen)}", file=sys.stderr)
                return 1
            if first is None:
                first = (cpu_from_proc(sampler.pid), time.monotonic(), rec)
            if rec["seq"] >= want:
                last = (cpu_from_proc(sampler.pid), time.monotonic(), rec)  # asleep until the next tick
                break
        wall = time.monotonic() - t0
        assert first is not None and last is not None
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(timeout=30)
    finally:
        if sampler is not None and sampler.poll() is None:
            sampler.kill()
            sampler.wait()
        for p in standins:
            if p.stdin is not None:
                p.stdin.close()
        for p in standins:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    (sched1, ticks1), _, rec1 = last
    (sched0, _), _, rec0 = first
    samples = rec1["seq"] - rec0["seq"]
    steady_s = rec1["mono"] - rec0["mono"]
    out = {
        "daemons": a.daemons, "threads_per_daemon": a.threads, "wake_s": a.wake, "interval_s": a.interval,
        "samples": rec1["seq"] + 1,
        "wall_s": round(wall, 3), "cpu_s_schedstat": round(sched1, 6), "cpu_s_stat": ticks1,
        "life_pct_of_core": round(100 * sched1 / wall, 4),
        "steady_pct_of_core": round(100 * (sched1 - sched0) / steady_s, 4),
        "steady_us_per_sample": round(1e6 * (sched1 - sched0) / samples, 1),
        "startup_cpu_s": round(sched0, 4),
        "self_cpu_s": rec1["self_cpu_s"], "self_steady_pct_of_core":
            round(100 * (rec1["self_cpu_s"] - rec0["self_cpu_s"]) / steady_s, 4),
        "processes_seen": len(rec1["procs"]), "threads_seen": sum(p["threads"] for p in rec1["procs"]),
    }
    woken = f", waking every {a.wake} s" if a.wake > 0 else ""
    print(f"sampler, {a.daemons} stand-in daemons x {a.threads} threads{woken} (it saw {out['processes_seen']} "
          f"daemon processes, {out['threads_seen']} threads), {out['samples']} samples at "
          f"{a.interval} s over {wall:.1f} s: {out['life_pct_of_core']} % of one core over its life "
          f"({sched1 * 1e3:.1f} ms CPU, {out['startup_cpu_s'] * 1e3:.1f} ms of it to its first sample), "
          f"{out['steady_pct_of_core']} % in steady state ({out['steady_us_per_sample']} us per sample)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
