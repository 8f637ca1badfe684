/* region.c -- the shared region code generator (region.h): analysis of a
 * fusion.kernel body, the scalar evaluator of body values at a point, and the
 * reduction accumulators. Target-independent; the loop nests that call them
 * are the targets' templates (codegen/region_host.c for the host).
 *
 * Analysis: one walk over the body in node order (bodies are topologically
 * ordered): class of every value, the reductions (same domain D and reduced
 * dims K for all, fuse's rule L2), their phases (a reduction whose operand
 * depends on another reduction comes a phase later: softmax's sum after its
 * max), the opaque node, and where each symbol is read at run time: from an
 * operand's or result's dim, else from the dims array's extra entries (the
 * VJP of var over N counts prims.full [N,16] in a kernel of 0-d values).
 *
 * Evaluator: a recursive descent over the defining nodes, memoised per
 * (value, point) in scopes. Recursion depth is the body's depth; bodies are
 * small (a kernel's worth of prims). Index maps never read out of bounds:
 * data-dependent or padded positions are clamped and selected away, and a
 * region operand with no element is read through a pointer to a zeroed
 * scratch slot.
 *
 * Complexity: analysis O(body); evaluation O(body * points emitted), each
 * value once per distinct point thanks to the memo.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/region.h"

#define B (r->cg->b)

static const char *const sched_names[FJ_RG_SCHED_COUNT] = {
	[FJ_RG_POINTWISE] = "pointwise", [FJ_RG_REDUCTION_INNER] = "reduction_inner",
	[FJ_RG_REDUCTION_OUTER] = "reduction_outer", [FJ_RG_PERSISTENT_INNER] = "persistent_inner",
	[FJ_RG_PERSISTENT_OUTER] = "persistent_outer", [FJ_RG_TRANSPOSE] = "transpose",
	[FJ_RG_SCAN] = "scan", [FJ_RG_MATMUL] = "matmul", [FJ_RG_TAKE] = "take",
	[FJ_RG_GATHER] = "gather", [FJ_RG_SCATTER] = "scatter",
	[FJ_RG_PERSISTENT_INNER_OUTER] = "persistent_inner_outer",
};

bool fj_rg_schedule_from_name(const char *s, fj_rg_schedule *out)
{
	for (int i = 0; s && i < FJ_RG_SCHED_COUNT; i++)
		if (strcmp(s, sched_names[i]) == 0) {
			*out = (fj_rg_schedule)i;
			return true;
		}
	return false;
}

const char *fj_rg_schedule_name(fj_rg_schedule s)
{
	return (unsigned)s < FJ_RG_SCHED_COUNT ? sched_names[s] : "?";
}

/* ---- analysis ---- */

static bool is_reduction(fj_op op)
{
	switch (op) {
	case FJ_OP_PRIMS_SUM: case FJ_OP_PRIMS_AMAX: case FJ_OP_PRIMS_AMIN: case FJ_OP_PRIMS_PROD:
	case FJ_OP_PRIMS_VAR_MEAN: case FJ_OP_PRIMS_ARGMAX: case FJ_OP_PRIMS_ARGMIN:
		return true;
	default:
		return false;
	}
}

static bool is_opaque(fj_op op)
{
	switch (op) {
	case FJ_OP_PRIMS_MATMUL: case FJ_OP_PRIMS_TAKE: case FJ_OP_PRIMS_GATHER: case FJ_OP_PRIMS_SCATTER_ADD:
	case FJ_OP_PRIMS_INDEX_ADD: case FJ_OP_PRIMS_CUMSUM:
		return true;
	default:
		return false;
	}
}

static int norm_dim(int64_t d, int rank)
{
	int rr = rank ? rank : 1;
	if (d < 0)
		d += rr;
	return d < 0 || d >= rr ? 0 : (int)d;
}

static uint32_t red_mask(const fj_context *ctx, const fj_node *n, int rank)
{
	if (n->op == FJ_OP_PRIMS_ARGMAX || n->op == FJ_OP_PRIMS_ARGMIN) {
		int64_t d = fj_attr_as_int(fj_node_attr(ctx, n, "dim"));
		return rank ? 1u << norm_dim(d, rank) : 0;
	}
	const fj_attr *a = fj_node_attr(ctx, n, "dims");
	uint32_t m = 0;
	if (!a || a->kind != FJ_AK_LIST)
		return 0;
	for (uint32_t i = 0; i < a->n; i++)
		if (rank)
			m |= 1u << norm_dim(fj_attr_as_int(&a->u.items[i]), rank);
	return m;
}

