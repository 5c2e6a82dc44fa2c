/*
** ir.h: the IR's vocabulary: dtypes, tensor kinds, phases, opcodes (compiler/ops.def), the tensor, op and
** graph records, and the queries on them that need no graph construction (ir.c). graph.h builds on it;
** graph_validate.c checks ops against it without reaching back into graph.c.
*/
#ifndef DFL_IR_H
#define DFL_IR_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* F8E4M3: FP8 E4M3 ("fn": max 448, no inf), only as the operands of MATMUL_F8 (runtime/fp8.h). */
typedef enum { DFL_F32 = 0, DFL_BF16, DFL_F16, DFL_F64, DFL_I32, DFL_I64, DFL_F8E4M3, DFL_DTYPE_COUNT } dfl_dtype;

typedef enum {
  DFL_T_INPUT = 0, /* per-step data the host writes before the step (ids, masks, features, anchors) */
  DFL_T_PARAM,     /* trained weight, working copy (bf16 on GPU); fp32 master is a STATE */
  DFL_T_FROZEN,    /* frozen weight loaded from the target (embedding, lm_head, target layers) */
  DFL_T_STATE,     /* persistent optimizer state: masters, Adam moments, step counter, sums */
  DFL_T_GRAD,      /* persistent gradient accumulator of one PARAM */
  DFL_T_OUTPUT,    /* persistent metric scalars the host reads one step late */
  DFL_T_ACT,       /* per-step intermediate: the planner overlaps these */
  DFL_TKIND_COUNT
} dfl_tkind;

/* Which part of the step an op belongs to: for timing splits, the plan report, and for running
** the optimizer only at accumulation boundaries. */
typedef enum {
  DFL_PH_TARGET = 0,   /* frozen target forward */
  DFL_PH_FORWARD,      /* drafter forward */
  DFL_PH_LOSS,         /* vocabulary head, loss, metrics */
  DFL_PH_BACKWARD,     /* drafter backward, gradient accumulation */
  DFL_PH_OPTIMIZER,    /* runs once per optimizer step (after `accum` micro-steps) */
  DFL_PH_COUNT
} dfl_phase;
/* Bit of a phase mask (dfl_be_run): the mask's optimizer-phase ops run concurrently with the rest
** of it (a second stream of the captured graph on the GPU; in op order on the CPU). Only for graphs
** where dfl_sched_overlap_ok holds, planned with the optimizer phase spanning the step. */
#define DFL_RUN_OVERLAP_OPT (1u << 31)

typedef enum {
#define DFL_OP(NAME, name, family, diff) DFL_OP_##NAME,
#include "compiler/ops.def"
#undef DFL_OP
  DFL_OP_COUNT
} dfl_opcode;

typedef enum { DFL_MASK_CAUSAL = 0, DFL_MASK_DFLASH = 1 } dfl_mask_kind;

/* Layout of the DFLASH_METRICS output vector. Per-position slots follow: correct[j] at
** DFL_METRIC_COUNT + j, then count[j] at DFL_METRIC_COUNT + B + j, for j = 0..B-1. All are sums
** over the micro-step; ratios are formed on the host. */
enum {
  DFL_METRIC_ACC_NUM = 0,  /* sum of correct over supervised positions (m > 0) */
  DFL_METRIC_ACC_DEN,      /* number of supervised positions */
  DFL_METRIC_TAU_SUM,      /* sum over valid blocks of (1 + accepted prefix length) */
  DFL_METRIC_TAU_BLOCKS,   /* number of valid blocks */
  DFL_METRIC_TOPK_NUM,     /* sum of top-K hits over supervised positions */
  DFL_METRIC_COUNT
};

