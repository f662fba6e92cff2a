"""How tests/data/results-v1.db was made: the results store code at schema 1, run once.

    git show 0d9d53f:src/fathom/results/store.py > /tmp/store_v1.py
    PYTHONPATH=src python tests/data/make_results_v1.py /tmp/store_v1.py tests/data/results-v1.db

tests/test_store.py checks that this file opens with the current code, upgraded, with every value below intact.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path

from fathom.results import hdr


def hist(values_ns: list[int]) -> str:
    h = hdr.new()
    for v in values_ns:
        h.record_value(v)
    return hdr.encode(h)


def main(store_py: str, out: str) -> None:
    spec = importlib.util.spec_from_file_location("store_v1", store_py)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["store_v1"] = mod  # dataclasses look the module up
    spec.loader.exec_module(mod)
    assert mod.SCHEMA_VERSION == 1
    Path(out).unlink(missing_ok=True)
    st = mod.Store(out)
    run = st.create_run("v1-suite", suite="quick", suite_yaml="name: quick\n", env={"host": {"cores": 2}})
    for i, qd in enumerate((1, 4)):
        st.record_point(
            run, i, f"randread4k/iodepth={qd}", "randread4k", "fathom-engine",
            {"rw": "randread", "bs": 4096, "iodepth": qd, "numjobs": 1}, "done",
            metrics={"iops": 1000.0 * qd, "lat_mean_us": 500.0 + qd}, result={"engine": "fathom-engine"},
            gate={"ok": True}, started=1000.0 + i, ended=1010.0 + i,
            intervals=[{"ts": 1001.0 + i, "t": 1.0, "ramp": True, "iops": 900.0 * qd},
                       {"ts": 1002.0 + i, "t": 2.0, "iops": 1000.0 * qd}],
            histograms={"read": hist([100_000 * qd, 200_000 * qd, 300_000 * qd])},
            telemetry=[{"ts": 1001.5 + i, "source": "osd.0", "kind": "osd", "pid": 42, "cpu_pct": 30.0,
                        "cores": 0.3, "rss_mib": 512.0}],
            perf_counters={"osd.0": {"osd.op_r": 100 * qd}}, events=[{"kind": "health", "message": "ok", "ts": 999.0}])
    st.finish_run(run, "done")
    bench = st.create_run("v1-bench", kind="bench", env={"command": ["fathom", "bench", "rados"]})
    pid = st.save_point(bench, 0, "rados-write", "rados-write", "fathom-engine", {"bs": 4096}, "done",
                        metrics={"iops": 321.0}, started=2000.0, ended=2010.0)
    st.add_intervals(pid, [{"ts": 2001.0, "t": 1.0, "iops": 320.0}])
    st.add_histograms(pid, {"write": hist([1_000_000]), "read": hist([2_000_000]),
                            "all": hist([1_000_000, 2_000_000])})
    st.add_event(bench, "error", "one slow op", point_id=pid, ts=2005.0)
    st.finish_run(bench, "done")
    st.close()
    # one self-contained file: no -wal beside it
    db = sqlite3.connect(out)
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
