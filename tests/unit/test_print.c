/* test_print.c -- the printer (suite `print`) and the verifier (suite
 * `verify`), on graphs built through the C API. The text round trip through
 * the parser is covered by tests/lit/roundtrip and tests/roundtrip.sh. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "frontend/frontend.h"
#include "test.h"

static const fj_loc noloc = {NULL, 0, 0};

static fj_loc at(uint32_t line) { return (fj_loc){"t.fj", line, 1}; }

static fj_type ty(fj_dtype dt, int rank, fj_dim *dims)
{
	return (fj_type){dt, (uint8_t)rank, false, dims};
}

static fj_dim sym(fj_module *m, const char *name)
{
	fj_dim d;
	ck_assert_int_eq(fj_dim_symbol(m, name, strlen(name), &d), FJ_OK);
	return d;
}

/* Prints g (or the module when g is NULL) into a malloc'd string. */
static char *print_text(fj_context *ctx, fj_module *m, fj_graph *g)
{
	fj_buf b;
	fj_buf_init(&b, ctx);
	fj_status st = g ? fj_print_graph(&b, g) : fj_print_module(&b, m);
	ck_assert_int_eq(st, FJ_OK);
	char *s = strdup(b.data ? b.data : "");
	fj_buf_free(&b);
	return s;
}

#define ck_assert_prints(ctx, m, g, want)                \
	do {                                                 \
		char *got_ = print_text((ctx), (m), (g));        \
		ck_assert_str_eq(got_, (want));                  \
		free(got_);                                      \
	} while (0)

static fj_vid lit_f(fj_graph *g, double f) { return fj_graph_add_literal(g, (fj_literal){.kind = FJ_LIT_FLOAT, .f = f}, noloc); }
static fj_vid lit_i(fj_graph *g, int64_t i) { return fj_graph_add_literal(g, (fj_literal){.kind = FJ_LIT_INT, .i = i}, noloc); }
static fj_vid lit_b(fj_graph *g, bool b) { return fj_graph_add_literal(g, (fj_literal){.kind = FJ_LIT_BOOL, .b = b}, noloc); }

/* Adds a node with named results whose types are inferred. */
static uint32_t add(fj_graph *g, fj_op op, const fj_vid *in, uint32_t nin, uint32_t nres, const char *const *names)
{
	uint32_t n = fj_graph_add_node(g, op, in, nin, nres, names, NULL, noloc);
	ck_assert_uint_ne(n, FJ_NONODE);
	return n;
}

/* Infers the types of node n into its results. */
static void infer(fj_graph *g, uint32_t n)
{
	fj_type t[8];
	ck_assert_int_eq(fj_check_node(g, n), FJ_OK);
	ck_assert_int_eq(fj_infer_node(g, n, t), FJ_OK);
	for (uint32_t i = 0; i < g->nodes[n].nres; i++)
		g->values[g->nodes[n].res[i]].type = t[i];
}

static fj_vid res(fj_graph *g, uint32_t n, uint32_t i) { return g->nodes[n].res[i]; }

/* Whether some diagnostic contains needle; lists them all when none does. */
static bool diag_has(fj_context *ctx, const char *needle)
{
	for (size_t i = 0; i < fj_context_diagnostic_count(ctx); i++)
		if (strstr(fj_context_diagnostic(ctx, i)->message, needle))
			return true;
	fprintf(stderr, "no diagnostic contains '%s'; there are:\n", needle);
	for (size_t i = 0; i < fj_context_diagnostic_count(ctx); i++)
		fprintf(stderr, "  %s\n", fj_context_diagnostic(ctx, i)->message);
	return false;
}

/* IR.md §1's example, types inferred. */
static fj_graph *build_gelu_mlp(fj_module *m)
{
	fj_graph *g = fj_module_add_graph(m, "gelu_mlp", noloc);
	fj_dim n = sym(m, "N");
	fj_dim dx[2] = {n, 1024}, dw[2] = {4096, 1024}, db[1] = {4096};
	fj_vid x = fj_graph_add_param(g, "x", ty(FJ_DT_F32, 2, dx), noloc);
	fj_vid w = fj_graph_add_param(g, "w", ty(FJ_DT_F32, 2, dw), noloc);
	fj_vid b = fj_graph_add_param(g, "b", ty(FJ_DT_F32, 1, db), noloc);
	uint32_t nh = add(g, FJ_OP_ATEN_LINEAR, (fj_vid[]){x, w, b}, 3, 1, (const char *[]){"h"});
	infer(g, nh);
	uint32_t ng = add(g, FJ_OP_ATEN_GELU, (fj_vid[]){res(g, nh, 0)}, 1, 1, (const char *[]){"g"});
	fj_node_set_attr(g, ng, "approximate", fj_attr_str(g, "tanh"));
	infer(g, ng);
	uint32_t nv = add(g, FJ_OP_ATEN_VAR_MEAN, (fj_vid[]){res(g, ng, 0)}, 1, 2, (const char *[]){"v", "m"});
	fj_node_set_attr(g, nv, "dims", fj_attr_ints(g, (int64_t[]){1}, 1));
	fj_node_set_attr(g, nv, "correction", fj_attr_int(0));
	fj_node_set_attr(g, nv, "keepdim", fj_attr_bool(true));
	infer(g, nv);
	uint32_t ny = add(g, FJ_OP_ATEN_MUL, (fj_vid[]){res(g, ng, 0), lit_f(g, 0.5)}, 2, 1, (const char *[]){"y"});
	infer(g, ny);
	fj_graph_set_results(g, (fj_vid[]){res(g, ny, 0), res(g, nv, 1)}, 2);
	return g;
}

