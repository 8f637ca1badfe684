/* decompose_pointwise.c -- decomposition rules of the pointwise aten ops:
 * unary, binary, where/clamp/lerp/addcmul/_to_copy/masked_fill, the
 * activations and the pointwise backward ops (IR.md §3).
 *
 * Every rule brings its operands to the result's shape and to a computation
 * dtype (fj_dec_to: weak scalars become prims.full of that dtype), applies
 * prims, and converts to the aten result dtype at the end. Arithmetic on f16
 * and bf16 runs in f32 (PrimTorch's computation dtype); selections (where,
 * clamp, relu, max/min) and comparisons run in the operands' own promoted
 * dtype, which is exact and is what PyTorch compares in. Formulas are those
 * of torch._refs (activations) and torch._decomp (backward ops). */
#include <math.h>
#include <string.h>

#include "ir/infer.h"
#include "passes/decompose.h"

/* ---- helpers ---- */

static const fj_type *R0(fj_dec *d) { return fj_dec_rty(d, 0); }

/* Operand i brought to the result's shape in dtype dt. */
static fj_vid opnd(fj_dec *d, uint32_t i, fj_dtype dt) { return fj_dec_to_type(d, fj_dec_in(d, i), R0(d), dt); }

/* Result 0 := v converted to the result dtype. */
static fj_status done(fj_dec *d, fj_vid v)
{
	d->out[0] = fj_dec_cvt(d, v, R0(d)->dtype);
	return fj_b_status(&d->b);
}

/* PyTorch's result_type over the old operands in mask. */
static fj_dtype promoted(fj_dec *d, uint32_t mask)
{
	fj_rtstate s;
	fj_rt_init(&s);
	for (uint32_t i = 0; i < d->n->nopnds && i < 32; i++)
		if ((mask & (1u << i)) && d->n->opnds[i] != FJ_NOVAL)
			fj_rt_add(&s, &d->rb->old->values[d->n->opnds[i]].type);
	return fj_rt_result(&s);
}

static fj_vid c(fj_dec *d, double v, fj_vid like) { return fj_dec_const(d, v, like); }

/* a < lo ? lo : a, then a > hi ? hi : a (NaN kept), as torch._refs.clamp. */
static fj_vid clamp(fj_dec *d, fj_vid x, const fj_attr *lo, const fj_attr *hi)
{
	const fj_type *t = fj_dec_ty(d, x);
	if (lo && !fj_attr_is_none(lo)) {
		fj_vid l = fj_dec_full_num(d, t->dims, t->rank, lo, t->dtype);
		x = fj_dec_where(d, fj_dec_bin(d, FJ_OP_PRIMS_LT, x, l), l, x);
	}
	if (hi && !fj_attr_is_none(hi)) {
		fj_vid h = fj_dec_full_num(d, t->dims, t->rank, hi, t->dtype);
		x = fj_dec_where(d, fj_dec_bin(d, FJ_OP_PRIMS_GT, x, h), h, x);
	}
	return x;
}

static fj_vid clampf(fj_dec *d, fj_vid x, double lo, double hi)
{
	fj_attr l = fj_attr_float(lo), h = fj_attr_float(hi);
	return clamp(d, x, &l, &h);
}

/* 1 / (1 + exp(-x)) */
static fj_vid sigmoid(fj_dec *d, fj_vid x)
{
	fj_vid one = c(d, 1, x);
	return fj_dec_div(d, one, fj_dec_add(d, one, fj_dec_un(d, FJ_OP_PRIMS_EXP, fj_dec_un(d, FJ_OP_PRIMS_NEG, x))));
}

/* ---- unary ---- */

