/*
** models.h: graph builders. They append ops to a dfl_graph so that one graph per device can hold
** a target forward, a drafter step, or both (target and drafter colocated on one device).
*/
#ifndef DFL_MODELS_H
#define DFL_MODELS_H

#include "compiler/graph.h"
#include "compiler/spec.h"

/* The frozen target forward for `batch` sequences of length S.
** Reads ids (INPUT [batch*S] i32). Creates FROZEN weights named as in the HF checkpoint
** ("model.embed_tokens.weight", "model.layers.{i}.self_attn.q_proj.weight", ..., "lm_head.weight").
** Layers past the deepest tap are not built unless all_hidden is set. all_hidden DFL_TARGET_WITH_FINAL:
** the features carry the final norm's output as one more block after the taps (a pipeline's target
** device under soft labels: the queue carries it to the drafter's loss head). */
#define DFL_TARGET_WITH_FINAL 2
typedef struct dfl_target_out {
  int features;       /* [batch*S, n_taps*H]: tapped hidden states, concatenated in taps order
                      ** (DFL_TARGET_WITH_FINAL: [batch*S, (n_taps + 1)*H], the final norm's last) */
  int hidden[DFL_MAX_LAYERS + 1]; /* with all_hidden: hidden state i (0 = embeddings, L = after final norm) */
  int logits;         /* with logits: [batch*S, V], else -1 */
  int embed, lm_head; /* the FROZEN embedding and head (shared with a colocated drafter); lm_head -1
                      ** unless the target computes logits (or ties it to the embedding) */
} dfl_target_out;
int dfl_model_target(dfl_graph *g, const dfl_spec *s, int batch, int S, int ids, int all_hidden,
                     int logits, dfl_target_out *out);
/* One line on what the training target forward computes: its family, the layers it runs (up to the
** deepest tap) and what it skips. */
void dfl_model_target_describe(const dfl_spec *s, char *buf, size_t n);

/* One DFlash drafter training micro-step (reference §1.3-§2.6), forward + loss + metrics.
** features: [batch*S, n_taps*H] (INPUT, or a colocated target's output); ids, loss_mask:
** [batch*S] i32; anchors, keep: [batch, N] i32; embed, lm_head: FROZEN [V,H] (created if -1, named
** as in the target checkpoint: "model.embed_tokens.weight", "lm_head.weight").
** Drafter PARAMs are named by their export names (§5: "fc.weight", "layers.0.self_attn.q_proj.weight", ...).
** tfinal: the target's final normed hidden states [batch*S, H] for soft labels (spec kd_alpha > 0;
** the loss reads the row before each label), else -1. */
typedef struct dfl_drafter_out {
  int num;            /* [1] sum w*CE of this micro-step */
  int den;            /* [1] sum w */
  int metrics;        /* [DFL_METRIC_COUNT + 2*B] (graph.h layout) */
  int y;              /* final normed hidden [batch*Q, H] */
  int embed, lm_head;
  int params[16 * DFL_MAX_LAYERS + 8]; /* PARAM ids in export order */
  int n_params;
} dfl_drafter_out;
int dfl_model_drafter(dfl_graph *g, const dfl_spec *s, int batch, int features, int ids, int loss_mask,
                      int anchors, int keep, int embed, int lm_head, int tfinal, dfl_drafter_out *out);

/* The inputs and outputs of a whole training graph for one device. */
typedef struct dfl_train_graph {
  dfl_graph g;
  int batch, S, N;
  int ids, loss_mask, anchors, keep;  /* INPUT tensors the host fills each micro-step */
  int features;                       /* INPUT when the target is not on this graph, else -1 */
  dfl_target_out target;              /* when colocated */
  dfl_drafter_out drafter;
  int opt_state;                      /* STATE [DFL_OPT_COUNT] */
  int loss_num_acc, loss_den_acc;     /* persistent sums over the accumulation window */
  int metrics_acc;                    /* OUTPUT: metrics summed over the accumulation window */
} dfl_train_graph;

/* The training graph of one drafter device: target forward when `colocated`, drafter step,
** autodiff, optimizer. Shapes come from the spec: batch, seq_len, anchors. */
int dfl_model_train_graph(dfl_train_graph *tg, const dfl_spec *s, int colocated);

/* What the single-device trainer (runtime/train.c) does to its training graph before planning it,
** shared with `dflc plan` and `dflc build` so that they show the plan it runs: with one micro-step
** per optimizer step, each gradient's single writer overwrites its accumulator (dfl_fuse_overwrite).
** Returns the plan's span_phases: the optimizer phase when it can run beside the next step's target
** forward (dfl_sched_overlap_ok), else 0. */
unsigned dfl_model_single_device(dfl_graph *g, const dfl_spec *s);
/* The fusion flags (dfl_fuse_passes) the spec's `compile` section asks for. */
unsigned dfl_model_fuse_flags(const dfl_spec *s);

/* Evaluation graph: same as training without backward and optimizer. */
int dfl_model_eval_graph(dfl_train_graph *tg, const dfl_spec *s, int colocated);

/* The target's agreement with the data (runtime/train/accept.c, `dflc eval`'s target line): the whole
** target forward (every layer, the final norm) over the spec's batch x seq_len, its LM head inside a
** fused LINEAR_CE that streams the vocabulary (no [rows, V] logits), fused as the training graph's
** target. INPUTs ids, labels (i32) and weights (f32); OUTPUTs num (the weighted CE sum) and correct. */
typedef struct { int ids, labels, weights, num, correct; } dfl_agree_io;
int dfl_model_agree_graph(dfl_graph *g, const dfl_spec *s, dfl_agree_io *io);

#endif