static bool same_dims(const fj_type *a, const fj_type *b)
{
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

/* Does t have the dims of D without K (R)? */
static bool is_r_shape(const fj_type *t, const fj_type *d, uint32_t k)
{
	int j = 0;
	for (int i = 0; i < d->rank; i++) {
		if (k & (1u << i))
			continue;
		if (j >= t->rank || t->dims[j] != d->dims[i])
			return false;
		j++;
	}
	return j == t->rank;
}

static void mark_dim_syms(const fj_module *m, fj_dim d, uint8_t *used)
{
	if (fj_dim_is_static(d))
		return;
	const fj_symexpr *e = fj_dim_expr(m, d);
	for (uint32_t k = 0; k < e->nsyms; k++)
		used[e->syms[k]] = 1;
}

static void mark_attr_syms(const fj_module *m, const fj_attr *a, uint8_t *used)
{
	if (a->kind == FJ_AK_DIM)
		mark_dim_syms(m, a->u.dim, used);
	else if (a->kind == FJ_AK_LIST)
		for (uint32_t k = 0; k < a->n; k++)
			mark_attr_syms(m, &a->u.items[k], used);
}

/* Can dim d resolve symbol s, given the resolved set? (s appears once; the
 * other symbols are resolved.) */
static bool resolves(const fj_module *m, fj_dim d, uint32_t s, const uint8_t *resolved)
{
	if (fj_dim_is_static(d))
		return false;
	const fj_symexpr *e = fj_dim_expr(m, d);
	int count = 0;
	for (uint32_t k = 0; k < e->nsyms; k++) {
		if (e->syms[k] == s)
			count++;
		else if (!resolved[e->syms[k]])
			return false;
	}
	return count == 1 && e->coef != 0;
}

/* Marks in used[] every symbol kernel body b names: in its values' types
 * and in its nodes' attributes (a prims.full's shape ...). */
static void mark_body_syms(fj_context *ctx, const fj_module *m, const fj_graph *b, uint8_t *used)
{
	for (uint32_t v = 0; v < b->nvalues; v++)
		if (b->values[v].kind != FJ_VK_LITERAL)
			for (int d = 0; d < b->values[v].type.rank; d++)
				mark_dim_syms(m, b->values[v].type.dims[d], used);
	for (uint32_t i = 0; i < b->nnodes; i++) {
		const fj_opinfo *oi = fj_op_info(ctx, b->nodes[i].op);
		for (int k = 0; k < oi->nattrs; k++)
			mark_attr_syms(m, &b->nodes[i].attrs[k], used);
	}
}

/* Resolves the used symbols from the dims of n's operands and results, to a
 * fixed point (N*4096 resolves N, N*M resolves M once N is known); appends
 * one source per resolved symbol to src[*nsrc] (NULL: not wanted), in the
 * order a kernel can bind them. */
static void resolve_from_dims(const fj_graph *g, const fj_node *n, const uint8_t *used, uint8_t *resolved,
                              fj_rg_symsrc *src, uint32_t *nsrc)
{
	const fj_module *m = g->module;
	uint32_t ns = fj_symbol_count(m);
	for (bool progress = true; progress;) {
		progress = false;
		for (uint32_t s = 0; s < ns; s++) {
			if (!used[s] || resolved[s])
				continue;
			for (uint32_t j = 0; j < n->nopnds + n->nres && !resolved[s]; j++) {
				bool isres = j >= n->nopnds;
				fj_vid v = isres ? n->res[j - n->nopnds] : n->opnds[j];
				if (v == FJ_NOVAL || g->values[v].kind == FJ_VK_LITERAL)
					continue;
				const fj_type *t = &g->values[v].type;
				for (int d = 0; d < t->rank && !resolved[s]; d++) {
					if (!resolves(m, t->dims[d], s, resolved))
						continue;
					if (src)
						src[(*nsrc)++] = (fj_rg_symsrc){s, isres, isres ? j - n->nopnds : j, d};
					resolved[s] = 1;
					progress = true;
				}
			}
		}
	}
}

/* The symbols of fusion.kernel `node` of g: the sources of those its
 * operands' and results' dims give (src, may be NULL), and the others, the
 * extra symbols, by name (xs, room for every symbol of the module). Names,
 * not symbol ids, order the extras: ids depend on the order a module
 * interned them, and one compiled kernel serves every module whose region
 * prints the same (the kernel key). */
static fj_status kernel_syms(fj_context *ctx, const fj_graph *g, const fj_node *n, fj_rg_symsrc *src,
                             uint32_t *nsrc, uint32_t *xs, uint32_t *nxs)
{
	const fj_module *m = g->module;
	uint32_t ns = fj_symbol_count(m);
	*nxs = 0;
	if (nsrc)
		*nsrc = 0;
	if (!ns)
		return FJ_OK;
	uint8_t *used = fj_alloc(ctx, ns * 2);
	if (!used)
		return FJ_ERR_NOMEM;
	uint8_t *resolved = used + ns;
	memset(used, 0, ns * 2);
	mark_body_syms(ctx, m, n->body, used);
	resolve_from_dims(g, n, used, resolved, src, nsrc);
	for (uint32_t s = 0; s < ns; s++) {
		if (!used[s] || resolved[s])
			continue;
		uint32_t k = (*nxs)++;
		for (; k > 0 && strcmp(fj_symbol_name(m, xs[k - 1]), fj_symbol_name(m, s)) > 0; k--)
			xs[k] = xs[k - 1];
		xs[k] = s;
	}
	fj_free(ctx, used, ns * 2);
	return FJ_OK;
}

static fj_status analyze_syms(fj_rg_analysis *a)
{
	uint32_t ns = fj_symbol_count(a->g->module);
	if (!ns)
		return FJ_OK;
	a->syms = fj_alloc(a->ctx, ns * sizeof *a->syms);
	a->xsyms = fj_alloc(a->ctx, ns * sizeof *a->xsyms);
	if (!a->syms || !a->xsyms)
		return FJ_ERR_NOMEM;
	return kernel_syms(a->ctx, a->g, a->node, a->syms, &a->nsyms, a->xsyms, &a->nxsyms);
}

fj_status fj_rg_extra_syms(fj_context *ctx, const fj_graph *g, uint32_t node, uint32_t *syms, uint32_t *n)
{
	*n = 0;
	const fj_node *k = &g->nodes[node];
	if (k->op != FJ_OP_FUSION_KERNEL || !k->body)
		return FJ_OK;
	fj_status st = kernel_syms(ctx, g, k, NULL, NULL, syms, n);
	if (st == FJ_ERR_NOMEM)
		fj_error_status(ctx, st, k->loc, "out of memory");
	return st;
}

static bool same_count(fj_module *m, const fj_type *t, const fj_dim *dims, int n)
{
	fj_dim x, y;
	return fj_dim_product(m, t->dims, t->rank, &x) && fj_dim_product(m, dims, n, &y) && x == y;
}

/* The space every result is stored in (fj_rg_space): C for column values;
 * without reductions D; else D for D's shape, R for R's shape or R's element
 * count (fuse's rule L3 lets only order-preserving reshapes of row values
 * reach an output, so the R-linear index is theirs too), D for D's element
 * count. Fuse's rule L4 leaves no other count. */
static fj_status result_spaces(fj_rg_analysis *a)
{
	const fj_graph *b = a->body;
	fj_module *m = a->g->module;
	fj_dim rd[FJ_MAX_RANK];
	int nr = 0;
	for (int d = 0; d < a->dom->rank; d++)
		if (!(a->kmask & (1u << d)))
			rd[nr++] = a->dom->dims[d];
	for (uint32_t j = 0; j < b->nresults; j++) {
		fj_vid v = b->results[j];
		fj_rg_value *x = &a->vals[v];
		const fj_type *t = &b->values[v].type;
		if (fj_rg_col_value(a, v))
			x->space = FJ_RG_SPACE_C;
		else if (!a->kmask || x->in_d)
			x->space = FJ_RG_SPACE_D;
		else if (x->in_r || same_count(m, t, rd, nr))
			x->space = FJ_RG_SPACE_R;
		else if (same_count(m, t, a->dom->dims, a->dom->rank))
			x->space = FJ_RG_SPACE_D;
		else
			return fj_error_status(a->ctx, FJ_ERR_UNSUPPORTED, a->node->loc,
			                       "fusion.kernel: result %u has neither the element count of the reduced "
			                       "domain nor of its rows",
			                       j);
	}
	return FJ_OK;
}

void fj_rg_analysis_free(fj_rg_analysis *a)
{
	if (a->vals)
		fj_free(a->ctx, a->vals, (a->body->nvalues ? a->body->nvalues : 1) * sizeof *a->vals);
	if (a->syms)
		fj_free(a->ctx, a->syms, fj_symbol_count(a->g->module) * sizeof *a->syms);
	if (a->xsyms)
		fj_free(a->ctx, a->xsyms, fj_symbol_count(a->g->module) * sizeof *a->xsyms);
	a->vals = NULL;
	a->syms = NULL;
	a->xsyms = NULL;
}

fj_status fj_rg_analyze(fj_context *ctx, const fj_graph *g, uint32_t node, fj_rg_analysis *a)
{
	memset(a, 0, sizeof *a);
	a->ctx = ctx;
	a->g = g;
	a->node = &g->nodes[node];
	a->body = a->node->body;
	a->opaque = FJ_NONODE;
	a->dom_v = FJ_NOVAL;
	const fj_node *n = a->node;
	const fj_graph *b = a->body;
	if (n->op != FJ_OP_FUSION_KERNEL || !b)
		return fj_error_status(ctx, FJ_ERR_INTERNAL, n->loc, "%s: not a fusion.kernel with a body",
		                       fj_op_name(n->op));
	if (!n->schedule || !fj_rg_schedule_from_name(n->schedule, &a->sched))
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc,
		                       "fusion.kernel: no known schedule (run the `schedule` pass)");
	if (b->nparams != n->nopnds || b->nresults != n->nres)
		return fj_error_status(ctx, FJ_ERR_INTERNAL, n->loc, "fusion.kernel: body and node arity differ");
	if (b->nresults == 0)
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc, "fusion.kernel: a kernel without results");
	uint32_t nv = b->nvalues ? b->nvalues : 1;
	a->vals = fj_alloc(ctx, nv * sizeof *a->vals);
	int8_t *dep = fj_alloc(ctx, nv);
	if (!a->vals || !dep) {
		if (dep)
			fj_free(ctx, dep, nv);
		fj_rg_analysis_free(a);
		return FJ_ERR_NOMEM;
	}
	memset(dep, -1, nv);
	uint8_t *col = fj_alloc(ctx, nv); /* computed from an outer reduction */
	if (!col) {
		fj_free(ctx, dep, nv);
		fj_rg_analysis_free(a);
		return FJ_ERR_NOMEM;
	}
	memset(col, 0, nv);
	bool io = a->sched == FJ_RG_PERSISTENT_INNER_OUTER;
	const fj_type *odom = NULL;
	for (uint32_t v = 0; v < b->nvalues; v++) {
		fj_rg_value *x = &a->vals[v];
		memset(x, 0, sizeof *x);
		x->index = -1;
		x->result = -1;
		x->node = FJ_NONODE;
		x->cls = b->values[v].kind == FJ_VK_LITERAL ? FJ_RG_LITERAL : FJ_RG_FULL;
	}
	for (uint32_t i = 0; i < b->nparams; i++) {
		a->vals[b->params[i]].cls = FJ_RG_INPUT;
		a->vals[b->params[i]].index = (int32_t)i;
	}
	fj_status st = FJ_OK;
	for (uint32_t i = 0; i < b->nnodes && st == FJ_OK; i++) {
		const fj_node *bn = &b->nodes[i];
		int d = -1;
		bool c = false;
		for (uint32_t o = 0; o < bn->nopnds; o++) {
			fj_vid v = bn->opnds[o];
			if (v == FJ_NOVAL)
				continue;
			a->vals[v].nuses++;
			if (dep[v] > d)
				d = dep[v];
			c |= col[v];
		}
		uint8_t cls = d >= 0 ? FJ_RG_ROW : FJ_RG_FULL;
		if (c) {
			/* a column value: pointwise on outer results and inputs only */
			if (d >= 0 || is_reduction(bn->op) || is_opaque(bn->op)) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc,
				                     "fusion.kernel: an outer reduction's result flows back into the rows");
				break;
			}
			cls = FJ_RG_COL;
		} else if (io && is_reduction(bn->op) && b->values[bn->opnds[0]].type.rank > 0 &&
		           !(red_mask(ctx, bn, b->values[bn->opnds[0]].type.rank) &
		             (1u << (b->values[bn->opnds[0]].type.rank - 1)))) {
			/* persistent_inner_outer: a reduction that keeps D's innermost
			 * dim is an outer one (a column sum) */
			const fj_type *t = &b->values[bn->opnds[0]].type;
			uint32_t km = red_mask(ctx, bn, t->rank);
			if (bn->op != FJ_OP_PRIMS_SUM) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc,
				                     "fusion.kernel: persistent_inner_outer: an outer reduction other than prims.sum");
				break;
			}
			if (!odom) {
				odom = t;
				a->okmask = km;
			} else if (!same_dims(odom, t) || a->okmask != km) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc,
				                     "fusion.kernel: outer reductions over different iteration spaces in one kernel");
				break;
			}
			if (a->noreds == FJ_RG_MAX_REDS) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc, "fusion.kernel: too many reductions");
				break;
			}
			a->oreds[a->noreds++] = i;
			for (uint32_t r = 0; r < bn->nres; r++) {
				a->vals[bn->res[r]].cls = FJ_RG_REDUCTION;
				a->vals[bn->res[r]].node = i;
				col[bn->res[r]] = 1;
			}
			continue;
		} else if (is_reduction(bn->op)) {
			const fj_type *t = &b->values[bn->opnds[0]].type;
			uint32_t km = red_mask(ctx, bn, t->rank);
			if (!a->dom) {
				a->dom = t;
				a->dom_v = bn->opnds[0];
				a->kmask = km;
			} else if (!same_dims(a->dom, t) || a->kmask != km) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc,
				                     "fusion.kernel: reductions over different iteration spaces in one kernel");
				break;
			}
			if (a->nreds == FJ_RG_MAX_REDS) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc, "fusion.kernel: too many reductions");
				break;
			}
			int ph = d + 1;
			if (ph > 100) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc, "fusion.kernel: reductions chained too deep");
				break;
			}
			a->reds[a->nreds] = i;
			a->red_phase[a->nreds++] = (uint8_t)ph;
			if (ph + 1 > a->nphases)
				a->nphases = ph + 1;
			d = ph;
			cls = FJ_RG_REDUCTION;
		} else if (is_opaque(bn->op)) {
			if (a->opaque != FJ_NONODE) {
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, bn->loc,
				                     "fusion.kernel: two opaque or scan ops in one kernel");
				break;
			}
			a->opaque = i;
			cls = FJ_RG_OPAQUE;
		}
		for (uint32_t r = 0; r < bn->nres; r++) {
			a->vals[bn->res[r]].cls = cls;
			a->vals[bn->res[r]].node = i;
			dep[bn->res[r]] = (int8_t)d;
			col[bn->res[r]] = c;
		}
	}
	if (st == FJ_OK && io) {
		uint32_t all = a->dom ? (1u << a->dom->rank) - 1 : 0;
		if (!a->nreds || !a->noreds || a->dom->rank < 2 || !same_dims(odom, a->dom) ||
		    a->okmask != (all & ~a->kmask))
			st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc,
			                     "fusion.kernel: persistent_inner_outer needs reductions along the rows (over "
			                     "D's innermost dim) and column sums over the other dims of the same D");
	}
	for (uint32_t j = 0; j < b->nresults; j++) {
		fj_rg_value *x = &a->vals[b->results[j]];
		x->nuses++;
		if (x->result < 0)
			x->result = (int32_t)j;
	}
	if (st == FJ_OK && a->opaque != FJ_NONODE && a->nreds)
		st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc,
		                     "fusion.kernel: a reduction and an opaque op in one kernel");
	if (st == FJ_OK && !a->dom) {
		a->dom_v = b->results[0];
		a->dom = &b->values[a->dom_v].type;
		a->kmask = 0;
	}
	if (st == FJ_OK) {
		a->rrank = a->dom->rank - __builtin_popcount(a->kmask);
		for (uint32_t v = 0; v < b->nvalues; v++) {
			if (b->values[v].kind == FJ_VK_LITERAL)
				continue;
			a->vals[v].in_d = same_dims(&b->values[v].type, a->dom);
			a->vals[v].in_r = is_r_shape(&b->values[v].type, a->dom, a->kmask);
			a->vals[v].in_c = io && is_r_shape(&b->values[v].type, a->dom, a->okmask);
			if (a->vals[v].cls == FJ_RG_COL && !a->vals[v].in_c && st == FJ_OK)
				st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc,
				                     "fusion.kernel: a value computed from a column sum that is not column-shaped");
			if (a->vals[v].cls == FJ_RG_ROW && a->vals[v].in_d && a->kmask)
				a->has_row_d = true;
		}
		if (st == FJ_OK)
			st = result_spaces(a);
		if (st == FJ_OK)
			st = analyze_syms(a);
	}
	fj_free(ctx, dep, nv);
	fj_free(ctx, col, nv);
	if (st != FJ_OK)
		fj_rg_analysis_free(a);
	return st;
}

