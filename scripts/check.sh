#!/usr/bin/env bash
# `make check`, for everyday work (under 3 minutes): lint, the package's shape, and every test that starts no
# Ceph daemon, test bed or browser (tests/conftest.py: check_only). `make test` runs them all, as CI does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh
FATHOM_CHECK=1 .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=300 --durations=10 "$@"