static const char gelu_mlp_text[] =
	"graph @gelu_mlp(%x: f32[N,1024], %w: f32[4096,1024], %b: f32[4096]) {\n"
	"  %h = aten.linear(%x, %w, %b) : f32[N,4096]\n"
	"  %g = aten.gelu(%h) {approximate=\"tanh\"} : f32[N,4096]\n"
	"  %v, %m = aten.var_mean(%g) {dims=[1], correction=0, keepdim=true} : f32[N,1], f32[N,1]\n"
	"  %y = aten.mul(%g, 0.5) : f32[N,4096]\n"
	"  return %y, %m\n"
	"}\n";

/* IR.md §4's example: a fusion.kernel with a body. */
static fj_graph *build_kernel(fj_module *m, const char *name)
{
	fj_graph *g = fj_module_add_graph(m, name, noloc);
	fj_dim n = sym(m, "N");
	fj_dim dx[2] = {n, 4096}, dw[1] = {4096};
	fj_vid x = fj_graph_add_param(g, "x", ty(FJ_DT_F32, 2, dx), noloc);
	fj_vid w = fj_graph_add_param(g, "w", ty(FJ_DT_F32, 1, dw), noloc);
	fj_graph *b = fj_graph_create_body(g);
	ck_assert_ptr_nonnull(b);
	fj_vid bx = fj_graph_add_param(b, "x", ty(FJ_DT_F32, 2, dx), noloc);
	fj_vid bw = fj_graph_add_param(b, "w", ty(FJ_DT_F32, 1, dw), noloc);
	uint32_t k;
	k = add(b, FJ_OP_PRIMS_AMAX, (fj_vid[]){bx}, 1, 1, (const char *[]){"m"});
	fj_node_set_attr(b, k, "dims", fj_attr_ints(b, (int64_t[]){1}, 1));
	infer(b, k);
	fj_vid vm = res(b, k, 0);
	k = add(b, FJ_OP_PRIMS_BROADCAST_IN_DIM, (fj_vid[]){vm}, 1, 1, (const char *[]){"mb"});
	fj_attr shape[2] = {{.kind = FJ_AK_DIM, .u.dim = n}, fj_attr_int(4096)};
	fj_node_set_attr(b, k, "shape", fj_attr_list(b, shape, 2));
	fj_node_set_attr(b, k, "broadcast_dims", fj_attr_ints(b, (int64_t[]){0}, 1));
	infer(b, k);
	fj_vid vmb = res(b, k, 0);
	k = add(b, FJ_OP_PRIMS_SUB, (fj_vid[]){bx, vmb}, 2, 1, (const char *[]){"d"});
	infer(b, k);
	k = add(b, FJ_OP_PRIMS_EXP, (fj_vid[]){res(b, k, 0)}, 1, 1, (const char *[]){"e"});
	infer(b, k);
	fj_vid ve = res(b, k, 0);
	k = add(b, FJ_OP_PRIMS_BROADCAST_IN_DIM, (fj_vid[]){bw}, 1, 1, (const char *[]){"wb"});
	fj_node_set_attr(b, k, "shape", fj_attr_list(b, shape, 2));
	fj_node_set_attr(b, k, "broadcast_dims", fj_attr_ints(b, (int64_t[]){1}, 1));
	infer(b, k);
	k = add(b, FJ_OP_PRIMS_MUL, (fj_vid[]){ve, res(b, k, 0)}, 2, 1, (const char *[]){"r"});
	infer(b, k);
	fj_graph_set_results(b, (fj_vid[]){res(b, k, 0)}, 1);

	uint32_t kn = add(g, FJ_OP_FUSION_KERNEL, (fj_vid[]){x, w}, 2, 1, (const char *[]){"y"});
	g->nodes[kn].body = b;
	g->nodes[kn].schedule = "persistent_inner";
	g->nodes[kn].kernel = "fj_main_k0";
	infer(g, kn);
	fj_graph_set_results(g, (fj_vid[]){res(g, kn, 0)}, 1);
	return g;
}

static const char kernel_text[] =
	"graph @main(%x: f32[N,4096], %w: f32[4096]) {\n"
	"  %y = fusion.kernel(%x, %w) {schedule=\"persistent_inner\", kernel=\"fj_main_k0\"} : f32[N,4096] {\n"
	"    %m = prims.amax(%x) {dims=[1]} : f32[N]\n"
	"    %mb = prims.broadcast_in_dim(%m) {shape=[N,4096], broadcast_dims=[0]} : f32[N,4096]\n"
	"    %d = prims.sub(%x, %mb) : f32[N,4096]\n"
	"    %e = prims.exp(%d) : f32[N,4096]\n"
	"    %wb = prims.broadcast_in_dim(%w) {shape=[N,4096], broadcast_dims=[1]} : f32[N,4096]\n"
	"    %r = prims.mul(%e, %wb) : f32[N,4096]\n"
	"    yield %r\n"
	"  }\n"
	"  return %y\n"
	"}\n";

/* ================= print ================= */

