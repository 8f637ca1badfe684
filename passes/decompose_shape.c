/* decompose_shape.c -- decomposition rules of the shape and view ops, the
 * sources (full, *_like, new_*, arange), cumsum, the matrix ops, indexing
 * and random ops (IR.md §3).
 *
 * View ops become layout prims with the aten result's resolved shape:
 * view/reshape/_unsafe_view/_reshape_alias/unsqueeze -> prims.reshape,
 * permute/transpose/t -> prims.transpose{perm}, expand -> broadcast_in_dim,
 * squeeze -> prims.squeeze of the size-1 dims, slice -> prims.slice with
 * PyTorch's clamping resolved, cat -> prims.cat after promotion, flip ->
 * prims.rev; clone/detach/alias are the value itself (and so is any layout op
 * that changes nothing). The opaque ops become their opaque prims: matmul
 * (torch.matmul's 1-d and batch-broadcast cases through reshape and
 * broadcast_in_dim), take, gather, scatter_add, index_add. embedding_dense_backward
 * is an index_add into zeros; native_dropout is prims.rand + compare + where. */
#include <string.h>

#include "passes/decompose.h"

static const fj_type *R0(fj_dec *d) { return fj_dec_rty(d, 0); }
static fj_vid c(fj_dec *d, double v, fj_vid like) { return fj_dec_const(d, v, like); }

static fj_status ret(fj_dec *d, fj_vid v)
{
	d->out[0] = v;
	return fj_b_status(&d->b);
}

static fj_vid transpose(fj_dec *d, fj_vid x, const int64_t *perm, int rank)
{
	bool id = true;
	for (int i = 0; i < rank; i++)
		id &= perm[i] == i;
	if (id)
		return x;
	fj_named_attr at = {"perm", fj_attr_ints(d->g, perm, (uint32_t)rank)};
	return fj_dec_op(d, FJ_OP_PRIMS_TRANSPOSE, &x, 1, &at, 1);
}

/* ---- views ---- */

static fj_status rule_reshape(fj_dec *d) { return ret(d, fj_dec_reshape(d, fj_dec_in(d, 0), R0(d)->dims, R0(d)->rank)); }

static fj_status rule_permute(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	int rank = fj_dec_ty(d, x)->rank;
	const fj_attr *p = fj_dec_attr(d, "dims");
	int64_t perm[FJ_MAX_RANK];
	for (int i = 0; i < rank; i++)
		perm[i] = fj_dec_dim(fj_attr_as_int(&p->u.items[i]), rank);
	return ret(d, transpose(d, x, perm, rank));
}

static fj_status rule_transpose(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	int rank = fj_dec_ty(d, x)->rank;
	int64_t perm[FJ_MAX_RANK];
	for (int i = 0; i < rank; i++)
		perm[i] = i;
	if (d->n->op == FJ_OP_ATEN_T) {
		if (rank == 2)
			perm[0] = 1, perm[1] = 0;
	} else if (rank) {
		int a = fj_dec_dim(fj_dec_int(d, "dim0"), rank), b = fj_dec_dim(fj_dec_int(d, "dim1"), rank);
		perm[a] = b;
		perm[b] = a;
	}
	return ret(d, transpose(d, x, perm, rank));
}

static fj_status rule_expand(fj_dec *d) { return ret(d, fj_dec_bcast(d, fj_dec_in(d, 0), R0(d)->dims, R0(d)->rank)); }

static fj_status rule_squeeze(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *t = fj_dec_ty(d, x);
	uint32_t mask = t->rank ? (1u << t->rank) - 1 : 0;
	if (!fj_dec_is_none(d, "dims"))
		mask = fj_dec_dims_mask(d, "dims", t->rank);
	const fj_attr *da = fj_dec_attr(d, "dims");
	if (da->kind == FJ_AK_LIST && da->n == 0)
		mask = 0; /* squeeze(dims=[]) squeezes nothing */
	int64_t dims[FJ_MAX_RANK];
	uint32_t n = 0;
	for (int k = 0; k < t->rank; k++)
		if ((mask & (1u << k)) && t->dims[k] == 1)
			dims[n++] = k;
	if (!n)
		return ret(d, x);
	fj_named_attr at = {"dims", fj_attr_ints(d->g, dims, n)};
	return ret(d, fj_dec_op(d, FJ_OP_PRIMS_SQUEEZE, &x, 1, &at, 1));
}

