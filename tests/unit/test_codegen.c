/* test_codegen.c -- codegen/ and backend_host/jit.c: per-node kernels built
 * with the builder, compiled by the host JIT, run on small buffers and
 * compared with references computed here in double precision. */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "backend_host/host.h"
#include "build.h"
#include "cache/kcache.h"
#include "codegen/cg.h"
#include "test.h"

typedef struct T {
	fj_context *ctx;
	fj_module *m;
	fj_graph *g;
	fj_builder b;
} T;

static void t_init(T *t)
{
	t->ctx = fj_context_create(NULL, NULL);
	ck_assert_ptr_nonnull(t->ctx);
	t->m = fj_module_create(t->ctx);
	t->g = fj_module_add_graph(t->m, "t", (fj_loc){0});
	fj_builder_init(&t->b, t->g, (fj_loc){0});
}

static void t_fini(T *t)
{
	fj_module_destroy(t->m);
	fj_context_destroy(t->ctx);
}

static fj_vid param(T *t, const char *name, fj_dtype dt, int rank, const fj_dim *dims)
{
	fj_type ty = {dt, (uint8_t)rank, false, (fj_dim *)dims};
	fj_vid v = fj_b_param(&t->b, name, ty);
	ck_assert_uint_ne(v, FJ_NOVAL);
	return v;
}

static uint32_t node_of(T *t, fj_vid v)
{
	ck_assert_msg(fj_b_status(&t->b) == FJ_OK, "build failed: %s", fj_context_error(t->ctx));
	ck_assert_uint_ne(v, FJ_NOVAL);
	return fj_val(t->g, v)->def;
}

static fj_vid op(T *t, fj_op o, const fj_vid *in, uint32_t nin, const fj_named_attr *at, uint32_t nat)
{
	fj_vid v = fj_b_op1(&t->b, o, in, nin, at, nat);
	ck_assert_msg(fj_b_status(&t->b) == FJ_OK, "%s: %s", fj_op_name(o), fj_context_error(t->ctx));
	return v;
}

/* Compiles node `node` and runs it: bufs = operands then results (NULL for
 * literals and none); dims as the ABI wants them, or NULL: from the static
 * types. Returns the kernel's status. */
static int32_t run_dims(T *t, uint32_t node, void **bufs, const int64_t *dims_in, uint32_t *compiled)
{
	fj_host_kernel k;
	uint32_t nc = 99;
	fj_status st = fj_host_compile_nodes(t->ctx, t->g, &node, 1, &k, &nc);
	ck_assert_msg(st == FJ_OK, "compile failed: %s", fj_context_error(t->ctx));
	if (compiled)
		*compiled = nc;
	const fj_node *n = &t->g->nodes[node];
	int64_t dims[256];
	const int64_t *d = dims_in;
	if (!d) {
		int di = 0;
		for (uint32_t i = 0; i < n->nopnds; i++) {
			if (n->opnds[i] == FJ_NOVAL)
				continue;
			const fj_type *ty = &fj_val(t->g, n->opnds[i])->type;
			for (int j = 0; j < ty->rank; j++)
				dims[di++] = ty->dims[j];
		}
		for (uint32_t i = 0; i < n->nres; i++) {
			const fj_type *ty = &fj_val(t->g, n->res[i])->type;
			for (int j = 0; j < ty->rank; j++) {
				ck_assert(ty->dims[j] >= 0);
				dims[di++] = ty->dims[j];
			}
		}
		d = dims;
	}
	/* The extent: the result par_out's dims in par_mask. */
	int off = 0;
	for (uint32_t i = 0; i < n->nopnds; i++)
		if (n->opnds[i] != FJ_NOVAL)
			off += fj_val(t->g, n->opnds[i])->type.rank;
	for (uint32_t i = 0; i < k.par_out; i++)
		off += fj_val(t->g, n->res[i])->type.rank;
	int64_t extent = 1;
	int rank = fj_val(t->g, n->res[k.par_out])->type.rank;
	for (int j = 0; j < rank; j++)
		if (k.par_mask >> j & 1)
			extent *= d[off + j];
	return k.fn(bufs, d, 0, extent);
}

static void run(T *t, uint32_t node, void **bufs)
{
	int32_t r = run_dims(t, node, bufs, NULL, NULL);
	ck_assert_int_eq(r, 0);
}

/* ---- f16 / bf16 in C, for references ---- */

static uint16_t f2h(float f)
{
	_Float16 h = (_Float16)f;
	uint16_t u;
	memcpy(&u, &h, 2);
	return u;
}

static float h2f(uint16_t u)
{
	_Float16 h;
	memcpy(&h, &u, 2);
	return (float)h;
}

