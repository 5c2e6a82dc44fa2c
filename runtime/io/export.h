/*
** export.h: the trained drafter in the DFlash Hugging Face format that SGLang and vLLM load
** (dflash-training.md §1.1, §5): a directory with config.json (architectures
** ["DFlashDraftModel"], model_type "qwen3", block_size, dflash_config {mask_token_id,
** target_layer_ids}, the Qwen3 sizes) and model.safetensors holding exactly the drafter's tensors
** in bf16 (no embedding, no lm_head: those stay the target's). The loader reads such a directory
** back (an export, or a released drafter for `init_from`) and checks it against a spec.
*/
#ifndef DFL_EXPORT_H
#define DFL_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include "compiler/spec.h"
#include "runtime/io/safetensors.h"

typedef struct dfl_drafter_tensor {
  char name[96];        /* e.g. "layers.0.self_attn.q_proj.weight" (no "model." prefix) */
  int ndim;             /* 1 or 2 */
  int64_t shape[2];     /* [out, in] for matrices */
} dfl_drafter_tensor;

/* Number of drafter tensors for spec s: 3 + 11 * layers. */
int dfl_drafter_tensor_count(const dfl_spec *s);

/* The drafter's tensors, in export order: fc, hidden_norm, per layer (input_layernorm,
** q/k/v/o_proj, q_norm, k_norm, post_attention_layernorm, gate/up/down_proj), norm. out holds
** dfl_drafter_tensor_count(s) entries. Returns the count. */
int dfl_drafter_tensor_list(const dfl_spec *s, dfl_drafter_tensor *out);

/* Write DIR/config.json and DIR/model.safetensors (DIR is created if needed; both files are
** written atomically). t[0..n-1] must be exactly the drafter's tensors (any order) with the
** shapes of dfl_drafter_tensor_list, given as f32 (f32 pointer, or raw with dtype F32) or as raw
** bf16 (dtype BF16); they are stored as bf16, rounded to nearest even. A missing, extra or
** misshapen tensor is refused with its name. */
int dfl_export_drafter(const char *dir, const dfl_spec *s, const dfl_st_out *t, int n, char *err,
                       size_t errlen);

/* A drafter read back as f32, tensors in dfl_drafter_tensor_list order. */
typedef struct dfl_drafter_weights {
  int n;
  dfl_drafter_tensor *t;
  float **data;
} dfl_drafter_weights;

/* Read DIR (config.json + model.safetensors or a sharded index): config.json must describe the
** drafter of spec s (layers, heads, sizes, vocab, block size, taps, mask token, layer types and
** window, RoPE theta, RMSNorm eps), and every tensor must be present with its shape (names with
** a "model." prefix are accepted too). Errors name the file, the key or tensor, and both values. */
int dfl_drafter_load(const char *dir, const dfl_spec *s, dfl_drafter_weights *w, char *err,
                     size_t errlen);
/* The config.json half of dfl_drafter_load, alone (`dflc check` reads no weight data). */
int dfl_drafter_check_config(const char *dir, const dfl_spec *s, char *err, size_t errlen);
const float *dfl_drafter_get(const dfl_drafter_weights *w, const char *name);
void dfl_drafter_free(dfl_drafter_weights *w);

#endif
