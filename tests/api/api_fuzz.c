/* api_fuzz.c -- a fuzzer of the public C API (issue 17): random sequences of
 * builder calls, valid and not (wrong operand counts, unknown ops, wrong
 * attribute kinds and values, wrong dtypes, invalid value ids, calls after
 * an error, NULL handles and arrays), fj_build_end/abort with bad results,
 * compiles of what was built, and runs with wrong tensors (rank, sizes,
 * dtype, NULL data, counts, misaligned data, overlapping and aliased
 * outputs, a CUDA device on a host program).
 *
 *   fj-api-fuzz [--seed=S] [--iters=N] [--seconds=T] [-v]
 *   fj-api-fuzz --one=SEED -v      (one iteration, as a message names it)
 *
 * Every call that fails must return an error status with a message on the
 * context (fj_context_error non-empty); a crash, a sanitizer report or a
 * leak (the ASan build) is a finding. A valid run must succeed. Exit 1 when
 * a check failed. The counts printed at the end say what was exercised;
 * the run fails if too few graphs were built, compiled and run, so the test
 * cannot pass by exercising nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fusejit/fusejit.h"
#include "../common/splitmix.h"

static int fails, verbose;
static int clean; /* this graph: well-formed calls only (so that graphs get built and run) */
static struct {
	long builds, build_ok, build_err, calls, call_err, compiles, compile_ok, runs, run_ok, bad_runs, bad_run_err,
	    trains;
} n;

#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: expected %s (seed %llu)\n", __FILE__, __LINE__, #c, \
			        (unsigned long long)cur_seed);                                      \
			fails++;                                                          \
		}                                                                         \
	} while (0)

static uint64_t rs, cur_seed;
static uint64_t rnd(void) { return fj_test_splitmix(&rs); }
static int pick(int k) { return (int)(rnd() % (uint64_t)k); }
static int chance(int pct) { return pick(100) < pct; }
#define ANY(arr) (arr)[pick((int)(sizeof(arr) / sizeof(arr)[0]))]

/* A failed call: an error status and a message. */
static void expect_error(fj_context *ctx, fj_status st, const char *what)
{
	const char *e = fj_context_error(ctx);
	if (st == FJ_OK || !e || !*e) {
		fprintf(stderr, "api_fuzz: %s: status %s, message '%s' (seed %llu)\n", what, fj_status_name(st),
		        e ? e : "(null)", (unsigned long long)cur_seed);
		fails++;
	}
}

/* ---- building ---- */

static const char *const TYPES[] = {"f32[3,4]", "f32[4]",    "f32[N,4]",  "f32[3,1]", "f64[]",      "f16[3,4]",
                                    "bf16[4]",  "i64[3]",    "i32[3,4]",  "bool[3,4]", "f32[0,4]",  "f32[N]",
                                    "q9[3]",    "f32[-1]",   "f32[",      "f32[3,N*2]", "",         "f32[3,4,5,6,7,8,9,1,2]",
                                    "i64[]",    "f32[9999999999999,9999999999]"};
static const char *const GOOD_UNARY[] = {"aten.exp", "aten.neg", "aten.relu", "aten.abs", "aten.tanh", "aten.sigmoid",
                                         "aten.clone"};
static const char *const GOOD_BINARY[] = {"aten.add", "aten.mul", "aten.sub", "aten.maximum", "aten.div"};
static const char *const OPS[] = {"aten.add",      "aten.mul",       "aten.sum",        "aten.reshape",
                                  "aten.permute",  "aten.linear",    "aten.layer_norm", "aten.softmax",
                                  "aten.var_mean", "aten.where",     "aten._to_copy",   "aten.cat",
                                  "aten.slice",    "aten.expand",    "aten.embedding",  "prims.sum",
                                  "aten.relu",     "aten.exp",       "aten.nope",       "",
                                  "add",           "prims.",         "fusion.kernel",   "aten.amax",
                                  "aten.matmul",   "aten.transpose", "aten.flip",       "aten.argmax",
                                  "aten.index_select", "aten.gather", "aten.mean",      "aten.cumsum"};
