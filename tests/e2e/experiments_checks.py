"""layout-check and resume-check end to end on the tiny preset: PASS where the contract holds,
FAIL (exit 1) where it is broken on purpose. Usage: experiments_checks.py BINARY MPIRUN
SOURCE_DIR WORK_DIR PART, PART = layout | resume"""
import os
import shutil
import sys

from experiments_common import MPI_ARGS, expect, lockstep

binary, mpirun, src, work, part = sys.argv[1:6]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

if part == "layout":
    res = lockstep(binary, ["layout-check", "--layouts", "1x1,1x2,2x1", "--microbatches", "1,2",
                            "--steps", "3", "--out", os.path.join(work, "ok")] + MPI_ARGS + [tiny])
    out = res.stdout
    expect("layout-check: PASS" in out, "invariant mode: 6 runs (3 layouts x 2 microbatches) agree", out)
    expect(out.count("\n     3 ") == 1 and "2x1 mb2" in out, "the table has a row per step and a column per run", out)
    # deterministic mode uses layout-dependent reduction orders: 1 process vs TP2 (the
    # row-parallel GEMMs chain over half of K, then the halves are added) must differ. (DP2
    # alone happens to agree on this preset: a 2-rank vendor allreduce is a + b, the same as
    # the canonical tree of two leaves.)
    res = lockstep(binary, ["layout-check", "--layouts", "1x1,2x1", "--steps", "3",
                            "--out", os.path.join(work, "det")] + MPI_ARGS +
                   [tiny, "--set", "run.determinism=deterministic"], expect_rc=1)
    out = res.stdout
    expect("layout-check: FAIL" in out and "first divergence at step 1" in out,
           "deterministic mode, 1 process vs TP2: FAIL detected from step 1", out)
    expect("note: G3 does not hold for 2x1" in out, "the G3 verdict is explained", out)
elif part == "resume":
    res = lockstep(binary, ["resume-check", "--steps", "6", "--save-at", "3", "--layout", "1x2",
                            "--out", os.path.join(work, "same")] + MPI_ARGS + [tiny])
    expect("resume-check: PASS" in res.stdout, "resume on the same layout (DP2 -> DP2)", res.stdout)
    res = lockstep(binary, ["resume-check", "--steps", "6", "--save-at", "2,4", "--layout", "1x2",
                            "--resume-layout", "2x1", "--out", os.path.join(work, "other")] +
                   MPI_ARGS + [tiny])
    expect("resume-check: PASS" in res.stdout, "stop at 2 and 4, resume on TP2 (DP2 -> TP2)", res.stdout)
    # Breaking G2 on purpose: the resumed run restarts AdamW's moments.
    res = lockstep(binary, ["resume-check", "--steps", "5", "--save-at", "2", "--layout", "1x1",
                            "--out", os.path.join(work, "broken")] + MPI_ARGS +
                   [tiny, "--set", "ckpt.load_optim=false"], expect_rc=1)
    expect("resume-check: FAIL: first divergence at step 3" in res.stdout,
           "ckpt.load_optim=false: FAIL at the first step after the save", res.stdout)
else:
    raise SystemExit(f"unknown part {part}")
print("PASS")
