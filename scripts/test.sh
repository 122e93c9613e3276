#!/usr/bin/env bash
# Install with the test extras, then run the whole test suite; with no arguments, run the tests
# that reach oneDNN (the policy's convolutions and LSTM: training, evaluation, the encoder) once
# more with oneDNN limited to AVX2, so a CPU with AVX-512 also checks the code paths of CPUs
# without it (oneDNN picks kernels by ISA: issue 13 item 1). The runtime's torch ops are ATen's
# own kernels, which ONEDNN_MAX_CPU_ISA does not change: they run once.
# tests/test_test_sh.py keeps AVX2_FILES equal to the test files that run the policy.
set -euo pipefail
cd "$(dirname "$0")/.."
AVX2_FILES="tests/test_hostile_runs.py tests/test_instance_imagenav_task.py tests/test_objectnav_categories.py
    tests/test_objectnav_make.py tests/test_objectnav_partial_semantics.py tests/test_scene_rotation.py
    tests/test_task_seam.py tests/test_train_ddp_update.py tests/test_train_learner.py tests/test_train_onednn.py
    tests/test_train_output_safety.py tests/test_train_smoke.py tests/test_train_stem.py tests/test_train_units.py
    tests/test_video.py"
bash scripts/setup_venv.sh test
.venv/bin/python -m pytest -q -n 2 "$@"
if [ $# -eq 0 ]; then
    # shellcheck disable=SC2086  # a list of paths without spaces
    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python -m pytest -q -n 2 $AVX2_FILES
fi
