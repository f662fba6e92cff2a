"""One server host: its SSH session, its fathom-sampler stream and clock, lost and reached again."""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any


from fathom.cluster.journal import SAMPLER_KIND, Entry, Journal
from fathom.hosts.ssh import LOOP, HostError, SshHost
from fathom.hosts.clients import ClientHost, ClientsSpec
from fathom.binaries import SAMPLER
from fathom.servers.stream import SamplerStream, best_offset


def _seconds(text: str, host: str) -> float:
    """Epoch seconds as a host printed them (a locale may write a decimal comma)."""
    try:
        return float(text.strip().replace(",", "."))
    except ValueError:
        raise HostError(f"server host {host}: a clock reading printed {text.strip()[:40]!r}, not seconds "
                        "(bash 5 or GNU date is needed there)") from None



def sampler_dir(engine_dir: str, sha: str, run: str | None) -> str:
    """Where a sampler goes on a host: `<engine_dir>/<sha256 prefix>/<run>`, a directory of the run's own (its
    data tag, the same in every attempt), so that one run's end or `fathom cluster restore` removes its own
    sampler and never another run's on a shared host; without a run (a sampler kept, --keep-sampler) the one
    every run that keeps it shares, which no run removes."""
    d = f"{engine_dir.rstrip('/')}/{sha[:16]}"
    if not run:
        return d
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in run).lstrip(".") or "run"
    return f"{d}/{safe}"


@dataclass
class Placed:
    """The sampler file fathom put on a host (it was not there before): removed at the end of the run."""

    path: str
    dirs: list[str]  # the directories its upload made, outermost first (removed when empty, innermost first)


def remove_command(path: str, dirs: list[str]) -> str:
    """The shell command that removes a sampler fathom put on a host, and the directories made for it if empty."""
    return "; ".join([f"rm -f {shlex.quote(path)}", *(f"rmdir {shlex.quote(d)} 2>/dev/null" for d in reversed(dirs)),
                      "true"])


def remove_samplers(journal: Journal, say: Any) -> tuple[list[str], list[str]]:
    """The samplers a killed run's journal says fathom put on server hosts, removed over SSH with what the entry
    names (host, port, user, key file and known_hosts paths; never a key): (removed, failed with why). An
    entry removed is marked undone; one that failed stays for a later try."""
    async def one(e: Entry) -> str | None:
        d = e.data
        spec = ClientHost(host=d["host"], port=d.get("port") or 22, user=d.get("user"), key_file=d.get("key_file"))
        ssh = SshHost(spec, ClientsSpec(hosts=[spec], known_hosts=d.get("known_hosts")), role="server host")
        try:
            await ssh.connect()
            rc, _, err = await ssh.run(remove_command(d["path"], list(d.get("dirs") or [])))
        except HostError as exc:
            return exc.message
        finally:
            await ssh.aclose()
        return None if rc == 0 else f"`rm -f {d['path']}` there failed (exit {rc}): {err.strip()[-200:]}"

    removed, failed = [], []
    for e in journal.pending(SAMPLER_KIND):
        why = LOOP.run(one(e))
        if why is None:
            journal.drop(SAMPLER_KIND, e.what)
            removed.append(e.what)
            say(f"removed the fathom-sampler fathom put at {e.what}")
        else:
            failed.append(f"{e.what}: {why}")
            say(f"could not remove the fathom-sampler at {e.what}: {why}")
    return removed, failed


