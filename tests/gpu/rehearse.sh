#!/usr/bin/env bash
# tests/gpu/rehearse.sh: runs the GPU checks' script (tests/gpu/run_gpu_checks.sh, REHEARSAL=1)
# against the bundle (tests/gpu/bundle.sh) in a root that holds nothing else: glibc, the shell
# tools the scripts call (and their own libraries), the repository read-only, the bundle, and
# the CUDA toolkit's lib64 in the place the GPU machine has it. No Debian package of ours is
# visible there, so a library or Open MPI file the bundle lacks fails here, not in GPU minutes.
# Then every file the bundle holds is checked with ldd inside that root: nothing may resolve
# outside the bundle, glibc and the CUDA folder.
# Needs root (a private mount namespace and chroot). Usage (repository root):
#   tests/gpu/rehearse.sh [--bundle DIR] [--out DIR]      (defaults: gpu-bundle, gpu-rehearsal)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$ROOT/gpu-bundle"
OUTDIR="$ROOT/gpu-rehearsal"
while (($#)); do
  case "$1" in
    --bundle) BUNDLE="$(realpath "$2")"; shift 2 ;;
    --out) OUTDIR="$(realpath -m "$2")"; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "rehearse.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { printf 'rehearse.sh: error: %s\n' "$*" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || die "needs root for a mount namespace and chroot (hint: sudo)"
[[ -f "$BUNDLE/env.sh" ]] || die "no bundle at $BUNDLE (hint: tests/gpu/bundle.sh)"
case "$BUNDLE/" in
  "$ROOT"/*) REL="${BUNDLE#"$ROOT"/}" ;;
  *) die "the bundle must lie inside the repository ($ROOT), as it travels to the GPU machine" ;;
esac
CUDA_LIB=/usr/local/cuda/lib64
[[ -e "$CUDA_LIB/libcublas.so.13" ]] || die "no CUDA 13 toolkit at $CUDA_LIB"

# The shell tools run_gpu_checks.sh, env.sh, ldd and lockstep's launcher call.
TOOLS=(bash sh env cat mkdir rm cp mv ln tee head tail wc grep sed cmp realpath dirname
  basename id date sleep find readlink uname ls sort cut tr ldd hostname nproc stat du awk)
GLIBC_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so)'

FS="$(mktemp -d /tmp/lockstep-rehearse.XXXXXX)"
trap 'rm -rf "$FS"' EXIT
mkdir -p "$FS"/{usr/bin,lib/x86_64-linux-gnu,lib64,etc,proc,sys,dev,tmp,repo,out} \
  "$FS$CUDA_LIB"
ln -s usr/bin "$FS/bin"
TOOL_LIBS=()
for t in "${TOOLS[@]}"; do
  p="$(command -v "$t")" || die "tool '$t' is missing here"
  cp -L "$p" "$FS/usr/bin/$t"
  while read -r name _ path _; do
    [[ "$path" == /* ]] || continue
    [[ -e "$FS/lib/x86_64-linux-gnu/$name" ]] && continue
    cp -L "$path" "$FS/lib/x86_64-linux-gnu/$name"
    [[ "$name" =~ $GLIBC_RE ]] || TOOL_LIBS+=("$name")
  done < <(ldd "$p" 2>/dev/null | grep '=>')
done
# All of glibc, as every machine has it (libdl, librt and libpthread too, which CUDA's
# runtime still links).
for f in /lib/x86_64-linux-gnu/*.so.*; do
  [[ "$(basename "$f")" =~ $GLIBC_RE ]] && cp -L "$f" "$FS/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$FS/lib64/"
cp -L /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$FS/lib/x86_64-linux-gnu/"
# What a bare machine has in /etc: users, groups, hosts (Open MPI names its session folder
# after the user and resolves the local host).
grep -E '^root:' /etc/passwd >"$FS/etc/passwd"
grep -E '^root:' /etc/group >"$FS/etc/group"
printf '127.0.0.1 localhost %s\n' "$(hostname)" >"$FS/etc/hosts"
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"

# Inside: run the checks' script, then audit every bundled file's libraries.
cat >"$FS/inside.sh" <<INSIDE
set -uo pipefail
cd /repo
BUNDLE=/repo/$REL OUT=/out REHEARSAL=1 bash tests/gpu/run_gpu_checks.sh
rc=\$?
echo "== audit: every bundled file's libraries resolve to the bundle, glibc or $CUDA_LIB"
source /repo/$REL/env.sh
bad=0
while read -r f; do
  ldd "\$f" 2>/dev/null | grep '=>' | while read -r name _ path _; do
    case "\$path" in
      /repo/$REL/*|$CUDA_LIB/*) ;;
      /lib/x86_64-linux-gnu/*) [[ "\$name" =~ $GLIBC_RE ]] || echo "  \$f: \$name from the tools' libraries (\$path)" ;;
      *) echo "  \$f: \$name -> \$path" ;;
    esac
  done
done < <(find /repo/$REL -type f \( -name '*.so*' -o -path '*/bin/*' \)) >/out/audit.txt
if [[ -s /out/audit.txt ]]; then
  cat /out/audit.txt; bad=1
else
  echo "   -> PASS: nothing outside the bundle, glibc and $CUDA_LIB"
fi
exit \$(( rc || bad ))
INSIDE

echo "rehearse.sh: root $FS (tools' own libraries: ${TOOL_LIBS[*]:-none}), output $OUTDIR"
unshare -m --propagation private bash -c '
  set -e
  FS=$1 ROOT=$2 OUTDIR=$3 CUDA_LIB=$4
  mount -t proc proc "$FS/proc"
  mount --rbind /sys "$FS/sys"  # hwloc reads the CPU topology there
  mount --rbind /dev "$FS/dev"
  mount -t tmpfs tmpfs "$FS/tmp"
  mount --bind "$ROOT" "$FS/repo" && mount -o remount,bind,ro "$FS/repo"
  mount --bind "$OUTDIR" "$FS/out"
  mount --bind "$CUDA_LIB" "$FS$CUDA_LIB" && mount -o remount,bind,ro "$FS$CUDA_LIB"
  exec chroot "$FS" /usr/bin/env -i HOME=/tmp PATH=/usr/bin:/bin LANG=C.UTF-8 \
    bash /inside.sh
' rehearse "$FS" "$ROOT" "$OUTDIR" "$CUDA_LIB"
