/* test_parser.c -- the .fj lexer and parser: valid inputs (IR.md's examples),
 * located errors, allocation failures, random garbage. */
#include <math.h>
#include <stdio.h>

#include "frontend/frontend.h"
#include "test.h"

static const char gelu_mlp[] =
	"// comment to end of line\n"
	"graph @gelu_mlp(%x: f32[N,1024], %w: f32[4096,1024], %b: f32[4096]) {\n"
	"  %h = aten.linear(%x, %w, %b) : f32[N,4096]\n"
	"  %g = aten.gelu(%h) {approximate=\"tanh\"}\n"
	"  %v, %m = aten.var_mean(%g) {dims=[1], correction=0, keepdim=true}\n"
	"  %y = aten.mul(%g, 0.5)\n"
	"  return %y, %m\n"
	"}\n";

static const char kernel_example[] =
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

static fj_module *parse_ok(fj_context *ctx, const char *text)
{
	fj_module *m = NULL;
	fj_status st = fj_parse_module(ctx, text, strlen(text), "t.fj", &m);
	ck_assert_msg(st == FJ_OK, "parse failed: %s\n--- input:\n%s", fj_context_error(ctx), text);
	ck_assert_ptr_nonnull(m);
	return m;
}

static char *type_str(const fj_module *m, const fj_type *t)
{
	static char buf[256];
	size_t len = (size_t)snprintf(buf, sizeof buf, "%s[", fj_dtype_name(t->dtype));
	for (int i = 0; i < t->rank; i++) {
		if (i)
			buf[len++] = ',';
		len += (size_t)fj_dim_format(m, t->dims[i], buf + len, sizeof buf - len);
	}
	snprintf(buf + len, sizeof buf - len, "]");
	return buf;
}

