/* npy.h -- .npy files (NumPy format versions 1.0, 2.0 and 3.0) for the
 * dtypes of IR.md §5: f64 <f8, f32 <f4, f16 <f2, i64 <i8, i32 <i4, i16 <i2,
 * i8 |i1, u8 |u1, bool |b1, and bf16 as its bit pattern in <u2. A tools'
 * module, on the public header alone.
 *
 * Reading refuses, each with an error naming the file: a missing or
 * unreadable file, a bad magic string or version, a malformed header,
 * Fortran order, object (pickled) and structured arrays, big-endian and
 * unknown dtypes, sizes that overflow, truncated data and trailing bytes.
 * Writing is atomic: a temporary file in the same directory, renamed at the
 * end (or by the caller, for several files at once).
 *
 * Errors: an fj_status, and the message ("FILE: what") in *err when err is
 * not NULL. */
#ifndef FJ_TOOLS_NPY_H
#define FJ_TOOLS_NPY_H

#include <stdbool.h>
#include <fusejit/fusejit.h>

typedef struct npy_error {
	char msg[800];
} npy_error;

/* The dtype of a .npy descr ("<f4"); "<u2" is bf16 (IR.md §5). False for
 * anything else; *what gets a reason ("big-endian", "object (pickled)"...). */
bool npy_dtype_from_descr(const char *descr, fj_scalar_type *out, const char **what);
/* The descr of a dtype. */
const char *npy_descr(fj_scalar_type dt);
/* The bytes of a dense tensor of that dtype and shape; false on overflow. */
bool npy_bytes(fj_scalar_type dt, const int64_t *sizes, int rank, size_t *out);
/* A dense host tensor of that dtype and shape, zeroed, 64-byte aligned
 * (flags 0: the tool's; free with npy_free); false when out of memory. */
bool npy_alloc(fj_tensor *t, fj_scalar_type dt, int rank, const int64_t *sizes);
/* Frees a tensor npy_alloc or npy_read made (or an output fusejit owns). */
void npy_free(fj_tensor *t);

/* Reads the .npy file at path into *t (npy_alloc'ed). On failure *t is
 * left empty. */
fj_status npy_read(npy_error *err, const char *path, fj_tensor *t);
/* The same, from memory; `name` names the data in errors. */
fj_status npy_read_mem(npy_error *err, const char *name, const void *data, size_t len, fj_tensor *t);

/* Writes t (dense, host) to path atomically (temp file + rename). */
fj_status npy_write(npy_error *err, const char *path, const fj_tensor *t);
/* Writes t to a new temporary file next to path and returns its name in
 * *tmp (malloc'ed; the caller renames it with npy_commit or removes it
 * with npy_discard, both of which free the name). */
fj_status npy_write_temp(npy_error *err, const char *path, const fj_tensor *t, char **tmp);
fj_status npy_commit(npy_error *err, char *tmp, const char *path);
void npy_discard(char *tmp);

#endif
