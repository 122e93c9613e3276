#!/usr/bin/env bash
# Issue 11's checks that need a lent GPU machine (H100/H200, 16 cores), one stage per device
# command so that each stays inside the device tool's 600 s. After ../shared/gpu/README.md's
# two install commands (the second one may go straight on with `&& bash benchmarks/gpu_checks.sh data tests`):
#
#   export PYTHONPATH=$PWD:/tmp/site
#   bash benchmarks/gpu_checks.sh data tests     # ~2 min: 12 Gibson-size synth scenes; CUDA tests
#                                                # (tests needs warp-clang: benchmarks/gpu_prepare_clang.sh)
#   bash benchmarks/gpu_checks.sh render         # ~30 s: the Warp render kernels at 4,096 agents
#   bash benchmarks/gpu_checks.sh env train      # ~5 min: env step / render at 1,024-16,384 envs; bps-train at 4,096
#   bash benchmarks/gpu_checks.sh threads        # ~5 min: CPU render scaling and step / render at 1-15 threads
#
# Every stage writes its log to $OUT (the device tool brings that folder back) or /tmp/bps_gpu_out,
# and prints the goal lines (PASS / FAIL). The dataset lives in $BPS_GPU_DATA (/tmp/bps_gpu) and is
# reused while the machine stays up. The same stages run on a CPU-only machine with DEVICE=cpu
# (slowly: use it to check the script, not for figures), with small sizes, e.g. ENVS=64 STEPS=3
# SCENES=2 TRAIN_ENVS=32 TRAIN_UPDATES=1 THREADS="1 2" RENDER_ENVS=64 GROUP_ENVS=32 PROFILE_ENVS=32
# THREAD_ENVS=64 THREAD_STEPS=3.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
DATA=${BPS_GPU_DATA:-/tmp/bps_gpu}
LOGS=${OUT:-/tmp/bps_gpu_out}
DEVICE=${DEVICE:-cuda}
ENVS=${ENVS:-"1024 4096 16384"}
STEPS=${STEPS:-100}
TRAIN_ENVS=${TRAIN_ENVS:-4096}
TRAIN_UPDATES=${TRAIN_UPDATES:-8}
THREADS=${THREADS:-"1 2 4 8 15"}
SCENES=${SCENES:-12}
GROUP_ENVS=${GROUP_ENVS:-2048}     # env stage: envs per group of the 1- / 2-group runs
PROFILE_ENVS=${PROFILE_ENVS:-1024} # env stage: envs of the profiled step
THREAD_ENVS=${THREAD_ENVS:-1024}   # threads stage: envs and timed steps per thread count
THREAD_STEPS=${THREAD_STEPS:-40}
MANIFEST=$DATA/out/manifest.json
mkdir -p "$LOGS"
[ $# -gt 0 ] || { sed -n '2,18p' "$0"; exit 2; }

bps_assets() { "$PY" -c "from cli.main import main; main()" "$@"; }
log() { tee -a "$LOGS/$1.log"; }

need_data() {
  [ -f "$MANIFEST" ] || { echo "no dataset at $DATA: run the 'data' stage first" >&2; exit 2; }
}

for stage in "$@"; do
  echo "== $stage ($(date -u +%H:%M:%S), device $DEVICE)" | log "$stage"
  case $stage in
    data)
      # bench_env builds (or reuses) the synthetic dataset, then a 2-step smoke run on it
      "$PY" benchmarks/bench_env.py --synth "$DATA" --synth-scenes "$SCENES" --synth-size gibson \
        --device "$DEVICE" --num-envs 64 --steps 2 --warmup 1 2>&1 | log data
      ;;
    tests)
      "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | log tests
      # the CUDA-only tests (sync-debug step, counts on CUDA) and the Warp renderer's
      "$PY" -m pytest -q -p no:cacheprovider -p no:xdist tests/test_step_counts.py \
        tests/test_capture_graph.py tests/test_runtime_warp_batch.py tests/test_fused_step.py tests/test_runtime_render.py \
        tests/test_noise_cuda.py tests/test_warp_cuda_threads.py 2>&1 | log tests    # noise on CUDA vs the CPU (issue 33); loader threads (warp#1491)
      ;;
    env)
      need_data
      for n in $ENVS; do
        "$PY" benchmarks/bench_env.py "$MANIFEST" --device "$DEVICE" --num-envs "$n" --steps "$STEPS" \
          --count-steps 3 --capture-graph 2>&1 | log env
        "$PY" benchmarks/bench_env.py "$MANIFEST" --device "$DEVICE" --num-envs "$n" --steps "$STEPS" \
          --count-steps 0 2>&1 | log env
      done
      # 2 groups stepped in turn (bps-train's): with the host's bookkeeping once per round, at
      # round r's start it waits for round r-1's start event, so the GPU may run ~G steps ahead
      # instead of 2G-1 (docs/PERFORMANCE.md, "Fused step"): compare the pipelined line with the
      # 1-group run of as many envs per step (the 2,048-env row below)
      for g in 1 2; do
        "$PY" benchmarks/bench_env.py "$MANIFEST" --device "$DEVICE" --num-envs $((GROUP_ENVS * g)) --groups "$g" \
          --steps "$STEPS" --count-steps 0 2>&1 | log env
      done
      # the CUDA driver calls of one 1,024-env step, as the torch profiler counts them (as issue 11 did)
      for cap in "" --capture-graph; do
        "$PY" benchmarks/profile_step.py "$MANIFEST" --device "$DEVICE" --num-envs "$PROFILE_ENVS" $cap 2>&1 | log env
      done
      ;;
    train)
      need_data
      rollout=32
      total=$((TRAIN_ENVS * rollout * TRAIN_UPDATES))
      rm -rf "$DATA/ppo"
      "$PY" -m bps_train.train --dataset "$MANIFEST" --device "$DEVICE" --renderer warp \
        --num-envs "$TRAIN_ENVS" --rollout-steps "$rollout" --total-steps "$total" \
        --out-dir "$DATA/ppo" --no-resume --log-every 1 --save-every 1000 --sim-only-steps 20 2>&1 | log train
      # the same with each group's step and frame replayed as a captured CUDA graph
      rm -rf "$DATA/ppo"
      "$PY" -m bps_train.train --dataset "$MANIFEST" --device "$DEVICE" --renderer warp \
        --num-envs "$TRAIN_ENVS" --rollout-steps "$rollout" --total-steps "$total" --capture-graph \
        --out-dir "$DATA/ppo" --no-resume --log-every 1 --save-every 1000 --sim-only-steps 20 2>&1 | log train
      ;;
    render)
      need_data
      # depth kernel vs the general kernel's depth vs RGB + semantic, device ms per frame (one process)
      "$PY" benchmarks/bench_warp_render.py "$MANIFEST" --device "$DEVICE" --num-envs "${RENDER_ENVS:-4096}" 2>&1 | log render
      ;;
    threads)
      need_data
      "$PY" benchmarks/bench_threads.py "$MANIFEST" --threads $THREADS --num-envs "$THREAD_ENVS" \
        --steps "$THREAD_STEPS" 2>&1 | log threads
      ;;
    *)
      echo "unknown stage '$stage' (data, tests, render, env, train, threads)" >&2; exit 2
      ;;
  esac
done