/* Layout of the optimizer state vector (STATE tensor, f32). */
enum {
  DFL_OPT_STEP = 0,  /* optimizer steps taken (as float; exact below 2^24) */
  DFL_OPT_LR,        /* learning rate used by the latest step */
  DFL_OPT_GSCALE,    /* factor applied to accumulated grads: clip_coef / den */
  DFL_OPT_GNORM,     /* global grad norm of sum(w*CE)/den, before clipping */
  DFL_OPT_BC1,       /* 1 - beta1^step */
  DFL_OPT_BC2,       /* 1 - beta2^step */
  DFL_OPT_COUNT
};

#define DFL_MAX_DIMS 4
#define DFL_MAX_IO   12  /* spec.h DFL_MAX_FEATURE_BLOCKS: the same */
#define DFL_NAME_MAX 96

typedef struct dfl_tensor {
  char name[DFL_NAME_MAX];  /* weights: their export/safetensors name, e.g. "layers.0.mlp.up_proj.weight" */
  dfl_dtype dtype;
  dfl_tkind kind;
  int ndim;
  int64_t shape[DFL_MAX_DIMS];
  int producer;             /* index of the op that writes it first, -1 if none */
  int requires_grad;        /* PARAMs, and everything computed from them */
  int grad;                 /* tensor id of d loss / d this, -1 if none (set by autodiff) */
  int master, adam_m, adam_v, grad_acc; /* PARAM only: ids of its optimizer tensors, else -1 */
} dfl_tensor;

typedef struct dfl_attrs {
  int trans_a, trans_b;
  double alpha;                    /* MATMUL, SCALE: 0 (a zeroed attrs) is read as 1 */
  int group;                       /* RMSNORM group size */
  double eps;
  int heads, kv_heads, head_dim;
  double theta;
  int inverse;
  dfl_mask_kind mask;
  int batch, S, N, B;
  int window;
  double scale;
  int mask_id;
  double gamma;
  int vocab_chunk, topk;
  int n;                           /* IOTA_MOD */
  double lr, beta1, beta2, wd, clip;
  int64_t warmup, total;
  int schedule;
  double beta;                     /* MATMUL: 1 = add in[2] (== out[0]: dfl_fuse; else dfl_fuse_add); 0 = plain */
  int keep_grad;                   /* ADAMW: 1 = leave grad as it is (dfl_fuse_overwrite) */
  int mid_dtype;                   /* ROPE normed form: dtype of the normalized heads it no longer stores */
  int fast_accum;                  /* MATMUL_F8: 1 = the GPU's fast FP8 accumulation (quantize = fp8_fast) */
  int rot_dim;                     /* ROPE: rotated dims of a head (partial rotary); 0 = head_dim */
  int64_t win[2];                  /* GDN_GATES (inputs 0, 1) and NORM_GATE's z (1): the column of the
                                   ** input's row where the op's window starts (ops.def) */
  double kd_alpha, kd_temp;        /* LINEAR_CE with the target's rows (in[4]): the soft term's weight
                                   ** (0..1) and its temperature (0 is read as 1) */
} dfl_attrs;

typedef struct dfl_op {
  dfl_opcode code;
  int n_in, n_out;
  int in[DFL_MAX_IO];
  int out[DFL_MAX_IO];
  dfl_attrs a;
  dfl_phase phase;
  char label[DFL_NAME_MAX];        /* where it comes from, e.g. "layers.0.attn" */
} dfl_op;

typedef struct dfl_graph {
  dfl_tensor *t;
  int nt, cap_t;
  dfl_op *ops;
  int nops, cap_ops;
  dfl_phase cur_phase;             /* phase given to ops as they are added */
  const char *cur_label;           /* label prefix given to ops as they are added */
} dfl_graph;

int64_t dfl_tensor_numel(const dfl_tensor *t);
size_t dfl_dtype_size(dfl_dtype dt);
int64_t dfl_tensor_bytes(const dfl_tensor *t);
const char *dfl_dtype_name(dfl_dtype dt);
const char *dfl_opcode_name(dfl_opcode c);
const char *dfl_tkind_name(dfl_tkind k);
const char *dfl_phase_name(dfl_phase p);
int dfl_tensor_is_persistent(const dfl_tensor *t);
#endif
