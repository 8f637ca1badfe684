/* region_host_pointwise.c -- the host template of regions without
 * reductions: pointwise, transpose, take, gather (region_host.c describes
 * it). */
#include "codegen/region_host_internal.h"

/* ---- pointwise ---- */

static bool node_needs_idx(const fj_graph *b, const fj_node *n)
{
	switch (n->op) {
	case FJ_OP_PRIMS_BROADCAST_IN_DIM: {
		const fj_type *at = &b->values[n->opnds[0]].type, *vt = &b->values[n->res[0]].type;
		if (at->rank == 0)
			return false;
		if (at->rank != vt->rank)
			return true;
		for (int d = 0; d < at->rank; d++)
			if (at->dims[d] != vt->dims[d])
				return true;
		return false;
	}
	case FJ_OP_PRIMS_TRANSPOSE: case FJ_OP_PRIMS_SLICE: case FJ_OP_PRIMS_REV: case FJ_OP_PRIMS_PAD:
	case FJ_OP_PRIMS_CAT: case FJ_OP_PRIMS_TAKE: case FJ_OP_PRIMS_GATHER:
		return true;
	default:
		return false;
	}
}

void fj_rh_tpl_pointwise(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	fj_vid sv = h->a->dom_v;
	int rank = vrank(h, sv);
	bool flat = true;
	for (uint32_t i = 0; i < b->nnodes && flat; i++)
		if (node_needs_idx(b, &b->nodes[i]))
			flat = false;
	h->k->par_out = 0;
	if (rank == 0) {
		h->k->par_mask = 0;
		fj_cg_if c;
		fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntSLT, h->lo, h->hi, ""));
		fj_rg_scope_push(r);
		fj_rg_point p;
		fj_rg_point_lin(&p, 0, c64(h, 0));
		for (uint32_t j = 0; j < h->k->nout; j++) {
			fj_rg_point q;
			fj_rg_point_lin(&q, vrank(h, b->results[j]), c64(h, 0));
			fj_rg_store(r, &h->out[j], c64(h, 0), b->results[j], &q);
		}
		fj_rg_scope_pop(r);
		fj_cg_if_end(cg, &c);
		return;
	}
	if (flat || rank == 1) {
		h->k->par_mask = (1u << rank) - 1;
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, h->lo, h->hi, "i");
		fj_rg_scope_push(r);
		fj_rg_point p;
		if (rank == 1)
			fj_rg_point_idx(&p, 1, &l.iv);
		else
			fj_rg_point_lin(&p, rank, l.iv);
		p.lin = l.iv;
		fj_rh_store_outputs(h, OUT_D, &p);
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &l);
		fj_rh_vector_width(h, &l, FJ_CG_INTERLEAVE);
		return;
	}
	h->k->par_mask = (1u << (rank - 1)) - 1;
	LLVMValueRef last = fj_rg_dim(r, sv, rank - 1);
	fj_cg_loop lr, lc;
	fj_cg_loop_begin(cg, &lr, h->lo, h->hi, "rows");
	LLVMValueRef idx[FJ_MAX_RANK];
	fj_cg_unravel(cg, lr.iv, r->vdim[sv], rank - 1, idx);
	LLVMValueRef base = LLVMBuildNSWMul(BB, lr.iv, last, "");
	fj_rg_scope_push(r);
	fj_cg_loop_begin(cg, &lc, c64(h, 0), last, "cols");
	fj_rg_scope_push(r);
	idx[rank - 1] = lc.iv;
	fj_rg_point p;
	fj_rg_point_idx(&p, rank, idx);
	p.lin = LLVMBuildNSWAdd(BB, base, lc.iv, "");
	fj_rh_store_outputs(h, OUT_D, &p);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
	fj_rh_vector_width(h, &lc, FJ_CG_INTERLEAVE);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
}
