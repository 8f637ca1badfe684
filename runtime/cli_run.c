/* cli_run.c -- fusejit-run (IR.md §5): parse a module, pick a graph, bind its
 * inputs (.npy files or seeded random data), run it on an executor, and
 * report, check, benchmark and write its outputs.
 *
 * Every failure is one message on stderr, `fusejit-run: error: ...` or
 * `file:line:col: error: ...`, and exit status 1; outputs are written to
 * temporary files and renamed only once everything has succeeded, so a failed
 * run leaves nothing behind. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend_host/host.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "passes/reference.h"
#include "runtime/cli.h"
#include "runtime/npy.h"
#include "runtime/executor.h"
#include "runtime/program.h"

#define TOOL "fusejit-run"

static const char usage_text[] =
	"usage: fusejit-run FILE [options]\n"
	"\n"
	"Runs a graph of a .fj module (@main, else the first; FILE - reads stdin) and\n"
	"reports its outputs: name, dtype, shape, the first values, min/max/mean.\n"
	"\n"
	"  --graph=@NAME           the graph to run\n"
	"  --executor=EXEC         auto (default), host, aten or nvptx:\n"
	"                            aten  the reference: one kernel per op, one thread\n"
	"                            host  fused host code: the default pipeline, then one\n"
	"                                  vectorised loop nest per fusion.kernel, on all cores\n"
	"                                  (FUSEJIT_THREADS overrides)\n"
	"                            nvptx fused PTX through the CUDA driver (libcuda.so.1, a GPU;\n"
	"                                  env FUSEJIT_NVPTX_DEVICE=emulator: a host emulator, for tests)\n"
	"                            auto  nvptx with a CUDA driver and GPU, else host\n"
	"  --input NAME=FILE.npy   a parameter's value (others are seeded random data:\n"
	"                          floats in [-1,1), integers in [0,10), valid indices)\n"
	"  --dim SYM=INT           the size of a symbol no input fixes\n"
	"  --seed=S                the random inputs' seed (default 0)\n"
	"  --output-dir=DIR        write each output to DIR/<name>.npy (a literal or a value\n"
	"                          returned twice: DIR/out<i>.npy); nothing when the run fails\n"
	"  --check=aten            also run on aten; print each output's relative L2 error and\n"
	"                          fail above f32 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12, ints exact\n"
	"  --check=f64             also run aten on the graph computed in f64 (same inputs) and\n"
	"                          twice more with its roundings perturbed by 2^-20; per output\n"
	"                          err = ||out - ref|| / (||ref|| + scale), scale = the change\n"
	"                          per unit of perturbation; fail above the tolerance of the\n"
	"                          least precise rounding in it (f32 1e-5, f16 1e-2, bf16 5e-2,\n"
	"                          f64 1e-12), ints exact; may be given with --check=aten\n"
	"  --bench                 time the run (median after warm-up) against a memcpy of the\n"
	"                          same bytes; print ms, GB/s, memcpy GB/s and memcpy_ratio\n"
	"                          (env FUSEJIT_BENCH_REPS=N: exactly N timed runs)\n"
	"  --json                  print one JSON object instead of text\n"
	"  --train                 training: autodiff + min-cut partition, then the forward\n"
	"                          and the backward graph; writes DIR/grad_<param>.npy for\n"
	"                          each parameter that gets a gradient (and the outputs)\n"
	"  --tangent NAME=FILE.npy the tangent of output NAME (its file stem: out<i> for a literal\n"
	"                          or a value returned twice) for --train (others: seeded random)\n"
	"  --help                  this text\n";

typedef struct kv {
	const char *name, *value;
} kv;

typedef struct run_opts {
	const char *file;
	const char *graph;
	const char *executor;
	uint64_t seed;
	const char *outdir;
	bool check, check64, json, bench, train; /* check: --check=aten; check64: --check=f64 */
	kv *inputs;
	size_t ninputs;
	fj_rt_dimarg *dims;
	size_t ndims;
	kv *tangents;
	size_t ntangents;
} run_opts;

static int errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int errorf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(TOOL ": error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* Prints the context's diagnostics; returns 1. */
static int report(fj_context *ctx, fj_status st)
{
	size_t n = fj_context_diagnostic_count(ctx);
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		const fj_diagnostic *d = fj_context_diagnostic(ctx, i);
		char buf[1400];
		fj_format_diagnostic(d, buf, sizeof buf);
		if (d->file)
			fprintf(stderr, "%s\n", buf);
		else
			fprintf(stderr, TOOL ": %s\n", buf);
		any |= d->severity == FJ_SEV_ERROR;
	}
	if (!any) {
		const char *e = fj_context_error(ctx);
		if (e && *e)
			fprintf(stderr, TOOL ": %s\n", e);
		else
			errorf("failed (%s)", fj_status_name(st));
	}
	fj_context_clear_diagnostics(ctx);
	return 1;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool parse_i64(const char *s, int64_t *out)
{
	if (!s || !*s)
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* ---- the nvptx device ---- */

/* The executor a run uses (runtime/executor.h) and, for nvptx, its device. */
typedef struct executor {
	const fj_rt_executor *ex;
	const char *name;
	const fj_nvptx_device *dev; /* nvptx: the device; NULL: none */
} executor;

static const executor aten_executor = {&fj_rt_aten_executor, "aten", NULL};

/* Opens the nvptx executor's device, as api/program.c does: the CUDA driver
 * (without one, its own one-sentence error), or, with
 * FUSEJIT_NVPTX_DEVICE=emulator, the host emulator of backend_nvptx/emu.h: a
 * testing aid for machines with no GPU (slow, and no --bench, which times
 * with CUDA events). */
static fj_status nv_open(fj_context *ctx, fj_nvptx_device *dev)
{
	bool emulator;
	fj_status st = fj_nvptx_device_kind(ctx, &emulator);
	if (st != FJ_OK)
		return st;
	return emulator ? fj_nvptx_device_open(ctx, dev) : fj_nvptx_cuda_device(ctx, dev);
}

/* Compiles g for ex. */
static fj_status exec_create(fj_context *ctx, const executor *ex, fj_graph *g, fj_rt_exec **out)
{
	fj_rt_exec_options eo = {.device = ex->dev};
	return fj_rt_exec_create(ex->ex, ctx, g, &eo, out);
}

/* ---- arguments ---- */

static int parse_args(int argc, char **argv, run_opts *o, bool *help)
{
	bool flags_done = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!flags_done && strcmp(a, "--") == 0) {
			flags_done = true;
			continue;
		}
		if (!flags_done && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
			*help = true;
			return 0;
		}
		if (flags_done || a[0] != '-' || a[1] == 0) {
			if (o->file)
				return errorf("more than one input file: '%s' and '%s'", o->file, a);
			o->file = a;
			continue;
		}
		if (a[1] != '-')
			return errorf("unknown option '%s' (see --help)", a);
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const char *val = eq ? eq + 1 : NULL;
#define IS(s) (nlen == strlen(s) && memcmp(name, s, nlen) == 0)
		if (IS("json") || IS("bench") || IS("train")) {
			if (val)
				return errorf("option --%.*s takes no value", (int)nlen, name);
			if (IS("json"))
				o->json = true;
			else if (IS("bench"))
				o->bench = true;
			else
				o->train = true;
			continue;
		}
		if (!(IS("graph") || IS("executor") || IS("input") || IS("dim") || IS("seed") || IS("output-dir") ||
		      IS("check") || IS("tangent")))
			return errorf("unknown option '--%.*s' (see --help)", (int)nlen, name);
		if (!val) {
			if (i + 1 >= argc)
				return errorf("option --%.*s needs a value", (int)nlen, name);
			val = argv[++i];
		}
		if (IS("graph")) {
			o->graph = val[0] == '@' ? val + 1 : val;
			if (!*o->graph)
				return errorf("--graph needs a graph name, as --graph=@main");
		} else if (IS("executor")) {
			o->executor = val;
		} else if (IS("seed")) {
			char *end;
			errno = 0;
			unsigned long long s = strtoull(val, &end, 10);
			if (errno || *end || !*val || val[0] == '-')
				return errorf("--seed: '%s' is not a non-negative integer", val);
			o->seed = s;
		} else if (IS("output-dir")) {
			if (!*val)
				return errorf("--output-dir needs a directory");
			o->outdir = val;
		} else if (IS("check")) {
			if (strcmp(val, "aten") == 0)
				o->check = true;
			else if (strcmp(val, "f64") == 0)
				o->check64 = true;
			else
				return errorf("--check=%s: unknown check (expected --check=aten or --check=f64)", val);
		} else {
			const char *e2 = strchr(val, '=');
			if (!e2 || e2 == val || !e2[1])
				return errorf("--%.*s needs NAME=%s, got '%s'", (int)nlen, name,
				              IS("dim") ? "INT" : "FILE.npy", val);
			size_t kl = (size_t)(e2 - val);
			char *key = malloc(kl + 1);
			if (!key)
				return errorf("out of memory");
			memcpy(key, val, kl);
			key[kl] = 0;
			if (IS("tangent")) {
				o->tangents[o->ntangents].name = key;
				o->tangents[o->ntangents].value = e2 + 1;
				o->ntangents++;
			} else if (IS("input")) {
				o->inputs[o->ninputs].name = key[0] == '%' ? key + 1 : key;
				o->inputs[o->ninputs].value = e2 + 1;
				if (key[0] == '%') {
					memmove(key, key + 1, kl);
					o->inputs[o->ninputs].name = key;
				}
				o->ninputs++;
			} else {
				int64_t v;
				if (!parse_i64(e2 + 1, &v) || v < 0) {
					free(key);
					return errorf("--dim %s: '%s' is not a size (a non-negative integer)", val, e2 + 1);
				}
				o->dims[o->ndims].name = key;
				o->dims[o->ndims].value = v;
				o->ndims++;
			}
		}
#undef IS
	}
	return 0;
}

