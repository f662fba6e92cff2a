"""Putting back every cluster setting fathom changed, exactly as it was found.

Before fathom changes a setting (an OSD flag, the balancer, a config-db option, a
pool's autoscale mode) the Restorer reads what is there. A setting already in the
wanted state is left alone and not recorded. Otherwise the prior value and the exact
`ceph` command that puts it back are written to the run's undo journal
(fathom.cluster.journal, kind `setting`: what, prior, wanted, undo) before the change
is made, so a run killed at any moment leaves what is needed to repair the cluster:
`fathom cluster restore`. A config option's prior is None when it was not set in the
config db: restoring it means `ceph config rm`, not setting the default value.
"""

from __future__ import annotations

import os
import platform
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fathom.cluster.ceph import Ceph
from fathom.cluster.journal import SETTING, Entry, Journal
from fathom.errors import ClusterError, FathomError

def ceph_cmd(*args: str) -> str:
    return shlex.join(["ceph", *args])


def setting(what: str, prior: str | None, wanted: str, undo: str) -> Entry:
    """A journal entry for a changed setting; `undo` is the ceph command (shell words, no connection options)."""
    return Entry(SETTING, what, undo=undo, prior=prior, wanted=wanted)


def ceph_args(e: Entry) -> list[str]:
    """The ceph arguments of an entry's undo command."""
    words = shlex.split(e.undo)
    return words[1:] if words and words[0] == "ceph" else words


def describe_prior(e: Entry) -> str:
    return "not set in the config db" if e.prior is None else str(e.prior)


# ---- what a change needs to record: pure functions of what was read ------------------
def flag_entry(flags: Iterable[str], flag: str) -> Entry | None:
    """An OSD flag to set; None when it is already set."""
    if flag in set(flags):
        return None
    return setting(f"osd flag {flag}", "unset", "set", ceph_cmd("osd", "unset", flag))


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
    bal = setting("balancer", f"on (mode {status.get('mode') or '?'})", "off", ceph_cmd("balancer", "on"))
    return [e for e in (cfg, bal) if e is not None]


def config_entry(dump: list[dict[str, Any]], section: str, name: str, value: str) -> Entry | None:
    """A config-db option to set; None when it is already set to `value` for exactly that section.

    Entries with a mask (e.g. client/host:h) are other settings and are not touched.
    """
    found = next((e for e in dump if e.get("section") == section and e.get("name") == name and not e.get("mask")),
                 None)
    what = f"config {section} {name}"
    if found is None:
        return setting(what, None, value, ceph_cmd("config", "rm", section, name))
    prior = str(found.get("value"))
    if prior == value:
        return None
    return setting(what, prior, value, ceph_cmd("config", "set", section, name, prior))


def pool_entry(pool: str, key: str, current: str, value: str) -> Entry | None:
    """A pool setting to change; None when it already has `value`."""
    if current == value:
        return None
    return setting(f"pool {pool} {key}", current, value, ceph_cmd("osd", "pool", "set", pool, key, current))


def module_entry(ls: dict[str, Any], name: str) -> Entry | None:
    """A mgr module to enable, from `ceph mgr module ls`; None when it is on already (enabled, or always on).

    A module the mgr lists as unable to run, or does not list, is an error: enabling it would not make it run.
    """
    always = ls.get("always_on_modules") or []
    if isinstance(always, dict):  # {release: [modules]} in some releases
        always = [m for mods in always.values() for m in mods]
    if name in set(ls.get("enabled_modules") or []) | set(always):
        return None
    found = next((m for m in ls.get("disabled_modules") or [] if m.get("name") == name), None)
    if found is None:
        raise ClusterError(f"the mgr has no module named {name!r}",
                           hint="install the mgr's modules on the mgr hosts (Debian: ceph-mgr-modules-core)")
    if not found.get("can_run", True):
        raise ClusterError(f"mgr module {name} cannot run: {found.get('error_string') or 'no reason given'}",
                           hint="install what it needs on the mgr hosts (prometheus: python3-cherrypy3)")
    return setting(f"mgr module {name}", "disabled", "enabled", ceph_cmd("mgr", "module", "disable", name))


def repair_commands(entries: list[Entry], conn: dict[str, Any]) -> list[str]:
    """Full shell commands, connection included, that put the entries back (in the order given)."""
    opts = ["--conf", conn["conf"], "--name", conn.get("name") or "client.admin"]
    if conn.get("keyring"):
        opts += ["--keyring", conn["keyring"]]
    return [shlex.join(["ceph", *opts, *ceph_args(e)]) for e in entries]


def process_alive(record: dict[str, Any]) -> bool:
    """Whether the fathom process that wrote the record still runs on this host (it restores on its own)."""
    pid = record.get("pid")
    if not pid or record.get("host") != platform.node() or pid == os.getpid():
        return False
    try:
        return b"fathom" in Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except OSError:
        return False


