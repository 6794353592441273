#!/usr/bin/env bash
# tests/bits/record.sh BIN OUT: runs a fixed set of jobs with the lockstep binary BIN and keeps
# what their bits are (trace.jsonl, checkpoint shard files, the regression lab's summary.json)
# under OUT, one folder per job. Run it with the old and the new binary, then
#   tests/bits/compare.sh OLD_OUT NEW_OUT
# compares every kept file byte for byte. This is how a change that must keep every bit is
# checked (docs/design.md, "bits are the product"). Thread counts are pinned (2 per rank at
# np 1, 1 per rank otherwise) so that fast mode's trace is comparable on the same machine.
set -euo pipefail
BIN="$(realpath "$1")"
OUT="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TINY="$ROOT/launch/configs/tiny.toml"
SMALL="$ROOT/launch/configs/bench-small.toml"
rm -rf "$OUT" && mkdir -p "$OUT"
source "$ROOT/launch/mpirun.flags"  # MPIRUN_ROOT_ENV: the root environment's one spelling
if [[ "$(id -u)" == 0 ]]; then export "${MPIRUN_ROOT_ENV[@]}"; fi

job() {  # job NAME NP CONFIG [--tp T] [--set k=v ...]
  local name="$1" np="$2" cfg="$3"; shift 3
  local threads=1; [[ $np == 1 ]] && threads=2
  "$BIN" run --np "$np" "$cfg" --set run.out="$OUT/$name" --set run.threads=$threads "$@" \
    >"$OUT/$name.log" 2>&1 || { echo "bits: job $name failed (log: $OUT/$name.log)" >&2; exit 1; }
}

job tiny-1x1 1 "$TINY" --set run.steps=6 --set ckpt.interval=3
job tiny-tp2dp2-zero 4 "$TINY" --tp 2 --set run.steps=6 --set parallel.zero=true --set ckpt.interval=3
job tiny-mb2 2 "$TINY" --set run.steps=6 --set parallel.microbatch=2 --set ckpt.save=false
job tiny-dropout-tp2 2 "$TINY" --tp 2 --set run.steps=6 --set model.dropout=0.2 --set ckpt.save=false
for mode in invariant deterministic fast; do
  job small-dp2-$mode 2 "$SMALL" --set run.steps=4 --set run.determinism=$mode --set ckpt.save=false
done
# GPT-2-like shapes whose block counts are not powers of two (halving tree: K = 384 is 6
# blocks, ffn 1536 is 24, a context of 96 ends each sequence on a short block)
GPT2ISH=(--set model.d_model=384 --set model.heads=6 --set model.ffn=1536 --set data.global_batch=12)
job gpt2ish-1x1 1 "$TINY" "${GPT2ISH[@]}" --set run.steps=3 --set ckpt.interval=3
job gpt2ish-tp2-mb3 2 "$TINY" --tp 2 "${GPT2ISH[@]}" --set model.context=96 \
  --set parallel.microbatch=3 --set run.steps=3 --set ckpt.save=false
# a resumed run: stop at 3 on DP 2, resume at TP 2 to 6
job tiny-resume 2 "$TINY" --set run.steps=6 --set run.stop_at=3
job tiny-resume 2 "$TINY" --tp 2 --set run.steps=6 --set run.resume=auto
# the op trace (and so the traced AdamW update) of steps 2-3 on TP 2, dropout on
job tiny-ops-tp2 2 "$TINY" --tp 2 --set run.steps=3 --set verify.ops=2-3 --set ckpt.save=false
"$BIN" lab --out "$OUT/lab" >"$OUT/lab.log" 2>&1 || { echo "bits: lab failed" >&2; exit 1; }

# keep only the files whose bytes are the claim: traces, shard files, op traces, the lab's
# summary.
(cd "$OUT" && find . -name trace.jsonl -o -name '*.safetensors' -o -path ./lab/summary.json \
  -o -path './*/ops/rank_*.jsonl') \
  | sort >"$OUT/MANIFEST"
echo "bits: $(wc -l <"$OUT/MANIFEST") files recorded in $OUT"
