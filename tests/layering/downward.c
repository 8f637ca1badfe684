/* downward.c -- the control of test build.layering: compiled as if it were in
 * backend_host/, an include of a folder below it builds. */
#include "cache/kcache.h"

int fj_layering_probe(void) { return 0; }
