/* test_fuse.c -- the `fuse` and `schedule` passes on random prims DAGs (a
 * fixed seed): the result verifies (so the regions form no cycle: a kernel's
 * operands are defined before it), parses back to the same text, keeps every
 * returned value (name, type, position), puts every live prims node into a
 * kernel (reductions, opaque ops, scans and rand into exactly one: only
 * pointwise, layout and source ops are ever copied), and every kernel obeys the
 * legality rules of passes/fuse.c (one opaque op per opaque region, one
 * iteration space per reduction region). */
#include <stdio.h>

#include "test.h"

#include "build.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "passes/rebuild.h"

static fj_context *ctx;

static void setup(void) { ctx = fj_context_create(NULL, NULL); }
static void teardown(void) { fj_context_destroy(ctx); }

typedef struct rng {
	uint64_t s;
} rng;

static uint32_t rnd(rng *r, uint32_t n)
{
	r->s ^= r->s << 13;
	r->s ^= r->s >> 7;
	r->s ^= r->s << 17;
	return (uint32_t)((r->s >> 11) % n);
}

/* Shapes of the value pools. */
enum { SA, SB, SC, ST, SM, NSHAPES }; /* [N,16] [16] [N] [16,N] [N,8] */

typedef struct pools {
	fj_vid v[NSHAPES][256];
	uint32_t n[NSHAPES];
} pools;

static void put(pools *p, int s, fj_vid v)
{
	if (v != FJ_NOVAL && p->n[s] < 256)
		p->v[s][p->n[s]++] = v;
}

static fj_vid pick(rng *r, pools *p, int s)
{
	/* Mostly recent values: deep chains, with some fan-out. */
	uint32_t n = p->n[s];
	if (!n)
		return FJ_NOVAL;
	uint32_t k = rnd(r, 3) ? rnd(r, n < 4 ? n : 4) : rnd(r, n);
	return p->v[s][n - 1 - k];
}

static fj_named_attr ints1(fj_graph *g, const char *name, int64_t a)
{
	return (fj_named_attr){name, fj_attr_ints(g, &a, 1)};
}

static fj_named_attr ints2(fj_graph *g, const char *name, int64_t a, int64_t b)
{
	int64_t v[2] = {a, b};
	return (fj_named_attr){name, fj_attr_ints(g, v, 2)};
}

static fj_named_attr shape_attr(fj_graph *g, fj_dim a, fj_dim b, int rank)
{
	fj_attr it[2];
	fj_dim d[2] = {a, b};
	for (int i = 0; i < rank; i++)
		it[i] = d[i] >= 0 ? fj_attr_int(d[i]) : (fj_attr){.kind = FJ_AK_DIM, .u.dim = d[i]};
	return (fj_named_attr){"shape", fj_attr_list(g, it, (uint32_t)rank)};
}

static fj_type mk(fj_graph *g, fj_dtype dt, int rank, fj_dim a, fj_dim b)
{
	fj_type t = {.dtype = dt, .rank = (uint8_t)rank};
	fj_dim d[2] = {a, b};
	fj_type src = {.dtype = dt, .rank = (uint8_t)rank, .dims = d};
	ck_assert(fj_graph_copy_type(g, &t, &src));
	return t;
}

