#!/usr/bin/python3
"""bench_verify: what fingerprinting all state every step costs (issue 5's benchmark).

Runs bench-small (launch/configs/bench-small.toml, invariant mode, np 2 x 1 thread = DP 2)
in interleaved rounds (each round runs every configuration once, the order rotated by the
round, so all see the same machine noise):
  off      verify.state_interval=0, verify.replica_check_interval=0 (trace: scalars only)
  state    every step: param, grad, adam_m, adam_v fingerprints (~13M floats) + replica guard
  optrace  state + the op trace of every step (verify.ops=1-N)
Per configuration: median ms/step over the steady-state steps of all its runs (the first
--warmup steps of each run skipped), spread (min/max of the per-run medians), and the
overhead against `off`. Builds nothing. Prints a JSON line per configuration and a markdown
table; --out FILE writes all of it as JSON.

Example: /usr/bin/python3 bench/bench_verify.py --lockstep build/bin/lockstep --steps 8 \
             --warmup 2 --reps 3 --out bench/results/verify.json
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
MPI_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
             "self,vader,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca",
             "oob_tcp_if_include", "lo"]


def run_once(binary, sets, steps, out):
    cmd = ["mpirun"] + MPI_FLAGS + ["-np", "2", binary, "train",
                                    str(REPO / "launch/configs/bench-small.toml"),
                                    "--set", f"run.out={out}", "--set", f"run.steps={steps}",
                                    "--set", "run.threads=1", "--set", "ckpt.save=false"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(l)["ms"] for l in f if l.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lockstep", default=str(REPO / "build/bin/lockstep"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    configs = {
        "off": ["verify.state_interval=0", "verify.replica_check_interval=0"],
        "state": ["verify.state_interval=1", "verify.replica_check_interval=1"],
        "optrace": ["verify.state_interval=1", "verify.replica_check_interval=1",
                    f"verify.ops=1-{a.steps}"],
    }
    names = list(configs)
    ms = {n: [] for n in names}
    per_run = {n: [] for n in names}
    tmp = tempfile.mkdtemp(prefix="bench_verify_")
    try:
        for r in range(a.reps):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                steps = run_once(a.lockstep, configs[n], a.steps, os.path.join(tmp, f"{n}{r}"))
                steady = steps[a.warmup:]
                ms[n] += steady
                per_run[n].append(statistics.median(steady))
                print(f"round {r + 1}/{a.reps} {n:8s} median {per_run[n][-1]:.1f} ms/step",
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(ms["off"])
    rows = []
    for n in names:
        med = statistics.median(ms[n])
        row = {"config": n, "sets": configs[n], "median_ms": round(med, 2),
               "run_medians_ms": [round(x, 2) for x in per_run[n]],
               "overhead_pct": round(100 * (med / base - 1), 2)}
        rows.append(row)
        print(json.dumps(row))
    print("\n| config | median ms/step | run medians | overhead vs off |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['config']} | {row['median_ms']:.1f} | "
              f"{min(row['run_medians_ms']):.1f}–{max(row['run_medians_ms']):.1f} | "
              f"{row['overhead_pct']:+.2f}% |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"steps": a.steps, "warmup": a.warmup, "reps": a.reps, "layout": "np2 DP2",
                       "configs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
