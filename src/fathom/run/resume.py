"""Which data a run's points leave for later points, and what a resumed run must restore.

A read point on the rados interface reads the objects the run's last earlier write
point of the same engine left in the same pool (rados bench --run-name, fio's rados
object, fathom-engine's object prefix are all named after the run, not the attempt);
an s3 GET, what the last s3 PUT left in the run's buckets (removed when an attempt
ends on an attached cluster: fathom.cluster.buckets).
When a resumed run finds that pool made anew (a new disposable cluster, a pool that
was gone), the data is lost: the write point that produced it runs again, unmeasured,
before its first remaining reader, and the run records that as an event. Its stored
result stays the measured one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from fathom import engines, interfaces
from fathom.errors import FathomError
from fathom.results.store import Store
from fathom.suite.plan import Point
from fathom.suite.spec import Suite

READ_MODES = ("read", "randread")


def pool_of(p: Point, suite: Suite) -> str | None:
    """The suite's name of the pool a point runs on (the runner's default: the first prepared pool)."""
    return p.params.get("pool") or (suite.prep.pools[0].name if suite.prep.pools else None)


def reads_run_data(p: Point) -> bool:
    return interfaces.get(p.params["interface"]).run_data and p.params["rw"] in READ_MODES


def writes_run_data(p: Point) -> bool:
    return interfaces.get(p.params["interface"]).run_data and p.params["rw"] not in READ_MODES


def producer(points: list[Point], reader: Point, suite: Suite) -> Point | None:
    """The write whose objects `reader` reads: the last one before it of the same interface and engine on the same
    pool (an s3 GET reads what the last s3 PUT into its bucket left, never a rados write's objects)."""
    pool = pool_of(reader, suite)
    for p in reversed(points[:reader.idx]):
        if writes_run_data(p) and p.params["interface"] == reader.params["interface"] \
                and p.params.get("bucket") == reader.params.get("bucket") \
                and p.engine == reader.engine and pool_of(p, suite) == pool:
            return p
    return None


def data_pools(points: list[Point], done: set[str], suite: Suite) -> set[str]:
    """Pools (suite names) that finished points used: they may hold data a remaining point reads."""
    return {pool for p in points if p.key in done and (pool := pool_of(p, suite))}


@dataclass
class Rewrite:
    write: Point  # a finished write point whose data is gone
    before: Point  # its first remaining reader: the write runs again right before it
    pool: str  # suite name of the pool that lost the data


def rewrites(points: list[Point], done: set[str], lost: Iterable[str], suite: Suite) -> list[Rewrite]:
    """The finished writes to run again (unmeasured), each once, before the first remaining point reading them.

    lost: keys of finished write points whose data is gone. A reader whose producer
    is not finished needs nothing: the producer runs in this attempt first.
    """
    lost = set(lost)
    out: dict[str, Rewrite] = {}
    for r in points:
        if r.key in done or not reads_run_data(r):
            continue
        w = producer(points, r, suite)
        if w is not None and w.key in done and w.key in lost and w.key not in out:
            out[w.key] = Rewrite(w, r, pool_of(r, suite))  # type: ignore[arg-type]
    return sorted(out.values(), key=lambda rw: rw.before.idx)


def readers_without_data(points: list[Point], done: set[str], suite: Suite) -> list[Point]:
    """Remaining reads whose data a finished write left (the ones a stopped disposable cluster takes away)."""
    out = []
    for r in points:
        if r.key not in done and reads_run_data(r):
            w = producer(points, r, suite)
            if w is not None and w.key in done:
                out.append(r)
    return out


def rewrite(rw: Rewrite, lost: str, ctx: engines.PointContext, store: Store, run_id: int,
            say: Any) -> bool:
    """Run a finished write point again, unmeasured, so the read after it finds its data; True if it did."""
    w = rw.write
    why = f"the data finished point {w.key} wrote is gone ({lost})"
    say(f"{why}: writing it again, unmeasured, before {rw.before.key}")
    try:
        interfaces.prepare(w.params, ctx)
        res = engines.get(w.engine).run(w.params, ctx)
    except FathomError as exc:
        msg = f"{why}; writing it again failed: {exc.message}"
        store.add_event(run_id, "error", msg, data={"write": w.key, "before": rw.before.key})
        say(msg)
        return False
    ops = sum(o.ops for o in res.ops.values())
    nbytes = sum(o.bytes for o in res.ops.values())
    store.add_event(run_id, "rewrite", f"{why}: wrote it again, unmeasured, before {rw.before.key} "
                                       f"({ops} ops, {nbytes / 2**20:.0f} MiB); {w.key} keeps its measured result",
                    data={"write": w.key, "before": rw.before.key, "pool": ctx.pool, "ops": ops, "bytes": nbytes})
    return ops > 0
