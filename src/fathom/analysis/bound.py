"""What bounds a point: each resource's measured use set against its ceiling, and a verdict naming the one at
its limit ("NIC tx of h1 at 94% of 80 Mbit/s"), two when two are, or none: then a closed-loop point is bound by
its latency at the ops it keeps in flight, an open-loop one by the rate it was offered. A point on the null
target is bound by the client by definition (there is nothing else), whatever share of a core a shared host
gave its busiest thread.

Pure: from a point's telemetry samples over its telemetry window, its metrics, its parameters and its `capacity`
event (fathom.servers.capacity: hosts' cores and NIC ceilings, local daemons' allowed cores). What the data
cannot say is named in `missing`, never guessed: a daemon on a host whose cgroup limits fathom cannot read is
set against its host's cores, and says so.

Resources and their ceilings:
    daemon CPU   each daemon's mean CPU (cores) against the cores it may use (affinity, cgroup cpu.max)
    host CPU     each sampled host's busy cores against its cores
    NIC          each host's received and sent bits/s against its NICs' link speed (and a tc rate cap, which
                 shapes only what the host sends)
    disk         each OSD device's time with I/O in flight (diskstats) against the whole window: 100% busy saturates
                 a disk that serves one request at a time; an SSD or NVMe device serves many at once, so its
                 mean requests in flight are named beside it
    client       fathom-engine's busiest thread against one core (an engine thread runs on one core)
    throttle     each of a daemon's Ceph throttles (perf counter sections `throttle-*`: the OSD's client bytes and
                 messages, the messengers' dispatch throttlers, BlueStore's): its waits (`get` on a full throttle)
                 and refused tries (`get_or_fail`, which the messenger retries after a pause) per get, at most 1
    in flight    a closed-loop point's ops in flight by Little's law (ops/s x mean latency) against the iodepth x
                 jobs x engines it asked for: fewer means the client's issue path held ops back
"""

from __future__ import annotations

from typing import Any

from fathom.results.usage import NOT_DAEMONS, weighted

AT_LIMIT = 0.90  # use/ceiling at which a resource is said to bound the point
NEAR = 0.75  # named beside the verdict, as the next resource to look at
HELD_BACK = 0.80  # ops in flight under this share of those asked for: the client did not keep its queue full
BOUNDS = ("cpu", "network", "disk", "throttle", "client", "latency", "rate", "unknown")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _mean(samples: list[tuple[dict[str, Any], float]], key: str) -> float | None:
    got = [(s[key], w) for s, w in samples if s.get(key) is not None]
    total = sum(w for _, w in got)
    return sum(v * w for v, w in got) / total if total else None


def _mbit(bits_s: float) -> str:
    return f"{bits_s / 1e9:.3g} Gbit/s" if bits_s >= 1e9 else f"{bits_s / 1e6:.3g} Mbit/s"


