/* emit_matmul.c -- the reference executor's kernels for matrix products:
 * mm, bmm, addmm, matmul (torch.matmul: 1-d operands, broadcast batch dims),
 * linear, prims.matmul. No BLAS.
 *
 * Every op becomes one batched GEMM: out[b, m, n] = epilogue(sum_k A[b, m, k]
 * * B[b, k, n]) with A rows contiguous in k, the epilogue alpha * acc + beta
 * * bias[m, n] (addmm's self with beta, linear's bias; beta = 0 ignores self,
 * NaNs included, as PyTorch). Accumulation: f64 for every float dtype (the
 * reference: f32 results are correctly rounded sums for all practical
 * purposes), i64 for integers.
 *
 * Parallel space: the result's rows (its dims but the last when the result
 * has an N dim; batch dims included). Rows are processed 4 at a time
 * (register blocking: each B element loaded feeds 4 rows). Two inner forms:
 *   - B row-major over n ([K, N]: mm, bmm, addmm, matmul, prims.matmul): an
 *     "axpy" form over a tile of up to 256 outputs of the row, accumulators
 *     in a stack array; the unit-stride inner loop is vectorised by LLVM;
 *   - B contiguous over k (linear's weight [N, K], matmul by a vector): a
 *     "dot" form with explicit <8 x double> accumulators (llvm.fmuladd),
 *     reduced in order at the end, then a scalar tail. */
#include "codegen/emit_common.h"

enum { MB = 4, NT = 256, VW = 8 };

typedef struct gemm {
	const fj_cg_tensor *a, *b, *out;
	const fj_cg_operand *bias; /* NULL: none */
	fj_dtype acc;
	bool dot;                  /* B contiguous over k */
	double alpha, beta;
	int64_t alpha_i, beta_i;
	LLVMValueRef M, N, K;
	LLVMValueRef a_sm, b_sk, b_sn;
	int nb;                    /* batch rank of the result */
	const fj_cg_tensor *obat;  /* the result (its first nb dims are the batch) */
	fj_cg_tensor abat, bbat;   /* batch views of a and b (rank 0: none) */
} gemm;

static LLVMValueRef fmuladd(fj_cg *cg, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
	LLVMTypeRef ty = LLVMTypeOf(a);
	unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, &ty, 1);
	LLVMValueRef args[3] = {a, b, c};
	return LLVMBuildCall2(cg->b, LLVMIntrinsicGetType(cg->llctx, id, &ty, 1), f, args, 3, "");
}

/* acc + a * b in the accumulator type. */
static LLVMValueRef mac(fj_cg *cg, const gemm *g, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b)
{
	if (fj_dtype_is_float(g->acc))
		return fmuladd(cg, a, b, acc);
	return ec_add(cg, acc, ec_mul(cg, a, b));
}

/* Loads VW consecutive elements of t from `off` as <VW x double>. */
static LLVMValueRef vload(fj_cg *cg, const fj_cg_tensor *t, LLVMValueRef off)
{
	LLVMTypeRef st = fj_cg_storage_type(cg, t->dtype);
	LLVMValueRef p = LLVMBuildInBoundsGEP2(cg->b, st, t->ptr, &off, 1, "");
	LLVMValueRef v = LLVMBuildLoad2(cg->b, LLVMVectorType(st, VW), p, "");
	LLVMSetAlignment(v, (unsigned)fj_dtype_size(t->dtype));
	LLVMTypeRef vd = LLVMVectorType(cg->t_f64, VW);
	switch (t->dtype) {
	case FJ_DT_F64: return v;
	case FJ_DT_BF16: {
		LLVMValueRef u = LLVMBuildZExt(cg->b, v, LLVMVectorType(cg->t_i32, VW), "");
		LLVMValueRef c16[VW];
		for (int i = 0; i < VW; i++)
			c16[i] = LLVMConstInt(cg->t_i32, 16, 0);
		u = LLVMBuildShl(cg->b, u, LLVMConstVector(c16, VW), "");
		u = LLVMBuildBitCast(cg->b, u, LLVMVectorType(cg->t_f32, VW), "");
		return LLVMBuildFPExt(cg->b, u, vd, "");
	}
	default: return LLVMBuildFPExt(cg->b, v, vd, ""); /* f32, f16 */
	}
}

