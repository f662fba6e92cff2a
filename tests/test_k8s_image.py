"""`fathom k8s image` (fathom.hosts.k8s.image): the engine's OCI image archive, written from this checkout's engine and
read back as a runtime reads it (layout, digests, the layer's files). No cluster, no container tool."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import release_root, run_fathom
from fathom.engines.fathom_engine import check_engine
from fathom.errors import FathomError, UsageError
from fathom.hosts.k8s import image
from fathom.version import __version__


@pytest.fixture(scope="module")
def engine() -> Path:
    return check_engine()  # `make test` builds it: never skipped


@pytest.fixture(scope="module")
def written(engine: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    return image.engine_image(engine, tmp_path_factory.mktemp("image") / "engine.tar", say=lambda _: None)


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: m for m in t.getmembers()}


def contents(data: bytes) -> dict[str, bytes]:
    """Every regular file of a tar archive, by name."""
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


class Oci:
    """An OCI archive read as a runtime reads it: index, manifest, config, layer (uncompressed)."""

    def __init__(self, path: Path):
        self.files = contents(path.read_bytes())
        self.index = json.loads(self.files["index.json"])
        (self.desc,) = self.index["manifests"]
        self.manifest = json.loads(self.blob(self.desc["digest"], self.desc["size"]))
        c = self.manifest["config"]
        self.config = json.loads(self.blob(c["digest"], c["size"]))
        (layer,) = self.manifest["layers"]
        self.layer = gzip.decompress(self.blob(layer["digest"], layer["size"]))

    def blob(self, digest: str, size: int) -> bytes:
        data = self.files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
        assert len(data) == size
        return data


def test_the_archive_is_an_oci_layout_named_by_its_tag(engine: Path, written: tuple[Path, str, str]) -> None:
    path, name, digest = written
    oci = Oci(path)
    assert json.loads(oci.files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for n, data in oci.files.items():
        if n.startswith("blobs/"):
            assert n == f"blobs/sha256/{hashlib.sha256(data).hexdigest()}"
    sha12 = hashlib.sha256(engine.read_bytes()).hexdigest()[:12]
    assert name == f"localhost/fathom-engine:{__version__}-{sha12}"
    assert oci.desc["annotations"] == {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": f"{__version__}-{sha12}"}
    assert oci.desc["digest"] == digest
    assert oci.manifest["mediaType"] == oci.desc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert oci.manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    assert oci.config["rootfs"] == {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(oci.layer).hexdigest()}"]}
    assert oci.config["os"] == "linux" and oci.config["architecture"] == oci.desc["platform"]["architecture"]
    assert oci.config["config"]["Entrypoint"] == ["/bin/sh"]
    assert not path.with_name(path.name + ".tmp").exists()


def test_the_layer_holds_the_engine_every_library_it_links_and_a_shell(engine: Path,
                                                                          written: tuple[Path, str, str]) -> None:
    layer = Oci(written[0]).layer
    files, infos = contents(layer), members(layer)
    assert files["usr/bin/fathom-engine"] == engine.read_bytes()
    assert infos["usr/bin/fathom-engine"].mode == 0o755
    ldd = subprocess.run(["ldd", str(engine)], capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"(/\S+) \(0x[0-9a-f]+\)$", ldd, re.M)  # the path the loader found, before its address
    assert any("librados" in lib for lib in libs) and any("librbd" in lib for lib in libs)
    for lib in libs:
        assert files[lib.lstrip("/")] == Path(lib).read_bytes(), lib
    # the libraries the engine opens at run time, from where the linked ones are (`make install` installs them)
    dirs = {str(Path(lib).parent) for lib in libs}
    for soname in image.RUNTIME_LIBS:
        (lib,) = {f"{d}/{soname}" for d in dirs if Path(d, soname).exists()}
        assert files[lib.lstrip("/")] == Path(lib).read_bytes(), lib
    assert files["bin/busybox"] == Path("/bin/busybox").read_bytes()
    assert infos["bin/sh"].issym() and infos["bin/sh"].linkname == "busybox"
    assert infos["tmp"].isdir() and infos["tmp"].mode == 0o1777
    assert all(m.uid == 0 and m.mtime == 0 for m in infos.values())


def test_a_library_the_engine_opens_that_this_host_lacks_is_said(engine: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(image.RUNTIME_LIBS, "libfathom-absent.so.1", "absent")
    said: list[str] = []
    tree = image.engine_tree(engine, said.append)
    assert said == ["image: without libfathom-absent.so.1 (the absent interface): not on this host"]
    assert not any("libfathom-absent" in path for path in tree)


def test_two_writes_are_the_same_image(engine: Path, written: tuple[Path, str, str], tmp_path: Path) -> None:
    again = image.engine_image(engine, tmp_path / "again.tar", say=lambda _: None)
    assert again[1:] == written[1:]
    assert again[0].read_bytes() == written[0].read_bytes()


@pytest.mark.parametrize("tag, name", [
    ("fathom-engine:dev", "localhost/fathom-engine:dev"),
    ("ceph/fathom-engine:1", "localhost/ceph/fathom-engine:1"),  # a path, not a registry: no dot, no port
    ("fathom-engine", "localhost/fathom-engine:latest"),
    ("localhost/fathom-engine:2", "localhost/fathom-engine:2"),
    ("registry.example.com/ceph/fathom-engine:1.2", "registry.example.com/ceph/fathom-engine:1.2"),
    ("10.0.0.5:5000/fathom-engine", "10.0.0.5:5000/fathom-engine:latest"),
])
def test_a_short_tag_gets_localhost(tag: str, name: str) -> None:
    assert image.qualify(tag) == name


@pytest.mark.parametrize("tag", ["Fathom:1", "fathom engine", "fathom:", "/fathom", "fathom:-x"])
def test_a_tag_that_is_no_image_name_is_refused(tag: str) -> None:
    with pytest.raises(UsageError, match="is not an image name"):
        image.qualify(tag)


def test_missing_busybox_and_ldd_are_named(engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(image, "BUSYBOX", tmp_path / "busybox")
        with pytest.raises(FathomError, match="busybox") as exc:
            image.engine_image(engine, tmp_path / "x.tar", say=lambda _: None)
        assert "busybox-static" in str(exc.value)
    monkeypatch.setenv("PATH", str(tmp_path))  # busybox --list runs by its path; ldd is looked up
    with pytest.raises(FathomError, match="ldd not found") as exc:
        image.engine_image(engine, tmp_path / "x.tar", say=lambda _: None)
    assert "libc-bin" in str(exc.value)
    assert list(tmp_path.iterdir()) == []


def test_the_command_writes_the_file_and_says_how_to_import_it(engine: Path, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "engine.tar"
    p = run_fathom("k8s", "image", "-o", str(out), check=True)
    name = image.default_tag(engine)
    assert Oci(out).desc["annotations"]["io.containerd.image.name"] == name
    assert re.search(rf"^image {re.escape(name)}: \d+ files, [\d.]+MiB → {re.escape(str(out))}$", p.stderr, re.M)
    assert p.stdout.splitlines()[0].startswith(f"{name} (sha256:")
    for line in (f"ctr -n k8s.io images import {out}", f"podman load -i {out}",
                 f"skopeo copy oci-archive:{out} docker://REGISTRY/fathom-engine:{name.rsplit(':', 1)[1]}"):
        assert line in p.stdout


def test_the_command_names_its_file_by_default_and_qualifies_a_short_tag(engine: Path, tmp_path: Path) -> None:
    p = run_fathom("k8s", "image", "--tag", "fathom-engine:dev", cwd=tmp_path, check=True)
    (out,) = tmp_path.iterdir()
    assert out.name == image.default_file(engine).name == f"fathom-engine-{image.engine_id(engine)}.tar"
    assert Oci(out).desc["annotations"]["io.containerd.image.name"] == "localhost/fathom-engine:dev"
    assert "docker://REGISTRY/fathom-engine:dev" in p.stdout
    p = run_fathom("k8s", "image", "--tag", "Bad Name", cwd=tmp_path)
    assert p.returncode == 2 and "is not an image name" in p.stderr


def test_an_image_with_tentacle_s_client_runs_its_engine_on_tentacle_s_libraries(engine: Path, tmp_path: Path) -> None:
    """`fathom k8s image --ceph tentacle`: the root's loader, loader cache and Ceph libraries at their paths in the
    root, so that in the image (here: its layer unpacked and chrooted into, as a runtime runs it) the engine
    starts on them; named apart from this host's client's image."""
    from fathom.cluster import client

    release_root("tentacle")
    c = client.resolve("tentacle")
    out = tmp_path / "t.tar"
    p = run_fathom("k8s", "image", "--ceph", "tentacle", "-o", str(out), check=True)
    version = re.search(r"ceph version (\S+)", c.version() or "").group(1)  # type: ignore[union-attr]
    assert f"-ceph{version} " in p.stdout and version.startswith("20."), p.stdout
    root = Path(c.dir or "")
    layer = Oci(out).layer
    files = contents(layer)
    for inside in ("lib64/ld-linux-x86-64.so.2", "etc/ld.so.cache", "usr/lib/x86_64-linux-gnu/librados.so.2",
                   "usr/lib/x86_64-linux-gnu/libcephfs.so.2"):
        assert files[inside] == (root / inside).resolve().read_bytes(), inside
    tree = tmp_path / "tree"
    tree.mkdir()
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        t.extractall(tree, filter="fully_trusted")
    run = subprocess.run(["chroot", str(tree), "/usr/bin/fathom-engine", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and "fathom-engine" in run.stdout, run.stdout + run.stderr
    # the host's image is another: its libraries differ, and so does its name
    assert image.default_tag(engine) != image.default_tag(engine, c)
