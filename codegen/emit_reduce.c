/* emit_reduce.c -- the reference executor's kernels for reductions (aten sum
 * mean amax amin prod logsumexp var var_mean argmax argmin; prims sum amax
 * amin prod var_mean argmax argmin) and cumsum (aten, prims).
 *
 * One kernel per node. The parallel index space is the result's elements
 * (par_out 0, every dim of the result); each result element is computed by a
 * nest of loops over the reduced dims of the input, in row-major order.
 * Accumulation: floats in f64 (then rounded once to the result dtype),
 * integers and bools in i64. var/var_mean: two passes in f64 (mean, then the
 * sum of squared deviations). logsumexp: max-shifted, as ATen (a +-inf max is
 * replaced by 0). amax/amin and argmax/argmin propagate NaN (argmax/argmin:
 * the first NaN, else the first extremum). Empty reductions: sum 0, prod 1,
 * mean/var NaN, logsumexp -inf, amax/amin/argmax/argmin FJ_KERR_VALUE (an
 * error in PyTorch).
 *
 * Reductions that keep the input's last dim (sum/mean/prod/amax/amin over
 * outer dims) take a chunked path instead: up to 256 neighbouring results at
 * once, reduced dims outside, results inside with unit stride (same order of
 * accumulation per result, cache-friendly).
 *
 * cumsum: parallel over every dim but `dim`; a sequential scan along `dim`
 * with an f64 (float) or i64 (integer) running sum. */
#include <math.h>

#include "codegen/emit_common.h"

typedef enum red_kind { RK_SUM, RK_MEAN, RK_MAX, RK_MIN, RK_PROD, RK_LSE, RK_VAR, RK_ARGMAX, RK_ARGMIN } red_kind;

static bool red_kind_of(fj_op op, red_kind *rk)
{
	switch (op) {
	case FJ_OP_ATEN_SUM: case FJ_OP_PRIMS_SUM: *rk = RK_SUM; return true;
	case FJ_OP_ATEN_MEAN: *rk = RK_MEAN; return true;
	case FJ_OP_ATEN_AMAX: case FJ_OP_PRIMS_AMAX: *rk = RK_MAX; return true;
	case FJ_OP_ATEN_AMIN: case FJ_OP_PRIMS_AMIN: *rk = RK_MIN; return true;
	case FJ_OP_ATEN_PROD: case FJ_OP_PRIMS_PROD: *rk = RK_PROD; return true;
	case FJ_OP_ATEN_LOGSUMEXP: *rk = RK_LSE; return true;
	case FJ_OP_ATEN_VAR: case FJ_OP_ATEN_VAR_MEAN: case FJ_OP_PRIMS_VAR_MEAN: *rk = RK_VAR; return true;
	case FJ_OP_ATEN_ARGMAX: case FJ_OP_PRIMS_ARGMAX: *rk = RK_ARGMAX; return true;
	case FJ_OP_ATEN_ARGMIN: case FJ_OP_PRIMS_ARGMIN: *rk = RK_ARGMIN; return true;
	default: return false;
	}
}

/* Is x a "better" extremum than best? (max: x > best; min: x < best; a NaN
 * beats everything but a NaN.) Float or integer values of accumulator type. */
static LLVMValueRef better(fj_cg *cg, bool is_float, bool max, LLVMValueRef x, LLVMValueRef best)
{
	if (!is_float)
		return ec_icmp(cg, max ? LLVMIntSGT : LLVMIntSLT, x, best);
	LLVMValueRef c = LLVMBuildFCmp(cg->b, max ? LLVMRealOGT : LLVMRealOLT, x, best, "");
	LLVMValueRef nan = ec_and(cg, ec_isnan(cg, x), LLVMBuildNot(cg->b, ec_isnan(cg, best), ""));
	return ec_or(cg, c, nan);
}

/* Reductions that keep the input's last dim (sum over dim 0 of [R, C] ...):
 * up to OT consecutive results of one row of that dim at a time, their
 * accumulators in a stack array, the reduced dims looped outside and the
 * results inside, with unit stride (cache-friendly and vectorisable). The
 * order of accumulation per result is the same row-major order as the
 * general path. */
