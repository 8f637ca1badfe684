/* region_host_outer.c -- the host template of reductions across rows
 * (reduction_outer, persistent_outer): tiles of R with accumulator arrays
 * (region_host.c describes it). */
#include "codegen/region_host_internal.h"

/* ---- reductions across rows (D's innermost dim kept): tiles of R ---- */

/* Prefetches the lines the accumulation will read OPF_DIST steps of the
 * innermost K dim (kd, index idx[kd] of extent kn) ahead: the D-shaped
 * inputs at columns [l0, l0 + len) of dim L. A tile reads a short run of
 * each row at a large stride, which the hardware prefetchers do not follow
 * across pages (a column sum of [8192, 4096] f32 ran at 4 GB/s). */
enum { OPF_DIST = 8 };

static void prefetch_ahead(hctx *h, const LLVMValueRef *idx, int kd, LLVMValueRef kn, int L, LLVMValueRef l0,
                           LLVMValueRef len)
{
	fj_cg *cg = h->cg;
	LLVMValueRef ahead = LLVMBuildNSWAdd(BB, idx[kd], c64(h, OPF_DIST), "");
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntSLT, ahead, kn, ""));
	for (uint32_t i = 0; i < h->body->nparams; i++) {
		const fj_rg_value *x = &h->a->vals[h->body->params[i]];
		const fj_cg_operand *o = &h->in[x->index];
		if (!x->in_d || o->none || o->literal)
			continue;
		LLVMValueRef at[FJ_MAX_RANK];
		memcpy(at, idx, sizeof at);
		at[kd] = ahead;
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, c64(h, 0), len, "pf");
		l.step = c64(h, 64 / (int64_t)fj_dtype_size(o->t.dtype));
		at[L] = LLVMBuildNSWAdd(BB, l0, l.iv, "");
		fj_cg_prefetch(cg, &o->t, fj_cg_offset(cg, &o->t, at), FJ_CG_PREFETCH_L1);
		fj_cg_loop_end(cg, &l);
	}
	fj_cg_if_end(cg, &c);
}

/* Outer tiles: up to OTILE neighbouring points of R per tile. Wide tiles
 * read long contiguous runs of each row (OTILE * 4 bytes of f32): short runs
 * at a large stride defeat the hardware prefetchers (a column sum of [8192,
 * 4096] f32 ran at 4 GB/s with 256-point tiles). The accumulator arrays
 * (f64, on the stack) stay in L2. */

typedef struct tacc {
	LLVMValueRef arr[3];   /* [OTILE x ty] state arrays */
	LLVMValueRef shift;    /* [OTILE x f64] */
} tacc;

/* Points acc's variables at element t of its arrays. */
static void acc_at(hctx *h, fj_rg_acc *acc, tacc *ta, LLVMValueRef t)
{
	for (int i = 0; i < acc->n; i++)
		acc->var[i] = elem(h, acc->ty[i], ta->arr[i], t);
	acc->shift = acc->kind == FJ_RG_RED_VAR_MEAN
	                 ? LLVMBuildLoad2(BB, h->cg->t_f64, elem(h, h->cg->t_f64, ta->shift, t), "")
	                 : NULL;
}

