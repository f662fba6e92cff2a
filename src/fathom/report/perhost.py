"""Points run from several client hosts: one table per point of what each host did.

The point's own row (curves, summary) is the exact merge of every engine; this
table shows the parts: throughput, p99 and client CPU per host, the host's clock
offset, and whether it was lost or much slower than the others (a slow client
host caps the point, and a report that only showed the merge would hide it).
"""

from __future__ import annotations


from fathom.analysis.data import RunData, throughput_for
from fathom.report.doc import Table, fmt, fmt_tp


def tables(runs: list[RunData], wl: str) -> list[Table]:
    out = []
    for r in runs:
        tp = throughput_for(r.curve(wl))
        for p in r.curve(wl):
            hosts = p.clients.get("hosts") if p.clients else None
            if not hosts:
                continue
            clocks = p.clients.get("clocks") or {}
            rows = []
            for h in hosts:
                c = clocks.get(h["host"]) or {}
                status = "lost" if h.get("lost") else ("much slower" if h.get("slow") else "ok")
                value = h["iops"] if tp.unit == "IOPS" else h["mib_s"]
                rows.append([h["host"], str(h["engines"]), fmt_tp(value, tp), fmt(h.get("p99_ms")),
                             fmt(h.get("client_cpu_pct")),
                             f"{c['offset_ms']:+.3f} ± {c['rtt_ms'] / 2:.3f}" if c else "n/a", status])
            skew = p.clients.get("start_skew_ms")
            notes = [f"Start skew {skew:.3f} ms: how far apart the engines' measured phases began (host clock "
                     "offsets removed)." if skew is not None else "Start skew: not measured.",
                     "The point's own figures are the exact merge of every engine (histograms added). 'much "
                     "slower': under half the median host's throughput per engine."]
            lost = p.clients.get("clients_lost") or {}
            if lost:
                notes.append("Lost: " + "; ".join(f"{h}: {why}" for h, why in lost.items())
                             + " (its data up to the loss is kept).")
            out.append(Table(f"{wl} {p.label}: {r.name}: client hosts",
                             ["host", "engines", f"throughput ({tp.unit})", "p99 (ms)",
                              "client CPU (% of one core)", "clock offset (ms)", "status"],
                             rows, ["l", "r", "r", "r", "r", "r", "l"], notes))
    return out
