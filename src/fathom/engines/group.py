"""One point on many engines: on this host and on client hosts (any transport), started together, merged exactly.

The sequence, for every engine of the point at once:
    spawn     each engine opens its target (connects to Ceph) and reports `ready` (control.wait)
    offsets   each host's clock offset, NTP-style over the engine's own channel: 8 `ping` lines, the
              sample with the shortest round trip (its half is the error bound)
    go        one start time T0 (a little ahead), sent to each engine on its own host's clock
    stream    records flow back live; each grid span (`tick`) is merged as soon as every engine has sent its
              records over it (the merged record is what progress, steady-state and fault companions see)
    end       every engine's summary; the point is the exact merge (fathom.results.merge)

Liveness both ways: heartbeats go to every engine each second and an engine stops itself when they
stop (control.heartbeat_timeout_s). The loop that sends them (fathom.hosts.ssh.LOOP) runs the group's own
code only: the merged records, the per-engine records of each span and the group's events reach the point's
side (companions; the live view, whose lock scrapes of /metrics take) on a thread of their own (`Outbox`),
so a slow or blocked consumer delays what it is handed, never a heartbeat. A host whose transport says it is
gone (SSH keepalives failed), or a remote one that sends nothing for LOST_AFTER_S once running, is declared
lost. Policy `continue` keeps the other hosts running (the point is flagged "client lost" and the lost host's
intervals up to its last line are kept); `fail` stops them and fails the point. Ctrl-C: `stop` on every
control channel, the final summaries read, then `kill` by pid on a new channel for any engine still there,
and a last check by pid that none is left.
The group talks to each host only through its transport (fathom.hosts.transport).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fathom.cluster.client import HOST, Client
from fathom.results import merge
from fathom.engines.records import EngineRun, engine_error, keep
from fathom.hosts.ssh import LOOP, HostError
from fathom.hosts.transport import EngineProcess, Local, Transport
from fathom.errors import FathomError

HEARTBEAT_S = 1.0
HEARTBEAT_TIMEOUT_S = 4.0  # an engine that hears nothing for this long stops itself (exit 6)
LOST_AFTER_S = 5.0  # a running host silent this long is lost
PINGS = 8
PING_TIMEOUT_S = 5.0
READY_GRACE_S = 60.0  # beyond the connection's own bound (2 * timeout_s + 10), waiting for `ready`
DRAIN_S = 15.0  # after a stop, how long to wait for the engines' summaries before killing them


@dataclass
class Instance:
    """One engine process of the point."""

    host: str
    index: int  # instance on that host, from 0
    spec: dict[str, Any]
    transport: Transport | None = None  # how its host is reached; None: this host (the group's Local)
    proc: EngineProcess | None = None
    run: EngineRun = field(default_factory=EngineRun)
    pid: int | None = None
    ready: bool = False
    done: bool = False
    lost: str | None = None
    last_seen: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.host}#{self.index}"

    @property
    def control(self) -> dict[str, Any] | None:
        """The spec's control section: without it the engine reads no control line (a bench's one engine)."""
        return self.spec.get("control")

    @property
    def reachable(self) -> bool:
        """Does a control line still reach it?"""
        return self.control is not None and not self.done and not self.lost and self.proc is not None

    def send(self, line: dict[str, Any]) -> bool:
        if not self.reachable:
            return False
        assert self.proc is not None
        try:
            self.proc.write(json.dumps(line) + "\n")
            return True
        except (OSError, RuntimeError, AttributeError, BrokenPipeError):
            return False


@dataclass
class HostClock:
    offset_s: float  # host clock minus the orchestrator's
    rtt_s: float  # round trip of the sample used (the offset is good to half of it)


class Outbox:
    """What the group hands the point's side (records, events), called in order on a thread of its own; `close`
    returns once everything handed over has been called."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="fathom-group-outbox", daemon=True)
        self._thread.start()

    def put(self, fn: Callable[..., None], *args: Any) -> None:
        self._q.put((fn, args))

    def _loop(self) -> None:
        while (item := self._q.get()) is not None:
            fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - a consumer's failure must not stop what follows
                print(f"  engine group: handing over a record failed: {exc}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()


class Group:
    def __init__(self, instances: list[Instance], binary: str, interval_s: float, on_loss: str,
                 on_interval: Callable[[dict[str, Any]], None], on_event: Callable[[dict[str, Any]], None],
                 client: Client = HOST):
        self.instances = instances
        self.binary = binary
        local = Local(binary, client)  # this host's engines load `client`'s Ceph libraries
        for i in instances:
            i.transport = i.transport or local
        self.interval_s = interval_s
        self.on_loss = on_loss
        self.on_interval = on_interval
        self.on_event = on_event
        self.on_span: Callable[[list[dict[str, Any]]], None] = lambda recs: None  # per-engine records (live view)
        self.on_record: Callable[[Instance, dict[str, Any]], None] | None = None  # each engine's own records
        self.on_spawn: Callable[[Instance], None] = lambda inst: None  # an engine started (its pid is known)
        # engines whose spec waits for `go` start together (barrier, clocks, go); others start as they connect
        self.waits = all((i.control or {}).get("wait") for i in instances)
        beats = [float(t) for i in instances if (t := (i.control or {}).get("heartbeat_timeout_s"))]
        self.heartbeat_s = min([HEARTBEAT_S, *(t / 3 for t in beats)])
        self.clocks: dict[str, HostClock] = {}
        self.start_at: float | None = None
        self.merged: list[dict[str, Any]] = []
        self._pos = [0] * len(instances)  # per engine: its intervals merged so far
        self.lost_hosts: dict[str, str] = {}
        self.stop_reason: str | None = None
        self.failed: str | None = None  # why the point fails (a lost host under `fail`, an engine error)
        self.interrupted = False
        self.left_running: list[str] = []
        self._pongs: dict[int, asyncio.Future] = {}
        self._ping_id = 0
        self._changed = asyncio.Event()
        self._running = False
        # set by run_group: records and events go to the point's side off the loop (None: called at once)
        self.outbox: Outbox | None = None

    def _hand(self, fn: Callable[..., None], *args: Any) -> None:
        """fn(*args) for the point's side: on the outbox's thread when there is one, never on the loop's."""
        if self.outbox is not None:
            self.outbox.put(fn, *args)
        else:
            fn(*args)

    # ---- the whole point -------------------------------------------------------------
    async def run(self, ready_timeout: float) -> None:
        try:
            await asyncio.gather(*(self._spawn(i) for i in self.instances))
            readers = [asyncio.ensure_future(self._read(i)) for i in self.instances if i.proc is not None]
            beat = asyncio.ensure_future(self._heartbeats())
            watch = asyncio.ensure_future(self._watchdog())
            try:
                if self.waits:
                    await self._barrier(ready_timeout)
                else:
                    self._running = True
                if self.stop_reason:  # asked before every engine was there to hear it: tell them all again
                    self.stop_all(self.stop_reason)
                elif not self.failed and self.waits:
                    await self._measure_clocks()
                    self._go()
                await asyncio.gather(*readers)
                self._merge_ready(final=True)
            finally:
                beat.cancel()
                watch.cancel()
        finally:
            for i in self.instances:
                if i.proc is not None:
                    i.proc.release()

    async def _spawn(self, inst: Instance) -> None:
        """Start one engine; a failure to start marks it ended with an error record (the barrier fails the
        point and stops the others), it never raises."""
        try:
            await self._start(inst)
        except Exception as exc:  # noqa: BLE001 - OSError locally, a transport's channel errors remotely
            inst.done = True
            inst.run.errors.append({"type": "error", "kind": "spawn", "fatal": True,
                                    "message": f"cannot start the engine on {inst.host}: {exc or type(exc).__name__}"
                                               + _transport(inst).start_hint})
            self._changed.set()

    async def _start(self, inst: Instance) -> None:
        inst.last_seen = time.monotonic()
        inst.proc = await _transport(inst).start(json.dumps(inst.spec))
        inst.pid = inst.proc.pid
        inst.run.started = time.time()
        if inst.pid is not None:
            self._hand(self.on_spawn, inst)

    async def _read(self, inst: Instance) -> None:
        """Every record of one engine until it exits (or its host is lost), then its exit status."""
        proc = inst.proc
        assert proc is not None
        stderr = asyncio.ensure_future(self._stderr(inst))
        try:
            while True:
                try:
                    line = await proc.readline()
                except Exception as exc:  # the connection went: a transport raises its own errors here
                    self._lose(inst.host, f"reading its records failed: {exc or type(exc).__name__}")
                    break
                if not line:
                    break
                inst.last_seen = time.monotonic()
                self._record(inst, line)
        finally:
            if not _transport(inst).remote or inst.lost is None:  # a lost host's channel has no status
                inst.run.exit_code = await proc.wait()
                _fill_usage(inst.run, getattr(proc, "rusage", None))
            stderr.cancel()
            inst.done = True
            self._changed.set()
            self._merge_ready()

    async def _stderr(self, inst: Instance) -> None:
        try:
            inst.run.stderr = await inst.proc.read_stderr()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - stderr is for messages only
            pass

    def _record(self, inst: Instance, line: str) -> None:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            inst.run.other.append(line.strip())
            return
        if not isinstance(rec, dict):
            return
        kind = rec.get("type")
        if kind == "pong":
            fut = self._pongs.pop(rec.get("id"), None)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result((time.time(), float(rec["ts"])))
            return
        if kind == "interval":
            clock = self.clocks.get(inst.host)
            rec["host"], rec["instance"] = inst.host, inst.index
            rec["ts_host"] = rec["ts"]
            rec["ts"] = float(rec["ts"]) - (clock.offset_s if clock else 0.0)
        if self.on_record is not None:
            self._hand(self.on_record, inst, rec)
        keep(inst.run, rec)
        if kind == "interval":
            self._merge_ready()
            return
        if kind == "start":
            inst.pid = int(rec.get("pid") or 0) or inst.pid
        elif kind == "ready":
            inst.ready = True
            self._changed.set()

    # ---- barrier, clocks, go -----------------------------------------------------------
    async def _barrier(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            waiting = [i for i in self.instances if not i.ready and not i.done and not i.lost]
            ended = [i for i in self.instances if i.done and not i.ready and not i.lost]
            if ended and not self.failed:
                self.failed = self._engine_failed(ended[0])
                self.stop_all(f"another engine failed before the start ({ended[0].label})")
            lost = [i for i in self.instances if i.lost and not i.ready]
            if lost and not self.failed and (self.on_loss == "fail" or len(lost) == len(self.instances)):
                self.failed = f"client lost before the start: {lost[0].host}: {lost[0].lost}"
                self.stop_all(f"client lost: {lost[0].host}")
            if not waiting or self.stop_reason:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                self.failed = (f"engines not ready within {timeout:.0f} s: "
                               f"{', '.join(i.label for i in waiting)}")
                self.stop_all("not ready in time")
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass

    def _engine_failed(self, inst: Instance) -> str:
        return f"engine {inst.label}: {engine_error(inst.run).message}"

    def ended_badly(self) -> str | None:
        """Why the point fails although no host was lost under policy `fail`: an engine of a host not lost that
        exited other than cleanly (its heartbeats stopped, an op error with on_error stop, a stall, a verify
        mismatch, a signal), as one engine alone fails its point; None when every such engine ended cleanly."""
        bad = [i for i in self.instances if not i.lost and i.run.exit_code not in (0, None)]
        if not bad:
            return None
        more = f" (and {len(bad) - 1} more engine(s))" if len(bad) > 1 else ""
        return f"{self._engine_failed(bad[0])}, exit code {bad[0].run.exit_code}{more}"

    async def _measure_clocks(self) -> None:
        firsts: dict[str, Instance] = {}
        for i in self.instances:
            if i.ready and not i.lost and not i.done:
                firsts.setdefault(i.host, i)
        await asyncio.gather(*(self._clock(h, i) for h, i in firsts.items()))

    async def _clock(self, host: str, inst: Instance) -> None:
        best: HostClock | None = None
        loop = asyncio.get_running_loop()
        for _ in range(PINGS):
            self._ping_id += 1
            fut = loop.create_future()
            self._pongs[self._ping_id] = fut
            t0 = time.time()
            if not inst.send({"type": "ping", "id": self._ping_id}):
                return
            try:
                t2, remote = await asyncio.wait_for(fut, PING_TIMEOUT_S)
            except asyncio.TimeoutError:
                continue
            c = HostClock(remote - (t0 + t2) / 2, t2 - t0)
            if best is None or c.rtt_s < best.rtt_s:
                best = c
        if best is not None:
            self.clocks[host] = best

    def _go(self) -> None:
        rtt = max((c.rtt_s for c in self.clocks.values()), default=0.0)
        # far enough ahead that every go line is in before the time: sending is microseconds per engine
        self.start_at = time.time() + max(0.5, 5 * rtt) + 0.002 * len(self.instances)
        for i in self.instances:
            c = self.clocks.get(i.host)
            i.send({"type": "go", "at": self.start_at + (c.offset_s if c else 0.0)})
        self._running = True
        for i in self.instances:
            i.last_seen = time.monotonic() + (self.start_at - time.time())

    # ---- liveness -------------------------------------------------------------------
    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            for i in self.instances:
                i.send({"type": "heartbeat"})

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for i in self.instances:
                if i.done or i.lost:
                    continue
                t = _transport(i)
                if t.lost:
                    self._lose(i.host, t.lost)
                elif self._running and t.remote and now - i.last_seen > LOST_AFTER_S:
                    self._lose(i.host, f"no record for {now - i.last_seen:.1f} s")

    def _lose(self, host: str, why: str) -> None:
        if host in self.lost_hosts:
            return
        self.lost_hosts[host] = why
        for i in self.instances:
            if i.host == host and not i.done:
                i.lost = why
        self._hand(self.on_event, {"kind": "client_lost", "ts": time.time(),
                                   "message": f"client host {host} lost: {why}; its engine stops itself when "
                                              f"heartbeats stop ({HEARTBEAT_TIMEOUT_S:g} s)",
                                   "data": {"host": host, "why": why, "policy": self.on_loss}})
        t = next((_transport(i) for i in self.instances if i.host == host), None)
        if t is not None:
            t.close()  # its channels end: the readers finish, nothing waits on the dead host
        if self.on_loss == "fail" and not self.failed:
            self.failed = f"client lost: {host} ({why})"
            self.stop_all(f"client lost: {host}")
        self._changed.set()
        self._merge_ready()

    # ---- live merge ----------------------------------------------------------------
    def _merge_ready(self, final: bool = False) -> None:
        """Merge every span (merge.next_span: one grid tick, or several where an engine sent one record for
        them) that all engines still running have covered (all that exist at the end)."""
        per = [i.run.intervals for i in self.instances]
        open_ = [not (final or i.done or i.lost) for i in self.instances]
        while (takes := merge.next_span(per, self._pos, open_)) is not None:
            k = len(self.merged)
            recs = []
            for e, n in enumerate(takes):
                if n:
                    recs.append(merge.coalesce(per[e][self._pos[e]:self._pos[e] + n]))
                    self._pos[e] += n
            rec = merge.merge_interval(recs, k, max(float(r["ts"]) for r in recs))
            rec["slowest"] = merge.slowest_host(recs)
            self.merged.append(rec)
            self._hand(self._deliver, k, recs, rec)

    def _deliver(self, k: int, recs: list[dict[str, Any]], rec: dict[str, Any]) -> None:
        try:
            self.on_span(recs)
            self.on_interval(rec)
        except Exception as exc:  # noqa: BLE001 - a companion's failure must not stop the engines
            self.on_event({"kind": "warning", "ts": time.time(),
                           "message": f"a companion failed on interval {k}: {exc}"})

    # ---- stopping ------------------------------------------------------------------
    def stop_all(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        for i in self.instances:
            i.send({"type": "stop", "reason": reason})
        self._changed.set()

    async def interrupt(self, drain_s: float = DRAIN_S) -> None:
        """Ctrl-C: stop lines, the summaries read for up to drain_s, then kill by pid; check by pid."""
        self.interrupted = True
        self.stop_all("interrupted (Ctrl-C or SIGTERM)")
        for i in self.instances:  # no control channel: SIGTERM is its clean stop (it still writes its summary)
            if i.control is None and not i.done and not i.lost and i.pid:
                await _transport(i).kill(i.pid, "TERM")
        await self._wait_done(drain_s)
        await self.kill_left()

    async def _wait_done(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        while any(not i.done and not i.lost for i in self.instances) and time.monotonic() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    async def kill_left(self) -> None:
        """Every engine that has not exited: SIGTERM by pid, SIGKILL after 3 s; then `kill -0` by pid to
        confirm none is left (remote ones over a new channel). Unreachable hosts are named."""
        for sig in ("TERM", "KILL"):
            left = [i for i in self.instances if not i.done and i.pid]
            if not left:
                break
            for i in left:
                try:
                    await _transport(i).kill(i.pid, sig)  # type: ignore[arg-type]
                except (ProcessLookupError, HostError):
                    pass
            await self._wait_done(3.0)
        self.left_running = []
        for i in self.instances:
            if not i.pid:
                continue
            try:
                alive = await _transport(i).alive(i.pid)
            except HostError:
                alive = False
            if alive:
                self.left_running.append(f"{i.label} (pid {i.pid})")


def _fill_usage(run: EngineRun, ru: Any) -> None:
    """The process's own CPU and peak memory, from wait4 where its transport reaped it (this host); elsewhere
    the engine's summary carries its own."""
    run.wall_s = time.time() - run.started if run.started else 0.0
    if ru is not None:
        run.user_s, run.sys_s, run.max_rss_kib = ru.ru_utime, ru.ru_stime, ru.ru_maxrss


def _transport(inst: Instance) -> Transport:
    assert inst.transport is not None  # the group gives every instance one
    return inst.transport


class GroupHandle:
    """The running group as companions see it (Live.attach): stop() from any thread."""

    def __init__(self, group: Group):
        self.group = group

    def stop(self, reason: str) -> bool:
        LOOP.call(self.group.stop_all, reason)
        return True


def run_group(group: Group, ready_timeout: float, timeout: float | None, drain_s: float = DRAIN_S) -> None:
    """Run the group to its end from the calling (main) thread; Ctrl-C there stops every engine
    (Group.interrupt) before the KeyboardInterrupt goes on. Every record and event the group handed over has
    reached the point's side when it returns (or raises)."""
    group.outbox = outbox = Outbox()
    try:
        _run_group(group, ready_timeout, timeout, drain_s)
    finally:
        outbox.close()
        group.outbox = None


def _run_group(group: Group, ready_timeout: float, timeout: float | None, drain_s: float) -> None:
    fut = LOOP.submit(group.run(ready_timeout))
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                fut.result(0.25)
                return
            except concurrent.futures.TimeoutError:
                if deadline is not None and time.monotonic() > deadline:
                    LOOP.run(group.interrupt(5.0))
                    fut.result(30)
                    raise FathomError(f"the point's engines did not finish within {timeout:.0f} s; "
                                      "stopped them") from None
    except KeyboardInterrupt:
        try:
            LOOP.run(group.interrupt(drain_s))
            fut.result(30)
        except (KeyboardInterrupt, concurrent.futures.TimeoutError):
            pass  # a second Ctrl-C: what was read so far is kept
        raise

