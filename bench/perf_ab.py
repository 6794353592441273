#!/usr/bin/python3
"""A/B of two lockstep binaries on bench-small, interleaved: each round runs every
(binary, layout, mode) once in a rotated order. Prints one JSON line per run, then one per
config with the median steady ms/step and cpu_ms/step over all rounds (first --warmup steps
of a run skipped). For checking that a change to the step is faster (the training benchmark
against PyTorch is bench_train.py).
usage: bench/perf_ab.py --old OLD_BINARY --new build/bin/lockstep [--reps 4] [--layouts np1x2,np2x1]"""
import argparse, json, os, statistics, subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "launch"))
import mpirun_flags  # noqa: E402  (launch/mpirun.flags, the one spelling of the flags)
p = argparse.ArgumentParser()
p.add_argument("--old", required=True); p.add_argument("--new", required=True)
p.add_argument("--config", default=str(Path(__file__).resolve().parent.parent / "launch" / "configs" / "bench-small.toml"))
p.add_argument("--steps", type=int, default=5); p.add_argument("--warmup", type=int, default=2)
p.add_argument("--reps", type=int, default=3)
p.add_argument("--layouts", default="np1x2,np2x1"); p.add_argument("--modes", default="invariant,fast")
a = p.parse_args()
env = dict(os.environ, OPENBLAS_CORETYPE="SkylakeX", **mpirun_flags.ROOT_ENV)
cfgs = [(b, l, m) for b in ("old", "new") for l in a.layouts.split(",") for m in a.modes.split(",")]
res = {c: {"ms": [], "cpu_ms": []} for c in cfgs}
tmp = tempfile.mkdtemp(prefix="perf-ab-")
for r in range(a.reps):
    order = cfgs[r % len(cfgs):] + cfgs[:r % len(cfgs)]
    for (b, l, m) in order:
        binp = a.old if b == "old" else a.new
        out = Path(tmp) / f"{b}-{l}-{m}-{r}"
        npr, th = {"np1x2": (1, 2), "np2x1": (2, 1), "np1x1": (1, 1)}[l]
        cmd = [] if npr == 1 else (["mpirun"] + mpirun_flags.ROOT + mpirun_flags.OVERSUBSCRIBE
                                   + mpirun_flags.UNBOUND + ["-np", "2", "-x", "OMP_NUM_THREADS=1",
                                                             "-x", "OPENBLAS_CORETYPE"])
        cmd += [binp, "train", a.config, "--set", f"run.steps={a.steps}", "--set", f"run.out={out}",
                "--set", f"run.threads={th}", "--set", f"run.determinism={m}",
                "--set", f"parallel.microbatch={16 // npr}"]
        e = dict(env, OMP_NUM_THREADS=str(th), OPENBLAS_NUM_THREADS=str(th))
        subprocess.run(cmd, env=e, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
        res[(b, l, m)]["ms"] += [x["ms"] for x in rows[a.warmup:]]
        res[(b, l, m)]["cpu_ms"] += [x.get("cpu_ms", float("nan")) for x in rows[a.warmup:]]
        print(json.dumps({"round": r, "bin": b, "layout": l, "mode": m,
                          "ms": [round(x["ms"], 1) for x in rows[a.warmup:]]}), flush=True)
for (b, l, m), v in res.items():
    ms = sorted(v["ms"])
    if not ms:
        continue
    print(json.dumps({"bin": b, "layout": l, "mode": m, "n": len(ms),
                      "ms_median": round(statistics.median(ms), 1), "ms_min": round(ms[0], 1),
                      "ms_max": round(ms[-1], 1),
                      "cpu_ms_median": round(statistics.median(v["cpu_ms"]), 1)}))