bool fj_rg_col_value(const fj_rg_analysis *a, fj_vid v)
{
	const fj_rg_value *x = &a->vals[v];
	if (!a->noreds || !x->in_c || x->in_d)
		return false;
	if (x->cls == FJ_RG_COL)
		return true;
	for (int i = 0; i < a->noreds; i++)
		if (x->node == a->oreds[i])
			return true;
	return !x->in_r && (x->cls == FJ_RG_FULL || x->cls == FJ_RG_INPUT || x->cls == FJ_RG_LITERAL);
}

fj_status fj_rg_host_slots(fj_context *ctx, const fj_graph *g, uint32_t node, uint32_t *nsums,
                           uint32_t *col_result)
{
	*nsums = 0;
	*col_result = 0;
	const fj_node *n = &g->nodes[node];
	fj_rg_schedule s;
	if (n->op != FJ_OP_FUSION_KERNEL || !n->body || !n->schedule || !fj_rg_schedule_from_name(n->schedule, &s) ||
	    s != FJ_RG_PERSISTENT_INNER_OUTER)
		return FJ_OK;
	fj_rg_analysis a;
	fj_status st = fj_rg_analyze(ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc, "fusion.kernel: column sums without a column result");
	for (uint32_t j = 0; j < a.body->nresults; j++) {
		if (fj_rg_col_value(&a, a.body->results[j])) {
			*nsums = (uint32_t)a.noreds;
			*col_result = j;
			st = FJ_OK;
			break;
		}
	}
	fj_rg_analysis_free(&a);
	return st;
}

/* ---- small IR helpers ---- */

static LLVMValueRef c64(fj_rg *r, int64_t v) { return fj_cg_i64(r->cg, v); }
static LLVMValueRef iadd(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWAdd(B, x, y, ""); }
static LLVMValueRef isub(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWSub(B, x, y, ""); }
static LLVMValueRef imul(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWMul(B, x, y, ""); }
static LLVMValueRef icmp(fj_rg *r, LLVMIntPredicate p, LLVMValueRef x, LLVMValueRef y)
{
	return LLVMBuildICmp(B, p, x, y, "");
}
static LLVMValueRef sel(fj_rg *r, LLVMValueRef c, LLVMValueRef x, LLVMValueRef y)
{
	return LLVMBuildSelect(B, c, x, y, "");
}
static LLVMValueRef smax(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return sel(r, icmp(r, LLVMIntSGT, x, y), x, y); }
static LLVMValueRef smin(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return sel(r, icmp(r, LLVMIntSLT, x, y), x, y); }

static LLVMValueRef undef_of(fj_rg *r, fj_vid v)
{
	return LLVMGetUndef(fj_cg_compute_type(r->cg, r->body->values[v].type.dtype));
}

static fj_status rg_error(fj_rg *r, const fj_node *n, const char *fmt, const char *arg)
{
	if (r->st == FJ_OK)
		r->st = fj_cg_error(r->cg, FJ_ERR_UNSUPPORTED, n, fmt, arg);
	return r->st;
}

/* The i64 value of size expression d. */
static LLVMValueRef dim_value(fj_rg *r, fj_dim d)
{
	if (fj_dim_is_static(d))
		return c64(r, d);
	const fj_symexpr *e = fj_dim_expr(r->a->g->module, d);
	LLVMValueRef v = c64(r, e->coef);
	for (uint32_t k = 0; k < e->nsyms; k++) {
		LLVMValueRef s = e->syms[k] < r->nsymval ? r->symval[e->syms[k]] : NULL;
		if (!s) {
			if (r->st == FJ_OK)
				r->st = fj_cg_error(r->cg, FJ_ERR_INTERNAL, r->a->node, "unbound symbol %s",
				                    fj_symbol_name(r->a->g->module, e->syms[k]));
			return c64(r, 0);
		}
		v = e->coef == 1 && k == 0 ? s : imul(r, v, s);
	}
	return v;
}

static LLVMValueRef attr_dim(fj_rg *r, const fj_attr *a)
{
	if (a->kind == FJ_AK_DIM)
		return dim_value(r, a->u.dim);
	return c64(r, fj_attr_as_int(a));
}

/* ---- begin / end ---- */

fj_status fj_rg_begin(fj_rg *r, fj_cg *cg, const fj_rg_analysis *a, const fj_cg_operand *in, uint32_t nin,
                      const fj_cg_tensor *out, uint32_t nout, LLVMValueRef status)
{
	return fj_rg_begin_dims(r, cg, a, in, nin, out, nout, status, NULL, 0);
}

/* Binds the extra symbols (fj_rg_analysis.xsyms) from dims[at ...]; a
 * caller without a dims array (fj_rg_begin) cannot give them. */
static void bind_extra_syms(fj_rg *r, LLVMValueRef dims, int64_t at)
{
	const fj_rg_analysis *a = r->a;
	for (uint32_t i = 0; i < a->nxsyms; i++) {
		if (!dims) {
			r->st = fj_cg_error(r->cg, FJ_ERR_UNSUPPORTED, a->node,
			                    "symbolic size %s is not a size of the kernel's operands or results",
			                    fj_symbol_name(a->g->module, a->xsyms[i]));
			return;
		}
		LLVMValueRef ix = c64(r, at + (int64_t)i);
		LLVMValueRef p = LLVMBuildInBoundsGEP2(B, r->cg->t_i64, dims, &ix, 1, "");
		LLVMValueRef v = LLVMBuildLoad2(B, r->cg->t_i64, p, "sym");
		LLVMSetAlignment(v, 8);
		r->symval[a->xsyms[i]] = v;
	}
}

