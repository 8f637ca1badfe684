/* program.c -- the aten and host executors' programs (program.h): per-node
 * and per-region kernels, the host buffers of the shared plan, and
 * execution. Binding and the plan are the shared ones of binder.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_host/host.h"
#include "codegen/cg.h"
#include "codegen/region.h"
#include "passes/pass.h"
#include "runtime/program.h"

/* persistent_inner_outer's column sums on the host: rows per slot (at
 * least), and the most slots (see the column sums in fj_rt_program_run).
 * Each slot zeroes, flushes and (the last one) merges a partial per column
 * and sum, so slots of few rows spend their time there: layer_norm's
 * backward on [8192,4096] f32 (Zen 4, 2 threads) took 36 ms with 256 slots
 * of 32 rows, 23 ms with 64 of 128; on [1024,4096], 4.4 ms with 64 slots
 * of 16 rows, 2.8 ms with 8 of 128. */
enum { COL_SLOT_ROWS = 128, COL_SLOTS_MAX = 64 };

struct fj_rt_program {
	fj_context *ctx;
	fj_graph *g;
	fj_module *m;
	fj_rt_program_kind ex;
	/* host on an unfused graph: the program of its fused copy (the `default`
	 * pipeline on a clone of g, in fmod), which does the work; this one only
	 * binds g's sizes and checks its nodes */
	fj_rt_program *fused;
	fj_module *fmod;
	int threads;
	fj_host_kernel *kernels; /* per node */
	uint32_t compiled;
	uint32_t nvalues, nnodes;
	fj_rt_binding bind;      /* g's sizes (runtime/binder.h) */
	fj_rt_plan plan;         /* its buffers */
	uint32_t nbufs, cap_bufs;
	size_t *bufcap;          /* allocated, per plan buffer */
	void **bufs;
	/* per node: the extra symbols of its fusion.kernel (codegen/region.h),
	 * xsyms[xstart[i] .. xstart[i + 1]), whose values its kernel reads after
	 * its operands' and results' sizes in dims */
	uint32_t *xstart;
	uint32_t *xsyms;
	size_t cap_xsyms;
	/* per node: persistent_inner_outer's column sums on the host
	 * (codegen/region.h, fj_rg_host_slots): how many (0: none), and the
	 * result that has the columns' shape; the workspace they share */
	uint32_t *io_nsums, *io_col;
	void *ws;
	size_t ws_cap;
	/* kernel arguments */
	void **ptrs;
	int64_t *argdims;
	size_t cap_ptrs, cap_argdims;
};


/* ---- creation ---- */

/* The fused copy of g: g copied alone into a module of its own (ir/clone.c;
 * the copy keeps g's places, so errors point into the user's file) and run
 * through the `default` pipeline (verify, decompose, canonicalize, fuse,
 * schedule) with fuse{attention=true}: softmax(f(Q K)) V becomes one
 * flash-attention kernel, which the host has (the GPU keeps three). */
#define HOST_PIPELINE "verify,decompose,canonicalize,fuse{attention=true},schedule"
static fj_status fuse_copy(fj_context *ctx, const fj_graph *g, fj_module **mout, fj_graph **gout)
{
	*mout = NULL;
	*gout = NULL;
	fj_module *m = NULL;
	fj_graph *c = NULL;
	fj_status st = fj_graph_clone(g, &m, &c);
	if (st == FJ_OK)
		st = fj_run_pipeline(m, HOST_PIPELINE, NULL);
	fj_graph *fg = st == FJ_OK ? fj_module_find_graph(m, g->name) : NULL;
	if (st == FJ_OK && !fg)
		st = fj_error_status(ctx, FJ_ERR_INTERNAL, g->loc, "host executor: graph @%s lost by the pipeline", g->name);
	if (st != FJ_OK) {
		fj_module_destroy(m);
		return st;
	}
	*mout = m;
	*gout = fg;
	return FJ_OK;
}

/* Can the passes fuse g? Not when a pointwise op broadcasts two different
 * symbolic sizes against each other (N against M, equal only at run time):
 * prims need sizes equal by construction. Such graphs run their per-op
 * kernels (split over threads). */
