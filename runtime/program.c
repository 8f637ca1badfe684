/* program.c -- a compiled program (program.h): kernels, symbolic binding,
 * concrete shape checks, buffer plan and execution.
 *
 * Binding: each symbol is bound from the first input dim that is exactly that
 * symbol; a dim that is a product (N*4096) binds its one unbound symbol by
 * exact division once the others are known; --dim values bind the rest.
 * Then every value's shape is evaluated, the inputs are checked against them,
 * and each node is checked at run time by re-running its op's inference on a
 * concrete copy of the node (operands with concrete types, symbolic attribute
 * sizes replaced by their values) in a scratch module: the inferred result
 * types must equal the evaluated ones. This catches what symbolic inference
 * had to assume (two symbols broadcast against each other, a reshape whose
 * sizes do not match ...), and the error is the op's own, at its place.
 *
 * Plan: liveness is the last node that reads a value (computed once at
 * creation); a node's results take the best-fitting free buffer (or the
 * largest free one, grown, or a new one) before the buffers of the operands
 * that die at the node are released, so a kernel never reads and writes the
 * same buffer. Cost: O(nodes * buffers) per bind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_host/host.h"
#include "codegen/cg.h"
#include "codegen/region.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/program.h"

struct fj_rt_program {
	fj_context *ctx;
	fj_graph *g;
	fj_module *m;
	fj_rt_executor ex;
	/* host on an unfused graph: the program of its fused copy (the `default`
	 * pipeline on a clone of g, in fmod), which does the work; this one only
	 * binds g's sizes and checks its nodes */
	fj_rt_program *fused;
	fj_module *fmod;
	int threads;
	fj_host_kernel *kernels; /* per node */
	uint32_t compiled;
	int32_t *last_use;       /* per value: the last node reading it, -1 */
	int32_t *out_pos;        /* per value: the output position it is computed into, -1 */
	uint32_t nvalues, nnodes;
	/* binding */
	bool bound;
	uint32_t nsyms;
	int64_t *symval;         /* per module symbol; -1 unbound */
	int64_t *vdims;          /* per value, FJ_MAX_RANK entries */
	size_t *vbytes;          /* per value */
	/* plan */
	int32_t *vbuf;           /* per value: buffer index, -1 */
	uint32_t nbufs, cap_bufs;
	size_t *bufsize;         /* planned */
	size_t *bufcap;          /* allocated */
	void **bufs;
	bool *busy;
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

static inline size_t nz(size_t n) { return n ? n : 1; }
#define ARR_ALLOC(ctx, n, T) ((T *)fj_alloc((ctx), nz(n) * sizeof(T)))
#define ARR_FREE(ctx, p, n) fj_free((ctx), (p), nz(n) * sizeof *(p))

static fj_status oom(fj_context *ctx)
{
	return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}

static const char *value_name(const fj_graph *g, fj_vid v)
{
	const char *n = g->values[v].name;
	return n ? n : "?";
}

/* ---- creation ---- */

/* The fused copy of g: g printed alone, parsed into a module of its own and
 * run through the `default` pipeline (verify, decompose, canonicalize, fuse,
 * schedule). */