/* Offsets of batch element bi in a and b. */
static void batch_offsets(fj_cg *cg, const gemm *g, LLVMValueRef bi, LLVMValueRef *ao, LLVMValueRef *bo)
{
	*ao = *bo = fj_cg_i64(cg, 0);
	if (g->nb == 0)
		return;
	LLVMValueRef idx[FJ_MAX_RANK];
	fj_cg_unravel(cg, bi, g->obat->dim, g->nb, idx);
	if (g->abat.rank)
		*ao = fj_cg_bcast_offset(cg, &g->abat, idx, g->nb);
	if (g->bbat.rank)
		*bo = fj_cg_bcast_offset(cg, &g->bbat, idx, g->nb);
}

/* Applies the epilogue to acc for output (m, n) and stores it at `off`. */
static void finish(fj_cg *cg, const gemm *g, LLVMValueRef acc, LLVMValueRef m, LLVMValueRef n, LLVMValueRef off)
{
	if (g->alpha != 1.0)
		acc = ec_mul_dt(cg, g->acc, acc, fj_cg_const(cg, g->acc, g->alpha, g->alpha_i));
	if (g->bias && g->beta != 0.0) {
		LLVMValueRef bv;
		if (g->bias->literal) {
			bv = fj_cg_literal(cg, &g->bias->lit, g->acc);
		} else {
			LLVMValueRef idx[2] = {m, n};
			LLVMValueRef bo = fj_cg_bcast_offset(cg, &g->bias->t, idx, 2);
			bv = ec_load_as(cg, &g->bias->t, bo, g->acc);
		}
		if (g->beta != 1.0)
			bv = ec_mul_dt(cg, g->acc, bv, fj_cg_const(cg, g->acc, g->beta, g->beta_i));
		acc = ec_add_dt(cg, g->acc, acc, bv);
	}
	ec_store_from(cg, g->out, off, acc, g->acc);
}

