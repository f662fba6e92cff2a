"""The undo journal: everything fathom makes or changes on a cluster, written down before it is done.

One entry per thing, in the order done; undone newest first, each marked as it goes, so a
process killed at any moment leaves a journal that names everything it may have made or
changed (also what it was about to, which may not exist: undoing skips what is gone).

Kinds, and the module that writes and undoes them:
    setting                      fathom.cluster.restore (hygiene: OSD flags, balancer, config db, pool options)
    pool, ec_profile, image      fathom.cluster.prep
    rgw_user, rgw_placement      fathom.cluster.rgw
    s3_bucket                    fathom.cluster.buckets (a bucket a run's PUT makes or writes into, written by the s3
                                 interface's prepare step: data names its endpoint, keys file, the run's object
                                 prefix and whether fathom made it)
    fuse, loop, mount, daemon    fathom.cluster.mounts and .ganesha (on fathom's local cluster)
    sampler                      fathom.servers (the fathom-sampler uploaded to a server host over SSH)
    fault                        fathom.hosts.impair (a host's qdisc, its routes cut, its daemons frozen or killed
                                 for a fault: data says how to put it back, on which host; never a key)
    k8s                          fathom.hosts.k8s.objects (a run's pods, their owner and Secret: data names the
                                 owner) and fathom.hosts.k8s.journaled (one object, the sampler's DaemonSet: its kind)

One type, two homes. A run's journal lives in its state record in the results store
(`journal`): it is valid on one cluster (`fsid`), and `--resume` and `fathom cluster restore`
read it. Mounts and daemons live with fathom's local cluster and outlive any one run, so that
cluster's own journal is a file in its directory, which `fathom cluster down` reads without a
store. A journal's record never holds key material: connection paths and names only.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Persist = Callable[[dict[str, Any]], None]
SETTING = "setting"
OBJECT_KINDS = ("pool", "ec_profile", "image")
RGW_KINDS = ("rgw_user", "rgw_placement")
S3_KIND = "s3_bucket"  # data: endpoint, keys_file, ca_file (paths, never a key), prefix, made, user
MOUNT_KINDS = ("fuse", "loop", "mount", "daemon")
SAMPLER_KIND = "sampler"  # data: host, port, user, key_file, known_hosts (paths, never a key), path, dirs
# data: kubeconfig (a path), context, namespace, and either run, owner, pods, secret (a run's pods) or kind,
# name, labels, uid once made (one object); never a key
K8S_KIND = "k8s"
FAULT_KIND = "fault"


@dataclass
class Entry:
    """One thing fathom made or changed, and what undoing it needs."""

    kind: str
    what: str  # the thing: a pool's name, "pool/image", "osd flag noscrub", a mount point, a daemon's name
    undo: str = ""  # the exact command that undoes it, where one command does (settings: `ceph osd unset noscrub`)
    prior: str | None = None  # a setting's value before (None: a config option not set in the config db)
    wanted: str | None = None  # a setting's value fathom set
    data: dict[str, Any] = field(default_factory=dict)  # what else undoing it needs (a loop device's file)
    undone: bool = False
    error: str | None = None  # why undoing it failed, when it did

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "what": self.what, "undone": self.undone}
        for k in ("undo", "prior", "wanted", "data", "error"):
            v = getattr(self, k)
            if v or (k == "prior" and self.kind == SETTING):
                d[k] = v
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Entry:
        return Entry(kind=d["kind"], what=d["what"], undo=d.get("undo") or "", prior=d.get("prior"),
                     wanted=d.get("wanted"), data=dict(d.get("data") or {}), undone=bool(d.get("undone")),
                     error=d.get("error"))


class Journal:
    """Entries in the order done, with the cluster they were done on; persisted at every change."""

    def __init__(self, persist: Persist | None = None, entries: Iterable[Entry] = (), fsid: str | None = None,
                 conn: dict[str, Any] | None = None, disposable: bool = False, moot: str | None = None):
        self.persist = persist or (lambda rec: None)
        self.entries = list(entries)
        self.fsid = fsid  # the cluster the entries were done on
        self.conn = conn or {}  # how to reach it: conf, client name, keyring path (never a key)
        self.disposable = disposable  # fathom's own cluster: gone with it, nothing to undo once stopped
        self.moot = moot  # why nothing needs undoing any more (the disposable cluster was stopped)

    # ---- the record ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"fsid": self.fsid, "conn": self.conn, "disposable": self.disposable, "host": platform.node(),
                "pid": os.getpid(), "moot": self.moot, "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, persist: Persist | None = None) -> Journal:
        d = d or {}
        return cls(persist, [Entry.from_dict(e) for e in d.get("entries") or []], fsid=d.get("fsid"),
                   conn=d.get("conn"), disposable=bool(d.get("disposable")), moot=d.get("moot"))

    def save(self) -> None:
        self.persist(self.to_dict())

    # ---- reading ---------------------------------------------------------------------
    def pending(self, *kinds: str) -> list[Entry]:
        """Entries not undone yet, of these kinds (all when none given), newest first: the order to undo them."""
        return [e for e in reversed(self.entries) if not e.undone and (not kinds or e.kind in kinds)]

    def names(self, kind: str) -> list[str]:
        """What of one kind is still fathom's to undo, oldest first."""
        return [e.what for e in self.entries if e.kind == kind and not e.undone]

    def holds(self, kind: str, what: str) -> bool:
        return any(e.kind == kind and e.what == what and not e.undone for e in self.entries)

    # ---- writing ---------------------------------------------------------------------
    def write(self, entry: Entry) -> Entry:
        """Write an entry down (durably) before the thing is done; a pending entry of the same thing is kept as is."""
        for e in self.entries:
            if e.kind == entry.kind and e.what == entry.what and not e.undone:
                if entry.data and e.data != {**e.data, **entry.data}:
                    e.data.update(entry.data)
                    self.save()
                return e
        self.entries.append(entry)
        self.save()
        return entry

    def note(self, kind: str, what: str, **data: Any) -> Entry:
        return self.write(Entry(kind, what, data=data))

    def mark(self, entry: Entry, error: str | None = None) -> None:
        """Undone (error None), or not undone and why."""
        entry.undone, entry.error = error is None, error
        self.save()

    def drop(self, kind: str, what: str) -> None:
        """Undone by its own code path (a pool removed on purpose, a mount taken down)."""
        for e in self.entries:
            if e.kind == kind and e.what == what and not e.undone:
                e.undone, e.error = True, None
        self.save()

    def set_moot(self, why: str) -> None:
        """Nothing needs undoing any more (the cluster is gone); kept for the record."""
        if self.pending():
            self.moot = why
            self.save()



def file_journal(path: Path) -> Journal:
    """A journal kept in a file (fathom's local cluster's own, for what lives with that cluster)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        rec = {}

    def persist(d: dict[str, Any]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(d, indent=1))
        tmp.replace(path)

    return Journal.from_dict(rec, persist)

