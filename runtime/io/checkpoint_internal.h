/*
** checkpoint_internal.h: the step directories of a checkpoint root, as checkpoint.c (which defines these)
** and checkpoint_run.c (the run a root belongs to) both read them; not part of checkpoint.h's interface.
*/
#ifndef DFL_CHECKPOINT_INTERNAL_H
#define DFL_CHECKPOINT_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

/* p is a regular file (following links) */
int dfl_ckpt_is_file(const char *p);
/* The step-NNNNNNNN directories of root, ascending; returns the count (caller frees *steps). */
int dfl_ckpt_list_steps(const char *root, int64_t **steps);
/* root/<prefix>step-NNNNNNNN into out */
void dfl_ckpt_step_dir(char *out, size_t len, const char *root, const char *prefix, int64_t step);
/* 1 for a checkpoint the trainer wrote (trainer.json of this format and state.safetensors), its "run"
** into id ("" when it has none); 0 for anything else (a folder named step-N by hand). */
int dfl_ckpt_of_run(const char *dir, char *id, size_t n);
#endif
