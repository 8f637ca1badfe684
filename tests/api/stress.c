/* stress.c -- fj-api-stress: one context, many threads compiling and running
 * the golden graphs at once through the public API.
 *
 *   fj-api-stress [-tN] [-rR] [-cC] [--executor=host|aten|nvptx] DIR
 *
 * -cC takes C cases spread evenly over DIR (default: all; CTest uses a part
 * to stay fast; run all of them under ThreadSanitizer by hand).
 * N threads (default 8) each walk every case of DIR (tests/golden/cases),
 * starting at a different case, R rounds (default 1): parse graph.fj,
 * compile @main, read in_<p>.npy, run, compare each output with out_<i>.npy
 * (IR.md §5's relative L2 error and tolerance). Every thread compiles every
 * graph itself, so compilations race on the kernel cache and runs race on
 * the thread pool and on programs shared between threads: each thread also
 * runs, once per case, a program compiled by the thread before it (a shared
 * table). The disk cache goes to a fresh temporary directory. Exit 0 when
 * every run matched and every run happened: C cases (all of DIR's that no
 * skip marker excludes, at least one), each run R * (2N - 1) times (N own
 * compiles, and the shared program by every thread but the one that
 * published it). Meant to run under ThreadSanitizer and ASan. nvptx: the
 * CUDA driver (never the emulator), so that compilations race on the PTX in
 * the kernel cache; exit 77 (a skip) without a GPU. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common/npy_rt.h"
#include "runtime/tensor.h"

typedef struct kase {
	char *dir;
	fj_program *shared; /* published by the first thread to compile it */
	pthread_mutex_t lock;
} kase;

static fj_context *ctx;
static kase *cases;
static size_t ncases;
static int nthreads = 8, rounds = 1, maxcases = 0;
static fj_executor executor = FJ_EXECUTOR_HOST;
static atomic_int failures, runs;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool exists(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0;
}

static void fail(const kase *k, const char *what)
{
	fprintf(stderr, "FAIL %s: %s: %s\n", k->dir, what, fj_context_error(ctx));
	atomic_fetch_add(&failures, 1);
}

/* Runs program p of case k on its inputs and checks its outputs. */
static void run_case(const kase *k, fj_program *p)
{
	size_t nin = fj_program_count(p, FJ_ROLE_INPUT), nout = fj_program_count(p, FJ_ROLE_OUTPUT);
	fj_rt_tensor *rin = calloc(nin + 1, sizeof *rin);
	fj_tensor *in = calloc(nin + 1, sizeof *in), *out = calloc(nout + 1, sizeof *out);
	char path[1024];
	bool ok = true;
	for (size_t i = 0; i < nin && ok; i++) {
		fj_value_info vi;
		fj_program_info(p, FJ_ROLE_INPUT, i, &vi);
		snprintf(path, sizeof path, "%s/in_%s.npy", k->dir, vi.name);
		if (fj_npy_read(ctx, path, &rin[i]) != FJ_OK) {
			fail(k, "reading an input");
			ok = false;
			break;
		}
		in[i].data = rin[i].data;
		in[i].dtype = (fj_scalar_type)rin[i].dtype;
		in[i].rank = rin[i].rank;
		memcpy(in[i].sizes, rin[i].dims, sizeof rin[i].dims);
	}
	if (ok && fj_program_run(p, in, nin, out, nout) != FJ_OK) {
		fail(k, "run");
		ok = false;
	}
	for (size_t o = 0; ok && o < nout; o++) {
		fj_rt_tensor ref, got = {0};
		snprintf(path, sizeof path, "%s/out_%zu.npy", k->dir, o);
		if (fj_npy_read(ctx, path, &ref) != FJ_OK) {
			fail(k, "reading an output");
			break;
		}
		got.data = out[o].data;
		got.dtype = (fj_dtype)out[o].dtype;
		got.rank = out[o].rank;
		memcpy(got.dims, out[o].sizes, sizeof got.dims);
		fj_rt_nbytes(got.dtype, got.dims, got.rank, &got.nbytes);
		bool placed = true;
		if (!fj_rt_tensor_same_type(&got, &ref)) {
			fail(k, "output type differs");
		} else {
			double e = fj_rt_rel_l2(&got, &ref, &placed);
			if (!placed || e > fj_rt_tolerance(ref.dtype)) {
				fprintf(stderr, "FAIL %s: output %zu: rel. error %g\n", k->dir, o, e);
				atomic_fetch_add(&failures, 1);
			}
		}
		fj_rt_tensor_free(&ref);
	}
	for (size_t o = 0; o < nout; o++)
		fj_tensor_release(&out[o]);
	for (size_t i = 0; i < nin; i++)
		fj_rt_tensor_free(&rin[i]);
	free(rin);
	free(in);
	free(out);
	atomic_fetch_add(&runs, 1);
}

static void *worker(void *arg)
{
	size_t t = (size_t)(uintptr_t)arg;
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = executor;
	for (int r = 0; r < rounds; r++)
		for (size_t c = 0; c < ncases; c++) {
			kase *k = &cases[(c + t * ncases / (size_t)nthreads) % ncases];
			char path[1024];
			snprintf(path, sizeof path, "%s/graph.fj", k->dir);
			fj_module *m;
			if (fj_module_parse_file(ctx, path, &m) != FJ_OK) {
				fail(k, "parse");
				continue;
			}
			fj_program *p;
			fj_status st = fj_compile(ctx, m, &o, &p);
			fj_module_destroy(m);
			if (st != FJ_OK) {
				fail(k, "compile");
				continue;
			}
			run_case(k, p);
			/* share: the first program of a case stays for all threads */
			pthread_mutex_lock(&k->lock);
			fj_program *sh = k->shared;
			if (!sh)
				k->shared = p;
			pthread_mutex_unlock(&k->lock);
			if (sh) {
				run_case(k, sh); /* concurrently with other threads' runs of sh */
				fj_program_destroy(p);
			}
		}
	return NULL;
}

