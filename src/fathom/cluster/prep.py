"""Preparing a cluster for a study: pools, EC profiles, RBD images, prefill, hygiene.

Everything this module creates is written to the run's undo journal
(fathom.cluster.journal: kinds pool, ec_profile, image) before it is made, and
`cleanup()` removes only what the journal holds: fathom never deletes what it did not
create. A pool named explicitly by the user is used as it is and never removed.
Settings hygiene changes are written to the same journal by a Restorer
(fathom.cluster.restore) before they are changed, and put back when the run ends.

A process killed half-way through still leaves a journal that names everything it may
have made, so a later attempt of the same run can adopt or remove it. A journal is
valid on one cluster only (`fsid`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fathom.cluster.ceph import Ceph
from fathom.cluster.journal import OBJECT_KINDS, RGW_KINDS, Journal
from fathom.cluster.restore import Restorer
from fathom.errors import ClusterError, UsageError

PG_NUM_CHOICES = "a power of two from 1 to 32768"


class Prep:
    def __init__(self, ceph: Ceph, owner_prefix: str = "fathom", progress: Callable[[str], None] | None = None,
                 journal: Journal | None = None):
        """journal: the run's undo journal, with what earlier attempts of the same run made on this cluster
        (adopted: cleanup removes it too)."""
        self.ceph = ceph
        self.journal = journal if journal is not None else Journal(conn=ceph.conn.describe())
        self.restorer = Restorer(ceph, self.journal)  # writes down every setting hygiene changes
        self.prefix = owner_prefix
        self.settings: dict[str, str] = {}  # every setting applied, for the run's record
        self.progress = progress or (lambda msg: None)

    def made(self, kind: str) -> list[str]:
        """What of one kind (pool, ec_profile, image as "pool/image", rgw_user, rgw_placement) fathom made here."""
        return self.journal.names(kind)

    # ---- pools -------------------------------------------------------------------
    def _pools(self) -> dict[str, dict[str, Any]]:
        return {p["pool_name"]: p for p in self.ceph.ceph("osd", "pool", "ls", "detail")}

    def pool_info(self, name: str) -> dict[str, Any] | None:
        """`osd pool ls detail` of one pool, or None when it does not exist."""
        return self._pools().get(name)

    def shape_diff(self, name: str, pg_num: int = 32, size: int = 1, min_size: int | None = None,
                   application: str = "rbd", ec_profile: str | None = None) -> list[str]:
        """How the existing pool `name` differs from what pool() would make of these arguments ([]: it matches)."""
        got = self.pool_info(name)
        if got is None:
            return [f"pool {name} does not exist"]
        diff = []
        if int(got["pg_num"]) != pg_num:
            diff.append(f"pg_num {got['pg_num']}, not {pg_num}")
        if (got.get("erasure_code_profile") or None) != ec_profile:
            diff.append(f"erasure code profile {got.get('erasure_code_profile') or 'none'!r}, "
                        f"not {ec_profile or 'none'!r}")
        if not ec_profile:
            ms = min_size if min_size is not None else max(1, size - size // 2)
            if (int(got["size"]), int(got["min_size"])) != (size, ms):
                diff.append(f"size {got['size']}/min_size {got['min_size']}, not {size}/{ms}")
        if application and application not in (got.get("application_metadata") or {}):
            diff.append(f"application {application} not enabled")
        return diff

    def remove_pool(self, name: str) -> None:
        """Remove a pool the journal holds (fathom made it), and mark it and its images undone."""
        if not self.journal.holds("pool", name):
            raise ClusterError(f"pool {name} is not in fathom's journal; fathom removes only what it created")
        self.ceph.ceph("osd", "pool", "rm", name, name, "--yes-i-really-really-mean-it", fmt_json=False)
        for image in self.made("image"):
            if image.split("/", 1)[0] == name:
                self.journal.drop("image", image)
        self.journal.drop("pool", name)

    def ec_profile(self, name: str, k: int, m: int, failure_domain: str = "osd") -> str:
        if k < 1 or m < 1:
            raise UsageError(f"erasure code profile {name}: k and m must be at least 1 (got k={k}, m={m})")
        existing = self.ceph.ceph("osd", "erasure-code-profile", "ls")
        if name in existing:
            got = self.ceph.ceph("osd", "erasure-code-profile", "get", name)
            if int(got.get("k", 0)) != k or int(got.get("m", 0)) != m:
                raise ClusterError(f"erasure code profile {name} exists with k={got.get('k')} m={got.get('m')}, "
                                   f"not k={k} m={m}", hint="choose another profile name")
            return name
        self.journal.note("ec_profile", name)
        self.ceph.ceph("osd", "erasure-code-profile", "set", name, f"k={k}", f"m={m}",
                       f"crush-failure-domain={failure_domain}", fmt_json=False)
        return name

    def pool(self, name: str, pg_num: int = 32, size: int = 1, min_size: int | None = None,
             application: str = "rbd", ec_profile: str | None = None, allow_ec_overwrites: bool = False,
             explicit: bool = False) -> str:
        """Create a replicated or EC pool (or adopt an explicit, existing one untouched)."""
        if pg_num < 1 or pg_num > 32768 or pg_num & (pg_num - 1):
            raise UsageError(f"pool {name}: pg_num must be {PG_NUM_CHOICES}, got {pg_num}")
        pools = self._pools()
        if name in pools:
            if explicit:
                self.progress(f"using existing pool {name} as given (fathom will not change or remove it)")
                return name
            raise ClusterError(f"pool {name} already exists and fathom did not create it",
                               hint="name it explicitly to use it as it is, or choose another pool name")
        if not ec_profile and size < 1:
            raise UsageError(f"pool {name}: size must be at least 1, got {size}")
        self.journal.note("pool", name)
        if ec_profile:
            self.ceph.ceph("osd", "pool", "create", name, str(pg_num), str(pg_num), "erasure", ec_profile,
                           fmt_json=False)
        else:
            self.ceph.ceph("osd", "pool", "create", name, str(pg_num), str(pg_num), "replicated", fmt_json=False)
        self.ceph.ceph("osd", "pool", "set", name, "pg_autoscale_mode", "off", fmt_json=False)
        if not ec_profile:
            extra = ["--yes-i-really-mean-it"] if size == 1 else []
            self.ceph.ceph("osd", "pool", "set", name, "size", str(size), *extra, fmt_json=False)
            ms = min_size if min_size is not None else max(1, size - size // 2)  # ceph's default: size - size/2
            self.ceph.ceph("osd", "pool", "set", name, "min_size", str(ms), fmt_json=False)
        elif min_size is not None:
            self.ceph.ceph("osd", "pool", "set", name, "min_size", str(min_size), fmt_json=False)
        if allow_ec_overwrites:
            if not ec_profile:
                raise UsageError(f"pool {name}: allow_ec_overwrites applies to erasure-coded pools only")
            self.ceph.ceph("osd", "pool", "set", name, "allow_ec_overwrites", "true", fmt_json=False)
        if application:
            self.ceph.ceph("osd", "pool", "application", "enable", name, application, fmt_json=False)
        if application == "rbd" and not ec_profile:
            self.ceph.rbd("pool", "init", name, fmt_json=False, timeout=120)
        self.progress(f"created pool {name} ({'EC ' + ec_profile if ec_profile else f'replicated size {size}'}, "
                      f"{pg_num} PGs)")
        return name

    # ---- images ------------------------------------------------------------------
    def adopt_images(self, pool: str, names: list[str], size_bytes: int) -> list[str]:
        """Those of `names` that an earlier attempt of this run made in `pool` and that still have this size."""
        mine = {i.split("/", 1)[1] for i in self.made("image") if i.split("/", 1)[0] == pool}
        have = {i["image"]: int(i["size"]) for i in self.ceph.rbd("ls", "-l", "-p", pool) or []}
        return [n for n in names if n in mine and have.get(n) == size_bytes]

    def images(self, pool: str, names: list[str], size_bytes: int, data_pool: str | None = None) -> list[str]:
        """Create RBD images (data_pool: an EC pool holding the data, metadata in `pool`)."""
        if size_bytes < 4096 or size_bytes % 4096:
            raise UsageError(f"image size must be a positive multiple of 4KiB, got {size_bytes} bytes")
        existing = set(self.ceph.rbd("ls", "-p", pool) or [])
        for name in names:
            if name in existing:
                raise ClusterError(f"image {pool}/{name} already exists and fathom did not create it",
                                   hint="use another image prefix, or remove that image yourself")
            args = ["create", f"{pool}/{name}", "--size", f"{size_bytes // 1024}K"]
            if data_pool:
                args += ["--data-pool", data_pool]
            self.journal.note("image", f"{pool}/{name}")
            self.ceph.rbd(*args, fmt_json=False)
        self.progress(f"created {len(names)} RBD image(s) of {size_bytes / 2**20:.0f} MiB in {pool}")
        return names

    def prefill(self, pool: str, images: list[str], size_bytes: int, block: int = 65536,
                threads: int = 16) -> dict[str, Any]:
        """Write every image whole, sequentially, in `block`-sized writes, as the OSD study does.

        `rbd bench --io-pattern seq` is used: it ships with Ceph, streams aio writes from
        one process per image, and on this class of machine it fills faster than fio's
        process start-up per image. Images are filled one after another so each gets
        the whole cluster; the method and time are returned for the run's record.
        """
        t0 = time.monotonic()
        for i, image in enumerate(images):
            self.progress(f"prefill {pool}/{image} ({i + 1}/{len(images)}): {size_bytes / 2**20:.0f} MiB "
                          f"in {block // 1024}K sequential writes")
            self.ceph.rbd("bench", "--io-type", "write", "--io-size", str(block), "--io-threads", str(threads),
                          "--io-total", str(size_bytes), "--io-pattern", "seq", f"{pool}/{image}",
                          fmt_json=False, timeout=max(600.0, size_bytes / 2**20))
        took = time.monotonic() - t0
        return {"method": "rbd bench --io-type write --io-pattern seq", "io_size": block, "io_threads": threads,
                "images": len(images), "bytes_per_image": size_bytes, "seconds": round(took, 2),
                "mib_s": round(len(images) * size_bytes / 2**20 / took, 1) if took > 0 else None}

    # ---- hygiene -----------------------------------------------------------------
    def hygiene(self, pools: list[str], rbd_cache: bool = False, rbd_io_scheduler: str | None = "none",
                noscrub: bool = True, balancer_off: bool = True, autoscale_off: bool = True) -> dict[str, str]:
        """Quiet the cluster for measurement; every setting is returned (and kept in self.settings).

        Each change goes through self.restorer: what was there is recorded before it is
        changed, so the run's teardown (or `fathom cluster restore`) can put it back.
        """
        r = self.restorer
        applied: dict[str, str] = {}
        if noscrub:
            r.osd_flags(["noscrub", "nodeep-scrub"])
            applied.update({"osd flag noscrub": "set", "osd flag nodeep-scrub": "set"})
        if balancer_off:
            r.balancer_off()
            applied["balancer"] = "off"
        if autoscale_off:
            r.config_set("global", "osd_pool_default_pg_autoscale_mode", "off")
            applied["osd_pool_default_pg_autoscale_mode"] = "off"
            for p in pools:
                if not self.journal.holds("pool", p):  # a pool fathom created has it off already, and goes at the end
                    r.pool_set(p, "pg_autoscale_mode", "off")
                applied[f"pool {p} pg_autoscale_mode"] = "off"
        r.config_set("client", "rbd_cache", "true" if rbd_cache else "false")
        applied["client rbd_cache"] = "true" if rbd_cache else "false"
        if rbd_io_scheduler:
            r.config_set("client", "rbd_io_scheduler", rbd_io_scheduler)
            applied["client rbd_io_scheduler"] = rbd_io_scheduler
        self.settings.update(applied)
        return applied

    # ---- cleanup -----------------------------------------------------------------
    def cleanup(self) -> dict[str, list[str]]:
        """Remove what this Prep created, newest first, each marked undone in the journal. Nothing else. What is
        already gone is skipped: the journal names things before they are made, and a killed attempt may not have
        made them. RGW users and placements use the pools: fathom.cluster.rgw.cleanup removes them first, and
        until it has, this refuses."""
        rgw = [e.what for e in self.journal.pending(*RGW_KINDS)]
        if rgw:
            raise ClusterError(f"RGW users and placements fathom made ({', '.join(rgw)}) still use the pools: "
                               "not removing them first", hint="fathom.cluster.rgw.cleanup(prep) goes first")
        removed: dict[str, list[str]] = {"images": [], "pools": [], "ec_profiles": []}
        pools = self._pools()
        for e in self.journal.pending(*OBJECT_KINDS):
            if e.kind == "image":
                pool, image = e.what.split("/", 1)
                if self.journal.holds("pool", pool):  # goes with the pool fathom made
                    removed["images"].append(e.what)
                elif pool in pools and image in set(self.ceph.rbd("ls", "-p", pool) or []):
                    self.ceph.rbd("rm", e.what, fmt_json=False, timeout=600)
                    removed["images"].append(e.what)
            elif e.kind == "pool":
                if e.what in pools:
                    self.ceph.ceph("osd", "pool", "rm", e.what, e.what, "--yes-i-really-really-mean-it",
                                   fmt_json=False)
                    removed["pools"].append(e.what)
            else:
                self.ceph.ceph("osd", "erasure-code-profile", "rm", e.what, fmt_json=False)
                removed["ec_profiles"].append(e.what)
            self.journal.mark(e)
        return removed