START_TEST(test_gelu_mlp)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse_ok(ctx, gelu_mlp);
	ck_assert_str_eq(m->file, "t.fj");
	ck_assert_uint_eq(m->ngraphs, 1);
	fj_graph *g = m->graphs[0];
	ck_assert_str_eq(g->name, "gelu_mlp");
	ck_assert_uint_eq(g->loc.line, 2);
	ck_assert_uint_eq(g->loc.col, 1);
	ck_assert_ptr_eq(g->loc.file, m->file);
	ck_assert_uint_eq(g->nparams, 3);
	ck_assert_uint_eq(g->nnodes, 4);
	const fj_value *x = fj_val(g, g->params[0]);
	ck_assert_str_eq(x->name, "x");
	ck_assert_uint_eq(x->loc.line, 2);
	ck_assert_uint_eq(x->loc.col, 17);
	ck_assert_str_eq(type_str(m, &x->type), "f32[N,1024]");
	const fj_node *h = &g->nodes[0];
	ck_assert_int_eq(h->op, FJ_OP_ATEN_LINEAR);
	ck_assert_uint_eq(h->loc.line, 3);
	ck_assert_uint_eq(h->loc.col, 3);
	ck_assert_str_eq(type_str(m, &fj_val(g, h->res[0])->type), "f32[N,4096]");
	const fj_node *gl = &g->nodes[1];
	const fj_attr *ap = fj_node_attr(ctx, gl, "approximate");
	ck_assert_int_eq(ap->kind, FJ_AK_STR);
	ck_assert_str_eq(ap->u.s, "tanh");
	const fj_node *vm = &g->nodes[2];
	ck_assert_uint_eq(vm->nres, 2);
	ck_assert_str_eq(fj_val(g, vm->res[1])->name, "m");
	ck_assert_uint_eq(fj_val(g, vm->res[1])->loc.col, 7);
	const fj_attr *dims = fj_node_attr(ctx, vm, "dims");
	ck_assert_int_eq(dims->kind, FJ_AK_LIST);
	ck_assert_uint_eq(dims->n, 1);
	ck_assert_int_eq(dims->u.items[0].kind, FJ_AK_INT);
	ck_assert_int_eq(fj_node_attr(ctx, vm, "correction")->kind, FJ_AK_INT);
	ck_assert_int_eq(fj_node_attr(ctx, vm, "keepdim")->kind, FJ_AK_BOOL);
	ck_assert(fj_node_attr(ctx, vm, "keepdim")->u.b);
	ck_assert_str_eq(type_str(m, &fj_val(g, vm->res[0])->type), "f32[N,1]");
	const fj_node *mul = &g->nodes[3];
	const fj_value *half = fj_val(g, mul->opnds[1]);
	ck_assert_int_eq(half->kind, FJ_VK_LITERAL);
	ck_assert_int_eq(half->lit.kind, FJ_LIT_FLOAT);
	ck_assert(half->lit.f == 0.5);
	ck_assert_uint_eq(g->nresults, 2);
	ck_assert_str_eq(fj_val(g, g->results[0])->name, "y");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_kernel_example)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = parse_ok(ctx, kernel_example);
	fj_graph *g = m->graphs[0];
	ck_assert_uint_eq(g->nnodes, 1);
	const fj_node *k = &g->nodes[0];
	ck_assert_int_eq(k->op, FJ_OP_FUSION_KERNEL);
	ck_assert_str_eq(k->schedule, "persistent_inner");
	ck_assert_str_eq(k->kernel, "fj_main_k0");
	ck_assert_ptr_nonnull(k->body);
	fj_graph *b = k->body;
	ck_assert_ptr_eq(b->parent, g);
	ck_assert_uint_eq(b->nparams, 2);
	ck_assert_str_eq(fj_val(b, b->params[0])->name, "x");
	ck_assert_str_eq(fj_val(b, b->params[1])->name, "w");
	ck_assert_uint_eq(b->nnodes, 6);
	ck_assert_uint_eq(b->nresults, 1);
	ck_assert_str_eq(fj_val(b, b->results[0])->name, "r");
	ck_assert_uint_eq(b->nodes[0].loc.line, 3);
	ck_assert_uint_eq(b->nodes[0].loc.col, 5);
	const fj_attr *shape = fj_node_attr(ctx, &b->nodes[1], "shape");
	ck_assert_int_eq(shape->kind, FJ_AK_LIST);
	ck_assert_int_eq(shape->u.items[0].kind, FJ_AK_DIM);
	ck_assert_int_eq(shape->u.items[1].kind, FJ_AK_INT);
	ck_assert_str_eq(type_str(m, &fj_val(g, k->res[0])->type), "f32[N,4096]");
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_misc_valid)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	/* Empty modules, comments only. */
	fj_module *m = parse_ok(ctx, "");
	ck_assert_uint_eq(m->ngraphs, 0);
	fj_module_destroy(m);
	m = parse_ok(ctx, "  // nothing\n\n// at all");
	fj_module_destroy(m);
	ck_assert_int_eq(fj_parse_module(ctx, NULL, 0, NULL, &m), FJ_OK);
	ck_assert_str_eq(m->file, "<input>");
	fj_module_destroy(m);

	/* Graph attributes vs body, annotations, literals, symbolic products. */
	m = parse_ok(ctx,
	             "graph @f.joint(%x.1: f32[N*4096] {nograd}, %0: f16[] {recomputable=false, nograd=false}) "
	             "{num_fwd_outputs=1} {\n"
	             "  %a = aten.mul(%x.1, 2) {recomputable}\n"
	             "  %b = aten.mul(%x.1, 2.0)\n"
	             "  %c = aten.add(%a, true) {alpha=-1}\n"
	             "  %d = aten.add(%0, -inf) {alpha=1e-3}\n"
	             "  %e = aten.add(%0, nan)\n"
	             "  return %c, %b, %d, 1.5, %e, -7\n"
	             "}\n"
	             "graph @g() {return}\n"
	             "graph @h(%z: bool[0]) {\n  return %z\n}\n");
	ck_assert_uint_eq(m->ngraphs, 3);
	fj_graph *g = m->graphs[0];
	ck_assert_str_eq(g->name, "f.joint");
	ck_assert_int_eq(g->num_fwd_outputs, 1);
	const fj_value *x = fj_val(g, g->params[0]);
	ck_assert(x->nograd);
	ck_assert_int_eq(x->recomputable, FJ_TRI_UNSET);
	ck_assert_str_eq(type_str(m, &x->type), "f32[N*4096]");
	const fj_value *z = fj_val(g, g->params[1]);
	ck_assert(!z->nograd);
	ck_assert_int_eq(z->recomputable, FJ_TRI_FALSE);
	ck_assert_int_eq(z->type.rank, 0);
	ck_assert_int_eq(g->nodes[0].recomputable, FJ_TRI_TRUE);
	ck_assert_int_eq(g->nodes[1].recomputable, FJ_TRI_UNSET);
	const fj_value *two = fj_val(g, g->nodes[0].opnds[1]);
	ck_assert_int_eq(two->lit.kind, FJ_LIT_INT);
	ck_assert_int_eq(two->lit.i, 2);
	ck_assert_int_eq(fj_val(g, g->nodes[1].opnds[1])->lit.kind, FJ_LIT_FLOAT);
	ck_assert_int_eq(fj_val(g, g->nodes[2].opnds[1])->lit.kind, FJ_LIT_BOOL);
	ck_assert_int_eq(fj_node_attr(ctx, &g->nodes[2], "alpha")->u.i, -1);
	const fj_value *ninf = fj_val(g, g->nodes[3].opnds[1]);
	ck_assert(isinf(ninf->lit.f) && ninf->lit.f < 0);
	ck_assert_int_eq(fj_node_attr(ctx, &g->nodes[3], "alpha")->kind, FJ_AK_FLOAT);
	ck_assert(fj_node_attr(ctx, &g->nodes[3], "alpha")->u.f == 1e-3);
	ck_assert(isnan(fj_val(g, g->nodes[4].opnds[1])->lit.f));
	ck_assert_str_eq(type_str(m, &fj_val(g, g->nodes[1].res[0])->type), "f32[N*4096]");
	ck_assert_uint_eq(g->nresults, 6);
	ck_assert_int_eq(fj_val(g, g->results[3])->kind, FJ_VK_LITERAL);
	ck_assert_int_eq(fj_val(g, g->results[5])->lit.i, -7);
	ck_assert_uint_eq(m->graphs[1]->nresults, 0);
	ck_assert_int_eq(m->graphs[1]->num_fwd_outputs, -1);
	fj_module_destroy(m);

	/* Strings with escapes and UTF-8, int64 limits, products, dtype values. */
	m = parse_ok(ctx,
	             "graph @s(%x: f32[9223372036854775807], %y: f32[2*3*N*M]) {\n"
	             "  %a = fusion.kernel(%x) {kernel=\"a\\\"b\\\\c\\nd\\te \xc3\xa9 \xf0\x9f\x98\x80\"} : f32[9223372036854775807] {\n"
	             "    yield %x\n"
	             "  }\n"
	             "  %b, %b2 = aten.var_mean(%y) {dims=[], correction=-9223372036854775808}\n"
	             "  %c = aten.mul(%x, 0)\n"
	             "  return %a\n"
	             "}\n");
	g = m->graphs[0];
	ck_assert_str_eq(g->nodes[0].kernel,
	                 "a\"b\\c\nd\te \xc3\xa9 \xf0\x9f\x98\x80");
	ck_assert_int_eq(fj_node_attr(ctx, &g->nodes[1], "correction")->u.i, INT64_MIN);
	ck_assert_str_eq(type_str(m, &fj_val(g, g->params[1])->type), "f32[M*N*6]");
	fj_module_destroy(m);

	/* Whitespace is free between tokens, and \r\n line ends work. */
	m = parse_ok(ctx, "graph\t@w\r\n(\n%x\n:\nf32\n[\n4\n]\n)\n{\n%y\n=\naten.exp\n(\n%x\n)\n:\nf32[4]\nreturn\n%y\n}");
	fj_module_destroy(m);
	ck_assert_uint_eq(fj_context_error_count(ctx), 0);
	fj_context_destroy(ctx);
}
END_TEST

