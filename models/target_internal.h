/*
** target_internal.h: what the target's layer builders share (models/target_common.c; target.c
** builds the dense layers and the frame, target_hybrid.c the qwen3_5 layers).
*/
#ifndef DFL_TARGET_INTERNAL_H
#define DFL_TARGET_INTERNAL_H

#include "models/models.h"

dfl_dtype dfl_target_act_dtype(const dfl_spec *s);
/* A frozen [r, c] / [n] tensor named fmt % layer. */
int dfl_target_frozen2(dfl_graph *g, dfl_dtype dt, int64_t r, int64_t c, const char *fmt, int layer);
int dfl_target_frozen1(dfl_graph *g, dfl_dtype dt, int64_t n, const char *fmt, int layer);
/* A linear layer's frozen weight [r, c]: bf16/f32, or (quantize = fp8) f8e4m3 plus its per-row
** scales "<name>_scale" [r] f32 (*scale), which the loader derives from the checkpoint's weight. */
int dfl_target_weight(dfl_graph *g, const dfl_spec *s, dfl_dtype dt, int64_t r, int64_t c, const char *fmt, int layer,
                      int *scale);
/* y = x W^T; in FP8, x is (x8, sx), from dfl_target_quant. */
int dfl_target_lin(dfl_graph *g, const dfl_spec *s, int x, int sx, int w, int sw, dfl_dtype dt, const char *name);
int dfl_target_quant(dfl_graph *g, const dfl_spec *s, int x, int *sx, const char *name);
/* An RMSNorm weight: plain, or (qwen3_5) the zero-centred (1 + w), folded at load into an f32 tensor. */
int dfl_target_norm_w(dfl_graph *g, const dfl_spec *s, int64_t n, const char *fmt, int layer);

/* Causal GQA attention (the spec's heads) of q over k, v: the output [R, heads*head_dim], or -1. */
int dfl_target_causal_attention(dfl_graph *g, const dfl_spec *s, int l, int q, int k, int v, int batch, int S);

/* The weights of qwen3_5 layer l's mixer (created before the layer's ops, as the dense ones are). */
int dfl_target_hybrid_weights(dfl_graph *g, const dfl_spec *s, int l);
/* The mixer of qwen3_5 layer l (Gated DeltaNet or gated attention) on u = input_layernorm(h):
** returns the tensor added to the residual stream. pos: positions (restart every S rows). */
int dfl_target_hybrid_mixer(dfl_graph *g, const dfl_spec *s, int l, int u, int pos, int batch, int S);

#endif
