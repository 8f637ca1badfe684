/* test_autodiff.c -- autodiff, recompute, partition and the max-flow:
 *   - every prim has a VJP table entry (a rule, a zero gradient, or "not
 *     differentiable");
 *   - every VJP rule against central finite differences in f64, running the
 *     graphs with the reference (aten) executor: for L = sum_k <t_k, y_k(x)>,
 *     dL/dx[i] from @f.joint against (L(x + h e_i) - L(x - h e_i)) / 2h;
 *   - the partitioned @f.fw / @f.bw compute the joint's outputs and gradients;
 *   - Dinic's max flow against a brute force over all cuts of random graphs.
 */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "test.h"

#include "frontend/frontend.h"
#include "passes/autodiff.h"
#include "passes/maxflow.h"
#include "passes/pass.h"
#include "runtime/program.h"

static fj_context *ctx;

static void setup(void) { ctx = fj_context_create(NULL, NULL); }
static void teardown(void) { fj_context_destroy(ctx); }

static fj_module *parse(const char *text)
{
	fj_module *m = NULL;
	fj_status st = fj_parse_module(ctx, text, strlen(text), "t.fj", &m);
	ck_assert_msg(st == FJ_OK, "%s\n%s", fj_context_error(ctx), text);
	return m;
}

/* ---- rule coverage ---- */

START_TEST(test_rule_coverage)
{
	for (int op = 0; op < FJ_OP_COUNT; op++) {
		const fj_opinfo *oi = fj_op_info(ctx, (fj_op)op);
		if (!(oi->flags & FJ_OPF_PRIMS))
			continue;
		ck_assert_msg(fj_vjp_rules[op].kind != FJ_VJP_MISSING, "%s has no VJP table entry", oi->name);
		ck_assert_msg((fj_vjp_rules[op].kind == FJ_VJP_RULE) == (fj_vjp_rules[op].fn != NULL),
		              "%s: a rule needs a function and only a rule has one", oi->name);
	}
}
END_TEST

/* ---- finite differences ---- */

typedef struct gcase {
	const char *text;  /* graph @f, f64 (int params are indices) */
	double lo, hi;     /* the range of the float inputs */
	int64_t imod;      /* int inputs: (7k + 3) % imod */
	double tol;        /* 0: 1e-6 */
	double h;          /* the finite-difference step; 0: 1e-6 */
} gcase;

static void fill(fj_rt_tensor *t, const gcase *c, uint32_t seed)
{
	int64_t n = fj_rt_tensor_numel(t);
	uint32_t s = seed * 2654435761u + 12345u;
	for (int64_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		double u = (double)(s >> 8) / (double)(1u << 24);
		if (fj_dtype_is_float(t->dtype))
			fj_rt_store_f64(t->data, t->dtype, i, c->lo + (c->hi - c->lo) * u);
		else
			fj_rt_store_f64(t->data, t->dtype, i, (double)((7 * i + 3) % (c->imod ? c->imod : 1)));
	}
}

static fj_rt_program *compile(fj_graph *g)
{
	fj_rt_program *p = NULL;
	fj_status st = fj_rt_program_create(ctx, g, FJ_RT_EXEC_ATEN, &p);
	ck_assert_msg(st == FJ_OK, "@%s: %s", g->name, fj_context_error(ctx));
	return p;
}

static void run(fj_rt_program *p, const fj_rt_tensor *const *in, fj_rt_tensor *out)
{
	ck_assert_msg(fj_rt_program_bind(p, in, NULL, NULL, 0) == FJ_OK, "%s", fj_context_error(ctx));
	ck_assert_msg(fj_rt_program_run(p, in, out) == FJ_OK, "%s", fj_context_error(ctx));
}

/* L = sum over the float outputs of <tangent, output>. */
static double objective(const fj_graph *f, fj_rt_tensor *out, fj_rt_tensor *tan)
{
	double l = 0;
	uint32_t t = 0;
	for (uint32_t k = 0; k < f->nresults; k++) {
		if (!fj_dtype_is_float(f->values[f->results[k]].type.dtype))
			continue;
		for (int64_t i = 0; i < fj_rt_tensor_numel(&out[k]); i++)
			l += fj_rt_load_f64(out[k].data, out[k].dtype, i) * fj_rt_load_f64(tan[t].data, tan[t].dtype, i);
		t++;
	}
	return l;
}