enum { OT = 256 };

static void emit_outer(fj_cg *cg, fj_cg_kernel *k, red_kind rk, uint32_t mask, fj_dtype edt, fj_dtype acc,
                       LLVMValueRef rsize)
{
	const fj_cg_tensor *x = &k->in[0].t, *out = &k->out[0];
	bool fl = fj_dtype_is_float(acc), max = rk == RK_MAX;
	LLVMTypeRef at = ec_type(cg, acc), arr = LLVMArrayType(at, OT);
	LLVMValueRef accs = fj_cg_var(cg, arr, NULL, "accs");
	LLVMValueRef L = x->dim[x->rank - 1];
	fj_cg_loop lo, lj;
	LLVMValueRef o = ec_for(cg, &lo, k->lo, k->hi);
	/* c = min(OT, hi - o, L - o % L): results o .. o+c-1 are contiguous */
	LLVMValueRef c = ec_min(cg, ec_min(cg, fj_cg_i64(cg, OT), ec_sub(cg, k->hi, o)), ec_sub(cg, L, ec_rem(cg, o, L)));
	LLVMValueRef base = ec_base_offset(cg, x, mask, o);
#define SLOT(j) LLVMBuildInBoundsGEP2(cg->b, arr, accs, (LLVMValueRef[]){fj_cg_i64(cg, 0), (j)}, 2, "")
	LLVMValueRef j = ec_for(cg, &lj, fj_cg_i64(cg, 0), c);
	LLVMValueRef init;
	if (rk == RK_MAX || rk == RK_MIN)
		init = fj_cg_convert(cg, ec_load_as(cg, x, ec_add(cg, base, j), edt), edt, acc);
	else
		init = fj_cg_const(cg, acc, rk == RK_PROD ? 1.0 : 0.0, rk == RK_PROD ? 1 : 0);
	LLVMBuildStore(cg->b, init, SLOT(j));
	fj_cg_loop_end(cg, &lj);
	ec_nest ns;
	ec_nest_begin(cg, &ns, x, mask, base);
	j = ec_for(cg, &lj, fj_cg_i64(cg, 0), c);
	LLVMValueRef v = fj_cg_convert(cg, ec_load_as(cg, x, ec_add(cg, ns.off, j), edt), edt, acc);
	LLVMValueRef p = SLOT(j), a = LLVMBuildLoad2(cg->b, at, p, ""), r;
	if (rk == RK_MAX || rk == RK_MIN)
		r = LLVMBuildSelect(cg->b, better(cg, fl, max, v, a), v, a, "");
	else if (rk == RK_PROD)
		r = ec_mul_dt(cg, acc, a, v);
	else
		r = ec_add_dt(cg, acc, a, v);
	LLVMBuildStore(cg->b, r, p);
	fj_cg_loop_end(cg, &lj);
	ec_nest_end(cg, &ns);
	j = ec_for(cg, &lj, fj_cg_i64(cg, 0), c);
	r = LLVMBuildLoad2(cg->b, at, SLOT(j), "");
	if (rk == RK_MEAN) {
		LLVMValueRef empty = ec_icmp(cg, LLVMIntEQ, rsize, fj_cg_i64(cg, 0));
		if (fl)
			r = ec_fdiv(cg, r, LLVMBuildUIToFP(cg->b, rsize, cg->t_f64, ""));
		else
			r = LLVMBuildSDiv(cg->b, r, LLVMBuildSelect(cg->b, empty, fj_cg_i64(cg, 1), rsize, ""), "");
	}
	ec_store_from(cg, out, ec_add(cg, o, j), r, acc);
	fj_cg_loop_end(cg, &lj);
#undef SLOT
	lo.step = c; /* the next chunk */
	fj_cg_loop_end(cg, &lo);
}

