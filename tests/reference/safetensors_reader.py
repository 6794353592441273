#!/usr/bin/env python3
"""Independent safetensors reader (numpy only, no safetensors package) and checkpoint interop
check for Lockstep (issue 4).

usage: safetensors_reader.py UNIT_TEST_EXE LOCKSTEP_EXE WORKDIR

1. Runs the hidden Catch2 case "[.interop]" of test_ckpt_format, which saves a checkpoint
   with known values (param/w [6,4] = 0.25 i - 3 split on dim 1 into two TP boxes, param/b [5]
   = -1.5 i split into ZeRO flat segments, adam_m/w [6,4] = 0.125 i) into WORKDIR/ckpt.
2. Reads every shard file with the reader below, reassembles each logical tensor from
   meta.json's boxes and flat ranges, and checks names, shapes, dtypes, XXH3-free integrity
   (sizes) and values against the formulas.
3. Runs `lockstep ckpt export` and checks the exported file: names without "param/",
   unsharded shapes, values.
4. Runs `lockstep ckpt inspect` and `lockstep ckpt verify` (exit 0, "OK"), then flips one
   byte of a shard and checks that verify exits non-zero naming the file and the tensor.
Exit 0 when every check passes; prints what failed otherwise.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U16": "<u2", "U8": "u1",
          "F16": "<f2"}


def read_safetensors(path):
    """Returns (metadata, {name: numpy array}) read with nothing but struct/json/numpy."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} larger than the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]])
        shape = tuple(e["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - b != count * dt.itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {b},{end}")
        out[name] = np.frombuffer(data[b:end], dtype=dt).reshape(shape)
    return meta, out


def expected(name):
    i = np.arange(24 if name.endswith("/w") else 5, dtype=np.float32)
    if name == "param/w":
        return (np.float32(0.25) * i - np.float32(3.0)).reshape(6, 4)
    if name == "param/b":
        return np.float32(-1.5) * i
    if name == "adam_m/w":
        return (np.float32(0.125) * i).reshape(6, 4)
    raise KeyError(name)


def assemble(ckpt, meta):
    """Logical tensors from the shards, using only meta.json's geometry."""
    files = {}
    out = {}
    for name, t in meta["tensors"].items():
        shape = tuple(t["shape"])
        full = np.full(int(np.prod(shape)), np.nan, dtype=np.float32)
        seen = np.zeros(full.size, dtype=np.int32)
        for s in t["shards"]:
            if s["file"] not in files:
                files[s["file"]] = read_safetensors(os.path.join(ckpt, s["file"]))[1]
            arr = files[s["file"]][s["key"]].reshape(-1)
            b, e = s["flat_range"]
            assert arr.size == e - b, f"{name}: shard size {arr.size} != flat range {b}..{e}"
            box = tuple(s["box_shape"])
            off = s["box_offset"]
            # Logical index of every box element in [b, e).
            k = np.arange(b, e)
            idx = np.unravel_index(k, box) if box else ()
            logical = np.ravel_multi_index(tuple(ix + o for ix, o in zip(idx, off)), shape) if box else k
            full[logical] = arr
            seen[logical] += 1
        assert (seen == 1).all(), f"{name}: shards do not cover every element exactly once"
        out[name] = full.reshape(shape)
    return out


def main():
    unit_exe, lockstep, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    root = os.path.join(work, "ckpt")
    env = dict(os.environ, LOCKSTEP_CKPT_INTEROP_DIR=root)
    subprocess.run([unit_exe, "[.interop]"], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(root, "latest")) as f:
        ckpt = os.path.join(root, f.read().strip())
    with open(os.path.join(ckpt, "meta.json")) as f:
        meta = json.load(f)
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    check(meta["step"] == 3 and meta["run"]["note"] == "interop fixture", "meta.json step and run")
    tensors = assemble(ckpt, meta)
    check(sorted(tensors) == ["adam_m/w", "param/b", "param/w"], f"tensor names {sorted(tensors)}")
    for name, arr in tensors.items():
        exp = expected(name)
        check(arr.shape == exp.shape and arr.dtype == np.float32,
              f"{name}: shape {arr.shape} dtype {arr.dtype}")
        check(np.array_equal(arr.view(np.uint32), exp.view(np.uint32)), f"{name}: values bit-equal")
    # One shard file read directly: its keys and shapes.
    shard_files = sorted({s["file"] for t in meta["tensors"].values() for s in t["shards"]})
    _, shard = read_safetensors(os.path.join(ckpt, shard_files[0]))
    check(len(shard) == 5, f"{shard_files[0]}: {len(shard)} tensors (2 + 2 + 1 shards)")
    check(any(a.shape == (6, 2) for a in shard.values()), "a TP box stored with its box shape [6, 2]")

    out = os.path.join(work, "export.safetensors")
    subprocess.run([lockstep, "ckpt", "export", root, "--out", out], check=True)
    _, exported = read_safetensors(out)
    check(sorted(exported) == ["b", "w"], f"exported names {sorted(exported)}")
    for n in ("w", "b"):
        exp = expected("param/" + n)
        check(exported[n].shape == exp.shape and
              np.array_equal(exported[n].view(np.uint32), exp.view(np.uint32)),
              f"exported {n}: shape {exported[n].shape}, values bit-equal")

    ins = subprocess.run([lockstep, "ckpt", "inspect", ckpt], capture_output=True, text=True)
    check(ins.returncode == 0 and "param/w" in ins.stdout and "[6, 4]" in ins.stdout,
          "ckpt inspect lists the tensors")
    print(ins.stdout)
    ver = subprocess.run([lockstep, "ckpt", "verify", root], capture_output=True, text=True)
    check(ver.returncode == 0 and ver.stdout.startswith("OK"), "ckpt verify: OK on the intact checkpoint")
    print(ver.stdout)
    # Flip one byte of param/b's data in its shard: verify names the file and the tensor.
    meta_b = meta["tensors"]["param/b"]["shards"][0]
    path = os.path.join(ckpt, meta_b["file"])
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    (n,) = struct.unpack("<Q", blob[:8])
    hdr = json.loads(blob[8:8 + n])
    blob[8 + n + hdr[meta_b["key"]]["data_offsets"][0] + 1] ^= 0x40
    with open(path, "wb") as f:
        f.write(blob)
    ver = subprocess.run([lockstep, "ckpt", "verify", ckpt], capture_output=True, text=True)
    print(ver.stderr)
    check(ver.returncode != 0 and path in ver.stderr and "'param/b'" in ver.stderr,
          "ckpt verify: non-zero exit naming the damaged file and tensor")
    check("'param/w'" not in ver.stderr, "ckpt verify: intact tensors are not reported")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all interop checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
