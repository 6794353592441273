"""Supervised restart (issue 22): `lockstep run --max-restarts` relaunches a job whose ranks
are killed (kill -9 on the real rank processes) at random steps from its newest checkpoint,
and the final trace.jsonl equals the uninterrupted run's byte for byte; with --elastic 1:2
the relaunch after a lost rank runs on 1 rank (G4: the DP2 checkpoint reshards onto 1x1)
and the trace still equals. restarts.jsonl records each failure and relaunch; the user sees
Lockstep's lines, not Open MPI's banners (those are in launcher.log).
Usage: fault_restart.py BINARY MPIRUN SOURCE_DIR WORK_DIR soak|elastic"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from common import first_difference, mpirun_flags, read_trace

binary, mpirun, src, work, part = sys.argv[1:6]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, **mpirun_flags.ROOT_ENV, **mpirun_flags.mca_env(mpirun_flags.LOOPBACK))
for k in [k for k in env if k.startswith("SLURM_")]:
    del env[k]
STEPS = {"soak": 200, "elastic": 40}[part]
KILLS = {"soak": 5, "elastic": 1}[part]
SETS = [f"run.steps={STEPS}", "ckpt.interval=10", "ckpt.keep=2"]
failed = 0


def report(ok, what):
    global failed
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    failed += not ok


def run_args(out, extra):
    args = [binary, "run", "--np", "2", "--threads", "1"] + extra + [tiny]
    for s in SETS + [f"run.out={out}"]:
        args += ["--set", s]
    return args


def last_step(out):
    try:
        with open(os.path.join(out, "trace.jsonl"), "rb") as f:
            lines = f.read().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, KeyError, IndexError):
        return 0


def ranks(pid):
    """The rank processes (`lockstep train`) below pid."""
    kids, found = {}, []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    todo = [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            todo.append(c)
            try:
                argv = open(f"/proc/{c}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and argv[1] == b"train" and os.path.realpath(argv[0]) == \
                    os.fsencode(os.path.realpath(binary)):
                found.append(c)
    return sorted(found)


t0 = time.time()
ref = os.path.join(work, "ref")
res = subprocess.run(run_args(ref, []), capture_output=True, text=True, env=env, timeout=300)
report(res.returncode == 0, f"uninterrupted run, {STEPS} steps ({time.time() - t0:.0f} s)")
if res.returncode != 0:
    sys.exit(res.stdout[-2000:] + res.stderr[-2000:])

out = os.path.join(work, "killed")
extra = ["--max-restarts", str(KILLS + 3)] + (["--elastic", "1:2"] if part == "elastic" else [])
seed = int(os.environ.get("LOCKSTEP_SOAK_SEED", time.time_ns() % 100000))
rng = random.Random(seed)
targets = sorted(rng.sample(range(5 if part == "soak" else 15, STEPS - 5), KILLS))
print(f"  seed {seed}: kill -9 a rank after steps {targets}", flush=True)
t1 = time.time()
with open(os.path.join(work, "killed.stdout"), "w") as so, \
        open(os.path.join(work, "killed.stderr"), "w") as se:
    proc = subprocess.Popen(run_args(out, extra), stdout=so, stderr=se, env=env)
    # Each kill hits another job: the ranks that were live at a kill (the victim's peers are
    # being torn down by mpirun) are never chosen again, so k kills make k failures.
    killed, dead, deadline = [], set(), time.time() + 240
    for target in targets:
        while time.time() < deadline and proc.poll() is None:
            live = [p for p in ranks(proc.pid) if p not in dead]
            if live and last_step(out) >= target:
                victim = rng.choice(live)
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
                dead.update(live)
                print(f"  killed rank pid {victim} after step {last_step(out)}", flush=True)
                break
            time.sleep(0.05)
    try:
        rc = proc.wait(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
        report(False, "the supervised run ended within 240 s")
stderr = open(os.path.join(work, "killed.stderr")).read()
print(f"  supervised run: exit {rc}, {len(killed)} kills, {time.time() - t1:.0f} s", flush=True)
report(rc == 0 and len(killed) == KILLS, f"{KILLS} kill(s) -9, the supervised run finished (exit 0)")
diff = first_difference(read_trace(ref), read_trace(out)) if os.path.exists(
    os.path.join(out, "trace.jsonl")) else ("?", "no trace")
report(diff is None, f"trace.jsonl equals the uninterrupted run's, byte for byte ({diff or 'same'})")
events = [json.loads(l) for l in open(os.path.join(out, "restarts.jsonl"))] if os.path.exists(
    os.path.join(out, "restarts.jsonl")) else []
fails = [e for e in events if e["event"] == "failure"]
relaunches = [e for e in events if e["event"] == "relaunch"]
report(len(fails) == KILLS and len(relaunches) == KILLS and
       all(f["reason"].startswith("killed by signal 9") and f["rank"] in (0, 1) and f["host"]
           for f in fails), f"restarts.jsonl: {len(fails)} failures (signal 9, rank, host), "
       f"{len(relaunches)} relaunches")
report("was killed by signal 9" in stderr and "relaunching from checkpoint step" in stderr,
       "one line per failure: which rank died and where the relaunch resumes")
report("ORTE_ERROR_LOG" not in stderr and "MPI_ABORT" not in stderr and "mpirun noticed" not in
       stderr and "-----" not in stderr, "no Open MPI banner on stderr")
log = open(os.path.join(out, "launcher.log")).read()
report("mpirun noticed that process rank" in log or "signal 9" in log,
       "Open MPI's own report is in launcher.log")
if part == "elastic":
    report(bool(relaunches) and relaunches[0]["np"] == 1 and relaunches[0]["dp"] == 1,
           f"the relaunch after the lost rank ran on 1 rank ({relaunches[:1]})")
    report("(G4)" in stderr, "the relaunch line says why the bits hold (G4)")
if failed:
    print(stderr[-3000:])
    sys.exit(f"FAIL: {failed} check(s)")
print(f"PASS ({time.time() - t0:.0f} s)")