static bool fusable_sizes(const fj_graph *g)
{
	const fj_context *ctx = fj_graph_ctx(g);
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		if (!(fj_op_info(ctx, n->op)->flags & FJ_OPF_POINTWISE) || !n->nres)
			continue;
		const fj_type *rt = &g->values[n->res[0]].type;
		for (uint32_t a = 0; a < n->nopnds; a++) {
			fj_vid v = n->opnds[a];
			if (v == FJ_NOVAL || g->values[v].kind == FJ_VK_LITERAL)
				continue;
			const fj_type *t = &g->values[v].type;
			for (int d = 0; d < t->rank && t->rank <= rt->rank; d++) {
				fj_dim x = t->dims[d], y = rt->dims[rt->rank - t->rank + d];
				if (x != y && x != 1 && !fj_dim_is_static(x))
					return false;
			}
		}
	}
	return true;
}

/* Lists the extra symbols of every fusion.kernel of p's graph: sizes its
 * body uses that none of its operands and results has (N in a var VJP whose
 * region sees only 0-d values, a prims.full [N] bound by --dim ...). */
static fj_status list_extra_syms(fj_rt_program *p)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	uint32_t nbody = 0;
	for (uint32_t i = 0; i < g->nnodes; i++)
		nbody += g->nodes[i].body != NULL;
	p->cap_xsyms = (size_t)nbody * fj_symbol_count(p->m);
	p->xstart = FJ_RT_ARR_ALLOC(ctx, (size_t)g->nnodes + 1, uint32_t);
	p->xsyms = FJ_RT_ARR_ALLOC(ctx, p->cap_xsyms, uint32_t);
	if (!p->xstart || !p->xsyms)
		return fj_rt_oom(ctx);
	uint32_t k = 0;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		p->xstart[i] = k;
		uint32_t n = 0;
		if (g->nodes[i].body) {
			fj_status st = fj_rg_extra_syms(ctx, g, i, p->xsyms + k, &n);
			if (st != FJ_OK)
				return st;
		}
		k += n;
	}
	p->xstart[g->nnodes] = k;
	p->io_nsums = FJ_RT_ARR_ALLOC(ctx, g->nnodes, uint32_t);
	p->io_col = FJ_RT_ARR_ALLOC(ctx, g->nnodes, uint32_t);
	if (!p->io_nsums || !p->io_col)
		return fj_rt_oom(ctx);
	for (uint32_t i = 0; i < g->nnodes; i++) {
		fj_status st = fj_rg_host_slots(ctx, g, i, &p->io_nsums[i], &p->io_col[i]);
		if (st != FJ_OK)
			return st;
	}
	return FJ_OK;
}

static bool has_regions(const fj_graph *g)
{
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].body)
			return true;
	return false;
}

/* The kernel argument arrays: room for the node with the most pointers
 * (+ a workspace) and sizes (+ its extra symbols and the slot count). */
static fj_status alloc_args(fj_rt_program *p)
{
	const fj_graph *g = p->g;
	size_t maxptrs = 1, maxdims = 1;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		size_t nd = p->xstart[i + 1] - p->xstart[i];
		for (uint32_t j = 0; j < n->nopnds; j++)
			if (n->opnds[j] != FJ_NOVAL)
				nd += g->values[n->opnds[j]].type.rank;
		for (uint32_t j = 0; j < n->nres; j++)
			nd += g->values[n->res[j]].type.rank;
		if (p->io_nsums[i])
			nd++; /* the slot count */
		if (n->nopnds + n->nres + 1 > maxptrs)
			maxptrs = n->nopnds + n->nres + 1; /* + a workspace */
		if (nd > maxdims)
			maxdims = nd;
	}
	p->ptrs = FJ_RT_ARR_ALLOC(p->ctx, maxptrs, void *);
	p->argdims = FJ_RT_ARR_ALLOC(p->ctx, maxdims, int64_t);
	p->cap_ptrs = maxptrs;
	p->cap_argdims = maxdims;
	return p->ptrs && p->argdims ? FJ_OK : fj_rt_oom(p->ctx);
}

