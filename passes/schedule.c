/* schedule.c -- the `schedule` pass: names the kernel shape of each
 * fusion.kernel region, `{schedule=...}` (IR.md §4). The run-time parameters
 * (block sizes, vector width, how many rows per block, when a persistent row
 * spills to several passes) are chosen by the backends from the sizes at run
 * time; this pass only names the shape, from the region's content:
 *   attention  a region holding two prims.matmul and reductions
 *            (fuse{attention=true} groups softmax(f(Q K)) V so:
 *            ir/attention.c);
 *   attention_bw  a region holding several prims.matmul and no reduction
 *            (fuse{attention=true} groups an attention backward that
 *            recomputes its weights so: fj_attn_bw_match);
 *   matmul / take / gather / scatter / scan   a region holding prims.matmul
 *            (with its pointwise epilogue), take, gather, scatter_add or
 *            index_add, cumsum;
 *   persistent_inner / persistent_outer       a reduction whose results are
 *            broadcast back and consumed in the region (the normalization
 *            pattern: a value computed from a reduction has the shape of the
 *            reduced operand D);
 *   persistent_inner_outer                    a persistent_inner region that
 *            also sums columns (reductions over the other dims of the same D:
 *            layer_norm backward's grad_weight and grad_bias; fuse's L2b);
 *   reduction_inner / reduction_outer         other regions with reductions;
 *   transpose  no reduction, and a prims.transpose whose last perm entry is
 *            not the last dim (the innermost dim moves);
 *   pointwise  everything else.
 * Inner or outer: whether the innermost non-unit dim of D (the operand of the
 * region's first reduction) is among the reduced dims (a row of [N,4096]
 * reduced over dim 1 is contiguous: inner; over dim 0: outer). This is the
 * one place it is decided: codegen's region plan (fj_rg_analysis.inner)
 * reads it from the name, and the host and GPU templates follow the plan.
 * Invariant: only the schedule annotation changes. Complexity: linear in the
 * size of the bodies. */
#include <string.h>

#include "passes/pass.h"

/* The schedule of body b; rd is scratch, one byte per value of b. */
static const char *pick(const fj_graph *b, uint8_t *rd)
{
	const fj_context *ctx = fj_graph_ctx(b);
	const fj_type *d = NULL;
	uint32_t kmask = 0, nmm = 0;
	bool persistent = false, transpose = false, two = false;
	bool red = false;
	for (uint32_t i = 0; i < b->nnodes; i++) {
		nmm += b->nodes[i].op == FJ_OP_PRIMS_MATMUL;
		red |= (fj_op_info(ctx, b->nodes[i].op)->flags & FJ_OPF_REDUCTION) != 0;
	}
	if (nmm)
		return nmm == 1 ? "matmul" : red ? "attention" : "attention_bw";
	for (uint32_t i = 0; i < b->nnodes; i++) {
		const fj_node *n = &b->nodes[i];
		switch (n->op) {
		case FJ_OP_PRIMS_TAKE: return "take";
		case FJ_OP_PRIMS_GATHER: return "gather";
		case FJ_OP_PRIMS_SCATTER_ADD:
		case FJ_OP_PRIMS_INDEX_ADD: return "scatter";
		case FJ_OP_PRIMS_CUMSUM: return "scan";
		default: break;
		}
	}
	memset(rd, 0, b->nvalues);
	for (uint32_t i = 0; i < b->nnodes; i++) {
		const fj_node *n = &b->nodes[i];
		uint32_t fl = fj_op_info(ctx, n->op)->flags;
		if (fl & FJ_OPF_REDUCTION) {
			if (!d && n->nopnds && n->opnds[0] != FJ_NOVAL) {
				d = &b->values[n->opnds[0]].type;
				kmask = fj_node_reduced_mask(ctx, n, d->rank);
			} else if (d && n->nopnds && n->opnds[0] != FJ_NOVAL &&
			           fj_node_reduced_mask(ctx, n, d->rank) != kmask) {
				two = true; /* row reductions and column sums (fuse's L2b) */
			}
			for (uint32_t r = 0; r < n->nres; r++)
				rd[n->res[r]] = 1;
			continue;
		}
		if (n->op == FJ_OP_PRIMS_TRANSPOSE) {
			const fj_attr *perm = fj_node_attr(ctx, n, "perm");
			if (perm && perm->kind == FJ_AK_LIST && perm->n &&
			    fj_attr_as_int(&perm->u.items[perm->n - 1]) != (int64_t)perm->n - 1)
				transpose = true;
		}
		bool dep = false;
		for (uint32_t o = 0; o < n->nopnds && !dep; o++)
			dep = n->opnds[o] != FJ_NOVAL && rd[n->opnds[o]];
		if (!dep)
			continue;
		for (uint32_t r = 0; r < n->nres; r++) {
			rd[n->res[r]] = 1;
			if (d && fj_type_same_dims(&b->values[n->res[r]].type, d))
				persistent = true;
		}
	}
	if (!d)
		return transpose ? "transpose" : "pointwise";
	/* A reduction that reduces nothing (or only unit dims) broadcast back is
	 * no normalization pattern. */
	int inner = -1;
	for (int j = d->rank; j-- > 0;)
		if (d->dims[j] != 1) {
			inner = j;
			break;
		}
	bool is_inner = inner < 0 || (kmask & (1u << inner));
	if (two)
		return "persistent_inner_outer";
	if (persistent && kmask)
		return is_inner ? "persistent_inner" : "persistent_outer";
	return is_inner ? "reduction_inner" : "reduction_outer";
}

static fj_status schedule_graph(fj_graph *g)
{
	fj_context *ctx = fj_graph_ctx(g);
	fj_graph *top = g;
	while (top->parent)
		top = top->parent;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		fj_node *n = &g->nodes[i];
		if (n->op != FJ_OP_FUSION_KERNEL || !n->body)
			continue;
		const fj_graph *b = n->body;
		uint8_t *rd = fj_alloc(ctx, b->nvalues ? b->nvalues : 1);
		if (!rd) {
			g->module->oom = true;
			return FJ_ERR_NOMEM;
		}
		const char *s = pick(b, rd);
		fj_free(ctx, rd, b->nvalues ? b->nvalues : 1);
		if (!n->schedule || strcmp(n->schedule, s) != 0) {
			n->schedule = fj_arena_strdup(&top->arena, s);
			if (!n->schedule) {
				g->module->oom = true;
				return FJ_ERR_NOMEM;
			}
		}
	}
	return FJ_OK;
}

fj_status fj_pass_schedule(fj_pass_run *r)
{
	for (uint32_t i = 0; i < r->m->ngraphs; i++) {
		fj_status st = schedule_graph(r->m->graphs[i]);
		if (st)
			return st;
	}
	return FJ_OK;
}
