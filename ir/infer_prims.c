/* infer_prims.c -- result-type inference of the strict prims: elementwise
 * prims take operands of identical shape and dtype (where's condition is
 * bool), never promote and never broadcast (except broadcast_in_dim). */
#include <string.h>

#include "infer.h"

static fj_status out_like(fj_infer *ic, const fj_type *t, fj_dtype dt)
{
	return fj_ic_out_like(ic, 0, t, dt) ? FJ_OK : FJ_ERR_NOMEM;
}

static fj_status identical(fj_infer *ic, const fj_type *a, const fj_type *b)
{
	if (fj_type_equal(a, b))
		return FJ_OK;
	char b1[160], b2[160];
	return fj_infer_error(ic, "operands must have identical shapes and dtypes, got %s and %s",
	                      fj_ic_type_str(ic, a, b1, sizeof b1), fj_ic_type_str(ic, b, b2, sizeof b2));
}

static fj_status not_float(fj_infer *ic, fj_dtype dt)
{
	if (!fj_dtype_is_float(dt))
		return FJ_OK;
	return fj_infer_error(ic, "only integer and bool operands are supported, got %s", fj_dtype_name(dt));
}

fj_status fj_infer_prim_unary(fj_infer *ic)
{
	if (ic->op == FJ_OP_PRIMS_NEG && ic->in[0]->dtype == FJ_DT_BOOL)
		return fj_infer_error(ic, "negation of a bool tensor is not supported");
	return out_like(ic, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_prim_unary_float(fj_infer *ic)
{
	fj_status st = fj_ic_need_float(ic, ic->in[0], "a");
	return st ? st : out_like(ic, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_prim_unary_bool(fj_infer *ic) { return out_like(ic, ic->in[0], FJ_DT_BOOL); }

fj_status fj_infer_prim_unary_bitwise(fj_infer *ic)
{
	fj_status st = not_float(ic, ic->in[0]->dtype);
	return st ? st : out_like(ic, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_prim_binary(fj_infer *ic)
{
	fj_status st = identical(ic, ic->in[0], ic->in[1]);
	return st ? st : out_like(ic, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_prim_binary_float(fj_infer *ic)
{
	fj_status st = identical(ic, ic->in[0], ic->in[1]);
	if (st == FJ_OK)
		st = fj_ic_need_float(ic, ic->in[0], "a");
	return st ? st : out_like(ic, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_prim_compare(fj_infer *ic)
{
	fj_status st = identical(ic, ic->in[0], ic->in[1]);
	return st ? st : out_like(ic, ic->in[0], FJ_DT_BOOL);
}

fj_status fj_infer_prim_bitwise(fj_infer *ic)
{
	fj_status st = identical(ic, ic->in[0], ic->in[1]);
	if (st == FJ_OK)
		st = not_float(ic, ic->in[0]->dtype);
	return st ? st : out_like(ic, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_prim_where(fj_infer *ic)
{
	const fj_type *p = ic->in[0], *a = ic->in[1];
	fj_status st = identical(ic, a, ic->in[2]);
	if (st)
		return st;
	bool ok = p->dtype == FJ_DT_BOOL && p->rank == a->rank;
	for (int k = 0; ok && k < a->rank; k++)
		ok = p->dims[k] == a->dims[k];
	if (!ok) {
		char b1[160], b2[160];
		return fj_infer_error(ic, "pred must be a bool tensor of the operands' shape, got %s for %s",
		                      fj_ic_type_str(ic, p, b1, sizeof b1), fj_ic_type_str(ic, a, b2, sizeof b2));
	}
	return out_like(ic, a, a->dtype);
}

fj_status fj_infer_convert_element_type(fj_infer *ic)
{
	return out_like(ic, ic->in[0], fj_ic_attr_named(ic, "dtype")->u.dt);
}

fj_status fj_infer_broadcast_in_dim(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *shape = fj_ic_attr_named(ic, "shape"), *bd = fj_ic_attr_named(ic, "broadcast_dims");
	if (shape->n > FJ_MAX_RANK)
		return fj_infer_error(ic, "shape has rank %u; at most %d is supported", shape->n, FJ_MAX_RANK);
	if (bd->n != x->rank)
		return fj_infer_error(ic, "broadcast_dims has %u entries for an operand of rank %d", bd->n, x->rank);
	fj_dim dims[FJ_MAX_RANK];
	for (uint32_t i = 0; i < shape->n; i++) {
		const fj_attr *d = &shape->u.items[i];
		dims[i] = fj_ic_size(d);
		if (d->kind == FJ_AK_INT && dims[i] < 0)
			return fj_infer_error(ic, "shape has a negative size");
	}
	int64_t prev = -1;
	for (uint32_t k = 0; k < bd->n; k++) {
		int64_t d = fj_attr_as_int(&bd->u.items[k]);
		if (d <= prev || d >= (int64_t)shape->n)
			return fj_infer_error(ic, "broadcast_dims must be increasing and below the result rank %u", shape->n);
		prev = d;
		fj_dim s = x->dims[k], o = dims[d];
		if (s != o && s != 1) {
			char b1[64], b2[64];
			return fj_infer_error(ic, "operand dim %u of size %s does not broadcast to result dim %lld of size %s",
			                      k, fj_ic_dim_str(ic, s, b1, sizeof b1), (long long)d,
			                      fj_ic_dim_str(ic, o, b2, sizeof b2));
		}
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, (int)shape->n);
}

/* x without the dims in mask. */
static fj_status reduced(fj_infer *ic, uint32_t i, const fj_type *x, uint32_t mask, fj_dtype dt)
{
	fj_dim dims[FJ_MAX_RANK];
	int rank = 0;
	for (int k = 0; k < x->rank; k++)
		if (!(mask & (1u << k)))
			dims[rank++] = x->dims[k];
	return fj_ic_out_dims(ic, i, dt, dims, rank);
}

/* sum amax amin prod {dims}: the dtype is kept. */
fj_status fj_infer_prim_reduce(fj_infer *ic)
{
	uint32_t mask;
	fj_status st = fj_ic_dim_mask(ic, fj_ic_attr_named(ic, "dims"), ic->in[0]->rank, false, &mask);
	return st ? st : reduced(ic, 0, ic->in[0], mask, ic->in[0]->dtype);
}

fj_status fj_infer_prim_var_mean(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	uint32_t mask;
	fj_status st = fj_ic_need_float(ic, x, "a");
	if (st == FJ_OK)
		st = fj_ic_dim_mask(ic, fj_ic_attr_named(ic, "dims"), x->rank, false, &mask);
	if (st == FJ_OK)
		st = reduced(ic, 0, x, mask, x->dtype);
	return st ? st : reduced(ic, 1, x, mask, x->dtype);
}

fj_status fj_infer_prim_argmax(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int d = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank, &d);
	return st ? st : reduced(ic, 0, x, x->rank ? 1u << d : 0, FJ_DT_I64);
}

/* pad{low, high, value}: size low + d + high per dim (negative pads crop). */
fj_status fj_infer_prim_pad(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *lo = fj_ic_attr_named(ic, "low"), *hi = fj_ic_attr_named(ic, "high");
	if (lo->n != x->rank || hi->n != x->rank)
		return fj_infer_error(ic, "low and high must each list %d entries", x->rank);
	fj_dim dims[FJ_MAX_RANK];
	for (int k = 0; k < x->rank; k++) {
		int64_t l = fj_attr_as_int(&lo->u.items[k]), h = fj_attr_as_int(&hi->u.items[k]);
		fj_dim s = x->dims[k];
		if (!fj_dim_is_static(s)) { /* s+l+h: a negative one is refused at run time */
			if (!fj_dim_add_int(ic->m, s, l, &dims[k]) || !fj_dim_add_int(ic->m, dims[k], h, &dims[k])) {
				char b[64];
				return ic->m->oom ? FJ_ERR_NOMEM
				                  : fj_infer_error(ic, "padding dim %d of size %s by %lld and %lld leaves a "
				                                   "negative size", k, fj_ic_dim_str(ic, s, b, sizeof b),
				                                   (long long)l, (long long)h);
			}
			continue;
		}
		int64_t n;
		if (__builtin_add_overflow(s, l, &n) || __builtin_add_overflow(n, h, &n))
			return fj_infer_error(ic, "the padded size of dim %d overflows 64 bits", k);
		if (n < 0)
			return fj_infer_error(ic, "padding dim %d of size %lld by %lld and %lld leaves a negative size",
			                      k, (long long)s, (long long)l, (long long)h);
		dims[k] = n;
	}
	fj_dtype dt = x->dtype;
	const fj_attr *v = fj_ic_attr_named(ic, "value");
	if (v->kind == FJ_AK_FLOAT && !fj_dtype_is_float(dt))
		return fj_infer_error(ic, "a floating-point pad value for a %s operand", fj_dtype_name(dt));
	return fj_ic_out_dims(ic, 0, dt, dims, x->rank);
}