/* Builds graph @r<i>: a random prims DAG over [N,16]-ish tensors. */
static void build_random(fj_module *m, int gi, rng *r)
{
	char name[32];
	snprintf(name, sizeof name, "r%d.fw", gi);
	fj_graph *g = fj_module_add_graph(m, name, (fj_loc){0});
	ck_assert_ptr_nonnull(g);
	fj_dim N;
	ck_assert_int_eq(fj_dim_symbol(m, "N", 1, &N), FJ_OK);
	fj_builder b;
	fj_builder_init(&b, g, (fj_loc){0});
	pools p = {0};
	put(&p, SA, fj_b_param(&b, "x0", mk(g, FJ_DT_F32, 2, N, 16)));
	put(&p, SA, fj_b_param(&b, "x1", mk(g, FJ_DT_F32, 2, N, 16)));
	put(&p, SB, fj_b_param(&b, "b", mk(g, FJ_DT_F32, 1, 16, 0)));
	put(&p, SC, fj_b_param(&b, "c", mk(g, FJ_DT_F32, 1, N, 0)));
	fj_vid w = fj_b_param(&b, "w", mk(g, FJ_DT_F32, 2, 16, 8));
	fj_vid idx = fj_b_param(&b, "idx", mk(g, FJ_DT_I64, 1, N, 0));
	fj_vid gidx = fj_b_param(&b, "gidx", mk(g, FJ_DT_I64, 2, N, 1));
	fj_vid seed = fj_b_param(&b, "seed", mk(g, FJ_DT_I64, 0, 0, 0));
	fj_vid off = fj_b_param(&b, "off", mk(g, FJ_DT_I64, 0, 0, 0));
	static const fj_op un[] = {FJ_OP_PRIMS_EXP, FJ_OP_PRIMS_TANH, FJ_OP_PRIMS_NEG, FJ_OP_PRIMS_SIN};
	static const fj_op bin[] = {FJ_OP_PRIMS_ADD, FJ_OP_PRIMS_MUL, FJ_OP_PRIMS_SUB, FJ_OP_PRIMS_MAXIMUM};
	uint32_t nops = 6 + rnd(r, 30);
	for (uint32_t k = 0; k < nops; k++) {
		uint32_t c = rnd(r, 20);
		int s = (int)rnd(r, NSHAPES);
		fj_vid x = pick(r, &p, s), y = pick(r, &p, s), v[2];
		if (x == FJ_NOVAL) {
			s = SA;
			x = pick(r, &p, s);
			y = pick(r, &p, s);
		}
		switch (c) {
		case 0: case 1: case 2: case 3:
			put(&p, s, fj_b_op1(&b, un[rnd(r, 4)], &x, 1, NULL, 0));
			break;
		case 4: case 5: case 6: case 7:
			put(&p, s, fj_b_op1(&b, bin[rnd(r, 4)], (fj_vid[]){x, y}, 2, NULL, 0));
			break;
		case 8: /* [16] -> [N,16], [N] -> [N,16] */
			if (rnd(r, 2))
				put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_BROADCAST_IN_DIM, (fj_vid[]){pick(r, &p, SB)}, 1,
				                     (fj_named_attr[]){shape_attr(g, N, 16, 2), ints1(g, "broadcast_dims", 1)}, 2));
			else
				put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_BROADCAST_IN_DIM, (fj_vid[]){pick(r, &p, SC)}, 1,
				                     (fj_named_attr[]){shape_attr(g, N, 16, 2), ints1(g, "broadcast_dims", 0)}, 2));
			break;
		case 9: /* reductions of [N,16] */
			x = pick(r, &p, SA);
			switch (rnd(r, 4)) {
			case 0:
				put(&p, SC, fj_b_op1(&b, FJ_OP_PRIMS_SUM, &x, 1, (fj_named_attr[]){ints1(g, "dims", 1)}, 1));
				break;
			case 1:
				put(&p, SC, fj_b_op1(&b, FJ_OP_PRIMS_AMAX, &x, 1, (fj_named_attr[]){ints1(g, "dims", -1)}, 1));
				break;
			case 2:
				put(&p, SB, fj_b_op1(&b, FJ_OP_PRIMS_SUM, &x, 1, (fj_named_attr[]){ints1(g, "dims", 0)}, 1));
				break;
			default:
				fj_b_op(&b, FJ_OP_PRIMS_VAR_MEAN, &x, 1,
				        (fj_named_attr[]){ints1(g, "dims", 1), {"correction", fj_attr_int(0)}}, 2, v, 2);
				put(&p, SC, v[0]);
				put(&p, SC, v[1]);
				break;
			}
			break;
		case 10: /* transposes */
			if (rnd(r, 2) || !p.n[ST])
				put(&p, ST, fj_b_op1(&b, FJ_OP_PRIMS_TRANSPOSE, (fj_vid[]){pick(r, &p, SA)}, 1,
				                     (fj_named_attr[]){ints2(g, "perm", 1, 0)}, 1));
			else
				put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_TRANSPOSE, (fj_vid[]){pick(r, &p, ST)}, 1,
				                     (fj_named_attr[]){ints2(g, "perm", 1, 0)}, 1));
			break;
		case 11: /* matmul, and back to [N] */
			put(&p, SM, fj_b_op1(&b, FJ_OP_PRIMS_MATMUL, (fj_vid[]){pick(r, &p, SA), w}, 2, NULL, 0));
			if (rnd(r, 2))
				put(&p, SC, fj_b_op1(&b, FJ_OP_PRIMS_SUM, (fj_vid[]){pick(r, &p, SM)}, 1,
				                     (fj_named_attr[]){ints1(g, "dims", 1)}, 1));
			break;
		case 12:
			put(&p, SC, fj_b_op1(&b, FJ_OP_PRIMS_TAKE, (fj_vid[]){pick(r, &p, SB), idx}, 2,
			                     (fj_named_attr[]){{"dim", fj_attr_int(0)}}, 1));
			break;
		case 13: {
			fj_vid gv = fj_b_op1(&b, FJ_OP_PRIMS_GATHER, (fj_vid[]){pick(r, &p, SA), gidx}, 2,
			                     (fj_named_attr[]){{"dim", fj_attr_int(1)}}, 1);
			put(&p, SC, fj_b_op1(&b, FJ_OP_PRIMS_SQUEEZE, &gv, 1, (fj_named_attr[]){ints1(g, "dims", 1)}, 1));
			break;
		}
		case 14:
			put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_CUMSUM, (fj_vid[]){pick(r, &p, SA)}, 1,
			                     (fj_named_attr[]){{"dim", fj_attr_int(1)}}, 1));
			break;
		case 15:
			if (rnd(r, 2))
				put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_FULL, NULL, 0,
				                     (fj_named_attr[]){shape_attr(g, N, 16, 2), {"value", fj_attr_float(0.5)},
				                                       {"dtype", fj_attr_dtype(FJ_DT_F32)}}, 3));
			else
				put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_RAND, (fj_vid[]){seed, off}, 2,
				                     (fj_named_attr[]){shape_attr(g, N, 16, 2), {"dtype", fj_attr_dtype(FJ_DT_F32)}}, 2));
			break;
		case 16: { /* f16 round trip */
			fj_vid h = fj_b_op1(&b, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &x, 1,
			                    (fj_named_attr[]){{"dtype", fj_attr_dtype(FJ_DT_F16)}}, 1);
			put(&p, s, fj_b_op1(&b, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &h, 1,
			                    (fj_named_attr[]){{"dtype", fj_attr_dtype(FJ_DT_F32)}}, 1));
			break;
		}
		case 17: /* normalization: x - bcast(reduce(x)) */
		{
			x = pick(r, &p, SA);
			fj_vid mx = fj_b_op1(&b, FJ_OP_PRIMS_AMAX, &x, 1, (fj_named_attr[]){ints1(g, "dims", 1)}, 1);
			fj_vid mb = fj_b_op1(&b, FJ_OP_PRIMS_BROADCAST_IN_DIM, &mx, 1,
			                     (fj_named_attr[]){shape_attr(g, N, 16, 2), ints1(g, "broadcast_dims", 0)}, 2);
			put(&p, SA, fj_b_op1(&b, FJ_OP_PRIMS_SUB, (fj_vid[]){x, mb}, 2, NULL, 0));
			break;
		}
		default: /* a chain of pointwise ops */
			for (int j = 0; j < 3; j++)
				put(&p, s, x = fj_b_op1(&b, un[rnd(r, 4)], &x, 1, NULL, 0));
			break;
		}
	}
	/* Return 1-3 values, sometimes a parameter or a value twice. */
	fj_vid res[4];
	uint32_t nr = 1 + rnd(r, 3);
	for (uint32_t i = 0; i < nr; i++) {
		int s = (int)rnd(r, NSHAPES);
		res[i] = pick(r, &p, s);
		if (res[i] == FJ_NOVAL)
			res[i] = pick(r, &p, SA);
	}
	if (rnd(r, 8) == 0)
		res[nr++] = res[0];
	fj_b_return(&b, res, nr);
	ck_assert_msg(fj_b_status(&b) == FJ_OK, "%s", fj_context_error(ctx));
}

