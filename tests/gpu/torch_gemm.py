"""PyTorch's fp32 GEMM on the shapes of test_cuda_device's [.bench] (8192 x d x d, d = 1024,
4096), TF32 off (as cuBLAS deterministic) and on; run by tests/gpu/run_gpu_checks.sh on the GPU
machine. Prints one 'GEMM ... TFLOP/s' line per shape."""
import time

import torch


def bench(m, n, k, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    torch.matmul(a, b)
    torch.cuda.synchronize()
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    return 2.0 * m * n * k / ((time.perf_counter() - t0) / reps) * 1e-12


print("torch", torch.__version__, torch.cuda.get_device_name())
for d in (1024, 4096):
    print(f"GEMM 8192x{d}x{d} TFLOP/s: torch fp32 {bench(8192, d, d, False):.2f}, "
          f"torch tf32 {bench(8192, d, d, True):.2f}")
