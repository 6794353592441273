"""Verify end to end: (1) verify.hash = torch-xor fingerprints in trace.jsonl equal
torch.hash_tensor mode 0 (upcast to float64, bitcast, xor) computed independently with numpy
from the checkpoint's shard files (a minimal safetensors reader written here); (2) the
cross-replica guard catches a one-bit flip (debug.bitflip) at the injected step, naming the
tensor and the ranks (at DP4 the majority names the corrupted rank), and the job exits
non-zero; (3) verify.state_interval = 0 leaves only the exact scalars (and rng/data);
(4) fingerprint versions: a run with verify.fingerprint_version = 1 has the same scalars as
the default (v2) run and other fingerprints, its checkpoints record version 1 and verify,
`verify compare` compares the pair on scalars only and says why, and the default config
resumes from the v1 checkpoint to the default run's next trace line, byte for byte.
Usage: verify_state.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

from common import MPI_FLAGS, read_trace, run_train

binary, mpirun, src, work = sys.argv[1:5]
config = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failed = 0


def report(name, ok, detail=""):
    global failed
    failed += not ok
    print(f"  {name:62s} {'yes' if ok else 'NO'} {detail}")


def read_safetensors(path):
    """{key: float32 array} from a safetensors file (8-byte LE header length, JSON header)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        a, b = info["data_offsets"]
        out[key] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4")
    return out


# (1) torch-xor, on TP2 x DP2 with ZeRO so that shards are boxes and flat segments.
out = os.path.join(work, "xor")
run_train(binary, mpirun, 4, out, config, ["run.steps=2", "verify.hash=torch-xor",
                                           "parallel.tp=2", "parallel.zero=true"])
last = json.loads(read_trace(out)[-1])
ckpt = os.path.join(out, "checkpoints", "step_00000002")
meta = json.load(open(os.path.join(ckpt, "meta.json")))
xors = {}
for f in glob.glob(os.path.join(ckpt, "*.safetensors")):
    for key, arr in read_safetensors(f).items():
        bits = arr.astype(np.float64).view(np.uint64)
        acc = np.bitwise_xor.reduce(bits) if bits.size else np.uint64(0)
        xors[(os.path.basename(f), key)] = int(acc)
by_tensor = {}
for name, rec in meta["tensors"].items():
    acc = 0
    for shard in rec["shards"]:
        acc ^= xors[(shard["file"], shard["key"])]
    by_tensor[name] = acc
checked = [n for n in by_tensor if n in last["fp"]]
bad = [n for n in checked if int(last["fp"][n], 16) != by_tensor[n]]
report("torch-xor fingerprints == numpy xor of the shards", bool(checked) and not bad,
       f"({len(checked)} tensors, {len(bad)} differ{': ' + bad[0] if bad else ''})")

# (2) the replica guard.
for np_, rank, step, tensor in [(2, 1, 3, "layers.0.mlp.fc1.weight"),
                                (4, 2, 2, "param/layers.1.attn.proj.weight")]:
    out = os.path.join(work, f"flip{np_}")
    cmd = [mpirun] + MPI_FLAGS + ["-np", str(np_), binary, "train", config, "--set",
                                  f"run.out={out}", "--set", "run.steps=5", "--set",
                                  f"debug.bitflip={rank}:{step}:{tensor}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = res.stdout + res.stderr
    name = tensor if tensor.startswith("param/") else "param/" + tensor
    ok = (res.returncode != 0 and f"replica guard: at step {step} tensor '{name}'" in text
          and f"world rank {rank}" in text and len(read_trace(out)) == step - 1)
    if np_ >= 3:
        ok = ok and f"(world rank {rank}): " in text and "<- differs from the majority" in \
            text.split(f"(world rank {rank}): ")[1].splitlines()[0]
    report(f"DP{np_}: bit flip on rank {rank} after step {step} caught at that step", ok)
    if not ok:
        print(text[-2000:])

# (3) verify.state_interval = 0.
out = os.path.join(work, "nostate")
run_train(binary, mpirun, 1, out, config, ["run.steps=2", "verify.state_interval=0"])
fp = json.loads(read_trace(out)[-1])["fp"]
report("verify.state_interval=0: trace keeps rng and data only", sorted(fp) == ["data", "rng"])

# (4) fingerprint versions.
runs = {v: os.path.join(work, f"fpv{v}") for v in (1, 2)}
for v, out in runs.items():
    run_train(binary, mpirun, 2, out, config,
              ["run.steps=3", "ckpt.interval=2", f"verify.fingerprint_version={v}"])
traces = {v: [json.loads(line) for line in read_trace(out)] for v, out in runs.items()}
params = [n for n in traces[2][-1]["fp"] if n.startswith("param/")]
report("v1 and v2 runs: same loss and grad_norm bits at every step",
       [(t["loss_hex"], t["grad_norm_hex"]) for t in traces[1]] ==
       [(t["loss_hex"], t["grad_norm_hex"]) for t in traces[2]])
report("v1 and v2 runs: every parameter fingerprint differs", bool(params) and all(
    traces[1][-1]["fp"][n] != traces[2][-1]["fp"][n] for n in params))
for v, out in runs.items():
    ckdir = os.path.join(out, "checkpoints", "step_00000003")
    meta = json.load(open(os.path.join(ckdir, "meta.json")))
    fp = traces[v][-1]["fp"]
    report(f"v{v}: meta.json format 2, fingerprint_version {v}, fingerprints == trace's",
           meta["format_version"] == 2 and meta["fingerprint_version"] == v and
           all(meta["tensors"][n]["fingerprint"] == fp[n] for n in meta["tensors"]))
    res = subprocess.run([binary, "ckpt", "verify", ckdir], capture_output=True, text=True)
    report(f"v{v}: `lockstep ckpt verify` recomputes them", res.returncode == 0,
           res.stdout[-300:] + res.stderr[-300:] if res.returncode else "")
res = subprocess.run([binary, "verify", "compare", runs[2], runs[1]], capture_output=True,
                     text=True)
report("compare v2 run vs v1 run: identical on scalars, says fingerprints are not comparable",
       res.returncode == 0 and "lockstep v2, B's lockstep v1: not comparable" in res.stdout,
       res.stdout[-400:] if res.returncode else "")
out = os.path.join(work, "fpv1_resumed_as_v2")
run_train(binary, mpirun, 2, out, config, [
    "run.steps=3", "run.resume=" + os.path.join(runs[1], "checkpoints", "step_00000002")])
report("default (v2) config resumed from the v1 checkpoint: step 3 == the v2 run's, bytes",
       read_trace(out)[-1] == read_trace(runs[2])[-1])

print("FAILED" if failed else "PASSED", f"({failed} failure(s))")
sys.exit(1 if failed else 0)
