/* ab.c -- fj-bench-ab: two builds of fusejit timed against each other in
 * one process, run by run.
 *
 *   fj-bench-ab [--threads N] [--threads-b N] [--seconds S] [--flush MIB] [--offset B] [--json]
 *               LIB_A LIB_B GRAPH
 *
 * LIB_A and LIB_B are two builds' libfusejit.so (the same path twice: an
 * A/A run, the noise floor). Each is dlopen'ed on its own (RTLD_LOCAL: its
 * fj_* symbols stay out of the global scope, so each copy's calls bind to
 * itself; both share one libLLVM), compiles GRAPH's first graph for the
 * host executor in its own context (--threads: the programs' bound,
 * fj_compile_options.threads; default 0, all of the context's; --threads-b:
 * B's alone, so that the same library twice times two thread counts against
 * each other, as bench/matmul/run's two-thread scaling does), and runs it
 * on the same inputs (f32 and f64 uniform in [-1, 1), other types 0) into
 * its own preallocated outputs. Every input and output starts --offset B
 * bytes past a 64-byte boundary (default 0; glibc's malloc gives large
 * blocks 16: the kernels' streamed stores and vector loads meet a line
 * boundary inside a vector there). Then pairs of runs, A and B in turn (which
 * goes first alternates), for S seconds (default 10), after 3 warm-up
 * pairs; with --flush, a memcpy of MIB MiB before every run, as
 * fusejit-run --bench's copy baseline evicts the caches between its runs.
 *
 * Why: on a shared VM the speed of the machine drifts by 5-10 % from minute
 * to minute, so two builds timed by turns in separate processes (bench/run,
 * bench/matmul/run) differ by that much when they are the same. Timed a run
 * apart, both see the same moments: the median of the pairs' speed ratios
 * (B over A: above 1, B is faster) resolves ~0.5 % (Intel Xeon, Sapphire
 * Rapids, 2 vCPUs: an A/A run of a 1024^3 matmul, 250 pairs, gives 1.001,
 * quartiles 0.988 and 1.013).
 *
 * Prints one line: each build's median and fastest run (ms), the ratio's
 * median and quartiles, the pairs, and the relative L2 difference of the two
 * builds' f32 and f64 outputs (they should compute the same thing; NaNs
 * in the same places agree); with --json, one JSON object of the same
 * (a_ms, a_fastest_ms, b_ms, b_fastest_ms, speed, speed_q1, speed_q3,
 * pairs, outputs_differ: null where infinite). Exit status 1 with one message on any error.
 * It needs only the public header and the dynamic loader. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fusejit/fusejit.h"

enum { MAXT = 64, MAXPAIRS = 100000 };
#define USAGE                                                                                              \
	"usage: fj-bench-ab [--threads N] [--threads-b N] [--seconds S] [--flush MIB] [--offset B] [--json] LIB_A " \
	"LIB_B GRAPH"

typedef struct build {
	const char *path;
	fj_context *(*context_create)(fj_alloc_fn, void *);
	void (*context_destroy)(fj_context *);
	const char *(*context_error)(const fj_context *);
	fj_status (*module_parse_file)(fj_context *, const char *, fj_module **);
	void (*module_destroy)(fj_module *);
	void (*compile_options_init)(fj_compile_options *);
	fj_status (*compile)(fj_context *, const fj_module *, const fj_compile_options *, fj_program **);
	void (*program_destroy)(fj_program *);
	size_t (*program_count)(const fj_program *, fj_value_role);
	fj_status (*program_info)(const fj_program *, fj_value_role, size_t, fj_value_info *);
	fj_status (*program_run)(fj_program *, const fj_tensor *, size_t, fj_tensor *, size_t);
	fj_context *ctx;
	fj_program *prog;
	fj_tensor out[MAXT];
	double *ms;
} build;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("fj-bench-ab: error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* The library's own message: a diagnostic as fusejit-run prints it. */
static void die_lib(const build *b)
{
	fprintf(stderr, "%s\n", b->context_error(b->ctx));
	exit(1);
}

static void *sym(void *h, const char *path, const char *name)
{
	void *p = dlsym(h, name);
	if (!p)
		die("%s has no %s (not a libfusejit build?)", path, name);
	return p;
}

#define SYM(b, h, f) (*(void **)&(b)->f = sym(h, (b)->path, "fj_" #f))