static void check_case(const gcase *c)
{
	fj_module *m = parse(c->text);
	ck_assert_msg(fj_run_pipeline(m, "verify,autodiff,verify", NULL) == FJ_OK, "%s\n%s", fj_context_error(ctx),
	              c->text);
	fj_graph *f = fj_module_find_graph(m, "f"), *j = fj_module_find_graph(m, "f.joint");
	ck_assert_ptr_nonnull(j);
	fj_rt_program *pf = compile(f), *pj = compile(j);
	fj_rt_tensor in[16] = {0}, out[16] = {0}, jout[32] = {0};
	const fj_rt_tensor *pin[16];
	uint32_t np = f->nparams, ntan = j->nparams - np;
	ck_assert_uint_le(j->nparams, 16);
	for (uint32_t i = 0; i < j->nparams; i++) {
		const fj_type *t = &j->values[j->params[i]].type;
		int64_t dims[FJ_MAX_RANK];
		for (int k = 0; k < t->rank; k++)
			dims[k] = fj_dim_is_static(t->dims[k]) ? t->dims[k] : 4; /* symbols: 4 */
		ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &in[i], t->dtype, t->rank, dims), FJ_OK);
		fill(&in[i], c, i + 1);
		pin[i] = &in[i];
	}
	run(pj, pin, jout);
	double tol = c->tol ? c->tol : 1e-6, h = c->h ? c->h : 1e-6;
	uint32_t gi = f->nresults;
	for (uint32_t i = 0; i < np; i++) {
		fj_rt_tensor *x = &in[i];
		if (!fj_dtype_is_float(x->dtype) || f->values[f->params[i]].nograd)
			continue;
		fj_rt_tensor *g = &jout[gi++];
		ck_assert(fj_rt_tensor_same_type(g, x));
		for (int64_t e = 0; e < fj_rt_tensor_numel(x); e++) {
			double x0 = fj_rt_load_f64(x->data, x->dtype, e);
			fj_rt_store_f64(x->data, x->dtype, e, x0 + h);
			run(pf, pin, out);
			double lp = objective(f, out, &in[np]);
			fj_rt_store_f64(x->data, x->dtype, e, x0 - h);
			run(pf, pin, out);
			double lm = objective(f, out, &in[np]);
			fj_rt_store_f64(x->data, x->dtype, e, x0);
			double fd = (lp - lm) / (2 * h), an = fj_rt_load_f64(g->data, g->dtype, e);
			ck_assert_msg(fabs(fd - an) <= tol * fmax(1.0, fabs(fd)),
			              "d/d%s[%lld]: autodiff %.10g, finite differences %.10g\n%s",
			              f->values[f->params[i]].name, (long long)e, an, fd, c->text);
		}
	}
	ck_assert_uint_eq(gi, j->nresults);
	(void)ntan;
	for (uint32_t i = 0; i < 16; i++) {
		fj_rt_tensor_free(&in[i]);
		fj_rt_tensor_free(&out[i]);
	}
	for (uint32_t i = 0; i < 32; i++)
		fj_rt_tensor_free(&jout[i]);
	fj_rt_program_destroy(pf);
	fj_rt_program_destroy(pj);
	fj_module_destroy(m);
}

#define UN(op, lo, hi) {"graph @f(%x: f64[3,4]) {\n  %y = prims." op "(%x)\n  return %y\n}\n", lo, hi, 0, 0, 0}
#define BIN(op, lo, hi) {"graph @f(%x: f64[3,4], %z: f64[3,4]) {\n  %y = prims." op "(%x, %z)\n  return %y\n}\n", lo, hi, 0, 0, 0}