static fj_status fuse_copy(fj_context *ctx, const fj_graph *g, fj_module **mout, fj_graph **gout)
{
	*mout = NULL;
	*gout = NULL;
	fj_buf b;
	fj_buf_init(&b, ctx);
	fj_status st = fj_print_graph(&b, g);
	fj_module *m = NULL;
	if (st == FJ_OK)
		st = fj_parse_module(ctx, b.data, b.len, g->module->file, &m);
	fj_buf_free(&b);
	if (st == FJ_OK) {
		/* Print -> parse keeps the order of nodes and values, so the copy
		 * takes the places of g's own: errors (and the passes, which keep
		 * places) point into the user's file, not into the printed text. */
		fj_graph *c = m->graphs[0];
		FJ_ASSERT(c->nnodes == g->nnodes && c->nvalues == g->nvalues);
		for (uint32_t i = 0; i < g->nnodes; i++)
			c->nodes[i].loc = g->nodes[i].loc;
		for (uint32_t v = 0; v < g->nvalues; v++)
			c->values[v].loc = g->values[v].loc;
		c->loc = g->loc;
		st = fj_run_pipeline(m, fj_named_pipeline("default"), NULL);
	}
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
	p->xstart = ARR_ALLOC(ctx, (size_t)g->nnodes + 1, uint32_t);
	p->xsyms = ARR_ALLOC(ctx, p->cap_xsyms, uint32_t);
	if (!p->xstart || !p->xsyms)
		return oom(ctx);
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
	p->io_nsums = ARR_ALLOC(ctx, g->nnodes, uint32_t);
	p->io_col = ARR_ALLOC(ctx, g->nnodes, uint32_t);
	if (!p->io_nsums || !p->io_col)
		return oom(ctx);
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

fj_status fj_rt_program_create(fj_context *ctx, fj_graph *g, fj_rt_executor ex, fj_rt_program **out)
{
	*out = NULL;
	fj_rt_program *p = fj_alloc(ctx, sizeof *p);
	if (!p)
		return oom(ctx);
	memset(p, 0, sizeof *p);
	p->ctx = ctx;
	p->g = g;
	p->m = g->module;
	p->ex = ex;
	p->nvalues = g->nvalues;
	p->nnodes = g->nnodes;
	p->threads = ex == FJ_RT_EXEC_HOST ? fj_host_thread_count(ctx) : 1;
	p->kernels = ARR_ALLOC(ctx, g->nnodes, fj_host_kernel);
	p->last_use = ARR_ALLOC(ctx, g->nvalues, int32_t);
	p->out_pos = ARR_ALLOC(ctx, g->nvalues, int32_t);
	p->vdims = ARR_ALLOC(ctx, (size_t)g->nvalues * FJ_MAX_RANK, int64_t);
	p->vbytes = ARR_ALLOC(ctx, g->nvalues, size_t);
	p->vbuf = ARR_ALLOC(ctx, g->nvalues, int32_t);
	if (!p->kernels || !p->last_use || !p->out_pos || !p->vdims || !p->vbytes || !p->vbuf) {
		fj_rt_program_destroy(p);
		return oom(ctx);
	}
	memset(p->kernels, 0, (g->nnodes ? g->nnodes : 1) * sizeof *p->kernels);
	memset(p->vdims, 0, nz((size_t)g->nvalues * FJ_MAX_RANK) * sizeof *p->vdims);
	fj_status xst = list_extra_syms(p);
	if (xst != FJ_OK) {
		fj_rt_program_destroy(p);
		return xst;
	}
	size_t maxptrs = 1, maxdims = 1;
	for (uint32_t v = 0; v < g->nvalues; v++) {
		p->last_use[v] = -1;
		p->out_pos[v] = -1;
	}
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		size_t nd = p->xstart[i + 1] - p->xstart[i];
		for (uint32_t j = 0; j < n->nopnds; j++) {
			fj_vid v = n->opnds[j];
			if (v != FJ_NOVAL) {
				p->last_use[v] = (int32_t)i;
				nd += g->values[v].type.rank;
			}
		}
		for (uint32_t j = 0; j < n->nres; j++)
			nd += g->values[n->res[j]].type.rank;
		if (p->io_nsums[i])
			nd++; /* the slot count */
		if (n->nopnds + n->nres + 1 > maxptrs)
			maxptrs = n->nopnds + n->nres + 1; /* + a workspace */
		if (nd > maxdims)
			maxdims = nd;
	}
	for (uint32_t k = 0; k < g->nresults; k++) {
		fj_vid v = g->results[k];
		if (g->values[v].kind == FJ_VK_RESULT && p->out_pos[v] < 0)
			p->out_pos[v] = (int32_t)k;
	}
	p->ptrs = ARR_ALLOC(ctx, maxptrs, void *);
	p->argdims = ARR_ALLOC(ctx, maxdims, int64_t);
	p->cap_ptrs = maxptrs;
	p->cap_argdims = maxdims;
	if (!p->ptrs || !p->argdims) {
		fj_rt_program_destroy(p);
		return oom(ctx);
	}

	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].body && ex != FJ_RT_EXEC_HOST) {
			fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[i].loc,
			                "fusion.kernel: the aten executor runs unfused graphs only (use --executor=host)");
			fj_rt_program_destroy(p);
			return FJ_ERR_UNSUPPORTED;
		}
	if (ex == FJ_RT_EXEC_HOST && g->nnodes && !has_regions(g) && fusable_sizes(g)) {
		/* the fused host executor: one kernel per fusion.kernel region */
		fj_graph *fg = NULL;
		fj_status st = fuse_copy(ctx, g, &p->fmod, &fg);
		if (st == FJ_OK)
			st = fj_rt_program_create(ctx, fg, FJ_RT_EXEC_HOST, &p->fused);
		if (st != FJ_OK) {
			fj_rt_program_destroy(p);
			return st;
		}
		p->compiled = p->fused->compiled;
		*out = p;
		return FJ_OK;
	}
	if (g->nnodes) {
		uint32_t *nodes = ARR_ALLOC(ctx, g->nnodes, uint32_t);
		if (!nodes) {
			fj_rt_program_destroy(p);
			return oom(ctx);
		}
		for (uint32_t i = 0; i < g->nnodes; i++)
			nodes[i] = i;
		fj_status st = fj_host_compile_nodes(ctx, g, nodes, g->nnodes, p->kernels, &p->compiled);
		ARR_FREE(ctx, nodes, g->nnodes);
		if (st != FJ_OK) {
			fj_rt_program_destroy(p);
			return st;
		}
		for (uint32_t i = 0; i < g->nnodes; i++)
			if (!p->kernels[i].fn) {
				fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[i].loc,
				                "%s: no kernel for this op in this build", fj_op_name(g->nodes[i].op));
				fj_rt_program_destroy(p);
				return FJ_ERR_UNSUPPORTED;
			}
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
	ARR_FREE(ctx, p->bufs, p->cap_bufs);
	ARR_FREE(ctx, p->bufsize, p->cap_bufs);
	ARR_FREE(ctx, p->bufcap, p->cap_bufs);
	ARR_FREE(ctx, p->busy, p->cap_bufs);
	ARR_FREE(ctx, p->kernels, p->nnodes);
	ARR_FREE(ctx, p->last_use, p->nvalues);
	ARR_FREE(ctx, p->out_pos, p->nvalues);
	ARR_FREE(ctx, p->vdims, (size_t)p->nvalues * FJ_MAX_RANK);
	ARR_FREE(ctx, p->vbytes, p->nvalues);
	ARR_FREE(ctx, p->vbuf, p->nvalues);
	ARR_FREE(ctx, p->symval, p->nsyms);
	ARR_FREE(ctx, p->ptrs, p->cap_ptrs);
	ARR_FREE(ctx, p->argdims, p->cap_argdims);
	ARR_FREE(ctx, p->xstart, (size_t)p->nnodes + 1);
	if (p->io_nsums)
		ARR_FREE(ctx, p->io_nsums, p->nnodes);
	if (p->io_col)
		ARR_FREE(ctx, p->io_col, p->nnodes);
	if (p->ws)
		fj_free(ctx, p->ws, p->ws_cap);
	ARR_FREE(ctx, p->xsyms, p->cap_xsyms);
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
}