/* The bounds of a slice of a symbolic size (or with symbolic bounds) as
 * inference takes them (ir/infer_shape.c): unclamped, a negative bound
 * counting from the end; the binder checks at run time that clamping would
 * not change them. False only when out of memory (inference succeeded). */
static bool sym_bounds(fj_dec *d, fj_dim size, fj_dim *start, fj_dim *end)
{
	fj_module *m = d->g->module;
	const fj_attr *sa = fj_dec_attr(d, "start"), *ea = fj_dec_attr(d, "end");
	*start = 0;
	*end = size;
	bool ok = true;
	if (sa->kind == FJ_AK_DIM)
		*start = sa->u.dim;
	else if (!fj_attr_is_none(sa))
		ok = sa->u.i >= 0 ? (*start = sa->u.i, true) : fj_dim_add_int(m, size, sa->u.i, start);
	if (ea->kind == FJ_AK_DIM)
		*end = ea->u.dim;
	else if (!fj_attr_is_none(ea) && ea->u.i < INT64_MAX / 2)
		ok = ok && (ea->u.i >= 0 ? (*end = ea->u.i, true) : fj_dim_add_int(m, size, ea->u.i, end));
	if (ok && fj_dim_is_static(*start) && fj_dim_is_static(*end) && *end < *start)
		*end = *start;
	return ok;
}

/* slice{dim, start, end, step} with PyTorch's clamping -> prims.slice. */
static fj_status rule_slice(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *t = fj_dec_ty(d, x);
	int dim = fj_dec_dim(fj_dec_int(d, "dim"), t->rank);
	fj_dim size = t->dims[dim];
	int64_t step = fj_dec_int(d, "step");
	fj_dim start, end;
	if (!fj_dim_is_static(size) || fj_dec_attr(d, "start")->kind == FJ_AK_DIM ||
	    fj_dec_attr(d, "end")->kind == FJ_AK_DIM) {
		if (!sym_bounds(d, size, &start, &end))
			return fj_b_fail(&d->b, FJ_ERR_NOMEM, "out of memory");
		if (start == 0 && end == size && step == 1)
			return ret(d, x);
	} else {
		int64_t s0 = fj_dec_is_none(d, "start") ? 0 : fj_dec_int(d, "start");
		int64_t e0 = fj_dec_is_none(d, "end") ? INT64_MAX : fj_dec_int(d, "end");
		fj_slice_clamp(size, &s0, &e0);
		if (s0 == 0 && e0 == size && step == 1)
			return ret(d, x);
		start = s0;
		end = e0;
	}
	fj_attr s[FJ_MAX_RANK], l[FJ_MAX_RANK], st[FJ_MAX_RANK];
	for (int k = 0; k < t->rank; k++) {
		s[k] = k == dim ? fj_attr_size(start) : fj_attr_int(0);
		l[k] = k == dim ? fj_attr_size(end) : fj_attr_size(t->dims[k]);
		st[k] = fj_attr_int(k == dim ? step : 1);
	}
	fj_named_attr at[3] = {{"start", fj_attr_list(d->g, s, t->rank)},
	                       {"limit", fj_attr_list(d->g, l, t->rank)},
	                       {"strides", fj_attr_list(d->g, st, step == 1 ? 0 : t->rank)}};
	return ret(d, fj_dec_op(d, FJ_OP_PRIMS_SLICE, &x, 1, at, 3));
}

