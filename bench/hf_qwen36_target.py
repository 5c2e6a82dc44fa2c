"""bench/hf_qwen36_target.py [LAYERS] [BATCH] [SEQ] [KEEP]: the Hugging Face anchor of `dflc bench
examples/qwen36-27b-target.dfl --target-only` (docs/performance.md): transformers' Qwen3_5TextModel at
the Qwen3.6-27B text shape with random bf16 weights, layers 0..LAYERS-1 (default 62: up to the deepest
tap, 61), BATCH x SEQ random tokens (default 12 x 4096, the original pipeline's step),
output_hidden_states=True (a target GPU keeps the tapped states; KEEP 0: False, for an 80 GB card, where
the 63 kept states (32 GB) and the weights (53 GB) do not fit together: keeping them is references, not
work, so the time is the same), inference mode, SDPA attention.
Prints the median of 3 timed forwards after one warm-up (which includes Triton's autotuning), tokens/s
and the peak memory.

Needs, on a machine without a package registry, these wheels from PyPI (carried, then
`pip install --no-deps --no-index WHEELS`): flash-linear-attention 0.6.0, fla-core 0.6.0, einops
(transformers uses fla's chunk_gated_delta_rule and FusedRMSNormGated when they import; without
causal-conv1d its PyTorch conv1d path runs, as it did for the figure in ../shared/reference/peer-baseline.md).
"""
import math
import statistics
import sys
import time

import torch

try:
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel
except ImportError:  # older layouts
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextModel

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 62
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 12
seq = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
keep = int(sys.argv[4]) != 0 if len(sys.argv) > 4 else True

try:  # report what runs the gated delta rule
    import fla  # noqa: F401
    fla_note = "flash-linear-attention " + getattr(fla, "__version__", "?")
except ImportError:
    fla_note = "NO flash-linear-attention (torch fallback: not the anchor)"

# the Qwen3.6-27B text config (examples/qwen36-27b-target.dfl), cut at `layers`
cfg = Qwen3_5TextConfig(
    vocab_size=248320, hidden_size=5120, intermediate_size=17408, num_hidden_layers=layers,
    num_attention_heads=24, num_key_value_heads=4, head_dim=256, attn_output_gate=True,
    linear_num_key_heads=16, linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, full_attention_interval=4,
    layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
    rms_norm_eps=1e-6, max_position_embeddings=262144,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
    partial_rotary_factor=0.25, tie_word_embeddings=False, use_cache=False,
)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("meta"):
    model = Qwen3_5TextModel(cfg)
# bf16 while still on meta: materialized in f32 first, the 62 layers need 108 GB (an 80 GB card runs out)
model = model.to(torch.bfloat16).to_empty(device="cuda")
# random weights: matrices N(0, 0.02); norms (stored as w, applied as 1 + w) N(0, 0.1); A_log
# log U(1, 16); dt_bias 1; depthwise conv N(0, 0.2): finite activations through 62 layers
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            p.copy_(torch.log(torch.empty_like(p, dtype=torch.float32).uniform_(1, 16)))
        elif name.endswith("dt_bias"):
            p.fill_(1.0)
        elif "conv1d" in name:
            p.normal_(0, 0.2)
        elif p.ndim == 1:
            p.normal_(0, 0.1)
        else:
            p.normal_(0, 0.02)
    if hasattr(model, "rotary_emb"):  # its inv_freq buffer was on meta: rebuild it
        model.rotary_emb = type(model.rotary_emb)(config=cfg, device="cuda")
model.eval()
ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
print(f"hf anchor: Qwen3_5TextModel, {layers} layers, {batch} x {seq} tokens, bf16, sdpa, {fla_note}, "
      f"hidden states {'kept' if keep else 'not kept'}, "
      f"torch {torch.__version__}, transformers {__import__('transformers').__version__}", flush=True)


def fwd():
    with torch.inference_mode():
        out = model(input_ids=ids, output_hidden_states=keep)
    torch.cuda.synchronize()
    return out


t0 = time.time()
out = fwd()
h = out.last_hidden_state.float()
print(f"warm-up {time.time() - t0:.1f} s; last hidden finite: {bool(torch.isfinite(h).all())}, "
      f"rms {h.pow(2).mean().sqrt().item():.3g}", flush=True)
del out, h
torch.cuda.reset_peak_memory_stats()
ts = []
for _ in range(3):
    t0 = time.time()
    o = fwd()
    ts.append((time.time() - t0) * 1e3)
    del o
ms = statistics.median(ts)
print(f"hf anchor: {ms:.0f} ms per forward (median of 3: {', '.join(f'{t:.0f}' for t in ts)}), "
      f"{batch * seq / ms * 1e3:,.0f} tokens/s, peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
