#!/usr/bin/python3
"""bench_train: steady-state training throughput and determinism tax of a preset (bench-small
by default; --config launch/configs/gpt2-small.toml for GPT-2 small, the model's shapes and
global batch read from the TOML).

Runs, interleaved (round r runs every configuration once, in an order rotated by r, so
all configurations see the same machine noise), --reps rounds of:
  lockstep {invariant, deterministic, fast} at each of --layouts (np 1 x 2 threads and np 2 x 1
    thread by default; np2x1tp2 runs the two ranks as TP 2: each rank holds half of every
    weight matrix and trains the whole batch, exchanging activations instead of gradients)
  PyTorch (bench/torch_gpt.py, DDP over gloo for np 2) at np 2 x 1 thread and np 1 x 2
plus the FMA peak (bench_fma_peak, 1 and 2 threads) before and after each round. Builds
nothing.

Two more --layouts separate what the step costs on one core from what two cores of the
machine deliver together: np1x1 (one process, one thread, the whole global batch; its MFU is
against the 1-thread FMA peak) and 2xnp1x1 (two independent np 1 x 1 jobs side by side, each
pinned to its own CPU and training half the global batch: data parallelism with no exchange
and no waiting for the other rank, so what it loses against np1x1 is the machine's, e.g. the
cores' shared cache and memory; its ms/step is the global batch's time at the two jobs'
summed throughput, 2 / (1/a + 1/b) per step index, and its MFU is against the 2-thread peak).

Every process runs with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 unless --malloc-thp off: glibc
then backs its large allocations with transparent huge pages. PyTorch allocates its activations
anew each step, and where a page fault is dear (host F's VM: a third of PyTorch's time in the
kernel's fault path) that cost it 2.9x per step; Lockstep allocates its buffers once. The
setting is what a user would do for PyTorch there, so both sides get it.

Per configuration: median ms/step over the steady-state steps of all its runs (the first
--warmup steps of each run are skipped), tokens/s, model GFLOP/s, MFU = GFLOP/s / FMA peak
(of as many threads as the configuration runs in all, 2 but for np1x1; the fastest trial seen
over the rounds: a ceiling that another VM's load can only lower, so on a busy host a trial's
median would understate it and inflate the MFU; probed after each round too, since a single
probe can fall in a slow minute of the VM), and for
lockstep the determinism tax = ms(mode) / ms(fast) - 1 at the same layout; the peak RSS of its
largest rank (every rank runs under /usr/bin/time, which reports its maximum resident set
size); for lockstep at np > 1 the ranks' compute spread: per steady step the slowest rank's
forward/backward time minus the fastest's (metrics.jsonl's compute_ms), the median over the
configuration's steps, which is what the faster ranks wait at the gradient sync (on a VM whose
cores run at different speeds, part of what np 2 x 1 loses against one core alone).

Model FLOPs per token = 6 * N_matmul + 12 * L * T * d, with N_matmul the parameters in
matmuls: L * (4 d^2 + 2 d ffn) + vocab * d (the tied LM head). For bench-small
(L 4, T 256, d 256, ffn 1024, vocab 256): N_matmul = 3,211,264 and 22,413,312 FLOPs/token.

Then, unless --tax-steps 0, the determinism tax measured in-process per lockstep layout:
`lockstep tax --interleaved` (every mode trains side by side in one job, one step of each in
turn, so the machine's drift cancels step by step; see README, determinism tax) with the same
microbatch, one job of --tax-steps steps; its paired median and 95% interval go into the table
("tax (interleaved)") and the JSON ("tax_interleaved"). Those jobs run with the replica check
off (the tax modes) and `lockstep run`'s binding.

Prints one JSON line per run and per configuration, then a markdown table; --out FILE
writes {"meta", "peak", "runs", "configs"} as JSON.

Example (about 5 minutes on a quiet 2-core machine):
  /usr/bin/python3 bench/bench_train.py --lockstep build-bench/bin/lockstep \
      --steps 10 --warmup 2 --reps 3 --out bench-train.json
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tomllib
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "launch"))
import mpirun_flags  # noqa: E402  (launch/mpirun.flags, the one spelling of the flags)

MODEL = dict(vocab=256, context=256, layers=4, d_model=256, heads=8, ffn=1024)
GLOBAL_BATCH = 16


def load_model(config):
    """The [model] shapes (vocab padded by vocab_pad_to, as the model's rows are) and the
    global batch of a lockstep config; the values not in the file are bench-small's."""
    global GLOBAL_BATCH
    with open(config, "rb") as f:
        t = tomllib.load(f)
    m = t.get("model", {})
    for key in MODEL:
        MODEL[key] = int(m.get(key, MODEL[key]))
    pad = int(m.get("vocab_pad_to", 1))
    MODEL["vocab"] = (MODEL["vocab"] + pad - 1) // pad * pad
    GLOBAL_BATCH = int(t.get("data", {}).get("global_batch", GLOBAL_BATCH))
    MODEL["name"] = Path(config).stem


def flops_per_token(m=MODEL):
    n_matmul = m["layers"] * (4 * m["d_model"] ** 2 + 2 * m["d_model"] * m["ffn"]) \
        + m["vocab"] * m["d_model"]
    return 6 * n_matmul + 12 * m["layers"] * m["context"] * m["d_model"], n_matmul


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lockstep", required=True, help="the lockstep binary (build-bench/bin/lockstep)")
    p.add_argument("--fma-peak", default=None,
                   help="bench_fma_peak binary (default: next to --lockstep)")
    p.add_argument("--config", default=str(REPO / "launch/configs/bench-small.toml"))
    p.add_argument("--steps", type=int, default=10, help="steps per run, warm-up included")
    p.add_argument("--warmup", type=int, default=2, help="steps skipped at the start of each run")
    p.add_argument("--reps", type=int, default=3, help="rounds (runs per configuration)")
    p.add_argument("--microbatch", type=int, default=0,
                   help="sequences per forward/backward per rank, lockstep and torch "
                        "(0: the whole per-rank batch, 16 at np 1 and 8 at np 2)")
    p.add_argument("--bind", choices=["none", "core"], default="none",
                   help="np 2 x 1 thread mpirun binding, used for lockstep and torch alike: "
                        f"none ({' '.join(mpirun_flags.UNBOUND)}) or core "
                        "(--bind-to core --map-by slot:PE=1)")
    p.add_argument("--modes", default="invariant,deterministic,fast")
    p.add_argument("--layouts", default="np1x2,np2x1",
                   help="lockstep layouts: comma list of np1x2, np2x1, np2x1tp2 (two ranks of "
                        "one thread as TP 2 instead of DP 2), np1x1 and 2xnp1x1 (two np 1 x 1 "
                        "jobs side by side, each on its own CPU with half the batch)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline")
    p.add_argument("--malloc-thp", choices=["on", "off"], default="on",
                   help="run every process (lockstep and torch) with GLIBC_TUNABLES="
                        f"{MALLOC_THP}: glibc backs its large allocations with transparent huge "
                        "pages, so a tensor allocated anew each step faults 2 MiB at a time "
                        "instead of 4 KiB (PyTorch's steps ran 2.9x faster with it on host F)")
    p.add_argument("--tax-steps", type=int, default=20,
                   help="steps of the interleaved tax job per lockstep layout (0: skip it)")
    p.add_argument("--python", default="/usr/bin/python3", help="python with Debian's torch")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run before it is killed")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the temp run directories")
    a = p.parse_args()
    if a.steps <= a.warmup:
        p.error(f"--steps ({a.steps}) must exceed --warmup ({a.warmup})")
    if a.reps < 1:
        p.error("--reps must be >= 1")
    a.layouts = [x for x in a.layouts.split(",") if x]
    bad = [x for x in a.layouts if x not in LAYOUTS]
    if bad:
        p.error(f"--layouts: unknown {', '.join(bad)} (known: {', '.join(LAYOUTS)})")
    return a