static const char *const ATTR_NAMES[] = {"dims", "keepdim", "shape",  "dim",   "dtype", "normalized_shape", "eps",
                                         "start", "end",    "step",   "size",  "correction", "bogus", "dim0",
                                         "dim1", "min",     "max",    "value", ""};

static int64_t ints_buf[16];
static double floats_buf[16];

static fj_attribute rand_attr(void)
{
	fj_attribute a;
	memset(&a, 0, sizeof a);
	a.name = chance(3) ? NULL : ANY(ATTR_NAMES);
	a.kind = (fj_attribute_kind)pick(12); /* 10 and 11: no such kind */
	static const int64_t IV[] = {0, 1, -1, 2, 3, -4, 7, INT64_MAX, INT64_MIN, 1 << 20};
	a.i = ANY(IV);
	static const double FV[] = {0.0, 1e-5, -2.5, 1e300, NAN, INFINITY};
	a.f = ANY(FV);
	static const char *const SV[] = {"3,4", "[N*2, -1]", "[", "tanh", "none", "12,0", "", "[3,,4]"};
	a.s = chance(10) ? NULL : ANY(SV);
	a.dtype = (fj_scalar_type)(pick(13) - 1); /* -1, 10, 11: invalid */
	a.n = (size_t)pick(5);
	for (size_t k = 0; k < a.n; k++) {
		ints_buf[k] = ANY(IV);
		floats_buf[k] = ANY(FV);
	}
	a.ints = chance(8) ? NULL : ints_buf;
	a.floats = chance(8) ? NULL : floats_buf;
	if (chance(3))
		a.n = (size_t)1 << 40; /* a count far past the array: must be refused, not read */
	return a;
}

typedef struct {
	fj_value_id v[64];
	int nv;
} ids;

static fj_value_id any_id(const ids *s)
{
	if (s->nv && (clean || chance(85)))
		return s->v[pick(s->nv)];
	static const fj_value_id BAD[] = {FJ_NO_VALUE, 12345, 0, 1, 64, UINT32_MAX - 1};
	return ANY(BAD);
}

static void keep(ids *s, fj_value_id v)
{
	if (v != FJ_NO_VALUE && s->nv < 64)
		s->v[s->nv++] = v;
}

/* One builder call: mostly well-formed (so that graphs get built), else
 * anything. */
static void build_step(fj_context *ctx, fj_graph_builder *b, ids *s, int *np)
{
	n.calls++;
	fj_context_clear_diagnostics(ctx); /* a message must be this call's */
	fj_status before = fj_build_status(b);
	fj_value_id v = FJ_NO_VALUE;
	fj_value_id ops[6];
	fj_attribute at[4];
	int kind = clean ? pick(8) : pick(10);
	if (kind <= 1 || !s->nv) {
		char name[16];
		snprintf(name, sizeof name, "p%d", !clean && chance(10) ? 0 : (*np)++);
		if (clean)
			v = fj_build_param(b, name, TYPES[chance(50) ? 0 : pick(10)]);
		else
			v = fj_build_param(b, chance(3) ? NULL : name, chance(2) ? NULL : chance(70) ? TYPES[pick(8)] : ANY(TYPES));
	} else if (kind == 2) {
		int w = pick(3);
		v = w == 0 ? fj_build_float(b, chance(20) ? NAN : 1.5) : w == 1 ? fj_build_int(b, 3) : fj_build_bool(b, 1);
	} else if (kind <= 5) {
		ops[0] = any_id(s);
		v = fj_build_op1(b, ANY(GOOD_UNARY), ops, 1, NULL, 0);
	} else if (kind <= 7) {
		ops[0] = any_id(s);
		ops[1] = any_id(s);
		v = fj_build_op1(b, ANY(GOOD_BINARY), ops, 2, NULL, 0);
	} else {
		size_t no = (size_t)pick(5), na = (size_t)pick(4), nr = (size_t)pick(4);
		for (size_t k = 0; k < no; k++)
			ops[k] = any_id(s);
		for (size_t k = 0; k < na; k++)
			at[k] = rand_attr();
		fj_value_id res[4] = {FJ_NO_VALUE, FJ_NO_VALUE, FJ_NO_VALUE, FJ_NO_VALUE};
		const char *op = chance(5) ? NULL : ANY(OPS);
		const fj_value_id *opp = no && chance(5) ? NULL : ops;
		const fj_attribute *atp = na && chance(5) ? NULL : at;
		fj_status st = fj_build_op(b, op, opp, no, atp, na, chance(5) ? NULL : res, nr);
		if (st != FJ_OK) {
			n.call_err++;
			if (before == FJ_OK) /* later calls repeat the first error, silently */
				expect_error(ctx, st, "fj_build_op");
			else
				CHECK(st == before);
		}
		for (size_t k = 0; k < nr && k < 4; k++)
			keep(s, res[k]);
		return;
	}
	fj_status after = fj_build_status(b);
	if (v == FJ_NO_VALUE) {
		n.call_err++;
		CHECK(after != FJ_OK);
		if (before == FJ_OK)
			expect_error(ctx, after, "a builder call");
	} else {
		CHECK(before == FJ_OK && after == FJ_OK); /* errors are sticky */
		keep(s, v);
	}
}