static void load(build *b, const char *graph, int threads)
{
	void *h = dlopen(b->path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		die("%s", dlerror());
	SYM(b, h, context_create);
	SYM(b, h, context_destroy);
	SYM(b, h, context_error);
	SYM(b, h, module_parse_file);
	SYM(b, h, module_destroy);
	SYM(b, h, compile_options_init);
	SYM(b, h, compile);
	SYM(b, h, program_destroy);
	SYM(b, h, program_count);
	SYM(b, h, program_info);
	SYM(b, h, program_run);
	if (!(b->ctx = b->context_create(NULL, NULL)))
		die("%s: out of memory", b->path);
	fj_module *m;
	if (b->module_parse_file(b->ctx, graph, &m) != FJ_OK)
		die_lib(b);
	fj_compile_options o;
	b->compile_options_init(&o);
	o.executor = FJ_EXECUTOR_HOST;
	o.threads = threads;
	fj_status st = b->compile(b->ctx, m, &o, &b->prog);
	b->module_destroy(m);
	if (st != FJ_OK)
		die_lib(b);
}

/* A zeroed tensor of vi's type (one byte at least: data is never NULL),
 * `off` bytes past a 64-byte boundary (freed as data - off). */
static void alloc_tensor(fj_tensor *t, const fj_value_info *vi, const char *what, size_t off)
{
	memset(t, 0, sizeof *t);
	t->dtype = vi->dtype;
	t->rank = vi->rank;
	for (int k = 0; k < vi->rank; k++) {
		if (vi->sizes[k] < 0)
			die("%s %s has a symbolic size (%s): give a graph with static shapes", what, vi->name, vi->type);
		t->sizes[k] = vi->sizes[k];
	}
	size_t bytes = (off + (vi->bytes ? vi->bytes : 1) + 63) / 64 * 64;
	char *base = aligned_alloc(64, bytes);
	if (!base)
		die("out of memory allocating %s %s", what, vi->name);
	memset(base, 0, bytes);
	t->data = base + off;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

/* The element as a double (floats only: others are 0). */
static double get(const fj_tensor *t, size_t i)
{
	switch (t->dtype) {
	case FJ_TYPE_F64: return ((const double *)t->data)[i];
	case FJ_TYPE_F32: return ((const float *)t->data)[i];
	default: return 0;
	}
}

static size_t numel(const fj_tensor *t)
{
	size_t n = 1;
	for (int k = 0; k < t->rank; k++)
		n *= (size_t)t->sizes[k];
	return n;
}

static double arg_num(const char *opt, const char *v, double lo)
{
	char *end;
	double x = v ? strtod(v, &end) : 0;
	if (!v || *end || !(x >= lo))
		die("%s needs a number >= %g", opt, lo);
	return x;
}

static size_t arg_offset(const char *v)
{
	double b = arg_num("--offset", v, 0);
	if (b != (double)(size_t)b || b > 4095)
		die("--offset needs a whole number of bytes from 0 to 4095");
	return (size_t)b;
}

int main(int argc, char **argv)
{
	int threads = 0, threads_b = -1;
	double seconds = 10, flush_mib = 0;
	size_t off = 0;
	bool json = false;
	const char *pos[3];
	int npos = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads"))
			threads = (int)arg_num("--threads", i + 1 < argc ? argv[++i] : NULL, 0);
		else if (!strcmp(argv[i], "--threads-b"))
			threads_b = (int)arg_num("--threads-b", i + 1 < argc ? argv[++i] : NULL, 0);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = arg_num("--seconds", i + 1 < argc ? argv[++i] : NULL, 0.1);
		else if (!strcmp(argv[i], "--flush"))
			flush_mib = arg_num("--flush", i + 1 < argc ? argv[++i] : NULL, 0);
		else if (!strcmp(argv[i], "--offset"))
			off = arg_offset(i + 1 < argc ? argv[++i] : NULL);
		else if (!strcmp(argv[i], "--json"))
			json = true;
		else if (argv[i][0] == '-' || npos == 3)
			die(USAGE);
		else
			pos[npos++] = argv[i];
	}
	if (npos != 3)
		die(USAGE);
	build bs[2] = {{.path = pos[0]}, {.path = pos[1]}};
	for (int j = 0; j < 2; j++)
		load(&bs[j], pos[2], j == 1 && threads_b >= 0 ? threads_b : threads);
	size_t nin = bs[0].program_count(bs[0].prog, FJ_ROLE_INPUT);
	size_t nout = bs[0].program_count(bs[0].prog, FJ_ROLE_OUTPUT);
	if (nin > MAXT || nout > MAXT)
		die("%s: more than %d inputs or outputs", pos[2], MAXT);
	if (bs[1].program_count(bs[1].prog, FJ_ROLE_INPUT) != nin || bs[1].program_count(bs[1].prog, FJ_ROLE_OUTPUT) != nout)
		die("the two builds see different signatures of %s", pos[2]);
	static fj_tensor in[MAXT];
	unsigned seed = 12345;
	for (size_t i = 0; i < nin; i++) {
		fj_value_info vi;
		if (bs[0].program_info(bs[0].prog, FJ_ROLE_INPUT, i, &vi) != FJ_OK)
			die_lib(&bs[0]);
		alloc_tensor(&in[i], &vi, "input", off);
		for (size_t k = 0, n = numel(&in[i]); k < n; k++) {
			seed = seed * 1103515245u + 12345u;
			double x = (double)(seed >> 8) / (1u << 24) * 2 - 1;
			if (vi.dtype == FJ_TYPE_F32)
				((float *)in[i].data)[k] = (float)x;
			else if (vi.dtype == FJ_TYPE_F64)
				((double *)in[i].data)[k] = x;
		}
	}
	for (int j = 0; j < 2; j++)
		for (size_t i = 0; i < nout; i++) {
			fj_value_info vi;
			if (bs[j].program_info(bs[j].prog, FJ_ROLE_OUTPUT, i, &vi) != FJ_OK)
				die_lib(&bs[j]);
			alloc_tensor(&bs[j].out[i], &vi, "output", off);
		}
	size_t fbytes = (size_t)(flush_mib * (1 << 20));
	char *fsrc = fbytes ? malloc(fbytes) : NULL, *fdst = fbytes ? malloc(fbytes) : NULL;
	if (fbytes && (!fsrc || !fdst))
		die("out of memory allocating the flush buffers");
	if (fbytes) {
		memset(fsrc, 1, fbytes);
		memset(fdst, 2, fbytes);
	}
	for (int j = 0; j < 2; j++)
		if (!(bs[j].ms = malloc(MAXPAIRS * sizeof(double))))
			die("out of memory");
	double *ratio = malloc(MAXPAIRS * sizeof(double));
	if (!ratio)
		die("out of memory");
	int n = -3; /* 3 warm-up pairs */
	double t0 = now_ms();
	while (n < MAXPAIRS && (n < 0 || now_ms() - t0 < seconds * 1e3)) {
		for (int s = 0; s < 2; s++) {
			build *b = &bs[(s + (n & 1)) & 1]; /* A first in even pairs, B in odd ones */
			if (fbytes)
				memcpy(fdst, fsrc, fbytes);
			double a = now_ms();
			if (b->program_run(b->prog, in, nin, b->out, nout) != FJ_OK)
				die_lib(b);
			if (n >= 0)
				b->ms[n] = now_ms() - a;
		}
		if (n >= 0)
			ratio[n] = bs[0].ms[n] / bs[1].ms[n];
		n++;
		if (n == 0)
			t0 = now_ms();
	}
	double d2 = 0, r2 = 0; /* the outputs: B against A; a NaN or infinity in one alone differs infinitely */
	for (size_t i = 0; i < nout; i++)
		for (size_t k = 0, e = numel(&bs[0].out[i]); k < e; k++) {
			double x = get(&bs[0].out[i], k), y = get(&bs[1].out[i], k);
			if (!isfinite(x) || !isfinite(y)) {
				bool same = (isnan(x) && isnan(y)) || x == y;
				d2 += same ? 0 : INFINITY;
				continue;
			}
			d2 += (x - y) * (x - y);
			r2 += x * x;
		}
	for (int j = 0; j < 2; j++)
		qsort(bs[j].ms, (size_t)n, sizeof(double), cmp_double);
	qsort(ratio, (size_t)n, sizeof(double), cmp_double);
	double diff = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
	char dtext[32] = "null"; /* JSON has no infinity */
	if (isfinite(diff))
		snprintf(dtext, sizeof dtext, "%.6g", diff);
	if (json)
		printf("{\"a_ms\": %.6g, \"a_fastest_ms\": %.6g, \"b_ms\": %.6g, \"b_fastest_ms\": %.6g, \"speed\": %.6g, "
		       "\"speed_q1\": %.6g, \"speed_q3\": %.6g, \"pairs\": %d, \"outputs_differ\": %s}\n",
		       bs[0].ms[n / 2], bs[0].ms[0], bs[1].ms[n / 2], bs[1].ms[0], ratio[n / 2], ratio[n / 4],
		       ratio[3 * n / 4], n, dtext);
	else
		printf("A %.3f ms (fastest %.3f) | B %.3f ms (fastest %.3f) | B/A speed %.3f (quartiles %.3f %.3f) | %d pairs | "
		       "outputs differ by %.2g\n",
		       bs[0].ms[n / 2], bs[0].ms[0], bs[1].ms[n / 2], bs[1].ms[0], ratio[n / 2], ratio[n / 4],
		       ratio[3 * n / 4], n, diff);
	for (int j = 0; j < 2; j++) {
		for (size_t i = 0; i < nout; i++)
			free((char *)bs[j].out[i].data - off);
		bs[j].program_destroy(bs[j].prog);
		bs[j].context_destroy(bs[j].ctx);
		free(bs[j].ms);
	}
	for (size_t i = 0; i < nin; i++)
		free((char *)in[i].data - off);
	free(ratio);
	free(fsrc);
	free(fdst);
	return 0;
}
