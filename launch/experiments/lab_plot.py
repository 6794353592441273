#!/usr/bin/env python3
"""Figures of `lockstep lab` (launch/experiments/lab.cpp calls it): reads DIR/details.json and writes
  DIR/reversed_reduction.png  loss per step (reference vs reversed reduction order) and
                              max |dw| per step of the reversed run (regression model), or
                              |Δloss| per step (gpt: the trace holds fingerprints, not weights);
                              red dots: weights differ while the rounded loss is identical;
  DIR/divergence.png          per scenario: max |dw| (regression) or |Δloss| (gpt) per step
                              against the reference.
Usage: lab_plot.py DIR. Needs python3-matplotlib (Debian)."""
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("lab_plot.py: python3-matplotlib is missing (apt-get install python3-matplotlib)")

out = sys.argv[1]
with open(os.path.join(out, "details.json")) as f:
    d = json.load(f)
model = d["model"]
ref = d["reference_loss"]
steps = list(range(1, len(ref) + 1))
sc = {s["scenario"]: s for s in d["scenarios"]}
rev = sc["reversed_reduction_order"]
FLOOR = 1e-12  # where an exact zero difference is drawn on the log axis

fig, (a, b) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
a.plot(steps, ref, label="reference", lw=2)
a.plot(steps, rev["loss"], "--", label="reversed reduction order", lw=1.5)
a.set_ylabel("loss")
a.set_title(f"{model}: reversed reduction order vs reference")
a.legend()
if model == "regression":
    md = [max(x, FLOOR) for x in rev["max_abs_weight_diff"]]
    b.semilogy(steps, md, color="C1")
    b.set_ylabel("max |Δw| (0 drawn at 1e-12)")
    hidden = [s for s, h in zip(steps, rev["hidden"]) if h]
    b.scatter(hidden, [max(rev["max_abs_weight_diff"][s - 1], FLOOR) for s in hidden], s=8,
              color="C3", label="weights differ, rounded loss identical")
    b.legend()
else:
    dl = [max(abs(x - r), FLOOR) for x, r in zip(rev["loss"], ref)]
    b.semilogy(steps, dl, color="C1", label="|loss - reference loss|")
    hidden = [s for s, h in zip(steps, rev["hidden"]) if h]
    b.scatter(hidden, [dl[s - 1] for s in hidden], s=8, color="C3",
              label="param fingerprints differ, loss identical at %.4f")
    b.set_ylabel("|Δloss| (0 drawn at 1e-12)")
    b.legend()
b.set_xlabel("step")
fig.tight_layout()
fig.savefig(os.path.join(out, "reversed_reduction.png"), dpi=110)

fig, ax = plt.subplots(figsize=(8, 5))
for i, s in enumerate(d["scenarios"]):
    name = s["scenario"]
    if model == "regression":
        ax.semilogy(steps, [max(x, FLOOR) for x in s["max_abs_weight_diff"]], label=name,
                    lw=2.5 - 0.3 * i)
    else:
        ax.semilogy(steps, [max(abs(x - r), FLOOR) for x, r in zip(s["loss"], ref)], label=name,
                    lw=2.5 - 0.3 * i)
ax.set_xlabel("step")
if model == "regression":
    ax.set_ylabel("max |Δw| vs reference (0 drawn at 1e-12)")
else:
    ax.set_ylabel("|loss - reference loss| (0 drawn at 1e-12)")
ax.set_title(f"{model}: divergence from the reference per scenario")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(out, "divergence.png"), dpi=110)
print(f"figures: {out}/reversed_reduction.png, {out}/divergence.png")
