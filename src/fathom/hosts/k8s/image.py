"""The engine's image: fathom-engine, the shared libraries it links and opens, and a shell, as an OCI archive.

No registry and no container tool is needed to make it: the archive is written here (one layer, reproducible:
the same engine and libraries give the same digest). A node's runtime imports it (`ctr -n k8s.io images import`,
`podman load`), or any OCI tool pushes it to a registry (`skopeo copy oci-archive:FILE docker://...`).

    engine_image(engine, out=None, tag=None) -> (path, name, manifest digest)
    engine_tree(engine)     the image's files: /usr/bin/fathom-engine, its libraries (linked: ldd; opened:
                            RUNTIME_LIBS), busybox
    busybox_tree()          a minimal root: static busybox and its applets
    write_image(out, name, tree, entrypoint) -> manifest digest
    qualify(tag)            a name as the runtimes read it: localhost/ before a short one, :latest when untagged
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

from fathom.cluster.client import HOST, Client
from fathom.errors import FathomError, UsageError
from fathom.units import format_size
from fathom.version import __version__

# a tree entry: a file to copy (Path), its content (bytes), a symlink's target (str), a directory's mode (int)
Entry = Path | bytes | str | int
Tree = dict[str, Entry]

BUSYBOX = Path("/bin/busybox")
ENGINE_IN_IMAGE = "/usr/bin/fathom-engine"  # where the engine pods (fathom.hosts.pods) run it
SAMPLER_IN_IMAGE = "/usr/bin/fathom-sampler"  # where the sampler DaemonSet (fathom.servers.k8s) runs it
REPOSITORY = "fathom-engine"
LOCAL = "localhost"
# the distribution reference grammar, without digests: [registry[:port]/]component[/component...][:tag]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_REFERENCE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
                        r"(?::\w[\w.-]{0,127})?")
# opened at run time (dlopen) by the engine's cephfs and nfs targets, so ldd does not list them
RUNTIME_LIBS = {"libcephfs.so.2": "cephfs", "libnfs.so.13": "nfs"}
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}  # uname's names where OCI (Go) names them otherwise


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def engine_id(engine: Path, client: Client = HOST) -> str:
    """'<fathom version>-<first 12 hex of the engine's sha256>', and '-ceph<version>' for another client than this
    host's: names the image and its default file."""
    base = f"{__version__}-{hashlib.sha256(engine.read_bytes()).hexdigest()[:12]}"
    if client.kind == "host":
        return base
    m = re.search(r"ceph version (\S+)", client.version() or "")
    return f"{base}-ceph{m.group(1) if m else client.kind}"


def default_tag(engine: Path, client: Client = HOST) -> str:
    return f"{LOCAL}/{REPOSITORY}:{engine_id(engine, client)}"


def default_file(engine: Path, client: Client = HOST) -> Path:
    return Path(f"{REPOSITORY}-{engine_id(engine, client)}.tar")


def qualify(tag: str) -> str:
    """The name the image is imported under. One without a registry part gets localhost/ before it: containerd
    would put docker.io/ there, and a pod's image would then name an image nobody pushed."""
    if not _REFERENCE.fullmatch(tag):
        raise UsageError(f"--tag {tag!r} is not an image name",
                         hint="[REGISTRY[:PORT]/]NAME[:TAG] in lower case, e.g. fathom-engine:dev or "
                              "registry.example.com/ceph/fathom-engine:1")
    first, slash, _ = tag.partition("/")
    if not slash or not ("." in first or ":" in first or first == LOCAL):  # the rule the runtimes apply
        tag = f"{LOCAL}/{tag}"
    return tag if ":" in tag.rsplit("/", 1)[-1] else f"{tag}:latest"


def busybox_tree() -> Tree:
    """A minimal root: static busybox and its applets, /etc/passwd, empty mount points."""
    if not BUSYBOX.is_file():
        raise FathomError(f"{BUSYBOX} not found: the image's shell is busybox",
                          hint="install it: apt-get install busybox-static (Debian, Ubuntu)")
    tree: Tree = {"bin/busybox": BUSYBOX, "etc/passwd": b"root:x:0:0:root:/:/bin/sh\n",
                  "etc/group": b"root:x:0:\n", "tmp/": 0o1777, "proc/": 0o755, "sys/": 0o755,
                  "dev/": 0o755, "var/": 0o755}
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        tree.setdefault(f"bin/{a}", "busybox")
    return tree