fj_status fj_rg_begin_dims(fj_rg *r, fj_cg *cg, const fj_rg_analysis *a, const fj_cg_operand *in, uint32_t nin,
                           const fj_cg_tensor *out, uint32_t nout, LLVMValueRef status, LLVMValueRef dims,
                           int64_t xat)
{
	memset(r, 0, sizeof *r);
	r->cg = cg;
	r->a = a;
	r->body = a->body;
	r->in = in;
	r->nin = nin;
	r->out = out;
	r->nout = nout;
	r->status = status;
	fj_context *ctx = cg->ctx;
	uint32_t nv = r->body->nvalues ? r->body->nvalues : 1;
	r->nsymval = fj_symbol_count(a->g->module);
	r->symval = fj_alloc(ctx, (r->nsymval ? r->nsymval : 1) * sizeof *r->symval);
	r->bound = fj_alloc(ctx, nv * sizeof *r->bound);
	r->vdim = fj_alloc(ctx, nv * sizeof *r->vdim);
	r->inptr = fj_alloc(ctx, (nin ? nin : 1) * sizeof *r->inptr);
	r->cap_memo = 256;
	r->memo = fj_alloc(ctx, r->cap_memo * sizeof *r->memo);
	if (!r->symval || !r->bound || !r->vdim || !r->inptr || !r->memo) {
		fj_rg_end(r);
		return fj_cg_error(cg, FJ_ERR_NOMEM, a->node, "out of memory");
	}
	memset(r->symval, 0, (r->nsymval ? r->nsymval : 1) * sizeof *r->symval);
	memset(r->bound, 0, nv * sizeof *r->bound);
	memset(r->vdim, 0, nv * sizeof *r->vdim);
	/* symbols: the extra ones, then those of the operands' and results'
	 * dims, in the order the analysis resolved them */
	bind_extra_syms(r, dims, xat);
	if (r->st != FJ_OK) {
		fj_status st = r->st;
		fj_rg_end(r);
		return st;
	}
	const fj_module *m = a->g->module;
	for (uint32_t i = 0; i < a->nsyms; i++) {
		const fj_rg_symsrc *s = &a->syms[i];
		LLVMValueRef dv = s->is_result ? out[s->index].dim[s->dim] : in[s->index].t.dim[s->dim];
		const fj_type *t = s->is_result ? &a->g->values[a->node->res[s->index]].type
		                                : &a->g->values[a->node->opnds[s->index]].type;
		const fj_symexpr *e = fj_dim_expr(m, t->dims[s->dim]);
		LLVMValueRef div = c64(r, e->coef);
		for (uint32_t k = 0; k < e->nsyms; k++)
			if (e->syms[k] != s->sym)
				div = imul(r, div, r->symval[e->syms[k]]);
		r->symval[s->sym] = e->coef == 1 && e->nsyms == 1 ? dv : LLVMBuildSDiv(B, dv, div, "");
	}
	/* sizes of every body value */
	for (uint32_t v = 0; v < r->body->nvalues; v++) {
		const fj_value *val = &r->body->values[v];
		if (val->kind == FJ_VK_LITERAL)
			continue;
		const fj_rg_value *x = &a->vals[v];
		for (int d = 0; d < val->type.rank; d++)
			r->vdim[v][d] = x->cls == FJ_RG_INPUT && !in[x->index].literal && !in[x->index].none
			                    ? in[x->index].t.dim[d]
			                    : dim_value(r, val->type.dims[d]);
	}
	/* operands: a pointer that is safe to read at offset 0 even when empty */
	LLVMValueRef dummy = NULL;
	for (uint32_t i = 0; i < nin; i++) {
		r->inptr[i] = NULL;
		if (in[i].none || in[i].literal)
			continue;
		bool maybe_empty = in[i].t.rank > 0;
		const fj_type *t = &a->g->values[a->node->opnds[i]].type;
		if (maybe_empty) {
			maybe_empty = false;
			for (int d = 0; d < t->rank; d++)
				if (!fj_dim_is_static(t->dims[d]) || t->dims[d] == 0)
					maybe_empty = true;
		}
		if (!maybe_empty) {
			r->inptr[i] = in[i].t.ptr;
			continue;
		}
		if (!dummy) {
			LLVMTypeRef at = LLVMArrayType(cg->t_i64, 4);
			dummy = fj_cg_var(cg, at, LLVMConstNull(at), "empty");
		}
		LLVMValueRef empty = icmp(r, LLVMIntEQ, in[i].t.numel, c64(r, 0));
		r->inptr[i] = sel(r, empty, dummy, in[i].t.ptr);
	}
	return cg->st;
}

void fj_rg_end(fj_rg *r)
{
	fj_context *ctx = r->cg->ctx;
	uint32_t nv = r->body->nvalues ? r->body->nvalues : 1;
	if (r->symval)
		fj_free(ctx, r->symval, (r->nsymval ? r->nsymval : 1) * sizeof *r->symval);
	if (r->bound)
		fj_free(ctx, r->bound, nv * sizeof *r->bound);
	if (r->vdim)
		fj_free(ctx, r->vdim, nv * sizeof *r->vdim);
	if (r->inptr)
		fj_free(ctx, r->inptr, (r->nin ? r->nin : 1) * sizeof *r->inptr);
	if (r->memo)
		fj_free(ctx, r->memo, r->cap_memo * sizeof *r->memo);
	r->symval = NULL;
	r->bound = NULL;
	r->vdim = NULL;
	r->inptr = NULL;
	r->memo = NULL;
}

LLVMValueRef fj_rg_dim(fj_rg *r, fj_vid v, int d) { return r->vdim[v][d]; }

LLVMValueRef fj_rg_numel(fj_rg *r, fj_vid v)
{
	LLVMValueRef n = c64(r, 1);
	for (int d = 0; d < r->body->values[v].type.rank; d++)
		n = d == 0 ? r->vdim[v][d] : imul(r, n, r->vdim[v][d]);
	return n;
}

/* ---- points ---- */

void fj_rg_point_idx(fj_rg_point *p, int rank, const LLVMValueRef *idx)
{
	memset(p, 0, sizeof *p);
	p->rank = rank;
	p->has_idx = true;
	for (int d = 0; d < rank; d++)
		p->idx[d] = idx[d];
}

void fj_rg_point_lin(fj_rg_point *p, int rank, LLVMValueRef lin)
{
	memset(p, 0, sizeof *p);
	p->rank = rank;
	p->has_idx = rank == 0;
	p->lin = lin;
}

void fj_rg_need_idx(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	if (p->has_idx)
		return;
	if (p->rank > 0)
		fj_cg_unravel(r->cg, p->lin, r->vdim[v], p->rank, p->idx);
	p->has_idx = true;
}

void fj_rg_need_lin(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	if (p->lin)
		return;
	if (p->rank == 0) {
		p->lin = c64(r, 0);
		return;
	}
	LLVMValueRef lin = p->idx[0];
	for (int d = 1; d < p->rank; d++)
		lin = iadd(r, imul(r, lin, r->vdim[v][d]), p->idx[d]);
	p->lin = lin;
}

/* ---- memo ---- */

static bool same_point(const fj_rg_point *a, const fj_rg_point *b)
{
	if (a->rank != b->rank)
		return false;
	if (a->rank == 0)
		return true;
	if (a->lin && a->lin == b->lin)
		return true;
	if (!a->has_idx || !b->has_idx)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->idx[d] != b->idx[d])
			return false;
	return true;
}

static LLVMValueRef memo_find(fj_rg *r, fj_vid v, const fj_rg_point *p)
{
	for (uint32_t i = r->nmemo; i-- > 0;)
		if (r->memo[i].v == v && same_point(&r->memo[i].p, p))
			return r->memo[i].val;
	return NULL;
}

static void memo_add(fj_rg *r, fj_vid v, const fj_rg_point *p, LLVMValueRef val)
{
	if (r->nmemo == r->cap_memo) {
		uint32_t ncap = r->cap_memo * 2;
		fj_rg_memo *nm = fj_realloc(r->cg->ctx, r->memo, r->cap_memo * sizeof *nm, ncap * sizeof *nm);
		if (!nm)
			return; /* no memo: correct, only bigger */
		r->memo = nm;
		r->cap_memo = ncap;
	}
	r->memo[r->nmemo++] = (fj_rg_memo){v, *p, val};
}

void fj_rg_scope_push(fj_rg *r)
{
	FJ_ASSERT(r->nscope < (int)FJ_ARRAY_LEN(r->scope));
	r->scope[r->nscope++] = r->nmemo;
}

void fj_rg_scope_pop(fj_rg *r)
{
	FJ_ASSERT(r->nscope > 0);
	r->nmemo = r->scope[--r->nscope];
}

void fj_rg_bind(fj_rg *r, fj_vid v, LLVMValueRef val) { r->bound[v] = val; }

void fj_rg_bind_at(fj_rg *r, fj_vid v, const fj_rg_point *p, LLVMValueRef val) { memo_add(r, v, p, val); }

void fj_rg_fail_if(fj_rg *r, LLVMValueRef cond, int code)
{
	if (!r->status)
		return;
	LLVMValueRef cur = fj_cg_get(r->cg, r->status, r->cg->t_i32);
	fj_cg_set(r->cg, r->status, sel(r, cond, fj_cg_i32(r->cg, code), cur));
}

/* ---- evaluation ---- */

static const fj_attr *nattr(fj_rg *r, const fj_node *n, const char *name)
{
	return fj_node_attr(r->cg->ctx, n, name);
}