/* Rows m .. m+mb-1 of batch bi. */
static void emit_rows(fj_cg *cg, const gemm *g, LLVMValueRef bi, LLVMValueRef m, int mb)
{
	LLVMTypeRef at = ec_type(cg, g->acc);
	LLVMValueRef abase, bbase;
	batch_offsets(cg, g, bi, &abase, &bbase);
	LLVMValueRef arow[MB], orow[MB], mr[MB];
	for (int r = 0; r < mb; r++) {
		mr[r] = ec_add(cg, m, fj_cg_i64(cg, r));
		arow[r] = ec_add(cg, abase, ec_mul(cg, mr[r], g->a_sm));
		orow[r] = ec_mul(cg, ec_add(cg, ec_mul(cg, bi, g->M), mr[r]), g->N);
	}
	LLVMValueRef zero = fj_cg_const(cg, g->acc, 0, 0);
	if (!g->dot) {
		LLVMTypeRef arr = LLVMArrayType(at, NT);
		LLVMValueRef accs[MB];
		for (int r = 0; r < mb; r++)
			accs[r] = fj_cg_var(cg, arr, NULL, "acc");
		LLVMValueRef ntiles = ec_div(cg, ec_add(cg, g->N, fj_cg_i64(cg, NT - 1)), fj_cg_i64(cg, NT));
		fj_cg_loop lt, lj, lk;
		LLVMValueRef t = ec_for(cg, &lt, fj_cg_i64(cg, 0), ntiles);
		LLVMValueRef n0 = ec_mul(cg, t, fj_cg_i64(cg, NT));
		LLVMValueRef nt = ec_min(cg, fj_cg_i64(cg, NT), ec_sub(cg, g->N, n0));
#define ACC(r, j) LLVMBuildInBoundsGEP2(cg->b, arr, accs[r], (LLVMValueRef[]){fj_cg_i64(cg, 0), (j)}, 2, "")
		LLVMValueRef j = ec_for(cg, &lj, fj_cg_i64(cg, 0), nt);
		for (int r = 0; r < mb; r++)
			LLVMBuildStore(cg->b, zero, ACC(r, j));
		fj_cg_loop_end(cg, &lj);
		LLVMValueRef kk = ec_for(cg, &lk, fj_cg_i64(cg, 0), g->K);
		LLVMValueRef av[MB];
		for (int r = 0; r < mb; r++)
			av[r] = ec_load_as(cg, g->a, ec_add(cg, arow[r], kk), g->acc);
		LLVMValueRef brow = ec_add(cg, ec_add(cg, bbase, ec_mul(cg, kk, g->b_sk)), n0);
		j = ec_for(cg, &lj, fj_cg_i64(cg, 0), nt);
		LLVMValueRef bv = ec_load_as(cg, g->b, ec_add(cg, brow, j), g->acc);
		for (int r = 0; r < mb; r++) {
			LLVMValueRef p = ACC(r, j);
			LLVMBuildStore(cg->b, mac(cg, g, LLVMBuildLoad2(cg->b, at, p, ""), av[r], bv), p);
		}
		fj_cg_loop_end(cg, &lj);
		fj_cg_loop_end(cg, &lk);
		j = ec_for(cg, &lj, fj_cg_i64(cg, 0), nt);
		LLVMValueRef n = ec_add(cg, n0, j);
		for (int r = 0; r < mb; r++)
			finish(cg, g, LLVMBuildLoad2(cg->b, at, ACC(r, j), ""), mr[r], n, ec_add(cg, orow[r], n));
		fj_cg_loop_end(cg, &lj);
#undef ACC
		fj_cg_loop_end(cg, &lt);
		return;
	}
	/* dot form: B[k, n] at bbase + n * b_sn + k */
	bool vec = fj_dtype_is_float(g->a->dtype) && g->acc == FJ_DT_F64;
	LLVMTypeRef vt = LLVMVectorType(cg->t_f64, VW);
	LLVMValueRef vacc[MB], sacc[MB];
	for (int r = 0; r < mb; r++) {
		vacc[r] = vec ? fj_cg_var(cg, vt, NULL, "vacc") : NULL;
		sacc[r] = fj_cg_var(cg, at, NULL, "sacc");
	}
	LLVMValueRef kv = vec ? ec_div(cg, g->K, fj_cg_i64(cg, VW)) : fj_cg_i64(cg, 0);
	LLVMValueRef kt = ec_mul(cg, kv, fj_cg_i64(cg, VW));
	fj_cg_loop ln, lk;
	LLVMValueRef n = ec_for(cg, &ln, fj_cg_i64(cg, 0), g->N);
	LLVMValueRef bcol = ec_add(cg, bbase, ec_mul(cg, n, g->b_sn));
	for (int r = 0; r < mb; r++) {
		if (vec)
			fj_cg_set(cg, vacc[r], LLVMConstNull(vt));
		fj_cg_set(cg, sacc[r], zero);
	}
	if (vec) {
		LLVMValueRef kb = ec_for(cg, &lk, fj_cg_i64(cg, 0), kv);
		LLVMValueRef k0 = ec_mul(cg, kb, fj_cg_i64(cg, VW));
		LLVMValueRef bvv = vload(cg, g->b, ec_add(cg, bcol, k0));
		for (int r = 0; r < mb; r++) {
			LLVMValueRef avv = vload(cg, g->a, ec_add(cg, arow[r], k0));
			fj_cg_set(cg, vacc[r], fmuladd(cg, avv, bvv, fj_cg_get(cg, vacc[r], vt)));
		}
		fj_cg_loop_end(cg, &lk);
	}
	LLVMValueRef kk = ec_for(cg, &lk, kt, g->K);
	LLVMValueRef bv = ec_load_as(cg, g->b, ec_add(cg, bcol, kk), g->acc);
	for (int r = 0; r < mb; r++)
		fj_cg_set(cg, sacc[r], mac(cg, g, fj_cg_get(cg, sacc[r], at), ec_load_as(cg, g->a, ec_add(cg, arow[r], kk), g->acc), bv));
	fj_cg_loop_end(cg, &lk);
	for (int r = 0; r < mb; r++) {
		LLVMValueRef s = zero;
		if (vec) {
			LLVMValueRef v = fj_cg_get(cg, vacc[r], vt);
			for (int i = 0; i < VW; i++)
				s = ec_fadd(cg, s, LLVMBuildExtractElement(cg->b, v, fj_cg_i32(cg, i), ""));
		}
		s = ec_add_dt(cg, g->acc, s, fj_cg_get(cg, sacc[r], at));
		finish(cg, g, s, mr[r], n, ec_add(cg, orow[r], n));
	}
	fj_cg_loop_end(cg, &ln);
}