def libraries(binary: Path, client: Client = HOST) -> list[str]:
    """The absolute paths of the shared libraries `binary` loads, as ldd lists them (none for a static one); with
    a client's root, as that root's loader finds them (paths in the root)."""
    if client.kind == "rootfs":
        argv = [*client.loader(), "--list", str(binary)]
    elif shutil.which("ldd") is None:
        raise FathomError("ldd not found: it lists the libraries the engine needs in the image",
                          hint="install it: apt-get install libc-bin (Debian, Ubuntu)")
    else:
        argv = ["ldd", str(binary)]
    p = subprocess.run(argv, capture_output=True, text=True, check=False, env=client.engine_env(dict(os.environ)))
    if p.returncode != 0 and "not a dynamic executable" in p.stdout + p.stderr:
        return []
    if p.returncode != 0:
        raise FathomError(f"ldd {binary} failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}")
    missing = [ln.split()[0] for ln in p.stdout.splitlines() if "not found" in ln]
    if missing:
        raise FathomError(f"{binary} needs libraries this host does not have: {', '.join(missing)}",
                          hint="install the Ceph client libraries (Debian: librados2 librbd1)")
    out = []
    for line in p.stdout.splitlines():
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else words[0] if words else ""
        if path.startswith("/"):
            out.append(path)
    return out


def opened_libraries(linked: list[str], client: Client = HOST) -> tuple[list[str], list[str]]:
    """The libraries of RUNTIME_LIBS this host has, as the loader's cache (ldconfig -p) places them: in a directory
    of the libraries the engine links (so of its architecture); and the sonames of those it lacks. With another
    client, those in its library directories."""
    found: dict[str, str] = {}
    if client.kind != "host":
        for so in RUNTIME_LIBS:
            hit = next((f"{d}/{so}" for d in client.lib_dirs() if Path(d, so).exists()), None)
            if hit:
                found[so] = hit
        return list(found.values()), [so for so in RUNTIME_LIBS if so not in found]
    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                 if os.access(p, os.X_OK)), None)
    listed = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout if ldconfig else ""
    dirs = {os.path.dirname(lib) for lib in linked}
    for line in listed.splitlines():  # "\tlibcephfs.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcephfs.so.2"
        soname, _, path = line.strip().partition(" => ")
        soname = soname.split(" ")[0]
        if soname in RUNTIME_LIBS and os.path.dirname(path) in dirs:
            found.setdefault(soname, path)
    return list(found.values()), [so for so in RUNTIME_LIBS if so not in found]


def engine_tree(engine: Path, say: Callable[[str], None] = _stderr, client: Client = HOST) -> Tree:
    """`engine` as /usr/bin/fathom-engine, each library it links or opens at the path it has here (with this
    host's /etc/ld.so.cache, so the loader finds them as it does here), and busybox for the shell that starts
    it. A library the engine opens that this host lacks is said, and left out. With another client
    (fathom.cluster.client): a root's loader, libraries and loader cache at their paths in the root; a build
    directory's libraries at their paths here, on the image's LD_LIBRARY_PATH (image_env)."""
    tree = busybox_tree()
    tree[ENGINE_IN_IMAGE.lstrip("/")] = engine
    root = client.dir if client.kind == "rootfs" else ""
    cache = Path(f"{root}/etc/ld.so.cache")
    if cache.is_file():
        tree["etc/ld.so.cache"] = cache
    linked = libraries(engine, client)
    opened, missing = opened_libraries(linked, client)
    for so in missing:
        where = "on this host" if client.kind == "host" else f"in {client.label()}"
        say(f"image: without {so} (the {RUNTIME_LIBS[so]} interface): not {where}")
    # and what busybox and the opened libraries link (Debian's non-static busybox links libc)
    deps = [d for b in map(Path, opened) for d in libraries(b, client)]
    # busybox-static links nothing; a dynamic busybox's host libraries go first, so that a root's own win
    for lib in [*libraries(BUSYBOX), *linked, *opened, *deps]:
        inside = lib[len(root):] if root and lib.startswith(root + "/") else lib
        tree[inside.lstrip("/")] = Path(os.path.realpath(lib))  # the file, not the link
    from fathom.binaries import sampler_beside

    sampler = sampler_beside(engine)  # static: the same image serves the server figures' DaemonSet
    if sampler.is_file():
        tree[SAMPLER_IN_IMAGE.lstrip("/")] = sampler
    else:
        say(f"image: without fathom-sampler ({sampler} is not built): no server figures from this image")
    return tree


