/* math.c -- the scalar lowering of every pointwise op: one function per op
 * (or per group of ops that share a shape), keyed by op in one table with
 * designated initializers. Semantics follow PyTorch's CPU kernels
 * (ATen native/cpu kernels and c10/util):
 *
 *  - values arrive in the op's computation dtype dt (fj_cg_pointwise_dtype):
 *    float/double for floats (f16/bf16 as float), iN for ints, i1 for bool;
 *  - integer division and modulo by zero are defined as 0 (PyTorch raises
 *    ZeroDivisionError); INT_MIN / -1 wraps (no LLVM UB, no poison);
 *  - remainder has Python's sign (the divisor's), fmod C's (the dividend's);
 *  - div floor on floats is PyTorch's div_floor_floating (fmod-based);
 *  - maximum/minimum propagate NaN (llvm.maximum/minimum), clamp keeps a NaN
 *    input, comparisons with NaN are false except ne;
 *  - round is half to even (llvm.roundeven), with decimals as PyTorch does;
 *  - integer pow by squaring; negative exponents give 1, +-1 or 0 as ATen's powi;
 *  - float pow with the exponents PyTorch special-cases (0.5, 2, 3, -0.5, -1, -2)
 *    computed as PyTorch does (sqrt, x*x, ...);
 *  - sign(NaN) = 0, as ATen's (0 < a) - (a < 0).
 * Transcendental functions go through the target hook (fj_cg_math1/2).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg.h"
#include "infer.h"

typedef LLVMValueRef V;

enum { K_F, K_S, K_U, K_B }; /* float, signed int, unsigned int, bool */

static int kind(fj_dtype dt)
{
	if (fj_dtype_is_float(dt))
		return K_F;
	if (dt == FJ_DT_BOOL)
		return K_B;
	return dt == FJ_DT_U8 ? K_U : K_S;
}

static fj_dtype res_dtype(const fj_graph *g, const fj_node *n) { return fj_val(g, n->res[0])->type.dtype; }

static const fj_attr *attr_opt(fj_cg *cg, const fj_node *n, const char *name)
{
	const fj_opinfo *oi = fj_op_info(cg->ctx, n->op);
	if (fj_op_attr_index(oi, name, strlen(name)) < 0)
		return NULL;
	const fj_attr *a = fj_node_attr(cg->ctx, n, name);
	return fj_attr_is_none(a) ? NULL : a;
}

/* Attribute `name` as a constant of dtype dt, or `dflt` when absent. */
static V attr_val(fj_cg *cg, const fj_node *n, const char *name, fj_dtype dt, double dflt)
{
	const fj_attr *a = attr_opt(cg, n, name);
	if (!a)
		return fj_cg_const(cg, dt, dflt, (int64_t)dflt);
	fj_literal l = fj_cg_attr_literal(a);
	return fj_cg_literal(cg, &l, dt);
}

static double attr_f(fj_cg *cg, const fj_node *n, const char *name, double dflt)
{
	const fj_attr *a = attr_opt(cg, n, name);
	return a ? fj_attr_as_float(a) : dflt;
}

static V cf(fj_cg *cg, fj_dtype dt, double f) { return fj_cg_const(cg, dt, f, (int64_t)f); }

static V intrin(fj_cg *cg, const char *name, V *args, unsigned nargs) { return fj_cg_intrinsic(cg, name, args, nargs); }
static V intrin1(fj_cg *cg, const char *name, V x) { return intrin(cg, name, &x, 1); }
static V intrin2(fj_cg *cg, const char *name, V x, V y)
{
	V a[2] = {x, y};
	return intrin(cg, name, a, 2);
}

#define B (cg->b)
static V f_add(fj_cg *cg, V x, V y) { return LLVMBuildFAdd(B, x, y, ""); }
static V f_sub(fj_cg *cg, V x, V y) { return LLVMBuildFSub(B, x, y, ""); }
static V f_mul(fj_cg *cg, V x, V y) { return LLVMBuildFMul(B, x, y, ""); }
static V f_div(fj_cg *cg, V x, V y) { return LLVMBuildFDiv(B, x, y, ""); }
static V fcmp(fj_cg *cg, LLVMRealPredicate p, V x, V y) { return LLVMBuildFCmp(B, p, x, y, ""); }
static V icmp(fj_cg *cg, LLVMIntPredicate p, V x, V y) { return LLVMBuildICmp(B, p, x, y, ""); }
static V sel(fj_cg *cg, V c, V x, V y) { return LLVMBuildSelect(B, c, x, y, ""); }
static V zero(V x) { return LLVMConstNull(LLVMTypeOf(x)); }
static V m1(fj_cg *cg, fj_cg_math f, V x) { return fj_cg_math1(cg, f, x); }

#define SCALAR(name) static V name(fj_cg *cg, const fj_graph *g, const fj_node *n, V *a, fj_dtype dt)

/* ---- unary ---- */

SCALAR(l_abs)
{
	switch (kind(dt)) {
	case K_F: return intrin1(cg, "llvm.fabs", a[0]);
	case K_S: return intrin2(cg, "llvm.abs", a[0], LLVMConstInt(cg->t_i1, 0, 0));
	default: return a[0];
	}
}

SCALAR(l_neg)
{
	if (kind(dt) == K_F)
		return LLVMBuildFNeg(B, a[0], "");
	if (kind(dt) == K_B)
		return a[0];
	return LLVMBuildSub(B, zero(a[0]), a[0], "");
}

