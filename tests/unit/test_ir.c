/* test_ir.c -- the core IR: arena, dtypes, symbolic sizes, graphs, names,
 * copies in memory, and the allocator failure paths of context creation. */
#include "frontend/frontend.h"
#include "test.h"

START_TEST(test_dtype_promote)
{
	ck_assert_int_eq(fj_dtype_promote(FJ_DT_F16, FJ_DT_BF16), FJ_DT_F32);
	ck_assert_int_eq(fj_dtype_promote(FJ_DT_U8, FJ_DT_I8), FJ_DT_I16);
	ck_assert_int_eq(fj_dtype_promote(FJ_DT_BOOL, FJ_DT_I32), FJ_DT_I32);
	ck_assert_int_eq(fj_dtype_promote(FJ_DT_I64, FJ_DT_F16), FJ_DT_F16);
	ck_assert_int_eq(fj_dtype_promote(FJ_DT_F32, FJ_DT_F64), FJ_DT_F64);
	ck_assert_int_eq(fj_dtype_promote(FJ_DT_U8, FJ_DT_I64), FJ_DT_I64);
	fj_dtype dt;
	ck_assert(fj_dtype_from_name("bf16", 4, &dt) && dt == FJ_DT_BF16);
	ck_assert(!fj_dtype_from_name("f8", 2, &dt));
}
END_TEST

START_TEST(test_symbolic_dims)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_dim n, k, p, q, r;
	ck_assert_int_eq(fj_dim_symbol(m, "N", 1, &n), FJ_OK);
	ck_assert_int_eq(fj_dim_symbol(m, "K", 1, &k), FJ_OK);
	ck_assert(n < 0 && k < 0 && n != k);
	ck_assert(fj_dim_mul(m, n, 4096, &p));
	ck_assert(fj_dim_mul(m, 4096, n, &q));
	ck_assert(p == q); /* interned */
	ck_assert(fj_dim_div(m, p, 4096, &r) && r == n);
	ck_assert(fj_dim_div(m, p, n, &r) && r == 4096);
	ck_assert(!fj_dim_div(m, p, k, &r));
	ck_assert(!fj_dim_div(m, 10, 3, &r));
	ck_assert(fj_dim_mul(m, p, 0, &r) && r == 0);
	ck_assert(!fj_dim_mul(m, INT64_MAX, 2, &r));
	char buf[64];
	fj_dim_format(m, p, buf, sizeof buf);
	ck_assert_str_eq(buf, "N*4096");
	ck_assert(fj_dim_mul(m, k, n, &r));
	fj_dim_format(m, r, buf, sizeof buf);
	ck_assert_str_eq(buf, "K*N");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

static const char *dim_text(const fj_module *m, fj_dim d)
{
	static char buf[128];
	fj_dim_format(m, d, buf, sizeof buf);
	return buf;
}

/* Sums, differences and floor division: canonical interning, the text, the
 * evaluation from the symbols' values, and copies that keep the definitions. */
