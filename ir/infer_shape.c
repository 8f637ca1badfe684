/* infer_shape.c -- result-type inference of the shape, source, matrix,
 * indexing and random ops (aten.*, and the prims that share their rules).
 *
 * Shapes follow PyTorch: reshape with -1 (symbolic sizes through
 * fj_dim_mul/fj_dim_div), permute, expand, slice with PyTorch's clamping,
 * cat, torch.matmul's 1-d and batched cases. Symbolic sizes are kept: cat
 * along a symbolic dim sums the sizes (s0+s1), a slice of a symbolic dim is
 * end - start (s0-1 for x[:, 1:]; (s0+1)//2 with step 2) without PyTorch's
 * clamping, which the binder's run-time check of each node (runtime/binder.h)
 * enforces: a size where clamping would give another length, or a negative
 * one, is refused at run time. A reshape whose sizes hold a floor division
 * (s0//2) cannot be proven to keep the element count and is checked at run
 * time the same way. Refused with a clear message: arange of a symbol.
 * Every function is linear in the ranks and the operand count. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "infer.h"

static fj_status out_like(fj_infer *ic, uint32_t i, const fj_type *t, fj_dtype dt)
{
	return fj_ic_out_like(ic, i, t, dt) ? FJ_OK : FJ_ERR_NOMEM;
}

/* Reads a shape attribute (a list of sizes) into dims. */
static fj_status shape_attr(fj_infer *ic, const fj_attr *a, fj_dim *dims, int *rank)
{
	if (a->kind != FJ_AK_LIST)
		return fj_infer_error(ic, "expected a list of sizes");
	if (a->n > FJ_MAX_RANK)
		return fj_infer_error(ic, "shape has %u sizes; at most %d are supported", a->n, FJ_MAX_RANK);
	for (uint32_t i = 0; i < a->n; i++)
		dims[i] = fj_ic_size(&a->u.items[i]);
	*rank = (int)a->n;
	return FJ_OK;
}

/* A shape attribute's sizes as text, for messages: its integers as written
 * (-1 and other negative ones too: dims holds them as they are, and a
 * negative fj_dim would be read as a symbolic expression), its symbolic
 * sizes as dims holds them. */
static const char *attr_shape_str(const fj_infer *ic, const fj_attr *a, const fj_dim *dims, int rank, char *buf,
                                  size_t size)
{
	size_t len = (size_t)snprintf(buf, size, "[");
	for (int k = 0; k < rank && len < size; k++) {
		if (k)
			len += (size_t)snprintf(buf + len, size - len, ",");
		if (len >= size)
			break;
		if (a->u.items[k].kind == FJ_AK_INT)
			len += (size_t)snprintf(buf + len, size - len, "%lld", (long long)a->u.items[k].u.i);
		else
			len += (size_t)fj_dim_format(ic->m, dims[k], buf + len, size - len);
	}
	if (len < size)
		snprintf(buf + len, size - len, "]");
	return buf;
}

/* A shape of sizes >= 0 (or symbolic). */
static fj_status plain_shape(fj_infer *ic, const fj_attr *a, fj_dim *dims, int *rank)
{
	fj_status st = shape_attr(ic, a, dims, rank);
	for (int i = 0; st == FJ_OK && i < *rank; i++)
		if (a->u.items[i].kind == FJ_AK_INT && dims[i] < 0)
			return fj_infer_error(ic, "shape has a negative size %lld", (long long)dims[i]);
	return st;
}

/* ---- reshape ---- */

/* The target shape of a reshape of x: -1 inferred, element counts equal. */
static fj_status reshape_to(fj_infer *ic, const fj_type *x, const fj_attr *shape, bool allow_infer)
{
	fj_dim dims[FJ_MAX_RANK], numel, known;
	int rank, infer = -1;
	char b1[160], b2[160], b3[64];
	fj_status st = shape_attr(ic, shape, dims, &rank);
	if (st)
		return st;
	for (int i = 0; i < rank; i++) {
		if (shape->u.items[i].kind != FJ_AK_INT || dims[i] >= 0)
			continue;
		if (dims[i] != -1 || !allow_infer)
			return fj_infer_error(ic, "invalid size %lld in shape %s", (long long)dims[i],
			                      attr_shape_str(ic, shape, dims, rank, b1, sizeof b1));
		if (infer >= 0)
			return fj_infer_error(ic, "only one size of the shape may be -1");
		infer = i;
	}
	if ((st = fj_ic_numel(ic, x->dims, x->rank, &numel)) != FJ_OK)
		return st;
	if (infer >= 0) {
		fj_dim rest[FJ_MAX_RANK];
		int n = 0;
		for (int i = 0; i < rank; i++)
			if (i != infer)
				rest[n++] = dims[i];
		if ((st = fj_ic_numel(ic, rest, n, &known)) != FJ_OK)
			return st;
		if (known == 0)
			return fj_infer_error(ic, "cannot infer the -1 in shape %s: the other sizes hold 0 elements",
			                      attr_shape_str(ic, shape, dims, rank, b1, sizeof b1));
		if (!fj_dim_div(ic->m, numel, known, &dims[infer])) {
			if (ic->m->oom)
				return FJ_ERR_NOMEM;
			return fj_infer_error(ic, "shape %s is invalid for an input of %s elements (%s): "
			                      "the -1 cannot be inferred",
			                      attr_shape_str(ic, shape, dims, rank, b1, sizeof b1),
			                      fj_ic_dim_str(ic, numel, b3, sizeof b3), fj_ic_type_str(ic, x, b2, sizeof b2));
		}
	} else {
		if ((st = fj_ic_numel(ic, dims, rank, &known)) != FJ_OK)
			return st;
		if (known != numel && !fj_dim_has_floordiv(ic->m, known) && !fj_dim_has_floordiv(ic->m, numel))
			return fj_infer_error(ic, "shape %s is invalid for an input of %s elements (%s)",
			                      attr_shape_str(ic, shape, dims, rank, b1, sizeof b1),
			                      fj_ic_dim_str(ic, numel, b3, sizeof b3), fj_ic_type_str(ic, x, b2, sizeof b2));
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, rank);
}