static fj_cg_math math_of(fj_op op)
{
	switch (op) {
	case FJ_OP_ATEN_EXP: case FJ_OP_PRIMS_EXP: return FJ_MATH_EXP;
	case FJ_OP_ATEN_EXP2: case FJ_OP_PRIMS_EXP2: return FJ_MATH_EXP2;
	case FJ_OP_ATEN_EXPM1: case FJ_OP_PRIMS_EXPM1: return FJ_MATH_EXPM1;
	case FJ_OP_ATEN_LOG: case FJ_OP_PRIMS_LOG: return FJ_MATH_LOG;
	case FJ_OP_ATEN_LOG2: case FJ_OP_PRIMS_LOG2: return FJ_MATH_LOG2;
	case FJ_OP_ATEN_LOG10: case FJ_OP_PRIMS_LOG10: return FJ_MATH_LOG10;
	case FJ_OP_ATEN_LOG1P: case FJ_OP_PRIMS_LOG1P: return FJ_MATH_LOG1P;
	case FJ_OP_ATEN_SIN: case FJ_OP_PRIMS_SIN: return FJ_MATH_SIN;
	case FJ_OP_ATEN_COS: case FJ_OP_PRIMS_COS: return FJ_MATH_COS;
	case FJ_OP_ATEN_TAN: case FJ_OP_PRIMS_TAN: return FJ_MATH_TAN;
	case FJ_OP_ATEN_TANH: case FJ_OP_PRIMS_TANH: return FJ_MATH_TANH;
	case FJ_OP_ATEN_SINH: case FJ_OP_PRIMS_SINH: return FJ_MATH_SINH;
	case FJ_OP_ATEN_COSH: case FJ_OP_PRIMS_COSH: return FJ_MATH_COSH;
	case FJ_OP_ATEN_ASIN: case FJ_OP_PRIMS_ASIN: return FJ_MATH_ASIN;
	case FJ_OP_ATEN_ACOS: case FJ_OP_PRIMS_ACOS: return FJ_MATH_ACOS;
	case FJ_OP_ATEN_ATAN: case FJ_OP_PRIMS_ATAN: return FJ_MATH_ATAN;
	case FJ_OP_ATEN_ASINH: case FJ_OP_PRIMS_ASINH: return FJ_MATH_ASINH;
	case FJ_OP_ATEN_ACOSH: case FJ_OP_PRIMS_ACOSH: return FJ_MATH_ACOSH;
	case FJ_OP_ATEN_ATANH: case FJ_OP_PRIMS_ATANH: return FJ_MATH_ATANH;
	case FJ_OP_ATEN_ERF: case FJ_OP_PRIMS_ERF: return FJ_MATH_ERF;
	case FJ_OP_ATEN_ERFC: case FJ_OP_PRIMS_ERFC: return FJ_MATH_ERFC;
	default: FJ_UNREACHABLE();
	}
}

SCALAR(l_math1) { return m1(cg, math_of(n->op), a[0]); }

SCALAR(l_sqrt) { return intrin1(cg, "llvm.sqrt", a[0]); }
SCALAR(l_rsqrt) { return f_div(cg, cf(cg, dt, 1), intrin1(cg, "llvm.sqrt", a[0])); }
SCALAR(l_reciprocal) { return f_div(cg, cf(cg, dt, 1), a[0]); }

static V sigmoid(fj_cg *cg, V x, fj_dtype dt)
{
	V e = m1(cg, FJ_MATH_EXP, LLVMBuildFNeg(B, x, ""));
	return f_div(cg, cf(cg, dt, 1), f_add(cg, cf(cg, dt, 1), e));
}
SCALAR(l_sigmoid) { return sigmoid(cg, a[0], dt); }

SCALAR(l_relu)
{
	switch (kind(dt)) {
	case K_F: return sel(cg, fcmp(cg, LLVMRealOLT, a[0], zero(a[0])), zero(a[0]), a[0]);
	case K_S: return sel(cg, icmp(cg, LLVMIntSLT, a[0], zero(a[0])), zero(a[0]), a[0]);
	default: return a[0];
	}
}

static bool gelu_tanh(fj_cg *cg, const fj_node *n)
{
	const fj_attr *ap = attr_opt(cg, n, "approximate");
	return ap && ap->kind == FJ_AK_STR && strcmp(ap->u.s, "tanh") == 0;
}

SCALAR(l_gelu)
{
	V x = a[0], half = cf(cg, dt, 0.5), one = cf(cg, dt, 1);
	if (gelu_tanh(cg, n)) {
		/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
		V x3 = f_mul(cg, f_mul(cg, x, x), x);
		V inner = f_mul(cg, cf(cg, dt, M_SQRT2 * M_2_SQRTPI * 0.5), f_add(cg, x, f_mul(cg, cf(cg, dt, 0.044715), x3)));
		return f_mul(cg, f_mul(cg, half, x), f_add(cg, one, m1(cg, FJ_MATH_TANH, inner)));
	}
	V e = m1(cg, FJ_MATH_ERF, f_mul(cg, x, cf(cg, dt, M_SQRT1_2)));
	return f_mul(cg, f_mul(cg, x, half), f_add(cg, one, e));
}

SCALAR(l_silu)
{
	V e = m1(cg, FJ_MATH_EXP, LLVMBuildFNeg(B, a[0], ""));
	return f_div(cg, a[0], f_add(cg, cf(cg, dt, 1), e));
}

