/* api.h -- shared by the public API implementation files in api/. */
#ifndef FJ_API_INTERNAL_H
#define FJ_API_INTERNAL_H

#include "ir.h"

/* Records "fn: what" as FJ_ERR_INVALID on ctx (when ctx is not NULL). */
fj_status fj_api_arg_error(fj_context *ctx, const char *fn, const char *what);
/* Parses sizes written as in the text format ("N,64", "[N*2, 64]") into
 * dims[0..*rank) of module m; *end is where parsing stopped. With minus1 not
 * NULL, a size may be -1 (minus1[k] is then true and dims[k] 1). */
fj_status fj_api_parse_dims(fj_context *ctx, fj_module *m, const char *s, bool *minus1, fj_dim *dims, int *rank,
                            const char **end);

#endif