/* Builds one graph @name in m; returns whether fj_build_end succeeded. */
static int build_graph(fj_context *ctx, fj_module *m, const char *name)
{
	fj_graph_builder *b = NULL;
	n.builds++;
	fj_context_clear_diagnostics(ctx);
	fj_module *mm = !clean && chance(2) ? NULL : m;
	fj_status st = fj_build_begin(mm, !clean && chance(3) ? NULL : name, !clean && chance(2) ? NULL : &b);
	if (st != FJ_OK) {
		if (mm) /* no module: no context to hold a message */
			expect_error(ctx, st, "fj_build_begin");
		CHECK(b == NULL);
		return 0;
	}
	if (!clean && chance(3)) { /* a second builder on the same module */
		fj_graph_builder *b2 = NULL;
		fj_status st2 = fj_build_begin(m, name, &b2);
		if (st2 == FJ_OK)
			fj_build_abort(b2);
		else
			expect_error(ctx, st2, "a second fj_build_begin");
	}
	ids s = {.nv = 0};
	int np = 0, steps = 1 + pick(12);
	for (int k = 0; k < steps; k++)
		build_step(ctx, b, &s, &np);
	if (!clean && chance(8)) {
		fj_build_abort(b);
		return 0;
	}
	fj_value_id res[4];
	size_t nr = (size_t)(clean ? 1 + pick(3) : pick(4));
	for (size_t k = 0; k < nr; k++)
		res[k] = chance(70) && s.nv ? s.v[s.nv - 1 - pick(s.nv < 3 ? s.nv : 3)] : any_id(&s);
	fj_status pre = fj_build_status(b);
	if (pre == FJ_OK)
		fj_context_clear_diagnostics(ctx);
	st = fj_build_end(b, nr && !clean && chance(4) ? NULL : res, nr);
	if (pre != FJ_OK)
		CHECK(st == pre); /* the first error */
	if (st != FJ_OK) {
		n.build_err++;
		if (pre == FJ_OK)
			expect_error(ctx, st, "fj_build_end");
		return 0;
	}
	n.build_ok++;
	return 1;
}

/* ---- running ---- */

typedef struct {
	fj_tensor t[8];
	void *mem[8];
	size_t n;
} tensors;

static void tensors_free(tensors *ts)
{
	for (size_t k = 0; k < ts->n; k++) {
		if (ts->t[k].flags & FJ_TENSOR_OWNED)
			fj_tensor_release(&ts->t[k]);
		free(ts->mem[k]);
	}
	ts->n = 0;
}