/* view, reshape, _unsafe_view, _reshape_alias */
fj_status fj_infer_view(fj_infer *ic)
{
	const fj_attr *stride = fj_ic_attr_opt(ic, "stride");
	const fj_attr *shape = fj_ic_attr_named(ic, "shape");
	if (stride && stride->kind == FJ_AK_LIST && shape->kind == FJ_AK_LIST && stride->n != shape->n)
		return fj_infer_error(ic, "stride has %u entries for a shape of %u", stride->n, shape->n);
	return reshape_to(ic, ic->in[0], shape, true);
}

fj_status fj_infer_prim_reshape(fj_infer *ic)
{
	return reshape_to(ic, ic->in[0], fj_ic_attr_named(ic, "shape"), false);
}

/* ---- permutations ---- */

/* aten.permute{dims}, prims.transpose{perm} */
fj_status fj_infer_permute(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *p = fj_ic_attr(ic, 0);
	if (p->kind != FJ_AK_LIST || p->n != x->rank)
		return fj_infer_error(ic, "%s must list %d dims for an operand of rank %d, got %u",
		                      ic->info->attrs[0].name, x->rank, x->rank, p->kind == FJ_AK_LIST ? p->n : 0);
	fj_dim dims[FJ_MAX_RANK];
	uint32_t seen = 0;
	for (uint32_t i = 0; i < p->n; i++) {
		int d = 0;
		fj_status st = fj_ic_dim(ic, fj_attr_as_int(&p->u.items[i]), x->rank, &d);
		if (st)
			return st;
		if (seen & (1u << d))
			return fj_infer_error(ic, "dim %d appears more than once in the permutation", d);
		seen |= 1u << d;
		dims[i] = x->dims[d];
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, x->rank);
}

fj_status fj_infer_transpose(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int a = 0, b = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim0")), x->rank, &a);
	if (st == FJ_OK)
		st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim1")), x->rank, &b);
	if (st == FJ_OK)
		st = out_like(ic, 0, x, x->dtype);
	if (st == FJ_OK && x->rank) {
		ic->out[0].dims[a] = x->dims[b];
		ic->out[0].dims[b] = x->dims[a];
	}
	return st;
}

fj_status fj_infer_t(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	if (x->rank > 2)
		return fj_infer_error(ic, "expects a tensor of rank <= 2, got rank %d", x->rank);
	fj_status st = out_like(ic, 0, x, x->dtype);
	if (st == FJ_OK && x->rank == 2) {
		ic->out[0].dims[0] = x->dims[1];
		ic->out[0].dims[1] = x->dims[0];
	}
	return st;
}

/* aten.flip{dims}, prims.rev{dims} */
fj_status fj_infer_flip(fj_infer *ic)
{
	uint32_t mask;
	fj_status st = fj_ic_dim_mask(ic, fj_ic_attr_named(ic, "dims"), ic->in[0]->rank, false, &mask);
	return st ? st : out_like(ic, 0, ic->in[0], ic->in[0]->dtype);
}

fj_status fj_infer_same(fj_infer *ic) { return out_like(ic, 0, ic->in[0], ic->in[0]->dtype); }

/* ---- expand, squeeze, unsqueeze ---- */

fj_status fj_infer_expand(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *size = fj_ic_attr_named(ic, "size");
	fj_dim dims[FJ_MAX_RANK];
	int rank;
	char b1[160], b2[160];
	fj_status st = shape_attr(ic, size, dims, &rank);
	if (st)
		return st;
	if (rank < x->rank)
		return fj_infer_error(ic, "size %s has fewer dims than the operand %s",
		                      attr_shape_str(ic, size, dims, rank, b1, sizeof b1), fj_ic_type_str(ic, x, b2, sizeof b2));
	int lead = rank - x->rank;
	for (int k = 0; k < rank; k++) {
		bool is_int = size->u.items[k].kind == FJ_AK_INT;
		if (is_int && dims[k] < -1)
			return fj_infer_error(ic, "invalid size %lld in size", (long long)dims[k]);
		if (k < lead) {
			if (is_int && dims[k] == -1)
				return fj_infer_error(ic, "-1 is not allowed for the new leading dim %d", k);
			continue;
		}
		fj_dim s = x->dims[k - lead];
		if (is_int && dims[k] == -1) {
			dims[k] = s;
			continue;
		}
		if (s == dims[k] || s == 1)
			continue;
		if (fj_dim_is_static(s) && fj_dim_is_static(dims[k]))
			return fj_infer_error(ic, "cannot expand %s to size %s: dim %d has size %lld, which is not 1",
			                      fj_ic_type_str(ic, x, b2, sizeof b2), attr_shape_str(ic, size, dims, rank, b1, sizeof b1),
			                      k - lead, (long long)s);
		/* A symbolic size against another size: checked at run time. */
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, rank);
}