fj_status fj_cg_emit_reduction(fj_cg *cg, fj_cg_kernel *k)
{
	red_kind rk;
	if (!red_kind_of(k->node->op, &rk))
		return fj_cg_error(cg, FJ_ERR_INTERNAL, k->node, "%s is not a reduction", fj_op_name(k->node->op));
	const fj_cg_tensor *x = &k->in[0].t;
	const fj_cg_tensor *out = &k->out[0];
	int rank = x->rank;
	uint32_t mask;
	bool argred = rk == RK_ARGMAX || rk == RK_ARGMIN;
	if (argred) {
		const fj_attr *d = ec_attr(cg, k, "dim");
		mask = ec_attr_none(d) || rank == 0 ? (rank ? (1u << rank) - 1 : 0)
		                                     : 1u << ec_dim(fj_attr_as_int(d), rank);
	} else {
		mask = ec_dims_mask(cg, k, "dims", rank);
	}
	k->par_out = 0;
	k->par_mask = out->rank ? (1u << out->rank) - 1 : 0;

	/* The dtype elements are taken in before accumulating: the result dtype
	 * for sum/mean/prod/logsumexp (their `dtype` casts the input), the input
	 * dtype otherwise. */
	fj_dtype edt = (rk == RK_SUM || rk == RK_MEAN || rk == RK_PROD || rk == RK_LSE) ? out->dtype : x->dtype;
	fj_dtype acc = ec_acc_dtype(edt);
	bool fl = fj_dtype_is_float(edt);
	LLVMTypeRef at = ec_type(cg, acc);
	LLVMValueRef rsize = ec_extent(cg, x, mask);
	LLVMValueRef empty = ec_icmp(cg, LLVMIntEQ, rsize, fj_cg_i64(cg, 0));

	if (rk == RK_MAX || rk == RK_MIN || argred) {
		/* An empty reduction with results to produce is an error. */
		fj_cg_if c;
		fj_cg_if_begin(cg, &c, ec_and(cg, empty, ec_icmp(cg, LLVMIntSLT, k->lo, k->hi)));
		ec_fail(cg, k, FJ_KERR_VALUE);
		fj_cg_if_end(cg, &c);
	}
	fj_cg_if guard;
	bool guarded = rk == RK_MAX || rk == RK_MIN || argred;
	if (guarded)
		fj_cg_if_begin(cg, &guard, LLVMBuildNot(cg->b, empty, ""));

	if (rank && !(mask & (1u << (rank - 1))) && mask &&
	    (rk == RK_SUM || rk == RK_MEAN || rk == RK_PROD || rk == RK_MAX || rk == RK_MIN)) {
		emit_outer(cg, k, rk, mask, edt, acc, rsize);
		if (guarded)
			fj_cg_if_end(cg, &guard);
		return cg->st;
	}
	fj_cg_loop lo;
	LLVMValueRef o = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef base = ec_base_offset(cg, x, mask, o);
	LLVMValueRef accv = fj_cg_var(cg, at, NULL, "acc");
	ec_nest ns;
	switch (rk) {
	case RK_SUM:
	case RK_MEAN:
	case RK_PROD: {
		bool prod = rk == RK_PROD;
		fj_cg_set(cg, accv, fj_cg_const(cg, acc, prod ? 1.0 : 0.0, prod ? 1 : 0));
		ec_nest_begin(cg, &ns, x, mask, base);
		LLVMValueRef v = fj_cg_convert(cg, ec_load_as(cg, x, ns.off, edt), edt, acc);
		LLVMValueRef a = fj_cg_get(cg, accv, at);
		fj_cg_set(cg, accv, prod ? ec_mul_dt(cg, acc, a, v) : ec_add_dt(cg, acc, a, v));
		ec_nest_end(cg, &ns);
		LLVMValueRef r = fj_cg_get(cg, accv, at);
		if (rk == RK_MEAN) {
			if (fl)
				r = ec_fdiv(cg, r, LLVMBuildUIToFP(cg->b, rsize, cg->t_f64, ""));
			else /* mean of integers with an integer dtype: ATen needs a float dtype */
				r = LLVMBuildSDiv(cg->b, r, LLVMBuildSelect(cg->b, empty, fj_cg_i64(cg, 1), rsize, ""), "");
		}
		ec_store_from(cg, out, o, r, acc);
		break;
	}
	case RK_MAX:
	case RK_MIN: {
		bool max = rk == RK_MAX;
		fj_cg_set(cg, accv, fj_cg_convert(cg, ec_load_as(cg, x, base, edt), edt, acc));
		ec_nest_begin(cg, &ns, x, mask, base);
		LLVMValueRef v = fj_cg_convert(cg, ec_load_as(cg, x, ns.off, edt), edt, acc);
		LLVMValueRef a = fj_cg_get(cg, accv, at);
		fj_cg_set(cg, accv, LLVMBuildSelect(cg->b, better(cg, fl, max, v, a), v, a, ""));
		ec_nest_end(cg, &ns);
		ec_store_from(cg, out, o, fj_cg_get(cg, accv, at), acc);
		break;
	}
	case RK_ARGMAX:
	case RK_ARGMIN: {
		bool max = rk == RK_ARGMAX;
		LLVMValueRef bi = fj_cg_var(cg, cg->t_i64, fj_cg_i64(cg, 0), "best");
		fj_cg_set(cg, accv, fj_cg_convert(cg, ec_load_as(cg, x, base, edt), edt, acc));
		ec_nest_begin(cg, &ns, x, mask, base);
		/* The index: along the one reduced dim, or the flat index over all
		 * of them (then base is 0 and the offset is the flat index). */
		LLVMValueRef idx = ns.off;
		for (int d = 0; d < rank; d++)
			if (ns.iv[d] && mask == 1u << d)
				idx = ns.iv[d];
		LLVMValueRef v = fj_cg_convert(cg, ec_load_as(cg, x, ns.off, edt), edt, acc);
		LLVMValueRef a = fj_cg_get(cg, accv, at);
		LLVMValueRef c = better(cg, fl, max, v, a);
		fj_cg_set(cg, accv, LLVMBuildSelect(cg->b, c, v, a, ""));
		fj_cg_set(cg, bi, LLVMBuildSelect(cg->b, c, idx, fj_cg_get(cg, bi, cg->t_i64), ""));
		ec_nest_end(cg, &ns);
		ec_store_from(cg, out, o, fj_cg_get(cg, bi, cg->t_i64), FJ_DT_I64);
		break;
	}
	case RK_LSE: {
		/* m = max (NaN propagating); m = isinf(m) ? 0 : m;
		 * out = log(sum(exp(x - m))) + m */
		LLVMValueRef ninf = LLVMConstReal(cg->t_f64, -INFINITY);
		fj_cg_set(cg, accv, ninf);
		ec_nest_begin(cg, &ns, x, mask, base);
		LLVMValueRef v = fj_cg_convert(cg, ec_load_as(cg, x, ns.off, edt), edt, acc);
		LLVMValueRef a = fj_cg_get(cg, accv, at);
		fj_cg_set(cg, accv, LLVMBuildSelect(cg->b, better(cg, true, true, v, a), v, a, ""));
		ec_nest_end(cg, &ns);
		LLVMValueRef m = fj_cg_get(cg, accv, at);
		LLVMValueRef absm = LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOLT, m, ec_fconst(cg, m, 0), ""),
		                                    LLVMBuildFNeg(cg->b, m, ""), m, "");
		LLVMValueRef isinf = LLVMBuildFCmp(cg->b, LLVMRealOEQ, absm, ec_fconst(cg, m, INFINITY), "");
		m = LLVMBuildSelect(cg->b, isinf, ec_fconst(cg, m, 0), m, "");
		fj_cg_set(cg, accv, ec_fconst(cg, m, 0));
		ec_nest_begin(cg, &ns, x, mask, base);
		v = fj_cg_convert(cg, ec_load_as(cg, x, ns.off, edt), edt, acc);
		LLVMValueRef e = fj_cg_math1(cg, FJ_MATH_EXP, ec_fsub(cg, v, m));
		fj_cg_set(cg, accv, ec_fadd(cg, fj_cg_get(cg, accv, at), e));
		ec_nest_end(cg, &ns);
		LLVMValueRef r = ec_fadd(cg, fj_cg_math1(cg, FJ_MATH_LOG, fj_cg_get(cg, accv, at)), m);
		ec_store_from(cg, out, o, r, acc);
		break;
	}
	case RK_VAR: {
		double corr = ec_attr_float(cg, k, "correction", 1.0);
		fj_cg_set(cg, accv, LLVMConstReal(cg->t_f64, 0));
		ec_nest_begin(cg, &ns, x, mask, base);
		LLVMValueRef v = ec_load_as(cg, x, ns.off, FJ_DT_F64);
		fj_cg_set(cg, accv, ec_fadd(cg, fj_cg_get(cg, accv, cg->t_f64), v));
		ec_nest_end(cg, &ns);
		LLVMValueRef n = LLVMBuildUIToFP(cg->b, rsize, cg->t_f64, "");
		LLVMValueRef mean = ec_fdiv(cg, fj_cg_get(cg, accv, cg->t_f64), n);
		fj_cg_set(cg, accv, LLVMConstReal(cg->t_f64, 0));
		ec_nest_begin(cg, &ns, x, mask, base);
		LLVMValueRef d = ec_fsub(cg, ec_load_as(cg, x, ns.off, FJ_DT_F64), mean);
		fj_cg_set(cg, accv, ec_fadd(cg, fj_cg_get(cg, accv, cg->t_f64), ec_fmul(cg, d, d)));
		ec_nest_end(cg, &ns);
		/* divisor max(N - correction, 0), as ATen */
		LLVMValueRef div = ec_fsub(cg, n, LLVMConstReal(cg->t_f64, corr));
		LLVMValueRef zero = LLVMConstReal(cg->t_f64, 0);
		div = LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOLT, div, zero, ""), zero, div, "");
		LLVMValueRef var = ec_fdiv(cg, fj_cg_get(cg, accv, cg->t_f64), div);
		ec_store_from(cg, out, o, var, FJ_DT_F64);
		if (k->nout > 1)
			ec_store_from(cg, &k->out[1], o, mean, FJ_DT_F64);
		break;
	}
	}
	fj_cg_loop_end(cg, &lo);
	if (guarded)
		fj_cg_if_end(cg, &guard);
	return cg->st;
}

