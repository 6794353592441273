"""Pipeline parallelism keeps the bits (docs/design.md section 8): a 4-layer tiny (dropout on)
trained on TPxDPxPP layouts, 1F1B and GPipe, ZeRO on and off, equal stages and uneven ones
(parallel.pp_layers), must write a trace.jsonl byte-identical to one process, and every
stage's activation slots must hold what the banner's memory estimate says; a checkpoint saved
at PP2 x TP2 resumes at 1x1x1, DP2, PP2 x DP2, PP4 and an uneven 3 + 1 split bit for bit (G4
across PP); a SIGTERM to one rank stops every stage after the same step, and the run resumes
bit for bit; the validator refuses bad pipeline configs with one line each, before anything
starts; a stage that fails takes the whole job down with its message.
Usage: train_pipeline.py BINARY MPIRUN SOURCE_DIR WORK_DIR PART (layouts | resume | errors)"""
import json
import os
import re
import shutil
import subprocess
import sys

from common import MPI_FLAGS, first_difference, read_trace, run_train, sigterm_after

binary, mpirun, src, work, part = sys.argv[1:6]
config = os.path.join(src, "launch", "configs", "tiny.toml")
work = os.path.join(work, part)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failed = 0
# tiny with 4 layers (PP 4 gets one layer per stage), global batch 8 (8 microbatches of 1)
base = ["model.layers=4", "run.threads=1", "run.steps=5"]


def expect_same(what, ref, trace):
    global failed
    diff = first_difference(ref, trace)
    if diff is None and len(trace) == len(ref):
        print(f"  {what}: identical at every step")
    else:
        failed += 1
        print(f"  {what}: DIFFERS: {diff}")


def banner(res, key):
    return next((l.strip() for l in res.stdout.splitlines() if key in l), "")


def train_direct(np, name, sets):
    """`lockstep train` under mpirun without the launcher, expected to fail: (rc, output)."""
    cmd = [mpirun] + MPI_FLAGS + ["-np", str(np), binary, "train", config, "--set",
                                  f"run.out={os.path.join(work, name)}"]
    for s in base + sets:
        cmd += ["--set", s]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    return res.returncode, res.stdout + res.stderr


UNITS = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}


def check_rank_times(name, np, run_dir):
    """metrics.jsonl's per-rank times under PP, one value per world rank: compute (the passes
    less the pipeline wait) > 0, wait and DP sync >= 0, and compute + wait + sync within the
    rank's own step so far (rank_ms, its own clock), which is within rank 0's step `ms` on rank
    0. Another rank's step may start before rank 0's (a rank 1 at 68.2 ms of compute + wait
    against rank 0's 67.0 ms step 1 on an oversubscribed 2-core host), so `ms` bounds rank 0's
    alone."""
    global failed
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f]
    keys = ("compute_ms", "sync_ms", "pipeline_wait_ms", "rank_ms")
    bad = [r["step"] for r in rows
           if not all(len(r[k]) == np for k in keys)
           or not all(0 < c and 0 <= w and 0 <= y and c + w + y <= t
                      for c, w, y, t in zip(*(r[k] for k in ("compute_ms", "pipeline_wait_ms",
                                                              "sync_ms", "rank_ms"))))
           or not r["rank_ms"][0] <= r["ms"]]
    if bad:
        failed += 1
        print(f"  {name}: compute_ms / pipeline_wait_ms / sync_ms / rank_ms out of range at steps "
              f"{bad}: {rows[-1]}")


