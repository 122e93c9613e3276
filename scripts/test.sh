#!/usr/bin/env bash
# Install with the test extras, then run the whole test suite; with no arguments, run the
# torch-touching tests once more with oneDNN limited to AVX2, so a CPU with AVX-512 also checks
# the code paths of CPUs without it (oneDNN picks kernels by ISA: issue 13 item 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh test
.venv/bin/python -m pytest -q -n 2 "$@"
if [ $# -eq 0 ]; then
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python -m pytest -q -n 2 tests/test_train_*.py tests/test_runtime_*.py \
        tests/test_goalnav_step.py tests/test_objectnav_make.py tests/test_semantic_env.py \
        tests/test_fused_step.py tests/test_seeded_swaps.py tests/test_video.py tests/test_video_goals.py \
        tests/test_env_config.py tests/test_trace_stable.py tests/test_step_threads.py tests/test_capture_graph.py \
        tests/test_objectnav_end_to_end.py
fi
