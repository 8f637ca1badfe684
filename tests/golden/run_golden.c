/* run_golden.c -- fj-golden: runs every golden case in one process.
 *
 *   fj-golden [--executor=aten|host|nvptx] [--passes=PIPELINE] [--train] [--expect=N] [-jN] [-v] DIR [CASE ...]
 *
 * nvptx runs on the CUDA driver the context's settings name (FUSEJIT_LIBCUDA;
 * in CI the stand-in driver of tests/driver) and honours skip_nvptx markers.
 *
 * With --passes, each graph first goes through the pipeline (e.g.
 * verify,decompose,canonicalize), is printed, parsed back and verified, and
 * that module is what runs: the numerics check of a pass against PyTorch.
 *
 * DIR holds one directory per case (tests/golden/cases/<case>/): graph.fj (a module;
 * its @main, else its first graph, is run), in_<param>.npy for every
 * parameter and out_<i>.npy for every returned value by position (bf16 as
 * <u2). Each output is checked with IR.md §5's relative L2 error against its
 * dtype's tolerance (f32 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12, integers and
 * bools exact). A case directory holding a file `skip` or `skip_<executor>`
 * is skipped (its first line says why).
 *
 * With --train, each case with gradients (grad_<param>.npy files) goes through
 * the training pipeline (verify,decompose,canonicalize,autodiff,canonicalize,
 * recompute,partition); @main.fw runs on in_<param>.npy, @main.bw on the saved
 * values and tangent_<k>.npy (one per floating-point output k), and the
 * outputs are checked against out_<i>.npy and each gradient against
 * grad_<param>.npy. Cases without gradients are skipped (nograd_reason.txt
 * says why), and so are cases holding a file `skip_train` or
 * `skip_train_<executor>` (or the forward's `skip`, `skip_<executor>`). With the environment
 * variable FJ_GOLDEN_TRAIN_DUMP=DIR, the gradients are also written to
 * DIR/<case>.grad_<param>.npy (for debugging).
 *
 * Cases run in -j worker processes (default: one per core, at most 8; -j1
 * runs them in this process), each with one context for all its cases, so
 * identical kernels compile once per worker; workers take the next case from
 * a counter in shared memory, and a case that crashes its worker fails alone.
 * Prints one line per failing case and finally `N passed, M failed`
 * (`, K skipped`); exit status 1 on any failure, and also when no case ran
 * (passed or failed), when a CASE names no case of DIR, or, with --expect=N,
 * when DIR does not hold exactly N cases (CTest passes the number of folders
 * in DIR: a folder without graph.fj, or cases the runner did not find, fail). */
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "passes/pass.h"
#include "tests/common/npy_rt.h"
#include "runtime/program.h"
#include "runtime/program_nvptx.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The last error on ctx, one line. */
static const char *last_error(fj_context *ctx)
{
	const char *e = fj_context_error(ctx);
	return e && *e ? e : "failed without a message";
}

enum { CASE_PENDING, CASE_RUNNING, CASE_PASS, CASE_FAIL, CASE_SKIP };

/* Results, in memory shared with the workers. */
typedef struct case_result {
	int status;
	int worker;
	uint32_t compiled;
	double ms;
	char msg[1024];
} case_result;

typedef struct shared_state {
	atomic_long next;
	case_result res[];
} shared_state;


/* The --passes pipeline (NULL: run the graphs as written). */
static const char *pipeline;
/* --train: check the forward outputs and the gradients of the training pipeline. */
static bool train;
/* --executor=nvptx: the nvptx executor (runtime/program_nvptx.h). */
static bool nvptx;
#define TRAIN_PIPELINE "verify,decompose,canonicalize,autodiff,canonicalize,recompute,partition"

/* Reads the case's first line of `file` into msg; false when there is no such file. */
static bool read_reason(const char *dir, const char *name, const char *file, char *msg, size_t msize)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
	if (!exists(path))
		return false;
	FILE *f = fopen(path, "r");
	msg[0] = 0;
	if (f) {
		if (!fgets(msg, (int)msize, f))
			msg[0] = 0;
		fclose(f);
	}
	msg[strcspn(msg, "\n")] = 0;
	return true;
}