def check_activations(name, res, run_dir):
    """The banner's per-stage activation estimate ("activations 3 x 1.07 MiB", three
    significant digits) against what every rank's slots hold (metrics.jsonl's activation_mib,
    world rank order; PP outermost, so stage = rank // (ranks / pp))."""
    global failed
    est = {}
    for line in res.stdout.splitlines():
        m = re.search(r"stage (\d+): .*activations (?:(\d+) x )?([\d.]+) (B|KiB|MiB|GiB)", line)
        if m:
            est[int(m.group(1))] = (int(m.group(2) or 1), float(m.group(3)) * UNITS[m.group(4)])
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        measured = [json.loads(l) for l in f if "activation_mib" in l][-1]["activation_mib"]
    per_stage = len(measured) // max(1, len(est))
    bad = [(r, a, est.get(r // per_stage)) for r, a in enumerate(measured)
           if r // per_stage not in est
           or abs(a - est[r // per_stage][0] * est[r // per_stage][1])
           > est[r // per_stage][0] * est[r // per_stage][1] * 0.006]
    if not est or bad:
        failed += 1
        print(f"  {name}: activation estimate vs measured (rank, MiB, (slots, MiB)): {bad or est}")
    else:
        print(f"  {name}: activations held per rank (MiB) "
              f"{', '.join(f'{a:.3g}' for a in measured)} = the banner's estimate")


if part == "layouts":
    layouts = [
        ("1x1x1", 1, []),
        ("PP2 (1F1B)", 2, ["parallel.pp=2"]),
        ("PP2 (GPipe)", 2, ["parallel.pp=2", "parallel.schedule=gpipe"]),
        ("PP2, microbatch 2 (4 microbatches)", 2, ["parallel.pp=2", "parallel.microbatch=2"]),
        ("PP4 (1 layer per stage)", 4, ["parallel.pp=4"]),
        ("PP2, parallel.pp_layers 1 + 3", 2, ["parallel.pp=2", "parallel.pp_layers=1,3"]),
        ("PP3, parallel.pp_layers 1 + 2 + 1", 3, ["parallel.pp=3", "parallel.pp_layers=1,2,1"]),
        ("TP2 x PP2", 4, ["parallel.pp=2", "parallel.tp=2"]),
        ("DP2 x PP2, ZeRO-1", 4, ["parallel.pp=2", "parallel.zero=true"]),
        ("DP2 x PP2, GPipe", 4, ["parallel.pp=2", "parallel.schedule=gpipe"]),
        ("TP2 x DP2 x PP2, ZeRO-1 (np 8)", 8, ["parallel.pp=2", "parallel.tp=2",
                                              "parallel.zero=true"]),
    ]
    print("tiny with 4 layers, dropout 0.1, 5 steps: trace.jsonl against 1x1x1")
    ref = None
    for i, (name, np, sets) in enumerate(layouts):
        res = run_train(binary, mpirun, np, os.path.join(work, f"run{i}"), config, base + sets)
        g3 = "G3 ✓" in banner(res, "guarantees:")
        if not g3:
            failed += 1
            print(f"  {name}: the validator does not claim G3: {banner(res, 'guarantees:')}")
        trace = read_trace(os.path.join(work, f"run{i}"))
        if ref is None:
            ref = trace
            print(f"  {name}: reference")
            continue
        pipe = banner(res, "pipeline:")
        if pipe:
            check_activations(name, res, os.path.join(work, f"run{i}"))
            check_rank_times(name, np, os.path.join(work, f"run{i}"))
        expect_same(name + (f" [{pipe.split(',')[1].strip()}]" if pipe else ""), ref, trace)
    # The tied embedding's two copies (first and last stage) are compared by the replica guard
    # every step; it ran above (verify.replica_check_interval = 1) without a complaint.

elif part == "resume":
    print("G4 across PP: saved at TP2 x PP2 (step 3), resumed on other layouts to step 5")
    straight = os.path.join(work, "straight")
    run_train(binary, mpirun, 1, straight, config, base)
    ref = read_trace(straight)
    saved = os.path.join(work, "saved")
    run_train(binary, mpirun, 4, saved, config,
              base + ["parallel.pp=2", "parallel.tp=2", "run.stop_at=3"])
    for name, np, sets in [("1x1x1", 1, []), ("DP2", 2, []),
                           ("DP2 x PP2", 4, ["parallel.pp=2"]),
                           ("PP4, GPipe", 4, ["parallel.pp=4", "parallel.schedule=gpipe"]),
                           ("PP2, pp_layers 3 + 1", 2, ["parallel.pp=2",
                                                        "parallel.pp_layers=3,1"])]:
        out = os.path.join(work, "resumed_" + name.split(",")[0].replace(" ", ""))
        shutil.copytree(saved, out)
        res = run_train(binary, mpirun, np, out, config, base + sets + ["run.resume=auto"])
        note = banner(res, "resumed from")
        if "x PP 2" not in note:
            failed += 1
            print(f"  {name}: the banner does not say the checkpoint was saved at PP 2: {note}")
        expect_same(f"saved at TP2 x PP2, resumed on {name}", ref, read_trace(out))
    # and the other way: saved on one process, resumed as a pipeline
    saved1 = os.path.join(work, "saved1")
    run_train(binary, mpirun, 1, saved1, config, base + ["run.stop_at=2"])
    out = os.path.join(work, "resumed_pp2tp2")
    shutil.copytree(saved1, out)
    run_train(binary, mpirun, 4, out, config,
              base + ["parallel.pp=2", "parallel.tp=2", "run.resume=auto"])
    expect_same("saved at 1x1x1 (step 2), resumed on TP2 x PP2", ref, read_trace(out))

    # SIGTERM to one rank only (stage 0 of PP2): the stop is agreed over the whole world, so
    # both stages finish the step, save and exit 4; resumed on one process, the run continues
    # bit for bit.
    long = base + ["run.steps=400"]
    out = os.path.join(work, "sigterm")
    rc, log, k = sigterm_after(binary, mpirun, 2, out, config, long + ["parallel.pp=2"], 2, ranks=1)
    saved_k = os.path.exists(os.path.join(out, "checkpoints", f"step_{k:08d}"))
    if rc != 4 or not saved_k or "signal 15" not in log:
        failed += 1
        print(f"  SIGTERM to one rank of PP2: expected exit 4 and a checkpoint at step {k}, "
              f"got rc {rc}:\n{log[-2000:]}")
    else:
        print(f"  SIGTERM to one rank of PP2: both stages stopped after step {k}, saved, exit 4")
    ref_dir = os.path.join(work, "sigterm_ref")
    run_train(binary, mpirun, 1, ref_dir, config, long + [f"run.stop_at={k + 2}"])
    run_train(binary, mpirun, 1, out, config, long + [f"run.stop_at={k + 2}", "run.resume=auto"])
    expect_same(f"SIGTERM on PP2 after step {k}, resumed on 1x1x1 to step {k + 2}",
                read_trace(ref_dir), read_trace(out))

    # verify bisect across a pipeline: an op of stage 1 perturbed from step 3 on is named, on the
    # ranks of stage 1 only.
    print("verify bisect on PP 2: debug.perturb of an op on stage 1")
    a = os.path.join(work, "bisect_a")
    run_train(binary, mpirun, 2, a, config, base + ["parallel.pp=2", "run.steps=4",
                                                   "ckpt.interval=2"])
    b = os.path.join(work, "bisect_b")
    ck = os.path.join(b, "checkpoints", "step_00000002")
    shutil.copytree(os.path.join(a, "checkpoints", "step_00000002"), ck)
    op = "layers.3.mlp.fc1.fwd"
    run_train(binary, mpirun, 2, b, config, base + ["parallel.pp=2", "run.steps=4",
                                                   f"run.resume={ck}", f"debug.perturb={op}"])
    res = subprocess.run([binary, "verify", "bisect", a, b, "--json"], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, **{"OMP_NUM_THREADS": "1"}))
    out = res.stdout
    try:
        j = json.loads(out[out.index("\n{") + 1:out.rindex("}") + 1])
        ops = j["ops"]
        ok = (j["first_divergent_step"] == 3 and ops["origin_op"] == op
              and ops["origin_ranks"] == [1] and out.count("reproduces the original") == 2)
    except (ValueError, KeyError) as e:
        ok, ops = False, str(e)
    if not ok:
        failed += 1
        print(f"  bisect: expected {op} at step 3 on rank 1 (stage 1), got rc {res.returncode}:"
              f"\n{out}{res.stderr}")
    else:
        print(f"  bisect: first divergent step 3, origin {ops['origin_op']} on rank(s) "
              f"{ops['origin_ranks']} (stage 1 of 2); both replays reproduce their runs")

elif part == "errors":
    print("bad pipeline configs: one line each, nothing started")

    def refused(what, np, sets, expect):
        global failed
        cmd = [binary, "run", "--np", str(np), config, "--set",
               f"run.out={os.path.join(work, 'bad')}"]
        for s in base + sets:
            cmd += ["--set", s]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
        lines = [l for l in (res.stdout + res.stderr).splitlines() if expect in l]
        started = os.path.exists(os.path.join(work, "bad", "trace.jsonl"))
        if res.returncode == 0 or not lines or started:
            failed += 1
            print(f"  {what}: expected a refusal naming '{expect}', got rc {res.returncode}, "
                  f"started={started}:\n{res.stdout}{res.stderr}")
        else:
            print(f"  {what}: {lines[0].strip()}")

    refused("layers not divisible by PP", 3, ["parallel.pp=3"], "is not divisible by parallel.pp")
    refused("too few microbatches for 1F1B", 4,
            ["parallel.pp=4", "parallel.microbatch=4"], "1f1b needs at least parallel.pp = 4")
    refused("parallel.pp_layers not adding up to the layers", 2,
            ["parallel.pp=2", "parallel.pp_layers=1,2"], "parallel.pp_layers adds up to 3")
    refused("TP x DP x PP != ranks", 3, ["parallel.pp=2"], "not a multiple of parallel.tp x parallel.pp")
    # GPipe has no such minimum: 2 microbatches on 4 stages run (and keep the bits).
    res = run_train(binary, mpirun, 4, os.path.join(work, "gpipe_m2"), config,
                    base + ["parallel.pp=4", "parallel.microbatch=4", "parallel.schedule=gpipe"])
    warn = banner(res, "warning: the pipeline idles")
    print(f"  GPipe, 2 microbatches on 4 stages: runs; {warn or 'NO bubble warning'}")
    failed += not warn
    ref = os.path.join(work, "ref_mb4")
    run_train(binary, mpirun, 1, ref, config, base + ["parallel.microbatch=4"])
    expect_same("GPipe, 2 microbatches on 4 stages vs 1x1x1", read_trace(ref),
                read_trace(os.path.join(work, "gpipe_m2")))
    # A failing stage: debug.nan makes the last stage's gradient non-finite at step 2; the
    # guard stops the whole job (exit 3) with one line, on every stage, nothing hangs.
    rc, out = train_direct(2, "nan", ["parallel.pp=2", "debug.nan=2:final_ln.bias"])
    if rc != 3 or "final_ln.bias" not in out or "tp0-dp0-pp1" not in out:
        failed += 1
        print(f"  non-finite gradient on stage 1: expected exit 3 naming final_ln.bias on "
              f"tp0-dp0-pp1, got {rc}:\n{out}")
    else:
        line = next(l for l in out.splitlines() if "final_ln.bias" in l)
        print(f"  non-finite gradient on stage 1: exit 3: {line.strip()}")
    # An exception on some ranks: rank 3 (the last of 4 stages) flips a bit of its copy of the
    # tied embedding after step 2; the stage guard on the first and last stage fails, and the
    # middle stages, waiting in the next step, are taken down with them.
    rc, out = train_direct(4, "flip", ["parallel.pp=4", "debug.bitflip=3:2:embed.weight"])
    hit = [l for l in out.splitlines() if "differs between the pipeline stages" in l]
    if rc == 0 or not hit or "at step 2" not in hit[0]:
        failed += 1
        print(f"  bit flip in the last stage's embed.weight: expected the stage guard to stop "
              f"the job at step 2, got rc {rc}:\n{out}")
    else:
        print(f"  bit flip in the last stage's embed.weight: exit {rc}: "
              f"{hit[0].strip()[:160]}")
else:
    raise SystemExit(f"unknown part {part}")

if failed:
    raise SystemExit(f"FAIL: {failed} check(s)")
print("PASS")