static int64_t list_item(const fj_attr *a, uint32_t i, int64_t dflt)
{
	if (!a || a->kind != FJ_AK_LIST || i >= a->n)
		return dflt;
	return fj_attr_as_int(&a->u.items[i]);
}

static fj_dtype vdt(fj_rg *r, fj_vid v) { return r->body->values[v].type.dtype; }
static int vrank(fj_rg *r, fj_vid v) { return r->body->values[v].type.rank; }

/* The operand dtype the scalar lowering wants (emit_pointwise.c). */
static fj_dtype operand_dtype(const fj_node *n, uint32_t i, fj_dtype dt)
{
	if (i == 0 && (n->op == FJ_OP_ATEN_WHERE || n->op == FJ_OP_PRIMS_WHERE))
		return FJ_DT_BOOL;
	if (i == 1 && n->op == FJ_OP_ATEN_MASKED_FILL)
		return FJ_DT_BOOL;
	return dt;
}

LLVMValueRef fj_rg_eval_as(fj_rg *r, fj_vid v, fj_rg_point *p, fj_dtype to)
{
	const fj_value *val = &r->body->values[v];
	if (val->kind == FJ_VK_LITERAL)
		return fj_cg_literal(r->cg, &val->lit, to);
	return fj_cg_convert(r->cg, fj_rg_eval(r, v, p), val->type.dtype, to);
}

static LLVMValueRef eval_input(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	int i = r->a->vals[v].index;
	const fj_cg_operand *op = &r->in[i];
	if (op->literal)
		return fj_cg_literal(r->cg, &op->lit, vdt(r, v));
	if (op->none)
		return undef_of(r, v);
	fj_cg_tensor t = op->t;
	t.ptr = r->inptr[i];
	LLVMValueRef off;
	if (p->rank == 0)
		off = c64(r, 0);
	else if (p->has_idx)
		off = fj_cg_offset(r->cg, &t, p->idx);
	else
		off = p->lin;
	return fj_cg_load(r->cg, &t, off);
}

/* The value at a point of operand `a` whose index is idx (rank of a). */
static LLVMValueRef eval_at_idx(fj_rg *r, fj_vid a, const LLVMValueRef *idx)
{
	fj_rg_point q;
	fj_rg_point_idx(&q, vrank(r, a), idx);
	return fj_rg_eval(r, a, &q);
}

static LLVMValueRef eval_pointwise(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_cg_scalar_fn fn = fj_cg_scalar_lowering(n->op);
	fj_dtype dt = fj_cg_pointwise_dtype(r->body, n);
	LLVMValueRef args[FJ_MAX_SPEC + 4];
	if (n->nopnds > FJ_ARRAY_LEN(args)) {
		rg_error(r, n, "%s: too many operands", fj_op_name(n->op));
		return undef_of(r, v);
	}
	for (uint32_t i = 0; i < n->nopnds; i++) {
		fj_vid o = n->opnds[i];
		fj_dtype want = operand_dtype(n, i, dt);
		if (o == FJ_NOVAL) {
			args[i] = NULL;
			continue;
		}
		if (r->body->values[o].kind == FJ_VK_LITERAL) {
			args[i] = fj_cg_literal(r->cg, &r->body->values[o].lit, want);
			continue;
		}
		if (vrank(r, o) == 0 && p->rank != 0) {
			fj_rg_point q;
			fj_rg_point_lin(&q, 0, NULL);
			args[i] = fj_rg_eval_as(r, o, &q, want);
		} else {
			args[i] = fj_rg_eval_as(r, o, p, want);
		}
	}
	LLVMValueRef x = fn(r->cg, r->body, n, args, dt);
	/* a division by a per-row value: allow its reciprocal to be hoisted */
	if ((n->op == FJ_OP_PRIMS_DIV || n->op == FJ_OP_ATEN_DIV) && fj_dtype_is_float(dt) && n->nopnds == 2 &&
	    LLVMIsAInstruction(x) && LLVMGetInstructionOpcode(x) == LLVMFDiv && n->opnds[1] != FJ_NOVAL) {
		uint8_t c = r->a->vals[n->opnds[1]].cls;
		if (c == FJ_RG_ROW || c == FJ_RG_REDUCTION)
			LLVMSetFastMathFlags(x, LLVMFastMathAllowReciprocal);
	}
	return x;
}

static LLVMValueRef eval_broadcast(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_type *at = &r->body->values[a].type, *vt = &r->body->values[v].type;
	if (same_dims(at, vt))
		return fj_rg_eval(r, a, p);
	if (at->rank == 0) {
		fj_rg_point q;
		fj_rg_point_lin(&q, 0, NULL);
		return fj_rg_eval(r, a, &q);
	}
	fj_rg_need_idx(r, v, p);
	const fj_attr *bd = nattr(r, n, "broadcast_dims");
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int i = 0; i < at->rank; i++) {
		int od = (int)list_item(bd, (uint32_t)i, i);
		if (od < 0 || od >= vt->rank) {
			rg_error(r, n, "%s: bad broadcast_dims", fj_op_name(n->op));
			return undef_of(r, v);
		}
		fj_dim din = at->dims[i], dout = vt->dims[od];
		if (din == dout)
			idx[i] = p->idx[od];
		else if (din == 1)
			idx[i] = c64(r, 0);
		else
			idx[i] = sel(r, icmp(r, LLVMIntEQ, r->vdim[a][i], c64(r, 1)), c64(r, 0), p->idx[od]);
	}
	return eval_at_idx(r, a, idx);
}

static LLVMValueRef eval_reshape(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_type *at = &r->body->values[a].type, *vt = &r->body->values[v].type;
	if (same_dims(at, vt))
		return fj_rg_eval(r, a, p);
	fj_rg_point q;
	memset(&q, 0, sizeof q);
	q.rank = at->rank;
	q.lin = p->lin; /* a reshape keeps the linear index */
	if (p->has_idx && at->rank > 0 && vt->rank > 0) {
		/* common leading and trailing dims pass through; the middle part is
		 * linearised and split again */
		int pre = 0;
		while (pre < at->rank && pre < vt->rank && at->dims[pre] == vt->dims[pre])
			pre++;
		int suf = 0;
		while (suf < at->rank - pre && suf < vt->rank - pre &&
		       at->dims[at->rank - 1 - suf] == vt->dims[vt->rank - 1 - suf])
			suf++;
		for (int d = 0; d < pre; d++)
			q.idx[d] = p->idx[d];
		for (int d = 0; d < suf; d++)
			q.idx[at->rank - 1 - d] = p->idx[vt->rank - 1 - d];
		int om = vt->rank - pre - suf, im = at->rank - pre - suf;
		if (im > 0) {
			LLVMValueRef lin = om > 0 ? p->idx[pre] : c64(r, 0);
			for (int d = pre + 1; d < pre + om; d++)
				lin = iadd(r, imul(r, lin, r->vdim[v][d]), p->idx[d]);
			fj_cg_unravel(r->cg, lin, &r->vdim[a][pre], im, &q.idx[pre]);
		}
		q.has_idx = true;
	} else if (at->rank == 0) {
		q.has_idx = true;
	} else {
		fj_rg_need_lin(r, v, p);
		q.lin = p->lin;
	}
	return fj_rg_eval(r, a, &q);
}

static LLVMValueRef eval_squeeze(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_type *at = &r->body->values[a].type;
	const fj_attr *dl = nattr(r, n, "dims");
	uint32_t mask = 0;
	for (uint32_t i = 0; dl && dl->kind == FJ_AK_LIST && i < dl->n; i++)
		mask |= 1u << norm_dim(fj_attr_as_int(&dl->u.items[i]), at->rank);
	fj_rg_point q;
	memset(&q, 0, sizeof q);
	q.rank = at->rank;
	q.lin = p->lin;
	if (p->has_idx || !p->lin) {
		fj_rg_need_idx(r, v, p);
		int j = 0;
		for (int d = 0; d < at->rank; d++)
			q.idx[d] = (mask & (1u << d)) ? c64(r, 0) : p->idx[j++];
		q.has_idx = true;
	}
	return fj_rg_eval(r, a, &q);
}

static LLVMValueRef eval_transpose(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_attr *perm = nattr(r, n, "perm");
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK];
	int rank = vrank(r, a);
	for (int i = 0; i < rank; i++)
		idx[norm_dim(list_item(perm, (uint32_t)i, i), rank)] = p->idx[i];
	return eval_at_idx(r, a, idx);
}

static LLVMValueRef eval_slice(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_attr *start = nattr(r, n, "start"), *strides = nattr(r, n, "strides");
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int d = 0; d < vrank(r, a); d++) {
		LLVMValueRef s = start && start->kind == FJ_AK_LIST && (uint32_t)d < start->n ? attr_dim(r, &start->u.items[d])
		                                                                             : c64(r, 0);
		int64_t st = list_item(strides, (uint32_t)d, 1);
		LLVMValueRef i = st == 1 ? p->idx[d] : imul(r, p->idx[d], c64(r, st));
		idx[d] = iadd(r, s, i);
	}
	return eval_at_idx(r, a, idx);
}