static uint16_t f2bf(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (f != f)
		return (uint16_t)((u | 0x400000u) >> 16);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float bf2f(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static bool close_to(double got, double want, double tol)
{
	if (isnan(want))
		return isnan(got);
	if (isinf(want))
		return got == want;
	return fabs(got - want) <= tol * (1 + fabs(want));
}

/* ---- unary float ops ---- */

static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_relu(double x) { return x < 0 ? 0 : x; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_sign(double x) { return (x > 0) - (x < 0); }
static double r_leaky(double x) { return x > 0 ? x : 0.01 * x; }
static double r_elu(double x) { return x <= 0 ? expm1(x) : x; }
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double r_hsig(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
static double r_hswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double r_htanh(double x) { return fmin(fmax(x, -1), 1); }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_recip(double x) { return 1 / x; }
static double r_neg(double x) { return -x; }
static double r_round(double x) { return nearbyint(x); }
static double r_exp2(double x) { return exp2(x); }

typedef struct unary_case {
	fj_op aten, prims; /* prims: FJ_OP_COUNT when none */
	double (*ref)(double);
	double lo, hi;
} unary_case;

#define NP FJ_OP_COUNT
static const unary_case unary_cases[] = {
	{FJ_OP_ATEN_ABS, FJ_OP_PRIMS_ABS, fabs, -3, 3},
	{FJ_OP_ATEN_NEG, FJ_OP_PRIMS_NEG, r_neg, -3, 3},
	{FJ_OP_ATEN_EXP, FJ_OP_PRIMS_EXP, exp, -3, 3},
	{FJ_OP_ATEN_EXP2, FJ_OP_PRIMS_EXP2, r_exp2, -3, 3},
	{FJ_OP_ATEN_EXPM1, FJ_OP_PRIMS_EXPM1, expm1, -3, 3},
	{FJ_OP_ATEN_LOG, FJ_OP_PRIMS_LOG, log, 0.1, 5},
	{FJ_OP_ATEN_LOG2, FJ_OP_PRIMS_LOG2, log2, 0.1, 5},
	{FJ_OP_ATEN_LOG10, FJ_OP_PRIMS_LOG10, log10, 0.1, 5},
	{FJ_OP_ATEN_LOG1P, FJ_OP_PRIMS_LOG1P, log1p, -0.5, 5},
	{FJ_OP_ATEN_SQRT, FJ_OP_PRIMS_SQRT, sqrt, 0, 5},
	{FJ_OP_ATEN_RSQRT, FJ_OP_PRIMS_RSQRT, r_rsqrt, 0.1, 5},
	{FJ_OP_ATEN_RECIPROCAL, FJ_OP_PRIMS_RECIPROCAL, r_recip, 0.1, 5},
	{FJ_OP_ATEN_SIN, FJ_OP_PRIMS_SIN, sin, -3, 3},
	{FJ_OP_ATEN_COS, FJ_OP_PRIMS_COS, cos, -3, 3},
	{FJ_OP_ATEN_TAN, FJ_OP_PRIMS_TAN, tan, -1, 1},
	{FJ_OP_ATEN_TANH, FJ_OP_PRIMS_TANH, tanh, -3, 3},
	{FJ_OP_ATEN_SINH, FJ_OP_PRIMS_SINH, sinh, -3, 3},
	{FJ_OP_ATEN_COSH, FJ_OP_PRIMS_COSH, cosh, -3, 3},
	{FJ_OP_ATEN_ASIN, FJ_OP_PRIMS_ASIN, asin, -0.9, 0.9},
	{FJ_OP_ATEN_ACOS, FJ_OP_PRIMS_ACOS, acos, -0.9, 0.9},
	{FJ_OP_ATEN_ATAN, FJ_OP_PRIMS_ATAN, atan, -3, 3},
	{FJ_OP_ATEN_ASINH, FJ_OP_PRIMS_ASINH, asinh, -3, 3},
	{FJ_OP_ATEN_ACOSH, FJ_OP_PRIMS_ACOSH, acosh, 1, 4},
	{FJ_OP_ATEN_ATANH, FJ_OP_PRIMS_ATANH, atanh, -0.9, 0.9},
	{FJ_OP_ATEN_ERF, FJ_OP_PRIMS_ERF, erf, -3, 3},
	{FJ_OP_ATEN_ERFC, FJ_OP_PRIMS_ERFC, erfc, -3, 3},
	{FJ_OP_ATEN_FLOOR, FJ_OP_PRIMS_FLOOR, floor, -3, 3},
	{FJ_OP_ATEN_CEIL, FJ_OP_PRIMS_CEIL, ceil, -3, 3},
	{FJ_OP_ATEN_ROUND, FJ_OP_PRIMS_ROUND, r_round, -3, 3},
	{FJ_OP_ATEN_TRUNC, FJ_OP_PRIMS_TRUNC, trunc, -3, 3},
	{FJ_OP_ATEN_SIGN, FJ_OP_PRIMS_SIGN, r_sign, -3, 3},
	{FJ_OP_ATEN_SIGMOID, NP, r_sigmoid, -5, 5},
	{FJ_OP_ATEN_RELU, NP, r_relu, -3, 3},
	{FJ_OP_ATEN_GELU, NP, r_gelu, -3, 3},
	{FJ_OP_ATEN_SILU, NP, r_silu, -5, 5},
	{FJ_OP_ATEN_LEAKY_RELU, NP, r_leaky, -3, 3},
	{FJ_OP_ATEN_ELU, NP, r_elu, -3, 3},
	{FJ_OP_ATEN_SOFTPLUS, NP, r_softplus, -3, 25},
	{FJ_OP_ATEN_HARDSIGMOID, NP, r_hsig, -5, 5},
	{FJ_OP_ATEN_HARDSWISH, NP, r_hswish, -5, 5},
	{FJ_OP_ATEN_HARDTANH, NP, r_htanh, -3, 3},
};

enum { NU = 23 }; /* odd, so that vector loops have a remainder */

static void check_unary(fj_op o, fj_dtype dt, double (*ref)(double), double lo, double hi)
{
	T t;
	t_init(&t);
	fj_dim d[2] = {1, NU};
	fj_vid x = param(&t, "x", dt, 2, d);
	fj_vid y = op(&t, o, &x, 1, NULL, 0);
	uint32_t nd = node_of(&t, y);
	double in[NU];
	for (int i = 0; i < NU; i++)
		in[i] = lo + (hi - lo) * i / (NU - 1);
	union { float f[NU]; double d[NU]; uint16_t h[NU]; } xb, yb;
	for (int i = 0; i < NU; i++) {
		switch (dt) {
		case FJ_DT_F32: xb.f[i] = (float)in[i]; break;
		case FJ_DT_F64: xb.d[i] = in[i]; break;
		case FJ_DT_F16: xb.h[i] = f2h((float)in[i]); break;
		default: xb.h[i] = f2bf((float)in[i]); break;
		}
	}
	void *bufs[2] = {&xb, &yb};
	run(&t, nd, bufs);
	for (int i = 0; i < NU; i++) {
		double xi, got, tol;
		switch (dt) {
		case FJ_DT_F32: xi = xb.f[i]; got = yb.f[i]; tol = 2e-6; break;
		case FJ_DT_F64: xi = xb.d[i]; got = yb.d[i]; tol = 1e-13; break;
		case FJ_DT_F16: xi = h2f(xb.h[i]); got = h2f(yb.h[i]); tol = 1e-3; break;
		default: xi = bf2f(xb.h[i]); got = bf2f(yb.h[i]); tol = 8e-3; break;
		}
		double want = ref(xi);
		ck_assert_msg(close_to(got, want, tol), "%s %s(%.17g) = %.17g, want %.17g", fj_op_name(o),
		              fj_dtype_name(dt), xi, got, want);
	}
	t_fini(&t);
}

START_TEST(test_unary_float)
{
	const unary_case *c = &unary_cases[_i];
	const fj_dtype dts[] = {FJ_DT_F32, FJ_DT_F64, FJ_DT_F16, FJ_DT_BF16};
	for (size_t k = 0; k < FJ_ARRAY_LEN(dts); k++) {
		check_unary(c->aten, dts[k], c->ref, c->lo, c->hi);
		if (c->prims != NP)
			check_unary(c->prims, dts[k], c->ref, c->lo, c->hi);
	}
}
END_TEST


/* ---- binary ops, f32/f64/f16/bf16 ---- */

static double r_add2(double a, double b) { return a + 2 * b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return fmax(a, b); }
static double r_min(double a, double b) { return fmin(a, b); }
static double r_rem(double a, double b)
{
	double m = fmod(a, b);
	if (m != 0 && ((b < 0) != (m < 0)))
		m += b;
	return m;
}
static double r_floordiv(double a, double b) { return floor(a / b); }
static double r_truncdiv(double a, double b) { return trunc(a / b); }
static double r_lt(double a, double b) { return a < b; }
static double r_ge(double a, double b) { return a >= b; }
static double r_ne(double a, double b) { return a != b; }

typedef struct binary_case {
	fj_op op;
	double (*ref)(double, double);
	const char *mode; /* div rounding_mode / alpha=2 marker */
	bool boolean;     /* bool result */
} binary_case;

static const binary_case binary_cases[] = {
	{FJ_OP_ATEN_ADD, r_add2, "alpha", false},
	{FJ_OP_ATEN_SUB, r_sub, NULL, false},
	{FJ_OP_ATEN_MUL, r_mul, NULL, false},
	{FJ_OP_ATEN_DIV, r_div, NULL, false},
	{FJ_OP_ATEN_DIV, r_floordiv, "floor", false},
	{FJ_OP_ATEN_DIV, r_truncdiv, "trunc", false},
	{FJ_OP_ATEN_POW, pow, NULL, false},
	{FJ_OP_ATEN_MAXIMUM, r_max, NULL, false},
	{FJ_OP_ATEN_MINIMUM, r_min, NULL, false},
	{FJ_OP_ATEN_ATAN2, atan2, NULL, false},
	{FJ_OP_ATEN_FMOD, fmod, NULL, false},
	{FJ_OP_ATEN_REMAINDER, r_rem, NULL, false},
	{FJ_OP_ATEN_LT, r_lt, NULL, true},
	{FJ_OP_ATEN_GE, r_ge, NULL, true},
	{FJ_OP_ATEN_NE, r_ne, NULL, true},
	{FJ_OP_PRIMS_ADD, r_add2, NULL, false}, /* no alpha: checked as a + b below */
	{FJ_OP_PRIMS_DIV, r_div, NULL, false},
	{FJ_OP_PRIMS_REMAINDER, r_rem, NULL, false},
	{FJ_OP_PRIMS_POW, pow, NULL, false},
};

static double load_f(const void *p, fj_dtype dt, int i)
{
	switch (dt) {
	case FJ_DT_F32: return ((const float *)p)[i];
	case FJ_DT_F64: return ((const double *)p)[i];
	case FJ_DT_F16: return h2f(((const uint16_t *)p)[i]);
	case FJ_DT_BF16: return bf2f(((const uint16_t *)p)[i]);
	case FJ_DT_BOOL: return ((const uint8_t *)p)[i];
	case FJ_DT_I32: return ((const int32_t *)p)[i];
	case FJ_DT_I64: return (double)((const int64_t *)p)[i];
	default: ck_abort(); return 0;
	}
}

static void store_f(void *p, fj_dtype dt, int i, double v)
{
	switch (dt) {
	case FJ_DT_F32: ((float *)p)[i] = (float)v; break;
	case FJ_DT_F64: ((double *)p)[i] = v; break;
	case FJ_DT_F16: ((uint16_t *)p)[i] = f2h((float)v); break;
	case FJ_DT_BF16: ((uint16_t *)p)[i] = f2bf((float)v); break;
	case FJ_DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	case FJ_DT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
	default: ck_abort();
	}
}

static double dtype_tol(fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F32: return 2e-6;
	case FJ_DT_F64: return 1e-13;
	case FJ_DT_F16: return 1e-3;
	default: return 8e-3;
	}
}

START_TEST(test_binary_float)
{
	const binary_case *c = &binary_cases[_i];
	const fj_dtype dts[] = {FJ_DT_F32, FJ_DT_F64, FJ_DT_F16, FJ_DT_BF16};
	for (size_t k = 0; k < FJ_ARRAY_LEN(dts); k++) {
		fj_dtype dt = dts[k];
		T t;
		t_init(&t);
		/* a: [3,5], b: [5] (broadcast; prims: same shape) */
		bool prims = c->op >= FJ_OP_PRIMS_ABS;
		fj_dim da[2] = {3, 5}, db[2] = {3, 5};
		fj_vid a = param(&t, "a", dt, 2, da);
		fj_vid b = prims ? param(&t, "b", dt, 2, db) : param(&t, "b", dt, 1, db + 1);
		fj_named_attr at[1];
		uint32_t nat = 0;
		if (c->mode && strcmp(c->mode, "alpha") == 0)
			at[nat++] = (fj_named_attr){"alpha", fj_attr_int(2)};
		else if (c->mode)
			at[nat++] = (fj_named_attr){"rounding_mode", fj_attr_str(t.g, c->mode)};
		fj_vid y = op(&t, c->op, (fj_vid[]){a, b}, 2, at, nat);
		uint32_t nd = node_of(&t, y);
		char ab[15 * 8], bb[15 * 8], yb[15 * 8];
		int nb = prims ? 15 : 5;
		for (int i = 0; i < 15; i++)
			store_f(ab, dt, i, -3.25 + 0.5 * i);
		for (int i = 0; i < nb; i++)
			store_f(bb, dt, i, (i % 5) == 2 ? 1.5 : -1.75 + 0.75 * (i % 5) + (i / 5) * 0.125);
		if (c->op == FJ_OP_ATEN_POW || c->op == FJ_OP_PRIMS_POW)
			for (int i = 0; i < 15; i++)
				store_f(ab, dt, i, 0.25 + 0.5 * i);
		void *bufs[3] = {ab, bb, yb};
		run(&t, nd, bufs);
		fj_dtype rd = fj_val(t.g, y)->type.dtype;
		for (int i = 0; i < 15; i++) {
			double x0 = load_f(ab, dt, i), x1 = load_f(bb, dt, prims ? i : i % 5);
			double want = c->op == FJ_OP_PRIMS_ADD ? x0 + x1 : c->ref(x0, x1);
			double got = load_f(yb, rd, i);
			ck_assert_msg(close_to(got, want, c->boolean ? 0 : dtype_tol(dt)), "%s %s(%g, %g) = %.17g, want %.17g",
			              fj_op_name(c->op), fj_dtype_name(dt), x0, x1, got, want);
		}
		t_fini(&t);
	}
}
END_TEST

/* Runs a binary op on int arrays of dtype dt (values given as int64). */
static void int_binary(fj_op o, fj_dtype dt, const char *mode, const int64_t *a, const int64_t *b,
                       const int64_t *want, int n)
{
	T t;
	t_init(&t);
	fj_dim d[1] = {n};
	fj_vid x = param(&t, "a", dt, 1, d), y = param(&t, "b", dt, 1, d);
	fj_named_attr at[1];
	uint32_t nat = 0;
	if (mode)
		at[nat++] = (fj_named_attr){"rounding_mode", fj_attr_str(t.g, mode)};
	fj_vid r = op(&t, o, (fj_vid[]){x, y}, 2, at, nat);
	uint32_t nd = node_of(&t, r);
	fj_dtype rd = fj_val(t.g, r)->type.dtype;
	int64_t ab[16], bb[16], rb[16];
	int sz = fj_dtype_size(dt);
	for (int i = 0; i < n; i++) {
		memcpy((char *)ab + i * sz, &a[i], (size_t)sz); /* little endian */
		memcpy((char *)bb + i * sz, &b[i], (size_t)sz);
	}
	void *bufs[3] = {ab, bb, rb};
	run(&t, nd, bufs);
	int rs = fj_dtype_size(rd);
	for (int i = 0; i < n; i++) {
		int64_t got = 0;
		memcpy(&got, (char *)rb + i * rs, (size_t)rs);
		if (rd != FJ_DT_U8 && rd != FJ_DT_BOOL && rs < 8 && (got >> (rs * 8 - 1)) & 1)
			got |= -(INT64_C(1) << (rs * 8)); /* sign-extend */
		ck_assert_msg(got == want[i], "%s %s %s: [%d] %lld op %lld = %lld, want %lld", fj_op_name(o),
		              fj_dtype_name(dt), mode ? mode : "", i, (long long)a[i], (long long)b[i], (long long)got,
		              (long long)want[i]);
	}
	t_fini(&t);
}

START_TEST(test_int_ops)
{
	const int64_t a[] = {7, -7, 7, -7, 5, INT32_MIN, 3, 0};
	const int64_t b[] = {2, 2, -2, -2, 0, -1, 1, 0};
	/* trunc: C division; by zero: 0 (defined); INT_MIN / -1 wraps */
	int_binary(FJ_OP_ATEN_DIV, FJ_DT_I32, "trunc", a, b, (int64_t[]){3, -3, -3, 3, 0, INT32_MIN, 3, 0}, 8);
	int_binary(FJ_OP_ATEN_DIV, FJ_DT_I32, "floor", a, b, (int64_t[]){3, -4, -4, 3, 0, INT32_MIN, 3, 0}, 8);
	int_binary(FJ_OP_ATEN_REMAINDER, FJ_DT_I32, NULL, a, b, (int64_t[]){1, 1, -1, -1, 0, 0, 0, 0}, 8);
	int_binary(FJ_OP_ATEN_FMOD, FJ_DT_I32, NULL, a, b, (int64_t[]){1, -1, 1, -1, 0, 0, 0, 0}, 8);
	int_binary(FJ_OP_PRIMS_DIV, FJ_DT_I64, NULL, a, b, (int64_t[]){3, -3, -3, 3, 0, -(int64_t)INT32_MIN, 3, 0}, 8);
	int_binary(FJ_OP_ATEN_MAXIMUM, FJ_DT_I64, NULL, a, b, (int64_t[]){7, 2, 7, -2, 5, -1, 3, 0}, 8);
	int_binary(FJ_OP_ATEN_LT, FJ_DT_I32, NULL, a, b, (int64_t[]){0, 1, 0, 1, 0, 1, 0, 0}, 8);
	/* true division of ints: f32 */
	/* pow: squaring; negative exponents as ATen's powi */
	const int64_t pa[] = {2, 3, -2, 1, -1, -1, 2, 0};
	const int64_t pb[] = {10, 3, 3, -5, -3, -4, -1, 0};
	int_binary(FJ_OP_ATEN_POW, FJ_DT_I64, NULL, pa, pb, (int64_t[]){1024, 27, -8, 1, -1, 1, 0, 1}, 8);
	int_binary(FJ_OP_ATEN_POW, FJ_DT_I32, NULL, pa, pb, (int64_t[]){1024, 27, -8, 1, -1, 1, 0, 1}, 8);
	/* u8: unsigned compare, wrapping add */
	const int64_t ua[] = {200, 10, 255, 0}, ub[] = {100, 20, 1, 0};
	int_binary(FJ_OP_ATEN_ADD, FJ_DT_U8, NULL, ua, ub, (int64_t[]){44, 30, 0, 0}, 4);
	int_binary(FJ_OP_ATEN_GT, FJ_DT_U8, NULL, ua, ub, (int64_t[]){1, 0, 1, 0}, 4);
	int_binary(FJ_OP_ATEN_DIV, FJ_DT_U8, "floor", ua, ub, (int64_t[]){2, 0, 255, 0}, 4);
	/* bitwise and logical ops on ints and bools */
	const int64_t xa[] = {12, -1, 0, 5}, xb[] = {10, 7, 3, 0};
	int_binary(FJ_OP_ATEN_BITWISE_AND, FJ_DT_I16, NULL, xa, xb, (int64_t[]){8, 7, 0, 0}, 4);
	int_binary(FJ_OP_ATEN_BITWISE_OR, FJ_DT_I8, NULL, xa, xb, (int64_t[]){14, -1, 3, 5}, 4);
	int_binary(FJ_OP_PRIMS_BITWISE_XOR, FJ_DT_I32, NULL, xa, xb, (int64_t[]){6, -8, 3, 5}, 4);
	int_binary(FJ_OP_ATEN_LOGICAL_AND, FJ_DT_I32, NULL, xa, xb, (int64_t[]){1, 1, 0, 0}, 4);
	int_binary(FJ_OP_ATEN_LOGICAL_XOR, FJ_DT_I32, NULL, xa, xb, (int64_t[]){0, 0, 1, 1}, 4);
	const int64_t ba[] = {1, 1, 0, 0}, bb2[] = {1, 0, 1, 0};
	int_binary(FJ_OP_ATEN_BITWISE_XOR, FJ_DT_BOOL, NULL, ba, bb2, (int64_t[]){0, 1, 1, 0}, 4);
	int_binary(FJ_OP_ATEN_ADD, FJ_DT_BOOL, NULL, ba, bb2, (int64_t[]){1, 1, 1, 0}, 4);
	int_binary(FJ_OP_ATEN_MUL, FJ_DT_BOOL, NULL, ba, bb2, (int64_t[]){1, 0, 0, 0}, 4);
	int_binary(FJ_OP_ATEN_LOGICAL_OR, FJ_DT_BOOL, NULL, ba, bb2, (int64_t[]){1, 1, 1, 0}, 4);
}
END_TEST

/* Unary on ints. */
static void int_unary(fj_op o, fj_dtype dt, const int64_t *a, const int64_t *want, int n)
{
	T t;
	t_init(&t);
	fj_dim d[1] = {n};
	fj_vid x = param(&t, "a", dt, 1, d);
	fj_vid r = op(&t, o, &x, 1, NULL, 0);
	uint32_t nd = node_of(&t, r);
	fj_dtype rd = fj_val(t.g, r)->type.dtype;
	int64_t ab[16], rb[16];
	int sz = fj_dtype_size(dt), rs = fj_dtype_size(rd);
	for (int i = 0; i < n; i++)
		memcpy((char *)ab + i * sz, &a[i], (size_t)sz);
	void *bufs[2] = {ab, rb};
	run(&t, nd, bufs);
	for (int i = 0; i < n; i++) {
		int64_t got = 0;
		memcpy(&got, (char *)rb + i * rs, (size_t)rs);
		if (rd != FJ_DT_U8 && rd != FJ_DT_BOOL && rs < 8 && (got >> (rs * 8 - 1)) & 1)
			got |= -(INT64_C(1) << (rs * 8));
		ck_assert_msg(got == want[i], "%s %s: %lld -> %lld, want %lld", fj_op_name(o), fj_dtype_name(dt),
		              (long long)a[i], (long long)got, (long long)want[i]);
	}
	t_fini(&t);
}

START_TEST(test_int_unary)
{
	const int64_t a[] = {5, -3, 0, 127};
	int_unary(FJ_OP_ATEN_ABS, FJ_DT_I32, a, (int64_t[]){5, 3, 0, 127}, 4);
	int_unary(FJ_OP_ATEN_NEG, FJ_DT_I64, a, (int64_t[]){-5, 3, 0, -127}, 4);
	int_unary(FJ_OP_ATEN_SIGN, FJ_DT_I8, a, (int64_t[]){1, -1, 0, 1}, 4);
	int_unary(FJ_OP_ATEN_BITWISE_NOT, FJ_DT_I16, a, (int64_t[]){-6, 2, -1, -128}, 4);
	int_unary(FJ_OP_ATEN_LOGICAL_NOT, FJ_DT_I32, a, (int64_t[]){0, 0, 1, 0}, 4);
	int_unary(FJ_OP_ATEN_RELU, FJ_DT_I32, a, (int64_t[]){5, 0, 0, 127}, 4);
	int_unary(FJ_OP_ATEN_ISNAN, FJ_DT_I32, a, (int64_t[]){0, 0, 0, 0}, 4);
	int_unary(FJ_OP_ATEN_BITWISE_NOT, FJ_DT_BOOL, (int64_t[]){1, 0}, (int64_t[]){0, 1}, 2);
	int_unary(FJ_OP_ATEN_FLOOR, FJ_DT_I64, a, a, 4);
}
END_TEST

/* NaN and signed-zero semantics in f32. */
START_TEST(test_nan_semantics)
{
	const float nan = NAN;
	struct { fj_op op; float a, b; float want; } cs[] = {
		{FJ_OP_ATEN_MAXIMUM, nan, 1, nan}, {FJ_OP_ATEN_MAXIMUM, 1, nan, nan},
		{FJ_OP_ATEN_MINIMUM, 2, nan, nan}, {FJ_OP_ATEN_MAXIMUM, -0.0f, 0.0f, 0.0f},
		{FJ_OP_ATEN_EQ, nan, nan, 0}, {FJ_OP_ATEN_NE, nan, nan, 1}, {FJ_OP_ATEN_LT, nan, 1, 0},
		{FJ_OP_ATEN_GE, 1, nan, 0}, {FJ_OP_ATEN_REMAINDER, -7, 2, 1}, {FJ_OP_ATEN_FMOD, -7, 2, -1},
		{FJ_OP_ATEN_REMAINDER, 7, -2, -1}, {FJ_OP_ATEN_POW, -8, 1.0f / 3, nan},
		{FJ_OP_ATEN_DIV, 1, 0, INFINITY}, {FJ_OP_ATEN_LOGICAL_AND, nan, 1, 1},
		{FJ_OP_ATEN_ATAN2, 1, 1, (float)M_PI_4},
	};
	for (size_t i = 0; i < FJ_ARRAY_LEN(cs); i++) {
		T t;
		t_init(&t);
		fj_dim d[1] = {1};
		fj_vid x = param(&t, "a", FJ_DT_F32, 1, d), y = param(&t, "b", FJ_DT_F32, 1, d);
		fj_vid r = op(&t, cs[i].op, (fj_vid[]){x, y}, 2, NULL, 0);
		uint32_t nd = node_of(&t, r);
		float a = cs[i].a, b = cs[i].b;
		union { float f; uint8_t b; } out = {0};
		void *bufs[3] = {&a, &b, &out};
		run(&t, nd, bufs);
		fj_dtype rd = fj_val(t.g, r)->type.dtype;
		float got = rd == FJ_DT_BOOL ? out.b : out.f;
		if (isnan(cs[i].want))
			ck_assert_msg(isnan(got), "%s(%g, %g) = %g, want nan", fj_op_name(cs[i].op), a, b, got);
		else
			ck_assert_msg(got == cs[i].want && signbit(got) == signbit(cs[i].want), "%s(%g, %g) = %g, want %g",
			              fj_op_name(cs[i].op), a, b, got, cs[i].want);
		t_fini(&t);
	}
	/* unary: isnan, isinf, sign(nan) = 0, clamp keeps nan, relu(nan) = nan */
	struct { fj_op op; float a, want; } us[] = {
		{FJ_OP_ATEN_ISNAN, nan, 1}, {FJ_OP_ATEN_ISNAN, 1, 0}, {FJ_OP_ATEN_ISINF, -INFINITY, 1},
		{FJ_OP_ATEN_ISINF, nan, 0}, {FJ_OP_ATEN_SIGN, nan, 0}, {FJ_OP_ATEN_RELU, nan, nan},
		{FJ_OP_ATEN_CLAMP, nan, nan}, {FJ_OP_ATEN_CLAMP, 5, 1}, {FJ_OP_ATEN_CLAMP, -5, -1},
		{FJ_OP_ATEN_ROUND, 2.5f, 2}, {FJ_OP_ATEN_ROUND, -0.5f, -0.0f}, {FJ_OP_ATEN_ROUND, 3.5f, 4},
		{FJ_OP_ATEN_LOGICAL_NOT, nan, 0}, {FJ_OP_ATEN_LOGICAL_NOT, -0.0f, 1},
	};
	for (size_t i = 0; i < FJ_ARRAY_LEN(us); i++) {
		T t;
		t_init(&t);
		fj_dim d[1] = {1};
		fj_vid x = param(&t, "a", FJ_DT_F32, 1, d);
		fj_named_attr at[2] = {{"min", fj_attr_int(-1)}, {"max", fj_attr_float(1.0)}};
		fj_vid r = op(&t, us[i].op, &x, 1, at, us[i].op == FJ_OP_ATEN_CLAMP ? 2 : 0);
		uint32_t nd = node_of(&t, r);
		float a = us[i].a;
		union { float f; uint8_t b; } out = {0};
		void *bufs[2] = {&a, &out};
		run(&t, nd, bufs);
		float got = fj_val(t.g, r)->type.dtype == FJ_DT_BOOL ? out.b : out.f;
		if (isnan(us[i].want))
			ck_assert_msg(isnan(got), "%s(%g) = %g", fj_op_name(us[i].op), a, got);
		else
			ck_assert_msg(got == us[i].want && signbit(got) == signbit(us[i].want), "%s(%g) = %g, want %g",
			              fj_op_name(us[i].op), a, got, us[i].want);
		t_fini(&t);
	}
}
END_TEST

/* ---- conversions and rounding ---- */

static void convert1(fj_dtype from, fj_dtype to, const void *in, void *out, int n)
{
	T t;
	t_init(&t);
	fj_dim d[1] = {n};
	fj_vid x = param(&t, "x", from, 1, d);
	fj_vid r = op(&t, FJ_OP_ATEN__TO_COPY, &x, 1, (fj_named_attr[]){{"dtype", fj_attr_dtype(to)}}, 1);
	uint32_t nd = node_of(&t, r);
	ck_assert_int_eq(fj_val(t.g, r)->type.dtype, to);
	void *bufs[2] = {(void *)in, out};
	run(&t, nd, bufs);
	t_fini(&t);
}

START_TEST(test_conversions)
{
	const float f[] = {NAN, 3e9f, -3e9f, -1.0f, 2.9f, -2.9f, 0.0f, -0.0f, 300.0f};
	int32_t i32[9];
	convert1(FJ_DT_F32, FJ_DT_I32, f, i32, 9);
	const int32_t wi32[] = {0, INT32_MAX, INT32_MIN, -1, 2, -2, 0, 0, 300};
	for (int i = 0; i < 9; i++)
		ck_assert_int_eq(i32[i], wi32[i]);
	int64_t i64[9];
	convert1(FJ_DT_F32, FJ_DT_I64, f, i64, 9);
	ck_assert_int_eq(i64[0], 0);
	ck_assert_int_eq(i64[1], 3000000000LL);
	uint8_t u8[9], b8[9];
	convert1(FJ_DT_F32, FJ_DT_U8, f, u8, 9);
	ck_assert_int_eq(u8[3], 255); /* -1.0 wraps */
	ck_assert_int_eq(u8[4], 2);
	ck_assert_int_eq(u8[8], 44); /* 300 mod 256 */
	convert1(FJ_DT_F32, FJ_DT_BOOL, f, b8, 9);
	const uint8_t wb[] = {1, 1, 1, 1, 1, 1, 0, 0, 1}; /* NaN -> true, -0.0 -> false */
	for (int i = 0; i < 9; i++)
		ck_assert_int_eq(b8[i], wb[i]);
	/* ints -> float, u8 unsigned, bool -> int */
	const uint8_t ub[] = {255, 0, 128};
	float uf[3];
	convert1(FJ_DT_U8, FJ_DT_F32, ub, uf, 3);
	ck_assert(uf[0] == 255.0f && uf[2] == 128.0f);
	const int8_t sb[] = {-1, 0, -128};
	int64_t sl[3];
	convert1(FJ_DT_I8, FJ_DT_I64, sb, sl, 3);
	ck_assert(sl[0] == -1 && sl[2] == -128);
	int32_t bi[3];
	const uint8_t bools[] = {1, 0, 1};
	convert1(FJ_DT_BOOL, FJ_DT_I32, bools, bi, 3);
	ck_assert(bi[0] == 1 && bi[1] == 0 && bi[2] == 1);
	/* f32 -> bf16: round half to even, NaN stays a (quiet) NaN */
	const float fb[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, NAN, -INFINITY, 65504.0f};
	uint16_t bb[6];
	convert1(FJ_DT_F32, FJ_DT_BF16, fb, bb, 6);
	ck_assert_float_eq(bf2f(bb[0]), 1.0f);
	ck_assert_float_eq(bf2f(bb[1]), 1.0f + 0x1p-6f);
	ck_assert_float_eq(bf2f(bb[2]), 1.0f + 0x1p-7f);
	ck_assert(isnan(bf2f(bb[3])) && (bb[3] & 0x40));
	ck_assert(isinf(bf2f(bb[4])) && bf2f(bb[4]) < 0);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(bb[i], f2bf(fb[i]));
	/* f32 -> f16: round half to even, overflow to inf */
	const float fh[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 70000.0f, NAN, 0x1p-25f, 0x1.8p-24f};
	uint16_t hh[6];
	convert1(FJ_DT_F32, FJ_DT_F16, fh, hh, 6);
	ck_assert_float_eq(h2f(hh[0]), 1.0f);
	ck_assert_float_eq(h2f(hh[1]), 1.0f + 0x1p-9f);
	ck_assert(isinf(h2f(hh[2])));
	ck_assert(isnan(h2f(hh[3])));
	ck_assert_float_eq(h2f(hh[4]), 0.0f);     /* halfway to the smallest subnormal: even (0) */
	ck_assert_float_eq(h2f(hh[5]), 0x1p-23f); /* 1.5 ulp: up to 2 ulp */
	/* f64 -> f16: one rounding */
	const double dh[] = {1.0 + 0x1p-11 + 0x1p-40};
	uint16_t h1[1];
	convert1(FJ_DT_F64, FJ_DT_F16, dh, h1, 1);
	ck_assert_float_eq(h2f(h1[0]), 1.0f + 0x1p-10f);
	/* bf16 -> f16 and f16 -> f32 */
	const uint16_t hb[] = {f2bf(3.0f), f2bf(-0.5f)};
	uint16_t hr[2];
	convert1(FJ_DT_BF16, FJ_DT_F16, hb, hr, 2);
	ck_assert_float_eq(h2f(hr[0]), 3.0f);
	ck_assert_float_eq(h2f(hr[1]), -0.5f);
	/* prims.convert_element_type */
	T t;
	t_init(&t);
	fj_dim d[1] = {3};
	fj_vid x = param(&t, "x", FJ_DT_F64, 1, d);
	fj_vid r = op(&t, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &x, 1,
	              (fj_named_attr[]){{"dtype", fj_attr_dtype(FJ_DT_I16)}}, 1);
	double xs[3] = {-40000.5, 1.5, 40000};
	int16_t ys[3];
	run(&t, node_of(&t, r), (void *[]){xs, ys});
	ck_assert_int_eq(ys[1], 1);
	ck_assert_int_eq(ys[0], (int16_t)(int32_t)-40000); /* truncated through i32 */
	t_fini(&t);
}
END_TEST

/* ---- weak scalars (literals) ---- */

START_TEST(test_literals)
{
	T t;
	t_init(&t);
	fj_dim d[1] = {4};
	fj_vid h = param(&t, "h", FJ_DT_F16, 1, d);
	fj_vid i = param(&t, "i", FJ_DT_I32, 1, d);
	fj_vid y1 = op(&t, FJ_OP_ATEN_MUL, (fj_vid[]){h, fj_b_float(&t.b, 0.1)}, 2, NULL, 0);
	fj_vid y2 = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){i, fj_b_int(&t.b, 2)}, 2, NULL, 0);
	fj_vid y3 = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){i, fj_b_float(&t.b, 2.5)}, 2, NULL, 0);
	fj_vid y4 = op(&t, FJ_OP_ATEN_SUB, (fj_vid[]){fj_b_float(&t.b, 1.0), h}, 2, NULL, 0);
	fj_vid y5 = op(&t, FJ_OP_ATEN_LT, (fj_vid[]){i, fj_b_float(&t.b, 1.5)}, 2, NULL, 0);
	fj_vid y6 = op(&t, FJ_OP_ATEN_WHERE, (fj_vid[]){y5, i, fj_b_int(&t.b, -7)}, 3, NULL, 0);
	ck_assert_int_eq(fj_val(t.g, y1)->type.dtype, FJ_DT_F16);
	ck_assert_int_eq(fj_val(t.g, y2)->type.dtype, FJ_DT_I32);
	ck_assert_int_eq(fj_val(t.g, y3)->type.dtype, FJ_DT_F32);
	uint16_t hb[4] = {f2h(1), f2h(2), f2h(-3), f2h(0.5f)}, r1[4], r4[4];
	int32_t ib[4] = {-1, 0, 1, 2}, r2[4], r6[4];
	float r3[4];
	uint8_t r5[4];
	run(&t, node_of(&t, y1), (void *[]){hb, NULL, r1});
	run(&t, node_of(&t, y2), (void *[]){ib, NULL, r2});
	run(&t, node_of(&t, y3), (void *[]){ib, NULL, r3});
	run(&t, node_of(&t, y4), (void *[]){NULL, hb, r4});
	run(&t, node_of(&t, y5), (void *[]){ib, NULL, r5});
	run(&t, node_of(&t, y6), (void *[]){r5, ib, NULL, r6});
	for (int k = 0; k < 4; k++) {
		float hv = h2f(hb[k]);
		/* computed in f32 (0.1 as f32), rounded once to f16 */
		ck_assert_int_eq(r1[k], f2h(hv * 0.1f));
		ck_assert_int_eq(r2[k], ib[k] + 2);
		ck_assert_float_eq(r3[k], (float)ib[k] + 2.5f);
		ck_assert_int_eq(r4[k], f2h(1.0f - hv));
		ck_assert_int_eq(r5[k], ib[k] < 1.5);
		ck_assert_int_eq(r6[k], ib[k] < 1.5 ? ib[k] : -7);
	}
	t_fini(&t);
}
END_TEST