static const gcase cases[] = {
	UN("abs", -1, 1), UN("neg", -1, 1), UN("exp", -1, 1), UN("exp2", -1, 1), UN("expm1", -1, 1),
	UN("log", 0.5, 2), UN("log2", 0.5, 2), UN("log10", 0.5, 2), UN("log1p", -0.5, 1), UN("sqrt", 0.5, 2),
	UN("rsqrt", 0.5, 2), UN("reciprocal", 0.5, 2), UN("sin", -1, 1), UN("cos", -1, 1), UN("tan", -1, 1),
	UN("tanh", -1, 1), UN("sinh", -1, 1), UN("cosh", -1, 1), UN("asin", -0.8, 0.8), UN("acos", -0.8, 0.8),
	UN("atan", -2, 2), UN("asinh", -2, 2), UN("acosh", 1.5, 3), UN("atanh", -0.8, 0.8), UN("erf", -1, 1),
	UN("erfc", -1, 1), UN("floor", 0.1, 0.9), UN("ceil", 0.1, 0.9), UN("round", 0.1, 0.4),
	UN("trunc", 0.1, 0.9), UN("sign", 0.1, 0.9),
	BIN("add", -1, 1), BIN("sub", -1, 1), BIN("mul", -1, 1), BIN("div", 0.5, 2), BIN("pow", 0.5, 2),
	BIN("maximum", -1, 1), BIN("minimum", -1, 1), BIN("atan2", 0.2, 2), BIN("fmod", 0.3, 2),
	BIN("remainder", 0.3, 2),
	{"graph @f(%x: f64[3,4], %z: f64[3,4]) {\n  %p = prims.gt(%x, %z)\n  %y = prims.where(%p, %x, %z)\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %a = prims.convert_element_type(%x) {dtype=f32}\n"
	 "  %y = prims.convert_element_type(%a) {dtype=f64}\n  return %y\n}\n", -1, 1, 0, 1e-4, 1e-2},
	{"graph @f(%x: f64[3]) {\n  %y = prims.broadcast_in_dim(%x) {shape=[2,3], broadcast_dims=[1]}\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,1]) {\n  %y = prims.broadcast_in_dim(%x) {shape=[2,3,4], broadcast_dims=[1,2]}\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.sum(%x) {dims=[1]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.amax(%x) {dims=[1]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.amin(%x) {dims=[0,1]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.prod(%x) {dims=[0]}\n  return %y\n}\n", 0.5, 1.5, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %v, %m = prims.var_mean(%x) {dims=[1], correction=1}\n  return %v, %m\n}\n",
	 -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[N,3]) {\n  %v, %m = prims.var_mean(%x) {dims=[0], correction=0}\n  return %v\n}\n",
	 -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.cumsum(%x) {dim=1}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.reshape(%x) {shape=[2,6]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[2,3,4]) {\n  %y = prims.transpose(%x) {perm=[1,2,0]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,1,4]) {\n  %y = prims.squeeze(%x) {dims=[1]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[5,7]) {\n  %y = prims.slice(%x) {start=[1,0], limit=[4,6], strides=[1,3]}\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[5,7]) {\n  %y = prims.slice(%x) {start=[0,2], limit=[5,7], strides=[2,2]}\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4], %z: f64[3,2]) {\n  %y = prims.cat(%x, %z, %x) {dim=1}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.pad(%x) {low=[1,-1], high=[0,2], value=0.0}\n  return %y\n}\n",
	 -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4]) {\n  %y = prims.rev(%x) {dims=[1]}\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,4], %z: f64[4,2]) {\n  %y = prims.matmul(%x, %z)\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[2,3,4], %z: f64[2,4,2]) {\n  %y = prims.matmul(%x, %z)\n  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[5,3], %i: i64[2,2]) {\n  %y = prims.take(%x, %i) {dim=0}\n  return %y\n}\n", -1, 1, 5, 0, 0},
	{"graph @f(%x: f64[3,4], %i: i64[3,2]) {\n  %y = prims.gather(%x, %i) {dim=1}\n  return %y\n}\n", -1, 1, 4, 0, 0},
	{"graph @f(%x: f64[3,4], %i: i64[3,2], %s: f64[3,3]) {\n  %y = prims.scatter_add(%x, %i, %s) {dim=1}\n"
	 "  return %y\n}\n", -1, 1, 4, 0, 0},
	{"graph @f(%x: f64[5,3], %i: i64[4], %s: f64[4,3]) {\n  %y = prims.index_add(%x, %i, %s) {dim=0}\n"
	 "  return %y\n}\n", -1, 1, 5, 0, 0},
	/* fan-out, nograd, integer parameters, several outputs */
	{"graph @f(%x: f64[3,4], %c: f64[3,4] {nograd}, %i: i64[3,4]) {\n  %a = prims.mul(%x, %x)\n"
	 "  %b = prims.add(%a, %x)\n  %d = prims.mul(%b, %c)\n  %e = prims.exp(%x)\n  return %d, %i, %e, %x\n}\n",
	 -1, 1, 3, 0, 0},
	/* softmax-like chain with broadcasts and reductions */
	{"graph @f(%x: f64[3,5]) {\n  %m = prims.amax(%x) {dims=[1]}\n"
	 "  %mb = prims.broadcast_in_dim(%m) {shape=[3,5], broadcast_dims=[0]}\n  %s = prims.sub(%x, %mb)\n"
	 "  %e = prims.exp(%s)\n  %t = prims.sum(%e) {dims=[1]}\n"
	 "  %tb = prims.broadcast_in_dim(%t) {shape=[3,5], broadcast_dims=[0]}\n  %y = prims.div(%e, %tb)\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	/* decompose's softmax (a stop-gradient max, differentiated as a whole),
	 * and with the exponentials also returned (not the idiom, and not
	 * shift-invariant: the max must carry its gradient) */
	{"graph @f(%x: f64[3,5]) {\n  %m = prims.amax(%x) {dims=[1], nograd}\n"
	 "  %mb = prims.broadcast_in_dim(%m) {shape=[3,5], broadcast_dims=[0]}\n  %s = prims.sub(%x, %mb)\n"
	 "  %e = prims.exp(%s)\n  %t = prims.sum(%e) {dims=[1]}\n"
	 "  %tb = prims.broadcast_in_dim(%t) {shape=[3,5], broadcast_dims=[0]}\n  %y = prims.div(%e, %tb)\n"
	 "  return %y\n}\n", -1, 1, 0, 0, 0},
	{"graph @f(%x: f64[3,5]) {\n  %m = prims.amax(%x) {dims=[1]}\n"
	 "  %mb = prims.broadcast_in_dim(%m) {shape=[3,5], broadcast_dims=[0]}\n  %s = prims.sub(%x, %mb)\n"
	 "  %e = prims.exp(%s)\n  %t = prims.sum(%e) {dims=[1]}\n"
	 "  %tb = prims.broadcast_in_dim(%t) {shape=[3,5], broadcast_dims=[0]}\n  %y = prims.div(%e, %tb)\n"
	 "  return %y, %e\n}\n", -1, 1, 0, 0, 0},
	/* decompose's log_softmax over dim 0, its result used twice */
	{"graph @f(%x: f64[4,3]) {\n  %m = prims.amax(%x) {dims=[0], nograd}\n"
	 "  %mb = prims.broadcast_in_dim(%m) {shape=[4,3], broadcast_dims=[1]}\n  %s = prims.sub(%x, %mb)\n"
	 "  %e = prims.exp(%s)\n  %t = prims.sum(%e) {dims=[0]}\n"
	 "  %tb = prims.broadcast_in_dim(%t) {shape=[4,3], broadcast_dims=[1]}\n  %lt = prims.log(%tb)\n"
	 "  %l = prims.sub(%s, %lt)\n  %q = prims.mul(%l, %l)\n  return %l, %q\n}\n", -1, 1, 0, 0, 0},
};