static LLVMValueRef eval_rev(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	int rank = vrank(r, a);
	const fj_attr *dl = nattr(r, n, "dims");
	uint32_t mask = 0;
	for (uint32_t i = 0; dl && dl->kind == FJ_AK_LIST && i < dl->n; i++)
		mask |= 1u << norm_dim(fj_attr_as_int(&dl->u.items[i]), rank);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int d = 0; d < rank; d++)
		idx[d] = (mask & (1u << d)) ? isub(r, isub(r, r->vdim[a][d], c64(r, 1)), p->idx[d]) : p->idx[d];
	return eval_at_idx(r, a, idx);
}

/* clamp(i, 0, max(n - 1, 0)) */
static LLVMValueRef clamp_index(fj_rg *r, LLVMValueRef i, LLVMValueRef n)
{
	return smax(r, smin(r, i, isub(r, n, c64(r, 1))), c64(r, 0));
}

static LLVMValueRef eval_pad(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	int rank = vrank(r, a);
	const fj_attr *low = nattr(r, n, "low");
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK], ok = LLVMConstInt(r->cg->t_i1, 1, 0);
	for (int d = 0; d < rank; d++) {
		LLVMValueRef i = isub(r, p->idx[d], c64(r, list_item(low, (uint32_t)d, 0)));
		LLVMValueRef in = LLVMBuildAnd(B, icmp(r, LLVMIntSGE, i, c64(r, 0)), icmp(r, LLVMIntSLT, i, r->vdim[a][d]), "");
		ok = LLVMBuildAnd(B, ok, in, "");
		idx[d] = clamp_index(r, i, r->vdim[a][d]);
	}
	LLVMValueRef x = eval_at_idx(r, a, idx);
	const fj_attr *va = nattr(r, n, "value");
	fj_literal lit = {0};
	if (va->kind == FJ_AK_INT) {
		lit.kind = FJ_LIT_INT;
		lit.i = va->u.i;
	} else if (va->kind == FJ_AK_BOOL) {
		lit.kind = FJ_LIT_BOOL;
		lit.b = va->u.b;
	} else {
		lit.kind = FJ_LIT_FLOAT;
		lit.f = fj_attr_as_float(va);
	}
	return sel(r, ok, x, fj_cg_literal(r->cg, &lit, vdt(r, v)));
}

static LLVMValueRef eval_cat(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	int rank = vrank(r, v);
	int dim = norm_dim(fj_attr_as_int(nattr(r, n, "dim")), rank);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef off = c64(r, 0), result = NULL;
	LLVMValueRef starts[n->nopnds ? n->nopnds : 1];
	for (uint32_t k = 0; k < n->nopnds; k++) {
		starts[k] = off;
		off = iadd(r, off, r->vdim[n->opnds[k]][dim]);
	}
	for (uint32_t k = n->nopnds; k-- > 0;) {
		fj_vid a = n->opnds[k];
		if (r->body->values[a].type.dims[dim] == 0)
			continue; /* statically empty: never selected */
		LLVMValueRef idx[FJ_MAX_RANK];
		for (int d = 0; d < rank; d++)
			idx[d] = p->idx[d];
		idx[dim] = clamp_index(r, isub(r, p->idx[dim], starts[k]), r->vdim[a][dim]);
		LLVMValueRef x = fj_cg_convert(r->cg, eval_at_idx(r, a, idx), vdt(r, a), vdt(r, v));
		LLVMValueRef end = iadd(r, starts[k], r->vdim[a][dim]);
		result = result ? sel(r, icmp(r, LLVMIntSLT, p->idx[dim], end), x, result) : x;
	}
	return result ? result : fj_cg_const(r->cg, vdt(r, v), 0, 0);
}

static LLVMValueRef eval_full(fj_rg *r, const fj_node *n, fj_vid v)
{
	const fj_attr *va = nattr(r, n, "value");
	fj_literal lit = {0};
	if (va->kind == FJ_AK_INT) {
		lit.kind = FJ_LIT_INT;
		lit.i = va->u.i;
	} else if (va->kind == FJ_AK_BOOL) {
		lit.kind = FJ_LIT_BOOL;
		lit.b = va->u.b;
	} else {
		lit.kind = FJ_LIT_FLOAT;
		lit.f = fj_attr_as_float(va);
	}
	return fj_cg_literal(r->cg, &lit, vdt(r, v));
}

/* ---- Philox-4x32-10, exactly as codegen/emit_random.c (THE STREAM) ---- */

static LLVMValueRef c32(fj_rg *r, uint32_t v) { return LLVMConstInt(r->cg->t_i32, v, 0); }

static void mulhilo(fj_rg *r, uint32_t a, LLVMValueRef b, LLVMValueRef *hi, LLVMValueRef *lo)
{
	fj_cg *cg = r->cg;
	LLVMValueRef p = LLVMBuildMul(B, LLVMConstInt(cg->t_i64, a, 0), LLVMBuildZExt(B, b, cg->t_i64, ""), "");
	*lo = LLVMBuildTrunc(B, p, cg->t_i32, "");
	*hi = LLVMBuildTrunc(B, LLVMBuildLShr(B, p, LLVMConstInt(cg->t_i64, 32, 0), ""), cg->t_i32, "");
}

static void philox(fj_rg *r, LLVMValueRef c[4], LLVMValueRef k0, LLVMValueRef k1)
{
	for (int round = 0; round < 10; round++) {
		if (round) {
			k0 = LLVMBuildAdd(B, k0, c32(r, 0x9E3779B9u), "");
			k1 = LLVMBuildAdd(B, k1, c32(r, 0xBB67AE85u), "");
		}
		LLVMValueRef hi0, lo0, hi1, lo1;
		mulhilo(r, 0xD2511F53u, c[0], &hi0, &lo0);
		mulhilo(r, 0xCD9E8D57u, c[2], &hi1, &lo1);
		LLVMValueRef n0 = LLVMBuildXor(B, LLVMBuildXor(B, hi1, c[1], ""), k0, "");
		LLVMValueRef n2 = LLVMBuildXor(B, LLVMBuildXor(B, hi0, c[3], ""), k1, "");
		c[0] = n0;
		c[1] = lo1;
		c[2] = n2;
		c[3] = lo0;
	}
}

static LLVMValueRef lo32(fj_rg *r, LLVMValueRef v) { return LLVMBuildTrunc(B, v, r->cg->t_i32, ""); }
static LLVMValueRef hi32(fj_rg *r, LLVMValueRef v)
{
	return LLVMBuildTrunc(B, LLVMBuildLShr(B, v, c64(r, 32), ""), r->cg->t_i32, "");
}

static LLVMValueRef eval_rand(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_rg_point z;
	fj_rg_point_lin(&z, 0, NULL);
	LLVMValueRef seed = n->opnds[0] == FJ_NOVAL ? c64(r, 0) : fj_rg_eval_as(r, n->opnds[0], &z, FJ_DT_I64);
	LLVMValueRef offset = n->opnds[1] == FJ_NOVAL ? c64(r, 0) : fj_rg_eval_as(r, n->opnds[1], &z, FJ_DT_I64);
	fj_rg_need_lin(r, v, p);
	LLVMValueRef i = p->lin;
	LLVMValueRef blk = LLVMBuildLShr(B, i, c64(r, 2), "");
	LLVMValueRef c[4] = {lo32(r, offset), hi32(r, offset), lo32(r, blk), hi32(r, blk)};
	philox(r, c, lo32(r, seed), hi32(r, seed));
	LLVMValueRef lane = LLVMBuildTrunc(B, LLVMBuildAnd(B, i, c64(r, 3), ""), r->cg->t_i32, "");
	LLVMValueRef w = c[3];
	for (int q = 2; q >= 0; q--)
		w = sel(r, LLVMBuildICmp(B, LLVMIntEQ, lane, c32(r, (uint32_t)q), ""), c[q], w);
	fj_dtype dt = vdt(r, v);
	int bits = dt == FJ_DT_F16 ? 11 : dt == FJ_DT_BF16 ? 8 : 24;
	LLVMValueRef m = LLVMBuildLShr(B, w, c32(r, (uint32_t)(32 - bits)), "");
	LLVMValueRef f = LLVMBuildUIToFP(B, m, r->cg->t_f64, "");
	f = LLVMBuildFMul(B, f, LLVMConstReal(r->cg->t_f64, 1.0 / (double)(1u << bits)), "");
	return fj_cg_convert(r->cg, f, FJ_DT_F64, dt);
}

/* take(a, index){dim}: out = a[:dim] + index.shape + a[dim+1:] */
static LLVMValueRef eval_take(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0], ix = n->opnds[1];
	int ra = vrank(r, a), ri = vrank(r, ix);
	int dim = norm_dim(fj_attr_as_int(nattr(r, n, "dim")), ra);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef iidx[FJ_MAX_RANK], aidx[FJ_MAX_RANK];
	for (int d = 0; d < ri; d++)
		iidx[d] = p->idx[dim + d];
	fj_rg_point q;
	fj_rg_point_idx(&q, ri, iidx);
	LLVMValueRef i = fj_rg_eval_as(r, ix, &q, FJ_DT_I64);
	LLVMValueRef size = ra ? r->vdim[a][dim] : c64(r, 1);
	LLVMValueRef ok = LLVMBuildAnd(B, icmp(r, LLVMIntSGE, i, c64(r, 0)), icmp(r, LLVMIntSLT, i, size), "");
	fj_rg_fail_if(r, LLVMBuildNot(B, ok, ""), FJ_KERR_INDEX);
	i = sel(r, ok, i, c64(r, 0));
	for (int d = 0; d < dim; d++)
		aidx[d] = p->idx[d];
	if (ra)
		aidx[dim] = i;
	for (int d = dim + 1; d < ra; d++)
		aidx[d] = p->idx[d - 1 + ri];
	return eval_at_idx(r, a, aidx);
}

