/*
** ir.c: sizes and names of the IR's records (ir.h).
*/
#include "compiler/ir.h"

int64_t dfl_tensor_numel(const dfl_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t dfl_dtype_size(dfl_dtype dt) {
  switch (dt) {
  case DFL_F32: return 4;
  case DFL_BF16: return 2;
  case DFL_F16: return 2;
  case DFL_F64: return 8;
  case DFL_I32: return 4;
  case DFL_I64: return 8;
  case DFL_F8E4M3: return 1;
  default: return 0;
  }
}

int64_t dfl_tensor_bytes(const dfl_tensor *t) { return dfl_tensor_numel(t) * (int64_t)dfl_dtype_size(t->dtype); }

const char *dfl_dtype_name(dfl_dtype dt) {
  static const char *n[] = {"f32", "bf16", "f16", "f64", "i32", "i64", "f8e4m3"};
  return (unsigned)dt < DFL_DTYPE_COUNT ? n[dt] : "?";
}

const char *dfl_opcode_name(dfl_opcode c) {
  static const char *n[] = {
#define DFL_OP(NAME, name, family, diff) #name,
#include "compiler/ops.def"
#undef DFL_OP
  };
  return (unsigned)c < DFL_OP_COUNT ? n[c] : "?";
}

const char *dfl_tkind_name(dfl_tkind k) {
  static const char *n[] = {"input", "param", "frozen", "state", "grad", "output", "act"};
  return (unsigned)k < DFL_TKIND_COUNT ? n[k] : "?";
}

const char *dfl_phase_name(dfl_phase p) {
  static const char *n[] = {"target", "forward", "loss", "backward", "optimizer"};
  return (unsigned)p < DFL_PH_COUNT ? n[p] : "?";
}

int dfl_tensor_is_persistent(const dfl_tensor *t) { return t->kind != DFL_T_ACT; }

