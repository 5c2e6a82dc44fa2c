/*
** tests/cuda/ops.h: what the files of the cuda_ops test share (test_ops.c: the harness and main;
** test_ops_dense.c, test_ops_attention.c, test_ops_loss_optim.c, test_ops_hybrid.c: the cases by
** kernel family). One binary: the cases run in main's order, so a seed reproduces a whole run.
*/
#ifndef DFL_TESTS_CUDA_OPS_H
#define DFL_TESTS_CUDA_OPS_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compiler/graph.h"
#include "compiler/spec.h"
#include "runtime/cpu/cpu.h"
#include "runtime/cuda/cuda.h"

extern unsigned long long rng_s;
static inline double urand(void) { /* splitmix64 */
  unsigned long long z = (rng_s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}
static inline int irand(int n) { return (int)(urand() * n) % n; }

extern int fails, cases;
extern int row_smem;          /* --as-cc: the forced row's shared memory per block (bytes); 0: the device's */
extern dfl_dtype ACT;

typedef struct { int t; int32_t *vals; } ifill; /* integer inputs the case sets */
extern int preset_t;        /* a float input whose values the case sets (preset_v), not run_case */
extern int rerun_exact;     /* run the GPU graph twice: every output the same bit for bit */
extern const float *preset_v;
#define NPRESET 4                /* more preset inputs (the hybrid cases: q, k, g, beta) */
extern int preset_ts[NPRESET];
extern const float *preset_vs[NPRESET];

float *rand_f(int64_t n, double scale, dfl_dtype d);
void run_case(const char *name, dfl_graph *g, const ifill *ints, int nints, const double *scales,
              const int *binary);
int32_t *rope_run(const char *nm, dfl_graph *g, int pos, int x, int R);
void rand_anchors(int batch, int S, int N, int B, int32_t *anc, int32_t *keep, int allkeep);

static inline int t2(dfl_graph *g, const char *n, dfl_dtype d, dfl_tkind k, int64_t r, int64_t c) { return dfl_tensor_2d(g, n, d, k, r, c); }
static inline int t1(dfl_graph *g, const char *n, dfl_dtype d, dfl_tkind k, int64_t r) { return dfl_tensor_1d(g, n, d, k, r); }
static inline int op(dfl_graph *g, dfl_opcode c, int ni, const int *in, int no, const int *out, const dfl_attrs *a) {
  return dfl_op_add(g, c, in, ni, out, no, a);
}

/* The cases (test_ops_*.c), called by main in test_ops.c. */
void case_matmul(void);
void case_matmul_accum(void);
void case_matmul_addend(void);
void case_fp8_(int R, int K, int N, int addend, int fast);
void case_fp8(int R, int K, int N, int addend);
void case_fp8_fused(int R, int C);
void case_fp8_fused_w(int R, int C, dfl_dtype wdt); /* the norm weight in wdt (f32: the hybrid's) */
void case_concat(int R);
void case_block_rows(int nb, int B, int C);
void case_elementwise(int R, int C);
void case_pw_chain(int R, int C);
void case_rmsnorm(int R, int D, int G, int addend);
void case_rope(int R, int nh, int hd);
void case_rope_norm(int R, int nh, int hd);
void case_rope_pair(int R, int nh, int nh2, int hd, int normed);
void case_gather(void);
void case_dflash_data(int soft); /* soft: DFLASH_BLOCKS's fifth output, the target rows */
void case_attention(int dflash, int window, int hd, int nh, int nkv);
void case_attention_tc(int dflash, int S, int N, int B, int window, int hd, int nh, int nkv, int amode);
void case_linear_ce(int mode);
void case_linear_ce_kd(int mode); /* soft labels: the target's rows as a fifth input */
void case_optimizer(void);
void case_optimizer_mt(int keep);
void case_conv1d(int nseq, int S, int C, int wf32);
void case_conv_qkv(int nseq, int S, int D, int Cv, int G, int wf32);
void case_hybrid_rows(int R, int H, int G);
void case_hybrid_windows(int R, int H, int G, int extra);
void case_pw_windows(int R, int C, int off, int c);
void case_pw_rowq(int R, int C, int keep);
void case_pw_rownorm(int R, int H, int G);
void case_rope_partial(int R, int nh, int hd, int rd);
void case_rope_partial_fused(int R, int nh, int nh2, int hd, int rd, int normed);
void case_rmsnorm_w32(int R, int D, int G);
void case_gated_delta(int nseq, int S, int Hk, int Hv, int dk, int dv);

#endif