/* Each case: input, then the expected "line:col: error: " prefix and a piece of
 * the message. */
static const struct err_case {
	const char *text, *where, *what;
} err_cases[] = {
	{"graph @f() {\n  %y = aten.foo(1)\n  return %y\n}\n", "2:8", "unknown op 'aten.foo'"},
	{"graph @f(%x: f31[4]) {\n  return %x\n}\n", "1:14", "unknown dtype 'f31'"},
	{"graph @f(%x: f32[3], %y: f32[4]) {\n  %z = aten.add(%x, %y)\n  return %z\n}\n", "2:3", "broadcast"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) : f32[8]\n  return %y\n}\n", "2:23",
	 "result type f32[8] of %y does not match the inferred type f32[4]"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%z)\n  return %y\n}\n", "2:17", "use of undefined value %z"},
	{"graph @f(%x: f32[4]) {\n  %x = aten.exp(%x)\n  return %x\n}\n", "2:3", "redefinition of %x (first defined at 1:10)"},
	{"graph @f(%x: f32[4], %x: f32[4]) {\n  return %x\n}\n", "1:22", "redefinition of %x"},
	{"graph @f(%x: f32[4]) {\n  %a, %b = aten.exp(%x)\n  return %a\n}\n", "2:3", "aten.exp has 1 result, but 2 names are given"},
	{"graph @f(%x: f32[4]) {\n  %a, %a = aten.var_mean(%x)\n  return %a\n}\n", "2:7", "%a is defined twice in this statement"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x)\n", "3:1", "unexpected end of file in a graph body (opened at 1:1)"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x) {approximate=\"tanh}\n  return %y\n}\n", "2:35", "unterminated string"},
	{"graph @f(%x: f32[4]) {\n  return %x\n}\ngraph @f(%x: f32[4]) {\n  return %x\n}\n", "4:7", "graph @f is defined twice"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.var_mean(%x) {keepdim=true, keepdim=false}\n  return %y\n}\n", "2:3",
	 "aten.var_mean has 2 results"},
	{"graph @f(%x: f32[4]) {\n  %y, %z = aten.var_mean(%x) {keepdim=true, keepdim=false}\n  return %y\n}\n", "2:45",
	 "attribute 'keepdim' appears twice"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) {foo=1}\n  return %y\n}\n", "2:22", "aten.exp has no attribute 'foo'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) {schedule=\"x\"}\n  return %y\n}\n", "2:22", "no attribute 'schedule'"},
	{"graph @f(%x: f32[true]) {\n  return %x\n}\n", "1:18", "'true' is reserved and cannot be a symbolic size"},
	{"graph @f(%x: f32[f32]) {\n  return %x\n}\n", "1:18", "'f32' is reserved"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.var_mean(%x) {none=1}\n  return %y\n}\n", "2:3", "2 results, but 1 name is given"},
	{"graph @f(%x: f32[4]) {\n  %y, %z = aten.var_mean(%x) {none=1}\n  return %y\n}\n", "2:31",
	 "'none' is reserved and cannot be an attribute name"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x) {approximate=\"\\q\"}\n  return %y\n}\n", "2:36", "invalid escape '\\q'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.mul(%x, 1.)\n  return %y\n}\n", "2:22", "malformed number '1.'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.mul(%x, .5)\n  return %y\n}\n", "2:21", "cannot start with '.'"},
	{"return %x\n", "1:1", "'return' outside a graph"},
	{"graph @f(%x: f32[4]) {\n  yield %x\n}\n", "2:3", "'yield' outside a fusion.kernel body"},
	{"graph @f(%x: f32[4]) {\n  return none\n}\n", "2:10", "none cannot be returned"},
	{"graph @f(%x: f32[4], %w: f32[4]) {\n  %y = fusion.kernel(%x) : f32[4] {\n    %r = prims.mul(%x, %w)\n"
	 "    yield %r\n  }\n  return %y\n}\n",
	 "3:24", "%w is defined outside this fusion.kernel body and is not one of the kernel's operands"},
	{"graph @f(%x: f32[4], %w: f32[4]) {\n  %y = fusion.kernel(%x) : f32[4] {\n    %w = prims.exp(%x)\n"
	 "    yield %w\n  }\n  return %y\n}\n",
	 "3:5", "may not redefine %w"},
	{"graph @f(%x: f32[4]) {\n  %y = fusion.kernel(%x) : f32[4] {\n    %r = prims.exp(%x)\n    return %r\n  }\n"
	 "  return %y\n}\n",
	 "4:5", "'return' inside a fusion.kernel body"},
	{"graph @f(%x: f32[4]) {\n  %y = fusion.kernel(%x) : f32[4] {\n    %r = prims.exp(%x)\n  }\n  return %y\n}\n",
	 "4:3", "missing 'yield'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) : f32[4] {\n  }\n  return %y\n}\n", "2:30", "only fusion.kernel has a body"},
	{"graph @f(%x: f32[99999999999999999999]) {\n  return %x\n}\n", "1:18", "does not fit in 64 bits"},
	{"graph @f(%x: f32[4294967296*4294967296]) {\n  return %x\n}\n", "1:18", "size overflows (sizes are 64-bit)"},
	{"graph @f(%x: f32[4] {\n  return %x\n}\n", "2:3", "'return' is reserved and cannot be an attribute name"},
	{"graph @f(%x: f32[4] {nograd}\n", "2:1", "expected ',' or ')', found end of file"},
	{"graph @f(%x f32[4]) {\n  return %x\n}\n", "1:13", "expected ':' and the parameter's type, found 'f32'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) $\n  return %y\n}\n", "2:21", "unexpected character '$'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x)\n  return %y\n}\n\x01\x02", "5:1", "unexpected byte 0x01"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x) {approximate=\"\xff\"}\n  return %y\n}\n", "2:36", "invalid UTF-8"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x) {approximate=\"a\x01\"}\n  return %y\n}\n", "2:37", "control byte 0x01"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x)\n  return %y\n  %z = aten.exp(%x)\n}\n", "4:3",
	 "expected ',' or '}' ('return' ends the graph)"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x)\n}\n", "3:1", "missing 'return' at the end of graph @f"},
	{"graph @f(%x: f32[4]) {\n  %y = exp(%x)\n  return %y\n}\n", "2:8", "expected an op name such as aten.add, found 'exp'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.(%x)\n  return %y\n}\n", "2:13", "malformed op name"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.mul(%x, 12abc)\n  return %y\n}\n", "2:23", "malformed number"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.mul(%x, 1e+)\n  return %y\n}\n", "2:24", "exponent"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.mul(%x, 1e999)\n  return %y\n}\n", "2:21", "out of the range of a 64-bit float"},
	{"graph @f(%x: f32[-4]) {\n  return %x\n}\n", "1:18", "a size cannot be negative"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(% x)\n  return %y\n}\n", "2:18", "expected a name right after '%'"},
	{"graph f(%x: f32[4]) {\n  return %x\n}\n", "1:7", "expected a graph name (@name), found 'f'"},
	{"grph @f() {\n  return\n}\n", "1:1", "expected 'graph', found 'grph'"},
	{"graph @f(%x: f32[1,2,3,4,5,6,7,8,9]) {\n  return %x\n}\n", "1:34", "at most 8 dims"},
	{"graph @f(%x: f32[4] {foo}) {\n  return %x\n}\n", "1:22", "unknown parameter attribute 'foo'"},
	{"graph @f(%x: f32[4]) {bar=1} {\n  return %x\n}\n", "1:23", "unknown graph attribute 'bar'"},
	{"graph @f(%x: f32[4] {nograd=1}) {\n  return %x\n}\n", "1:29", "annotation 'nograd' takes true or false"},
	{"graph @f(%x: f32[4]) {num_fwd_outputs=\"a\"} {\n  return %x\n}\n", "1:39", "takes an integer"},
	{"graph @f(%x: f32[4]) {\n  %y = fusion.kernel(%x) {kernel=3} : f32[4] {\n    yield %x\n  }\n  return %y\n}\n", "2:34",
	 "annotation 'kernel' takes a string"},
	{"graph @f(%x: f32[4]) {\n  %a, %b = aten.var_mean(%x) : f32[]\n  return %a\n}\n", "2:32",
	 "1 result type is written for 2 results"},
	{"graph @f(%x: f32[4]) {\n  %y = fusion.kernel(%x, %x) : f32[4] {\n    yield %x\n  }\n  return %y\n}\n", "2:26",
	 "%x is passed to fusion.kernel twice"},
	{"graph @f(%x: f32[4]) {\n  %y = fusion.kernel(%x, 1.0) : f32[4] {\n    yield %x\n  }\n  return %y\n}\n", "2:26",
	 "must be a named value"},
	{"graph @f(%x: f32[4]) {\n  %y = fusion.kernel(%x) : f32[4]\n  return %y\n}\n", "3:3", "'{' to open the fusion.kernel body"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.mul(%x, \"s\")\n  return %y\n}\n", "2:21", "expected an operand"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x) {approximate=}\n  return %y\n}\n", "2:35", "expected an attribute value"},
	{"graph @f(%x: f32[4]) {\n  %y = prims.amax(%x) {dims=[-1*N]}\n  return %y\n}\n", "2:32", "a size cannot be negative"},
	{"graph @f(%x: f32[4]) {\n  return %x\n}\n}", "4:1", "expected 'graph', found '}'"},
	{"graph @f(%x: f32[4]) / {\n  return %x\n}\n", "1:22", "comments start with '//'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x)\n  return %y,\n}\n", "4:1", "expected an operand"},
	{"graph @f(%x: f32[4],) {\n  return %x\n}\n", "1:21", "expected a parameter"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) {} \n  return %y\n}\n", "2:22", "expected an attribute name, found '}'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x) {approximate=\"a\" : f32[4]\n  return %y\n}\n", "2:39",
	 "expected ',' or '}', found ':'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) : f32[4\n  return %y\n}\n", "3:3", "expected ',' or ']', found 'return'"},
	{"graph @f(%x: f32[4]) {\n  %y = aten.exp(%x) : f32\n  return %y\n}\n", "3:3", "expected '[' after the dtype"},
};

