#!/usr/bin/python3
"""bench_pipeline: pipeline parallelism against DP and TP on bench-small (4 layers), side by
side in one run (docs/benchmarks.md, "Pipeline parallelism").

Runs, interleaved (round r runs every configuration once, in an order rotated by r), --reps
rounds of `lockstep train launch/configs/bench-small.toml` at np 2 (1 thread per rank):
DP2, TP2, PP2 with 1F1B and GPipe at microbatch 2 (8 microbatches per step) and 1F1B at
microbatch 1 (16), and at np 4 (oversubscribed on a 2-core machine) PP2 x DP2. Per
configuration: median ms/step over the steady-state steps (the first --warmup of each run
skipped), tokens/s, for PP the measured bubble per stage (the time a rank waited for its
neighbours, metrics.jsonl's pipeline_wait_ms, over the step time: bubble plus transfers and
imbalance) next to the model (p - 1) / (m + p - 1), and the peak RSS of every rank
(metrics.jsonl's peak_rss_mib, which pipeline runs write: 1F1B holds at most p microbatches of
activations on a stage, GPipe all m).

Prints one JSON line per configuration and a markdown table; --out FILE writes
{"meta", "configs"} as JSON.

Example (about 3 minutes on a quiet 2-core machine):
  /usr/bin/python3 bench/bench_pipeline.py --lockstep build/bin/lockstep --out pp.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "launch"))
import mpirun_flags  # noqa: E402  (launch/mpirun.flags, the one spelling of the flags)

CONFIG = REPO / "launch" / "configs" / "bench-small.toml"
CONFIGS = [  # name, np, sets
    ("DP2", 2, ["parallel.microbatch=2"]),
    ("TP2", 2, ["parallel.tp=2", "parallel.microbatch=2"]),
    ("PP2 1F1B m8", 2, ["parallel.pp=2", "parallel.microbatch=2"]),
    ("PP2 GPipe m8", 2, ["parallel.pp=2", "parallel.microbatch=2", "parallel.schedule=gpipe"]),
    ("PP2 1F1B m16", 2, ["parallel.pp=2", "parallel.microbatch=1"]),
    ("PP2xDP2 1F1B m4 (np 4)", 4, ["parallel.pp=2", "parallel.microbatch=2"]),
]


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run(lockstep, np, sets, steps, out):
    cmd = [lockstep, "train", str(CONFIG), "--set", f"run.out={out}", "--set",
           f"run.steps={steps}", "--set", "run.threads=1", "--set", "ckpt.save=false"]
    for s in sets:
        cmd += ["--set", s]
    if np > 1:
        cmd = (["mpirun"] + mpirun_flags.ROOT + mpirun_flags.OVERSUBSCRIBE + mpirun_flags.UNBOUND
               + mpirun_flags.LOOPBACK + ["-np", str(np)] + cmd)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.stderr.write(res.stdout + res.stderr)
        raise SystemExit(f"bench_pipeline: {' '.join(cmd)} exited {res.returncode}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lockstep", default=str(REPO / "build" / "bin" / "lockstep"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    tokens = 16 * 256  # bench-small: global batch 16 x context 256
    steady = {name: [] for name, _, _ in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.reps):
            order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
            for name, np, sets in order:
                m = run(a.lockstep, np, sets, a.steps, os.path.join(tmp, f"{r}_{np}_{len(sets)}"))
                steady[name] += m[a.warmup:]
    results = []
    for name, np, sets in CONFIGS:
        lines = steady[name]
        ms = statistics.median(l["ms"] for l in lines)
        c = {"name": name, "np": np, "sets": sets, "ms_per_step": round(ms, 1),
             "tokens_per_s": round(tokens / ms * 1e3), "steps": len(lines)}
        if "pipeline_wait_ms" in lines[0]:
            pp = 2
            mb = int(next(s for s in sets if s.startswith("parallel.microbatch")).split("=")[1])
            dp = np // pp
            m = 16 // dp // mb
            waits = [statistics.median(l["pipeline_wait_ms"][i] for l in lines)
                     for i in range(np)]
            c["microbatches"] = m
            c["bubble_model"] = round((pp - 1) / (m + pp - 1), 3)
            c["bubble_measured_by_rank"] = [round(w / ms, 3) for w in waits]
            c["peak_rss_mib_by_rank"] = [round(x) for x in lines[-1]["peak_rss_mib"]]
        results.append(c)
        print(json.dumps(c), flush=True)
    dp2 = next(c for c in results if c["name"] == "DP2")["ms_per_step"]
    print(f"\nbench-small, {cpu_model()}, {os.cpu_count()} CPUs, 1 thread per rank\n")
    print("| layout | ms/step | tokens/s | vs DP2 | bubble model | bubble measured (per rank) "
          "| peak RSS MiB (per rank) |")
    print("|---|---|---|---|---|---|---|")
    for c in results:
        print(f"| {c['name']} | {c['ms_per_step']} | {c['tokens_per_s']} | "
              f"{c['ms_per_step'] / dp2:.2f}x | {c.get('bubble_model', '')} | "
              f"{' / '.join(str(x) for x in c.get('bubble_measured_by_rank', []))} | "
              f"{' / '.join(str(x) for x in c.get('peak_rss_mib_by_rank', []))} |")
    if a.out:
        meta = {"cpu": cpu_model(), "cpus": os.cpu_count(), "steps": a.steps,
                "warmup": a.warmup, "reps": a.reps, "command": " ".join(sys.argv)}
        Path(a.out).write_text(json.dumps({"meta": meta, "configs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