def resources(samples: list[dict[str, Any]], window: dict[str, float] | None, capacity: dict[str, Any],
              metrics: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each resource's use against its ceiling, highest ratio first, and what could not be judged."""
    missing: list[str] = []
    out: list[dict[str, Any]] = []
    win = weighted(samples, window["from"], window["to"]) if window and samples else \
        [(s, s.get("dt") or 1.0) for s in samples]
    hosts_cap: dict[str, Any] = capacity.get("hosts") or {}
    daemons_cap: dict[str, Any] = capacity.get("daemons") or {}
    by_daemon: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = {}
    by_host: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for s, w in win:
        host = s.get("host") or capacity.get("here") or "local"
        if s.get("kind") == "host":
            by_host.setdefault(host, []).append((s, w))
        elif s.get("kind") not in NOT_DAEMONS:
            by_daemon.setdefault((host, str(s.get("source"))), []).append((s, w))
    if not win:
        missing.append("no server samples: daemons' and hosts' CPU and NICs not measured")
    # ---- daemons' CPU ----
    unlimited: set[str] = set()
    for (host, name), mine in sorted(by_daemon.items()):
        cpu = _mean(mine, "cpu_pct")
        if cpu is None:
            continue
        cap = daemons_cap.get(name) or {}  # a daemon's name is its cluster's: one process, wherever sampled
        cores, why = cap.get("cores"), cap.get("why")
        if cores is None:
            cores = (hosts_cap.get(host) or {}).get("cores") or next(
                (s.get("ncpu") for s, _ in by_host.get(host, []) if s.get("ncpu")), None)
            why = f"its host's {cores} core(s)" if cores else None
            unlimited.add(host)
        if not cores:
            missing.append(f"{name}: the cores it may use are not known")
            continue
        use = cpu / 100.0
        out.append({"kind": "cpu", "resource": f"{name} CPU", "host": host, "use": round(use, 3),
                    "ceiling": cores, "unit": "cores", "ratio": use / cores,
                    "evidence": f"{name} CPU at {_pct(use / cores)} of {cores:g} core(s) ({why})"})
    if unlimited:
        missing.append(f"cgroup limits of daemons on {', '.join(sorted(unlimited))} not read: set against their "
                       "host's cores")
    # ---- hosts' CPU and NICs ----
    for host, mine in sorted(by_host.items()):
        cpu = _mean(mine, "cpu_pct")
        ncpu = next((s.get("ncpu") for s, _ in reversed(mine) if s.get("ncpu")), None) or \
            (hosts_cap.get(host) or {}).get("cores")
        if cpu is not None and ncpu:
            out.append({"kind": "cpu", "resource": f"{host} CPU", "host": host, "use": round(cpu / 100 * ncpu, 3),
                        "ceiling": ncpu, "unit": "cores", "ratio": cpu / 100.0,
                        "evidence": f"{host} CPU at {_pct(cpu / 100)} of its {ncpu} core(s)"})
        rx, tx = _mean(mine, "net_rx_bytes_s"), _mean(mine, "net_tx_bytes_s")
        if rx is None and tx is None:
            continue
        nics = {n: c for n, c in ((hosts_cap.get(host) or {}).get("nics") or {}).items() if n != "lo"}
        counted = capacity.get("counted", {}).get(host)
        if counted is not None:
            nics = {n: c for n, c in nics.items() if n in counted}
        unknown = sorted(n for n, c in nics.items() if c.get("speed_mbit") is None)
        nics = {n: c for n, c in nics.items() if c.get("speed_mbit") is not None}
        busy = max(rx or 0.0, tx or 0.0) > 0
        if unknown and busy:  # a bridge or a link down: the kernel gives no speed
            missing.append(f"{host}: no link speed for {', '.join(unknown)}" +
                           (f" (its NIC use is set against {', '.join(sorted(nics))})" if nics else
                            ": its NIC use is not judged"))
        if not nics:
            continue
        speed = [c["speed_mbit"] for c in nics.values()]
        capped = [c.get("cap_mbit") or c["speed_mbit"] for c in nics.values()]
        for direction, bytes_s, ceil in (("rx", rx, sum(speed)), ("tx", tx, sum(c or 0 for c in capped))):
            if bytes_s is None or not ceil:
                continue
            bits = bytes_s * 8
            why = ", ".join(c["cap"] for c in nics.values() if c.get("cap")) if direction == "tx" else ""
            out.append({"kind": "network", "resource": f"{host} NIC {direction}", "host": host,
                        "use": round(bits / 1e6, 3), "ceiling": ceil, "unit": "Mbit/s", "ratio": bits / (ceil * 1e6),
                        "evidence": f"NIC {direction} of {host} at {_pct(bits / (ceil * 1e6))} of "
                                    f"{_mbit(ceil * 1e6)}" + (f" ({why})" if why else "")})
    out += _disks(by_host, capacity.get("osds") or {}, missing)
    # ---- the client ----
    thread = metrics.get("client_thread_max_pct")
    if thread is not None:
        out.append({"kind": "client", "resource": "fathom-engine's busiest thread", "host": None,
                    "use": round(thread / 100.0, 3), "ceiling": 1.0, "unit": "cores", "ratio": thread / 100.0,
                    "evidence": f"fathom-engine's busiest thread at {_pct(thread / 100)} of one core"})
    else:
        missing.append("the client engine's per-thread CPU (fathom-engine only)")
    out.sort(key=lambda r: -r["ratio"])
    return out, missing


def _disks(by_host: dict[str, list[tuple[dict[str, Any], float]]], osds: dict[str, dict[str, Any]],
           missing: list[str]) -> list[dict[str, Any]]:
    """Each OSD device's busy share of the window (diskstats' time with I/O in flight) on the host that samples it:
    its OSD's host, or for fathom's own cluster (host None: one kernel) the first sampled host that saw it busy.
    Devices shared by OSDs (one file system under a local cluster) are one resource."""
    with_disks = {h: [(s, w) for s, w in mine if "disks" in s] for h, mine in by_host.items()}
    with_disks = {h: m for h, m in with_disks.items() if m}
    shared: dict[tuple[str, str], list[str]] = {}
    for osd, o in sorted(osds.items()):
        if not o.get("devices"):
            missing.append(f"{osd}: no device to judge ({o.get('why')})")
            continue
        for dev in o["devices"]:
            if o.get("host") is not None:
                host = o["host"] if o["host"] in with_disks else None
            else:
                host = next((h for h, m in sorted(with_disks.items()) if any(dev in s["disks"] for s, _ in m)),
                            next(iter(sorted(with_disks)), None))
            if host is None:
                missing.append(f"{osd}'s device {dev}: " + (f"its host {o['host']} is not sampled" if o.get("host")
                                                             else "no sampled host reports devices"))
                continue
            shared.setdefault((host, dev), []).append(osd)
    out = []
    for (host, dev), names in sorted(shared.items()):
        mine = with_disks[host]
        total = sum(w for _, w in mine)
        util = sum((s["disks"].get(dev) or {}).get("util_pct", 0.0) * w for s, w in mine) / total / 100.0
        queue = sum((s["disks"].get(dev) or {}).get("queue", 0.0) * w for s, w in mine) / total
        out.append({"kind": "disk", "resource": f"{host} disk {dev}", "host": host, "use": round(util, 3),
                    "ceiling": 1.0, "unit": "busy share", "ratio": util,
                    "evidence": f"disk {dev} of {', '.join(names)} on {host} busy {_pct(util)} of the time "
                                f"({queue:.3g} requests in flight on average)"})
    return out


def in_flight(params: dict[str, Any], metrics: dict[str, Any]) -> tuple[int, str]:
    """Ops a closed-loop point keeps in flight, and how that comes (iodepth x jobs x engines)."""
    depth, jobs = int(params.get("iodepth") or 1), int(params.get("numjobs") or 1)
    engines = int(metrics.get("engines") or 1)
    parts = [f"iodepth {depth}"] + ([f"{jobs} jobs"] if jobs > 1 else []) + \
        ([f"{engines} engines"] if engines > 1 else [])
    return depth * jobs * engines, " x ".join(parts)


def throttles(perf: dict[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Each daemon's Ceph throttles over the point, from its perf counter deltas (fathom.results.usage.perf_deltas:
    `throttle-NAME.get` a count, `throttle-NAME.wait` {count, sum}, `get_or_fail_fail` a count): a get that
    finds the throttle full waits, a try (get_or_fail) is refused and tried again later, so waits and refusals
    per get say how often the throttle held an op back."""
    out: list[dict[str, Any]] = []
    for daemon, counters in sorted((perf or {}).items()):
        per: dict[str, dict[str, Any]] = {}
        for key, v in counters.items():
            sec, _, name = key.partition(".")
            if sec.startswith("throttle-"):
                per.setdefault(sec[len("throttle-"):], {})[name] = v
        for name, c in sorted(per.items()):
            gets = c.get("get")
            if not isinstance(gets, (int, float)) or gets <= 0:
                continue
            wait = c.get("wait") if isinstance(c.get("wait"), dict) else {}
            waits = int(wait.get("count") or 0)
            refused = int(c.get("get_or_fail_fail") or 0)  # the messengers' tries: retried after a pause
            ratio = min(1.0, (waits + refused) / gets)
            said = []
            if waits or not refused:
                mean = f", {1e3 * wait['avg']:.3g} ms each on average" if waits and wait.get("avg") is not None \
                    else ""
                said.append(f"{_pct(min(1.0, waits / gets))} of {int(gets):,} gets waited{mean}")
            if refused:
                said.append(f"{refused:,} tries refused for {int(gets):,} gets ({refused / gets:.2g} per get)")
            out.append({"kind": "throttle", "resource": f"{daemon} throttle {name}", "host": None,
                        "use": waits + refused, "ceiling": int(gets), "unit": "gets", "ratio": ratio,
                        "evidence": f"{daemon}'s throttle {name}: " + "; ".join(said)})
    return out


def flight(params: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any] | None:
    """A closed-loop point's ops in flight: asked for (iodepth x jobs x engines) and measured by Little's law
    (ops/s x mean latency over the measured phase), or None when the point has no rate or latency."""
    iops, clat = metrics.get("iops"), metrics.get("clat_ms")
    if not iops or clat is None or params.get("rate") or metrics.get("offered_rate_ops_s"):
        return None
    n, how = in_flight(params, metrics)
    return {"asked": n, "how": how, "measured": round(iops * clat / 1e3, 2),
            "law": f"{iops:,.0f} ops/s x {clat:.3g} ms"}


def capacity_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A point's ceilings from its events: its `capacity` event, with the NICs each SSH-sampled host counts (the
    `sources` event: the interfaces at the top of their stack) so a bond and its members are not both summed."""
    cap = dict(next((e.get("data") or {} for e in events if e.get("kind") == "capacity"), {}))
    src = next((e["data"] for e in events if e.get("kind") == "sources"
                and isinstance((e.get("data") or {}).get("hosts"), dict)), None)  # Prometheus's: a list, no NICs
    if src:
        cap["counted"] = {h: c["nics"]["counted"] for h, c in src["hosts"].items()
                          if isinstance(c, dict) and (c.get("nics") or {}).get("counted")}
    return cap


def judge(samples: list[dict[str, Any]], window: dict[str, float] | None, events: list[dict[str, Any]],
          metrics: dict[str, Any], params: dict[str, Any],
          perf: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The verdict: {bound (BOUNDS), summary (one line), at_limit, near, resources (top 6), in_flight, missing}.
    perf: the point's perf counter deltas per daemon (their throttles)."""
    res, missing = resources(samples, window, capacity_of(events), metrics)
    res = sorted(res + throttles(perf), key=lambda r: -r["ratio"])
    if not perf:
        missing.append("Ceph's throttles (no perf counters for this point)")
    fl = flight(params, metrics)
    held = fl is not None and fl["measured"] < HELD_BACK * fl["asked"]
    at = [r for r in res if r["ratio"] >= AT_LIMIT]
    near = [r for r in res if NEAR <= r["ratio"] < AT_LIMIT]
    if params.get("interface") == "null":
        # no storage at all: what the point measures is the client, whatever share of a core it got on a shared host
        thread = next((r for r in res if r["kind"] == "client"), None)
        bound, at = "client", [thread] if thread else []
        summary = "the null target: the client alone" + (f" ({thread['evidence']})" if thread else "")
    elif at:
        bound = at[0]["kind"]
        summary = "; ".join(r["evidence"] for r in at[:2])
        if len(at) == 1 and near:
            summary += "; near its limit: " + near[0]["evidence"]
    elif held and fl is not None:
        bound = "client"
        summary = (f"the client kept {fl['measured']:g} of the {fl['asked']} op(s) in flight it asked for "
                   f"({fl['how']}; Little's law: {fl['law']}): its issue path held ops back")
    elif params.get("rate") or metrics.get("offered_rate_ops_s"):
        bound = "rate"
        summary = "nothing saturated: bound by the offered rate (open loop)"
    elif res:
        n, how = in_flight(params, metrics)
        bound = "latency"
        summary = f"nothing saturated: latency-bound at {n} op(s) in flight ({how})"
        if fl is not None:
            summary += f", {fl['measured']:g} measured ({fl['law']})"
    else:
        bound, summary = "unknown", "no resource measured"
    if res and (bound in ("rate", "latency") or (held and not at)):
        summary += "; busiest: " + res[0]["evidence"]
    return {"bound": bound, "summary": summary, "at_limit": [r["resource"] for r in at],
            "near": [r["resource"] for r in near],
            "resources": [{**r, "ratio": round(r["ratio"], 3)} for r in res[:6]], "in_flight": fl,
            "missing": missing}