const int64_t *fj_rt_program_value_dims(const fj_rt_program *p, fj_vid v)
{
	return &p->vdims[(size_t)v * FJ_MAX_RANK];
}

int64_t fj_rt_program_symbol(const fj_rt_program *p, uint32_t s)
{
	return p->bound && s < p->nsyms ? p->symval[s] : -1;
}

size_t fj_rt_program_plan_bytes(const fj_rt_program *p, uint32_t *nbuffers)
{
	if (p->fused)
		return fj_rt_program_plan_bytes(p->fused, nbuffers);
	size_t total = 0;
	for (uint32_t b = 0; b < p->nbufs; b++)
		total += p->bufsize[b];
	if (nbuffers)
		*nbuffers = p->nbufs;
	return total;
}

/* ---- binding ---- */

/* Where a symbol's size came from. */
typedef struct sym_src {
	int32_t param; /* -1: --dim */
	int32_t dim;
} sym_src;

typedef struct binder {
	fj_rt_program *p;
	const char *const *origin;
	sym_src *src;
} binder;

static void describe_src(binder *b, sym_src s, char *buf, size_t size)
{
	if (s.param < 0) {
		snprintf(buf, size, "--dim");
		return;
	}
	const fj_graph *g = b->p->g;
	const char *o = b->origin ? b->origin[s.param] : NULL;
	if (o)
		snprintf(buf, size, "input %%%s (dim %d, from %s)", value_name(g, g->params[s.param]), s.dim, o);
	else
		snprintf(buf, size, "input %%%s (dim %d)", value_name(g, g->params[s.param]), s.dim);
}

static fj_status bind_sym(binder *b, uint32_t s, int64_t v, sym_src from)
{
	fj_rt_program *p = b->p;
	if (p->symval[s] < 0) {
		p->symval[s] = v;
		b->src[s] = from;
		return FJ_OK;
	}
	if (p->symval[s] == v)
		return FJ_OK;
	char d1[300], d2[300];
	describe_src(b, b->src[s], d1, sizeof d1);
	describe_src(b, from, d2, sizeof d2);
	return fj_error_status(p->ctx, FJ_ERR_RUNTIME, (fj_loc){0},
	                       "symbol %s is bound to two sizes: %lld by %s and %lld by %s",
	                       fj_symbol_name(p->m, s), (long long)p->symval[s], d1, (long long)v, d2);
}

