/* staging.c -- tensors the kernels cannot use in place, copied through a
 * dense buffer: strided host tensors (gathered, scattered), and strided or
 * misaligned CUDA tensors, staged through the host: their span downloaded,
 * gathered or scattered, uploaded (api/program.c decides which). */
#include <string.h>

#include "api/api.h"

void fj_api_strided_copy(const fj_tensor *t, void *dense, size_t es, int64_t n, bool to_dense)
{
	int64_t idx[FJ_MAX_DIMS] = {0};
	int64_t off = 0;
	char *base = t->data, *d = dense;
	for (int64_t e = 0; e < n; e++) {
		char *s = base + off * (int64_t)es;
		if (to_dense)
			memcpy(d + e * (int64_t)es, s, es);
		else
			memcpy(s, d + e * (int64_t)es, es);
		for (int k = t->rank - 1; k >= 0; k--) {
			if (++idx[k] < t->sizes[k]) {
				off += t->strides[k];
				break;
			}
			off -= t->strides[k] * (t->sizes[k] - 1);
			idx[k] = 0;
		}
	}
}

/* The elements a strided tensor spans: from offset *lo (<= 0) to *lo + *n. */
static void span_of(const fj_tensor *t, int64_t *lo, int64_t *n)
{
	int64_t a = 0, b = 0;
	for (int k = 0; k < t->rank; k++) {
		int64_t st = t->strides ? t->strides[k] : 0, e = st * (t->sizes[k] - 1);
		a += e < 0 ? e : 0;
		b += e > 0 ? e : 0;
	}
	*lo = a;
	*n = b - a + 1;
}

/* Copies n bytes between host memory and device address dev (the device's
 * synchronous copies, after fusejit's stream). */
static fj_status dev_copy(const fj_nvptx_device *dv, void *host, uint64_t dev, size_t n, bool to_host)
{
	return to_host ? dv->dtoh(dv->ud, host, dev, n) : dv->htod(dv->ud, dev, host, n);
}

/* A strided or misaligned CUDA tensor's span downloaded into a new host
 * buffer (*span, free with fj_rt_aligned_free); *view: t over it. */
static fj_status span_download(fj_context *ctx, const fj_nvptx_device *dv, const fj_tensor *t, void **span,
                               fj_tensor *view)
{
	size_t es = fj_scalar_type_size(t->dtype);
	int64_t lo, n;
	span_of(t, &lo, &n);
	if (!(*span = fj_rt_aligned_alloc((size_t)n * es)))
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	uint64_t base = (uint64_t)(uintptr_t)t->data + (uint64_t)(lo * (int64_t)es);
	fj_status st = dev_copy(dv, *span, base, (size_t)n * es, true);
	*view = *t;
	view->data = (char *)*span - lo * (int64_t)es;
	view->device = FJ_DEVICE_HOST;
	if (st != FJ_OK) {
		fj_rt_aligned_free(*span);
		*span = NULL;
	}
	return st;
}

fj_status fj_api_stage_in(fj_context *ctx, const fj_nvptx_device *dv, const fj_tensor *t, void *d, int64_t n)
{
	void *span;
	fj_tensor v;
	fj_status st = span_download(ctx, dv, t, &span, &v);
	if (st != FJ_OK)
		return st;
	size_t es = fj_scalar_type_size(t->dtype);
	if (t->strides)
		fj_api_strided_copy(&v, d, es, n, true);
	else
		memcpy(d, v.data, (size_t)n * es);
	fj_rt_aligned_free(span);
	return FJ_OK;
}

fj_status fj_api_stage_out(fj_context *ctx, const fj_nvptx_device *dv, const fj_tensor *u, void *d, int64_t n)
{
	void *span;
	fj_tensor v;
	fj_status st = span_download(ctx, dv, u, &span, &v);
	if (st != FJ_OK)
		return st;
	size_t es = fj_scalar_type_size(u->dtype);
	int64_t lo, ns;
	span_of(u, &lo, &ns);
	if (u->strides)
		fj_api_strided_copy(&v, d, es, n, false);
	else
		memcpy(v.data, d, (size_t)n * es);
	st = dev_copy(dv, span, (uint64_t)(uintptr_t)u->data + (uint64_t)(lo * (int64_t)es), (size_t)ns * es, false);
	fj_rt_aligned_free(span);
	return st;
}
