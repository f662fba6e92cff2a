"""A run as it goes: Prometheus metrics and a live page (`--metrics ADDR:PORT`), and `fathom watch`.

buckets.py     fixed log latency buckets from the engines' HDR histograms
state.py       the run's live state (progress, the running point's seconds, finished points, flags, counters)
observer.py    feeds the state from the run's lifecycle (fathom.run.progress observers; a bench's engine records)
exposition.py  the state as Prometheus metrics (prometheus_client collector)
server.py      one HTTP server: /metrics, the page, /state; binds before the run, closes at its end
page.py        the self-contained page
seconds.py     the running point's seconds stored as they come (every suite run), for `fathom watch`
watch.py       the same page from a results store, read-only (`fathom watch`)
"""

from __future__ import annotations

import sys
from typing import Any

from fathom.live.observer import Observer
from fathom.live.state import LiveState


class Session:
    """--metrics ADDR:PORT: the state, its observer and the server, bound now (a bad port fails here)."""

    def __init__(self, addr: str, flag: str = "--metrics"):
        from fathom.live import exposition
        from fathom.live.server import LiveServer

        self.state = LiveState()
        self.observer = Observer(self.state)
        self.server = LiveServer(addr, self.state.snapshot, exposition.Renderer(self.state), flag)
        print(f"  live: {self.server.url} (the page), {self.server.url}metrics (Prometheus)", file=sys.stderr,
              flush=True)

    def close(self, status: str | None = None) -> None:
        if status is not None:
            self.observer.finish(status)
        self.server.close()


def session(addr: str | None) -> Session | None:
    return Session(addr) if addr else None


def attach(prog: Any, store: Any, run_id: int, work: Any, observer: Observer | None) -> None:
    """A suite run's points begin: its running point's seconds go to the store (for `fathom watch`, always), and to
    the --metrics observer when there is one."""
    from fathom.live.seconds import Writer

    prog.observers.append(Writer(store.path, run_id))
    if observer is not None:
        observer.attach(prog, store, run_id, work)


__all__: list[Any] = ["LiveState", "Observer", "Session", "attach", "session"]