/* Evaluates dim d; false when a symbol is unbound (*unbound gets it) or on overflow. */
static bool eval_dim(const fj_rt_program *p, fj_dim d, int64_t *out, int64_t *unbound, bool *overflow)
{
	if (fj_dim_is_static(d)) {
		*out = d;
		return true;
	}
	const fj_symexpr *e = fj_dim_expr(p->m, d);
	int64_t v = e->coef;
	for (uint32_t k = 0; k < e->nsyms; k++) {
		int64_t s = e->syms[k] < p->nsyms ? p->symval[e->syms[k]] : -1;
		if (s < 0) {
			if (unbound)
				*unbound = e->syms[k];
			return false;
		}
		if (s && v > INT64_MAX / s) {
			if (overflow)
				*overflow = true;
			return false;
		}
		v *= s;
	}
	*out = v;
	return true;
}

static void type_str(const fj_rt_program *p, const fj_type *t, char *buf, size_t size)
{
	size_t k = (size_t)snprintf(buf, size, "%s[", fj_dtype_name(t->dtype));
	for (int i = 0; i < t->rank && k < size; i++) {
		if (i)
			buf[k++] = ',';
		if (k < size)
			k += (size_t)fj_dim_format(p->m, t->dims[i], buf + k, size - k);
	}
	if (k + 2 <= size) {
		buf[k++] = ']';
		buf[k] = 0;
	} else {
		buf[size - 1] = 0;
	}
}

static void input_desc(binder *b, uint32_t i, char *buf, size_t size)
{
	const char *o = b->origin ? b->origin[i] : NULL;
	const char *name = value_name(b->p->g, b->p->g->params[i]);
	if (o)
		snprintf(buf, size, "input %%%s (from %s)", name, o);
	else
		snprintf(buf, size, "input %%%s", name);
}

static fj_status mismatch(binder *b, uint32_t i, const fj_rt_tensor *t, const char *why)
{
	char d[400], want[300], got[300];
	input_desc(b, i, d, sizeof d);
	type_str(b->p, &b->p->g->values[b->p->g->params[i]].type, want, sizeof want);
	fj_rt_tensor_type_str(t, got, sizeof got);
	return fj_error_status(b->p->ctx, FJ_ERR_RUNTIME, (fj_loc){0}, "%s: %s: expected %s, got %s", d, why,
	                       want, got);
}

static void mark_attr_syms(const fj_rt_program *p, const fj_attr *a, uint8_t *used)
{
	if (a->kind == FJ_AK_DIM && !fj_dim_is_static(a->u.dim)) {
		const fj_symexpr *e = fj_dim_expr(p->m, a->u.dim);
		for (uint32_t k = 0; k < e->nsyms; k++)
			used[e->syms[k]] = 1;
	} else if (a->kind == FJ_AK_LIST) {
		for (uint32_t k = 0; k < a->n; k++)
			mark_attr_syms(p, &a->u.items[k], used);
	}
}

static void mark_type_syms(const fj_rt_program *p, const fj_type *t, uint8_t *used)
{
	for (int i = 0; i < t->rank; i++)
		if (!fj_dim_is_static(t->dims[i])) {
			const fj_symexpr *e = fj_dim_expr(p->m, t->dims[i]);
			for (uint32_t k = 0; k < e->nsyms; k++)
				used[e->syms[k]] = 1;
		}
}

/* A copy of attribute a with symbolic sizes replaced by their values (lists
 * copied onto sg's arena). */
static bool concretize_attr(const fj_rt_program *p, fj_graph *sg, const fj_attr *a, fj_attr *out)
{
	*out = *a;
	if (a->kind == FJ_AK_DIM) {
		int64_t v;
		if (!eval_dim(p, a->u.dim, &v, NULL, NULL))
			return false;
		out->kind = FJ_AK_INT;
		out->u.i = v;
	} else if (a->kind == FJ_AK_LIST && a->n) {
		fj_attr *items = fj_arena_alloc(&sg->arena, a->n * sizeof *items);
		if (!items)
			return false;
		for (uint32_t k = 0; k < a->n; k++)
			if (!concretize_attr(p, sg, &a->u.items[k], &items[k]))
				return false;
		out->u.items = items;
	}
	return true;
}

static void sym_values_str(const fj_rt_program *p, const uint8_t *used, char *buf, size_t size)
{
	size_t k = 0;
	buf[0] = 0;
	for (uint32_t s = 0; s < p->nsyms && k + 1 < size; s++)
		if (used[s] && p->symval[s] >= 0)
			k += (size_t)snprintf(buf + k, size - k, "%s%s=%lld", k ? ", " : "", fj_symbol_name(p->m, s),
			                      (long long)p->symval[s]);
}

