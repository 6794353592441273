"""G3 on the shapes real models use (numerics.tree = halving, docs/design.md section 2): a
GPT-2-shaped model scaled down (d_model 384, 6 heads, ffn 1536, context 64, global batch 12,
2 layers, dropout on) trained on every layout the contract covers must write a byte-identical
trace.jsonl, and the validator must claim G3 for every one of them (the cut rule allows all of
them: TP 2 cuts d_model into 3 blocks of 64 per rank, DP 4 leaves 3 sequences per rank,
microbatch 2, 3 or 4 of 6 sequences are split at the tree's nodes). Then a property check over
random shapes and layouts: whenever the validator claims G3 the traces are identical. Then the
pow2 contract: the same shapes at TP 2 lose G3 there, and the validator says why.
Usage: train_shapes.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import os
import random
import re
import shutil
import subprocess
import sys

from common import MPI_FLAGS, first_difference, read_trace, run_train

binary, mpirun, src, work = sys.argv[1:5]
config = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
failed = 0


def guarantees(res):
    """The banner's guarantee line: {"G3": True, ...} and the reasons of what is lost."""
    line = next(l for l in res.stdout.splitlines() if "guarantees:" in l)
    marks = dict(re.findall(r"(G\d) (✓|✗)", line))
    lost = re.findall(r"G3 lost: (.*)", res.stdout)
    return {g: m == "✓" for g, m in marks.items()}, (lost[0] if lost else "")


def sweep(title, shape, layouts, steps=3):
    """Runs each layout; returns (layouts whose validator claimed G3, failures)."""
    global failed
    print(title)
    ref, claimed = None, 0
    for i, (name, np, sets) in enumerate(layouts):
        out = os.path.join(work, f"{title.split()[0]}_{i}")
        res = run_train(binary, mpirun, np, out, config,
                        [f"run.steps={steps}", "run.threads=1"] + shape + sets)
        g, why = guarantees(res)
        claimed += g.get("G3", False)
        trace = read_trace(out)
        if ref is None:
            ref = trace
            assert len(ref) == steps, f"expected {steps} trace lines, got {len(ref)}"
            print(f"  {name:34s} reference (G3 {'claimed' if g['G3'] else 'lost: ' + why})")
            continue
        diff = first_difference(ref, trace)
        if not g.get("G3", False):
            print(f"  {name:34s} G3 not claimed ({why}); "
                  + ("identical anyway" if diff is None else f"differs at step {diff[0]}"))
        elif diff is None:
            print(f"  {name:34s} G3 claimed, identical at every step")
        else:
            failed += 1
            print(f"  {name:34s} G3 claimed but DIFFERS: first at step {diff[0]}, {diff[1]}")
    return claimed


gpt2ish = ["model.d_model=384", "model.heads=6", "model.ffn=1536", "model.context=64",
           "data.global_batch=12", "model.layers=2", "model.dropout=0.1"]
layouts = [
    ("1x1", 1, []),
    ("1x1, microbatch 2", 1, ["parallel.microbatch=2"]),
    ("1x1, microbatch 3", 1, ["parallel.microbatch=3"]),
    ("1x1, microbatch 4 (nodes 3+3+3+3)", 1, ["parallel.microbatch=4"]),
    ("TP=2", 2, ["parallel.tp=2"]),
    ("DP=2", 2, []),
    ("DP=2, microbatch 4 (nodes 3+3)", 2, ["parallel.microbatch=4"]),
    ("DP=4 (3 sequences per rank)", 4, []),
    ("DP=4, microbatch 2 (nodes 2+1)", 4, ["parallel.microbatch=2"]),
    ("TP=2 x DP=2", 4, ["parallel.tp=2"]),
    ("DP=2, ZeRO-1", 2, ["parallel.zero=true"]),
    ("TP=2 x DP=2, ZeRO-1, microbatch 3", 4, ["parallel.tp=2", "parallel.zero=true",
                                             "parallel.microbatch=3"]),
]
claimed = sweep("gpt2ish (halving)", gpt2ish, layouts)
if claimed != len(layouts):
    failed += 1
    print(f"  the validator claimed G3 for {claimed} of {len(layouts)} layouts; the cut rule allows all")

