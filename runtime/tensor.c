/* tensor.c -- host tensors (tensor.h): aligned allocation and dtype conversions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor.h"

bool fj_rt_numel(const int64_t *dims, int rank, int64_t *numel)
{
	int64_t n = 1;
	for (int i = 0; i < rank; i++) {
		if (dims[i] < 0 || (dims[i] && n > INT64_MAX / dims[i]))
			return false;
		n *= dims[i];
	}
	*numel = n;
	return true;
}

bool fj_rt_nbytes(fj_dtype dt, const int64_t *dims, int rank, size_t *nbytes)
{
	int64_t n;
	if (!fj_rt_numel(dims, rank, &n))
		return false;
	size_t es = (size_t)fj_dtype_size(dt);
	if ((uint64_t)n > (SIZE_MAX - FJ_RT_ALIGN) / es)
		return false;
	*nbytes = (size_t)n * es;
	return true;
}

/* Tensors of FJ_RT_PAGE_MIN bytes or more start on a page: the same offset
 * mod 4096 for every large tensor, so that a kernel's stores to one never
 * carry the low 12 address bits of its loads from another a few lines
 * ahead, which the CPU takes for a dependence (4K aliasing: gelu on
 * [8192,4096] f32, Zen 4, ran in 17 ms instead of 9 when the heap put y 64
 * bytes past x's offset in its page). */
enum { FJ_RT_PAGE = 4096, FJ_RT_PAGE_MIN = 64 << 10 };

void *fj_rt_aligned_alloc(size_t n)
{
	size_t al = n >= FJ_RT_PAGE_MIN ? FJ_RT_PAGE : FJ_RT_ALIGN;
	size_t r = (n + al - 1) / al * al;
	if (r == 0)
		r = al;
	return aligned_alloc(al, r);
}

void fj_rt_aligned_free(void *p) { free(p); }

fj_status fj_rt_tensor_alloc(fj_context *ctx, fj_rt_tensor *t, fj_dtype dt, int rank, const int64_t *dims)
{
	memset(t, 0, sizeof *t);
	return fj_rt_tensor_reshape(ctx, t, dt, rank, dims);
}

fj_status fj_rt_tensor_reshape(fj_context *ctx, fj_rt_tensor *t, fj_dtype dt, int rank, const int64_t *dims)
{
	size_t nb;
	if (rank < 0 || rank > FJ_MAX_RANK || !fj_rt_nbytes(dt, dims, rank, &nb)) {
		char s[256];
		fj_rt_shape_str(dims, rank < 0 ? 0 : rank > FJ_MAX_RANK ? FJ_MAX_RANK : rank, s, sizeof s);
		return fj_error(ctx, (fj_loc){0}, "tensor %s[%s] is too large", fj_dtype_name(dt), s);
	}
	if (!t->data || t->cap < nb) {
		void *d = fj_rt_aligned_alloc(nb);
		if (!d)
			return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0},
			                       "out of memory allocating a tensor of %zu bytes", nb);
		fj_rt_aligned_free(t->data);
		t->data = d;
		t->cap = nb ? (nb + FJ_RT_ALIGN - 1) / FJ_RT_ALIGN * FJ_RT_ALIGN : FJ_RT_ALIGN;
	}
	memset(t->data, 0, nb);
	t->dtype = dt;
	t->rank = rank;
	for (int i = 0; i < rank; i++)
		t->dims[i] = dims[i];
	for (int i = rank; i < FJ_MAX_RANK; i++)
		t->dims[i] = 0;
	t->nbytes = nb;
	return FJ_OK;
}

void fj_rt_tensor_free(fj_rt_tensor *t)
{
	fj_rt_aligned_free(t->data);
	t->data = NULL;
	t->nbytes = t->cap = 0;
}

bool fj_rt_tensor_same_type(const fj_rt_tensor *a, const fj_rt_tensor *b)
{
	if (a->dtype != b->dtype || a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

void fj_rt_shape_str(const int64_t *dims, int rank, char *buf, size_t size)
{
	size_t k = 0;
	buf[0] = 0;
	for (int i = 0; i < rank && k < size; i++) {
		int w = snprintf(buf + k, size - k, "%s%lld", i ? "," : "", (long long)dims[i]);
		if (w < 0)
			break;
		k += (size_t)w;
	}
}

void fj_rt_tensor_type_str(const fj_rt_tensor *t, char *buf, size_t size)
{
	char s[200];
	fj_rt_shape_str(t->dims, t->rank, s, sizeof s);
	snprintf(buf, size, "%s[%s]", fj_dtype_name(t->dtype), s);
}

/* ---- half precision ---- */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float fj_rt_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0x1f)
		return bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		if (man == 0)
			return bits_f32(sign);
		float v = ldexpf((float)man, -24); /* subnormal */
		return sign ? -v : v;
	}
	return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t fj_rt_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a >= 0x7f800000u) /* inf or NaN */
		return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0);
	if (a >= 0x477ff000u) /* rounds to >= 65520: inf */
		return sign | 0x7c00;
	if (a < 0x38800000u) { /* below the smallest normal: subnormal or 0 */
		float v = bits_f32(a);
		float scaled = v * 16777216.0f; /* 2^24: units of the smallest subnormal */
		uint32_t m = (uint32_t)nearbyintf(scaled); /* default rounding: nearest even */
		return sign | (uint16_t)m;
	}
	uint32_t rounded = a + 0xfffu + ((a >> 13) & 1);
	return sign | (uint16_t)((rounded - (112u << 23)) >> 13);
}

float fj_rt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t fj_rt_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