/* Re-runs inference on a concrete copy of every node. */
static fj_status check_nodes(fj_rt_program *p, const uint8_t *used)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	if (!g->nnodes)
		return FJ_OK;
	fj_module *sm = fj_module_create(ctx);
	fj_graph *sg = sm ? fj_module_add_graph(sm, "rt_check", (fj_loc){0}) : NULL;
	if (!sg) {
		fj_module_destroy(sm);
		return oom(ctx);
	}
	fj_status st = FJ_OK;
	fj_vid *ops = NULL;
	uint32_t cap_ops = 0;
	fj_type *outt = NULL;
	uint32_t cap_out = 0;
	for (uint32_t i = 0; i < g->nnodes && st == FJ_OK; i++) {
		const fj_node *n = &g->nodes[i];
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		if (n->body)
			continue; /* a fusion.kernel: its sizes were checked on the graph it was fused from */
		if (n->nopnds > cap_ops) {
			ARR_FREE(ctx, ops, cap_ops);
			cap_ops = n->nopnds * 2;
			ops = ARR_ALLOC(ctx, cap_ops, fj_vid);
			if (!ops) {
				cap_ops = 0;
				st = oom(ctx);
				break;
			}
		}
		if (n->nres > cap_out) {
			ARR_FREE(ctx, outt, cap_out);
			cap_out = n->nres * 2;
			outt = ARR_ALLOC(ctx, cap_out, fj_type);
			if (!outt) {
				cap_out = 0;
				st = oom(ctx);
				break;
			}
		}
		for (uint32_t j = 0; j < n->nopnds; j++) {
			fj_vid v = n->opnds[j];
			if (v == FJ_NOVAL) {
				ops[j] = FJ_NOVAL;
				continue;
			}
			const fj_value *val = &g->values[v];
			if (val->kind == FJ_VK_LITERAL) {
				ops[j] = fj_graph_add_literal(sg, val->lit, n->loc);
			} else {
				fj_type t = val->type;
				t.dims = (fj_dim *)fj_rt_program_value_dims(p, v);
				char name[32];
				snprintf(name, sizeof name, "n%u_%u", i, j);
				ops[j] = fj_graph_add_param(sg, name, t, n->loc);
			}
			if (ops[j] == FJ_NOVAL) {
				st = oom(ctx);
				break;
			}
		}
		if (st != FJ_OK)
			break;
		uint32_t idx = fj_graph_add_node(sg, n->op, ops, n->nopnds, n->nres, NULL, NULL, n->loc);
		if (idx == FJ_NONODE) {
			st = oom(ctx);
			break;
		}
		fj_node *sn = &sg->nodes[idx];
		for (int k = 0; k < oi->nattrs; k++)
			if (!concretize_attr(p, sg, &n->attrs[k], &sn->attrs[k])) {
				st = oom(ctx);
				break;
			}
		if (st != FJ_OK)
			break;
		st = fj_check_node(sg, idx);
		if (st == FJ_OK)
			st = fj_infer_node(sg, idx, outt);
		if (st != FJ_OK)
			break;
		for (uint32_t r = 0; r < n->nres && st == FJ_OK; r++) {
			fj_vid v = n->res[r];
			const fj_type *t = &g->values[v].type;
			const int64_t *want = fj_rt_program_value_dims(p, v);
			bool same = outt[r].dtype == t->dtype && outt[r].rank == t->rank;
			for (int k = 0; same && k < t->rank; k++)
				same = outt[r].dims[k] == want[k];
			if (!same) {
				char a[300], b[300], ty[300], syms[300];
				fj_type wt = *t;
				wt.dims = (fj_dim *)want;
				type_str(p, &wt, a, sizeof a);
				type_str(p, &outt[r], b, sizeof b);
				type_str(p, t, ty, sizeof ty);
				sym_values_str(p, used, syms, sizeof syms);
				st = fj_error_status(ctx, FJ_ERR_RUNTIME, n->loc,
				                     "%s: at run time (%s) result %%%s of type %s is %s, but its operands give %s",
				                     fj_op_name(n->op), syms, value_name(g, v), ty, a, b);
			}
		}
	}
	ARR_FREE(ctx, ops, cap_ops);
	ARR_FREE(ctx, outt, cap_out);
	fj_module_destroy(sm);
	return st;
}

