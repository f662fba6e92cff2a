"""`fathom bench rados -p POOL SECONDS write|seq|rand` and `fathom cleanup -p POOL`.

A drop-in for `rados bench` (same arguments, same per-second table and
summary) with latency percentiles, honest JSON, a stored run, and a bounded
wait when the cluster stops answering.

Objects: `fathom_bench.<run-name>.<n>`, metadata `fathom_bench.<run-name>.meta`
(written by the engine at the end of a write: object count, object size, op
size). Run names may not contain '.', so no run's names can match another
run's pattern; cleanup removes only names of exactly that pattern.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fathom.dropin import output as fmt
from fathom import engine_spec as es
from fathom.interfaces.rados import Rados
from fathom.dropin.record import check_db
from fathom.dropin.engine import connect_failure, named, run_engine
from fathom.engine_spec import EngineSpec, Load

if TYPE_CHECKING:
    from fathom.engines.records import EngineRun
from fathom.cluster.attach import client_for
from fathom.cluster.ceph import Ceph, Connection, _mon_host
from fathom.errors import ClusterError, FathomError, UsageError
from fathom.units import parse_size, positive_int

PREFIX_ROOT = "fathom_bench"
DEFAULT_RUN = "default"
_RUN_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_PREFIX_RE = re.compile(r"^[^/\s]{1,200}$")
FOUR_M = 4 * 1024 * 1024


class StallError(FathomError):
    exit_code = 3


# ---- naming ------------------------------------------------------------------------------

def check_run_name(name: str) -> str:
    if not _RUN_RE.match(name or ""):
        raise UsageError(f"--run-name: {name!r} is not allowed",
                         hint="use 1-100 letters, digits, '_' or '-' (no '.', so run names never overlap)")
    return name


def object_prefix(run_name: str) -> str:
    return f"{PREFIX_ROOT}.{run_name}"


def object_pattern(prefix: str, clients: bool = False) -> re.Pattern[str]:
    """Exactly the names a fathom bench with this prefix writes: <prefix>.<n> and <prefix>.meta; with
    clients also those of its client engines, <prefix>.<host>.<i>.<n> and <prefix>.<host>.<i>.meta
    (fathom.engines.clients.client_prefix: the host part holds no '.')."""
    sub = r"(?:\.[A-Za-z0-9_-]+\.\d+)?" if clients else ""
    return re.compile(rf"^{re.escape(prefix)}{sub}\.(?:\d+|meta)$")


def client_meta_prefixes(names: list[str], prefix: str) -> list[str]:
    """The client engines' prefixes under prefix that left a metadata object, from a pool listing."""
    pat = re.compile(rf"^({re.escape(prefix)}\.[A-Za-z0-9_-]+\.\d+)\.meta$")
    return sorted({m.group(1) for m in map(pat.match, names) if m})


# ---- output ------------------------------------------------------------------------------

class Out:
    """Plain mode: the table on stdout, like rados bench. JSON mode: stdout holds only the JSON;
    the live table goes to stderr when stderr is a terminal; notes always go to stderr."""

    def __init__(self, json_mode: bool):
        self.json = json_mode
        self.live = sys.stderr if json_mode and sys.stderr.isatty() else (None if json_mode else sys.stdout)

    def table(self, lines: list[str]) -> None:
        if self.live and lines:
            self.live.write("\n".join(lines) + "\n")
            self.live.flush()

    def result(self, lines: list[str]) -> None:
        if not self.json and lines:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()

    def note(self, text: str) -> None:
        """Things rados bench prints on stdout but that are not results (cleanup progress)."""
        stream = sys.stderr if self.json else sys.stdout
        stream.write(text + "\n")
        stream.flush()

    def warn(self, text: str) -> None:
        sys.stderr.write(f"fathom: warning: {text}\n")
        sys.stderr.flush()


def dump_json(doc: dict[str, Any], pretty: bool) -> None:
    sys.stdout.write(json.dumps(doc, indent=4 if pretty else None, allow_nan=False) + "\n")
    sys.stdout.flush()


# ---- cluster facts (bounded) -----------------------------------------------------------

