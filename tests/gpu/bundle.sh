#!/usr/bin/env bash
# tests/gpu/bundle.sh: gathers what the GPU checks need into one folder that runs on a machine
# without Lockstep's Debian packages (the device machine has the NVIDIA driver, the CUDA
# toolkit and Python, and no Open MPI, OpenBLAS, fmt, ...; NOTES.md):
#   bin/        lockstep, test_cuda_device and the four CUDA host tests, from a CUDA build
#   lib/        every shared library they and Open MPI's runtime load, except glibc's (the
#               machine's own) and CUDA's (cudart, cuBLAS, NCCL: the machine's toolkit or its
#               Python nvidia.* wheels; env.sh finds them there)
#   ompi/       mpirun and orted, Open MPI's and PMIx's plugins, help files and MCA defaults
#   env.sh      sourced there: CUDA library folders, LD_LIBRARY_PATH, PATH, and the
#               OPAL_* / PMIX_* variables that relocate Open MPI into the bundle
#   MANIFEST    the commit, every file with its size and origin, the glibc version needed
#   reference/  the trace of a CPU run made here (tiny, 2 ranks), to compare there
# and packs it as gpu-bundle.tar.gz (about 21 MiB; the folder is 63 MiB, OpenBLAS 36 of it).
# Usage (repository root):  tests/gpu/bundle.sh [--build DIR] [--out DIR]
#   defaults: --build build (configured with the CUDA backend: LOCKSTEP_CUDA AUTO or ON)
#             --out gpu-bundle (ignored by git; the device tool's carry names gpu-bundle.tar.gz)
# Then rehearse it here, in a root that holds nothing but glibc and the bundle:
#   tests/gpu/rehearse.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
OUT="$ROOT/gpu-bundle"
while (($#)); do
  case "$1" in
    --build) BUILD="$(realpath "$2")"; shift 2 ;;
    --out) OUT="$(realpath -m "$2")"; shift 2 ;;
    -h | --help) sed -n "2,21p" "$0"; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { printf 'bundle.sh: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'bundle.sh: %s\n' "$*"; }

# Left behind: glibc (every Linux has it; the MANIFEST names the version needed) and CUDA's
# libraries (the GPU machine's toolkit or wheels must match its driver, so ours stay here).
GLIBC_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so)'
CUDA_RE='^lib(cuda|cudart|cublas|cublasLt|nccl|curand|nvrtc|nvJitLink|nvidia-ml)\.so'
# Open MPI plugins for fabrics a one-host job never uses (UCX, libfabric, verbs, PSM) and for
# OpenSHMEM: left out with the heavy libraries they load. The job uses shared memory and TCP.
SKIP_PLUGIN_DEPS_RE='^lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|efa|psm_infinipath|psm2|infinipath|oshmem)\.so'

BINARIES=(lockstep test_cuda_device test_cuda_philox_host test_cuda_gemm_host test_cuda_math_host
  test_cuda_ops_host)
OMPI_LIB=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
PMIX_DIR=/usr/lib/x86_64-linux-gnu/pmix2
OMPI_SHARE=/usr/share/openmpi
OMPI_ETC=/etc/openmpi

[[ -f "$BUILD/CMakeCache.txt" ]] || die "no CMake build at $BUILD (hint: launch/lockstep build)"
grep -q '^LOCKSTEP_CUDA:STRING=OFF' "$BUILD/CMakeCache.txt" &&
  die "$BUILD is configured with LOCKSTEP_CUDA=OFF (hint: reconfigure with -DLOCKSTEP_CUDA=ON)"
for d in "$OMPI_LIB" "$PMIX_DIR/lib/pmix" "$OMPI_SHARE"; do
  [[ -d "$d" ]] || die "Open MPI's runtime folder $d is missing (hint: launch/lockstep setup)"
done
say "building ${BINARIES[*]} in $BUILD"
ninja -C "$BUILD" "${BINARIES[@]}" >/dev/null || die "the build failed (run ninja -C $BUILD)"
ldd "$BUILD/bin/test_cuda_device" | grep -q libcudart ||
  die "$BUILD/bin/test_cuda_device does not load libcudart: the build has no CUDA backend"

rm -rf "$OUT"
mkdir -p "$OUT"/{bin,lib} "$OUT"/ompi/{bin,lib/openmpi3,share/openmpi,etc,pmix/lib/pmix,pmix/share}
MANIFEST="$OUT/MANIFEST"
declare -A COPIED  # soname -> source, for the manifest and to copy each library once

