/* reference.c -- fj_reference_f64 (fusejit.h, "Checking results"): the f64
 * reference of IR.md §5's --check=f64.
 *
 * The graph is copied into a module of the reference's own, beside its f64
 * copy (fj_pass_clone_f64); training runs the training pipeline over both,
 * so that @g.f64.fw and @g.f64.bw are what @g.fw and @g.bw compute, in f64.
 * Each graph to run (the f64 one, then CHECK64_SAMPLES copies of it whose
 * every float result is perturbed by a relative CHECK64_DELTA at most,
 * fj_pass_clone_perturbed) runs on aten as it is (runtime/program.h: no
 * pipeline, no copy) on the caller's inputs, float ones converted (exactly)
 * to f64. A
 * value's scale is the largest ||perturbed - ref||_2 / CHECK64_DELTA over
 * the samples; delta = 2^-20 keeps the response linear (second-order terms
 * ~delta^2) and far above f64's own roundings (~1e-16).
 *
 * Tolerances: for each value of the graph as the executor runs it (as
 * written; training: @g.fw and @g.bw), the tolerance of the least precise
 * rounding it went through: the largest among the dtypes of the float node
 * results it depends on, itself included (tol_walk); the backward's saved
 * values carry the forward's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "passes/reference.h"

#define CHECK64_DELTA 0x1p-20
#define CHECK64_SAMPLES 2
#define NAME_MAX_LEN 600

struct fj_reference {
	fj_context *ctx;
	size_t n;
	fj_rt_tensor *ref; /* n values */
	double *scale;
	double *ptol;      /* the tolerance of each value's roundings */
};

/* The outputs of one run. */
typedef struct outs {
	fj_rt_tensor *t;
	size_t n;
} outs;

static void outs_free(outs *o)
{
	for (size_t k = 0; o->t && k < o->n; k++)
		fj_rt_tensor_free(&o->t[k]);
	free(o->t);
	o->t = NULL;
	o->n = 0;
}

static fj_status oom(fj_context *ctx) { return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory"); }

/* The sizes of the runs (the run options' dims). */
typedef struct dimargs {
	const fj_rt_dimarg *a;
	size_t n;
} dimargs;

/* Runs graph `name` of m on aten (the graph as it is: no pipeline, no copy)
 * on in[0..nin), float ones converted to f64 parameters exactly, into *o
 * (all its results). */
static fj_status run_aten(fj_context *ctx, fj_module *m, const char *name, const fj_rt_tensor *const *in,
                          size_t nin, const dimargs *d, outs *o)
{
	fj_graph *g = fj_module_find_graph(m, name);
	if (!g || g->nparams != nin)
		return fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "--check=f64: internal error: no graph @%s of %zu "
		                       "parameters", name, nin);
	fj_rt_exec *p = NULL;
	fj_rt_tensor *own = calloc(nin + 1, sizeof *own);
	const fj_rt_tensor **pin = calloc(nin + 1, sizeof *pin);
	o->n = g->nresults;
	o->t = calloc(o->n + 1, sizeof *o->t);
	fj_status st = own && pin && o->t ? FJ_OK : oom(ctx);
	for (size_t k = 0; st == FJ_OK && k < nin; k++) {
		fj_dtype want = g->values[g->params[k]].type.dtype;
		pin[k] = in[k];
		if (!in[k])
			st = fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0},
			                     "--check=f64: internal error: parameter %zu of @%s has no value", k, name);
		else if (in[k]->dtype != want && fj_dtype_is_float(in[k]->dtype) && want == FJ_DT_F64 &&
		         (st = fj_rt_tensor_alloc(ctx, &own[k], want, in[k]->rank, in[k]->dims)) == FJ_OK) {
			for (int64_t i = 0, n = fj_rt_tensor_numel(in[k]); i < n; i++)
				fj_rt_store_f64(own[k].data, want, i, fj_rt_load_f64(in[k]->data, in[k]->dtype, i));
			pin[k] = &own[k];
		}
	}
	if (st == FJ_OK)
		st = fj_rt_exec_create(&fj_rt_aten_executor, ctx, g, NULL, &p);
	if (st == FJ_OK)
		st = fj_rt_exec_bind(p, pin, NULL, d->a, d->n);
	if (st == FJ_OK)
		st = fj_rt_exec_run(p, pin, NULL, o->t, NULL);
	fj_rt_exec_destroy(p);
	for (size_t k = 0; own && k < nin; k++)
		fj_rt_tensor_free(&own[k]);
	free(own);
	free(pin);
	if (st != FJ_OK)
		outs_free(o);
	return st;
}

