"""What a run was attached with, kept for its next attempts.

The command line's options that reach an existing cluster and its hosts (--conf, --id/--client-name, --keyring,
--client-ceph, the client hosts: --client, --clients-file, --k8s-* and the rest,
--server-host and the other server-host options, --prometheus, --mgr-prometheus) are recorded in the run's state
record (`attached_with`, fathom.run.attempt) when an attempt begins: paths, names and URLs only, never a key (a
keyring is a path). `fathom run --resume RUN` uses them where its own command line gives none: options given win,
group by group (the cluster's connection, the server hosts, Prometheus, the mgr's module), and what was used is said
and kept as an event of the run. The resume command fathom prints names them too, so that either way the run goes
on against the cluster it measured, not a disposable one.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fathom.cluster.attach import Attachment, client_for, local_for
from fathom.cluster.ceph import Connection
from fathom.errors import ClusterError, FathomError
from fathom.hosts.clients import ClientChoice
from fathom.results.store import Run, Store
from fathom.run.work import RunOptions

KEY = "attached_with"  # in the run's state record


def record(opts: RunOptions) -> dict[str, Any]:
    """What the attempt is attached with, to store: {} for a disposable cluster and no server sources."""
    rec: dict[str, Any] = {}
    if opts.attach is not None:
        c = opts.attach.conn
        rec["conn"] = {"conf": c.conf, "name": c.name, "keyring": c.keyring}
        if c.client.kind != "host":  # the client that reads its keys (a release's name, or its directory)
            rec["conn"]["client_ceph"] = c.client.release or c.client.dir
    if opts.servers is not None:
        rec["servers"] = opts.servers.model_dump(mode="json")
        rec["server_args"] = list(opts.server_args)
    if opts.prometheus:
        rec["prometheus"] = _without_password(opts.prometheus)
    if opts.mgr_prometheus:
        rec["mgr_prometheus"] = True
    if opts.clients is not None and opts.clients.given():
        rec["clients"] = opts.clients.to_dict()
    return rec


def stored(run: Run) -> dict[str, Any]:
    """What the run was attached with: its record, or, for a run recorded before runs kept one, the connection its
    environment names (an attached cluster's)."""
    if KEY in run.state:
        return dict(run.state[KEY] or {})
    cluster = run.env.get("cluster") or {}
    conn = cluster.get("connection") if cluster.get("kind") == "attached" else None
    return {"conn": {k: conn.get(k) for k in ("conf", "name", "keyring")}} if conn and conn.get("conf") else {}


def words(rec: dict[str, Any]) -> list[str]:
    """The command line's words that give what `rec` holds."""
    out: list[str] = []
    conn = rec.get("conn")
    if conn:
        out += ["--conf", conn["conf"], "--client-name", conn.get("name") or "client.admin"]
        out += ["--keyring", conn["keyring"]] if conn.get("keyring") else []
        out += ["--client-ceph", conn["client_ceph"]] if conn.get("client_ceph") else []
    out += (rec.get("server_args") or []) if rec.get("servers") else []
    out += ["--prometheus", rec["prometheus"]] if rec.get("prometheus") else []
    out += ["--mgr-prometheus"] if rec.get("mgr_prometheus") else []
    more = ClientChoice.from_dict(rec["clients"]).words() if rec.get("clients") else []
    # --known-hosts (and --accept-new-host-keys) serve client and server hosts alike: said once
    for flag, takes in (("--known-hosts", 1), ("--accept-new-host-keys", 0)):
        if flag in out and flag in more:
            i = more.index(flag)
            del more[i:i + 1 + takes]
    return out + more


def command(run_id: int, db: Path | str, rec: dict[str, Any] | None) -> str:
    """The command that resumes the run against what it was attached with."""
    return shlex.join(["fathom", "run", "--resume", str(run_id), "--db", str(db), *words(rec or {})])


def resumed(opts: RunOptions, store: Store | None) -> RunOptions:
    """The options of a `--resume`: what the run was attached with where the command line gives none. Options given
    win, group by group; both what was used and what the command line overrode are said, and kept as an event."""
    if not opts.resume or store is None:
        return opts
    run = store.run(opts.resume)
    if run.kind != "suite" or run.env.get("slo"):  # not resumed at all: Work.of says why
        return opts
    rec = stored(run)
    used: dict[str, Any] = {}
    overridden: dict[str, Any] = {}
    mine = record(opts)
    for group in ("conn", "servers", "prometheus", "mgr_prometheus", "clients"):
        if not rec.get(group):
            continue
        given = mine.get(group) if group != "conn" or not opts.attach_env else None
        if not given:
            used[group] = rec[group]
            if group == "servers":
                used["server_args"] = rec.get("server_args") or []
        elif given != rec[group]:
            overridden[group] = rec[group]
            if group == "servers":
                overridden["server_args"] = rec.get("server_args") or []
    if not used and not overridden:
        return opts
    changes: dict[str, Any] = {}
    if "conn" in used:
        changes["attach"] = _attachment(run, used["conn"])
        changes["attach_env"] = False
    if "servers" in used:
        from fathom.servers.named import ServersSpec

        changes["servers"] = ServersSpec.model_validate(used["servers"])
        changes["server_args"] = used["server_args"]
    if "prometheus" in used:
        changes["prometheus"] = used["prometheus"]
    if "mgr_prometheus" in used:
        changes["mgr_prometheus"] = True
    if "clients" in used:
        changes["clients"] = ClientChoice.from_dict(used["clients"])
    msg = _said(run, used, overridden, opts.attach_env and "conn" in used)
    print(f"  {msg}", file=sys.stderr, flush=True)
    store.add_event(run.id, "resume", msg, data={"used": words(used), "overridden": words(overridden)})
    return replace(opts, **changes)


def _said(run: Run, used: dict[str, Any], overridden: dict[str, Any], over_env: bool) -> str:
    parts = []
    if used:
        env = " (CEPH_CONF names a cluster, not the command line)" if over_env else ""
        parts.append(f"resuming run {run.id} ({run.name}) with what it was attached with, stored with the run, "
                     f"as the command line gives none of it{env}: {shlex.join(words(used))}")
    if overridden:
        parts.append(f"the command line's own options win over the stored {shlex.join(words(overridden))}")
    return "; ".join(parts)


def _attachment(run: Run, conn: dict[str, Any]) -> Attachment:
    """The stored connection, checked as the command line's is: its conf and keyring must still be there."""
    try:
        c = Connection.from_args(conn["conf"], None, conn.get("name"), conn.get("keyring"))
        client_for(conn.get("client_ceph"), c.conf)
    except FathomError as exc:
        raise ClusterError(f"run {run.id} ({run.name}) was attached with {shlex.join(words({'conn': conn}))}, "
                           f"stored with the run: {exc.message}",
                           hint="pass --conf (and --keyring, --id or --client-name) of the cluster the run measured "
                                "on the command line; given options win over the stored ones") from None
    return Attachment(conn=c.with_client(client_for(conn.get("client_ceph"), c.conf)), local=local_for(c.conf))


def _without_password(url: str) -> str:
    """A URL as stored: no password (fathom reads Prometheus without one; none is ever stored)."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