static fj_status rule_cat(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	uint32_t n = d->n->nopnds;
	fj_vid stack[16], *in = n <= 16 ? stack : fj_alloc(d->ctx, n * sizeof *in);
	if (!in)
		return fj_b_fail(&d->b, FJ_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		in[i] = fj_dec_cvt(d, fj_dec_in(d, i), R);
	fj_vid r = in[0];
	if (n > 1) {
		fj_named_attr at = {"dim", fj_attr_int(fj_dec_dim(fj_dec_int(d, "dim"), R0(d)->rank))};
		r = fj_dec_op(d, FJ_OP_PRIMS_CAT, in, n, &at, 1);
	}
	if (in != stack)
		fj_free(d->ctx, in, n * sizeof *in);
	return ret(d, r);
}

static fj_status rule_flip(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *t = fj_dec_ty(d, x);
	const fj_attr *da = fj_dec_attr(d, "dims");
	int64_t dims[FJ_MAX_RANK];
	uint32_t n = 0, seen = 0;
	for (uint32_t i = 0; da->kind == FJ_AK_LIST && i < da->n; i++) {
		int k = fj_dec_dim(fj_attr_as_int(&da->u.items[i]), t->rank);
		if (t->rank && !(seen & (1u << k)))
			seen |= 1u << k;
	}
	for (int k = 0; k < t->rank; k++)
		if (seen & (1u << k))
			dims[n++] = k;
	if (!n)
		return ret(d, x);
	fj_named_attr at = {"dims", fj_attr_ints(d->g, dims, n)};
	return ret(d, fj_dec_op(d, FJ_OP_PRIMS_REV, &x, 1, &at, 1));
}

static fj_status rule_identity(fj_dec *d) { return ret(d, fj_dec_in(d, 0)); }

/* ---- sources ---- */

/* full, *_like, new_*: prims.full of the result's shape and dtype. */
static fj_status rule_full(fj_dec *d)
{
	const fj_type *r = R0(d);
	fj_attr v = fj_attr_int(0);
	switch (d->n->op) {
	case FJ_OP_ATEN_ONES_LIKE:
	case FJ_OP_ATEN_NEW_ONES: v = fj_attr_int(1); break;
	case FJ_OP_ATEN_FULL:
	case FJ_OP_ATEN_FULL_LIKE:
	case FJ_OP_ATEN_NEW_FULL: v = *fj_dec_attr(d, "value"); break;
	default: break;
	}
	return ret(d, fj_dec_full_num(d, r->dims, r->rank, &v, r->dtype));
}

/* arange: start + step * iota, computed in i64 for integer results and in
 * f64 for float ones (CPU's accumulate type), then converted. */
static fj_status rule_arange(fj_dec *d)
{
	const fj_type *r = R0(d);
	bool fl = fj_dtype_is_float(r->dtype);
	fj_dtype C = fl ? FJ_DT_F64 : FJ_DT_I64;
	fj_named_attr at[2] = {{"length", fj_attr_size(r->dims[0])}, {"dtype", fj_attr_dtype(C)}};
	fj_vid i = fj_dec_op(d, FJ_OP_PRIMS_IOTA, NULL, 0, at, 2);
	const fj_attr *start = fj_dec_attr(d, "start"), *step = fj_dec_attr(d, "step");
	const fj_type *it = fj_dec_ty(d, i);
	if (fj_attr_as_float(step) != 1)
		i = fj_dec_mul(d, fj_dec_full_num(d, it->dims, it->rank, step, C), i);
	if (fj_attr_as_float(start) != 0)
		i = fj_dec_add(d, fj_dec_full_num(d, it->dims, it->rank, start, C), i);
	return ret(d, fj_dec_cvt(d, i, r->dtype));
}

/* cumsum{dim, dtype}: prims.cumsum in the computation dtype. */
static fj_status rule_cumsum(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype, C = fj_dec_comp(R);
	fj_vid x = fj_dec_cvt(d, fj_dec_cvt(d, fj_dec_in(d, 0), R), C);
	const fj_type *t = fj_dec_ty(d, x);
	if (t->rank == 0)
		return ret(d, fj_dec_cvt(d, x, R));
	fj_named_attr at = {"dim", fj_attr_int(fj_dec_dim(fj_dec_int(d, "dim"), t->rank))};
	return ret(d, fj_dec_cvt(d, fj_dec_op(d, FJ_OP_PRIMS_CUMSUM, &x, 1, &at, 1), R));
}

/* ---- matrix ---- */

static fj_vid matmul(fj_dec *d, fj_vid a, fj_vid b) { return fj_dec_bin(d, FJ_OP_PRIMS_MATMUL, a, b); }

static fj_status rule_mm(fj_dec *d) { return ret(d, matmul(d, fj_dec_in(d, 0), fj_dec_in(d, 1))); }

/* addmm: beta * self + alpha * (mat1 @ mat2) (torch._decomp). */
static fj_status rule_addmm(fj_dec *d)
{
	const fj_type *r = R0(d);
	fj_dtype C = fj_dec_comp(r->dtype);
	fj_vid mm = fj_dec_cvt(d, matmul(d, fj_dec_in(d, 1), fj_dec_in(d, 2)), C);
	double alpha = fj_dec_float(d, "alpha"), beta = fj_dec_float(d, "beta");
	if (alpha != 1)
		mm = fj_dec_mulc(d, mm, alpha);
	if (beta == 0)
		return ret(d, fj_dec_cvt(d, mm, r->dtype));
	fj_vid s = fj_dec_to_type(d, fj_dec_in(d, 0), r, C);
	if (beta != 1)
		s = fj_dec_mulc(d, s, beta);
	return ret(d, fj_dec_cvt(d, fj_dec_add(d, s, mm), r->dtype));
}

/* torch.matmul: 1-d operands get a unit dim; batched operands broadcast
 * their batch dims and flatten them for a 3-d prims.matmul; a batched
 * first operand times a matrix folds its batch into the rows. */
static fj_vid matmul_general(fj_dec *d, fj_vid a, fj_vid b, const fj_type *r)
{
	const fj_type *ta = fj_dec_ty(d, a), *tb = fj_dec_ty(d, b);
	int ra = ta->rank, rb = tb->rank;
	fj_dim K = ta->dims[ra - 1];
	if (ra == 1)
		a = fj_dec_reshape(d, a, (fj_dim[]){1, K}, 2);
	if (rb == 1)
		b = fj_dec_reshape(d, b, (fj_dim[]){K, 1}, 2);
	ta = fj_dec_ty(d, a);
	tb = fj_dec_ty(d, b);
	if (d->b.status)
		return FJ_NOVAL;
	fj_dim M = ta->dims[ta->rank - 2], N = tb->dims[tb->rank - 1];
	if (ta->rank == 2 && tb->rank == 2)
		return fj_dec_reshape(d, matmul(d, a, b), r->dims, r->rank);
	if (tb->rank == 2) {
		fj_dim rows;
		if (!fj_dim_product(d->m, ta->dims, ta->rank - 1, &rows))
			return fj_dec_fail(d, "size overflow"), FJ_NOVAL;
		fj_vid y = matmul(d, fj_dec_reshape(d, a, (fj_dim[]){rows, K}, 2), b);
		return fj_dec_reshape(d, y, r->dims, r->rank);
	}
	int nb = r->rank - (ra >= 2) - (rb >= 2);
	fj_dim bs[FJ_MAX_RANK + 2], B;
	memcpy(bs, r->dims, (size_t)nb * sizeof *bs);
	if (!fj_dim_product(d->m, bs, nb, &B))
		return fj_dec_fail(d, "size overflow"), FJ_NOVAL;
	bs[nb] = M;
	bs[nb + 1] = K;
	fj_vid a3 = fj_dec_reshape(d, fj_dec_bcast(d, a, bs, nb + 2), (fj_dim[]){B, M, K}, 3);
	bs[nb] = K;
	bs[nb + 1] = N;
	fj_vid b3 = fj_dec_reshape(d, fj_dec_bcast(d, b, bs, nb + 2), (fj_dim[]){B, K, N}, 3);
	return fj_dec_reshape(d, matmul(d, a3, b3), r->dims, r->rank);
}

static fj_status rule_matmul(fj_dec *d) { return ret(d, matmul_general(d, fj_dec_in(d, 0), fj_dec_in(d, 1), R0(d))); }

/* linear: x @ w^T (+ bias, broadcast, in the computation dtype). */
static fj_status rule_linear(fj_dec *d)
{
	const fj_type *r = R0(d);
	fj_vid w = fj_dec_in(d, 1), b = fj_dec_in(d, 2);
	fj_vid wt = transpose(d, w, (int64_t[]){1, 0}, 2);
	fj_vid y = matmul_general(d, fj_dec_in(d, 0), wt, r);
	if (b == FJ_NOVAL)
		return ret(d, y);
	fj_dtype C = fj_dec_comp(r->dtype);
	return ret(d, fj_dec_cvt(d, fj_dec_add(d, fj_dec_cvt(d, y, C), fj_dec_to_type(d, b, r, C)), r->dtype));
}

/* ---- indexing ---- */

static fj_vid dim_op(fj_dec *d, fj_op op, const fj_vid *in, uint32_t n, int dim)
{
	fj_named_attr at = {"dim", fj_attr_int(dim)};
	return fj_dec_op(d, op, in, n, &at, 1);
}

/* embedding: prims.take of the rows. With padding_idx >= 0, ATen's backward
 * gives the padding row no gradient: that row is read through a {nograd}
 * copy of the weight (the values are the same). */
static fj_status rule_embedding(fj_dec *d)
{
	fj_vid w = fj_dec_in(d, 0), idx = fj_dec_in(d, 1);
	int64_t pad = fj_dec_int(d, "padding_idx");
	const fj_type *wt = fj_dec_ty(d, w);
	if (pad >= 0 && wt->rank == 2 && fj_dtype_is_float(wt->dtype)) {
		fj_dim dims[2] = {wt->dims[0], wt->dims[1]};
		fj_named_attr at = {"dtype", fj_attr_dtype(wt->dtype)};
		fj_vid wd = fj_dec_op(d, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &w, 1, &at, 1);
		if (wd != FJ_NOVAL)
			d->g->nodes[d->g->values[wd].def].nograd = true;
		fj_named_attr ia[2] = {{"length", fj_attr_size(dims[0])}, {"dtype", fj_attr_dtype(FJ_DT_I64)}};
		fj_vid rows = fj_dec_op(d, FJ_OP_PRIMS_IOTA, NULL, 0, ia, 2);
		fj_vid m = fj_dec_bcast_in(d, fj_dec_cmpc(d, FJ_OP_PRIMS_EQ, rows, (double)pad), dims, 2, (int64_t[]){0});
		w = fj_dec_where(d, m, wd, w);
	}
	return ret(d, dim_op(d, FJ_OP_PRIMS_TAKE, (fj_vid[]){w, idx}, 2, 0));
}

static fj_status rule_gather(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	int dim = fj_dec_dim(fj_dec_int(d, "dim"), fj_dec_ty(d, x)->rank);
	return ret(d, dim_op(d, FJ_OP_PRIMS_GATHER, (fj_vid[]){x, fj_dec_in(d, 1)}, 2, dim));
}

/* index_select: prims.take with a 1-d index (a 0-d one keeps its dim). */
static fj_status rule_index_select(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0), i = fj_dec_in(d, 1);
	const fj_type *t = fj_dec_ty(d, x);
	if (t->rank == 0)
		return ret(d, x);
	if (fj_dec_ty(d, i)->rank == 0)
		i = fj_dec_reshape(d, i, (fj_dim[]){1}, 1);
	return ret(d, dim_op(d, FJ_OP_PRIMS_TAKE, (fj_vid[]){x, i}, 2, fj_dec_dim(fj_dec_int(d, "dim"), t->rank)));
}

