/* emit_index.c -- the reference executor's kernels for indexing: embedding,
 * index_select, prims.take (one "take" kernel: the index, of any rank,
 * replaces dim `dim` of self), gather (aten, prims), scatter_add (aten,
 * prims), index_add (aten, prims), embedding_dense_backward.
 *
 * Every index is loaded as i64 (i64 or i32 index tensors) and checked
 * against [0, size): an index out of range, negative ones included (ATen
 * rejects them for these ops), sets FJ_KERR_INDEX and the access is skipped,
 * so nothing is read or written out of bounds. Shape relations that inference
 * could not check statically (symbolic sizes) are checked at run time too.
 *
 * Parallel spaces: take and gather over the result's rows (the inner-most
 * dims are a loop); scatter_add and index_add over the result's dims other
 * than `dim` (each part copies then accumulates into its own slices, so parts
 * write disjoint elements); embedding_dense_backward runs as one part
 * (accumulating in the result, in index order, like ATen's index_add_). */
#include "codegen/emit_common.h"

/* Size and stride of dim d of t, 1 and 1 for a 0-d tensor. */
static LLVMValueRef dsize(fj_cg *cg, const fj_cg_tensor *t, int d)
{
	return t->rank ? t->dim[d] : fj_cg_i64(cg, 1);
}
static LLVMValueRef dstride(fj_cg *cg, const fj_cg_tensor *t, int d)
{
	return t->rank ? t->stride[d] : fj_cg_i64(cg, 1);
}

/* An i1 that is true when index v (i64) is outside [0, n). */
static LLVMValueRef out_of_range(fj_cg *cg, LLVMValueRef v, LLVMValueRef n)
{
	return ec_icmp(cg, LLVMIntUGE, v, n); /* negative values are huge unsigned */
}

/* Sets the status to FJ_KERR_INDEX when bad; leaves the builder in the
 * "good" branch, to be closed with fj_cg_if_end. */
static void guard_index(fj_cg *cg, fj_cg_kernel *k, fj_cg_if *c, LLVMValueRef bad)
{
	fj_cg_if_begin(cg, c, bad);
	ec_fail(cg, k, FJ_KERR_INDEX);
	fj_cg_if_else(cg, c);
}

/* embedding(weight, indices) (dim 0), index_select(self, index){dim},
 * prims.take(a, index){dim}: self viewed as [A, S, B], the result as
 * [A, I, B] with I the index's element count. */
