"""The 2014 file study's own tables (study `files-study`, fathom.report.studies): from the runs that name
it, the fs-apps suite's and the imported 2014 figures.

Read and write throughput (KiB/s, the study's unit) per scenario, grid point (jobs/files) and
target; the client's context switches per op (the study's chart); percentiles and client and
daemon CPU; and, when the published 2014 table is imported into the same store
(`fathom import table cephfs-rbd-nfs-local-2014.csv`) and reported beside the run, how the
targets rank in each cell here and in 2014: shapes and rankings, never absolute numbers (1 GbE
and SATA disks then, one 2-core VM now).
"""

from __future__ import annotations

from typing import Any

from fathom.analysis.data import RunData, StoredPoint
from fathom.report.doc import Section, Table, fmt

SCENARIOS = ("db", "logs", "office", "blob")
DIRECTIONS = {"db": ("read", "write"), "logs": ("write",), "office": ("read", "write"), "blob": ("read",)}
# fathom's targets and the 2014 target each stands in for (none: no kernel clients here). 2014's NFS v4
# server exported its local disk: nfslocal (ganesha over a local directory) stands in for it; nfscephfs
# (ganesha over CephFS) had no 2014 counterpart.
STAND_IN = {"local": "local", "fuse": "cephfs_fuse", "rbdext4": "rbd", "cephfs": "cephfs_kernel", "nfslocal": "nfs"}
DAEMONS = ("mds", "fuse", "rbd_fuse", "ganesha", "osd")  # daemon kinds whose CPU the latency table shows
NOTES = [
    "Differences from 2014: no kernel CephFS, RBD or NFS client on this machine; CephFS through libcephfs "
    "(no mount) stands in for the kernel client and ext4 on rbd-fuse + a loop device for krbd; one 2-core VM "
    "runs the cluster and the client (2014: three servers on 1 GbE, SATA disks, the client in a VM); fio's "
    "options are inferred from the published figures (size-bound, one pass per job, jobs sharing the files).",
    "NFS: nfs-ganesha on loopback (NFSv4.0) over CephFS (nfscephfs) or over a local directory (nfslocal), "
    "reached through libnfs, a user-space client with no page cache: every read and write is an RPC (the 2014 "
    "kernel NFS client cached pages and read ahead). libnfs 4.0 also sends a write as WRITE RPCs of at most "
    "3 KiB each, all in flight at once (its NFSv4 encode buffer is 4 KiB), where a kernel client sends one.",
]


def _measured(p: StoredPoint) -> tuple[str, str] | None:
    """(scenario, target) of an fs-apps point: its workload is '<scenario>-<target>'."""
    scen, _, target = p.workload.partition("-")
    return (scen, target) if scen in SCENARIOS and target else None


def _cell_key(scen: str, direction: str, jobs: Any, files: Any) -> tuple[int, str, int, int]:
    return (SCENARIOS.index(scen), direction, int(jobs), int(files))


def collect(runs: list[RunData]) -> tuple[dict, dict, list[str], list[str]]:
    """(ours, theirs): cell -> target -> KiB/s (means over repetitions), and the targets of each, in order."""
    ours: dict[tuple, dict[str, list[float]]] = {}
    theirs: dict[tuple, dict[str, list[float]]] = {}
    ot: dict[str, None] = {}
    tt: dict[str, None] = {}
    for r in runs:
        for p in r.points:
            if p.status != "done":
                continue
            if p.published and "scenario" in p.params:
                scen, d = str(p.params["scenario"]), str(p.params["direction"])
                if scen not in SCENARIOS:
                    continue
                # the 2014 table's own column `target`, the import's split key (in its env), not a cluster
                target = str(p.published.get("target") or r.env.get("target") or r.name)
                kib = p.m(f"{d}_bw_mib_s")
                if kib is not None:
                    key = _cell_key(scen, d, p.params["numjobs"], p.params["files"])
                    theirs.setdefault(key, {}).setdefault(target, []).append(kib * 1024)
                    tt.setdefault(target, None)
                continue
            st = _measured(p)
            if st is None or "nrfiles" not in p.params:
                continue
            scen, target = st
            for d in DIRECTIONS[scen]:
                v = p.m(f"{d}_bw_mib_s")
                if v is not None:
                    key = _cell_key(scen, d, p.params["numjobs"], p.params["nrfiles"])
                    ours.setdefault(key, {}).setdefault(target, []).append(v * 1024)
                    ot.setdefault(target, None)
    mean = {k: {t: sum(v) / len(v) for t, v in c.items()} for k, c in ours.items()}
    tmean = {k: {t: sum(v) / len(v) for t, v in c.items()} for k, c in theirs.items()}
    return mean, tmean, list(ot), list(tt)