static const fj_op unary_prim[FJ_OP_COUNT] = {
	[FJ_OP_ATEN_ABS] = FJ_OP_PRIMS_ABS, [FJ_OP_ATEN_NEG] = FJ_OP_PRIMS_NEG,
	[FJ_OP_ATEN_EXP] = FJ_OP_PRIMS_EXP, [FJ_OP_ATEN_EXP2] = FJ_OP_PRIMS_EXP2,
	[FJ_OP_ATEN_EXPM1] = FJ_OP_PRIMS_EXPM1, [FJ_OP_ATEN_LOG] = FJ_OP_PRIMS_LOG,
	[FJ_OP_ATEN_LOG2] = FJ_OP_PRIMS_LOG2, [FJ_OP_ATEN_LOG10] = FJ_OP_PRIMS_LOG10,
	[FJ_OP_ATEN_LOG1P] = FJ_OP_PRIMS_LOG1P, [FJ_OP_ATEN_SQRT] = FJ_OP_PRIMS_SQRT,
	[FJ_OP_ATEN_RSQRT] = FJ_OP_PRIMS_RSQRT, [FJ_OP_ATEN_RECIPROCAL] = FJ_OP_PRIMS_RECIPROCAL,
	[FJ_OP_ATEN_SIN] = FJ_OP_PRIMS_SIN, [FJ_OP_ATEN_COS] = FJ_OP_PRIMS_COS,
	[FJ_OP_ATEN_TAN] = FJ_OP_PRIMS_TAN, [FJ_OP_ATEN_TANH] = FJ_OP_PRIMS_TANH,
	[FJ_OP_ATEN_SINH] = FJ_OP_PRIMS_SINH, [FJ_OP_ATEN_COSH] = FJ_OP_PRIMS_COSH,
	[FJ_OP_ATEN_ASIN] = FJ_OP_PRIMS_ASIN, [FJ_OP_ATEN_ACOS] = FJ_OP_PRIMS_ACOS,
	[FJ_OP_ATEN_ATAN] = FJ_OP_PRIMS_ATAN, [FJ_OP_ATEN_ASINH] = FJ_OP_PRIMS_ASINH,
	[FJ_OP_ATEN_ACOSH] = FJ_OP_PRIMS_ACOSH, [FJ_OP_ATEN_ATANH] = FJ_OP_PRIMS_ATANH,
	[FJ_OP_ATEN_ERF] = FJ_OP_PRIMS_ERF, [FJ_OP_ATEN_ERFC] = FJ_OP_PRIMS_ERFC,
	[FJ_OP_ATEN_FLOOR] = FJ_OP_PRIMS_FLOOR, [FJ_OP_ATEN_CEIL] = FJ_OP_PRIMS_CEIL,
	[FJ_OP_ATEN_TRUNC] = FJ_OP_PRIMS_TRUNC, [FJ_OP_ATEN_SIGN] = FJ_OP_PRIMS_SIGN,
	[FJ_OP_ATEN_BITWISE_NOT] = FJ_OP_PRIMS_BITWISE_NOT,
	[FJ_OP_ATEN_ISNAN] = FJ_OP_PRIMS_ISNAN, [FJ_OP_ATEN_ISINF] = FJ_OP_PRIMS_ISINF,
};

/* Float math (ints and bools compute in f32), and abs, neg, sign. */
static fj_status rule_unary(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	return done(d, fj_dec_un(d, unary_prim[d->n->op], opnd(d, 0, C)));
}

/* floor ceil trunc: the identity on integers (torch._refs). */
static fj_status rule_rounding(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	if (!fj_dtype_is_float(R))
		return done(d, opnd(d, 0, R));
	return rule_unary(d);
}

/* round{decimals}: nearbyint(x * 10^d) / 10^d (d < 0: x / 10^-d ... * 10^-d). */
static fj_status rule_round(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype, C = fj_dec_comp(R);
	int64_t dec = fj_dec_int(d, "decimals");
	if (!fj_dtype_is_float(R))
		return done(d, opnd(d, 0, R));
	fj_vid x = opnd(d, 0, C);
	if (dec == 0)
		return done(d, fj_dec_un(d, FJ_OP_PRIMS_ROUND, x));
	double p = pow(10.0, (double)(dec > 0 ? dec : -dec));
	if (dec > 0)
		return done(d, fj_dec_div(d, fj_dec_un(d, FJ_OP_PRIMS_ROUND, fj_dec_mulc(d, x, p)), c(d, p, x)));
	return done(d, fj_dec_mul(d, fj_dec_un(d, FJ_OP_PRIMS_ROUND, fj_dec_div(d, x, c(d, p, x))), c(d, p, x)));
}

/* isnan/isinf: false for integers and bools. */
static fj_status rule_isnan(fj_dec *d)
{
	const fj_type *x = fj_dec_ty(d, fj_dec_in(d, 0));
	if (!fj_dtype_is_float(x->dtype))
		return done(d, fj_dec_full(d, x->dims, x->rank, 0, FJ_DT_BOOL));
	return done(d, fj_dec_un(d, unary_prim[d->n->op], fj_dec_in(d, 0)));
}

/* logical_not: x == 0 for non-bool x. */
static fj_status rule_logical_not(fj_dec *d)
{
	fj_vid x = fj_dec_in(d, 0);
	if (fj_dec_ty(d, x)->dtype == FJ_DT_BOOL)
		return done(d, fj_dec_un(d, FJ_OP_PRIMS_LOGICAL_NOT, x));
	return done(d, fj_dec_cmpc(d, FJ_OP_PRIMS_EQ, x, 0));
}

static fj_status rule_bitwise_not(fj_dec *d) { return done(d, fj_dec_un(d, FJ_OP_PRIMS_BITWISE_NOT, opnd(d, 0, R0(d)->dtype))); }

/* sigmoid: 1 / (1 + exp(-x)) */
static fj_status rule_sigmoid(fj_dec *d) { return done(d, sigmoid(d, opnd(d, 0, fj_dec_comp(R0(d)->dtype)))); }

/* relu: where(x <= 0, 0, x) */
static fj_status rule_relu(fj_dec *d)
{
	fj_vid x = opnd(d, 0, R0(d)->dtype);
	return done(d, fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_LE, x, 0), c(d, 0, x), x));
}

#define M_SQRT2_ 1.41421356237309504880
#define M_SQRT1_2_ 0.70710678118654752440
#define M_2_SQRTPI_ 1.12837916709551257390

#define GELU_BETA (M_SQRT2_ * M_2_SQRTPI_ * 0.5) /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715