START_TEST(test_errors)
{
	const struct err_case *c = &err_cases[_i];
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = (fj_module *)1;
	fj_status st = fj_parse_module(ctx, c->text, strlen(c->text), "t.fj", &m);
	ck_assert_msg(st != FJ_OK, "case %d parsed:\n%s", _i, c->text);
	ck_assert_ptr_null(m);
	const char *e = fj_context_error(ctx);
	char want[64];
	snprintf(want, sizeof want, "t.fj:%s: error: ", c->where);
	ck_assert_msg(strncmp(e, want, strlen(want)) == 0 && strstr(e, c->what),
	              "case %d: want '%s...%s', got '%s'\n--- input:\n%s", _i, want, c->what, e, c->text);
	ck_assert_uint_eq(fj_context_error_count(ctx), 1);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_deep_nesting)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	static char text[200000];
	int n = snprintf(text, sizeof text, "graph @f(%%x: f32[4]) {\n  %%y = prims.amax(%%x) {dims=");
	for (int i = 0; i < 50000; i++)
		text[n++] = '[';
	text[n] = 0;
	fj_module *m;
	ck_assert_int_ne(fj_parse_module(ctx, text, (size_t)n, "t.fj", &m), FJ_OK);
	ck_assert(strstr(fj_context_error(ctx), "nested too deeply"));
	/* fusion.kernel bodies nest at most 32 deep: 20 is fine, 40 is refused. */
	for (int depth = 20; depth <= 40; depth += 20) {
		n = snprintf(text, sizeof text, "graph @f(%%x: f32[4]) {\n");
		for (int i = 0; i < depth; i++)
			n += snprintf(text + n, sizeof text - (size_t)n, "%%k%d = fusion.kernel(%%x) : f32[4] {\n", i);
		n += snprintf(text + n, sizeof text - (size_t)n, "yield %%x\n");
		for (int i = depth - 1; i >= 0; i--)
			n += snprintf(text + n, sizeof text - (size_t)n, "}\n%s %%k%d\n", i ? "yield" : "return", i);
		n += snprintf(text + n, sizeof text - (size_t)n, "}\n");
		fj_status st = fj_parse_module(ctx, text, (size_t)n, "t.fj", &m);
		if (depth == 20) {
			ck_assert_msg(st == FJ_OK, "%s", fj_context_error(ctx));
			fj_module_destroy(m);
		} else {
			ck_assert_int_ne(st, FJ_OK);
			ck_assert_msg(strstr(fj_context_error(ctx), "t.fj:34:35: error: fusion.kernel bodies are nested too deeply"), "%s", fj_context_error(ctx));
		}
	}
	/* Long names and a long number are fine. */
	n = snprintf(text, sizeof text, "graph @f(%%");
	memset(text + n, 'a', 50000);
	n += 50000;
	n += snprintf(text + n, sizeof text - (size_t)n, ": f32[4]) {\n  %%y = aten.mul(%%");
	memset(text + n, 'a', 50000);
	n += 50000;
	n += snprintf(text + n, sizeof text - (size_t)n, ", 0.");
	memset(text + n, '5', 90000);
	n += 90000;
	n += snprintf(text + n, sizeof text - (size_t)n, ")\n  return %%y\n}\n");
	m = parse_ok(ctx, text);
	ck_assert(fj_val(m->graphs[0], m->graphs[0]->nodes[0].opnds[1])->lit.f == 0.5555555555555556);
	fj_module_destroy(m);
	fj_context_destroy(ctx);
}
END_TEST