/* scale[k] = max(scale[k], ||a[k] - b[k]||_2 / CHECK64_DELTA), k < n. */
static void add_scales(const outs *a, const outs *b, size_t n, double *scale)
{
	for (size_t k = 0; k < n && k < a->n && k < b->n; k++) {
		double d = fj_rt_l2_dist(&a->t[k], &b->t[k]) / CHECK64_DELTA;
		if (d > scale[k])
			scale[k] = d;
	}
}

/* For each value of g, the tolerance of the least precise rounding it went
 * through; parameters start from pin[i] (NULL: 0, inputs are exact). */
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

/* The perturbed copy `sample` of graph `name` of m, added to m; its name
 * into out[NAME_MAX_LEN] (which may be name). */
static fj_status perturbed(fj_module *m, const char *name, unsigned sample, char *out)
{
	const fj_graph *src = fj_module_find_graph(m, name); /* out may be name */
	char base[NAME_MAX_LEN];
	snprintf(base, sizeof base, "%s.perturbed%u", name, sample);
	fj_pass_fresh_graph_name(m, base, out, NAME_MAX_LEN);
	fj_graph *g;
	return fj_pass_clone_perturbed(src, out, CHECK64_DELTA, sample, &g);
}

static fj_status ref_alloc(fj_reference *r, size_t n)
{
	r->n = n;
	r->scale = calloc(n + 1, sizeof *r->scale);
	r->ptol = calloc(n + 1, sizeof *r->ptol);
	r->ref = calloc(n + 1, sizeof *r->ref);
	return r->scale && r->ptol && r->ref ? FJ_OK : oom(r->ctx);
}

/* Inference: graph g (as written) of m, and its f64 copy @name64. */
static fj_status ref_inference(fj_reference *r, fj_module *m, const fj_graph *g, const char *name64,
                               const fj_rt_tensor *const *in, size_t nin, const dimargs *ro)
{
	fj_context *ctx = r->ctx;
	outs ref = {0};
	fj_status st = ref_alloc(r, g->nresults);
	if (st == FJ_OK)
		st = run_aten(ctx, m, name64, in, nin, ro, &ref);
	for (unsigned smp = 1; st == FJ_OK && smp <= CHECK64_SAMPLES; smp++) {
		char pname[NAME_MAX_LEN];
		outs o = {0};
		if ((st = perturbed(m, name64, smp, pname)) == FJ_OK &&
		    (st = run_aten(ctx, m, pname, in, nin, ro, &o)) == FJ_OK)
			add_scales(&o, &ref, r->n, r->scale);
		outs_free(&o);
	}
	double *tol = st == FJ_OK ? tol_walk(g, NULL) : NULL;
	if (st == FJ_OK && !tol)
		st = oom(ctx);
	for (size_t k = 0; st == FJ_OK && k < r->n && k < ref.n; k++) {
		r->ptol[k] = tol[g->results[k]];
		r->ref[k] = ref.t[k];
		ref.t[k].data = NULL; /* handed over */
	}
	free(tol);
	outs_free(&ref);
	return st;
}

/* The parameter of bw (from nsaved on) that takes the tangent of forward
 * output k (%tangent_<k>), or bw->nparams. */