/* The tanh gelu's exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3), given x2 =
 * x x: the argument as x (-2 beta - 2 beta kappa x^2), four prims where (x
 * + kappa x^3) (-2 beta) took five, and autodiff's gradient 21 where it
 * took 26. Zen 4, AVX2 code on data in L1: forward 12.8 -> 12.1 cycles per
 * 8 floats, backward 26.5 -> 24.0; training on [8192,4096] f32, 2 threads,
 * best of 5 alternating runs: 23.7 -> 22.5 ms (AVX-512: 17.6 -> 16.6). */
static fj_vid gelu_exp_arg(fj_dec *d, fj_vid x, fj_vid x2)
{
	return fj_dec_mul(d, x, fj_dec_addc(d, fj_dec_mulc(d, x2, -2 * GELU_BETA * GELU_KAPPA), -2 * GELU_BETA));
}

/* e = exp(z), 0 where z is below fj_dtype_exp_normal_lo: a gradient that
 * is a multiple of e gets no denormal (each operation on one is a
 * microcode assist on x86 cores), as autodiff's (passes/vjp.c:
 * flush_small). */
static fj_vid flush_small(fj_dec *d, fj_vid z, fj_vid e)
{
	fj_vid lo = fj_dec_cmpc(d, FJ_OP_PRIMS_LT, z, fj_dtype_exp_normal_lo(fj_dec_ty(d, z)->dtype));
	return fj_dec_where(d, lo, fj_dec_const(d, 0, e), e);
}

/* gelu: x * 0.5 * (1 + erf(x / sqrt(2))), or the tanh approximation
 * 0.5 * x * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3) (torch._refs),
 * written as x / (1 + exp(-2u)): the same function, as 1 + tanh(u) = 2 /
 * (1 + exp(-2u)), for one exp and a division instead of tanh's rational fit
 * (codegen/math_poly.c: 13 multiply-adds and a division), and without the
 * cancellation of 1 + tanh(u) below zero (f32, [-2, 10]: max 42 -> 6.5 ulp,
 * tests/unit/test_region.c). Zen 4, [8192,4096] f32, one thread: 13.6 ->
 * 12.2 ms (AVX2 code: 15.8 -> 14.7). Its gradient is autodiff's sigmoid
 * idiom (passes/vjp.c), finite where exp(-2u) overflows. */
static fj_status rule_gelu(fj_dec *d)
{
	fj_vid x = opnd(d, 0, fj_dec_comp(R0(d)->dtype));
	const fj_attr *ap = fj_dec_attr(d, "approximate");
	if (ap->kind == FJ_AK_STR && strcmp(ap->u.s, "tanh") == 0) {
		fj_vid e = fj_dec_un(d, FJ_OP_PRIMS_EXP, gelu_exp_arg(d, x, fj_dec_mul(d, x, x)));
		return done(d, fj_dec_div(d, x, fj_dec_addc(d, e, 1)));
	}
	fj_vid e = fj_dec_addc(d, fj_dec_un(d, FJ_OP_PRIMS_ERF, fj_dec_mulc(d, x, M_SQRT1_2_)), 1);
	return done(d, fj_dec_mul(d, fj_dec_mulc(d, x, 0.5), e));
}

/* silu: x / (1 + exp(-x)) */
static fj_status rule_silu(fj_dec *d)
{
	fj_vid x = opnd(d, 0, fj_dec_comp(R0(d)->dtype));
	return done(d, fj_dec_div(d, x, fj_dec_addc(d, fj_dec_un(d, FJ_OP_PRIMS_EXP, fj_dec_un(d, FJ_OP_PRIMS_NEG, x)), 1)));
}

/* leaky_relu: where(x > 0, x, x * slope) */
static fj_status rule_leaky_relu(fj_dec *d)
{
	fj_vid x = opnd(d, 0, fj_dec_comp(R0(d)->dtype));
	double s = fj_dec_float(d, "negative_slope");
	return done(d, fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_GT, x, 0), x, fj_dec_mulc(d, x, s)));
}

/* elu: where(x > 0, x * scale, alpha * scale * expm1(x * input_scale)) */
static fj_status rule_elu(fj_dec *d)
{
	fj_vid x = opnd(d, 0, fj_dec_comp(R0(d)->dtype));
	double alpha = fj_dec_float(d, "alpha"), scale = fj_dec_float(d, "scale"), in = fj_dec_float(d, "input_scale");
	fj_vid pos = scale == 1 ? x : fj_dec_mulc(d, x, scale);
	fj_vid xi = in == 1 ? x : fj_dec_mulc(d, x, in);
	fj_vid neg = fj_dec_un(d, FJ_OP_PRIMS_EXPM1, xi);
	if (alpha * scale != 1)
		neg = fj_dec_mulc(d, neg, alpha * scale);
	return done(d, fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_GT, x, 0), pos, neg));
}

