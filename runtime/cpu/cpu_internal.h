/* cpu_internal.h: the CPU backend's per-precision kernel entry points (cpu_kernels.inc). */
#ifndef DFL_CPU_INTERNAL_H
#define DFL_CPU_INTERNAL_H
#include "runtime/cpu/cpu.h"
int dfl_cpu_exec_f32(dfl_cpu *c, const dfl_op *op);
int dfl_cpu_exec_f64(dfl_cpu *c, const dfl_op *op);
void dfl_cpu_quant_rows_f32(dfl_cpu *c, int x, int s);
void dfl_cpu_quant_rows_f64(dfl_cpu *c, int x, int s);
#endif
