/* decompose_reduce.c -- decomposition rules of the reductions, the
 * normalizations (softmax, layer/rms/batch norm), the losses and the
 * backward ops of the normalizations and losses (IR.md §3).
 *
 * Reductions compute in the computation dtype (f16/bf16 sums in f32, ints
 * and bools in i64 as the aten result says) and reshape for keepdim.
 * softmax/log_softmax/logsumexp subtract the row max, {nograd}; layer_norm and batch_norm use
 * prims.var_mean (Welford-friendly); means over a static element count are
 * sum / count, over a symbolic one var_mean's mean. Formulas follow
 * torch._refs (softmax, layer_norm), torch._decomp (batch norm, nll_loss,
 * the backward ops) and ATen (rms_norm).
 *
 * nll_loss_forward picks the target's entry with prims.gather (ignored
 * targets read class 0 and are masked with where); nll_loss_backward builds
 * the one-hot gradient by comparing the target with prims.iota, which keeps
 * it pointwise (fusible) instead of a scatter. */
#include <float.h>
#include <string.h>

#include "passes/decompose.h"

static const fj_type *R0(fj_dec *d) { return fj_dec_rty(d, 0); }
static fj_vid c(fj_dec *d, double v, fj_vid like) { return fj_dec_const(d, v, like); }

static fj_status ok(fj_dec *d) { return fj_b_status(&d->b); }

/* Tensor operand i converted to dt (no broadcast); FJ_NOVAL when absent. */
static fj_vid in_as(fj_dec *d, uint32_t i, fj_dtype dt)
{
	fj_vid v = fj_dec_in(d, i);
	return v == FJ_NOVAL ? FJ_NOVAL : fj_dec_cvt(d, v, dt);
}

/* v (of x's reduced shape over mask, or of x's shape) finished as result i:
 * keepdim reshape, then the result dtype. */
static void finish(fj_dec *d, uint32_t i, fj_vid v, const fj_type *x, uint32_t mask, bool keepdim)
{
	if (keepdim)
		v = fj_dec_keepdim(d, v, x, mask);
	d->out[i] = fj_dec_cvt(d, v, fj_dec_rty(d, i)->dtype);
}

/* ---- reductions ---- */

static fj_status rule_reduce(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x);
	uint32_t mask = fj_dec_dims_mask(d, "dims", xt->rank);
	bool keep = fj_dec_bool(d, "keepdim");
	fj_dtype R = R0(d)->dtype, C = fj_dec_comp(R);
	fj_vid r;
	switch (d->n->op) {
	case FJ_OP_ATEN_SUM: r = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_cvt(d, x, C), mask); break;
	case FJ_OP_ATEN_PROD: r = fj_dec_reduce(d, FJ_OP_PRIMS_PROD, fj_dec_cvt(d, x, C), mask); break;
	case FJ_OP_ATEN_MEAN: r = fj_dec_mean(d, fj_dec_cvt(d, x, C), mask); break;
	case FJ_OP_ATEN_AMAX: r = fj_dec_reduce(d, FJ_OP_PRIMS_AMAX, x, mask); break;
	case FJ_OP_ATEN_AMIN: r = fj_dec_reduce(d, FJ_OP_PRIMS_AMIN, x, mask); break;
	default: return fj_dec_fail(d, "internal error: not a reduction");
	}
	finish(d, 0, r, xt, mask, keep);
	return ok(d);
}

/* The row max that softmax, log_softmax and logsumexp subtract for
 * stability, marked {nograd}: they are invariant under that shift, so its
 * gradient is exactly zero, and differentiating through amax would make the
 * backward keep x to find the argmax. */
static fj_vid stable_max(fj_dec *d, fj_vid x, uint32_t mask)
{
	fj_vid m = fj_dec_reduce(d, FJ_OP_PRIMS_AMAX, x, mask);
	if (m != FJ_NOVAL && m != x && d->g->values[m].kind == FJ_VK_RESULT &&
	    d->g->nodes[d->g->values[m].def].op == FJ_OP_PRIMS_AMAX)
		d->g->nodes[d->g->values[m].def].nograd = true;
	return m;
}

/* Whether a reduction over the dims in mask has no element to reduce (a
 * static size 0 among them). */
static bool reduces_nothing(const fj_type *t, uint32_t mask)
{
	for (int i = 0; i < t->rank; i++)
		if ((mask >> i & 1) && t->dims[i] == 0)
			return true;
	return false;
}

