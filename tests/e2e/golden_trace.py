"""The pinned bits: a few fixed one-process jobs whose trace.jsonl (loss, gradient norm and
learning rate bits, the fingerprint of every state tensor, the step digest) must equal, byte
for byte, tests/e2e/golden/<job>/trace.jsonl as committed, on every host, every ISA path this
CPU has, and every commit. train_layouts.py and train_shapes.py prove that every layout
equals its 1x1 run; this test pins the 1x1 runs themselves, so a change of bits anywhere (a
kernel, the tree, the data, the RNG, a compiler or host that rounds differently) fails CI
instead of waiting for someone to run tests/bits/compare.sh.

Bits may change only with a new, versioned contract (docs/design.md section 2): then rerun
with --update, commit the new files and say in the commit message why they changed.

Usage: golden_trace.py BINARY SOURCE_DIR WORK_DIR [--update]"""
import os
import shutil
import subprocess
import sys

from common import first_difference, read_trace, run_train

binary, src, work = sys.argv[1:4]
update = "--update" in sys.argv[4:]
config = os.path.join(src, "launch", "configs", "tiny.toml")
golden_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
shutil.rmtree(work, ignore_errors=True)

# GPT-2-like shapes whose block counts are not powers of two (K = 384 is 6 blocks, ffn 1536
# is 24, a context of 96 ends each sequence on a short block), three microbatches of 3.
GPT2ISH = ["model.d_model=384", "model.heads=6", "model.ffn=1536", "data.global_batch=12",
           "model.context=96", "parallel.microbatch=3", "run.steps=2"]
# (golden directory, overrides): tiny has dropout on; both trees on the non-power-of-two shapes.
JOBS = [
    ("tiny", ["run.steps=5"]),
    ("gpt2ish-halving", GPT2ISH + ["numerics.tree=halving"]),
    ("gpt2ish-pow2", GPT2ISH + ["numerics.tree=pow2"]),
]


def host_isas():
    """The vector kernel paths this CPU runs, as `lockstep info` lists them ("auto" picks the
    widest)."""
    info = subprocess.run([binary, "info"], capture_output=True, text=True, check=True).stdout
    line = next((l for l in info.splitlines() if l.strip().startswith("ISA paths")), None)
    if line is None:
        raise SystemExit("FAIL: `lockstep info` printed no 'ISA paths' line")
    paths = line.split(":", 1)[1].split("(")[0].replace(",", " ").split()
    return ["auto"] + [p for p in paths if p != "scalar"]


failed = checked = 0
for name, sets in JOBS:
    golden_run = os.path.join(golden_dir, name)  # a run directory holding only trace.jsonl
    golden_path = os.path.join(golden_run, "trace.jsonl")
    # The scalar path is slow on the larger shapes: tiny runs it, the others the vector paths.
    isas = host_isas() + (["scalar"] if name == "tiny" else [])
    for isa in isas:
        out = os.path.join(work, f"{name}-{isa}")
        run_train(binary, "mpirun", 1, out, config,
                  sets + ["run.threads=1", f"run.isa={isa}", "ckpt.save=false"])
        trace = read_trace(out)
        if update and isa == "auto":
            os.makedirs(golden_run, exist_ok=True)
            shutil.copyfile(os.path.join(out, "trace.jsonl"), golden_path)
            print(f"  {name:16s} {isa:7s} written to {golden_path}")
        if not os.path.exists(golden_path):
            raise SystemExit(f"FAIL: {golden_path} is missing; create it with --update")
        with open(golden_path, "rb") as f:
            golden = f.read().splitlines()
        checked += 1
        diff = first_difference(golden, trace)
        if diff is None:
            print(f"  {name:16s} {isa:7s} identical to the golden trace ({len(trace)} steps)")
            continue
        failed += 1
        print(f"  {name:16s} {isa:7s} DIFFERS from the golden trace: first at step {diff[0]}, "
              f"{diff[1]}\n    inspect: {binary} verify compare {golden_run} {out}")
print(f"{checked - failed} passed, {failed} failed")
if failed:
    print("The bits changed. If that is intended (a new, versioned contract), rerun with --update "
          "and commit tests/e2e/golden/; otherwise the change broke determinism.")
sys.exit(1 if failed else 0)