fj_status fj_infer_unsqueeze(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int d = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank + 1, &d);
	if (st)
		return st;
	fj_dim dims[FJ_MAX_RANK + 1];
	for (int k = 0, j = 0; k <= x->rank; k++)
		dims[k] = k == d ? 1 : x->dims[j++];
	return fj_ic_out_dims(ic, 0, x->dtype, dims, x->rank + 1);
}

/* aten.squeeze{dims?}: listed (or all) dims of size 1 are removed, others kept.
 * prims.squeeze{dims}: every listed dim must have size 1. */
fj_status fj_infer_squeeze(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *da = fj_ic_attr_named(ic, "dims");
	bool strict = ic->op == FJ_OP_PRIMS_SQUEEZE;
	uint32_t mask;
	fj_status st = fj_ic_dim_mask(ic, da, x->rank, !strict && fj_attr_is_none(da), &mask);
	if (st)
		return st;
	fj_dim dims[FJ_MAX_RANK];
	int rank = 0;
	for (int k = 0; k < x->rank; k++) {
		if ((mask & (1u << k)) && x->dims[k] == 1)
			continue;
		if ((mask & (1u << k)) && strict) {
			char b[64];
			return fj_infer_error(ic, "dim %d has size %s; only dims of size 1 can be squeezed", k,
			                      fj_ic_dim_str(ic, x->dims[k], b, sizeof b));
		}
		dims[rank++] = x->dims[k];
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, rank);
}

fj_status fj_infer_prim_squeeze(fj_infer *ic) { return fj_infer_squeeze(ic); }

/* ---- slice ---- */

#define FJ_SLICE_END_MAX (INT64_MAX / 2) /* sys.maxsize-like ends mean "to the end" */

/* ceil(len / step): (len+step-1)//step for a symbolic len. */
static fj_status slice_len(fj_infer *ic, fj_dim len, int64_t step, fj_dim *out)
{
	if (step == 1) {
		*out = len;
		return FJ_OK;
	}
	if (fj_dim_add_int(ic->m, len, step - 1, out) && fj_dim_floordiv(ic->m, *out, step, out))
		return FJ_OK;
	return ic->m->oom ? FJ_ERR_NOMEM : fj_infer_error(ic, "the sliced size overflows 64 bits");
}

/* end - start of a slice of dim d of symbolic size (or with symbolic bounds),
 * unclamped: a negative start or end counts from the end, none and
 * sys.maxsize-like ends are the size. Two non-negative integer bounds give
 * PyTorch's length (0 when end <= start). */
static fj_status slice_bounds(fj_infer *ic, fj_dim size, const fj_attr *sa, const fj_attr *ea, int d, fj_dim *len)
{
	bool ok = true;
	fj_dim s = 0, e = size;
	if (sa->kind == FJ_AK_DIM)
		s = sa->u.dim;
	else if (!fj_attr_is_none(sa))
		ok = sa->u.i >= 0 ? (s = sa->u.i, true) : fj_dim_add_int(ic->m, size, sa->u.i, &s);
	if (ea->kind == FJ_AK_DIM)
		e = ea->u.dim;
	else if (!fj_attr_is_none(ea) && ea->u.i < FJ_SLICE_END_MAX)
		ok = ok && (ea->u.i >= 0 ? (e = ea->u.i, true) : fj_dim_add_int(ic->m, size, ea->u.i, &e));
	if (ok && fj_dim_is_static(s) && fj_dim_is_static(e) && e <= s) {
		*len = 0;
		return FJ_OK;
	}
	if (ok && fj_dim_sub(ic->m, e, s, len))
		return FJ_OK;
	char b1[64], b2[64], b3[64];
	if (ic->m->oom)
		return FJ_ERR_NOMEM;
	if (!ok)
		return fj_infer_error(ic, "a slice bound of dim %d of size %s overflows", d,
		                      fj_ic_dim_str(ic, size, b1, sizeof b1));
	return fj_infer_error(ic, "slice [%s, %s) of dim %d of size %s has a negative length", fj_ic_dim_str(ic, s, b1, sizeof b1),
	                      fj_ic_dim_str(ic, e, b2, sizeof b2), d, fj_ic_dim_str(ic, size, b3, sizeof b3));
}

