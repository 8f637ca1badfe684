/* bench.c -- fj_program_bench (fusejit.h, "Benchmarks"): IR.md §5's --bench,
 * the executor's own (runtime/executor.h, fj_rt_exec_bench). Host and aten:
 * whole runs timed with the monotonic clock (up to 3 warm-up runs, then
 * enough for about 0.5 s, 5 to 1000, or the caller's count), against a
 * memcpy of bytes/2 over the host's threads; nvptx: the launches alone,
 * timed with CUDA events, against a device-to-device copy. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

typedef struct bench_req {
	fj_context *ctx;
	int reps; /* the caller's, 0: timed */
	fj_bench_result *r;
	uint32_t inplace_from; /* results from here on (the saved values) share the memory of the
	                          input or output they equal (saved_in_place); UINT32_MAX: none */
} bench_req;

/* saved_in_place (results from q->inplace_from on): a saved result that is
 * a parameter is its input's memory, one that is also an output (an earlier
 * result) that output's; shared[k] says so (the run copies nothing there,
 * and these are not ours to free). */
static fj_status share_saved(bench_req *q, const fj_api_inst *i, fj_rt_tensor *out, bool *shared)
{
	const fj_graph *g = i->g;
	for (uint32_t k = q->inplace_from; k < g->nresults; k++) {
		const fj_value *val = &g->values[g->results[k]];
		if (val->kind == FJ_VK_PARAM) {
			out[k] = *i->in[val->def];
			shared[k] = true;
			continue;
		}
		for (uint32_t j = 0; j < q->inplace_from && val->kind != FJ_VK_LITERAL; j++) {
			if (g->results[j] != g->results[k])
				continue;
			fj_status st = out[j].data ? FJ_OK
			               : fj_rt_tensor_reshape(q->ctx, &out[j], val->type.dtype, val->type.rank,
			                                      fj_rt_exec_value_dims(i->rt, g->results[j]));
			if (st != FJ_OK)
				return st;
			if (out[j].data) {
				out[k] = out[j];
				shared[k] = true;
			}
			break;
		}
	}
	return FJ_OK;
}

static fj_status bench_fn(void *ud, const fj_api_inst *i)
{
	bench_req *q = ud;
	fj_status st = fj_rt_exec_bind(i->rt, i->in, i->origin, i->dims, i->ndims);
	if (st != FJ_OK)
		return st;
	uint32_t nr = i->g->nresults ? i->g->nresults : 1;
	fj_rt_tensor *out = calloc(nr, sizeof *out);
	bool *shared = calloc(nr, sizeof *shared);
	if (!out || !shared) {
		free(out);
		free(shared);
		return fj_error_status(q->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	}
	st = share_saved(q, i, out, shared);
	fj_rt_bench b;
	if (st == FJ_OK)
		st = fj_rt_exec_bench(i->rt, i->in, out, q->reps, &b);
	if (st == FJ_OK) {
		q->r->median_ms = b.median_ms;
		q->r->copy_ms = b.copy_ms;
		q->r->reps = b.reps;
		q->r->bytes = b.bytes;
	}
	for (uint32_t k = 0; k < i->g->nresults; k++)
		if (!shared[k])
			fj_rt_tensor_free(&out[k]);
	free(out);
	free(shared);
	return st;
}

fj_status fj_program_bench(fj_program *p, const fj_bench_options *o, const fj_tensor *inputs, size_t ninputs,
                           fj_bench_result *out)
{
	if (!p || !out)
		return FJ_ERR_INVALID;
	fj_context *ctx = fj_api_program_context(p);
	fj_bench_options opts;
	fj_bench_options_init(&opts);
	if (o && !fj_api_copy_in(&opts, sizeof opts, o, o->struct_size))
		return fj_api_arg_error(ctx, "fj_program_bench", "options not initialised (fj_bench_options_init)");
	if (out->struct_size < sizeof(uint32_t))
		return fj_api_arg_error(ctx, "fj_program_bench", "result not initialised (fj_bench_result_init)");
	if (fj_api_program_emulated(p))
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, (fj_loc){0},
		                       "a benchmark needs the CUDA device (it times kernels with CUDA events), not the "
		                       "emulator");
	const fj_tensor **in = calloc(ninputs + 1, sizeof *in);
	if (!in)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (size_t k = 0; k < ninputs && inputs; k++)
		in[k] = &inputs[k];
	fj_bench_result r;
	fj_bench_result_init(&r);
	fj_run_options ro;
	fj_status st = fj_api_run_options(ctx, opts.run, &ro);
	if (st != FJ_OK) {
		free(in);
		return st;
	}
	bool inplace = !opts.backward && ro.saved_in_place && fj_program_executor(p) != FJ_EXECUTOR_NVPTX;
	bench_req q = {ctx, opts.reps, &r, inplace ? (uint32_t)fj_program_count(p, FJ_ROLE_OUTPUT) : UINT32_MAX};
	fj_api_use u = {opts.backward != 0, opts.saved, in, ninputs, opts.run, false};
	st = fj_api_program_with(p, &u, bench_fn, &q);
	free(in);
	if (st == FJ_OK)
		fj_api_copy_out(out, &r, sizeof r);
	return st;
}