/* ---- where, clamp, lerp, addcmul, masked_fill, pointwise backward ops ---- */

static double r_gelu_tanh(double x)
{
	return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

START_TEST(test_other_pointwise)
{
	T t;
	t_init(&t);
	enum { N = 9 };
	fj_dim d[1] = {N};
	fj_vid x = param(&t, "x", FJ_DT_F32, 1, d), y = param(&t, "y", FJ_DT_F32, 1, d);
	fj_vid w = param(&t, "w", FJ_DT_F32, 1, d), m = param(&t, "m", FJ_DT_BOOL, 1, d);
	fj_vid v_where = op(&t, FJ_OP_ATEN_WHERE, (fj_vid[]){m, x, y}, 3, NULL, 0);
	fj_vid v_pwhere = op(&t, FJ_OP_PRIMS_WHERE, (fj_vid[]){m, x, y}, 3, NULL, 0);
	fj_vid v_clamp = op(&t, FJ_OP_ATEN_CLAMP, &x, 1, (fj_named_attr[]){{"min", fj_attr_float(-0.5)}}, 1);
	fj_vid v_lerp = op(&t, FJ_OP_ATEN_LERP, (fj_vid[]){x, y, w}, 3, NULL, 0);
	fj_vid v_lerps = op(&t, FJ_OP_ATEN_LERP, (fj_vid[]){x, y, fj_b_float(&t.b, 0.75)}, 3, NULL, 0);
	fj_vid v_addcmul = op(&t, FJ_OP_ATEN_ADDCMUL, (fj_vid[]){x, y, w}, 3,
	                      (fj_named_attr[]){{"value", fj_attr_float(0.5)}}, 1);
	fj_vid v_mfill = op(&t, FJ_OP_ATEN_MASKED_FILL, (fj_vid[]){x, m, fj_b_float(&t.b, -9.0)}, 3, NULL, 0);
	fj_vid v_thr = op(&t, FJ_OP_ATEN_THRESHOLD_BACKWARD, (fj_vid[]){y, x}, 2,
	                  (fj_named_attr[]){{"threshold", fj_attr_float(0.25)}}, 1);
	fj_vid v_gb = op(&t, FJ_OP_ATEN_GELU_BACKWARD, (fj_vid[]){y, x}, 2, NULL, 0);
	fj_vid v_gbt = op(&t, FJ_OP_ATEN_GELU_BACKWARD, (fj_vid[]){y, x}, 2,
	                  (fj_named_attr[]){{"approximate", fj_attr_str(t.g, "tanh")}}, 1);
	fj_vid v_sb = op(&t, FJ_OP_ATEN_SIGMOID_BACKWARD, (fj_vid[]){y, w}, 2, NULL, 0);
	fj_vid v_tb = op(&t, FJ_OP_ATEN_TANH_BACKWARD, (fj_vid[]){y, w}, 2, NULL, 0);
	fj_vid v_slb = op(&t, FJ_OP_ATEN_SILU_BACKWARD, (fj_vid[]){y, x}, 2, NULL, 0);
	fj_vid v_lrb = op(&t, FJ_OP_ATEN_LEAKY_RELU_BACKWARD, (fj_vid[]){y, x}, 2,
	                  (fj_named_attr[]){{"negative_slope", fj_attr_float(0.2)}, {"self_is_result", fj_attr_bool(false)}}, 2);
	fj_vid v_htb = op(&t, FJ_OP_ATEN_HARDTANH_BACKWARD, (fj_vid[]){y, x}, 2,
	                  (fj_named_attr[]){{"min_val", fj_attr_float(-1)}, {"max_val", fj_attr_float(1)}}, 2);
	fj_vid v_gelut = op(&t, FJ_OP_ATEN_GELU, &x, 1, (fj_named_attr[]){{"approximate", fj_attr_str(t.g, "tanh")}}, 1);
	fj_vid v_round = op(&t, FJ_OP_ATEN_ROUND, &x, 1, (fj_named_attr[]){{"decimals", fj_attr_int(1)}}, 1);
	fj_vid v_roundn = op(&t, FJ_OP_ATEN_ROUND, &y, 1, (fj_named_attr[]){{"decimals", fj_attr_int(-1)}}, 1);
	fj_vid v_sp = op(&t, FJ_OP_ATEN_SOFTPLUS, &x, 1,
	                 (fj_named_attr[]){{"beta", fj_attr_float(2)}, {"threshold", fj_attr_float(1)}}, 2);
	float xs[N], ys[N], ws[N], out[N];
	uint8_t ms[N];
	for (int i = 0; i < N; i++) {
		xs[i] = -2.0f + 0.55f * (float)i;
		ys[i] = 1.5f - 0.3f * (float)i * (float)(i % 3) + 17.0f * (float)(i == 4);
		ws[i] = -0.25f + 0.2f * (float)i;
		ms[i] = (uint8_t)(i % 2);
	}
#define RUN2(v) run(&t, node_of(&t, v), (void *[]){xs, out})
#define CHECK(expr, tol)                                                                                       \
	for (int i = 0; i < N; i++) {                                                                          \
		double X = xs[i], Y = ys[i], W = ws[i];                                                        \
		bool M = ms[i];                                                                                \
		(void)X; (void)Y; (void)W; (void)M;                                                            \
		double want = (expr);                                                                          \
		ck_assert_msg(close_to(out[i], want, tol), "%s [%d]: %.9g want %.9g", #expr, i, out[i], want); \
	}
	run(&t, node_of(&t, v_where), (void *[]){ms, xs, ys, out});
	CHECK(M ? X : Y, 0);
	run(&t, node_of(&t, v_pwhere), (void *[]){ms, xs, ys, out});
	CHECK(M ? X : Y, 0);
	RUN2(v_clamp);
	CHECK(X < -0.5 ? -0.5 : X, 0);
	run(&t, node_of(&t, v_lerp), (void *[]){xs, ys, ws, out});
	CHECK(fabs(W) < 0.5 ? X + W * (Y - X) : Y - (Y - X) * (1 - W), 1e-6);
	run(&t, node_of(&t, v_lerps), (void *[]){xs, ys, NULL, out});
	CHECK(Y - (Y - X) * 0.25, 1e-6);
	run(&t, node_of(&t, v_addcmul), (void *[]){xs, ys, ws, out});
	CHECK(X + 0.5 * Y * W, 1e-6);
	run(&t, node_of(&t, v_mfill), (void *[]){xs, ms, NULL, out});
	CHECK(M ? -9.0 : X, 0);
	run(&t, node_of(&t, v_thr), (void *[]){ys, xs, out});
	CHECK(X <= 0.25 ? 0 : Y, 0);
	run(&t, node_of(&t, v_gb), (void *[]){ys, xs, out});
	CHECK(Y * (0.5 * (1 + erf(X / sqrt(2))) + X * exp(-X * X / 2) / sqrt(2 * M_PI)), 1e-5);
	run(&t, node_of(&t, v_gbt), (void *[]){ys, xs, out});
	CHECK(Y * ((r_gelu_tanh(X + 1e-4) - r_gelu_tanh(X - 1e-4)) / 2e-4), 1e-4);
	run(&t, node_of(&t, v_sb), (void *[]){ys, ws, out});
	CHECK(Y * (1 - W) * W, 1e-6);
	run(&t, node_of(&t, v_tb), (void *[]){ys, ws, out});
	CHECK(Y * (1 - W * W), 1e-6);
	run(&t, node_of(&t, v_slb), (void *[]){ys, xs, out});
	CHECK(Y * (r_sigmoid(X) * (1 + X * (1 - r_sigmoid(X)))), 1e-5);
	run(&t, node_of(&t, v_lrb), (void *[]){ys, xs, out});
	CHECK(X > 0 ? Y : 0.2 * Y, 1e-6);
	run(&t, node_of(&t, v_htb), (void *[]){ys, xs, out});
	CHECK(X <= -1 || X >= 1 ? 0 : Y, 0);
	RUN2(v_gelut);
	CHECK(r_gelu_tanh(X), 1e-5);
	RUN2(v_round);
	CHECK(nearbyintf((float)X * 10.0f) / 10.0f, 1e-6); /* in f32, as PyTorch */
	run(&t, node_of(&t, v_roundn), (void *[]){ys, out});
	CHECK(nearbyint(Y / 10) * 10, 0);
	RUN2(v_sp);
	CHECK(2 * X > 1 ? X : log1p(exp(2 * X)) / 2, 1e-6);
#undef RUN2
#undef CHECK
	t_fini(&t);
}
END_TEST

/* ---- layout and source ops ---- */

static fj_attr ints(T *t, const int64_t *v, uint32_t n) { return fj_attr_ints(t->g, v, n); }

/* Result numel (static). */
static int64_t numel_of(T *t, fj_vid v)
{
	const fj_type *ty = &fj_val(t->g, v)->type;
	int64_t n = 1;
	for (int i = 0; i < ty->rank; i++)
		n *= ty->dims[i];
	return n;
}

static void check_f32(T *t, fj_vid v, const float *got, const float *want, int64_t n, const char *what)
{
	ck_assert_int_eq(numel_of(t, v), n);
	for (int64_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == want[i], "%s [%lld]: %g want %g", what, (long long)i, got[i], want[i]);
}

START_TEST(test_layout)
{
	T t;
	t_init(&t);
	fj_dim d[3] = {2, 3, 4};
	fj_vid x = param(&t, "x", FJ_DT_F32, 3, d);
	fj_dim d2[3] = {2, 1, 4};
	fj_vid z = param(&t, "z", FJ_DT_F32, 3, d2);
	fj_dim d1[1] = {3};
	fj_vid c = param(&t, "c", FJ_DT_F32, 1, d1);
	float xs[24], zs[8], cs[3], out[128], want[128];
	for (int i = 0; i < 24; i++)
		xs[i] = (float)i;
	for (int i = 0; i < 8; i++)
		zs[i] = 100.0f + (float)i;
	for (int i = 0; i < 3; i++)
		cs[i] = -1.0f - (float)i;
#define X(i, j, k) xs[((i) * 3 + (j)) * 4 + (k)]
	/* permute [2,0,1]: out[k][i][j] = x[i][j][k] */
	fj_vid v = op(&t, FJ_OP_ATEN_PERMUTE, &x, 1, (fj_named_attr[]){{"dims", ints(&t, (int64_t[]){2, 0, 1}, 3)}}, 1);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int k = 0, n = 0; k < 4; k++)
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 3; j++)
				want[n++] = X(i, j, k);
	check_f32(&t, v, out, want, 24, "permute");
	/* prims.transpose perm [2,0,1]: the same */
	v = op(&t, FJ_OP_PRIMS_TRANSPOSE, &x, 1, (fj_named_attr[]){{"perm", ints(&t, (int64_t[]){2, 0, 1}, 3)}}, 1);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	check_f32(&t, v, out, want, 24, "prims.transpose");
	/* transpose(0, -1): out[k][j][i] */
	v = op(&t, FJ_OP_ATEN_TRANSPOSE, &x, 1, (fj_named_attr[]){{"dim0", fj_attr_int(0)}, {"dim1", fj_attr_int(-1)}}, 2);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int k = 0, n = 0; k < 4; k++)
		for (int j = 0; j < 3; j++)
			for (int i = 0; i < 2; i++)
				want[n++] = X(i, j, k);
	check_f32(&t, v, out, want, 24, "transpose");
	/* reshape [4,6], view [-1], clone, unsqueeze, squeeze: linear copies */
	v = op(&t, FJ_OP_ATEN_RESHAPE, &x, 1, (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){4, 6}, 2)}}, 1);
	fj_vid tt = op(&t, FJ_OP_ATEN_T, &v, 1, NULL, 0);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	check_f32(&t, v, out, xs, 24, "reshape");
	float rs[24];
	memcpy(rs, out, sizeof rs);
	run(&t, node_of(&t, tt), (void *[]){rs, out});
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 4; j++)
			want[i * 4 + j] = rs[j * 6 + i];
	check_f32(&t, tt, out, want, 24, "t");
	const fj_op copies[] = {FJ_OP_ATEN_CLONE, FJ_OP_ATEN_DETACH, FJ_OP_ATEN_ALIAS};
	for (size_t i = 0; i < FJ_ARRAY_LEN(copies); i++) {
		v = op(&t, copies[i], &x, 1, NULL, 0);
		run(&t, node_of(&t, v), (void *[]){xs, out});
		check_f32(&t, v, out, xs, 24, fj_op_name(copies[i]));
	}
	v = op(&t, FJ_OP_ATEN_VIEW, &x, 1, (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){-1}, 1)}}, 1);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	check_f32(&t, v, out, xs, 24, "view");
	v = op(&t, FJ_OP_ATEN_UNSQUEEZE, &z, 1, (fj_named_attr[]){{"dim", fj_attr_int(0)}}, 1);
	fj_vid sq = op(&t, FJ_OP_ATEN_SQUEEZE, &v, 1, NULL, 0);
	ck_assert_int_eq(fj_val(t.g, sq)->type.rank, 2);
	run(&t, node_of(&t, sq), (void *[]){zs, out});
	check_f32(&t, sq, out, zs, 8, "squeeze");
	/* expand [2,1,4] -> [2,3,4] */
	v = op(&t, FJ_OP_ATEN_EXPAND, &z, 1, (fj_named_attr[]){{"size", ints(&t, (int64_t[]){2, 3, 4}, 3)}}, 1);
	run(&t, node_of(&t, v), (void *[]){zs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 4; k++)
				want[n++] = zs[i * 4 + k];
	check_f32(&t, v, out, want, 24, "expand");
	/* broadcast_in_dim [3] -> [2,3,4] at dim 1 */
	v = op(&t, FJ_OP_PRIMS_BROADCAST_IN_DIM, &c, 1,
	       (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){2, 3, 4}, 3)}, {"broadcast_dims", ints(&t, (int64_t[]){1}, 1)}}, 2);
	run(&t, node_of(&t, v), (void *[]){cs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 4; k++)
				want[n++] = cs[j];
	check_f32(&t, v, out, want, 24, "broadcast_in_dim");
	/* slice dim 2, start -3, step 2: k = 1, 3; slice dim 1 start 1 end 100 */
	v = op(&t, FJ_OP_ATEN_SLICE, &x, 1,
	       (fj_named_attr[]){{"dim", fj_attr_int(2)}, {"start", fj_attr_int(-3)}, {"step", fj_attr_int(2)}}, 3);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 1; k < 4; k += 2)
				want[n++] = X(i, j, k);
	check_f32(&t, v, out, want, 12, "slice");
	v = op(&t, FJ_OP_ATEN_SLICE, &x, 1,
	       (fj_named_attr[]){{"dim", fj_attr_int(1)}, {"start", fj_attr_int(1)}, {"end", fj_attr_int(100)}}, 3);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 1; j < 3; j++)
			for (int k = 0; k < 4; k++)
				want[n++] = X(i, j, k);
	check_f32(&t, v, out, want, 16, "slice clamped");
	/* prims.slice start [1,0,1] limit [2,3,4] strides [1,2,2] */
	v = op(&t, FJ_OP_PRIMS_SLICE, &x, 1,
	       (fj_named_attr[]){{"start", ints(&t, (int64_t[]){1, 0, 1}, 3)}, {"limit", ints(&t, (int64_t[]){2, 3, 4}, 3)},
	                         {"strides", ints(&t, (int64_t[]){1, 2, 2}, 3)}}, 3);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int j = 0, n = 0; j < 3; j += 2)
		for (int k = 1; k < 4; k += 2)
			want[n++] = X(1, j, k);
	check_f32(&t, v, out, want, 4, "prims.slice");
	/* cat dim 1: x [2,3,4], z [2,1,4], x -> [2,7,4]; and dim 0 */
	v = op(&t, FJ_OP_ATEN_CAT, (fj_vid[]){x, z, x}, 3, (fj_named_attr[]){{"dim", fj_attr_int(1)}}, 1);
	run(&t, node_of(&t, v), (void *[]){xs, zs, xs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 0; j < 7; j++)
			for (int k = 0; k < 4; k++)
				want[n++] = j < 3 ? X(i, j, k) : j == 3 ? zs[i * 4 + k] : X(i, j - 4, k);
	check_f32(&t, v, out, want, 56, "cat");
	v = op(&t, FJ_OP_PRIMS_CAT, (fj_vid[]){z, z}, 2, (fj_named_attr[]){{"dim", fj_attr_int(0)}}, 1);
	run(&t, node_of(&t, v), (void *[]){zs, zs, out});
	for (int i = 0; i < 16; i++)
		want[i] = zs[i % 8];
	check_f32(&t, v, out, want, 16, "prims.cat");
	/* flip dims [0, 2]; prims.rev [1] */
	v = op(&t, FJ_OP_ATEN_FLIP, &x, 1, (fj_named_attr[]){{"dims", ints(&t, (int64_t[]){0, -1}, 2)}}, 1);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 4; k++)
				want[n++] = X(1 - i, j, 3 - k);
	check_f32(&t, v, out, want, 24, "flip");
	v = op(&t, FJ_OP_PRIMS_REV, &x, 1, (fj_named_attr[]){{"dims", ints(&t, (int64_t[]){1}, 1)}}, 1);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int i = 0, n = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 4; k++)
				want[n++] = X(i, 2 - j, k);
	check_f32(&t, v, out, want, 24, "rev");
	/* pad low [1,-1,0] high [0,1,2] value 7: [3,3,6] */
	v = op(&t, FJ_OP_PRIMS_PAD, &x, 1,
	       (fj_named_attr[]){{"low", ints(&t, (int64_t[]){1, -1, 0}, 3)}, {"high", ints(&t, (int64_t[]){0, 1, 2}, 3)},
	                         {"value", fj_attr_float(7)}}, 3);
	run(&t, node_of(&t, v), (void *[]){xs, out});
	for (int i = 0, n = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 6; k++) {
				int si = i - 1, sj = j + 1;
				want[n++] = si >= 0 && si < 2 && sj < 3 && k < 4 ? X(si, sj, k) : 7.0f;
			}
	check_f32(&t, v, out, want, 54, "pad");
