"""The anchor of bench_gemm: PyTorch's matmul (what Hugging Face's nn.Linear runs) on the same shapes,
Y = X W^T in bf16, random N(0,1) operands, median of REPS runs timed by CUDA events.
usage: python3 bench/cuda/gemm_torch.py [REPS]"""
import sys
import torch

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
shapes = [(49152, 17408, 5120), (49152, 5120, 17408), (49152, 6144, 5120), (49152, 5120, 6144),
          (49152, 2048, 5120), (49152, 1024, 5120), (49152, 48, 5120)]
torch.manual_seed(0)
for M, N, K in shapes:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / 32
    for _ in range(3):
        y = x @ w.t()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y = x @ w.t()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ms = sorted(ts)[reps // 2]
    print(f"torch {M} x {N} x {K}: {ms:.3f} ms {2 * M * N * K / ms / 1e9:.1f} TFLOP/s", flush=True)
    del x, w, y
