"""Helpers for the experiment e2e tests (tests/e2e/experiments_*.py): run a lockstep
subcommand, show its output on failure, assert with a clear message. Standard library only."""
import os
import subprocess
import sys

from common import mpirun_flags


def env_for_tests(extra=None):
    env = dict(os.environ, **mpirun_flags.ROOT_ENV, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for k in [k for k in env if k.startswith("SLURM_")]:
        del env[k]
    env.update(extra or {})
    return env


def lockstep(binary, args, expect_rc=0, env=None, timeout=600, cwd=None):
    cmd = [binary] + args
    print("$ " + " ".join(cmd), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env=env or env_for_tests(), cwd=cwd)
    if expect_rc is not None and res.returncode != expect_rc:
        sys.stdout.write(res.stdout + res.stderr)
        raise SystemExit(f"FAIL: exit {res.returncode}, expected {expect_rc}: {' '.join(cmd)}")
    return res


def expect(cond, what, output=""):
    if not cond:
        if output:
            sys.stdout.write(output)
        raise SystemExit(f"FAIL: {what}")
    print(f"  ok: {what}", flush=True)


# The mpirun flags of the other e2e tests (loopback only), as lockstep run --mpi-arg values.
MPI_ARGS = ["--mpi-arg=" + " ".join(mpirun_flags.LOOPBACK)]
