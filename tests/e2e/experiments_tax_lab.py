"""tax emits well-formed JSON with every mode; lab (regression, and gpt on a short run) writes
summary.json in the issue's schema with >= 15 checks, all passing, and its figures.
tax --interleaved times the modes side by side in one process (debug.interleave) without
changing the bits of the run whose trace it writes.
Usage: experiments_tax_lab.py BINARY MPIRUN SOURCE_DIR WORK_DIR PART,
PART = tax | tax-interleaved | lab | lab-gpt"""
import json
import math
import os
import shutil
import sys

from experiments_common import MPI_ARGS, expect, lockstep

binary, mpirun, src, work, part = sys.argv[1:6]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def validate_summary(path, n_scenarios=5):
    with open(path) as f:
        s = json.load(f)
    expect(set(s) == {"checks_passed", "summary", "reference_final_loss"},
           "summary.json has exactly the keys checks_passed, summary, reference_final_loss")
    expect(isinstance(s["checks_passed"], int), "checks_passed is an integer")
    expect(isinstance(s["reference_final_loss"], float) and math.isfinite(s["reference_final_loss"]),
           "reference_final_loss is a finite number")
    expect(len(s["summary"]) == n_scenarios, f"{n_scenarios} scenarios")
    keys = {"scenario", "first_weight_mismatch", "weight_mismatch_steps",
            "hidden_weight_mismatch_steps", "maximum_weight_difference", "final_loss"}
    for e in s["summary"]:
        expect(set(e) == keys, f"{e.get('scenario')}: exactly the schema's fields")
        expect(e["first_weight_mismatch"] is None or isinstance(e["first_weight_mismatch"], int),
               f"{e['scenario']}: first_weight_mismatch is null or a step")
        expect(isinstance(e["weight_mismatch_steps"], int) and
               0 <= e["hidden_weight_mismatch_steps"] <= e["weight_mismatch_steps"],
               f"{e['scenario']}: 0 <= hidden <= mismatch steps")
        expect(e["maximum_weight_difference"] >= 0 and math.isfinite(e["final_loss"]),
               f"{e['scenario']}: max difference >= 0, finite final loss")
    return s


if part == "tax":
    jpath = os.path.join(work, "tax.json")
    modes = ["fast", "deterministic", "invariant", "invariant+verify"]
    res = lockstep(binary, ["tax", "--modes", ",".join(modes), "--trials", "2", "--steps", "3",
                            "--skip", "1", "--np", "1", "--json", jpath,
                            "--out", os.path.join(work, "runs")] + MPI_ARGS + [tiny])
    with open(jpath) as f:
        j = json.load(f)
    expect([m["mode"] for m in j["modes"]] == modes, "JSON lists every mode in order")
    for m in j["modes"]:
        expect(len(m["trial_medians_ms"]) == 2 and m["min_ms"] <= m["median_ms"] <= m["max_ms"]
               and m["min_ms"] > 0, f"{m['mode']}: 2 trials, 0 < min <= median <= max")
        expect(isinstance(m["tax_pct"], float), f"{m['mode']}: tax_pct is a number")
        p = m["paired_tax_pct"]
        fast_ms = j["modes"][0]["trial_medians_ms"]
        want = [100.0 * (x / f - 1.0) for x, f in zip(m["trial_medians_ms"], fast_ms)]
        expect(len(p["per_trial"]) == 2 and
               all(abs(a - b) < 1e-9 for a, b in zip(p["per_trial"], want)) and
               p["min"] <= p["median"] <= p["max"],
               f"{m['mode']}: paired tax = its trial medians over fast's, trial by trial", p)
    expect(j["modes"][0]["tax_pct"] == 0.0, "fast's tax against itself is 0")
    expect(j["modes"][0]["paired_tax_pct"]["per_trial"] == [0.0, 0.0],
           "fast's paired tax against itself is 0 in every trial")
    expect("loadavg_start" in j["conditions"], "the machine's load is recorded")
    expect("tax vs fast" in res.stdout and "[9/9]" in res.stdout, "table and progress printed",
           res.stdout)
