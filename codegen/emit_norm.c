/* emit_norm.c -- the reference executor's kernels for normalizations and
 * losses: _softmax softmax _log_softmax log_softmax and their backward data
 * ops; native_layer_norm layer_norm rms_norm native_layer_norm_backward;
 * native_batch_norm _native_batch_norm_legit_functional
 * native_batch_norm_backward; nll_loss_forward nll_loss_backward.
 *
 * Everything is computed in f64 and rounded once on store (rms_norm also
 * rounds x * rstd to the input dtype before the weight multiply, as ATen's
 * composite does). Parallel spaces: softmax rows (every dim but `dim`);
 * layer_norm / rms_norm rows (the dims before normalized_shape); batch norm
 * and its backward channels (dim 1); nll_loss_backward rows; the layer norm
 * backward and nll_loss_forward run as one part (their weight / total sums
 * reduce over every row).
 *
 * Statistics: mean, then the biased variance as a second pass over the row
 * (numerically sound; no E[x^2] - E[x]^2). */
#include <float.h>
#include <math.h>

#include "codegen/emit_common.h"


static LLVMValueRef f64c(fj_cg *cg, double v) { return LLVMConstReal(cg->t_f64, v); }
static LLVMValueRef get64(fj_cg *cg, LLVMValueRef var) { return fj_cg_get(cg, var, cg->t_f64); }
static void acc_add(fj_cg *cg, LLVMValueRef var, LLVMValueRef v) { fj_cg_set(cg, var, ec_fadd(cg, get64(cg, var), v)); }
static LLVMValueRef tofp(fj_cg *cg, LLVMValueRef i64v) { return LLVMBuildSIToFP(cg->b, i64v, cg->t_f64, ""); }
static LLVMValueRef rsqrt64(fj_cg *cg, LLVMValueRef v) { return ec_fdiv(cg, f64c(cg, 1.0), ec_sqrt(cg, v)); }

/* Loads element off of operand i as f64 (1.0 / 0.0 when the operand is none). */
static LLVMValueRef opt_load(fj_cg *cg, fj_cg_kernel *k, uint32_t i, LLVMValueRef off, double dflt)
{
	if (i >= k->nin || k->in[i].none)
		return f64c(cg, dflt);
	if (k->in[i].literal)
		return fj_cg_literal(cg, &k->in[i].lit, FJ_DT_F64);
	return ec_load_as(cg, &k->in[i].t, off, FJ_DT_F64);
}

static bool has(const fj_cg_kernel *k, uint32_t i) { return i < k->nin && !k->in[i].none; }

/* ---- softmax family ---- */

static fj_status emit_softmax(fj_cg *cg, fj_cg_kernel *k, bool log)
{
	const fj_cg_tensor *x = &k->in[0].t, *out = &k->out[0];
	int rank = x->rank, dim = ec_dim(ec_attr_int(cg, k, "dim", 0), rank);
	uint32_t mask = rank ? 1u << dim : 0;
	k->par_out = 0;
	k->par_mask = rank ? ((1u << rank) - 1) & ~mask : 0;
	/* softmax's dtype casts the input first; half_to_float is exact. */
	fj_dtype edt = out->dtype;
	LLVMValueRef len = rank ? x->dim[dim] : fj_cg_i64(cg, 1);
	LLVMValueRef stride = rank ? x->stride[dim] : fj_cg_i64(cg, 1);
	fj_cg_loop lo, l;
	LLVMValueRef o = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef base = ec_base_offset(cg, x, mask, o);
	LLVMValueRef mv = fj_cg_var(cg, cg->t_f64, f64c(cg, -INFINITY), "max");
	LLVMValueRef sv = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "sum");