/* logsumexp: m = amax {nograd} (0 where infinite); log(sum(exp(x - m))) + m;
 * over an empty dim, log(sum(exp(x))) = -inf, with no row max (amax of nothing
 * is an error). */
static fj_status rule_logsumexp(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x0);
	uint32_t mask = fj_dec_dims_mask(d, "dims", xt->rank);
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid x = fj_dec_cvt(d, x0, C);
	if (reduces_nothing(xt, mask)) { /* log(0) = -inf, and no row max to take */
		fj_vid s = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_un(d, FJ_OP_PRIMS_EXP, x), mask);
		fj_vid r = fj_dec_un(d, FJ_OP_PRIMS_LOG, s);
		finish(d, 0, r, xt, mask, fj_dec_bool(d, "keepdim"));
		return ok(d);
	}
	fj_vid m = stable_max(d, x, mask);
	fj_vid inf = fj_dec_cmpc(d, FJ_OP_PRIMS_EQ, fj_dec_un(d, FJ_OP_PRIMS_ABS, m), 1.0 / 0.0);
	m = fj_dec_where(d, inf, c(d, 0, m), m);
	fj_vid e = fj_dec_un(d, FJ_OP_PRIMS_EXP, fj_dec_sub(d, x, fj_dec_unreduce(d, m, xt, mask)));
	fj_vid r = fj_dec_add(d, fj_dec_un(d, FJ_OP_PRIMS_LOG, fj_dec_reduce(d, FJ_OP_PRIMS_SUM, e, mask)), m);
	finish(d, 0, r, xt, mask, fj_dec_bool(d, "keepdim"));
	return ok(d);
}

/* var, var_mean: prims.var_mean{dims, correction} */
static fj_status rule_var(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x);
	uint32_t mask = fj_dec_dims_mask(d, "dims", xt->rank);
	fj_dtype C = fj_dec_comp(xt->dtype);
	fj_vid xc = fj_dec_cvt(d, x, C), res[2] = {xc, xc};
	if (mask) {
		int64_t dims[FJ_MAX_RANK];
		uint32_t n = 0;
		for (int k = 0; k < xt->rank; k++)
			if (mask & (1u << k))
				dims[n++] = k;
		fj_named_attr at[2] = {{"dims", fj_attr_ints(d->g, dims, n)}, {"correction", *fj_dec_attr(d, "correction")}};
		fj_b_op(&d->b, FJ_OP_PRIMS_VAR_MEAN, &xc, 1, at, 2, res, 2);
	} else {
		/* No dim reduced (a 0-d input): var of one element. */
		double corr = fj_dec_float(d, "correction");
		res[0] = fj_dec_div(d, fj_dec_const(d, 0, xc), fj_dec_const(d, 1 - corr, xc));
	}
	bool keep = fj_dec_bool(d, "keepdim");
	finish(d, 0, res[0], xt, mask, keep);
	if (d->n->nres > 1)
		finish(d, 1, res[1], xt, mask, keep);
	return ok(d);
}

/* argmax/argmin{dim?, keepdim}: no dim: over the flattened tensor. */
static fj_status rule_argmax(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x);
	fj_op op = d->n->op == FJ_OP_ATEN_ARGMAX ? FJ_OP_PRIMS_ARGMAX : FJ_OP_PRIMS_ARGMIN;
	int dim = 0;
	if (fj_dec_is_none(d, "dim") || xt->rank == 0) {
		fj_dim n;
		if (!fj_dim_product(d->m, xt->dims, xt->rank, &n))
			return fj_dec_fail(d, "the element count overflows");
		x = fj_dec_reshape(d, x, &n, 1);
	} else {
		dim = fj_dec_dim(fj_dec_int(d, "dim"), xt->rank);
	}
	fj_named_attr at = {"dim", fj_attr_int(dim)};
	fj_vid r = fj_dec_op(d, op, &x, 1, &at, 1);
	d->out[0] = fj_dec_reshape(d, r, R0(d)->dims, R0(d)->rank);
	return ok(d);
}

/* ---- softmax ---- */

/* The input of a softmax in its computation dtype: converted to the
 * requested dtype first (PyTorch rounds the input to it), then up. */
static fj_vid softmax_input(fj_dec *d, fj_dtype R)
{
	fj_vid x = fj_dec_in(d, 0);
	const fj_attr *dt = fj_dec_attr_opt(d, "dtype");
	if (dt && dt->kind == FJ_AK_DTYPE)
		x = fj_dec_cvt(d, x, R);
	return fj_dec_cvt(d, x, fj_dec_comp(R));
}