elif part == "tax-interleaved":
    jpath = os.path.join(work, "tax.json")
    runs = os.path.join(work, "runs")
    res = lockstep(binary, ["tax", "--interleaved", "--modes", "fast,invariant", "--trials", "2",
                            "--steps", "4", "--skip", "1", "--np", "2", "--json", jpath,
                            "--out", runs] + MPI_ARGS + [tiny])
    with open(jpath) as f:
        j = json.load(f)
    expect(j["method"] == "interleaved" and [m["mode"] for m in j["modes"]] == ["fast", "invariant"],
           "JSON: method interleaved, both modes in order")
    fast, inv = j["modes"]
    for m in j["modes"]:
        expect(len(m["steps_ms"]) == 6 and len(m["trial_medians_ms"]) == 2 and
               m["min_ms"] <= m["median_ms"] <= m["max_ms"] and m["min_ms"] > 0,
               f"{m['mode']}: 2 jobs x 3 kept steps, 0 < min <= median <= max")
    # Trial t's job: tax_steps.jsonl has every mode at every step; the kept steps are steps_ms.
    kept = {"fast": [], "invariant": []}
    for t, first in [(1, "fast"), (2, "invariant")]:
        with open(os.path.join(runs, f"t{t}-interleaved", "tax_steps.jsonl")) as f:
            lines = [json.loads(l) for l in f]
        expect([l["step"] for l in lines] == [1, 2, 3, 4] and
               all(set(l["ms"]) == {"fast", "invariant"} for l in lines),
               f"trial {t}: tax_steps.jsonl times both modes at steps 1..4")
        expect(list(lines[0]["ms"])[0] == first, f"trial {t}: {first} is the job's own run")
        for l in lines[1:]:
            for m in kept:
                kept[m].append(l["ms"][m])
    expect(kept["fast"] == fast["steps_ms"] and kept["invariant"] == inv["steps_ms"],
           "steps_ms = the kept steps of tax_steps.jsonl, trial by trial")
    p = inv["paired_tax_pct"]
    want = [100.0 * (a / b - 1.0) for a, b in zip(kept["invariant"], kept["fast"])]
    expect(p["n"] == 6 and all(abs(a - b) < 1e-9 for a, b in zip(p["per_step"], want)) and
           p["min"] <= p["ci95"][0] <= p["median"] <= p["ci95"][1] <= p["max"] and
           p["p25"] <= p["median"] <= p["p75"],
           "paired tax = invariant's step over fast's step, per step; median inside its CI", p)
    expect(fast["paired_tax_pct"]["per_step"] == [0.0] * 6, "fast against itself is 0")
    # Trial 2's job is invariant's run: its trace is byte-identical to a plain invariant run of
    # the same config (the fast job beside it shares no state).
    plain = os.path.join(work, "plain")
    lockstep(binary, ["run", "--np", "2"] + MPI_ARGS +
             [tiny, "--set", "run.steps=4", "--set", "ckpt.save=false",
              "--set", "verify.replica_check_interval=0", "--set", "run.out=" + plain])
    with open(os.path.join(plain, "trace.jsonl"), "rb") as a, \
            open(os.path.join(runs, "t2-interleaved", "trace.jsonl"), "rb") as b:
        expect(a.read() == b.read(), "interleaved invariant trace == plain invariant trace")
    expect("paired: median [95% CI]" in res.stdout and "[2/2]" in res.stdout,
           "table and progress printed", res.stdout)
    # An interleaved job never resumes: refused with a hint, before any step.
    ck = os.path.join(work, "ck")
    lockstep(binary, ["train", tiny, "--set", "run.steps=2", "--set", "run.out=" + ck])
    res = lockstep(binary, ["train", tiny, "--set", "run.steps=3", "--set", "run.out=" + ck,
                            "--set", "run.resume=auto", "--set", "debug.interleave=invariant,fast"],
                   expect_rc=None)
    expect(res.returncode != 0 and "debug.interleave times fresh runs" in res.stderr and
           "step 3/3" not in res.stdout, "resuming an interleaved job is refused",
           res.stdout + res.stderr)
elif part == "lab":
    out = os.path.join(work, "lab")
    res = lockstep(binary, ["lab", "--model", "regression", "--out", out])
    s = validate_summary(os.path.join(out, "summary.json"))
    with open(os.path.join(out, "details.json")) as f:
        checks = json.load(f)["checks"]
    expect(len(checks) >= 15, f"{len(checks)} checks (>= 15)")
    expect(s["checks_passed"] == len(checks) == sum(c["passed"] for c in checks),
           "every check passed and checks_passed counts them")
    by = {e["scenario"]: e for e in s["summary"]}
    expect(by["full_checkpoint_at_40"]["first_weight_mismatch"] is None, "checkpoint: no mismatch")
    expect(by["reversed_reduction_order"]["first_weight_mismatch"] == 1, "reversed: from step 1")
    expect(by["optimizer_state_reset_at_40"]["first_weight_mismatch"] == 41, "optimizer reset: 41")
    expect(by["sampler_rng_reset_at_40"]["first_weight_mismatch"] == 41, "sampler reset: 41")
    try:
        import matplotlib  # noqa: F401
        have_mpl = True
    except ImportError:
        have_mpl = False
    if have_mpl:
        for png in ("reversed_reduction.png", "divergence.png"):
            p = os.path.join(out, png)
            expect(os.path.exists(p) and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
                   f"{png} is a PNG")
    else:
        print("  note: python3-matplotlib missing here: figures not checked")
elif part == "lab-gpt":
    out = os.path.join(work, "lab-gpt")
    res = lockstep(binary, ["lab", "--model", "gpt", "--steps", "8", "--restore-at", "4",
                            "--out", out] + MPI_ARGS + [tiny], expect_rc=None)
    s = validate_summary(os.path.join(out, "summary.json"))
    with open(os.path.join(out, "details.json")) as f:
        checks = json.load(f)["checks"]
    expect(len(checks) >= 15, f"{len(checks)} checks (>= 15)")
    failed = [c["check"] for c in checks if not c["passed"]]
    expect(not failed and res.returncode == 0, f"every GPT lab check passed (failed: {failed})",
           res.stdout)
else:
    raise SystemExit(f"unknown part {part}")
print("PASS")
