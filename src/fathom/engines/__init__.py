"""Load engines behind one interface (see base.py). Importing this package registers the built-in adapters."""

from __future__ import annotations

from fathom.engines.base import EngineAdapter, PointContext, register, registry
from fathom.errors import FathomError

_LOADED = False
BUILTIN = ("fathom.engines.fathom_engine", "fathom.engines.fio", "fathom.engines.rados_bench")


def _load() -> None:
    global _LOADED
    if not _LOADED:
        import importlib

        for mod in BUILTIN:
            importlib.import_module(mod)
        _LOADED = True


def names() -> list[str]:
    _load()
    return list(registry())


def get(name: str) -> EngineAdapter:
    _load()
    try:
        return registry()[name]
    except KeyError:
        raise FathomError(f"unknown engine {name!r}; engines: {', '.join(registry())}") from None


__all__ = ["EngineAdapter", "PointContext", "get", "names", "register", "registry"]
