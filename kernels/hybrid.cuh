// hybrid.cuh: the hybrid (Gated DeltaNet + gated attention) target's forward kernels: causal conv
// with SiLU, per-head L2 norm, the GDN gates, the chunked gated delta rule, the gated RMSNorm, the
// sigmoid output gate and partial RoPE. Contracts: compiler/ops.def.