static char *print_text(fj_module *m)
{
	fj_buf b;
	fj_buf_init(&b, ctx);
	ck_assert_int_eq(fj_print_module(&b, m), FJ_OK);
	fj_buf_putn(&b, "", 1);
	return b.data;
}

/* Ops that are never copied (reductions, opaque ops, scans, rand): each
 * lands in exactly one kernel. Pointwise, layout and source ops may be copied
 * into several kernels: each lands in at least one. */
static bool exact(fj_op op)
{
	uint32_t fl = fj_op_info(ctx, op)->flags;
	return (fl & (FJ_OPF_REDUCTION | FJ_OPF_OPAQUE | FJ_OPF_RANDOM)) || op == FJ_OP_PRIMS_CUMSUM;
}

static uint32_t red_mask(const fj_graph *body, const fj_node *n)
{
	const fj_type *t = &body->values[n->opnds[0]].type;
	const fj_attr *a = fj_node_attr(ctx, n, n->op == FJ_OP_PRIMS_ARGMAX ? "dim" : "dims");
	uint32_t mask = 0;
	for (uint32_t k = 0; a->kind == FJ_AK_LIST && k < a->n; k++) {
		int64_t x = fj_attr_as_int(&a->u.items[k]);
		mask |= 1u << (x < 0 ? x + t->rank : x);
	}
	return mask;
}

