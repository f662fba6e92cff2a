"""rbd: librbd images prepared by the suite (prep.images), fio's job model (numjobs streams per image)."""

from __future__ import annotations

from typing import Any

from fathom import engine_spec
from fathom.errors import FathomError
from fathom.interfaces.base import Interface, engine_rw

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")


def target(p: dict[str, Any], ctx: Any) -> engine_spec.Rbd:
    if not ctx.images:
        raise FathomError("fathom-engine on rbd needs images, and prep made none")
    return engine_spec.Rbd(connection=engine_spec.Connection.of(ctx.conn), pool=ctx.pool, rw=engine_rw(p["rw"]),
                           images=list(ctx.images), bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),
                           numjobs=int(p["numjobs"]), size=int(p["size"]) if p.get("size") else None)


INTERFACE = Interface(name="rbd", needs_cluster=True, rw_modes=RW, target=target, needs_images=True)