/* Dense host tensors of these shapes, filled: floats in [-1, 1), integers
 * in [0, 3) (valid indices for the small dims the fuzzer uses). */
static void tensors_make(tensors *ts, const fj_value_info *info, size_t cnt, int fill)
{
	ts->n = cnt;
	for (size_t k = 0; k < 8; k++) { /* a count one too high reads one more */
		fj_tensor_init(&ts->t[k]);
		ts->mem[k] = NULL;
	}
	for (size_t k = 0; k < cnt; k++) {
		ts->t[k].dtype = info[k].dtype;
		ts->t[k].rank = info[k].rank;
		memcpy(ts->t[k].sizes, info[k].sizes, sizeof info[k].sizes);
		size_t bytes = info[k].bytes + 64; /* room for a misaligned copy */
		ts->mem[k] = aligned_alloc(64, (bytes + 63) / 64 * 64);
		memset(ts->mem[k], 0, bytes);
		ts->t[k].data = ts->mem[k];
		if (fill && info[k].rank >= 0) {
			size_t es = fj_scalar_type_size(info[k].dtype), cnt_e = es ? info[k].bytes / es : 0;
			for (size_t i = 0; i < cnt_e; i++)
				fj_tensor_set_f64(&ts->t[k], (int64_t)i,
				                  info[k].dtype <= FJ_TYPE_BF16 ? (double)pick(2000) / 1000.0 - 1.0 : pick(3));
		}
	}
}

/* Whether the last corrupt() made a run that must be refused: a wrong count,
 * or a wrong input, or a wrong output the caller allocated (one with no data
 * is the run's to fill in). */
static int must_refuse;

/* One misuse of a run's tensors; returns a short name. */
static const char *corrupt(tensors *in, tensors *out, size_t *nin, size_t *nout)
{
	tensors *ts = in->n && (chance(60) || !out->n) ? in : out;
	must_refuse = 1;
	if (!ts->n) {
		(*nin)++;
		return "one input too many";
	}
	fj_tensor *t = &ts->t[pick((int)ts->n)];
	int op = pick(11);
	if (op != 5 && op != 6)
		must_refuse = ts == in || t->data != NULL;
	if (op == 1 || op == 9 || op == 10)
		must_refuse = 0; /* a symbolic size may take it (with a size 0 elsewhere, even a huge one) */
	switch (op) {
	case 0:
		t->rank = t->rank + 1 > FJ_MAX_DIMS ? 0 : t->rank + 1;
		return "rank";
	case 1:
		if (t->rank == 0) {
			t->rank = -1;
			return "negative rank";
		}
		t->sizes[pick(t->rank)] += 1 + pick(3);
		return "sizes";
	case 2:
		t->dtype = t->dtype == FJ_TYPE_F32 ? FJ_TYPE_I64 : FJ_TYPE_F32;
		return "dtype";
	case 3:
		t->dtype = (fj_scalar_type)(chance(50) ? 42 : -3);
		return "invalid dtype";
	case 4: {
		if (ts == out)
			break;
		t->data = NULL;
		int64_t ne = 1;
		for (int d = 0; d < t->rank; d++)
			ne *= t->sizes[d];
		must_refuse = ne != 0; /* no elements: no data needed */
		return "NULL data";
	}
	case 5:
		if (*nin)
			(*nin)--;
		else
			(*nin)++;
		return "input count";
	case 6:
		*nout = *nout ? *nout - 1 : *nout + 1;
		return "output count";
	case 7:
		t->device = FJ_DEVICE_CUDA;
		return "CUDA tensor on a host program";
	case 8:
		t->sizes[t->rank ? pick(t->rank) : 0] = -2;
		if (!t->rank)
			t->rank = 1;
		return "negative size";
	case 9:
		if (!t->rank)
			break;
		t->sizes[pick(t->rank)] = INT64_MAX / 2;
		return "huge size";
	case 10:
		t->struct_size = 7;
		return "struct_size";
	}
	return NULL;
}