static uint32_t tangent_param(const fj_graph *bw, uint32_t nsaved, uint32_t k)
{
	for (uint32_t i = nsaved; i < bw->nparams; i++) {
		const char *pn = bw->values[bw->params[i]].name;
		unsigned t;
		if (pn && sscanf(pn, "tangent_%u", &t) == 1 && t == k)
			return i;
	}
	return bw->nparams;
}

/* A training graph pair: the forward's K outputs and saved values, the
 * backward's tangents. */
typedef struct pair {
	const fj_graph *fw, *bw;
	uint32_t K, nsaved;
} pair;

static bool find_pair(fj_module *m, const char *name, uint32_t K, pair *out)
{
	char n[NAME_MAX_LEN + 8];
	snprintf(n, sizeof n, "%s.fw", name);
	out->fw = fj_module_find_graph(m, n);
	snprintf(n, sizeof n, "%s.bw", name);
	out->bw = fj_module_find_graph(m, n);
	if (!out->fw || !out->bw || out->fw->num_fwd_outputs < 0 || (K != UINT32_MAX && out->fw->num_fwd_outputs != K))
		return false;
	out->K = (uint32_t)out->fw->num_fwd_outputs;
	out->nsaved = out->fw->nresults - out->K;
	return out->bw->nparams >= out->nsaved;
}

/* One sample of the f64 forward and backward (sample 0: themselves, else
 * perturbed copies): *f and *b, the backward on *f's saved values and the
 * tangents (t[j]: the tangent of gb's parameter nsaved + j). */
static fj_status train_sample(fj_reference *r, fj_module *m, const pair *x, const pair *x64, const char *name64,
                              unsigned smp, const fj_rt_tensor *const *in, size_t nin, const fj_rt_tensor *t,
                              const dimargs *ro, outs *f, outs *b)
{
	char fwn[NAME_MAX_LEN], bwn[NAME_MAX_LEN];
	snprintf(fwn, sizeof fwn, "%s.fw", name64);
	snprintf(bwn, sizeof bwn, "%s.bw", name64);
	fj_status st = FJ_OK;
	if (smp && ((st = perturbed(m, fwn, smp, fwn)) != FJ_OK || (st = perturbed(m, bwn, smp, bwn)) != FJ_OK))
		return st;
	if ((st = run_aten(r->ctx, m, fwn, in, nin, ro, f)) != FJ_OK)
		return st;
	const fj_rt_tensor **bin = calloc(x64->bw->nparams + 1, sizeof *bin);
	if (!bin)
		return oom(r->ctx);
	for (uint32_t i = 0; i < x64->nsaved && i < x64->bw->nparams && x64->K + i < f->n; i++)
		bin[i] = &f->t[x64->K + i];
	for (uint32_t k = 0; k < x->K; k++) {
		uint32_t i = tangent_param(x->bw, x->nsaved, k), i64 = tangent_param(x64->bw, x64->nsaved, k);
		if (i < x->bw->nparams && i64 < x64->bw->nparams)
			bin[i64] = &t[i - x->nsaved];
	}
	st = run_aten(r->ctx, m, bwn, bin, x64->bw->nparams, ro, b);
	free(bin);
	return st;
}

/* The tolerances of the forward's outputs and the backward's gradients. */
static fj_status train_tolerances(fj_reference *r, const pair *x)
{
	double *ptolf = tol_walk(x->fw, NULL), *pin = calloc(x->bw->nparams + 1, sizeof *pin), *ptolb = NULL;
	for (uint32_t i = 0; ptolf && pin && i < x->bw->nparams; i++)
		pin[i] = i < x->nsaved ? ptolf[x->fw->results[x->K + i]] : 0;
	if (ptolf && pin)
		ptolb = tol_walk(x->bw, pin);
	for (uint32_t j = 0; ptolb && j < r->n; j++)
		r->ptol[j] = j < x->K ? ptolf[x->fw->results[j]] : ptolb[x->bw->results[j - x->K]];
	fj_status st = ptolb ? FJ_OK : oom(r->ctx);
	free(ptolf);
	free(pin);
	free(ptolb);
	return st;
}

