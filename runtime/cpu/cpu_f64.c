/* cpu_f64.c: the CPU kernels with double storage (finite-difference gradient checks). */
#define REAL double
#define KSUFFIX(x) x##_f64
#define GEMM cblas_dgemm
#define KEXP exp
#include "runtime/cpu/cpu_kernels.inc"
