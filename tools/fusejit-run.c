/* fusejit-run -- runs a graph of a .fj module (IR.md §5); the logic is
 * fj_run_main in runtime/cli_run.c. */
#include "runtime/cli.h"

int main(int argc, char **argv) { return fj_run_main(argc, argv); }