static void check_body(const fj_graph *body)
{
	int opaque = 0;
	const fj_type *d = NULL;
	uint32_t dims = UINT32_MAX, dims2 = UINT32_MAX;
	for (uint32_t i = 0; i < body->nnodes; i++) {
		const fj_node *n = &body->nodes[i];
		uint32_t fl = fj_op_info(ctx, n->op)->flags;
		ck_assert(fl & FJ_OPF_PRIMS);
		if ((fl & FJ_OPF_OPAQUE) || n->op == FJ_OP_PRIMS_CUMSUM)
			opaque++;
		if (fl & FJ_OPF_REDUCTION) {
			const fj_type *t = &body->values[n->opnds[0]].type;
			uint32_t mask = red_mask(body, n);
			if (!d) {
				d = t;
				dims = mask;
			} else {
				ck_assert(d->rank == t->rank && !memcmp(d->dims, t->dims, d->rank * sizeof *d->dims));
				if (mask != dims) {
					ck_assert(dims2 == UINT32_MAX || dims2 == mask);
					dims2 = mask;
				}
			}
		}
	}
	if (dims2 != UINT32_MAX) {
		/* L2b: row reductions over K (holding D's innermost dim) and
		 * column sums over the other dims */
		uint32_t last = 1u << (d->rank - 1), all = (1u << d->rank) - 1;
		uint32_t outer = dims & last ? dims2 : dims;
		ck_assert_uint_eq(dims | dims2, all);
		ck_assert_uint_eq(dims & dims2, 0);
		ck_assert_uint_eq(outer & last, 0);
		for (uint32_t i = 0; i < body->nnodes; i++) {
			const fj_node *n = &body->nodes[i];
			if ((fj_op_info(ctx, n->op)->flags & FJ_OPF_REDUCTION) && red_mask(body, n) == outer)
				ck_assert_int_eq(n->op, FJ_OP_PRIMS_SUM);
		}
	}
	ck_assert_int_le(opaque, 1);
	if (opaque)
		ck_assert_ptr_null(d);
}

