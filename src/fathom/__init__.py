"""fathom: Ceph-first storage benchmarking."""

__version__ = "0.1.0"
