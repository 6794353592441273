#!/usr/bin/env bash
# tests/bits/compare.sh OLD NEW: byte-compares every file that tests/bits/record.sh kept in OLD
# with the same file in NEW. Prints one line per file and exits non-zero on any difference.
set -uo pipefail
old="$1" new="$2" bad=0 n=0
while read -r f; do
  n=$((n + 1))
  if cmp -s "$old/$f" "$new/$f"; then echo "same  $f"; else echo "DIFF  $f"; bad=$((bad + 1)); fi
done <"$old/MANIFEST"
cmp -s "$old/MANIFEST" "$new/MANIFEST" || { echo "DIFF  the file lists differ"; bad=$((bad + 1)); }
echo "bits: $n files compared, $bad differ"
[[ $bad == 0 ]]