#define ELEM(i) fj_cg_convert(cg, ec_load_as(cg, x, ec_add(cg, base, ec_mul(cg, (i), stride)), edt), edt, FJ_DT_F64)
	LLVMValueRef i = ec_for(cg, &l, fj_cg_i64(cg, 0), len);
	LLVMValueRef v = ELEM(i), m = get64(cg, mv);
	LLVMValueRef gt = ec_or(cg, LLVMBuildFCmp(cg->b, LLVMRealOGT, v, m, ""), ec_isnan(cg, v));
	fj_cg_set(cg, mv, LLVMBuildSelect(cg->b, ec_and(cg, gt, LLVMBuildNot(cg->b, ec_isnan(cg, m), "")), v, m, ""));
	fj_cg_loop_end(cg, &l);
	m = get64(cg, mv);
	i = ec_for(cg, &l, fj_cg_i64(cg, 0), len);
	acc_add(cg, sv, fj_cg_math1(cg, FJ_MATH_EXP, ec_fsub(cg, ELEM(i), m)));
	fj_cg_loop_end(cg, &l);
	LLVMValueRef s = get64(cg, sv);
	LLVMValueRef logs = log ? fj_cg_math1(cg, FJ_MATH_LOG, s) : NULL;
	i = ec_for(cg, &l, fj_cg_i64(cg, 0), len);
	LLVMValueRef d = ec_fsub(cg, ELEM(i), m);
	LLVMValueRef r = log ? ec_fsub(cg, d, logs) : ec_fdiv(cg, fj_cg_math1(cg, FJ_MATH_EXP, d), s);
	ec_store_from(cg, out, ec_add(cg, base, ec_mul(cg, i, stride)), r, FJ_DT_F64);
	fj_cg_loop_end(cg, &l);
#undef ELEM
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* _softmax_backward_data: gi = y * (g - sum(g * y));
 * _log_softmax_backward_data: gi = g - exp(y) * sum(g). */
static fj_status emit_softmax_backward(fj_cg *cg, fj_cg_kernel *k, bool log)
{
	const fj_cg_tensor *g = &k->in[0].t, *y = &k->in[1].t, *out = &k->out[0];
	int rank = y->rank, dim = ec_dim(ec_attr_int(cg, k, "dim", 0), rank);
	uint32_t mask = rank ? 1u << dim : 0;
	k->par_out = 0;
	k->par_mask = rank ? ((1u << rank) - 1) & ~mask : 0;
	LLVMValueRef len = rank ? y->dim[dim] : fj_cg_i64(cg, 1);
	LLVMValueRef stride = rank ? y->stride[dim] : fj_cg_i64(cg, 1);
	fj_cg_loop lo, l;
	LLVMValueRef o = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef base = ec_base_offset(cg, y, mask, o);
	LLVMValueRef sv = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "sum");
	LLVMValueRef i = ec_for(cg, &l, fj_cg_i64(cg, 0), len);
	LLVMValueRef off = ec_add(cg, base, ec_mul(cg, i, stride));
	LLVMValueRef gv = ec_load_as(cg, g, off, FJ_DT_F64);
	acc_add(cg, sv, log ? gv : ec_fmul(cg, gv, ec_load_as(cg, y, off, FJ_DT_F64)));
	fj_cg_loop_end(cg, &l);
	LLVMValueRef s = get64(cg, sv);
	i = ec_for(cg, &l, fj_cg_i64(cg, 0), len);
	off = ec_add(cg, base, ec_mul(cg, i, stride));
	gv = ec_load_as(cg, g, off, FJ_DT_F64);
	LLVMValueRef yv = ec_load_as(cg, y, off, FJ_DT_F64);
	LLVMValueRef r = log ? ec_fsub(cg, gv, ec_fmul(cg, fj_cg_math1(cg, FJ_MATH_EXP, yv), s))
	                     : ec_fmul(cg, yv, ec_fsub(cg, gv, s));
	ec_store_from(cg, out, off, r, FJ_DT_F64);
	fj_cg_loop_end(cg, &l);
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* ---- layer norm family ---- */

/* Number of normalized (trailing) dims. */
static int norm_dims(fj_cg *cg, fj_cg_kernel *k, int rank)
{
	const fj_attr *a = ec_attr(cg, k, "normalized_shape");
	int n = a && a->kind == FJ_AK_LIST ? (int)a->n : 1;
	return n > rank ? rank : n;
}

static double dtype_eps(fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F16: return 0.0009765625;
	case FJ_DT_BF16: return 0.0078125;
	case FJ_DT_F64: return DBL_EPSILON;
	default: return FLT_EPSILON;
	}
}

