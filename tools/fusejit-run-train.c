/* fusejit-run-train.c -- fusejit-run --train (IR.md §5): the graph compiled
 * for training (autodiff + min-cut partition: @f.fw and @f.bw), the forward
 * on the inputs (files or seeded random data), the backward on its saved
 * values and the tangents (--tangent files, else seeded random data of the
 * outputs' shapes), the checks, --bench of both, the outputs and gradients
 * (grad_<param>) written and reported. */
#include <stdlib.h>
#include <string.h>

#include "fusejit-run.h"
#include "npy.h"

typedef struct train {
	size_t np, K, nt, ng, nouts;
	fj_tensor *in, *fwout, *tin, *grads, *refout, *refgrad;
	const fj_tensor **given, **tgiven;
	const char **origin, **torigin;
	named_out *outs;
	f64_verdict *v64;
	fj_program *p;
	fj_saved *saved;
	fj_executor ex;
	fj_program_stats stats;
	fj_bench_result bf, bb;
	bool aten_ok, f64_all_ok;
} train;

static void train_free(train *r)
{
	for (size_t i = 0; r->in && i < r->np; i++)
		npy_free(&r->in[i]);
	for (size_t i = 0; r->tin && i < r->nt; i++)
		npy_free(&r->tin[i]);
	for (size_t k = 0; k < r->K; k++) {
		if (r->fwout)
			fj_tensor_release(&r->fwout[k]);
		if (r->refout)
			fj_tensor_release(&r->refout[k]);
	}
	for (size_t k = 0; k < r->ng; k++) {
		if (r->grads)
			fj_tensor_release(&r->grads[k]);
		if (r->refgrad)
			fj_tensor_release(&r->refgrad[k]);
	}
	free(r->in);
	free(r->fwout);
	free(r->tin);
	free(r->grads);
	free(r->refout);
	free(r->refgrad);
	free((void *)r->given);
	free((void *)r->tgiven);
	free(r->origin);
	free(r->torigin);
	free_outputs(r->outs, (uint32_t)r->nouts);
	free(r->v64);
	fj_saved_destroy(r->saved);
	fj_program_destroy(r->p);
}

static int train_alloc(train *r)
{
	size_t n = r->K + r->ng + 1;
	r->in = calloc(r->np + 1, sizeof *r->in);
	r->given = calloc(r->np + 1, sizeof *r->given);
	r->origin = calloc(r->np + 1, sizeof *r->origin);
	r->tin = calloc(r->nt + 1, sizeof *r->tin);
	r->tgiven = calloc(r->nt + 1, sizeof *r->tgiven);
	r->torigin = calloc(r->nt + 1, sizeof *r->torigin);
	r->fwout = calloc(r->K + 1, sizeof *r->fwout);
	r->refout = calloc(r->K + 1, sizeof *r->refout);
	r->grads = calloc(r->ng + 1, sizeof *r->grads);
	r->refgrad = calloc(r->ng + 1, sizeof *r->refgrad);
	r->outs = calloc(n, sizeof *r->outs);
	r->v64 = calloc(n, sizeof *r->v64);
	if (!r->in || !r->given || !r->origin || !r->tin || !r->tgiven || !r->torigin || !r->fwout || !r->refout ||
	    !r->grads || !r->refgrad || !r->outs || !r->v64)
		return errorf("out of memory");
	for (size_t k = 0; k < r->K; k++) {
		fj_tensor_init(&r->fwout[k]);
		fj_tensor_init(&r->refout[k]);
	}
	for (size_t k = 0; k < r->ng; k++) {
		fj_tensor_init(&r->grads[k]);
		fj_tensor_init(&r->refgrad[k]);
	}
	return 0;
}

/* The forward output `--tangent NAME` means (*k): the one written to
 * NAME.npy, else the one that returns %NAME, which must then be the only
 * one (the stems out<i> tell several apart). Returns 1 after an error. */
