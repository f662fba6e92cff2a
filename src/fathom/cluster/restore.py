"""Putting back every cluster setting fathom changed, exactly as it was found.

Before fathom changes a setting (an OSD flag, the balancer, a config-db option, a
pool's autoscale mode) the Restorer reads what is there. A setting already in the
wanted state is left alone and not recorded. Otherwise the prior value and the exact
`ceph` command that puts it back are recorded, and the record is persisted (the run's
state record in the results store, `restore`) before the change is made, so a run killed at
any moment leaves what is needed to repair the cluster: `fathom cluster restore`.

The record (`Restorer.to_dict()`):
    fsid, conn (conf, client name, keyring path: never a key), disposable, host, pid,
    moot (why restoring is not needed, e.g. the disposable cluster was stopped),
    entries: [{what, prior, wanted, command, restored, error?}] in the order applied.
A config option's prior is None when it was not set in the config db: restoring it
means `ceph config rm`, not setting the default value.
"""

from __future__ import annotations

import os
import platform
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.cluster.ceph import Ceph
from fathom.errors import ClusterError, FathomError

Persist = Callable[[dict[str, Any]], None]


@dataclass
class Entry:
    """One changed setting: what it was, what fathom set, and the command that puts it back."""

    what: str
    prior: str | None  # None: a config option that was not set in the config db
    wanted: str
    command: str  # "ceph osd unset noscrub": shell words, without connection options
    restored: bool = False
    error: str | None = None

    def args(self) -> list[str]:
        """The ceph arguments of `command`."""
        words = shlex.split(self.command)
        return words[1:] if words and words[0] == "ceph" else words

    def describe_prior(self) -> str:
        return "not set in the config db" if self.prior is None else self.prior

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"what": self.what, "prior": self.prior, "wanted": self.wanted, "command": self.command,
                             "restored": self.restored}
        if self.error:
            d["error"] = self.error
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Entry:
        return Entry(what=d["what"], prior=d.get("prior"), wanted=d["wanted"], command=d["command"],
                     restored=bool(d.get("restored")), error=d.get("error"))


def _ceph_cmd(*args: str) -> str:
    return shlex.join(["ceph", *args])


# ---- what a change needs to record: pure functions of what was read ------------------
def flag_entry(flags: Iterable[str], flag: str) -> Entry | None:
    """An OSD flag to set; None when it is already set."""
    if flag in set(flags):
        return None
    return Entry(f"osd flag {flag}", "unset", "set", _ceph_cmd("osd", "unset", flag))


def balancer_entries(status: dict[str, Any], dump: list[dict[str, Any]]) -> list[Entry]:
    """The balancer to turn off, in recording order; [] when it is already off.

    `ceph balancer off` also writes the mgr option mgr/balancer/active=false to the
    config db, and `balancer on` writes true: when the option was not set before,
    restoring is `balancer on` (the module's state now) and then `config rm` (the db as
    found). Restored newest first, so the config entry is recorded first. The mode
    is not touched.
    """
    if not status.get("active"):
        return []
    cfg = config_entry(dump, "mgr", "mgr/balancer/active", "false")
    bal = Entry("balancer", f"on (mode {status.get('mode') or '?'})", "off", _ceph_cmd("balancer", "on"))
    return [e for e in (cfg, bal) if e is not None]


def config_entry(dump: list[dict[str, Any]], section: str, name: str, value: str) -> Entry | None:
    """A config-db option to set; None when it is already set to `value` for exactly that section.

    Entries with a mask (e.g. client/host:h) are other settings and are not touched.
    """
    found = next((e for e in dump if e.get("section") == section and e.get("name") == name and not e.get("mask")),
                 None)
    what = f"config {section} {name}"
    if found is None:
        return Entry(what, None, value, _ceph_cmd("config", "rm", section, name))
    prior = str(found.get("value"))
    if prior == value:
        return None
    return Entry(what, prior, value, _ceph_cmd("config", "set", section, name, prior))


def pool_entry(pool: str, key: str, current: str, value: str) -> Entry | None:
    """A pool setting to change; None when it already has `value`."""
    if current == value:
        return None
    return Entry(f"pool {pool} {key}", current, value, _ceph_cmd("osd", "pool", "set", pool, key, current))


def restore_order(entries: list[Entry]) -> list[Entry]:
    """Entries still to put back, newest first (the reverse of the order they were applied in)."""
    return [e for e in reversed(entries) if not e.restored]


def repair_commands(entries: list[Entry], conn: dict[str, Any]) -> list[str]:
    """Full shell commands, connection included, that put the entries back (in the order given)."""
    opts = ["--conf", conn["conf"], "--name", conn.get("name") or "client.admin"]
    if conn.get("keyring"):
        opts += ["--keyring", conn["keyring"]]
    return [shlex.join(["ceph", *opts, *e.args()]) for e in entries]


def process_alive(record: dict[str, Any]) -> bool:
    """Whether the fathom process that wrote the record still runs on this host (it restores on its own)."""
    pid = record.get("pid")
    if not pid or record.get("host") != platform.node() or pid == os.getpid():
        return False
    try:
        return b"fathom" in Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except OSError:
        return False


def read_fsid(ceph: Ceph, timeout: float = 30.0) -> str:
    out = ceph.ceph("fsid", timeout=timeout)
    fsid = out.get("fsid") if isinstance(out, dict) else None
    if not fsid:
        raise ClusterError(f"`ceph fsid` printed no fsid: {out!r}")
    return str(fsid)