static const char *round_name(fj_op op)
{
	switch (op) {
	case FJ_OP_ATEN_FLOOR: case FJ_OP_PRIMS_FLOOR: return "llvm.floor";
	case FJ_OP_ATEN_CEIL: case FJ_OP_PRIMS_CEIL: return "llvm.ceil";
	case FJ_OP_ATEN_TRUNC: case FJ_OP_PRIMS_TRUNC: return "llvm.trunc";
	default: return "llvm.roundeven";
	}
}

SCALAR(l_rounding)
{
	if (kind(dt) != K_F)
		return a[0];
	const char *fn = round_name(n->op);
	const fj_attr *d = n->op == FJ_OP_ATEN_ROUND ? attr_opt(cg, n, "decimals") : NULL;
	int64_t dec = d ? fj_attr_as_int(d) : 0;
	if (dec == 0)
		return intrin1(cg, fn, a[0]);
	/* ATen's round_decimals: nearbyint(x * 10^d) / 10^d, or for d < 0
	 * nearbyint(x / 10^-d) * 10^-d, the power in the computation dtype. */
	bool neg = dec < 0;
	double p = pow(10.0, (double)(neg ? -dec : dec));
	V tp = cf(cg, dt, p);
	if (neg)
		return f_mul(cg, intrin1(cg, fn, f_div(cg, a[0], tp)), tp);
	return f_div(cg, intrin1(cg, fn, f_mul(cg, a[0], tp)), tp);
}

SCALAR(l_sign)
{
	V x = a[0];
	switch (kind(dt)) {
	case K_F: {
		V p = LLVMBuildUIToFP(B, fcmp(cg, LLVMRealOGT, x, zero(x)), LLVMTypeOf(x), "");
		V m = LLVMBuildUIToFP(B, fcmp(cg, LLVMRealOLT, x, zero(x)), LLVMTypeOf(x), "");
		return f_sub(cg, p, m);
	}
	case K_S: {
		V p = LLVMBuildZExt(B, icmp(cg, LLVMIntSGT, x, zero(x)), LLVMTypeOf(x), "");
		V m = LLVMBuildZExt(B, icmp(cg, LLVMIntSLT, x, zero(x)), LLVMTypeOf(x), "");
		return LLVMBuildSub(B, p, m, "");
	}
	case K_U: return LLVMBuildZExt(B, icmp(cg, LLVMIntNE, x, zero(x)), LLVMTypeOf(x), "");
	default: return x;
	}
}

static V truthy(fj_cg *cg, V x, fj_dtype dt) { return fj_cg_convert(cg, x, dt, FJ_DT_BOOL); }

SCALAR(l_logical_not) { return LLVMBuildNot(B, truthy(cg, a[0], dt), ""); }
SCALAR(l_bitwise_not) { return LLVMBuildNot(B, a[0], ""); }

SCALAR(l_isnan)
{
	if (kind(dt) != K_F)
		return LLVMConstInt(cg->t_i1, 0, 0);
	return fcmp(cg, LLVMRealUNO, a[0], a[0]);
}

SCALAR(l_isinf)
{
	if (kind(dt) != K_F)
		return LLVMConstInt(cg->t_i1, 0, 0);
	return fcmp(cg, LLVMRealOEQ, intrin1(cg, "llvm.fabs", a[0]), cf(cg, dt, INFINITY));
}

SCALAR(l_leaky_relu)
{
	V s = attr_val(cg, n, "negative_slope", dt, 0.01);
	return sel(cg, fcmp(cg, LLVMRealOGT, a[0], zero(a[0])), a[0], f_mul(cg, a[0], s));
}

SCALAR(l_elu)
{
	/* a <= 0 ? expm1(a * input_scale) * alpha * scale : a * scale */
	double alpha = attr_f(cg, n, "alpha", 1), scale = attr_f(cg, n, "scale", 1);
	double iscale = attr_f(cg, n, "input_scale", 1);
	V x = a[0];
	V negv = f_mul(cg, m1(cg, FJ_MATH_EXPM1, f_mul(cg, x, cf(cg, dt, iscale))), cf(cg, dt, alpha * scale));
	return sel(cg, fcmp(cg, LLVMRealOLE, x, zero(x)), negv, f_mul(cg, x, cf(cg, dt, scale)));
}

SCALAR(l_softplus)
{
	/* (a * beta) > threshold ? a : log1p(exp(a * beta)) / beta */
	V beta = attr_val(cg, n, "beta", dt, 1), th = attr_val(cg, n, "threshold", dt, 20);
	V ab = f_mul(cg, a[0], beta);
	V soft = f_div(cg, m1(cg, FJ_MATH_LOG1P, m1(cg, FJ_MATH_EXP, ab)), beta);
	return sel(cg, fcmp(cg, LLVMRealOGT, ab, th), a[0], soft);
}

/* std::max / std::min as C++ defines them (a NaN first argument stays). */
static V std_max(fj_cg *cg, V x, V y) { return sel(cg, fcmp(cg, LLVMRealOLT, x, y), y, x); }
static V std_min(fj_cg *cg, V x, V y) { return sel(cg, fcmp(cg, LLVMRealOLT, y, x), y, x); }

static V hardsigmoid(fj_cg *cg, V x, fj_dtype dt)
{
	V t = std_min(cg, std_max(cg, f_add(cg, x, cf(cg, dt, 3)), cf(cg, dt, 0)), cf(cg, dt, 6));
	return f_div(cg, t, cf(cg, dt, 6));
}
SCALAR(l_hardsigmoid) { return hardsigmoid(cg, a[0], dt); }
SCALAR(l_hardswish)
{
	V t = std_min(cg, std_max(cg, f_add(cg, a[0], cf(cg, dt, 3)), cf(cg, dt, 0)), cf(cg, dt, 6));
	return f_div(cg, f_mul(cg, a[0], t), cf(cg, dt, 6));
}

