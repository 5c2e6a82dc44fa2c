/*
** train_internal.h: what the trainer's files (train.c, train_eval.c, train_run.c) share beyond
** train.h: the clock, the metrics' ratios and the checkpoint root.
*/
#ifndef DFL_TRAIN_INTERNAL_H
#define DFL_TRAIN_INTERNAL_H
#include "runtime/train/train.h"

/* train_eval.c */
double train_now_s(void);   /* seconds on the monotonic clock */
/* Ratios of the DFLASH_METRICS vector summed over some steps: acc, tau, topk and acc@j for j < B. */
void train_metrics_ratios(const double *m, int B, double *acc, double *tau, double *topk, double *pos);
/* train.c: the run's checkpoint directory: the spec's, or OUT/ckpt under --out (or when the spec
** has none). */
int train_ckpt_root(const dfl_trainer *tr, char *out, size_t n);

#endif