/* Training: @name's forward and backward, and their f64 copies. */
static fj_status ref_training(fj_reference *r, fj_module *m, const char *name, const char *name64,
                              const fj_rt_tensor *const *in, size_t nin, const fj_rt_tensor *t, size_t nt,
                              const dimargs *ro)
{
	pair x, x64;
	if (!find_pair(m, name, UINT32_MAX, &x) || !find_pair(m, name64, x.K, &x64) ||
	    x64.bw->nresults != x.bw->nresults || x64.fw->nparams != x.fw->nparams)
		return fj_error_status(r->ctx, FJ_ERR_INTERNAL, (fj_loc){0},
		                       "--check=f64: internal error: the f64 copy of @%s does not train as @%s does", name,
		                       name);
	if (nt != x.bw->nparams - x.nsaved || (nt && !t))
		return fj_error_status(r->ctx, FJ_ERR_INVALID, (fj_loc){0}, "the backward takes %u tangents, %zu given",
		                       x.bw->nparams - x.nsaved, nt);
	fj_status st = ref_alloc(r, x.K + x.bw->nresults);
	outs f0 = {0}, b0 = {0};
	if (st == FJ_OK)
		st = train_sample(r, m, &x, &x64, name64, 0, in, nin, t, ro, &f0, &b0);
	for (unsigned smp = 1; st == FJ_OK && smp <= CHECK64_SAMPLES; smp++) {
		outs f = {0}, b = {0};
		if ((st = train_sample(r, m, &x, &x64, name64, smp, in, nin, t, ro, &f, &b)) == FJ_OK) {
			add_scales(&f, &f0, x.K, r->scale);
			add_scales(&b, &b0, x.bw->nresults, r->scale + x.K);
		}
		outs_free(&b);
		outs_free(&f);
	}
	if (st == FJ_OK)
		st = train_tolerances(r, &x);
	for (size_t j = 0; st == FJ_OK && j < r->n; j++) {
		fj_rt_tensor *src = j < x.K ? &f0.t[j] : &b0.t[j - x.K];
		r->ref[j] = *src;
		src->data = NULL; /* handed over */
	}
	outs_free(&b0);
	outs_free(&f0);
	return st;
}

/* A copy of graph g0 into a new module of ctx, beside its f64 copy (its
 * name into name64[NAME_MAX_LEN]). */
static fj_status copy_module(fj_context *ctx, const fj_module *m, const fj_graph *g0, char *name64, fj_module **out)
{
	fj_graph *copy;
	fj_status st = fj_graph_clone(g0, out, &copy);
	if (st != FJ_OK)
		return st;
	char base[NAME_MAX_LEN];
	snprintf(base, sizeof base, "%s.f64", g0->name);
	fj_pass_fresh_graph_name(*out, base, name64, NAME_MAX_LEN);
	fj_graph *g64;
	return fj_pass_clone_f64((*out)->graphs[0], name64, &g64);
}