/* gather(a, index){dim}: out[p] = a[p with p[dim] = index[p]] */
static LLVMValueRef eval_gather(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0], ix = n->opnds[1];
	int ra = vrank(r, a);
	int dim = norm_dim(fj_attr_as_int(nattr(r, n, "dim")), ra);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef i = fj_rg_eval_as(r, ix, p, FJ_DT_I64);
	LLVMValueRef size = ra ? r->vdim[a][dim] : c64(r, 1);
	LLVMValueRef ok = LLVMBuildAnd(B, icmp(r, LLVMIntSGE, i, c64(r, 0)), icmp(r, LLVMIntSLT, i, size), "");
	fj_rg_fail_if(r, LLVMBuildNot(B, ok, ""), FJ_KERR_INDEX);
	LLVMValueRef aidx[FJ_MAX_RANK];
	for (int d = 0; d < ra; d++)
		aidx[d] = p->idx[d];
	if (ra)
		aidx[dim] = sel(r, ok, i, c64(r, 0));
	return eval_at_idx(r, a, aidx);
}

static LLVMValueRef eval_node(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	const fj_node *n = &r->body->nodes[r->a->vals[v].node];
	switch (n->op) {
	case FJ_OP_PRIMS_BROADCAST_IN_DIM: return eval_broadcast(r, n, v, p);
	case FJ_OP_PRIMS_RESHAPE: return eval_reshape(r, n, v, p);
	case FJ_OP_PRIMS_SQUEEZE: return eval_squeeze(r, n, v, p);
	case FJ_OP_PRIMS_TRANSPOSE: return eval_transpose(r, n, v, p);
	case FJ_OP_PRIMS_SLICE: return eval_slice(r, n, v, p);
	case FJ_OP_PRIMS_REV: return eval_rev(r, n, v, p);
	case FJ_OP_PRIMS_PAD: return eval_pad(r, n, v, p);
	case FJ_OP_PRIMS_CAT: return eval_cat(r, n, v, p);
	case FJ_OP_PRIMS_FULL: return eval_full(r, n, v);
	case FJ_OP_PRIMS_IOTA: {
		fj_rg_need_lin(r, v, p);
		return fj_cg_convert(r->cg, p->lin, FJ_DT_I64, vdt(r, v));
	}
	case FJ_OP_PRIMS_RAND: return eval_rand(r, n, v, p);
	case FJ_OP_PRIMS_TAKE: return eval_take(r, n, v, p);
	case FJ_OP_PRIMS_GATHER: return eval_gather(r, n, v, p);
	default: break;
	}
	if (fj_cg_scalar_lowering(n->op))
		return eval_pointwise(r, n, v, p);
	rg_error(r, n, "%s: not computed by this kernel's template", fj_op_name(n->op));
	return undef_of(r, v);
}

LLVMValueRef fj_rg_eval(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	const fj_value *val = &r->body->values[v];
	if (val->kind == FJ_VK_LITERAL)
		return fj_cg_literal(r->cg, &val->lit, val->type.dtype);
	if (r->bound[v])
		return r->bound[v];
	if (r->st != FJ_OK || r->cg->st != FJ_OK)
		return undef_of(r, v);
	LLVMValueRef x = memo_find(r, v, p);
	if (x)
		return x;
	const fj_rg_value *info = &r->a->vals[v];
	if (info->cls == FJ_RG_INPUT) {
		x = eval_input(r, v, p);
	} else {
		x = eval_node(r, v, p);
		fj_dtype dt = val->type.dtype;
		if ((dt == FJ_DT_F16 || dt == FJ_DT_BF16) && x && !LLVMIsUndef(x))
			x = fj_cg_convert(r->cg, x, FJ_DT_F32, dt); /* rounded as if stored */
	}
	memo_add(r, v, p, x);
	return x;
}

void fj_rg_store(fj_rg *r, const fj_cg_tensor *t, LLVMValueRef offset, fj_vid v, fj_rg_point *p)
{
	LLVMValueRef x = fj_rg_eval_as(r, v, p, t->dtype);
	fj_cg_store(r->cg, t, offset, x);
}

/* ---- accumulators ---- */

static LLVMValueRef fadd_reassoc(fj_rg *r, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef s = LLVMBuildFAdd(B, x, y, "");
	if (LLVMIsAInstruction(s))
		LLVMSetFastMathFlags(s, LLVMFastMathAllowReassoc);
	return s;
}

static LLVMValueRef fmul_reassoc(fj_rg *r, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef s = LLVMBuildFMul(B, x, y, "");
	if (LLVMIsAInstruction(s))
		LLVMSetFastMathFlags(s, LLVMFastMathAllowReassoc);
	return s;
}

static LLVMValueRef intrinsic2(fj_rg *r, const char *name, LLVMValueRef x, LLVMValueRef y)
{
	unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
	LLVMTypeRef ty = LLVMTypeOf(x);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(r->cg->mod, id, &ty, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(r->cg->llctx, id, &ty, 1);
	LLVMValueRef args[2] = {x, y};
	return LLVMBuildCall2(B, fty, f, args, 2, "");
}

static bool is_unsigned_dt(fj_dtype dt) { return dt == FJ_DT_U8 || dt == FJ_DT_BOOL; }

static void acc_identity(fj_rg *r, fj_rg_acc *acc, LLVMValueRef out[3])
{
	fj_cg *cg = r->cg;
	bool fl = fj_dtype_is_float(acc->acc_dt);
	switch (acc->kind) {
	case FJ_RG_RED_SUM: out[0] = fj_cg_const(cg, acc->acc_dt, 0, 0); break;
	case FJ_RG_RED_PROD: out[0] = fj_cg_const(cg, acc->acc_dt, 1, 1); break;
	case FJ_RG_RED_MAX:
	case FJ_RG_RED_ARGMAX:
		if (fl)
			out[0] = LLVMConstReal(acc->ty[0], -__builtin_inf());
		else if (acc->acc_dt == FJ_DT_BOOL || acc->acc_dt == FJ_DT_U8)
			out[0] = LLVMConstInt(acc->ty[0], 0, 0);
		else
			out[0] = LLVMConstInt(acc->ty[0], 1ull << (LLVMGetIntTypeWidth(acc->ty[0]) - 1), 0);
		break;
	case FJ_RG_RED_MIN:
	case FJ_RG_RED_ARGMIN:
		if (fl)
			out[0] = LLVMConstReal(acc->ty[0], __builtin_inf());
		else if (acc->acc_dt == FJ_DT_BOOL || acc->acc_dt == FJ_DT_U8)
			out[0] = LLVMConstAllOnes(acc->ty[0]);
		else
			out[0] = LLVMConstInt(acc->ty[0], (1ull << (LLVMGetIntTypeWidth(acc->ty[0]) - 1)) - 1, 0);
		break;
	case FJ_RG_RED_VAR_MEAN:
		out[0] = LLVMConstReal(acc->ty[0], 0);
		out[1] = LLVMConstReal(acc->ty[1], 0);
		break;
	}
	if (acc->kind == FJ_RG_RED_ARGMAX || acc->kind == FJ_RG_RED_ARGMIN)
		out[1] = c64(r, -1);
}

void fj_rg_acc_init(fj_rg *r, uint32_t node, fj_rg_acc *acc)
{
	fj_cg *cg = r->cg;
	const fj_node *n = &r->body->nodes[node];
	memset(acc, 0, sizeof *acc);
	acc->node = node;
	acc->in_dt = vdt(r, n->opnds[0]);
	fj_dtype cdt = fj_cg_compute_dtype(acc->in_dt);
	acc->n = 1;
	switch (n->op) {
	case FJ_OP_PRIMS_SUM: acc->kind = FJ_RG_RED_SUM; break;
	case FJ_OP_PRIMS_PROD: acc->kind = FJ_RG_RED_PROD; break;
	case FJ_OP_PRIMS_AMAX: acc->kind = FJ_RG_RED_MAX; break;
	case FJ_OP_PRIMS_AMIN: acc->kind = FJ_RG_RED_MIN; break;
	case FJ_OP_PRIMS_VAR_MEAN: acc->kind = FJ_RG_RED_VAR_MEAN; acc->n = 2; break;
	case FJ_OP_PRIMS_ARGMAX: acc->kind = FJ_RG_RED_ARGMAX; acc->n = 2; break;
	default: acc->kind = FJ_RG_RED_ARGMIN; acc->n = 2; break;
	}
	switch (acc->kind) {
	case FJ_RG_RED_SUM:
	case FJ_RG_RED_PROD: acc->acc_dt = fj_dtype_is_float(cdt) ? FJ_DT_F64 : FJ_DT_I64; break;
	case FJ_RG_RED_VAR_MEAN: acc->acc_dt = FJ_DT_F64; break;
	default: acc->acc_dt = cdt; break;
	}
	acc->ty[0] = fj_cg_compute_type(cg, acc->acc_dt);
	if (acc->kind == FJ_RG_RED_VAR_MEAN)
		acc->ty[1] = cg->t_f64;
	if (acc->kind == FJ_RG_RED_ARGMAX || acc->kind == FJ_RG_RED_ARGMIN)
		acc->ty[1] = cg->t_i64;
	if (acc->acc_dt == FJ_DT_BOOL && (acc->kind == FJ_RG_RED_MAX || acc->kind == FJ_RG_RED_MIN ||
	                                  acc->kind == FJ_RG_RED_ARGMAX || acc->kind == FJ_RG_RED_ARGMIN)) {
		acc->acc_dt = FJ_DT_U8; /* compare bools as 0/1 */
		acc->ty[0] = cg->t_i8;
	}
	LLVMValueRef id[3];
	acc_identity(r, acc, id);
	for (int i = 0; i < acc->n; i++)
		acc->var[i] = fj_cg_var(cg, acc->ty[i], id[i], "acc");
}

void fj_rg_acc_reset(fj_rg *r, fj_rg_acc *acc)
{
	LLVMValueRef id[3];
	acc_identity(r, acc, id);
	for (int i = 0; i < acc->n; i++)
		fj_cg_set(r->cg, acc->var[i], id[i]);
	acc->shift = NULL;
}

void fj_rg_acc_set_shift(fj_rg *r, fj_rg_acc *acc, LLVMValueRef x)
{
	if (acc->kind == FJ_RG_RED_VAR_MEAN)
		acc->shift = fj_cg_convert(r->cg, x, fj_cg_compute_dtype(acc->in_dt), acc->acc_dt);
}

void fj_rg_acc_load(fj_rg *r, const fj_rg_acc *acc, LLVMValueRef vals[3])
{
	for (int i = 0; i < acc->n; i++)
		vals[i] = fj_cg_get(r->cg, acc->var[i], acc->ty[i]);
}

/* Is x better than best (argmax/argmin: strictly, a NaN beats all but a NaN)? */
static LLVMValueRef better(fj_rg *r, const fj_rg_acc *acc, LLVMValueRef x, LLVMValueRef best)
{
	bool max = acc->kind == FJ_RG_RED_ARGMAX;
	if (!fj_dtype_is_float(acc->acc_dt)) {
		bool u = is_unsigned_dt(acc->acc_dt);
		return icmp(r, max ? (u ? LLVMIntUGT : LLVMIntSGT) : (u ? LLVMIntULT : LLVMIntSLT), x, best);
	}
	LLVMValueRef c = LLVMBuildFCmp(B, max ? LLVMRealOGT : LLVMRealOLT, x, best, "");
	LLVMValueRef xn = LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), bn = LLVMBuildFCmp(B, LLVMRealUNO, best, best, "");
	return LLVMBuildOr(B, c, LLVMBuildAnd(B, xn, LLVMBuildNot(B, bn, ""), ""), "");
}

