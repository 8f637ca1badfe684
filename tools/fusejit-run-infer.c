/* fusejit-run-infer.c -- a forward run of fusejit-run (IR.md §5): the inputs
 * (files, then seeded random data of the sizes the program binds), the run,
 * --check=aten and --check=f64, --bench, the compile times, --output-dir and
 * the text or JSON report. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusejit-run.h"
#include "npy.h"

/* Everything a forward run holds. */
typedef struct infer {
	size_t np, nr;
	fj_tensor *in, *out, *refout;
	const fj_tensor **given;
	const char **origin;
	named_out *outs;
	f64_verdict *v64;
	fj_program *p;
	fj_executor ex;       /* as resolved */
	fj_program_stats stats;
	fj_bench_result bench;
	double compile_cold, compile_warm;
	bool aten_ok, f64_all_ok;
} infer;

static void infer_free(infer *r)
{
	for (size_t i = 0; r->in && i < r->np; i++)
		npy_free(&r->in[i]);
	for (size_t k = 0; k < r->nr; k++) {
		if (r->out)
			fj_tensor_release(&r->out[k]);
		if (r->refout)
			fj_tensor_release(&r->refout[k]);
	}
	free(r->in);
	free(r->out);
	free(r->refout);
	free((void *)r->given);
	free(r->origin);
	free_outputs(r->outs, (uint32_t)r->nr);
	free(r->v64);
	fj_program_destroy(r->p);
}

/* --check=aten: the same graph and inputs on aten. */
static int check_aten(fj_context *ctx, fj_module *m, const run_opts *o, const fj_run_options *ro, infer *r)
{
	fj_program *ref;
	fj_status st = compile(ctx, m, o, FJ_EXECUTOR_ATEN, false, &ref, NULL);
	if (st == FJ_OK)
		st = fj_program_run_with(ref, ro, r->in, r->np, r->refout, r->nr);
	fj_program_destroy(ref);
	if (st != FJ_OK)
		return report(ctx, st);
	for (size_t k = 0; k < r->nr; k++)
		r->aten_ok &= aten_judge(&r->out[k], &r->refout[k], &r->outs[k].relerr);
	return 0;
}

/* --check=f64: the graph in f64 on aten, and its perturbed copies. */
static int check_f64(fj_context *ctx, fj_module *m, const run_opts *o, const fj_run_options *ro, infer *r)
{
	fj_reference_options opts;
	fj_reference_options_init(&opts);
	opts.graph = o->graph;
	opts.run = ro;
	fj_reference *ref;
	fj_status st = fj_reference_f64(ctx, m, &opts, r->in, r->np, NULL, 0, &ref);
	if (st != FJ_OK)
		return report(ctx, st);
	for (size_t k = 0; k < r->nr; k++) {
		r->v64[k] = f64_judge(ref, k, &r->out[k]);
		r->f64_all_ok &= f64_ok(&r->v64[k]);
	}
	fj_reference_destroy(ref);
	return 0;
}

static const char *exec_name(fj_executor ex)
{
	return ex == FJ_EXECUTOR_NVPTX ? "nvptx" : ex == FJ_EXECUTOR_ATEN ? "aten" : "host";
}

static void print_json(const run_opts *o, const infer *r, bool written)
{
	FILE *f = stdout;
	fputs("{\"graph\": ", f);
	json_str(f, o->graph);
	fprintf(f, ", \"executor\": \"%s\", \"outputs\": [", exec_name(r->ex));
	for (size_t k = 0; k < r->nr; k++) {
		fprintf(f, "%s{\"name\": ", k ? ", " : "");
		json_str(f, r->outs[k].stem);
		fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", fj_scalar_type_name(r->out[k].dtype));
		for (int d = 0; d < r->out[k].rank; d++)
			fprintf(f, "%s%lld", d ? ", " : "", (long long)r->out[k].sizes[d]);
		fputc(']', f);
		if (written) {
			fputs(", \"file\": ", f);
			json_str(f, r->outs[k].path);
		}
		if (o->check) {
			fputs(", \"rel_err\": ", f);
			json_num(f, r->outs[k].relerr);
		}
		if (o->check64)
			f64_json(f, &r->v64[k]);
		fputc('}', f);
	}
	fputs("], \"compile_ms\": {\"cold\": ", f);
	json_num(f, r->compile_cold);
	fputs(", \"warm\": ", f);
	json_num(f, r->compile_warm);
	fputc('}', f);
	if (o->bench)
		json_bench(f, r->bench.median_ms, r->bench.copy_ms, r->bench.bytes);
	fputs("}\n", f);
}