MALLOC_THP = "glibc.malloc.hugetlb=1"


def tunables(a):
    """GLIBC_TUNABLES for the runs: the environment's, plus MALLOC_THP unless --malloc-thp off."""
    have = os.environ.get("GLIBC_TUNABLES", "")
    if a.malloc_thp == "off" or MALLOC_THP in have.split(":"):
        return have
    return f"{have}:{MALLOC_THP}" if have else MALLOC_THP


# Lockstep layouts: name -> (np, threads per rank, independent jobs side by side, TP size).
LAYOUTS = {"np1x2": (1, 2, 1, 1), "np2x1": (2, 1, 1, 1), "np2x1tp2": (2, 1, 1, 2),
           "np1x1": (1, 1, 1, 1), "2xnp1x1": (1, 1, 2, 1)}


def jobs_of(c):
    """How many independent jobs a configuration runs side by side: 1 for every real layout
    (whose config and JSON rows carry no "jobs" key), 2 for 2xnp1x1."""
    return c.get("jobs", 1)


def tp_of(c):
    """The tensor-parallel size of a configuration: 1 (no "tp" key) but for np2x1tp2."""
    return c.get("tp", 1)


def per_rank_batch(c, batch):
    """Sequences per DP rank: TP ranks share theirs, so dp = np / tp splits the batch."""
    return batch // (c["np"] // tp_of(c))


