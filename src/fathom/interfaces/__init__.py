"""Storage interfaces: what a workload drives (rados, rbd, null; s3, posix, cephfs, nfs to come).

One module per interface in this package, each defining `INTERFACE` (see
base.Interface): its name, whether it needs a Ceph cluster, which fio-named
modes it runs, and how a planned point becomes the fathom-engine target section
(engine_spec). Modules are found by listing the package, so adding an interface
is one new file here (plus its Rust target module in engine/src/target/).
"""

from __future__ import annotations

import importlib
import pkgutil

from fathom.errors import FathomError
from fathom.interfaces.base import Interface

_REGISTRY: dict[str, Interface] = {}


def _load() -> dict[str, Interface]:
    if not _REGISTRY:
        for m in pkgutil.iter_modules(__path__):
            if m.name != "base":
                iface = importlib.import_module(f"{__name__}.{m.name}").INTERFACE
                _REGISTRY[iface.name] = iface
    return _REGISTRY


def names() -> list[str]:
    return sorted(_load())


def cluster_needed(params: dict) -> bool:
    """Whether a planned point (or a workload) needs a Ceph cluster."""
    iface = params.get("interface")
    return get("null" if iface is None else str(iface)).cluster_needed(params)


def per_job_bytes(params: dict) -> int | None:
    """The bytes each job moves at most, when fio's `size` bounds the point (runtime is then its cap): file
    interfaces take it as each job's pass over its files; s3 puts as the bytes each client puts, new objects only."""
    iface = get(str(params["interface"]))
    if params.get("size") and (iface.files or (iface.name == "s3" and params["rw"] == "write")):
        return int(params["size"])
    return None


def get(name: str) -> Interface:
    try:
        return _load()[name]
    except KeyError:
        raise FathomError(f"unknown interface {name!r}; interfaces: {', '.join(names())}") from None


__all__ = ["Interface", "cluster_needed", "get", "names", "per_job_bytes"]