START_TEST(test_derived_dims)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_dim s, t, a, b, c, d;
	ck_assert_int_eq(fj_dim_symbol(m, "s0", 2, &s), FJ_OK);
	ck_assert_int_eq(fj_dim_symbol(m, "s1", 2, &t), FJ_OK);
	ck_assert(fj_dim_add(m, s, 1, &a) && fj_dim_add(m, 1, s, &b) && a == b);
	ck_assert_str_eq(dim_text(m, a), "s0+1");
	ck_assert(fj_dim_sub(m, a, 1, &c) && c == s);          /* (s0+1)-1 == s0 */
	ck_assert(fj_dim_add(m, s, 0, &c) && c == s);
	ck_assert(fj_dim_add(m, 2, 3, &c) && c == 5);
	ck_assert(!fj_dim_sub(m, 2, 3, &c));                      /* negative static */
	ck_assert(!fj_dim_sub(m, 0, s, &c));                      /* negative for every s0 */
	ck_assert(fj_dim_mul(m, a, 2, &b) && fj_dim_add(m, s, s, &c) && fj_dim_add(m, c, 2, &c) && b == c);
	ck_assert_str_eq(dim_text(m, b), "(s0+1)*2");
	ck_assert(fj_dim_add(m, t, s, &c) && fj_dim_add(m, s, t, &d) && c == d);
	ck_assert_str_eq(dim_text(m, c), "s0+s1");
	ck_assert(fj_dim_add_int(m, s, -1, &d));
	ck_assert_str_eq(dim_text(m, d), "s0-1");
	ck_assert(fj_dim_floordiv(m, s, 1, &d) && d == s);
	ck_assert(fj_dim_floordiv(m, b, 2, &d) && d == a);        /* exact */
	ck_assert(fj_dim_floordiv(m, s, 2, &d) && fj_dim_floordiv(m, d, 3, &d));
	ck_assert(fj_dim_floordiv(m, s, 6, &c) && c == d);        /* (s0//2)//3 == s0//6 */
	ck_assert_str_eq(dim_text(m, d), "s0//6");
	ck_assert(fj_dim_floordiv(m, a, 2, &d));
	ck_assert_str_eq(dim_text(m, d), "(s0+1)//2");
	ck_assert(fj_dim_has_floordiv(m, d) && !fj_dim_has_floordiv(m, b));
	ck_assert(!fj_dim_floordiv(m, s, 0, &c));
	/* values, in table order: s0 = 7, s1 = 2 */
	uint32_t ns = fj_symbol_count(m);
	int64_t val[16];
	ck_assert_uint_le(ns, 16);
	for (uint32_t k = 0; k < ns; k++)
		val[k] = -1;
	val[0] = 7;
	val[1] = 2;
	for (uint32_t k = 2; k < ns; k++) {
		ck_assert(fj_symbol_is_derived(m, k));
		bool neg = false;
		ck_assert(fj_symbol_eval(m, k, val, &val[k], &neg));
	}
	const fj_symexpr *e = fj_dim_expr(m, d);
	ck_assert_int_eq(val[e->syms[0]], 4);                    /* (7+1)//2 */
	ck_assert(fj_dim_sub(m, s, t, &c));                       /* s0-s1: negative at s0=1, s1=2 */
	e = fj_dim_expr(m, c);
	int64_t small[16] = {1, 2}, v = 0;
	bool neg = false;
	ck_assert(!fj_symbol_eval(m, e->syms[0], small, &v, &neg) && neg);
	/* a copy keeps the definitions */
	fj_module *cp = NULL;
	ck_assert_int_eq(fj_module_clone(m, &cp), FJ_OK);
	ck_assert_str_eq(dim_text(cp, d), "(s0+1)//2");
	ck_assert(fj_dim_add(cp, s, 1, &c) && c == a);
	fj_module_destroy(m);
	ck_assert(fj_dim_floordiv(cp, c, 2, &b) && b == d);
	fj_module_destroy(cp);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_graph_names)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = fj_module_create(ctx);
	fj_graph *g = fj_module_add_graph(m, "main", (fj_loc){0});
	ck_assert_ptr_nonnull(g);
	ck_assert_ptr_null(fj_module_add_graph(m, "main", (fj_loc){0}));
	fj_dim d[2] = {2, 3};
	fj_type t = {FJ_DT_F32, 2, false, d};
	fj_vid x = fj_graph_add_param(g, "x", t, (fj_loc){0});
	ck_assert_uint_ne(x, FJ_NOVAL);
	for (int i = 0; i < 500; i++) {
		fj_vid ops[2] = {x, x};
		uint32_t n = fj_graph_add_node(g, FJ_OP_PRIMS_ADD, ops, 2, 1, NULL, &t, (fj_loc){0});
		ck_assert_uint_ne(n, FJ_NONODE);
	}
	ck_assert_uint_eq(fj_graph_find_value(g, "x", 1), x);
	const char *f = fj_graph_fresh_name(g, "x");
	ck_assert_str_ne(f, "x");
	ck_assert_uint_eq(fj_graph_find_value(g, f, strlen(f)), FJ_NOVAL);
	/* Every generated name resolves to its value. */
	for (fj_vid v = 0; v < g->nvalues; v++)
		ck_assert_uint_eq(fj_graph_find_value(g, g->values[v].name, strlen(g->values[v].name)), v);
	ck_assert_int_eq(fj_graph_rename_value(g, x, "input"), FJ_OK);
	ck_assert_uint_eq(fj_graph_find_value(g, "x", 1), FJ_NOVAL);
	ck_assert_uint_eq(fj_graph_find_value(g, "input", 5), x);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_arena)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_arena a;
	fj_arena_init(&a, ctx);
	char *big = fj_arena_alloc(&a, 5u << 20);
	ck_assert_ptr_nonnull(big);
	for (int i = 0; i < 10000; i++) {
		unsigned char *p = fj_arena_alloc(&a, (size_t)(i % 200) + 1);
		ck_assert_ptr_nonnull(p);
		ck_assert(((uintptr_t)p & 15) == 0);
		ck_assert_int_eq(p[0], 0);
		p[0] = 1;
	}
	ck_assert_str_eq(fj_arena_printf(&a, "%s-%d", "x", 7), "x-7");
	fj_arena_free(&a);
	fj_context_destroy(ctx);
}
END_TEST