/* Compares got with the reference file `path` (IR.md §5); appends a failure
 * to msg at *k. False on a mismatch or a read error. */
static bool check_tensor(fj_context *ctx, const fj_rt_tensor *got, const char *path, const char *what, char *msg,
                         size_t msize, size_t *k, bool first)
{
	fj_rt_tensor ref;
	if (fj_npy_read(ctx, path, &ref) != FJ_OK) {
		if (*k < msize)
			*k += (size_t)snprintf(msg + *k, msize - *k, "%s%s", first ? "" : "; ", last_error(ctx));
		return false;
	}
	bool ok = true;
	char gs[256], ws[256];
	fj_rt_tensor_type_str(got, gs, sizeof gs);
	fj_rt_tensor_type_str(&ref, ws, sizeof ws);
	if (!fj_rt_tensor_same_type(got, &ref)) {
		if (*k < msize)
			*k += (size_t)snprintf(msg + *k, msize - *k, "%s%s is %s, expected %s", first ? "" : "; ", what, gs, ws);
		ok = false;
	} else {
		bool placed;
		double err = fj_rt_rel_l2(got, &ref, &placed);
		double tol = fj_rt_tolerance(ref.dtype);
		if (!placed) {
			if (*k < msize)
				*k += (size_t)snprintf(msg + *k, msize - *k, "%s%s (%s): NaN/inf at different places",
				                       first ? "" : "; ", what, gs);
			ok = false;
		} else if (!(err <= tol)) {
			if (*k < msize)
				*k += (size_t)snprintf(msg + *k, msize - *k, "%s%s (%s): rel_err %.3g > %g", first ? "" : "; ",
				                       what, gs, err, tol);
			ok = false;
		}
	}
	fj_rt_tensor_free(&ref);
	return ok;
}

/* True when the case directory holds a file whose name starts with prefix. */
static bool has_file_prefix(const char *dir, const char *name, const char *prefix)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	DIR *d = opendir(path);
	if (!d)
		return false;
	bool found = false;
	for (struct dirent *e; !found && (e = readdir(d));)
		found = strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return found;
}

/* --train: the training pipeline, @main.fw then @main.bw, checked against
 * out_<i>.npy and grad_<param>.npy (as fusejit-run --train drives them). */
/* A program on aten or host (h), or on nvptx (nv: the CUDA driver the
 * context's settings name, FUSEJIT_LIBCUDA: tests/driver's stand-in in CI). */
typedef struct program {
	fj_rt_program *h;
	fj_rt_nvprog *nv;
	fj_context *ctx; /* nv's */
} program;

/* The CUDA device's enter and leave bracket the nvptx program's binds, runs
 * and frees, as the C API's calls do: they take the backend's lock and make
 * the driver's context current on this thread (creating a program loads its
 * modules under the lock itself). */
static fj_status nv_enter(fj_context *ctx, fj_nvptx_device *d)
{
	fj_status st = fj_nvptx_cuda_device(ctx, d);
	return st == FJ_OK ? d->enter(d->ud) : st;
}

static void program_destroy(program *p)
{
	fj_rt_program_destroy(p->h);
	fj_nvptx_device d;
	if (p->nv && nv_enter(p->ctx, &d) == FJ_OK) {
		fj_rt_nvptx_destroy(p->nv);
		d.leave(d.ud);
	} else {
		fj_rt_nvptx_destroy(p->nv);
	}
	p->h = NULL;
	p->nv = NULL;
}

/* Creates graph g's program (adding its compiled kernels to *compiled), binds
 * it to the inputs' shapes and runs it once. */
