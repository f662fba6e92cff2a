"""The Ceph client fathom runs: every Ceph program it calls (ceph, rados, rbd, radosgw-admin, ceph-conf,
ceph-authtool) and the Ceph libraries fathom-engine loads (librados, librbd, libcephfs) come from one place.

- host:   this host's Ceph (the programs on PATH, the libraries the loader finds): the default.
- rootfs: a root file system with its own Ceph (`fathom cluster rootfs RELEASE` builds one; or any DIR holding
          usr/bin/ceph). Its programs run through the root's own dynamic loader with the root's library
          directories, so its newer C library and Ceph libraries are used without chroot, mounts or root
          rights; paths (confs, keyrings, sockets) mean what they mean on this host. The ceph CLI runs on the
          root's Python.
- build:  a Ceph build directory as vstart.sh uses it: DIR/bin's programs, DIR/lib's libraries.

fathom-engine links librados and librbd by soname and loads libcephfs by soname, so the same binary runs on
any of them; its start record names the files it loaded, and a spec naming a library directory is refused by
the engine when what it loaded is not from there (fathom.engines).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.cluster import cephsrc
from fathom.cluster import keys
from fathom.errors import ClusterError, UsageError

TOOLS = ("ceph", "rados", "rbd", "radosgw-admin", "ceph-conf", "ceph-authtool")
# the dynamic loader of this architecture, and the library directories of a Debian root (multiarch)
_ARCH = {"x86_64": ("lib64/ld-linux-x86-64.so.2", "x86_64-linux-gnu"),
         "aarch64": ("lib/ld-linux-aarch64.so.1", "aarch64-linux-gnu")}
HOST_KIND, ROOTFS_KIND, BUILD_KIND = "host", "rootfs", "build"
GATEWAYS = ("ceph-fuse",)  # clients a local cluster runs beside its daemons: from the cluster's client
# ... and those from this host's Ceph only (Debian sid's rbd-fuse 20.2.4 crashes in fuse_opt_parse before mounting;
# nfs-ganesha-ceph is not in a root): refused where this host's Ceph cannot read the cluster's keys
HOST_ONLY = ("rbd-fuse", "ganesha.nfsd")


@dataclass(frozen=True)
class Client:
    kind: str = HOST_KIND
    dir: str | None = None
    release: str | None = None  # the release name it was asked by (reef, tentacle), if any

    # ---- what runs ---------------------------------------------------------------------------------------
    def argv(self, tool: str) -> list[str]:
        """The argv prefix that runs one of Ceph's programs of this client."""
        if self.kind == ROOTFS_KIND:
            root = Path(self.dir or "")
            exe = root / "usr/bin" / tool
            if tool == "ceph":  # a Python script: the root's interpreter runs it
                return [*self.loader(), str(root / "usr/bin/python3"), str(exe)]
            return [*self.loader(), str(exe)]
        if self.kind == BUILD_KIND:
            return [str(Path(self.dir or "") / "bin" / tool)]
        return [tool]

    def loader(self) -> list[str]:
        """The root's dynamic loader and its library path (rootfs only)."""
        root = Path(self.dir or "")
        ld, _ = _arch()
        return [str(root / ld), "--library-path", ":".join(self.lib_dirs())]

    def engine_argv(self, engine: str) -> list[str]:
        """How fathom-engine runs with this client's libraries."""
        return [*self.loader(), engine] if self.kind == ROOTFS_KIND else [engine]

    def lib_dirs(self) -> list[str]:
        """Where this client's Ceph libraries are ([] for the host's: the loader's own search)."""
        if self.kind == ROOTFS_KIND:
            _, multi = _arch()
            root = Path(self.dir or "")
            return [str(root / f"usr/lib/{multi}/ceph"), str(root / f"usr/lib/{multi}"), str(root / f"lib/{multi}")]
        if self.kind == BUILD_KIND:
            return [str(Path(self.dir or "") / "lib")]
        return []

    def library_dir(self) -> str | None:
        """The directory every Ceph library the engine loads must lie under (None: the host's, anywhere)."""
        if self.kind == HOST_KIND:
            return None
        return os.path.realpath(self.dir if self.kind == ROOTFS_KIND else Path(self.dir or "") / "lib")

    def engine_env(self, base: dict[str, str]) -> dict[str, str]:
        """The environment fathom-engine runs with (a build's libraries on the loader's path)."""
        if self.kind == BUILD_KIND:
            return cephsrc.build_env(Path(self.dir or ""), base, python=False)
        return dict(base)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """The environment its programs run with."""
        env = dict(base)
        if self.kind == ROOTFS_KIND:
            env["PYTHONHOME"] = str(Path(self.dir or "") / "usr")  # the ceph CLI: the root's Python and modules
            env.pop("PYTHONPATH", None)
        elif self.kind == BUILD_KIND:  # as the build's daemons run (its ceph CLI needs src/pybind too)
            env = cephsrc.build_env(Path(self.dir or ""), env)
        return env

    # ---- what it is --------------------------------------------------------------------------------------
    def version(self) -> str | None:
        """`ceph --version` of this client (cached per client)."""
        return _version(self)

    def major(self) -> int | None:
        m = re.search(r"ceph version (\d+)\.", self.version() or "")
        return int(m.group(1)) if m else None

    def describe(self) -> dict[str, Any]:
        """What the run's environment records: where the client came from and its version."""
        return {"kind": self.kind, "dir": self.dir, "release": self.release, "version": self.version()}

    def label(self) -> str:
        if self.kind == HOST_KIND:
            return "this host's Ceph"
        return f"{self.release or self.kind} ({self.dir})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dir": self.dir, "release": self.release}

    @staticmethod
    def from_dict(d: dict[str, Any] | None) -> Client:
        d = d or {}
        return Client(kind=d.get("kind") or HOST_KIND, dir=d.get("dir"), release=d.get("release"))


