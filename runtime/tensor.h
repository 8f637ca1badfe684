/* tensor.h -- a dense, row-major host tensor, and the conversions the runtime
 * needs between the IR's dtypes and double (f16/bf16 bit patterns included).
 *
 * Data is 64-byte aligned (aligned_alloc; page-aligned from 64 KiB on, see
 * tensor.c), so kernels may use aligned vector loads; a 0-size tensor still holds a (1-byte) allocation, so data is never
 * NULL for an allocated tensor. */
#ifndef FJ_RT_TENSOR_H
#define FJ_RT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

#define FJ_RT_ALIGN 64

typedef struct fj_rt_tensor {
	void *data;      /* NULL when not allocated */
	fj_dtype dtype;
	int rank;
	int64_t dims[FJ_MAX_RANK];
	size_t nbytes;   /* numel * element size */
	size_t cap;      /* bytes allocated (>= nbytes) */
} fj_rt_tensor;

/* Element count; false when it overflows int64 or size_t bytes. */
bool fj_rt_numel(const int64_t *dims, int rank, int64_t *numel);
bool fj_rt_nbytes(fj_dtype dt, const int64_t *dims, int rank, size_t *nbytes);
static inline int64_t fj_rt_tensor_numel(const fj_rt_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->dims[i];
	return n;
}

/* Allocates t's data for dtype/shape (zeroed). Records an error and returns
 * FJ_ERR_NOMEM / FJ_ERR_INVALID (overflow) on failure. */
fj_status fj_rt_tensor_alloc(fj_context *ctx, fj_rt_tensor *t, fj_dtype dt, int rank, const int64_t *dims);
/* Re-shapes t in place when its allocation is big enough, else reallocates. */
fj_status fj_rt_tensor_reshape(fj_context *ctx, fj_rt_tensor *t, fj_dtype dt, int rank, const int64_t *dims);
void fj_rt_tensor_free(fj_rt_tensor *t);
/* Aligned raw buffers (64 bytes; a page from 64 KiB on); n == 0 allocates
 * one line. */
void *fj_rt_aligned_alloc(size_t n);
void fj_rt_aligned_free(void *p);
/* Sorts t[0..n) (n > 0) and returns its median (--bench's statistic). */
double fj_rt_median(double *t, int n);
/* Same dtype and shape. */
bool fj_rt_tensor_same_type(const fj_rt_tensor *a, const fj_rt_tensor *b);
/* "f32[2,3]" */
void fj_rt_tensor_type_str(const fj_rt_tensor *t, char *buf, size_t size);
void fj_rt_shape_str(const int64_t *dims, int rank, char *buf, size_t size);

/* Half-precision bit patterns (round to nearest even; NaN kept quiet). */
float fj_rt_f16_to_f32(uint16_t h);
uint16_t fj_rt_f32_to_f16(float f);
float fj_rt_bf16_to_f32(uint16_t h);
uint16_t fj_rt_f32_to_bf16(float f);
/* Element i of a tensor of dtype dt as double (bool: 0/1). */
double fj_rt_load_f64(const void *data, fj_dtype dt, int64_t i);
/* Stores v as element i (floats rounded, integers truncated). */
void fj_rt_store_f64(void *data, fj_dtype dt, int64_t i, double v);


/* IR.md §5's relative L2 error of out against ref (same dtype and shape):
 * ||out - ref|| / ||ref|| (or ||out - ref|| when ||ref|| = 0 or the tensor
 * is empty), NaN and inf left out of the norms; *placement_ok is false (and
 * the result +inf) when NaN or inf do not sit at the same places in both. */
double fj_rt_rel_l2(const fj_rt_tensor *out, const fj_rt_tensor *ref, bool *placement_ok);
/* IR.md §5's tolerance of a dtype (f32 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12,
 * integers and bools 0: exact). */
double fj_rt_tolerance(fj_dtype dt);

/* --check=f64's measure (IR.md §5) of out against ref, a reference computed
 * in f64 (integer and bool outputs: of out's dtype), with `scale` the size of
 * the error the roundings of a correct run explain (the reference's
 * sensitivity to its roundings, in the same norm):
 *   ||out - rnd(ref)||_2 / (||ref||_2 + scale)
 * where rnd rounds to out's dtype (an output can be no closer: an f16
 * product that underflows to 0 is exact) (0 when out equals rnd(ref), also
 * for an empty tensor; +inf where the
 * denominator is 0 and they differ). NaN and inf must sit at the same places
 * in out and in ref rounded to out's dtype (an f64 value beyond f16's range
 * is inf in f16) and are left out of the norms; *placement_ok is false (and
 * the result +inf) when they do not. */
double fj_rt_f64_err(const fj_rt_tensor *out, const fj_rt_tensor *ref, double scale, bool *placement_ok);
/* --check=f64's tolerance of a dtype: f64 1e-12, f32 1e-5, f16 1e-2, bf16
 * 5e-2, integers and bools 0: exact. */
double fj_rt_f64_tolerance(fj_dtype dt);
/* ||a - b||_2 over the elements where the difference is finite (a and b of
 * the same shape, any dtypes). */
double fj_rt_l2_dist(const fj_rt_tensor *a, const fj_rt_tensor *b);

#endif