/* clamp: NaN stays, min applied first, then max (min > max gives max). */
static V clamp(fj_cg *cg, V x, V lo, V hi, fj_dtype dt)
{
	int k = kind(dt);
	if (lo) {
		V c = k == K_F ? fcmp(cg, LLVMRealOLT, x, lo) : icmp(cg, k == K_S ? LLVMIntSLT : LLVMIntULT, x, lo);
		x = sel(cg, c, lo, x);
	}
	if (hi) {
		V c = k == K_F ? fcmp(cg, LLVMRealOGT, x, hi) : icmp(cg, k == K_S ? LLVMIntSGT : LLVMIntUGT, x, hi);
		x = sel(cg, c, hi, x);
	}
	return x;
}

SCALAR(l_hardtanh)
{
	return clamp(cg, a[0], attr_val(cg, n, "min_val", dt, -1), attr_val(cg, n, "max_val", dt, 1), dt);
}

SCALAR(l_clamp)
{
	V lo = attr_opt(cg, n, "min") ? attr_val(cg, n, "min", dt, 0) : NULL;
	V hi = attr_opt(cg, n, "max") ? attr_val(cg, n, "max", dt, 0) : NULL;
	return clamp(cg, a[0], lo, hi, dt);
}

/* ---- binary ---- */

static V add_like(fj_cg *cg, const fj_node *n, V x, V y, fj_dtype dt, bool sub)
{
	const fj_attr *al = attr_opt(cg, n, "alpha");
	bool one = !al || fj_attr_as_float(al) == 1.0;
	int k = kind(dt);
	if (k == K_B) {
		if (!one)
			y = LLVMBuildAnd(B, y, attr_val(cg, n, "alpha", dt, 1), "");
		return LLVMBuildOr(B, x, y, "");
	}
	if (!one) {
		V alpha = attr_val(cg, n, "alpha", dt, 1);
		y = k == K_F ? f_mul(cg, alpha, y) : LLVMBuildMul(B, alpha, y, "");
	}
	if (k == K_F)
		return sub ? f_sub(cg, x, y) : f_add(cg, x, y);
	return sub ? LLVMBuildSub(B, x, y, "") : LLVMBuildAdd(B, x, y, "");
}
SCALAR(l_add) { return add_like(cg, n, a[0], a[1], dt, false); }
SCALAR(l_sub) { return add_like(cg, n, a[0], a[1], dt, true); }

SCALAR(l_mul)
{
	switch (kind(dt)) {
	case K_F: return f_mul(cg, a[0], a[1]);
	case K_B: return LLVMBuildAnd(B, a[0], a[1], "");
	default: return LLVMBuildMul(B, a[0], a[1], "");
	}
}

/* Integer division pieces with a divisor made safe: y == 0 -> result 0,
 * y == -1 (signed) -> handled without overflow. */
static V safe_div(fj_cg *cg, V x, V y, bool is_signed, bool rem)
{
	V z = zero(y), one = LLVMConstInt(LLVMTypeOf(y), 1, 0);
	V y0 = icmp(cg, LLVMIntEQ, y, z);
	if (!is_signed) {
		V ys = sel(cg, y0, one, y);
		V r = rem ? LLVMBuildURem(B, x, ys, "") : LLVMBuildUDiv(B, x, ys, "");
		return sel(cg, y0, z, r);
	}
	V ym1 = icmp(cg, LLVMIntEQ, y, LLVMConstAllOnes(LLVMTypeOf(y)));
	V ys = sel(cg, LLVMBuildOr(B, y0, ym1, ""), one, y);
	V r = rem ? LLVMBuildSRem(B, x, ys, "") : LLVMBuildSDiv(B, x, ys, "");
	if (rem)
		return sel(cg, LLVMBuildOr(B, y0, ym1, ""), z, r);
	r = sel(cg, ym1, LLVMBuildSub(B, z, x, ""), r);
	return sel(cg, y0, z, r);
}

static V div_floor_float(fj_cg *cg, V x, V y, fj_dtype dt)
{
	/* ATen's div_floor_floating. */
	V z = cf(cg, dt, 0);
	V q = f_div(cg, x, y);
	V mod = LLVMBuildFRem(B, x, y, "");
	V div = f_div(cg, f_sub(cg, x, mod), y);
	V adj = LLVMBuildAnd(B, fcmp(cg, LLVMRealUNE, mod, z),
	                     LLVMBuildXor(B, fcmp(cg, LLVMRealOLT, y, z), fcmp(cg, LLVMRealOLT, mod, z), ""), "");
	div = sel(cg, adj, f_sub(cg, div, cf(cg, dt, 1)), div);
	V fl = intrin1(cg, "llvm.floor", div);
	fl = sel(cg, fcmp(cg, LLVMRealOGT, f_sub(cg, div, fl), cf(cg, dt, 0.5)), f_add(cg, fl, cf(cg, dt, 1)), fl);
	V signed0 = intrin2(cg, "llvm.copysign", z, q);
	V r = sel(cg, fcmp(cg, LLVMRealUNE, div, z), fl, signed0);
	return sel(cg, fcmp(cg, LLVMRealOEQ, y, z), q, r);
}