#undef X
	t_fini(&t);
}
END_TEST

START_TEST(test_sources)
{
	T t;
	t_init(&t);
	fj_dim d[2] = {2, 3};
	fj_vid x = param(&t, "x", FJ_DT_I32, 2, d);
	fj_vid v1 = op(&t, FJ_OP_ATEN_FULL, NULL, 0,
	               (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){2, 3}, 2)}, {"value", fj_attr_float(2.5)},
	                                 {"dtype", fj_attr_dtype(FJ_DT_F16)}}, 3);
	fj_vid v2 = op(&t, FJ_OP_ATEN_ZEROS_LIKE, &x, 1, NULL, 0);
	fj_vid v3 = op(&t, FJ_OP_ATEN_ONES_LIKE, &x, 1, (fj_named_attr[]){{"dtype", fj_attr_dtype(FJ_DT_BF16)}}, 1);
	fj_vid v4 = op(&t, FJ_OP_ATEN_FULL_LIKE, &x, 1, (fj_named_attr[]){{"value", fj_attr_int(-4)}}, 1);
	fj_vid v5 = op(&t, FJ_OP_ATEN_NEW_FULL, &x, 1,
	               (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){5}, 1)}, {"value", fj_attr_int(9)}}, 2);
	fj_vid v6 = op(&t, FJ_OP_ATEN_NEW_ONES, &x, 1, (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){4}, 1)}}, 1);
	fj_vid v7 = op(&t, FJ_OP_ATEN_NEW_ZEROS, &x, 1, (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){4}, 1)}}, 1);
	fj_vid v8 = op(&t, FJ_OP_PRIMS_FULL, NULL, 0,
	               (fj_named_attr[]){{"shape", ints(&t, (int64_t[]){3}, 1)}, {"value", fj_attr_bool(true)},
	                                 {"dtype", fj_attr_dtype(FJ_DT_BOOL)}}, 3);
	fj_vid a1 = op(&t, FJ_OP_ATEN_ARANGE, NULL, 0,
	               (fj_named_attr[]){{"start", fj_attr_float(1)}, {"end", fj_attr_float(2)}, {"step", fj_attr_float(0.1)}}, 3);
	fj_vid a2 = op(&t, FJ_OP_ATEN_ARANGE, NULL, 0, (fj_named_attr[]){{"end", fj_attr_int(5)}}, 1);
	fj_vid a3 = op(&t, FJ_OP_ATEN_ARANGE, NULL, 0,
	               (fj_named_attr[]){{"start", fj_attr_int(10)}, {"end", fj_attr_int(0)}, {"step", fj_attr_int(-3)},
	                                 {"dtype", fj_attr_dtype(FJ_DT_F64)}}, 4);
	fj_vid io = op(&t, FJ_OP_PRIMS_IOTA, NULL, 0,
	               (fj_named_attr[]){{"length", fj_attr_int(5)}, {"dtype", fj_attr_dtype(FJ_DT_I64)}}, 2);
	uint16_t h[6];
	run(&t, node_of(&t, v1), (void *[]){h});
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(h2f(h[i]), 2.5f);
	int32_t i32[8];
	int32_t xs[6] = {0};
	run(&t, node_of(&t, v2), (void *[]){xs, i32});
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(i32[i], 0);
	run(&t, node_of(&t, v3), (void *[]){xs, h});
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(bf2f(h[i]), 1.0f);
	run(&t, node_of(&t, v4), (void *[]){xs, i32});
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(i32[i], -4);
	run(&t, node_of(&t, v5), (void *[]){xs, i32});
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(i32[i], 9);
	run(&t, node_of(&t, v6), (void *[]){xs, i32});
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(i32[i], 1);
	run(&t, node_of(&t, v7), (void *[]){xs, i32});
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(i32[i], 0);
	uint8_t b[3];
	run(&t, node_of(&t, v8), (void *[]){b});
	ck_assert(b[0] == 1 && b[2] == 1);
	float f[16];
	ck_assert_int_eq(numel_of(&t, a1), 10);
	run(&t, node_of(&t, a1), (void *[]){f});
	for (int i = 0; i < 10; i++)
		ck_assert_float_eq(f[i], (float)(1.0 + 0.1 * i)); /* computed in double, rounded once */
	int64_t l[8];
	ck_assert_int_eq(fj_val(t.g, a2)->type.dtype, FJ_DT_I64);
	run(&t, node_of(&t, a2), (void *[]){l});
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(l[i], i);
	double dd[4];
	ck_assert_int_eq(numel_of(&t, a3), 4);
	run(&t, node_of(&t, a3), (void *[]){dd});
	for (int i = 0; i < 4; i++)
		ck_assert(dd[i] == 10.0 - 3 * i);
	run(&t, node_of(&t, io), (void *[]){l});
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(l[i], i);
	t_fini(&t);
}
END_TEST