# copy_deps FILE: copies every library FILE loads (ldd's closure) into lib/, named as asked.
copy_deps() {
  local line name path
  while read -r line; do
    [[ "$line" == *"=>"* ]] || continue
    name="${line%% =>*}"
    path="${line#*=> }"
    path="${path%% (*}"
    [[ "$name" =~ $GLIBC_RE || "$name" =~ $CUDA_RE ]] && continue
    [[ "$path" == "not found" ]] && die "$1 needs $name, which ldd cannot find here"
    [[ -n "${COPIED[$name]:-}" ]] && continue
    cp -L "$path" "$OUT/lib/$name"
    COPIED[$name]="$(readlink -f "$path")"
  done < <(LD_LIBRARY_PATH="$OUT/lib" ldd "$1")
}

for b in "${BINARIES[@]}"; do
  cp "$BUILD/bin/$b" "$OUT/bin/"
  copy_deps "$OUT/bin/$b"
done
# Open MPI: orterun is mpirun (Debian: /usr/bin/mpirun -> alternatives -> orterun).
cp -L "$(readlink -f "$(command -v mpirun)")" "$OUT/ompi/bin/mpirun"
cp -L "$(command -v orted)" "$OUT/ompi/bin/orted"
copy_deps "$OUT/ompi/bin/mpirun"
copy_deps "$OUT/ompi/bin/orted"
skipped=()
for p in "$OMPI_LIB"/*.so; do
  if ldd "$p" | awk '{print $1}' | grep -qE "$SKIP_PLUGIN_DEPS_RE"; then
    skipped+=("$(basename "$p")")
    continue
  fi
  cp -L "$p" "$OUT/ompi/lib/openmpi3/"
  copy_deps "$p"
done
for p in "$PMIX_DIR"/lib/pmix/*.so; do
  cp -L "$p" "$OUT/ompi/pmix/lib/pmix/"
  copy_deps "$p"
done
cp -rL "$PMIX_DIR/share/." "$OUT/ompi/pmix/share/"
cp -rL "$OMPI_SHARE/." "$OUT/ompi/share/openmpi/"
cp -L "$OMPI_ETC"/openmpi-mca-params.conf "$OUT/ompi/etc/"
# The hosts file mpirun reads by default lives in sysconfdir too.
cp -L "$OMPI_ETC"/openmpi-default-hostfile "$OUT/ompi/etc/" 2>/dev/null || true

cat >"$OUT/env.sh" <<'ENV'
# Sourced on the machine that runs the bundle (tests/gpu/bundle.sh wrote it):
#   source gpu-bundle/env.sh
# Finds the CUDA libraries (LOCKSTEP_CUDA_LIBS if set, else the toolkit's lib64, else the
# Python nvidia.* packages' lib folders), then puts the bundle first on LD_LIBRARY_PATH and
# PATH and relocates Open MPI (OPAL_*) and PMIx (PMIX_*) into it.
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bundle_cuda_libs() {
  local d found=()
  if [[ -n "${LOCKSTEP_CUDA_LIBS:-}" ]]; then echo "$LOCKSTEP_CUDA_LIBS"; return; fi
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e "$d/libcublas.so.13" ]] && found+=("$d")
  done
  # NCCL (and a toolkit-less cuBLAS) from PyTorch's wheels: site-packages/nvidia/*/lib.
  if command -v python3 >/dev/null; then
    while read -r d; do [[ -n "$d" ]] && found+=("$d"); done < <(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        if d not in seen and any(glob.glob(os.path.join(d, "lib*.so*"))):
            seen.add(d); print(d)
PY
)
  fi
  local IFS=:; echo "${found[*]}"
}
BUNDLE_CUDA_LIBS="$(bundle_cuda_libs)"
export LD_LIBRARY_PATH="$BUNDLE/lib${BUNDLE_CUDA_LIBS:+:$BUNDLE_CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$BUNDLE/ompi/bin:$BUNDLE/bin:$PATH"
export OPAL_PREFIX="$BUNDLE/ompi" OPAL_EXEC_PREFIX="$BUNDLE/ompi" OPAL_BINDIR="$BUNDLE/ompi/bin"
export OPAL_LIBDIR="$BUNDLE/lib" OPAL_PKGLIBDIR="$BUNDLE/ompi/lib/openmpi3"
export OPAL_DATAROOTDIR="$BUNDLE/ompi/share" OPAL_DATADIR="$BUNDLE/ompi/share"
export OPAL_PKGDATADIR="$BUNDLE/ompi/share/openmpi" OPAL_SYSCONFDIR="$BUNDLE/ompi/etc"
export PMIX_PREFIX="$BUNDLE/ompi/pmix" PMIX_EXEC_PREFIX="$BUNDLE/ompi/pmix"
export PMIX_LIBDIR="$BUNDLE/lib" PMIX_PKGLIBDIR="$BUNDLE/ompi/pmix/lib/pmix"
export PMIX_PKGDATADIR="$BUNDLE/ompi/pmix/share/pmix" PMIX_DATADIR="$BUNDLE/ompi/pmix/share"
export PMIX_MCA_mca_base_component_path="$BUNDLE/ompi/pmix/lib/pmix"
export OMPI_MCA_mca_base_component_path="$BUNDLE/ompi/lib/openmpi3"
# One host, no ssh (the GPU machine has none): the isolated launcher forks the ranks itself.
# Plugins the bundle left out stay quiet.
export OMPI_MCA_plm="isolated" OMPI_MCA_pml="ob1" OMPI_MCA_mca_base_component_show_load_errors=0
ENV
# The loopback transport and the root environment as launch/mpirun.flags spells them (each
# "--mca KEY VALUE" of MPIRUN_LOOPBACK becomes OMPI_MCA_KEY=VALUE).
# shellcheck source=/dev/null
source "$ROOT/launch/mpirun.flags"
{
  echo "# From launch/mpirun.flags: MPIRUN_LOOPBACK, MPIRUN_ROOT_ENV."
  for ((i = 0; i < ${#MPIRUN_LOOPBACK[@]}; i += 3)); do
    [[ "${MPIRUN_LOOPBACK[i]}" == --mca ]] || die "launch/mpirun.flags: MPIRUN_LOOPBACK is not --mca triples"
    echo "export OMPI_MCA_${MPIRUN_LOOPBACK[i + 1]}=${MPIRUN_LOOPBACK[i + 2]}"
  done
  echo 'if [[ "$(id -u)" == 0 ]]; then'
  echo "  export ${MPIRUN_ROOT_ENV[*]}"
  echo 'fi'
} >>"$OUT/env.sh"

# The reference the GPU machine's CPU run is compared with (run_gpu_checks.sh,
# cpu_trace_matches): tiny, 2 ranks, 3 steps, made here with this build.
ref="$OUT/reference/tiny_np2"
say "recording the reference CPU trace in $ref"
(cd "$ROOT" && "$BUILD/bin/lockstep" run --np 2 --bind none launch/configs/tiny.toml \
  --set run.steps=3 --set "run.out=$ref" >"$OUT/reference.log" 2>&1) ||
  die "the reference run failed (see $OUT/reference.log)"
find "$ref" -mindepth 1 -maxdepth 1 ! -name trace.jsonl ! -name config.toml -exec rm -rf {} +
mv "$OUT/reference.log" "$ref/run.log"

# The newest glibc symbol version anything in the bundle asks for: the machine's must be at
# least this (ldd --version there).
glibc_needed="$(find "$OUT" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + \
  2>/dev/null | grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -t. -k2 -n -u | tail -1)"
{
  echo "# Lockstep GPU bundle (tests/gpu/bundle.sh)"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%FT%TZ) on $(uname -n), build dir $BUILD"
  echo "glibc needed: ${glibc_needed#GLIBC_} or newer (here: $(ldd --version | head -1 | awk '{print $NF}'))"
  echo "left behind (the machine's own): glibc; CUDA libraries matching $CUDA_RE"
  echo "Open MPI plugins left out (fabrics, OpenSHMEM): ${skipped[*]}"
  echo "libraries:"
  for n in $(printf '%s\n' "${!COPIED[@]}" | sort); do
    printf '  %-32s %9d  %s\n' "$n" "$(stat -c %s "$OUT/lib/$n")" "${COPIED[$n]}"
  done
  echo "files:"
  (cd "$OUT" && find . -type f -printf '  %P %s\n' | sort)
  echo "total: $(du -sb "$OUT" | cut -f1) bytes"
} >"$MANIFEST"
# The device tool carries at most 64 MiB with the working tree: the folder travels packed.
tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
say "wrote $OUT ($(du -sh "$OUT" | cut -f1), ${#COPIED[@]} libraries, glibc ${glibc_needed#GLIBC_}+)"
say "and $OUT.tar.gz ($(du -sh "$OUT.tar.gz" | cut -f1)): carry it, then run there"
say "  tar xzf $(basename "$OUT").tar.gz && bash tests/gpu/run_gpu_checks.sh"
say "rehearse it: tests/gpu/rehearse.sh --bundle $OUT"
