"""`fathom bench rbd POOL/IMAGE`: a drop-in for `rbd bench` with latency, percentiles and JSON.

rbd bench's patterns on fathom-engine's rbd target (each engine job owns an
equal, aligned region of the image):
  seq       io-threads streams, each sequential in its own region (engine: numjobs=threads, iodepth=1)
  rand      one job over the whole image, random offsets, io-threads in flight
  full-seq  one sequential stream over the whole image, io-threads in flight
The run ends after --io-total bytes, as rbd bench's does.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from fathom.dropin import output as fmt
from fathom import engine_spec as es
from fathom.interfaces.rbd import Rbd
from fathom.dropin.record import check_db
from fathom.dropin.engine import connect_failure, named, run_engine
from fathom.engine_spec import EngineSpec, Load

if TYPE_CHECKING:
    from fathom.engines.records import EngineRun
from fathom.dropin.rados import Out, dump_json, pool_missing, stall_error
from fathom.cluster.attach import client_for
from fathom.cluster.ceph import Connection
from fathom.errors import FathomError, UsageError
from fathom.units import parse_size, positive_int

IO_TYPES = {"read": "read", "write": "write", "readwrite": "readwrite", "rw": "readwrite"}
PATTERNS = ("seq", "rand", "full-seq")


def engine_rw(io_type: str, pattern: str) -> str:
    rnd = pattern == "rand"
    return {"read": "randread" if rnd else "read", "write": "randwrite" if rnd else "write",
            "readwrite": "randrw" if rnd else "rw"}[io_type]


def names(io_type: str, pattern: str, image: str) -> tuple[str, str]:
    """The stored run's name and its point's key (the live view's `run` and `point` too)."""
    return f"bench-rbd-{io_type}-{pattern}-{image}", f"rbd-{io_type}-{pattern}"


def parse_image(spec: str, pool: str | None) -> tuple[str, str]:
    if "/" in spec:
        p, _, img = spec.partition("/")
        if pool and pool != p:
            raise UsageError(f"the image spec {spec!r} names pool {p!r} but --pool says {pool!r}")
        if "/" in img:  # pool/namespace/image
            raise UsageError(f"{spec!r}: RBD namespaces are not supported; give POOL/IMAGE")
    else:
        p, img = pool or "rbd", spec
    if not p or not img:
        raise UsageError(f"{spec!r} is not an image spec: give POOL/IMAGE")
    if "@" in img:
        raise UsageError(f"{spec!r}: benchmarking a snapshot is not supported")
    return p, img


def build_spec(conn: Connection, pool: str, image: str, io_type: str, pattern: str, io_size: int,
               threads: int, total: int, mix: int, stall: float, connect_timeout: float,
               rbd_cache: bool = False) -> EngineSpec:
    numjobs, iodepth = (threads, 1) if pattern == "seq" else (1, threads)
    # the engine turns librbd's cache off unless told otherwise
    connection = es.Connection.of(conn, connect_timeout, **({"rbd_cache": "true"} if rbd_cache else {}))
    # --io-total is the whole bench's; the engine bounds each job: split it, whole blocks, none lost
    per_job = -(-total // numjobs)
    return EngineSpec(target=Rbd(connection=connection, pool=pool, rw=engine_rw(io_type, pattern),  # type: ignore[arg-type]
                                    rwmixread=mix, bs=io_size, images=[image], numjobs=numjobs),
                      load=Load(iodepth=iodepth, bytes=-(-per_job // io_size) * io_size),
                      stall_timeout_s=stall, op_timeout_s=None)


def run_bench(a: Any) -> int:
    io_type = IO_TYPES.get((a.io_type or "").lower())
    if not io_type:
        raise UsageError(f"--io-type: {a.io_type!r}: use read, write, readwrite or rw")
    pattern = (a.io_pattern or "seq").lower()
    if pattern not in PATTERNS:
        raise UsageError(f"--io-pattern: {a.io_pattern!r}: use seq, rand or full-seq")
    io_size = parse_size(a.io_size, "--io-size")
    if io_size <= 0:
        raise UsageError("--io-size should be greater than zero")
    if io_size % 512:
        raise UsageError(f"--io-size: {io_size} is not a multiple of 512 bytes (fathom-engine's rbd block unit)")
    threads = positive_int(a.io_threads, "--io-threads")
    total = parse_size(a.io_total, "--io-total")
    if total <= 0:
        raise UsageError("--io-total should be greater than zero")
    mix = positive_int(a.rw_mix_read, "--rw-mix-read", minimum=0)
    if mix > 100:
        raise UsageError(f"--rw-mix-read is a percentage 0..100, got {mix}")
    stall = float(a.stall_timeout)
    if not stall > 0:
        raise UsageError("--stall-timeout must be a positive number of seconds")
    out_fmt = (a.format or "plain").lower()
    if out_fmt not in ("plain", "json", "json-pretty"):
        raise UsageError(f"--format: {a.format!r}: use plain, json or json-pretty")
    pool, image = parse_image(a.image, a.pool)
    named(*names(io_type, pattern, image), f"fathom bench rbd {io_type}", a.db)
    conn = Connection.from_args(a.conf, a.id, a.name, a.keyring)
    conn = conn.with_client(client_for(getattr(a, "client_ceph", None), conn.conf))
    check_db(a.db)
    out = Out(json_mode=out_fmt != "plain")
    from fathom.dropin import multihost

    cs = multihost.from_args(a)
    engines = sum(h.instances for h in cs.hosts) if cs is not None else 1
    # --io-total stays the whole bench's: every client engine moves its share
    spec = build_spec(conn, pool, image, io_type, pattern, io_size, threads, -(-total // engines), mix, stall,
                      a.connect_timeout, rbd_cache=a.rbd_cache)
    table = fmt.RbdTable()
    pre = fmt.rbd_preamble(io_type, io_size, threads, total, pattern, mix)

    def on_record(rec: dict[str, Any]) -> None:
        t = rec.get("type")
        if t == "start":
            out.table([pre] + ([multihost.preamble(cs)] if cs is not None else []) + table.header())
        elif t == "interval":
            out.table(table.interval(rec))

    outcome = run_engine(spec, conn, timeout=7 * 86400.0, on_record=on_record, clients=cs)
    return finish(outcome, conn, out, table, spec, a, pool, image, io_type, pattern, io_size, threads, total, mix,
                  out_fmt)


def finish(outcome: "EngineRun", conn: Connection, out: Out, table: fmt.RbdTable, spec: EngineSpec, a: Any,
           pool: str, image: str, io_type: str, pattern: str, io_size: int, threads: int, total: int, mix: int,
           out_fmt: str) -> int:
    from fathom.dropin.record import merged_pct, save_bench

    fatal = outcome.fatal
    if outcome.start is None:
        if fatal:
            msg = fatal.get("message", "")
            if fatal.get("kind") == "ENOENT" and "pool" in msg and "does not exist" in msg and "image" not in msg:
                raise pool_missing(pool)
            cf = connect_failure(fatal, conn, a.connect_timeout)
            if cf:
                raise cf
            raise FathomError(f"rbd bench on {pool}/{image} could not start: {msg}", exit_code=3)
        raise FathomError(f"fathom-engine ended (exit code {outcome.exit_code}) before starting: "
                          f"{outcome.stderr.strip()[-400:] or 'no output'}", exit_code=3)
    status, error, health = "done", None, None
    if fatal:
        status = "failed"
        if fatal.get("kind") == "stall":
            error, health = stall_error(fatal, conn, a.stall_timeout)
        else:
            error = FathomError(f"the bench stopped: {fatal.get('message')}", exit_code=3)
    elif outcome.exit_code != 0 or outcome.summary is None:
        status = "failed"
        error = FathomError(f"fathom-engine ended with exit code {outcome.exit_code} and no summary", exit_code=3)
    summary_rec = outcome.summary or {"measured_s": sum(float(i.get("dt") or 0) for i in outcome.intervals),
                                      "ops": {}}
    summary = fmt.rbd_summary(summary_rec, merged_pct(summary_rec))
    out.result(fmt.format_rbd_summary(summary, io_type))
    clients = getattr(outcome, "clients", None)
    if clients:
        from fathom.dropin.multihost import host_lines

        out.result(host_lines(clients))

    t = spec.target
    assert isinstance(t, Rbd)
    params = {"interface": "rbd", "rw": t.rw, "rwmixread": mix, "bs": io_size, "iodepth":
              spec.load.iodepth, "numjobs": t.numjobs, "io_threads": threads, "io_total": total,
              "io_pattern": pattern, "pool": pool, "image": image, "stall_timeout": a.stall_timeout,
              "rbd_cache": bool(a.rbd_cache)}
    run_id = None
    try:
        run_id = save_bench(a.db, *names(io_type, pattern, image), params, conn, outcome, status,
                            error=error.message if error else None,
                            extra_env={"pool": pool, "image": image, "health_after": health},
                            result_extra={"rbd_bench_summary": summary})
    except FathomError as exc:
        out.warn(f"the results store {a.db} did not take this run: {exc.message}")
    if out_fmt != "plain":
        doc: dict[str, Any] = {"io_type": io_type, "io_size": io_size, "io_threads": threads, "io_total": total,
                               "io_pattern": pattern, "rw_mix_read": mix if io_type == "readwrite" else None,
                               "pool": pool, "image": image, "datas": table.datas}
        doc.update(summary)
        doc["fathom"] = {"run_id": run_id, "db": a.db, "status": status,
                         "errors": (outcome.summary or {}).get("errors", []),
                         "engine_cpu_s": {"user": outcome.user_s, "sys": outcome.sys_s}}
        if clients:
            from fathom.dropin.multihost import json_part

            doc["fathom"]["clients"] = json_part(clients)
        if error:
            doc["fathom"]["error"] = {"kind": (fatal or {}).get("kind", "engine"), "message": error.message,
                                      "health": health}
        dump_json(doc, out_fmt == "json-pretty")
    elif run_id is not None:
        sys.stderr.write(f"fathom: stored as run {run_id} in {a.db}\n")
    if error:
        raise error
    return 0
