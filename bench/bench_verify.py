#!/usr/bin/python3
"""bench_verify: what fingerprinting all state every step costs (issue 5's benchmark).

Runs bench-small (launch/configs/bench-small.toml, invariant mode) on two layouts,
np 2 x 1 thread (DP 2) and np 1 x 2 threads, in interleaved rounds (each round runs every
configuration of a layout once, the order rotated by the round, so all see the same machine
noise):
  off      verify.state_interval=0, verify.replica_check_interval=0 (trace: scalars only)
  state    every step: param, grad, adam_m, adam_v fingerprints (~13M floats) + replica guard
  optrace  state + the op trace of every step (verify.ops=1-N)
Two measures of the cost of `state`:
  direct   the trainer's own per-step timing of the verify work (metrics.jsonl, rank 0):
           verify_ms = hashing of state pieces + the guard's parameter hashes (no
           collectives), verify_wall_ms = everything around the verify calls (+ rng/data
           fingerprints, the integer collectives and any wait for the other rank);
           overhead_direct_pct = median verify_ms of `state` / median step ms of `off`;
           overhead_cpu_pct = median verify_cpu_ms (the hashing's CPU time, all threads) /
           median cpu_ms of `off` (the step's CPU time, all threads of rank 0): the least
           noisy reading on a shared machine.
  end to end  median step ms of each configuration (steady-state steps of all its runs, the
           first --warmup steps of each run skipped), the spread of the per-run medians, and
           the paired per-round differences against `off` of the same round (median, min, max).
Builds nothing. Prints a JSON line per layout x configuration and a markdown table;
--out FILE writes all of it as JSON.

Example: /usr/bin/python3 bench/bench_verify.py --lockstep build/bin/lockstep --steps 10 \\
             --warmup 2 --reps 5 --out bench/results/verify.json
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "launch"))
import mpirun_flags  # noqa: E402  (launch/mpirun.flags, the one spelling of the flags)
MPI_FLAGS = (mpirun_flags.ROOT + mpirun_flags.OVERSUBSCRIBE + mpirun_flags.UNBOUND
             + mpirun_flags.LOOPBACK)
LAYOUTS = {"np2x1": (2, 1), "np1x2": (1, 2)}  # name: (ranks, threads per rank)


def run_once(binary, np_, threads, sets, steps, out):
    cmd = ["mpirun"] + MPI_FLAGS + ["-np", str(np_), binary, "train",
                                    str(REPO / "launch/configs/bench-small.toml"),
                                    "--set", f"run.out={out}", "--set", f"run.steps={steps}",
                                    "--set", f"run.threads={threads}", "--set", "ckpt.save=false"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1",
               **mpirun_flags.ROOT_ENV)
    res = subprocess.run(cmd, capture_output=True, env=env, text=True)
    if res.returncode != 0:
        sys.exit(f"bench_verify: {' '.join(cmd)} failed ({res.returncode}):\n"
                 f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return rows


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lockstep", default=str(REPO / "build/bin/lockstep"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--layouts", default="np2x1,np1x2",
                    help="comma-separated subset of " + ",".join(LAYOUTS))
    ap.add_argument("--configs", default="off,state,optrace",
                    help="comma-separated subset of off,state,optrace (off is always run)")
    ap.add_argument("--out")
    a = ap.parse_args()
    all_configs = {
        "off": ["verify.state_interval=0", "verify.replica_check_interval=0"],
        "state": ["verify.state_interval=1", "verify.replica_check_interval=1"],
        "optrace": ["verify.state_interval=1", "verify.replica_check_interval=1",
                    f"verify.ops=1-{a.steps}"],
    }
    names = ["off"] + [n for n in a.configs.split(",") if n != "off"]
    for n in names:
        if n not in all_configs:
            sys.exit(f"bench_verify: unknown configuration '{n}'")
    layouts = a.layouts.split(",")
    for l in layouts:
        if l not in LAYOUTS:
            sys.exit(f"bench_verify: unknown layout '{l}' (use {', '.join(LAYOUTS)})")

    rows = []
    tmp = tempfile.mkdtemp(prefix="bench_verify_")
    try:
        for lay in layouts:
            np_, threads = LAYOUTS[lay]
            ms = {n: [] for n in names}          # all steady steps
            vms = {n: [] for n in names}         # verify_ms of those steps
            vwall = {n: [] for n in names}       # verify_wall_ms
            vcpu = {n: [] for n in names}        # verify_cpu_ms (hashing CPU, all threads)
            cpu = {n: [] for n in names}         # cpu_ms (the step's CPU, all threads)
            per_run = {n: [] for n in names}     # per-run median step ms, by round
            for r in range(a.reps):
                k = r % len(names)
                for n in names[k:] + names[:k]:
                    out = os.path.join(tmp, f"{lay}_{n}{r}")
                    steady = run_once(a.lockstep, np_, threads, all_configs[n], a.steps,
                                      out)[a.warmup:]
                    shutil.rmtree(out, ignore_errors=True)
                    ms[n] += [s["ms"] for s in steady]
                    vms[n] += [s.get("verify_ms", float("nan")) for s in steady]
                    vwall[n] += [s.get("verify_wall_ms", float("nan")) for s in steady]
                    vcpu[n] += [s.get("verify_cpu_ms", float("nan")) for s in steady]
                    cpu[n] += [s.get("cpu_ms", float("nan")) for s in steady]
                    per_run[n].append(med([s["ms"] for s in steady]))
                    print(f"{lay} round {r + 1}/{a.reps} {n:8s} median {per_run[n][-1]:.1f} "
                          f"ms/step, verify {med(vms[n][-len(steady):]):.2f} ms",
                          file=sys.stderr)
            base = med(ms["off"])
            for n in names:
                paired = [100 * (x / b - 1) for x, b in zip(per_run[n], per_run["off"])]
                row = {
                    "layout": lay, "np": np_, "threads": threads, "config": n,
                    "sets": all_configs[n],
                    "median_ms": round(med(ms[n]), 2),
                    "run_medians_ms": [round(x, 2) for x in per_run[n]],
                    "spread_pct": round(100 * (max(per_run[n]) - min(per_run[n])) /
                                        med(per_run[n]), 1),
                    "overhead_pct": round(100 * (med(ms[n]) / base - 1), 2),
                    "paired_overhead_pct": {"median": round(med(paired), 2),
                                            "min": round(min(paired), 2),
                                            "max": round(max(paired), 2)},
                    "verify_ms": round(med(vms[n]), 3),
                    "verify_ms_minmax": [round(min(vms[n]), 3), round(max(vms[n]), 3)],
                    "verify_wall_ms": round(med(vwall[n]), 3),
                    "overhead_direct_pct": round(100 * med(vms[n]) / base, 3),
                    "overhead_direct_wall_pct": round(
                        100 * (med(vwall[n]) - med(vwall["off"])) / base, 3),
                    "verify_cpu_ms": round(med(vcpu[n]), 3),
                    "cpu_ms": round(med(cpu[n]), 2),
                    "cpu_ms_off": round(med(cpu["off"]), 2),
                    "overhead_cpu_pct": round(100 * med(vcpu[n]) / med(cpu["off"]), 3),
                }
                rows.append(row)
                print(json.dumps(row))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n| layout | config | median ms/step | run medians | end-to-end overhead "
          "(paired: median, min..max) | verify_ms (direct) | direct overhead | "
          "verify CPU / off step CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        p = row["paired_overhead_pct"]
        print(f"| {row['layout']} | {row['config']} | {row['median_ms']:.1f} | "
              f"{min(row['run_medians_ms']):.1f}–{max(row['run_medians_ms']):.1f} | "
              f"{row['overhead_pct']:+.2f}% "
              f"({p['median']:+.2f}%, {p['min']:+.1f}..{p['max']:+.1f}%) | "
              f"{row['verify_ms']:.2f} | {row['overhead_direct_pct']:.2f}% | "
              f"{row['verify_cpu_ms']:.2f} / {row['cpu_ms_off']:.0f} ms = "
              f"{row['overhead_cpu_pct']:.2f}% |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"steps": a.steps, "warmup": a.warmup, "reps": a.reps,
                       "model": "bench-small", "configs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