static V div_floor_int(fj_cg *cg, V x, V y, fj_dtype dt)
{
	if (kind(dt) == K_U)
		return safe_div(cg, x, y, false, false);
	V q = safe_div(cg, x, y, true, false), r = safe_div(cg, x, y, true, true);
	V z = zero(y);
	V adj = LLVMBuildAnd(B, icmp(cg, LLVMIntNE, r, z),
	                     LLVMBuildXor(B, icmp(cg, LLVMIntSLT, r, z), icmp(cg, LLVMIntSLT, y, z), ""), "");
	return sel(cg, adj, LLVMBuildSub(B, q, LLVMConstInt(LLVMTypeOf(q), 1, 0), ""), q);
}

SCALAR(l_div)
{
	const fj_attr *rm = attr_opt(cg, n, "rounding_mode");
	const char *mode = rm && rm->kind == FJ_AK_STR ? rm->u.s : NULL;
	int k = kind(dt);
	if (k == K_B)
		return LLVMBuildAnd(B, a[0], a[1], ""); /* x / true = x; x / false := 0 */
	if (k == K_F) {
		if (mode && strcmp(mode, "floor") == 0)
			return div_floor_float(cg, a[0], a[1], dt);
		V q = f_div(cg, a[0], a[1]);
		return mode && strcmp(mode, "trunc") == 0 ? intrin1(cg, "llvm.trunc", q) : q;
	}
	if (mode && strcmp(mode, "floor") == 0)
		return div_floor_int(cg, a[0], a[1], dt);
	return safe_div(cg, a[0], a[1], k == K_S, false); /* trunc (and prims.div on ints) */
}

/* Integer power by squaring, as ATen's powi, in a helper function per type. */
static V ipow(fj_cg *cg, V x, V y, bool is_signed)
{
	LLVMTypeRef ty = LLVMTypeOf(x);
	char name[32];
	snprintf(name, sizeof name, "fj.ipow.%c%u", is_signed ? 's' : 'u', LLVMGetIntTypeWidth(ty));
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
	LLVMTypeRef ps[2] = {ty, ty};
	LLVMTypeRef fty = LLVMFunctionType(ty, ps, 2, 0);
	if (!f) {
		f = LLVMAddFunction(cg->mod, name, fty);
		LLVMSetLinkage(f, LLVMInternalLinkage);
		LLVMBuilderRef b = LLVMCreateBuilderInContext(cg->llctx);
		LLVMBasicBlockRef e = LLVMAppendBasicBlockInContext(cg->llctx, f, "entry");
		LLVMBasicBlockRef neg = LLVMAppendBasicBlockInContext(cg->llctx, f, "neg");
		LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cg->llctx, f, "head");
		LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(cg->llctx, f, "body");
		LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cg->llctx, f, "done");
		V base = LLVMGetParam(f, 0), ex = LLVMGetParam(f, 1);
		V z = LLVMConstNull(ty), one = LLVMConstInt(ty, 1, 0), allones = LLVMConstAllOnes(ty);
		LLVMPositionBuilderAtEnd(b, e);
		V isneg = is_signed ? LLVMBuildICmp(b, LLVMIntSLT, ex, z, "") : LLVMConstInt(cg->t_i1, 0, 0);
		LLVMBuildCondBr(b, isneg, neg, head);
		/* ex < 0: 1 -> 1, -1 -> (ex odd ? -1 : 1), else 0 */
		LLVMPositionBuilderAtEnd(b, neg);
		V odd = LLVMBuildTrunc(b, ex, cg->t_i1, "");
		V r_m1 = LLVMBuildSelect(b, odd, allones, one, "");
		V r = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, base, one, ""), one,
		                      LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, base, allones, ""), r_m1, z, ""), "");
		LLVMBuildRet(b, r);
		LLVMPositionBuilderAtEnd(b, head);
		V pr = LLVMBuildPhi(b, ty, "r"), pb = LLVMBuildPhi(b, ty, "b"), pe = LLVMBuildPhi(b, ty, "e");
		LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, pe, z, ""), done, body);
		LLVMPositionBuilderAtEnd(b, body);
		V bit = LLVMBuildTrunc(b, pe, cg->t_i1, "");
		V nr = LLVMBuildSelect(b, bit, LLVMBuildMul(b, pr, pb, ""), pr, "");
		V nb = LLVMBuildMul(b, pb, pb, "");
		V ne = LLVMBuildLShr(b, pe, one, "");
		LLVMBuildBr(b, head);
		V in_r[2] = {one, nr}, in_b[2] = {base, nb}, in_e[2] = {ex, ne};
		LLVMBasicBlockRef from[2] = {e, body};
		LLVMAddIncoming(pr, in_r, from, 2);
		LLVMAddIncoming(pb, in_b, from, 2);
		LLVMAddIncoming(pe, in_e, from, 2);
		LLVMPositionBuilderAtEnd(b, done);
		LLVMBuildRet(b, pr);
		LLVMDisposeBuilder(b);
	}
	V args[2] = {x, y};
	return LLVMBuildCall2(B, fty, f, args, 2, "");
}

SCALAR(l_pow)
{
	int k = kind(dt);
	V x = a[0], y = a[1];
	if (k == K_B)
		return LLVMBuildOr(B, x, LLVMBuildNot(B, y, ""), ""); /* x ** 0 = 1 */
	if (k != K_F) {
		if (LLVMIsAConstantInt(y) && LLVMConstIntGetSExtValue(y) == 2)
			return LLVMBuildMul(B, x, x, "");
		return ipow(cg, x, y, k == K_S);
	}
	if (LLVMIsAConstantFP(y)) {
		LLVMBool lost;
		double e = LLVMConstRealGetDouble(y, &lost);
		V one = cf(cg, dt, 1);
		if (e == 0.5) return intrin1(cg, "llvm.sqrt", x);
		if (e == 2) return f_mul(cg, x, x);
		if (e == 3) return f_mul(cg, f_mul(cg, x, x), x);
		if (e == -0.5) return f_div(cg, one, intrin1(cg, "llvm.sqrt", x));
		if (e == -1) return f_div(cg, one, x);
		if (e == -2) return f_div(cg, one, f_mul(cg, x, x));
	}
	return fj_cg_math2(cg, FJ_MATH_POW, x, y);
}

