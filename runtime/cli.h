/* cli.h -- the command-line tools' logic, as library functions (their mains
 * in tools/ only call these). */
#ifndef FJ_RT_CLI_H
#define FJ_RT_CLI_H

/* fusejit-run (IR.md §5). Returns the process exit status. */
int fj_run_main(int argc, char **argv);

#endif