START_TEST(test_format_float_strings)
{
	static const struct {
		double f;
		const char *s;
	} cases[] = {
		{1.0, "1.0"}, {0.5, "0.5"}, {-2.0, "-2.0"}, {0.1, "0.1"}, {1e-5, "1e-05"},
		{2.5e-3, "0.0025"}, {1e-4, "0.0001"}, {1.5e-7, "1.5e-07"}, {1e300, "1e+300"},
		{1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {123456789.0, "123456789.0"},
		{0.0, "0.0"}, {-0.0, "-0.0"}, {INFINITY, "inf"}, {-INFINITY, "-inf"}, {NAN, "nan"},
		{5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
		{0.30000000000000004, "0.30000000000000004"}, {100.0, "100.0"}, {3.14159, "3.14159"},
		{1.1920928955078125e-07, "1.1920928955078125e-07"}, {65504.0, "65504.0"},
	};
	char buf[64];
	for (size_t i = 0; i < FJ_ARRAY_LEN(cases); i++) {
		fj_format_float(cases[i].f, buf, sizeof buf);
		ck_assert_msg(strcmp(buf, cases[i].s) == 0, "%.17g printed as %s, expected %s", cases[i].f, buf,
		              cases[i].s);
	}
}
END_TEST

/* The text reads back to the same bits and lexes as FLOAT (IR.md §1). */
static void check_float_round_trip(double f)
{
	char buf[64];
	fj_format_float(f, buf, sizeof buf);
	const char *p = buf + (buf[0] == '-');
	if (isnan(f)) {
		ck_assert_str_eq(p, "nan");
		return;
	}
	if (isinf(f)) {
		ck_assert_str_eq(p, "inf");
		return;
	}
	ck_assert_msg(p[0] >= '0' && p[0] <= '9', "%s", buf);
	ck_assert_msg(strchr(p, '.') || strchr(p, 'e'), "%s does not lex as FLOAT", buf);
	const char *dot = strchr(p, '.');
	if (dot)
		ck_assert_msg(dot[1] >= '0' && dot[1] <= '9', "%s: no digit after '.'", buf);
	double r = strtod(buf, NULL);
	ck_assert_msg(memcmp(&r, &f, sizeof f) == 0, "%a printed as %s reads back as %a", f, buf, r);
}

START_TEST(test_format_float_round_trip)
{
	static const double fixed[] = {
		0.1, 0.2, 0.3, 1.0 / 3, 2.0 / 3, 1e300, -1e300, 1e-300, DBL_MAX, -DBL_MAX, DBL_MIN,
		DBL_MIN / 2, DBL_TRUE_MIN, -DBL_TRUE_MIN, 4.9406564584124654e-324, 2.2250738585072009e-308,
		-0.0, 0.0, 1e22, 1e23, 9007199254740993.0, 9007199254740992.0, 0.1f, 1e-7f, 3.4028234663852886e38,
		1.401298464324817e-45, 6.103515625e-05, 5.960464477539063e-08, 0.5, 1e-5, 1e16, 1e15, 123.456,
	};
	for (size_t i = 0; i < FJ_ARRAY_LEN(fixed); i++) {
		check_float_round_trip(fixed[i]);
		check_float_round_trip(nextafter(fixed[i], INFINITY));
		check_float_round_trip(nextafter(fixed[i], -INFINITY));
	}
	check_float_round_trip(INFINITY);
	check_float_round_trip(-INFINITY);
	check_float_round_trip(NAN);
	/* Every power of two and ten, and pseudo-random bit patterns. */
	for (int e = -1074; e <= 1023; e++)
		check_float_round_trip(ldexp(1.0, e));
	for (int e = -324; e <= 308; e++) {
		char p10[16];
		snprintf(p10, sizeof p10, "1e%d", e);
		check_float_round_trip(strtod(p10, NULL));
	}
	uint64_t x = 0x9E3779B97F4A7C15u;
	for (int i = 0; i < 200000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		double f;
		memcpy(&f, &x, sizeof f);
		check_float_round_trip(f);
		/* Denormals too. */
		uint64_t d = x & 0x800FFFFFFFFFFFFFu;
		memcpy(&f, &d, sizeof f);
		check_float_round_trip(f);
	}
	/* A short buffer truncates, never overflows. */
	char small[4];
	fj_format_float(1.0 / 3, small, sizeof small);
	ck_assert_str_eq(small, "0.3");
}
END_TEST

START_TEST(test_print_gelu_mlp)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = build_gelu_mlp(m);
	ck_assert_prints(ctx, m, g, gelu_mlp_text);
	ck_assert_prints(ctx, m, NULL, gelu_mlp_text);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_print_kernel_body)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = build_kernel(m, "main");
	ck_assert_prints(ctx, m, g, kernel_text);
	/* A body by itself prints its statements. */
	ck_assert_prints(ctx, m, g->nodes[0].body,
	                 "%m = prims.amax(%x) {dims=[1]} : f32[N]\n"
	                 "%mb = prims.broadcast_in_dim(%m) {shape=[N,4096], broadcast_dims=[0]} : f32[N,4096]\n"
	                 "%d = prims.sub(%x, %mb) : f32[N,4096]\n"
	                 "%e = prims.exp(%d) : f32[N,4096]\n"
	                 "%wb = prims.broadcast_in_dim(%w) {shape=[N,4096], broadcast_dims=[1]} : f32[N,4096]\n"
	                 "%r = prims.mul(%e, %wb) : f32[N,4096]\n"
	                 "yield %r\n");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Literal operands of every kind, `none`, and a returned literal. */
START_TEST(test_print_literals)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "lits", noloc);
	fj_dim d[1] = {4}, dw[2] = {3, 4};
	fj_type t = ty(FJ_DT_F16, 1, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	fj_vid w = fj_graph_add_param(g, "w", ty(FJ_DT_F16, 2, dw), noloc);
	const char *nm[] = {"a"};
	fj_type rt = t;
	fj_graph_add_node(g, FJ_OP_ATEN_MUL, (fj_vid[]){x, lit_f(g, 0.5)}, 2, 1, nm, &rt, noloc);
	nm[0] = "b";
	fj_graph_add_node(g, FJ_OP_ATEN_MUL, (fj_vid[]){lit_i(g, -3), x}, 2, 1, nm, &rt, noloc);
	nm[0] = "c";
	fj_graph_add_node(g, FJ_OP_ATEN_ADD, (fj_vid[]){x, lit_b(g, true)}, 2, 1, nm, &rt, noloc);
	nm[0] = "e";
	fj_graph_add_node(g, FJ_OP_ATEN_MUL, (fj_vid[]){x, lit_f(g, -INFINITY)}, 2, 1, nm, &rt, noloc);
	nm[0] = "f";
	fj_graph_add_node(g, FJ_OP_ATEN_ADD, (fj_vid[]){lit_f(g, 1e-5), lit_b(g, false)}, 2, 1, nm, &rt, noloc);
	nm[0] = "h";
	fj_dim dh[1] = {3};
	fj_type ht = ty(FJ_DT_F16, 1, dh);
	fj_graph_add_node(g, FJ_OP_ATEN_LINEAR, (fj_vid[]){x, w, FJ_NOVAL}, 3, 1, nm, &ht, noloc);
	fj_graph_set_results(g, (fj_vid[]){res(g, 0, 0), lit_f(g, NAN), lit_i(g, 7), lit_f(g, -0.0)}, 4);
	ck_assert_prints(ctx, m, g,
	                 "graph @lits(%x: f16[4], %w: f16[3,4]) {\n"
	                 "  %a = aten.mul(%x, 0.5) : f16[4]\n"
	                 "  %b = aten.mul(-3, %x) : f16[4]\n"
	                 "  %c = aten.add(%x, true) : f16[4]\n"
	                 "  %e = aten.mul(%x, -inf) : f16[4]\n"
	                 "  %f = aten.add(1e-05, false) : f16[4]\n"
	                 "  %h = aten.linear(%x, %w, none) : f16[3]\n"
	                 "  return %a, nan, 7, -0.0\n"
	                 "}\n");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Declared attributes in table order, defaults left out, strings escaped,
 * then the annotations in IR.md §3's order. */
START_TEST(test_print_attrs)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "attrs", noloc);
	fj_dim d[2] = {2, 3};
	fj_type t = ty(FJ_DT_F32, 2, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	fj_vid ops[2] = {x, x};
	uint32_t n;
	/* alpha = 1 is the default: left out; 2 and the float 1.0 are printed. */
	n = fj_graph_add_node(g, FJ_OP_ATEN_ADD, ops, 2, 1, (const char *[]){"a1"}, &t, noloc);
	fj_node_set_attr(g, n, "alpha", fj_attr_int(1));
	n = fj_graph_add_node(g, FJ_OP_ATEN_ADD, ops, 2, 1, (const char *[]){"a2"}, &t, noloc);
	fj_node_set_attr(g, n, "alpha", fj_attr_int(2));
	n = fj_graph_add_node(g, FJ_OP_ATEN_ADD, ops, 2, 1, (const char *[]){"a3"}, &t, noloc);
	fj_node_set_attr(g, n, "alpha", fj_attr_float(1.0));
	n = fj_graph_add_node(g, FJ_OP_ATEN_ADD, ops, 2, 1, (const char *[]){"a4"}, &t, noloc);
	fj_node_set_attr(g, n, "alpha", fj_attr_float(2.5e-3));
	/* approximate="none" is the default. */
	n = fj_graph_add_node(g, FJ_OP_ATEN_GELU, &x, 1, 1, (const char *[]){"g1"}, &t, noloc);
	fj_node_set_attr(g, n, "approximate", fj_attr_str(g, "none"));
	n = fj_graph_add_node(g, FJ_OP_ATEN_GELU, &x, 1, 1, (const char *[]){"g2"}, &t, noloc);
	fj_node_set_attr(g, n, "approximate", fj_attr_str(g, "q\"b\\s\nn\tt"));
	g->nodes[n].recomputable = FJ_TRI_TRUE;
	/* var_mean: written in any order, printed in the table's; dims=[] and
	 * keepdim=false are defaults. */
	fj_dim d1[1] = {2};
	fj_type t1 = ty(FJ_DT_F32, 1, d1);
	n = fj_graph_add_node(g, FJ_OP_ATEN_VAR_MEAN, &x, 1, 2, (const char *[]){"v", "mu"},
	                      (fj_type[]){t1, t1}, noloc);
	fj_node_set_attr(g, n, "keepdim", fj_attr_bool(false));
	fj_node_set_attr(g, n, "correction", fj_attr_float(0.0));
	fj_node_set_attr(g, n, "dims", fj_attr_ints(g, (int64_t[]){-1}, 1));
	g->nodes[n].recomputable = FJ_TRI_FALSE;
	n = fj_graph_add_node(g, FJ_OP_ATEN_VAR_MEAN, &x, 1, 2, (const char *[]){"v2", "mu2"},
	                      (fj_type[]){t1, t1}, noloc);
	fj_node_set_attr(g, n, "dims", fj_attr_ints(g, NULL, 0));
	fj_node_set_attr(g, n, "keepdim", fj_attr_bool(true));
	fj_node_set_attr(g, n, "correction", fj_attr_int(1));
	/* A list of several items, and an explicit `none`. */
	n = fj_graph_add_node(g, FJ_OP_PRIMS_AMAX, &x, 1, 1, (const char *[]){"am"}, &t1, noloc);
	fj_node_set_attr(g, n, "dims", fj_attr_ints(g, (int64_t[]){0, 1}, 2));
	fj_graph_set_results(g, NULL, 0);
	ck_assert_prints(ctx, m, g,
	                 "graph @attrs(%x: f32[2,3]) {\n"
	                 "  %a1 = aten.add(%x, %x) : f32[2,3]\n"
	                 "  %a2 = aten.add(%x, %x) {alpha=2} : f32[2,3]\n"
	                 "  %a3 = aten.add(%x, %x) {alpha=1.0} : f32[2,3]\n"
	                 "  %a4 = aten.add(%x, %x) {alpha=0.0025} : f32[2,3]\n"
	                 "  %g1 = aten.gelu(%x) : f32[2,3]\n"
	                 "  %g2 = aten.gelu(%x) {approximate=\"q\\\"b\\\\s\\nn\\tt\", recomputable=true} : f32[2,3]\n"
	                 "  %v, %mu = aten.var_mean(%x) {dims=[-1], correction=0.0, recomputable=false} : f32[2], f32[2]\n"
	                 "  %v2, %mu2 = aten.var_mean(%x) {keepdim=true} : f32[2], f32[2]\n"
	                 "  %am = prims.amax(%x) {dims=[0,1]} : f32[2]\n"
	                 "  return\n"
	                 "}\n");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Parameter and graph annotations, several graphs, an empty graph and an
 * empty module. */
START_TEST(test_print_annotations_module)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	ck_assert_prints(ctx, m, NULL, "");
	fj_graph *e = fj_module_add_graph(m, "empty", noloc);
	ck_assert_prints(ctx, m, e, "graph @empty() {\n  return\n}\n");
	fj_graph *g = fj_module_add_graph(m, "f.joint", noloc);
	fj_dim n = sym(m, "N"), k = sym(m, "K"), nk, n4;
	ck_assert(fj_dim_mul(m, n, k, &nk));
	ck_assert(fj_dim_mul(m, n, 4096, &n4));
	fj_dim d[3] = {nk, n4, 0};
	fj_vid x = fj_graph_add_param(g, "x", ty(FJ_DT_BF16, 3, d), noloc);
	fj_vid w = fj_graph_add_param(g, "w.1", ty(FJ_DT_I64, 0, NULL), noloc);
	fj_vid s = fj_graph_add_param(g, "s", ty(FJ_DT_BOOL, 1, d), noloc);
	g->values[w].nograd = true;
	g->values[x].recomputable = FJ_TRI_FALSE;
	g->values[s].recomputable = FJ_TRI_TRUE;
	g->values[s].nograd = true;
	g->num_fwd_outputs = 1;
	uint32_t nd = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"0"},
	                                (fj_type[]){ty(FJ_DT_BF16, 3, d)}, noloc);
	fj_graph_set_results(g, (fj_vid[]){res(g, nd, 0), w}, 2);
	ck_assert_prints(ctx, m, NULL,
	                 "graph @empty() {\n"
	                 "  return\n"
	                 "}\n"
	                 "\n"
	                 "graph @f.joint(%x: bf16[K*N,N*4096,0] {recomputable=false}, %w.1: i64[] {nograd=true}, "
	                 "%s: bool[K*N] {recomputable=true, nograd=true}) {num_fwd_outputs=1} {\n"
	                 "  %0 = aten.exp(%x) : bf16[K*N,N*4096,0]\n"
	                 "  return %0, %w.1\n"
	                 "}\n");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Symbolic sizes in attributes (FJ_AK_DIM) and every attribute kind. */