class ServerHost(SamplerStream):
    """One cluster host: its SSH connection, its sampler's stream, its clock offset."""

    error = HostError

    def __init__(self, spec: ClientHost, opts: ClientsSpec, interval_s: float, run: str | None = None):
        super().__init__(spec.name, spec.host, interval_s)
        self.spec, self.opts = spec, opts
        self.run = run  # the run whose own directory the sampler goes in (sampler_dir); None: the shared one
        self.ssh = SshHost(spec, opts, role="server host")
        self.dir: str | None = None  # the sampler's directory there
        self.path: str | None = None  # the sampler there
        self.had_file = False  # a file was at that path before fathom looked: never fathom's to remove
        self.current = False  # ... and it was this sampler (same hash): nothing to upload
        self.missing_dirs: list[str] = []  # the path's directories that were not there
        self.placed: Placed | None = None  # the sampler file fathom put there, to remove at the end
        self.capacity: dict[str, Any] | None = None  # its cores and NIC ceilings (fathom.servers.capacity)

    async def clock(self) -> None:
        """The host's clock offset: CLOCK_PINGS replies, the one with the shortest round trip. One shell reads
        a line and answers its time (bash's $EPOCHREALTIME: no process started between the two, so the round
        trip is the network's and the bound tight); without bash, `date` per reply (a looser bound)."""
        proc = await self.ssh.conn.create_process(
            "exec bash -c 'while read -r _; do echo \"${EPOCHREALTIME:-$(date +%s.%N)}\"; done' 2>/dev/null",
            encoding="utf-8", errors="replace")

        async def shell() -> float | None:
            proc.stdin.write("t\n")
            line = await asyncio.wait_for(proc.stdout.readline(), self.ssh.opts.connect_timeout_s)
            return _seconds(line, self.name) if line.strip() else None  # nothing: no bash there

        async def date() -> float:
            rc, out, _ = await self.ssh.run("date +%s.%N")
            if rc != 0:
                raise HostError(f"server host {self.name}: `date` failed there (exit {rc})")
            return _seconds(out, self.name)

        try:
            best = await best_offset(shell)
        except asyncio.TimeoutError:
            raise HostError(f"server host {self.name}: no answer to a clock reading within "
                            f"{self.ssh.opts.connect_timeout_s:g} s") from None
        finally:
            proc.close()
        best = best or await best_offset(date)
        assert best is not None
        self.offset_s, self.rtt_s = best

    async def look(self, sha: str) -> None:
        """Connect; where the sampler goes, whether a file is there already (and is this sampler), and which of
        its directories are missing (the upload makes them: fathom's to remove)."""
        await self.ssh.connect()
        if self.ssh.spec.engine:  # the host's own sampler, used as it is
            self.path, self.had_file, self.current = self.ssh.spec.engine, True, True
            return
        d = self.dir = sampler_dir(self.ssh.spec.engine_dir, sha, self.run)
        self.path = f"{d}/{SAMPLER}"
        dirs = [str(x) for x in reversed(PurePosixPath(d).parents) if str(x) not in (".", "/")] + [d]
        each = ' '.join(map(shlex.quote, dirs))
        _, out, _ = await self.ssh.run(f"sha256sum {shlex.quote(self.path)} 2>/dev/null; "
                                       f"for d in {each}; do [ -d \"$d\" ] || echo \"missing $d\"; done")
        lines = out.splitlines()
        self.missing_dirs = [ln[len("missing "):] for ln in lines if ln.startswith("missing ")]
        sums = [ln.split()[0] for ln in lines if ln.strip() and not ln.startswith("missing ")]
        self.had_file, self.current = bool(sums), sums[:1] == [sha]

    async def ready(self, local: Path, sha: str, version: str | None, max_offset_s: float) -> None:
        """After look(): the sampler uploaded unless it is there, the clock measured, sampling started."""
        if not self.current:
            await self.ssh.install(local, sha, SAMPLER, self.dir)
        assert self.path is not None
        await self.clock()
        if abs(self.offset_s) > max_offset_s:
            raise HostError(f"server host {self.name}: its clock is {self.offset_s:+.3f} s from this host's "
                            f"(measured over SSH, +-{(self.rtt_s or 0) / 2:.3f} s): too far apart to place its "
                            "samples on the point's timeline",
                            hint="synchronise the clocks (chrony or NTP on both), or raise "
                                 f"servers.max_clock_offset_s above {abs(self.offset_s):.1f}")
        await self.start(self.path, version)

    def fresh(self) -> None:
        """Forget a lost connection and its sampler (on the loop's thread), to reach the host again."""
        self.forget()
        self.ssh.close()
        self.ssh = SshHost(self.spec, self.opts, role="server host")

    async def start(self, path: str, version: str | None) -> None:
        """Start the sampler there; HostError unless its header is the record format this fathom reads, from
        the version of the sampler fathom would upload (`version`)."""
        cmd = f"exec {shlex.quote(path)} --interval {self.interval_s:g} --threads-of crimson-osd"
        proc = await self.ssh.conn.create_process(cmd, encoding="utf-8", errors="replace")
        await self.follow(proc, path, version, hint="it needs a Linux /proc and glibc 2.34 or newer there",
                          fix="leave out the host's `engine:` setting, so fathom uploads its own sampler")

    async def stderr(self, proc: Any) -> str:
        try:
            return str(await asyncio.wait_for(proc.stderr.read(), 1))[-300:]
        except (asyncio.TimeoutError, OSError):
            return ""

    def ended(self) -> str:
        return self.ssh.lost or super().ended()

    async def close(self, remove: bool) -> str | None:
        """Stop the sampler; with `remove`, delete the sampler file fathom put there (a lost host is reached
        again for it). None when nothing was to remove or it was removed, else why it is still there."""
        self._closing = True
        if self.pid is not None and self.ssh.conn is not None and not self.lost:
            try:
                await self.ssh.kill(int(self.pid))
            except HostError:
                pass
        await self.stop_reading()
        left = None
        if remove and self.placed is not None:
            left = await self._remove(self.placed)
        await self.ssh.aclose()
        return left

    async def _remove(self, placed: Placed) -> str | None:
        try:
            if self.lost or self.ssh.conn is None:
                self.ssh.close()
                self.ssh = SshHost(self.spec, self.opts, role="server host")
                await self.ssh.connect()
            rc, _, err = await self.ssh.run(remove_command(placed.path, placed.dirs))
        except HostError as exc:
            return exc.message
        return None if rc == 0 else f"`rm -f {placed.path}` there failed (exit {rc}): {err.strip()[-200:]}"