static fj_status rule_softmax(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_vid x = softmax_input(d, R);
	const fj_type *xt = fj_dec_ty(d, x);
	uint32_t mask = xt->rank ? 1u << fj_dec_dim(fj_dec_int(d, "dim"), xt->rank) : 0;
	bool log = d->n->op == FJ_OP_ATEN__LOG_SOFTMAX || d->n->op == FJ_OP_ATEN_LOG_SOFTMAX;
	int64_t n = fj_dec_count(xt, (1u << xt->rank) - 1);
	fj_vid shifted = x;
	if (n != 0) /* amax of an empty tensor is an error; exp of nothing is nothing */
		shifted = fj_dec_sub(d, x, fj_dec_unreduce(d, stable_max(d, x, mask), xt, mask));
	fj_vid e = fj_dec_un(d, FJ_OP_PRIMS_EXP, shifted);
	fj_vid s = fj_dec_unreduce(d, fj_dec_reduce(d, FJ_OP_PRIMS_SUM, e, mask), xt, mask);
	fj_vid y = log ? fj_dec_sub(d, shifted, fj_dec_un(d, FJ_OP_PRIMS_LOG, s)) : fj_dec_div(d, e, s);
	d->out[0] = fj_dec_cvt(d, y, R);
	return ok(d);
}

/* _softmax_backward_data: (g * y) - y * sum(g * y);
 * _log_softmax_backward_data: g - exp(y) * sum(g). */
static fj_status rule_softmax_backward(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_vid g = fj_dec_in(d, 0), y = fj_dec_in(d, 1);
	fj_dtype C = fj_dec_comp(fj_dec_ty(d, g)->dtype);
	g = fj_dec_cvt(d, g, C);
	y = fj_dec_cvt(d, y, C);
	const fj_type *yt = fj_dec_ty(d, y);
	uint32_t mask = yt->rank ? 1u << fj_dec_dim(fj_dec_int(d, "dim"), yt->rank) : 0;
	fj_vid r;
	if (d->n->op == FJ_OP_ATEN__SOFTMAX_BACKWARD_DATA) {
		fj_vid gy = fj_dec_mul(d, g, y);
		fj_vid s = fj_dec_unreduce(d, fj_dec_reduce(d, FJ_OP_PRIMS_SUM, gy, mask), yt, mask);
		r = fj_dec_sub(d, gy, fj_dec_mul(d, y, s));
	} else {
		fj_vid s = fj_dec_unreduce(d, fj_dec_reduce(d, FJ_OP_PRIMS_SUM, g, mask), yt, mask);
		r = fj_dec_sub(d, g, fj_dec_mul(d, fj_dec_un(d, FJ_OP_PRIMS_EXP, y), s));
	}
	d->out[0] = fj_dec_cvt(d, r, R);
	return ok(d);
}

/* ---- layer norm, rms norm ---- */

/* The trailing normalized dims of x. */
static uint32_t norm_mask(fj_dec *d, const fj_type *x)
{
	const fj_attr *ns = fj_dec_attr(d, "normalized_shape");
	uint32_t mask = 0;
	for (int k = x->rank - (int)ns->n; k < x->rank; k++)
		mask |= 1u << k;
	return mask;
}

/* w (of the normalized shape) broadcast to x's shape in dtype dt. */
static fj_vid trailing(fj_dec *d, fj_vid w, const fj_type *x, fj_dtype dt)
{
	if (w == FJ_NOVAL)
		return FJ_NOVAL;
	return fj_dec_bcast(d, fj_dec_cvt(d, w, dt), x->dims, x->rank);
}

/* native_layer_norm / layer_norm: biased var_mean over the normalized dims,
 * rstd = rsqrt(var + eps), out = (x - mean) * rstd [* w] [+ b]. */