static int tangent_output(const named_out *outs, size_t K, const char *gname, const char *name, size_t *k)
{
	for (*k = 0; *k < K; (*k)++)
		if (strcmp(outs[*k].stem, name) == 0)
			return 0;
	const char *vn = name[0] == '%' ? name + 1 : name;
	char stems[600] = "";
	size_t len = 0;
	uint32_t n = 0;
	for (size_t j = 0; j < K; j++) {
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

/* The tangent (its index among FJ_ROLE_TANGENT) of forward output k, or nt. */
static size_t tangent_of(const fj_program *p, size_t nt, size_t k)
{
	fj_value_info vi;
	for (size_t t = 0; t < nt; t++) {
		unsigned j;
		if (fj_program_info(p, FJ_ROLE_TANGENT, t, &vi) == FJ_OK && sscanf(vi.name, "tangent_%u", &j) == 1 &&
		    j == k)
			return t;
	}
	return nt;
}

/* The tangents: --tangent files, else seeded random data of the shape of
 * the output they belong to. */
static int tangents(const run_opts *o, train *r)
{
	for (size_t t = 0; t < o->ntangents; t++) {
		size_t k, i;
		if (tangent_output(r->outs, r->K, o->graph, o->tangents[t].name, &k) != 0)
			return 1;
		if ((i = tangent_of(r->p, r->nt, k)) == r->nt)
			return errorf("--tangent %s: @%s has no floating-point output named %s", o->tangents[t].name,
			              o->graph, o->tangents[t].name);
		if (r->tgiven[i])
			return errorf("--tangent %s: the tangent of output %s is given twice", o->tangents[t].name,
			              r->outs[k].stem);
		npy_error e;
		if (npy_read(&e, o->tangents[t].value, &r->tin[i]) != FJ_OK)
			return errorf("%s", e.msg);
		r->tgiven[i] = &r->tin[i];
		r->torigin[i] = o->tangents[t].value;
	}
	for (size_t i = 0; i < r->nt; i++) {
		fj_value_info vi;
		unsigned k = 0;
		if (r->tgiven[i] || fj_program_info(r->p, FJ_ROLE_TANGENT, i, &vi) != FJ_OK)
			continue;
		if (sscanf(vi.name, "tangent_%u", &k) != 1 || k >= r->K)
			return errorf("--train: tangent %%%s belongs to no output", vi.name);
		if (!npy_alloc(&r->tin[i], vi.dtype, r->fwout[k].rank, r->fwout[k].sizes))
			return errorf("out of memory");
		char name[300];
		snprintf(name, sizeof name, "tangent:%s", vi.name);
		fill_random(&r->tin[i], o->seed, name, -1);
	}
	return 0;
}

/* The outputs' stems (the graph as written), then grad_<param>. */
static void name_outputs(const fj_module *m, const run_opts *o, train *r)
{
	const char *names[r->K + 1];
	char *prev[r->K + 1];
	fj_value_info vi;
	for (size_t k = 0; k < r->K; k++) {
		names[k] = fj_module_value_info(m, o->graph, FJ_ROLE_OUTPUT, k, &vi) == FJ_OK ? vi.name : "";
		snprintf(r->outs[k].value, STEM_MAX, "%s", names[k]);
	}
	for (size_t k = 0; k < r->K; k++) {
		output_stem(names, (uint32_t)r->K, (uint32_t)k, prev, r->outs[k].stem);
		prev[k] = r->outs[k].stem;
		r->outs[k].t = &r->fwout[k];
	}
	for (size_t g = 0; g < r->ng; g++) {
		named_out *no = &r->outs[r->K + g];
		if (fj_program_info(r->p, FJ_ROLE_GRADIENT, g, &vi) == FJ_OK)
			snprintf(no->stem, STEM_MAX, "grad_%s", vi.name);
		no->t = &r->grads[g];
	}
	r->nouts = r->K + r->ng;
}

/* Compile, the inputs, the forward, the tangents and the backward. */
static int train_run(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex, train *r)
{
	fj_status st = compile(ctx, m, o, ex, true, &r->p, NULL);
	if (st != FJ_OK)
		return report(ctx, st);
	r->ex = fj_program_executor(r->p);
	r->np = fj_program_count(r->p, FJ_ROLE_INPUT);
	r->K = fj_program_count(r->p, FJ_ROLE_OUTPUT);
	r->nt = fj_program_count(r->p, FJ_ROLE_TANGENT);
	r->ng = fj_program_count(r->p, FJ_ROLE_GRADIENT);
	if (train_alloc(r) != 0)
		return 1;
	name_outputs(m, o, r);
	fj_run_options ro = run_options(o, r->origin), tro = run_options(o, r->torigin);
	ro.saved_in_place = 1; /* the inputs and outputs outlive r->saved, unchanged */
	if (read_inputs(ctx, m, o, r->in, r->given, r->origin) != 0 ||
	    random_inputs(ctx, r->p, o, &ro, r->in, r->given) != 0)
		return 1;
	if ((st = fj_program_forward_with(r->p, &ro, r->in, r->np, r->fwout, r->K, &r->saved)) != FJ_OK)
		return report(ctx, st);
	if (tangents(o, r) != 0)
		return 1;
	if ((st = fj_program_backward_with(r->p, &tro, r->saved, r->tin, r->nt, r->grads, r->ng)) != FJ_OK)
		return report(ctx, st);
	fj_program_stats_init(&r->stats);
	fj_program_stats_get(r->p, &r->stats);
	return 0;
}

/* --check=aten: the same forward and backward graphs on the reference. */
static int check_aten(fj_context *ctx, fj_module *m, const run_opts *o, train *r)
{
	fj_program *ref;
	fj_saved *saved = NULL;
	fj_run_options ro = run_options(o, NULL);
	fj_status st = compile(ctx, m, o, FJ_EXECUTOR_ATEN, true, &ref, NULL);
	if (st == FJ_OK)
		st = fj_program_forward_with(ref, &ro, r->in, r->np, r->refout, r->K, &saved);
	if (st == FJ_OK)
		st = fj_program_backward_with(ref, &ro, saved, r->tin, r->nt, r->refgrad, r->ng);
	fj_saved_destroy(saved);
	fj_program_destroy(ref);
	if (st != FJ_OK)
		return report(ctx, st);
	for (size_t j = 0; j < r->nouts; j++)
		r->aten_ok &= aten_judge(r->outs[j].t, j < r->K ? &r->refout[j] : &r->refgrad[j - r->K],
		                         &r->outs[j].relerr);
	return 0;
}

/* --check=f64: the graph's f64 copy trained on aten, and perturbed. */
static int check_f64(fj_context *ctx, fj_module *m, const run_opts *o, train *r)
{
	fj_reference_options opts;
	fj_reference_options_init(&opts);
	opts.graph = o->graph;
	opts.training = 1;
	fj_run_options ro = run_options(o, NULL);
	opts.run = &ro;
	fj_reference *ref;
	fj_status st = fj_reference_f64(ctx, m, &opts, r->in, r->np, r->tin, r->nt, &ref);
	if (st != FJ_OK)
		return report(ctx, st);
	for (size_t j = 0; j < r->nouts && j < fj_reference_count(ref); j++) {
		r->v64[j] = f64_judge(ref, j, r->outs[j].t);
		r->f64_all_ok &= f64_ok(&r->v64[j]);
	}
	fj_reference_destroy(ref);
	return 0;
}

static int bench(fj_context *ctx, const run_opts *o, train *r)
{
	fj_bench_options bo;
	fj_bench_options_init(&bo);
	bo.reps = o->bench_reps;
	fj_run_options ro = run_options(o, NULL);
	bo.run = &ro;
	fj_bench_result_init(&r->bf);
	fj_bench_result_init(&r->bb);
	ro.saved_in_place = 1; /* as the forward run (train_run) */
	fj_status st = fj_program_bench(r->p, &bo, r->in, r->np, &r->bf);
	bo.backward = 1;
	bo.saved = r->saved;
	if (st == FJ_OK)
		st = fj_program_bench(r->p, &bo, r->tin, r->nt, &r->bb);
	return st == FJ_OK ? 0 : report(ctx, st);
}

static void print_json(const run_opts *o, const train *r, bool written)
{
	FILE *f = stdout;
	fputs("{\"graph\": ", f);
	json_str(f, o->graph);
	fprintf(f, ", \"executor\": \"%s\", \"outputs\": [",
	        r->ex == FJ_EXECUTOR_NVPTX ? "nvptx" : r->ex == FJ_EXECUTOR_ATEN ? "aten" : "host");
	for (size_t j = 0; j < r->nouts; j++) {
		const fj_tensor *t = r->outs[j].t;
		fprintf(f, "%s{\"name\": ", j ? ", " : "");
		json_str(f, r->outs[j].stem);
		fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", fj_scalar_type_name(t->dtype));
		for (int d = 0; d < t->rank; d++)
			fprintf(f, "%s%lld", d ? ", " : "", (long long)t->sizes[d]);
		fputc(']', f);
		if (written) {
			fputs(", \"file\": ", f);
			json_str(f, r->outs[j].path);
		}
		if (o->check) {
			fputs(", \"rel_err\": ", f);
			json_num(f, r->outs[j].relerr);
		}
		if (o->check64)
			f64_json(f, &r->v64[j]);
		fputc('}', f);
	}
	fputc(']', f);
	if (o->bench) /* forward and backward together */
		json_bench(f, r->bf.median_ms + r->bb.median_ms, r->bf.copy_ms + r->bb.copy_ms, r->bf.bytes + r->bb.bytes);
	fputs("}\n", f);
}

static void print_text(const run_opts *o, const train *r, bool written)
{
	FILE *f = stdout;
	char where[300] = "";
	const char *exn = r->ex == FJ_EXECUTOR_NVPTX ? "nvptx" : r->ex == FJ_EXECUTOR_ATEN ? "aten" : "host";
	if (r->ex == FJ_EXECUTOR_NVPTX)
		snprintf(where, sizeof where, " (%s, %s; %u + %u fused kernels)", r->stats.device, r->stats.target,
		         r->stats.kernels, r->stats.kernels_backward);
	fprintf(f, "@%s trained on %s%s: @%s.fw (%zu outputs, %zu saved) and @%s.bw, seed %llu\n", o->graph, exn, where,
	        o->graph, r->K, fj_program_count(r->p, FJ_ROLE_SAVED), o->graph, (unsigned long long)o->seed);
	for (size_t j = 0; j < r->nouts; j++) {
		const fj_tensor *t = r->outs[j].t;
		char ty[300];
		type_str(t, ty, sizeof ty);
		fprintf(f, "%s %s: %s\n", j < r->K ? "output" : "gradient", r->outs[j].stem, ty);
		print_summary(f, t);
		if (o->check) {
			double tol = fj_check_tolerance(FJ_CHECK_ATEN, t->dtype);
			fprintf(f, "  vs aten: rel_err %.3g (tolerance %g): %s\n", r->outs[j].relerr, tol,
			        r->outs[j].relerr <= tol ? "ok" : "FAIL");
		}
		if (o->check64)
			f64_print(f, &r->v64[j]);
		if (written)
			fprintf(f, "  written to %s\n", r->outs[j].path);
	}
	if (o->bench) {
		print_bench(f, "bench forward", &r->bf);
		print_bench(f, "bench backward", &r->bb);
	}
}

int run_train(fj_context *ctx, fj_module *m, const run_opts *o, fj_executor ex)
{
	train r = {.aten_ok = true, .f64_all_ok = true};
	int rc = 1;
	if (train_run(ctx, m, o, ex, &r) != 0 || (o->check && check_aten(ctx, m, o, &r) != 0) ||
	    (o->check64 && check_f64(ctx, m, o, &r) != 0) || (o->bench && bench(ctx, o, &r) != 0))
		goto done;
	bool check_ok = r.aten_ok && r.f64_all_ok;
	if (o->outdir && check_ok && write_outputs(o->outdir, r.outs, (uint32_t)r.nouts) != 0)
		goto done;
	if (o->json)
		print_json(o, &r, o->outdir && check_ok);
	else
		print_text(o, &r, o->outdir && check_ok);
	if (!check_ok) {
		fflush(stdout);
		check_failed(r.aten_ok, r.f64_all_ok, true, o->outdir != NULL);
		goto done;
	}
	rc = 0;
done:
	train_free(&r);
	return rc;
}