/* softplus: where(x * beta > threshold, x, log1p(exp(x * beta)) / beta) */
static fj_status rule_softplus(fj_dec *d)
{
	fj_vid x = opnd(d, 0, fj_dec_comp(R0(d)->dtype));
	double beta = fj_dec_float(d, "beta"), thr = fj_dec_float(d, "threshold");
	fj_vid xb = beta == 1 ? x : fj_dec_mulc(d, x, beta);
	fj_vid sp = fj_dec_un(d, FJ_OP_PRIMS_LOG1P, fj_dec_un(d, FJ_OP_PRIMS_EXP, xb));
	if (beta != 1)
		sp = fj_dec_div(d, sp, c(d, beta, x));
	return done(d, fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_GT, xb, thr), x, sp));
}

/* hardsigmoid: clamp(x + 3, 0, 6) / 6; hardswish: x * clamp(x + 3, 0, 6) / 6 */
static fj_status rule_hardsigmoid(fj_dec *d)
{
	fj_vid x = opnd(d, 0, fj_dec_comp(R0(d)->dtype));
	fj_vid r6 = clampf(d, fj_dec_addc(d, x, 3), 0, 6);
	if (d->n->op == FJ_OP_ATEN_HARDSWISH)
		r6 = fj_dec_mul(d, x, r6);
	return done(d, fj_dec_div(d, r6, c(d, 6, x)));
}

/* hardtanh: clamp(x, min_val, max_val) */
static fj_status rule_hardtanh(fj_dec *d)
{
	fj_vid x = opnd(d, 0, R0(d)->dtype);
	return done(d, clamp(d, x, fj_dec_attr(d, "min_val"), fj_dec_attr(d, "max_val")));
}

/* ---- binary ---- */

static const fj_op binary_prim[FJ_OP_COUNT] = {
	[FJ_OP_ATEN_ADD] = FJ_OP_PRIMS_ADD, [FJ_OP_ATEN_SUB] = FJ_OP_PRIMS_SUB,
	[FJ_OP_ATEN_MUL] = FJ_OP_PRIMS_MUL, [FJ_OP_ATEN_POW] = FJ_OP_PRIMS_POW,
	[FJ_OP_ATEN_MAXIMUM] = FJ_OP_PRIMS_MAXIMUM, [FJ_OP_ATEN_MINIMUM] = FJ_OP_PRIMS_MINIMUM,
	[FJ_OP_ATEN_ATAN2] = FJ_OP_PRIMS_ATAN2, [FJ_OP_ATEN_FMOD] = FJ_OP_PRIMS_FMOD,
	[FJ_OP_ATEN_REMAINDER] = FJ_OP_PRIMS_REMAINDER,
	[FJ_OP_ATEN_EQ] = FJ_OP_PRIMS_EQ, [FJ_OP_ATEN_NE] = FJ_OP_PRIMS_NE,
	[FJ_OP_ATEN_LT] = FJ_OP_PRIMS_LT, [FJ_OP_ATEN_LE] = FJ_OP_PRIMS_LE,
	[FJ_OP_ATEN_GT] = FJ_OP_PRIMS_GT, [FJ_OP_ATEN_GE] = FJ_OP_PRIMS_GE,
	[FJ_OP_ATEN_LOGICAL_AND] = FJ_OP_PRIMS_LOGICAL_AND, [FJ_OP_ATEN_LOGICAL_OR] = FJ_OP_PRIMS_LOGICAL_OR,
	[FJ_OP_ATEN_LOGICAL_XOR] = FJ_OP_PRIMS_LOGICAL_XOR,
	[FJ_OP_ATEN_BITWISE_AND] = FJ_OP_PRIMS_BITWISE_AND, [FJ_OP_ATEN_BITWISE_OR] = FJ_OP_PRIMS_BITWISE_OR,
	[FJ_OP_ATEN_BITWISE_XOR] = FJ_OP_PRIMS_BITWISE_XOR,
};

/* add{alpha} sub{alpha} mul: a op (alpha * b); on bools add is or, mul and. */
static fj_status rule_arith(fj_dec *d)
{
	fj_op op = d->n->op;
	fj_dtype R = R0(d)->dtype, C = fj_dec_comp(R);
	fj_vid a = opnd(d, 0, C), b = opnd(d, 1, C);
	if (R == FJ_DT_BOOL && op != FJ_OP_ATEN_SUB)
		return done(d, fj_dec_bin(d, op == FJ_OP_ATEN_MUL ? FJ_OP_PRIMS_LOGICAL_AND : FJ_OP_PRIMS_LOGICAL_OR, a, b));
	if (op != FJ_OP_ATEN_MUL) {
		const fj_attr *alpha = fj_dec_attr(d, "alpha");
		if (fj_attr_as_float(alpha) != 1) {
			const fj_type *t = fj_dec_ty(d, b);
			b = fj_dec_mul(d, b, fj_dec_full_num(d, t->dims, t->rank, alpha, C));
		}
	}
	return done(d, fj_dec_bin(d, binary_prim[op], a, b));
}

/* Float results compute in the computation dtype, others in their own. */
static fj_status rule_binary(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	return done(d, fj_dec_bin(d, binary_prim[d->n->op], opnd(d, 0, C), opnd(d, 1, C)));
}