def _label(key: tuple) -> list[str]:
    return [SCENARIOS[key[0]], key[1], f"{key[2]}/{key[3]}"]


def _ranking(cell: dict[str, float], names: list[str]) -> str:
    have = [(cell[n], n) for n in names if cell.get(n) is not None]
    return " > ".join(n for _, n in sorted(have, reverse=True))


def sections(runs: list[RunData]) -> list[Section]:
    ours, theirs, otargets, ttargets = collect(runs)
    if not ours:
        return []
    keys = sorted(ours)
    tables = [Table("Throughput per scenario and target (KiB/s), fathom", ["scenario", "direction", "jobs/files",
                                                                            *otargets],
                    [_label(k) + [fmt(ours[k].get(t), "int") for t in otargets] for k in keys],
                    ["l", "l", "r"] + ["r"] * len(otargets), list(NOTES))]
    by_point: dict[tuple, list[StoredPoint]] = {}
    for r in runs:
        for p in r.points:
            st = _measured(p)
            if st and p.status == "done" and "nrfiles" in p.params:
                by_point.setdefault((SCENARIOS.index(st[0]), int(p.params["numjobs"]), int(p.params["nrfiles"]),
                                     st[1]), []).append(p)
    rows = []
    for (si, jobs, files, target), ps in sorted(by_point.items()):
        p = ps[0]
        daemons = ", ".join(f"{k} {fmt(p.m(k + '_cpu'), 'int')}" for k in DAEMONS
                            if p.m(k + "_cpu") is not None)
        rows.append([SCENARIOS[si], f"{jobs}/{files}", target, fmt(p.m("client_ctx_per_op")),
                     fmt(p.m("p50_ms")), fmt(p.m("p99_ms")), fmt(p.m("client_cpu_us_per_op")),
                     daemons or "n/a"])
    tables.append(Table("Client context switches per op, latency and CPU",
                        ["scenario", "jobs/files", "target", "ctx switches / op", "p50 (ms)", "p99 (ms)",
                         "client CPU (µs/op)", "daemon CPU (% of one core)"], rows,
                        ["l", "r", "l", "r", "r", "r", "r", "l"],
                        ["ctx switches: voluntary + involuntary of the whole engine process in the measured phase, "
                         "per op (the 2014 study charted fio's per-job sum)."]))
    if theirs:
        rank_rows = []
        agree = 0
        compared = 0
        for k in keys:
            mine = {t: ours[k][t] for t in otargets if t in STAND_IN and t in ours[k]}
            pub = theirs.get(k, {})
            mapped = {t: pub.get(STAND_IN[t]) for t in mine}
            if len([v for v in mapped.values() if v is not None]) < 2:
                continue
            a, b = _ranking(mine, list(mine)), _ranking(mapped, list(mapped))
            compared += 1
            agree += a == b
            rank_rows.append(_label(k) + [a, b, "same" if a == b else "differs",
                                          fmt(pub.get("nfs"), "int")])
        tables.append(Table("Ranking of targets per cell: fathom here vs the 2014 study",
                            ["scenario", "direction", "jobs/files", "fathom (fastest first)",
                             "2014, same targets (fastest first)", "order", "2014 NFS (KiB/s)"], rank_rows,
                            ["l", "l", "r", "l", "l", "l", "r"],
                            [f"Same order in {agree} of {compared} cells. 2014 names: "
                             + ", ".join(f"{k} = {v}" for k, v in STAND_IN.items()) + "."]))
    return [Section("2014 file study (fs-apps)", "KiB/s", [], tables, [])]
