/* region.c -- the shared region code generator (region.h): analysis of a
 * fusion.kernel body (this file), the scalar evaluator of body values at a
 * point (region_eval.c), and the reduction accumulators (region_acc.c).
 * Target-independent; the loop nests that call them are the targets'
 * templates (codegen/region_host*.c for the host, backend_nvptx/region_gpu*.c).
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

#include "codegen/region_internal.h"

static const char *const sched_names[FJ_RG_SCHED_COUNT] = {
	[FJ_RG_POINTWISE] = "pointwise", [FJ_RG_REDUCTION_INNER] = "reduction_inner",
	[FJ_RG_REDUCTION_OUTER] = "reduction_outer", [FJ_RG_PERSISTENT_INNER] = "persistent_inner",
	[FJ_RG_PERSISTENT_OUTER] = "persistent_outer", [FJ_RG_TRANSPOSE] = "transpose",
	[FJ_RG_SCAN] = "scan", [FJ_RG_MATMUL] = "matmul", [FJ_RG_TAKE] = "take",
	[FJ_RG_GATHER] = "gather", [FJ_RG_SCATTER] = "scatter",
	[FJ_RG_PERSISTENT_INNER_OUTER] = "persistent_inner_outer", [FJ_RG_ATTENTION] = "attention",
	[FJ_RG_ATTENTION_BW] = "attention_bw",
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

uint32_t fj_rg_red_mask(const fj_context *ctx, const fj_node *n, int rank)
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

/* The region plan (fj_rg_analysis.inner, ordered): inner or outer as the
 * `schedule` pass named it (the innermost non-unit dim of D reduced or
 * not), the one decision every target follows. */
static void plan_region(fj_rg_analysis *a)
{
	fj_rg_schedule s = a->sched;
	a->inner = s == FJ_RG_REDUCTION_INNER || s == FJ_RG_PERSISTENT_INNER || s == FJ_RG_PERSISTENT_INNER_OUTER ||
	           (a->nreds && a->rrank == 0);
	if (a->nreds && s != FJ_RG_REDUCTION_OUTER && s != FJ_RG_PERSISTENT_OUTER && !a->inner) {
		/* reductions under a schedule that names no side (a hand-written
		 * one): the pass's rule, the innermost non-unit dim of D reduced */
		int d = a->dom->rank - 1;
		while (d >= 0 && a->dom->dims[d] == 1)
			d--;
		a->inner = d < 0 || (a->kmask & (1u << d));
	}
	a->ordered = false;
	for (int i = 0; i < a->nreds; i++) {
		fj_op op = a->body->nodes[a->reds[i]].op;
		a->ordered |= op == FJ_OP_PRIMS_ARGMAX || op == FJ_OP_PRIMS_ARGMIN;
	}
}

/* attention: the pattern of ir/attention.c; D is its second matmul's
 * result O, R its rows (D without the last dim): results of O's element
 * count are stored at D, those of R's (a logsumexp) at R. No reduction is
 * listed (the template runs the softmax itself). attention_bw: the pattern
 * of fj_attn_bw_match; D is G0's result, no reduction, and every result is
 * at D (the template stores each at its own G's points). Values keep the
 * classes the caller gave them (inputs, literals, FULL); the matmuls'
 * results are OPAQUE, the reductions' REDUCTION. */
