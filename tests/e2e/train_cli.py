"""The CLI end to end: bad configs fail with one clear line before any work; the loss on
the built-in corpus falls; a preprocessed text dataset trains; `lockstep run` launches
mpirun. Usage: train_cli.py BINARY MPIRUN SOURCE_DIR WORK_DIR [learning|errors|data]"""
import json
import os
import shutil
import subprocess
import sys

from common import mpirun_flags, run_train

binary, mpirun, src, work = sys.argv[1:5]
part = sys.argv[5] if len(sys.argv) > 5 else "all"
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
os.makedirs(work, exist_ok=True)
passed = failed = 0


def report(ok, what):
    global passed, failed
    print(("  ok    " if ok else "  FAIL  ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def run(args, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)


if part in ("all", "errors"):
    out = os.path.join(work, "must_not_exist")
    shutil.rmtree(out, ignore_errors=True)
    cases = [
        (["train", tiny, "--set", "parallel.tp=2"], "ranks = 1 is not a multiple of parallel.tp = 2"),
        (["train", tiny, "--set", "model.heads=3"], "model.d_model = 128 is not divisible by model.heads = 3"),
        (["train", tiny, "--set", "model.dmodel=3"], "did you mean 'model.d_model'"),
        (["train", tiny, "--set", "run.determinism=exact"], "invariant, deterministic, fast"),
        (["train", tiny, "--set", "optim.lr=fast"], "optim.lr=fast: 'fast' is not a number"),
        (["train", tiny, "--set", "parallel.microbatch=9"], "exceeds the 8 sequences per DP rank"),
        (["train", os.path.join(work, "nope.toml")], "cannot read config file"),
        (["run", "--np", "3", "--tp", "2", tiny], "ranks = 3 is not a multiple of parallel.tp = 2"),
        (["run", "--np", "4", tiny, "--set", "data.global_batch=6"], "data.global_batch = 6 is not divisible"),
        (["train", tiny, "--set", "data.path=" + os.path.join(work, "missing_prefix")], "missing_prefix"),
    ]
    for args, want in cases:
        res = run([binary] + args + ["--set", f"run.out={out}"])
        lines = [l for l in res.stderr.splitlines() if l.strip()]
        ok = res.returncode != 0 and want in res.stderr and not os.path.exists(os.path.join(out, "trace.jsonl"))
        ok = ok and any(l.startswith("lockstep: error") for l in lines)
        report(ok, f"{' '.join(args[:1] + args[2:])[:60]:60s} -> exit {res.returncode}")
        if not ok:
            print("    stderr:", res.stderr.strip()[:400])

if part in ("all", "learning"):
    # Measured: tiny, dropout 0, lr 3e-3, 60 steps: the mean loss of steps 56-60 is ~2.0-2.2
    # nats (from 5.59 at step 1). The threshold 2.7 is below the corpus' unigram byte entropy
    # (2.92 nats), so passing needs a model that uses context, not just byte frequencies.
    out = os.path.join(work, "learning")
    run_train(binary, mpirun, 1, out, tiny,
              ["run.steps=60", "model.dropout=0", "optim.lr=3e-3", "optim.warmup=5", "run.threads=2"])
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    report(not any("compute_ms" in r for r in rows), "one rank: no per-rank times in metrics.jsonl")
    losses = [float(r["loss"]) for r in rows]
    tail = sum(losses[-5:]) / 5
    report(losses[0] > 5.0 and tail < 2.7,
           f"loss falls: step 1 {losses[0]:.3f} -> mean of last 5 steps {tail:.3f} (threshold 2.7)")

if part in ("all", "data"):
    text = os.path.join(work, "corpus.txt")
    with open(text, "w") as f:
        f.write(("the quick brown fox jumps over the lazy dog. " * 40 + "\n") * 30)
    jsonl = os.path.join(work, "docs.jsonl")
    with open(jsonl, "w") as f:
        for i in range(50):
            f.write(json.dumps({"text": f"document {i}: " + "lorem ipsum dolor sit amet " * 20}) + "\n")
    prefix = os.path.join(work, "textdata")
    res = run([binary, "data", "preprocess", "--input", text, "--input", jsonl, "--output-prefix", prefix])
    report(res.returncode == 0 and os.path.exists(prefix + ".idx"), "data preprocess writes .bin/.idx")
    out = os.path.join(work, "textrun")
    res = run_train(binary, mpirun, 2, out, tiny, ["run.steps=3", f"data.path={prefix}", "run.threads=1"])
    report(len(open(os.path.join(out, "trace.jsonl")).readlines()) == 3, "DP=2 trains on the preprocessed dataset")
    # Every rank's forward/backward and gradient-sync time per step, and the closing line that
    # names the slowest rank (what the others wait for).
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    # Each rank's compute and sync on its own clock, within its own step so far (rank_ms);
    # only rank 0's is on the clock of the step's `ms`.
    ok = all(len(r[k]) == 2 for r in rows for k in ("compute_ms", "sync_ms", "rank_ms"))
    ok = ok and all(0 < c and 0 <= y and c + y <= t and r["rank_ms"][0] <= r["ms"]
                    for r in rows for c, y, t in zip(r["compute_ms"], r["sync_ms"], r["rank_ms"]))
    summary = [l for l in res.stdout.splitlines() if l.startswith("ranks: compute ")]
    report(ok and len(summary) == 1 and "(medians of 2 steps)" in summary[0],
           "DP=2: metrics.jsonl's compute_ms / sync_ms / rank_ms per rank, one 'ranks:' line at the end")
    if not ok or len(summary) != 1:
        print("    ", rows[-1], summary)
    res = run([binary, "run", "--np", "2", "--tp", "2", tiny, "--set", "run.steps=2",
               "--set", "run.out=" + os.path.join(work, "viarun")],
              mpirun_flags.ROOT_ENV)
    report(res.returncode == 0 and "lockstep run: mpirun" in res.stdout and "step 2/2" in res.stdout,
           "lockstep run --np 2 --tp 2 prints the mpirun command and trains")
    if res.returncode != 0:
        print(res.stdout[-800:], res.stderr[-800:])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
