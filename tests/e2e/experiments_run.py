"""`lockstep run`, the launcher: bad layouts are refused before anything launches (a fake
mpirun on PATH proves none started), --dry-run under a faked SLURM allocation uses the
allocation, binding/oversubscription follow the cores, and a real 2-rank job runs.
Usage: experiments_run.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import os
import shutil
import stat
import sys

from common import mpirun_flags
from experiments_common import MPI_ARGS, env_for_tests, expect, lockstep

binary, mpirun, src, work = sys.argv[1:5]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
# What lockstep run prints for oversubscription and no binding (launch/mpirun.flags).
OVERSUB = " ".join(mpirun_flags.OVERSUBSCRIBE)
UNBOUND = " ".join(mpirun_flags.UNBOUND)

# A fake mpirun that leaves a marker: nothing may start it on a bad layout.
fake_bin = os.path.join(work, "fakebin")
os.makedirs(fake_bin)
marker = os.path.join(work, "mpirun-started")
with open(os.path.join(fake_bin, "mpirun"), "w") as f:
    f.write(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
os.chmod(os.path.join(fake_bin, "mpirun"), stat.S_IRWXU)
fake_env = env_for_tests({"PATH": fake_bin + os.pathsep + os.environ["PATH"]})

bad = [
    (["--np", "3"], "not divisible"),               # global batch 8 over DP 3
    (["--np", "2", "--tp", "4"], "tp"),             # TP larger than the world
    (["--np", "4", "--tp", "3"], "tp"),             # np not a multiple of tp
    (["--np", "2", "--set", "parallel.microbatch=5"], "microbatch"),  # > 4 sequences per rank
]
for args, word in bad:
    res = lockstep(binary, ["run"] + args + [tiny], expect_rc=None, env=fake_env)
    out = res.stdout + res.stderr
    expect(res.returncode != 0, f"run {' '.join(args)} refused (exit {res.returncode})", out)
    expect(word in out.lower(), f"run {' '.join(args)}: the error names '{word}'", out)
    expect(not os.path.exists(marker), f"run {' '.join(args)}: no mpirun started", out)

# --dry-run inside a (faked) SLURM allocation: np from SLURM_NTASKS, no hostfile (Open MPI
# reads the allocation), and still nothing started.
slurm = env_for_tests({"PATH": fake_env["PATH"], "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "4",
                       "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_JOB_NUM_NODES": "2",
                       "SLURM_CPUS_ON_NODE": "4"})
res = lockstep(binary, ["run", "--dry-run", tiny], env=slurm)
out = res.stdout
expect("inside SLURM job 4242" in out and "node[01-02]" in out, "SLURM allocation recognised", out)
expect("mpirun -np 4 " in out and "--hostfile" not in out, "np 4 from SLURM_NTASKS, no hostfile", out)
expect(OVERSUB not in out, f"no {OVERSUB} inside the allocation", out)
expect("run.threads=2" in out, "threads = cores per node / ranks per node (4/2)", out)
res = lockstep(binary, ["run", "--dry-run", "--np", "8", tiny], expect_rc=None, env=slurm)
expect(res.returncode != 0 and "allocation has 4 tasks" in res.stderr,
       "more ranks than SLURM tasks refused", res.stdout + res.stderr)
expect(not os.path.exists(marker), "dry runs started no mpirun")

# Binding and oversubscription against this machine's cores.
cores = os.cpu_count() or 1
res = lockstep(binary, ["run", "--dry-run", "--np", str(2 * cores), "--threads", "1", tiny,
                        "--set", f"data.global_batch={8 * cores}"], env=fake_env)
expect(OVERSUB in res.stdout and UNBOUND in res.stdout,
       f"{2 * cores} ranks on {cores} cores: {OVERSUB}, no binding", res.stdout)
res = lockstep(binary, ["run", "--dry-run", "--np", "1", "--threads", "1", tiny], env=fake_env)
expect("mpirun" not in res.stdout and "OMP_NUM_THREADS=1" in res.stdout,
       "np 1 runs train directly, with its thread environment", res.stdout)
hostfile = os.path.join(work, "hosts")
with open(hostfile, "w") as f:
    f.write("nodeA slots=2\nnodeB slots=2\n")
res = lockstep(binary, ["run", "--dry-run", "--np", "4", "--hostfile", hostfile, tiny], env=fake_env)
expect(f"--hostfile {hostfile}" in res.stdout and OVERSUB not in res.stdout,
       f"hostfile with 4 slots: 4 ranks need no {OVERSUB}", res.stdout)
res = lockstep(binary, ["run", "--dry-run", "--np", "4", "--host", "a:1,b:1", tiny], env=fake_env)
expect("--host a:1,b:1" in res.stdout and OVERSUB in res.stdout,
       "--host with 2 slots: 4 ranks oversubscribe", res.stdout)

# A real job through the launcher.
out_dir = os.path.join(work, "dp2")
res = lockstep(binary, ["run", "--np", "2"] + MPI_ARGS +
               [tiny, "--set", "run.steps=2", "--set", f"run.out={out_dir}",
                "--set", "ckpt.save=false"])
expect("lockstep run: mpirun -np 2" in res.stdout, "the exact mpirun command is printed", res.stdout)
with open(os.path.join(out_dir, "trace.jsonl")) as f:
    expect(len(f.read().splitlines()) == 2, "2-rank job wrote 2 trace lines")
print("PASS")