def _layer(tree: Tree) -> bytes:
    """The uncompressed layer: every parent directory an entry of its own (0755 unless given), sorted, owners
    root, times 0, so that the same tree gives the same bytes."""
    tree = dict(tree)
    for path in list(tree):
        parts = path.rstrip("/").split("/")[:-1]
        for n in range(1, len(parts) + 1):
            tree.setdefault("/".join(parts[:n]) + "/", 0o755)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path in sorted(tree):
            v = tree[path]
            ti = tarfile.TarInfo(path.rstrip("/"))
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mtime = 0
            if isinstance(v, int):
                ti.type, ti.mode = tarfile.DIRTYPE, v
                t.addfile(ti)
            elif isinstance(v, str):
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, v, 0o777
                t.addfile(ti)
            else:
                data = v.read_bytes() if isinstance(v, Path) else v
                ti.size, ti.mode = len(data), 0o755 if isinstance(v, Path) else 0o644
                t.addfile(ti, io.BytesIO(data))
    return raw.getvalue()


def image_env(client: Client = HOST) -> list[str]:
    """The image's environment: PATH, and a build directory's libraries on LD_LIBRARY_PATH."""
    env = ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"]
    return env + [f"LD_LIBRARY_PATH={client.dir}/lib"] if client.kind == "build" else env


def write_image(out: Path, name: str, tree: Tree, entrypoint: list[str], env: list[str] | None = None) -> str:
    """An OCI image archive at `out` (written to out.tmp, then renamed) of one layer holding `tree`, named `name`
    (fully qualified: see qualify). Reproducible. Returns the manifest's digest."""
    layer_raw = _layer(tree)
    layer = gzip.compress(layer_raw, compresslevel=1, mtime=0)  # fast: an image is made per engine build
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return f"sha256:{d}"

    arch = _ARCH.get(os.uname().machine, os.uname().machine)
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": env or image_env(), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer_raw).hexdigest()}"]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(layer),
                    "size": len(layer)}],
    }, sort_keys=True).encode()
    digest = blob(manifest)
    # containerd names the image by its own annotation; podman reads it too. OCI's ref.name is the tag alone.
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": len(manifest),
        "platform": {"architecture": arch, "os": "linux"},
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]},
    }]}).encode()
    entries: list[tuple[str, bytes | None]] = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                                               ("index.json", index), ("blobs", None), ("blobs/sha256", None)]
    entries += [(f"blobs/sha256/{d}", b) for d, b in sorted(blobs.items())]
    tmp = out.with_name(out.name + ".tmp")
    try:
        with tarfile.open(tmp, "w") as t:
            for path, data in entries:
                ti = tarfile.TarInfo(path)
                if data is None:
                    ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                    t.addfile(ti)
                else:
                    ti.size, ti.mode = len(data), 0o644
                    t.addfile(ti, io.BytesIO(data))
        tmp.rename(out)
    finally:
        tmp.unlink(missing_ok=True)
    return digest


def _content_size(tree: Tree) -> tuple[int, int]:
    """The tree's files and their bytes (copied files as they are now)."""
    sizes = [v.stat().st_size if isinstance(v, Path) else len(v) for v in tree.values() if isinstance(v, Path | bytes)]
    return len(sizes), sum(sizes)


def engine_image(engine: Path, out: Path | None = None, tag: str | None = None,
                 say: Callable[[str], None] = _stderr, client: Client = HOST) -> tuple[Path, str, str]:
    """The engine's image written to `out` (default ./fathom-engine-VERSION-SHA12[-cephVERSION].tar), named `tag`
    (qualified; default localhost/fathom-engine:VERSION-SHA12[-cephVERSION]), its shell the entrypoint (pods give
    their own command), the Ceph client libraries `client`'s. Returns its path, name and manifest digest."""
    name = qualify(tag) if tag else default_tag(engine, client)
    out = Path(out) if out is not None else default_file(engine, client)
    tree = engine_tree(engine, say, client)
    if client.kind != "host":
        say(f"image {name}: the Ceph client libraries of {client.version() or client.label()} from {client.dir}")
    files, size = _content_size(tree)
    say(f"image {name}: {files} files, {format_size(size)} → {out}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        digest = write_image(out, name, tree, ["/bin/sh"], image_env(client))
    except OSError as exc:
        raise FathomError(f"cannot write the image {out}: {exc}") from None
    say(f"image {name}: {format_size(out.stat().st_size)} compressed, manifest {digest}")
    return out, name, digest
