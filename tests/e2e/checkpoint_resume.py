"""G2 and G4 end to end, and crash safety: a run that stops (run.stop_at, a rank killed in
the middle of a save, SIGTERM) and resumes, on the same layout or another one, must write
exactly the trace.jsonl lines (loss bits and the fingerprint of every parameter, gradient and
AdamW moment) of the uninterrupted run. Bad resumes are refused with one clear error.
Usage: checkpoint_resume.py BINARY MPIRUN SOURCE_DIR WORK_DIR PART
PART: g2 | g4 | crash | refuse"""
import glob
import json
import os
import shutil
import subprocess
import sys

from common import MPI_FLAGS, first_difference, read_trace, run_train, sigterm_after

binary, mpirun, src, work, part = sys.argv[1:6]
config = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
N = 6
failed = 0

LAYOUTS = {  # name -> (np, overrides)
    "1x1": (1, []),
    "DP2": (2, []),
    "TP2": (2, ["parallel.tp=2"]),
    "TP2xDP2": (4, ["parallel.tp=2"]),
    "DP2+ZeRO": (2, ["parallel.zero=true"]),
    "TP2xDP2+ZeRO": (4, ["parallel.tp=2", "parallel.zero=true"]),
}


def run(layout, out, sets):
    np, extra = LAYOUTS[layout]
    return run_train(binary, mpirun, np, out, config, [f"run.steps={N}"] + extra + sets)


def expect_same(name, ref, got):
    global failed
    diff = first_difference(ref, got)
    if diff is None and len(got) == len(ref):
        print(f"  {name:55s} identical ({len(got)} steps)")
    else:
        failed += 1
        print(f"  {name:55s} DIFFERS: {diff if diff else 'line count'}")


def latest(out):
    with open(os.path.join(out, "checkpoints", "latest")) as f:
        return f.read().strip()


if part == "g2":
    for mode in ["invariant", "deterministic"]:
        ref_dir = os.path.join(work, f"{mode}-ref")
        run("DP2", ref_dir, [f"run.determinism={mode}"])
        ref = read_trace(ref_dir)
        for k in [1, 3, 5]:
            out = os.path.join(work, f"{mode}-k{k}")
            run("DP2", out, [f"run.determinism={mode}", f"run.stop_at={k}"])
            assert len(read_trace(out)) == k and latest(out) == f"step_{k:08d}"
            run("DP2", out, [f"run.determinism={mode}", "run.resume=auto"])
            expect_same(f"{mode}, DP2: stop at {k}, resume (auto)", ref, read_trace(out))
        # Interval checkpoints + keep, then resume from an explicit PATH into a new run dir.
        out = os.path.join(work, f"{mode}-interval")
        run("DP2", out, [f"run.determinism={mode}", "ckpt.interval=2", "ckpt.keep=2"])
        kept = sorted(os.path.basename(d) for d in glob.glob(os.path.join(out, "checkpoints", "step_*")))
        if kept != ["step_00000004", "step_00000006"]:
            failed += 1
            print(f"  ckpt.keep=2 kept {kept}")
        out2 = os.path.join(work, f"{mode}-frompath")
        run("DP2", out2, [f"run.determinism={mode}",
                          f"run.resume={os.path.join(out, 'checkpoints', 'step_00000004')}"])
        expect_same(f"{mode}, DP2: resume from PATH (step 4) into a new run dir",
                    ref[4:], read_trace(out2))
        # The async writer gives the same checkpoint (fingerprints) and trajectory.
        out3 = os.path.join(work, f"{mode}-async")
        run("DP2", out3, [f"run.determinism={mode}", "ckpt.async=true", "ckpt.interval=2",
                          "run.stop_at=4"])
        run("DP2", out3, [f"run.determinism={mode}", "run.resume=auto"])
        expect_same(f"{mode}, DP2: async checkpoints, stop at 4, resume", ref, read_trace(out3))

elif part == "g4":
    ref_dir = os.path.join(work, "ref")
    run("1x1", ref_dir, [])
    ref = read_trace(ref_dir)
    for save_layout, resume_layouts in [
            ("TP2xDP2", ["1x1", "DP2", "TP2"]),
            ("TP2xDP2+ZeRO", ["1x1", "DP2", "TP2xDP2"]),
            ("DP2+ZeRO", ["DP2", "TP2"]),
            ("1x1", ["TP2xDP2+ZeRO"])]:
        saved = os.path.join(work, f"save-{save_layout}")
        run(save_layout, saved, ["run.stop_at=3"])
        expect_same(f"{save_layout} steps 1-3", ref[:3], read_trace(saved))
        for lay in resume_layouts:
            out = os.path.join(work, f"resume-{save_layout}-on-{lay}")
            run(lay, out, [f"run.resume={os.path.join(saved, 'checkpoints')}"])
            expect_same(f"saved on {save_layout}, resumed on {lay}", ref[3:], read_trace(out))

