/* cli.h: the dflc subcommands, one file each under runtime/cli/. Each returns the process exit
** status. */
#ifndef DFL_CLI_H
#define DFL_CLI_H
int dfl_cmd_check(int argc, char **argv);    /* cmd_check.c */
int dfl_cmd_verify(int argc, char **argv);   /* cmd_verify.c */
int dfl_cmd_golden(int argc, char **argv);   /* cmd_golden.c */
int dfl_cmd_train(int argc, char **argv);    /* cmd_train.c */
int dfl_cmd_eval(int argc, char **argv);     /* cmd_train.c */
int dfl_cmd_export(int argc, char **argv);   /* cmd_train.c */
int dfl_cmd_plan(int argc, char **argv);     /* cmd_plan.c */
int dfl_cmd_build(int argc, char **argv);    /* cmd_build.c */
int dfl_cmd_bench(int argc, char **argv);    /* cmd_bench.c */
int dfl_cmd_pack(int argc, char **argv);     /* cmd_pack.c */
/* The memory verdict of `dflc plan` (cmd_plan.c), for `dflc check` and `dflc train`: each device
** planned as the trainer plans it, against its memory_budget, or this machine's memory for a CPU
** device without one; and a GPU device's planned graph lowered op by op (compiler/lower_launch.c) as
** the CUDA backend lowers it at init, so that a shape no kernel takes is found here. Fills up to
** max_miss entries; returns how many devices do not fit or cannot be lowered. */
#include <stdint.h>
typedef struct dfl_plan_miss {
  char device[64];
  int device_index;
  int failed;            /* no plan at all (the graph could not be built) */
  int host;              /* budget is this machine's memory (a CPU device without memory_budget) */
  int64_t need, budget, persistent, step;
  int mem;               /* the memory verdict failed (failed, host or need > budget) */
  int lower;             /* a status: op `op` has no kernel on row `arch` (its plan may fit) */
  char op[160], arch[16];
} dfl_plan_miss;
struct dfl_spec;
struct dfl_compiled;
/* one: for a one-device spec, its device's graph already compiled (dfl_compile_graph), planned here
** and kept in *one for the caller (the trainer takes it); NULL: each device compiled and freed here */
int dfl_plan_verdict(const struct dfl_spec *s, dfl_plan_miss *miss, int max_miss, struct dfl_compiled *one);
int64_t dfl_plan_host_memory(void);   /* bytes; DFL_HOST_MEMORY overrides (tests) */
/* `dflc check`'s checks beyond the spec (cmd_check.c): weights' headers, run and checkpoint
** directories, the memory verdict (unless no_plan); a dfl_spec_deep_fn whose user is a
** dfl_deep_opts. fresh_train: a fresh `dflc train` (no --resume), refused when its checkpoint
** directory holds another run's checkpoints unless restart (--restart moves them aside). */
typedef struct dfl_deep_opts {
  int no_plan;
  const char *out_dir;
  const char *resume;
  int fresh_train, restart;
  int data;   /* `dflc check`: load the data files as train will (train loads them itself, first) */
  struct dfl_compiled *keep;   /* a one-device spec: its compiled graph and plan (runtime/compile.h) are
                               ** left here for the trainer (the plan only when no_plan is 0); NULL: freed */
} dfl_deep_opts;
struct dfl_spec_where;
void dfl_check_deep(const struct dfl_spec *s, const struct dfl_spec_where *w, void *opts);
/* What `dflc train DIR` reads of DIR/build.json, once (cmd_build.c): the spec, and the fingerprints
** and arch recorded (empty strings where build.json has none). */
typedef struct dfl_build_info {
  int is_dir;                   /* the argument was a build directory (else a spec, copied to spec) */
  char spec[4096];
  char graph[24], plan[24], kernels[24], arch[32];
  int has_fingerprint;
} dfl_build_info;
int dfl_build_resolve(const char *arg, dfl_build_info *b);
/* `dflc train DIR`: refuses (1, with what to do) when this dflc compiles the spec to another graph, plan
** or kernel library than b (DIR/build.json) records; c: the spec compiled as the build compiled it (its
** plan compared when c is planned). 0 when they agree. */
int dfl_build_verify(const char *dir, const dfl_build_info *b, const struct dfl_compiled *c);
#endif
