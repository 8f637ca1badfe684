/* check.c -- the public API's element access and result checks (fusejit.h,
 * "Checking results"): IR.md §5's --check=aten and --check=f64 measures over
 * public tensors, computed by runtime/tensor.c's. */
#include <math.h>
#include <string.h>

#include "api/api.h"

/* A dense host fj_tensor viewed as a runtime tensor. */
fj_rt_tensor fj_api_rt_view(const fj_tensor *t)
{
	fj_rt_tensor r;
	memset(&r, 0, sizeof r);
	r.data = t->data;
	r.dtype = (fj_dtype)t->dtype;
	r.rank = t->rank < 0 || t->rank > FJ_MAX_DIMS ? 0 : t->rank;
	memcpy(r.dims, t->sizes, (size_t)r.rank * sizeof *r.dims);
	fj_rt_nbytes(r.dtype, r.dims, r.rank, &r.nbytes);
	r.cap = r.nbytes;
	return r;
}

double fj_tensor_get_f64(const fj_tensor *t, int64_t i)
{
	return t && t->data && (unsigned)t->dtype < FJ_DT_COUNT ? fj_rt_load_f64(t->data, (fj_dtype)t->dtype, i) : 0;
}

void fj_tensor_set_f64(fj_tensor *t, int64_t i, double v)
{
	if (t && t->data && (unsigned)t->dtype < FJ_DT_COUNT)
		fj_rt_store_f64(t->data, (fj_dtype)t->dtype, i, v);
}

double fj_check_tolerance(fj_check c, fj_scalar_type t)
{
	if ((unsigned)t >= FJ_DT_COUNT)
		return 0;
	return c == FJ_CHECK_F64 ? fj_rt_f64_tolerance((fj_dtype)t) : fj_rt_tolerance((fj_dtype)t);
}

double fj_check_error(fj_check c, const fj_tensor *out, const fj_tensor *ref, double scale, int *placed)
{
	bool ok = false;
	double e = INFINITY;
	if (out && ref && (unsigned)out->dtype < FJ_DT_COUNT && (unsigned)ref->dtype < FJ_DT_COUNT) {
		fj_rt_tensor o = fj_api_rt_view(out), r = fj_api_rt_view(ref);
		e = c == FJ_CHECK_F64 ? fj_rt_f64_err(&o, &r, scale, &ok) : fj_rt_rel_l2(&o, &r, &ok);
	}
	if (placed)
		*placed = ok;
	return e;
}