/* Aliasing and alignment misuses of outputs the caller allocated: may be
 * refused with an error, never crash. */
static void alias(tensors *in, tensors *out)
{
	if (!out->n)
		return;
	fj_tensor *t = &out->t[pick((int)out->n)];
	if (!t->data)
		return; /* the run's to allocate */
	int w = pick(3);
	if (w == 0 && in->n && in->t[0].dtype == t->dtype && in->t[0].rank == t->rank)
		t->data = in->t[0].data; /* an output over an input */
	else if (w == 1 && out->n > 1 && out->t[0].dtype == t->dtype && out->t[0].rank == t->rank)
		t->data = out->t[0].data; /* two outputs over one buffer */
	else
		t->data = (char *)t->data + 1; /* misaligned */
}

/* The backward after a forward (outputs out): tangents of the outputs'
 * shapes, sometimes misused. */
static void backward(fj_context *ctx, fj_program *p, const fj_run_options *ro, fj_saved *saved, const tensors *out)
{
	size_t nt = fj_program_count(p, FJ_ROLE_TANGENT), ng = fj_program_count(p, FJ_ROLE_GRADIENT);
	fj_value_info ti[8];
	if (nt > 8 || ng > 7)
		return;
	for (size_t k = 0; k < nt; k++) {
		unsigned j;
		if (fj_program_info(p, FJ_ROLE_TANGENT, k, &ti[k]) != FJ_OK || sscanf(ti[k].name, "tangent_%u", &j) != 1 ||
		    j >= out->n || out->t[j].rank != ti[k].rank)
			return;
		memcpy(ti[k].sizes, out->t[j].sizes, sizeof ti[k].sizes); /* the info's may be symbolic */
		ti[k].bytes = fj_scalar_type_size(ti[k].dtype);
		for (int d = 0; d < ti[k].rank; d++)
			ti[k].bytes *= (size_t)ti[k].sizes[d];
	}
	tensors tg = {.n = 0}, gr = {.n = 0};
	tensors_make(&tg, ti, nt, 1);
	tensors_make(&gr, NULL, 0, 0);
	gr.n = ng;
	size_t ntg = nt, ngr = ng;
	const char *what = chance(50) ? corrupt(&tg, &gr, &ntg, &ngr) : NULL;
	n.trains++;
	fj_context_clear_diagnostics(ctx);
	fj_status st = fj_program_backward_with(p, ro, saved, ntg ? tg.t : NULL, ntg, gr.t, ngr);
	if (st != FJ_OK)
		expect_error(ctx, st, what ? what : "a backward");
	else if (what && must_refuse) {
		fprintf(stderr, "api_fuzz: a backward with a wrong %s was accepted (seed %llu)\n", what,
		        (unsigned long long)cur_seed);
		fails++;
	}
	CHECK(what || st == FJ_OK);
	tensors_free(&tg);
	tensors_free(&gr);
}