static fj_status plan_buffers(fj_rt_program *p)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	for (uint32_t v = 0; v < g->nvalues; v++)
		p->vbuf[v] = -1;
	for (uint32_t b = 0; b < p->nbufs; b++) {
		p->busy[b] = false;
		p->bufsize[b] = 0;
	}
	uint32_t used_bufs = 0; /* buffers of this plan (a rebind may use fewer) */
	for (uint32_t i = 0; i < g->nnodes; i++) {
		const fj_node *n = &g->nodes[i];
		for (uint32_t r = 0; r < n->nres; r++) {
			fj_vid v = n->res[r];
			if (p->out_pos[v] >= 0)
				continue;
			size_t need = p->vbytes[v];
			int32_t best = -1, largest = -1;
			for (uint32_t b = 0; b < used_bufs; b++) {
				if (p->busy[b])
					continue;
				if (p->bufsize[b] >= need && (best < 0 || p->bufsize[b] < p->bufsize[best]))
					best = (int32_t)b;
				if (largest < 0 || p->bufsize[b] > p->bufsize[largest])
					largest = (int32_t)b;
			}
			if (best < 0 && largest >= 0) {
				best = largest;
				p->bufsize[best] = need;
			}
			if (best < 0) {
				if (used_bufs == p->cap_bufs) {
					uint32_t ncap = p->cap_bufs ? p->cap_bufs * 2 : 8;
					void **nb = ARR_ALLOC(ctx, ncap, void *);
					size_t *ns = ARR_ALLOC(ctx, ncap, size_t);
					size_t *nc = ARR_ALLOC(ctx, ncap, size_t);
					bool *nbusy = ARR_ALLOC(ctx, ncap, bool);
					if (!nb || !ns || !nc || !nbusy) {
						ARR_FREE(ctx, nb, ncap);
						ARR_FREE(ctx, ns, ncap);
						ARR_FREE(ctx, nc, ncap);
						ARR_FREE(ctx, nbusy, ncap);
						return oom(ctx);
					}
					memset(nb, 0, ncap * sizeof *nb);
					memset(nc, 0, ncap * sizeof *nc);
					if (p->cap_bufs) {
						memcpy(nb, p->bufs, p->nbufs * sizeof *nb);
						memcpy(ns, p->bufsize, p->nbufs * sizeof *ns);
						memcpy(nc, p->bufcap, p->nbufs * sizeof *nc);
						memcpy(nbusy, p->busy, p->nbufs * sizeof *nbusy);
					}
					ARR_FREE(ctx, p->bufs, p->cap_bufs);
					ARR_FREE(ctx, p->bufsize, p->cap_bufs);
					ARR_FREE(ctx, p->bufcap, p->cap_bufs);
					ARR_FREE(ctx, p->busy, p->cap_bufs);
					p->bufs = nb;
					p->bufsize = ns;
					p->bufcap = nc;
					p->busy = nbusy;
					p->cap_bufs = ncap;
				}
				best = (int32_t)used_bufs++;
				if (used_bufs > p->nbufs) {
					p->bufs[best] = NULL;
					p->bufcap[best] = 0;
					p->nbufs = used_bufs;
				}
				p->bufsize[best] = need;
			}
			p->busy[best] = true;
			p->vbuf[v] = best;
		}
		/* results nobody reads die at once */
		for (uint32_t r = 0; r < n->nres; r++) {
			fj_vid v = n->res[r];
			if (p->vbuf[v] >= 0 && p->last_use[v] < 0)
				p->busy[p->vbuf[v]] = false;
		}
		for (uint32_t j = 0; j < n->nopnds; j++) {
			fj_vid v = n->opnds[j];
			if (v != FJ_NOVAL && p->vbuf[v] >= 0 && p->last_use[v] == (int32_t)i)
				p->busy[p->vbuf[v]] = false;
		}
	}
	/* Buffers past used_bufs (from an earlier, bigger plan) are freed. */
	for (uint32_t b = used_bufs; b < p->nbufs; b++) {
		fj_rt_aligned_free(p->bufs[b]);
		p->bufs[b] = NULL;
		p->bufcap[b] = 0;
	}
	p->nbufs = used_bufs;
	for (uint32_t b = 0; b < p->nbufs; b++) {
		if (p->bufs[b] && p->bufcap[b] >= p->bufsize[b])
			continue;
		void *d = fj_rt_aligned_alloc(p->bufsize[b]);
		if (!d)
			return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0},
			                       "out of memory allocating an intermediate buffer of %zu bytes", p->bufsize[b]);
		fj_rt_aligned_free(p->bufs[b]);
		p->bufs[b] = d;
		p->bufcap[b] = p->bufsize[b];
	}
	return FJ_OK;
}

