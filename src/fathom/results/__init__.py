"""Results: the store, and what every writer and reader of it agrees on, from a point's records to exported tables.

store.py      one SQLite file (WAL, versioned schema): every run, point, interval, histogram and sample
migrate.py    the store's schema steps, one function each
model.py      the shapes adapters, the store, analysis and reports agree on: PointResult, METRIC_COLUMNS
hdr.py        HDR latency histograms: decode, merge (exactly), percentiles
merge.py      the exact merge of many engines' records into one point
series.py     interval records as a rate series (IOPS, MiB/s, p99), many engines merged by tick
usage.py      a point's telemetry samples summed over its window (per daemon kind, per host); perf counter deltas
studies.py    the study sections' names: what a suite's `report:` may name and a run records
export.py     `fathom export`: the points table and the long tables as CSV, JSON or Parquet
importers.py  `fathom import`: fio JSON, rados bench JSON, published tables
"""
