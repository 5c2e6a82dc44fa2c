"""bench/cuda/gdn_fla.py DIR B T HK HV D: inputs of GATED_DELTA for bench_gdn (the same bytes for both
kernels), and flash-linear-attention's chunk_gated_delta_rule timed on them.

q, k: unit per head (q times D^-0.5, as dflc's L2NORM gives them), v ~ N(0, 1), g = -exp(U(ln 1e-4,
ln 8)) (decays from 0.9999 to 3e-4), beta ~ U(0.001, 0.999). Writes DIR/{q,k,v,o_fla}.bf16 and
DIR/{g,beta}.f32 (raw, row-major [B*T, heads*D]), prints FLA's time (median of 10 runs after 3 warm-ups,
CUDA events) and TFLOP/s at 10 C D + 6 D^2 + 2730 FLOP per token and value head (C = 64; 183 K at
D 128: ../shared/reference/qwen35-hybrid.md section 3), as bench_gdn counts them."""
import os, sys, math
import torch
import torch.nn.functional as F
from fla.ops.gated_delta_rule import chunk_gated_delta_rule

d, B, T, HK, HV, D = sys.argv[1], *map(int, sys.argv[2:7])
os.makedirs(d, exist_ok=True)
torch.manual_seed(1234)
dev = "cuda"
q = (F.normalize(torch.randn(B, T, HK, D, device=dev), dim=-1) * D ** -0.5).bfloat16()
k = F.normalize(torch.randn(B, T, HK, D, device=dev), dim=-1).bfloat16()
v = torch.randn(B, T, HV, D, device=dev).bfloat16()
g = -torch.exp(math.log(1e-4) + torch.rand(B, T, HV, device=dev) * (math.log(8.0) - math.log(1e-4)))
beta = 0.001 + 0.998 * torch.rand(B, T, HV, device=dev)

def run():
    return chunk_gated_delta_rule(q, k, v, g, beta, scale=1.0, output_final_state=False)[0]

for _ in range(3):
    o = run()
torch.cuda.synchronize()
ts = []
for _ in range(10):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); run(); e1.record(); torch.cuda.synchronize()
    ts.append(e0.elapsed_time(e1))
ms = sorted(ts)[len(ts) // 2]
print(f"fla chunk_gated_delta_rule B {B} T {T} Hk {HK} Hv {HV} d {D}: {ms:.3f} ms, "
      f"{(640 * D + 6 * D * D + 2730) * B * T * HV / (ms * 1e-3) / 1e12:.1f} TFLOP/s (min {min(ts):.3f} ms)", flush=True)
for name, t in (("q", q), ("k", k), ("v", v), ("o_fla", o)):
    t.contiguous().view(torch.int16).cpu().numpy().tofile(f"{d}/{name}.bf16")
for name, t in (("g", g), ("beta", beta)):
    t.contiguous().float().cpu().numpy().tofile(f"{d}/{name}.f32")