SCALAR(l_maximum)
{
	switch (kind(dt)) {
	case K_F: return intrin2(cg, "llvm.maximum", a[0], a[1]);
	case K_S: return intrin2(cg, "llvm.smax", a[0], a[1]);
	case K_U: return intrin2(cg, "llvm.umax", a[0], a[1]);
	default: return LLVMBuildOr(B, a[0], a[1], "");
	}
}

SCALAR(l_minimum)
{
	switch (kind(dt)) {
	case K_F: return intrin2(cg, "llvm.minimum", a[0], a[1]);
	case K_S: return intrin2(cg, "llvm.smin", a[0], a[1]);
	case K_U: return intrin2(cg, "llvm.umin", a[0], a[1]);
	default: return LLVMBuildAnd(B, a[0], a[1], "");
	}
}

SCALAR(l_atan2) { return fj_cg_math2(cg, FJ_MATH_ATAN2, a[0], a[1]); }

SCALAR(l_fmod)
{
	switch (kind(dt)) {
	case K_F: return LLVMBuildFRem(B, a[0], a[1], "");
	case K_B: return LLVMConstInt(cg->t_i1, 0, 0);
	default: return safe_div(cg, a[0], a[1], kind(dt) == K_S, true);
	}
}

SCALAR(l_remainder)
{
	V x = a[0], y = a[1];
	switch (kind(dt)) {
	case K_F: {
		V z = cf(cg, dt, 0);
		V mod = LLVMBuildFRem(B, x, y, "");
		V adj = LLVMBuildAnd(B, fcmp(cg, LLVMRealUNE, mod, z),
		                     LLVMBuildXor(B, fcmp(cg, LLVMRealOLT, y, z), fcmp(cg, LLVMRealOLT, mod, z), ""), "");
		return sel(cg, adj, f_add(cg, mod, y), mod);
	}
	case K_S: {
		V z = zero(y);
		V r = safe_div(cg, x, y, true, true);
		V adj = LLVMBuildAnd(B, icmp(cg, LLVMIntNE, r, z),
		                     LLVMBuildXor(B, icmp(cg, LLVMIntSLT, r, z), icmp(cg, LLVMIntSLT, y, z), ""), "");
		return sel(cg, adj, LLVMBuildAdd(B, r, y, ""), r);
	}
	case K_U: return safe_div(cg, x, y, false, true);
	default: return LLVMConstInt(cg->t_i1, 0, 0);
	}
}

static V compare(fj_cg *cg, fj_op op, V x, V y, fj_dtype dt)
{
	int k = kind(dt);
	bool s = k == K_S;
	LLVMRealPredicate fp;
	LLVMIntPredicate ip;
	switch (op) {
	case FJ_OP_ATEN_EQ: case FJ_OP_PRIMS_EQ: fp = LLVMRealOEQ; ip = LLVMIntEQ; break;
	case FJ_OP_ATEN_NE: case FJ_OP_PRIMS_NE: fp = LLVMRealUNE; ip = LLVMIntNE; break;
	case FJ_OP_ATEN_LT: case FJ_OP_PRIMS_LT: fp = LLVMRealOLT; ip = s ? LLVMIntSLT : LLVMIntULT; break;
	case FJ_OP_ATEN_LE: case FJ_OP_PRIMS_LE: fp = LLVMRealOLE; ip = s ? LLVMIntSLE : LLVMIntULE; break;
	case FJ_OP_ATEN_GT: case FJ_OP_PRIMS_GT: fp = LLVMRealOGT; ip = s ? LLVMIntSGT : LLVMIntUGT; break;
	default: fp = LLVMRealOGE; ip = s ? LLVMIntSGE : LLVMIntUGE; break;
	}
	return k == K_F ? fcmp(cg, fp, x, y) : icmp(cg, ip, x, y);
}
SCALAR(l_compare) { return compare(cg, n->op, a[0], a[1], dt); }

SCALAR(l_logical)
{
	V x = truthy(cg, a[0], dt), y = truthy(cg, a[1], dt);
	switch (n->op) {
	case FJ_OP_ATEN_LOGICAL_AND: case FJ_OP_PRIMS_LOGICAL_AND: return LLVMBuildAnd(B, x, y, "");
	case FJ_OP_ATEN_LOGICAL_OR: case FJ_OP_PRIMS_LOGICAL_OR: return LLVMBuildOr(B, x, y, "");
	default: return LLVMBuildXor(B, x, y, "");
	}
}

SCALAR(l_bitwise)
{
	switch (n->op) {
	case FJ_OP_ATEN_BITWISE_AND: case FJ_OP_PRIMS_BITWISE_AND: return LLVMBuildAnd(B, a[0], a[1], "");
	case FJ_OP_ATEN_BITWISE_OR: case FJ_OP_PRIMS_BITWISE_OR: return LLVMBuildOr(B, a[0], a[1], "");
	default: return LLVMBuildXor(B, a[0], a[1], "");
	}
}

