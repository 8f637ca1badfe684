/* soak.c -- fj-api-soak: one context, many distinct compiles and one graph
 * run many times, through the public API (issue 17, item 5).
 *
 *   fj-api-soak [--distinct=N] [--repeats=M] [--recompile-every=K]
 *               [--disk=off|on|both] [--kernel-cache-mb=C] [--seed=S]
 *               [--threads=T] [--no-rss-bounds] [-v]
 *
 * Per disk-cache mode (off: no disk cache; on: a fresh temporary folder,
 * capped at 4 MiB so that its eviction runs too), in one fresh context:
 *
 * (a) N distinct small graphs, generated from the seed: shapes, ops,
 *     literal values and dtypes differ, so each is a compile of its own
 *     (the run fails unless LLVM generated at least one kernel per graph).
 *     Pointwise chains, broadcasts against extra inputs, row reductions,
 *     softmax, matmul, transposes, f32 and f64. Each runs on the host
 *     executor, and every output must match the f64 reference
 *     (fj_reference_f64: --check=f64 of IR.md §5, which random graphs
 *     need: their cancellations defeat a plain relative error); one graph
 *     in 8 compiles for training and its gradients must match too. The text is parsed with
 *     fj_module_parse; one graph in 4 is printed and parsed again.
 *     A program compiled before (a) stays alive through it and runs every
 *     25 graphs: evictions must never free the code it uses.
 * (b) One graph run M times, recompiled (a destroy and a compile: memory
 *     cache hits) every K runs; outputs alternate between the caller's
 *     buffers and library-owned ones. Every run must equal the first
 *     bit for bit, and every 1000th the aten result.
 * (c) M/10 runs of a graph with a symbolic batch, its size changing every
 *     run (per-shape state must not pile up), each against aten.
 * (d) With --threads=T > 1: N more distinct graphs, T threads at once
 *     (compiles, evictions and destroys racing; for ThreadSanitizer).
 *
 * The in-memory kernel cache is capped at C MiB (option kernel_cache_mb,
 * default 8 here) so that it evicts during (a); afterwards graph 0 is
 * compiled again and must be compiled by LLVM afresh (disk off): it was
 * evicted, and the recompiled graph still matches the f64 reference.
 *
 * Resident memory (/proc/self/statm) and open file descriptors
 * (/proc/self/fd) are sampled. The run fails when, after the warm-up (the
 * first tenth of each phase; in (a) at least 20 graphs, or half of
 * fewer than 40), RSS grows by more
 * than the bound below, or when the fds open after the warm-up or after
 * destroying the context differ from before.
 * Bounds: (a) C MiB (the cache cap, filled after the warm-up) + 48 MiB
 * (malloc's per-thread arenas and free lists, LLVM's per-compile
 * allocations returned to malloc but not to the OS, the JIT's code pages;
 * measured at about 10-20 MiB); (b) and (c) 16 MiB (no compiles: only
 * fragmentation). In the full mode (scripts/soak.sh: 10,000 graphs,
 * 100,000 runs) a leak of 7 KiB per graph or 200 bytes per run crosses
 * them; the cache without a cap grew by about 40 KiB per graph. In the
 * short mode the check that graph 0 was evicted catches an unbounded
 * cache instead.
 * --no-rss-bounds prints the figures without judging them: under ASan,
 * whose quarantine keeps up to 256 MiB of freed memory resident by design
 * (the fds are still checked, and LeakSanitizer checks for leaks at exit).
 * The figures are printed: RSS at start, after the warm-up, at the end and
 * its peak, fds, graphs, compiles and runs done, and the wall time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw, mkdtemp */
#endif
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fusejit/fusejit.h"
#include "../common/splitmix.h"

static atomic_int fails;
static int verbose, rss_bounds = 1, nthreads = 1;
static uint64_t seed = 1;
static long ndistinct = 300, nrepeats = 3000, recompile_every = 100, cache_mb = 8;

#define FAIL(...)                                            \
	do {                                                 \
		fprintf(stderr, "soak: FAIL: " __VA_ARGS__); \
		fputc('\n', stderr);                         \
		fails++;                                     \
	} while (0)

/* ---- random numbers ---- */

static _Thread_local uint64_t rs; /* per thread: (d) generates graphs on several */
static uint64_t rnd(void) { return fj_test_splitmix(&rs); }
static int pick(int k) { return (int)(rnd() % (uint64_t)k); }
static double unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

/* ---- memory and descriptors ---- */

