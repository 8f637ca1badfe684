/* upward.c -- compiled as if it were in backend_host/ (tests/CMakeLists.txt:
 * test build.layering): an include that runs back up ARCHITECTURE.md's table
 * must not build. */
#include "runtime/program.h"

int fj_layering_probe(void) { return 0; }
