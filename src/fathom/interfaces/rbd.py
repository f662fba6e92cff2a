"""rbd: librbd images prepared by the suite (prep.images), fio's job model (numjobs streams per image)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fathom import engine_spec
from fathom.errors import FathomError
from fathom.interfaces.base import Interface, engine_rw

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")


@dataclass
class Rbd:
    """librbd images, fio's job model: numjobs streams per image."""

    connection: engine_spec.Connection
    pool: str
    rw: engine_spec.Rw
    images: list[str]
    bs: int = 4096
    rwmixread: int = 50
    numjobs: int = 1
    size: int | None = None  # bytes of each image used, from offset 0
    kind: str = field(default="rbd", init=False)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"connection": self.connection.to_json(), "pool": self.pool, "rw": self.rw,
                               "rwmixread": self.rwmixread, "bs": self.bs, "images": list(self.images),
                               "numjobs": self.numjobs}
        if self.size is not None:
            out["size"] = self.size
        return out

    @property
    def jobs(self) -> int:
        return self.numjobs * len(self.images)


def section(p: dict[str, Any], ctx: Any) -> Rbd:
    if not ctx.images:
        raise FathomError("fathom-engine on rbd needs images, and prep made none")
    return Rbd(connection=engine_spec.Connection.of(ctx.conn), pool=ctx.pool, rw=engine_rw(p["rw"]),
                           images=list(ctx.images), bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),
                           numjobs=int(p["numjobs"]), size=int(p["size"]) if p.get("size") else None)


INTERFACE = Interface(name="rbd", needs_cluster=True, rw_modes=RW, section=section, needs_images=True)
