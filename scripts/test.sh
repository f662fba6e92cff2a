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
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900)
if [ $# -gt 0 ] || [ "${FATHOM_TEST_LANES:-2}" = 1 ]; then  # named tests, or one lane asked for: one pytest
  "${pytest[@]}" --durations=25 "$@"
  exit
fi
# Two lanes side by side (tests/conftest.py: SIDE_LANE says which tests and why): the side lane in its own session,
# its output kept in a file and printed after the main lane's; an interrupted `make test` stops it too.
side_log=$(mktemp --tmpdir fathom-test-side.XXXXXX)
FATHOM_TEST_LANE=side setsid "${pytest[@]}" --durations=15 >"$side_log" 2>&1 </dev/null &
side=$!
# stopped as Ctrl-C stops a pytest (SIGINT: fixtures tear down what they started), then for good after a minute
stop_side() {
  if jobs -rp | grep -qx "$side"; then
    kill -INT -- "-$side" 2>/dev/null || true
    for _ in $(seq 60); do jobs -rp | grep -qx "$side" || break; sleep 1; done
    if jobs -rp | grep -qx "$side"; then kill -- "-$side" 2>/dev/null || true; fi
  fi
  if [ -n "$build" ] && jobs -rp | grep -qx "$build"; then kill -- "-$build"; fi
  rm -f "$side_log"
}
trap stop_side EXIT
echo "tests: two lanes side by side; the side lane's output follows the main lane's"
main_rc=0
FATHOM_TEST_LANE=main "${pytest[@]}" --durations=15 || main_rc=$?
side_rc=0
wait "$side" || side_rc=$?
echo "---- side lane ----"
cat "$side_log"
echo "lanes: main exit $main_rc, side exit $side_rc"
[ "$main_rc" = 0 ] && [ "$side_rc" = 0 ]