static double rss_mib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long size = 0, res = 0;
	if (f) {
		if (fscanf(f, "%ld %ld", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (double)res * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct sampler {
	double start, warm, end, peak;
	int fd_start, fd_warm, fd_end;
} sampler;

static void sample(sampler *s, double *at)
{
	double r = rss_mib();
	if (r > s->peak)
		s->peak = r;
	if (at)
		*at = r;
}

/* After iteration i of a phase: the warm-up figures (RSS, fds) at the
 * warm-up's last one, else RSS every `every` iterations (the peak). */
static void sample_after(sampler *s, long i, long warm, long every)
{
	if (i + 1 == warm) {
		sample(s, &s->warm);
		s->fd_warm = fd_count();
	} else if (i % every == 0) {
		sample(s, NULL);
	}
}

/* ---- graphs ---- */

typedef struct text {
	char s[16384];
	size_t n;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		t->n += (size_t)k < sizeof t->s - t->n ? (size_t)k : sizeof t->s - t->n - 1;
}

/* Graph `index` as .fj text, from its own seed; *training: one in 8. */
static void gen_graph(long index, text *out, bool *training)
{
	rs = seed * 0x100000001b3ull + (uint64_t)index * 0x9e3779b97f4a7c15ull;
	const char *dt = pick(6) == 0 ? "f64" : "f32";
	int r = 1 + pick(12), c = 1 + pick(12);
	text params = {.n = 0}, body = {.n = 0};
	put(&params, "graph @main(%%x: %s[%d,%d]", dt, r, c);
	int v = 0, np = 0, nops = 2 + pick(6);
	bool reduced = false, column = false;
	put(&body, "  %%v0 = aten.mul(%%x, %.6g)\n", 0.5 + (double)(index % 997) / 997.0);
	for (int k = 0; k < nops; k++) {
		int op = pick(10);
		if (op <= 2) {
			static const char *const un[] = {"aten.tanh", "aten.sigmoid", "aten.neg", "aten.relu", "aten.abs",
			                                 "aten.sin",  "aten.cos",     "aten.silu", "aten.gelu"};
			put(&body, "  %%v%d = %s(%%v%d)\n", v + 1, un[pick(9)], v);
		} else if (op == 3) {
			static const char *const bin[] = {"aten.add", "aten.mul", "aten.sub"};
			put(&body, "  %%v%d = %s(%%v%d, %.5g)\n", v + 1, bin[pick(3)], v, unit() * 2.0);
		} else if (op == 4) { /* a broadcast against a new input */
			static const char *const bin[] = {"aten.add", "aten.mul", "aten.maximum", "aten.sub"};
			/* Not [r,1]: a row constant before a softmax or a row statistic
			 * subtracted has a true gradient of 0, which the f64 check
			 * does not judge (its rounding leftovers fail it); nor a
			 * transpose after a [c] one, which makes it a row constant. */
			if (pick(2)) {
				put(&params, ", %%p%d: %s[%d]", np, dt, c);
				column = true;
			} else
				put(&params, ", %%p%d: %s[%d,%d]", np, dt, r, c);
			put(&body, "  %%v%d = %s(%%v%d, %%p%d)\n", v + 1, bin[pick(4)], v, np++);
		} else if (op == 5 && !reduced) { /* a row statistic, subtracted */
			static const char *const red[] = {"aten.sum", "aten.mean", "aten.amax"};
			put(&body, "  %%s%d = %s(%%v%d) {dims=[1], keepdim=true}\n", v, red[pick(3)], v);
			put(&body, "  %%v%d = aten.sub(%%v%d, %%s%d)\n", v + 1, v, v);
			reduced = true;
		} else if (op == 6) {
			put(&body, "  %%v%d = aten._softmax(%%v%d) {dim=-1, half_to_float=false}\n", v + 1, v);
		} else if (op == 7) { /* matmul by a new input */
			int c2 = 1 + pick(12);
			put(&params, ", %%p%d: %s[%d,%d]", np, dt, c, c2);
			put(&body, "  %%v%d = aten.mm(%%v%d, %%p%d)\n", v + 1, v, np++);
			c = c2;
		} else if (op == 8 && !column) {
			put(&body, "  %%v%d = aten.t(%%v%d)\n", v + 1, v);
			int t = r;
			r = c;
			c = t;
		} else {
			put(&body, "  %%v%d = aten.mul(%%v%d, %%v%d)\n", v + 1, v, v);
		}
		v++;
	}
	bool two = pick(3) == 0;
	if (two)
		put(&body, "  %%o = aten.sum(%%v%d) {dims=[0]}\n", v);
	*training = pick(8) == 0;
	out->n = 0;
	put(out, "%s) {\n%s  return %%v%d%s\n}\n", params.s, body.s, v, two ? ", %o" : "");
}

/* ---- tensors ---- */

typedef struct tensors {
	fj_tensor t[16];
	size_t n;
} tensors;

static void free_tensors(tensors *ts)
{
	for (size_t i = 0; i < ts->n; i++) {
		if (ts->t[i].flags & FJ_TENSOR_OWNED)
			fj_tensor_release(&ts->t[i]);
		else
			free(ts->t[i].data);
	}
	ts->n = 0;
}

/* Random inputs (uniform in [-1, 1]) for the values of p's `role`. */
static bool make_inputs(const fj_program *p, fj_value_role role, tensors *ts)
{
	ts->n = fj_program_count(p, role);
	if (ts->n > 16)
		return false;
	for (size_t i = 0; i < ts->n; i++) {
		fj_value_info info;
		fj_tensor *t = &ts->t[i];
		fj_tensor_init(t);
		if (fj_program_info(p, role, i, &info) != FJ_OK)
			return false;
		t->dtype = info.dtype;
		t->rank = info.rank;
		memcpy(t->sizes, info.sizes, sizeof t->sizes);
		t->data = malloc(info.bytes ? info.bytes : 1);
		int64_t n = 1;
		for (int d = 0; d < info.rank; d++)
			n *= info.sizes[d];
		for (int64_t k = 0; k < n; k++)
			fj_tensor_set_f64(t, k, unit());
	}
	return true;
}

/* Empty descriptors: the run allocates the outputs. */
static void owned_outputs(const fj_program *p, fj_value_role role, tensors *ts)
{
	ts->n = fj_program_count(p, role);
	for (size_t i = 0; i < ts->n && i < 16; i++)
		fj_tensor_init(&ts->t[i]);
}

/* Outputs (or gradients) against the aten executor's: IR.md §5's relative
 * L2 error within the dtype's tolerance. */
static bool compare(const char *what, long index, const tensors *got, const tensors *want)
{
	bool ok = got->n == want->n;
	for (size_t i = 0; ok && i < got->n; i++) {
		int placed = 1;
		double e = fj_check_error(FJ_CHECK_ATEN, &got->t[i], &want->t[i], 0, &placed);
		double tol = fj_check_tolerance(FJ_CHECK_ATEN, got->t[i].dtype);
		if (!placed || !(e <= tol)) {
			FAIL("graph %ld: %s %zu: relative error %g over %g", index, what, i, e, tol);
			ok = false;
		}
	}
	return ok;
}

/* got[0..n) against the f64 reference's values first .. first + n
 * (--check=f64, IR.md §5: random graphs cancel, and only a reference that
 * knows its own rounding judges them fairly). */
static bool compare_f64(const char *what, long index, const tensors *got, const fj_reference *r, size_t first)
{
	bool ok = first + got->n <= fj_reference_count(r);
	for (size_t i = 0; ok && i < got->n; i++) {
		fj_tensor ref;
		double scale = 0, tol = 0;
		int placed = 1;
		fj_tensor_init(&ref);
		ok = fj_reference_value(r, first + i, got->t[i].dtype, &ref, &scale, &tol) == FJ_OK &&
		     ref.rank == got->t[i].rank && memcmp(ref.sizes, got->t[i].sizes, sizeof ref.sizes) == 0;
		double e = ok ? fj_check_error(FJ_CHECK_F64, &got->t[i], &ref, scale, &placed) : INFINITY;
		if (!placed || !(e <= tol)) {
			FAIL("graph %ld: %s %zu: error %g against f64 over %g", index, what, i, e, tol);
			ok = false;
		}
	}
	return ok;
}

/* ---- (a) distinct graphs ---- */

static fj_status compile(fj_context *ctx, const fj_module *m, fj_executor ex, bool training, fj_program **p)
{
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = ex;
	o.training = training;
	return fj_compile(ctx, m, &o, p);
}

/* Parses text and compiles it for host (*p) and aten (*a); false (with a
 * failure recorded) when any step fails, nothing left to free then. */
static bool open_pair(fj_context *ctx, const char *text, const char *file, fj_module **m, fj_program **p,
                      fj_program **a)
{
	*m = NULL;
	*p = *a = NULL;
	if (fj_module_parse(ctx, text, strlen(text), file, m) == FJ_OK &&
	    compile(ctx, *m, FJ_EXECUTOR_HOST, false, p) == FJ_OK && compile(ctx, *m, FJ_EXECUTOR_ATEN, false, a) == FJ_OK)
		return true;
	FAIL("%s: %s", file, fj_context_error(ctx));
	fj_program_destroy(*p);
	fj_module_destroy(*m);
	return false;
}

/* Runs m on host (forward, and backward when training) and compares with
 * the f64 reference on the same inputs and tangents. */
static bool check_graph(fj_context *ctx, const fj_module *m, long index, bool training, uint32_t *compiled)
{
	fj_program *h = NULL;
	if (compile(ctx, m, FJ_EXECUTOR_HOST, training, &h) != FJ_OK) {
		FAIL("graph %ld: compile: %s", index, fj_context_error(ctx));
		return false;
	}
	fj_program_stats st;
	fj_program_stats_init(&st);
	fj_program_stats_get(h, &st);
	*compiled = st.compiled;
	tensors in = {.n = 0}, out = {.n = 0}, tg = {.n = 0}, grads = {.n = 0};
	bool ok = make_inputs(h, FJ_ROLE_INPUT, &in);
	owned_outputs(h, FJ_ROLE_OUTPUT, &out);
	fj_saved *saved = NULL;
	if (ok && training) {
		ok = fj_program_forward(h, in.t, in.n, out.t, out.n, &saved) == FJ_OK && make_inputs(h, FJ_ROLE_TANGENT, &tg);
		owned_outputs(h, FJ_ROLE_GRADIENT, &grads);
		ok = ok && fj_program_backward(h, saved, tg.t, tg.n, grads.t, grads.n) == FJ_OK;
	} else if (ok) {
		ok = fj_program_run(h, in.t, in.n, out.t, out.n) == FJ_OK;
	}
	if (!ok)
		FAIL("graph %ld: run: %s", index, fj_context_error(ctx));
	fj_reference_options ro;
	fj_reference_options_init(&ro);
	ro.training = training;
	fj_reference *r = NULL;
	if (ok && fj_reference_f64(ctx, m, &ro, in.t, in.n, tg.t, tg.n, &r) != FJ_OK) {
		FAIL("graph %ld: f64 reference: %s", index, fj_context_error(ctx));
		ok = false;
	}
	ok = ok && compare_f64("output", index, &out, r, 0);
	ok = ok && (!training || compare_f64("gradient", index, &grads, r, out.n));
	fj_reference_destroy(r);
	fj_saved_destroy(saved);
	free_tensors(&in);
	free_tensors(&out);
	free_tensors(&tg);
	free_tensors(&grads);
	fj_program_destroy(h);
	return ok;
}

/* The module of graph `index`: parsed, and one in 4 printed and parsed again. */
static fj_module *graph_module(fj_context *ctx, long index, bool *training, text *t)
{
	gen_graph(index, t, training);
	fj_module *m = NULL;
	if (fj_module_parse(ctx, t->s, t->n, "soak.fj", &m) != FJ_OK) {
		FAIL("graph %ld: parse: %s\n%s", index, fj_context_error(ctx), t->s);
		return NULL;
	}
	if (index % 4 == 3) { /* printed and parsed again */
		char *printed = NULL;
		size_t len = 0;
		fj_module *m2 = NULL;
		if (fj_module_print(ctx, m, &printed, &len) != FJ_OK ||
		    fj_module_parse(ctx, printed, len, "printed.fj", &m2) != FJ_OK)
			FAIL("graph %ld: print and parse: %s", index, fj_context_error(ctx));
		fj_string_free(ctx, printed);
		fj_module_destroy(m);
		m = m2;
	}
	return m;
}

static void print_figures(const char *what, const sampler *s, long done, double secs)
{
	printf("soak: %s: %ld done in %.1f s; RSS MiB start %.1f, after warm-up %.1f, end %.1f, peak %.1f; "
	       "fds start %d, after warm-up %d, end %d\n",
	       what, done, secs, s->start, s->warm, s->end, s->peak, s->fd_start, s->fd_warm, s->fd_end);
}

static void check_bounds(const char *what, const sampler *s, double bound)
{
	if (rss_bounds && s->end - s->warm > bound)
		FAIL("%s: RSS grew by %.1f MiB after the warm-up (bound %.1f MiB)", what, s->end - s->warm, bound);
	if (s->fd_end != s->fd_warm)
		FAIL("%s: %d fds open after the warm-up, %d at the end", what, s->fd_warm, s->fd_end);
}

/* The graph of (b) and (c): a batch of BATCH rows (a size or a symbol). */
#define MLP_SOFTMAX(BATCH)                                                   \
	"graph @main(%x: f32[" BATCH ",64], %w: f32[64,48], %b: f32[48]) {\n"    \
	"  %h = aten.mm(%x, %w)\n"                                              \
	"  %hb = aten.add(%h, %b)\n"                                            \
	"  %g = aten.gelu(%hb) {approximate=\"tanh\"}\n"                        \
	"  %p = aten._softmax(%g) {dim=-1, half_to_float=false}\n"              \
	"  %s = aten.sum(%p) {dims=[0]}\n"                                      \
	"  return %p, %s\n"                                                     \
	"}\n"

static const char repeated[] = MLP_SOFTMAX("32");

static bool same_bits(const tensors *a, const tensors *b, const fj_program *p)
{
	for (size_t i = 0; i < a->n; i++) {
		fj_value_info info;
		fj_program_info(p, FJ_ROLE_OUTPUT, i, &info);
		if (memcmp(a->t[i].data, b->t[i].data, info.bytes) != 0)
			return false;
	}
	return true;
}

/* A program compiled before (a) and kept through it: its kernels are the
 * oldest in the cache, first in line for eviction, but held, so their code
 * must stay. It runs every 25 graphs and must give the first run's bits. */
typedef struct live {
	fj_module *m;
	fj_program *p;
	tensors in, first, out;
	long runs;
} live;

static void live_start(fj_context *ctx, live *l)
{
	memset(l, 0, sizeof *l);
	rs = seed ^ 0x11fe;
	if (fj_module_parse(ctx, repeated, strlen(repeated), "live.fj", &l->m) != FJ_OK ||
	    compile(ctx, l->m, FJ_EXECUTOR_HOST, false, &l->p) != FJ_OK || !make_inputs(l->p, FJ_ROLE_INPUT, &l->in) ||
	    !make_inputs(l->p, FJ_ROLE_OUTPUT, &l->first) || !make_inputs(l->p, FJ_ROLE_OUTPUT, &l->out) ||
	    fj_program_run(l->p, l->in.t, l->in.n, l->first.t, l->first.n) != FJ_OK)
		FAIL("live program: %s", fj_context_error(ctx));
}

static void live_check(fj_context *ctx, live *l, long index)
{
	if (!l->p)
		return;
	if (fj_program_run(l->p, l->in.t, l->in.n, l->out.t, l->out.n) != FJ_OK)
		FAIL("live program, after graph %ld: %s", index, fj_context_error(ctx));
	else if (!same_bits(&l->out, &l->first, l->p))
		FAIL("live program, after graph %ld: the outputs changed", index);
	l->runs++;
}

static void live_end(live *l)
{
	free_tensors(&l->in);
	free_tensors(&l->first);
	free_tensors(&l->out);
	fj_program_destroy(l->p);
	fj_module_destroy(l->m);
}

static void distinct(fj_context *ctx, live *l)
{
	sampler s = {.peak = 0};
	sample(&s, &s.start);
	s.fd_start = fd_count();
	long warm = ndistinct / 10 >= 20 ? ndistinct / 10 : ndistinct >= 40 ? 20 : (ndistinct + 1) / 2;
	long graphs = 0, trained = 0, fresh = 0;
	double t0 = now();
	text t;
	for (long i = 0; i < ndistinct; i++) {
		bool training = false;
		fj_module *m = graph_module(ctx, i, &training, &t);
		uint32_t compiled = 0;
		if (m && check_graph(ctx, m, i, training, &compiled)) {
			graphs++;
			trained += training;
		} else if (m && verbose) {
			fprintf(stderr, "%s", t.s);
		}
		fresh += compiled > 0;
		fj_module_destroy(m);
		if (i % 25 == 24)
			live_check(ctx, l, i);
		sample_after(&s, i, warm, 16);
		if (verbose && (i + 1) % (ndistinct / 10 > 0 ? ndistinct / 10 : 1) == 0)
			printf("soak: distinct %ld: RSS %.1f MiB, fds %d\n", i + 1, rss_mib(), fd_count());
	}
	sample(&s, &s.end);
	s.fd_end = fd_count();
	print_figures("distinct graphs", &s, graphs, now() - t0);
	printf("soak: distinct graphs: %ld trained, %ld compiled afresh; the live program ran %ld times\n", trained,
	       fresh, l->runs);
	if (graphs != ndistinct)
		FAIL("distinct graphs: %ld of %ld ran and matched", graphs, ndistinct);
	if (fresh != ndistinct)
		FAIL("distinct graphs: %ld of %ld compiled a new kernel (not distinct?)", fresh, ndistinct);
	check_bounds("distinct graphs", &s, (double)cache_mb + 48.0);
}

/* ---- (b) one graph, many runs ---- */

static void repeat(fj_context *ctx)
{
	fj_module *m;
	fj_program *p, *a;
	if (!open_pair(ctx, repeated, "repeated.fj", &m, &p, &a))
		return;
	rs = seed ^ 0x5eed;
	tensors in = {.n = 0}, ref = {.n = 0}, first = {.n = 0}, mine = {.n = 0}, owned = {.n = 0};
	make_inputs(p, FJ_ROLE_INPUT, &in);
	make_inputs(p, FJ_ROLE_OUTPUT, &first);
	make_inputs(p, FJ_ROLE_OUTPUT, &mine);
	owned_outputs(a, FJ_ROLE_OUTPUT, &ref);
	owned_outputs(p, FJ_ROLE_OUTPUT, &owned);
	if (fj_program_run(a, in.t, in.n, ref.t, ref.n) != FJ_OK || fj_program_run(p, in.t, in.n, first.t, first.n) != FJ_OK)
		FAIL("repeated graph: first run: %s", fj_context_error(ctx));
	compare("output", -1, &first, &ref);
	fj_program_destroy(a);
	sampler s = {.peak = 0};
	sample(&s, &s.start);
	s.fd_start = fd_count();
	long warm = nrepeats / 10, runs = 0, recompiles = 0, refreshed = 0;
	double t0 = now();
	for (long i = 0; i < nrepeats && p; i++) {
		if (recompile_every > 0 && i % recompile_every == recompile_every - 1) {
			fj_program_destroy(p);
			p = NULL;
			fj_program_stats st;
			fj_program_stats_init(&st);
			if (compile(ctx, m, FJ_EXECUTOR_HOST, false, &p) != FJ_OK || fj_program_stats_get(p, &st) != FJ_OK) {
				FAIL("repeated graph: recompile %ld: %s", i, fj_context_error(ctx));
				break;
			}
			recompiles++;
			refreshed += st.compiled;
		}
		tensors *out = i % 2 ? &mine : &owned;
		if (fj_program_run(p, in.t, in.n, out->t, out->n) != FJ_OK) {
			FAIL("repeated graph: run %ld: %s", i, fj_context_error(ctx));
			break;
		}
		runs++;
		if (!same_bits(out, &first, p))
			FAIL("repeated graph: run %ld differs from the first", i);
		if (i % 1000 == 999)
			compare("output", i, out, &ref);
		if (i % 2 == 0 && i % 3 == 0) /* release the owned outputs now and then */
			free_tensors(&owned), owned_outputs(p, FJ_ROLE_OUTPUT, &owned);
		sample_after(&s, i, warm, 64);
	}
	sample(&s, &s.end);
	s.fd_end = fd_count();
	print_figures("repeated graph", &s, runs, now() - t0);
	printf("soak: repeated graph: %ld recompiles, %ld kernels compiled by them\n", recompiles, refreshed);
	if (runs != nrepeats)
		FAIL("repeated graph: %ld of %ld runs", runs, nrepeats);
	if (refreshed != 0)
		FAIL("repeated graph: recompiles generated %ld kernels (the memory cache should hold them)", refreshed);
	check_bounds("repeated graph", &s, 16.0);
	free_tensors(&in);
	free_tensors(&ref);
	free_tensors(&first);
	free_tensors(&mine);
	free_tensors(&owned);
	fj_program_destroy(p);
	fj_module_destroy(m);
}

/* ---- (c) one graph with a symbolic batch, its size changing ---- */

static const char symbolic[] = MLP_SOFTMAX("N");

/* M/10 runs of a graph with a symbolic batch N, N changing every run (1 to
 * 64): what a program keeps per shape (bound sizes, buffers, owned
 * outputs) must not pile up. Each run against aten's. */
static void resize(fj_context *ctx)
{
	static float x[64 * 64], w[64 * 48], b[48];
	fj_module *m;
	fj_program *p, *a;
	if (!open_pair(ctx, symbolic, "symbolic.fj", &m, &p, &a))
		return;
	rs = seed ^ 0x517e;
	for (size_t k = 0; k < sizeof x / sizeof *x; k++)
		x[k] = (float)unit();
	for (size_t k = 0; k < sizeof w / sizeof *w; k++)
		w[k] = (float)unit();
	for (size_t k = 0; k < sizeof b / sizeof *b; k++)
		b[k] = (float)unit();
	fj_tensor in[3];
	float *data[3] = {x, w, b};
	const int64_t sizes[3][2] = {{64, 64}, {64, 48}, {48, 0}};
	for (int k = 0; k < 3; k++) {
		fj_tensor_init(&in[k]);
		in[k].data = data[k];
		in[k].dtype = FJ_TYPE_F32;
		in[k].rank = k < 2 ? 2 : 1;
		in[k].sizes[0] = sizes[k][0];
		in[k].sizes[1] = sizes[k][1];
	}
	sampler s = {.peak = 0};
	sample(&s, &s.start);
	s.fd_start = fd_count();
	long nruns = nrepeats / 10, warm = nruns / 10, runs = 0;
	double t0 = now();
	tensors ho = {.n = 0}, ao = {.n = 0};
	for (long i = 0; i < nruns; i++) {
		in[0].sizes[0] = 1 + (i * 37) % 64;
		owned_outputs(p, FJ_ROLE_OUTPUT, &ho);
		owned_outputs(a, FJ_ROLE_OUTPUT, &ao);
		if (fj_program_run(p, in, 3, ho.t, ho.n) != FJ_OK || fj_program_run(a, in, 3, ao.t, ao.n) != FJ_OK) {
			FAIL("symbolic graph: run %ld (N=%lld): %s", i, (long long)in[0].sizes[0], fj_context_error(ctx));
			break;
		}
		runs += compare("symbolic output", i, &ho, &ao);
		free_tensors(&ho);
		free_tensors(&ao);
		sample_after(&s, i, warm, 64);
	}
	sample(&s, &s.end);
	s.fd_end = fd_count();
	print_figures("symbolic graph, N changing", &s, runs, now() - t0);
	if (runs != nruns)
		FAIL("symbolic graph: %ld of %ld runs matched", runs, nruns);
	check_bounds("symbolic graph", &s, 16.0);
	fj_program_destroy(p);
	fj_program_destroy(a);
	fj_module_destroy(m);
}

/* Graph 0 again, after (a): evicted from memory (and, disk off, compiled
 * by LLVM again), still right. */
static void evicted(fj_context *ctx, bool disk)
{
	bool training = false;
	text t;
	fj_module *m = graph_module(ctx, 0, &training, &t);
	uint32_t compiled = 0;
	fj_cache_stats before, after;
	fj_context_cache_stats(ctx, &before);
	if (m && check_graph(ctx, m, 0, training, &compiled)) {
		fj_context_cache_stats(ctx, &after);
		uint64_t fresh = after.kernels_compiled + after.kernels_loaded - before.kernels_compiled - before.kernels_loaded;
		printf("soak: graph 0 again: %u kernels compiled, %llu compiled or loaded\n", compiled,
		       (unsigned long long)fresh);
		if (fresh == 0)
			FAIL("graph 0 again: every kernel still in memory (the cache was not bounded)");
		if (!disk && compiled == 0)
			FAIL("graph 0 again: no kernel compiled without a disk cache");
	}
	fj_module_destroy(m);
}

/* ---- (d) several threads at once ---- */

typedef struct worker {
	fj_context *ctx;
	int t;
	long graphs;
	pthread_t tid;
} worker;

static void *worker_main(void *arg)
{
	worker *w = arg;
	text t;
	for (long i = ndistinct + w->t; i < 2 * ndistinct; i += nthreads) {
		bool training = false;
		uint32_t compiled = 0;
		fj_module *m = graph_module(w->ctx, i, &training, &t);
		if (m && check_graph(w->ctx, m, i, training, &compiled))
			w->graphs++;
		fj_module_destroy(m);
	}
	return NULL;
}

/* N more distinct graphs compiled, run and checked by T threads in the one
 * context (--threads=T): compiles, evictions and program destroys race on
 * the kernel cache and the JIT (run it under ThreadSanitizer). */
static void threaded(fj_context *ctx)
{
	worker w[64];
	int n = nthreads < 64 ? nthreads : 64, started = 0;
	double t0 = now();
	for (int k = 0; k < n; k++) {
		w[k] = (worker){ctx, k, 0, 0};
		if (pthread_create(&w[k].tid, NULL, worker_main, &w[k]) != 0)
			break;
		started++;
	}
	long graphs = 0;
	for (int k = 0; k < started; k++) {
		pthread_join(w[k].tid, NULL);
		graphs += w[k].graphs;
	}
	printf("soak: %d threads: %ld distinct graphs done in %.1f s; RSS %.1f MiB, fds %d\n", started, graphs,
	       now() - t0, rss_mib(), fd_count());
	if (started != n || graphs != ndistinct)
		FAIL("%d threads: %ld of %ld graphs ran and matched", started, graphs, ndistinct);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void soak(bool disk)
{
	const char *mode = disk ? "disk cache on" : "disk cache off";
	int fd0 = fd_count();
	double t0 = now(), rss0 = rss_mib();
	char dir[] = "/tmp/fj-soak-XXXXXX";
	if (disk && !mkdtemp(dir)) {
		FAIL("mkdtemp: %s", dir);
		return;
	}
	fj_context *ctx = fj_context_create(NULL, NULL);
	char mb[32];
	snprintf(mb, sizeof mb, "%ld", cache_mb);
	if (!ctx || fj_context_set_option(ctx, "cache_dir", disk ? dir : "off") != FJ_OK ||
	    fj_context_set_option(ctx, "cache_max_mb", "4") != FJ_OK ||
	    fj_context_set_option(ctx, "kernel_cache_mb", mb) != FJ_OK) {
		FAIL("context: %s", ctx ? fj_context_error(ctx) : "out of memory");
		fj_context_destroy(ctx);
		return;
	}
	printf("soak: %s: %ld distinct graphs, %ld runs of one (recompiled every %ld), kernel cache %ld MiB\n", mode,
	       ndistinct, nrepeats, recompile_every, cache_mb);
	live l;
	live_start(ctx, &l);
	distinct(ctx, &l);
	live_end(&l);
	evicted(ctx, disk);
	repeat(ctx);
	resize(ctx);
	if (nthreads > 1)
		threaded(ctx);
	fj_cache_stats cs;
	fj_context_cache_stats(ctx, &cs);
	printf("soak: %s: kernels compiled %llu, loaded %llu, memory hits %llu, disk hits %llu, stores %llu, "
	       "evictions %llu\n",
	       mode, (unsigned long long)cs.kernels_compiled, (unsigned long long)cs.kernels_loaded,
	       (unsigned long long)cs.memory_hits, (unsigned long long)cs.disk_hits,
	       (unsigned long long)cs.disk_stores, (unsigned long long)cs.disk_evictions);
	printf("soak: %s: %zu diagnostics on the context (never cleared)\n", mode, fj_context_diagnostic_count(ctx));
	fj_context_destroy(ctx);
	if (disk)
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	int fd1 = fd_count();
	printf("soak: %s: context destroyed: fds %d (before it: %d), RSS %.1f MiB (before it: %.1f); %.1f s\n", mode,
	       fd1, fd0, rss_mib(), rss0, now() - t0);
	if (fd1 != fd0)
		FAIL("%s: %d fds open before the context, %d after it", mode, fd0, fd1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they come (scripts/soak.sh tees them) */
	const char *disk = "both";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--distinct=", 11) == 0)
			ndistinct = atol(a + 11);
		else if (strncmp(a, "--repeats=", 10) == 0)
			nrepeats = atol(a + 10);
		else if (strncmp(a, "--recompile-every=", 18) == 0)
			recompile_every = atol(a + 18);
		else if (strncmp(a, "--kernel-cache-mb=", 18) == 0)
			cache_mb = atol(a + 18);
		else if (strncmp(a, "--seed=", 7) == 0)
			seed = strtoull(a + 7, NULL, 10);
		else if (strncmp(a, "--disk=", 7) == 0)
			disk = a + 7;
		else if (strcmp(a, "-v") == 0)
			verbose = 1;
		else if (strncmp(a, "--threads=", 10) == 0)
			nthreads = atoi(a + 10);
		else if (strcmp(a, "--no-rss-bounds") == 0)
			rss_bounds = 0;
		else {
			fprintf(stderr, "usage: fj-api-soak [--distinct=N] [--repeats=M] [--recompile-every=K] "
			                "[--disk=off|on|both] [--kernel-cache-mb=C] [--seed=S] [--threads=T] [--no-rss-bounds] [-v]\n");
			return 2;
		}
	}
	if (ndistinct < 1 || nrepeats < 100 || nthreads < 1 || cache_mb < 1 ||
	    (strcmp(disk, "off") && strcmp(disk, "on") && strcmp(disk, "both"))) {
		fprintf(stderr, "fj-api-soak: bad arguments\n");
		return 2;
	}
	if (strcmp(disk, "on"))
		soak(false);
	if (strcmp(disk, "off"))
		soak(true);
	printf("soak: %s\n", fails ? "FAILED" : "passed");
	return fails ? 1 : 0;
}
