#!/usr/bin/env bash
# Create ./.venv (if missing) and install the project with the given extras.
# torch comes first, pinned to the CPU wheel on this machine's disk; the package itself
# only declares a range, so a CUDA machine keeps its own torch.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
