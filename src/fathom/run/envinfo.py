"""Facts a result depends on, recorded with every run: versions, build, host, cluster config. No secrets."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

from fathom.version import __version__
from fathom.cluster.ceph import Ceph
from fathom.errors import FathomError


def host_facts() -> dict[str, Any]:
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"hostname": platform.node(), "cpu_model": cpu_model, "cores": os.cpu_count(), "mem_bytes": mem,
            "kernel": platform.release(), "os": _os_release(), "python": platform.python_version()}


def _os_release() -> str | None:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def tool_version(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else None


def ceph_facts(ceph: Ceph) -> dict[str, Any]:
    """Versions of the running daemons, build hash, OSD flags, pool settings, config that differs from defaults."""
    client = ceph.conn.client
    out: dict[str, Any] = {"ceph_client_version": client.version(), "ceph_client": client.describe()}
    for key, args in (("versions", ("versions",)), ("osd_dump", ("osd", "dump")),
                      ("config_dump", ("config", "dump")), ("osd_metadata", ("osd", "metadata"))):
        try:
            out[key] = ceph.ceph(*args, timeout=30)
        except FathomError as exc:
            out[key] = {"error": exc.message}
    od = out.pop("osd_dump", {}) or {}
    out["osd_flags"] = od.get("flags")
    out["pools"] = [{k: p.get(k) for k in ("pool_name", "size", "min_size", "pg_num", "pg_autoscale_mode",
                                            "erasure_code_profile", "application_metadata")}
                    for p in od.get("pools", [])] if isinstance(od, dict) else None
    meta = out.pop("osd_metadata", None)
    if isinstance(meta, list):
        keep = ("id", "osd_objectstore", "ceph_version", "ceph_version_short", "bluestore_bdev_type",
                "bluestore_bdev_size", "osd_data", "cpu", "kernel_version", "mem_total_kb")
        out["osds"] = [{k: m.get(k) for k in keep if k in m} for m in meta]
    v = out.get("versions")
    if isinstance(v, dict):
        overall = v.get("overall") or {}
        if overall:
            out["ceph_version"] = next(iter(overall))
            # "ceph version 16.2.15 (618f4408...) pacific (stable)": the build hash is in parentheses
            s = out["ceph_version"]
            if "(" in s:
                out["ceph_build"] = s.split("(", 1)[1].split(")", 1)[0]
    # config dump can hold secrets only for rgw/mgr credentials; keep names and values of non-secret keys
    cd = out.get("config_dump")
    if isinstance(cd, list):
        out["config_dump"] = [{k: c.get(k) for k in ("section", "name", "value")} for c in cd
                              if not any(w in str(c.get("name", "")) for w in ("key", "secret", "password", "token"))]
    return out


def layouts(ceph: Ceph, pools: dict[str, str], rgw: Any = None) -> dict[str, Any]:
    """{the suite's pool name: {pool_name, size, erasure_code_profile, k, m}} of the pools prep made or adopted,
    and `placement:NAME` for each RGW placement of rgw (a suite's prep.rgw): its data pool's. What a point's
    ceiling is computed with (fathom.analysis.ceiling)."""
    try:
        od = ceph.ceph("osd", "dump", timeout=30)
    except FathomError:
        return {}
    real = {p.get("pool_name"): p for p in od.get("pools", [])} if isinstance(od, dict) else {}
    out: dict[str, Any] = {}
    for name, pool in pools.items():
        p = real.get(pool)
        if p is None:
            continue
        lay = {"pool_name": pool, "size": p.get("size"), "erasure_code_profile": p.get("erasure_code_profile") or ""}
        if lay["erasure_code_profile"]:
            try:
                got = ceph.ceph("osd", "erasure-code-profile", "get", lay["erasure_code_profile"], timeout=30)
                lay.update(k=int(got["k"]), m=int(got["m"]))
            except (FathomError, KeyError, TypeError, ValueError):
                pass
        out[name] = lay
    for name, pl in (getattr(rgw, "placements", None) or {}).items():
        if pl.data_pool in out:
            out[f"placement:{name}"] = out[pl.data_pool]
    return out


def collect(ceph: Ceph | None) -> dict[str, Any]:
    env: dict[str, Any] = {"fathom_version": __version__, "host": host_facts(),
                           "fio_version": tool_version(["fio", "--version"])}
    if ceph is not None:
        env.update(ceph_facts(ceph))
    return env