/* ---- the kernel cache and run-time sizes ---- */

START_TEST(test_cache_and_sizes)
{
	T t;
	t_init(&t);
	fj_dim n, d[2];
	ck_assert_int_eq(fj_dim_symbol(t.m, "N", 1, &n), FJ_OK);
	d[0] = n;
	d[1] = 5;
	fj_vid x = param(&t, "x", FJ_DT_F32, 2, d);
	fj_vid b = param(&t, "b", FJ_DT_F32, 1, d + 1);
	fj_vid y = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){x, b}, 2, NULL, 0);
	fj_vid y2 = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){x, b}, 2, NULL, 0); /* the same kernel */
	fj_vid y3 = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){x, fj_b_float(&t.b, 1.0)}, 2, NULL, 0);
	fj_vid y4 = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){x, fj_b_float(&t.b, 2.0)}, 2, NULL, 0);
	uint32_t nodes[4] = {node_of(&t, y), node_of(&t, y2), node_of(&t, y3), node_of(&t, y4)};
	fj_host_kernel k[4];
	uint32_t compiled = 99;
	ck_assert_int_eq(fj_host_compile_nodes(t.ctx, t.g, nodes, 4, k, &compiled), FJ_OK);
	ck_assert_uint_eq(compiled, 3); /* y and y2 share one */
	ck_assert_ptr_eq((void *)k[0].fn, (void *)k[1].fn);
	ck_assert_ptr_ne((void *)k[2].fn, (void *)k[3].fn);
	ck_assert_int_eq(fj_host_compile_nodes(t.ctx, t.g, nodes, 4, k, &compiled), FJ_OK);
	ck_assert_uint_eq(compiled, 0);
	/* the same graph in another module of the same context: cache hits */
	/* run with N = 3 and N = 7: one kernel */
	for (int64_t nn = 3; nn <= 7; nn += 4) {
		float xs[35], bs[5], ys[35];
		for (int i = 0; i < 35; i++)
			xs[i] = (float)i;
		for (int i = 0; i < 5; i++)
			bs[i] = 0.5f * (float)i;
		int64_t dims[5] = {nn, 5, 5, nn, 5};
		uint32_t c2 = 99;
		ck_assert_int_eq(run_dims(&t, nodes[0], (void *[]){xs, bs, ys}, dims, &c2), 0);
		ck_assert_uint_eq(c2, 0);
		for (int i = 0; i < nn * 5; i++)
			ck_assert_float_eq(ys[i], xs[i] + bs[i % 5]);
		/* a part of the parallel space: rows [1, 2) only */
		memset(ys, 0, sizeof ys);
		ck_assert_int_eq(k[0].fn((void *[]){xs, bs, ys}, dims, 1, 2), 0);
		for (int i = 0; i < nn * 5; i++)
			ck_assert_float_eq(ys[i], i / 5 == 1 ? xs[i] + bs[i % 5] : 0.0f);
	}
	/* broadcasting decided at run time: b: [M] against [N,5], M = 1 or 5 */
	{
		fj_dim m;
		ck_assert_int_eq(fj_dim_symbol(t.m, "M", 1, &m), FJ_OK);
		fj_vid q = param(&t, "q", FJ_DT_F32, 1, &m);
		fj_vid r = op(&t, FJ_OP_ATEN_ADD, (fj_vid[]){x, q}, 2, NULL, 0);
		float xs[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, bs[5] = {10, 20, 30, 40, 50}, ys[10];
		for (int64_t mm = 1; mm <= 5; mm += 4) {
			int64_t dims[5] = {2, 5, mm, 2, 5};
			uint32_t c2;
			ck_assert_int_eq(run_dims(&t, node_of(&t, r), (void *[]){xs, bs, ys}, dims, &c2), 0);
			for (int i = 0; i < 10; i++)
				ck_assert_float_eq(ys[i], xs[i] + bs[mm == 1 ? 0 : i % 5]);
		}
	}
	/* 0-d tensors: extent 1 */
	{
		fj_vid s0 = param(&t, "s0", FJ_DT_F64, 0, NULL);
		fj_vid r = op(&t, FJ_OP_ATEN_MUL, (fj_vid[]){s0, fj_b_int(&t.b, 3)}, 2, NULL, 0);
		double a = 1.25, out = 0;
		run(&t, node_of(&t, r), (void *[]){&a, NULL, &out});
		ck_assert(out == 3.75);
	}
	/* keys: sizes are not part of them, dtypes/attributes/literals are */
	fj_buf k1, k2;
	fj_buf_init(&k1, t.ctx);
	fj_buf_init(&k2, t.ctx);
	fj_cg_node_key(&k1, t.g, nodes[2]);
	fj_cg_node_key(&k2, t.g, nodes[3]);
	ck_assert_str_ne(k1.data, k2.data);
	ck_assert_uint_ne(fj_hash64(k1.data, k1.len), fj_hash64(k2.data, k2.len));
	fj_buf_free(&k1);
	fj_buf_free(&k2);
	/* optimised IR as text */
	fj_buf ir;
	fj_buf_init(&ir, t.ctx);
	ck_assert_int_eq(fj_host_emit_llvm(t.ctx, t.g, &ir), FJ_OK);
	ck_assert_ptr_nonnull(strstr(ir.data, "define"));
	ck_assert_ptr_nonnull(strstr(ir.data, "<8 x float>")); /* vectorized for the host (AVX2) */
	fj_buf_free(&ir);
	t_fini(&t);
}
END_TEST