/* Rows [lo, hi) of the Bt * M row space, in blocks of MB rows of one batch. */
static void emit_gemm(fj_cg *cg, fj_cg_kernel *k, const gemm *g)
{
	fj_cg_if nonempty;
	fj_cg_if_begin(cg, &nonempty, ec_icmp(cg, LLVMIntSLT, k->lo, k->hi));
	LLVMValueRef M = g->M, mbc = fj_cg_i64(cg, MB);
	LLVMValueRef nblk = ec_div(cg, ec_add(cg, M, fj_cg_i64(cg, MB - 1)), mbc);
	LLVMValueRef last = ec_sub(cg, k->hi, fj_cg_i64(cg, 1));
	LLVMValueRef blo = ec_add(cg, ec_mul(cg, ec_div(cg, k->lo, M), nblk), ec_div(cg, ec_rem(cg, k->lo, M), mbc));
	LLVMValueRef bhi = ec_add(cg, ec_add(cg, ec_mul(cg, ec_div(cg, last, M), nblk), ec_div(cg, ec_rem(cg, last, M), mbc)),
	                          fj_cg_i64(cg, 1));
	fj_cg_loop lb, lr;
	LLVMValueRef gb = ec_for(cg, &lb, blo, bhi);
	LLVMValueRef bi = ec_div(cg, gb, nblk);
	LLVMValueRef m0 = ec_mul(cg, ec_rem(cg, gb, nblk), mbc);
	LLVMValueRef rb = ec_mul(cg, bi, M);
	LLVMValueRef r0 = ec_add(cg, rb, m0);
	LLVMValueRef r1 = ec_min(cg, ec_add(cg, r0, mbc), ec_add(cg, rb, M));
	LLVMValueRef s = LLVMBuildSelect(cg->b, ec_icmp(cg, LLVMIntSLT, r0, k->lo), k->lo, r0, "");
	LLVMValueRef e = ec_min(cg, r1, k->hi);
	fj_cg_if full;
	fj_cg_if_begin(cg, &full, ec_icmp(cg, LLVMIntEQ, ec_sub(cg, e, s), mbc));
	emit_rows(cg, g, bi, ec_sub(cg, s, rb), MB);
	fj_cg_if_else(cg, &full);
	LLVMValueRef r = ec_for(cg, &lr, s, e);
	emit_rows(cg, g, bi, ec_sub(cg, r, rb), 1);
	fj_cg_loop_end(cg, &lr);
	fj_cg_if_end(cg, &full);
	fj_cg_loop_end(cg, &lb);
	fj_cg_if_end(cg, &nonempty);
}

/* A view of t's first n dims (its batch dims). */
static fj_cg_tensor batch_view(const fj_cg_tensor *t, int n)
{
	fj_cg_tensor v = *t;
	v.rank = n > 0 ? n : 0;
	return v;
}