/* maximum/minimum: exact selections in the result dtype. */
static fj_status rule_minmax(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_op op = binary_prim[d->n->op];
	if (R == FJ_DT_BOOL)
		op = d->n->op == FJ_OP_ATEN_MAXIMUM ? FJ_OP_PRIMS_LOGICAL_OR : FJ_OP_PRIMS_LOGICAL_AND;
	return done(d, fj_dec_bin(d, op, opnd(d, 0, R), opnd(d, 1, R)));
}

/* pow: literal exponents 2, 3, 0.5, -0.5, -1, -2 as PyTorch's
 * pow_tensor_scalar_optimized_kernel computes them. */
static fj_status rule_pow(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype, C = fj_dec_comp(R);
	fj_vid e = fj_dec_in(d, 1);
	if (fj_dec_is_lit(d, e) && !fj_dec_is_lit(d, fj_dec_in(d, 0))) {
		double p = fj_dec_lit_value(d, e);
		bool fl = fj_dtype_is_float(R);
		fj_vid x = opnd(d, 0, C);
		if (p == 1)
			return done(d, x);
		if (p == 2)
			return done(d, fj_dec_mul(d, x, x));
		if (p == 3)
			return done(d, fj_dec_mul(d, fj_dec_mul(d, x, x), x));
		if (fl && p == 0.5)
			return done(d, fj_dec_un(d, FJ_OP_PRIMS_SQRT, x));
		if (fl && p == -0.5)
			return done(d, fj_dec_un(d, FJ_OP_PRIMS_RSQRT, x));
		if (fl && p == -1)
			return done(d, fj_dec_un(d, FJ_OP_PRIMS_RECIPROCAL, x));
		if (fl && p == -2)
			return done(d, fj_dec_un(d, FJ_OP_PRIMS_RECIPROCAL, fj_dec_mul(d, x, x)));
	}
	return rule_binary(d);
}

/* Comparisons in the operands' promoted dtype (exact; what PyTorch does). */
static fj_status rule_compare(fj_dec *d)
{
	fj_dtype P = promoted(d, 3);
	return done(d, fj_dec_bin(d, binary_prim[d->n->op], opnd(d, 0, P), opnd(d, 1, P)));
}

/* Operand i as a bool tensor of the result's shape (x != 0). */
static fj_vid as_bool(fj_dec *d, uint32_t i)
{
	fj_vid x = fj_dec_in(d, i);
	if (fj_dec_is_lit(d, x) || fj_dec_ty(d, x)->dtype == FJ_DT_BOOL)
		return opnd(d, i, FJ_DT_BOOL);
	return fj_dec_bcast(d, fj_dec_cmpc(d, FJ_OP_PRIMS_NE, x, 0), R0(d)->dims, R0(d)->rank);
}

static fj_status rule_logical(fj_dec *d) { return done(d, fj_dec_bin(d, binary_prim[d->n->op], as_bool(d, 0), as_bool(d, 1))); }

static fj_status rule_bitwise(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	return done(d, fj_dec_bin(d, binary_prim[d->n->op], opnd(d, 0, R), opnd(d, 1, R)));
}

/* floor division of floats, as torch._refs._floor_divide_float (Python's //). */
static fj_vid floor_div_float(fj_dec *d, fj_vid a, fj_vid b)
{
	fj_vid mod = fj_dec_bin(d, FJ_OP_PRIMS_FMOD, a, b);
	fj_vid div = fj_dec_div(d, fj_dec_sub(d, a, mod), b);
	fj_vid diff_sign = fj_dec_bin(d, FJ_OP_PRIMS_LOGICAL_XOR, fj_dec_cmpc(d, FJ_OP_PRIMS_LT, a, 0),
	                              fj_dec_cmpc(d, FJ_OP_PRIMS_LT, b, 0));
	fj_vid mask = fj_dec_bin(d, FJ_OP_PRIMS_LOGICAL_AND, fj_dec_cmpc(d, FJ_OP_PRIMS_NE, mod, 0), diff_sign);
	div = fj_dec_where(d, mask, fj_dec_addc(d, div, -1), div);
	fj_vid fl = fj_dec_un(d, FJ_OP_PRIMS_FLOOR, div);
	fl = fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_GT, fj_dec_sub(d, div, fl), 0.5), fj_dec_addc(d, fl, 1), fl);
	fj_vid basic = fj_dec_div(d, a, b);
	fj_vid zero = fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_LT, basic, 0), c(d, -0.0, a), c(d, 0, a));
	fl = fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_NE, div, 0), fl, zero);
	return fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_NE, b, 0), fl, basic);
}

