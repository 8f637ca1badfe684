/* executor.c -- the executor table (executor.h): aten and host over
 * fj_rt_program (program.h), nvptx over fj_rt_nvprog (program_nvptx.h), the
 * host's --bench, and the calls through the table. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_host/host.h"
#include "runtime/executor.h"
#include "runtime/program.h"
#include "runtime/program_nvptx.h"

static fj_status oom(fj_context *ctx) { return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory"); }

static bool has_regions(const fj_graph *g)
{
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].op == FJ_OP_FUSION_KERNEL)
			return true;
	return false;
}

/* ---- aten and host ---- */

static bool aten_supports(fj_context *ctx, const fj_graph *g) { return !has_regions(g); }
static bool host_supports(fj_context *ctx, const fj_graph *g) { return true; }

static fj_status program_compile(fj_context *ctx, fj_graph *g, fj_rt_program_kind kind, const fj_rt_exec_options *o,
                                 void **prog)
{
	fj_rt_program *p = NULL;
	fj_status st = fj_rt_program_create(ctx, g, kind, &p);
	if (st == FJ_OK && o)
		fj_rt_program_set_threads(p, o->threads);
	*prog = p;
	return st;
}

static fj_status aten_compile(fj_context *ctx, fj_graph *g, const fj_rt_exec_options *o, void **prog)
{
	return program_compile(ctx, g, FJ_RT_EXEC_ATEN, o, prog);
}

static fj_status host_compile(fj_context *ctx, fj_graph *g, const fj_rt_exec_options *o, void **prog)
{
	return program_compile(ctx, g, FJ_RT_EXEC_HOST, o, prog);
}

static fj_status program_bind(void *prog, const fj_rt_tensor *const *inputs, const char *const *origin,
                              const fj_rt_dimarg *dims, size_t ndims)
{
	return fj_rt_program_bind(prog, inputs, origin, dims, ndims);
}

