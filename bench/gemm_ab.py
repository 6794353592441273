#!/usr/bin/python3
"""A/B of two bench_gemm binaries, alternated: each round runs the old binary, then the new one
(the order flips every round), each on the same shapes, impls and threads. The two binaries
run in different processes, seconds to minutes apart, so on a shared VM their absolute GFLOP/s
drift with the host; the ratio of two impls measured in one process (canonical / chain by
default; bench_gemm interleaves the impls' trials) drifts much less, and its median over the
rounds is what this compares. Prints every bench_gemm JSON line with
"bin" and "round" added, then one summary line per (shape, threads): the median ratio per
binary, its range, and the median of new / old for the first impl's GFLOP/s.
usage: bench/gemm_ab.py --old OLD_BENCH_GEMM --new build/bin/bench_gemm [--rounds 6]
       [--shapes model,gpt2] [--threads 1] [--cpus 0] [--impls canonical,chain] [-- extra args]"""
import argparse, json, os, statistics, subprocess, sys

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--old", required=True, help="the bench_gemm binary before the change")
p.add_argument("--new", required=True, help="the bench_gemm binary after it")
p.add_argument("--rounds", type=int, default=6)
p.add_argument("--shapes", default="model,gpt2")
p.add_argument("--threads", default="1", help="one thread count per run of this script")
p.add_argument("--cpus", default="", help="taskset CPU list (e.g. 0 for one core; empty: none)")
p.add_argument("--impls", default="canonical,chain", help="the ratio is first / second")
p.add_argument("--reps", type=int, default=5)
p.add_argument("--min-time", default="0.1")
p.add_argument("extra", nargs="*", help="more bench_gemm options, after --")
a = p.parse_args()
for b in (a.old, a.new):
    if not os.access(b, os.X_OK):
        sys.exit(f"gemm_ab: {b} is not an executable bench_gemm (build it: ninja -C build bench_gemm)")
impls = a.impls.split(",")
if len(impls) != 2:
    sys.exit("gemm_ab: --impls takes two impls (the ratio is the first over the second)")
# OpenBLAS's core override would make `openblas` rows differ between hosts; not asked for here.
env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
gflops = {}  # (bin, round, shape, threads, impl) -> GFLOP/s
for r in range(a.rounds):
    for b in (("old", "new") if r % 2 == 0 else ("new", "old")):
        cmd = (["taskset", "-c", a.cpus] if a.cpus else []) + [
            getattr(a, b), "--impls", a.impls, "--threads", a.threads, "--shapes", a.shapes,
            "--reps", str(a.reps), "--min-time", a.min_time] + a.extra
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"gemm_ab: {' '.join(cmd)} failed ({run.returncode}):\n{run.stderr.strip()}")
        for line in run.stdout.splitlines():
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            gflops[(b, r, row["shape"], row["threads"], row["impl"])] = row["gflops"]
            print(json.dumps({"bin": b, "round": r, **row}), flush=True)
cases = sorted({(k[2], k[3]) for k in gflops}, key=lambda c: (c[1], c[0]))
for shape, t in cases:
    out = {"summary": "gemm_ab", "shape": shape, "threads": t, "ratio": f"{impls[0]}/{impls[1]}"}
    for b in ("old", "new"):
        rs = [gflops[(b, r, shape, t, impls[0])] / gflops[(b, r, shape, t, impls[1])]
              for r in range(a.rounds)]
        out[b] = {"median": round(statistics.median(rs), 4), "min": round(min(rs), 4),
                  "max": round(max(rs), 4)}
    out[f"new/old {impls[0]}"] = round(statistics.median(
        gflops[("new", r, shape, t, impls[0])] / gflops[("old", r, shape, t, impls[0])]
        for r in range(a.rounds)), 4)
    print(json.dumps(out), flush=True)
