"""One clear line per failure (issue 22): each command that runs a training job (`lockstep
run`, `resume-check`, `layout-check`, `tax`, `launch/lockstep demo`) and sees it fail prints
the failing rank's own message once and no Open MPI banner (ORTE_ERROR_LOG, MPI_ABORT,
"mpirun noticed ..."), which `lockstep run` keeps in RUN_OUT/launcher.log and names in the
line (the log holds every line of the job). The fault: debug.bitflip on rank 1 of a DP2 job, caught by the replica guard (tax turns
the guard off, so its job gets a missing data.path instead).
Usage: fault_messages.py BINARY MPIRUN SOURCE_DIR WORK_DIR BUILD_DIR"""
import os
import re
import shutil
import subprocess
import sys
import time

from common import mpirun_flags

binary, mpirun, src, work, build = sys.argv[1:6]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, **mpirun_flags.ROOT_ENV, **mpirun_flags.mca_env(mpirun_flags.LOOPBACK),
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", LOCKSTEP_BUILD_DIR=build)
for k in [k for k in env if k.startswith("SLURM_")]:
    del env[k]
FLIP = ["--set", "debug.bitflip=1:3:layers.0.mlp.fc1.weight"]
MESSAGE = "replica guard: at step 3 tensor 'param/layers.0.mlp.fc1.weight'"
NOISE = ["ORTE_ERROR_LOG", "MPI_ABORT", "mpirun noticed", "-------------"]
w = lambda name: os.path.join(work, name)  # noqa: E731
cases = [
    ("lockstep run", [binary, "run", "--np", "2", tiny, "--set", "run.steps=5",
                      "--set", f"run.out={w('run')}"] + FLIP),
    ("resume-check", [binary, "resume-check", "--steps", "6", "--save-at", "4", "--layout", "1x2",
                      "--out", w("resume"), tiny] + FLIP),
    ("layout-check", [binary, "layout-check", "--layouts", "1x2,2x1", "--steps", "5",
                      "--out", w("layout"), tiny] + FLIP),
    ("tax", [binary, "tax", "--modes", "invariant", "--steps", "5", "--np", "2",
             "--out", w("tax"), tiny, "--set", "data.path=/nonexistent/corpus"]),
    ("demo", ["bash", os.path.join(src, "launch", "lockstep"), "demo", "--steps", "8",
              "--out", w("demo")] + FLIP),
]
failed = 0
for name, cmd in cases:
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    text = res.stdout + res.stderr
    message = "cannot open /nonexistent/corpus.idx" if name == "tax" else MESSAGE
    said = text.count(message)
    noise = [n for n in NOISE if n in text]
    where = re.search(r"\[Open MPI's output: (\S+launcher\.log)\]", text)
    logged = where and os.path.exists(where.group(1)) and message in open(where.group(1)).read()
    ok = res.returncode != 0 and said == 1 and not noise and logged
    print(f"  {'ok  ' if ok else 'FAIL'}  {name:13s} exit {res.returncode}, the rank's message "
          f"{said}x, Open MPI banner lines: {noise or 'none'}, launcher.log named: "
          f"{bool(where)} ({time.time() - t0:.0f} s)", flush=True)
    lines = [l for l in res.stderr.splitlines() if message in l]
    if lines:
        print(f"        {lines[0][:300]}")
    if not ok:
        print(text[-3000:])
        failed += 1
if failed:
    sys.exit(f"FAIL: {failed} command(s)")
print("PASS: every failing command shows the rank's line once, Open MPI's output in launcher.log")
