"""Per-daemon perf counters through the mons, with no host access: `ceph tell osd.* perf dump` (and mds.*).

An attached cluster whose hosts fathom cannot reach (no --server-host, no admin socket here) still answers
`ceph tell`: the mon forwards the command to each daemon, which answers with its own counters, as its admin
socket would. Nothing of the cluster's configuration changes (unlike the mgr module, which Reef and later must be
told to export perf counters). The counters are a `perf dump`'s, in its shape, read at the point's start and end,
so fathom.results.usage.perf_deltas makes the point's deltas as for the admin socket. `perf dump` rather than
Reef's `counter dump`: the same counters, and every release answers it (the labelled ones `counter dump` adds,
Squid's per-bucket RGW op counters, are RGW's, which `ceph tell` does not reach).

Each read is one `ceph tell` per daemon kind, all daemons of the kind at once; a daemon that does not answer (down,
or too old for a command) is named in the event and left out. The reads run on the point's boundaries, not
during it: their cost is a `ceph` command, not load on the cluster while it is measured.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fathom.cluster.ceph import Ceph
from fathom.companion import Companion, Contribution, Live
from fathom.errors import FathomError
from fathom.results import usage

SOURCE = "ceph-tell"
KINDS = ("osd", "mds")
# `ceph tell KIND.* CMD` prints each daemon's answer after its name: "osd.0: {...}"
_ANSWER = re.compile(r"^((?:osd|mds|mon)\.[\w.-]+): ", re.M)


def parse(text: str) -> dict[str, dict[str, Any]]:
    """Each daemon's JSON answer in a wildcard `ceph tell` output, by daemon name; answers that are no JSON object
    (an error line) are left out."""
    out: dict[str, dict[str, Any]] = {}
    marks = list(_ANSWER.finditer(text))
    for i, m in enumerate(marks):
        body = text[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip()
        try:
            doc = json.loads(body)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            out[m.group(1)] = doc
    return out


def dump(ceph: Ceph, kinds: tuple[str, ...] = KINDS, timeout: float = 60.0) -> tuple[dict[str, Any], list[str]]:
    """Every daemon's perf dump of the given kinds, and the problems met (a kind with no daemon is none)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for kind in kinds:
        try:
            p = ceph.call("ceph", "tell", f"{kind}.*", "perf", "dump", "--format", "json", fmt_json=False,
                          check=False, timeout=timeout)
        except FathomError as exc:
            problems.append(f"{kind}.*: {exc.message}")
            continue
        got = parse(p.stdout)
        out.update(got)
        for line in (p.stderr or "").splitlines():
            if line.startswith("Error") or "problem" in line:
                problems.append(line.strip())
    return out, problems


class TellCompanion(Companion):
    """Perf counter deltas of every OSD and MDS over a point through `ceph tell`. Placed after the admin sockets'
    and the mgr module's companions: where those give a daemon's counters, theirs win (fathom.run.point)."""

    def __init__(self, ceph: Ceph, kinds: tuple[str, ...] = KINDS):
        self.ceph, self.kinds = ceph, kinds
        self._before: dict[str, Any] = {}
        self._problems: list[str] = []

    def start(self, live: Live) -> None:
        self._before, self._problems = dump(self.ceph, self.kinds)

    def stop(self) -> Contribution:
        after, problems = dump(self.ceph, self.kinds)
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
