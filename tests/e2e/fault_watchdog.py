"""The progress watchdog end to end (issue 22, item 5; runtime/watchdog.hpp): a 2-rank tiny job
with run.step_timeout=3 whose rank 1 is SIGSTOPped after a few steps ends within the timeout
plus the grace plus slack, with exit code 5 (ExitStatus::hung) and one error line naming the
step, the phase and rank 1; no process of the job is left. run.step_timeout=0 (off) trains;
a malformed value is refused naming the key.
Usage: fault_watchdog.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from common import MPI_FLAGS, run_train

binary, mpirun, src, work = sys.argv[1:5]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
os.makedirs(work, exist_ok=True)
TIMEOUT = 3
SLACK = 30  # timeout + grace (1 s at this timeout) + MPI_Abort's kill, on a loaded machine
failures = []


def report(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def proc_state(pid):
    """The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass
    return out


def world_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(var.split(b"=", 1)[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return None


def ranks_of(launcher_pid, np, deadline):
    """{world rank: pid} of the job's ranks (children of mpirun), once all np are up."""
    while time.time() < deadline:
        found = {}
        for c in children(launcher_pid):
            r = world_rank(c)
            if r is not None:
                found[r] = c
        if len(found) == np:
            return found
        time.sleep(0.1)
    return {}


def stopped_rank_case():
    out = os.path.join(work, "stopped")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [mpirun] + MPI_FLAGS + ["-np", "2", binary, "train", tiny, "--set", f"run.out={out}",
                                  "--set", "run.steps=5000", "--set", "ckpt.save=false",
                                  "--set", f"run.step_timeout={TIMEOUT}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines, err = [], []
    readers = [threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True),
               threading.Thread(target=lambda: err.extend(job.stderr), daemon=True)]
    for t in readers:
        t.start()
    ranks = ranks_of(job.pid, 2, time.time() + 120)
    try:
        report(len(ranks) == 2, f"found the job's two ranks under mpirun: {ranks}")
        if len(ranks) != 2:
            return
        start = time.time()
        while time.time() - start < 300 and sum("step " in l for l in lines) < 4:
            if job.poll() is not None:
                break
            time.sleep(0.05)
        report(sum("step " in l for l in lines) >= 4, "the job trained a few steps")
        os.kill(ranks[1], signal.SIGSTOP)
        stopped_at = time.time()
        try:
            rc = job.wait(timeout=TIMEOUT + SLACK)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.time() - stopped_at
        for t in readers:
            t.join(timeout=10)
        stderr = "".join(err)
        report(rc is not None, f"the job ended {took:.1f} s after SIGSTOP (limit {TIMEOUT + SLACK} s)")
        report(rc == 5, f"exit code {rc} is 5 (ExitStatus::hung)")
        line = next((l for l in stderr.splitlines() if "lockstep: error on rank" in l), "")
        print("    " + line, flush=True)
        report(re.search(r"no progress for [0-9.]+ s at step \d+ \(phase '[^']+'", line) is not None,
               "the error line names the step and the phase")
        report("rank 1 did not answer" in line, "the error line names the stopped rank 1")
        report(line.startswith("lockstep: error on rank 0"), "rank 0, the waiting rank, reports it")
        report(sum("lockstep: error on rank" in l for l in stderr.splitlines()) == 1,
               "one error line")
        gone = time.time() + 10
        while time.time() < gone and any(proc_state(p) not in (None, "Z") for p in ranks.values()):
            time.sleep(0.1)
        left = {r: proc_state(p) for r, p in ranks.items() if proc_state(p) not in (None, "Z")}
        report(not left, f"no process of the job is left (still there: {left})")
    finally:
        for p in ranks.values():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        if job.poll() is None:
            job.kill()
            job.wait()


def config_cases():
    out = os.path.join(work, "off")
    shutil.rmtree(out, ignore_errors=True)
    run_train(binary, mpirun, 2, out, tiny, ["run.steps=3", "ckpt.save=false",
                                              "run.step_timeout=0"])
    report(True, "run.step_timeout=0 (off) trains a 2-rank job")
    res = subprocess.run([binary, "train", tiny, "--set", "run.step_timeout=abc"],
                         capture_output=True, text=True, timeout=120)
    report(res.returncode != 0 and "run.step_timeout" in res.stderr,
           f"run.step_timeout=abc is refused naming the key: {res.stderr.strip()}")


stopped_rank_case()
config_cases()
if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("watchdog: all checks passed")