/* div{rounding_mode}: true division; "trunc"; "floor" (torch._refs). */
static fj_status rule_div(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype, C = fj_dec_comp(R);
	const fj_attr *rm = fj_dec_attr(d, "rounding_mode");
	fj_vid a = opnd(d, 0, C), b = opnd(d, 1, C);
	if (rm->kind != FJ_AK_STR)
		return done(d, fj_dec_div(d, a, b));
	bool fl = fj_dtype_is_float(R);
	if (strcmp(rm->u.s, "trunc") == 0)
		return done(d, fl ? fj_dec_un(d, FJ_OP_PRIMS_TRUNC, fj_dec_div(d, a, b)) : fj_dec_div(d, a, b));
	if (fl)
		return done(d, floor_div_float(d, a, b));
	fj_vid q = fj_dec_div(d, a, b);
	if (R == FJ_DT_U8)
		return done(d, q);
	/* Truncation to flooring: q - ((a < 0) != (b < 0) && fmod(a, b) != 0). */
	fj_vid off = fj_dec_bin(d, FJ_OP_PRIMS_LOGICAL_AND,
	                        fj_dec_bin(d, FJ_OP_PRIMS_NE, fj_dec_cmpc(d, FJ_OP_PRIMS_LT, a, 0),
	                                   fj_dec_cmpc(d, FJ_OP_PRIMS_LT, b, 0)),
	                        fj_dec_cmpc(d, FJ_OP_PRIMS_NE, fj_dec_bin(d, FJ_OP_PRIMS_FMOD, a, b), 0));
	return done(d, fj_dec_sub(d, q, fj_dec_cvt(d, off, C)));
}

/* ---- pointwise other ---- */

static fj_status rule_where(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_vid p = fj_dec_to_type(d, fj_dec_in(d, 0), R0(d), FJ_DT_BOOL);
	return done(d, fj_dec_where(d, p, opnd(d, 1, R), opnd(d, 2, R)));
}

static fj_status rule_clamp(fj_dec *d)
{
	return done(d, clamp(d, opnd(d, 0, R0(d)->dtype), fj_dec_attr(d, "min"), fj_dec_attr(d, "max")));
}

/* lerp: w = |weight| < 0.5 ? weight : weight - 1; base = ... ? start : end;
 * w * (end - start) + base (torch._refs.lerp). */
static fj_status rule_lerp(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid s = opnd(d, 0, C), e = opnd(d, 1, C), w = opnd(d, 2, C);
	fj_vid mask = fj_dec_cmpc(d, FJ_OP_PRIMS_LT, fj_dec_un(d, FJ_OP_PRIMS_ABS, w), 0.5);
	fj_vid coeff = fj_dec_where(d, mask, w, fj_dec_addc(d, w, -1));
	fj_vid base = fj_dec_where(d, mask, s, e);
	return done(d, fj_dec_add(d, fj_dec_mul(d, coeff, fj_dec_sub(d, e, s)), base));
}

/* addcmul: self + value * t1 * t2 */
static fj_status rule_addcmul(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid s = opnd(d, 0, C), t1 = opnd(d, 1, C), t2 = opnd(d, 2, C);
	const fj_attr *v = fj_dec_attr(d, "value");
	if (fj_attr_as_float(v) != 1) {
		const fj_type *t = fj_dec_ty(d, t1);
		t1 = fj_dec_mul(d, fj_dec_full_num(d, t->dims, t->rank, v, C), t1);
	}
	return done(d, fj_dec_add(d, s, fj_dec_mul(d, t1, t2)));
}

static fj_status rule_to_copy(fj_dec *d) { return done(d, opnd(d, 0, R0(d)->dtype)); }

/* masked_fill: where(mask, value, self) */
static fj_status rule_masked_fill(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_vid m = fj_dec_to_type(d, fj_dec_in(d, 1), R0(d), FJ_DT_BOOL);
	return done(d, fj_dec_where(d, m, opnd(d, 2, R), opnd(d, 0, R)));
}

/* ---- pointwise backward (torch._decomp) ---- */

/* threshold_backward: where(self <= threshold, 0, grad) */
static fj_status rule_threshold_backward(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_vid x = fj_dec_in(d, 1);
	fj_dtype S = fj_dec_ty(d, x)->dtype;
	x = opnd(d, 1, S);
	const fj_type *t = fj_dec_ty(d, x);
	fj_vid thr = fj_dec_full_num(d, t->dims, t->rank, fj_dec_attr(d, "threshold"), S);
	fj_vid g = opnd(d, 0, R);
	return done(d, fj_dec_where(d, fj_dec_bin(d, FJ_OP_PRIMS_LE, x, thr), c(d, 0, g), g));
}

/* gelu_backward: grad * (cdf + x * pdf), or the tanh form; the exp's value
 * 0 where it is not a normal number (flush_small), as autodiff's. */
