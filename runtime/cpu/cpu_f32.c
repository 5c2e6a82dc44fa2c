/* cpu_f32.c: the CPU kernels with float storage (training path). */
#define REAL float
#define KSUFFIX(x) x##_f32
#define GEMM cblas_sgemm
#define KEXP expf
#include "runtime/cpu/cpu_kernels.inc"