/* Every allocation of context and graph creation may fail: the calls return
 * NULL or an error, and nothing leaks. */
START_TEST(test_alloc_failures)
{
	for (long n = 1; n < 200; n++) {
		fj_test_alloc ta = {0, n, 0};
		fj_context *ctx = fj_context_create(fj_test_alloc_fn, &ta);
		if (!ctx) {
			ck_assert_uint_eq(ta.live, 0);
			continue;
		}
		fj_module *m = fj_module_create(ctx);
		if (m) {
			fj_graph *g = fj_module_add_graph(m, "g", (fj_loc){0});
			if (g) {
				fj_dim d[1] = {4};
				fj_type t = {FJ_DT_F32, 1, false, d};
				fj_vid x = fj_graph_add_param(g, "x", t, (fj_loc){0});
				for (int i = 0; i < 40 && x != FJ_NOVAL; i++) {
					fj_vid ops[2] = {x, x};
					if (fj_graph_add_node(g, FJ_OP_PRIMS_MUL, ops, 2, 1, NULL, &t, (fj_loc){0}) == FJ_NONODE)
						break;
				}
			}
			fj_module_destroy(m);
		}
		fj_context_destroy(ctx);
		ck_assert_uint_eq(ta.live, 0);
	}
}
END_TEST

/* Prints m (or g alone) into a malloc'd string. */
static char *print_text(fj_context *ctx, const fj_module *m, const fj_graph *g)
{
	fj_buf b;
	fj_buf_init(&b, ctx);
	ck_assert_int_eq(g ? fj_print_graph(&b, g) : fj_print_module(&b, m), FJ_OK);
	char *s = strndup(b.data ? b.data : "", b.len);
	fj_buf_free(&b);
	return s;
}

/* Symbols (N, a product N*4, one only the second graph uses), attributes of
 * every kind (lists, strings, dtypes, symbolic sizes), literals, parameter
 * and node annotations, and a fusion.kernel region with its schedule. */