static void print_text(const fj_module *m, const run_opts *o, const infer *r, bool written)
{
	FILE *f = stdout;
	const fj_program_stats *s = &r->stats;
	if (r->ex == FJ_EXECUTOR_NVPTX)
		fprintf(f, "@%s on nvptx (%s, %s; %u fused kernels), seed %llu\n", o->graph, s->device, s->target,
		        s->kernels, (unsigned long long)o->seed);
	else if (r->ex == FJ_EXECUTOR_HOST)
		fprintf(f, "@%s on host (%d threads; fused kernels), seed %llu\n", o->graph, s->threads,
		        (unsigned long long)o->seed);
	else
		fprintf(f, "@%s on aten (reference, one thread), seed %llu\n", o->graph, (unsigned long long)o->seed);
	char ty[300];
	fj_value_info vi;
	for (size_t i = 0; i < r->np; i++) {
		type_str(&r->in[i], ty, sizeof ty);
		fj_module_value_info(m, o->graph, FJ_ROLE_INPUT, i, &vi);
		fprintf(f, "input %%%s: %s (%s%s)\n", vi.name, ty, r->origin[i] ? "from " : "random",
		        r->origin[i] ? r->origin[i] : "");
	}
	for (size_t k = 0; k < r->nr; k++) {
		const named_out *no = &r->outs[k];
		type_str(&r->out[k], ty, sizeof ty);
		if (!no->value[0] || strcmp(no->stem, no->value) != 0)
			fprintf(f, "output %zu (%s): %s\n", k, no->stem, ty);
		else
			fprintf(f, "output %zu %%%s: %s\n", k, no->stem, ty);
		print_summary(f, &r->out[k]);
		if (o->check) {
			double tol = fj_check_tolerance(FJ_CHECK_ATEN, r->out[k].dtype);
			if (isinf(no->relerr))
				fprintf(f, "  vs aten: NaN/inf at different places: FAIL\n");
			else
				fprintf(f, "  vs aten: rel_err %.3g (tolerance %g): %s\n", no->relerr, tol,
				        no->relerr <= tol ? "ok" : "FAIL");
		}
		if (o->check64)
			f64_print(f, &r->v64[k]);
		if (written)
			fprintf(f, "  written to %s\n", no->path);
	}
	if (o->bench || r->compile_warm >= 0)
		fprintf(f, "compile: cold %.3f ms (%u kernels compiled), warm %.3f ms\n", r->compile_cold, s->compiled,
		        r->compile_warm);
	if (o->bench)
		print_bench(f, "bench", &r->bench);
}

/* The outputs' file stems, from the graph as written. */
static void name_outputs(const fj_module *m, const run_opts *o, infer *r)
{
	const char *names[r->nr + 1];
	char *prev[r->nr + 1];
	fj_value_info vi;
	for (size_t k = 0; k < r->nr; k++) {
		names[k] = fj_module_value_info(m, o->graph, FJ_ROLE_OUTPUT, k, &vi) == FJ_OK ? vi.name : "";
		snprintf(r->outs[k].value, STEM_MAX, "%s", names[k]);
	}
	for (size_t k = 0; k < r->nr; k++) {
		output_stem(names, (uint32_t)r->nr, (uint32_t)k, prev, r->outs[k].stem);
		prev[k] = r->outs[k].stem;
		r->outs[k].t = &r->out[k];
	}
}

/* Inputs, compile, random inputs, the run. */
static int infer_run(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex, const fj_run_options *ro,
                     infer *r)
{
	if (read_inputs(ctx, m, o, r->in, r->given, r->origin) != 0)
		return 1;
	fj_status st = compile(ctx, m, o, ex, false, &r->p, &r->compile_cold);
	if (st != FJ_OK)
		return report(ctx, st);
	r->ex = fj_program_executor(r->p);
	if (random_inputs(ctx, r->p, o, ro, r->in, r->given) != 0)
		return 1;
	if ((st = fj_program_run_with(r->p, ro, r->in, r->np, r->out, r->nr)) != FJ_OK)
		return report(ctx, st);
	fj_program_stats_init(&r->stats);
	fj_program_stats_get(r->p, &r->stats);
	name_outputs(m, o, r);
	return 0;
}

int run_inference(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex)
{
	infer r = {.compile_warm = -1, .aten_ok = true, .f64_all_ok = true};
	r.np = fj_module_value_count(m, o->graph, FJ_ROLE_INPUT);
	r.nr = fj_module_value_count(m, o->graph, FJ_ROLE_OUTPUT);
	r.in = calloc(r.np + 1, sizeof *r.in);
	r.given = calloc(r.np + 1, sizeof *r.given);
	r.origin = calloc(r.np + 1, sizeof *r.origin);
	r.out = calloc(r.nr + 1, sizeof *r.out);
	r.refout = calloc(r.nr + 1, sizeof *r.refout);
	r.outs = calloc(r.nr + 1, sizeof *r.outs);
	r.v64 = calloc(r.nr + 1, sizeof *r.v64);
	int rc = 1;
	if (!r.in || !r.given || !r.origin || !r.out || !r.refout || !r.outs || !r.v64) {
		errorf("out of memory");
		goto done;
	}
	for (size_t k = 0; k < r.nr; k++) {
		fj_tensor_init(&r.out[k]);
		fj_tensor_init(&r.refout[k]);
	}
	fj_run_options ro = run_options(o, r.origin);
	if (infer_run(ctx, m, o, ex, &ro, &r) != 0 || (o->check && check_aten(ctx, m, o, &ro, &r) != 0) ||
	    (o->check64 && check_f64(ctx, m, o, &ro, &r) != 0))
		goto done;
	bool check_ok = r.aten_ok && r.f64_all_ok;
	fj_bench_options bo;
	fj_bench_options_init(&bo);
	bo.reps = o->bench_reps;
	bo.run = &ro;
	fj_bench_result_init(&r.bench);
	fj_status st;
	if (o->bench && (st = fj_program_bench(r.p, &bo, r.in, r.np, &r.bench)) != FJ_OK) {
		report(ctx, st);
		goto done;
	}
	if (o->bench || o->json) {
		fj_program *again = NULL;
		st = compile(ctx, m, o, ex, false, &again, &r.compile_warm);
		fj_program_destroy(again);
		if (st != FJ_OK) {
			report(ctx, st);
			goto done;
		}
	}
	if (o->outdir && check_ok && write_outputs(o->outdir, r.outs, (uint32_t)r.nr) != 0)
		goto done;
	if (o->json)
		print_json(o, &r, o->outdir && check_ok);
	else
		print_text(m, o, &r, o->outdir && check_ok);
	if (!check_ok) {
		fflush(stdout);
		check_failed(r.aten_ok, r.f64_all_ok, false, o->outdir != NULL);
		goto done;
	}
	rc = 0;
done:
	infer_free(&r);
	return rc;
}