def read_meta(conn: Connection, pool: str, prefix: str, timeout: float) -> dict[str, Any] | None:
    """The metadata a fathom write left for prefix, or None. Names the pool when it is missing."""
    ceph = Ceph(conn, timeout=timeout)
    try:
        proc = ceph.call("rados", "-p", pool, "get", f"{prefix}.meta", "-", fmt_json=False, check=False,
                         timeout=timeout)
    except ClusterError:
        raise unreachable(conn, timeout, "`rados get` did not answer") from None
    if proc.returncode == 0:
        try:
            meta = json.loads(proc.stdout)
        except json.JSONDecodeError:
            return None
        return meta if isinstance(meta, dict) and meta.get("fathom_meta") else None
    err = (proc.stderr or "").strip()
    if "error opening pool" in err:
        raise pool_missing(pool)
    if "No such file or directory" in err:
        return None
    if "error connecting" in err or "timed out" in err or "monclient" in err.lower():
        raise unreachable(conn, timeout, err.splitlines()[-1] if err else "")
    raise ClusterError(f"cannot read {prefix}.meta in pool {pool}: {err.splitlines()[-1] if err else proc.returncode}")


def pool_missing(pool: str) -> ClusterError:
    return ClusterError(f"pool {pool!r} does not exist",
                        hint="create it (ceph osd pool create NAME) or name an existing pool with -p")


def unreachable(conn: Connection, timeout: float, detail: str) -> ClusterError:
    return ClusterError(
        f"cannot reach the cluster of {conn.conf} (mon_host {_mon_host(conn.conf) or 'not set'}) as {conn.name} "
        f"within {timeout:g} s" + (f": {detail}" if detail else ""),
        hint="check that the mons are running and reachable, and the --conf/--id/--keyring you gave",
    )


def stall_error(fatal: dict[str, Any], conn: Connection, stall_timeout: float) -> tuple["StallError", str]:
    """The error for an engine `stall` record, with the cluster's health asked at that moment."""
    health = cluster_state(conn)
    return StallError(f"ops stopped completing: {fatal.get('message')}; stopped after --stall-timeout "
                      f"{stall_timeout:g} s. Cluster health: {health}",
                      hint="free space or raise the pool quota, unpause the cluster (ceph osd unpause), "
                           "or check the OSDs; see `ceph health detail`"), health


def cluster_state(conn: Connection, timeout: float = 10.0) -> str:
    """One line on the cluster's health and fullness, asked with a timeout; never raises."""
    try:
        h = Ceph(conn, timeout=timeout).ceph("health", "detail", timeout=timeout) or {}
    except FathomError:
        return f"the cluster did not answer `ceph health` within {timeout:g} s"
    status = h.get("status", "unknown")
    checks = h.get("checks") or {}
    parts = []
    for name, c in checks.items():
        msg = (c.get("summary") or {}).get("message", "")
        detail = "; ".join(d.get("message", "") for d in (c.get("detail") or [])[:3])
        parts.append(f"{name}: {msg}" + (f" ({detail})" if detail else ""))
    return status + (" - " + "; ".join(parts) if parts else "")


# ---- one bench ---------------------------------------------------------------------------

@dataclass
class RadosArgs:
    pool: str
    seconds: int
    mode: str  # write | seq | rand
    concurrent: int = 16
    op_size: int = FOUR_M
    object_size: int | None = None
    no_cleanup: bool = False
    run_name: str = DEFAULT_RUN
    max_objects: int = 0
    format: str = "plain"
    hints: bool = True
    stall_timeout: float = 60.0
    connect_timeout: float = 15.0
    db: str = "fathom-results.db"

    @property
    def names(self) -> tuple[str, str]:
        """The stored run's name and its point's key (the live view's `run` and `point` too)."""
        return f"bench-rados-{self.mode}-{self.run_name}", f"rados-{self.mode}"