def last_process(state: dict[str, Any]) -> dict[str, Any]:
    """The host and pid of the process that worked on a run last, from its state record: its latest attempt's
    (fathom.run.attempt), or, for an attempt recorded before attempts named their process, the last writer of its
    journal. {} when neither names one."""
    attempts = state.get("attempts") or []
    rec = attempts[-1] if attempts and attempts[-1].get("pid") else state.get("journal") or {}
    return {"host": rec.get("host"), "pid": rec.get("pid")} if rec.get("pid") else {}


def run_alive(state: dict[str, Any]) -> bool:
    """Whether a fathom process of the run still runs on this host: its latest attempt's, or the last writer of its
    journal. Such a run is left alone: it restores on its own when it ends."""
    attempts = state.get("attempts") or []
    return process_alive(attempts[-1] if attempts else {}) or process_alive(state.get("journal") or {})


def run_gone(state: dict[str, Any]) -> str | None:
    """Why the run's process is known to be gone (its pid on this host runs no fathom), or None when that cannot
    be told: no process recorded, one on another host, or one that still runs."""
    proc = last_process(state)
    if not proc or proc["host"] != platform.node() or run_alive(state):
        return None
    return f"its process (pid {proc['pid']} on {proc['host']}) is gone"


def read_fsid(ceph: Ceph, timeout: float = 30.0) -> str:
    out = ceph.ceph("fsid", timeout=timeout)
    fsid = out.get("fsid") if isinstance(out, dict) else None
    if not fsid:
        raise ClusterError(f"`ceph fsid` printed no fsid: {out!r}")
    return str(fsid)


class Restorer:
    """Changes cluster settings only after writing down how to put them back; puts them back on request.

    journal: the run's undo journal (settings are its `setting` entries). A setting an
    earlier attempt of the same run changed is pending there already: it is not written
    again as "already wanted", and its recorded prior stays the true one.
    """

    def __init__(self, ceph: Ceph, journal: Journal | None = None):
        self.ceph = ceph
        self.journal = journal if journal is not None else Journal(conn=ceph.conn.describe())

    def pending(self) -> list[Entry]:
        """Settings still to put back, newest first (the reverse of the order they were applied in)."""
        return self.journal.pending(SETTING)

    # ---- changes -------------------------------------------------------------------
    def _change(self, entries: list[Entry | None], *apply: str, timeout: float | None = None) -> bool:
        """Record the entries durably, then run `ceph *apply`. False when nothing needed changing."""
        j = self.journal
        # an earlier attempt of this run changed it: its recorded prior is the true one
        new = [e for e in entries if e is not None and not j.holds(SETTING, e.what)]
        if not new:
            return False
        if j.fsid is None:
            j.fsid = read_fsid(self.ceph)
        j.entries.extend(new)
        j.save()
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

    def record_and_apply(self, entries: list[Entry | None], *apply: str, timeout: float | None = None) -> bool:
        """Entries recorded (put back newest first), then `ceph *apply`: a change whose undo takes several steps."""
        return self._change(entries, *apply, timeout=timeout)

    def config_set(self, section: str, name: str, value: str) -> None:
        dump = self.ceph.ceph("config", "dump") or []
        self._change([config_entry(dump, section, name, value)], "config", "set", section, name, value)

    def pool_set(self, pool: str, key: str, value: str) -> None:
        got = self.ceph.ceph("osd", "pool", "get", pool, key)
        self._change([pool_entry(pool, key, str(got.get(key)), value)], "osd", "pool", "set", pool, key, value)

    def mgr_module_enable(self, name: str) -> None:
        """Enable a mgr module (e.g. prometheus); undone by `ceph mgr module disable NAME` when it was off.
        The mgr restarts to load it: callers wait for what they need of it (`ceph mgr services`)."""
        ls = self.ceph.ceph("mgr", "module", "ls")
        self._change([module_entry(ls, name)], "mgr", "module", "enable", name, timeout=60)

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
            self.journal.save()
            return todo
        left = []
        for e in todo:
            try:
                self.ceph.ceph(*ceph_args(e), fmt_json=False, timeout=60)
            except FathomError as exc:
                self.journal.mark(e, exc.message)
                left.append(e)
            else:
                self.journal.mark(e)
                say(f"restored {e.what} to {describe_prior(e)} ({e.undo})")
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


def put_back(restorer: Restorer, db: Path | str, event: Callable[..., Any], say: Callable[[str], None]) -> None:
    """Put back what hygiene changed, newest first, each step said and the result an event (kind, message,
    data); what cannot be is a warning with its commands, and stays in the journal."""
    todo = len(restorer.pending())
    if not todo:
        return
    left = restorer.restore(say)
    if len(left) < todo:
        event("restore", f"restored {todo - len(left)} setting(s) this run had changed")
    if left:
        msg = unrestored_message(left, restorer.journal.to_dict(), db)
        event("warning", msg, {"unrestored": [e.to_dict() for e in left], "commands": restorer.repair_commands(left)})
        say(f"warning: {msg}")