HOST = Client()


def _arch() -> tuple[str, str]:
    try:
        return _ARCH[platform.machine()]
    except KeyError:
        raise UsageError(f"a Ceph client from a root file system is not supported on {platform.machine()}",
                         hint="use --client-ceph host, or a Ceph build directory") from None


@functools.lru_cache(maxsize=16)
def _version(c: Client) -> str | None:
    try:
        p = subprocess.run([*c.argv("ceph"), "--version"], capture_output=True, text=True, timeout=30,
                           env=c.env(dict(os.environ)), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (p.stdout or "").strip()
    return out.splitlines()[0] if p.returncode == 0 and out else None


def resolve(spec: str | None) -> Client:
    """--client-ceph / clients.ceph: `host`, a release built with `fathom cluster rootfs` (reef, tentacle), a
    root file system (DIR/usr/bin/ceph) or a Ceph build directory (DIR/bin/ceph)."""
    if not spec or spec == HOST_KIND:
        return HOST
    from fathom.cluster import rootfs

    if spec in rootfs.RELEASES and not Path(spec).exists():
        if rootfs.info(spec) is None:
            raise UsageError(f"--client-ceph {spec}: no cached {spec} root file system on this machine",
                             hint=f"build it once with `fathom cluster rootfs {spec}` (about 1 min, needs network)")
        return Client(ROOTFS_KIND, str(rootfs.root_path(spec)), spec)
    d = Path(spec).expanduser().absolute()
    if (d / "usr/bin/ceph").is_file() and (d / "usr/bin/rados").is_file():
        return Client(ROOTFS_KIND, str(d))
    if (d / "bin/ceph").is_file() and (d / "lib").is_dir():
        return Client(BUILD_KIND, str(d))
    raise UsageError(f"--client-ceph {spec}: not `host`, a cached release, a root file system with Ceph's client "
                     "(usr/bin/ceph, usr/bin/rados) nor a Ceph build directory (bin/ceph, lib/)",
                     hint="build a release's root with `fathom cluster rootfs reef|tentacle`, or give a directory")


def of_source(source: dict[str, Any] | None) -> Client:
    """The client that goes with a local cluster's daemon source (fathom.cluster.cephsrc): the same release."""
    s = source or {}
    if s.get("kind") == ROOTFS_KIND and s.get("dir"):
        from fathom.cluster import rootfs

        name = next((r for r in rootfs.RELEASES if str(rootfs.root_path(r)) == s["dir"]), None)
        return Client(ROOTFS_KIND, s["dir"], name)
    if s.get("kind") == BUILD_KIND and s.get("dir") and (Path(s["dir"]) / "bin/ceph").is_file():
        return Client(BUILD_KIND, s["dir"])
    return HOST  # (a build of the daemons alone: this host's client)


def gateway_argv(cl: Client, argv: list[str]) -> list[str]:
    """A gateway (GATEWAYS) from the cluster's client: this host's Ceph 16 ceph-fuse cannot read the keys of a
    Tentacle cluster whose client is Tentacle's (aes256k)."""
    exe = cl.argv(argv[0])
    if cl.kind != HOST_KIND and not Path(exe[-1]).is_file():
        raise ClusterError(f"the cluster's client ({cl.label()}) has no {argv[0]}: {exe[-1]} is missing",
                           hint=f"rebuild its root (`fathom cluster rootfs {cl.release or 'RELEASE'} --rebuild`: roots "
                                f"built by this fathom hold {argv[0]}), or start the cluster with `--client-ceph host`")
    return [*exe, *argv[1:]]


def check_host_reads(keyring: str, program: str) -> None:
    """A gateway of this host's Ceph (HOST_ONLY) refused at once when this host's Ceph cannot read the cluster's
    keys (a Tentacle cluster whose client is Tentacle's keeps aes256k keys), not after its mount timeout."""
    why = keys.unreadable_key(keyring, "client.admin", HOST.major(), "")
    if why:
        raise ClusterError(f"{program} runs from this host's Ceph ({HOST.version()}), and {why}",
                           hint="start the cluster with `--client-ceph host` (its keys then stay of a type this "
                                f"host's Ceph reads) to run the points that need {program}")
