"""A point's ceiling from a baseline run (`fathom baseline`, fathom.dropin.baseline) and the pool's layout: the most
the measured NICs, devices and engine allow for the point's reads or writes, and which of them allows the least.

Each term is a measured figure over the bytes it must carry per byte the clients move (docs/measurement.md,
"The ceiling of a point"):
    clients' NICs     out for writes, in for reads: each client's best direction to any server host, summed
    servers' NICs     in for writes: 1 + x, out for reads: 1 + y, where x is the copies each client byte sends between
                      server hosts (replicas: min(size, H) - 1; EC k+m: (min(k+m, H) - 1) / k) and y what a read
                      gathers (replicas: 0; EC: (min(k, H) - 1) / k), H the hosts holding OSDs; and out for writes
                      (x), in for reads (y), when x or y is not 0
    devices           reads: every device's sequential read rate summed (a read is served once); writes: their
                      write rate over the copies each byte is written (size, or (k+m)/k), when it was measured
    engine            the engine's ops/s on the null target, summed over client hosts, times the point's op size
A server's NIC is taken at the best rate any client measured to it. Pure: the baseline's points in, a dict out.
"""

from __future__ import annotations

from typing import Any

MIB = 1 << 20


def figures(points: list[dict[str, Any]]) -> dict[str, Any]:
    """A baseline run's stored points as {engine: {host: ops/s}, devices: [{device, host, osds, read, write}]
    (bytes/s), network: {(client, server): {up, down}} (bytes/s), osd_hosts}."""
    engine: dict[str, float] = {}
    devices: dict[tuple[str, str], dict[str, Any]] = {}
    network: dict[tuple[str, str], dict[str, float]] = {}
    for p in points:
        m, q = p.get("metrics") or {}, p.get("params") or {}
        if p.get("status") != "done" or not m:
            continue
        kind = q.get("baseline")
        if kind == "engine" and m.get("iops"):
            engine[q["host"]] = engine.get(q["host"], 0.0) + float(m["iops"])
        elif kind in ("device", "filesystem") and m.get("bw_mib_s"):
            d = devices.setdefault((str(q.get("device") or q.get("path")), q["host"]),
                                   {"device": q.get("device") or q.get("path"), "host": q["host"],
                                    "osds": q.get("osds") or [], "kind": kind, "read": None, "write": None})
            d["read" if q.get("rw") == "read" else "write"] = float(m["bw_mib_s"]) * MIB
        elif kind == "network" and m.get("bw_mib_s"):
            pair = network.setdefault((q["host"], q["server"]), {})
            pair["down" if q.get("direction") == "server->client" else "up"] = float(m["bw_mib_s"]) * MIB
    return {"engine": engine, "devices": list(devices.values()), "network": network}


def layout(lay: dict[str, Any] | None) -> dict[str, Any] | None:
    """A pool's layout as the run's environment keeps it (`layouts`: fathom.run.envinfo.layouts) as {size} or
    {k, m}, with a label; None when it is not known (an EC pool whose k and m were not read)."""
    if not lay:
        return None
    if lay.get("erasure_code_profile"):
        if not (lay.get("k") and lay.get("m")):
            return None
        k, m = int(lay["k"]), int(lay["m"])
        return {"k": k, "m": m, "label": f"EC {k}+{m}"}
    size = int(lay.get("size") or 1)
    return {"size": size, "label": f"{size} replica{'s' if size != 1 else ''}"}


def _fmt(b: float) -> str:
    return f"{b / (1 << 30):.3g} GiB/s" if b >= 1 << 30 else f"{b / MIB:.3g} MiB/s"


def ceiling(fig: dict[str, Any], op: str, lay: dict[str, Any], hosts: int, bs: int | None) -> dict[str, Any]:
    """{bytes_s, limit, terms: [{name, bytes_s, how}], missing} for reads or writes (op) of bs bytes on a pool of
    layout lay, its OSDs on `hosts` hosts."""
    h = max(1, hosts)
    if "k" in lay:
        k, m = lay["k"], lay["m"]
        x, y, copies = (min(k + m, h) - 1) / k, (min(k, h) - 1) / k, (k + m) / k
    else:
        x, y, copies = float(min(lay["size"], h) - 1), 0.0, float(lay["size"])
    terms: list[dict[str, Any]] = []
    missing: list[str] = []
    net = fig.get("network") or {}
    if net:
        def best(side: int, way: str) -> float:
            per: dict[str, float] = {}
            for pair, v in net.items():
                if v.get(way):
                    per[pair[side]] = max(per.get(pair[side], 0.0), v[way])
            return sum(per.values())
        up_c, up_s, down_c, down_s = best(0, "up"), best(1, "up"), best(0, "down"), best(1, "down")
        if op == "write":
            terms += [{"name": "the clients' NICs", "bytes_s": up_c, "how": "clients out"},
                      {"name": "the servers' NICs", "bytes_s": up_s / (1 + x), "how": f"servers in / {1 + x:.3g}"}]
            if x:
                terms.append({"name": "the servers' NICs", "bytes_s": down_s / x, "how": f"servers out / {x:.3g}"})
        else:
            terms += [{"name": "the clients' NICs", "bytes_s": down_c, "how": "clients in"},
                      {"name": "the servers' NICs", "bytes_s": down_s / (1 + y), "how": f"servers out / {1 + y:.3g}"}]
            if y:
                terms.append({"name": "the servers' NICs", "bytes_s": up_s / y, "how": f"servers in / {y:.3g}"})
        terms = [t for t in terms if t["bytes_s"] > 0]
    else:
        missing.append("the network (no client and server hosts measured apart)")
    devs = fig.get("devices") or []
    rates = [d.get(op) for d in devs]
    if devs and all(r for r in rates):
        total = sum(float(r) for r in rates if r)
        if op == "write":
            terms.append({"name": "the devices", "bytes_s": total / copies,
                          "how": f"{len(devs)} device(s) writing {_fmt(total)} / {copies:.3g} copies"})
        else:
            terms.append({"name": "the devices", "bytes_s": total, "how": f"{len(devs)} device(s) reading"})
    else:
        missing.append(f"the devices' {op}s" + (", as a device holding data is only read" if devs else ""))
    eng = sum((fig.get("engine") or {}).values())
    if eng and bs:
        terms.append({"name": "the engine", "bytes_s": eng * bs, "how": f"{eng:,.0f} ops/s on the null target"})
    if not terms:
        return {"bytes_s": None, "limit": None, "terms": [], "missing": missing}
    low = min(terms, key=lambda t: t["bytes_s"])
    return {"bytes_s": low["bytes_s"], "limit": low["name"], "terms": terms, "missing": missing,
            "layout": lay["label"]}


def against(bytes_s: float, c: dict[str, Any], op: str) -> str:
    """'write 1.4 GiB/s = 71% of the 1.97 GiB/s the servers' NICs allow with 3 replicas'."""
    if not c.get("bytes_s"):
        return f"{op} {_fmt(bytes_s)}: no ceiling (not measured: {', '.join(c.get('missing') or ['-'])})"
    return (f"{op} {_fmt(bytes_s)} = {100 * bytes_s / c['bytes_s']:.0f}% of the {_fmt(c['bytes_s'])} "
            f"{c['limit']} allow with {c['layout']}"
            + (f" (not measured: {', '.join(c['missing'])})" if c.get("missing") else ""))