START_TEST(test_fuse_random_dags)
{
	rng r = {0x9E3779B97F4A7C15u};
	enum { NGRAPHS = 300 };
	uint32_t kernels = 0, nodes = 0;
	for (int gi = 0; gi < NGRAPHS; gi++) {
		fj_module *m = fj_module_create(ctx);
		build_random(m, gi, &r);
		ck_assert_int_eq(fj_verify_module(m), FJ_OK);
		fj_graph *g = m->graphs[0];
		/* What must survive. */
		uint32_t nres = g->nresults;
		char names[8][32], types[8][64];
		for (uint32_t i = 0; i < nres; i++) {
			const fj_value *v = &g->values[g->results[i]];
			snprintf(names[i], sizeof names[i], "%s", v->name);
			int len = snprintf(types[i], sizeof types[i], "%s[", fj_dtype_name(v->type.dtype));
			for (int k = 0; k < v->type.rank; k++)
				len += fj_dim_format(m, v->type.dims[k], types[i] + len, sizeof types[i] - (size_t)len);
		}
		bool *used, *live;
		ck_assert_int_eq(fj_pass_liveness(g, &used, &live), FJ_OK);
		uint32_t count[FJ_OP_COUNT] = {0};
		for (uint32_t i = 0; i < g->nnodes; i++)
			if (live[i])
				count[g->nodes[i].op]++;
		fj_free(ctx, used, g->nvalues ? g->nvalues : 1);
		fj_free(ctx, live, g->nnodes ? g->nnodes : 1);
		char *before = print_text(m);

		fj_pipeline_opts o = {.verify_each = true};
		fj_status st = fj_run_pipeline(m, "fuse,schedule", &o);
		ck_assert_msg(st == FJ_OK, "graph %d: %s\n%s", gi, fj_context_error(ctx), before);
		g = m->graphs[0];
		ck_assert_int_eq(fj_verify_module(m), FJ_OK);
		ck_assert_uint_eq(g->nresults, nres);
		for (uint32_t i = 0; i < nres; i++) {
			const fj_value *v = &g->values[g->results[i]];
			char t[64];
			int len = snprintf(t, sizeof t, "%s[", fj_dtype_name(v->type.dtype));
			for (int k = 0; k < v->type.rank; k++)
				len += fj_dim_format(m, v->type.dims[k], t + len, sizeof t - (size_t)len);
			ck_assert_str_eq(v->name, names[i]);
			ck_assert_str_eq(t, types[i]);
		}
		/* Every op lands in a kernel: counted ones exactly once. */
		uint32_t after[FJ_OP_COUNT] = {0}, k = 0;
		for (uint32_t i = 0; i < g->nnodes; i++) {
			const fj_node *n = &g->nodes[i];
			ck_assert_msg(n->op == FJ_OP_FUSION_KERNEL, "graph %d: %s outside a kernel\n%s", gi,
			              fj_op_name(n->op), before);
			ck_assert_ptr_nonnull(n->body);
			ck_assert_ptr_nonnull(n->schedule);
			char kn[64];
			snprintf(kn, sizeof kn, "fj_r%d_fw_k%u", gi, k++);
			ck_assert_str_eq(n->kernel, kn);
			check_body(n->body);
			for (uint32_t j = 0; j < n->body->nnodes; j++)
				after[n->body->nodes[j].op]++;
			nodes += n->body->nnodes;
		}
		kernels += k;
		for (int op = 0; op < FJ_OP_COUNT; op++) {
			if (exact((fj_op)op))
				ck_assert_msg(after[op] == count[op], "graph %d: %u %s before, %u after", gi, count[op],
				              fj_op_name((fj_op)op), after[op]);
			else
				ck_assert_msg(after[op] >= count[op], "graph %d: %u %s before, %u after", gi, count[op],
				              fj_op_name((fj_op)op), after[op]);
		}
		/* The printed result parses back, verifies and prints the same. */
		char *once = print_text(m);
		fj_module *m2 = NULL;
		ck_assert_msg(fj_parse_module(ctx, once, strlen(once), "fused.fj", &m2) == FJ_OK, "%s\n%s",
		              fj_context_error(ctx), once);
		ck_assert_int_eq(fj_verify_module(m2), FJ_OK);
		char *twice = print_text(m2);
		ck_assert_str_eq(once, twice);
		/* fuse again: kernels stay as they are. */
		ck_assert_int_eq(fj_run_pipeline(m2, "fuse,schedule", &o), FJ_OK);
		char *thrice = print_text(m2);
		ck_assert_str_eq(once, thrice);
		fj_free(ctx, before, strlen(before) + 1);
		fj_free(ctx, once, strlen(once) + 1);
		fj_free(ctx, twice, strlen(twice) + 1);
		fj_free(ctx, thrice, strlen(thrice) + 1);
		fj_module_destroy(m2);
		fj_module_destroy(m);
	}
	ck_assert_uint_gt(kernels, NGRAPHS);
	ck_assert_uint_gt(nodes, kernels);
}
END_TEST