static fj_status rule_scatter_add(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	int dim = fj_dec_dim(fj_dec_int(d, "dim"), fj_dec_ty(d, x)->rank);
	return ret(d, dim_op(d, FJ_OP_PRIMS_SCATTER_ADD, (fj_vid[]){x, fj_dec_in(d, 1), fj_dec_in(d, 2)}, 3, dim));
}

/* index_add{alpha}: prims.index_add(self, index, alpha * source). */
static fj_status rule_index_add(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0), src = fj_dec_in(d, 2);
	const fj_type *t = fj_dec_ty(d, x);
	const fj_attr *alpha = fj_dec_attr(d, "alpha");
	if (fj_attr_as_float(alpha) != 1) {
		fj_dtype S = fj_dec_ty(d, src)->dtype, C = fj_dec_comp(S);
		fj_vid s = fj_dec_cvt(d, src, C);
		const fj_type *st = fj_dec_ty(d, s);
		src = fj_dec_cvt(d, fj_dec_mul(d, s, fj_dec_full_num(d, st->dims, st->rank, alpha, C)), S);
	}
	return ret(d, dim_op(d, FJ_OP_PRIMS_INDEX_ADD, (fj_vid[]){x, fj_dec_in(d, 1), src}, 3,
	                     fj_dec_dim(fj_dec_int(d, "dim"), t->rank)));
}