static fj_status rule_layer_norm(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x0);
	fj_dtype C = fj_dec_comp(xt->dtype);
	uint32_t mask = norm_mask(d, xt);
	fj_vid x = fj_dec_cvt(d, x0, C);
	int64_t dims[FJ_MAX_RANK];
	uint32_t nd = 0;
	for (int k = 0; k < xt->rank; k++)
		if (mask & (1u << k))
			dims[nd++] = k;
	fj_named_attr at[2] = {{"dims", fj_attr_ints(d->g, dims, nd)}, {"correction", fj_attr_int(0)}};
	fj_vid vm[2] = {FJ_NOVAL, FJ_NOVAL};
	fj_b_op(&d->b, FJ_OP_PRIMS_VAR_MEAN, &x, 1, at, 2, vm, 2);
	fj_vid rstd = fj_dec_un(d, FJ_OP_PRIMS_RSQRT, fj_dec_addc(d, vm[0], fj_dec_float(d, "eps")));
	fj_vid out = fj_dec_mul(d, fj_dec_sub(d, x, fj_dec_unreduce(d, vm[1], xt, mask)),
	                        fj_dec_unreduce(d, rstd, xt, mask));
	fj_vid w = trailing(d, fj_dec_in(d, 1), xt, C), b = trailing(d, fj_dec_in(d, 2), xt, C);
	if (w != FJ_NOVAL)
		out = fj_dec_mul(d, out, w);
	if (b != FJ_NOVAL)
		out = fj_dec_add(d, out, b);
	d->out[0] = fj_dec_cvt(d, out, R0(d)->dtype);
	if (d->n->nres == 3) {
		finish(d, 1, vm[1], xt, mask, true);
		finish(d, 2, rstd, xt, mask, true);
	}
	return ok(d);
}

/* rms_norm: x * rsqrt(mean(x^2) + eps) [* w]; eps defaults to the machine
 * epsilon of the result dtype (IR.md §3: f16 2^-10, bf16 2^-7; ATen itself
 * takes the epsilon of its opmath type, f32's for f16/bf16). */
static fj_status rule_rms_norm(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x0);
	fj_dtype C = fj_dec_comp(xt->dtype);
	uint32_t mask = norm_mask(d, xt);
	fj_dtype R = R0(d)->dtype;
	double eps = R == FJ_DT_F64 ? DBL_EPSILON : R == FJ_DT_F16 ? 0x1p-10 : R == FJ_DT_BF16 ? 0x1p-7 : FLT_EPSILON;
	if (!fj_dec_is_none(d, "eps"))
		eps = fj_dec_float(d, "eps");
	fj_vid x = fj_dec_cvt(d, x0, C);
	fj_vid ms = fj_dec_mean(d, fj_dec_mul(d, x, x), mask);
	fj_vid r = fj_dec_un(d, FJ_OP_PRIMS_RSQRT, fj_dec_addc(d, ms, eps));
	fj_vid out = fj_dec_mul(d, x, fj_dec_unreduce(d, r, xt, mask));
	fj_vid w = trailing(d, fj_dec_in(d, 1), xt, C);
	if (w != FJ_NOVAL)
		out = fj_dec_mul(d, out, w);
	d->out[0] = fj_dec_cvt(d, out, R0(d)->dtype);
	return ok(d);
}

/* native_layer_norm_backward (torch._decomp): with xh = (x - mean) * rstd and
 * gh = g * w, d_input = rstd / N * (N * gh - sum(gh) - xh * sum(gh * xh)),
 * d_weight = sum over the outer dims of g * xh, d_bias = sum of g. */
static fj_status rule_layer_norm_backward(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 1);
	const fj_type *xt = fj_dec_ty(d, x0);
	fj_dtype C = fj_dec_comp(xt->dtype);
	uint32_t inner = norm_mask(d, xt), outer = (xt->rank ? (1u << xt->rank) - 1 : 0) & ~inner;
	const fj_attr *om = fj_dec_attr(d, "output_mask");
	bool want[3];
	for (int i = 0; i < 3; i++)
		want[i] = om->kind == FJ_AK_LIST && om->n == 3 && om->u.items[i].u.b;
	fj_vid g = in_as(d, 0, C), x = fj_dec_cvt(d, x0, C);
	fj_vid mean = fj_dec_bcast(d, in_as(d, 2, C), xt->dims, xt->rank);
	fj_vid rstd = fj_dec_bcast(d, in_as(d, 3, C), xt->dims, xt->rank);
	fj_vid w = trailing(d, fj_dec_in(d, 4), xt, C);
	fj_vid xh = fj_dec_mul(d, fj_dec_sub(d, x, mean), rstd);
	fj_vid gh = w != FJ_NOVAL ? fj_dec_mul(d, g, w) : g;
	int64_t n = fj_dec_count(xt, inner);
	for (int i = 0; i < 3; i++) {
		const fj_type *rt = fj_dec_rty(d, i);
		fj_vid r = FJ_NOVAL;
		bool have = want[i] && (i == 0 || fj_dec_in(d, 3 + i) != FJ_NOVAL);
		if (have && i == 0) {
			fj_vid inner_v;
			if (n >= 0) {
				fj_vid a = fj_dec_mulc(d, gh, (double)n);
				fj_vid b = fj_dec_unreduce(d, fj_dec_reduce(d, FJ_OP_PRIMS_SUM, gh, inner), xt, inner);
				fj_vid c2 = fj_dec_unreduce(d, fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_mul(d, gh, xh), inner), xt, inner);
				inner_v = fj_dec_sub(d, fj_dec_sub(d, a, b), fj_dec_mul(d, xh, c2));
				r = fj_dec_mul(d, fj_dec_div(d, rstd, c(d, (double)n, rstd)), inner_v);
			} else {
				fj_vid b = fj_dec_unreduce(d, fj_dec_mean(d, gh, inner), xt, inner);
				fj_vid c2 = fj_dec_unreduce(d, fj_dec_mean(d, fj_dec_mul(d, gh, xh), inner), xt, inner);
				inner_v = fj_dec_sub(d, fj_dec_sub(d, gh, b), fj_dec_mul(d, xh, c2));
				r = fj_dec_mul(d, rstd, inner_v);
			}
		} else if (have && i == 1) {
			r = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_mul(d, g, xh), outer);
		} else if (have && i == 2) {
			r = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, g, outer);
		} else {
			r = fj_dec_full(d, rt->dims, rt->rank, 0, rt->dtype);
		}
		d->out[i] = fj_dec_cvt(d, r, rt->dtype);
	}
	return ok(d);
}

