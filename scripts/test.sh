#!/usr/bin/env bash
# Install with the test extras, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh test
.venv/bin/python -m pytest -q -n 2 "$@"
