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
/* `dflc train DIR`: the spec a `dflc build` directory records (else arg itself); cmd_build.c */
int dfl_build_resolve(const char *arg, char *spec, unsigned long n);
#endif