/* Every pointwise op has a scalar lowering; every aten/prims op an emitter. */
START_TEST(test_tables_complete)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	for (int o = 0; o < FJ_OP_COUNT; o++) {
		const fj_opinfo *oi = fj_op_info(ctx, (fj_op)o);
		bool layer = oi->flags & (FJ_OPF_ATEN | FJ_OPF_PRIMS);
		if (layer && (oi->flags & FJ_OPF_POINTWISE))
			ck_assert_msg(fj_cg_scalar_lowering((fj_op)o) != NULL, "%s has no scalar lowering", oi->name);
		if (layer)
			ck_assert_msg(fj_cg_node_emitter((fj_op)o) != NULL, "%s has no node emitter", oi->name);
	}
	/* fusion.kernel: the host region code generator (codegen/region_host.c) */
	ck_assert_ptr_nonnull(fj_cg_node_emitter(FJ_OP_FUSION_KERNEL));
	fj_context_destroy(ctx);
}
END_TEST

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 50 distinct pointwise and layout nodes on f32[N,64]: one module, one O3
 * run. The acceptance bound is 1 s; the test allows slack for loaded machines
 * and prints the time. */
START_TEST(test_compile_time_50)
{
	T t;
	t_init(&t);
	fj_dim n, d[2];
	ck_assert_int_eq(fj_dim_symbol(t.m, "N", 1, &n), FJ_OK);
	d[0] = n;
	d[1] = 64;
	fj_vid x = param(&t, "x", FJ_DT_F32, 2, d), w = param(&t, "w", FJ_DT_F32, 2, d);
	fj_vid h = param(&t, "h", FJ_DT_F16, 2, d);
	uint32_t nodes[64], nn = 0;
	for (size_t i = 0; i < FJ_ARRAY_LEN(unary_cases) && nn < 38; i++)
		nodes[nn++] = node_of(&t, op(&t, unary_cases[i].aten, &x, 1, NULL, 0));
	const fj_op bins[] = {FJ_OP_ATEN_ADD, FJ_OP_ATEN_SUB, FJ_OP_ATEN_MUL, FJ_OP_ATEN_DIV, FJ_OP_ATEN_MAXIMUM,
	                      FJ_OP_ATEN_LT};
	for (size_t i = 0; i < FJ_ARRAY_LEN(bins); i++)
		nodes[nn++] = node_of(&t, op(&t, bins[i], (fj_vid[]){x, h}, 2, NULL, 0));
	nodes[nn++] = node_of(&t, op(&t, FJ_OP_ATEN_T, &x, 1, NULL, 0));
	nodes[nn++] = node_of(&t, op(&t, FJ_OP_ATEN_CLONE, &x, 1, NULL, 0));
	nodes[nn++] = node_of(&t, op(&t, FJ_OP_ATEN_CAT, (fj_vid[]){x, w}, 2, (fj_named_attr[]){{"dim", fj_attr_int(1)}}, 1));
	nodes[nn++] = node_of(&t, op(&t, FJ_OP_ATEN_FLIP, &x, 1, (fj_named_attr[]){{"dims", ints(&t, (int64_t[]){1}, 1)}}, 1));
	nodes[nn++] = node_of(&t, op(&t, FJ_OP_ATEN_WHERE, (fj_vid[]){fj_b_bool(&t.b, true), x, w}, 3, NULL, 0));
	nodes[nn++] = node_of(&t, op(&t, FJ_OP_ATEN_ADDCMUL, (fj_vid[]){x, w, h}, 3, NULL, 0));
	ck_assert_uint_eq(nn, 50);
	/* a cold compile: LLVM generates every kernel, none comes from the disk
	 * cache (its directory is an option of the context, whatever the
	 * environment's FUSEJIT_CACHE_DIR) */
	ck_assert_int_eq(fj_kcache_configure(t.ctx, "off", 0), FJ_OK);
	fj_host_jit *j;
	ck_assert_int_eq(fj_host_jit_get(t.ctx, &j), FJ_OK); /* the JIT itself is created once per context */
	fj_host_kernel k[64];
	uint32_t compiled;
	uint64_t cnt0[FJ_KC_COUNT], cnt1[FJ_KC_COUNT];
	fj_kcache_counters(t.ctx, cnt0);
	double t0 = now_s(), c0 = cpu_s();
	ck_assert_int_eq(fj_host_compile_nodes(t.ctx, t.g, nodes, nn, k, &compiled), FJ_OK);
	double t1 = now_s(), c1 = cpu_s();
	ck_assert_uint_eq(compiled, 50);
	fj_kcache_counters(t.ctx, cnt1);
	/* compiled counts disk loads too: the counters tell them apart */
	ck_assert_uint_eq(cnt1[FJ_KC_KERNELS_COMPILED] - cnt0[FJ_KC_KERNELS_COMPILED], 50);
	ck_assert_uint_eq(cnt1[FJ_KC_KERNELS_LOADED] - cnt0[FJ_KC_KERNELS_LOADED], 0);
	ck_assert_int_eq(fj_host_compile_nodes(t.ctx, t.g, nodes, nn, k, &compiled), FJ_OK);
	double t2 = now_s();
	ck_assert_uint_eq(compiled, 0);
	fprintf(stderr, "codegen: 50 kernels compiled in %.3f s (cold; %.3f s CPU), cache hit in %.6f s\n", t1 - t0,
	        c1 - c0, t2 - t1);
	ck_assert_msg(t1 - t0 < 5.0, "compiling 50 kernels took %.3f s", t1 - t0);
	t_fini(&t);
}
END_TEST

Suite *suite_codegen(void)
{
	Suite *s = suite_create("codegen");
	TCase *tc = tcase_create("kernels");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_unary_float, 0, (int)FJ_ARRAY_LEN(unary_cases));
	tcase_add_loop_test(tc, test_binary_float, 0, (int)FJ_ARRAY_LEN(binary_cases));
	tcase_add_test(tc, test_int_ops);
	tcase_add_test(tc, test_int_unary);
	tcase_add_test(tc, test_nan_semantics);
	tcase_add_test(tc, test_conversions);
	tcase_add_test(tc, test_literals);
	tcase_add_test(tc, test_other_pointwise);
	tcase_add_test(tc, test_layout);
	tcase_add_test(tc, test_sources);
	tcase_add_test(tc, test_cache_and_sizes);
	tcase_add_test(tc, test_tables_complete);
	tcase_add_test(tc, test_compile_time_50);
	suite_add_tcase(s, tc);
	return s;
}
