#!/usr/bin/env bash
# GPU checks of the CUDA backend, for the device machine (one H200). That machine has no
# Debian packages of ours, so nothing is built there: tests/gpu/bundle.sh builds here and
# gathers the binaries, their libraries and Open MPI into gpu-bundle/, which travels (the
# device tool's carry). Run from the repository root:
#   bash tests/gpu/run_gpu_checks.sh            (BUNDLE=gpu-bundle, OUT=./gpu-out)
# It checks that the bundle loads, runs the CUDA host tests, the GPU kernel tests twice (every
# deterministic kernel against its CPU counterpart bit for bit), the hidden-GPU refusal, a CPU
# training run through the bundle's mpirun compared byte for byte with the trace made where
# the bundle was built (the CPU contract across machines), the GEMM benchmark (canonical
# invariant-mode kernel vs cuBLAS deterministic vs cuBLAS fast) and PyTorch's fp32 GEMM on the
# same shapes, writes logs under $OUT and ends with a table ($OUT/summary.md).
# REHEARSAL=1 (tests/gpu/rehearse.sh, on a machine without a GPU) runs the same script minus
# the steps that need the GPU, nvidia-smi or PyTorch, and expects test_cuda_device's refusal.
#
# Not here, because Lockstep has no device training path yet (runtime/cuda has kernels, not a
# GPU Gpt): G1/G2/G3 training runs on the GPU, CPU-vs-GPU tiny traces (G5) and the
# training-level determinism tax. The table says so instead of printing numbers.
set -uo pipefail

BUNDLE=$(realpath "${BUNDLE:-gpu-bundle}")
OUT=${OUT:-$PWD/gpu-out}
REHEARSAL=${REHEARSAL:-0}
mkdir -p "$OUT"
LOG="$OUT/run_gpu_checks.log"
: >"$LOG"
declare -A STATUS
ORDER=()

step() {  # step NAME COMMAND...: runs, logs, records PASS/FAIL and the seconds
  local name=$1
  shift
  ORDER+=("$name")
  echo "== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS rc=0
  "$@" >>"$LOG" 2>&1 || rc=$?
  if ((rc == 0)); then
    STATUS[$name]="PASS ($((SECONDS - t0)) s)"
  else
    STATUS[$name]="FAIL rc=$rc ($((SECONDS - t0)) s, see run_gpu_checks.log)"
  fi
  echo "   -> ${STATUS[$name]}" | tee -a "$LOG"
}
skip() { ORDER+=("$1"); STATUS[$1]="skipped: $2"; }

if [[ ! -f "$BUNDLE/env.sh" ]]; then
  echo "run_gpu_checks.sh: no bundle at $BUNDLE (hint: run tests/gpu/bundle.sh where Lockstep" \
    "builds, carry gpu-bundle.tar.gz, then tar xzf gpu-bundle.tar.gz here)" >&2
  exit 1
fi
# shellcheck source=/dev/null
source "$BUNDLE/env.sh"
{
  echo "bundle: $BUNDLE"
  head -4 "$BUNDLE/MANIFEST"
  echo "CUDA library folders: ${BUNDLE_CUDA_LIBS:-none found}"
  echo "glibc here: $(ldd --version 2>/dev/null | head -1)"
} | tee -a "$LOG"

# Every library each binary loads resolves (the bundle's, glibc, CUDA's found above).
bundle_loads() {
  local b bad=0
  for b in "$BUNDLE"/bin/* "$BUNDLE"/ompi/bin/*; do
    if ldd "$b" | grep "not found"; then
      echo "$b: libraries not found (above)"
      bad=1
    fi
  done
  return $bad
}
# A CPU run through the bundle's mpirun (2 ranks, shared memory) equals, byte for byte, the
# trace bundle.sh recorded on the machine that built it.
cpu_trace_matches() {
  # Outside $OUT: the device tool brings back at most 8 files from there (this script's 7).
  local run="${TMPDIR:-/tmp}/lockstep-gpu-checks/cpu_tiny_np2"
  rm -rf "$run"
  lockstep run --np 2 --bind none launch/configs/tiny.toml --set run.steps=3 \
    --set "run.out=$run" || return 1
  cmp "$run/trace.jsonl" "$BUNDLE/reference/tiny_np2/trace.jsonl" &&
    echo "trace.jsonl identical to the bundle's reference ($(wc -l <"$run/trace.jsonl") lines)"
}

if ((REHEARSAL)); then
  skip device "rehearsal (no GPU here)"
else
  step device nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
fi
step bundle_loads bundle_loads
step host_tests bash -c \
  "test_cuda_philox_host && test_cuda_gemm_host && test_cuda_math_host && test_cuda_ops_host"
if ((REHEARSAL)); then
  # Without a GPU the device test checks the clear refusal (LOCKSTEP_REQUIRE_GPU unset).
  step gpu_tests_refusal test_cuda_device -r compact
else
  # LOCKSTEP_REQUIRE_GPU: a GPU the test cannot see is a failure, not a skip.
  step gpu_tests_run1 env LOCKSTEP_REQUIRE_GPU=1 test_cuda_device -s -r compact \
    --out "$OUT/gpu_tests_run1.txt"
  step gpu_tests_run2 env LOCKSTEP_REQUIRE_GPU=1 test_cuda_device -r compact \
    --out "$OUT/gpu_tests_run2.txt"
  # The no-GPU refusal must also hold: hide the GPU and expect the clear error.
  step gpu_hidden_refusal env CUDA_VISIBLE_DEVICES= test_cuda_device "[cuda][device]"
fi
step cpu_trace_matches cpu_trace_matches

if ((REHEARSAL)); then
  skip gemm_bench "rehearsal"
  skip torch_gemm "rehearsal"
else
  # GEMM throughput: canonical (invariant) vs cuBLAS deterministic vs cuBLAS fast.
  step gemm_bench bash -c "test_cuda_device '[.bench]' -s > '$OUT/gemm_bench.txt' 2>&1"
  # PyTorch fp32 GEMM on the same shapes (TF32 off, as cuBLAS deterministic; then TF32 on).
  step torch_gemm bash -c "python3 tests/gpu/torch_gemm.py > '$OUT/torch_gemm.txt' 2>&1"
fi

{
  echo "| check | result |"
  echo "|---|---|"
  for k in "${ORDER[@]}"; do echo "| $k | ${STATUS[$k]} |"; done
  echo "| G1/G2/G3 training on the GPU | not available: no device training path yet |"
  echo "| G5 CPU vs GPU, tiny config | not available: no device training path yet |"
  echo "| training tax fast/deterministic/invariant vs PyTorch | not available (GEMM-level numbers below) |"
  echo
  echo "GEMM (from gemm_bench.txt and torch_gemm.txt):"
  grep -h "TFLOP/s" "$OUT/gemm_bench.txt" "$OUT/torch_gemm.txt" 2>/dev/null | sed 's/^[^G]*GEMM/GEMM/'
} | tee "$OUT/summary.md"
for k in "${ORDER[@]}"; do [[ "${STATUS[$k]}" == FAIL* ]] && exit 1; done
exit 0
