#!/usr/bin/env bash
# Install, then run the main job on built-in demo data (see `bps-assets demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh warp
.venv/bin/bps-assets demo "${@:-demo_out}"