fj_status fj_infer_slice(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int d = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank, &d);
	if (st)
		return st;
	if (x->rank == 0)
		return fj_infer_error(ic, "cannot slice a 0-d tensor");
	const fj_attr *sa = fj_ic_attr_named(ic, "start"), *ea = fj_ic_attr_named(ic, "end");
	int64_t step = fj_attr_as_int(fj_ic_attr_named(ic, "step"));
	if (step <= 0)
		return fj_infer_error(ic, "slice step must be positive, got %lld", (long long)step);
	fj_dim size = x->dims[d], len;
	if (!fj_dim_is_static(size) || sa->kind == FJ_AK_DIM || ea->kind == FJ_AK_DIM) {
		if ((st = slice_bounds(ic, size, sa, ea, d, &len)) != FJ_OK)
			return st;
		if ((st = slice_len(ic, len, step, &len)) != FJ_OK)
			return st;
	} else {
		int64_t start = fj_attr_is_none(sa) ? 0 : fj_attr_as_int(sa);
		int64_t end = fj_attr_is_none(ea) ? INT64_MAX : fj_attr_as_int(ea);
		fj_slice_clamp(size, &start, &end);
		len = (end - start) / step + ((end - start) % step != 0);
	}
	st = out_like(ic, 0, x, x->dtype);
	if (st == FJ_OK)
		ic->out[0].dims[d] = len;
	return st;
}

/* prims.slice{start, limit, strides}: in range, no clamping. */
fj_status fj_infer_prim_slice(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *sa = fj_ic_attr_named(ic, "start"), *la = fj_ic_attr_named(ic, "limit"),
		      *ta = fj_ic_attr_named(ic, "strides");
	if (sa->n != x->rank || la->n != x->rank || (ta->n != 0 && ta->n != x->rank))
		return fj_infer_error(ic, "start, limit and strides must each list %d entries", x->rank);
	fj_dim dims[FJ_MAX_RANK];
	for (int k = 0; k < x->rank; k++) {
		fj_dim s = fj_ic_size(&sa->u.items[k]), l = fj_ic_size(&la->u.items[k]), size = x->dims[k];
		int64_t stride = ta->n ? fj_attr_as_int(&ta->u.items[k]) : 1;
		char b[64];
		if (stride <= 0)
			return fj_infer_error(ic, "strides must be positive, got %lld at dim %d", (long long)stride, k);
		if (!fj_dim_is_static(size) || !fj_dim_is_static(s) || !fj_dim_is_static(l)) {
			fj_dim len;
			if (!fj_dim_sub(ic->m, l, s, &len)) {
				char b2[64];
				return ic->m->oom ? FJ_ERR_NOMEM
				                  : fj_infer_error(ic, "slice [%s, %s) of dim %d has a negative length",
				                                   fj_ic_dim_str(ic, s, b, sizeof b),
				                                   fj_ic_dim_str(ic, l, b2, sizeof b2), k);
			}
			fj_status st = slice_len(ic, len, stride, &dims[k]);
			if (st != FJ_OK)
				return st;
			continue;
		}
		if (s < 0 || s > l || l > size)
			return fj_infer_error(ic, "slice [%lld, %lld) is out of range for dim %d of size %lld",
			                      (long long)s, (long long)l, k, (long long)size);
		dims[k] = (l - s) / stride + ((l - s) % stride != 0);
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, x->rank);
}

/* ---- cat ---- */

fj_status fj_infer_cat(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	bool prims = ic->op == FJ_OP_PRIMS_CAT;
	char b1[160], b2[160];
	if (x->rank == 0)
		return fj_infer_error(ic, "zero-dimensional tensors cannot be concatenated");
	int d = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank, &d);
	if (st)
		return st;
	fj_rtstate rt;
	fj_rt_init(&rt);
	int64_t total = 0;
	fj_dim sym = 0; /* the sum of the symbolic sizes along dim */
	for (uint32_t i = 0; i < ic->nin; i++) {
		const fj_type *t = ic->in[i];
		if (!t)
			return fj_infer_error(ic, "operand %u is none", i);
		if (prims && t->dtype != x->dtype)
			return fj_infer_error(ic, "operands must have the same dtype: %s and %s",
			                      fj_dtype_name(x->dtype), fj_dtype_name(t->dtype));
		bool ok = t->rank == x->rank;
		for (int k = 0; ok && k < x->rank; k++)
			ok = k == d || t->dims[k] == x->dims[k];
		if (!ok)
			return fj_infer_error(ic, "operand %u %s does not match operand 0 %s except at dim %d", i,
			                      fj_ic_type_str(ic, t, b1, sizeof b1), fj_ic_type_str(ic, x, b2, sizeof b2), d);
		fj_rt_add(&rt, t);
		fj_dim s = t->dims[d];
		if (fj_dim_is_static(s)) {
			if (__builtin_add_overflow(total, s, &total))
				return fj_infer_error(ic, "the concatenated size overflows 64 bits");
		} else if (!fj_dim_add(ic->m, sym, s, &sym)) {
			return ic->m->oom ? FJ_ERR_NOMEM : fj_infer_error(ic, "the concatenated size overflows 64 bits");
		}
	}
	fj_dim len = total;
	if (sym && !fj_dim_add(ic->m, sym, total, &len))
		return ic->m->oom ? FJ_ERR_NOMEM : fj_infer_error(ic, "the concatenated size overflows 64 bits");
	st = out_like(ic, 0, x, prims ? x->dtype : fj_rt_result(&rt));
	if (st == FJ_OK)
		ic->out[0].dims[d] = len;
	return st;
}