/* native_layer_norm / layer_norm / rms_norm: rows over the dims before the
 * normalized ones. */
static fj_status emit_layer_norm(fj_cg *cg, fj_cg_kernel *k, bool rms)
{
	const fj_cg_tensor *x = &k->in[0].t, *out = &k->out[0];
	int rank = x->rank, axis = rank - norm_dims(cg, k, rank);
	double eps = rms ? ec_attr_float(cg, k, "eps", dtype_eps(x->dtype)) : ec_attr_float(cg, k, "eps", 1e-5);
	k->par_out = 0;
	k->par_mask = axis ? (1u << axis) - 1 : 0;
	LLVMValueRef n = ec_span(cg, x, axis, rank), nf = tofp(cg, n);
	fj_cg_loop lo, l;
	LLVMValueRef o = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef base = ec_mul(cg, o, n);
	LLVMValueRef sv = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "sum");
	LLVMValueRef j = ec_for(cg, &l, fj_cg_i64(cg, 0), n);
	LLVMValueRef v = ec_load_as(cg, x, ec_add(cg, base, j), FJ_DT_F64);
	acc_add(cg, sv, rms ? ec_fmul(cg, v, v) : v);
	fj_cg_loop_end(cg, &l);
	LLVMValueRef mean = f64c(cg, 0), rstd;
	if (rms) {
		rstd = rsqrt64(cg, ec_fadd(cg, ec_fdiv(cg, get64(cg, sv), nf), f64c(cg, eps)));
	} else {
		mean = ec_fdiv(cg, get64(cg, sv), nf);
		fj_cg_set(cg, sv, f64c(cg, 0));
		j = ec_for(cg, &l, fj_cg_i64(cg, 0), n);
		LLVMValueRef d = ec_fsub(cg, ec_load_as(cg, x, ec_add(cg, base, j), FJ_DT_F64), mean);
		acc_add(cg, sv, ec_fmul(cg, d, d));
		fj_cg_loop_end(cg, &l);
		rstd = rsqrt64(cg, ec_fadd(cg, ec_fdiv(cg, get64(cg, sv), nf), f64c(cg, eps)));
	}
	j = ec_for(cg, &l, fj_cg_i64(cg, 0), n);
	LLVMValueRef off = ec_add(cg, base, j);
	LLVMValueRef y = ec_fmul(cg, ec_fsub(cg, ec_load_as(cg, x, off, FJ_DT_F64), mean), rstd);
	if (rms && x->dtype != FJ_DT_F64 && has(k, 1)) /* (x * rstd).type_as(input) * weight */
		y = fj_cg_convert(cg, fj_cg_convert(cg, y, FJ_DT_F64, x->dtype), x->dtype, FJ_DT_F64);
	if (has(k, 1))
		y = ec_fmul(cg, y, opt_load(cg, k, 1, j, 1.0));
	if (!rms && has(k, 2))
		y = ec_fadd(cg, y, opt_load(cg, k, 2, j, 0.0));
	ec_store_from(cg, out, off, y, FJ_DT_F64);
	fj_cg_loop_end(cg, &l);
	if (!rms && k->nout >= 3) {
		ec_store_from(cg, &k->out[1], o, mean, FJ_DT_F64);
		ec_store_from(cg, &k->out[2], o, rstd, FJ_DT_F64);
	}
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* native_layer_norm_backward(grad_out, input, mean, rstd, weight?, bias?):
 * gi = rstd / N * (N * dy * w - sum(dy * w) - xhat * sum(dy * w * xhat));
 * gw = sum over rows of dy * xhat; gb = sum over rows of dy. One part. */