static fj_status emit_take(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *x = &k->in[0].t, *ix = &k->in[1].t, *out = &k->out[0];
	bool emb = k->node->op == FJ_OP_ATEN_EMBEDDING;
	int d = emb ? 0 : ec_dim(ec_attr_int(cg, k, "dim", 0), x->rank);
	int inner = x->rank ? x->rank - d - 1 : 0; /* trailing dims of the result in B */
	k->par_out = 0;
	k->par_mask = out->rank - inner > 0 ? (1u << (out->rank - inner)) - 1 : 0;
	LLVMValueRef A = ec_span(cg, x, 0, d), S = dsize(cg, x, d), B = ec_span(cg, x, d + 1, x->rank);
	LLVMValueRef I = ix->numel;
	(void)A;
	fj_cg_loop lo, l;
	LLVMValueRef p = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef a = ec_div(cg, p, I), i = ec_rem(cg, p, I);
	LLVMValueRef id = ec_load_as(cg, ix, i, FJ_DT_I64);
	fj_cg_if c;
	guard_index(cg, k, &c, out_of_range(cg, id, S));
	LLVMValueRef src = ec_mul(cg, ec_add(cg, ec_mul(cg, a, S), id), B);
	LLVMValueRef dst = ec_mul(cg, p, B);
	LLVMValueRef b = ec_for(cg, &l, fj_cg_i64(cg, 0), B);
	fj_cg_store(cg, out, ec_add(cg, dst, b), fj_cg_load(cg, x, ec_add(cg, src, b)));
	fj_cg_loop_end(cg, &l);
	fj_cg_if_end(cg, &c);
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* An i1: some dim k of a (k != skip) is larger than that of b. */
static LLVMValueRef larger(fj_cg *cg, const fj_cg_tensor *a, const fj_cg_tensor *b, int skip)
{
	LLVMValueRef r = LLVMConstInt(cg->t_i1, 0, 0);
	for (int d = 0; d < a->rank && d < b->rank; d++)
		if (d != skip)
			r = ec_or(cg, r, ec_icmp(cg, LLVMIntSGT, a->dim[d], b->dim[d]));
	return r;
}

/* gather(self, index){dim}: out[p] = self[p with p[dim] = index[p]];
 * parallel over the index's dims but the last, a loop over the last. */
static fj_status emit_gather(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *x = &k->in[0].t, *ix = &k->in[1].t, *out = &k->out[0];
	int r = ix->rank, d = ec_dim(ec_attr_int(cg, k, "dim", 0), x->rank);
	int last = r ? r - 1 : 0;
	k->par_out = 0;
	k->par_mask = r > 1 ? (1u << last) - 1 : 0;
	fj_cg_if ok;
	fj_cg_if_begin(cg, &ok, larger(cg, ix, x, d));
	ec_fail(cg, k, FJ_KERR_INDEX);
	fj_cg_if_else(cg, &ok);
	LLVMValueRef n = dsize(cg, ix, last);
	fj_cg_loop lo, l;
	LLVMValueRef p = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef xbase = fj_cg_i64(cg, 0);
	if (r > 1) {
		LLVMValueRef idx[FJ_MAX_RANK];
		fj_cg_unravel(cg, p, ix->dim, last, idx);
		for (int q = 0; q < last; q++)
			if (q != d)
				xbase = ec_add(cg, xbase, ec_mul(cg, idx[q], x->stride[q]));
	}
	LLVMValueRef j = ec_for(cg, &l, fj_cg_i64(cg, 0), n);
	LLVMValueRef io = ec_add(cg, ec_mul(cg, p, n), j);
	LLVMValueRef id = ec_load_as(cg, ix, io, FJ_DT_I64);
	fj_cg_if c;
	guard_index(cg, k, &c, out_of_range(cg, id, dsize(cg, x, d)));
	LLVMValueRef xo = ec_add(cg, xbase, ec_mul(cg, id, dstride(cg, x, d)));
	if (r && last != d)
		xo = ec_add(cg, xo, ec_mul(cg, j, x->stride[last]));
	fj_cg_store(cg, out, io, fj_cg_load(cg, x, xo));
	fj_cg_if_end(cg, &c);
	fj_cg_loop_end(cg, &l);
	fj_cg_loop_end(cg, &lo);
	fj_cg_if_end(cg, &ok);
	return cg->st;
}

/* scatter_add(self, index, src){dim}, index_add(self, index, source){dim,
 * alpha}: parallel over the result's dims other than dim. */
static fj_status emit_scatter(fj_cg *cg, fj_cg_kernel *k, bool index_add)
{
	const fj_cg_tensor *x = &k->in[0].t, *ix = &k->in[1].t, *src = &k->in[2].t, *out = &k->out[0];
	int r = x->rank, d = ec_dim(ec_attr_int(cg, k, "dim", 0), r);
	uint32_t dmask = r ? 1u << d : 0;
	k->par_out = 0;
	k->par_mask = r ? ((1u << r) - 1) & ~dmask : 0;
	fj_dtype cdt = fj_cg_compute_dtype(out->dtype);
	const fj_attr *al = index_add ? ec_attr(cg, k, "alpha") : NULL;
	bool scaled = al && !ec_attr_none(al) &&
	              !(al->kind == FJ_AK_INT ? al->u.i == 1 : al->kind == FJ_AK_FLOAT ? al->u.f == 1.0 : al->u.b);
	LLVMValueRef alpha = NULL;
	if (scaled)
		alpha = fj_cg_const(cg, out->dtype, fj_attr_as_float(al), fj_attr_as_int(al));

	/* Run-time shape checks (symbolic sizes). */
	LLVMValueRef badshape;
	if (index_add)
		badshape = src->rank == r && r ? ec_or(cg, larger(cg, src, x, d), ec_icmp(cg, LLVMIntSLT, src->dim[d], ix->numel))
		                               : ec_icmp(cg, LLVMIntSLT, src->numel, ix->numel);
	else
		badshape = ec_or(cg, larger(cg, ix, x, d), larger(cg, ix, src, -1));
	fj_cg_if ok;
	fj_cg_if_begin(cg, &ok, badshape);
	ec_fail(cg, k, FJ_KERR_INDEX);
	fj_cg_if_else(cg, &ok);

	fj_cg_loop lo, l;
	LLVMValueRef q = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef co[FJ_MAX_RANK], dims[FJ_MAX_RANK];
	int map[FJ_MAX_RANK], n = 0;
	for (int e = 0; e < r; e++)
		if (e != d) {
			map[n] = e;
			dims[n++] = x->dim[e];
		}
	if (n)
		fj_cg_unravel(cg, q, dims, n, co);
	LLVMValueRef ob = fj_cg_i64(cg, 0), ib = fj_cg_i64(cg, 0), sb = fj_cg_i64(cg, 0);
	LLVMValueRef inside = LLVMConstInt(cg->t_i1, 1, 0);
	for (int e = 0; e < n; e++) {
		ob = ec_add(cg, ob, ec_mul(cg, co[e], x->stride[map[e]]));
		if (!index_add) {
			ib = ec_add(cg, ib, ec_mul(cg, co[e], ix->stride[map[e]]));
			inside = ec_and(cg, inside, ec_icmp(cg, LLVMIntSLT, co[e], ix->dim[map[e]]));
		}
		if (src->rank == r)
			sb = ec_add(cg, sb, ec_mul(cg, co[e], src->stride[map[e]]));
	}
	LLVMValueRef S = dsize(cg, x, d), st = dstride(cg, x, d);
	/* copy self's slice */
	LLVMValueRef j = ec_for(cg, &l, fj_cg_i64(cg, 0), S);
	LLVMValueRef off = ec_add(cg, ob, ec_mul(cg, j, st));
	fj_cg_store(cg, out, off, fj_cg_load(cg, x, off));
	fj_cg_loop_end(cg, &l);
	/* accumulate */
	fj_cg_if in;
	fj_cg_if_begin(cg, &in, inside);
	LLVMValueRef cnt = index_add ? ix->numel : dsize(cg, ix, d);
	j = ec_for(cg, &l, fj_cg_i64(cg, 0), cnt);
	LLVMValueRef id = ec_load_as(cg, ix, index_add ? j : ec_add(cg, ib, ec_mul(cg, j, dstride(cg, ix, d))),
	                             FJ_DT_I64);
	fj_cg_if c;
	guard_index(cg, k, &c, out_of_range(cg, id, S));
	LLVMValueRef so = ec_add(cg, sb, ec_mul(cg, j, src->rank == r ? dstride(cg, src, d) : fj_cg_i64(cg, 1)));
	LLVMValueRef v = fj_cg_load(cg, src, so);
	if (alpha)
		v = ec_mul_dt(cg, cdt, v, alpha);
	off = ec_add(cg, ob, ec_mul(cg, id, st));
	LLVMValueRef cur = fj_cg_load(cg, out, off);
	LLVMValueRef sum = out->dtype == FJ_DT_BOOL ? ec_or(cg, cur, v) : ec_add_dt(cg, cdt, cur, v);
	fj_cg_store(cg, out, off, sum);
	fj_cg_if_end(cg, &c);
	fj_cg_loop_end(cg, &l);
	fj_cg_if_end(cg, &in);
	fj_cg_loop_end(cg, &lo);
	fj_cg_if_end(cg, &ok);
	return cg->st;
}

/* embedding_dense_backward(grad_output [..., D], indices [...]){num_weights,
 * padding_idx, scale_grad_by_freq} -> [num_weights, D]. One part: zero, then
 * rows of grad_output added into the rows their indices name (in index
 * order); padding_idx (when >= 0) gets no gradient; scale_grad_by_freq
 * divides by the number of occurrences of the index. */
static fj_status emit_embedding_backward(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *g = &k->in[0].t, *ix = &k->in[1].t, *out = &k->out[0];
	int64_t pad = ec_attr_int(cg, k, "padding_idx", -1);
	bool freq = ec_attr_bool(cg, k, "scale_grad_by_freq", false);
	k->par_out = 0;
	k->par_mask = 0;
	fj_dtype cdt = fj_cg_compute_dtype(out->dtype);
	LLVMValueRef V = out->dim[0], D = out->dim[1];
	fj_cg_loop lo, l, l2;
	LLVMValueRef i = ec_for(cg, &lo, fj_cg_i64(cg, 0), out->numel);
	fj_cg_store(cg, out, i, fj_cg_const(cg, out->dtype, 0, 0));
	fj_cg_loop_end(cg, &lo);
	/* grad_output rows must match the indices */
	fj_cg_if ok;
	fj_cg_if_begin(cg, &ok, ec_icmp(cg, LLVMIntNE, ec_mul(cg, ix->numel, D), g->numel));
	ec_fail(cg, k, FJ_KERR_INDEX);
	fj_cg_if_else(cg, &ok);
	i = ec_for(cg, &lo, fj_cg_i64(cg, 0), ix->numel);
	LLVMValueRef id = ec_load_as(cg, ix, i, FJ_DT_I64);
	fj_cg_if c, cp;
	guard_index(cg, k, &c, out_of_range(cg, id, V));
	fj_cg_if_begin(cg, &cp, pad >= 0 ? ec_icmp(cg, LLVMIntNE, id, fj_cg_i64(cg, pad)) : LLVMConstInt(cg->t_i1, 1, 0));
	LLVMValueRef scale = NULL;
	if (freq) {
		LLVMValueRef cv = fj_cg_var(cg, cg->t_i64, fj_cg_i64(cg, 0), "count");
		LLVMValueRef i2 = ec_for(cg, &l2, fj_cg_i64(cg, 0), ix->numel);
		LLVMValueRef eq = ec_icmp(cg, LLVMIntEQ, ec_load_as(cg, ix, i2, FJ_DT_I64), id);
		fj_cg_set(cg, cv, ec_add(cg, fj_cg_get(cg, cv, cg->t_i64), LLVMBuildZExt(cg->b, eq, cg->t_i64, "")));
		fj_cg_loop_end(cg, &l2);
		scale = fj_cg_convert(cg, fj_cg_get(cg, cv, cg->t_i64), FJ_DT_I64, cdt);
	}
	LLVMValueRef j = ec_for(cg, &l, fj_cg_i64(cg, 0), D);
	LLVMValueRef v = fj_cg_load(cg, g, ec_add(cg, ec_mul(cg, i, D), j));
	if (scale)
		v = fj_dtype_is_float(cdt) ? ec_fdiv(cg, v, scale) : LLVMBuildSDiv(cg->b, v, scale, "");
	LLVMValueRef off = ec_add(cg, ec_mul(cg, id, D), j);
	fj_cg_store(cg, out, off, ec_add_dt(cg, cdt, fj_cg_load(cg, out, off), v));
	fj_cg_loop_end(cg, &l);
	fj_cg_if_end(cg, &cp);
	fj_cg_if_end(cg, &c);
	fj_cg_loop_end(cg, &lo);
	fj_cg_if_end(cg, &ok);
	return cg->st;
}

fj_status fj_cg_emit_index(fj_cg *cg, fj_cg_kernel *k)
{
	switch (k->node->op) {
	case FJ_OP_ATEN_EMBEDDING:
	case FJ_OP_ATEN_INDEX_SELECT:
	case FJ_OP_PRIMS_TAKE: return emit_take(cg, k);
	case FJ_OP_ATEN_GATHER:
	case FJ_OP_PRIMS_GATHER: return emit_gather(cg, k);
	case FJ_OP_ATEN_SCATTER_ADD:
	case FJ_OP_PRIMS_SCATTER_ADD: return emit_scatter(cg, k, false);
	case FJ_OP_ATEN_INDEX_ADD:
	case FJ_OP_PRIMS_INDEX_ADD: return emit_scatter(cg, k, true);
	case FJ_OP_ATEN_EMBEDDING_DENSE_BACKWARD: return emit_embedding_backward(cg, k);
	default:
		return fj_cg_error(cg, FJ_ERR_INTERNAL, k->node, "%s is not an indexing op", fj_op_name(k->node->op));
	}
}
