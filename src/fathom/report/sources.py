"""Where a run's server figures came from: one table per run that sampled server hosts or read counters
elsewhere than this host's admin sockets, with what no source covered and why.

A figure is only as good as its source, and on a multi-host cluster some are missing: a host fathom could
not reach, a daemon the metadata places where no process has its name, counters the mgr's module does not
export. The point tables show the figures; this says which source gave them and what they leave out.
"""

from __future__ import annotations

from typing import Any

from fathom.analysis.data import RunData
from fathom.report.doc import Section, Table
from fathom.results.usage import NIC_ALL

NAME = "Server measurements: sources"


def _last_sources(r: RunData) -> dict[str, Any]:
    """The hosts of the run's latest `sources` event of the SSH or DaemonSet source (per host: metadata host, daemons,
    missing, foreign, the sampler's own CPU)."""
    for e in reversed(r.events):
        if e["kind"] == "sources" and (e.get("data") or {}).get("source") in ("ssh", "k8s"):
            return e["data"].get("hosts") or {}
    return {}


def table(r: RunData) -> Table | None:
    servers, mgr, prom = r.env.get("servers"), r.env.get("mgr_prometheus"), r.env.get("prometheus")
    here = r.env.get("here") or {}
    if not servers and not mgr and not prom and not here.get("daemons"):
        return None
    seen = _last_sources(r)
    rows = []
    if here.get("daemons") or here.get("missing"):
        rows.append(["this host", here.get("hostname") or "", here.get("host") or "(none)",
                     "this host's /proc (no SSH)", "0",
                     ", ".join(f"{n} (pid {p})" for n, p in sorted(here.get("daemons", {}).items())) or "none",
                     ", ".join(f"{n} ({why})" for n, why in sorted(here.get("missing", {}).items())) or "none"])
    for h in (servers or {}).get("hosts", []):
        s = seen.get(h["hostname"]) or {}
        daemons = ", ".join(sorted(s.get("daemons") or {})) or "none"
        missing = ", ".join(s.get("missing") or []) or "none"
        cost = s.get("sampler_cpu_pct")
        via = f"fathom-sampler in pod {h['name']}" if servers.get("source") == "k8s" else "fathom-sampler over SSH"
        rows.append([h["name"], h["hostname"], h.get("metadata_host") or "(none)",
                     via + (f" ({cost:.2f}% of one core there)" if cost is not None else ""),
                     f"{h['clock_offset_s'] * 1e3:+.1f} ± {h['clock_rtt_s'] * 5e2:.1f}", daemons, missing])
    if prom:
        rows += [[h, h, h, f"node-exporter via Prometheus {prom.get('version') or ''} at {prom['url']}",
                  f"{prom['clock_offset_s'] * 1e3:+.1f}", "none (no per-process figures there)", "n/a"]
                 for h in prom["hosts"]]
        rows += [[h, "", h, "none: Prometheus scrapes no node-exporter there", "", "", "all"]
                 for h in prom.get("not_scraped") or []]
    notes = ["CPU, memory and context switches per daemon, host CPU and NIC bytes: each server host's "
             "fathom-sampler, its samples moved onto this host's clock by the offset shown (measured over SSH, "
             "± half the round trip); this host's daemons by its own /proc, never over SSH. A daemon counts on "
             "the host the cluster's metadata places it on, never where a /proc merely shows a process of that "
             "name; of its namesakes there, the process whose pid its addresses carry (on this host, else the "
             "one listening on its address)."]
    if mgr:
        notes.append(f"Perf counters: the mgr's prometheus module at {mgr.get('url')} for every daemon it exports "
                     "(OSD, MON, MDS, RGW); an OSD or RGW on this host keeps its admin socket's (with histograms). "
                     "The module leaves out counters below priority 'useful' and every histogram (osd.subop*, "
                     "bluestore.kv_commit_lat, rocksdb.*)."
                     + (f" Perf counters in the module: {mgr['perf_counters']}." if mgr.get("perf_counters") else ""))
    else:
        notes.append("Perf counters: admin sockets on this host only; daemons elsewhere have none (pass "
                     "--mgr-prometheus to read every daemon's from the mgr's prometheus module).")
    nic = [f"{h}: {', '.join(n['counted']) or 'none'}"
           + (f" (left out: {', '.join(f'{i} {why}' for i, why in n['left_out'].items() if i != 'lo')})"
              if any(i != "lo" for i in n["left_out"]) else "")
           for h, s in sorted(seen.items()) if (n := s.get("nics"))]
    if nic:
        notes.append("NIC bytes counted on each byte's interface at the top of its stack (a bridge, not its ports; "
                     "a bond, not its members; a VLAN, not its parent): " + "; ".join(nic) + ".")
    if prom and prom.get("hosts"):
        notes.append(f"NIC bytes of {', '.join(prom['hosts'])} (Prometheus): {NIC_ALL}.")
    for name, insts in sorted((prom or {}).get("scraped_twice", {}).items()):
        notes.append(f"{name} is scraped by {len(insts)} node-exporter targets ({', '.join(insts)}) that report one "
                     f"boot time, so one host: its figures are {insts[0]}'s, counted once.")
    where: dict[tuple[str, int], list[str]] = {}  # (daemon name, pid) -> the hosts whose /proc shows it
    for h, s in sorted(seen.items()):
        for n, pids in (s.get("foreign") or {}).items():
            for pid in pids:
                where.setdefault((n, pid), []).append(h)
    for n, pids in (here.get("not_counted") or {}).items():
        for pid in pids:
            where.setdefault((n, pid), []).append("this host")
    other = [f"{n} (pid {pid} on {', '.join(hs)})" for (n, pid), hs in sorted(where.items())]
    if other:
        notes.append("Not counted: processes with the name of one of this cluster's daemons that are not it "
                     "(another cluster's: on a host the metadata does not place that daemon on, or beside the "
                     "process its addresses name), and gateways and clients (nfs-ganesha, ceph-fuse, rbd-fuse) "
                     "nothing ties to this run or cluster (neither a pid fathom started, nor the cluster's fsid in "
                     "their cephadm unit, nor the run's conf in their command line), with the hosts whose /proc "
                     "shows each: " + ", ".join(other) + ".")
    lost = sorted({e["message"] for e in r.events if e["kind"] in ("server_lost", "server_late", "servers")
                   or (e["kind"] == "sources" and (e.get("data") or {}).get("error"))})
    notes += lost
    return Table(f"{r.name}: server hosts", ["host", "hostname", "metadata host", "source", "clock offset (ms)",
                                             "daemons counted", "placed there, not found"],
                 rows, ["l", "l", "l", "l", "r", "l", "l"], notes)


def sections(runs: list[RunData]) -> list[Section]:
    tables = [t for r in runs if (t := table(r)) is not None]
    return [Section(NAME, "", [], tables, [])] if tables else []