def parse_args(a: Any) -> RadosArgs:
    if a.mode not in ("write", "seq", "rand"):
        raise UsageError(f"unknown bench mode {a.mode!r}: use write, seq or rand")
    seconds = positive_int(a.seconds, "SECONDS", minimum=0)
    op = parse_size(a.block_size, "-b/--block-size") if a.block_size is not None else FOUR_M
    obj = parse_size(a.object_size, "-O/--object-size") if a.object_size is not None else None
    if op <= 0:
        raise UsageError("-b/--block-size must be positive")
    if a.mode == "write":
        size = obj if obj is not None else op
        if op > size or size % op:
            raise UsageError(f"-b/--block-size ({op}) must divide -O/--object-size ({size})")
        if seconds == 0 and not a.max_objects:
            raise UsageError("a write needs an end: SECONDS > 0 or --max-objects N")
    if a.mode == "rand" and seconds == 0:
        raise UsageError("rand needs SECONDS > 0 (random reads have no natural end)")
    stall = float(a.stall_timeout)
    if not stall > 0:
        raise UsageError(f"--stall-timeout must be a positive number of seconds, got {a.stall_timeout}")
    fmt_name = (a.format or "plain").lower()
    if fmt_name not in ("plain", "json", "json-pretty"):
        raise UsageError(f"-f/--format: {a.format!r}: use plain, json or json-pretty")
    return RadosArgs(pool=a.pool, seconds=seconds, mode=a.mode, concurrent=positive_int(a.concurrent_ios, "-t"),
                     op_size=op, object_size=obj, no_cleanup=bool(a.no_cleanup),
                     run_name=check_run_name(a.run_name or DEFAULT_RUN),
                     max_objects=positive_int(a.max_objects or 0, "--max-objects", minimum=0), format=fmt_name,
                     hints=not a.no_hints, stall_timeout=stall, connect_timeout=float(a.connect_timeout), db=a.db)