START_TEST(test_print_attr_kinds)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "k", noloc);
	fj_dim n = sym(m, "N"), n2;
	ck_assert(fj_dim_mul(m, n, 2, &n2));
	fj_attr items[] = {
		fj_attr_int(-1), {.kind = FJ_AK_DIM, .u.dim = n2}, fj_attr_float(0.1), fj_attr_bool(false),
		fj_attr_dtype(FJ_DT_BF16), {.kind = FJ_AK_NONE}, fj_attr_str(g, "s"), fj_attr_ints(g, NULL, 0),
	};
	fj_attr l = fj_attr_list(g, items, FJ_ARRAY_LEN(items));
	/* Through a node whose spec is a list: the printer prints what is there. */
	fj_dim d[1] = {4};
	fj_vid x = fj_graph_add_param(g, "x", ty(FJ_DT_F32, 1, d), noloc);
	uint32_t nd = fj_graph_add_node(g, FJ_OP_PRIMS_AMAX, &x, 1, 1, (const char *[]){"y"},
	                                (fj_type[]){ty(FJ_DT_F32, 0, NULL)}, noloc);
	fj_node_set_attr(g, nd, "dims", l);
	fj_graph_set_results(g, NULL, 0);
	ck_assert_prints(ctx, m, g,
	                 "graph @k(%x: f32[4]) {\n"
	                 "  %y = prims.amax(%x) {dims=[-1,N*2,0.1,false,bf16,none,\"s\",[]]} : f32[]\n"
	                 "  return\n"
	                 "}\n");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* fj_buf grows across many writes; printf longer than its stack buffer. */