fj_status fj_cg_emit_matmul(fj_cg *cg, fj_cg_kernel *k)
{
	fj_op op = k->node->op;
	const fj_cg_tensor *out = &k->out[0];
	gemm g = {0};
	g.out = out;
	g.alpha = 1.0;
	g.alpha_i = 1;
	g.beta = 1.0;
	g.beta_i = 1;
	if (!fj_dtype_is_float(out->dtype) && !fj_dtype_is_int(out->dtype))
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, k->node, "%s: no %s matrix product", fj_op_name(op),
		                   fj_dtype_name(out->dtype));
	g.acc = ec_acc_dtype(out->dtype);
	k->par_out = 0;
	if (op == FJ_OP_ATEN_LINEAR) {
		/* x [..., K] as [R, K]; B = weight^T (weight [N, K]) */
		const fj_cg_tensor *x = &k->in[0].t, *w = &k->in[1].t;
		g.a = x;
		g.b = w;
		g.K = x->dim[x->rank - 1];
		g.N = w->dim[0];
		g.M = ec_span(cg, x, 0, x->rank - 1);
		g.a_sm = g.K;
		g.b_sk = fj_cg_i64(cg, 1);
		g.b_sn = w->stride[0];
		g.dot = true;
		if (k->nin > 2 && !k->in[2].none)
			g.bias = &k->in[2];
		k->par_mask = out->rank > 1 ? (1u << (out->rank - 1)) - 1 : 0;
		emit_gemm(cg, k, &g);
		return cg->st;
	}
	uint32_t ia = 0, ib = 1;
	if (op == FJ_OP_ATEN_ADDMM) {
		ia = 1;
		ib = 2;
		const fj_attr *al = ec_attr(cg, k, "alpha"), *be = ec_attr(cg, k, "beta");
		if (!ec_attr_none(al)) {
			g.alpha = fj_attr_as_float(al);
			g.alpha_i = fj_attr_as_int(al);
		}
		if (!ec_attr_none(be)) {
			g.beta = fj_attr_as_float(be);
			g.beta_i = fj_attr_as_int(be);
		}
		g.bias = &k->in[0];
	} else if (op != FJ_OP_ATEN_MM && op != FJ_OP_ATEN_BMM && op != FJ_OP_ATEN_MATMUL && op != FJ_OP_PRIMS_MATMUL) {
		return fj_cg_error(cg, FJ_ERR_INTERNAL, k->node, "%s is not a matrix product", fj_op_name(op));
	}
	const fj_cg_tensor *a = &k->in[ia].t, *b = &k->in[ib].t;
	int ra = a->rank, rb = b->rank;
	g.a = a;
	g.b = b;
	g.K = a->dim[ra - 1];
	g.M = ra >= 2 ? a->dim[ra - 2] : fj_cg_i64(cg, 1);
	g.a_sm = ra >= 2 ? a->stride[ra - 2] : fj_cg_i64(cg, 0);
	if (rb >= 2) {
		g.N = b->dim[rb - 1];
		g.b_sk = b->stride[rb - 2];
		g.b_sn = fj_cg_i64(cg, 1);
		g.dot = false;
	} else {
		g.N = fj_cg_i64(cg, 1);
		g.b_sk = fj_cg_i64(cg, 1);
		g.b_sn = fj_cg_i64(cg, 0);
		g.dot = true;
	}
	g.nb = out->rank - (ra >= 2) - (rb >= 2);
	g.obat = out;
	g.abat = batch_view(a, ra - 2);
	g.bbat = batch_view(b, rb - 2);
	bool has_n = rb >= 2;
	k->par_mask = has_n ? (out->rank > 1 ? (1u << (out->rank - 1)) - 1 : 0) : (out->rank ? (1u << out->rank) - 1 : 0);
	emit_gemm(cg, k, &g);
	return cg->st;
}