/* ---- batch norm ---- */

/* v of shape [C] broadcast along dim 1 of x. */
static fj_vid chan(fj_dec *d, fj_vid v, const fj_type *x)
{
	return fj_dec_bcast_in(d, v, x->dims, x->rank, (int64_t[]){1});
}

/* native_batch_norm and _native_batch_norm_legit_functional
 * (torch._decomp's native_batch_norm_helper, CPU conventions: eval mode
 * saves size-0 statistics). */
static fj_status rule_batch_norm(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 0);
	const fj_type *xt = fj_dec_ty(d, x0);
	fj_dtype C = fj_dec_comp(xt->dtype);
	uint32_t red = ((1u << xt->rank) - 1) & ~2u;
	bool training = fj_dec_bool(d, "training");
	double momentum = fj_dec_float(d, "momentum"), eps = fj_dec_float(d, "eps");
	fj_vid x = fj_dec_cvt(d, x0, C);
	fj_vid rm = in_as(d, 3, C), rv = in_as(d, 4, C);
	fj_vid out, save_mean, save_rstd, new_rm = rm, new_rv = rv;
	if (training) {
		int64_t dims[FJ_MAX_RANK];
		uint32_t nd = 0;
		for (int k = 0; k < xt->rank; k++)
			if (red & (1u << k))
				dims[nd++] = k;
		fj_named_attr at[2] = {{"dims", fj_attr_ints(d->g, dims, nd)}, {"correction", fj_attr_int(0)}};
		fj_vid vm[2] = {FJ_NOVAL, FJ_NOVAL};
		fj_b_op(&d->b, FJ_OP_PRIMS_VAR_MEAN, &x, 1, at, 2, vm, 2);
		fj_vid rstd = fj_dec_un(d, FJ_OP_PRIMS_RSQRT, fj_dec_addc(d, vm[0], eps));
		out = fj_dec_mul(d, fj_dec_sub(d, x, chan(d, vm[1], xt)), chan(d, rstd, xt));
		save_mean = vm[1];
		save_rstd = rstd;
		if (rm != FJ_NOVAL)
			new_rm = fj_dec_add(d, fj_dec_mulc(d, save_mean, momentum), fj_dec_mulc(d, rm, 1 - momentum));
		if (rv != FJ_NOVAL) {
			int64_t n = fj_dec_count(xt, red);
			fj_vid unbiased;
			if (n >= 0) {
				unbiased = fj_dec_mulc(d, vm[0], (double)n / (double)(n - 1));
			} else {
				fj_named_attr at1[2] = {at[0], {"correction", fj_attr_int(1)}};
				fj_vid vm1[2] = {FJ_NOVAL, FJ_NOVAL};
				fj_b_op(&d->b, FJ_OP_PRIMS_VAR_MEAN, &x, 1, at1, 2, vm1, 2);
				unbiased = vm1[0];
			}
			new_rv = fj_dec_add(d, fj_dec_mulc(d, unbiased, momentum), fj_dec_mulc(d, rv, 1 - momentum));
		}
	} else {
		if (rm == FJ_NOVAL || rv == FJ_NOVAL)
			return fj_dec_fail(d, "running_mean and running_var are needed when not training");
		fj_vid invstd = fj_dec_div(d, c(d, 1, rv), fj_dec_un(d, FJ_OP_PRIMS_SQRT, fj_dec_addc(d, rv, eps)));
		out = fj_dec_mul(d, fj_dec_sub(d, x, chan(d, rm, xt)), chan(d, invstd, xt));
		const fj_type *st = fj_dec_rty(d, 1);
		save_mean = fj_dec_full(d, st->dims, st->rank, 0, st->dtype);
		save_rstd = fj_dec_full(d, st->dims, st->rank, 0, st->dtype);
	}
	fj_vid w = in_as(d, 1, C), b = in_as(d, 2, C);
	if (w != FJ_NOVAL)
		out = fj_dec_mul(d, out, chan(d, w, xt));
	if (b != FJ_NOVAL)
		out = fj_dec_add(d, out, chan(d, b, xt));
	fj_vid res[5] = {out, save_mean, save_rstd, new_rm, new_rv};
	for (uint32_t i = 0; i < d->n->nres; i++) {
		const fj_type *rt = fj_dec_rty(d, i);
		if (res[i] == FJ_NOVAL) /* no running statistics: ATen returns zeros of [C] */
			res[i] = fj_dec_full(d, rt->dims, rt->rank, 0, rt->dtype);
		d->out[i] = fj_dec_cvt(d, res[i], rt->dtype);
	}
	return ok(d);
}

