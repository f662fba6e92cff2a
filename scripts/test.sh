#!/usr/bin/env bash
# `make test`: unit tests first (fast feedback), then the tests against real local clusters.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 "$@"
