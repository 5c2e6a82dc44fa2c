/*
** spec.h: the validated pipeline description.
**
** The front end (grammar/ + compiler/check.c) turns a .dfl file into one dfl_spec; every later
** stage (graph builders, memory plan, backends, runtime) reads only this struct, never the AST.
** Everything here is already checked: sizes are positive, heads divide, taps are inside the
** target, devices exist. Paths are resolved relative to the directory of the .dfl file.
*/
#ifndef DFL_SPEC_H
#define DFL_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include "compiler/status.h"
#include "compiler/diag.h"

#define DFL_MAX_LAYERS  256
#define DFL_MAX_TAPS    64
#define DFL_MAX_FEATURE_BLOCKS 12  /* the features' concatenation: one op's inputs (graph.h DFL_MAX_IO) */
#define DFL_MAX_DEVICES 256
#define DFL_MAX_NODES   64
#define DFL_PATH_MAX    1024

typedef enum { DFL_FAMILY_QWEN3 = 0, DFL_FAMILY_LLAMA = 1,
               DFL_FAMILY_QWEN3_5 = 2 /* hybrid: Gated DeltaNet + gated attention (Qwen3.5 / Qwen3.6) */
} dfl_family;
typedef enum { DFL_PREC_BF16 = 0, DFL_PREC_FP32 = 1 } dfl_precision;
typedef enum { DFL_SCHED_COSINE = 0, DFL_SCHED_CONSTANT = 1, DFL_SCHED_LINEAR = 2 } dfl_schedule;
typedef enum { DFL_DATA_JSONL = 0, DFL_DATA_PACKED = 1,
               DFL_DATA_RANDOM = 2  /* synthetic uniform token ids, for benchmarks: no files */
} dfl_data_format;
typedef enum { DFL_BADROW_SKIP = 0, DFL_BADROW_REFUSE = 1 } dfl_badrow_policy;
typedef enum { DFL_DEV_CPU = 0, DFL_DEV_GPU = 1 } dfl_device_kind;

/* A Qwen3/Llama dense or Qwen3.5 hybrid decoder, from config.json or written out in the spec. */
typedef struct dfl_arch {
  dfl_family family;
  int hidden;          /* H */
  int layers;
  int heads;           /* nh */
  int kv_heads;        /* nkv */
  int head_dim;        /* hd */
  int intermediate;    /* I (SwiGLU width) */
  int vocab;           /* V */
  double rope_theta;
  double rms_eps;
  int qk_norm;         /* Qwen3: per-head RMSNorm on q and k; Llama: none */
  int tie_embeddings;  /* lm_head shares embed_tokens */
  int64_t max_positions;
  /* qwen3_5 only (zero otherwise): which layers are Gated DeltaNet (linear attention; the others
  ** are gated full attention), the DeltaNet's heads and dims, partial rotary, (1 + w) norms */
  unsigned char linear[DFL_MAX_LAYERS]; /* 1 = linear_attention, 0 = full_attention */
  int lin_key_heads, lin_value_heads;   /* Hk, Hv (Hv % Hk == 0: value head h reads key head h / (Hv/Hk)) */
  int lin_key_dim, lin_value_dim;       /* dk, dv */
  int conv_kernel;                      /* causal depthwise conv width */
  int rot_dim;                          /* rotated dims of an attention head; 0 = head_dim */
  int norm_plus1;                       /* RMSNorm weights act as (1 + w) */
} dfl_arch;

typedef struct dfl_device {
  dfl_device_kind kind;
  int index;           /* gpuN / cpuN on its node */
  int node;            /* index into dfl_spec.nodes */
  int runs_target;     /* role flags; both may be set on one device (colocated) */
  int runs_drafter;
  int64_t memory_budget; /* bytes, 0 = none */
} dfl_device;

/* The `compile` section (docs/language.md): each no_* choice's default builds the faster form; 1 here
** builds the plain one (comparisons). tf32 is off by default (exact f32 GEMMs). Zero, as a spec filled
** by hand starts, is every default. */
typedef struct dfl_compile_opts {
  int no_block_rows;   /* block_rows = false: the drafter's first layer on every row, not the distinct block rows */
  int no_rope_pair;    /* rope_pair = false: q's and k's RoPE in two launches */
  int no_swiglu_quant; /* swiglu_quant = false: an FP8 target's SwiGLU and its quantization apart */
  int no_overlap;      /* overlap = false: the optimizer after the step, not beside the next target forward */
  int tf32;            /* tf32 = true: the CUDA backend's f32 GEMMs (precision = fp32) on TF32 tensor cores */
  int gemm_tune;       /* gemm_tune = true: each GEMM's cuBLASLt algorithm timed among its candidates (opt-in until measured) */
} dfl_compile_opts;