/* Every node's per-node kernel (or region kernel), through the cache. */
static fj_status compile_nodes(fj_rt_program *p)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	if (!g->nnodes)
		return FJ_OK;
	uint32_t *nodes = FJ_RT_ARR_ALLOC(ctx, g->nnodes, uint32_t);
	if (!nodes)
		return fj_rt_oom(ctx);
	for (uint32_t i = 0; i < g->nnodes; i++)
		nodes[i] = i;
	fj_status st = fj_host_compile_nodes(ctx, g, nodes, g->nnodes, p->kernels, &p->compiled);
	FJ_RT_ARR_FREE(ctx, nodes, g->nnodes);
	for (uint32_t i = 0; st == FJ_OK && i < g->nnodes; i++)
		if (!p->kernels[i].fn)
			st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[i].loc, "%s: no kernel for this op in this build",
			                     fj_op_name(g->nodes[i].op));
	return st;
}

static fj_status create(fj_rt_program *p)
{
	fj_context *ctx = p->ctx;
	fj_graph *g = p->g;
	p->kernels = FJ_RT_ARR_ALLOC(ctx, g->nnodes, fj_host_kernel);
	if (!p->kernels)
		return fj_rt_oom(ctx);
	memset(p->kernels, 0, (g->nnodes ? g->nnodes : 1) * sizeof *p->kernels);
	fj_status st = fj_rt_binding_init(&p->bind, ctx, g);
	if (st == FJ_OK)
		st = fj_rt_plan_init(&p->plan, ctx, g);
	if (st == FJ_OK)
		st = list_extra_syms(p);
	if (st == FJ_OK)
		st = alloc_args(p);
	if (st != FJ_OK)
		return st;
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].body && p->ex != FJ_RT_EXEC_HOST)
			return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[i].loc,
			                       "fusion.kernel: the aten executor runs unfused graphs only (use --executor=host)");
	if (p->ex == FJ_RT_EXEC_HOST && g->nnodes && !has_regions(g) && fusable_sizes(g)) {
		/* the fused host executor: one kernel per fusion.kernel region */
		fj_graph *fg = NULL;
		st = fuse_copy(ctx, g, &p->fmod, &fg);
		if (st == FJ_OK)
			st = fj_rt_program_create(ctx, fg, FJ_RT_EXEC_HOST, &p->fused);
		if (st == FJ_OK)
			p->compiled = p->fused->compiled;
		return st;
	}
	return compile_nodes(p);
}

fj_status fj_rt_program_create(fj_context *ctx, fj_graph *g, fj_rt_program_kind ex, fj_rt_program **out)
{
	*out = NULL;
	fj_rt_program *p = fj_alloc(ctx, sizeof *p);
	if (!p)
		return fj_rt_oom(ctx);
	memset(p, 0, sizeof *p);
	p->ctx = ctx;
	p->g = g;
	p->m = g->module;
	p->ex = ex;
	p->nvalues = g->nvalues;
	p->nnodes = g->nnodes;
	p->threads = ex == FJ_RT_EXEC_HOST ? fj_host_thread_count(ctx) : 1;
	fj_status st = create(p);
	if (st != FJ_OK) {
		fj_rt_program_destroy(p);
		return st;
	}
	*out = p;
	return FJ_OK;
}

void fj_rt_program_destroy(fj_rt_program *p)
{
	if (!p)
		return;
	fj_context *ctx = p->ctx;
	fj_rt_program_destroy(p->fused);
	fj_module_destroy(p->fmod);
	for (uint32_t b = 0; b < p->nbufs; b++)
		fj_rt_aligned_free(p->bufs[b]);
	if (p->cap_bufs) {
		FJ_RT_ARR_FREE(ctx, p->bufs, p->cap_bufs);
		FJ_RT_ARR_FREE(ctx, p->bufcap, p->cap_bufs);
	}
	fj_rt_binding_free(&p->bind);
	fj_rt_plan_free(&p->plan);
	if (p->kernels) {
		fj_host_release_kernels(ctx, p->kernels, p->nnodes);
		FJ_RT_ARR_FREE(ctx, p->kernels, p->nnodes);
	}
	if (p->ptrs)
		FJ_RT_ARR_FREE(ctx, p->ptrs, p->cap_ptrs);
	if (p->argdims)
		FJ_RT_ARR_FREE(ctx, p->argdims, p->cap_argdims);
	if (p->xstart)
		FJ_RT_ARR_FREE(ctx, p->xstart, (size_t)p->nnodes + 1);
	if (p->io_nsums)
		FJ_RT_ARR_FREE(ctx, p->io_nsums, p->nnodes);
	if (p->io_col)
		FJ_RT_ARR_FREE(ctx, p->io_col, p->nnodes);
	if (p->ws)
		fj_free(ctx, p->ws, p->ws_cap);
	if (p->xsyms)
		FJ_RT_ARR_FREE(ctx, p->xsyms, p->cap_xsyms);
	fj_free(ctx, p, sizeof *p);
}

