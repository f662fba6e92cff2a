"""null: no I/O. Ops complete at once, or after `delay_us` on the engine's own thread, like fio's null engine.

It needs no cluster: it tests the whole path (runner, store, export, report)
without Ceph and measures the engine's own overhead.
"""

from __future__ import annotations

from typing import Any

from fathom import engine_spec
from fathom.interfaces.base import Interface, engine_rw

RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")


def target(p: dict[str, Any], ctx: Any) -> engine_spec.Null:
    return engine_spec.Null(rw=engine_rw(p["rw"]), bs=int(p["bs"]), rwmixread=int(p["rwmixread"]),  # type: ignore[arg-type]
                            numjobs=int(p["numjobs"]), size=int(p["size"]) if p.get("size") else None)


INTERFACE = Interface(name="null", needs_cluster=False, rw_modes=RW, target=target)