static fj_status emit_layer_norm_backward(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *dy = &k->in[0].t, *x = &k->in[1].t, *mt = &k->in[2].t, *rt = &k->in[3].t;
	int rank = x->rank, axis = rank - norm_dims(cg, k, rank);
	k->par_out = 0;
	k->par_mask = 0;
	LLVMValueRef n = ec_span(cg, x, axis, rank), nf = tofp(cg, n);
	LLVMValueRef m = ec_span(cg, x, 0, axis);
	fj_cg_loop lo, l;
	/* grad_input, row by row */
	LLVMValueRef o = ec_for(cg, &lo, fj_cg_i64(cg, 0), m);
	LLVMValueRef base = ec_mul(cg, o, n);
	LLVMValueRef mean = ec_load_as(cg, mt, o, FJ_DT_F64), rstd = ec_load_as(cg, rt, o, FJ_DT_F64);
	LLVMValueRef s1 = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "s1");
	LLVMValueRef s2 = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "s2");
	LLVMValueRef j = ec_for(cg, &l, fj_cg_i64(cg, 0), n);
	LLVMValueRef off = ec_add(cg, base, j);
	LLVMValueRef g = ec_fmul(cg, ec_load_as(cg, dy, off, FJ_DT_F64), opt_load(cg, k, 4, j, 1.0));
	LLVMValueRef xh = ec_fmul(cg, ec_fsub(cg, ec_load_as(cg, x, off, FJ_DT_F64), mean), rstd);
	acc_add(cg, s1, g);
	acc_add(cg, s2, ec_fmul(cg, g, xh));
	fj_cg_loop_end(cg, &l);
	LLVMValueRef a = get64(cg, s1), c = get64(cg, s2);
	j = ec_for(cg, &l, fj_cg_i64(cg, 0), n);
	off = ec_add(cg, base, j);
	g = ec_fmul(cg, ec_load_as(cg, dy, off, FJ_DT_F64), opt_load(cg, k, 4, j, 1.0));
	xh = ec_fmul(cg, ec_fsub(cg, ec_load_as(cg, x, off, FJ_DT_F64), mean), rstd);
	LLVMValueRef t = ec_fsub(cg, ec_fsub(cg, ec_fmul(cg, nf, g), a), ec_fmul(cg, xh, c));
	ec_store_from(cg, &k->out[0], off, ec_fmul(cg, ec_fdiv(cg, rstd, nf), t), FJ_DT_F64);
	fj_cg_loop_end(cg, &l);
	fj_cg_loop_end(cg, &lo);
	if (k->nout < 3)
		return cg->st;
	/* grad_weight, grad_bias, column by column */
	j = ec_for(cg, &lo, fj_cg_i64(cg, 0), n);
	LLVMValueRef gw = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "gw");
	LLVMValueRef gb = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "gb");
	o = ec_for(cg, &l, fj_cg_i64(cg, 0), m);
	off = ec_add(cg, ec_mul(cg, o, n), j);
	LLVMValueRef d = ec_load_as(cg, dy, off, FJ_DT_F64);
	xh = ec_fmul(cg, ec_fsub(cg, ec_load_as(cg, x, off, FJ_DT_F64), ec_load_as(cg, mt, o, FJ_DT_F64)),
	             ec_load_as(cg, rt, o, FJ_DT_F64));
	acc_add(cg, gw, ec_fmul(cg, d, xh));
	acc_add(cg, gb, d);
	fj_cg_loop_end(cg, &l);
	ec_store_from(cg, &k->out[1], j, get64(cg, gw), FJ_DT_F64);
	ec_store_from(cg, &k->out[2], j, get64(cg, gb), FJ_DT_F64);
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* ---- batch norm family ---- */

/* Loops over the elements of channel c of a [N, C, *] tensor t (dense):
 * offset = n*C*S + c*S + s. */
typedef struct chan_iter {
	fj_cg_loop ln, ls;
	LLVMValueRef off;
} chan_iter;

static void chan_begin(fj_cg *cg, chan_iter *it, const fj_cg_tensor *t, LLVMValueRef c, LLVMValueRef s)
{
	LLVMValueRef nn = ec_for(cg, &it->ln, fj_cg_i64(cg, 0), t->dim[0]);
	LLVMValueRef base = ec_add(cg, ec_mul(cg, nn, t->stride[0]), ec_mul(cg, c, s));
	LLVMValueRef si = ec_for(cg, &it->ls, fj_cg_i64(cg, 0), s);
	it->off = ec_add(cg, base, si);
}

