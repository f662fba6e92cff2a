"""Running one fathom-engine point for the bench commands, and naming what went wrong.

The engine group (fathom.engines.fathom_engine.run_spec on fathom.engines.group,
which runs a suite's points too) runs the engine as a child in its own session:
records reach `on_record` as they arrive, Ctrl-C stops the child, and the
child's CPU comes from os.wait4.
What ran is an EngineRun, the same record a suite's point gets.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

from fathom.cluster.ceph import Connection, _mon_host, key_refused
from fathom.engine_spec import EngineSpec
from fathom.errors import ClusterError, FathomError

if TYPE_CHECKING:
    from fathom.engines.records import EngineRun


# the live view of a bench run with --metrics (fathom.live.Observer), set by the command line for the bench's
# duration: every engine record of the measured run goes to it too
LIVE: Any = None
BENCH: dict[str, str] = {}  # the bench's run name and results store, as `named` was told


def named(name: str, key: str, label: str, db: str | None = None) -> None:
    """The bench names itself once its arguments are read: the run's name and its point's key as the store will
    have them (`fathom ls`, `fathom show`), given to the live view too, so /metrics' `run` and `point` are those.
    db: the results store, where a bench on pods is stored from its start (fathom.dropin.record.open_run)."""
    BENCH.update(name=name, db=db or "")
    if LIVE is not None:
        LIVE.bench_start(name, key, label, {})


def run_engine(spec: EngineSpec, conn: Connection | None, timeout: float,
               on_record: Callable[[dict[str, Any]], None] | None = None, clients: Any = None) -> EngineRun:
    """Run one point to its end through the engine group; every record goes to on_record as it arrives.
    With clients (a fathom.hosts.clients.ClientsSpec): on every engine of those hosts, merged
    (fathom.dropin.multihost)."""
    if LIVE is not None and on_record is not None:
        on_record = _with_live(on_record, LIVE)
    if clients is not None:
        from fathom.dropin import multihost, record

        journal = None
        if clients.kubernetes is not None and BENCH.get("db"):  # pods made for it: journaled from the start
            journal = record.open_run(BENCH["db"], BENCH["name"], conn)
        try:
            return multihost.run(spec, clients, timeout, on_record, conn=conn, journal=journal)
        except BaseException as exc:
            if journal is not None:
                record.abandon("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", exc)
            raise
    from fathom.cluster.client import HOST
    from fathom.engines.fathom_engine import run_spec

    return run_spec(spec.to_json(), on_record=on_record, timeout=timeout, check=False,
                    client=conn.client if conn is not None else HOST)


def connect_failure(err: dict[str, Any], conn: Connection, timeout_s: float) -> FathomError | None:
    """A clear error for a failure to reach the cluster, or None when err is about something else."""
    kind = err.get("kind", "")
    msg = err.get("message", "")
    refused = key_refused(conn, msg)
    if refused is not None:
        return refused
    if kind in ("ECONNREFUSED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH") or "monitor" in msg:
        mons = _mon_host(conn.conf) or "not set"
        return ClusterError(
            f"cannot reach the cluster of {conn.conf} (mon_host {mons}) as {conn.name} within {timeout_s:g} s: {msg}",
            hint="check that the mons are running and reachable, and the --conf/--id/--keyring you gave",
        )
    if kind in ("EACCES", "EPERM", "EKEYREJECTED"):
        return ClusterError(f"the cluster refused {conn.name}: {msg}",
                            hint="check --id/--name and --keyring (the key and the user's caps)")
    return None


def _with_live(on_record: Callable[[dict[str, Any]], None], live: Any) -> Callable[[dict[str, Any]], None]:
    def both(rec: dict[str, Any]) -> None:
        try:
            live.bench_record(rec)
        except Exception as exc:  # noqa: BLE001 - the live view must never stop a bench
            sys.stderr.write(f"fathom: live view: {exc}\n")
        on_record(rec)

    return both
