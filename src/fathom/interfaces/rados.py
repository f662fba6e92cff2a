"""rados: librados objects named after the run, in the workload's pool. Reads read what an earlier write left."""

from __future__ import annotations

from typing import Any

from fathom import engine_spec
from fathom.interfaces.base import Interface

# fio rw name -> (engine op, pattern)
MODES = {"write": ("write", "seq"), "read": ("read", "seq"), "randread": ("read", "rand")}


def target(p: dict[str, Any], ctx: Any) -> engine_spec.Rados:
    op, pattern = MODES[p["rw"]]
    t = engine_spec.Rados(connection=engine_spec.Connection.of(ctx.conn), pool=ctx.pool, op=op,  # type: ignore[arg-type]
                          pattern=pattern, prefix=ctx.run_tag, op_size=int(p["bs"]))  # type: ignore[arg-type]
    if op == "write":
        t.object_size = int(p.get("object_size") or p["bs"])
    return t


INTERFACE = Interface(name="rados", needs_cluster=True, rw_modes=tuple(MODES), target=target)
