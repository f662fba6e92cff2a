"""Per-daemon perf counters through the mons, with no host access: `ceph tell osd.N perf dump` (and each MDS).

An attached cluster whose hosts fathom cannot reach (no --server-host, no admin socket here) still answers
`ceph tell`: the mon forwards the command to each daemon, which answers with its own counters, as its admin
socket would. Nothing of the cluster's configuration changes (unlike the mgr module, which Reef and later must be
told to export perf counters). The counters are a `perf dump`'s, in its shape, read at the point's start and end,
so fathom.results.usage.perf_deltas makes the point's deltas as for the admin socket. `perf dump` rather than
Reef's `counter dump`: the same counters, and every release answers it (the labelled ones `counter dump` adds,
Squid's per-bucket RGW op counters, are RGW's, which `ceph tell` does not reach).

Each read is one `ceph tell` per daemon (`ceph node ls` names them), four at a time; a daemon that does not answer
(down, or too old for a command) is named in the event and left out. The reads run on the point's boundaries, not
during it: their cost is a `ceph` command, not load on the cluster while it is measured. The point's readers (these
counters and the OSD latency histograms, fathom.servers.osdlat) share one `ceph node ls` per point end (NodeList).
"""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any, Callable

from fathom.cluster.ceph import Ceph
from fathom.companion import Companion, Contribution, Live
from fathom.errors import FathomError
from fathom.results import usage

SOURCE = "ceph-tell"
KINDS = ("osd", "mds")
START, STOP = "start", "stop"  # a point's two ends, where its readers ask the daemons


class NodeList:
    """`ceph node ls` for a run's `ceph tell` readers (perf counters, OSD latency histograms): asked once per point
    end by whichever reader comes first, the same answer for the others at that end. Daemons come and go between
    points and during one, so an answer never serves another end (nor another point: `live` is the point's own)."""

    def __init__(self, ceph: Ceph):
        self.ceph = ceph
        self._end: tuple[object, str] | None = None
        self._answer: dict[str, Any] | FathomError = {}

    def at(self, live: object, end: str) -> dict[str, Any]:
        """The answer at `end` (START, STOP) of the point `live` stands for; a failed read raises its FathomError
        for every reader of that end (one timeout, not one per reader)."""
        if self._end is None or self._end[0] is not live or self._end[1] != end:
            try:
                self._answer = self.ceph.ceph("node", "ls", timeout=30) or {}
            except FathomError as exc:
                self._answer = exc
            self._end = (live, end)
        if isinstance(self._answer, FathomError):
            raise self._answer
        return self._answer


def daemons(ceph: Ceph, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """The cluster's daemons of these kinds, by the mons' record of where each runs (`ceph node ls`)."""
    return named(ceph.ceph("node", "ls", timeout=30) or {}, kinds)


def named(nodes: dict[str, Any], kinds: tuple[str, ...]) -> list[str]:
    """`ceph node ls`'s {kind: {host: [ids or names]}} as daemon names (osd.0, mds.a), in order."""
    return sorted((f"{kind}.{name}" for kind in kinds for names in (nodes.get(kind) or {}).values()
                   for name in names), key=lambda n: (n.split(".")[0], int(n.split(".", 1)[1])
                                                      if n.split(".", 1)[1].isdigit() else 0, n))


def dump(ceph: Ceph, kinds: tuple[str, ...] = KINDS, command: tuple[str, ...] = ("perf", "dump"),
         timeout: float = 60.0, nodes: Callable[[], dict[str, Any]] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Each daemon's answer to `command` (default its perf dump), and the problems met. One `ceph tell` per
    daemon, four at a time: a wildcard's answers come unnamed when there is one daemon, and the ceph command of
    some releases cuts an output over 64 KiB written to a pipe (a histogram dump of a few OSDs is larger).
    nodes: where `ceph node ls`'s answer comes from (a NodeList's, shared at a point end); default: asked here."""
    try:
        names = named(nodes(), kinds) if nodes is not None else daemons(ceph, kinds)
    except FathomError as exc:
        return {}, [f"ceph node ls: {exc.message}"]

    def one(name: str) -> tuple[str, Any, str | None]:
        try:
            p = ceph.call("ceph", "tell", name, *command, "--format", "json", fmt_json=False, check=False,
                          timeout=timeout)
        except FathomError as exc:
            return name, None, exc.message
        try:
            doc = json.loads(p.stdout)
        except json.JSONDecodeError:
            last = (p.stderr or p.stdout).strip().splitlines()
            return name, None, last[-1] if last else f"exit {p.returncode}"
        return name, doc, None

    out: dict[str, Any] = {}
    problems: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for name, doc, problem in pool.map(one, names):
            if isinstance(doc, dict):
                out[name] = doc
            else:
                problems.append(f"{name}: {problem or 'no answer'}")
    return out, problems


class TellCompanion(Companion):
    """Perf counter deltas of every OSD and MDS over a point through `ceph tell`. Placed after the admin sockets'
    and the mgr module's companions: where those give a daemon's counters, theirs win (fathom.run.point)."""

    def __init__(self, ceph: Ceph, kinds: tuple[str, ...] = KINDS, nodes: NodeList | None = None):
        self.ceph, self.kinds = ceph, kinds
        self.nodes = nodes or NodeList(ceph)
        self._live: object = None
        self._before: dict[str, Any] = {}
        self._problems: list[str] = []

    def _dump(self, end: str) -> tuple[dict[str, Any], list[str]]:
        return dump(self.ceph, self.kinds, nodes=lambda: self.nodes.at(self._live, end))

    def start(self, live: Live) -> None:
        self._live = live
        self._before, self._problems = self._dump(START)

    def stop(self) -> Contribution:
        after, problems = self._dump(STOP)
        problems = sorted(set(self._problems + problems))
        both = {d: after[d] for d in after if d in self._before}
        perf = usage.perf_deltas({d: self._before[d] for d in both}, both)
        data: dict[str, Any] = {"source": SOURCE, "daemons": sorted(perf)}
        if problems:
            data["problems"] = problems
        lost = sorted(set(self._before) ^ set(after))
        if lost:
            data["missing_at_one_end"] = lost
        msg = f"perf counters of {len(perf)} daemon(s) through `ceph tell` ({SOURCE})"
        if problems or lost:
            msg += f"; not from: {', '.join(lost + problems)[:300]}"
        return Contribution(perf_counters=perf, counter_source=SOURCE,
                            events=[{"kind": "perf_counters", "data": data, "message": msg}])
