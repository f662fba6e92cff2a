"""The Kubernetes test bed itself (tests/k8sbed.py): it starts, runs a pod from a locally built image, and its
stop leaves this host as it found it, also after a bed that was never stopped.

Only with FATHOM_TEST_K8S=1: a fresh machine builds Kubernetes first (minutes), which the default suite's
time budget has no room for.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

import k8sbed

pytestmark = [
    pytest.mark.skipif(os.environ.get("FATHOM_TEST_K8S") != "1",
                       reason="Kubernetes test bed: set FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes once, "
                              "6 to 12 minutes)"),
    pytest.mark.skipif(k8sbed.available() is not None, reason=f"Kubernetes test bed: {k8sbed.available()}"),
]

SYSCTLS = ["net/ipv4/ip_forward", *(f"{k}" for k in k8sbed.KUBELET_SYSCTLS)]
# nc, not wget: static busybox's wget asks glibc's NSS for names, which the image does not have
POD = """apiVersion: v1
kind: Pod
metadata: {name: hello, labels: {app: fathom-bed-test}}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 %s %d | grep -q 200 && echo reached-host;
              sleep 3600"]
"""


def _host_state(state: Path) -> dict[str, object]:
    """What the bed must leave as found: the sysctls, the hard-coded host paths, its bridge, mounts (other
    jobs on this machine make links and mounts of their own: only the bed's are compared)."""
    mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()]
    return {"sysctls": {s: Path(f"/proc/sys/{s}").read_text().strip() for s in SYSCTLS},
            "paths": {p: os.path.lexists(p) for p in k8sbed.HOST_PATHS},
            "bridge": subprocess.run(["ip", "link", "show", "fk8sbr0"], capture_output=True).returncode == 0,
            "mounts": [m for m in mounts if m.startswith((str(state), *k8sbed.HOST_PATHS))],
            "shims": [ln for ln in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
                      .splitlines() if "containerd-shim" in ln and str(state) in ln]}


@pytest.fixture(scope="module")
def built():
    k8sbed.ensure_built()


def test_a_pod_runs_reaches_the_host_and_the_stop_leaves_nothing(built):
    import http.server
    import threading

    bed = k8sbed.K8sBed()  # its state directory's path is short: unix sockets are made under it
    before = _host_state(bed.dir)
    with bed:
        t = bed.timings
        print(f"k8s bed usable in {t['usable']:.1f} s ({', '.join(f'{k} {v:.1f}' for k, v in t.items())})")
        assert bed.kubectl("get", "nodes", "-o", "name").stdout.strip() == f"node/{bed.node}"
        srv = http.server.HTTPServer((bed.node_ip, 0), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            bed.kubectl("apply", "-f", "-", input=POD % (k8sbed.MINIMAL_IMAGE, bed.node_ip, srv.server_port))
            deadline = time.monotonic() + 90
            log = ""
            while time.monotonic() < deadline and "reached-host" not in log:
                time.sleep(0.5)
                log = bed.kubectl("logs", "hello", check=False).stdout
            assert "reached-host" in log, bed.kubectl("describe", "pod", "hello", check=False).stdout
            out = bed.kubectl("exec", "hello", "--", "/bin/sh", "-c", "cat /proc/sys/vm/overcommit_memory; "
                              "ls /var/run/secrets/kubernetes.io/serviceaccount/token").stdout
            assert "token" in out  # the service account's volume reached the container (rshared kubelet root)
        finally:
            srv.shutdown()
        # during the run, too, the host's sysctls are its own
        assert {s: Path(f"/proc/sys/{s}").read_text().strip() for s in SYSCTLS} == before["sysctls"]
    print(f"k8s bed stopped in {bed.timings['stop']:.1f} s")
    assert _host_state(bed.dir) == before
    assert not bed.dir.exists()


def test_the_next_start_removes_what_a_crashed_bed_left(built):
    first = k8sbed.K8sBed()
    before = _host_state(first.dir)
    first.start()
    pids = [p for p, _ in first._rec["pids"].values()]
    first._lock.close()  # as if its process had died without stopping anything
    second = k8sbed.K8sBed()
    with second:
        assert all(not _running(p) for p in pids)
        assert second._ok("get", "--raw", "/readyz")
    assert _host_state(second.dir) == before


def _running(pid: int) -> bool:
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return st != "Z"