START_TEST(test_buf)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_buf b;
	fj_buf_init(&b, ctx);
	for (int i = 0; i < 10000; i++)
		fj_buf_printf(&b, "%d,", i % 10);
	ck_assert_uint_eq(b.len, 20000);
	char big[1000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = 0;
	fj_buf_printf(&b, "<%s>", big);
	ck_assert_uint_eq(b.len, 20000 + 1001);
	ck_assert_uint_eq(strlen(b.data), b.len);
	ck_assert(!b.oom);
	fj_buf_free(&b);
	fj_context_destroy(ctx);
}
END_TEST

/* Printing with an allocator that starts failing at every possible point:
 * FJ_ERR_NOMEM or the full text, never a crash or a leak. */
START_TEST(test_print_alloc_failures)
{
	bool ok_seen = false;
	for (long k = 1; k < 64; k++) {
		fj_test_alloc ta = {0, 0, 0};
		fj_context *ctx = fj_context_create(fj_test_alloc_fn, &ta);
		ck_assert_ptr_nonnull(ctx);
		fj_module *m = fj_module_create(ctx);
		build_gelu_mlp(m);
		build_kernel(m, "main");
		ta.fail_at = ta.count + k;
		fj_buf b;
		fj_buf_init(&b, ctx);
		fj_status st = fj_print_module(&b, m);
		if (st == FJ_OK) {
			ok_seen = true;
			ck_assert(strstr(b.data, "yield %r"));
		} else {
			ck_assert_int_eq(st, FJ_ERR_NOMEM);
			ck_assert(b.oom);
		}
		fj_buf_free(&b);
		ta.fail_at = 0;
		fj_module_destroy(m);
		fj_context_destroy(ctx);
		ck_assert_uint_eq(ta.live, 0);
	}
	ck_assert(ok_seen);
}
END_TEST

