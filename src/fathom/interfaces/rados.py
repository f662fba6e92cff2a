"""rados: librados objects named after the run, in the workload's pool. Reads read what an earlier write left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fathom import engine_spec
from fathom.interfaces.base import Interface

# fio rw name -> (engine op, pattern)
MODES = {"write": ("write", "seq"), "read": ("read", "seq"), "randread": ("read", "rand")}


@dataclass
class Rados:
    """librados objects: `<prefix>.<n>`, metadata in `<prefix>.meta`."""

    connection: engine_spec.Connection
    pool: str
    op: Literal["write", "read", "remove"]
    pattern: Literal["seq", "rand"] = "seq"
    prefix: str | None = None
    object_size: int | None = None
    op_size: int | None = None
    objects: int | None = None
    prefill: bool = False
    alloc_hint: bool = False
    once: bool = False
    kind: str = field(default="rados", init=False)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"connection": self.connection.to_json(), "pool": self.pool, "op": self.op,
                               "pattern": self.pattern}
        for k in ("prefix", "object_size", "op_size", "objects"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        for k in ("prefill", "alloc_hint", "once"):
            if getattr(self, k):
                out[k] = True
        return out

    @property
    def jobs(self) -> int:
        return 1


def section(p: dict[str, Any], ctx: Any) -> Rados:
    op, pattern = MODES[p["rw"]]
    t = Rados(connection=engine_spec.Connection.of(ctx.conn), pool=ctx.pool, op=op,  # type: ignore[arg-type]
                          pattern=pattern, prefix=ctx.run_tag, op_size=int(p["bs"]))  # type: ignore[arg-type]
    if op == "write":
        t.object_size = int(p.get("object_size") or p["bs"])
    return t


INTERFACE = Interface(name="rados", needs_cluster=True, rw_modes=tuple(MODES), section=section, run_data=True)
