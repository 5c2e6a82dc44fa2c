/*
** weights.h: binding the weights of a graph to storage on a backend.
**
** FROZEN and PARAM tensors are named as in their safetensors files, so loading is a lookup by
** name with a strict shape check. Fresh drafters and random-weight targets get the Hugging Face
** initialisation (linear weights N(0, 0.02), norm weights 1), seeded per tensor from its name so
** that the values do not depend on the order tensors were created in.
*/
#ifndef DFL_WEIGHTS_H
#define DFL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>
#include "compiler/graph.h"
#include "compiler/spec.h"
#include "runtime/cpu/cpu.h"
#include "runtime/io/data.h"
#include "runtime/io/safetensors.h"

#define DFL_KIND_BIT(k) (1u << (k))

/* Load every tensor of c->g whose kind bit is in kind_mask from st, looking up
** prefix + tensor name ("" or NULL: the name itself). Shapes must match exactly (for INPUT tensors
** only the element count must, so a [b,S,kH] array fills a [b*S,kH] input). A missing tensor or a
** wrong shape is refused: err names the file, the tensor and both shapes. */
int dfl_weights_load(dfl_cpu *c, const dfl_st *st, unsigned kind_mask, const char *prefix,
                     char *err, size_t errlen);
/* What dfl_weights_load would refuse, from the headers alone (no weight data is read): every
** tensor of g whose kind bit is in kind_mask exists in st with its shape (or, for a NAME[a:b/p]
** row selection, rows that give it) and a float dtype where the graph's is float. report() gets
** one line per problem; returns their number. */
int dfl_weights_check(const dfl_graph *g, const dfl_st *st, unsigned kind_mask, const char *prefix,
                      void (*report)(void *ctx, const char *msg), void *ctx);
/* Same, opening PATH (file, or HF directory with shards) first. */
int dfl_weights_load_path(dfl_cpu *c, const char *path, unsigned kind_mask, const char *prefix,
                          char *err, size_t errlen);

/* quantize = fp8: the f8e4m3 weight whose per-row scales the FROZEN f32 tensor t ("<weight>_scale")
** holds, or -1. Such scales are derived when the weight is loaded or drawn (dfl_weights_load,
** dfl_weights_init quantize every f8e4m3 weight in place), never read from a checkpoint. */
int dfl_weights_fp8_weight_of(const dfl_graph *g, int t);

/* Load one graph tensor t from the safetensors entry e (after checking the element count). */
int dfl_weights_read(dfl_cpu *c, int t, const dfl_st *st, const dfl_st_entry *e, char *err, size_t errlen);

/* HF initialisation of every tensor whose kind bit is in kind_mask: 1-D tensors (norm weights) = 1,
** others N(0, std). Reproducible from (seed, tensor name). */
void dfl_weights_init(dfl_cpu *c, unsigned kind_mask, uint64_t seed, double std);
/* The random stream of tensor `name` under `seed`, positioned at its value `first` (a value takes
** two steps): where dfl_weights_init draws from, for anyone drawing the same values elsewhere. */
void dfl_weights_rng(dfl_rng *r, uint64_t seed, const char *name, int64_t first);

/* Bind every weight of a drafter device's graph (dfl_model_train_graph / eval_graph): FROZEN
** target weights from s->target_dir (or seeded random ones for s->target_random), drafter PARAMs
** from s->init_from (or the fresh HF init seeded by s->init_seed), then the fp32 masters. */
int dfl_weights_bind(dfl_cpu *c, const dfl_spec *s, char *err, size_t errlen);

/* Read an HF config.json object (a jansson json_t *, passed as void * to keep jansson out of
** this header) into an architecture. Accepts rope_theta or rope_parameters.rope_theta. */
int dfl_hf_arch_from_json(const void *json, dfl_arch *a, char *err, size_t errlen);
int dfl_hf_arch_load(const char *config_path, dfl_arch *a, char *err, size_t errlen);

/* Load the target's FROZEN weights and set up a drafter's PARAMs: from `drafter_dir` (a released
** or exported drafter) if not NULL/"", else fresh HF init (Linear ~ N(0, 0.02), norms = 1) from
** spec->init_seed. Masters are set equal to the params. */
int dfl_weights_load_spec(const dfl_spec *s, dfl_cpu *c, const char *drafter_dir);

/* The drafter half of dfl_weights_load_spec: PARAMs from drafter_dir or the fresh init (no masters). */
int dfl_weights_load_drafter(const dfl_spec *s, dfl_cpu *c, const char *drafter_dir);

#endif