/* embedding_dense_backward (torch._decomp): the rows of grad_output whose
 * index is padding_idx are zeroed, then index_add-ed into zeros[num_weights,
 * D]; scale_grad_by_freq divides each row by its index's count. */
static fj_status rule_embedding_dense_backward(fj_dec *d)
{
	const fj_type *r = R0(d);
	fj_dtype C = fj_dec_comp(r->dtype);
	fj_vid g = fj_dec_cvt(d, fj_dec_in(d, 0), C), idx = fj_dec_in(d, 1);
	const fj_type *it = fj_dec_ty(d, idx);
	fj_dim k, D = r->dims[1];
	if (!fj_dim_product(d->m, it->dims, it->rank, &k))
		return fj_dec_fail(d, "size overflow");
	fj_vid i1 = fj_dec_reshape(d, idx, &k, 1);
	fj_vid g2 = fj_dec_reshape(d, g, (fj_dim[]){k, D}, 2);
	int64_t pad = fj_dec_int(d, "padding_idx");
	if (pad >= 0) {
		fj_vid m = fj_dec_bcast_in(d, fj_dec_cmpc(d, FJ_OP_PRIMS_EQ, i1, (double)pad), (fj_dim[]){k, D}, 2,
		                           (int64_t[]){0});
		g2 = fj_dec_where(d, m, c(d, 0, g2), g2);
	}
	if (fj_dec_bool(d, "scale_grad_by_freq")) {
		fj_vid counts = dim_op(d, FJ_OP_PRIMS_INDEX_ADD,
		                       (fj_vid[]){fj_dec_full(d, r->dims, 1, 0, C), i1, fj_dec_full(d, &k, 1, 1, C)}, 3, 0);
		fj_vid per_row = dim_op(d, FJ_OP_PRIMS_TAKE, (fj_vid[]){counts, i1}, 2, 0);
		g2 = fj_dec_div(d, g2, fj_dec_bcast_in(d, per_row, (fj_dim[]){k, D}, 2, (int64_t[]){0}));
	}
	fj_vid z = fj_dec_full(d, r->dims, 2, 0, C);
	return ret(d, fj_dec_cvt(d, dim_op(d, FJ_OP_PRIMS_INDEX_ADD, (fj_vid[]){z, i1, g2}, 3, 0), r->dtype));
}