static const char clone_src[] =
	"graph @f(%x: f32[N,4] {nograd}, %y: f32[N*4], %i: i64[]) {\n"
	"  %a = aten.add(%x, 2.5)\n"
	"  %r = prims.reshape(%y) {shape=[N,4]}\n"
	"  %d = aten.div(%a, %r) {rounding_mode=\"trunc\"}\n"
	"  %f = prims.full() {shape=[N,4], value=1, dtype=f32}\n"
	"  %e = prims.exp(%f) {recomputable=false}\n"
	"  %k = fusion.kernel(%d, %e) {schedule=\"pointwise\", kernel=\"fj_f_k0\"} : f32[N,4] {\n"
	"    %one = prims.full() {shape=[N,4], value=1.0, dtype=f32}\n"
	"    %m = prims.mul(%d, %one)\n"
	"    %n = prims.add(%m, %e)\n"
	"    yield %n\n"
	"  }\n"
	"  %s = aten.sum(%k) {dims=[1], keepdim=true}\n"
	"  return %s, %k, %i, 3\n"
	"}\n"
	"graph @g(%z: f32[M,2]) {\n"
	"  %v, %w = prims.var_mean(%z) {dims=[1], correction=0}\n"
	"  return %w\n"
	"}\n";

START_TEST(test_clone)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, clone_src, strlen(clone_src), "clone.fj", &m), FJ_OK);
	char *want = print_text(ctx, m, NULL);
	char *want_g = print_text(ctx, m, m->graphs[1]);
	ck_assert_ptr_nonnull(strstr(want, "fusion.kernel"));
	fj_module *c = NULL, *cg = NULL;
	fj_graph *g = NULL;
	ck_assert_int_eq(fj_module_clone(m, &c), FJ_OK);
	ck_assert_int_eq(fj_graph_clone(m->graphs[1], &cg, &g), FJ_OK);
	ck_assert_uint_eq(c->ngraphs, 2);
	ck_assert_uint_eq(cg->ngraphs, 1);
	ck_assert_ptr_eq(cg->graphs[0], g);
	/* the same ids, sizes and places, in memory the copy owns */
	const fj_graph *o = m->graphs[0], *k = c->graphs[0];
	ck_assert_uint_eq(k->nvalues, o->nvalues);
	ck_assert_uint_eq(k->nnodes, o->nnodes);
	for (uint32_t v = 0; v < o->nvalues; v++) {
		ck_assert_int_eq(k->values[v].loc.line, o->values[v].loc.line);
		ck_assert(!o->values[v].name || k->values[v].name != o->values[v].name);
	}
	ck_assert_ptr_eq(k->nodes[5].body->parent, k);
	ck_assert_str_eq(k->nodes[0].loc.file, "clone.fj");
	ck_assert_uint_eq(fj_graph_find_value(k, "d", 1), fj_graph_find_value(o, "d", 1));
	fj_module_destroy(m); /* the copies stand alone */
	char *got = print_text(ctx, c, NULL);
	char *got_g = print_text(ctx, cg, NULL);
	ck_assert_str_eq(got, want);
	ck_assert_str_eq(got_g, want_g);
	ck_assert_int_eq(fj_verify_module(c), FJ_OK);
	ck_assert_int_eq(fj_verify_module(cg), FJ_OK);
	/* a copy grows like any graph */
	ck_assert_ptr_nonnull(fj_graph_fresh_name(c->graphs[0], "d"));
	ck_assert_uint_ne(fj_graph_add_param(c->graphs[0], "extra", c->graphs[0]->values[0].type, (fj_loc){0}), FJ_NOVAL);
	free(want);
	free(want_g);
	free(got);
	free(got_g);
	fj_module_destroy(c);
	fj_module_destroy(cg);
	fj_context_destroy(ctx);
}
END_TEST

Suite *suite_ir(void)
{
	Suite *s = suite_create("ir");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_dtype_promote);
	tcase_add_test(tc, test_symbolic_dims);
	tcase_add_test(tc, test_derived_dims);
	tcase_add_test(tc, test_graph_names);
	tcase_add_test(tc, test_arena);
	tcase_add_test(tc, test_alloc_failures);
	tcase_add_test(tc, test_clone);
	suite_add_tcase(s, tc);
	return s;
}
