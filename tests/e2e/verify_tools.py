"""End-to-end test of the verify tools (issue 5): `lockstep verify compare` and
`lockstep verify bisect` on real tiny runs.

  usage: verify_tools.py LOCKSTEP MPIRUN SOURCE_DIR WORK_DIR

1. invariant 1x1 and DP2 (4 steps, checkpoints every 2): compare says identical (exit 0);
2. deterministic 1x1 and DP2: identical on this config (see below); deterministic 1x1 and
   TP2: compare says they differ (exit 1) and where (step 1, a state tensor), JSON and HTML
   (rendered by headless Chromium when installed);
3. for a forward GEMM (layers.0.mlp.fc1.fwd, 1x1), a weight-gradient GEMM
   (layers.1.attn.proj.wgrad, 1x1) and the DP gradient reduction (dp.reduce, DP2): run B
   resumes the base run's step-2 checkpoint with --set debug.perturb=OP; `verify bisect A B`
   must replay step 3 of both from their step-2 checkpoints and name exactly OP as the origin
   (on every rank), with the replays reproducing the original step 3.
Standard library only."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import mpirun_flags, run_train  # noqa: E402

BIN, MPIRUN, SRC, WORK = sys.argv[1:5]
CONFIG = os.path.join(SRC, "launch", "configs", "tiny.toml")
COMMON = ["run.steps=4", "ckpt.interval=2", "run.threads=1"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **mpirun_flags.ROOT_ENV,
           **mpirun_flags.mca_env(mpirun_flags.LOOPBACK))


def verify(*args, expect):
    cmd = [BIN, "verify"] + list(args)
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    print(f"$ {' '.join(cmd)}  -> exit {res.returncode} ({time.time() - t0:.1f} s)")
    if res.returncode != expect:
        sys.stdout.write(res.stdout + res.stderr)
        raise SystemExit(f"FAIL: expected exit {expect}")
    return res.stdout


def train(name, np, sets):
    out = os.path.join(WORK, name)
    t0 = time.time()
    run_train(BIN, MPIRUN, np, out, CONFIG, COMMON + sets)
    print(f"trained {name} (np {np}) in {time.time() - t0:.1f} s")
    return out


def screenshot(html):
    """Renders the page in headless Chromium (Debian package `chromium`) to a PNG next to it."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("note: chromium not installed; the HTML page was checked as text only")
        return
    png = html[:-5] + ".png"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--screenshot={png}", "--window-size=900,1000", "file://" + os.path.abspath(html)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if res.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) < 5000:
        sys.stdout.write(res.stdout + res.stderr)
        raise SystemExit(f"FAIL: chromium did not render {html}")
    print(f"screenshot: {png} ({os.path.getsize(png)} bytes)")


def resumed_perturbed(base, name, np, op):
    """A run that shares the base run's first 2 steps (its step-2 checkpoint) and perturbs op."""
    out = os.path.join(WORK, name)
    ckpt = os.path.join(out, "checkpoints", "step_00000002")
    shutil.copytree(os.path.join(base, "checkpoints", "step_00000002"), ckpt)
    t0 = time.time()
    run_train(BIN, MPIRUN, np, out, CONFIG, COMMON + [f"run.resume={ckpt}",
                                                      f"debug.perturb={op}"])
    print(f"trained {name} (np {np}, resumed at 2, perturb {op}) in {time.time() - t0:.1f} s")
    return out


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    t_start = time.time()

    # 1. invariant: 1x1 == DP2.
    a11 = train("inv_1x1", 1, [])
    adp = train("inv_dp2", 2, [])
    out = verify("compare", a11, adp, expect=0)
    assert "identical" in out, out

    # 2. deterministic: 1x1 != DP2, and compare says where.
    d11 = train("det_1x1", 1, ["run.determinism=deterministic", "run.steps=2",
                               "ckpt.save=false"])
    # (Deterministic DP2 equals 1x1 on this config: 8 microbatch leaves merge as
    # ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) either way, and a 2-rank MPI_Allreduce is a + b.
    # TP2 splits the GEMMs' K: one FMA chain per half, then a sum.)
    dd2 = train("det_dp2", 2, ["run.determinism=deterministic", "run.steps=2",
                               "ckpt.save=false"])
    assert verify("compare", d11, dd2, expect=0)
    ddp = train("det_tp2", 2, ["run.determinism=deterministic", "run.steps=2",
                               "ckpt.save=false", "parallel.tp=2"])
    html = os.path.join(WORK, "det.html")
    out = verify("compare", d11, ddp, "--json", "--html", html, expect=1)
    j = json.loads(out)
    assert j["identical"] is False and j["first_divergent_step"] == 1, j
    assert j["first_tensor"] and j["first_phase"], j
    assert os.path.getsize(html) > 1000
    with open(html) as f:
        assert "<svg" in f.read()
    screenshot(html)
    text = verify("compare", d11, ddp, expect=1)
    assert "first divergent step: 1" in text, text
    print(f"deterministic 1x1 vs TP2: first step {j['first_divergent_step']}, phase "
          f"{j['first_phase']}, tensor {j['first_tensor']}")

    # 3. bisect names the perturbed op.
    for name, np, base, op in [("p_fc1", 1, a11, "layers.0.mlp.fc1.fwd"),
                               ("p_proj", 1, a11, "layers.1.attn.proj.wgrad"),
                               ("p_dp", 2, adp, "dp.reduce")]:
        b = resumed_perturbed(base, name, np, op)
        out = verify("bisect", base, b, "--json", expect=1)
        j = json.loads(out[out.index("\n{") + 1:out.rindex("}") + 1])
        ops = j["ops"]
        assert j["first_divergent_step"] == 3, j
        assert ops["available"] and ops["origin_op"] == op, (op, ops)
        assert ops["origin_ranks"] == list(range(np)), ops
        for r in ops["ranks"]:
            # The first occurrence is the origin; later microbatches' occurrences of the same
            # op are origins too (their inputs match); no other op may be one.
            assert r["origin"] == op + "#0", r
            assert all(o.startswith(op + "#") for o in r["other_origins"]), r
        assert "replaying from checkpoint step 2" in out, out
        assert out.count("reproduces the original") == 2, out
        receivers = sum(len(r["receivers"]) for r in ops["ranks"])
        print(f"bisect {op}: origin {ops['origin_op']} on ranks {ops['origin_ranks']}, "
              f"{receivers} receivers")
    print(f"PASS verify tools ({time.time() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