/* ---- random ---- */

/* native_dropout{p, train}, with the convention of the reference kernel
 * (codegen/emit_random.c): u = prims.rand(seed, offset) in f32 (24 random
 * bits, exact in f32 and f64); an element is kept when u >= p, compared in
 * f64; out = kept ? x * (1 / (1 - p)) : 0, computed in f64 and rounded once;
 * mask = kept. Eval mode (train=false) or p = 0: (x, all true); p = 1:
 * (zeros, all false). */
static fj_status rule_native_dropout(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *t = fj_dec_ty(d, x);
	double p = fj_dec_float(d, "p");
	const fj_attr *tr = fj_dec_attr(d, "train");
	bool train = fj_attr_is_none(tr) || tr->u.b;
	if (!train || p == 0) {
		d->out[0] = x;
		d->out[1] = fj_dec_full(d, t->dims, t->rank, 1, FJ_DT_BOOL);
		return fj_b_status(&d->b);
	}
	if (p == 1) {
		d->out[0] = fj_dec_full(d, t->dims, t->rank, 0, t->dtype);
		d->out[1] = fj_dec_full(d, t->dims, t->rank, 0, FJ_DT_BOOL);
		return fj_b_status(&d->b);
	}
	fj_named_attr at[2] = {{"shape", fj_attr_shape(d->g, t->dims, t->rank)}, {"dtype", fj_attr_dtype(FJ_DT_F32)}};
	fj_vid u = fj_dec_op(d, FJ_OP_PRIMS_RAND, (fj_vid[]){fj_dec_in(d, 1), fj_dec_in(d, 2)}, 2, at, 2);
	fj_vid keep = fj_dec_cmpc(d, FJ_OP_PRIMS_GE, fj_dec_cvt(d, u, FJ_DT_F64), p);
	fj_vid xs = fj_dec_mulc(d, fj_dec_cvt(d, x, FJ_DT_F64), 1.0 / (1.0 - p));
	fj_vid y = fj_dec_where(d, keep, xs, c(d, 0, xs));
	d->out[0] = fj_dec_cvt(d, y, t->dtype);
	d->out[1] = keep;
	return fj_b_status(&d->b);
}

