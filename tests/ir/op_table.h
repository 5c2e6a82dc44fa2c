/*
** op_table.h: the op table's cases (tests/ir/test_op_table.c, ctest ir_op_table). Every opcode of
** compiler/ops.def has a row there naming its CPU forward case (the op's outputs against an f64
** reference written in the test) and, for an op marked differentiable, its gradient case (autodiff
** against central finite differences in f64 mode). A case is a function in the test file that
** already checks the op, exported with OP_CASE below, so the op's own test (ir_ops, ir_grad, ...)
** and the table run the same code: the table adds the walk over every opcode that fails for an op
** without a case, not a second copy of the checks.
**
** ir_op_table links those files with DFL_OP_TABLE defined: their main becomes a static unused
** function (DFL_TEST_MAIN) and the binary's main is the table's.
*/
#ifndef DFL_OP_TABLE_H
#define DFL_OP_TABLE_H
#include <stdint.h>

#ifdef DFL_OP_TABLE
#define DFL_TEST_MAIN __attribute__((unused)) static int test_main(void)
#else
#define DFL_TEST_MAIN int main(void)
#endif

/* OP_CASE(entry, counter, rng, body...): defines `int entry(uint64_t seed)`, which seeds the file's
** generator `rng` (each file keeps its own) with the table's seed, runs body and returns how many
** checks it failed (the growth of the file's failure counter). body is one expression or a list of
** calls separated by commas (they are rejoined with the comma operator): a loop or any other
** statement goes in a static function of its own. */
#define OP_CASE(entry, counter, rng, ...)                                                          \
  int entry(uint64_t seed) {                                                                       \
    rng = seed;                                                                                    \
    int before_ = counter;                                                                         \
    __VA_ARGS__;                                                                                   \
    return counter - before_;                                                                      \
  }

/* The cases, by the file that defines them. */
int optab_ops_matmul(uint64_t seed);        /* test_ops.c */
int optab_ops_elementwise(uint64_t seed);
int optab_ops_linear_ce(uint64_t seed);
int optab_ops_block_rows(uint64_t seed);
int optab_ops_dflash_blocks(uint64_t seed);
int optab_ops_dflash_metrics(uint64_t seed);
int optab_grad_matmul(uint64_t seed);       /* test_grad.c */
int optab_grad_simple(uint64_t seed);
int optab_grad_linear_ce(uint64_t seed);
int optab_grad_block_rows(uint64_t seed);
int optab_attention_forward(uint64_t seed); /* test_attention.c */
int optab_attention_grad(uint64_t seed);
int optab_fp8_ops(uint64_t seed);           /* test_fp8.c */
int optab_optim_steps(uint64_t seed);       /* test_optim.c */
int optab_hybrid_gated_delta(uint64_t seed); /* test_hybrid_ops.c */
int optab_hybrid_conv(uint64_t seed);
int optab_hybrid_rows(uint64_t seed);
int optab_hybrid_partial_rope(uint64_t seed);

#endif