uint32_t fj_rt_program_compiled(const fj_rt_program *p) { return p->compiled; }
const fj_graph *fj_rt_program_graph(const fj_rt_program *p) { return p->g; }
int fj_rt_program_threads(const fj_rt_program *p) { return p->threads; }

void fj_rt_program_set_threads(fj_rt_program *p, int n)
{
	if (p->ex != FJ_RT_EXEC_HOST)
		return;
	int all = fj_host_thread_count(p->ctx);
	p->threads = n > 0 && n < all ? n : all;
	if (p->fused) /* an unfused graph runs as its fused copy */
		fj_rt_program_set_threads(p->fused, n);
}

const int64_t *fj_rt_program_value_dims(const fj_rt_program *p, fj_vid v)
{
	return fj_rt_binding_dims(&p->bind, v);
}

int64_t fj_rt_program_symbol(const fj_rt_program *p, uint32_t s) { return fj_rt_binding_symbol(&p->bind, s); }

const fj_rt_binding *fj_rt_program_binding(const fj_rt_program *p) { return &p->bind; }

size_t fj_rt_program_plan_bytes(const fj_rt_program *p, uint32_t *nbuffers)
{
	if (p->fused)
		return fj_rt_program_plan_bytes(p->fused, nbuffers);
	size_t total = 0;
	for (uint32_t b = 0; b < p->nbufs; b++)
		total += p->plan.bufsize[b];
	if (nbuffers)
		*nbuffers = p->nbufs;
	return total;
}

/* ---- binding ---- */

/* Host buffers for the plan's, kept across binds (grown, never shrunk in
 * place; those past the plan's count are freed). */
static fj_status alloc_buffers(fj_rt_program *p)
{
	fj_context *ctx = p->ctx;
	const fj_rt_plan *pl = &p->plan;
	if (pl->nbufs > p->cap_bufs) {
		uint32_t ncap = pl->cap_bufs;
		void **nb = FJ_RT_ARR_ALLOC(ctx, ncap, void *);
		size_t *nc = FJ_RT_ARR_ALLOC(ctx, ncap, size_t);
		if (!nb || !nc) {
			if (nb)
				FJ_RT_ARR_FREE(ctx, nb, ncap);
			if (nc)
				FJ_RT_ARR_FREE(ctx, nc, ncap);
			return fj_rt_oom(ctx);
		}
		memset(nb, 0, ncap * sizeof *nb);
		memset(nc, 0, ncap * sizeof *nc);
		if (p->cap_bufs) {
			memcpy(nb, p->bufs, p->nbufs * sizeof *nb);
			memcpy(nc, p->bufcap, p->nbufs * sizeof *nc);
			FJ_RT_ARR_FREE(ctx, p->bufs, p->cap_bufs);
			FJ_RT_ARR_FREE(ctx, p->bufcap, p->cap_bufs);
		}
		p->bufs = nb;
		p->bufcap = nc;
		p->cap_bufs = ncap;
	}
	/* Buffers past the plan's (from an earlier, bigger plan) are freed. */
	for (uint32_t b = pl->nbufs; b < p->nbufs; b++) {
		fj_rt_aligned_free(p->bufs[b]);
		p->bufs[b] = NULL;
		p->bufcap[b] = 0;
	}
	p->nbufs = pl->nbufs;
	for (uint32_t b = 0; b < p->nbufs; b++) {
		if (p->bufs[b] && p->bufcap[b] >= pl->bufsize[b])
			continue;
		void *d = fj_rt_aligned_alloc(pl->bufsize[b]);
		if (!d)
			return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0},
			                       "out of memory allocating an intermediate buffer of %zu bytes", pl->bufsize[b]);
		fj_rt_aligned_free(p->bufs[b]);
		p->bufs[b] = d;
		p->bufcap[b] = pl->bufsize[b];
	}
	return FJ_OK;
}

