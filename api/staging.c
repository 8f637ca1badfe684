/* staging.c -- tensors the kernels cannot use in place, copied through a
 * dense buffer: strided host tensors (gathered, scattered), and strided or
 * misaligned CUDA tensors, staged through the host: their span downloaded,
 * gathered or scattered, uploaded (api/program.c decides which). */
#include <string.h>

#include "api/api.h"

/* cnt elements es bytes wide, step elements apart in p, packed in d. es is a
 * constant where this is inlined, so each memcpy is one load and one store. */
static inline void copy_elems(char *p, char *d, int64_t cnt, int64_t step, size_t es, bool to_dense)
{
	int64_t jump = step * (int64_t)es;
	if (to_dense)
		for (int64_t i = 0; i < cnt; i++, p += jump, d += es)
			memcpy(d, p, es);
	else
		for (int64_t i = 0; i < cnt; i++, p += jump, d += es)
			memcpy(p, d, es);
}

/* A run of cnt elements of t, step elements apart: one memcpy where they
 * are contiguous, else element by element. */
static void copy_run(char *p, char *d, int64_t cnt, int64_t step, size_t es, bool to_dense)
{
	if (step == 1) {
		size_t bytes = (size_t)cnt * es;
		memcpy(to_dense ? d : p, to_dense ? p : d, bytes);
		return;
	}
	switch (es) {
	case 1: copy_elems(p, d, cnt, step, 1, to_dense); break;
	case 2: copy_elems(p, d, cnt, step, 2, to_dense); break;
	case 4: copy_elems(p, d, cnt, step, 4, to_dense); break;
	case 8: copy_elems(p, d, cnt, step, 8, to_dense); break;
	default: copy_elems(p, d, cnt, step, es, to_dense); break;
	}
}

/* The dims merged where t is contiguous across them (size-1 dims dropped), so
 * that a permuted or sliced layout copies in runs as long as it allows: a
 * [B,H,L,D] view of [B,L,H,D] memory moves D elements per memcpy. */
void fj_api_strided_copy(const fj_tensor *t, void *dense, size_t es, int64_t n, bool to_dense)
{
	if (n <= 0)
		return;
	int64_t size[FJ_MAX_DIMS], step[FJ_MAX_DIMS];
	int r = 0;
	for (int k = 0; k < t->rank; k++) {
		int64_t sz = t->sizes[k], st = t->strides ? t->strides[k] : 1;
		if (!t->strides) /* dense: the stride of dim k is the product of the sizes after it */
			for (int j = k + 1; j < t->rank; j++)
				st *= t->sizes[j];
		if (sz == 1)
			continue;
		if (r > 0 && step[r - 1] == st * sz) {
			size[r - 1] *= sz;
			step[r - 1] = st;
		} else {
			size[r] = sz;
			step[r] = st;
			r++;
		}
	}
	int64_t inner = r ? size[r - 1] : 1, istep = r ? step[r - 1] : 1;
	int64_t idx[FJ_MAX_DIMS] = {0};
	int64_t off = 0;
	char *base = t->data, *d = dense;
	for (int64_t e = 0; e < n; e += inner) {
		copy_run(base + off * (int64_t)es, d + e * (int64_t)es, inner, istep, es, to_dense);
		for (int k = r - 2; k >= 0; k--) {
			if (++idx[k] < size[k]) {
				off += step[k];
				break;
			}
			off -= step[k] * (size[k] - 1);
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