fj_status fj_reference_f64(fj_context *ctx, const fj_module *m, const fj_reference_options *o,
                           const fj_tensor *inputs, size_t ninputs, const fj_tensor *tangents, size_t ntangents,
                           fj_reference **out)
{
	if (out)
		*out = NULL;
	if (!ctx)
		return FJ_ERR_INVALID;
	if (!m || !out || (ninputs && !inputs))
		return fj_api_arg_error(ctx, "fj_reference_f64", "m, out and inputs may not be NULL");
	fj_reference_options opts;
	fj_reference_options_init(&opts);
	if (o && !fj_api_copy_in(&opts, sizeof opts, o, o->struct_size))
		return fj_api_arg_error(ctx, "fj_reference_f64", "options not initialised (fj_reference_options_init)");
	const char *gname = opts.graph ? (opts.graph[0] == '@' ? opts.graph + 1 : opts.graph) : NULL;
	const fj_graph *g0 = gname ? fj_module_find_graph(m, gname) : fj_module_find_graph(m, "main");
	if (!g0 && !gname && m->ngraphs)
		g0 = m->graphs[0];
	if (!g0)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0}, "the module has no graph named @%s",
		                       gname ? gname : "main");
	char name64[NAME_MAX_LEN];
	fj_module *mm = NULL;
	fj_status st = copy_module(ctx, m, g0, name64, &mm);
	fj_pipeline_opts po = {.verify_each = true};
	if (st == FJ_OK && opts.training)
		st = fj_run_pipeline(mm, fj_api_default_pipeline(true), &po);
	fj_reference *r = calloc(1, sizeof *r);
	fj_rt_tensor *rin = calloc(ninputs + ntangents + 1, sizeof *rin);
	const fj_rt_tensor **in = calloc(ninputs + 1, sizeof *in);
	fj_run_options ro;
	fj_rt_dimarg *da = NULL;
	if (st == FJ_OK)
		st = fj_api_run_options(ctx, opts.run, &ro);
	if (st == FJ_OK && ro.ndims && !(da = calloc(ro.ndims, sizeof *da)))
		st = oom(ctx);
	for (size_t k = 0; st == FJ_OK && k < ro.ndims; k++)
		da[k] = (fj_rt_dimarg){ro.dim_names[k], ro.dim_values[k]};
	dimargs d = {da, ro.ndims};
	if (st == FJ_OK && (!r || !in || !rin))
		st = oom(ctx);
	for (size_t k = 0; st == FJ_OK && k < ninputs + ntangents; k++) {
		rin[k] = fj_api_rt_view(k < ninputs ? &inputs[k] : &tangents[k - ninputs]);
		if (k < ninputs)
			in[k] = &rin[k];
	}
	if (st == FJ_OK) {
		r->ctx = ctx;
		st = opts.training ? ref_training(r, mm, g0->name, name64, in, ninputs, rin + ninputs, ntangents, &d)
		                   : ref_inference(r, mm, mm->graphs[0], name64, in, ninputs, &d);
	}
	free(in);
	free(rin);
	free(da);
	fj_module_destroy(mm);
	if (st != FJ_OK) {
		fj_reference_destroy(r);
		return st;
	}
	*out = r;
	return FJ_OK;
}

size_t fj_reference_count(const fj_reference *r) { return r ? r->n : 0; }

fj_status fj_reference_value(const fj_reference *r, size_t i, fj_scalar_type dt, fj_tensor *ref, double *scale,
                             double *tolerance)
{
	if (!r || i >= r->n)
		return r ? fj_api_arg_error(r->ctx, "fj_reference_value", "no such value") : FJ_ERR_INVALID;
	if (ref) {
		const fj_rt_tensor *t = &r->ref[i];
		fj_tensor_init(ref);
		ref->data = t->data;
		ref->dtype = (fj_scalar_type)t->dtype;
		ref->rank = t->rank;
		memcpy(ref->sizes, t->dims, (size_t)t->rank * sizeof *t->dims);
	}
	if (scale)
		*scale = r->scale[i];
	if (tolerance) {
		double own = fj_check_tolerance(FJ_CHECK_F64, dt);
		bool flt = dt == FJ_TYPE_F64 || dt == FJ_TYPE_F32 || dt == FJ_TYPE_F16 || dt == FJ_TYPE_BF16;
		*tolerance = flt ? (r->ptol[i] > own ? r->ptol[i] : own) : 0;
	}
	return FJ_OK;
}

void fj_reference_destroy(fj_reference *r)
{
	if (!r)
		return;
	for (size_t k = 0; r->ref && k < r->n; k++) {
		fj_rt_tensor_free(&r->ref[k]);
	}
	free(r->ref);
	free(r->scale);
	free(r->ptol);
	free(r);
}
