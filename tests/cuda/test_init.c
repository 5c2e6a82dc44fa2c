/*
** test_init (GPU): random FROZEN weights drawn by host threads into the CUDA arena
** (dfl_be_cuda_init_random, tensors cut into segments drawn at once) are exactly the values the
** CPU draws one stream per tensor (dfl_weights_init): f32 bit for bit, bf16 the CPU value rounded
** to bf16, 1-D tensors all 1, f8e4m3 weights (quantize = fp8) the CPU's quantized values and
** their row scales exactly, the scales written by the threads that draw the rows. DFL_INIT_SEG shrinks the segment to 100,000 values so that the
** tensors here span 1, 3 and 31 segments, with ragged last ones. Seed from the time (printed).
** Exit 77 without a GPU.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/io/weights.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu.h"
#include "runtime/cuda/cuda.h"

int main(void) {
  if (!dfl_cuda_available()) { printf("SKIP: no CUDA device\n"); return 77; }
  setenv("DFL_INIT_SEG", "100000", 1);
  uint64_t seed = (uint64_t)time(NULL);
  printf("seed %llu\n", (unsigned long long)seed);
  dfl_graph g;
  dfl_graph_init(&g);
  int ones = dfl_tensor_1d(&g, "norm.weight", DFL_BF16, DFL_T_FROZEN, 777);
  int a = dfl_tensor_2d(&g, "embed_tokens.weight", DFL_BF16, DFL_T_FROZEN, 3001, 1000);  /* 31 segments */
  int b = dfl_tensor_2d(&g, "lm_head.weight", DFL_F32, DFL_T_FROZEN, 257, 1000);         /* 3 segments */
  int c = dfl_tensor_2d(&g, "small.weight", DFL_F32, DFL_T_FROZEN, 31, 17);              /* 1 segment */
  /* quantize = fp8: segments of whole rows, each row quantized with its own scale */
  int q = dfl_tensor_2d(&g, "down_proj.weight", DFL_F8E4M3, DFL_T_FROZEN, 333, 1000);     /* 4 segments */
  int qs = dfl_tensor_1d(&g, "down_proj.weight_scale", DFL_F32, DFL_T_FROZEN, 333);
  int r = dfl_tensor_2d(&g, "up_proj.weight", DFL_F8E4M3, DFL_T_FROZEN, 41, 3000);        /* 2 segments of 33 rows */
  int rs = dfl_tensor_1d(&g, "up_proj.weight_scale", DFL_F32, DFL_T_FROZEN, 41);
  int x = dfl_tensor_2d(&g, "x", DFL_F32, DFL_T_INPUT, 2, 1000), y = dfl_tensor_2d(&g, "y", DFL_F32, DFL_T_ACT, 2, 257);
  dfl_attrs at = {0};
  at.trans_b = 1;
  dfl_op_add(&g, DFL_OP_MATMUL, (int[]){x, b}, 2, &y, 1, &at);
  dfl_backend be;
  if (dfl_be_open_cuda(&be, &g, NULL, NULL, 0, NULL)) { printf("FAIL: cuda backend\n"); return 1; }
  if (dfl_be_cuda_init_random(&be, DFL_KIND_BIT(DFL_T_FROZEN), seed, 0.02)) { printf("FAIL: init\n"); return 1; }
  dfl_cpu cpu;
  if (dfl_cpu_init(&cpu, &g, NULL, 0)) { printf("FAIL: cpu backend\n"); return 1; }
  dfl_weights_init(&cpu, DFL_KIND_BIT(DFL_T_FROZEN), seed, 0.02);
  dfl_cuda *cu = dfl_be_cuda_state(&be);
  int fails = 0, ts[] = {ones, a, b, c, q, qs, r, rs};
  for (int k = 0; k < 8; k++) {
    int t = ts[k];
    int64_t n = dfl_tensor_numel(&g.t[t]), bad = 0, first = -1;
    float *d = malloc(sizeof(float) * (size_t)n);
    if (!d || dfl_cuda_get_f(cu, t, d, n)) { printf("FAIL: read %s\n", g.t[t].name); return 1; }
    const float *h = dfl_cpu_f32(&cpu, t);
    int is1 = 1;
    for (int64_t i = 0; i < n; i++) {
      float want = g.t[t].dtype == DFL_BF16 ? dfl_bf16_round(h[i]) : h[i];
      if (memcmp(&want, &d[i], 4)) { bad++; if (first < 0) first = i; }
      if (t == ones) is1 &= d[i] == 1.0f;
    }
    printf("%-22s %9lld values: %lld differ from the CPU's\n", g.t[t].name, (long long)n, (long long)bad);
    if (bad) printf("  first difference at %lld: gpu %.9g cpu %.9g\n", (long long)first, d[first], h[first]);
    if (bad || !is1) fails++;
    free(d);
  }
  dfl_cpu_free(&cpu);
  dfl_be_close(&be);
  dfl_graph_free(&g);
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