START_TEST(test_parse_file)
{
	fj_context *ctx = fj_context_create(NULL, NULL);
	fj_module *m = (fj_module *)1;
	ck_assert_int_eq(fj_parse_file(ctx, "/nonexistent/dir/x.fj", &m), FJ_ERR_IO);
	ck_assert_ptr_null(m);
	ck_assert(strstr(fj_context_error(ctx), "/nonexistent/dir/x.fj"));
	char path[] = "/tmp/fj_parser_testXXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	FILE *f = fdopen(fd, "w");
	fputs(gelu_mlp, f);
	fclose(f);
	ck_assert_int_eq(fj_parse_file(ctx, path, &m), FJ_OK);
	ck_assert_str_eq(m->file, path);
	fj_module_destroy(m);
	f = fopen(path, "w");
	fputs("graph @f() {\n  return %q\n}\n", f);
	fclose(f);
	ck_assert_int_ne(fj_parse_file(ctx, path, &m), FJ_OK);
	char want[128];
	snprintf(want, sizeof want, "%s:2:10: error: use of undefined value %%q", path);
	ck_assert_str_eq(fj_context_error(ctx), want);
	remove(path);
	fj_context_destroy(ctx);
}
END_TEST

/* Every allocation failure point: an error or success, and no leak. */
static void alloc_failures(const char *text)
{
	bool succeeded = false;
	for (long fail_at = 1; !succeeded && fail_at < 100000; fail_at++) {
		fj_test_alloc a = {0, 0, 0};
		fj_context *ctx = fj_context_create(fj_test_alloc_fn, &a);
		ck_assert_ptr_nonnull(ctx);
		a.count = 0;
		a.fail_at = fail_at;
		fj_module *m = NULL;
		fj_status st = fj_parse_module(ctx, text, strlen(text), "t.fj", &m);
		if (st == FJ_OK) {
			ck_assert_ptr_nonnull(m);
			succeeded = a.count < fail_at;
			fj_module_destroy(m);
		} else {
			ck_assert_ptr_null(m);
			ck_assert_int_eq(st, FJ_ERR_NOMEM);
		}
		fj_context_destroy(ctx);
		ck_assert_uint_eq(a.live, 0);
	}
	ck_assert(succeeded);
}

