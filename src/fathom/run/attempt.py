"""One attempt at a run, and the record the run's attempts keep for the next one.

A run is attempted until its points are done: the first `fathom run`, then each
`--resume`. What one attempt leaves for the next lives in the run's state record
(Store.merge_state), apart from its environment (what was measured on):
- `data_tag`: names what the run's points leave in the cluster (objects, pools on an
  attached cluster); the same for every attempt, so a resumed read finds what an
  earlier attempt wrote;
- `attempts`: one record per attempt (tag, start, the host and pid of its process, its
  scratch directory and its disposable cluster's directory, recorded before either is
  used, so the next attempt removes or adopts what a killed one left, and
  `fathom cluster restore` knows whether the run's process is gone);
- `data_lost`: finished write points whose data is gone, and why, until written again;
- `pools` and `prefill`: the pools the attempts prepared and how their images were filled;
- `journal`: the undo journal of what the attempts made and changed on the cluster
  (fathom.cluster.journal: pools, images, RGW users and placements, settings);
- `attached_with`: the options the run was attached with (fathom.run.reattach), which
  `--resume` uses where its command line gives none.
"""

from __future__ import annotations

import os
import platform
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom.cluster import health
from fathom.cluster.local import LocalCluster
from fathom.cluster.journal import K8S_KIND, OBJECT_KINDS, RGW_KINDS, SETTING, Journal
from fathom.errors import ClusterError
from fathom.suite.spec import ClusterSpec
from fathom.results.store import Store

ADOPT_GATE_S = 60.0  # a left-behind disposable cluster not clean within this is not measured on