/* Combines state a with values b (b from later positions). */
static void combine(fj_rg *r, fj_rg_acc *acc, LLVMValueRef a[3], LLVMValueRef b[3], LLVMValueRef out[3])
{
	bool fl = fj_dtype_is_float(acc->acc_dt);
	switch (acc->kind) {
	case FJ_RG_RED_SUM:
		out[0] = fl ? fadd_reassoc(r, a[0], b[0]) : LLVMBuildAdd(B, a[0], b[0], "");
		break;
	case FJ_RG_RED_PROD:
		out[0] = fl ? fmul_reassoc(r, a[0], b[0]) : LLVMBuildMul(B, a[0], b[0], "");
		break;
	case FJ_RG_RED_MAX:
		if (fl)
			out[0] = intrinsic2(r, "llvm.maximum", a[0], b[0]);
		else
			out[0] = intrinsic2(r, is_unsigned_dt(acc->acc_dt) ? "llvm.umax" : "llvm.smax", a[0], b[0]);
		break;
	case FJ_RG_RED_MIN:
		if (fl)
			out[0] = intrinsic2(r, "llvm.minimum", a[0], b[0]);
		else
			out[0] = intrinsic2(r, is_unsigned_dt(acc->acc_dt) ? "llvm.umin" : "llvm.smin", a[0], b[0]);
		break;
	case FJ_RG_RED_VAR_MEAN:
		out[0] = fadd_reassoc(r, a[0], b[0]);
		out[1] = fadd_reassoc(r, a[1], b[1]);
		break;
	case FJ_RG_RED_ARGMAX:
	case FJ_RG_RED_ARGMIN: {
		/* b wins when better, or when a is empty (index -1) and b is not */
		LLVMValueRef aempty = icmp(r, LLVMIntSLT, a[1], c64(r, 0));
		LLVMValueRef bvalid = icmp(r, LLVMIntSGE, b[1], c64(r, 0));
		LLVMValueRef take = LLVMBuildAnd(B, bvalid, LLVMBuildOr(B, aempty, better(r, acc, b[0], a[0]), ""), "");
		out[0] = sel(r, take, b[0], a[0]);
		out[1] = sel(r, take, b[1], a[1]);
		break;
	}
	}
}

void fj_rg_acc_step(fj_rg *r, fj_rg_acc *acc, LLVMValueRef x, LLVMValueRef pos)
{
	LLVMValueRef a[3], b[3], out[3];
	fj_rg_acc_load(r, acc, a);
	fj_dtype cdt = fj_cg_compute_dtype(acc->in_dt);
	switch (acc->kind) {
	case FJ_RG_RED_VAR_MEAN: {
		LLVMValueRef xf = fj_cg_convert(r->cg, x, cdt, acc->acc_dt);
		if (acc->shift)
			xf = LLVMBuildFSub(B, xf, acc->shift, "");
		b[0] = xf;
		b[1] = LLVMBuildFMul(B, xf, xf, "");
		break;
	}
	case FJ_RG_RED_ARGMAX:
	case FJ_RG_RED_ARGMIN:
		b[0] = fj_cg_convert(r->cg, x, cdt, acc->acc_dt);
		b[1] = pos ? pos : c64(r, 0);
		break;
	default:
		b[0] = fj_cg_convert(r->cg, x, cdt, acc->acc_dt);
		break;
	}
	combine(r, acc, a, b, out);
	for (int i = 0; i < acc->n; i++)
		fj_cg_set(r->cg, acc->var[i], out[i]);
}

void fj_rg_acc_merge(fj_rg *r, fj_rg_acc *acc, LLVMValueRef other[3])
{
	LLVMValueRef a[3], out[3];
	fj_rg_acc_load(r, acc, a);
	combine(r, acc, a, other, out);
	for (int i = 0; i < acc->n; i++)
		fj_cg_set(r->cg, acc->var[i], out[i]);
}

void fj_rg_acc_finish(fj_rg *r, fj_rg_acc *acc, LLVMValueRef count)
{
	fj_cg *cg = r->cg;
	const fj_node *n = &r->body->nodes[acc->node];
	LLVMValueRef s[3];
	fj_rg_acc_load(r, acc, s);
	fj_dtype rdt = vdt(r, n->res[0]);
	LLVMValueRef empty = icmp(r, LLVMIntEQ, count, c64(r, 0));
	switch (acc->kind) {
	case FJ_RG_RED_SUM:
	case FJ_RG_RED_PROD:
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, s[0], acc->acc_dt, rdt));
		break;
	case FJ_RG_RED_MAX:
	case FJ_RG_RED_MIN: {
		fj_rg_fail_if(r, empty, FJ_KERR_VALUE);
		fj_dtype from = acc->acc_dt == FJ_DT_U8 && acc->in_dt == FJ_DT_BOOL ? FJ_DT_U8 : acc->acc_dt;
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, s[0], from, rdt));
		break;
	}
	case FJ_RG_RED_ARGMAX:
	case FJ_RG_RED_ARGMIN:
		fj_rg_fail_if(r, empty, FJ_KERR_VALUE);
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, smax(r, s[1], c64(r, 0)), FJ_DT_I64, rdt));
		break;
	case FJ_RG_RED_VAR_MEAN: {
		const fj_attr *ca = fj_node_attr(cg->ctx, n, "correction");
		double corr = ca && !fj_attr_is_none(ca) ? fj_attr_as_float(ca) : 1.0;
		LLVMValueRef nf = LLVMBuildSIToFP(B, count, cg->t_f64, "");
		LLVMValueRef zero = LLVMConstReal(cg->t_f64, 0);
		LLVMValueRef d1 = LLVMBuildFDiv(B, s[0], nf, ""); /* mean - K */
		LLVMValueRef mean = acc->shift ? LLVMBuildFAdd(B, acc->shift, d1, "") : d1;
		LLVMValueRef m2 = LLVMBuildFSub(B, s[1], LLVMBuildFMul(B, s[0], d1, ""), "");
		m2 = sel(r, LLVMBuildFCmp(B, LLVMRealOLT, m2, zero, ""), zero, m2);
		LLVMValueRef div = LLVMBuildFSub(B, nf, LLVMConstReal(cg->t_f64, corr), "");
		div = sel(r, LLVMBuildFCmp(B, LLVMRealOLT, div, zero, ""), zero, div);
		LLVMValueRef var = LLVMBuildFDiv(B, m2, div, "");
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, var, FJ_DT_F64, rdt));
		if (n->nres > 1)
			fj_rg_bind(r, n->res[1], fj_cg_convert(cg, mean, FJ_DT_F64, vdt(r, n->res[1])));
		break;
	}
	}
}
