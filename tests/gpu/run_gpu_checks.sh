#!/usr/bin/env bash
# GPU checks of the CUDA backend (issue 7), meant for the device machine (one H200):
#   run from the repository root:   bash tests/gpu/run_gpu_checks.sh
# It builds with the CUDA backend, runs the GPU kernel tests (every deterministic kernel
# against its CPU counterpart bit for bit, twice), the GEMM benchmark (canonical invariant-mode
# kernel vs cuBLAS deterministic vs cuBLAS fast) and PyTorch's fp32 GEMM on the same shapes,
# writes logs under $OUT (default ./gpu-out) and ends with a short table.
#
# UNTESTED: written on a machine without a GPU; it has never run. What it does NOT do, because
# Lockstep has no device training path yet (runtime/cuda has the kernels, not a GPU Gpt):
# G1/G2/G3 training runs on the GPU, the CPU-vs-GPU tiny-config comparison (G5) and the
# training-level determinism tax. The table says so instead of printing numbers.
set -uo pipefail

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG="$OUT/run_gpu_checks.log"
: >"$LOG"
declare -A STATUS

step() {  # step NAME COMMAND...: runs, logs, records PASS/FAIL
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  if "$@" >>"$LOG" 2>&1; then
    STATUS[$name]="PASS ($((SECONDS - t0)) s)"
  else
    STATUS[$name]="FAIL rc=$? ($((SECONDS - t0)) s, see run_gpu_checks.log)"
  fi
  echo "   -> ${STATUS[$name]}" | tee -a "$LOG"
}

step device nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true

step configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON \
  -DLOCKSTEP_BUILD_BENCH=OFF
step build ninja -C "$BUILD" -j"$JOBS" test_cuda_device test_cuda_philox_host test_cuda_gemm_host \
  test_cuda_ops_host

BIN="$BUILD/bin"
export LOCKSTEP_REQUIRE_GPU=1  # test_cuda_device fails (not skips) when it sees no GPU
# Host-side equivalence tests (the same ones CI runs), then the GPU tests twice (run-to-run).
step host_tests bash -c "$BIN/test_cuda_philox_host && $BIN/test_cuda_gemm_host && $BIN/test_cuda_ops_host"
step gpu_tests_run1 "$BIN/test_cuda_device" -s -r compact --out "$OUT/gpu_tests_run1.txt"
step gpu_tests_run2 "$BIN/test_cuda_device" -r compact --out "$OUT/gpu_tests_run2.txt"
# The no-GPU refusal path must also hold: hide the GPU and expect the clear error.
step gpu_hidden_refusal env -u LOCKSTEP_REQUIRE_GPU CUDA_VISIBLE_DEVICES= "$BIN/test_cuda_device" "[cuda][device]"

# GEMM throughput: canonical (invariant) vs cuBLAS deterministic vs cuBLAS fast.
step gemm_bench bash -c "'$BIN/test_cuda_device' '[.bench]' -s > '$OUT/gemm_bench.txt' 2>&1"

# PyTorch fp32 GEMM on the same shapes (TF32 off, as cuBLAS deterministic; then TF32 on).
cat >"$OUT/torch_gemm.py" <<'PY'
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
def bench(M, N, K, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda")
    torch.matmul(a, b); torch.cuda.synchronize()
    t0 = time.perf_counter(); reps = 5
    for _ in range(reps): torch.matmul(a, b)
    torch.cuda.synchronize()
    return 2.0 * M * N * K / ((time.perf_counter() - t0) / reps) * 1e-12
print("torch", torch.__version__, torch.cuda.get_device_name())
for d in (1024, 4096):
    print(f"GEMM 8192x{d}x{d} TFLOP/s: torch fp32 {bench(8192, d, d, False):.2f}, "
          f"torch tf32 {bench(8192, d, d, True):.2f}")
PY
step torch_gemm bash -c "python3 '$OUT/torch_gemm.py' > '$OUT/torch_gemm.txt' 2>&1"

{
  echo "| check | result |"
  echo "|---|---|"
  for k in device configure build host_tests gpu_tests_run1 gpu_tests_run2 gpu_hidden_refusal \
    gemm_bench torch_gemm; do
    echo "| $k | ${STATUS[$k]:-not run} |"
  done
  echo "| G1/G2/G3 training on the GPU | not available: no device training path yet |"
  echo "| G5 CPU vs GPU, tiny config | not available: no device training path yet |"
  echo "| training tax fast/deterministic/invariant vs PyTorch | not available (GEMM-level numbers below) |"
  echo
  echo "GEMM (from gemm_bench.txt and torch_gemm.txt):"
  grep -h "TFLOP/s" "$OUT/gemm_bench.txt" "$OUT/torch_gemm.txt" 2>/dev/null | sed 's/^[^G]*GEMM/GEMM/'
} | tee "$OUT/summary.md"
