/* cli.h: the dflc subcommands. Each returns the process exit status. */
#ifndef DFL_CLI_H
#define DFL_CLI_H
int dfl_cmd_check(int argc, char **argv);
#endif
