/* npy.h -- .npy files (NumPy format versions 1.0, 2.0 and 3.0) for the
 * dtypes of IR.md §5: f64 <f8, f32 <f4, f16 <f2, i64 <i8, i32 <i4, i16 <i2,
 * i8 |i1, u8 |u1, bool |b1, and bf16 as its bit pattern in <u2.
 *
 * Reading refuses, each with an error naming the file: a missing or
 * unreadable file, a bad magic string or version, a malformed header,
 * Fortran order, object (pickled) and structured arrays, big-endian and
 * unknown dtypes, sizes that overflow, truncated data and trailing bytes.
 * Writing is atomic: a temporary file in the same directory, renamed at the
 * end (or by the caller, for several files at once). */
#ifndef FJ_RT_NPY_H
#define FJ_RT_NPY_H

#include "runtime/tensor.h"

/* The IR dtype of a .npy descr ("<f4"); "<u2" is bf16 (IR.md §5). False for
 * anything else; *what gets a reason ("big-endian", "object (pickled)"...). */
bool fj_npy_dtype_from_descr(const char *descr, fj_dtype *out, const char **what);

/* Reads the .npy file at path into *t (allocated; free with fj_rt_tensor_free).
 * On failure *t is left empty and an error is recorded. */
fj_status fj_npy_read(fj_context *ctx, const char *path, fj_rt_tensor *t);
/* The same, from memory; `name` names the data in errors. */
fj_status fj_npy_read_mem(fj_context *ctx, const char *name, const void *data, size_t len,
                          fj_rt_tensor *t);

/* Writes t to path atomically (temp file + rename). */
fj_status fj_npy_write(fj_context *ctx, const char *path, const fj_rt_tensor *t);
/* Writes t to a new temporary file next to path and returns its name in
 * *tmp (malloc'ed; the caller renames it with fj_npy_commit or removes it
 * with fj_npy_discard, both of which free the name). */
fj_status fj_npy_write_temp(fj_context *ctx, const char *path, const fj_rt_tensor *t, char **tmp);
fj_status fj_npy_commit(fj_context *ctx, char *tmp, const char *path);
void fj_npy_discard(char *tmp);

#endif