static fj_status run_program(fj_context *ctx, fj_graph *g, fj_rt_program_kind ex, const fj_rt_tensor *const *in,
                             fj_rt_tensor *out, program *p, uint32_t *compiled)
{
	if (nvptx) {
		fj_status st = fj_rt_nvptx_create(ctx, g, &p->nv);
		fj_nvptx_device d;
		p->ctx = ctx;
		if (st == FJ_OK)
			*compiled += fj_rt_nvptx_compiled(p->nv);
		if (st == FJ_OK && (st = nv_enter(ctx, &d)) == FJ_OK) {
			st = fj_rt_nvptx_bind(p->nv, in, NULL, NULL, 0);
			if (st == FJ_OK)
				st = fj_rt_nvptx_run(p->nv, in, out);
			d.leave(d.ud);
		}
		return st;
	}
	fj_status st = fj_rt_program_create(ctx, g, ex, &p->h);
	if (st == FJ_OK)
		*compiled += fj_rt_program_compiled(p->h);
	if (st == FJ_OK)
		st = fj_rt_program_bind(p->h, in, NULL, NULL, 0);
	if (st == FJ_OK)
		st = fj_rt_program_run(p->h, in, out);
	return st;
}

static int run_train_case(fj_context *ctx, const char *dir, const char *name, fj_rt_program_kind ex, char *msg,
                          size_t msize, uint32_t *compiled)
{
	char path[4096];
	if (read_reason(dir, name, "skip_train", msg, msize))
		return CASE_SKIP;
	if (!has_file_prefix(dir, name, "grad_")) {
		if (!read_reason(dir, name, "nograd_reason.txt", msg, msize))
			snprintf(msg, msize, "no gradients");
		return CASE_SKIP;
	}
	fj_module *m = NULL;
	program pf = {0}, pb = {0};
	fj_rt_tensor *fin = NULL, *fout = NULL, *bin = NULL, *bout = NULL;
	const fj_rt_tensor **finp = NULL, **binp = NULL;
	fj_graph *gf = NULL, *gb = NULL;
	uint32_t K = 0, nsaved = 0;
	int result = CASE_FAIL;
	msg[0] = 0;
	snprintf(path, sizeof path, "%s/%s/graph.fj", dir, name);
	fj_status st = fj_parse_file(ctx, path, &m);
	if (st == FJ_OK)
		st = fj_verify_module(m);
	fj_pipeline_opts po = {.verify_each = true};
	if (st == FJ_OK)
		st = fj_run_pipeline(m, TRAIN_PIPELINE, &po);
	if (st != FJ_OK) {
		snprintf(msg, msize, "%s", last_error(ctx));
		goto done;
	}
	gf = fj_module_find_graph(m, "main.fw");
	gb = fj_module_find_graph(m, "main.bw");
	if (!gf || !gb) {
		snprintf(msg, msize, "partition gave no @main.fw and @main.bw");
		gf = gb = NULL;
		goto done;
	}
	K = gf->num_fwd_outputs >= 0 ? (uint32_t)gf->num_fwd_outputs : 0;
	if (K > gf->nresults || gb->nparams < gf->nresults - K) {
		snprintf(msg, msize, "@main.fw/@main.bw: bad num_fwd_outputs or saved values");
		gf = gb = NULL;
		goto done;
	}
	nsaved = gf->nresults - K;
	fin = calloc(gf->nparams + 1, sizeof *fin);
	finp = calloc(gf->nparams + 1, sizeof *finp);
	fout = calloc(gf->nresults + 1, sizeof *fout);
	bin = calloc(gb->nparams + 1, sizeof *bin);
	binp = calloc(gb->nparams + 1, sizeof *binp);
	bout = calloc(gb->nresults + 1, sizeof *bout);
	if (!fin || !finp || !fout || !bin || !binp || !bout) {
		snprintf(msg, msize, "out of memory");
		goto done;
	}
	/* forward: the primals */
	for (uint32_t i = 0; i < gf->nparams; i++) {
		snprintf(path, sizeof path, "%s/%s/in_%s.npy", dir, name, gf->values[gf->params[i]].name);
		if (fj_npy_read(ctx, path, &fin[i]) != FJ_OK) {
			snprintf(msg, msize, "%s", last_error(ctx));
			goto done;
		}
		finp[i] = &fin[i];
	}
	st = run_program(ctx, gf, ex, finp, fout, &pf, compiled);
	if (st != FJ_OK) {
		snprintf(msg, msize, "forward: %s", last_error(ctx));
		goto done;
	}
	/* backward: the saved values, then tangent_<k> */
	for (uint32_t i = 0; i < nsaved; i++)
		binp[i] = &fout[K + i];
	for (uint32_t i = nsaved; i < gb->nparams; i++) {
		unsigned k;
		const char *pn = gb->values[gb->params[i]].name;
		if (!pn || sscanf(pn, "tangent_%u", &k) != 1 || k >= K) {
			snprintf(msg, msize, "@main.bw: parameter %u (%%%s) is neither saved nor a tangent", i, pn ? pn : "?");
			goto done;
		}
		snprintf(path, sizeof path, "%s/%s/tangent_%u.npy", dir, name, k);
		if (fj_npy_read(ctx, path, &bin[i]) != FJ_OK) {
			snprintf(msg, msize, "%s", last_error(ctx));
			goto done;
		}
		binp[i] = &bin[i];
	}
	st = run_program(ctx, gb, ex, binp, bout, &pb, compiled);
	if (st != FJ_OK) {
		snprintf(msg, msize, "backward: %s", last_error(ctx));
		goto done;
	}
	size_t k = 0;
	bool ok = true;
	char what[300];
	for (uint32_t i = 0; i < K; i++) {
		snprintf(path, sizeof path, "%s/%s/out_%u.npy", dir, name, i);
		snprintf(what, sizeof what, "output %u", i);
		ok &= check_tensor(ctx, &fout[i], path, what, msg, msize, &k, ok);
	}
	uint32_t gi = 0;
	for (uint32_t i = 0; i < gf->nparams; i++) {
		const fj_value *pv = &gf->values[gf->params[i]];
		if (!fj_dtype_is_float(pv->type.dtype) || pv->nograd)
			continue;
		if (gi >= gb->nresults) {
			if (k < msize)
				k += (size_t)snprintf(msg + k, msize - k, "%s@main.bw has %u results, too few", ok ? "" : "; ",
				                      gb->nresults);
			ok = false;
			break;
		}
		const fj_rt_tensor *g = &bout[gi++];
		const char *dump = getenv("FJ_GOLDEN_TRAIN_DUMP"); /* debugging: DIR/<case>.grad_<param>.npy */
		if (dump && *dump) {
			snprintf(path, sizeof path, "%s/%s.grad_%s.npy", dump, name, pv->name);
			(void)fj_npy_write(ctx, path, g);
		}
		snprintf(path, sizeof path, "%s/%s/grad_%s.npy", dir, name, pv->name);
		if (!exists(path))
			continue; /* PyTorch does not differentiate it */
		snprintf(what, sizeof what, "grad_%s", pv->name);
		ok &= check_tensor(ctx, g, path, what, msg, msize, &k, ok);
	}
	if (ok && gi != gb->nresults) {
		snprintf(msg, msize, "@main.bw has %u results for %u gradients", gb->nresults, gi);
		ok = false;
	}
	if (ok)
		result = CASE_PASS;
done:
	for (uint32_t i = 0; gf && fin && i < gf->nparams; i++)
		fj_rt_tensor_free(&fin[i]);
	for (uint32_t i = 0; gf && fout && i < gf->nresults; i++)
		fj_rt_tensor_free(&fout[i]);
	for (uint32_t i = 0; gb && bin && i < gb->nparams; i++)
		fj_rt_tensor_free(&bin[i]);
	for (uint32_t i = 0; gb && bout && i < gb->nresults; i++)
		fj_rt_tensor_free(&bout[i]);
	free(fin);
	free(finp);
	free(fout);
	free(bin);
	free(binp);
	free(bout);
	program_destroy(&pf);
	program_destroy(&pb);
	fj_module_destroy(m);
	fj_context_clear_diagnostics(ctx);
	return result;
}

