"""Root file systems of other Ceph releases, built once per machine and cached (`fathom cluster rootfs`).

A root holds one Debian suite with ceph-mon, ceph-osd, ceph-mgr, ceph-mds, radosgw, ceph-common and ceph-fuse: a
local cluster runs its daemons from it (`fathom cluster up --ceph ROOT`, fathom.cluster.cephsrc), and its
programs and libraries are a client (fathom.cluster.client). Nothing on this host is installed or changed:
mmdebstrap comes from `apt-get download` and `dpkg-deb -x` into the cache, and it runs in a private mount
namespace, so the mounts it makes in the new root die with it even if it is killed.

Layout of $XDG_CACHE_HOME/fathom/ceph (default ~/.cache/fathom/ceph):
  tools/x/                  mmdebstrap, unpacked from its .deb
  RELEASE/root/             the root file system (read-only in use: a cluster runs it through an overlay)
  RELEASE/rootfs.json       what it is: suite, mirror, Ceph version, package versions, patches, size, build time
  RELEASE/build.log         mmdebstrap's output
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fathom.errors import ClusterError, UsageError

MIRROR = "http://deb.debian.org/debian"
# the daemons, the client tools, and ceph-fuse (a cluster whose client is this root mounts CephFS with it)
PACKAGES = ("ceph-mon", "ceph-osd", "ceph-mgr", "ceph-mds", "radosgw", "ceph-common", "ceph-fuse")
INFO = "rootfs.json"


@dataclass(frozen=True)
class Release:
    name: str  # Ceph's release name
    suite: str  # the Debian suite that ships it
    major: int  # the Ceph major version it is expected to hold
    # apt's Valid-Until check of the suite's Release file: off for sid, whose Release is valid for a week only, so
    # a mirror (or a clock) a little off stops the build; signatures are still checked. Recorded in rootfs.json.
    check_valid_until: bool = True


RELEASES = {
    "reef": Release("reef", "trixie", 18),  # Debian 13
    "tentacle": Release("tentacle", "sid", 20, check_valid_until=False),  # unstable: moves daily; rootfs.json
    # pins what was fetched
}


class NetworkUnreachable(ClusterError):
    """The Debian mirror does not answer: a root cannot be built here now."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fathom" / "ceph"


def root_path(release: str) -> Path:
    return cache_dir() / release / "root"


