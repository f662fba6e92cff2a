#!/usr/bin/env bash
# `make test`: lint first (seconds), the engine's unit tests, then the tests; tests that need Ceph start real local clusters.
# The Kubernetes test bed's tests run last (FATHOM_TEST_K8S=0 leaves them out): a machine without the bed's
# binaries in its cache builds them meanwhile, at idle priority, in the background (scripts/k8s-build.sh; its log is
# beside the binaries), and the bed's first test waits for that build.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
export FATHOM_TEST_K8S=${FATHOM_TEST_K8S:-1}
build=
if [ "$FATHOM_TEST_K8S" = 1 ] && [ "$(id -u)" = 0 ]; then
  k8s=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "tests"); import k8sbed; print(k8sbed.cache_dir())')
  if [ ! -f "$k8s/bin/.complete" ]; then
    mkdir -p "$k8s"
    echo "Kubernetes test bed: building its binaries in the background (log: $k8s/build.log)"
    # idle scheduling and idle I/O: the tests beside it measure latencies and wait on fsyncs
    GO=$(bash bench/go-toolchain.sh) setsid chrt --idle 0 ionice -c 3 bash scripts/k8s-build.sh \
      >"$k8s/build.log" 2>&1 </dev/null &
    build=$!
    # an interrupted or failed `make test` does not leave the build running; the next one goes on from its caches
    trap 'if jobs -rp | grep -qx "$build"; then kill -- "-$build"; fi' EXIT
  fi
fi
CARGO="$CARGO" bash scripts/lint.sh
echo "engine unit tests: cargo test"
(cd engine && "$CARGO" test --release --quiet)
.venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=25 "$@"