elif part == "crash":
    ref_dir = os.path.join(work, "ref")
    run("DP2", ref_dir, [])
    ref = read_trace(ref_dir)
    # Rank 1 dies right after writing its shard of the step-4 checkpoint.
    out = os.path.join(work, "killed")
    cmd = [mpirun] + MPI_FLAGS + ["-np", "2", binary, "train", config, "--set", f"run.out={out}",
                                  "--set", f"run.steps={N}", "--set", "ckpt.interval=2",
                                  "--set", "debug.kill_in_save=1:4"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    ok = res.returncode != 0 and latest(out) == "step_00000002" and \
        not os.path.exists(os.path.join(out, "checkpoints", "step_00000004"))
    print(f"  {'killed in the step-4 save: job failed, latest = step 2':55s} "
          f"{'yes' if ok else 'NO'} (exit {res.returncode}, latest {latest(out)})")
    failed += not ok
    run("DP2", out, ["run.resume=auto", "ckpt.interval=2"])
    expect_same("resume=auto after the crash", ref, read_trace(out))

    # SIGTERM to the ranks (what a scheduler does at preemption): finish the step, save, exit 4
    # (ExitStatus::preempted: a supervisor must not relaunch).
    steps = 400
    out = os.path.join(work, "sigterm")
    rc, log, k = sigterm_after(binary, mpirun, 2, out, config, [f"run.steps={steps}"], 3)
    ok = rc == 4 and latest(out) == f"step_{k:08d}" and "signal 15" in log
    print(f"  {'SIGTERM: step finished, checkpoint saved, exit 4':55s} "
          f"{'yes' if ok else 'NO'} (exit {rc}, stopped after step {k})")
    if not ok:
        print(log[-2000:])
    failed += not ok
    ref_dir = os.path.join(work, "ref400")
    run_train(binary, mpirun, 2, ref_dir, config, [f"run.steps={steps}", f"run.stop_at={k + 2}"])
    run_train(binary, mpirun, 2, out, config, [f"run.steps={steps}", f"run.stop_at={k + 2}",
                                               "run.resume=auto"])
    expect_same(f"SIGTERM after step {k}, resume to step {k + 2}", read_trace(ref_dir),
                read_trace(out))

elif part == "refuse":
    saved = os.path.join(work, "saved")
    run("DP2", saved, ["run.stop_at=2"])
    ck = os.path.join(saved, "checkpoints", "step_00000002")
    cases = [
        ("another model shape", ["model.ffn=256"], ["layers.0.mlp.fc1.weight", "[512, 128]",
                                                     "[256, 128]"]),
        ("another head count", ["model.heads=2"], ["model.heads"]),
        ("another contract", ["run.determinism=deterministic"], ["run.determinism",
                                                                 "allow_contract_change"]),
        ("a missing checkpoint PATH", ["run.resume=/nonexistent/ckpt"], ["/nonexistent/ckpt"]),
    ]
    shards = sorted(glob.glob(os.path.join(ck, "*.safetensors")))
    for name, sets, needles in cases:
        out = os.path.join(work, "r-" + name.replace(" ", "-"))
        sets = sets if any(s.startswith("run.resume") for s in sets) else sets + [f"run.resume={ck}"]
        cmd = [binary, "train", config, "--set", f"run.out={out}", "--set", f"run.steps={N}"]
        for s in sets:
            cmd += ["--set", s]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        text = res.stdout + res.stderr
        ok = res.returncode != 0 and all(n in text for n in needles) and \
            not os.path.exists(os.path.join(out, "trace.jsonl"))
        errors = [l for l in text.splitlines() if "error" in l and "lockstep" in l] or [text[-300:]]
        print(f"  refuses {name:45s} {'yes' if ok else 'NO'}: {errors[0][:160]}")
        failed += not ok
    # A contract change is accepted when asked for, and says what it costs.
    out = os.path.join(work, "contract-change")
    res = run_train(binary, mpirun, 2, out, config, [f"run.steps={N}", f"run.resume={ck}",
                                                      "run.determinism=deterministic",
                                                      "ckpt.allow_contract_change=true"])
    ok = "G2 no longer holds" in res.stdout
    print(f"  {'allow_contract_change: resumes and names the lost guarantee':55s} {'yes' if ok else 'NO'}")
    failed += not ok
    # A flipped byte in a shard: one clear error naming the file and tensor, non-zero exit.
    with open(shards[0], "r+b") as f:
        f.seek(os.path.getsize(shards[0]) - 5)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x10]))
    out = os.path.join(work, "corrupt")
    res = subprocess.run([mpirun] + MPI_FLAGS + ["-np", "2", binary, "train", config, "--set",
                          f"run.out={out}", "--set", f"run.steps={N}", "--set", f"run.resume={ck}"],
                         capture_output=True, text=True, timeout=300)
    text = res.stdout + res.stderr
    ok = res.returncode != 0 and os.path.basename(shards[0]) in text and "/" in text
    print(f"  {'refuses a flipped byte in a shard':55s} {'yes' if ok else 'NO'}")
    if not ok:
        print(text[-1500:])
    failed += not ok
else:
    raise SystemExit(f"unknown part {part}")

print("FAILED" if failed else "PASSED", f"({failed} failure(s))")
sys.exit(1 if failed else 0)