/* nvptx: the driver (not the emulator) compiles a trivial graph. */
static bool gpu_usable(fj_context *c)
{
	static const char g[] = "graph @g(%x: f32[4]) {\n  %y = aten.exp(%x)\n  return %y\n}\n";
	fj_context_set_option(c, "nvptx_device", "cuda");
	fj_module *m;
	fj_program *p = NULL;
	fj_compile_options o;
	fj_compile_options_init(&o);
	o.executor = FJ_EXECUTOR_NVPTX;
	if (fj_module_parse(c, g, strlen(g), "probe.fj", &m) != FJ_OK)
		return false;
	fj_status st = fj_compile(c, m, &o, &p);
	fj_program_destroy(p);
	fj_module_destroy(m);
	return st == FJ_OK;
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "-t", 2) == 0)
			nthreads = atoi(argv[i] + 2);
		else if (strncmp(argv[i], "-c", 2) == 0)
			maxcases = atoi(argv[i] + 2);
		else if (strncmp(argv[i], "-r", 2) == 0)
			rounds = atoi(argv[i] + 2);
		else if (strcmp(argv[i], "--executor=aten") == 0)
			executor = FJ_EXECUTOR_ATEN;
		else if (strcmp(argv[i], "--executor=host") == 0)
			executor = FJ_EXECUTOR_HOST;
		else if (strcmp(argv[i], "--executor=nvptx") == 0)
			executor = FJ_EXECUTOR_NVPTX;
		else
			dir = argv[i];
	}
	if (!dir || nthreads < 1) {
		fprintf(stderr, "usage: fj-api-stress [-tN] [-rR] [-cC] [--executor=host|aten|nvptx] DIR\n");
		return 2;
	}
	DIR *d = opendir(dir);
	if (!d) {
		perror(dir);
		return 1;
	}
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char p[1024];
		snprintf(p, sizeof p, "%s/%s/graph.fj", dir, de->d_name);
		if (!exists(p))
			continue;
		snprintf(p, sizeof p, "%s/%s/skip", dir, de->d_name);
		char p2[1024];
		snprintf(p2, sizeof p2, "%s/%s/skip_%s", dir, de->d_name,
		         executor == FJ_EXECUTOR_ATEN ? "aten" : executor == FJ_EXECUTOR_NVPTX ? "nvptx" : "host");
		if (exists(p) || exists(p2))
			continue;
		names = realloc(names, (n + 1) * sizeof *names);
		names[n++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, cmp_str);
	size_t navail = n;
	if (maxcases > 0 && (size_t)maxcases < n) { /* every (n/maxcases)-th case */
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			if (i * (size_t)maxcases / n != k || k == (size_t)maxcases)
				free(names[i]);
			else
				names[k++] = names[i];
		}
		n = k;
	}
	cases = calloc(n + 1, sizeof *cases);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(dir) + strlen(names[i]) + 2;
		cases[i].dir = malloc(l);
		snprintf(cases[i].dir, l, "%s/%s", dir, names[i]);
		pthread_mutex_init(&cases[i].lock, NULL);
		free(names[i]);
	}
	free(names);
	ncases = n;

	ctx = fj_context_create(NULL, NULL);
	char cdir[] = "/tmp/fj-stress-cache.XXXXXX";
	if (!ctx || !mkdtemp(cdir))
		return 1;
	fj_context_set_cache(ctx, cdir, 0);
	if (executor == FJ_EXECUTOR_NVPTX && !gpu_usable(ctx)) {
		printf("SKIP: the nvptx executor has no CUDA driver and GPU here: %s\n", fj_context_error(ctx));
		fj_context_destroy(ctx);
		rmdir(cdir);
		return 77;
	}
	pthread_t *th = calloc((size_t)nthreads, sizeof *th);
	for (int t = 0; t < nthreads; t++)
		pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t);
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	fj_cache_stats cs;
	fj_context_cache_stats(ctx, &cs);
	for (size_t i = 0; i < ncases; i++) {
		fj_program_destroy(cases[i].shared);
		pthread_mutex_destroy(&cases[i].lock);
		free(cases[i].dir);
	}
	free(cases);
	free(th);
	fj_context_destroy(ctx);
	char cmd[200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", cdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", cdir);
	printf("%d threads, %zu cases, %d runs, %d failures; kernels compiled %llu, memory hits %llu, disk stores %llu\n",
	       nthreads, ncases, atomic_load(&runs), atomic_load(&failures), (unsigned long long)cs.kernels_compiled,
	       (unsigned long long)cs.memory_hits, (unsigned long long)cs.disk_stores);
	/* every case and every run, not just no failures among those that ran */
	size_t want_cases = maxcases > 0 && (size_t)maxcases < navail ? (size_t)maxcases : navail;
	size_t want_runs = ncases * (2 * (size_t)nthreads * (size_t)rounds - 1);
	bool counts_ok = true;
	if (ncases == 0 || ncases != want_cases) {
		printf("FAIL: %zu cases, %zu expected (at least one)\n", ncases, want_cases);
		counts_ok = false;
	}
	if ((size_t)atomic_load(&runs) != want_runs) {
		printf("FAIL: %d runs, %zu expected\n", atomic_load(&runs), want_runs);
		counts_ok = false;
	}
	return atomic_load(&failures) || !counts_ok ? 1 : 0;
}