const fj_dec_rule fj_dec_rules_shape[FJ_OP_COUNT] = {
	[FJ_OP_ATEN_VIEW] = rule_reshape, [FJ_OP_ATEN_RESHAPE] = rule_reshape,
	[FJ_OP_ATEN__RESHAPE_ALIAS] = rule_reshape, [FJ_OP_ATEN__UNSAFE_VIEW] = rule_reshape,
	[FJ_OP_ATEN_UNSQUEEZE] = rule_reshape,
	[FJ_OP_ATEN_PERMUTE] = rule_permute, [FJ_OP_ATEN_TRANSPOSE] = rule_transpose, [FJ_OP_ATEN_T] = rule_transpose,
	[FJ_OP_ATEN_EXPAND] = rule_expand, [FJ_OP_ATEN_SQUEEZE] = rule_squeeze, [FJ_OP_ATEN_SLICE] = rule_slice,
	[FJ_OP_ATEN_CAT] = rule_cat, [FJ_OP_ATEN_FLIP] = rule_flip,
	[FJ_OP_ATEN_CLONE] = rule_identity, [FJ_OP_ATEN_DETACH] = rule_identity, [FJ_OP_ATEN_ALIAS] = rule_identity,
	[FJ_OP_ATEN_FULL] = rule_full, [FJ_OP_ATEN_ZEROS_LIKE] = rule_full, [FJ_OP_ATEN_ONES_LIKE] = rule_full,
	[FJ_OP_ATEN_FULL_LIKE] = rule_full, [FJ_OP_ATEN_NEW_ZEROS] = rule_full, [FJ_OP_ATEN_NEW_ONES] = rule_full,
	[FJ_OP_ATEN_NEW_FULL] = rule_full, [FJ_OP_ATEN_ARANGE] = rule_arange, [FJ_OP_ATEN_CUMSUM] = rule_cumsum,
	[FJ_OP_ATEN_MM] = rule_mm, [FJ_OP_ATEN_BMM] = rule_mm, [FJ_OP_ATEN_ADDMM] = rule_addmm,
	[FJ_OP_ATEN_MATMUL] = rule_matmul, [FJ_OP_ATEN_LINEAR] = rule_linear,
	[FJ_OP_ATEN_EMBEDDING] = rule_embedding, [FJ_OP_ATEN_GATHER] = rule_gather,
	[FJ_OP_ATEN_INDEX_SELECT] = rule_index_select, [FJ_OP_ATEN_SCATTER_ADD] = rule_scatter_add,
	[FJ_OP_ATEN_INDEX_ADD] = rule_index_add,
	[FJ_OP_ATEN_EMBEDDING_DENSE_BACKWARD] = rule_embedding_dense_backward,
	[FJ_OP_ATEN_NATIVE_DROPOUT] = rule_native_dropout,
};