static void chan_end(fj_cg *cg, chan_iter *it)
{
	fj_cg_loop_end(cg, &it->ls);
	fj_cg_loop_end(cg, &it->ln);
}

/* Opens a batch-norm kernel's loop over its channels c (dim 1 of output 0,
 * the parallel dim) of a [N, C, *] input x; *s: the elements per channel
 * and sample, *cnt: per channel (N*S, as double). Close with fj_cg_loop_end. */
static LLVMValueRef chan_loop_begin(fj_cg *cg, fj_cg_kernel *k, const fj_cg_tensor *x, fj_cg_loop *lo,
                                    LLVMValueRef *s, LLVMValueRef *cnt)
{
	k->par_out = 0;
	k->par_mask = 1u << 1;
	*s = ec_span(cg, x, 2, x->rank);
	*cnt = tofp(cg, ec_mul(cg, x->dim[0], *s));
	return ec_for(cg, lo, k->lo, k->hi);
}

/* Batch mean and biased variance of channel c. */
static void chan_stats(fj_cg *cg, const fj_cg_tensor *x, LLVMValueRef c, LLVMValueRef s, LLVMValueRef cnt,
                       LLVMValueRef *mean, LLVMValueRef *var)
{
	LLVMValueRef sv = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "sum");
	chan_iter it;
	chan_begin(cg, &it, x, c, s);
	acc_add(cg, sv, ec_load_as(cg, x, it.off, FJ_DT_F64));
	chan_end(cg, &it);
	*mean = ec_fdiv(cg, get64(cg, sv), cnt);
	fj_cg_set(cg, sv, f64c(cg, 0));
	chan_begin(cg, &it, x, c, s);
	LLVMValueRef d = ec_fsub(cg, ec_load_as(cg, x, it.off, FJ_DT_F64), *mean);
	acc_add(cg, sv, ec_fmul(cg, d, d));
	chan_end(cg, &it);
	*var = ec_fdiv(cg, get64(cg, sv), cnt);
}

/* native_batch_norm / _native_batch_norm_legit_functional(input, weight?,
 * bias?, running_mean?, running_var?){training, momentum, eps}. Training (or
 * without running statistics): batch statistics, biased variance. The
 * functional form's new running statistics: (1 - momentum) * running +
 * momentum * batch (unbiased variance); when not training, the running
 * statistics unchanged; without running statistics, the batch ones. */
static fj_status emit_batch_norm(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *x = &k->in[0].t, *out = &k->out[0];
	bool training = ec_attr_bool(cg, k, "training", true);
	double mom = ec_attr_float(cg, k, "momentum", 0.1), eps = ec_attr_float(cg, k, "eps", 1e-5);
	bool running = has(k, 3) && has(k, 4);
	bool batch = training || !running;
	fj_cg_loop lo;
	LLVMValueRef s, cnt;
	LLVMValueRef c = chan_loop_begin(cg, k, x, &lo, &s, &cnt);
	LLVMValueRef mean, var = NULL, rstd;
	if (batch) {
		chan_stats(cg, x, c, s, cnt, &mean, &var);
		rstd = rsqrt64(cg, ec_fadd(cg, var, f64c(cg, eps)));
	} else {
		mean = opt_load(cg, k, 3, c, 0.0);
		rstd = rsqrt64(cg, ec_fadd(cg, opt_load(cg, k, 4, c, 1.0), f64c(cg, eps)));
	}
	LLVMValueRef w = opt_load(cg, k, 1, c, 1.0), bb = opt_load(cg, k, 2, c, 0.0);
	chan_iter it;
	chan_begin(cg, &it, x, c, s);
	LLVMValueRef y = ec_fmul(cg, ec_fsub(cg, ec_load_as(cg, x, it.off, FJ_DT_F64), mean), rstd);
	ec_store_from(cg, out, it.off, ec_fadd(cg, ec_fmul(cg, y, w), bb), FJ_DT_F64);
	chan_end(cg, &it);
	if (training) { /* save_mean / save_rstd have size C only when training */
		ec_store_from(cg, &k->out[1], c, mean, FJ_DT_F64);
		ec_store_from(cg, &k->out[2], c, rstd, FJ_DT_F64);
	}
	if (k->nout >= 5) {
		LLVMValueRef nm, nv;
		if (batch) {
			/* unbiased = biased * n / (n - 1) */
			LLVMValueRef unb = ec_fdiv(cg, ec_fmul(cg, var, cnt), ec_fsub(cg, cnt, f64c(cg, 1)));
			if (running) {
				LLVMValueRef a = f64c(cg, 1.0 - mom), b = f64c(cg, mom);
				nm = ec_fadd(cg, ec_fmul(cg, a, opt_load(cg, k, 3, c, 0)), ec_fmul(cg, b, mean));
				nv = ec_fadd(cg, ec_fmul(cg, a, opt_load(cg, k, 4, c, 1)), ec_fmul(cg, b, unb));
			} else {
				nm = mean;
				nv = unb;
			}
		} else {
			nm = opt_load(cg, k, 3, c, 0);
			nv = opt_load(cg, k, 4, c, 1);
		}
		ec_store_from(cg, &k->out[3], c, nm, FJ_DT_F64);
		ec_store_from(cg, &k->out[4], c, nv, FJ_DT_F64);
	}
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?,
 * running_var?, save_mean?, save_invstd?){train, eps, output_mask}. */