# Property check: random shapes and layouts; wherever G3 is claimed the bits must agree.
rng = random.Random(20261202)
for case in range(4):
    heads = rng.choice([2, 4, 6])
    head_dim = rng.choice([16, 32, 48])
    B = rng.choice([16, 32, 64])
    shape = [f"model.d_model={heads * head_dim}", f"model.heads={heads}",
             f"model.ffn={rng.choice([96, 192, 320, 384, 512])}",
             f"model.context={rng.choice([24, 48, 64, 96])}",
             f"data.global_batch={rng.choice([4, 6, 8, 12])}", "model.layers=1",
             f"model.dropout={rng.choice([0.0, 0.1])}", f"numerics.reduce_block={B}",
             f"model.vocab_pad_to={rng.choice([1, 32, 64])}", "model.vocab=250"]
    mb = rng.choice([1, 2, 3])
    cand = [("1x1", 1, []), ("TP=2", 2, ["parallel.tp=2"]), ("DP=2", 2, [f"parallel.microbatch={mb}"])]
    if heads % 2 == 0:
        cand.append(("TP=2 x DP=2", 4, ["parallel.tp=2", "parallel.zero=true"]))
    # only layouts the config validator accepts (G must split over DP, heads over TP)
    G = int(shape[4].split("=")[1])
    cand = [c for c in cand if not (c[1] >= 2 and "parallel.tp=2" not in c[2] and G % 2)]
    cand = [c for c in cand if not (c[0] == "DP=2" and mb > G // 2)]
    sweep(f"random{case} {' '.join(s.split('.')[-1] for s in shape)}", shape, cand, steps=2)

# The pow2 contract on the same shapes: TP 2 cuts d_model 384 into 3 blocks, not a node there.
res = run_train(binary, mpirun, 2, os.path.join(work, "pow2_tp2"), config,
                ["run.steps=1", "run.threads=1", "numerics.tree=pow2", "parallel.tp=2"] + gpt2ish)
g, why = guarantees(res)
if g["G3"] or "3 blocks" not in why and "power-of-two number of blocks" not in why:
    failed += 1
    print(f"  pow2 at TP=2: expected G3 lost naming the block count, got G3={g['G3']} ({why})")
else:
    print(f"  pow2 at TP=2: G3 lost: {why}")
# The contract is versioned: a pow2 run resumes bit for bit from its checkpoint; resuming it
# under halving is refused with one line unless ckpt.allow_contract_change.
pow2 = ["numerics.tree=pow2", "parallel.tp=2", "run.threads=1"] + gpt2ish
straight = os.path.join(work, "pow2_straight")
run_train(binary, mpirun, 2, straight, config, ["run.steps=4"] + pow2)
resumed = os.path.join(work, "pow2_resumed")
run_train(binary, mpirun, 2, resumed, config, ["run.steps=4", "run.stop_at=2"] + pow2)
run_train(binary, mpirun, 2, resumed, config, ["run.steps=4", "run.resume=auto"] + pow2)
diff = first_difference(read_trace(straight), read_trace(resumed))
print("  pow2 stop at 2 + resume to 4: " + ("identical to the straight run" if diff is None
                                             else f"DIFFERS at step {diff[0]}, {diff[1]}"))
failed += diff is not None
halving = [x for x in pow2 if not x.startswith("numerics.tree")]
cmd = [binary, "train", config, "--set", f"run.out={resumed}", "--set", "run.steps=6",
       "--set", "run.resume=auto"]
for x in halving:
    cmd += ["--set", x]
cmd = [mpirun] + MPI_FLAGS + ["-np", "2"] + cmd
res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                     env=dict(os.environ, OMP_NUM_THREADS="1"))
refusal = [l for l in (res.stdout + res.stderr).splitlines() if "cannot resume" in l]
if res.returncode == 0 or not refusal or 'numerics.tree = "pow2" in the checkpoint' not in refusal[0]:
    failed += 1
    print(f"  resume pow2 under halving: expected a refusal naming numerics.tree, got rc "
          f"{res.returncode}: {refusal}")
else:
    print(f"  resume pow2 under halving refused: {refusal[0].strip()}")
run_train(binary, mpirun, 2, resumed, config,
          ["run.steps=5", "run.resume=auto", "ckpt.allow_contract_change=true"] + halving)
print("  ... and accepted with ckpt.allow_contract_change=true")
# verify compare names the contract when two runs differ in it.
res = subprocess.run([binary, "verify", "compare", straight, os.path.join(work, "gpt2ish_4")],
                     capture_output=True, text=True, timeout=120)
note = [l for l in res.stdout.splitlines() if "numerical contract" in l]
if not note or 'numerics.tree = pow2 in A, halving in B' not in note[0]:
    failed += 1
    print(f"  verify compare pow2 vs halving: expected a note naming numerics.tree, got {note}")
else:
    print(f"  verify compare pow2 vs halving: {note[0]}")
print("failed" if failed else "passed", f"({failed} failure(s))")
sys.exit(1 if failed else 0)