static void run_program(fj_context *ctx, fj_program *p, int training)
{
	size_t ni = fj_program_count(p, FJ_ROLE_INPUT), no = fj_program_count(p, FJ_ROLE_OUTPUT);
	if (ni > 8 || no > 8)
		return;
	fj_value_info ii[8], oi[8];
	const char *dn[] = {"N"};
	int64_t dv[] = {1 + pick(4)};
	fj_run_options ro;
	fj_run_options_init(&ro);
	ro.dim_names = dn;
	ro.dim_values = dv;
	for (size_t k = 0; k < ni; k++) /* N, when an input has it */
		for (int d = 0; fj_program_info(p, FJ_ROLE_INPUT, k, &ii[k]) == FJ_OK && d < ii[k].rank; d++)
			if (ii[k].sizes[d] < 0)
				ro.ndims = 1;
	fj_value_info bad;
	CHECK(fj_program_info(p, FJ_ROLE_INPUT, ni, &bad) != FJ_OK);
	fj_context_clear_diagnostics(ctx);
	const fj_tensor *unknown[8] = {NULL};
	fj_status st = fj_program_sizes(p, &ro, unknown, ni, ii, oi, NULL);
	if (st != FJ_OK) {
		expect_error(ctx, st, "fj_program_sizes");
		return;
	}
	for (int rep = 0; rep < 4; rep++) {
		tensors in = {.n = 0}, out = {.n = 0};
		tensors_make(&in, ii, ni, 1);
		tensors_make(&out, oi, no, 0);
		size_t nin = ni, nout = no;
		if (rep == 0 || chance(50))
			for (size_t k = 0; k < no; k++)
				out.t[k].data = NULL; /* let the run allocate */
		const char *what = rep == 0 ? NULL : corrupt(&in, &out, &nin, &nout);
		if (rep > 0 && !what && chance(50))
			alias(&in, &out);
		if (verbose)
			fprintf(stderr, "  run %d: %s%s\n", rep, what ? what : "valid", rep && !what ? " (or aliased)" : "");
		fj_saved *saved = NULL;
		int nosaved = training && rep > 0 && !what && chance(10);
		if (nosaved)
			what = "no place for the saved values";
		n.runs++;
		fj_context_clear_diagnostics(ctx);
		if (training)
			st = fj_program_forward_with(p, &ro, nin ? in.t : NULL, nin, out.t, nout, nosaved ? NULL : &saved);
		else
			st = fj_program_run_with(p, &ro, nin ? in.t : NULL, nin, out.t, nout);
		if (what) {
			n.bad_runs++;
			if (st != FJ_OK)
				n.bad_run_err++;
			if (st != FJ_OK)
				expect_error(ctx, st, what);
			else if (must_refuse || nosaved) {
				fprintf(stderr, "api_fuzz: a run with a wrong %s was accepted (seed %llu)\n", what,
				        (unsigned long long)cur_seed);
				fails++;
			}
		} else if (rep == 0) {
			if (st != FJ_OK)
				fprintf(stderr, "api_fuzz: a valid run failed (seed %llu): %s\n", (unsigned long long)cur_seed,
				        fj_context_error(ctx));
			CHECK(st == FJ_OK);
		} else if (st != FJ_OK) {
			expect_error(ctx, st, "an aliased or misaligned output");
		}
		if (st == FJ_OK) {
			n.run_ok++;
			if (saved)
				backward(ctx, p, &ro, saved, &out);
		}
		fj_saved_destroy(saved);
		tensors_free(&in);
		tensors_free(&out);
	}
}

static void one(fj_context *ctx, uint64_t seed)
{
	rs = cur_seed = seed;
	clean = chance(50);
	fj_module *m = NULL;
	if (fj_module_new(ctx, &m) != FJ_OK) {
		fails++;
		return;
	}
	static const char *const NAMES[] = {"main", "g", "main", "@main", "a b", ""};
	int ok = build_graph(ctx, m, clean ? "main" : ANY(NAMES));
	if (chance(20))
		build_graph(ctx, m, "main"); /* a second graph, perhaps of the same name */
	if (verbose) {
		char *text = NULL;
		if (fj_module_print(ctx, m, &text, NULL) == FJ_OK)
			fprintf(stderr, "%s", text);
		fj_string_free(ctx, text);
	}
	if (ok || chance(10)) {
		fj_compile_options o;
		fj_compile_options_init(&o);
		o.executor = chance(60) ? FJ_EXECUTOR_ATEN : FJ_EXECUTOR_HOST;
		o.training = chance(30);
		if (chance(5))
			o.pipeline = chance(50) ? "nonsense{" : "decompose,canonicalize";
		if (chance(5))
			o.graph = "missing";
		fj_program *p = NULL;
		n.compiles++;
		fj_context_clear_diagnostics(ctx);
		fj_status st = fj_compile(ctx, m, &o, &p);
		if (st != FJ_OK) {
			expect_error(ctx, st, "fj_compile");
			CHECK(p == NULL);
		} else {
			n.compile_ok++;
			run_program(ctx, p, o.training);
			fj_program_destroy(p);
		}
	}
	fj_module_destroy(m);
	fj_context_clear_diagnostics(ctx);
}

