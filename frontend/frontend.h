/* frontend.h -- the .fj text format's parser (IR.md §1).
 *
 * The parser builds a module through the IR API, checking the grammar, SSA
 * (names defined once, before use; fusion.kernel bodies see only their
 * operands), result counts, attribute names and the annotations of IR.md §3,
 * then runs fj_check_node and fj_infer_node on every node and compares written
 * result types with the inferred ones. It stops at the first error, which is
 * recorded on the context as `file:line:col: error: message`. */
#ifndef FJ_FRONTEND_H
#define FJ_FRONTEND_H

#include <stddef.h>

#include "ir.h"

/* Parses text[0..len) (NUL bytes are just input). file names the input in
 * diagnostics (NULL: "<input>"). On success *out is a new module whose file is
 * a copy of the name (owned by the module); on failure *out is NULL, the error
 * is recorded on ctx and nothing leaks. Returns FJ_ERR_PARSE for malformed
 * text, FJ_ERR_INVALID for well-formed but wrong input (types, SSA,
 * attributes), FJ_ERR_NOMEM when memory runs out. */
fj_status fj_parse_module(fj_context *ctx, const char *text, size_t len, const char *file,
                          fj_module **out);

/* Reads and parses the file at path; an unreadable file is FJ_ERR_IO with a
 * message naming it. */
fj_status fj_parse_file(fj_context *ctx, const char *path, fj_module **out);

#endif
