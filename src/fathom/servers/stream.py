"""One fathom-sampler's stream, whatever carries it (an SSH channel, a pod's exec websocket): its header
checked, its samples moved onto this host's clock, its loss noticed; and the clock offset those need."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from fathom.servers import hostsample
from fathom.servers.inventory import ClusterDaemon
from fathom.errors import FathomError
from fathom.servers.attribution import match_host
from fathom.binaries import SAMPLER

CLOCK_PINGS = 5


async def best_offset(ask: Callable[[], Awaitable[float | None]], pings: int = CLOCK_PINGS,
                      ) -> tuple[float, float] | None:
    """(remote clock minus this one's, round trip) from the reply with the shortest round trip among `pings`
    readings (`ask`: one reading of the remote clock, epoch seconds; None when it has no answer); good to half
    that round trip. None when no reading came."""
    best: tuple[float, float] | None = None
    for _ in range(pings):
        t0 = time.time()
        remote = await ask()
        t1 = time.time()
        if remote is None:
            break
        if best is None or t1 - t0 < best[1]:
            best = (remote - (t0 + t1) / 2, t1 - t0)
    return best


class SamplerStream:
    """A sampled host's fathom-sampler stream (filled by a subclass that starts the sampler somewhere):
    the header, the samples on this host's clock (ts; ts_host: the host's own), and whether it was lost."""

    error: ClassVar[type[FathomError]] = FathomError  # what a failure to start raises (the transport's error)
    keep_net = True  # the samples' NIC counters are the host's (not those of a pod's own network namespace)

    def __init__(self, name: str, address: str, interval_s: float):
        self.name, self.address, self.interval_s = name, address, interval_s
        self.header: dict[str, Any] | None = None
        self.samples: list[dict[str, Any]] = []
        self.offset_s = 0.0  # host clock minus this one's
        self.rtt_s: float | None = None
        self.lost: str | None = None
        self.lost_at: float | None = None
        self.proc: Any = None
        self.pid: int | None = None
        self.errors: list[str] = []
        self.reconnect_error: str | None = None  # why the last try to reach it again failed
        self.announced = False  # the console was told of its loss
        self._reader: asyncio.Task | None = None
        self._header = asyncio.Event()
        self._closing = False

    @property
    def hostname(self) -> str:
        return str((self.header or {}).get("host") or self.name)

    def metadata_host(self, placed: dict[str, list[ClusterDaemon]]) -> str | None:
        """The cluster metadata's name of this host (None: it holds none of the cluster's daemons)."""
        return match_host(placed, self.hostname, self.address)

    def forget(self) -> None:
        """Forget the stream (on the loop's thread), to start the sampler anew: the old stream's lines and end
        are ignored from now on, and its samples go (a new sampler starts its counters anew)."""
        self.proc = None
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        self.samples, self.pid, self._header = [], None, asyncio.Event()

    async def follow(self, proc: Any, what: str, version: str | None, hint: str, fix: str) -> None:
        """Read `proc`'s stdout (the sampler `what` started); the error class unless a header of the record
        format this fathom reads, from the sampler of `version`, comes in time (hint: what the host needs; fix:
        how to get this fathom's sampler used)."""
        self.proc = proc
        self._reader = asyncio.ensure_future(self._read(proc))
        wait = 10 + 2 * self.interval_s
        try:
            await asyncio.wait_for(self._header.wait(), wait)
        except asyncio.TimeoutError:
            err = await self.stderr(proc)
            raise self.error(f"server host {self.name}: {SAMPLER} sent no header within {wait:g} s"
                             f"{': ' + err.strip() if err.strip() else ''}", hint=hint) from None
        try:
            hostsample.check_header(self.header, version)
        except hostsample.HostSampleError as exc:
            raise self.error(f"server host {self.name}: {what}: {exc}", hint=fix) from None

    async def stderr(self, proc: Any) -> str:
        """What the sampler said on stderr, when it said it at once (for an error message)."""
        return ""

    def ended(self) -> str:
        """Why the stream ended, when fathom did not end it."""
        return "its sampler's stream ended"

    async def _read(self, proc: Any) -> None:
        """One sampler's lines, until its stream ends (the host lost, unless fathom closes it); a stream fathom
        has since replaced (forget) is no longer read."""
        try:
            async for line in proc.stdout:
                if proc is not self.proc:
                    return
                self._line(line)
        except Exception as exc:  # noqa: BLE001 (a broken channel is a lost host, whatever the transport raised)
            if proc is self.proc:
                self._lose(f"its sampler's stream broke: {exc or type(exc).__name__}")
            return
        if proc is self.proc:
            self._lose(self.ended())

    def _line(self, line: str | bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return  # a line cut by a lost connection
        kind = rec.get("type")
        if kind == "sample" and self.header is not None:
            rec["ts_host"] = rec["ts"]
            rec["ts"] = rec["ts"] - self.offset_s
            if not self.keep_net:
                rec.pop("net", None)
            self.samples.append(rec)
        elif kind == "sample_start":
            self.header = rec
            self.pid = rec.get("pid")
            self._header.set()
        elif kind == "error":
            self.errors.append(str(rec.get("message")))

    def _lose(self, why: str) -> None:
        if self.lost is None and not self._closing:
            self.lost = why
            self.lost_at = self.samples[-1]["ts"] if self.samples else time.time()

    async def wait_past(self, ts: float, timeout: float) -> bool:
        """Until a sample at or after ts (this host's clock) has arrived; False when lost or late."""
        deadline = time.monotonic() + timeout
        while not (self.samples and self.samples[-1]["ts"] >= ts):
            if self.lost or time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def trim(self, before: float) -> None:
        """Drop samples older than `before`, keeping one before it (the baseline of the next rate)."""
        i = next((k for k, s in enumerate(self.samples) if s["ts"] >= before), len(self.samples))
        if i > 1:
            del self.samples[: i - 1]

    async def stop_reading(self) -> None:
        """After the sampler was told to stop: its stream read to its end (3 s at most)."""
        self._closing = True
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 3)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