static fj_status analyze_attention(fj_rg_analysis *a)
{
	const fj_graph *b = a->body;
	uint8_t *scratch = fj_alloc(a->ctx, b->nnodes ? b->nnodes : 1);
	if (!scratch)
		return FJ_ERR_NOMEM;
	bool bw = a->sched == FJ_RG_ATTENTION_BW;
	fj_attn at;
	fj_attn_bw ab;
	uint32_t found = FJ_NONODE;
	for (uint32_t i = 0; i < b->nnodes && found == FJ_NONODE; i++)
		if (bw ? fj_attn_bw_match(b, i, NULL, scratch, &ab) : fj_attn_match(b, i, NULL, scratch, &at))
			found = i;
	fj_free(a->ctx, scratch, b->nnodes ? b->nnodes : 1);
	if (found == FJ_NONODE)
		return fj_error_status(a->ctx, FJ_ERR_UNSUPPORTED, a->node->loc,
		                       bw ? "fusion.kernel: schedule attention_bw needs second-stage matmuls of weights "
		                            "computed pointwise from first-stage ones, in f32 (docs/IR.md §4)"
		                          : "fusion.kernel: schedule attention needs softmax(f(Q K)) V in f32 (docs/IR.md §4)");
	for (uint32_t i = 0; i < b->nnodes; i++) {
		const fj_node *n = &b->nodes[i];
		for (uint32_t o = 0; o < n->nopnds; o++)
			if (n->opnds[o] != FJ_NOVAL)
				a->vals[n->opnds[o]].nuses++;
		uint8_t cls = n->op == FJ_OP_PRIMS_MATMUL ? FJ_RG_OPAQUE : is_reduction(n->op) ? FJ_RG_REDUCTION : FJ_RG_FULL;
		for (uint32_t r = 0; r < n->nres; r++) {
			a->vals[n->res[r]].cls = cls;
			a->vals[n->res[r]].node = i;
		}
	}
	for (uint32_t j = 0; j < b->nresults; j++) {
		fj_rg_value *x = &a->vals[b->results[j]];
		x->nuses++;
		if (x->result < 0)
			x->result = (int32_t)j;
	}
	a->opaque = found;
	a->dom_v = b->nodes[found].res[0];
	a->dom = &b->values[a->dom_v].type;
	a->kmask = bw ? 0 : 1u << (a->dom->rank - 1); /* R: O's rows, where the row values (a logsumexp) live */
	a->rrank = a->dom->rank - (bw ? 0 : 1);
	for (uint32_t v = 0; v < b->nvalues; v++)
		if (b->values[v].kind != FJ_VK_LITERAL) {
			a->vals[v].in_d = same_dims(&b->values[v].type, a->dom);
			a->vals[v].in_r = is_r_shape(&b->values[v].type, a->dom, a->kmask);
		}
	for (uint32_t j = 0; j < b->nresults; j++) {
		uint8_t c = a->vals[b->results[j]].cls;
		if (c == FJ_RG_INPUT || c == FJ_RG_LITERAL)
			return fj_error_status(a->ctx, FJ_ERR_UNSUPPORTED, a->node->loc,
			                       "fusion.kernel: attention: result %u is an operand", j);
	}
	fj_status st = result_spaces(a);
	return st == FJ_OK ? analyze_syms(a) : st;
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
	if (!a->vals)
		return FJ_ERR_NOMEM;
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
	if (a->sched == FJ_RG_ATTENTION || a->sched == FJ_RG_ATTENTION_BW) {
		fj_status st = analyze_attention(a);
		if (st != FJ_OK)
			fj_rg_analysis_free(a);
		return st;
	}
	int8_t *dep = fj_alloc(ctx, nv);
	if (!dep) {
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
		           !(fj_rg_red_mask(ctx, bn, b->values[bn->opnds[0]].type.rank) &
		             (1u << (b->values[bn->opnds[0]].type.rank - 1)))) {
			/* persistent_inner_outer: a reduction that keeps D's innermost
			 * dim is an outer one (a column sum) */
			const fj_type *t = &b->values[bn->opnds[0]].type;
			uint32_t km = fj_rg_red_mask(ctx, bn, t->rank);
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
			uint32_t km = fj_rg_red_mask(ctx, bn, t->rank);
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
		plan_region(a);
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
	/* the error only when there is no column result: recorded on every
	 * success, it was a stray error on the caller's context (and raced with
	 * other threads' pipelines counting errors: api.tsan_stress) */
	st = FJ_ERR_UNSUPPORTED;
	for (uint32_t j = 0; j < a.body->nresults; j++) {
		if (fj_rg_col_value(&a, a.body->results[j])) {
			*nsums = (uint32_t)a.noreds;
			*col_result = j;
			st = FJ_OK;
			break;
		}
	}
	fj_rg_analysis_free(&a);
	if (st != FJ_OK)
		return fj_error_status(ctx, st, n->loc, "fusion.kernel: column sums without a column result");
	return st;
}
