"""A full cluster, named: which of Ceph's full states (`ceph health detail`) holds client writes back.

A pool over its quota (POOL_FULL) or an OSD past the full ratio (OSD_FULL) makes
writes wait in the client; the engine's stall or op timeout then ends the point.
Its error alone says only that ops hung: this names the cluster's state instead.
"""

from __future__ import annotations

from typing import Any

from fathom.errors import FathomError

FULL_CHECKS = ("POOL_FULL", "OSD_FULL")


def full_state(ceph: Any) -> dict[str, str]:
    """{check: what Ceph says} for each full state raised now ({} when none, or the cluster did not answer)."""
    try:
        detail = ceph.ceph("health", "detail", timeout=30) or {}
    except FathomError:
        return {}
    out: dict[str, str] = {}
    for name, check in (detail.get("checks") or {}).items():
        if name not in FULL_CHECKS:
            continue
        summary = (check.get("summary") or {}).get("message", "")
        lines = [d.get("message", "") for d in (check.get("detail") or [])][:3]
        out[name] = summary + (f" ({'; '.join(lines)})" if lines else "")
    return out


def describe(state: dict[str, str]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in state.items())
