#!/usr/bin/env bash
# `make test`: lint first (seconds), the engine's unit tests, then the tests; tests that need Ceph start real local clusters.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
echo "lint: ruff, cargo fmt --check, cargo clippy -D warnings"
.venv/bin/ruff check -q src tests bench
(cd engine && "$CARGO" fmt --check && "$CARGO" clippy --release --quiet -- -D warnings &&
  "$CARGO" clippy --release --quiet --no-default-features --lib --bin fathom-sampler -- -D warnings)
echo "engine unit tests: cargo test"
(cd engine && "$CARGO" test --release --quiet)
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=25 "$@"
