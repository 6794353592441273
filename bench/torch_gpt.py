#!/usr/bin/python3
"""torch_gpt: the bench-small GPT in PyTorch, the baseline of bench/bench_train.py.

Same model as Lockstep's (model/param_table.cpp): pre-LN, learned positions, tied LM head,
separate q/k/v/proj linears, GELU (tanh), causal attention, no linear bias (LayerNorms keep
theirs), no dropout, fp32. AdamW(lr, betas, eps, weight decay on 2-D parameters only),
clip_grad_norm_, warmup + cosine learning rate. Random token data (a fixed-seed generator).

Runs alone (np 1) or as DDP over gloo under mpirun: the rank and size come from
OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE, the rendezvous is --init (file:// or
tcp://127.0.0.1:PORT). The global batch is split over the ranks; each rank runs its share
in microbatches of --microbatch sequences (gradient accumulation under no_sync()).

Prints one JSON line from rank 0:
  {"impl":"pytorch","np","threads","microbatch","steps","warmup","ms_median","ms_min",
   "ms_max","tokens_per_s","gflops","mfu","peak_gflops","flops_per_token","loss_first",
   "loss_last","step_ms"}
Step times are taken on rank 0 after the warm-up steps; each step ends with the optimizer
update, and DDP's all-reduce inside backward keeps the ranks in step.

Use /usr/bin/python3 (Debian's torch). Threads are set through the environment before
torch is imported, and again with torch.set_num_threads (torch defaults to 1 thread here).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--steps", type=int, default=8, help="timed steps (after warm-up)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps")
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--microbatch", type=int, default=0,
                   help="sequences per forward/backward (0: the whole per-rank batch)")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--min-lr", type=float, default=3e-5)
    p.add_argument("--lr-warmup", type=int, default=10)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init", default="tcp://127.0.0.1:29531",
                   help="torch.distributed init_method (file:///path or tcp://127.0.0.1:PORT)")
    p.add_argument("--peak-gflops", type=float, default=234.0,
                   help="FMA peak for MFU (bench_train.py passes the measured one)")
    p.add_argument("--step-times", action="store_true", help="include every step's ms")
    return p.parse_args()


args = parse_args()
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
# Before `import torch`: its OpenMP / OpenBLAS pools read these once.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)
try:
    torch.set_num_interop_threads(1)
except RuntimeError:
    pass


def fail(msg):
    print(f"torch_gpt: {msg}", file=sys.stderr)
    sys.exit(2)


if args.global_batch % WORLD:
    fail(f"global batch {args.global_batch} does not split over {WORLD} ranks")
LOCAL_BATCH = args.global_batch // WORLD
MB = args.microbatch or LOCAL_BATCH
if LOCAL_BATCH % MB:
    fail(f"per-rank batch {LOCAL_BATCH} is not a multiple of microbatch {MB}")
if args.d_model % args.heads:
    fail("d_model must be a multiple of heads")


class Block(nn.Module):
    def __init__(self, d, heads, ffn, n_layers):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, ffn, bias=False)
        self.fc2 = nn.Linear(ffn, d, bias=False)
        std_out = 0.02 / math.sqrt(2 * n_layers)
        for m in (self.q, self.k, self.v, self.fc1):
            nn.init.normal_(m.weight, std=0.02)
        for m in (self.proj, self.fc2):
            nn.init.normal_(m.weight, std=std_out)

    def forward(self, x, mask):
        B, T, D = x.shape
        H = self.heads
        hd = D // H
        h = self.ln1(x)
        q = self.q(h).view(B, T, H, hd).transpose(1, 2)
        k = self.k(h).view(B, T, H, hd).transpose(1, 2)
        v = self.v(h).view(B, T, H, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att + mask[:T, :T]
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.d_model)
        self.pos_embed = nn.Embedding(a.context, a.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos_embed.weight, std=0.02)
        self.layers = nn.ModuleList(
            [Block(a.d_model, a.heads, a.ffn, a.layers) for _ in range(a.layers)])
        self.final_ln = nn.LayerNorm(a.d_model, eps=1e-5)
        # Additive float mask kept out of the buffers: DDP broadcasts buffers, and gloo
        # rejects a bool one ("Invalid scalar type"); this one never changes anyway.
        self.mask = torch.full((a.context, a.context), float("-inf")).triu(1)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.embed(idx) + self.pos_embed(pos)[None]
        for blk in self.layers:
            x = blk(x, self.mask)
        x = self.final_ln(x)
        logits = x @ self.embed.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(step, total):
    """Warmup then cosine to min_lr over `total` steps (step counts from 0)."""
    if step < args.lr_warmup:
        return args.lr * (step + 1) / args.lr_warmup
    if total <= args.lr_warmup:
        return args.lr
    r = min(1.0, (step - args.lr_warmup) / max(1, total - args.lr_warmup))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * r))


def model_flops_per_token(a):
    n_matmul = a.layers * (4 * a.d_model ** 2 + 2 * a.d_model * a.ffn) + a.vocab * a.d_model
    return 6 * n_matmul + 12 * a.layers * a.context * a.d_model, n_matmul


def main():
    torch.manual_seed(args.seed)
    model = GPT(args)
    ddp = WORLD > 1
    if ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=args.init, rank=RANK, world_size=WORLD)
        model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)

    total = args.warmup + args.steps
    gen = torch.Generator().manual_seed(args.seed + 1)
    n_micro = LOCAL_BATCH // MB
    times, losses = [], []
    for step in range(total):
        # Every rank draws the whole global batch and takes its slice (same data for any np).
        data = torch.randint(0, args.vocab, (args.global_batch, args.context + 1), generator=gen)
        local = data[RANK * LOCAL_BATCH:(RANK + 1) * LOCAL_BATCH]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for m in range(n_micro):
            chunk = local[m * MB:(m + 1) * MB]
            x, y = chunk[:, :-1], chunk[:, 1:]
            last = m == n_micro - 1
            if ddp and not last:
                with model.no_sync():
                    loss = model(x, y) / n_micro
                    loss.backward()
            else:
                loss = model(x, y) / n_micro
                loss.backward()
            loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        t1 = time.perf_counter()
        if step >= args.warmup:
            times.append((t1 - t0) * 1e3)
        losses.append(loss_sum)

    if ddp:
        import torch.distributed as dist
        dist.barrier()
    if RANK == 0:
        fpt, n_matmul = model_flops_per_token(args)
        med = statistics.median(times)
        tps = args.global_batch * args.context / (med / 1e3)
        gflops = tps * fpt / 1e9
        out = {
            "impl": "pytorch", "np": WORLD, "threads": args.threads, "microbatch": MB,
            "steps": args.steps, "warmup": args.warmup,
            "ms_median": round(med, 3), "ms_min": round(min(times), 3),
            "ms_max": round(max(times), 3), "tokens_per_s": round(tps, 1),
            "gflops": round(gflops, 2), "mfu": round(gflops / args.peak_gflops, 4),
            "peak_gflops": args.peak_gflops, "flops_per_token": fpt, "n_matmul": n_matmul,
            "loss_first": losses[0], "loss_last": losses[-1],
            "torch": torch.__version__,
        }
        if args.step_times:
            out["step_ms"] = [round(t, 3) for t in times]
        print(json.dumps(out), flush=True)
    if ddp:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