/* native_batch_norm_backward (torch._decomp). */
static fj_status rule_batch_norm_backward(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 1);
	const fj_type *xt = fj_dec_ty(d, x0);
	fj_dtype C = fj_dec_comp(xt->dtype);
	uint32_t red = ((1u << xt->rank) - 1) & ~2u;
	bool train = fj_dec_bool(d, "train");
	double eps = fj_dec_float(d, "eps");
	const fj_attr *om = fj_dec_attr(d, "output_mask");
	bool want[3];
	for (int i = 0; i < 3; i++)
		want[i] = om->kind == FJ_AK_LIST && om->n == 3 && om->u.items[i].u.b;
	fj_vid g = in_as(d, 0, C), x = fj_dec_cvt(d, x0, C), w = in_as(d, 2, C);
	fj_vid mean, invstd;
	if (train) {
		mean = in_as(d, 5, C);
		invstd = in_as(d, 6, C);
	} else {
		mean = in_as(d, 3, C);
		invstd = fj_dec_un(d, FJ_OP_PRIMS_RSQRT, fj_dec_addc(d, in_as(d, 4, C), eps));
	}
	if (mean == FJ_NOVAL || invstd == FJ_NOVAL)
		return fj_dec_fail(d, "the saved (train) or running (eval) statistics are missing");
	int64_t n = fj_dec_count(xt, red);
	fj_vid xm = fj_dec_sub(d, x, chan(d, mean, xt));
	fj_vid gsum = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, g, red);
	fj_vid dot = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_mul(d, g, xm), red);
	fj_vid gmean, dmean; /* sum * (1 / count) */
	if (n >= 0) {
		gmean = fj_dec_mulc(d, gsum, 1.0 / (double)n);
		dmean = fj_dec_mulc(d, dot, 1.0 / (double)n);
	} else {
		gmean = fj_dec_mean(d, g, red);
		dmean = fj_dec_mean(d, fj_dec_mul(d, g, xm), red);
	}
	fj_vid proj_scale = fj_dec_mul(d, dmean, fj_dec_mul(d, invstd, invstd));
	fj_vid grad_scale = w != FJ_NOVAL ? fj_dec_mul(d, invstd, w) : invstd;
	fj_vid gi;
	if (train) {
		fj_vid proj = fj_dec_mul(d, xm, chan(d, proj_scale, xt));
		gi = fj_dec_mul(d, fj_dec_sub(d, fj_dec_sub(d, g, proj), chan(d, gmean, xt)), chan(d, grad_scale, xt));
	} else {
		gi = fj_dec_mul(d, g, chan(d, grad_scale, xt));
	}
	fj_vid res[3] = {gi, fj_dec_mul(d, dot, invstd), gsum};
	for (int i = 0; i < 3; i++) {
		const fj_type *rt = fj_dec_rty(d, i);
		fj_vid r = want[i] ? res[i] : fj_dec_full(d, rt->dims, rt->rank, 0, rt->dtype);
		d->out[i] = fj_dec_cvt(d, r, rt->dtype);
	}
	return ok(d);
}

/* ---- losses ---- */

