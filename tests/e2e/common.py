"""Helpers for the end-to-end tests: run build/bin/lockstep (under mpirun when np > 1) and
compare run directories. Standard library only; ctest passes the binary and mpirun paths."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))
import mpirun_flags  # noqa: E402  (launch/mpirun.flags, the one spelling of the flags)

# As root, past the core count, unbound, loopback only (tests/CMakeLists.txt passes the same).
MPI_FLAGS = (mpirun_flags.ROOT + mpirun_flags.OVERSUBSCRIBE + mpirun_flags.UNBOUND
             + mpirun_flags.LOOPBACK)


def run_train(binary, mpirun, np, out, config, sets, timeout=600):
    cmd = [binary, "train", config, "--set", f"run.out={out}"]
    for s in sets:
        cmd += ["--set", s]
    if np > 1:
        cmd = [mpirun] + MPI_FLAGS + ["-np", str(np)] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        sys.stdout.write(res.stdout + res.stderr)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {res.returncode}")
    return res


def sigterm_after(binary, mpirun, np, out, config, sets, steps, ranks=None):
    """Starts `lockstep train` on np ranks, waits until trace.jsonl has `steps` lines, sends
    SIGTERM (a scheduler's preemption) to mpirun's children, the ranks (only the first `ranks`
    of them in pid order when given), and waits. Returns (exit status, output, steps traced)."""
    cmd = [mpirun] + MPI_FLAGS + ["-np", str(np), binary, "train", config, "--set",
                                  f"run.out={out}"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    trace = os.path.join(out, "trace.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and (not os.path.exists(trace) or len(read_trace(out)) < steps):
        time.sleep(0.2)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    for pid in sorted(children, key=int)[:ranks]:
        os.kill(int(pid), signal.SIGTERM)
    log, _ = proc.communicate(timeout=120)
    return proc.returncode, log, len(read_trace(out))


def read_trace(out):
    with open(os.path.join(out, "trace.jsonl"), "rb") as f:
        return f.read().splitlines()


def first_difference(a_lines, b_lines):
    """(step, field) of the first difference between two traces, or None if identical."""
    for la, lb in zip(a_lines, b_lines):
        if la != lb:
            ja, jb = json.loads(la), json.loads(lb)
            for key in ja:
                if ja[key] != jb.get(key):
                    if key == "fp":
                        for name in ja["fp"]:
                            if ja["fp"][name] != jb["fp"].get(name):
                                return ja["step"], "fp." + name
                    return ja["step"], key
            return ja.get("step"), "?"
    if len(a_lines) != len(b_lines):
        return min(len(a_lines), len(b_lines)) + 1, "missing lines"
    return None


def run_on_cluster(source, script, hosts=2, timeout=240):
    """Runs the bash `script` as host 1 of launch/multihost/netns_cluster.sh (NETNS_* set);
    prints its output and exits 77 (ctest: skipped) when the sandbox refuses namespaces.
    Returns the finished process."""
    cluster = os.path.join(source, "launch", "multihost", "netns_cluster.sh")
    env = dict(os.environ, **mpirun_flags.ROOT_ENV)
    res = subprocess.run([cluster, "--hosts", str(hosts), "--timeout", str(timeout), "--",
                          "bash", "-c", script],
                         capture_output=True, text=True, env=env, timeout=timeout + 60)
    sys.stdout.write(res.stdout + res.stderr)
    if res.returncode == 77:
        print("SKIPPED: network namespaces are not available here (reason above)")
        sys.exit(77)
    return res
