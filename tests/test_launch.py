"""The peer tools' launcher: streamed lines, rusage, timeout, and Ctrl-C keeping final output."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from fathom.engines import launch
from fathom.errors import FathomError

PY = sys.executable


def test_lines_stream_as_they_come_and_cpu_is_measured():
    seen: list[tuple[float, str]] = []
    code = ("import sys, time\nprint('first', flush=True)\ntime.sleep(0.5)\nsum(range(3_000_000))\n"
            "print('second\\rthird', flush=True)\nsys.exit(3)")
    res = launch.run([PY, "-c", code], on_line=lambda ln: seen.append((time.monotonic(), ln)), split_cr=True)
    assert [ln for _, ln in seen] == ["first", "second", "third"]
    assert seen[1][0] - seen[0][0] > 0.3  # the first line arrived before the child ended
    assert res.rc == 3 and res.user_s > 0 and res.host == "local" and res.wall_s >= 0.5


def test_timeout_stops_the_child_by_pid():
    pids: list[int] = []
    with pytest.raises(FathomError, match="did not finish within 1 s"):
        launch.run([PY, "-c", "import time; time.sleep(60)"], timeout=1, on_start=lambda c: pids.append(c.pid))
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_ctrl_c_keeps_what_the_child_writes_as_it_winds_down():
    # the child writes its final record when told to stop, as fathom-engine writes its summary on SIGTERM
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('summary', flush=True), sys.exit(0)))\n"
            "print('running', flush=True)\ntime.sleep(60)")
    lines: list[str] = []

    def on_line(ln: str) -> None:
        lines.append(ln)
        if ln == "running":  # the child's handler is in place: now the user presses Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)

    def wind_down(child: launch.Child) -> float:
        child.signal(signal.SIGTERM)
        return 10.0

    # a shell starts background jobs (CI may be one) with SIGINT ignored, and Python then leaves it ignored
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as ei:
            launch.run([PY, "-c", code], on_line=on_line, on_interrupt=wind_down, timeout=60)
    finally:
        signal.signal(signal.SIGINT, old)
    assert lines == ["running", "summary"]
    assert ei.value.child_run.rc == 0  # type: ignore[attr-defined]