START_TEST(test_finite_differences)
{
	check_case(&cases[_i]);
}
END_TEST

/* The partitioned graphs compute what the joint computes, in both modes. */
START_TEST(test_partition_equivalent)
{
	static const char *const modes[] = {"partition{mode=mincut}", "partition{mode=default}",
	                                    "recompute{aggressive},partition"};
	const char *text = "graph @f(%x: f64[3,5], %w: f64[5]) {\n"
	                   "  %v, %m = prims.var_mean(%x) {dims=[1], correction=0}\n"
	                   "  %mb = prims.broadcast_in_dim(%m) {shape=[3,5], broadcast_dims=[0]}\n"
	                   "  %vb = prims.broadcast_in_dim(%v) {shape=[3,5], broadcast_dims=[0]}\n"
	                   "  %c = prims.sub(%x, %mb)\n  %r = prims.rsqrt(%vb)\n  %n = prims.mul(%c, %r)\n"
	                   "  %wb = prims.broadcast_in_dim(%w) {shape=[3,5], broadcast_dims=[1]}\n"
	                   "  %y = prims.mul(%n, %wb)\n  %t = prims.tanh(%y)\n  return %t, %m\n}\n";
	for (size_t mi = 0; mi < FJ_ARRAY_LEN(modes); mi++) {
		fj_module *mj = parse(text), *mp = parse(text);
		char pl[128];
		snprintf(pl, sizeof pl, "autodiff,%s,verify", modes[mi]);
		ck_assert_msg(fj_run_pipeline(mj, "autodiff", NULL) == FJ_OK, "%s", fj_context_error(ctx));
		ck_assert_msg(fj_run_pipeline(mp, pl, NULL) == FJ_OK, "%s", fj_context_error(ctx));
		fj_graph *j = fj_module_find_graph(mj, "f.joint"), *fw = fj_module_find_graph(mp, "f.fw"),
		         *bw = fj_module_find_graph(mp, "f.bw");
		ck_assert(j && fw && bw);
		ck_assert_ptr_null(fj_module_find_graph(mp, "f.joint"));
		gcase c = {text, -1, 1, 0, 0, 0};
		fj_rt_tensor in[4] = {0}, jo[4] = {0}, fo[16] = {0}, bo[4] = {0};
		const fj_rt_tensor *pin[4], *bin[16];
		for (uint32_t i = 0; i < j->nparams; i++) {
			const fj_type *t = &j->values[j->params[i]].type;
			int64_t dims[FJ_MAX_RANK];
			for (int k = 0; k < t->rank; k++)
				dims[k] = t->dims[k];
			ck_assert_int_eq(fj_rt_tensor_alloc(ctx, &in[i], t->dtype, t->rank, dims), FJ_OK);
			fill(&in[i], &c, i + 7);
			pin[i] = &in[i];
		}
		fj_rt_program *pj = compile(j), *pf = compile(fw), *pb = compile(bw);
		run(pj, pin, jo);
		run(pf, pin, fo); /* the primals come first */
		uint32_t K = (uint32_t)fw->num_fwd_outputs, nsaved = fw->nresults - K;
		ck_assert_uint_eq(bw->nparams, nsaved + 2);
		for (uint32_t i = 0; i < nsaved; i++)
			bin[i] = &fo[K + i];
		bin[nsaved] = &in[2];
		bin[nsaved + 1] = &in[3];
		run(pb, bin, bo);
		for (uint32_t k = 0; k < K; k++) {
			bool ok;
			ck_assert_double_le(fj_rt_rel_l2(&fo[k], &jo[k], &ok), 1e-12);
		}
		for (uint32_t k = 0; k < bw->nresults; k++) {
			bool ok;
			ck_assert_double_le(fj_rt_rel_l2(&bo[k], &jo[K + k], &ok), 1e-12);
		}
		for (int i = 0; i < 4; i++) {
			fj_rt_tensor_free(&in[i]);
			fj_rt_tensor_free(&jo[i]);
			fj_rt_tensor_free(&bo[i]);
		}
		for (int i = 0; i < 16; i++)
			fj_rt_tensor_free(&fo[i]);
		fj_rt_program_destroy(pj);
		fj_rt_program_destroy(pf);
		fj_rt_program_destroy(pb);
		fj_module_destroy(mj);
		fj_module_destroy(mp);
	}
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors)
{
	fj_module *m = parse("graph @f(%x: f32[4]) {\n  %y = aten.gelu(%x)\n  return %y\n}\n");
	ck_assert_int_ne(fj_run_pipeline(m, "autodiff", NULL), FJ_OK);
	ck_assert(strstr(fj_context_error(ctx), "t.fj:2:"));
	ck_assert(strstr(fj_context_error(ctx), "autodiff works on prims: run decompose first (found aten.gelu)"));
	fj_module_destroy(m);
	/* off the gradient path, an aten op is fine (copied as it is) */
	m = parse("graph @f(%x: f32[4], %i: i64[4]) {\n  %j = aten.abs(%i)\n  %y = prims.exp(%x)\n  return %y, %j\n}\n");
	ck_assert_msg(fj_run_pipeline(m, "autodiff,verify", NULL) == FJ_OK, "%s", fj_context_error(ctx));
	fj_module_destroy(m);
}
END_TEST