static fj_status emit_batch_norm_backward(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *dy = &k->in[0].t, *x = &k->in[1].t;
	bool train = ec_attr_bool(cg, k, "train", true);
	double eps = ec_attr_float(cg, k, "eps", 1e-5);
	fj_cg_loop lo;
	LLVMValueRef s, cnt;
	LLVMValueRef c = chan_loop_begin(cg, k, x, &lo, &s, &cnt);
	LLVMValueRef mean, invstd;
	if (train && has(k, 5) && has(k, 6)) {
		mean = opt_load(cg, k, 5, c, 0);
		invstd = opt_load(cg, k, 6, c, 1);
	} else if (train || !has(k, 3) || !has(k, 4)) {
		LLVMValueRef var;
		chan_stats(cg, x, c, s, cnt, &mean, &var);
		invstd = rsqrt64(cg, ec_fadd(cg, var, f64c(cg, eps)));
	} else {
		mean = opt_load(cg, k, 3, c, 0);
		invstd = rsqrt64(cg, ec_fadd(cg, opt_load(cg, k, 4, c, 1), f64c(cg, eps)));
	}
	LLVMValueRef w = opt_load(cg, k, 2, c, 1.0);
	LLVMValueRef sd = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "sum_dy");
	LLVMValueRef dot = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "dot");
	chan_iter it;
	chan_begin(cg, &it, x, c, s);
	LLVMValueRef d = ec_load_as(cg, dy, it.off, FJ_DT_F64);
	acc_add(cg, sd, d);
	acc_add(cg, dot, ec_fmul(cg, d, ec_fsub(cg, ec_load_as(cg, x, it.off, FJ_DT_F64), mean)));
	chan_end(cg, &it);
	LLVMValueRef sdv = get64(cg, sd), dotv = get64(cg, dot);
	LLVMValueRef k1 = ec_fdiv(cg, ec_fmul(cg, dotv, ec_fmul(cg, invstd, invstd)), cnt);
	LLVMValueRef dmean = ec_fdiv(cg, sdv, cnt);
	LLVMValueRef scale = ec_fmul(cg, invstd, w);
	chan_begin(cg, &it, x, c, s);
	d = ec_load_as(cg, dy, it.off, FJ_DT_F64);
	LLVMValueRef gi;
	if (train) {
		LLVMValueRef xm = ec_fsub(cg, ec_load_as(cg, x, it.off, FJ_DT_F64), mean);
		gi = ec_fmul(cg, ec_fsub(cg, ec_fsub(cg, d, ec_fmul(cg, xm, k1)), dmean), scale);
	} else {
		gi = ec_fmul(cg, d, scale);
	}
	ec_store_from(cg, &k->out[0], it.off, gi, FJ_DT_F64);
	chan_end(cg, &it);
	if (k->nout >= 3) {
		ec_store_from(cg, &k->out[1], c, ec_fmul(cg, dotv, invstd), FJ_DT_F64);
		ec_store_from(cg, &k->out[2], c, sdv, FJ_DT_F64);
	}
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

