"""G1 and G3 end to end: the tiny preset (dropout on) trained for a few steps on many
layouts must write byte-identical trace.jsonl files (loss bits and every parameter
fingerprint at every step). Usage: train_layouts.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import os
import shutil
import sys

from common import first_difference, read_trace, run_train

binary, mpirun, src, work = sys.argv[1:5]
config = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
steps = ["run.steps=5"]

# (name, np, overrides)
layouts = [
    ("1x1 (reference)", 1, ["run.threads=1"]),
    ("1x1 rerun (G1)", 1, ["run.threads=1"]),
    ("1x1, 2 threads", 1, ["run.threads=2"]),
    ("1x1, microbatch 2", 1, ["run.threads=1", "parallel.microbatch=2"]),
    ("1x1, microbatch 4", 1, ["run.threads=1", "parallel.microbatch=4"]),
    ("1x1, scalar ISA path", 1, ["run.threads=1", "run.isa=scalar"]),
    ("DP=2", 2, ["run.threads=1"]),
    ("DP=2, microbatch 2", 2, ["run.threads=1", "parallel.microbatch=2"]),
    ("TP=2", 2, ["run.threads=1", "parallel.tp=2"]),
    ("TP=2 x DP=2", 4, ["run.threads=1", "parallel.tp=2"]),
    ("DP=2, ZeRO-1", 2, ["run.threads=1", "parallel.zero=true"]),
    ("TP=2 x DP=2, ZeRO-1", 4, ["run.threads=1", "parallel.tp=2", "parallel.zero=true"]),
    ("DP=4, ZeRO-1, microbatch 2", 4, ["run.threads=1", "parallel.zero=true", "parallel.microbatch=2"]),
]
if len(sys.argv) > 5:
    layouts += [tuple(x) for x in eval(sys.argv[5])]  # extra layouts from ctest

ref = None
failed = 0
for i, (name, np, sets) in enumerate(layouts):
    out = os.path.join(work, f"run{i}")
    run_train(binary, mpirun, np, out, config, steps + sets)
    trace = read_trace(out)
    if ref is None:
        ref = trace
        assert len(ref) == 5, f"expected 5 trace lines, got {len(ref)}"
        print(f"  {name:28s} reference, final digest {ref[-1][-20:-2].decode()}")
        continue
    diff = first_difference(ref, trace)
    if diff is None:
        print(f"  {name:28s} identical to the reference at every step")
    else:
        failed += 1
        print(f"  {name:28s} DIFFERS: first at step {diff[0]}, {diff[1]}")
n = len(layouts) - 1

# A padded vocabulary (model.vocab_pad_to): 250 tokens, 256 rows in the embedding and the LM
# head (the 6 padded rows are real parameters no label selects); the same bits on every layout.
padded = ["run.threads=1", "model.vocab=250", "model.vocab_pad_to=128"]
pref = None
for name, np, sets in [("padded vocab 1x1", 1, []), ("padded vocab TP=2", 2, ["parallel.tp=2"]),
                       ("padded vocab TP=2 x DP=2", 4, ["parallel.tp=2"])]:
    out = os.path.join(work, name.replace(" ", "_").replace("=", ""))
    run_train(binary, mpirun, np, out, config, steps + padded + sets)
    trace = read_trace(out)
    if pref is None:
        pref = trace
        continue
    n += 1
    diff = first_difference(pref, trace)
    failed += diff is not None
    print(f"  {name:28s} " + ("identical to padded vocab 1x1" if diff is None else f"DIFFERS: {diff}"))
print(f"{n - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
