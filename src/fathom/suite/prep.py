"""What a suite prepares before its points (`prep:`): pools, RBD images, client hygiene and RGW placement
targets. fathom.cluster.prep and fathom.cluster.rgw carry it out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from fathom.fields import StrictModel, size_value


class PoolSpec(StrictModel):
    name: str = Field(min_length=1)
    pg_num: int = Field(32, ge=1, le=65536)
    size: int = Field(1, ge=1, le=10)
    min_size: int | None = Field(None, ge=1, le=10)
    application: Literal["rbd", "rados", "rgw", "cephfs"] = "rbd"
    ec_k: int | None = Field(None, ge=1)
    ec_m: int | None = Field(None, ge=1)


class ImagesSpec(StrictModel):
    pool: str = Field(min_length=1)
    count: int = Field(1, ge=1, le=4096)
    size: int
    prefix: str = "fio_test_"

    @field_validator("size", mode="before")
    @classmethod
    def _sz(cls, v: Any) -> int:
        n = size_value(v, "size")
        if n < 4 * 1024**2:
            raise ValueError("an image must be at least 4MiB")
        return n

    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(self.count)]


class HygieneSpec(StrictModel):
    enabled: bool = True
    rbd_cache: bool = False
    rbd_io_scheduler: Literal["none", "simple"] = "none"


class PlacementSpec(StrictModel):
    """An RGW placement target over pools of prep.pools: the data pool decides the data-protection scheme."""

    data_pool: str = Field(min_length=1)
    index_pool: str = Field(min_length=1)  # replicated (EC pools have no omap)
    data_extra_pool: str = Field(min_length=1)  # replicated: incomplete multipart uploads


class RgwPrepSpec(StrictModel):
    """RGW preparation (fathom.cluster.rgw): a placement target per scheme, pinned index shards, a user of
    fathom's own; buckets are made per point with the placement's LocationConstraint and purged between."""

    placements: dict[str, PlacementSpec] = Field(min_length=1)
    index_shards: int = Field(11, ge=1, le=65521)  # rgw_override_bucket_index_max_shards; resharding off

    @field_validator("placements")
    @classmethod
    def _names(cls, v: dict[str, PlacementSpec]) -> dict[str, PlacementSpec]:
        import re

        bad = [k for k in v if not re.match(r"^[a-z0-9][a-z0-9-]{0,30}$", k)]
        if bad:
            raise ValueError(f"placement name {bad[0]!r}: lowercase letters, digits and '-', at most 31")
        return v


class PrepSpec(StrictModel):
    pools: list[PoolSpec] = []
    images: ImagesSpec | None = None
    prefill: bool = False
    hygiene: HygieneSpec = HygieneSpec(enabled=False)
    rgw: RgwPrepSpec | None = None

    @field_validator("hygiene", mode="before")
    @classmethod
    def _hyg(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v
