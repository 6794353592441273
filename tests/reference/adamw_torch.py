#!/usr/bin/python3
"""One torch.optim.AdamW step (PyTorch from Debian's python3-torch) on arrays written by
tests/unit/test_adamw_torch.cpp. Usage: adamw_torch.py DIR. DIR holds meta.json (lr, betas,
eps, weight_decay, step) and p.f32, g.f32, m.f32, v.f32 (state before the step: the moments
after step-1 steps). Writes p_out.f32, m_out.f32, v_out.f32. Exit 77 if torch is missing."""
import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
try:
    import numpy as np
    import torch
except Exception:  # noqa: BLE001
    sys.exit(77)

d = sys.argv[1]
meta = json.load(open(os.path.join(d, "meta.json")))
load = lambda name: torch.from_numpy(np.fromfile(os.path.join(d, name), dtype="<f4").copy())
p = torch.nn.Parameter(load("p.f32"))
p.grad = load("g.f32")
opt = torch.optim.AdamW([p], lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]), eps=meta["eps"],
                        weight_decay=meta["weight_decay"], foreach=False)
opt.state[p] = {"step": torch.tensor(float(meta["step"] - 1)), "exp_avg": load("m.f32"),
                "exp_avg_sq": load("v.f32")}
opt.step()
p.detach().numpy().astype("<f4").tofile(os.path.join(d, "p_out.f32"))
opt.state[p]["exp_avg"].numpy().astype("<f4").tofile(os.path.join(d, "m_out.f32"))
opt.state[p]["exp_avg_sq"].numpy().astype("<f4").tofile(os.path.join(d, "v_out.f32"))