def info(release: str) -> dict[str, Any] | None:
    """The cached root's record, or None if there is no complete root for this release."""
    d = cache_dir() / release
    try:
        rec = json.loads((d / INFO).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return rec if (d / "root" / "usr/bin/ceph-mon").is_file() else None


def release(name: str) -> Release:
    if name not in RELEASES:
        raise UsageError(f"unknown Ceph release {name!r}", hint=f"one of: {', '.join(RELEASES)}")
    return RELEASES[name]


def build(name: str, rebuild: bool = False, mirror: str = MIRROR,
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The cached root for `name`, built first if there is none (or rebuild). Returns its record."""
    rel = release(name)
    say = progress or (lambda m: None)
    d = cache_dir() / rel.name
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as lock:  # one builder at a time; a second waits and then finds it built
        fcntl.flock(lock, fcntl.LOCK_EX)
        rec = info(rel.name)
        missing = [p for p in PACKAGES if p not in (rec or {}).get("packages", {})]
        if rec and not rebuild and not missing:
            return rec
        if rec and missing and not rebuild:  # a root of an older fathom: the same release with the packages added
            say(f"the cached {rel.name} root lacks {', '.join(missing)}: building it again")
        check_mirror(mirror, rel.suite)
        mm = _mmdebstrap(cache_dir() / "tools", say)
        tmp = d / "root.new"
        _remove_root(tmp)
        say(f"building a Debian {rel.suite} root with Ceph {rel.name} in {d} (about 1 min, ~130 MiB download)")
        t0 = time.monotonic()
        _run_mmdebstrap(mm, rel, tmp, mirror, d / "build.log")
        took = time.monotonic() - t0
        patches = patch_root(tmp)
        pkgs = package_versions(tmp)
        ceph_version = pkgs.get("ceph-common") or pkgs.get("ceph-base")
        got = int(ceph_version.split(":")[-1].split(".")[0]) if ceph_version else None
        if got != rel.major:
            raise ClusterError(f"the {rel.suite} root holds Ceph {ceph_version}, not Ceph {rel.major} ({rel.name})",
                               hint=f"the build is kept in {tmp} to look at; {rel.suite} may have moved on")
        rec = {"release": rel.name, "suite": rel.suite, "mirror": mirror, "ceph_version": ceph_version,
               "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "build_s": round(took, 1),
               "size_bytes": du_bytes(tmp), "packages": pkgs, "patches": patches,
               "mmdebstrap": _tool_version(mm), "release_valid_until_checked": rel.check_valid_until}
        _remove_root(d / "root")
        tmp.rename(d / "root")
        (d / INFO).write_text(json.dumps(rec, indent=2))
        say(f"root ready: {d / 'root'}, Ceph {ceph_version}, {rec['size_bytes'] / 2**20:.0f} MiB, "
            f"built in {took:.0f} s")
        return rec


def check_mirror(mirror: str, suite: str, timeout: float = 10.0) -> None:
    url = f"{mirror}/dists/{suite}/Release"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return
    except (urllib.error.URLError, OSError) as exc:
        raise NetworkUnreachable(f"cannot reach the Debian mirror ({url}): {getattr(exc, 'reason', exc)}",
                                 hint="building a root needs the network once; pass --mirror for a local "
                                      "mirror") from None


def _mmdebstrap(tools: Path, say: Callable[[str], None]) -> Path:
    """mmdebstrap unpacked from this host's apt's .deb (nothing installed); downloaded once."""
    exe = tools / "x" / "usr/bin/mmdebstrap"
    if exe.is_file():
        return exe
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise ClusterError("building a root needs apt-get and dpkg-deb (a Debian or Ubuntu host)")
    say("fetching mmdebstrap (apt-get download; nothing is installed)")
    dl = tools / "debs"
    shutil.rmtree(dl, ignore_errors=True)
    dl.mkdir(parents=True)
    p = subprocess.run(["apt-get", "download", "mmdebstrap"], cwd=dl, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise ClusterError(f"`apt-get download mmdebstrap` failed: {p.stderr.strip()[-400:]}",
                           hint="apt needs its package lists: `apt-get update` (as root) fetches them")
    x = tools / "x.new"
    shutil.rmtree(x, ignore_errors=True)
    for deb in dl.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(x)], check=True, capture_output=True, timeout=120)
    shutil.rmtree(tools / "x", ignore_errors=True)
    x.rename(tools / "x")
    return exe


def _run_mmdebstrap(mm: Path, rel: Release, target: Path, mirror: str, log: Path) -> None:
    # its own mount namespace: the proc, sys and dev mounts mmdebstrap makes in the target die with it
    argv = ["unshare", "--mount", "--propagation", "private", "--", "nice", "-n", "19", "ionice", "-c3",
            str(mm), "--variant=apt", "--mode=root", "--aptopt=APT::Install-Recommends \"false\"",
            *([] if rel.check_valid_until else ["--aptopt=Acquire::Check-Valid-Until \"false\""]),
            f"--include={','.join(PACKAGES)}", rel.suite, str(target), mirror]
    with open(log, "w") as out:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    if p.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise ClusterError(f"mmdebstrap of {rel.suite} failed (exit {p.returncode}):\n{tail}", hint=f"full log: {log}")


BCRYPT_NOTE = ("usr/share/ceph/mgr/mgr_util.py: `import bcrypt` moved from the top into password_hash(); "
               "bcrypt is a PyO3 module, which refuses mgr sub-interpreters, so the top-level import broke "
               "every module that imports mgr_util (fixed upstream only in later releases)")


def patch_root(root: Path) -> list[str]:
    """Fixes the Debian build needs to run; each is described in the record. Idempotent."""
    done = []
    f = root / "usr/share/ceph/mgr/mgr_util.py"
    try:
        text = f.read_text()
    except OSError:
        return done
    new = move_bcrypt_import(text)
    if new != text:
        f.write_text(new)
        done.append(BCRYPT_NOTE)
    return done


def move_bcrypt_import(text: str) -> str:
    """mgr_util.py with its top-level `import bcrypt` moved into the function that uses it."""
    if not re.search(r"^import bcrypt\s*$", text, re.M):
        return text
    m = re.search(r"^def password_hash\(.*?\).*?:\s*\n", text, re.M | re.S)
    if not m:
        return text
    text = re.sub(r"^import bcrypt\s*\n", "", text, count=1, flags=re.M)
    m = re.search(r"^def password_hash\(.*?\).*?:\s*\n", text, re.M | re.S)
    assert m
    return text[:m.end()] + "    import bcrypt  # here, not at the top: PyO3 refuses mgr sub-interpreters\n" \
        + text[m.end():]


def package_versions(root: Path) -> dict[str, str]:
    p = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f", "${Package}\t${Version}\n"],
                       capture_output=True, text=True, timeout=60)
    return dict(line.split("\t", 1) for line in p.stdout.splitlines() if "\t" in line)


def du_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _tool_version(mm: Path) -> str | None:
    p = subprocess.run([str(mm), "--version"], capture_output=True, text=True, timeout=30)
    return p.stdout.strip() or None


def _remove_root(path: Path) -> None:
    """Remove a (partial) root; refuse if anything is still mounted under it."""
    if not path.exists():
        return
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        if any(line.split()[4].startswith(prefix) for line in f):
            raise ClusterError(f"something is mounted under {path}; fathom will not remove it",
                               hint=f"see `grep {path} /proc/self/mountinfo`")
    shutil.rmtree(path)