/* ---- sources ---- */

/* The dtype of a fill value when none is given: float -> f32, int -> i64, bool -> bool. */
static fj_dtype value_dtype(const fj_attr *v)
{
	return v->kind == FJ_AK_FLOAT ? FJ_DT_F32 : v->kind == FJ_AK_BOOL ? FJ_DT_BOOL : FJ_DT_I64;
}

/* aten.full, prims.full {shape, value, dtype} */
fj_status fj_infer_full(fj_infer *ic)
{
	fj_dim dims[FJ_MAX_RANK];
	int rank;
	fj_status st = plain_shape(ic, fj_ic_attr_named(ic, "shape"), dims, &rank);
	if (st)
		return st;
	const fj_attr *dt = fj_ic_attr_named(ic, "dtype");
	return fj_ic_out_dims(ic, 0, dt->kind == FJ_AK_DTYPE ? dt->u.dt : value_dtype(fj_ic_attr_named(ic, "value")),
	                      dims, rank);
}

/* zeros_like ones_like full_like {value?, dtype?} */
fj_status fj_infer_full_like(fj_infer *ic)
{
	const fj_attr *dt = fj_ic_attr_named(ic, "dtype");
	return out_like(ic, 0, ic->in[0], dt->kind == FJ_AK_DTYPE ? dt->u.dt : ic->in[0]->dtype);
}

/* new_zeros new_ones new_full {shape, value?, dtype?}: self's dtype by default. */
fj_status fj_infer_new_full(fj_infer *ic)
{
	fj_dim dims[FJ_MAX_RANK];
	int rank;
	fj_status st = plain_shape(ic, fj_ic_attr_named(ic, "shape"), dims, &rank);
	if (st)
		return st;
	const fj_attr *dt = fj_ic_attr_named(ic, "dtype");
	return fj_ic_out_dims(ic, 0, dt->kind == FJ_AK_DTYPE ? dt->u.dt : ic->in[0]->dtype, dims, rank);
}

fj_status fj_infer_arange(fj_infer *ic)
{
	const fj_attr *s = fj_ic_attr_named(ic, "start"), *e = fj_ic_attr_named(ic, "end"),
		      *p = fj_ic_attr_named(ic, "step"), *dt = fj_ic_attr_named(ic, "dtype");
	bool any_float = s->kind == FJ_AK_FLOAT || e->kind == FJ_AK_FLOAT || p->kind == FJ_AK_FLOAT;
	fj_dtype out = dt->kind == FJ_AK_DTYPE ? dt->u.dt : any_float ? FJ_DT_F32 : FJ_DT_I64;
	if (out == FJ_DT_BOOL)
		return fj_infer_error(ic, "dtype bool is not supported");
	fj_dim len;
	if (e->kind == FJ_AK_DIM) {
		if (fj_attr_as_float(s) != 0 || fj_attr_as_float(p) != 1 || s->kind == FJ_AK_FLOAT || p->kind == FJ_AK_FLOAT)
			return fj_infer_error(ic, "a symbolic end needs start 0 and step 1");
		len = e->u.dim;
	} else if (!any_float) {
		int64_t a = fj_attr_as_int(s), b = fj_attr_as_int(e), st = fj_attr_as_int(p);
		if (st == 0)
			return fj_infer_error(ic, "step must be nonzero");
		if ((st > 0 && b < a) || (st < 0 && b > a))
			return fj_infer_error(ic, "upper bound and lower bound are inconsistent with the step sign");
		__int128 n = ((__int128)b - a + st - (st > 0 ? 1 : -1)) / st;
		if (n > INT64_MAX)
			return fj_infer_error(ic, "the length overflows 64 bits");
		len = (fj_dim)n;
	} else {
		double a = fj_attr_as_float(s), b = fj_attr_as_float(e), st = fj_attr_as_float(p);
		if (st == 0 || !isfinite(a) || !isfinite(b) || !isfinite(st))
			return fj_infer_error(ic, "start, end and step must be finite and step nonzero");
		if ((st > 0 && b < a) || (st < 0 && b > a))
			return fj_infer_error(ic, "upper bound and lower bound are inconsistent with the step sign");
		double n = ceil((b - a) / st);
		if (!(n < 9.2e18))
			return fj_infer_error(ic, "the length overflows 64 bits");
		len = (fj_dim)n;
	}
	return fj_ic_out_dims(ic, 0, out, &len, 1);
}

fj_status fj_infer_prim_iota(fj_infer *ic)
{
	fj_dim len = fj_ic_size(fj_ic_attr_named(ic, "length"));
	fj_dtype dt = fj_ic_attr_named(ic, "dtype")->u.dt;
	if (fj_dim_is_static(len) && len < 0)
		return fj_infer_error(ic, "length must not be negative, got %lld", (long long)len);
	if (dt == FJ_DT_BOOL)
		return fj_infer_error(ic, "dtype must be an integer or floating-point dtype, got bool");
	return fj_ic_out_dims(ic, 0, dt, &len, 1);
}