/* ---- random inputs ---- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

typedef struct rng {
	uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) /* xoshiro256** */
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* One stream per (seed, parameter name): giving one input by file leaves the
 * others' random data unchanged. */
static void rng_init(rng *r, uint64_t seed, const char *param)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *c = param; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	uint64_t sm = seed ^ rotl(h, 17);
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&sm);
}

/* bound > 0: indices in [0, bound); bound == 0: an empty indexed dim (zeros). */
static void fill_random(fj_rt_tensor *t, uint64_t seed, const char *param, int64_t bound)
{
	rng r;
	rng_init(&r, seed, param);
	int64_t n = fj_rt_tensor_numel(t);
	for (int64_t i = 0; i < n; i++) {
		uint64_t x = rng_next(&r);
		if (fj_dtype_is_float(t->dtype)) {
			double u = (double)(x >> 11) * 0x1.0p-53;
			double v = -1.0 + 2.0 * u;
			fj_rt_store_f64(t->data, t->dtype, i, v);
			if (fj_rt_load_f64(t->data, t->dtype, i) >= 1.0) /* rounded up in f16/bf16 */
				fj_rt_store_f64(t->data, t->dtype, i, t->dtype == FJ_DT_F16 ? 0.99951171875 : 0.99609375);
		} else if (fj_dtype_is_bool(t->dtype)) {
			((uint8_t *)t->data)[i] = (uint8_t)(x >> 63);
		} else {
			int64_t lim = bound >= 0 ? bound : 10;
			int64_t v = lim > 0 ? (int64_t)((x >> 1) % (uint64_t)lim) : 0;
			if (t->dtype == FJ_DT_I64)
				((int64_t *)t->data)[i] = v;
			else
				fj_rt_store_f64(t->data, t->dtype, i, (double)v);
		}
	}
}

static int opnd_index(const fj_opinfo *oi, const char *name)
{
	for (int i = 0; i < oi->noperands; i++)
		if (strcmp(oi->operands[i].name, name) == 0)
			return i;
	return -1;
}

/* No index bound (fj_dim of a parameter that indexes nothing). */
#define NO_BOUND INT64_MIN

/* For each parameter of g used directly as an index operand, the dim it
 * indexes (a size or a symbolic size), else NO_BOUND. Taken from the graph
 * as written: after decompose an index reaches prims.gather through casts
 * and selects, so --train takes them before its pipeline. */
static void index_bound_dims(fj_context *ctx, const fj_graph *g, fj_dim *bound)
{
	for (uint32_t i = 0; i < g->nparams; i++)
		bound[i] = NO_BOUND;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		int ix = opnd_index(oi, "index");
		int src = 0;
		fj_dim dimsz = NO_BOUND;
		if (ix < 0 && (ix = opnd_index(oi, "indices")) >= 0) {
			src = opnd_index(oi, "weight");
			if (src < 0) { /* embedding_dense_backward: num_weights */
				const fj_attr *a = fj_node_attr(ctx, n, "num_weights");
				if (fj_op_attr_index(oi, "num_weights", 11) >= 0 && a && a->kind == FJ_AK_INT)
					dimsz = a->u.i;
			} else if ((uint32_t)src < n->nopnds && n->opnds[src] != FJ_NOVAL &&
			           g->values[n->opnds[src]].type.rank >= 1) {
				dimsz = g->values[n->opnds[src]].type.dims[0];
			}
		} else if (ix < 0 && (ix = opnd_index(oi, "target")) >= 0) {
			src = opnd_index(oi, "self");
			if (src >= 0 && (uint32_t)src < n->nopnds && n->opnds[src] != FJ_NOVAL) {
				const fj_type *t = &g->values[n->opnds[src]].type;
				if (t->rank >= 1)
					dimsz = t->dims[t->rank >= 2 ? 1 : 0];
			}
		} else if (ix >= 0) {
			if (n->nopnds > 0 && n->opnds[0] != FJ_NOVAL && fj_op_attr_index(oi, "dim", 3) >= 0) {
				const fj_type *t = &g->values[n->opnds[0]].type;
				int64_t d = fj_attr_as_int(fj_node_attr(ctx, n, "dim"));
				if (d < 0)
					d += t->rank;
				if (d >= 0 && d < t->rank)
					dimsz = t->dims[d];
				else if (t->rank == 0)
					dimsz = 1;
			}
		}
		if (ix < 0 || (uint32_t)ix >= n->nopnds || dimsz == NO_BOUND)
			continue;
		fj_vid v = n->opnds[ix];
		if (v == FJ_NOVAL || g->values[v].kind != FJ_VK_PARAM)
			continue;
		uint32_t pi = g->values[v].def;
		/* several uses: the smallest static size, else the first */
		if (bound[pi] == NO_BOUND || (fj_dim_is_static(dimsz) && fj_dim_is_static(bound[pi]) && dimsz < bound[pi]))
			bound[pi] = dimsz;
	}
}

/* The concrete index bounds (-1: none) of n parameters from their bound
 * dims, with the symbols p bound. */
static void index_bounds(const fj_module *m, const fj_rt_exec *p, const fj_dim *dims, uint32_t n, int64_t *bound)
{
	for (uint32_t i = 0; i < n; i++) {
		fj_dim d = dims[i];
		if (d == NO_BOUND) {
			bound[i] = -1;
		} else if (fj_dim_is_static(d)) {
			bound[i] = d;
		} else {
			const fj_symexpr *e = fj_dim_expr(m, d);
			int64_t v = e->coef;
			for (uint32_t k = 0; k < e->nsyms && v >= 0; k++) {
				int64_t s = fj_rt_exec_symbol(p, e->syms[k]);
				v = s < 0 ? -1 : v * s;
			}
			bound[i] = v;
		}
	}
}

/* ---- reporting ---- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.17g", v);
	else
		fputs("null", f);
}

static void print_value(FILE *f, const fj_rt_tensor *t, int64_t i)
{
	if (fj_dtype_is_float(t->dtype))
		fprintf(f, "%.6g", fj_rt_load_f64(t->data, t->dtype, i));
	else if (fj_dtype_is_bool(t->dtype))
		fputs(((const uint8_t *)t->data)[i] ? "true" : "false", f);
	else if (t->dtype == FJ_DT_I64)
		fprintf(f, "%lld", (long long)((const int64_t *)t->data)[i]);
	else
		fprintf(f, "%.0f", fj_rt_load_f64(t->data, t->dtype, i));
}

static void print_summary(FILE *f, const fj_rt_tensor *t)
{
	int64_t n = fj_rt_tensor_numel(t);
	if (n == 0) {
		fprintf(f, "  (empty)\n");
		return;
	}
	fprintf(f, "  [");
	int64_t show = n < 8 ? n : 8;
	for (int64_t i = 0; i < show; i++) {
		if (i)
			fputs(", ", f);
		print_value(f, t, i);
	}
	fprintf(f, "%s]\n", n > show ? ", ..." : "");
	double mn = INFINITY, mx = -INFINITY, sum = 0;
	int64_t nnan = 0, ninf = 0, nfin = 0;
	for (int64_t i = 0; i < n; i++) {
		double v = fj_rt_load_f64(t->data, t->dtype, i);
		if (isnan(v)) {
			nnan++;
			continue;
		}
		if (isinf(v)) {
			ninf++;
			continue;
		}
		mn = v < mn ? v : mn;
		mx = v > mx ? v : mx;
		sum += v;
		nfin++;
	}
	if (nfin)
		fprintf(f, "  min %.6g  max %.6g  mean %.6g", mn, mx, sum / (double)nfin);
	else
		fprintf(f, "  no finite values");
	if (nnan || ninf)
		fprintf(f, "  (%lld NaN, %lld inf left out)", (long long)nnan, (long long)ninf);
	fputc('\n', f);
}

/* ---- bench ---- */