def total_threads(c):
    return c["np"] * c["threads"] * jobs_of(c)


def mpirun_prefix(a, np_, threads):
    cmd = ["mpirun"] + mpirun_flags.ROOT + mpirun_flags.OVERSUBSCRIBE + ["-np", str(np_)]
    if np_ > 1 and a.bind == "core":
        cmd += ["--bind-to", "core", "--map-by", f"slot:PE={threads}"]
    else:
        cmd += mpirun_flags.UNBOUND
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        cmd += ["-x", f"{var}={threads}"]
    if openblas_coretype():
        cmd += ["-x", f"OPENBLAS_CORETYPE={openblas_coretype()}"]
    if tunables(a):
        cmd += ["-x", f"GLIBC_TUNABLES={tunables(a)}"]
    return cmd


def openblas_coretype():
    """OpenBLAS 0.3.21 misdetects this AVX-512 Xeon and falls back to SSE3 kernels; torch
    (Debian's, BLAS = OpenBLAS) would then be measured at a fraction of its speed. Pin the
    AVX-512 kernels for both sides, as lockstep does itself (runtime/openblas_env.hpp);
    a value already in the environment is kept."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"]
    with open("/proc/cpuinfo") as f:
        return "SkylakeX" if " avx512f " in f.read() else None


def thread_env(a, threads):
    env = dict(os.environ)
    if tunables(a):
        env["GLIBC_TUNABLES"] = tunables(a)
    core = openblas_coretype()
    if core:
        env["OPENBLAS_CORETYPE"] = core
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env.pop("OMP_PROC_BIND", None)  # spread halves 2-thread OpenBLAS (its threads inherit the pinning)
    return env


# Every rank runs under GNU time (Debian's `time` package), which appends its peak RSS (KiB) to
# a file when the rank exits (a file, not stderr: mpirun may exit before it has forwarded the
# ranks' last lines); without it the RSS column stays empty.
HAVE_TIME = os.access("/usr/bin/time", os.X_OK)


def time_rss(path):
    """The command prefix that appends this process's peak RSS (KiB) to `path`, one line per
    process (O_APPEND: the ranks' lines do not mix)."""
    return ["/usr/bin/time", "-a", "-o", str(path), "-f", "%M"] if HAVE_TIME else []


def peak_rss_mib(path):
    """The largest process's peak resident memory (MiB) from time_rss's file."""
    path = Path(path)
    kib = [int(x) for x in path.read_text().split() if x.isdigit()] if path.exists() else []
    return round(max(kib) / 1024, 1) if kib else None


def start_cmd(cmd, env, cpu=None):
    """Starts cmd in a session of its own (so that a timeout can kill all of it: mpirun's
    ranks, /usr/bin/time's child), pinned to `cpu` when one is given."""
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=pin)


