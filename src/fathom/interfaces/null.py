"""null: no I/O. Ops complete at once, or after `delay_us` on the engine's own thread, like fio's null engine.

It needs no cluster: it tests the whole path (runner, store, export, report)
without Ceph and measures the engine's own overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from fathom import engine_spec
from fathom.interfaces.base import SWEEP, Interface, OwnFields, engine_rw

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
MAX_DELAY_US = 3_600_000_000  # the engine's limit: one hour


class Fields(OwnFields):
    """null's workload field: `delay_us`, how long each op takes (µs after its submission, on the target's own
    timer thread; 0: done inside the submit call). With iodepth it sets a known capacity (slots / delay),
    which is what open-loop and SLO runs without a cluster need to be checked against."""

    delay_us: Annotated[int | None, SWEEP, Field(ge=0, le=MAX_DELAY_US)] = None


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


def section(p: dict[str, Any], ctx: Any) -> Null:
    return Null(rw=engine_rw(p["rw"]), bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),  # type: ignore[arg-type]
                numjobs=int(p["numjobs"]), size=int(p["size"]) if p.get("size") else None,
                delay_us=int(p.get("delay_us") or 0))


INTERFACE = Interface(name="null", needs_cluster=False, rw_modes=RW, section=section, fields=Fields)