static fj_status program_run(void *prog, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                             fj_rt_tensor *outputs, const uint64_t *out_dev)
{
	return fj_rt_program_run(prog, inputs, outputs);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct copy_arg {
	char *dst;
	const char *src;
} copy_arg;

static int32_t copy_task(void *arg, int64_t lo, int64_t hi)
{
	copy_arg *c = arg;
	memcpy(c->dst + lo, c->src + lo, (size_t)(hi - lo));
	return 0;
}

/* The host's copy baseline: bytes/2 read, bytes/2 written, with all of the
 * pool's threads. */
typedef struct copy_base {
	fj_context *ctx;
	int threads;
	size_t half;
	copy_arg ca;
} copy_base;

static void copy_run(copy_base *c)
{
	fj_host_parallel_for(c->ctx, c->threads, (int64_t)c->half, 1 << 16, copy_task, &c->ca);
}

/* Its buffers, touched, and three runs to warm up. */
static fj_status copy_begin(copy_base *c, fj_context *ctx, size_t bytes)
{
	c->ctx = ctx;
	c->threads = fj_host_thread_count(ctx);
	c->half = bytes / 2;
	c->ca.src = fj_rt_aligned_alloc(c->half);
	c->ca.dst = fj_rt_aligned_alloc(c->half);
	if (!c->ca.src || !c->ca.dst) {
		fj_rt_aligned_free((void *)c->ca.src);
		fj_rt_aligned_free(c->ca.dst);
		return oom(ctx);
	}
	memset((void *)c->ca.src, 1, c->half);
	memset(c->ca.dst, 0, c->half);
	for (int r = 0; r < 3; r++)
		copy_run(c);
	return FJ_OK;
}

static void copy_end(copy_base *c)
{
	fj_rt_aligned_free((void *)c->ca.src);
	fj_rt_aligned_free(c->ca.dst);
}

/* Whole runs, timed with the clock: a few warm-up runs give an estimate of
 * one, then enough runs for about half a second (5 to 1000; reps > 0:
 * exactly reps, at most 1000), each followed by a run of the copy
 * baseline, so that the two medians come from the same moments: on a
 * shared machine memory bandwidth drifts from second to second (a Zen 4
 * VM: memcpy from 30 to 49 GB/s between runs), and timing the copy after
 * all the runs let that drift into the ratio. */
static fj_status program_bench(void *prog, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs, int want,
                               fj_rt_bench *br)
{
	fj_rt_program *p = prog;
	const fj_graph *g = fj_rt_program_graph(p);
	fj_context *ctx = g->module->ctx;
	memset(br, 0, sizeof *br);
	double t0 = now_ms();
	fj_status st = FJ_OK;
	int warm = 0;
	do {
		st = fj_rt_program_run(p, inputs, outputs);
		warm++;
	} while (st == FJ_OK && warm < 3 && now_ms() - t0 < 200);
	if (st != FJ_OK)
		return st;
	for (uint32_t i = 0; i < g->nparams; i++) /* the outputs exist now */
		br->bytes += inputs[i]->nbytes;
	for (uint32_t k = 0; k < g->nresults; k++) { /* memory shared with an input or output: once */
		const fj_value *val = &g->values[g->results[k]];
		bool shared = val->kind == FJ_VK_PARAM && outputs[k].data == inputs[val->def]->data;
		for (uint32_t j = 0; j < k && !shared; j++)
			shared = outputs[k].data && outputs[j].data == outputs[k].data;
		if (!shared)
			br->bytes += outputs[k].nbytes;
	}
	double one = (now_ms() - t0) / warm;
	int reps = one > 0 ? (int)(500.0 / one) : 1000;
	reps = reps < 5 ? 5 : reps > 1000 ? 1000 : reps;
	if (want > 0)
		reps = want > 1000 ? 1000 : want;
	double *times = malloc(2 * (size_t)reps * sizeof *times);
	if (!times)
		return oom(ctx);
	double *ctimes = times + reps;
	copy_base cb;
	st = copy_begin(&cb, ctx, br->bytes);
	if (st != FJ_OK) {
		free(times);
		return st;
	}
	for (int r = 0; r < reps && st == FJ_OK; r++) {
		double a = now_ms();
		st = fj_rt_program_run(p, inputs, outputs);
		double b = now_ms();
		copy_run(&cb);
		times[r] = b - a;
		ctimes[r] = now_ms() - b;
	}
	if (st == FJ_OK) {
		br->median_ms = fj_rt_median(times, reps);
		br->copy_ms = fj_rt_median(ctimes, reps);
		br->reps = reps;
	}
	copy_end(&cb);
	free(times);
	return st;
}

static void program_free(void *prog) { fj_rt_program_destroy(prog); }
static const fj_rt_binding *program_binding(const void *prog) { return fj_rt_program_binding(prog); }

static void program_info(const void *prog, fj_rt_exec_info *out)
{
	*out = (fj_rt_exec_info){.compiled = fj_rt_program_compiled(prog), .threads = fj_rt_program_threads(prog)};
}

const fj_rt_executor fj_rt_aten_executor = {
	.name = "aten", .supports = aten_supports, .compile = aten_compile, .bind = program_bind,
	.run = program_run, .bench = program_bench, .free = program_free, .binding = program_binding,
	.info = program_info,
};

const fj_rt_executor fj_rt_host_executor = {
	.name = "host", .supports = host_supports, .compile = host_compile, .bind = program_bind,
	.run = program_run, .bench = program_bench, .free = program_free, .binding = program_binding,
	.info = program_info,
};

/* ---- nvptx ---- */

static bool nvptx_supports(fj_context *ctx, const fj_graph *g) { return fj_nvptx_cuda_usable(ctx); }

static fj_status nvptx_compile(fj_context *ctx, fj_graph *g, const fj_rt_exec_options *o, void **prog)
{
	fj_rt_nvprog *p = NULL;
	fj_status st = o && o->device ? fj_rt_nvptx_create_on(ctx, g, o->device, &p) : fj_rt_nvptx_create(ctx, g, &p);
	*prog = p;
	return st;
}

static fj_status nvptx_bind(void *prog, const fj_rt_tensor *const *inputs, const char *const *origin,
                            const fj_rt_dimarg *dims, size_t ndims)
{
	return fj_rt_nvptx_bind(prog, inputs, origin, dims, ndims);
}

static fj_status nvptx_run(void *prog, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                           fj_rt_tensor *outputs, const uint64_t *out_dev)
{
	return fj_rt_nvptx_run_dev(prog, inputs, in_dev, outputs, out_dev);
}

static fj_status nvptx_bench(void *prog, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs, int reps,
                             fj_rt_bench *out)
{
	fj_rt_nvptx_bench_result nb;
	fj_status st = fj_rt_nvptx_bench(prog, inputs, &nb);
	*out = (fj_rt_bench){.median_ms = nb.median_ms, .copy_ms = nb.copy_ms, .reps = nb.reps, .bytes = nb.bytes};
	return st;
}

static void nvptx_free(void *prog) { fj_rt_nvptx_destroy(prog); }
static void nvptx_set_stream(void *prog, void *stream) { fj_rt_nvptx_set_stream(prog, stream); }
static const fj_rt_binding *nvptx_binding(const void *prog) { return fj_rt_nvptx_binding(prog); }

static void nvptx_info(const void *prog, fj_rt_exec_info *out)
{
	*out = (fj_rt_exec_info){
		.compiled = fj_rt_nvptx_compiled(prog), .kernels = fj_rt_nvptx_kernels(prog), .threads = 1,
		.target = fj_rt_nvptx_target(prog), .device = fj_rt_nvptx_device(prog),
	};
}

const fj_rt_executor fj_rt_nvptx_executor = {
	.name = "nvptx", .supports = nvptx_supports, .compile = nvptx_compile, .bind = nvptx_bind,
	.run = nvptx_run, .bench = nvptx_bench, .free = nvptx_free, .binding = nvptx_binding,
	.info = nvptx_info, .set_stream = nvptx_set_stream,
};

/* ---- the calls ---- */

const fj_rt_executor *fj_rt_executor_named(const char *name)
{
	static const fj_rt_executor *const all[] = {&fj_rt_aten_executor, &fj_rt_host_executor, &fj_rt_nvptx_executor};
	for (size_t i = 0; i < FJ_ARRAY_LEN(all); i++)
		if (strcmp(all[i]->name, name) == 0)
			return all[i];
	return NULL;
}

const fj_rt_executor *fj_rt_executor_auto(fj_context *ctx, const fj_graph *g)
{
	return fj_rt_nvptx_executor.supports(ctx, g) ? &fj_rt_nvptx_executor : &fj_rt_host_executor;
}

fj_status fj_rt_exec_create(const fj_rt_executor *ex, fj_context *ctx, fj_graph *g, const fj_rt_exec_options *o,
                            fj_rt_exec **out)
{
	*out = NULL;
	fj_rt_exec *e = fj_alloc(ctx, sizeof *e);
	if (!e)
		return oom(ctx);
	*e = (fj_rt_exec){.ex = ex, .ctx = ctx, .g = g};
	fj_status st = ex->compile(ctx, g, o, &e->prog);
	if (st != FJ_OK) {
		fj_rt_exec_destroy(e);
		return st;
	}
	*out = e;
	return FJ_OK;
}

void fj_rt_exec_destroy(fj_rt_exec *e)
{
	if (!e)
		return;
	if (e->prog)
		e->ex->free(e->prog);
	fj_free(e->ctx, e, sizeof *e);
}

fj_status fj_rt_exec_bind(fj_rt_exec *e, const fj_rt_tensor *const *inputs, const char *const *origin,
                          const fj_rt_dimarg *dims, size_t ndims)
{
	return e->ex->bind(e->prog, inputs, origin, dims, ndims);
}

void fj_rt_exec_set_stream(fj_rt_exec *e, void *stream)
{
	if (e->ex->set_stream)
		e->ex->set_stream(e->prog, stream);
}

fj_status fj_rt_exec_run(fj_rt_exec *e, const fj_rt_tensor *const *inputs, const uint64_t *in_dev,
                         fj_rt_tensor *outputs, const uint64_t *out_dev)
{
	return e->ex->run(e->prog, inputs, in_dev, outputs, out_dev);
}

fj_status fj_rt_exec_bench(fj_rt_exec *e, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs, int reps,
                           fj_rt_bench *out)
{
	return e->ex->bench(e->prog, inputs, outputs, reps, out);
}

const int64_t *fj_rt_exec_value_dims(const fj_rt_exec *e, fj_vid v)
{
	return fj_rt_binding_dims(e->ex->binding(e->prog), v);
}

int64_t fj_rt_exec_symbol(const fj_rt_exec *e, uint32_t s)
{
	return fj_rt_binding_symbol(e->ex->binding(e->prog), s);
}

fj_rt_exec_info fj_rt_exec_info_of(const fj_rt_exec *e)
{
	fj_rt_exec_info info;
	e->ex->info(e->prog, &info);
	return info;
}