/* target == ignore_index ? 0 : target, and the mask target != ignore_index. */
static fj_vid safe_target(fj_dec *d, fj_vid t, fj_vid *valid)
{
	int64_t ig = fj_dec_int(d, "ignore_index");
	*valid = fj_dec_cmpc(d, FJ_OP_PRIMS_NE, t, (double)ig);
	return fj_dec_where(d, *valid, t, c(d, 0, t));
}

/* nll_loss_forward (torch._decomp): -gather(x [* w], 1, safe_target),
 * masked; total_weight = sum of the picked weights (or the valid count);
 * reduction 0 none, 1 mean, 2 sum. */
static fj_status rule_nll_loss_forward(fj_dec *d)
{
	fj_vid x0 = fj_dec_in(d, 0), t = fj_dec_in(d, 1), w0 = fj_dec_in(d, 2);
	const fj_type *xt = fj_dec_ty(d, x0), *tt = fj_dec_ty(d, t);
	int64_t red = fj_dec_int(d, "reduction");
	fj_dtype C = fj_dec_comp(xt->dtype), R = R0(d)->dtype;
	int cd = xt->rank >= 2 ? 1 : 0;
	fj_vid x = fj_dec_cvt(d, x0, C), w = FJ_NOVAL;
	if (w0 != FJ_NOVAL) {
		w = fj_dec_bcast_in(d, fj_dec_cvt(d, w0, C), xt->dims, xt->rank, (int64_t[]){cd});
		x = fj_dec_mul(d, x, w);
	}
	fj_vid valid, st = safe_target(d, t, &valid);
	/* target [N] -> [N, 1] (or [] -> [1]) for gather along the class dim. */
	fj_dim idims[2] = {tt->rank ? tt->dims[0] : 1, 1};
	fj_vid st1 = fj_dec_reshape(d, st, idims, xt->rank);
	fj_named_attr at = {"dim", fj_attr_int(cd)};
	fj_vid picked = fj_dec_reshape(d, fj_dec_op(d, FJ_OP_PRIMS_GATHER, (fj_vid[]){x, st1}, 2, &at, 1), tt->dims, tt->rank);
	fj_vid loss = fj_dec_where(d, valid, fj_dec_un(d, FJ_OP_PRIMS_NEG, picked), c(d, 0, picked));
	if (red == 0 && xt->rank >= 2) {
		d->out[0] = fj_dec_cvt(d, loss, R);
		const fj_type *twt = fj_dec_rty(d, 1);
		d->out[1] = fj_dec_full(d, twt->dims, twt->rank, 0, twt->dtype);
		return ok(d);
	}
	uint32_t all = tt->rank ? 1u : 0;
	fj_vid tw;
	if (w != FJ_NOVAL) {
		fj_vid wp = fj_dec_reshape(d, fj_dec_op(d, FJ_OP_PRIMS_GATHER, (fj_vid[]){w, st1}, 2, &at, 1), tt->dims, tt->rank);
		tw = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_where(d, valid, wp, c(d, 0, wp)), all);
	} else {
		tw = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, fj_dec_cvt(d, valid, C), all);
	}
	fj_vid tw_r = fj_dec_cvt(d, tw, fj_dec_rty(d, 1)->dtype);
	fj_vid out = loss;
	if (red == 1 || red == 2)
		out = fj_dec_reduce(d, FJ_OP_PRIMS_SUM, loss, all);
	if (red == 1) /* divide by the total weight as rounded to the result dtype */
		out = fj_dec_div(d, out, fj_dec_cvt(d, tw_r, C));
	d->out[0] = fj_dec_cvt(d, out, R);
	d->out[1] = tw_r;
	return ok(d);
}

/* nll_loss_backward (torch._decomp, with the scatter of -1 written as a
 * one-hot compare against iota): grad_input = where(onehot, -1, 0) *
 * where(valid, g [/ total_weight] [* w], 0). */