fj_status fj_rt_program_bind(fj_rt_program *p, const fj_rt_tensor *const *inputs, const char *const *origin,
                             const fj_rt_dimarg *dims, size_t ndims)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	p->bound = false;
	uint32_t nsyms = fj_symbol_count(p->m);
	if (nsyms != p->nsyms || !p->symval) {
		ARR_FREE(ctx, p->symval, p->nsyms);
		p->nsyms = 0;
		p->symval = ARR_ALLOC(ctx, nsyms, int64_t);
		if (!p->symval)
			return oom(ctx);
		p->nsyms = nsyms;
	}
	for (uint32_t s = 0; s < nsyms; s++)
		p->symval[s] = -1;
	sym_src *src = ARR_ALLOC(ctx, nsyms, sym_src);
	uint8_t *used = ARR_ALLOC(ctx, nsyms, uint8_t);
	if (!src || !used) {
		ARR_FREE(ctx, src, nsyms);
		ARR_FREE(ctx, used, nsyms);
		return oom(ctx);
	}
	memset(used, 0, nsyms ? nsyms : 1);
	binder b = {p, origin, src};
	fj_status st = FJ_OK;

	/* 1. dtypes, ranks, static sizes, and single-symbol dims of the inputs */
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++) {
		const fj_rt_tensor *t = inputs ? inputs[i] : NULL;
		if (!t)
			continue;
		const fj_type *pt = &g->values[g->params[i]].type;
		if (t->dtype != pt->dtype) {
			st = mismatch(&b, i, t,
			              t->dtype == FJ_DT_BF16 ? "wrong dtype (a '<u2' .npy is read as bf16)" : "wrong dtype");
			break;
		}
		if (t->rank != pt->rank) {
			st = mismatch(&b, i, t, "wrong rank");
			break;
		}
		for (int k = 0; k < pt->rank && st == FJ_OK; k++) {
			fj_dim d = pt->dims[k];
			if (fj_dim_is_static(d)) {
				if (t->dims[k] != d) {
					char why[64];
					snprintf(why, sizeof why, "wrong size at dim %d", k);
					st = mismatch(&b, i, t, why);
				}
				continue;
			}
			const fj_symexpr *e = fj_dim_expr(p->m, d);
			if (e->nsyms == 1 && e->coef == 1)
				st = bind_sym(&b, e->syms[0], t->dims[k], (sym_src){(int32_t)i, k});
		}
	}
	/* 2. --dim */
	for (size_t k = 0; k < ndims && st == FJ_OK; k++) {
		uint32_t s = 0;
		while (s < nsyms && strcmp(fj_symbol_name(p->m, s), dims[k].name) != 0)
			s++;
		if (s == nsyms) {
			st = fj_error_status(ctx, FJ_ERR_RUNTIME, (fj_loc){0},
			                     "--dim %s=%lld: graph @%s has no symbolic size named %s", dims[k].name,
			                     (long long)dims[k].value, g->name, dims[k].name);
			break;
		}
		if (dims[k].value < 0) {
			st = fj_error_status(ctx, FJ_ERR_RUNTIME, (fj_loc){0}, "--dim %s=%lld: a size cannot be negative",
			                     dims[k].name, (long long)dims[k].value);
			break;
		}
		st = bind_sym(&b, s, dims[k].value, (sym_src){-1, 0});
	}
	/* 3. products: solve for their one unbound symbol */
	for (bool progress = true; progress && st == FJ_OK;) {
		progress = false;
		for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++) {
			const fj_rt_tensor *t = inputs ? inputs[i] : NULL;
			if (!t)
				continue;
			const fj_type *pt = &g->values[g->params[i]].type;
			for (int k = 0; k < pt->rank; k++) {
				if (fj_dim_is_static(pt->dims[k]))
					continue;
				const fj_symexpr *e = fj_dim_expr(p->m, pt->dims[k]);
				int64_t known = e->coef;
				int nunb = 0;
				uint32_t unb = 0;
				bool ovf = false;
				for (uint32_t q = 0; q < e->nsyms; q++) {
					int64_t sv = p->symval[e->syms[q]];
					if (sv < 0) {
						if (nunb && unb == e->syms[q]) {
							nunb = 2; /* N*N: not solved by division */
							continue;
						}
						nunb++;
						unb = e->syms[q];
					} else if (sv && known > INT64_MAX / sv) {
						ovf = true;
					} else {
						known *= sv;
					}
				}
				if (nunb != 1 || ovf || known == 0)
					continue;
				if (t->dims[k] % known != 0) {
					char why[200], dd[100];
					fj_dim_format(p->m, pt->dims[k], dd, sizeof dd);
					snprintf(why, sizeof why, "size %lld at dim %d is not a multiple of %lld (%s)",
					         (long long)t->dims[k], k, (long long)known, dd);
					st = mismatch(&b, i, t, why);
					break;
				}
				st = bind_sym(&b, unb, t->dims[k] / known, (sym_src){(int32_t)i, k});
				progress = true;
				if (st != FJ_OK)
					break;
			}
		}
	}
	/* 4. every symbol the graph uses must be bound */
	if (st == FJ_OK) {
		for (uint32_t v = 0; v < g->nvalues; v++)
			if (g->values[v].kind != FJ_VK_LITERAL)
				mark_type_syms(p, &g->values[v].type, used);
		for (uint32_t i = 0; i < g->nnodes; i++) {
			const fj_opinfo *oi = fj_op_info(ctx, g->nodes[i].op);
			for (int k = 0; k < oi->nattrs; k++)
				mark_attr_syms(p, &g->nodes[i].attrs[k], used);
		}
		for (uint32_t s = 0; s < nsyms; s++)
			if (used[s] && p->symval[s] < 0) {
				st = fj_error_status(ctx, FJ_ERR_RUNTIME, (fj_loc){0},
				                     "symbolic size %s is not bound by any input: give it with --dim %s=<size>",
				                     fj_symbol_name(p->m, s), fj_symbol_name(p->m, s));
				break;
			}
	}
	/* 5. every value's concrete shape and size */
	for (uint32_t v = 0; v < g->nvalues && st == FJ_OK; v++) {
		const fj_value *val = &g->values[v];
		int64_t *vd = &p->vdims[(size_t)v * FJ_MAX_RANK];
		int rank = val->kind == FJ_VK_LITERAL ? 0 : val->type.rank;
		bool ovf = false;
		for (int k = 0; k < rank; k++)
			if (!eval_dim(p, val->type.dims[k], &vd[k], NULL, &ovf)) {
				ovf = true;
				break;
			}
		if (ovf || !fj_rt_nbytes(val->type.dtype, vd, rank, &p->vbytes[v])) {
			char ty[300], syms[300];
			type_str(p, &val->type, ty, sizeof ty);
			sym_values_str(p, used, syms, sizeof syms);
			st = fj_error_status(ctx, FJ_ERR_RUNTIME, val->loc, "the size of %%%s: %s overflows with %s",
			                     value_name(g, v), ty, syms);
		}
	}
	/* 6. the inputs against their evaluated shapes (products, N*N ...) */
	for (uint32_t i = 0; i < g->nparams && st == FJ_OK; i++) {
		const fj_rt_tensor *t = inputs ? inputs[i] : NULL;
		if (!t)
			continue;
		const int64_t *want = fj_rt_program_value_dims(p, g->params[i]);
		for (int k = 0; k < t->rank; k++)
			if (t->dims[k] != want[k]) {
				char why[300], syms[200];
				sym_values_str(p, used, syms, sizeof syms);
				snprintf(why, sizeof why, "size %lld at dim %d, but %s gives %lld", (long long)t->dims[k], k, syms,
				         (long long)want[k]);
				st = mismatch(&b, i, t, why);
				break;
			}
	}
	/* 7. every node with the concrete sizes */
	if (st == FJ_OK)
		st = check_nodes(p, used);
	if (st == FJ_OK && !p->fused)
		st = plan_buffers(p);
	if (st == FJ_OK && p->fused)
		st = fj_rt_program_bind(p->fused, inputs, origin, dims, ndims);
	ARR_FREE(ctx, src, nsyms);
	ARR_FREE(ctx, used, nsyms);
	if (st == FJ_OK) {
		/* symbols the graph does not use read as -1 */
		p->bound = true;
	}
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
		fj_rt_store_f64(t->data, t->dtype, 0,
		                lit->kind == FJ_LIT_FLOAT ? lit->f : lit->kind == FJ_LIT_INT ? (double)lit->i : lit->b);
}

fj_status fj_rt_program_run(fj_rt_program *p, const fj_rt_tensor *const *inputs, fj_rt_tensor *outputs)
{
	fj_context *ctx = p->ctx;
	const fj_graph *g = p->g;
	if (!p->bound)
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
			                       "input %%%s does not have the shape it was bound with", value_name(g, v));
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
					ptr = p->out_pos[v] >= 0 ? outputs[p->out_pos[v]].data : p->bufs[p->vbuf[v]];
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
			p->argdims[nd++] = p->symval[p->xsyms[x]];
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
			 * their partials (codegen/region.h) */
			int64_t slots = extent < 4 * (int64_t)p->threads ? extent : 4 * (int64_t)p->threads;
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
					return oom(ctx);
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
		else if (val->kind == FJ_VK_PARAM)
			memcpy(outputs[k].data, inputs[val->def]->data, outputs[k].nbytes);
		else if (p->out_pos[v] != (int32_t)k)
			memcpy(outputs[k].data, outputs[p->out_pos[v]].data, outputs[k].nbytes);
	}
	return FJ_OK;
}