/* seed and offset operands: i64 scalars. */
static fj_status seed_offset(fj_infer *ic, uint32_t first)
{
	for (uint32_t i = first; i < first + 2; i++) {
		const fj_type *t = ic->in[i];
		if (t->dtype != FJ_DT_I64 || t->rank != 0) {
			char b[160];
			return fj_infer_error(ic, "%s must be an i64[] scalar, got %s", ic->info->operands[i].name,
			                      fj_ic_type_str(ic, t, b, sizeof b));
		}
	}
	return FJ_OK;
}

fj_status fj_infer_prim_rand(fj_infer *ic)
{
	fj_dim dims[FJ_MAX_RANK];
	int rank;
	fj_status st = seed_offset(ic, 0);
	if (st == FJ_OK)
		st = plain_shape(ic, fj_ic_attr_named(ic, "shape"), dims, &rank);
	if (st)
		return st;
	fj_dtype dt = fj_ic_attr_named(ic, "dtype")->u.dt;
	if (!fj_dtype_is_float(dt))
		return fj_infer_error(ic, "dtype must be a floating-point dtype, got %s", fj_dtype_name(dt));
	return fj_ic_out_dims(ic, 0, dt, dims, rank);
}

fj_status fj_infer_native_dropout(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	fj_status st = fj_ic_need_float(ic, x, "input");
	if (st == FJ_OK)
		st = seed_offset(ic, 1);
	if (st)
		return st;
	double p = fj_attr_as_float(fj_ic_attr_named(ic, "p"));
	if (!(p >= 0 && p <= 1))
		return fj_infer_error(ic, "p must be in [0, 1], got %g", p);
	if ((st = out_like(ic, 0, x, x->dtype)) != FJ_OK)
		return st;
	return out_like(ic, 1, x, FJ_DT_BOOL);
}

/* aten.cumsum{dim, dtype?}: ints and bools sum in i64; prims.cumsum keeps the dtype. */
fj_status fj_infer_cumsum(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int d = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank, &d);
	if (st)
		return st;
	const fj_attr *dt = fj_ic_attr_opt(ic, "dtype");
	fj_dtype out = x->dtype;
	if (dt && dt->kind == FJ_AK_DTYPE)
		out = dt->u.dt;
	else if (dt && !fj_dtype_is_float(x->dtype))
		out = FJ_DT_I64;
	return out_like(ic, 0, x, out);
}

fj_status fj_infer_prim_cumsum(fj_infer *ic) { return fj_infer_cumsum(ic); }

/* ---- matrix ---- */

static fj_status same_dtype(fj_infer *ic, const fj_type *a, const fj_type *b)
{
	if (a->dtype == b->dtype)
		return FJ_OK;
	return fj_infer_error(ic, "operands must have the same dtype, got %s and %s", fj_dtype_name(a->dtype),
	                      fj_dtype_name(b->dtype));
}

static fj_status contract(fj_infer *ic, fj_dim k1, fj_dim k2, const fj_type *a, const fj_type *b)
{
	if (k1 == k2)
		return FJ_OK;
	char b1[160], b2[160];
	return fj_infer_error(ic, "shapes %s and %s cannot be multiplied: contracting sizes differ",
	                      fj_ic_type_str(ic, a, b1, sizeof b1), fj_ic_type_str(ic, b, b2, sizeof b2));
}

static fj_status need_rank(fj_infer *ic, const fj_type *t, int rank, const char *what)
{
	if (t->rank == rank)
		return FJ_OK;
	return fj_infer_error(ic, "%s must be %d-d, got rank %d", what, rank, t->rank);
}

/* The checks every matrix product makes of its two factors: a (called what)
 * and b ("mat2") of the given rank, of one dtype. */
static fj_status need_factors(fj_infer *ic, const fj_type *a, const fj_type *b, int rank, const char *what)
{
	fj_status st = need_rank(ic, a, rank, what);
	if (st == FJ_OK)
		st = need_rank(ic, b, rank, "mat2");
	if (st == FJ_OK)
		st = same_dtype(ic, a, b);
	return st;
}

fj_status fj_infer_mm(fj_infer *ic)
{
	const fj_type *a = ic->in[0], *b = ic->in[1];
	fj_status st = need_factors(ic, a, b, 2, "self");
	if (st == FJ_OK)
		st = contract(ic, a->dims[1], b->dims[0], a, b);
	if (st)
		return st;
	fj_dim d[2] = {a->dims[0], b->dims[1]};
	return fj_ic_out_dims(ic, 0, a->dtype, d, 2);
}

fj_status fj_infer_bmm(fj_infer *ic)
{
	const fj_type *a = ic->in[0], *b = ic->in[1];
	fj_status st = need_factors(ic, a, b, 3, "self");
	if (st == FJ_OK && a->dims[0] != b->dims[0]) {
		char b1[160], b2[160];
		st = fj_infer_error(ic, "batch sizes of %s and %s differ", fj_ic_type_str(ic, a, b1, sizeof b1),
		                    fj_ic_type_str(ic, b, b2, sizeof b2));
	}
	if (st == FJ_OK)
		st = contract(ic, a->dims[2], b->dims[1], a, b);
	if (st)
		return st;
	fj_dim d[3] = {a->dims[0], a->dims[1], b->dims[2]};
	return fj_ic_out_dims(ic, 0, a->dtype, d, 3);
}

