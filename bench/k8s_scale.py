#!/usr/bin/env python3
"""Engines in Kubernetes pods: the orchestrator's CPU, the start skew, and the time to the first measured second
against the SSH path (`make bench-k8s`).

    sudo .venv/bin/python bench/k8s_scale.py [--pods 32] [--seconds 30] [--delay-us 1000] [--rounds 3]
                                             [--json bench/results/k8s-scale.json] [--docs docs/benchmarks.md]

On the real single-node test bed (tests/k8sbed.py; the binaries are built once into ~/.cache/fathom/k8s), with
the engine image imported into its containerd:
- `--pods` pods, one engine each, the null target (each op completes `delay_us` after it was issued), one
  point of `--seconds` started together through the API's exec streams exactly as `fathom run` starts a
  many-host point (bench/hosts_scale.py's point: barrier, clock offsets, one start time, heartbeats, live
  merge); per round: the fathom process's CPU from the first merged interval to the last (every thread:
  the websockets' TLS, record parsing, the live merge) and the start skew across engines;
- the time from `fathom run` (the process started) to the end of the first measured second (the first
  merged interval's time), for a null suite of `--pods` engines, from pods (`--k8s-pods N`: pods made,
  engines checked, started) and over SSH (4 network-namespace hosts x N/4 engines, fathom.hosts.netns: connect,
  upload, start), run alternately, the order swapped each round.
The API server, kubelet, containerd and the engines share this machine's cores with fathom.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests"))
import k8sbed  # noqa: E402
from docsection import update_docs  # noqa: E402
from hosts_scale import point  # noqa: E402

from fathom.hosts import netns  # noqa: E402
from fathom.engines.clients import Clients  # noqa: E402
from fathom.engines.fathom_engine import check_engine  # noqa: E402
from fathom.hosts.transport import OpenContext  # noqa: E402
from fathom.hosts.clients import ClientsSpec  # noqa: E402
from fathom.results.store import Store  # noqa: E402

TITLE = "## Engines in Kubernetes pods"
FATHOM = str(REPO / ".venv" / "bin" / "fathom")
TARGETS = {"orchestrator_cpu_pct_of_core": 25.0, "start_skew_ms": 5.0}


def pods_point(bed: k8sbed.K8sBed, image: str, pods: int, seconds: float, delay_us: int, rnd: int) -> dict:
    spec = ClientsSpec.model_validate({"kubernetes": {"pods": pods, "image": image,
                                                      "kubeconfig": str(bed.kubeconfig)}})
    t0 = time.monotonic()
    clients = Clients.open(spec, OpenContext(f"bench-k8s-{rnd}", say=lambda m: print(m, file=sys.stderr)))
    made_s = time.monotonic() - t0
    return {**point(clients, seconds, delay_us), "pods_made_and_checked_s": round(made_s, 2)}


NULL_SUITE = ("name: k8s-first-second\n"
              "defaults: {{engine: fathom-engine, interface: 'null', rw: randread, bs: 4k, iodepth: 1, "
              "delay_us: {delay}, runtime: 3s}}\nworkloads: [{{name: w}}]\n")


def first_second(args: list[str], tmp: Path, delay_us: int) -> float:
    """Seconds from starting `fathom run` to the end of its first measured second."""
    suite = tmp / "suite.yaml"
    suite.write_text(NULL_SUITE.format(delay=delay_us))
    db = tmp / f"r{time.monotonic_ns()}.db"
    t0 = time.time()
    p = subprocess.run([FATHOM, "run", str(suite), "--db", str(db), *args], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"fathom run failed: {p.stdout[-2000:]}{p.stderr[-2000:]}")
    with Store(db) as st:
        (pt,) = st.points(st.run("latest").id)
        first = min(float(r["ts"]) for r in st.intervals(pt["id"]) if not r.get("ramp"))
    return first - t0


def spread(xs: list[float], unit: str, digits: int = 2) -> str:
    return (f"{statistics.median(xs):.{digits}f} {unit} (min {min(xs):.{digits}f}, max {max(xs):.{digits}f}, "
            f"{len(xs)} runs)")


def section(r: dict) -> str:
    cpu, skew = r["cpu"], r["skew"]
    ok = {"cpu": max(cpu) <= TARGETS["orchestrator_cpu_pct_of_core"],
          "skew": max(skew) <= TARGETS["start_skew_ms"]}
    mark = {True: "met in every run", False: "NOT met in every run"}
    ratio = [p / s for p, s in zip(r["first_pods"], r["first_ssh"])]
    return "\n".join([
        TITLE, "",
        f"`make bench-k8s` (bench/k8s_scale.py), measured on {platform.node()} ({os.cpu_count()} CPUs, Linux "
        f"{platform.release()}) with the single-node test bed (Kubernetes {k8sbed.K8S_VERSION}, containerd, runc: "
        f"tests/k8sbed.py) on the same cores: {r['pods']} pods of one engine each, the null target with a "
        f"{r['delay_us']} µs op delay, iodepth 1, one point of {r['seconds']:g} s started together through the "
        f"API's exec streams as `fathom run` starts a many-host point; {r['rounds']} rounds.", "",
        "| figure | median (min, max) | target |", "|---|---|---|",
        f"| orchestrator CPU, % of one core, every thread (exec websockets, records, live merge) | "
        f"{spread(cpu, '%')} | under 25 ({mark[ok['cpu']]}) |",
        f"| start skew across the {r['pods']} engines, ms | {spread(skew, 'ms', 3)} | under 5 ({mark[ok['skew']]}) |",
        f"| pods made, running and their engines checked, s | {spread(r['made'], 's')} | |",
        f"| `fathom run` to the first measured second, {r['pods']} engines in pods, s | "
        f"{spread(r['first_pods'], 's')} | |",
        f"| the same over SSH, 4 hosts x {r['pods'] // 4} engines (network namespaces), s | "
        f"{spread(r['first_ssh'], 's')} | |",
        f"| pods / SSH, per pair | {spread(ratio, 'x')} | |", "",
        "The pods and the orchestrator share 2 cores with the API server, the kubelet and containerd, which "
        "start the pods; the start skew is the spread of the engines' own starts after one start time was sent "
        "(one kernel clock: no clock error in it). The time to the first second from pods includes making the "
        "pods (owner, pods; no Secret for the null target), waiting until they run and each engine's `--version` "
        "check through an exec stream (the pods are removed after the point); over SSH it includes connecting "
        "and checking the uploaded engine.", ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--delay-us", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--docs", type=Path)
    a = ap.parse_args()
    if why := k8sbed.available():
        raise SystemExit(f"the Kubernetes test bed cannot start here: {why}")
    k8sbed.ensure_built(say=lambda m: print(m, file=sys.stderr))
    r: dict = {"pods": a.pods, "seconds": a.seconds, "delay_us": a.delay_us, "rounds": a.rounds, "cpu": [],
               "skew": [], "made": [], "first_pods": [], "first_ssh": [], "points": []}
    with k8sbed.K8sBed() as bed, netns.Testbed(hosts=4, max_sessions=a.pods // 4 + 10) as tb, \
            tempfile.TemporaryDirectory(prefix="fathom-k8s-scale-") as d:
        tar, image = k8sbed.engine_image(check_engine(), k8sbed.cache_dir() / "test-images")
        bed.import_image(tar)
        clients = Path(d) / "clients.yaml"
        clients.write_text(json.dumps({"hosts": [
            {"host": h.addr, "user": "root", "key_file": tb.key_file, "instances": a.pods // 4,
             "engine_dir": f"{tb.dir}/engine-{i}"} for i, h in enumerate(tb.hosts)], "known_hosts": tb.known_hosts}))
        pods_args = ["--kubeconfig", str(bed.kubeconfig), "--k8s-image", image, "--k8s-pods", str(a.pods)]
        for rnd in range(a.rounds):
            p = pods_point(bed, image, a.pods, a.seconds, a.delay_us, rnd)
            r["points"].append(p)
            r["cpu"].append(p["orchestrator_cpu_pct_of_core"])
            r["skew"].append(p["start_skew_ms"])
            r["made"].append(p["pods_made_and_checked_s"])
            for which in (("pods", "ssh") if rnd % 2 == 0 else ("ssh", "pods")):
                args = pods_args if which == "pods" else ["--clients-file", str(clients)]
                r[f"first_{which}"].append(first_second(args, Path(d), a.delay_us))
            print(f"round {rnd + 1}: cpu {r['cpu'][-1]:.2f}% skew {r['skew'][-1]:.3f} ms first second: pods "
                  f"{r['first_pods'][-1]:.2f} s, ssh {r['first_ssh'][-1]:.2f} s", file=sys.stderr, flush=True)
    text = section(r)
    print(text)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(r, indent=1))
    if a.docs:
        update_docs(a.docs, TITLE, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