typedef struct dfl_spec {
  char file[DFL_PATH_MAX];          /* the .dfl file, as given */

  /* target */
  char target_dir[DFL_PATH_MAX];    /* HF directory; "" for an explicit architecture */
  int target_random;                /* random weights (benchmarks): no directory needed */
  uint64_t target_seed;             /* seed for random weights */
  dfl_arch target;
  int taps[DFL_MAX_TAPS];           /* target_layer_ids: hidden state taps[i]+1 is tapped */
  int n_taps;
  dfl_precision target_dtype;       /* weights/activations of the frozen target (default bf16) */
  int target_fp8;                   /* quantize = fp8: the target's linear layers in FP8 E4M3 with
                                    ** per-row scales, quantized at load (docs/fp8.md) */
  int target_fp8_fast;              /* quantize = fp8_fast: the same, with the GPU's fast FP8
                                    ** accumulation (cuBLASLt FAST_ACCUM; the CPU is unchanged) */

  /* drafter: hidden and vocab always equal the target's */
  dfl_arch drafter;
  int sliding[DFL_MAX_LAYERS];      /* per drafter layer: 1 = sliding_attention, 0 = full */
  int window[DFL_MAX_LAYERS];       /* sliding window (counts the query's own token); 0 if full */
  int block_size;                   /* B */
  int mask_token;                   /* target embedding row used as MASK */
  char init_from[DFL_PATH_MAX];     /* released drafter directory; "" = fresh (HF init) */
  uint64_t init_seed;

  /* data */
  char train_path[DFL_PATH_MAX];
  char eval_path[DFL_PATH_MAX];     /* "" if none */
  dfl_data_format format;
  int seq_len;                      /* S: compiled sequence capacity */
  int anchors;                      /* N: anchors (blocks) per sequence */
  int batch;                        /* sequences per micro-batch */
  int shuffle;
  uint64_t seed;
  dfl_badrow_policy bad_rows;

  /* loss */
  double gamma;                     /* <= 0: no decay */
  int vocab_chunk;
  int metric_accuracy, metric_tau, topk; /* topk = 0: no top-K hit metric */
  double kd_alpha;                  /* labels: 0 hard (the data's tokens), 1 soft (the target's
                                    ** distribution, forward KL), between: mix(a), a the soft part */
  double kd_temp;                   /* temperature of the soft part (1 unless set) */

  /* train */
  int64_t steps;                    /* optimizer steps */
  double lr, beta1, beta2, eps, weight_decay;
  dfl_schedule schedule;
  int64_t warmup_steps;
  double clip;                      /* max global grad norm; <= 0: none */
  int accum;                        /* micro-batches per optimizer step */
  dfl_precision precision;
  int grads_bf16;                   /* train.grads = bf16: the weight gradients in bf16 (accum 1, one device) */
  dfl_compile_opts opt;             /* the compile section */
  int64_t ckpt_every;               /* 0 = only at the end */
  char ckpt_dir[DFL_PATH_MAX];
  int ckpt_keep;
  int log_every;

  /* topology */
  int n_nodes;
  dfl_device devices[DFL_MAX_DEVICES];
  int n_devices;
  int queue_depth;                  /* hidden-state queue slots between target and drafters */
  int prefetch;                     /* batches prepared ahead by loader threads */
} dfl_spec;

/* Parse and check FILE. On success fills *out and returns DFL_OK (warnings may have been
** printed). On failure every error has been reported through the diagnostics reporter and
** DFL_ERR is returned. */
int dfl_spec_load(const char *file, dfl_spec *out);
/* Same from memory: `name` is the file name shown in messages and the base of relative paths. */
int dfl_spec_load_buffer(const char *name, const char *bytes, size_t len, dfl_spec *out);

/* Checks that need more than the front end (the weights' headers, the memory plan; dflc check and
** dflc train run them): dfl_spec_load_deep calls fn once the spec itself has no error, while its
** source is still loaded, so fn can report through the diagnostics reporter with carets at the keys
** (dfl_spec_where_key). fn's errors count like the checker's (dfl_spec_load_deep returns DFL_ERR). */
typedef struct dfl_spec_where dfl_spec_where;
/* "key = value" of the compile section's choices that differ from the defaults (all: every one),
** comma separated into buf; returns how many (compiler/check.c). */
int dfl_spec_compile_desc(const dfl_spec *s, int all, char *buf, size_t n);
typedef void (*dfl_spec_deep_fn)(const dfl_spec *s, const dfl_spec_where *w, void *user);
int dfl_spec_load_deep(const char *file, dfl_spec *out, dfl_spec_deep_fn fn, void *user);
/* Where SECTION ("target", "train.checkpoint", ...) writes KEY: its value; the section's header if
** KEY is absent or NULL; the whole file if the section is absent too. */
dfl_loc dfl_spec_where_key(const dfl_spec_where *w, const char *section, const char *key);

/* 1 if directory DIR exists and is writable, or can be made under its nearest existing ancestor,
** proved by a probe directory made and removed there (access() passes for root under /proc); else 0
** with the reason in why (a dangling symbolic link or a loop named as one, not skipped for its
** parent). */
int dfl_spec_dir_creatable(const char *dir, char *why, size_t n);

/* Number of devices with each role. */
int dfl_spec_count_role(const dfl_spec *s, int target, int drafter);
/* The [rows, H] blocks a target device sends a drafter device: the taps, and under soft labels the
** final norm's output after them (models/target.c DFL_TARGET_WITH_FINAL). */
static inline int dfl_spec_feature_blocks(const dfl_spec *s) { return s->n_taps + (s->kd_alpha > 0); }

#endif
