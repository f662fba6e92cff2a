"""null: no I/O. Ops complete at once, or after `delay_us` on the engine's own thread, like fio's null engine.

It needs no cluster: it tests the whole path (runner, store, export, report)
without Ceph and measures the engine's own overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fathom import engine_spec
from fathom.interfaces.base import Interface, engine_rw

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")


@dataclass
class Null:
    """No I/O: ops complete at once (or after delay_us on the target's thread). Tests the loop, measures the engine."""

    rw: engine_spec.Rw = "randread"
    bs: int = 4096
    rwmixread: int = 50
    numjobs: int = 1
    size: int | None = None  # bytes per job the offsets range over (engine default 1 GiB)
    delay_us: int = 0
    kind: str = field(default="null", init=False)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rw": self.rw, "rwmixread": self.rwmixread, "bs": self.bs, "numjobs": self.numjobs,
                               "delay_us": self.delay_us}
        if self.size is not None:
            out["size"] = self.size
        return out

    @property
    def jobs(self) -> int:
        return self.numjobs


def target(p: dict[str, Any], ctx: Any) -> Null:
    return Null(rw=engine_rw(p["rw"]), bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),  # type: ignore[arg-type]
                numjobs=int(p["numjobs"]), size=int(p["size"]) if p.get("size") else None)


INTERFACE = Interface(name="null", needs_cluster=False, rw_modes=RW, target=target)
