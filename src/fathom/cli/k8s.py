"""`fathom k8s image`: the engine's image as an OCI archive, for Kubernetes nodes or a registry."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("k8s", help="Kubernetes: the engine's image for client pods (docs/kubernetes.md)")
    ksub = p.add_subparsers(dest="k8s_cmd", metavar="ACTION", required=True)
    img = ksub.add_parser("image", help="write an OCI image archive with fathom-engine and the Ceph client "
                                        "libraries it links (no registry, no container tool needed)")
    img.add_argument("-o", "--output", metavar="FILE", type=Path, default=None,
                     help="the archive to write (default ./fathom-engine-VERSION-SHA12.tar: fathom's version and "
                          "the engine's sha256)")
    img.add_argument("--tag", metavar="[REGISTRY/]NAME[:TAG]", default=None,
                     help="the image's name (default localhost/fathom-engine:VERSION-SHA12). A name without a "
                          "registry part gets localhost/ put before it (containerd would put docker.io/ there); "
                          "no :TAG means :latest")
    img.add_argument("--ceph", metavar="RELEASE|DIR", default=None,
                     help="the Ceph client libraries of another Ceph: a release built by `fathom cluster rootfs` "
                          "(reef, tentacle), a root file system or a build directory (default: this host's); the "
                          "default name and file then end in -cephVERSION")
    img.set_defaults(func=cmd_image)


def cmd_image(args: argparse.Namespace) -> int:
    from fathom.cluster import client
    from fathom.engines.fathom_engine import check_engine
    from fathom.hosts.k8s.image import LOCAL, engine_image

    path, name, digest = engine_image(check_engine(), args.output, args.tag, client=client.resolve(args.ceph))
    f = shlex.quote(str(path))
    # a name of the user's registry is pushed as it is; fathom's default names none
    dest = f"REGISTRY/fathom-engine:{name.rsplit(':', 1)[1]}" if name.startswith(f"{LOCAL}/") else name
    print(f"{name} ({digest}) in {path}\n"
          f"import it on each node that runs the pods (as root), then name it as the pods' image:\n"
          f"  containerd:  ctr -n k8s.io images import {f}\n"
          f"  CRI-O:       podman load -i {f}\n"
          f"or push it to a registry the nodes pull from:\n"
          f"  skopeo copy oci-archive:{f} docker://{dest}")
    return 0
