#!/usr/bin/env bash
# Lint, as `make check` and `make test` run it first (seconds once cargo's cache is warm).
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
echo "lint: ruff, cargo fmt --check, cargo clippy -D warnings"
.venv/bin/ruff check -q src tests bench
(cd engine && "$CARGO" fmt --check && "$CARGO" clippy --release --quiet -- -D warnings &&
  "$CARGO" clippy --release --quiet --no-default-features --lib --bin fathom-sampler -- -D warnings)