/* ---- nll loss ---- */

/* nll_loss_forward(self [N,C] or [C], target [N] or [], weight?){reduction,
 * ignore_index} -> (output, total_weight), as ATen's decomposition: an
 * ignored target contributes 0 (and no weight); a target outside [0, C)
 * otherwise is FJ_KERR_INDEX. reduction 0 (none) with 2-d self:
 * total_weight = 0. One part. */
static fj_status emit_nll_forward(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *x = &k->in[0].t, *tg = &k->in[1].t, *out = &k->out[0];
	int64_t red = ec_attr_int(cg, k, "reduction", 1), ign = ec_attr_int(cg, k, "ignore_index", -100);
	k->par_out = 0;
	k->par_mask = 0;
	bool two = x->rank == 2;
	LLVMValueRef nrows = two ? x->dim[0] : fj_cg_i64(cg, 1);
	LLVMValueRef ncls = x->dim[x->rank - 1];
	LLVMValueRef sum = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "sum");
	LLVMValueRef tw = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "tw");
	fj_cg_loop l;
	LLVMValueRef i = ec_for(cg, &l, fj_cg_i64(cg, 0), nrows);
	LLVMValueRef t = ec_load_as(cg, tg, tg->rank ? i : fj_cg_i64(cg, 0), FJ_DT_I64);
	LLVMValueRef ignored = ec_icmp(cg, LLVMIntEQ, t, fj_cg_i64(cg, ign));
	LLVMValueRef bad = ec_and(cg, LLVMBuildNot(cg->b, ignored, ""),
	                          ec_or(cg, ec_icmp(cg, LLVMIntSLT, t, fj_cg_i64(cg, 0)), ec_icmp(cg, LLVMIntSGE, t, ncls)));
	LLVMValueRef val = fj_cg_var(cg, cg->t_f64, f64c(cg, 0), "val");
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, bad);
	ec_fail(cg, k, FJ_KERR_INDEX);
	fj_cg_if_else(cg, &c);
	fj_cg_if c2;
	fj_cg_if_begin(cg, &c2, LLVMBuildNot(cg->b, ignored, ""));
	LLVMValueRef w = opt_load(cg, k, 2, t, 1.0);
	LLVMValueRef xo = ec_add(cg, ec_mul(cg, i, ncls), t);
	fj_cg_set(cg, val, ec_fmul(cg, LLVMBuildFNeg(cg->b, ec_load_as(cg, x, xo, FJ_DT_F64), ""), w));
	acc_add(cg, tw, w);
	fj_cg_if_end(cg, &c2);
	fj_cg_if_end(cg, &c);
	LLVMValueRef v = get64(cg, val);
	acc_add(cg, sum, v);
	if (red == 0)
		ec_store_from(cg, out, two ? i : fj_cg_i64(cg, 0), v, FJ_DT_F64);
	fj_cg_loop_end(cg, &l);
	LLVMValueRef total = red == 0 && two ? f64c(cg, 0) : get64(cg, tw);
	if (red == 1)
		ec_store_from(cg, out, fj_cg_i64(cg, 0), ec_fdiv(cg, get64(cg, sum), total), FJ_DT_F64);
	else if (red == 2)
		ec_store_from(cg, out, fj_cg_i64(cg, 0), get64(cg, sum), FJ_DT_F64);
	ec_store_from(cg, &k->out[1], fj_cg_i64(cg, 0), total, FJ_DT_F64);
	return cg->st;
}

/* nll_loss_backward(grad_output, self, target, weight?, total_weight):
 * grad_input[i, t_i] = -w[t_i] * g_i (g_i = grad_output[i] for reduction
 * none, grad_output / total_weight for mean, grad_output for sum), 0
 * elsewhere and for ignored targets. Parallel over rows. */
