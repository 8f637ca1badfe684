/* npy_rt.h -- the tools' .npy reader and writer (tools/npy.h) for tests that
 * work on runtime tensors: errors recorded on the context. */
#ifndef FJ_TESTS_NPY_RT_H
#define FJ_TESTS_NPY_RT_H

#include "runtime/tensor.h"

bool fj_npy_dtype_from_descr(const char *descr, fj_dtype *out, const char **what);
fj_status fj_npy_read(fj_context *ctx, const char *path, fj_rt_tensor *t);
fj_status fj_npy_read_mem(fj_context *ctx, const char *name, const void *data, size_t len, fj_rt_tensor *t);
fj_status fj_npy_write(fj_context *ctx, const char *path, const fj_rt_tensor *t);

#endif