fj_status fj_rt_program_bind(fj_rt_program *p, const fj_rt_tensor *const *inputs, const char *const *origin,
                             const fj_rt_dimarg *dims, size_t ndims)
{
	fj_status st = fj_rt_binding_bind(&p->bind, inputs, origin, dims, ndims);
	if (st == FJ_OK && !p->fused)
		st = fj_rt_plan_make(&p->plan, p->g, p->bind.vbytes);
	if (st == FJ_OK && !p->fused)
		st = alloc_buffers(p);
	if (st == FJ_OK && p->fused)
		st = fj_rt_program_bind(p->fused, inputs, origin, dims, ndims);
	if (st != FJ_OK)
		p->bind.bound = false;
	return st;
}

/* ---- running ---- */

typedef struct task_arg {
	fj_host_kernel_fn fn;
	void *const *ptrs;
	const int64_t *dims;
} task_arg;

static int32_t run_task(void *arg, int64_t lo, int64_t hi)
{
	task_arg *t = arg;
	return t->fn(t->ptrs, t->dims, lo, hi);
}

static void store_literal(fj_rt_tensor *t, const fj_literal *lit)
{
	if (lit->kind == FJ_LIT_INT && t->dtype == FJ_DT_I64)
		((int64_t *)t->data)[0] = lit->i;
	else
		fj_rt_store_f64(t->data, t->dtype, 0, fj_literal_value(lit));
}