/* Runs the pipeline on *m, then replaces *m by its printed text parsed back. */
static fj_status transform(fj_context *ctx, fj_module **m)
{
	fj_pipeline_opts o = {.verify_each = true};
	fj_status st = fj_run_pipeline(*m, pipeline, &o);
	if (st != FJ_OK)
		return st;
	fj_buf b;
	fj_buf_init(&b, ctx);
	st = fj_print_module(&b, *m);
	fj_module *back = NULL;
	if (st == FJ_OK)
		st = fj_parse_module(ctx, b.data ? b.data : "", b.len, (*m)->file, &back);
	fj_buf_free(&b);
	if (st == FJ_OK)
		st = fj_verify_module(back);
	if (st != FJ_OK) {
		fj_module_destroy(back);
		return st;
	}
	fj_module_destroy(*m);
	*m = back;
	return FJ_OK;
}

static int run_case(fj_context *ctx, const char *dir, const char *name, fj_rt_program_kind ex, const char *exname,
                    char *msg, size_t msize, uint32_t *compiled)
{
	char path[4096];
	if (train) {
		snprintf(path, sizeof path, "skip_train_%s", exname);
		if (read_reason(dir, name, "skip_train", msg, msize) || read_reason(dir, name, path, msg, msize))
			return CASE_SKIP;
		snprintf(path, sizeof path, "skip_%s", exname);
		if (read_reason(dir, name, path, msg, msize) || read_reason(dir, name, "skip", msg, msize))
			return CASE_SKIP;
		return run_train_case(ctx, dir, name, ex, msg, msize, compiled);
	}
	snprintf(path, sizeof path, "%s/%s/skip_%s", dir, name, exname);
	if (!exists(path))
		snprintf(path, sizeof path, "%s/%s/skip", dir, name);
	if (exists(path)) {
		FILE *f = fopen(path, "r");
		msg[0] = 0;
		if (f) {
			if (!fgets(msg, (int)msize, f))
				msg[0] = 0;
			fclose(f);
		}
		msg[strcspn(msg, "\n")] = 0;
		return CASE_SKIP;
	}
	fj_module *m = NULL;
	program p = {0};
	fj_rt_tensor *in = NULL, *out = NULL;
	const fj_rt_tensor **inp = NULL;
	uint32_t nparams = 0, nres = 0;
	int result = CASE_FAIL;
	snprintf(path, sizeof path, "%s/%s/graph.fj", dir, name);
	fj_status st = fj_parse_file(ctx, path, &m);
	if (st == FJ_OK)
		st = fj_verify_module(m);
	if (st == FJ_OK && pipeline)
		st = transform(ctx, &m);
	if (st != FJ_OK) {
		snprintf(msg, msize, "%s", last_error(ctx));
		goto done;
	}
	fj_graph *g = fj_module_find_graph(m, "main");
	if (!g && m->ngraphs)
		g = m->graphs[0];
	if (!g) {
		snprintf(msg, msize, "%.1000s: no graph to run", path);
		goto done;
	}
	nparams = g->nparams;
	nres = g->nresults;
	in = calloc(nparams + 1, sizeof *in);
	inp = calloc(nparams + 1, sizeof *inp);
	out = calloc(nres + 1, sizeof *out);
	if (!in || !inp || !out) {
		snprintf(msg, msize, "out of memory");
		goto done;
	}
	for (uint32_t i = 0; i < nparams; i++) {
		snprintf(path, sizeof path, "%s/%s/in_%s.npy", dir, name, g->values[g->params[i]].name);
		if (fj_npy_read(ctx, path, &in[i]) != FJ_OK) {
			snprintf(msg, msize, "%s", last_error(ctx));
			goto done;
		}
		inp[i] = &in[i];
	}
	*compiled = 0;
	st = run_program(ctx, g, ex, inp, out, &p, compiled);
	if (st != FJ_OK) {
		snprintf(msg, msize, "%s", last_error(ctx));
		goto done;
	}
	size_t k = 0;
	msg[0] = 0;
	bool ok = true;
	for (uint32_t i = 0; i < nres; i++) {
		fj_rt_tensor ref;
		snprintf(path, sizeof path, "%s/%s/out_%u.npy", dir, name, i);
		if (fj_npy_read(ctx, path, &ref) != FJ_OK) {
			snprintf(msg, msize, "%s", last_error(ctx));
			ok = false;
			break;
		}
		char got[256], want[256];
		fj_rt_tensor_type_str(&out[i], got, sizeof got);
		fj_rt_tensor_type_str(&ref, want, sizeof want);
		if (!fj_rt_tensor_same_type(&out[i], &ref)) {
			if (k < msize)
				k += (size_t)snprintf(msg + k, msize - k, "%soutput %u is %s, expected %s", ok ? "" : "; ", i, got,
				                      want);
			ok = false;
		} else {
			bool placed;
			double err = fj_rt_rel_l2(&out[i], &ref, &placed);
			double tol = fj_rt_tolerance(ref.dtype);
			if (!placed) {
				if (k < msize)
					k += (size_t)snprintf(msg + k, msize - k, "%soutput %u (%s): NaN/inf at different places",
					                      ok ? "" : "; ", i, got);
				ok = false;
			} else if (!(err <= tol)) {
				if (k < msize)
					k += (size_t)snprintf(msg + k, msize - k, "%soutput %u (%s): rel_err %.3g > %g", ok ? "" : "; ",
					                      i, got, err, tol);
				ok = false;
			}
		}
		fj_rt_tensor_free(&ref);
	}
	if (ok)
		result = CASE_PASS;
done:
	for (uint32_t i = 0; in && i < nparams; i++)
		fj_rt_tensor_free(&in[i]);
	for (uint32_t i = 0; out && i < nres; i++)
		fj_rt_tensor_free(&out[i]);
	free(in);
	free(inp);
	free(out);
	program_destroy(&p);
	fj_module_destroy(m);
	fj_context_clear_diagnostics(ctx);
	return result;
}

