/* npy_rt.c -- npy_rt.h over tools/npy.c. */
#include <string.h>

#include "tests/common/npy_rt.h"
#include "tools/npy.h"

bool fj_npy_dtype_from_descr(const char *descr, fj_dtype *out, const char **what)
{
	fj_scalar_type t;
	if (!npy_dtype_from_descr(descr, &t, what))
		return false;
	*out = (fj_dtype)t;
	return true;
}

static fj_status to_rt(fj_context *ctx, fj_status st, const npy_error *e, fj_tensor *pt, fj_rt_tensor *t)
{
	memset(t, 0, sizeof *t);
	if (st != FJ_OK)
		return fj_error_status(ctx, st, (fj_loc){0}, "%s", e->msg);
	st = fj_rt_tensor_alloc(ctx, t, (fj_dtype)pt->dtype, pt->rank, pt->sizes);
	if (st == FJ_OK && t->nbytes)
		memcpy(t->data, pt->data, t->nbytes);
	npy_free(pt);
	return st;
}

fj_status fj_npy_read(fj_context *ctx, const char *path, fj_rt_tensor *t)
{
	npy_error e;
	fj_tensor pt;
	fj_status st = npy_read(&e, path, &pt);
	return to_rt(ctx, st, &e, &pt, t);
}

fj_status fj_npy_read_mem(fj_context *ctx, const char *name, const void *data, size_t len, fj_rt_tensor *t)
{
	npy_error e;
	fj_tensor pt;
	fj_status st = npy_read_mem(&e, name, data, len, &pt);
	return to_rt(ctx, st, &e, &pt, t);
}

fj_status fj_npy_write(fj_context *ctx, const char *path, const fj_rt_tensor *t)
{
	fj_tensor pt;
	fj_tensor_init(&pt);
	pt.data = t->data;
	pt.dtype = (fj_scalar_type)t->dtype;
	pt.rank = t->rank;
	memcpy(pt.sizes, t->dims, (size_t)t->rank * sizeof *t->dims);
	npy_error e;
	fj_status st = npy_write(&e, path, &pt);
	return st == FJ_OK ? st : fj_error_status(ctx, st, (fj_loc){0}, "%s", e.msg);
}