static fj_status rule_gelu_backward(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid g = opnd(d, 0, C), x = opnd(d, 1, C);
	const fj_attr *ap = fj_dec_attr(d, "approximate");
	if (ap->kind == FJ_AK_STR && strcmp(ap->u.s, "tanh") == 0) {
		/* as rule_gelu's forward: with e = exp(-2u) and s = 1 / (1 + e)
		 * (= (1 + tanh(u)) / 2), d/dx x s = s + 2 x s (1 - s) u', where
		 * 1 - s = e s below e = 1 (no cancellation) and 1 - s above (no
		 * inf * 0 once e overflows), e taken as 0 there where it is not
		 * a normal number */
		fj_vid x2 = fj_dec_mul(d, x, x);
		fj_vid z = gelu_exp_arg(d, x, x2);
		fj_vid e = fj_dec_un(d, FJ_OP_PRIMS_EXP, z);
		fj_vid s = fj_dec_un(d, FJ_OP_PRIMS_RECIPROCAL, fj_dec_addc(d, e, 1));
		fj_vid es = flush_small(d, z, e);
		fj_vid c = fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_LT, es, 1), fj_dec_mul(d, es, s), fj_dec_csub(d, 1, s));
		fj_vid du = fj_dec_mulc(d, fj_dec_addc(d, fj_dec_mulc(d, x2, 3 * GELU_KAPPA), 1), 2 * GELU_BETA);
		fj_vid dx = fj_dec_mul(d, s, fj_dec_addc(d, fj_dec_mul(d, fj_dec_mul(d, x, du), c), 1));
		return done(d, fj_dec_mul(d, g, dx));
	}
	double alpha = M_SQRT1_2_, beta = M_2_SQRTPI_ * M_SQRT1_2_ * 0.5;
	fj_vid cdf = fj_dec_mulc(d, fj_dec_addc(d, fj_dec_un(d, FJ_OP_PRIMS_ERF, fj_dec_mulc(d, x, alpha)), 1), 0.5);
	fj_vid t = fj_dec_mulc(d, fj_dec_mul(d, x, x), -0.5);
	fj_vid pdf = fj_dec_mulc(d, flush_small(d, t, fj_dec_un(d, FJ_OP_PRIMS_EXP, t)), beta);
	return done(d, fj_dec_mul(d, g, fj_dec_add(d, cdf, fj_dec_mul(d, x, pdf))));
}

/* sigmoid_backward: grad * (y * (1 - y)) */
static fj_status rule_sigmoid_backward(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid g = opnd(d, 0, C), y = opnd(d, 1, C);
	return done(d, fj_dec_mul(d, g, fj_dec_mul(d, y, fj_dec_csub(d, 1, y))));
}

/* tanh_backward: grad * (1 - y * y) */
static fj_status rule_tanh_backward(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid g = opnd(d, 0, C), y = opnd(d, 1, C);
	return done(d, fj_dec_mul(d, g, fj_dec_csub(d, 1, fj_dec_mul(d, y, y))));
}

/* silu_backward: s = sigmoid(x); grad * s * (1 + x * (1 - s)) */
static fj_status rule_silu_backward(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid g = opnd(d, 0, C), x = opnd(d, 1, C);
	fj_vid s = sigmoid(d, x);
	fj_vid t = fj_dec_addc(d, fj_dec_mul(d, x, fj_dec_csub(d, 1, s)), 1);
	return done(d, fj_dec_mul(d, fj_dec_mul(d, g, s), t));
}

/* leaky_relu_backward: where(self > 0, grad, grad * slope) */
static fj_status rule_leaky_relu_backward(fj_dec *d)
{
	fj_dtype C = fj_dec_comp(R0(d)->dtype);
	fj_vid g = opnd(d, 0, C), x = opnd(d, 1, C);
	double s = fj_dec_float(d, "negative_slope");
	return done(d, fj_dec_where(d, fj_dec_cmpc(d, FJ_OP_PRIMS_GT, x, 0), g, fj_dec_mulc(d, g, s)));
}

/* hardtanh_backward: where(self <= min_val || self >= max_val, 0, grad) */
static fj_status rule_hardtanh_backward(fj_dec *d)
{
	fj_dtype R = R0(d)->dtype;
	fj_vid x = fj_dec_in(d, 1);
	fj_dtype S = fj_dec_ty(d, x)->dtype;
	x = opnd(d, 1, S);
	const fj_type *t = fj_dec_ty(d, x);
	fj_vid lo = fj_dec_full_num(d, t->dims, t->rank, fj_dec_attr(d, "min_val"), S);
	fj_vid hi = fj_dec_full_num(d, t->dims, t->rank, fj_dec_attr(d, "max_val"), S);
	fj_vid out = fj_dec_bin(d, FJ_OP_PRIMS_LOGICAL_OR, fj_dec_bin(d, FJ_OP_PRIMS_LE, x, lo),
	                        fj_dec_bin(d, FJ_OP_PRIMS_GE, x, hi));
	fj_vid g = opnd(d, 0, R);
	return done(d, fj_dec_where(d, out, c(d, 0, g), g));
}