/* The printer shows malformed graphs rather than crashing on them. */
START_TEST(test_print_malformed)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "bad", noloc);
	fj_dim d[1] = {-77};
	fj_vid x = fj_graph_add_param(g, "x", ty(FJ_DT_F32, 1, d), noloc);
	uint32_t n = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, NULL, NULL, noloc);
	g->nodes[n].opnds[0] = 12345;
	fj_graph_set_results(g, (fj_vid[]){999}, 1);
	char *s = print_text(ctx, m, g);
	ck_assert(strstr(s, "<invalid 12345>"));
	ck_assert(strstr(s, "<invalid 999>"));
	ck_assert(strstr(s, "<invalid size"));
	free(s);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Through the parser: print -> parse -> print is the identity, and float
 * literals and attributes come back with the same bits. */
START_TEST(test_print_parse_round_trip)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	build_gelu_mlp(m);
	build_kernel(m, "main");
	fj_graph *g = fj_module_add_graph(m, "floats", noloc);
	fj_dim d[1] = {4};
	fj_type t = ty(FJ_DT_F64, 1, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	enum { NLIT = 300 };
	double vals[NLIT];
	uint64_t r = 0x243F6A8885A308D3u;
	for (int i = 0; i < NLIT; i++) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		uint64_t bits = i % 3 == 0 ? (r & 0x800FFFFFFFFFFFFFu) : r; /* denormals too */
		memcpy(&vals[i], &bits, sizeof vals[i]);
		if (isnan(vals[i]))
			vals[i] = 0.1 * i;
		uint32_t n = add(g, FJ_OP_ATEN_ADD, (fj_vid[]){x, lit_f(g, vals[i])}, 2, 1, NULL);
		fj_node_set_attr(g, n, "alpha", fj_attr_float(vals[(i * 7) % (i + 1)]));
		infer(g, n);
	}
	fj_graph_set_results(g, (fj_vid[]){res(g, 0, 0)}, 1);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	char *once = print_text(ctx, m, NULL);
	fj_module *m2 = NULL;
	ck_assert_msg(fj_parse_module(ctx, once, strlen(once), "once.fj", &m2) == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_int_eq(fj_verify_module(m2), FJ_OK);
	char *twice = print_text(ctx, m2, NULL);
	ck_assert_str_eq(once, twice);
	fj_graph *g2 = fj_module_find_graph(m2, "floats");
	ck_assert_ptr_nonnull(g2);
	ck_assert_uint_eq(g2->nnodes, NLIT);
	for (int i = 0; i < NLIT; i++) {
		const fj_value *lv = &g2->values[g2->nodes[i].opnds[1]];
		ck_assert_int_eq(lv->kind, FJ_VK_LITERAL);
		ck_assert_int_eq(lv->lit.kind, FJ_LIT_FLOAT);
		ck_assert(memcmp(&lv->lit.f, &vals[i], sizeof vals[i]) == 0);
	}
	free(once);
	free(twice);
	fj_module_destroy(m2);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* ================= verify ================= */

START_TEST(test_verify_ok)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	build_gelu_mlp(m);
	build_kernel(m, "main");
	fj_graph *e = fj_module_add_graph(m, "empty", noloc);
	ck_assert_int_eq(fj_verify_graph(e), FJ_OK);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	ck_assert_uint_eq(fj_context_diagnostic_count(ctx), 0);
	/* A body verifies on its own too. */
	ck_assert_int_eq(fj_verify_graph(m->graphs[1]->nodes[0].body), FJ_OK);
	/* Verifying does not change what prints. */
	ck_assert_prints(ctx, m, m->graphs[0], gelu_mlp_text);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_verify_type_mismatch)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "f", noloc);
	fj_dim d4[1] = {4}, d8[1] = {8};
	fj_vid x = fj_graph_add_param(g, "x", ty(FJ_DT_F32, 1, d4), noloc);
	uint32_t n = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"y"},
	                               (fj_type[]){ty(FJ_DT_F32, 1, d8)}, at(3));
	n = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"z"},
	                      (fj_type[]){ty(FJ_DT_F16, 1, d4)}, at(4));
	fj_graph_set_results(g, (fj_vid[]){res(g, 0, 0), res(g, n, 0)}, 2);
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "%y has type f32[8] but its inferred type is f32[4]"));
	ck_assert(diag_has(ctx, "%z has type f16[4] but its inferred type is f32[4]"));
	const fj_diagnostic *dg = fj_context_diagnostic(ctx, 0);
	ck_assert_str_eq(dg->file, "t.fj");
	ck_assert_uint_eq(dg->line, 3);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Node 0 uses node 1's result; a result defined by two nodes. */