/* Runs cases from the shared counter until none is left (worker w; -1: this process). */
static void run_worker(shared_state *sh, char **names, size_t n, const char *dir, fj_rt_program_kind ex,
                       const char *exname, int w)
{
	fj_context *ctx = NULL;
	for (;;) {
		long i = atomic_fetch_add(&sh->next, 1);
		if (i >= (long)n)
			break;
		case_result *r = &sh->res[i];
		if (!ctx)
			ctx = fj_context_create(NULL, NULL);
		r->worker = w;
		r->status = CASE_RUNNING;
		double c0 = now_ms();
		int st = ctx ? run_case(ctx, dir, names[i], ex, exname, r->msg, sizeof r->msg, &r->compiled) : CASE_FAIL;
		if (!ctx)
			snprintf(r->msg, sizeof r->msg, "out of memory");
		r->ms = now_ms() - c0;
		r->status = st;
	}
	fj_context_destroy(ctx);
}

int main(int argc, char **argv)
{
	const char *exname = "aten", *dir = NULL;
	bool verbose = false;
	int nfilter = 0, jobs_arg = 0;
	long expect = -1;
	char **filter = calloc((size_t)argc, sizeof *filter);
	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--executor=", 11) == 0)
			exname = argv[i] + 11;
		else if (strncmp(argv[i], "--passes=", 9) == 0)
			pipeline = argv[i] + 9;
		else if (strcmp(argv[i], "--train") == 0)
			train = true;
		else if (strcmp(argv[i], "-v") == 0)
			verbose = true;
		else if (strncmp(argv[i], "-j", 2) == 0 && argv[i][2])
			jobs_arg = atoi(argv[i] + 2);
		else if (strncmp(argv[i], "--expect=", 9) == 0 && argv[i][9])
			expect = strtol(argv[i] + 9, NULL, 10);
		else if (argv[i][0] == '-') {
			fprintf(stderr, "fj-golden: unknown option '%s'\nusage: fj-golden [--executor=aten|host|nvptx] [--passes=PIPELINE] [--train] [--expect=N] [-jN] [-v] DIR [CASE ...]\n",
			        argv[i]);
			free(filter);
			return 2;
		} else if (!dir)
			dir = argv[i];
		else
			filter[nfilter++] = argv[i];
	}
	fj_rt_program_kind ex;
	if (strcmp(exname, "aten") == 0)
		ex = FJ_RT_EXEC_ATEN;
	else if (strcmp(exname, "host") == 0)
		ex = FJ_RT_EXEC_HOST;
	else if (strcmp(exname, "nvptx") == 0)
		ex = FJ_RT_EXEC_HOST, nvptx = true; /* ex unused */
	else {
		fprintf(stderr, "fj-golden: unknown executor '%s' (aten, host or nvptx)\n", exname);
		free(filter);
		return 2;
	}
	if (!dir) {
		fprintf(stderr, "usage: fj-golden [--executor=aten|host|nvptx] [--passes=PIPELINE] [--train] [--expect=N] [-jN] [-v] DIR [CASE ...]\n");
		free(filter);
		return 2;
	}
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "fj-golden: cannot open '%s'\n", dir);
		free(filter);
		return 2;
	}
	char **names = NULL;
	size_t n = 0, cap = 0, ncases = 0;
	bool *matched = calloc((size_t)argc, sizeof *matched);
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s/graph.fj", dir, e->d_name);
		if (!exists(path))
			continue;
		ncases++;
		bool want = nfilter == 0;
		for (int f = 0; f < nfilter; f++)
			if (strcmp(filter[f], e->d_name) == 0)
				want = matched[f] = true;
		if (!want)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			names = realloc(names, cap * sizeof *names);
		}
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof *names, cmp_str);
	/* fewer cases than expected, or a filter that selects nothing: a failure,
	 * never a pass over what is left */
	int count_errors = 0;
	if (expect >= 0 && (long)ncases != expect) {
		printf("FAIL %s holds %zu cases (a folder with graph.fj), %ld expected\n", dir, ncases, expect);
		count_errors++;
	}
	for (int f = 0; f < nfilter; f++)
		if (!matched[f]) {
			printf("FAIL no case named '%s' in %s\n", filter[f], dir);
			count_errors++;
		}
	free(matched);
	int jobs = jobs_arg > 0 ? jobs_arg : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (jobs < 1)
		jobs = 1;
	if (jobs_arg <= 0 && jobs > 8)
		jobs = 8;
	if ((size_t)jobs > n)
		jobs = n ? (int)n : 1;
	size_t shsize = sizeof(shared_state) + (n ? n : 1) * sizeof(case_result);
	shared_state *sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("fj-golden: mmap");
		return 2;
	}
	memset(sh, 0, shsize);
	double t0 = now_ms();
	if (jobs > 1) {
		pid_t *pids = calloc((size_t)jobs, sizeof *pids);
		for (int w = 0; w < jobs; w++) {
			pid_t pid = fork();
			if (pid == 0) {
				run_worker(sh, names, n, dir, ex, exname, w);
				exit(0);
			}
			pids[w] = pid;
		}
		for (int w = 0; w < jobs; w++) {
			int wst = 0;
			if (pids[w] <= 0 || waitpid(pids[w], &wst, 0) < 0)
				continue;
			if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0)
				continue;
			for (size_t i = 0; i < n; i++)
				if (sh->res[i].status == CASE_RUNNING && sh->res[i].worker == w) {
					sh->res[i].status = CASE_FAIL;
					if (WIFSIGNALED(wst))
						snprintf(sh->res[i].msg, sizeof sh->res[i].msg, "crashed (signal %d)", WTERMSIG(wst));
					else
						snprintf(sh->res[i].msg, sizeof sh->res[i].msg, "its worker exited with status %d",
						         WEXITSTATUS(wst));
				}
		}
		free(pids);
	}
	/* here: -j1, or the cases no worker got to */
	run_worker(sh, names, n, dir, ex, exname, -1);
	int passed = 0, failed = 0, skipped = 0;
	uint32_t kernels = 0;
	for (size_t i = 0; i < n; i++) {
		case_result *r = &sh->res[i];
		kernels += r->compiled;
		if (r->status == CASE_PASS) {
			passed++;
			if (verbose)
				printf("PASS %s (%.0f ms, %u kernels compiled)\n", names[i], r->ms, r->compiled);
		} else if (r->status == CASE_SKIP) {
			skipped++;
			if (verbose)
				printf("SKIP %s: %s\n", names[i], r->msg);
		} else {
			failed++;
			printf("FAIL %s: %s\n", names[i], r->status == CASE_FAIL ? r->msg : "not run");
		}
		free(names[i]);
	}
	free(names);
	free(filter);
	munmap(sh, shsize);
	if (verbose)
		printf("%s: %.0f ms, %d workers, %u kernels compiled\n", exname, now_ms() - t0, jobs, kernels);
	if (passed + failed == 0) {
		printf("FAIL no case ran (%d skipped)\n", skipped);
		count_errors++;
	}
	if (skipped)
		printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	else
		printf("%d passed, %d failed\n", passed, failed);
	return failed || count_errors ? 1 : 0;
}