double fj_rt_load_f64(const void *data, fj_dtype dt, int64_t i)
{
	switch (dt) {
	case FJ_DT_F64: return ((const double *)data)[i];
	case FJ_DT_F32: return ((const float *)data)[i];
	case FJ_DT_F16: return fj_rt_f16_to_f32(((const uint16_t *)data)[i]);
	case FJ_DT_BF16: return fj_rt_bf16_to_f32(((const uint16_t *)data)[i]);
	case FJ_DT_I64: return (double)((const int64_t *)data)[i];
	case FJ_DT_I32: return ((const int32_t *)data)[i];
	case FJ_DT_I16: return ((const int16_t *)data)[i];
	case FJ_DT_I8: return ((const int8_t *)data)[i];
	case FJ_DT_U8: return ((const uint8_t *)data)[i];
	case FJ_DT_BOOL: return ((const uint8_t *)data)[i] != 0;
	default: return 0;
	}
}

void fj_rt_store_f64(void *data, fj_dtype dt, int64_t i, double v)
{
	switch (dt) {
	case FJ_DT_F64: ((double *)data)[i] = v; break;
	case FJ_DT_F32: ((float *)data)[i] = (float)v; break;
	case FJ_DT_F16: ((uint16_t *)data)[i] = fj_rt_f32_to_f16((float)v); break;
	case FJ_DT_BF16: ((uint16_t *)data)[i] = fj_rt_f32_to_bf16((float)v); break;
	case FJ_DT_I64: ((int64_t *)data)[i] = (int64_t)v; break;
	case FJ_DT_I32: ((int32_t *)data)[i] = (int32_t)v; break;
	case FJ_DT_I16: ((int16_t *)data)[i] = (int16_t)v; break;
	case FJ_DT_I8: ((int8_t *)data)[i] = (int8_t)v; break;
	case FJ_DT_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
	case FJ_DT_BOOL: ((uint8_t *)data)[i] = v != 0; break;
	default: break;
	}
}

/* ---- comparison ---- */

double fj_rt_rel_l2(const fj_rt_tensor *out, const fj_rt_tensor *ref, bool *placement_ok)
{
	int64_t n = fj_rt_tensor_numel(ref);
	double num = 0, den = 0;
	*placement_ok = true;
	for (int64_t i = 0; i < n; i++) {
		double a = fj_rt_load_f64(out->data, out->dtype, i);
		double r = fj_rt_load_f64(ref->data, ref->dtype, i);
		if (!isfinite(a) || !isfinite(r)) {
			bool same = (isnan(a) && isnan(r)) || (isinf(a) && isinf(r) && (a > 0) == (r > 0));
			if (!same) {
				*placement_ok = false;
				return INFINITY;
			}
			continue;
		}
		double d = a - r;
		num += d * d;
		den += r * r;
	}
	if (n == 0)
		return 0;
	double err = den > 0 ? sqrt(num) / sqrt(den) : sqrt(num);
	/* integers beyond 2^53 can differ without a difference in double */
	if (err == 0 && !fj_dtype_is_float(ref->dtype) && memcmp(out->data, ref->data, ref->nbytes) != 0)
		err = 1e-300;
	return err;
}

double fj_rt_tolerance(fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F32: return 1e-5;
	case FJ_DT_F16: return 1e-3;
	case FJ_DT_BF16: return 1e-2;
	case FJ_DT_F64: return 1e-12;
	default: return 0;
	}
}

double fj_rt_f64_err(const fj_rt_tensor *out, const fj_rt_tensor *ref, double scale, bool *placement_ok)
{
	int64_t n = fj_rt_tensor_numel(ref);
	double num = 0, den = 0;
	bool isfloat = fj_dtype_is_float(out->dtype);
	*placement_ok = true;
	for (int64_t i = 0; i < n; i++) {
		double a = fj_rt_load_f64(out->data, out->dtype, i);
		double r = fj_rt_load_f64(ref->data, ref->dtype, i);
		double rr = r; /* r rounded to out's dtype: where it overflows, inf is right */
		if (isfloat && out->dtype != ref->dtype) {
			uint64_t cell = 0;
			fj_rt_store_f64(&cell, out->dtype, 0, r);
			rr = fj_rt_load_f64(&cell, out->dtype, 0);
		}
		if (!isfinite(a) || !isfinite(rr)) {
			bool same = (isnan(a) && isnan(rr)) || (isinf(a) && isinf(rr) && (a > 0) == (rr > 0));
			if (!same) {
				*placement_ok = false;
				return INFINITY;
			}
			continue;
		}
		double d = a - rr; /* out can be no closer than ref in its dtype (f16 underflow ...) */
		num += d * d;
		den += r * r;
	}
	if (num == 0) {
		/* integers beyond 2^53 can differ without a difference in double */
		if (!isfloat && out->dtype == ref->dtype && memcmp(out->data, ref->data, ref->nbytes) != 0)
			return 1e-300;
		return 0;
	}
	den = sqrt(den) + scale;
	return den > 0 ? sqrt(num) / den : INFINITY;
}

double fj_rt_f64_tolerance(fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F32: return 1e-5;
	case FJ_DT_F16: return 1e-2;
	case FJ_DT_BF16: return 5e-2;
	case FJ_DT_F64: return 1e-12;
	default: return 0;
	}
}

double fj_rt_l2_dist(const fj_rt_tensor *a, const fj_rt_tensor *b)
{
	int64_t n = fj_rt_tensor_numel(a);
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fj_rt_load_f64(a->data, a->dtype, i) - fj_rt_load_f64(b->data, b->dtype, i);
		if (isfinite(d))
			s += d * d;
	}
	return sqrt(s);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double fj_rt_median(double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, cmp_double);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}