@dataclass
class Attempt:
    store: Store
    run_id: int
    data_tag: str
    tag: str  # names this attempt in the run's record
    records: list[dict[str, Any]]  # every attempt's, this one's last
    state: dict[str, Any]  # the run's state as this attempt found it
    say: Callable[[str], None]
    data_lost: dict[str, str] = field(default_factory=dict)
    workdir: Path = Path()

    @classmethod
    def begin(cls, store: Store, run_id: int, todo: int, say: Callable[[str], None]) -> Attempt:
        state = store.run(run_id).state
        # the random part keeps two runs with the same id (two result databases) apart on one cluster
        data_tag = state.get("data_tag") or f"fathom-{run_id}-{secrets.token_hex(3)}"
        records = [*state.get("attempts", []), {"tag": f"{data_tag}-a{len(state.get('attempts', [])) + 1}",
                                                "started": time.time(), "todo": todo,
                                                # whose process this is: `fathom cluster restore` leaves a run
                                                # alone while it lives, and ends it as interrupted once gone
                                                "host": platform.node(), "pid": os.getpid()}]
        store.merge_state(run_id, attempts=records, data_tag=data_tag)
        a = cls(store, run_id, data_tag, records[-1]["tag"], records, state, say, dict(state.get("data_lost") or {}))
        # Scratch files (engine specs, job files, client conf) stay per attempt: a killed attempt's
        # directory is removed by the next attempt, which must never remove its own files with it.
        a.workdir = Path(tempfile.mkdtemp(prefix=f"fathom-run{run_id}-"))
        a.record(workdir=str(a.workdir))  # so a later --resume can remove it if this process is killed
        return a

    @property
    def earlier(self) -> list[dict[str, Any]]:
        return self.records[:-1]

    def record(self, **fields: Any) -> None:
        """Add to this attempt's record, kept at once."""
        self.records[-1].update(fields)
        self.store.merge_state(self.run_id, attempts=self.records)

    def save(self, **fields: Any) -> None:
        self.store.merge_state(self.run_id, **fields)

    def note(self, msg: str, kind: str = "resume", **data: Any) -> None:
        """Tell the user and keep it in the run's events."""
        self.say(msg)
        self.store.add_event(self.run_id, kind, msg, data=data or None)

    def lose(self, keys: set[str], why: str) -> None:
        """Finished write points whose data is gone: a later reader needs them written again."""
        self.data_lost.update({k: why for k in keys})
        self.save(data_lost=self.data_lost)

    def found(self, key: str) -> None:
        if self.data_lost.pop(key, None) is not None:
            self.save(data_lost=self.data_lost)

    def journal(self, fsid: str, conn: dict[str, Any], disposable: bool) -> Journal:
        """The run's undo journal for this attempt on the cluster `fsid`, kept in the run's state record at every
        change. What earlier attempts made and changed on this cluster stays in it: theirs to adopt, and this
        attempt's to undo. What they left on another cluster is refused while settings there are still to be put
        back (unless that was a disposable cluster, gone or stopped), and otherwise dropped: it is not here."""
        j = Journal.from_dict(self.state.get("journal"), persist=lambda rec: self.save(journal=rec))
        pending = j.pending()
        if j.fsid is None:  # recorded before journals named their cluster: only what carries the run's name
            mine = f"fathom-{self.run_id}-"
            j.entries = [e for e in j.entries if e.undone or (e.kind in (*OBJECT_KINDS, *RGW_KINDS)
                                                             and e.what.startswith(mine))]
        elif pending and j.fsid != fsid:
            settings = [e for e in pending if e.kind == SETTING]
            if settings and not j.disposable and not j.moot:
                conf = j.conn.get("conf")
                raise ClusterError(
                    f"{len(settings)} setting(s) changed by an earlier attempt are still to be restored on another "
                    f"cluster (fsid {j.fsid}, conf {conf}), not this one (fsid {fsid})",
                    hint="restore them first: `" + shlex.join(["fathom", "cluster", "restore", "--conf", str(conf),
                                                               "--db", str(self.store.path), "--run",
                                                               str(self.run_id)]) + "`")
            if not j.disposable and not j.moot:  # a disposable cluster took what was made on it along
                self.note(f"what an earlier attempt made on cluster {j.fsid} ({len(pending)} journal entries) is "
                          f"not on this one ({fsid}): not adopted", entries=[e.to_dict() for e in pending])
            j.entries = [e for e in j.entries if e.undone or e.kind == K8S_KIND]  # pods are not on a cluster
        j.fsid, j.conn, j.disposable, j.moot = fsid, conn, disposable, None
        j.save()
        return j

    def left_behind(self, want: ClusterSpec | None) -> tuple[LocalCluster | None, str | None]:
        """Deal with what killed attempts left: their disposable clusters and scratch directories.

        A killed attempt (SIGKILL) cannot clean up; its cluster keeps running, with the
        data its points wrote. When `want` (this attempt needs a disposable
        cluster of that shape), the newest such cluster is adopted if it is usable; every
        other one is stopped. Returns the adopted cluster and the tag of the attempt that started it.
        """
        adopted: tuple[LocalCluster | None, str | None] = (None, None)
        seen: set[str] = set()
        for a in reversed(self.earlier):
            w = a.get("workdir")
            if w and Path(w).name.startswith("fathom-run") and Path(w).is_dir():
                shutil.rmtree(w, ignore_errors=True)
            d = a.get("cluster_dir")
            if not d or d in seen or not LocalCluster(d).exists():
                continue
            seen.add(d)
            lc = LocalCluster(d, progress=self.say)
            why = _unusable(lc, want) if want is not None and adopted[0] is None else "this attempt does not use it"
            if why is None:
                self.note(f"adopted the disposable cluster an interrupted attempt left in {d}, with the data its "
                          "points wrote", cluster_dir=d, attempt=a.get("tag"))
                adopted = (lc, a.get("tag"))
                continue
            self.note(f"stopping the disposable cluster an interrupted attempt left in {d}: {why}", cluster_dir=d,
                      attempt=a.get("tag"))
            lc.down()
        return adopted

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def _unusable(lc: LocalCluster, want: ClusterSpec) -> str | None:
    """Why a left-behind disposable cluster cannot serve this attempt, or None when it can."""
    dead = [d.name for d in lc.daemons() if not d.running]
    if dead or not lc.daemons():
        return f"{', '.join(dead) or 'its daemons'} not running"
    st = lc.state() or {}
    have = (st.get("osds"), st.get("objectstore"), st.get("osd_size"))
    if have != (want.osds, want.objectstore, want.osd_size):
        return f"it has {have[0]} OSD(s), {have[1]}, {have[2]} bytes each; the suite asks for " \
               f"{want.osds}, {want.objectstore}, {want.osd_size}"
    from fathom.cluster import cephsrc

    src = cephsrc.resolve(want.ceph)
    if lc.source() != src:
        return f"its daemons come from {lc.source().kind} {lc.source().dir or ''}; the suite asks for " \
               f"{src.kind} {src.dir or ''}"
    if want.mds and not st.get("mds"):
        return "it has no MDS; the suite asks for one"
    if want.rgw and not st.get("rgw"):
        return "it has no RGW; the suite asks for one"
    verdict = health.gate(lc.ceph(timeout=15), timeout=ADOPT_GATE_S)
    if not verdict.ok:
        return f"not clean after {ADOPT_GATE_S:.0f} s: {verdict.reason}"
    return None
