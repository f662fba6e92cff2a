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
import threading
from typing import Any

from fathom.live.observer import Observer
from fathom.live.state import LiveState


LINGER_S = 5.0  # --metrics-linger's default: the final state stays served this long after the run ends


class Session:
    """--metrics ADDR:PORT: the state, its observer and the server, bound now (a bad port fails here). When the
    run ends the server goes on serving its final state for `linger_s` (--metrics-linger), so the scrapes after
    the end see the final status and the last second's figures; a Ctrl-C ends that wait, and a server nobody
    asked anything during the run closes at once (nobody is waiting for the end)."""

    def __init__(self, addr: str, flag: str = "--metrics", linger_s: float = LINGER_S):
        from fathom.live import exposition
        from fathom.live.server import LiveServer

        self.state = LiveState()
        self.observer = Observer(self.state)
        self.linger_s = linger_s
        self.lingering = threading.Event()  # set while the final state is served
        self.stop_lingering = threading.Event()
        self.server = LiveServer(addr, self.state.snapshot, exposition.Renderer(self.state), flag)
        where = " (listening on every address of this host)" if self.server.everywhere else ""
        print(f"  live: {self.server.url} (the page), {self.server.url}metrics (Prometheus){where}",
              file=sys.stderr, flush=True)

    def close(self, status: str | None = None) -> None:
        if status is not None:
            self.observer.finish(status)
        try:
            if self.linger_s > 0 and self.server.serving and self.server.asked:
                print(f"  live: serving the final state {self.linger_s:g} s more at {self.server.url} "
                      f"(--metrics-linger; Ctrl-C ends it)", file=sys.stderr, flush=True)
                self.lingering.set()
                self.stop_lingering.wait(self.linger_s)
        except KeyboardInterrupt:
            pass  # the port is closed at once
        finally:
            self.lingering.clear()
            self.server.close()


def session(addr: str | None, linger_s: float = LINGER_S) -> Session | None:
    return Session(addr, linger_s=linger_s) if addr else None


def attach(prog: Any, store: Any, run_id: int, work: Any, observer: Observer | None) -> None:
    """A suite run's points begin: its running point's seconds go to the store (for `fathom watch`, always), and to
    the --metrics observer when there is one."""
    from fathom.live.seconds import Writer

    prog.observers.append(Writer(store.path, run_id))
    if observer is not None:
        observer.attach(prog, store, run_id, work)


__all__: list[Any] = ["LINGER_S", "LiveState", "Observer", "Session", "attach", "session"]
