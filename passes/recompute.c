/* recompute.c -- the `recompute` pass: marks every node of each joint graph
 * {recomputable=true|false} (and its parameters false: inputs are never
 * recomputed), the policy `partition` uses to decide what the backward may
 * recompute instead of saving.
 *
 * The policy is functorch's min-cut partitioner's (late 2022,
 * functorch/_src/partitioners.py, ban_recomputation), on prims and aten:
 *   - never: random ops (prims.rand, aten.native_dropout), compute-heavy
 *     opaque ops (matmul, take, gather, scatter_add, index_add and the aten
 *     matrix and indexing ops) and fusion.kernel regions;
 *   - reductions (sum amax amin prod var_mean argmax argmin, and the aten ones)
 *     only when their output is not much smaller than their input: banned when
 *     output bytes * 4 < input bytes (functorch's rule);
 *   - views/layout ops, pointwise ops, scans and sources: recomputable;
 *   - aten ops otherwise follow the op table's RC flag.
 * `recompute{aggressive=true}` is functorch's AGGRESSIVE_RECOMPUTATION: only
 * random ops stay banned (reductions and opaque ops become recomputable).
 * Byte sizes substitute FJ_SYM_WEIGHT (8192) for each symbol. O(nodes). */
#include <string.h>

#include "passes/pass.h"
#include "passes/recompute.h"

bool fj_is_joint_graph(const fj_graph *g)
{
	size_t n = strlen(g->name);
	return g->num_fwd_outputs >= 0 && n > 6 && strcmp(g->name + n - 6, ".joint") == 0;
}

double fj_type_bytes_est(const fj_module *m, const fj_type *t)
{
	double n = fj_dtype_size(t->dtype);
	for (int k = 0; k < t->rank; k++) {
		fj_dim d = t->dims[k];
		if (fj_dim_is_static(d)) {
			n *= (double)d;
		} else {
			const fj_symexpr *e = fj_dim_expr(m, d);
			double v = (double)e->coef;
			for (uint32_t i = 0; i < e->nsyms; i++)
				v *= FJ_SYM_WEIGHT;
			n *= v;
		}
	}
	return n;
}

bool fj_recompute_node(const fj_graph *g, const fj_node *n, bool aggressive)
{
	const fj_opinfo *oi = fj_op_info(fj_graph_ctx(g), n->op);
	if ((oi->flags & FJ_OPF_RANDOM) || (oi->flags & FJ_OPF_FUSION) || n->op == FJ_OP_FUSION_KERNEL)
		return false;
	if (aggressive)
		return true;
	if (oi->flags & FJ_OPF_OPAQUE)
		return false;
	if (!(oi->flags & FJ_OPF_RECOMPUTABLE))
		return false;
	if (oi->flags & FJ_OPF_REDUCTION) {
		double in = 0, out = 0;
		for (uint32_t i = 0; i < n->nopnds; i++)
			if (n->opnds[i] != FJ_NOVAL && g->values[n->opnds[i]].kind != FJ_VK_LITERAL)
				in += fj_type_bytes_est(g->module, &g->values[n->opnds[i]].type);
		for (uint32_t i = 0; i < n->nres; i++)
			out += fj_type_bytes_est(g->module, &g->values[n->res[i]].type);
		if (out * 4 < in)
			return false;
	}
	return true;
}

void fj_recompute_graph(fj_graph *g, bool aggressive)
{
	for (uint32_t i = 0; i < g->nparams; i++)
		g->values[g->params[i]].recomputable = FJ_TRI_FALSE;
	for (uint32_t ni = 0; ni < g->nnodes; ni++)
		g->nodes[ni].recomputable = fj_recompute_node(g, &g->nodes[ni], aggressive) ? FJ_TRI_TRUE : FJ_TRI_FALSE;
}

fj_status fj_pass_recompute(fj_pass_run *r)
{
	bool aggressive = fj_pass_opt_bool(r, "aggressive");
	uint32_t nmarked = 0, nbanned = 0;
	for (uint32_t i = 0; i < r->m->ngraphs; i++) {
		fj_graph *g = r->m->graphs[i];
		if (!fj_is_joint_graph(g))
			continue;
		fj_recompute_graph(g, aggressive);
		for (uint32_t ni = 0; ni < g->nnodes; ni++) {
			nmarked++;
			nbanned += g->nodes[ni].recomputable == FJ_TRI_FALSE;
		}
	}
	fj_pass_stat(r, "recompute: %u nodes marked, %u not recomputable", nmarked, nbanned);
	return FJ_OK;
}