fj_status fj_infer_prim_matmul(fj_infer *ic)
{
	const fj_type *a = ic->in[0];
	if (a->rank != 2 && a->rank != 3)
		return fj_infer_error(ic, "expects 2-d or batched 3-d operands, got rank %d", a->rank);
	return a->rank == 2 ? fj_infer_mm(ic) : fj_infer_bmm(ic);
}

fj_status fj_infer_addmm(fj_infer *ic)
{
	const fj_type *c = ic->in[0], *a = ic->in[1], *b = ic->in[2];
	fj_status st = need_factors(ic, a, b, 2, "mat1");
	if (st == FJ_OK)
		st = same_dtype(ic, c, a);
	if (st == FJ_OK)
		st = contract(ic, a->dims[1], b->dims[0], a, b);
	if (st)
		return st;
	fj_dim d[FJ_MAX_RANK] = {a->dims[0], b->dims[1]};
	int r = 2;
	/* self broadcasts to [n, p] and does not grow it. */
	fj_dim acc[FJ_MAX_RANK];
	memcpy(acc, d, sizeof d);
	if ((st = fj_ic_broadcast_dims(ic, acc, &r, c->dims, c->rank)) != FJ_OK)
		return st;
	if (r != 2 || !(acc[0] == d[0] || !fj_dim_is_static(acc[0])) || !(acc[1] == d[1] || !fj_dim_is_static(acc[1]))) {
		char b1[160];
		return fj_infer_error(ic, "self %s does not broadcast to the product's shape",
		                      fj_ic_type_str(ic, c, b1, sizeof b1));
	}
	return fj_ic_out_dims(ic, 0, a->dtype, d, 2);
}

/* torch.matmul: dot, mv, mm, and batched with broadcast batch dims. */
fj_status fj_infer_matmul(fj_infer *ic)
{
	const fj_type *a = ic->in[0], *b = ic->in[1];
	int ra = a->rank, rb = b->rank;
	fj_status st = same_dtype(ic, a, b);
	if (st)
		return st;
	if (ra == 0 || rb == 0)
		return fj_infer_error(ic, "both operands must be at least 1-d, got ranks %d and %d", ra, rb);
	fj_dim ka = a->dims[ra - 1], kb = rb == 1 ? b->dims[0] : b->dims[rb - 2];
	if ((st = contract(ic, ka, kb, a, b)) != FJ_OK)
		return st;
	/* Batch dims: a's dims before its matrix, b's likewise, broadcast. */
	fj_dim dims[FJ_MAX_RANK + 2];
	int rank = ra > 2 ? ra - 2 : 0;
	if (rank)
		memcpy(dims, a->dims, (size_t)rank * sizeof *dims);
	if (rb > 2 && (st = fj_ic_broadcast_dims(ic, dims, &rank, b->dims, rb - 2)) != FJ_OK)
		return st;
	if (ra >= 2)
		dims[rank++] = a->dims[ra - 2];
	if (rb >= 2)
		dims[rank++] = b->dims[rb - 1];
	return fj_ic_out_dims(ic, 0, a->dtype, dims, rank);
}

/* linear(x[..., K], w[M, K], b[M]?) -> [..., M] */
fj_status fj_infer_linear(fj_infer *ic)
{
	const fj_type *x = ic->in[0], *w = ic->in[1], *b = fj_ic_in(ic, 2);
	fj_status st = same_dtype(ic, x, w);
	if (st == FJ_OK && b)
		st = same_dtype(ic, x, b);
	if (st)
		return st;
	if (x->rank < 1 || w->rank != 2)
		return fj_infer_error(ic, "expected input of rank >= 1 and a 2-d weight, got ranks %d and %d",
		                      x->rank, w->rank);
	if (x->dims[x->rank - 1] != w->dims[1]) {
		char a[64], c[64];
		return fj_infer_error(ic, "input has %s features but weight expects %s",
		                      fj_ic_dim_str(ic, x->dims[x->rank - 1], a, sizeof a),
		                      fj_ic_dim_str(ic, w->dims[1], c, sizeof c));
	}
	if (b && !(b->rank == 0 || (b->rank == 1 && (b->dims[0] == w->dims[0] || b->dims[0] == 1))))
		return fj_infer_error(ic, "bias must have shape [out_features]");
	if ((st = out_like(ic, 0, x, x->dtype)) != FJ_OK)
		return st;
	ic->out[0].dims[x->rank - 1] = w->dims[0];
	return FJ_OK;
}

/* ---- indexing ---- */

fj_status fj_infer_embedding(fj_infer *ic)
{
	const fj_type *w = ic->in[0], *idx = ic->in[1];
	fj_status st = fj_ic_need_index(ic, idx, "indices");
	if (st == FJ_OK)
		st = need_rank(ic, w, 2, "weight");
	if (st)
		return st;
	fj_dim dims[FJ_MAX_RANK + 1];
	if (idx->rank)
		memcpy(dims, idx->dims, idx->rank * sizeof *dims);
	dims[idx->rank] = w->dims[1];
	return fj_ic_out_dims(ic, 0, w->dtype, dims, idx->rank + 1);
}