typedef struct bench_result {
	double median_ms, copy_ms;
	int reps;
	size_t bytes;
} bench_result;

/* --bench through the executor (FUSEJIT_BENCH_REPS=N: exactly N timed runs
 * on the host; bench/run: few for slow executors). */
static fj_status bench(fj_rt_exec *e, const fj_rt_tensor *const *in, fj_rt_tensor *out, bench_result *br)
{
	const char *env_reps = getenv("FUSEJIT_BENCH_REPS");
	int reps = env_reps && atoi(env_reps) > 0 ? atoi(env_reps) : 0;
	fj_rt_bench b;
	fj_status st = fj_rt_exec_bench(e, in, out, reps, &b);
	*br = (bench_result){.median_ms = b.median_ms, .copy_ms = b.copy_ms, .reps = b.reps, .bytes = b.bytes};
	return st;
}

static bool ensure_dir(const char *dir);

/* ---- --train ---- */

/* One graph's program with its inputs and outputs, for --train. */
typedef struct phase {
	fj_graph *g;
	fj_rt_exec *e;              /* the compiled program */
	fj_rt_tensor *own;          /* inputs this phase allocated (random, files) */
	const fj_rt_tensor **in;
	const char **origin;
	fj_rt_tensor *out;
	const fj_dim *bdims;        /* per parameter: the dim it indexes (NO_BOUND), or NULL: from g */
} phase;

static void phase_free(phase *ph)
{
	for (uint32_t i = 0; ph->g && ph->own && i < ph->g->nparams; i++)
		fj_rt_tensor_free(&ph->own[i]);
	for (uint32_t k = 0; ph->g && ph->out && k < ph->g->nresults; k++)
		fj_rt_tensor_free(&ph->out[k]);
	free(ph->own);
	free(ph->in);
	free(ph->origin);
	free(ph->out);
	fj_rt_exec_destroy(ph->e);
	memset(ph, 0, sizeof *ph);
}

static fj_status phase_alloc(fj_context *ctx, phase *ph, fj_graph *g)
{
	ph->g = g;
	uint32_t np = g->nparams ? g->nparams : 1, nr = g->nresults ? g->nresults : 1;
	ph->own = calloc(np, sizeof *ph->own);
	ph->in = calloc(np, sizeof *ph->in);
	ph->origin = calloc(np, sizeof *ph->origin);
	ph->out = calloc(nr, sizeof *ph->out);
	if (!ph->own || !ph->in || !ph->origin || !ph->out)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	return FJ_OK;
}

/* Compiles and binds a phase whose given inputs are set, fills the others
 * with seeded random data (salted by `salt`, so tangents differ from
 * primals of the same name) and runs it: on nvptx, the inputs are uploaded
 * and the outputs (the forward's saved values too) downloaded, as
 * api/program.c does with host tensors. */
static fj_status phase_run(fj_context *ctx, phase *ph, const executor *ex, const run_opts *o, const char *salt)
{
	fj_graph *g = ph->g;
	fj_status st = exec_create(ctx, ex, g, &ph->e);
	if (st == FJ_OK)
		st = fj_rt_exec_bind(ph->e, ph->in, ph->origin, o->dims, o->ndims);
	if (st != FJ_OK)
		return st;
	int64_t *bounds = calloc(g->nparams ? g->nparams : 1, sizeof *bounds);
	if (!bounds)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	fj_dim *own = ph->bdims ? NULL : calloc(g->nparams ? g->nparams : 1, sizeof *own);
	if (!ph->bdims && !own) {
		free(bounds);
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	}
	if (own)
		index_bound_dims(ctx, g, own);
	index_bounds(g->module, ph->e, ph->bdims ? ph->bdims : own, g->nparams, bounds);
	free(own);
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++) {
		if (ph->in[i])
			continue;
		const fj_value *pv = &g->values[g->params[i]];
		st = fj_rt_tensor_alloc(ctx, &ph->own[i], pv->type.dtype, pv->type.rank,
		                        fj_rt_exec_value_dims(ph->e, g->params[i]));
		if (st == FJ_OK) {
			char name[300];
			snprintf(name, sizeof name, "%s%s", salt, pv->name);
			fill_random(&ph->own[i], o->seed, name, bounds[i]);
			ph->in[i] = &ph->own[i];
		}
	}
	free(bounds);
	if (st != FJ_OK)
		return st;
	return fj_rt_exec_run(ph->e, ph->in, NULL, ph->out, NULL);
}

/* --bench of one phase: on the host, or on the device. */
static fj_status phase_bench(fj_context *ctx, phase *ph, bench_result *br)
{
	return bench(ph->e, ph->in, ph->out, br);
}

#define STEM_MAX 300

/* ---- --check=f64 (IR.md §5) ---- */

/* One output's verdict: err = ||out - rnd(ref)|| / (||ref|| + scale)
 * against the f64 reference (fj_rt_f64_err), and the tolerance it is held
 * to. */
typedef struct f64_verdict {
	double err, tol, scale;
	bool placed; /* NaN and inf at the same places */
} f64_verdict;

static bool f64_ok(const f64_verdict *v) { return v->placed && v->err <= v->tol; }

/* ptol: the tolerance of the least precise rounding the output went
 * through (tol_walk); a float output is held to at least its own dtype's. */
static f64_verdict f64_judge(const fj_rt_tensor *out, const fj_rt_tensor *ref, double scale, double ptol)
{
	f64_verdict v = {.scale = scale, .placed = true};
	double own = fj_rt_f64_tolerance(out->dtype);
	v.tol = fj_dtype_is_float(out->dtype) ? (ptol > own ? ptol : own) : 0;
	bool same = out->rank == ref->rank;
	for (int d = 0; same && d < out->rank; d++)
		same = out->dims[d] == ref->dims[d];
	if (!same) {
		v.err = INFINITY;
		return v;
	}
	v.err = fj_rt_f64_err(out, ref, scale, &v.placed);
	return v;
}

static void f64_print(FILE *f, const f64_verdict *v)
{
	if (!v->placed)
		fprintf(f, "  vs f64: NaN/inf at different places: FAIL\n");
	else
		fprintf(f, "  vs f64: err %.3g (scale %.3g, tolerance %g): %s\n", v->err, v->scale, v->tol,
		        f64_ok(v) ? "ok" : "FAIL");
}

static void f64_json(FILE *f, const f64_verdict *v)
{
	fputs(", \"f64_err\": ", f);
	json_num(f, v->placed ? v->err : INFINITY);
	fputs(", \"f64_scale\": ", f);
	json_num(f, v->scale);
	fputs(", \"f64_tolerance\": ", f);
	json_num(f, v->tol);
}

/* The one error of a failed --check: the checks that failed. */
static void check_failed(bool aten_ok, bool f64_all_ok, bool train, bool outdir)
{
	const char *what = train ? "an output or gradient" : "an output";
	const char *tail = outdir ? " (no output written)" : "";
	if (!aten_ok && !f64_all_ok)
		errorf("--check=aten and --check=f64: %s differs from aten beyond its dtype's tolerance and from its "
		       "f64 reference beyond its tolerance%s", what, tail);
	else if (!aten_ok)
		errorf("--check=aten: %s differs from aten beyond its dtype's tolerance%s", what, tail);
	else
		errorf("--check=f64: %s differs from its f64 reference beyond its tolerance%s", what, tail);
}

/* For each value of g (as the executor ran it): the --check=f64 tolerance of
 * the least precise rounding it went through -- the largest tolerance among
 * the dtypes of the float node results it depends on, itself included (an
 * f64 output of f32 math: f32's). Parameters start from pin[i] (NULL: 0:
 * inputs are exact in both runs). NULL when out of memory. */
static double *tol_walk(const fj_graph *g, const double *pin)
{
	double *p = calloc(g->nvalues + 1, sizeof *p);
	if (!p)
		return NULL;
	for (uint32_t i = 0; pin && i < g->nparams; i++)
		p[g->params[i]] = pin[i];
	for (uint32_t ni = 0; ni < g->nnodes; ni++) {
		const fj_node *n = &g->nodes[ni];
		double in = 0;
		for (uint32_t i = 0; i < n->nopnds; i++)
			if (n->opnds[i] != FJ_NOVAL && p[n->opnds[i]] > in)
				in = p[n->opnds[i]];
		for (uint32_t r = 0; r < n->nres; r++) {
			double own = fj_rt_f64_tolerance(g->values[n->res[r]].type.dtype);
			p[n->res[r]] = own > in ? own : in;
		}
	}
	return p;
}