START_TEST(test_alloc_failures)
{
	alloc_failures(gelu_mlp);
	alloc_failures(kernel_example);
}
END_TEST

/* Deterministic garbage: random bytes, and random mutations of a valid module. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

START_TEST(test_garbage)
{
	fj_test_alloc a = {0, 0, 0};
	fj_context *ctx = fj_context_create(fj_test_alloc_fn, &a);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	static const char alphabet[] = "graph@%(){}[],:=*.-\"\\/ \n0123456789aten.addmulf32N_eEinfnaonetruefalsereturnyield";
	char buf[1024];
	for (int i = 0; i < 1000; i++) {
		size_t n = rng_next(&seed) % 512;
		int mode = i % 3;
		if (mode == 2) {
			n = strlen(kernel_example);
			memcpy(buf, kernel_example, n);
			for (int k = 0; k < 4; k++)
				buf[rng_next(&seed) % n] = (char)rng_next(&seed);
		} else {
			for (size_t k = 0; k < n; k++)
				buf[k] = mode == 0 ? (char)rng_next(&seed) : alphabet[rng_next(&seed) % (sizeof alphabet - 1)];
		}
		fj_module *m = NULL;
		fj_status st = fj_parse_module(ctx, buf, n, "g.fj", &m);
		if (st == FJ_OK)
			fj_module_destroy(m);
		else
			ck_assert(strncmp(fj_context_error(ctx), "g.fj:", 5) == 0);
		fj_context_clear_diagnostics(ctx);
	}
	fj_context_destroy(ctx);
	ck_assert_uint_eq(a.live, 0);
}
END_TEST

Suite *suite_parser(void)
{
	Suite *s = suite_create("parser");
	TCase *tc = tcase_create("parser");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gelu_mlp);
	tcase_add_test(tc, test_kernel_example);
	tcase_add_test(tc, test_misc_valid);
	tcase_add_loop_test(tc, test_errors, 0, (int)FJ_ARRAY_LEN(err_cases));
	tcase_add_test(tc, test_deep_nesting);
	tcase_add_test(tc, test_parse_file);
	tcase_add_test(tc, test_alloc_failures);
	tcase_add_test(tc, test_garbage);
	suite_add_tcase(s, tc);
	return s;
}