static fj_status emit_nll_backward(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *go = &k->in[0].t, *x = &k->in[1].t, *tg = &k->in[2].t, *out = &k->out[0];
	int64_t red = ec_attr_int(cg, k, "reduction", 1), ign = ec_attr_int(cg, k, "ignore_index", -100);
	bool two = x->rank == 2;
	k->par_out = 0;
	k->par_mask = two ? 1 : 0;
	LLVMValueRef ncls = x->dim[x->rank - 1];
	fj_cg_loop lo, l;
	LLVMValueRef i = ec_for(cg, &lo, k->lo, k->hi);
	LLVMValueRef row = ec_mul(cg, i, ncls);
	LLVMValueRef j = ec_for(cg, &l, fj_cg_i64(cg, 0), ncls);
	fj_cg_store(cg, out, ec_add(cg, row, j), fj_cg_const(cg, out->dtype, 0, 0));
	fj_cg_loop_end(cg, &l);
	LLVMValueRef t = ec_load_as(cg, tg, tg->rank ? i : fj_cg_i64(cg, 0), FJ_DT_I64);
	LLVMValueRef ignored = ec_icmp(cg, LLVMIntEQ, t, fj_cg_i64(cg, ign));
	LLVMValueRef bad = ec_and(cg, LLVMBuildNot(cg->b, ignored, ""),
	                          ec_or(cg, ec_icmp(cg, LLVMIntSLT, t, fj_cg_i64(cg, 0)), ec_icmp(cg, LLVMIntSGE, t, ncls)));
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, bad);
	ec_fail(cg, k, FJ_KERR_INDEX);
	fj_cg_if_else(cg, &c);
	fj_cg_if c2;
	fj_cg_if_begin(cg, &c2, LLVMBuildNot(cg->b, ignored, ""));
	LLVMValueRef g = ec_load_as(cg, go, red == 0 && two && go->rank ? i : fj_cg_i64(cg, 0), FJ_DT_F64);
	if (red == 1)
		g = ec_fdiv(cg, g, opt_load(cg, k, 4, fj_cg_i64(cg, 0), 1.0));
	LLVMValueRef w = opt_load(cg, k, 3, t, 1.0);
	ec_store_from(cg, out, ec_add(cg, row, t), LLVMBuildFNeg(cg->b, ec_fmul(cg, w, g), ""), FJ_DT_F64);
	fj_cg_if_end(cg, &c2);
	fj_cg_if_end(cg, &c);
	fj_cg_loop_end(cg, &lo);
	return cg->st;
}

fj_status fj_cg_emit_norm(fj_cg *cg, fj_cg_kernel *k)
{
	switch (k->node->op) {
	case FJ_OP_ATEN__SOFTMAX:
	case FJ_OP_ATEN_SOFTMAX: return emit_softmax(cg, k, false);
	case FJ_OP_ATEN__LOG_SOFTMAX:
	case FJ_OP_ATEN_LOG_SOFTMAX: return emit_softmax(cg, k, true);
	case FJ_OP_ATEN__SOFTMAX_BACKWARD_DATA: return emit_softmax_backward(cg, k, false);
	case FJ_OP_ATEN__LOG_SOFTMAX_BACKWARD_DATA: return emit_softmax_backward(cg, k, true);
	case FJ_OP_ATEN_NATIVE_LAYER_NORM:
	case FJ_OP_ATEN_LAYER_NORM: return emit_layer_norm(cg, k, false);
	case FJ_OP_ATEN_RMS_NORM: return emit_layer_norm(cg, k, true);
	case FJ_OP_ATEN_NATIVE_LAYER_NORM_BACKWARD: return emit_layer_norm_backward(cg, k);
	case FJ_OP_ATEN_NATIVE_BATCH_NORM:
	case FJ_OP_ATEN__NATIVE_BATCH_NORM_LEGIT_FUNCTIONAL: return emit_batch_norm(cg, k);
	case FJ_OP_ATEN_NATIVE_BATCH_NORM_BACKWARD: return emit_batch_norm_backward(cg, k);
	case FJ_OP_ATEN_NLL_LOSS_FORWARD: return emit_nll_forward(cg, k);
	case FJ_OP_ATEN_NLL_LOSS_BACKWARD: return emit_nll_backward(cg, k);
	default:
		return fj_cg_error(cg, FJ_ERR_INTERNAL, k->node, "%s is not a normalization op", fj_op_name(k->node->op));
	}
}