START_TEST(test_verify_ssa)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "f", noloc);
	fj_dim d[1] = {4};
	fj_type t = ty(FJ_DT_F32, 1, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	uint32_t a = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"a"}, &t, at(2));
	uint32_t b = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"b"}, &t, at(3));
	fj_vid vb = res(g, b, 0);
	g->nodes[a].opnds[0] = vb;
	fj_graph_set_results(g, (fj_vid[]){res(g, a, 0)}, 1);
	ck_assert_int_eq(fj_verify_graph(g), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "%b is used before its definition (nodes out of order)"));
	ck_assert_uint_eq(fj_context_diagnostic(ctx, 0)->line, 2);

	/* Restore, then make node b claim node a's result. */
	fj_context_clear_diagnostics(ctx);
	g->nodes[a].opnds[0] = x;
	ck_assert_int_eq(fj_verify_graph(g), FJ_OK);
	g->nodes[b].res[0] = res(g, a, 0);
	ck_assert_int_eq(fj_verify_graph(g), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "result 0 is not a value this node defines"));
	ck_assert(diag_has(ctx, "%b is not a result of the node that should define it"));

	/* Two values with one name. */
	fj_context_clear_diagnostics(ctx);
	g->nodes[b].res[0] = vb;
	ck_assert_int_eq(fj_verify_graph(g), FJ_OK);
	g->values[vb].name = "a";
	ck_assert_int_eq(fj_verify_graph(g), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "%a is defined more than once"));
	g->values[vb].name = "b";

	/* Bad names. */
	fj_context_clear_diagnostics(ctx);
	g->values[x].name = "x y";
	ck_assert_int_eq(fj_verify_graph(g), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "invalid name '%x y'"));
	g->values[x].name = "x";
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_verify_annotations)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "f", noloc);
	fj_dim d[1] = {4};
	fj_type t = ty(FJ_DT_F32, 1, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	g->values[x].nograd = true;
	g->values[x].recomputable = FJ_TRI_TRUE;
	uint32_t a = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"a"}, &t, at(2));
	g->nodes[a].recomputable = FJ_TRI_FALSE;
	g->nodes[a].nograd = true; /* stop-gradient: allowed on any node */
	fj_graph_set_results(g, (fj_vid[]){res(g, a, 0)}, 1);
	g->num_fwd_outputs = 1;
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);

	g->num_fwd_outputs = 2;
	g->nodes[a].schedule = "pointwise";
	g->values[res(g, a, 0)].nograd = true;
	g->values[res(g, a, 0)].recomputable = FJ_TRI_TRUE;
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "num_fwd_outputs=2 is out of range"));
	ck_assert(diag_has(ctx, "schedule annotation is only allowed on fusion.kernel"));
	ck_assert(diag_has(ctx, "%a: nograd annotates a node or a graph parameter, not a result"));
	ck_assert(diag_has(ctx, "%a: recomputable annotates the node"));

	fj_context_clear_diagnostics(ctx);
	g->num_fwd_outputs = -5;
	g->nodes[a].schedule = NULL;
	g->nodes[a].kernel = "fj_f_k0";
	g->nodes[a].recomputable = 7;
	g->values[res(g, a, 0)].nograd = false;
	g->values[res(g, a, 0)].recomputable = FJ_TRI_UNSET;
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "num_fwd_outputs=-5 is out of range"));
	ck_assert(diag_has(ctx, "kernel annotation is only allowed on fusion.kernel"));
	ck_assert(diag_has(ctx, "invalid recomputable annotation"));

	/* num_fwd_outputs on a kernel body. */
	fj_context_clear_diagnostics(ctx);
	fj_graph *k = build_kernel(m, "main");
	ck_assert_int_eq(fj_verify_graph(k), FJ_OK);
	k->nodes[0].body->num_fwd_outputs = 0;
	ck_assert_int_eq(fj_verify_graph(k), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "num_fwd_outputs is only allowed on a graph"));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_verify_kernel_body)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = build_kernel(m, "main");
	fj_node *kn = &g->nodes[0];
	fj_graph *b = kn->body;
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);

	/* A parameter type that differs from the operand. */
	fj_dim d7[1] = {7};
	fj_type saved = b->values[b->params[1]].type;
	b->values[b->params[1]].type = ty(FJ_DT_F32, 1, d7);
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "body parameter %w has type f32[7] but the operand has type f32[4096]"));
	b->values[b->params[1]].type = saved;

	/* Operand count. */
	fj_context_clear_diagnostics(ctx);
	kn->nopnds = 1;
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "fusion.kernel has 1 operands but its body 2 parameters"));
	kn->nopnds = 2;

	/* Yield count. */
	fj_context_clear_diagnostics(ctx);
	fj_vid r = b->results[0];
	fj_graph_set_results(b, (fj_vid[]){r, r}, 2);
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "fusion.kernel has 1 results but its body yields 2 values"));

	/* yield none, yield an unknown id. */
	fj_context_clear_diagnostics(ctx);
	fj_graph_set_results(b, (fj_vid[]){FJ_NOVAL}, 1);
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "yield: `none` is never returned"));
	fj_graph_set_results(b, (fj_vid[]){4242}, 1);
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "yield: operand 0 refers to no value"));
	fj_graph_set_results(b, &r, 1);

	/* A body name that redefines an outer one; a wrong param name. */
	fj_context_clear_diagnostics(ctx);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	ck_assert_int_eq(fj_graph_rename_value(b, b->nodes[0].res[0], "y"), FJ_OK);
	ck_assert_int_eq(fj_graph_rename_value(b, b->params[0], "q"), FJ_OK);
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "%y in a fusion.kernel body redefines an outer name"));
	ck_assert(diag_has(ctx, "body parameter 0 is %q but the operand is %x"));
	ck_assert_int_eq(fj_graph_rename_value(b, b->params[0], "x"), FJ_OK);
	ck_assert_int_eq(fj_graph_rename_value(b, b->nodes[0].res[0], "m"), FJ_OK);

	/* Annotations on a body parameter; no body at all; a body elsewhere. */
	fj_context_clear_diagnostics(ctx);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	b->values[b->params[0]].nograd = true;
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "body's parameters carry no annotations"));
	b->values[b->params[0]].nograd = false;
	fj_context_clear_diagnostics(ctx);
	kn->body = NULL;
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "fusion.kernel has no body"));
	kn->body = b;
	/* A non-kernel node with a body. */
	fj_context_clear_diagnostics(ctx);
	b->nodes[3].body = b;
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "prims.exp cannot have a body"));
	b->nodes[3].body = NULL;
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* Ids, kinds, dtypes and sizes out of range: errors, never a crash. */
START_TEST(test_verify_malformed)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "f", noloc);
	fj_dim d[1] = {4};
	fj_type t = ty(FJ_DT_F32, 1, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	uint32_t a = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"a"}, &t, noloc);
	uint32_t b = fj_graph_add_node(g, FJ_OP_ATEN_EXP, &x, 1, 1, (const char *[]){"b"}, &t, noloc);
	fj_graph_set_results(g, (fj_vid[]){res(g, a, 0), res(g, b, 0)}, 2);
	ck_assert_int_eq(fj_verify_graph(g), FJ_OK);

	static const struct {
		const char *what;
		int field;
	} cases[] = {
		{"refers to no value", 0}, {"result 0 is not a value", 1}, {"return: operand 1 refers to no value", 2},
		{"return: `none` is never returned", 3}, {"invalid op", 4}, {"invalid dtype", 5},
		{"invalid size", 6}, {"rank above the maximum", 7}, {"invalid kind", 8},
		{"not in its graph's parameter list", 9}, {"missing arrays", 10}, {"missing name", 11},
		{"invalid graph name", 12},
	};
	for (size_t i = 0; i < FJ_ARRAY_LEN(cases); i++) {
		fj_context_clear_diagnostics(ctx);
		fj_node saved_b = g->nodes[b];
		fj_value saved_x = g->values[x];
		fj_vid saved_r1 = g->results[1], saved_p0 = g->params[0];
		fj_dim saved_d = g->values[x].type.dims[0];
		fj_vid *saved_opnds = g->nodes[b].opnds;
		const char *saved_name = g->name;
		fj_vid bogus[1] = {999};
		switch (cases[i].field) {
		case 0: g->nodes[b].opnds = bogus; break;
		case 1: g->nodes[b].res = bogus; break;
		case 2: g->results[1] = 777; break;
		case 3: g->results[1] = FJ_NOVAL; break;
		case 4: g->nodes[b].op = (fj_op)(FJ_OP_COUNT + 3); break;
		case 5: g->values[x].type.dtype = (fj_dtype)99; break;
		case 6: g->values[x].type.dims[0] = -1000; break;
		case 7: g->values[x].type.rank = 200; break;
		case 8: g->values[x].kind = 9; break;
		case 9: g->params[0] = res(g, a, 0); break;
		case 10: g->nodes[b].opnds = NULL; break;
		case 11: g->values[x].name = NULL; break;
		case 12: g->name = "a b"; break;
		}
		ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
		ck_assert_msg(diag_has(ctx, cases[i].what), "case %zu: no '%s' in '%s'", i, cases[i].what,
		              fj_context_error(ctx));
		/* The printer copes with the same graph. */
		free(print_text(ctx, m, g));
		g->nodes[b] = saved_b;
		g->nodes[b].opnds = saved_opnds;
		g->values[x] = saved_x;
		g->values[x].type.dims[0] = saved_d;
		g->results[1] = saved_r1;
		g->params[0] = saved_p0;
		g->name = saved_name;
		ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	}
	(void)d;
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