class Restorer:
    """Changes cluster settings only after recording how to put them back; puts them back on request.

    previous: the record a killed attempt of the same run left. On the same cluster its
    entries are carried on (a setting it changed is not recorded again as "already wanted").
    On another cluster it is refused while it has unrestored entries, unless it was a
    disposable cluster (gone, or stopped by the next attempt).
    """

    def __init__(self, ceph: Ceph, persist: Persist | None = None, disposable: bool = False,
                 previous: dict[str, Any] | None = None, repair_args: tuple[str, ...] = ()):
        self.ceph = ceph
        self.persist = persist or (lambda rec: None)
        self.disposable = disposable
        self.fsid: str | None = None
        self.moot: str | None = None
        self.entries: list[Entry] = []
        prev = [Entry.from_dict(e) for e in (previous or {}).get("entries", [])]
        if previous and any(not e.restored for e in prev) and not previous.get("moot"):
            fsid = read_fsid(ceph)
            if previous.get("fsid") == fsid:
                self.fsid, self.entries = fsid, prev
            elif not previous.get("disposable"):
                conf = (previous.get("conn") or {}).get("conf")
                raise ClusterError(
                    f"{sum(not e.restored for e in prev)} setting(s) changed by an earlier attempt are still "
                    f"to be restored on another cluster (fsid {previous.get('fsid')}, conf {conf}), not this one "
                    f"(fsid {fsid})", hint="restore them first: "
                    f"`{shlex.join(['fathom', 'cluster', 'restore', '--conf', str(conf), *repair_args])}`")

    # ---- the record ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"fsid": self.fsid, "conn": self.ceph.conn.describe(), "disposable": self.disposable,
                "host": platform.node(), "pid": os.getpid(), "moot": self.moot,
                "entries": [e.to_dict() for e in self.entries]}

    def _save(self) -> None:
        self.persist(self.to_dict())

    def pending(self) -> list[Entry]:
        return restore_order(self.entries)

    def set_moot(self, why: str) -> None:
        """Nothing needs restoring any more (the cluster is gone); kept for the record."""
        if self.entries:
            self.moot = why
            self._save()

    # ---- changes -------------------------------------------------------------------
    def _change(self, entries: list[Entry | None], *apply: str, timeout: float | None = None) -> bool:
        """Record the entries durably, then run `ceph *apply`. False when nothing needed changing."""
        new = [e for e in entries if e is not None
               # an earlier attempt of this run changed it: its recorded prior is the true one
               and not any(o.what == e.what and not o.restored for o in self.entries)]
        if not new:
            return False
        if self.fsid is None:
            self.fsid = read_fsid(self.ceph)
        self.entries.extend(new)
        self._save()
        self.ceph.ceph(*apply, fmt_json=False, timeout=timeout)
        return True

    def osd_flags(self, flags: list[str]) -> None:
        current = self.ceph.ceph("osd", "dump").get("flags", "").split(",")
        for flag in flags:
            self._change([flag_entry(current, flag)], "osd", "set", flag)

    def balancer_off(self) -> None:
        status = self.ceph.ceph("balancer", "status", timeout=60)
        if status.get("active"):
            self._change(balancer_entries(status, self.ceph.ceph("config", "dump") or []), "balancer", "off",
                         timeout=60)

    def config_set(self, section: str, name: str, value: str) -> None:
        dump = self.ceph.ceph("config", "dump") or []
        self._change([config_entry(dump, section, name, value)], "config", "set", section, name, value)

    def pool_set(self, pool: str, key: str, value: str) -> None:
        got = self.ceph.ceph("osd", "pool", "get", pool, key)
        self._change([pool_entry(pool, key, str(got.get(key)), value)], "osd", "pool", "set", pool, key, value)

    # ---- putting back ----------------------------------------------------------------
    def restore(self, say: Callable[[str], None], probe_timeout: float = 20.0) -> list[Entry]:
        """Put back every unrestored entry, newest first, each marked in the record as it is done.

        Returns the entries that could not be put back (their error recorded); an
        unreachable cluster is found by one bounded probe, not by a timeout per entry.
        """
        todo = self.pending()
        if not todo:
            return []
        try:
            self.ceph.probe(timeout=probe_timeout)
        except FathomError as exc:
            for e in todo:
                e.error = exc.message
            self._save()
            return todo
        left = []
        for e in todo:
            try:
                self.ceph.ceph(*e.args(), fmt_json=False, timeout=60)
            except FathomError as exc:
                e.error = exc.message
                left.append(e)
            else:
                e.restored, e.error = True, None
                say(f"restored {e.what} to {e.describe_prior()} ({e.command})")
            self._save()
        return left

    def repair_commands(self, entries: list[Entry] | None = None) -> list[str]:
        return repair_commands(self.pending() if entries is None else entries, self.ceph.conn.describe())


def unrestored_message(left: list[Entry], record: dict[str, Any], db: Path | str) -> str:
    """What could not be put back, and the exact commands that do it."""
    conn = record.get("conn") or {}
    repair = shlex.join(["fathom", "cluster", "restore", "--conf", conn.get("conf", "?"), "--db", str(db)])
    lines = [(f"could not restore {len(left)} setting(s) on cluster {record.get('fsid')} ({left[0].error}); "
              f"run these commands when the cluster answers, or `{repair}`:")]
    lines += [f"    {c}" for c in repair_commands(left, conn)]
    return "\n".join(lines)

