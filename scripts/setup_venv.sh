#!/usr/bin/env bash
# Create ./.venv (if missing) and install the project with the given extras.
# torch comes first, pinned: the CPU wheel where pip's find-links holds it (the project's
# machines), PyPI's CUDA build elsewhere (README's Set up); a torch already in .venv is kept.
# The package itself only declares a range, so a CUDA machine keeps its own torch.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
# habitat-lab (pure Python) is the real client of our episode files in the interop tests; its
# wheel pins numpy==1.26.4 and pulls the simulator stack, so it cannot be an extra: installed
# without its dependencies, imported by tests/habitat_lab_stub.py with those stubbed.
if [[ ",$extras," == *",test,"* ]]; then
  .venv/bin/python -m pip install -q --no-deps habitat-lab==0.3.320260507
fi