def finish_cmds(procs, timeout, t0):
    """Waits for procs until t0 + timeout; returns [(exit code, output)]. On a timeout every
    process group still running is killed and TimeoutExpired raised."""
    try:
        texts = [p.communicate(timeout=max(1.0, timeout - (time.time() - t0)))[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        raise
    return [(p.returncode, t) for p, t in zip(procs, texts)]


def run_cmd(cmd, env, timeout):
    t0 = time.time()
    [(rc, text)] = finish_cmds([start_cmd(cmd, env)], timeout, t0)
    return rc, text, time.time() - t0


class Failure(Exception):
    pass


def lockstep_cmd(a, cfg, out, batch, mb):
    cmd = []
    if cfg["np"] > 1:
        cmd += mpirun_prefix(a, cfg["np"], cfg["threads"])
    return cmd + time_rss(f"{out}.rss") + [a.lockstep, "train", a.config,
            "--set", f"run.steps={a.steps}", "--set", f"run.out={out}",
            "--set", f"run.threads={cfg['threads']}", "--set", f"run.determinism={cfg['mode']}",
            "--set", f"data.global_batch={batch}", "--set", f"parallel.microbatch={mb}",
            "--set", f"parallel.tp={tp_of(cfg)}"]


def lockstep_rows(a, out, tag):
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    if len(rows) != a.steps:
        raise Failure(f"{tag}: {len(rows)} metrics rows, expected {a.steps}")
    return rows


def run_side_by_side(cmds, env, timeout, tag):
    """Runs cmds at once, command j pinned to CPU j of those this process may use; returns
    [(exit code, output)] and the wall time (finish_cmds: a timeout kills them all)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < len(cmds):
        raise Failure(f"{tag}: {len(cmds)} jobs need {len(cmds)} CPUs, this process may use "
                      f"{len(cpus)}")
    t0 = time.time()
    procs = [start_cmd(c, env, cpus[j]) for j, c in enumerate(cmds)]
    return finish_cmds(procs, timeout, t0), time.time() - t0


def run_lockstep(a, cfg, tmp, tag):
    jobs = jobs_of(cfg)
    if GLOBAL_BATCH % jobs:
        raise Failure(f"{tag}: global batch {GLOBAL_BATCH} does not split over {jobs} jobs")
    batch = GLOBAL_BATCH // jobs
    mb = a.microbatch or per_rank_batch(cfg, batch)
    env = thread_env(a, cfg["threads"])
    outs = [Path(tmp) / (tag if jobs == 1 else f"{tag}-job{j}") for j in range(jobs)]
    cmds = [lockstep_cmd(a, cfg, out, batch, mb) for out in outs]
    if jobs == 1:
        rc, text, wall = run_cmd(cmds[0], env, a.timeout)
        done = [(rc, text)]
    else:
        done, wall = run_side_by_side(cmds, env, a.timeout, tag)
    for (rc, text), c in zip(done, cmds):
        if rc != 0:
            raise Failure(f"{tag}: exit {rc}\n$ {' '.join(c)}\n{text[-3000:]}")
    texts = [text for _, text in done]
    per_job = [lockstep_rows(a, out, tag) for out in outs]
    g = re.search(r"guarantees:\s*(.*)", texts[0])
    steady = [[r["ms"] for r in rows[a.warmup:]] for rows in per_job]
    # Side by side: one step of the whole global batch at the jobs' summed throughput.
    step_ms = steady[0] if jobs == 1 else \
        [jobs / sum(1.0 / t for t in ts) for ts in zip(*steady)]
    res = {"step_ms": step_ms, "loss_last": per_job[0][-1]["loss"], "wall_s": round(wall, 2),
           "guarantees": g.group(1).strip() if g else None, "microbatch": mb,
           "peak_rss_mib": max((peak_rss_mib(f"{o}.rss") or 0 for o in outs), default=0) or None}
    if jobs > 1:
        res["job_step_ms"] = steady
    ranks = [r["compute_ms"] for r in per_job[0][a.warmup:] if "compute_ms" in r]
    if ranks:  # np > 1: every rank's forward/backward ms per steady step (metrics.jsonl)
        res["rank_compute_ms"] = ranks
        res["compute_spread_ms"] = [max(c) - min(c) for c in ranks]
    return res


def run_torch(a, cfg, tmp, tag, peak):
    mb = a.microbatch or GLOBAL_BATCH // cfg["np"]
    cmd = []
    if cfg["np"] > 1:
        cmd += mpirun_prefix(a, cfg["np"], cfg["threads"])
    init = f"file://{Path(tmp) / (tag + '.init')}"
    rss = Path(tmp) / f"{tag}.rss"
    cmd += time_rss(rss) + [a.python, str(HERE / "torch_gpt.py"), "--threads", str(cfg["threads"]),
            "--steps", str(a.steps - a.warmup), "--warmup", str(a.warmup),
            "--microbatch", str(mb), "--init", init, "--step-times",
            "--global-batch", str(GLOBAL_BATCH), "--vocab", str(MODEL["vocab"]),
            "--context", str(MODEL["context"]), "--layers", str(MODEL["layers"]),
            "--d-model", str(MODEL["d_model"]), "--heads", str(MODEL["heads"]),
            "--ffn", str(MODEL["ffn"]),
            "--peak-gflops", f"{peak:.3f}"]
    rc, text, wall = run_cmd(cmd, thread_env(a, cfg["threads"]), a.timeout)
    line = next((l for l in text.splitlines() if l.startswith('{"impl": "pytorch"')), None)
    if rc != 0 or line is None:
        raise Failure(f"{tag}: exit {rc}\n$ {' '.join(cmd)}\n{text[-3000:]}")
    j = json.loads(line)
    return {"step_ms": j["step_ms"], "loss_last": j["loss_last"], "wall_s": round(wall, 2),
            "guarantees": None, "microbatch": mb, "peak_rss_mib": peak_rss_mib(rss)}


def run_peak(a):
    cmd = [a.fma_peak, "--threads", "1,2", "--reps", "5", "--min-time", "0.2"]
    rc, text, _ = run_cmd(cmd, dict(os.environ), 120)
    if rc != 0:
        raise Failure(f"bench_fma_peak: exit {rc}\n{text[-2000:]}")
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def peak_of(peaks, threads=2):
    """The FMA peak of `threads` threads: the fastest trial of every bench_fma_peak run so far."""
    return max((p.get("gflops_max", p["gflops"]) for p in peaks if p["threads"] == threads),
               default=117.0 * threads)


def run_tax(a, np_, threads, tp, tmp):
    """lockstep tax --interleaved at one layout: {mode: paired_tax_pct} (fast included)."""
    modes = ["fast"] + [m for m in a.modes.split(",") if m and m != "fast"]
    mb = a.microbatch or per_rank_batch({"np": np_, "tp": tp}, GLOBAL_BATCH)
    name = f"tax-np{np_}" + (f"tp{tp}" if tp > 1 else "")
    jpath = Path(tmp) / f"{name}.json"
    cmd = [a.lockstep, "tax", "--interleaved", "--modes", ",".join(modes), "--trials", "1",
           "--steps", str(a.tax_steps), "--skip", str(min(2, a.tax_steps - 1)), "--np", str(np_),
           "--tp", str(tp), "--json", str(jpath), "--out", str(Path(tmp) / name), a.config,
           "--set", f"parallel.microbatch={mb}", "--set", f"run.threads={threads}"]
    rc, text, _ = run_cmd(cmd, thread_env(a, threads), a.timeout)
    if rc != 0:
        raise Failure(f"{name}: exit {rc}\n$ {' '.join(cmd)}\n{text[-3000:]}")
    j = json.loads(jpath.read_text())
    return {m["mode"]: m["paired_tax_pct"] for m in j["modes"]}


def config_name(c):
    jobs = f"{c['jobs']}x" if jobs_of(c) > 1 else ""
    tp = f"-tp{tp_of(c)}" if tp_of(c) > 1 else ""
    return f"{c['impl']}/{c['mode']}/{jobs}np{c['np']}x{c['threads']}t{tp}"


def layout_text(c):
    jobs = f"{c['jobs']} jobs of " if jobs_of(c) > 1 else ""
    tp = f" (TP {tp_of(c)})" if tp_of(c) > 1 else ""
    return f"{jobs}{c['np']} x {c['threads']}{tp}"


def spread_text(c):
    """The median over steady steps of the slowest rank's compute (forward/backward) minus the
    fastest's, and its share of the median step: what the faster ranks wait at the gradient
    sync; blank for one rank."""
    sp = c.get("compute_spread_ms_median")
    return "" if sp is None else f"{sp:,.0f} ({100 * sp / c['ms_median']:.1f}%)"


def md_table(configs, peak, fpt, n_matmul, meta):
    lines = []
    lines.append(f"{MODEL.get('name', 'bench-small')}, global batch {GLOBAL_BATCH} x "
                 f"{MODEL['context']} tokens; "
                 f"N_matmul = {n_matmul:,}, {fpt:,} FLOPs/token; "
                 f"FMA peak (2 threads) = {peak:.1f} GFLOP/s"
                 + (f", 1 thread = {meta['peak1']:.1f} (the np 1 x 1 MFU's)"
                    if any(total_threads(c) == 1 for c in configs) else "")
                 + f"; {meta['reps']} run(s) per "
                 f"config x {meta['steps'] - meta['warmup']} steady steps; bind {meta['bind']}")
    lines.append("")
    lines.append("| impl | mode | np x threads | mb/rank | ms/step (median) | min–max | tokens/s "
                 "| GFLOP/s | MFU | peak RSS MiB (largest rank) | ranks' compute spread ms "
                 "| tax vs fast | tax (interleaved) [95% CI] | guarantees |")
    lines.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in configs:
        tax = "" if c.get("tax") is None else f"{100 * c['tax']:+.1f}%"
        ti = c.get("tax_interleaved")
        itax = "" if not ti else \
            f"{ti['median']:+.1f}% [{ti['ci95'][0]:+.1f}, {ti['ci95'][1]:+.1f}] (n {ti['n']})"
        lines.append(
            f"| {c['impl']} | {c['mode']} | {layout_text(c)} | {c['microbatch']} "
            f"| {c['ms_median']:.1f} | {c['ms_min']:.0f}–{c['ms_max']:.0f} "
            f"| {c['tokens_per_s']:,.0f} | {c['gflops']:.1f} | {100 * c['mfu']:.1f}% "
            f"| {c.get('peak_rss_mib') or ''} | {spread_text(c)} | {tax} "
            f"| {itax} | {c.get('guarantees') or ''} |")
    return "\n".join(lines)


def paired_rounds(runs, summary):
    """Ratios within each round (its configurations ran within a minute or two of each other,
    so the VM's slow drift mostly cancels): PyTorch at its best layout / lockstep invariant at
    its best layout (best = lowest median over all rounds), and invariant / fast - 1 per layout.
    Returns per-round lists and their medians."""
    def best(impl, mode):
        cs = [c for c in summary if c["impl"] == impl and c["mode"] == mode
              and jobs_of(c) == 1]  # side-by-side jobs are a yardstick, not a layout
        return min(cs, key=lambda c: c["ms_median"])["config"] if cs else None
    by_round = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["config"]] = r["ms_median"]
    inv, torch = best("lockstep", "invariant"), best("pytorch", "-")
    out = {"invariant_best": inv, "pytorch_best": torch, "speedup_vs_pytorch": [], "tax": {}}
    for rnd in sorted(by_round):
        ms = by_round[rnd]
        if inv in ms and torch in ms:
            out["speedup_vs_pytorch"].append(round(ms[torch] / ms[inv], 3))
        for c in ms:
            if c.startswith("lockstep/invariant/"):
                fast = c.replace("/invariant/", "/fast/")
                if fast in ms:
                    out["tax"].setdefault(c.split("/")[-1], []).append(round(ms[c] / ms[fast] - 1, 4))
    sp = out["speedup_vs_pytorch"]
    out["speedup_vs_pytorch_median"] = round(statistics.median(sp), 3) if sp else None
    out["tax_median"] = {k: round(statistics.median(v), 4) for k, v in out["tax"].items()}
    return out


def paired_text(p):
    lines = []
    if p["speedup_vs_pytorch"]:
        lines.append(f"per round, {p['invariant_best']} vs {p['pytorch_best']}: "
                     + ", ".join(f"{x:.2f}x" for x in p["speedup_vs_pytorch"])
                     + f" (median {p['speedup_vs_pytorch_median']:.2f}x)")
    for layout, v in p["tax"].items():
        lines.append(f"per round, invariant vs fast at {layout}: "
                     + ", ".join(f"{100 * x:+.1f}%" for x in v)
                     + f" (median {100 * p['tax_median'][layout]:+.1f}%)")
    return "\n".join(lines)


def main():
    a = parse_args()
    load_model(a.config)
    a.lockstep = str(Path(a.lockstep).resolve())
    if not os.access(a.lockstep, os.X_OK):
        sys.exit(f"bench_train: {a.lockstep} is not an executable; build it first "
                 f"(cmake --build build-bench)")
    a.fma_peak = str(Path(a.fma_peak).resolve()) if a.fma_peak else \
        str(Path(a.lockstep).parent / "bench_fma_peak")
    if not os.access(a.fma_peak, os.X_OK):
        sys.exit(f"bench_train: {a.fma_peak} is not an executable; build the bench_fma_peak "
                 f"target or pass --fma-peak")
    if shutil.which("mpirun") is None:
        sys.exit("bench_train: mpirun not found; install openmpi-bin")

    modes = [m for m in a.modes.split(",") if m]
    configs = []
    for lay in a.layouts:
        np_, th, jobs, tp = LAYOUTS[lay]
        for m in modes:
            configs.append({"impl": "lockstep", "mode": m, "np": np_, "threads": th,
                            **({"jobs": jobs} if jobs > 1 else {}),
                            **({"tp": tp} if tp > 1 else {})})
    if not a.no_torch:
        configs.append({"impl": "pytorch", "mode": "-", "np": 2, "threads": 1})
        configs.append({"impl": "pytorch", "mode": "-", "np": 1, "threads": 2})
    fpt, n_matmul = flops_per_token()
    tokens_per_step = GLOBAL_BATCH * MODEL["context"]
    meta = {"steps": a.steps, "warmup": a.warmup, "reps": a.reps, "bind": a.bind,
            "layouts": a.layouts, "glibc_tunables": tunables(a),
            "microbatch": a.microbatch, "lockstep": a.lockstep, "config": a.config,
            "flops_per_token": fpt, "n_matmul": n_matmul, "tokens_per_step": tokens_per_step,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg_start": os.getloadavg()}
    print(json.dumps({"bench": "train_meta", **meta}), flush=True)

    runs, peaks = [], []
    tmp = tempfile.mkdtemp(prefix="bench-train-")
    t_start = time.time()
    try:
        def probe(r, when):
            for p in run_peak(a):
                p["round"], p["when"] = r, when
                peaks.append(p)
                print(json.dumps(p), flush=True)

        for r in range(a.reps):
            probe(r, "before")
            k = r % len(configs)
            order = configs[k:] + configs[:k]  # rotate so no config always runs first
            for c in order:
                tag = config_name(c).replace("/", "-") + f"-r{r}"
                peak_now = peak_of(peaks)
                res = run_lockstep(a, c, tmp, tag) if c["impl"] == "lockstep" else \
                    run_torch(a, c, tmp, tag, peak_now)
                rec = {"bench": "train_run", "config": config_name(c), "round": r, **c, **res,
                       "ms_median": statistics.median(res["step_ms"])}
                runs.append(rec)
                print(json.dumps(rec), flush=True)
            probe(r, "after")
        taxes = {}
        if a.tax_steps > 0:
            for np_, th, tp in sorted({(c["np"], c["threads"], tp_of(c)) for c in configs
                                       if c["impl"] == "lockstep" and jobs_of(c) == 1}):
                taxes[(np_, th, tp)] = run_tax(a, np_, th, tp, tmp)
                print(json.dumps({"bench": "train_tax_interleaved", "np": np_, "threads": th,
                                  **({"tp": tp} if tp > 1 else {}),
                                  "paired_tax_pct": taxes[(np_, th, tp)]}), flush=True)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"bench_train: a run failed: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"bench_train: run directories kept in {tmp}", file=sys.stderr)

    peak2 = [p["gflops"] for p in peaks if p["threads"] == 2]
    peak1 = [p["gflops"] for p in peaks if p["threads"] == 1]
    peak = peak_of(peaks)
    meta["peak1"] = peak_of(peaks, 1)
    summary = []
    for c in configs:
        rs = [x for x in runs if x["config"] == config_name(c)]
        ms = [t for x in rs for t in x["step_ms"]]
        med = statistics.median(ms)
        tps = tokens_per_step / (med / 1e3)
        gfl = tps * fpt / 1e9
        peak_c = peak_of(peaks, total_threads(c))
        s = {"bench": "train_config", "config": config_name(c), **c,
             "microbatch": rs[0]["microbatch"], "runs": len(rs), "steps_timed": len(ms),
             "ms_median": round(med, 2), "ms_min": round(min(ms), 2), "ms_max": round(max(ms), 2),
             "ms_run_medians": [round(x["ms_median"], 2) for x in rs],
             "tokens_per_s": round(tps, 1), "gflops": round(gfl, 2), "mfu": round(gfl / peak_c, 4),
             "mfu_peak": peak_c,
             "guarantees": rs[0]["guarantees"], "loss_last": rs[-1]["loss_last"],
             "peak_rss_mib": max((x.get("peak_rss_mib") or 0 for x in rs), default=0) or None,
             "tax": None,
             "tax_interleaved": None}
        spread = [t for x in rs for t in x.get("compute_spread_ms", [])]
        if spread:  # the slowest rank's forward/backward over the fastest's, each step
            s["compute_spread_ms_median"] = round(statistics.median(spread), 1)
        key = (c["np"], c["threads"], tp_of(c))
        if c["impl"] == "lockstep" and jobs_of(c) == 1 and key in taxes:
            t = taxes[key].get(c["mode"])
            if t:
                s["tax_interleaved"] = {k: t[k] for k in ("median", "ci95", "p25", "p75", "n")}
        summary.append(s)
    for s in summary:
        if s["impl"] != "lockstep":
            continue
        fast = next((f for f in summary if f["impl"] == "lockstep" and f["mode"] == "fast"
                     and f["np"] == s["np"] and f["threads"] == s["threads"]
                     and jobs_of(f) == jobs_of(s) and tp_of(f) == tp_of(s)), None)
        if fast:
            s["tax"] = round(s["ms_median"] / fast["ms_median"] - 1, 4)
    for s in summary:
        print(json.dumps(s), flush=True)
    paired = paired_rounds(runs, summary)
    print(json.dumps({"bench": "train_paired", **paired}), flush=True)
    peak_rec = {"threads2_max": peak, "threads2_all": peak2, "threads1_all": peak1,
                "isa": peaks[0].get("isa"), "trials": peaks}
    meta["elapsed_s"] = round(time.time() - t_start, 1)
    meta["loadavg_end"] = os.getloadavg()
    print()
    print(md_table(summary, peak, fpt, n_matmul, meta))
    print()
    print(paired_text(paired))
    print(f"\nelapsed {meta['elapsed_s']} s; load average {meta['loadavg_start'][0]:.1f} at "
          f"start, {meta['loadavg_end'][0]:.1f} at end (2 cores: above ~2 means a shared, "
          f"noisy machine)")
    if a.out:
        Path(a.out).write_text(json.dumps(
            {"meta": meta, "peak": peak_rec, "runs": runs, "configs": summary, "paired": paired},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