int main(int argc, char **argv)
{
	uint64_t seed = 1, only = 0;
	long iters = 400, seconds = 0;
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--seed=", 7))
			seed = strtoull(argv[i] + 7, NULL, 10);
		else if (!strncmp(argv[i], "--iters=", 8))
			iters = strtol(argv[i] + 8, NULL, 10);
		else if (!strncmp(argv[i], "--seconds=", 10))
			seconds = strtol(argv[i] + 10, NULL, 10);
		else if (!strncmp(argv[i], "--one=", 6))
			only = strtoull(argv[i] + 6, NULL, 10);
		else if (!strcmp(argv[i], "-v"))
			verbose = 1;
		else {
			fprintf(stderr, "usage: fj-api-fuzz [--seed=S] [--iters=N] [--seconds=T] [--one=SEED] [-v]\n");
			return 2;
		}
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	if (!ctx || fj_context_set_cache(ctx, "off", 0) != FJ_OK)
		return 1;
	/* misuse of NULL handles */
	CHECK(fj_build_param(NULL, "x", "f32[3]") == FJ_NO_VALUE);
	CHECK(fj_build_op1(NULL, "aten.exp", NULL, 0, NULL, 0) == FJ_NO_VALUE);
	CHECK(fj_build_end(NULL, NULL, 0) != FJ_OK);
	fj_build_abort(NULL);
	CHECK(fj_compile(ctx, NULL, NULL, NULL) != FJ_OK);
	{ /* a list attribute with a count no array has: refused before any allocation (it was not) */
		fj_module *m = NULL;
		fj_graph_builder *b = NULL;
		if (fj_module_new(ctx, &m) == FJ_OK && fj_build_begin(m, "main", &b) == FJ_OK) {
			fj_value_id x = fj_build_param(b, "x", "f32[3,4]");
			int64_t d[1] = {1};
			fj_attribute a = {.name = "dims", .kind = FJ_ATTR_INTS, .ints = d, .n = (size_t)1 << 40};
			fj_context_clear_diagnostics(ctx);
			fj_status st = fj_build_op(b, "aten.sum", &x, 1, &a, 1, NULL, 1);
			expect_error(ctx, st, "a list attribute of 2^40 entries");
			fj_build_abort(b);
		}
		fj_module_destroy(m);
	}
	time_t t0 = time(NULL);
	long it = 0;
	if (only) {
		one(ctx, only);
		fj_context_destroy(ctx);
		return fails ? 1 : 0;
	}
	for (; seconds ? time(NULL) - t0 < seconds : it < iters; it++) {
		if (verbose)
			fprintf(stderr, "seed %llu\n", (unsigned long long)(seed * 1000003u + (uint64_t)it));
		one(ctx, seed * 1000003u + (uint64_t)it);
	}
	fj_context_destroy(ctx);
	printf("api_fuzz: %ld iterations: %ld graphs begun, %ld built, %ld refused at fj_build_end; %ld calls, %ld "
	       "failed; %ld compiles, %ld ok; %ld runs, %ld ok; %ld misuses, %ld refused; %ld backwards\n",
	       it, n.builds, n.build_ok, n.build_err, n.calls, n.call_err, n.compiles, n.compile_ok, n.runs, n.run_ok,
	       n.bad_runs, n.bad_run_err, n.trains);
	/* a run that exercised nothing is a failure, not a pass */
	if (it >= 100 && (n.build_ok < it / 20 || n.compile_ok < it / 40 || n.run_ok < it / 40)) {
		fprintf(stderr, "api_fuzz: too few graphs built, compiled or run\n");
		fails++;
	}
	return fails ? 1 : 0;
}