/* ---- max flow ---- */

static uint32_t rnd(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

START_TEST(test_maxflow_known)
{
	/* CLRS figure 26.1: max flow 23 */
	static const int e[][3] = {{0, 1, 16}, {0, 2, 13}, {1, 3, 12}, {2, 1, 4}, {2, 4, 14},
	                           {3, 2, 9}, {3, 5, 20}, {4, 3, 7}, {4, 5, 4}};
	fj_maxflow *f = fj_maxflow_create(ctx, 6);
	for (size_t i = 0; i < FJ_ARRAY_LEN(e); i++)
		ck_assert_int_eq(fj_maxflow_add_edge(f, (uint32_t)e[i][0], (uint32_t)e[i][1], e[i][2]), FJ_OK);
	int64_t flow;
	ck_assert_int_eq(fj_maxflow_run(f, 0, 5, &flow), FJ_OK);
	ck_assert_int_eq(flow, 23);
	ck_assert(fj_maxflow_source_side(f, 0));
	ck_assert(!fj_maxflow_source_side(f, 5));
	fj_maxflow_destroy(f);
	/* an infinite path */
	f = fj_maxflow_create(ctx, 3);
	fj_maxflow_add_edge(f, 0, 1, FJ_FLOW_INF);
	fj_maxflow_add_edge(f, 1, 2, FJ_FLOW_INF);
	ck_assert_int_eq(fj_maxflow_run(f, 0, 2, &flow), FJ_OK);
	ck_assert_int_eq(flow, FJ_FLOW_INF);
	fj_maxflow_destroy(f);
}
END_TEST

START_TEST(test_maxflow_brute_force)
{
	uint32_t seed = 42;
	for (int iter = 0; iter < 300; iter++) {
		uint32_t n = 2 + rnd(&seed) % 7, ne = rnd(&seed) % (n * n + 1);
		int64_t cap[9][9] = {{0}};
		fj_maxflow *f = fj_maxflow_create(ctx, n);
		for (uint32_t i = 0; i < ne; i++) {
			uint32_t u = rnd(&seed) % n, v = rnd(&seed) % n;
			if (u == v)
				continue;
			int64_t c = rnd(&seed) % 10 == 0 ? FJ_FLOW_INF : (int64_t)(rnd(&seed) % 10);
			ck_assert_int_eq(fj_maxflow_add_edge(f, u, v, c), FJ_OK);
			cap[u][v] = cap[u][v] >= FJ_FLOW_INF || c >= FJ_FLOW_INF ? FJ_FLOW_INF : cap[u][v] + c;
		}
		uint32_t s = 0, t = n - 1;
		int64_t best = FJ_FLOW_INF;
		for (uint32_t mask = 0; mask < (1u << n); mask++) {
			if (!(mask & (1u << s)) || (mask & (1u << t)))
				continue;
			int64_t c = 0;
			for (uint32_t u = 0; u < n && c < FJ_FLOW_INF; u++)
				for (uint32_t v = 0; v < n; v++)
					if ((mask & (1u << u)) && !(mask & (1u << v)) && cap[u][v]) {
						c = cap[u][v] >= FJ_FLOW_INF ? FJ_FLOW_INF : c + cap[u][v];
						if (c >= FJ_FLOW_INF)
							break;
					}
			if (c < best)
				best = c;
		}
		int64_t flow;
		ck_assert_int_eq(fj_maxflow_run(f, s, t, &flow), FJ_OK);
		ck_assert_msg(flow == best, "iteration %d: flow %lld, min cut %lld", iter, (long long)flow, (long long)best);
		if (flow < FJ_FLOW_INF) {
			/* the source side's cut has the flow's value */
			int64_t c = 0;
			for (uint32_t u = 0; u < n; u++)
				for (uint32_t v = 0; v < n; v++)
					if (fj_maxflow_source_side(f, u) && !fj_maxflow_source_side(f, v))
						c += cap[u][v];
			ck_assert_int_eq(c, flow);
			ck_assert(!fj_maxflow_source_side(f, t));
		}
		fj_maxflow_destroy(f);
	}
}
END_TEST

Suite *suite_autodiff(void)
{
	Suite *s = suite_create("autodiff");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_rule_coverage);
	tcase_add_loop_test(tc, test_finite_differences, 0, (int)FJ_ARRAY_LEN(cases));
	tcase_add_test(tc, test_partition_equivalent);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_maxflow_known);
	tcase_add_test(tc, test_maxflow_brute_force);
	suite_add_tcase(s, tc);
	return s;
}