void fj_rh_tpl_outer(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_rg_analysis *a = h->a;
	const fj_graph *b = h->body;
	int dr = a->dom->rank;
	fj_rg_acc accs[FJ_RG_MAX_REDS];
	tacc tas[FJ_RG_MAX_REDS];
	/* result arrays: per reduction result value */
	LLVMValueRef resarr[FJ_RG_MAX_REDS][2];
	for (int i = 0; i < a->nreds; i++) {
		fj_rg_acc_init(r, a->reds[i], &accs[i]);
		for (int c = 0; c < accs[i].n; c++)
			tas[i].arr[c] = fj_cg_var(cg, LLVMArrayType(accs[i].ty[c], OTILE), NULL, "tacc");
		tas[i].shift = fj_cg_var(cg, LLVMArrayType(cg->t_f64, OTILE), NULL, "tshift");
		const fj_node *n = &b->nodes[a->reds[i]];
		for (uint32_t q = 0; q < n->nres && q < 2; q++)
			resarr[i][q] = fj_cg_var(cg, LLVMArrayType(fj_cg_compute_type(cg, b->values[n->res[q]].type.dtype), OTILE),
			                         NULL, "tres");
	}
	bool par = fj_rh_pick_par_r(h);
	LLVMValueRef rlo, rhi;
	fj_rh_row_range(h, par, &rlo, &rhi);
	LLVMValueRef count = fj_rh_red_count(h);
	LLVMValueRef rdims[FJ_MAX_RANK];
	int kd[FJ_MAX_RANK], nk = 0;
	for (int d = 0; d < dr; d++)
		if (!(a->kmask & (1u << d))) {
			rdims[nk] = fj_rg_dim(r, a->dom_v, d);
			kd[nk++] = d;
		}
	int L = kd[nk - 1]; /* the innermost kept dim of D */

	/* while (rr < rhi) { ...; rr += len; } */
	LLVMBasicBlockRef pre = LLVMGetInsertBlock(BB);
	LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "tiles");
	LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "tile");
	LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->llctx, cg->fn, "tiles.end");
	LLVMBuildBr(BB, head);
	LLVMPositionBuilderAtEnd(BB, head);
	LLVMValueRef rr = LLVMBuildPhi(BB, cg->t_i64, "r");
	LLVMAddIncoming(rr, &rlo, &pre, 1);
	LLVMBuildCondBr(BB, LLVMBuildICmp(BB, LLVMIntSLT, rr, rhi, ""), body, exit);
	LLVMPositionBuilderAtEnd(BB, body);
	fj_rg_scope_push(r);
	LLVMValueRef ridx[FJ_MAX_RANK], idx[FJ_MAX_RANK];
	fj_cg_unravel(cg, rr, rdims, nk, ridx);
	for (int i = 0; i < nk; i++)
		idx[kd[i]] = ridx[i];
	LLVMValueRef len = imin(h, LLVMBuildNSWSub(BB, rhi, rr, ""),
	                        LLVMBuildNSWSub(BB, rdims[nk - 1], ridx[nk - 1], ""));
	len = imin(h, len, c64(h, OTILE));
	LLVMValueRef l0 = idx[L];

	for (int ph = 0; ph < a->nphases; ph++) {
		/* identity (and shifts) for every point of the tile */
		fj_cg_loop lt;
		fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			acc_at(h, &accs[i], &tas[i], lt.iv);
			accs[i].shift = NULL;
			fj_rg_acc_reset(r, &accs[i]);
			LLVMBuildStore(BB, LLVMConstReal(cg->t_f64, 0), elem(h, cg->t_f64, tas[i].shift, lt.iv));
		}
		fj_cg_loop_end(cg, &lt);
		bool anyvar = false;
		for (int i = 0; i < a->nreds; i++)
			anyvar |= a->red_phase[i] == ph && accs[i].kind == FJ_RG_RED_VAR_MEAN;
		if (anyvar) {
			fj_cg_if c;
			fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntSGT, count, c64(h, 0), ""));
			fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
			fj_rg_scope_push(r);
			for (int i = 0; i < a->nreds; i++)
				if (a->red_phase[i] < ph)
					for (uint32_t q = 0; q < b->nodes[a->reds[i]].nres && q < 2; q++) {
						fj_vid rv = b->nodes[a->reds[i]].res[q];
						LLVMTypeRef ty = fj_cg_compute_type(cg, b->values[rv].type.dtype);
						fj_rg_bind(r, rv, LLVMBuildLoad2(BB, ty, elem(h, ty, resarr[i][q], lt.iv), ""));
					}
			LLVMValueRef id2[FJ_MAX_RANK];
			for (int d = 0; d < dr; d++)
				id2[d] = (a->kmask & (1u << d)) ? c64(h, 0) : idx[d];
			id2[L] = LLVMBuildNSWAdd(BB, l0, lt.iv, "");
			fj_rg_point p;
			fj_rg_point_idx(&p, dr, id2);
			for (int i = 0; i < a->nreds; i++) {
				if (a->red_phase[i] != ph || accs[i].kind != FJ_RG_RED_VAR_MEAN)
					continue;
				LLVMValueRef x = fj_rg_eval(r, b->nodes[a->reds[i]].opnds[0], &p);
				x = fj_cg_convert(cg, x, fj_cg_compute_dtype(accs[i].in_dt), FJ_DT_F64);
				LLVMBuildStore(BB, x, elem(h, cg->t_f64, tas[i].shift, lt.iv));
			}
			fj_rg_scope_pop(r);
			fj_cg_loop_end(cg, &lt);
			fj_cg_if_end(cg, &c);
		}
		/* accumulate: K outside, the tile inside */
		knest kn;
		LLVMValueRef id2[FJ_MAX_RANK];
		memcpy(id2, idx, sizeof id2);
		fj_rh_knest_begin(h, &kn, id2);
		int kin = -1; /* the innermost K dim */
		for (int d = 0; d < dr; d++)
			if (a->kmask & (1u << d))
				kin = d;
		prefetch_ahead(h, id2, kin, fj_rg_dim(r, a->dom_v, kin), L, l0, len);
		fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
		fj_rg_scope_push(r);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] < ph)
				for (uint32_t q = 0; q < b->nodes[a->reds[i]].nres && q < 2; q++) {
					fj_vid rv = b->nodes[a->reds[i]].res[q];
					LLVMTypeRef ty = fj_cg_compute_type(cg, b->values[rv].type.dtype);
					fj_rg_bind(r, rv, LLVMBuildLoad2(BB, ty, elem(h, ty, resarr[i][q], lt.iv), ""));
				}
		LLVMValueRef id3[FJ_MAX_RANK];
		memcpy(id3, id2, sizeof id3);
		id3[L] = LLVMBuildNSWAdd(BB, l0, lt.iv, "");
		fj_rg_point p;
		fj_rg_point_idx(&p, dr, id3);
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			acc_at(h, &accs[i], &tas[i], lt.iv);
			LLVMValueRef x = fj_rg_eval(r, b->nodes[a->reds[i]].opnds[0], &p);
			bool arg = accs[i].kind == FJ_RG_RED_ARGMAX || accs[i].kind == FJ_RG_RED_ARGMIN;
			fj_rg_acc_step(r, &accs[i], x, arg ? fj_rh_kpos(h, id3) : NULL);
		}
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &lt);
		fj_rh_knest_end(h, &kn, 0);
		/* finish into the result arrays */
		fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			acc_at(h, &accs[i], &tas[i], lt.iv);
			fj_rg_acc_finish(r, &accs[i], count);
			const fj_node *n = &b->nodes[a->reds[i]];
			for (uint32_t q = 0; q < n->nres && q < 2; q++) {
				LLVMTypeRef ty = fj_cg_compute_type(cg, b->values[n->res[q]].type.dtype);
				LLVMBuildStore(BB, r->bound[n->res[q]], elem(h, ty, resarr[i][q], lt.iv));
				fj_rg_bind(r, n->res[q], NULL);
			}
		}
		fj_cg_loop_end(cg, &lt);
	}
	/* outputs */
	for (int cls = OUT_R; cls >= OUT_D; cls--) {
		if (!fj_rh_has_outputs(h, cls))
			continue;
		knest kn;
		LLVMValueRef id2[FJ_MAX_RANK];
		memcpy(id2, idx, sizeof id2);
		if (cls == OUT_D)
			fj_rh_knest_begin(h, &kn, id2);
		fj_cg_loop lt;
		fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
		fj_rg_scope_push(r);
		for (int i = 0; i < a->nreds; i++)
			for (uint32_t q = 0; q < b->nodes[a->reds[i]].nres && q < 2; q++) {
				fj_vid rv = b->nodes[a->reds[i]].res[q];
				LLVMTypeRef ty = fj_cg_compute_type(cg, b->values[rv].type.dtype);
				fj_rg_bind(r, rv, LLVMBuildLoad2(BB, ty, elem(h, ty, resarr[i][q], lt.iv), ""));
			}
		fj_rg_point p;
		if (cls == OUT_R) {
			LLVMValueRef ri2[FJ_MAX_RANK];
			memcpy(ri2, ridx, sizeof ri2);
			ri2[nk - 1] = LLVMBuildNSWAdd(BB, ridx[nk - 1], lt.iv, "");
			fj_rg_point_idx(&p, nk, ri2);
			p.lin = LLVMBuildNSWAdd(BB, rr, lt.iv, "");
		} else {
			LLVMValueRef id3[FJ_MAX_RANK];
			memcpy(id3, id2, sizeof id3);
			id3[L] = LLVMBuildNSWAdd(BB, l0, lt.iv, "");
			fj_rg_point_idx(&p, dr, id3);
		}
		fj_rh_store_outputs(h, cls, &p);
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &lt);
		if (cls == OUT_D)
			fj_rh_knest_end(h, &kn, 0);
	}
	for (int i = 0; i < a->nreds; i++)
		for (uint32_t q = 0; q < b->nodes[a->reds[i]].nres && q < 2; q++)
			fj_rg_bind(r, b->nodes[a->reds[i]].res[q], NULL);
	fj_rg_scope_pop(r);
	LLVMValueRef next = LLVMBuildNSWAdd(BB, rr, len, "");
	LLVMBasicBlockRef latch = LLVMGetInsertBlock(BB);
	LLVMBuildBr(BB, head);
	LLVMAddIncoming(rr, &next, &latch, 1);
	LLVMMoveBasicBlockAfter(exit, latch);
	LLVMPositionBuilderAtEnd(BB, exit);
}