/* The verifier calls fj_check_node, whose errors make it fail. */
START_TEST(test_verify_check_node)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "f", noloc);
	fj_dim d[1] = {4};
	fj_type t = ty(FJ_DT_F32, 1, d);
	fj_vid x = fj_graph_add_param(g, "x", t, noloc);
	/* aten.exp with two operands; prims.amax without its required dims. */
	fj_graph_add_node(g, FJ_OP_ATEN_EXP, (fj_vid[]){x, x}, 2, 1, (const char *[]){"a"}, &t, noloc);
	fj_graph_add_node(g, FJ_OP_PRIMS_AMAX, &x, 1, 1, (const char *[]){"b"},
	                  (fj_type[]){ty(FJ_DT_F32, 0, NULL)}, noloc);
	fj_graph_set_results(g, NULL, 0);
	ck_assert_int_eq(fj_verify_graph(g), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "aten.exp"));
	ck_assert(diag_has(ctx, "prims.amax"));
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_verify_duplicate_graphs)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_module_add_graph(m, "f", noloc);
	fj_graph *h = fj_module_add_graph(m, "h", noloc);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	h->name = "f";
	ck_assert_int_eq(fj_verify_module(m), FJ_ERR_INVALID);
	ck_assert(diag_has(ctx, "graph @f is defined more than once"));
	h->name = "h";
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_verify_alloc_failures)
{
	bool ok_seen = false;
	for (long k = 1; k < 200; k++) {
		fj_test_alloc ta = {0, 0, 0};
		fj_context *ctx = fj_context_create(fj_test_alloc_fn, &ta);
		ck_assert_ptr_nonnull(ctx);
		fj_module *m = fj_module_create(ctx);
		build_gelu_mlp(m);
		build_kernel(m, "main");
		ta.fail_at = ta.count + k;
		fj_status st = fj_verify_module(m);
		ck_assert(st == FJ_OK || st == FJ_ERR_NOMEM);
		ok_seen |= st == FJ_OK;
		ta.fail_at = 0;
		fj_module_destroy(m);
		fj_context_destroy(ctx);
		ck_assert_uint_eq(ta.live, 0);
	}
	ck_assert(ok_seen);
}
END_TEST

Suite *suite_print(void)
{
	Suite *s = suite_create("print");
	TCase *tc = tcase_create("print");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_format_float_strings);
	tcase_add_test(tc, test_format_float_round_trip);
	tcase_add_test(tc, test_print_gelu_mlp);
	tcase_add_test(tc, test_print_kernel_body);
	tcase_add_test(tc, test_print_literals);
	tcase_add_test(tc, test_print_attrs);
	tcase_add_test(tc, test_print_annotations_module);
	tcase_add_test(tc, test_print_attr_kinds);
	tcase_add_test(tc, test_buf);
	tcase_add_test(tc, test_print_alloc_failures);
	tcase_add_test(tc, test_print_malformed);
	tcase_add_test(tc, test_print_parse_round_trip);
	suite_add_tcase(s, tc);
	return s;
}

Suite *suite_verify(void)
{
	Suite *s = suite_create("verify");
	TCase *tc = tcase_create("verify");
	tcase_add_test(tc, test_verify_ok);
	tcase_add_test(tc, test_verify_type_mismatch);
	tcase_add_test(tc, test_verify_ssa);
	tcase_add_test(tc, test_verify_annotations);
	tcase_add_test(tc, test_verify_kernel_body);
	tcase_add_test(tc, test_verify_malformed);
	tcase_add_test(tc, test_verify_check_node);
	tcase_add_test(tc, test_verify_duplicate_graphs);
	tcase_add_test(tc, test_verify_alloc_failures);
	suite_add_tcase(s, tc);
	return s;
}
