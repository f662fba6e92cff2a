"""A process that shares one results store with others (tests/test_store.py starts several).

    python store_worker.py write DB N ROUNDS POINTS DIR   -> ROUNDS runs of POINTS points, each with its detail
    python store_worker.py read DB DIR                    -> reads runs and points until DIR/stop exists

Once imported, every process says so (DIR/ready-<pid>), then waits for DIR/go before touching DB,
so that all open it at the same moment (the first ones create it). Any exception ends the process with a
non-zero exit code.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from fathom.results import hdr
from fathom.results.store import Store

HOSTS = ("client-a", "client-b")
INSTANCES = 2
OPS = ("read", "write")


def hist(values_ns: list[int]) -> str:
    h = hdr.new()
    for v in values_ns:
        h.record_value(v)
    return hdr.encode(h)


def wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.001)


def write(db: str, n: int, rounds: int, points: int) -> None:
    for rnd in range(rounds):
        with Store(db) as st:
            run = st.create_run(f"w{n}-r{rnd}", kind="bench", env={"writer": n})
            for i in range(points):
                intervals = [{"ts": 1000.0 + s, "t": float(s), "iops": 100.0 * i + s, "host": h, "instance": k}
                             for s in range(3) for h in HOSTS for k in range(INSTANCES)]
                hists = {(op, h, k): hist([1000 * (i + 1), 2000 * (k + 1)]) for op in OPS for h in HOSTS
                         for k in range(INSTANCES)}
                telemetry = [{"ts": 1000.5, "source": f"osd.{h}", "host": h, "cpu_pct": 10.0, "kind": "osd"}
                             for h in HOSTS]
                st.record_point(run, i, f"p{i}", "w", "fathom-engine", {"iodepth": i + 1}, "done",
                                metrics={"iops": float(i)}, intervals=intervals, histograms=hists,
                                telemetry=telemetry, perf_counters={"osd.0": {"op": i}},
                                events=[{"kind": "note", "message": f"point {i}"}])
            st.merge_env(run, rounds_done=rnd + 1)
            st.finish_run(run, "done")


def read(db: str, stop: Path) -> None:
    passes = 0
    while not stop.exists() or passes == 0:
        with Store(db) as st:
            for run in st.runs():
                for p in st.points(run.id):
                    # a point is stored with all its detail or not at all
                    n = len(st.intervals(p["id"]))
                    assert n == 3 * len(HOSTS) * INSTANCES, (run.name, p["key"], n)
                    assert set(st.histograms(p["id"])) == set(OPS), (run.name, p["key"])
                    assert len(st.histograms_by_instance(p["id"])) == len(OPS) * len(HOSTS) * INSTANCES
        passes += 1
    print(passes)


def main() -> None:
    cmd, db = sys.argv[1], sys.argv[2]
    folder = Path(sys.argv[-1])
    (folder / f"ready-{os.getpid()}").touch()
    wait_for(folder / "go")
    if cmd == "write":
        write(db, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        read(db, folder / "stop")


if __name__ == "__main__":
    main()
