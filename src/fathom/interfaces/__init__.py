"""Storage interfaces: what a workload drives (rados, rbd, cephfs, s3, posix, nfs, null).

One module per interface in this package, each defining `INTERFACE` (see
base.Interface): its name, whether it needs a Ceph cluster, which fio-named
modes it runs, what a point needs made before it runs (prepare: a mount, a
server), and how a planned point becomes the fathom-engine target section
(engine_spec; pure, so `fathom plan` and tests build every point's), and the
workload fields it alone takes (`fields`: a base.OwnFields model, which
fields_model() merges into workload.Workload). TABLE names each interface's
module (fathom.plugins), so adding an interface is one new file here and its
line in TABLE (plus its Rust target module in engine/src/targets/).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import create_model

from fathom.errors import FathomError
from fathom.interfaces.base import Interface, OwnFields
from fathom.plugins import Table

TABLE: Table[Interface] = Table("interface", {
    "cephfs": "fathom.interfaces.cephfs",
    "nfs": "fathom.interfaces.nfs",
    "null": "fathom.interfaces.null",
    "posix": "fathom.interfaces.posix",
    "rados": "fathom.interfaces.rados",
    "rbd": "fathom.interfaces.rbd",
    "s3": "fathom.interfaces.s3",
}, "INTERFACE")


def _load() -> dict[str, Interface]:
    return TABLE.all()


def names() -> list[str]:
    return sorted(_load())


def cluster_needed(params: dict) -> bool:
    """Whether a planned point (or a workload) needs a Ceph cluster."""
    iface = params.get("interface")
    return get("null" if iface is None else str(iface)).cluster_needed(params)


def op_size(params: dict) -> int | None:
    """One op's size in bytes: the interface's own size field when set (s3: object_size), else bs.

    Stored and imported points may lack an interface (or name one no longer known): bs then."""
    iface = _load().get(str(params.get("interface") or ""))
    return params.get(iface.op_size_key if iface else "bs") or params.get("bs")


def per_job_bytes(params: dict) -> int | None:
    """The bytes each job moves at most, when fio's `size` bounds the point (runtime is then its cap): file
    interfaces take it as each job's pass over its files; s3 and rados writes as the bytes each job writes, new
    objects only (without it a write fills the pool for the whole runtime)."""
    iface = get(str(params["interface"]))
    if params.get("size") and (iface.files or (iface.name in ("s3", "rados") and params["rw"] == "write")):
        return int(params["size"])
    return None


def own_fields() -> tuple[str, ...]:
    """Every workload field that one interface owns (Interface.own_fields), in interface order."""
    return tuple(k for n in names() for k in get(n).own_fields)


def sweepable() -> tuple[str, ...]:
    """Every interface's own fields a suite may sweep (Interface.sweepable), in interface order."""
    return tuple(k for n in names() for k in get(n).sweepable)


def fields_model() -> type[OwnFields]:
    """One model of every interface's own fields, for workload.Workload to inherit: a pydantic model whose bases
    are the interfaces' `fields` models in interface order (pydantic lists a later base's fields first). Refuses
    at import what would silently go wrong in the merge: a name two interfaces both declare (a field, or a
    validator, which would hide the other's) and a field not defaulting to None (the workload's check that a
    field is only set for its interface takes None for unset)."""
    models: list[type[OwnFields]] = []
    seen: dict[str, str] = {}
    for n in names():
        m = get(n).fields
        if m is None:
            continue
        models.append(m)
        decorators = m.__pydantic_decorators__
        validators = [k for f in dataclasses.fields(decorators) for k in getattr(decorators, f.name)]
        for k in (*m.model_fields, *validators):
            if k in seen:
                raise TypeError(f"interfaces {seen[k]} and {n} both declare {k!r} in their workload fields")
            seen[k] = n
        for k, f in m.model_fields.items():
            if f.default is not None or f.default_factory is not None:
                raise TypeError(f"interface {n}: workload field {k!r} must default to None")
    if not models:
        return OwnFields
    return create_model("InterfaceFields", __base__=tuple(models), __module__=__name__)


def prepare(params: dict, ctx: Any) -> str | None:
    """What the point's interface needs made before it runs (a mount, a server, empty buckets), made: a step of
    each point before its health gate; building its spec after it reads what it made, and makes nothing.
    Returns what it did worth telling the user, or None."""
    iface = get(str(params["interface"]))
    return iface.prepare(params, ctx) if iface.prepare is not None else None


def get(name: str) -> Interface:
    try:
        return _load()[name]
    except KeyError:
        raise FathomError(f"unknown interface {name!r}; interfaces: {', '.join(names())}") from None


__all__ = ["Interface", "OwnFields", "cluster_needed", "fields_model", "get", "names", "op_size", "own_fields",
           "per_job_bytes", "prepare", "sweepable"]