fj_status fj_rt_program_run(fj_rt_program *p, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	if (!p->bind.bound)
		return fj_error_status(ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "program run before its sizes were bound");
	if (p->fused)
		return fj_rt_program_run(p->fused, inputs, outputs);
	for (uint32_t i = 0; i < g->nparams; i++) {
		const fj_rt_tensor *t = inputs[i];
		fj_vid v = g->params[i];
		const int64_t *want = fj_rt_program_value_dims(p, v);
		bool ok = t && t->data && t->dtype == g->values[v].type.dtype && t->rank == g->values[v].type.rank;
		for (int k = 0; ok && k < t->rank; k++)
			ok = t->dims[k] == want[k];
		if (!ok)
			return fj_error_status(ctx, FJ_ERR_RUNTIME, (fj_loc){0},
			                       "input %%%s does not have the shape it was bound with", fj_rt_value_name(g, v));
	}
	for (uint32_t k = 0; k < g->nresults; k++) {
		fj_vid v = g->results[k];
		const fj_value *val = &g->values[v];
		int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
		fj_rt_tensor want = {.dtype = val->type.dtype, .rank = rank};
		memcpy(want.dims, fj_rt_program_value_dims(p, v), (size_t)rank * sizeof *want.dims);
		if (outputs[k].data && fj_rt_tensor_same_type(&outputs[k], &want))
			continue;
		fj_status st = fj_rt_tensor_reshape(ctx, &outputs[k], want.dtype, rank, want.dims);
		if (st != FJ_OK)
			return st;
	}
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		const fj_host_kernel *kern = &p->kernels[i];
		size_t np = 0, nd = 0;
		int64_t work = 1;
		for (uint32_t j = 0; j < n->nopnds + n->nres; j++) {
			fj_vid v = j < n->nopnds ? n->opnds[j] : n->res[j - n->nopnds];
			void *ptr = NULL;
			int rank = 0;
			if (v != FJ_NOVAL) {
				const fj_value *val = &g->values[v];
				if (val->kind == FJ_VK_PARAM)
					ptr = inputs[val->def]->data;
				else if (val->kind == FJ_VK_RESULT)
					ptr = p->plan.out_pos[v] >= 0 ? outputs[p->plan.out_pos[v]].data : p->bufs[p->plan.vbuf[v]];
				if (val->kind != FJ_VK_LITERAL)
					rank = val->type.rank;
				const int64_t *vd = fj_rt_program_value_dims(p, v);
				int64_t ne = 1;
				for (int k = 0; k < rank; k++) {
					p->argdims[nd++] = vd[k];
					ne *= vd[k];
				}
				if (ne > work)
					work = ne;
			}
			p->ptrs[np++] = ptr;
		}
		for (uint32_t x = p->xstart[i]; x < p->xstart[i + 1]; x++)
			p->argdims[nd++] = p->bind.symval[p->xsyms[x]];
		/* the parallel extent, and whether there is anything to write */
		int64_t extent = 1, outn = 0;
		for (uint32_t r = 0; r < n->nres; r++) {
			fj_vid v = n->res[r];
			const int64_t *vd = fj_rt_program_value_dims(p, v);
			int64_t ne = 1;
			for (int k = 0; k < g->values[v].type.rank; k++) {
				ne *= vd[k];
				if (r == kern->par_out && (kern->par_mask >> k & 1))
					extent *= vd[k];
			}
			outn += ne;
		}
		if (p->io_nsums[i] && outn) {
			/* column sums: S slots of the rows (extent), a workspace for
			 * their partials (codegen/region.h). S follows the rows alone,
			 * never the thread count: the merge's bits depend on S, and
			 * the results must not change with FUSEJIT_THREADS (IR.md §4).
			 * A slot takes at least COL_SLOT_ROWS rows, so the merge stays
			 * small next to the rows' work. */
			int64_t slots = extent / COL_SLOT_ROWS;
			if (slots > COL_SLOTS_MAX)
				slots = COL_SLOTS_MAX;
			if (slots < 1)
				slots = 1;
			const int64_t *cd = fj_rt_program_value_dims(p, n->res[p->io_col[i]]);
			int64_t cols = 1;
			for (int k = 0; k < g->values[n->res[p->io_col[i]]].type.rank; k++)
				cols *= cd[k];
			size_t bytes = FJ_RG_HOST_SLOT_HEADER + (size_t)slots * p->io_nsums[i] * (size_t)cols * FJ_RG_HOST_SLOT_BYTES;
			if (bytes > p->ws_cap) {
				void *w = fj_alloc(ctx, bytes);
				if (!w)
					return fj_rt_oom(ctx);
				if (p->ws)
					fj_free(ctx, p->ws, p->ws_cap);
				p->ws = w;
				p->ws_cap = bytes;
			}
			memset(p->ws, 0, FJ_RG_HOST_SLOT_HEADER);
			p->ptrs[np++] = p->ws;
			p->argdims[nd++] = slots;
			extent = slots;
			work = 1 << 20; /* a slot is worth a thread */
		}
		if (extent == 0 || (n->nres && outn == 0))
			continue;
		int32_t rc;
		if (p->threads > 1 && extent > 1) {
			int64_t per = work / extent;
			if (per < 1)
				per = 1;
			int64_t grain = 32768 / per;
			if (kern->par_mask & FJ_CG_PAR_PER_THREAD) /* as many chunks as threads */
				grain = extent / p->threads + (extent % p->threads != 0);
			if (grain < 1)
				grain = 1;
			task_arg ta = {kern->fn, p->ptrs, p->argdims};
			rc = fj_host_parallel_for(ctx, p->threads, extent, grain, run_task, &ta);
		} else {
			rc = kern->fn(p->ptrs, p->argdims, 0, extent);
		}
		if (rc == FJ_KERR_INDEX) {
			/* In a region, name the indexing op that failed. */
			const fj_node *at = n;
			for (uint32_t k = 0; n->body && k < n->body->nnodes; k++) {
				fj_op op = n->body->nodes[k].op;
				if (op == FJ_OP_PRIMS_TAKE || op == FJ_OP_PRIMS_GATHER || op == FJ_OP_PRIMS_SCATTER_ADD ||
				    op == FJ_OP_PRIMS_INDEX_ADD) {
					at = &n->body->nodes[k];
					break;
				}
			}
			return fj_error_status(ctx, FJ_ERR_RUNTIME, at->loc, "%s: index out of range", fj_op_name(at->op));
		}
		if (rc != 0)
			return fj_error_status(ctx, FJ_ERR_RUNTIME, n->loc, "%s: invalid value (kernel error %d)",
			                       fj_op_name(n->op), rc);
	}
	for (uint32_t k = 0; k < g->nresults; k++) {
		fj_vid v = g->results[k];
		const fj_value *val = &g->values[v];
		if (val->kind == FJ_VK_LITERAL)
			store_literal(&outputs[k], &val->lit);
		else if (val->kind == FJ_VK_PARAM) {
			if (outputs[k].data != inputs[val->def]->data) /* else: in place already */
				memcpy(outputs[k].data, inputs[val->def]->data, outputs[k].nbytes);
		} else if (p->plan.out_pos[v] != (int32_t)k && outputs[k].data != outputs[p->plan.out_pos[v]].data) {
			memcpy(outputs[k].data, outputs[p->plan.out_pos[v]].data, outputs[k].nbytes); /* else: shared */
		}
	}
	return FJ_OK;
}
