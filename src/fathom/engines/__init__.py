"""Load engines behind one interface (see base.py): TABLE names each adapter's module (fathom.plugins)."""

from __future__ import annotations

from fathom.engines.base import EngineAdapter
from fathom.interfaces.base import PointContext
from fathom.plugins import Table

# engine name -> the module whose ADAPTER runs it
TABLE: Table[EngineAdapter] = Table("engine", {
    "fathom-engine": "fathom.engines.fathom_engine",
    "fio": "fathom.engines.fio",
    "rados-bench": "fathom.engines.rados_bench",
}, "ADAPTER")


def names() -> list[str]:
    return TABLE.names()


def get(name: str) -> EngineAdapter:
    return TABLE.get(name)


__all__ = ["TABLE", "EngineAdapter", "PointContext", "get", "names"]