/* Input i of ph: t, converted to the parameter's dtype when that is f64 and
 * t a narrower float (exactly: every f16/bf16/f32 value is an f64 value). */
static fj_status set_input64(fj_context *ctx, phase *ph, uint32_t i, const fj_rt_tensor *t)
{
	fj_dtype want = ph->g->values[ph->g->params[i]].type.dtype;
	if (t->dtype == want || !fj_dtype_is_float(t->dtype)) {
		ph->in[i] = t;
		return FJ_OK;
	}
	fj_status st = fj_rt_tensor_alloc(ctx, &ph->own[i], want, t->rank, t->dims);
	if (st != FJ_OK)
		return st;
	int64_t n = fj_rt_tensor_numel(t);
	for (int64_t k = 0; k < n; k++)
		fj_rt_store_f64(ph->own[i].data, want, k, fj_rt_load_f64(t->data, t->dtype, k));
	ph->in[i] = &ph->own[i];
	return FJ_OK;
}

/* The f64 copy of graph `gname` (fj_pass_clone_f64), added to m as
 * @<gname>.f64 (or a free variant); its name into name64[STEM_MAX]. */
static fj_status add_f64_graph(fj_module *m, const char *gname, char *name64, fj_graph **out)
{
	char base[STEM_MAX];
	snprintf(base, sizeof base, "%s.f64", gname);
	fj_pass_fresh_graph_name(m, base, name64, STEM_MAX);
	return fj_pass_clone_f64(fj_module_find_graph(m, gname), name64, out);
}

/* --check=f64's simulated roundings: CHECK64_SAMPLES runs of the f64 graph
 * with every float node result perturbed by a relative CHECK64_DELTA at most
 * (fj_pass_clone_perturbed); an output's scale is the largest
 * ||perturbed - ref||_2 / CHECK64_DELTA over the samples. delta = 2^-20
 * keeps the response linear (second-order terms ~delta^2) and far above f64's
 * own roundings (~1e-16, i.e. 1e-10 of the measured sensitivity). */
#define CHECK64_DELTA 0x1p-20
#define CHECK64_SAMPLES 2

/* Runs g64 (sample 0) or its perturbed copy under seed `sample` (added to
 * m) on aten, with inputs in (float ones of any dtype: converted), into ph. */
static fj_status run64(fj_context *ctx, fj_module *m, fj_graph *g64, const fj_rt_tensor *const *in,
                       const run_opts *o, unsigned sample, phase *ph)
{
	fj_graph *g = g64;
	fj_status st = FJ_OK;
	if (sample) {
		char name[STEM_MAX], base[STEM_MAX];
		snprintf(base, sizeof base, "%s.perturbed%u", g64->name, sample);
		fj_pass_fresh_graph_name(m, base, name, sizeof name);
		st = fj_pass_clone_perturbed(g64, name, CHECK64_DELTA, sample, &g);
	}
	if (st == FJ_OK)
		st = phase_alloc(ctx, ph, g);
	for (uint32_t i = 0; st == FJ_OK && i < g->nparams; i++) {
		if (!in[i])
			return fj_error(ctx, g->loc, "--check=f64: internal error: parameter %u of @%s has no value", i,
			                g->name);
		st = set_input64(ctx, ph, i, in[i]);
	}
	if (st == FJ_OK)
		st = phase_run(ctx, ph, &aten_executor, o, "");
	return st;
}

/* scale[k] = max(scale[k], ||p->out[k] - ref[k]||_2 / CHECK64_DELTA) for
 * the first n outputs. */
static void add_scales(const phase *p, const fj_rt_tensor *ref, uint32_t n, double *scale)
{
	for (uint32_t k = 0; k < n; k++) {
		double d = fj_rt_l2_dist(&p->out[k], &ref[k]) / CHECK64_DELTA;
		if (d > scale[k])
			scale[k] = d;
	}
}


/* A file name output, collected for --output-dir and --json. */
typedef struct named_out {
	char stem[STEM_MAX];
	char value[STEM_MAX];  /* the forward output's value name as written ("" for a literal) */
	const fj_rt_tensor *t;
	double relerr;
	char *path, *tmp;
} named_out;

/* The file stem of output k of g (IR.md §5), into stem[300]: the value's
 * name, or out<k> for a literal, a value returned twice or a name an
 * earlier output took (prev: the stems of outputs 0..k-1). The stems come
 * from the graph as written, before any pass: --train names its outputs as
 * a forward run does. */
static void output_stem(const fj_graph *g, uint32_t k, const char *const *prev, char *stem)
{
	fj_vid v = g->results[k];
	const char *vn = g->values[v].kind == FJ_VK_LITERAL ? NULL : g->values[v].name;
	for (uint32_t j = 0; vn && j < g->nresults; j++)
		if (j != k && g->results[j] == v)
			vn = NULL;
	for (uint32_t j = 0; vn && j < k; j++)
		if (strcmp(prev[j], vn) == 0)
			vn = NULL;
	if (vn)
		snprintf(stem, STEM_MAX, "%s", vn);
	else
		snprintf(stem, STEM_MAX, "out%u", k);
}

/* The parameter of @f.bw that takes the tangent of forward output k
 * (%tangent_<k>), or gb->nparams when k has none (not floating point). */
static uint32_t tangent_param(const fj_graph *gb, uint32_t nsaved, uint32_t k)
{
	for (uint32_t i = nsaved; i < gb->nparams; i++) {
		const char *pn = gb->values[gb->params[i]].name;
		unsigned t;
		if (pn && sscanf(pn, "tangent_%u", &t) == 1 && t == k)
			return i;
	}
	return gb->nparams;
}

/* The forward output `--tangent NAME` means (*k): the one written to
 * NAME.npy, else the one that returns %NAME, which must then be the only
 * one (the stems out<i> tell several apart). Returns 1 after an error. */
static int tangent_output(const named_out *outs, uint32_t K, const char *gname, const char *name, uint32_t *k)
{
	for (*k = 0; *k < K; (*k)++)
		if (strcmp(outs[*k].stem, name) == 0)
			return 0;
	const char *vn = name[0] == '%' ? name + 1 : name;
	char stems[600] = "";
	size_t len = 0;
	uint32_t n = 0;
	for (uint32_t j = 0; j < K; j++) {
		if (!outs[j].value[0] || strcmp(outs[j].value, vn) != 0)
			continue;
		if (n++ == 0)
			*k = j;
		if (len < sizeof stems - 1)
			len += (size_t)snprintf(stems + len, sizeof stems - len, "%s%s", n > 1 ? ", " : "", outs[j].stem);
	}
	if (n == 1)
		return 0;
	if (n > 1)
		return errorf("--tangent %s: @%s returns %%%s %u times, as outputs %s: name one by its file stem", name,
		              gname, vn, n, stems);
	return errorf("--tangent %s: @%s has no floating-point output named %s", name, gname, name);
}

/* The sizes the backward binds: --dim's, then every other symbol the
 * forward's inputs bound (a tangent of shape [N,4] is random data: the
 * backward's own inputs may not fix N). *n: how many; NULL: out of memory. */
static fj_rt_dimarg *backward_dims(const fj_module *m, const fj_rt_exec *fwp, const run_opts *o, size_t *n)
{
	uint32_t ns = fj_symbol_count(m);
	fj_rt_dimarg *d = calloc(o->ndims + ns + 1, sizeof *d);
	if (!d)
		return NULL;
	memcpy(d, o->dims, o->ndims * sizeof *d);
	*n = o->ndims;
	for (uint32_t s = 0; s < ns; s++) {
		const char *sn = fj_symbol_name(m, s);
		bool given = false;
		for (size_t k = 0; k < o->ndims; k++)
			given |= strcmp(o->dims[k].name, sn) == 0;
		if (!given && fj_rt_exec_symbol(fwp, s) >= 0)
			d[(*n)++] = (fj_rt_dimarg){sn, fj_rt_exec_symbol(fwp, s)};
	}
	return d;
}

/* Runs autodiff + partition on the module, then @name.fw on the inputs and
 * @name.bw on its saved values and the tangents (IR.md §5 --train). */