def build_spec(r: RadosArgs, conn: Connection, prefix: str) -> EngineSpec:
    load = Load(iodepth=r.concurrent, duration_s=float(r.seconds) if r.seconds else None)
    if r.mode == "write":
        size = r.object_size or r.op_size
        t = Rados(connection=es.Connection.of(conn, r.connect_timeout), pool=r.pool, op="write", prefix=prefix,
                     object_size=size, op_size=r.op_size, alloc_hint=r.hints)
        if r.max_objects:
            t.objects = r.max_objects
            load.ops = r.max_objects * (size // r.op_size)  # one job: the bound is the bench's
    else:
        # the engine reads the object set from <prefix>.meta; seq reads it once, like rados bench
        t = Rados(connection=es.Connection.of(conn, r.connect_timeout), pool=r.pool, op="read",
                     pattern="seq" if r.mode == "seq" else "rand", prefix=prefix, once=r.mode == "seq")
    # like rados bench: a slow op is slow, not failed; stalls are caught by stall_timeout_s
    return EngineSpec(target=t, load=load, stall_timeout_s=r.stall_timeout, op_timeout_s=None)


def run_bench(a: Any) -> int:
    from fathom.dropin import multihost

    r = parse_args(a)
    named(*r.names, f"fathom bench rados {r.mode}", r.db)
    conn = Connection.from_args(a.conf, a.id, a.name, a.keyring)
    conn = conn.with_client(client_for(getattr(a, "client_ceph", None), conn.conf))
    prefix = object_prefix(r.run_name)
    out = Out(json_mode=r.format != "plain")
    check_db(r.db)
    cs = multihost.from_args(a)
    spec = build_spec(r, conn, prefix)
    kind = "write" if r.mode == "write" else "read"

    # rados bench's preamble, printed once the engine is connected
    preamble = [f"hints = {int(r.hints)}"]
    head = None
    if r.mode == "write":
        object_size = r.object_size or r.op_size
        head = {"concurrent_ios": r.concurrent, "object_size": object_size, "op_size": r.op_size,
                "seconds_to_run": r.seconds, "max_objects": r.max_objects, "object_prefix": prefix}
        preamble += fmt.rados_write_preamble(r.concurrent, r.op_size, object_size, r.seconds, r.max_objects,
                                             prefix if cs is None else f"{prefix}.<host>.<n> (one per client engine)")
    if cs is not None:
        preamble.append(multihost.preamble(cs))
    table = fmt.RadosTable(kind)

    def on_record(rec: dict[str, Any]) -> None:
        t = rec.get("type")
        if t == "start":
            out.table(preamble + table.start(rec.get("ts")))
        elif t == "interval":
            out.table(table.interval(rec))

    timeout = (r.seconds or 3600) + r.stall_timeout + 3 * r.connect_timeout + 120
    try:
        outcome = run_engine(spec, conn, timeout=timeout, on_record=on_record, clients=cs)
    except KeyboardInterrupt:
        if r.mode == "write":
            sys.stderr.write(f"fathom: the objects written so far stay in pool {r.pool}; remove them with "
                             f"`fathom cleanup -p {r.pool} --run-name {r.run_name}`\n")
        raise
    if r.mode == "write":
        op_size, object_size = r.op_size, r.object_size or r.op_size
    else:  # what the write stage left, as the engine read it from the metadata object
        objs = (outcome.summary or {}).get("objects") or {}
        op_size, object_size = int(objs.get("op_size") or 0), int(objs.get("object_size") or 0)
    return finish(r, conn, prefix, out, table, outcome, head, op_size, object_size, spec)


def finish(r: RadosArgs, conn: Connection, prefix: str, out: Out, table: fmt.RadosTable, outcome: "EngineRun",
           head: dict[str, Any] | None, op_size: int, object_size: int, spec: EngineSpec) -> int:
    from fathom.dropin.record import save_bench

    fatal = outcome.fatal
    if outcome.start is None:
        # never got going: no run to keep, just the reason
        raise _early_error(fatal, outcome, conn, r)
    error: FathomError | None = None
    status = "done"
    health = None
    if fatal:
        status = "failed"
        if fatal.get("kind") == "stall":
            error, health = stall_error(fatal, conn, r.stall_timeout)
        else:
            if fatal.get("kind") in ("ENOSPC", "EDQUOT", "ETIMEDOUT"):
                health = cluster_state(conn)
            error = FathomError(f"the bench stopped: {fatal.get('message')}"
                                + (f". Cluster health: {health}" if health else ""), exit_code=3)
    elif outcome.exit_code != 0 or outcome.summary is None:
        status = "failed"
        error = FathomError(f"fathom-engine ended with exit code {outcome.exit_code} and no summary: "
                            f"{outcome.stderr.strip()[-400:]}", exit_code=3)

    summary_rec = outcome.summary or _partial_summary(outcome, table.kind)
    summary = fmt.rados_summary(r.mode, summary_rec, table, op_size, object_size)
    out.result(fmt.format_rados_summary(r.mode, summary))
    clients = getattr(outcome, "clients", None)
    if clients:
        from fathom.dropin.multihost import host_lines

        out.result(host_lines(clients))

    cleanup_info = None
    if r.mode == "write" and not r.no_cleanup and status == "done":
        if clients:  # every engine's own objects, each set through its own metadata
            infos = [cleanup_run(conn, r.pool, p, r.concurrent, out, r.connect_timeout, r.stall_timeout,
                                 meta_present=True if int(o.get("count") or 0) else None)
                     for p, o in zip(outcome.prefixes, outcome.objects)]  # type: ignore[attr-defined]
            cleanup_info = {"removed": sum(i["removed"] for i in infos), "seconds": sum(i["seconds"] for i in infos)}
        else:
            written = int(((outcome.summary or {}).get("objects") or {}).get("count") or 0)
            cleanup_info = cleanup_run(conn, r.pool, prefix, r.concurrent, out, r.connect_timeout,
                                       r.stall_timeout, meta_present=True if written else None)

    name, workload = r.names
    params = {"interface": "rados", "rw": {"write": "write", "seq": "read", "rand": "randread"}[r.mode],
              "bs": op_size, "object_size": object_size, "iodepth": r.concurrent, "numjobs": 1,
              "runtime": r.seconds, "pool": r.pool, "run_name": r.run_name, "object_prefix": prefix,
              "max_objects": r.max_objects, "stall_timeout": r.stall_timeout,
              "cleanup": r.mode == "write" and not r.no_cleanup}
    run_id = None
    try:
        run_id = save_bench(r.db, name, workload, params, conn, outcome, status,
                            error=error.message if error else None,
                            extra_env={"pool": r.pool, "health_after": health},
                            result_extra={"rados_bench_summary": summary, "cleanup": cleanup_info})
    except FathomError as exc:
        out.warn(f"the results store {r.db} did not take this run: {exc.message}")

    if r.format != "plain":
        extra = {"run_id": run_id, "db": r.db, "run_name": r.run_name, "object_prefix": prefix, "pool": r.pool,
                 "mode": r.mode, "status": status, "errors": (outcome.summary or {}).get("errors", []),
                 "stopped_early": bool((outcome.summary or {}).get("stopped_early")) or status != "done",
                 "stop_reason": (outcome.summary or {}).get("stop_reason") or (error.message if error else None),
                 "engine_cpu_s": {"user": outcome.user_s, "sys": outcome.sys_s},
                 "cleanup": cleanup_info}
        if clients:
            from fathom.dropin.multihost import json_part

            extra["clients"] = json_part(clients)
        if error:
            extra["error"] = {"kind": (fatal or {}).get("kind", "engine"), "message": error.message,
                              "health": health}
        dump_json(fmt.rados_json(r.mode, table, summary, head, extra), r.format == "json-pretty")
    elif run_id is not None:
        sys.stderr.write(f"fathom: stored as run {run_id} in {r.db}\n")
    if error:
        raise error
    return 0


def _early_error(fatal: dict[str, Any] | None, outcome: "EngineRun", conn: Connection,
                 r: RadosArgs) -> FathomError:
    if not fatal:
        return FathomError(f"fathom-engine ended (exit code {outcome.exit_code}) before starting: "
                           f"{outcome.stderr.strip()[-400:] or 'no output'}", exit_code=3)
    msg = fatal.get("message", "")
    if fatal.get("kind") == "ENOENT" and "does not exist" in msg and "pool" in msg:
        return pool_missing(r.pool)
    if fatal.get("kind") == "ENOENT" and "nothing to read" in msg:
        return FathomError(f"nothing to read: no fathom bench write with run name {r.run_name!r} "
                           f"(objects {object_prefix(r.run_name)}.*) in pool {r.pool!r}",
                           hint=f"run `fathom bench rados -p {r.pool} SECONDS write --no-cleanup"
                                f"{'' if r.run_name == DEFAULT_RUN else ' --run-name ' + r.run_name}` first")
    cf = connect_failure(fatal, conn, r.connect_timeout)
    if cf:
        return cf
    if fatal.get("kind") == "invalid_spec":
        return FathomError(f"fathom-engine refused the point: {msg}", exit_code=2)
    return FathomError(f"fathom-engine could not start: {msg}", exit_code=3)


def _partial_summary(outcome: "EngineRun", kind: str) -> dict[str, Any]:
    """A summary rebuilt from intervals when the engine died without one (counts only, no latency)."""
    ops = sum(int(((i.get("ops") or {}).get(kind) or {}).get("ops", 0)) for i in outcome.intervals)
    nbytes = sum(int(((i.get("ops") or {}).get(kind) or {}).get("bytes", 0)) for i in outcome.intervals)
    t = sum(float(i.get("dt") or 0) for i in outcome.intervals)
    return {"measured_s": t, "ops": {kind: {"ops": ops, "bytes": nbytes, "lat_ns": {}}}}


# ---- cleanup -----------------------------------------------------------------------------

def cleanup_run(conn: Connection, pool: str, prefix: str, concurrent: int, out: Out, timeout: float,
                stall_timeout: float = 60.0, listing: bool = False,
                meta_present: bool | None = None) -> dict[str, Any]:
    """Remove the objects of one fathom bench prefix: the set its metadata names (through the engine,
    `concurrent` at a time), then, with listing, any other object named exactly <prefix>.<n>."""
    t0 = time.monotonic()
    out.note("Cleaning up (deleting benchmark objects)")
    removed = 0
    if meta_present is None:
        meta_present = read_meta(conn, pool, prefix, timeout) is not None
    if meta_present:
        spec = EngineSpec(target=Rados(connection=es.Connection.of(conn, timeout), pool=pool, op="remove",
                                          prefix=prefix),
                          load=Load(iodepth=concurrent), on_error="continue", stall_timeout_s=stall_timeout,
                          op_timeout_s=None)
        oc = run_engine(spec, conn, timeout=3600 + stall_timeout)
        if oc.fatal:
            raise FathomError(f"cleanup of {prefix}.* in pool {pool} stopped: {oc.fatal.get('message')}",
                              exit_code=3)
        removed += int(((oc.summary or {}).get("objects") or {}).get("removed") or 0)
    if listing or not meta_present:
        removed += _remove_listed(conn, pool, prefix, timeout)
    took = time.monotonic() - t0
    out.note(f"Removed {removed} objects")
    out.note(f"Clean up completed and total clean up time :{fmt.cpp_g(took)}")
    return {"removed": removed, "seconds": took}


def _list_pool(conn: Connection, pool: str, timeout: float) -> list[str]:
    proc = Ceph(conn, timeout=max(timeout, 60)).call("rados", "-p", pool, "ls", fmt_json=False, check=False,
                                                     timeout=max(timeout, 300))
    if proc.returncode != 0:
        err = (proc.stderr or "").strip()
        if "error opening pool" in err:
            raise pool_missing(pool)
        raise ClusterError(f"cannot list pool {pool}: {err.splitlines()[-1] if err else proc.returncode}")
    return proc.stdout.splitlines()


def _remove_listed(conn: Connection, pool: str, prefix: str, timeout: float) -> int:
    """List the pool and remove the names of exactly fathom's pattern for prefix and its client engines'
    prefixes (nothing else)."""
    ceph = Ceph(conn, timeout=max(timeout, 60))
    pat = object_pattern(prefix, clients=True)
    names = [n for n in _list_pool(conn, pool, timeout) if pat.match(n)]
    removed = 0
    for i in range(0, len(names), 200):
        batch = names[i:i + 200]
        p = ceph.call("rados", "-p", pool, "rm", *batch, fmt_json=False, check=False, timeout=max(timeout, 300))
        if p.returncode != 0 and "No such file" not in (p.stderr or ""):
            raise ClusterError(f"removing {prefix}.* from pool {pool} failed: "
                               f"{(p.stderr or '').strip().splitlines()[-1:]}")
        removed += len(batch)
    return removed


def run_cleanup(a: Any) -> int:
    conn = Connection.from_args(a.conf, a.id, a.name, a.keyring)
    conn = conn.with_client(client_for(getattr(a, "client_ceph", None), conn.conf))
    if a.prefix and a.run_name:
        raise UsageError("give --run-name or --prefix, not both")
    if a.prefix:
        prefix = a.prefix
        if not _PREFIX_RE.match(prefix):
            raise UsageError(f"--prefix: {prefix!r} is not an object prefix (no '/' or spaces, 1-200 characters)")
    else:
        prefix = object_prefix(check_run_name(a.run_name or DEFAULT_RUN))
    timeout = float(a.connect_timeout)
    out = Out(json_mode=False)
    meta = read_meta(conn, a.pool, prefix, timeout)
    if a.prefix and meta is None and not prefix.startswith(PREFIX_ROOT + "."):
        raise FathomError(f"{prefix!r} is not the prefix of a fathom bench (no {prefix}.meta in pool {a.pool} and "
                          f"it does not start with {PREFIX_ROOT}.); fathom removes only what its benches wrote",
                          hint="use the prefix fathom printed as 'Object prefix:', or --run-name NAME")
    concurrent = positive_int(a.concurrent_ios, "-t")
    # a bench on client hosts wrote one set per engine, each with its own metadata: remove each set first
    subs = client_meta_prefixes(_list_pool(conn, a.pool, timeout), prefix)
    removed = sum(cleanup_run(conn, a.pool, p, concurrent, out, timeout, meta_present=True)["removed"] for p in subs)
    info = cleanup_run(conn, a.pool, prefix, concurrent, out, timeout, listing=True, meta_present=meta is not None)
    if info["removed"] + removed == 0:
        sys.stderr.write(f"fathom: nothing to clean up for {prefix}.* in pool {a.pool}\n")
    return 0