/* The checks of the indexing ops: idx is an index tensor ("index") and the
 * "dim" attribute a dim of x, normalised into *d. */
static fj_status index_dim(fj_infer *ic, const fj_type *x, const fj_type *idx, int *d)
{
	fj_status st = fj_ic_need_index(ic, idx, "index");
	if (st == FJ_OK)
		st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank, d);
	return st;
}

/* torch.gather: index has self's rank; the result has index's shape. */
fj_status fj_infer_gather(fj_infer *ic)
{
	const fj_type *x = ic->in[0], *idx = ic->in[1];
	int d = 0;
	fj_status st = index_dim(ic, x, idx, &d);
	if (st)
		return st;
	if (idx->rank != x->rank)
		return fj_infer_error(ic, "index must have the rank of self (%d), got %d", x->rank, idx->rank);
	for (int k = 0; k < x->rank; k++)
		if (k != d && fj_dim_is_static(idx->dims[k]) && fj_dim_is_static(x->dims[k]) && idx->dims[k] > x->dims[k])
			return fj_infer_error(ic, "index size %lld exceeds self's size %lld at dim %d",
			                      (long long)idx->dims[k], (long long)x->dims[k], k);
	return out_like(ic, 0, idx, x->dtype);
}

/* aten.index_select (index 0-d or 1-d) and prims.take (any-rank index, its
 * shape inserted at dim). */
fj_status fj_infer_take(fj_infer *ic)
{
	const fj_type *x = ic->in[0], *idx = ic->in[1];
	int d = 0;
	fj_status st = index_dim(ic, x, idx, &d);
	if (st)
		return st;
	fj_dim dims[2 * FJ_MAX_RANK];
	int rank = 0;
	bool sel = ic->op == FJ_OP_ATEN_INDEX_SELECT;
	if (sel && idx->rank > 1)
		return fj_infer_error(ic, "index must be 0-d or 1-d, got rank %d", idx->rank);
	if (x->rank == 0)
		return sel ? out_like(ic, 0, x, x->dtype) : fj_infer_error(ic, "a must have rank >= 1");
	for (int k = 0; k < x->rank; k++) {
		if (k != d) {
			dims[rank++] = x->dims[k];
		} else if (sel) {
			dims[rank++] = idx->rank ? idx->dims[0] : 1;
		} else {
			for (int j = 0; j < idx->rank; j++)
				dims[rank++] = idx->dims[j];
		}
	}
	return fj_ic_out_dims(ic, 0, x->dtype, dims, rank);
}

fj_status fj_infer_scatter_add(fj_infer *ic)
{
	const fj_type *x = ic->in[0], *idx = ic->in[1], *src = ic->in[2];
	int d = 0;
	fj_status st = index_dim(ic, x, idx, &d);
	if (st == FJ_OK)
		st = same_dtype(ic, x, src);
	if (st)
		return st;
	if (idx->rank != x->rank || src->rank != x->rank)
		return fj_infer_error(ic, "index and src must have the rank of self (%d), got %d and %d", x->rank,
		                      idx->rank, src->rank);
	for (int k = 0; k < x->rank; k++) {
		fj_dim i = idx->dims[k];
		if (fj_dim_is_static(i) && fj_dim_is_static(src->dims[k]) && i > src->dims[k])
			return fj_infer_error(ic, "index size %lld exceeds src's size at dim %d", (long long)i, k);
		if (k != d && fj_dim_is_static(i) && fj_dim_is_static(x->dims[k]) && i > x->dims[k])
			return fj_infer_error(ic, "index size %lld exceeds self's size at dim %d", (long long)i, k);
	}
	return out_like(ic, 0, x, x->dtype);
}

fj_status fj_infer_index_add(fj_infer *ic)
{
	const fj_type *x = ic->in[0], *idx = ic->in[1], *src = ic->in[2];
	int d = 0;
	char b1[160], b2[160];
	fj_status st = index_dim(ic, x, idx, &d);
	if (st == FJ_OK)
		st = same_dtype(ic, x, src);
	if (st)
		return st;
	if (idx->rank > 1)
		return fj_infer_error(ic, "index must be 0-d or 1-d, got rank %d", idx->rank);
	fj_dim n = idx->rank ? idx->dims[0] : 1;
	bool ok = src->rank == x->rank || (x->rank == 0 && src->rank <= 1);
	for (int k = 0; ok && k < x->rank; k++)
		ok = src->dims[k] == (k == d ? n : x->dims[k]) ||
		     !fj_dim_is_static(src->dims[k]) || !fj_dim_is_static(k == d ? n : x->dims[k]);
	if (!ok)
		return fj_infer_error(ic, "source %s does not match self %s with %s indices at dim %d",
		                      fj_ic_type_str(ic, src, b1, sizeof b1), fj_ic_type_str(ic, x, b2, sizeof b2),
		                      fj_ic_dim_str(ic, n, (char[64]){0}, 64), d);
	const fj_attr *alpha = fj_ic_attr_opt(ic, "alpha");
	if (alpha && alpha->kind == FJ_AK_FLOAT && !fj_dtype_is_float(x->dtype))
		return fj_infer_error(ic, "for integral operands, alpha must not be a floating-point number");
	return out_like(ic, 0, x, x->dtype);
}
