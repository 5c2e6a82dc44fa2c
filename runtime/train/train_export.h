/*
** train_export.h: the trainer's bridge to the drafter export (runtime/export.h): export the
** PARAMs of a training graph or of a checkpoint, and check that the written files reload to
** exactly the values exported (bit for bit, after the export's rounding to its stored dtype).
*/
#ifndef DFL_TRAIN_EXPORT_H
#define DFL_TRAIN_EXPORT_H

#include "compiler/spec.h"
#include "models/models.h"
#include "runtime/io/checkpoint.h"
#include "runtime/cpu/cpu.h"

/* A view of a graph's drafter PARAMs in export order (pointers into the backend; free with
** dfl_train_params_view_free, which frees only the arrays). */
int dfl_train_params_view(const dfl_train_graph *tg, dfl_cpu *c, dfl_ckpt_params *view);
void dfl_train_params_view_free(dfl_ckpt_params *view);

/* Export params to DIR (config.json + model.safetensors) for spec s. */
int dfl_train_export_params(const dfl_spec *s, const dfl_ckpt_params *p, const char *dir);
/* Reload DIR with the drafter loader (config.json checked against s) and compare every tensor
** bit for bit with p rounded to bf16 (the stored dtype): DFL_OK or DFL_ETOL. */
int dfl_train_verify_params(const dfl_spec *s, const dfl_ckpt_params *p, const char *dir);

#endif