/* ---- other ---- */

SCALAR(l_where) { return sel(cg, a[0], a[1], a[2]); } /* a[0] arrives as bool */

SCALAR(l_lerp)
{
	/* ATen: |w| < 0.5 ? self + w (end - self) : end - (end - self) (1 - w) */
	V s = a[0], e = a[1], w = a[2];
	V d = f_sub(cg, e, s);
	V small = fcmp(cg, LLVMRealOLT, intrin1(cg, "llvm.fabs", w), cf(cg, dt, 0.5));
	V r1 = f_add(cg, s, f_mul(cg, w, d));
	V r2 = f_sub(cg, e, f_mul(cg, d, f_sub(cg, cf(cg, dt, 1), w)));
	return sel(cg, small, r1, r2);
}

SCALAR(l_addcmul)
{
	V v = attr_val(cg, n, "value", dt, 1);
	switch (kind(dt)) {
	case K_F: return f_add(cg, a[0], f_mul(cg, f_mul(cg, v, a[1]), a[2]));
	case K_B: return LLVMBuildOr(B, a[0], LLVMBuildAnd(B, v, LLVMBuildAnd(B, a[1], a[2], ""), ""), "");
	default: return LLVMBuildAdd(B, a[0], LLVMBuildMul(B, LLVMBuildMul(B, v, a[1], ""), a[2], ""), "");
	}
}

/* dt is the input's compute dtype; the result is converted. */
SCALAR(l_convert) { return fj_cg_convert(cg, a[0], dt, res_dtype(g, n)); }

SCALAR(l_masked_fill) { return sel(cg, a[1], a[2], a[0]); } /* a[1] arrives as bool */

/* ---- pointwise backward ops ---- */

SCALAR(l_threshold_backward)
{
	V th = attr_val(cg, n, "threshold", dt, 0);
	V le = kind(dt) == K_F ? fcmp(cg, LLVMRealOLE, a[1], th) : icmp(cg, kind(dt) == K_S ? LLVMIntSLE : LLVMIntULE, a[1], th);
	return sel(cg, le, zero(a[0]), a[0]);
}

SCALAR(l_gelu_backward)
{
	V dy = a[0], x = a[1], half = cf(cg, dt, 0.5), one = cf(cg, dt, 1);
	if (gelu_tanh(cg, n)) {
		const double kb = M_SQRT2 * M_2_SQRTPI * 0.5, kk = 0.044715;
		V xsq = f_mul(cg, x, x), xcube = f_mul(cg, xsq, x);
		V inner = f_mul(cg, cf(cg, dt, kb), f_add(cg, x, f_mul(cg, cf(cg, dt, kk), xcube)));
		V t = m1(cg, FJ_MATH_TANH, inner);
		V left = f_mul(cg, half, x), right = f_add(cg, one, t);
		V left_d = f_mul(cg, half, right);
		V tanh_d = f_sub(cg, one, f_mul(cg, t, t));
		V inner_d = f_mul(cg, cf(cg, dt, kb), f_add(cg, one, f_mul(cg, cf(cg, dt, 3 * kk), xsq)));
		V right_d = f_mul(cg, f_mul(cg, left, tanh_d), inner_d);
		return f_mul(cg, dy, f_add(cg, left_d, right_d));
	}
	const double ka = M_SQRT1_2, kb = M_2_SQRTPI * M_SQRT1_2 * 0.5;
	V cdf = f_mul(cg, half, f_add(cg, one, m1(cg, FJ_MATH_ERF, f_mul(cg, x, cf(cg, dt, ka)))));
	V pdf = f_mul(cg, cf(cg, dt, kb), m1(cg, FJ_MATH_EXP, f_mul(cg, f_mul(cg, x, x), cf(cg, dt, -0.5))));
	return f_mul(cg, dy, f_add(cg, cdf, f_mul(cg, x, pdf)));
}

SCALAR(l_sigmoid_backward)
{
	return f_mul(cg, f_mul(cg, a[0], f_sub(cg, cf(cg, dt, 1), a[1])), a[1]);
}

SCALAR(l_tanh_backward)
{
	return f_mul(cg, a[0], f_sub(cg, cf(cg, dt, 1), f_mul(cg, a[1], a[1])));
}

SCALAR(l_silu_backward)
{
	V s = sigmoid(cg, a[1], dt), one = cf(cg, dt, 1);
	return f_mul(cg, f_mul(cg, a[0], s), f_add(cg, one, f_mul(cg, a[1], f_sub(cg, one, s))));
}

SCALAR(l_leaky_relu_backward)
{
	V s = attr_val(cg, n, "negative_slope", dt, 0.01);
	return sel(cg, fcmp(cg, LLVMRealOGT, a[1], zero(a[1])), a[0], f_mul(cg, a[0], s));
}

SCALAR(l_hardtanh_backward)
{
	V lo = attr_val(cg, n, "min_val", dt, -1), hi = attr_val(cg, n, "max_val", dt, 1);
	V out = LLVMBuildOr(B, fcmp(cg, LLVMRealOLE, a[1], lo), fcmp(cg, LLVMRealOGE, a[1], hi), "");
	return sel(cg, out, zero(a[0]), a[0]);
}
#undef B

/* ---- the table ---- */