static fj_status rule_nll_loss_backward(fj_dec *d)
{
	fj_vid g0 = fj_dec_in(d, 0), x0 = fj_dec_in(d, 1), t = fj_dec_in(d, 2), w0 = fj_dec_in(d, 3),
	       tw0 = fj_dec_in(d, 4);
	const fj_type *xt = fj_dec_ty(d, x0), *tt = fj_dec_ty(d, t);
	int64_t red = fj_dec_int(d, "reduction");
	fj_dtype C = fj_dec_comp(xt->dtype);
	int cd = xt->rank >= 2 ? 1 : 0;
	fj_vid g = fj_dec_cvt(d, g0, C);
	if (red == 1)
		g = fj_dec_div(d, g, fj_dec_bcast(d, fj_dec_cvt(d, tw0, C), fj_dec_ty(d, g)->dims, fj_dec_ty(d, g)->rank));
	/* Everything in x's shape [N, C] (or [C]). */
	int64_t rows[1] = {0};
	fj_vid valid, st = safe_target(d, t, &valid);
	fj_vid stb = tt->rank ? fj_dec_bcast_in(d, st, xt->dims, xt->rank, rows) : fj_dec_bcast(d, st, xt->dims, xt->rank);
	fj_vid vb = tt->rank ? fj_dec_bcast_in(d, valid, xt->dims, xt->rank, rows) : fj_dec_bcast(d, valid, xt->dims, xt->rank);
	fj_named_attr at[2] = {{"length", fj_attr_size(xt->dims[cd])}, {"dtype", fj_attr_dtype(tt->dtype)}};
	fj_vid iota = fj_dec_op(d, FJ_OP_PRIMS_IOTA, NULL, 0, at, 2);
	fj_vid onehot = fj_dec_bin(d, FJ_OP_PRIMS_EQ, fj_dec_bcast_in(d, iota, xt->dims, xt->rank, (int64_t[]){cd}), stb);
	fj_vid gi = fj_dec_where(d, onehot, fj_dec_full(d, xt->dims, xt->rank, -1, C), fj_dec_full(d, xt->dims, xt->rank, 0, C));
	const fj_type *gt = fj_dec_ty(d, g);
	fj_vid gb = gt->rank ? fj_dec_bcast_in(d, g, xt->dims, xt->rank, rows) : fj_dec_bcast(d, g, xt->dims, xt->rank);
	if (w0 != FJ_NOVAL)
		gb = fj_dec_mul(d, gb, fj_dec_bcast_in(d, fj_dec_cvt(d, w0, C), xt->dims, xt->rank, (int64_t[]){cd}));
	gb = fj_dec_where(d, vb, gb, c(d, 0, gb));
	d->out[0] = fj_dec_cvt(d, fj_dec_mul(d, gi, gb), R0(d)->dtype);
	return ok(d);
}

const fj_dec_rule fj_dec_rules_reduce[FJ_OP_COUNT] = {
	[FJ_OP_ATEN_SUM] = rule_reduce, [FJ_OP_ATEN_MEAN] = rule_reduce, [FJ_OP_ATEN_AMAX] = rule_reduce,
	[FJ_OP_ATEN_AMIN] = rule_reduce, [FJ_OP_ATEN_PROD] = rule_reduce,
	[FJ_OP_ATEN_LOGSUMEXP] = rule_logsumexp,
	[FJ_OP_ATEN_VAR] = rule_var, [FJ_OP_ATEN_VAR_MEAN] = rule_var,
	[FJ_OP_ATEN_ARGMAX] = rule_argmax, [FJ_OP_ATEN_ARGMIN] = rule_argmax,
	[FJ_OP_ATEN__SOFTMAX] = rule_softmax, [FJ_OP_ATEN_SOFTMAX] = rule_softmax,
	[FJ_OP_ATEN__LOG_SOFTMAX] = rule_softmax, [FJ_OP_ATEN_LOG_SOFTMAX] = rule_softmax,
	[FJ_OP_ATEN__SOFTMAX_BACKWARD_DATA] = rule_softmax_backward,
	[FJ_OP_ATEN__LOG_SOFTMAX_BACKWARD_DATA] = rule_softmax_backward,
	[FJ_OP_ATEN_NATIVE_LAYER_NORM] = rule_layer_norm, [FJ_OP_ATEN_LAYER_NORM] = rule_layer_norm,
	[FJ_OP_ATEN_RMS_NORM] = rule_rms_norm,
	[FJ_OP_ATEN_NATIVE_LAYER_NORM_BACKWARD] = rule_layer_norm_backward,
	[FJ_OP_ATEN_NATIVE_BATCH_NORM] = rule_batch_norm,
	[FJ_OP_ATEN__NATIVE_BATCH_NORM_LEGIT_FUNCTIONAL] = rule_batch_norm,
	[FJ_OP_ATEN_NATIVE_BATCH_NORM_BACKWARD] = rule_batch_norm_backward,
	[FJ_OP_ATEN_NLL_LOSS_FORWARD] = rule_nll_loss_forward,
	[FJ_OP_ATEN_NLL_LOSS_BACKWARD] = rule_nll_loss_backward,
};