/* The cycle case by hand: a -> take -> c and a -> c: a and c cannot share a
 * kernel (the take, its own region, sits between them). */
START_TEST(test_fuse_no_cycle)
{
	static const char text[] =
		"graph @main(%x: f32[16], %i: i64[16]) {\n"
		"  %a = prims.exp(%x)\n"
		"  %t = prims.take(%a, %i) {dim=0}\n"
		"  %c = prims.add(%a, %t)\n"
		"  return %c\n"
		"}\n";
	fj_module *m = NULL;
	ck_assert_int_eq(fj_parse_module(ctx, text, strlen(text), "t.fj", &m), FJ_OK);
	ck_assert_int_eq(fj_run_pipeline(m, "fuse,schedule", NULL), FJ_OK);
	ck_assert_int_eq(fj_verify_module(m), FJ_OK);
	fj_graph *g = m->graphs[0];
	ck_assert_uint_eq(g->nnodes, 3);
	ck_assert_str_eq(g->nodes[0].schedule, "pointwise");
	ck_assert_str_eq(g->nodes[1].schedule, "take");
	ck_assert_str_eq(g->nodes[2].schedule, "pointwise");
	fj_module_destroy(m);
}
END_TEST

/* Out of memory anywhere in fuse: an error, never a crash or a leak. */
START_TEST(test_fuse_alloc_failures)
{
	static const char text[] =
		"graph @main(%x: f32[N,64], %w: f32[64]) {\n"
		"  %m = prims.amax(%x) {dims=[1]}\n"
		"  %mb = prims.broadcast_in_dim(%m) {shape=[N,64], broadcast_dims=[0]}\n"
		"  %d = prims.sub(%x, %mb)\n"
		"  %wb = prims.broadcast_in_dim(%w) {shape=[N,64], broadcast_dims=[1]}\n"
		"  %e = prims.mul(%d, %wb)\n"
		"  return %e, %m\n"
		"}\n";
	for (long fail = 1; fail < 400; fail++) {
		fj_test_alloc ta = {0};
		fj_context *c = fj_context_create(fj_test_alloc_fn, &ta);
		fj_module *m = NULL;
		ck_assert_int_eq(fj_parse_module(c, text, strlen(text), "t.fj", &m), FJ_OK);
		ta.count = 0;
		ta.fail_at = fail;
		fj_status st = fj_run_pipeline(m, "fuse,schedule", NULL);
		ta.fail_at = 0;
		if (st == FJ_OK)
			ck_assert_int_eq(fj_verify_module(m), FJ_OK);
		else
			ck_assert_int_eq(st, FJ_ERR_NOMEM);
		fj_module_destroy(m);
		fj_context_destroy(c);
		ck_assert_msg(ta.live == 0, "fail at %ld: %zu bytes leak", fail, ta.live);
		if (st == FJ_OK)
			break;
	}
}
END_TEST

Suite *suite_fuse(void)
{
	Suite *s = suite_create("fuse");
	TCase *tc = tcase_create("fuse");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_fuse_random_dags);
	tcase_add_test(tc, test_fuse_no_cycle);
	tcase_add_test(tc, test_fuse_alloc_failures);
	suite_add_tcase(s, tc);
	return s;
}