#define BOTH(X, f) [FJ_OP_ATEN_##X] = f, [FJ_OP_PRIMS_##X] = f
static const fj_cg_scalar_fn lowering[FJ_OP_COUNT] = {
	BOTH(ABS, l_abs), BOTH(NEG, l_neg),
	BOTH(EXP, l_math1), BOTH(EXP2, l_math1), BOTH(EXPM1, l_math1), BOTH(LOG, l_math1),
	BOTH(LOG2, l_math1), BOTH(LOG10, l_math1), BOTH(LOG1P, l_math1),
	BOTH(SQRT, l_sqrt), BOTH(RSQRT, l_rsqrt), BOTH(RECIPROCAL, l_reciprocal),
	BOTH(SIN, l_math1), BOTH(COS, l_math1), BOTH(TAN, l_math1), BOTH(TANH, l_math1),
	BOTH(SINH, l_math1), BOTH(COSH, l_math1), BOTH(ASIN, l_math1), BOTH(ACOS, l_math1),
	BOTH(ATAN, l_math1), BOTH(ASINH, l_math1), BOTH(ACOSH, l_math1), BOTH(ATANH, l_math1),
	BOTH(ERF, l_math1), BOTH(ERFC, l_math1),
	BOTH(FLOOR, l_rounding), BOTH(CEIL, l_rounding), BOTH(ROUND, l_rounding), BOTH(TRUNC, l_rounding),
	BOTH(SIGN, l_sign), BOTH(LOGICAL_NOT, l_logical_not), BOTH(BITWISE_NOT, l_bitwise_not),
	BOTH(ISNAN, l_isnan), BOTH(ISINF, l_isinf),
	[FJ_OP_ATEN_SIGMOID] = l_sigmoid, [FJ_OP_ATEN_RELU] = l_relu, [FJ_OP_ATEN_GELU] = l_gelu,
	[FJ_OP_ATEN_SILU] = l_silu, [FJ_OP_ATEN_LEAKY_RELU] = l_leaky_relu, [FJ_OP_ATEN_ELU] = l_elu,
	[FJ_OP_ATEN_SOFTPLUS] = l_softplus, [FJ_OP_ATEN_HARDSIGMOID] = l_hardsigmoid,
	[FJ_OP_ATEN_HARDSWISH] = l_hardswish, [FJ_OP_ATEN_HARDTANH] = l_hardtanh,
	BOTH(ADD, l_add), BOTH(SUB, l_sub), BOTH(MUL, l_mul), BOTH(DIV, l_div), BOTH(POW, l_pow),
	BOTH(MAXIMUM, l_maximum), BOTH(MINIMUM, l_minimum), BOTH(ATAN2, l_atan2),
	BOTH(FMOD, l_fmod), BOTH(REMAINDER, l_remainder),
	BOTH(EQ, l_compare), BOTH(NE, l_compare), BOTH(LT, l_compare), BOTH(LE, l_compare),
	BOTH(GT, l_compare), BOTH(GE, l_compare),
	BOTH(LOGICAL_AND, l_logical), BOTH(LOGICAL_OR, l_logical), BOTH(LOGICAL_XOR, l_logical),
	BOTH(BITWISE_AND, l_bitwise), BOTH(BITWISE_OR, l_bitwise), BOTH(BITWISE_XOR, l_bitwise),
	BOTH(WHERE, l_where),
	[FJ_OP_ATEN_CLAMP] = l_clamp, [FJ_OP_ATEN_LERP] = l_lerp, [FJ_OP_ATEN_ADDCMUL] = l_addcmul,
	[FJ_OP_ATEN__TO_COPY] = l_convert, [FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE] = l_convert,
	[FJ_OP_ATEN_MASKED_FILL] = l_masked_fill,
	[FJ_OP_ATEN_THRESHOLD_BACKWARD] = l_threshold_backward,
	[FJ_OP_ATEN_GELU_BACKWARD] = l_gelu_backward,
	[FJ_OP_ATEN_SIGMOID_BACKWARD] = l_sigmoid_backward,
	[FJ_OP_ATEN_TANH_BACKWARD] = l_tanh_backward,
	[FJ_OP_ATEN_SILU_BACKWARD] = l_silu_backward,
	[FJ_OP_ATEN_LEAKY_RELU_BACKWARD] = l_leaky_relu_backward,
	[FJ_OP_ATEN_HARDTANH_BACKWARD] = l_hardtanh_backward,
};
#undef BOTH

fj_cg_scalar_fn fj_cg_scalar_lowering(fj_op op)
{
	return (unsigned)op < FJ_OP_COUNT ? lowering[op] : NULL;
}

fj_dtype fj_cg_pointwise_dtype(const fj_graph *g, const fj_node *n)
{
	if (n->op == FJ_OP_ATEN__TO_COPY || n->op == FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE)
		return fj_cg_compute_dtype(fj_val(g, n->opnds[0])->type.dtype);
	fj_dtype rd = res_dtype(g, n);
	if (rd != FJ_DT_BOOL)
		return fj_cg_compute_dtype(rd);
	/* A bool result (comparisons, logical ops, isnan ...): compute in the
	 * operands' promoted dtype (where's and masked_fill's condition aside). */
	fj_rtstate s;
	fj_rt_init(&s);
	for (uint32_t i = 0; i < n->nopnds; i++) {
		if (n->opnds[i] == FJ_NOVAL)
			continue;
		if ((n->op == FJ_OP_ATEN_WHERE || n->op == FJ_OP_PRIMS_WHERE) && i == 0)
			continue;
		if (n->op == FJ_OP_ATEN_MASKED_FILL && i == 1)
			continue;
		fj_rt_add(&s, &fj_val(g, n->opnds[i])->type);
	}
	return fj_cg_compute_dtype(fj_rt_result(&s));
}