const fj_dec_rule fj_dec_rules_pointwise[FJ_OP_COUNT] = {
	[FJ_OP_ATEN_ABS] = rule_unary, [FJ_OP_ATEN_NEG] = rule_unary, [FJ_OP_ATEN_SIGN] = rule_unary,
	[FJ_OP_ATEN_EXP] = rule_unary, [FJ_OP_ATEN_EXP2] = rule_unary, [FJ_OP_ATEN_EXPM1] = rule_unary,
	[FJ_OP_ATEN_LOG] = rule_unary, [FJ_OP_ATEN_LOG2] = rule_unary, [FJ_OP_ATEN_LOG10] = rule_unary,
	[FJ_OP_ATEN_LOG1P] = rule_unary, [FJ_OP_ATEN_SQRT] = rule_unary, [FJ_OP_ATEN_RSQRT] = rule_unary,
	[FJ_OP_ATEN_RECIPROCAL] = rule_unary, [FJ_OP_ATEN_SIN] = rule_unary, [FJ_OP_ATEN_COS] = rule_unary,
	[FJ_OP_ATEN_TAN] = rule_unary, [FJ_OP_ATEN_TANH] = rule_unary, [FJ_OP_ATEN_SINH] = rule_unary,
	[FJ_OP_ATEN_COSH] = rule_unary, [FJ_OP_ATEN_ASIN] = rule_unary, [FJ_OP_ATEN_ACOS] = rule_unary,
	[FJ_OP_ATEN_ATAN] = rule_unary, [FJ_OP_ATEN_ASINH] = rule_unary, [FJ_OP_ATEN_ACOSH] = rule_unary,
	[FJ_OP_ATEN_ATANH] = rule_unary, [FJ_OP_ATEN_ERF] = rule_unary, [FJ_OP_ATEN_ERFC] = rule_unary,
	[FJ_OP_ATEN_FLOOR] = rule_rounding, [FJ_OP_ATEN_CEIL] = rule_rounding, [FJ_OP_ATEN_TRUNC] = rule_rounding,
	[FJ_OP_ATEN_ROUND] = rule_round,
	[FJ_OP_ATEN_ISNAN] = rule_isnan, [FJ_OP_ATEN_ISINF] = rule_isnan,
	[FJ_OP_ATEN_LOGICAL_NOT] = rule_logical_not, [FJ_OP_ATEN_BITWISE_NOT] = rule_bitwise_not,
	[FJ_OP_ATEN_SIGMOID] = rule_sigmoid, [FJ_OP_ATEN_RELU] = rule_relu, [FJ_OP_ATEN_GELU] = rule_gelu,
	[FJ_OP_ATEN_SILU] = rule_silu, [FJ_OP_ATEN_LEAKY_RELU] = rule_leaky_relu, [FJ_OP_ATEN_ELU] = rule_elu,
	[FJ_OP_ATEN_SOFTPLUS] = rule_softplus, [FJ_OP_ATEN_HARDSIGMOID] = rule_hardsigmoid,
	[FJ_OP_ATEN_HARDSWISH] = rule_hardsigmoid, [FJ_OP_ATEN_HARDTANH] = rule_hardtanh,
	[FJ_OP_ATEN_ADD] = rule_arith, [FJ_OP_ATEN_SUB] = rule_arith, [FJ_OP_ATEN_MUL] = rule_arith,
	[FJ_OP_ATEN_DIV] = rule_div, [FJ_OP_ATEN_POW] = rule_pow,
	[FJ_OP_ATEN_MAXIMUM] = rule_minmax, [FJ_OP_ATEN_MINIMUM] = rule_minmax,
	[FJ_OP_ATEN_ATAN2] = rule_binary, [FJ_OP_ATEN_FMOD] = rule_binary, [FJ_OP_ATEN_REMAINDER] = rule_binary,
	[FJ_OP_ATEN_EQ] = rule_compare, [FJ_OP_ATEN_NE] = rule_compare, [FJ_OP_ATEN_LT] = rule_compare,
	[FJ_OP_ATEN_LE] = rule_compare, [FJ_OP_ATEN_GT] = rule_compare, [FJ_OP_ATEN_GE] = rule_compare,
	[FJ_OP_ATEN_LOGICAL_AND] = rule_logical, [FJ_OP_ATEN_LOGICAL_OR] = rule_logical,
	[FJ_OP_ATEN_LOGICAL_XOR] = rule_logical,
	[FJ_OP_ATEN_BITWISE_AND] = rule_bitwise, [FJ_OP_ATEN_BITWISE_OR] = rule_bitwise,
	[FJ_OP_ATEN_BITWISE_XOR] = rule_bitwise,
	[FJ_OP_ATEN_WHERE] = rule_where, [FJ_OP_ATEN_CLAMP] = rule_clamp, [FJ_OP_ATEN_LERP] = rule_lerp,
	[FJ_OP_ATEN_ADDCMUL] = rule_addcmul, [FJ_OP_ATEN__TO_COPY] = rule_to_copy,
	[FJ_OP_ATEN_MASKED_FILL] = rule_masked_fill,
	[FJ_OP_ATEN_THRESHOLD_BACKWARD] = rule_threshold_backward, [FJ_OP_ATEN_GELU_BACKWARD] = rule_gelu_backward,
	[FJ_OP_ATEN_SIGMOID_BACKWARD] = rule_sigmoid_backward, [FJ_OP_ATEN_TANH_BACKWARD] = rule_tanh_backward,
	[FJ_OP_ATEN_SILU_BACKWARD] = rule_silu_backward, [FJ_OP_ATEN_LEAKY_RELU_BACKWARD] = rule_leaky_relu_backward,
	[FJ_OP_ATEN_HARDTANH_BACKWARD] = rule_hardtanh_backward,
};