static int run_train(fj_context *ctx, fj_module *m, const char *gname, const run_opts *o, const executor *ex)
{
	char name[256], fwname[300], bwname[300];
	snprintf(name, sizeof name, "%s", gname);
	snprintf(fwname, sizeof fwname, "%s.fw", name);
	snprintf(bwname, sizeof bwname, "%s.bw", name);
	phase fw = {0}, bw = {0}, rfw = {0}, rbw = {0};
	phase xfw = {0}, xbw = {0}; /* --check=f64: the f64 forward and backward, exposed */
	double *scale = NULL, *ptolf = NULL, *ptolb = NULL, *pin = NULL;
	const fj_rt_tensor **bin = NULL; /* the f64 backward's inputs */
	f64_verdict *v64 = NULL;
	char name64[STEM_MAX] = "";
	run_opts bo = *o; /* the backward's: o with backward_dims */
	bo.dims = NULL;
	named_out *outs = NULL;
	fj_dim *fwbound = NULL;
	uint32_t nouts = 0;
	int rc = 1;
	/* outputs: the forward's K outputs named from the graph as written
	 * (canonicalize may merge or rename what they return), then
	 * grad_<param> in parameter order */
	const fj_graph *g0 = fj_module_find_graph(m, name);
	const char **prev = g0 ? calloc(g0->nresults + 1, sizeof *prev) : NULL;
	outs = prev ? calloc(g0->nresults + g0->nparams + 1, sizeof *outs) : NULL;
	if (!outs) {
		free(prev);
		errorf("out of memory");
		goto done;
	}
	for (uint32_t k = 0; k < g0->nresults; k++) {
		output_stem(g0, k, prev, outs[k].stem);
		prev[k] = outs[k].stem;
		const fj_value *v = &g0->values[g0->results[k]];
		snprintf(outs[k].value, sizeof outs[k].value, "%s", v->kind == FJ_VK_LITERAL || !v->name ? "" : v->name);
	}
	uint32_t K0 = g0->nresults, P0 = g0->nparams;
	free(prev);
	/* the forward's random indices: bounded by what they index in the graph as written */
	if (!(fwbound = calloc(P0 + 1, sizeof *fwbound))) {
		errorf("out of memory");
		goto done;
	}
	index_bound_dims(ctx, g0, fwbound);
	fj_status st = FJ_OK;
	if (o->check64) {
		/* the f64 copy goes through the same pipeline beside the graph */
		fj_graph *g64;
		if (!(v64 = calloc(g0->nresults + g0->nparams + 1, sizeof *v64))) {
			errorf("out of memory");
			goto done;
		}
		if ((st = add_f64_graph(m, name, name64, &g64)) != FJ_OK) {
			report(ctx, st);
			goto done;
		}
	}
	fj_pipeline_opts po = {.verify_each = true};
	st = fj_run_pipeline(m, "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition", &po);
	if (st != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	fj_graph *gf = fj_module_find_graph(m, fwname), *gb = fj_module_find_graph(m, bwname);
	if (!gf || !gb) {
		errorf("--train: partition gave no @%s and @%s", fwname, bwname);
		goto done;
	}
	uint32_t K = gf->num_fwd_outputs >= 0 ? (uint32_t)gf->num_fwd_outputs : 0;
	uint32_t nsaved = gf->nresults - K;
	if ((st = phase_alloc(ctx, &fw, gf)) != FJ_OK || (st = phase_alloc(ctx, &bw, gb)) != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	if (gf->nparams == P0)
		fw.bdims = fwbound; /* @f.fw takes the primals in the graph's order */
	if (K != K0 || gb->nresults > P0) {
		errorf("--train: @%s returns %u outputs and @%s %u gradients for @%s's %u outputs and %u parameters",
		       fwname, K, bwname, gb->nresults, name, K0, P0);
		goto done;
	}
	for (; nouts < K; nouts++)
		outs[nouts].t = &fw.out[nouts];
	/* forward inputs: the primals, from files or random */
	for (size_t k = 0; k < o->ninputs; k++) {
		uint32_t i = 0;
		while (i < gf->nparams && strcmp(gf->values[gf->params[i]].name, o->inputs[k].name) != 0)
			i++;
		if (i == gf->nparams) {
			errorf("--input %s: graph @%s has no parameter %%%s", o->inputs[k].name, name, o->inputs[k].name);
			goto done;
		}
		if ((st = fj_npy_read(ctx, o->inputs[k].value, &fw.own[i])) != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		fw.in[i] = &fw.own[i];
		fw.origin[i] = o->inputs[k].value;
	}
	if ((st = phase_run(ctx, &fw, ex, o, "")) != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	/* backward inputs: the saved values, then one tangent per floating output */
	if (gb->nparams < nsaved) {
		errorf("--train: @%s takes %u parameters for %u saved values", bwname, gb->nparams, nsaved);
		goto done;
	}
	for (uint32_t i = 0; i < nsaved; i++)
		bw.in[i] = &fw.out[K + i];
	if (!(bo.dims = backward_dims(m, fw.e, o, &bo.ndims))) {
		errorf("out of memory");
		goto done;
	}
	for (size_t t = 0; t < o->ntangents; t++) {
		uint32_t k;
		if (tangent_output(outs, K, name, o->tangents[t].name, &k) != 0)
			goto done;
		uint32_t i = tangent_param(gb, nsaved, k);
		if (i == gb->nparams) {
			errorf("--tangent %s: @%s has no floating-point output named %s", o->tangents[t].name, name,
			       o->tangents[t].name);
			goto done;
		}
		if (bw.in[i]) {
			errorf("--tangent %s: the tangent of output %s is given twice", o->tangents[t].name, outs[k].stem);
			goto done;
		}
		if ((st = fj_npy_read(ctx, o->tangents[t].value, &bw.own[i])) != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		bw.in[i] = &bw.own[i];
		bw.origin[i] = o->tangents[t].value;
	}
	if ((st = phase_run(ctx, &bw, ex, &bo, "tangent:")) != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	uint32_t gi = 0;
	for (uint32_t i = 0; i < gf->nparams && gi < gb->nresults; i++) {
		const fj_value *pv = &gf->values[gf->params[i]];
		if (!fj_dtype_is_float(pv->type.dtype) || pv->nograd)
			continue;
		snprintf(outs[nouts].stem, sizeof outs[nouts].stem, "grad_%s", pv->name);
		outs[nouts++].t = &bw.out[gi++];
	}
	bool check_ok = true, aten_ok = true, f64_all_ok = true;
	if (o->check) {
		/* the same forward and backward graphs on the reference */
		if ((st = phase_alloc(ctx, &rfw, gf)) != FJ_OK || (st = phase_alloc(ctx, &rbw, gb)) != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		memcpy(rfw.in, fw.in, gf->nparams * sizeof *rfw.in);
		memcpy(rbw.in, bw.in, gb->nparams * sizeof *rbw.in);
		for (uint32_t i = 0; i < nsaved; i++)
			rbw.in[i] = &rfw.out[K + i];
		if ((st = phase_run(ctx, &rfw, &aten_executor, o, "")) != FJ_OK ||
		    (st = phase_run(ctx, &rbw, &aten_executor, &bo, "tangent:")) != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		for (uint32_t j = 0; j < nouts; j++) {
			const fj_rt_tensor *ref = j < K ? &rfw.out[j] : &rbw.out[j - K];
			bool placed;
			outs[j].relerr = fj_rt_rel_l2(outs[j].t, ref, &placed);
			if (!placed || !(outs[j].relerr <= fj_rt_tolerance(outs[j].t->dtype)))
				aten_ok = false;
		}
	}
	if (o->check64) {
		/* @<name>.f64's forward and backward (exposed) on aten: the same
		 * primals and tangents in f64, the backward on the f64 forward's
		 * saved values */
		char n[2 * STEM_MAX];
		snprintf(n, sizeof n, "%s.fw", name64);
		fj_graph *gf64 = fj_module_find_graph(m, n);
		snprintf(n, sizeof n, "%s.bw", name64);
		fj_graph *gb64 = fj_module_find_graph(m, n);
		if (!gf64 || !gb64 || gf64->num_fwd_outputs != (int64_t)K || gb64->nresults != gb->nresults ||
		    gf64->nparams != gf->nparams) {
			errorf("--check=f64: internal error: the f64 copy of @%s does not train as @%s does", name, name);
			goto done;
		}
		uint32_t nsaved64 = gf64->nresults - K;
		bin = calloc(gb64->nparams + 1, sizeof *bin);
		pin = calloc(gb->nparams + 1, sizeof *pin);
		scale = calloc(K + gb->nresults + 1, sizeof *scale);
		if (!bin || !pin || !scale) {
			errorf("out of memory");
			goto done;
		}
		/* sample 0: the reference; then the perturbed forward and backward,
		 * the backward on the perturbed forward's saved values */
		for (unsigned smp = 0; st == FJ_OK && smp <= CHECK64_SAMPLES; smp++) {
			phase pf = {0}, pb = {0};
			phase *xf = smp ? &pf : &xfw, *xb = smp ? &pb : &xbw;
			if ((st = run64(ctx, m, gf64, fw.in, o, smp, xf)) == FJ_OK) {
				for (uint32_t i = 0; i < nsaved64 && i < gb64->nparams; i++)
					bin[i] = &xf->out[K + i];
				for (uint32_t k = 0; k < K; k++) {
					uint32_t i = tangent_param(gb, nsaved, k), i64 = tangent_param(gb64, nsaved64, k);
					if (i < gb->nparams && i64 < gb64->nparams)
						bin[i64] = bw.in[i];
				}
				st = run64(ctx, m, gb64, bin, &bo, smp, xb);
			}
			if (st == FJ_OK && smp) {
				add_scales(&pf, xfw.out, K, scale);
				add_scales(&pb, xbw.out, gb->nresults, scale + K);
			}
			phase_free(&pb); /* its saved inputs are pf's outputs */
			phase_free(&pf);
		}
		if (st == FJ_OK) {
			/* tolerances: the backward's saved values carry the forward's */
			if (!(ptolf = tol_walk(gf, NULL))) {
				errorf("out of memory");
				goto done;
			}
			for (uint32_t i = 0; i < gb->nparams; i++)
				pin[i] = i < nsaved ? ptolf[gf->results[K + i]] : 0;
			if (!(ptolb = tol_walk(gb, pin)))
				st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		}
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		for (uint32_t j = 0; j < nouts; j++) {
			bool f = j < K;
			uint32_t r = f ? j : j - K;
			v64[j] = f64_judge(outs[j].t, f ? &xfw.out[r] : &xbw.out[r], scale[j],
			                   f ? ptolf[gf->results[r]] : ptolb[gb->results[r]]);
			f64_all_ok &= f64_ok(&v64[j]);
		}
	}
	check_ok = aten_ok && f64_all_ok;
	bench_result bf = {0}, bb = {0};
	if (o->bench) {
		if ((st = phase_bench(ctx, &fw, &bf)) != FJ_OK || (st = phase_bench(ctx, &bw, &bb)) != FJ_OK) {
			report(ctx, st);
			goto done;
		}
	}
	if (o->outdir && check_ok) {
		if (!ensure_dir(o->outdir)) {
			errorf("--output-dir %s: cannot create the directory: %s", o->outdir,
			       errno ? strerror(errno) : "not a directory");
			goto done;
		}
		for (uint32_t j = 0; j < nouts; j++) {
			size_t len = strlen(o->outdir) + strlen(outs[j].stem) + 8;
			outs[j].path = malloc(len);
			if (!outs[j].path) {
				errorf("out of memory");
				goto done;
			}
			snprintf(outs[j].path, len, "%s/%s.npy", o->outdir, outs[j].stem);
			if ((st = fj_npy_write_temp(ctx, outs[j].path, outs[j].t, &outs[j].tmp)) != FJ_OK) {
				report(ctx, st);
				goto done;
			}
		}
		for (uint32_t j = 0; j < nouts; j++) {
			st = fj_npy_commit(ctx, outs[j].tmp, outs[j].path);
			outs[j].tmp = NULL;
			if (st != FJ_OK) {
				report(ctx, st);
				goto done;
			}
		}
	}
	FILE *f = stdout;
	if (o->json) {
		fputs("{\"graph\": ", f);
		json_str(f, name);
		fprintf(f, ", \"executor\": \"%s\", \"outputs\": [", ex->name);
		for (uint32_t j = 0; j < nouts; j++) {
			fprintf(f, "%s{\"name\": ", j ? ", " : "");
			json_str(f, outs[j].stem);
			fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", fj_dtype_name(outs[j].t->dtype));
			for (int d = 0; d < outs[j].t->rank; d++)
				fprintf(f, "%s%lld", d ? ", " : "", (long long)outs[j].t->dims[d]);
			fputc(']', f);
			if (o->outdir && check_ok) {
				fputs(", \"file\": ", f);
				json_str(f, outs[j].path);
			}
			if (o->check) {
				fputs(", \"rel_err\": ", f);
				json_num(f, outs[j].relerr);
			}
			if (o->check64)
				f64_json(f, &v64[j]);
			fputc('}', f);
		}
		fputc(']', f);
		if (o->bench) {
			/* forward and backward together */
			double ms = bf.median_ms + bb.median_ms, cms = bf.copy_ms + bb.copy_ms;
			size_t bytes = bf.bytes + bb.bytes;
			fputs(", \"bench\": {\"median_ms\": ", f);
			json_num(f, ms);
			fprintf(f, ", \"bytes\": %zu, \"gbps\": ", bytes);
			json_num(f, bytes / (ms * 1e-3) / 1e9);
			fputs(", \"memcpy_gbps\": ", f);
			json_num(f, bytes / (cms * 1e-3) / 1e9);
			fputs(", \"memcpy_ratio\": ", f);
			json_num(f, cms / ms);
			fputc('}', f);
		}
		fputs("}\n", f);
	} else {
		char where[300] = "";
		if (ex->dev) {
			fj_rt_exec_info fi = fj_rt_exec_info_of(fw.e), bi = fj_rt_exec_info_of(bw.e);
			snprintf(where, sizeof where, " (%s, %s; %u + %u fused kernels)", fi.device, fi.target, fi.kernels,
			         bi.kernels);
		}
		fprintf(f, "@%s trained on %s%s: @%s (%u outputs, %u saved) and @%s, seed %llu\n", name, ex->name, where,
		        fwname, K, nsaved, bwname, (unsigned long long)o->seed);
		for (uint32_t j = 0; j < nouts; j++) {
			char ty[300];
			fj_rt_tensor_type_str(outs[j].t, ty, sizeof ty);
			fprintf(f, "%s %s: %s\n", j < K ? "output" : "gradient", outs[j].stem, ty);
			print_summary(f, outs[j].t);
			if (o->check)
				fprintf(f, "  vs aten: rel_err %.3g (tolerance %g): %s\n", outs[j].relerr,
				        fj_rt_tolerance(outs[j].t->dtype),
				        outs[j].relerr <= fj_rt_tolerance(outs[j].t->dtype) ? "ok" : "FAIL");
			if (o->check64)
				f64_print(f, &v64[j]);
			if (o->outdir && check_ok)
				fprintf(f, "  written to %s\n", outs[j].path);
		}
		if (o->bench) {
			const bench_result *b2[2] = {&bf, &bb};
			for (int k = 0; k < 2; k++)
				fprintf(f, "bench %s: median %.4f ms over %d runs, %zu bytes, %.3f GB/s; memcpy %.3f GB/s; "
				           "memcpy_ratio %.3f\n",
				        k ? "backward" : "forward", b2[k]->median_ms, b2[k]->reps, b2[k]->bytes,
				        b2[k]->bytes / (b2[k]->median_ms * 1e-3) / 1e9,
				        b2[k]->bytes / (b2[k]->copy_ms * 1e-3) / 1e9, b2[k]->copy_ms / b2[k]->median_ms);
		}
	}
	if (!check_ok) {
		fflush(stdout);
		check_failed(aten_ok, f64_all_ok, true, o->outdir != NULL);
		goto done;
	}
	rc = 0;
done:
	for (uint32_t j = 0; outs && j < nouts; j++) {
		fj_npy_discard(outs[j].tmp);
		free(outs[j].path);
	}
	free(outs);
	free(fwbound);
	free(bo.dims);
	free(v64);
	free(scale);
	free((void *)bin);
	free(ptolf);
	free(ptolb);
	free(pin);
	phase_free(&xbw); /* its saved inputs are xfw's outputs */
	phase_free(&xfw);
	/* the saved inputs of bw are fw's outputs: not bw's to free */
	phase_free(&rbw);
	phase_free(&rfw);
	phase_free(&bw);
	phase_free(&fw);
	return rc;
}

/* ---- main ---- */

static bool ensure_dir(const char *dir)
{
	struct stat sb;
	if (stat(dir, &sb) == 0)
		return S_ISDIR(sb.st_mode);
	return mkdir(dir, 0777) == 0;
}

int fj_run_main(int argc, char **argv)
{
	run_opts o = {0};
	o.executor = "auto";
	o.inputs = calloc((size_t)argc + 1, sizeof *o.inputs);
	o.dims = calloc((size_t)argc + 1, sizeof *o.dims);
	o.tangents = calloc((size_t)argc + 1, sizeof *o.tangents);
	fj_context *ctx = NULL;
	fj_module *m = NULL;
	fj_rt_exec *prog = NULL; /* before any goto done */
	fj_rt_program *ref = NULL;
	fj_nvptx_device dev = {0};
	fj_rt_tensor *in = NULL, *out = NULL, *refout = NULL;
	const fj_rt_tensor **inp = NULL;
	const char **origin = NULL;
	char **stems = NULL, **paths = NULL, **tmps = NULL;
	double *relerr = NULL;
	f64_verdict *v64 = NULL;  /* --check=f64 */
	phase r64 = {0};
	double *scale = NULL, *ptol = NULL;
	uint32_t nparams = 0, nres = 0;
	int rc = 1;
	fj_status st = FJ_OK;
	if (!o.inputs || !o.dims || !o.tangents) {
		errorf("out of memory");
		goto done;
	}
	bool help = false;
	if (parse_args(argc, argv, &o, &help) != 0)
		goto done;
	if (help) {
		fputs(usage_text, stdout);
		rc = 0;
		goto done;
	}
	const fj_rt_executor *ex;
	const char *exname;
	bool use_nv = false; /* the nvptx executor (program_nvptx.h) */
	if (strcmp(o.executor, "auto") == 0 || strcmp(o.executor, "host") == 0) {
		/* auto: host here; nvptx instead when a CUDA driver and a GPU
		 * are usable (checked below, once the context exists) */
		ex = &fj_rt_host_executor;
		exname = "host";
	} else if (strcmp(o.executor, "aten") == 0) {
		ex = &fj_rt_aten_executor;
		exname = "aten";
	} else if (strcmp(o.executor, "nvptx") == 0) {
		/* nvptx: fused PTX on the GPU (program_nvptx.h) */
		ex = &fj_rt_nvptx_executor;
		exname = "nvptx";
		use_nv = true;
	} else {
		errorf("unknown executor '%s' (expected auto, host, aten or nvptx)", o.executor);
		goto done;
	}
	if (o.ntangents && !o.train) {
		errorf("--tangent needs --train");
		goto done;
	}
	if (!o.file) {
		errorf("no input file (usage: fusejit-run FILE [options]; see --help)");
		goto done;
	}
	ctx = fj_context_create(NULL, NULL);
	if (!ctx) {
		errorf("out of memory");
		goto done;
	}
	if (strcmp(o.file, "-") == 0) {
		size_t cap = 1 << 16, len = 0;
		char *text = malloc(cap);
		for (size_t k; text && (k = fread(text + len, 1, cap - len, stdin)) > 0;) {
			len += k;
			if (len == cap) {
				char *nt = realloc(text, cap * 2);
				if (!nt) {
					free(text);
					text = NULL;
				}
				text = nt;
				cap *= 2;
			}
		}
		if (!text) {
			errorf("out of memory reading stdin");
			goto done;
		}
		st = fj_parse_module(ctx, text, len, "<stdin>", &m);
		free(text);
	} else {
		st = fj_parse_file(ctx, o.file, &m);
	}
	if (st == FJ_OK)
		st = fj_verify_module(m);
	if (st != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	fj_graph *g;
	if (o.graph) {
		g = fj_module_find_graph(m, o.graph);
		if (!g) {
			errorf("%s has no graph named @%s", o.file, o.graph);
			goto done;
		}
	} else {
		if (m->ngraphs == 0) {
			errorf("%s: no graph to run", o.file);
			goto done;
		}
		g = fj_module_find_graph(m, "main");
		if (!g)
			g = m->graphs[0];
	}
	if (strcmp(o.executor, "auto") == 0 && fj_rt_executor_auto(ctx, g) == &fj_rt_nvptx_executor) {
		ex = &fj_rt_nvptx_executor;
		exname = "nvptx";
		use_nv = true;
	}
	if (use_nv && (st = nv_open(ctx, &dev)) != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	if (o.bench && dev.emulated) { /* before a slow emulated run */
		errorf("--bench needs the CUDA device (it times kernels with CUDA events), not "
		       "FUSEJIT_NVPTX_DEVICE=emulator");
		goto done;
	}
	const executor exr = {ex, exname, use_nv ? &dev : NULL};
	if (o.train) {
		rc = run_train(ctx, m, g->name, &o, &exr);
		goto done;
	}
	nparams = g->nparams;
	nres = g->nresults;
	in = calloc(nparams ? nparams : 1, sizeof *in);
	inp = calloc(nparams ? nparams : 1, sizeof *inp);
	origin = calloc(nparams ? nparams : 1, sizeof *origin);
	out = calloc(nres ? nres : 1, sizeof *out);
	refout = calloc(nres ? nres : 1, sizeof *refout);
	stems = calloc(nres ? nres : 1, sizeof *stems);
	paths = calloc(nres ? nres : 1, sizeof *paths);
	tmps = calloc(nres ? nres : 1, sizeof *tmps);
	relerr = calloc(nres ? nres : 1, sizeof *relerr);
	v64 = calloc(nres ? nres : 1, sizeof *v64);
	if (!in || !inp || !origin || !out || !refout || !stems || !paths || !tmps || !relerr || !v64) {
		errorf("out of memory");
		goto done;
	}

	/* inputs from files */
	for (size_t k = 0; k < o.ninputs; k++) {
		uint32_t i = 0;
		while (i < nparams && strcmp(g->values[g->params[i]].name, o.inputs[k].name) != 0)
			i++;
		if (i == nparams) {
			char list[600] = "";
			size_t len = 0;
			for (uint32_t j = 0; j < nparams && len < sizeof list - 1; j++)
				len += (size_t)snprintf(list + len, sizeof list - len, "%s%%%s", j ? ", " : "",
				                        g->values[g->params[j]].name);
			errorf("--input %s: graph @%s has no parameter %%%s (%s%s)", o.inputs[k].name, g->name,
			       o.inputs[k].name, nparams ? "its parameters: " : "it has no parameters", list);
			goto done;
		}
		if (inp[i]) {
			errorf("--input %s is given twice", o.inputs[k].name);
			goto done;
		}
		st = fj_npy_read(ctx, o.inputs[k].value, &in[i]);
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		inp[i] = &in[i];
		origin[i] = o.inputs[k].value;
	}

	double c0 = now_ms();
	st = exec_create(ctx, &exr, g, &prog);
	double compile_cold = now_ms() - c0;
	if (st == FJ_OK)
		st = fj_rt_exec_bind(prog, inp, origin, o.dims, o.ndims);
	if (st != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	/* seeded random data for the others */
	int64_t *bounds = calloc(nparams ? nparams : 1, sizeof *bounds);
	if (!bounds) {
		errorf("out of memory");
		goto done;
	}
	fj_dim *bdims = calloc(nparams ? nparams : 1, sizeof *bdims);
	if (!bdims) {
		free(bounds);
		errorf("out of memory");
		goto done;
	}
	index_bound_dims(ctx, g, bdims);
	index_bounds(g->module, prog, bdims, nparams, bounds);
	free(bdims);
	for (uint32_t i = 0; i < nparams; i++) {
		if (inp[i])
			continue;
		const fj_value *pv = &g->values[g->params[i]];
		st = fj_rt_tensor_alloc(ctx, &in[i], pv->type.dtype, pv->type.rank,
		                        fj_rt_exec_value_dims(prog, g->params[i]));
		if (st != FJ_OK) {
			free(bounds);
			report(ctx, st);
			goto done;
		}
		fill_random(&in[i], o.seed, pv->name, bounds[i]);
		inp[i] = &in[i];
	}
	free(bounds);

	st = fj_rt_exec_run(prog, inp, NULL, out, NULL);
	if (st != FJ_OK) {
		report(ctx, st);
		goto done;
	}

	/* names of the outputs */
	for (uint32_t k = 0; k < nres; k++) {
		stems[k] = malloc(STEM_MAX);
		if (!stems[k]) {
			errorf("out of memory");
			goto done;
		}
		output_stem(g, k, (const char *const *)stems, stems[k]);
	}

	bool check_ok = true, aten_ok = true, f64_all_ok = true;
	if (o.check) {
		st = fj_rt_program_create(ctx, g, FJ_RT_EXEC_ATEN, &ref);
		if (st == FJ_OK)
			st = fj_rt_program_bind(ref, inp, origin, o.dims, o.ndims);
		if (st == FJ_OK)
			st = fj_rt_program_run(ref, inp, refout);
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		for (uint32_t k = 0; k < nres; k++) {
			bool placed;
			relerr[k] = fj_rt_rel_l2(&out[k], &refout[k], &placed);
			if (!placed || !(relerr[k] <= fj_rt_tolerance(out[k].dtype)))
				aten_ok = false;
		}
	}
	if (o.check64) {
		/* the graph in f64 on aten, then its perturbed copies for the scales */
		char name64[STEM_MAX];
		fj_graph *g64;
		st = add_f64_graph(m, g->name, name64, &g64);
		if (st == FJ_OK)
			st = run64(ctx, m, g64, inp, &o, 0, &r64);
		if (st == FJ_OK && (!(ptol = tol_walk(g, NULL)) || !(scale = calloc(nres + 1, sizeof *scale))))
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		for (unsigned smp = 1; st == FJ_OK && smp <= CHECK64_SAMPLES; smp++) {
			phase p = {0};
			if ((st = run64(ctx, m, g64, inp, &o, smp, &p)) == FJ_OK)
				add_scales(&p, r64.out, nres, scale);
			phase_free(&p);
		}
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
		for (uint32_t k = 0; k < nres; k++) {
			v64[k] = f64_judge(&out[k], &r64.out[k], scale[k], ptol[g->results[k]]);
			f64_all_ok &= f64_ok(&v64[k]);
		}
	}
	check_ok = aten_ok && f64_all_ok;

	bench_result br = {0};
	if (o.bench) {
		st = bench(prog, inp, out, &br);
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
	}
	double compile_warm = -1;
	if (o.bench || o.json) {
		fj_rt_exec *again = NULL;
		double w0 = now_ms();
		st = exec_create(ctx, &exr, g, &again);
		compile_warm = now_ms() - w0;
		fj_rt_exec_destroy(again);
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
	}

	/* outputs: every file to a temporary first, renamed when all are written */
	if (o.outdir && check_ok) {
		if (!ensure_dir(o.outdir)) {
			errorf("--output-dir %s: cannot create the directory: %s", o.outdir,
			       errno ? strerror(errno) : "not a directory");
			goto done;
		}
		for (uint32_t k = 0; k < nres; k++) {
			size_t len = strlen(o.outdir) + strlen(stems[k]) + 8;
			paths[k] = malloc(len);
			if (!paths[k]) {
				errorf("out of memory");
				goto done;
			}
			snprintf(paths[k], len, "%s/%s.npy", o.outdir, stems[k]);
			st = fj_npy_write_temp(ctx, paths[k], &out[k], &tmps[k]);
			if (st != FJ_OK) {
				report(ctx, st);
				goto done;
			}
		}
		for (uint32_t k = 0; k < nres; k++) {
			st = fj_npy_commit(ctx, tmps[k], paths[k]);
			tmps[k] = NULL;
			if (st != FJ_OK) {
				report(ctx, st);
				goto done;
			}
		}
	}

	if (o.json) {
		FILE *f = stdout;
		fputs("{\"graph\": ", f);
		json_str(f, g->name);
		fprintf(f, ", \"executor\": \"%s\", \"outputs\": [", exname);
		for (uint32_t k = 0; k < nres; k++) {
			fprintf(f, "%s{\"name\": ", k ? ", " : "");
			json_str(f, stems[k]);
			fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", fj_dtype_name(out[k].dtype));
			for (int d = 0; d < out[k].rank; d++)
				fprintf(f, "%s%lld", d ? ", " : "", (long long)out[k].dims[d]);
			fputc(']', f);
			if (o.outdir && check_ok) {
				fputs(", \"file\": ", f);
				json_str(f, paths[k]);
			}
			if (o.check) {
				fputs(", \"rel_err\": ", f);
				json_num(f, relerr[k]);
			}
			if (o.check64)
				f64_json(f, &v64[k]);
			fputc('}', f);
		}
		fputs("], \"compile_ms\": {\"cold\": ", f);
		json_num(f, compile_cold);
		fputs(", \"warm\": ", f);
		json_num(f, compile_warm);
		fputc('}', f);
		if (o.bench) {
			double gbps = br.bytes / (br.median_ms * 1e-3) / 1e9;
			double cgbps = br.bytes / (br.copy_ms * 1e-3) / 1e9;
			fputs(", \"bench\": {\"median_ms\": ", f);
			json_num(f, br.median_ms);
			fprintf(f, ", \"bytes\": %zu, \"gbps\": ", br.bytes);
			json_num(f, gbps);
			fputs(", \"memcpy_gbps\": ", f);
			json_num(f, cgbps);
			fputs(", \"memcpy_ratio\": ", f);
			json_num(f, br.copy_ms / br.median_ms);
			fputc('}', f);
		}
		fputs("}\n", f);
	} else {
		FILE *f = stdout;
		fj_rt_exec_info info = fj_rt_exec_info_of(prog);
		if (use_nv)
			fprintf(f, "@%s on nvptx (%s, %s; %u fused kernels), seed %llu\n", g->name, info.device, info.target,
			        info.kernels, (unsigned long long)o.seed);
		else if (ex == &fj_rt_host_executor)
			fprintf(f, "@%s on host (%d threads; fused kernels), seed %llu\n", g->name, info.threads,
			        (unsigned long long)o.seed);
		else
			fprintf(f, "@%s on aten (reference, one thread), seed %llu\n", g->name, (unsigned long long)o.seed);
		for (uint32_t i = 0; i < nparams; i++) {
			char ty[300];
			fj_rt_tensor_type_str(&in[i], ty, sizeof ty);
			fprintf(f, "input %%%s: %s (%s%s)\n", g->values[g->params[i]].name, ty,
			        origin[i] ? "from " : "random", origin[i] ? origin[i] : "");
		}
		for (uint32_t k = 0; k < nres; k++) {
			char ty[300];
			fj_rt_tensor_type_str(&out[k], ty, sizeof ty);
			fj_vid v = g->results[k];
			if (g->values[v].kind == FJ_VK_LITERAL || strcmp(stems[k], g->values[v].name ? g->values[v].name : "") != 0)
				fprintf(f, "output %u (%s): %s\n", k, stems[k], ty);
			else
				fprintf(f, "output %u %%%s: %s\n", k, stems[k], ty);
			print_summary(f, &out[k]);
			if (o.check) {
				double tol = fj_rt_tolerance(out[k].dtype);
				bool ok = relerr[k] <= tol;
				if (isinf(relerr[k]))
					fprintf(f, "  vs aten: NaN/inf at different places: FAIL\n");
				else
					fprintf(f, "  vs aten: rel_err %.3g (tolerance %g): %s\n", relerr[k], tol, ok ? "ok" : "FAIL");
			}
			if (o.check64)
				f64_print(f, &v64[k]);
			if (o.outdir && check_ok)
				fprintf(f, "  written to %s\n", paths[k]);
		}
		if (o.bench || compile_warm >= 0)
			fprintf(f, "compile: cold %.3f ms (%u kernels compiled), warm %.3f ms\n", compile_cold,
			        fj_rt_exec_info_of(prog).compiled, compile_warm);
		if (o.bench)
			fprintf(f, "bench: median %.4f ms over %d runs, %zu bytes, %.3f GB/s; memcpy %.3f GB/s; "
			           "memcpy_ratio %.3f\n",
			        br.median_ms, br.reps, br.bytes, br.bytes / (br.median_ms * 1e-3) / 1e9,
			        br.bytes / (br.copy_ms * 1e-3) / 1e9, br.copy_ms / br.median_ms);
	}
	if (!check_ok) {
		fflush(stdout);
		check_failed(aten_ok, f64_all_ok, false, o.outdir != NULL);
		goto done;
	}
	rc = 0;
done:
	for (uint32_t k = 0; tmps && k < nres; k++)
		fj_npy_discard(tmps[k]);
	for (uint32_t i = 0; in && i < nparams; i++)
		fj_rt_tensor_free(&in[i]);
	for (uint32_t k = 0; k < nres; k++) {
		if (out)
			fj_rt_tensor_free(&out[k]);
		if (refout)
			fj_rt_tensor_free(&refout[k]);
		if (stems)
			free(stems[k]);
		if (paths)
			free(paths[k]);
	}
	free(in);
	free(inp);
	free(origin);
	free(out);
	free(refout);
	free(stems);
	free(paths);
	free(tmps);
	free(relerr);
	free(v64);
	free(scale);
	free(ptol);
	phase_free(&r64);
	fj_rt_exec_destroy(prog);
	fj_rt_program_destroy(ref);
	fj_nvptx_device_close(&dev); /* after the programs: their kernels live in it */
	fj_module_destroy(m);
	fj_context_destroy(ctx);
	for (size_t k = 0; o.inputs && k < o.ninputs; k++)
		free((char *)o.inputs[k].name);
	for (size_t k = 0; o.dims && k < o.ndims; k++)
		free((char *)o.dims[k].name);
	for (size_t k = 0; o.tangents && k < o.ntangents; k++)
		free((char *)o.tangents[k].name);
	free(o.inputs);
	free(o.dims);
	free(o.tangents);
	fflush(stdout);
	return rc;
}