fj_status fj_cg_emit_cumsum(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *x = &k->in[0].t;
	const fj_cg_tensor *out = &k->out[0];
	int rank = x->rank;
	int dim = ec_dim(ec_attr_int(cg, k, "dim", 0), rank);
	uint32_t mask = rank ? 1u << dim : 0;
	k->par_out = 0;
	k->par_mask = rank ? ((1u << rank) - 1) & ~mask : 0;
	fj_dtype edt = out->dtype, acc = ec_acc_dtype(edt);
	LLVMTypeRef at = ec_type(cg, acc);
	fj_cg_loop lo;
	LLVMValueRef o = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef base = ec_base_offset(cg, x, mask, o);
	LLVMValueRef accv = fj_cg_var(cg, at, fj_cg_const(cg, acc, 0, 0), "acc");
	LLVMValueRef len = rank ? x->dim[dim] : fj_cg_i64(cg, 1);
	LLVMValueRef stride = rank ? x->stride[dim] : fj_cg_i64(cg, 1);
	fj_cg_loop li;
	LLVMValueRef i = ec_for(cg, &li, fj_cg_i64(cg, 0), len);
	LLVMValueRef off = ec_add(cg, base, ec_mul(cg, i, stride));
	LLVMValueRef v = fj_cg_convert(cg, ec_load_as(cg, x, off, edt), edt, acc);
	LLVMValueRef a = ec_add_dt(cg, acc, fj_cg_get(cg, accv, at), v);
	fj_cg_set(cg, accv, a);
	ec_store_from(cg, out, off, a, acc);
	fj_cg_loop_end(cg, &li);
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}
