/* region_gpu_reduce.c -- GPU reduction templates within a block: a block
 * per row (<name>), a thread per row (_tpr), the row in registers (_reg8),
 * and column tiles (_col); the row state and outputs that region_gpu_split.c
 * reuses (region_gpu.c describes the templates). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

/* ---- reductions ---- */

static fj_status red_setup(gk *k, redctx *rc)
{
	const fj_rg_analysis *a = k->a;
	const fj_graph *body = k->body;
	rc->dv = body->nodes[a->reds[0]].opnds[0]; /* persistent_inner_outer too: its inner reductions' D */
	const fj_type *dt = &body->values[rc->dv].type;
	rc->drank = dt->rank;
	rc->nr = rc->nk = 0;
	for (int d = 0; d < dt->rank; d++) {
		if (a->kmask & (1u << d))
			rc->kdims[rc->nk++] = d;
		else
			rc->rdims[rc->nr++] = d;
	}
	for (uint32_t j = 0; j < body->nresults && j < MAXIO; j++)
		rc->space[j] = "DRC"[a->vals[body->results[j]].space];
	rc->ordered = a->ordered;
	return FJ_OK;
}

static void red_sizes(gk *k, redctx *rc)
{
	rc->rows = i64c(k, 1);
	rc->len = i64c(k, 1);
	for (int i = 0; i < rc->nr; i++)
		rc->rows = mul(k, rc->rows, fj_rg_dim(&k->r, rc->dv, rc->rdims[i]));
	for (int i = 0; i < rc->nk; i++)
		rc->len = mul(k, rc->len, fj_rg_dim(&k->r, rc->dv, rc->kdims[i]));
}

/* The prologue of every reduction kernel: the row/position split, the
 * entry point (name suffix, block bound), then the row count and length. */
fj_status fj_gpu_red_begin(gk *k, redctx *rc, const char *suffix, unsigned maxntid, unsigned minblocks)
{
	fj_status st = red_setup(k, rc);
	if (st == FJ_OK)
		st = fj_gpu_entry_begin(k, suffix, maxntid, minblocks, 0);
	if (st != FJ_OK)
		return st;
	red_sizes(k, rc);
	return FJ_OK;
}

/* The D point of (row indices ridx, position j in the row). */
static void d_point(gk *k, redctx *rc, const V *ridx, V j, V *didx)
{
	V kidx[FJ_MAX_RANK];
	fj_gpu_unravel(k, rc->dv, rc->kdims, rc->nk, j, kidx);
	for (int i = 0; i < rc->nr; i++)
		didx[rc->rdims[i]] = ridx[i];
	for (int i = 0; i < rc->nk; i++)
		didx[rc->kdims[i]] = kidx[i];
}

/* Accumulates phase ph's reductions at D point p (position j of its row). */
static void step_phase_at(gk *k, redctx *rc, int ph, const fj_rg_point *p, V j)
{
	for (int i = 0; i < k->a->nreds; i++) {
		if (k->a->red_phase[i] != ph)
			continue;
		const fj_node *rn = &k->body->nodes[k->a->reds[i]];
		fj_rg_point q = *p;
		V x = fj_rg_eval(&k->r, rn->opnds[0], &q);
		fj_rg_acc_step(&k->r, &rc->acc[i], x, j);
	}
}

void fj_gpu_step_phase(gk *k, redctx *rc, int ph, const V *ridx, V j)
{
	V didx[FJ_MAX_RANK];
	d_point(k, rc, ridx, j, didx);
	fj_rg_point p;
	fj_rg_point_idx(&p, rc->drank, didx);
	step_phase_at(k, rc, ph, &p, j);
}

/* ---- a block per row, its rows read 16 bytes at a time ---- */

/* Whether region operand i is read whole by a row kernel: a tensor of D's
 * shape. */
static bool row_whole(const gk *k, const redctx *rc, uint32_t i)
{
	const fj_type *t = &k->body->values[k->body->params[i]].type;
	const fj_type *d = &k->body->values[rc->dv].type;
	return !k->in[i].literal && !k->in[i].none && fj_type_same_dims(t, d);
}

/* The positions a thread reads at once from each operand of D's shape in a
 * block-per-row kernel: 16 bytes of the narrowest (4 f32, 8 f16/bf16; at
 * most 8), or 0 when rows are not read that way: an argmax/argmin (the
 * order), reduced dims that are not D's innermost ones (a row is not
 * contiguous), or no operand of D's shape. */
static int row_vec_width(const gk *k, const redctx *rc)
{
	if (rc->ordered || rc->nk == 0)
		return 0;
	for (int i = 0; i < rc->nk; i++)
		if (rc->kdims[i] != rc->drank - rc->nk + i)
			return 0;
	size_t narrow = 0;
	for (uint32_t i = 0; i < k->nin; i++) {
		size_t s = fj_dtype_size(k->in[i].t.dtype);
		if (row_whole(k, rc, i) && s && (!narrow || s < narrow))
			narrow = s;
	}
	if (!narrow)
		return 0;
	int w = (int)(16 / narrow);
	return w < 2 ? 2 : w > 8 ? 8 : w;
}

/* Whether this launch reads rows w positions at a time (i1): the row length
 * a multiple of w and every operand of D's shape 16-byte aligned -- then
 * each w positions of a row start 16 bytes apart from an aligned address.
 * Decided in the kernel from its pointers, so any pointers may come. */
static V row_vec_ok(gk *k, const redctx *rc, int w)
{
	fj_cg *cg = k->cg;
	V ok = LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildURem(B, rc->len, i64c(k, w), ""), i64c(k, 0), "");
	for (uint32_t i = 0; i < k->nin; i++) {
		if (!row_whole(k, rc, i))
			continue;
		V lo = LLVMBuildAnd(B, LLVMBuildPtrToInt(B, k->in[i].t.ptr, cg->t_i64, ""), i64c(k, 15), "");
		ok = LLVMBuildAnd(B, ok, LLVMBuildICmp(B, LLVMIntEQ, lo, i64c(k, 0), ""), "");
	}
	return ok;
}

/* Phase ph over the row's positions in chunks of w (chunk c = tid, tid +
 * ntid, ...: positions c*w .. c*w + w-1): each operand of D's shape loaded
 * as one 16-byte vector per chunk (ld.global.nc.v4) and bound at the
 * chunk's points, then the reductions stepped position by position. */
static void row_vec_phase(gk *k, redctx *rc, int ph, const V *ridx, int w)
{
	fj_cg *cg = k->cg;
	gloop cl;
	fj_gpu_gloop_begin(k, &cl, k->tid, LLVMBuildUDiv(B, rc->len, i64c(k, w), ""), k->ntid, "vpos");
	V jb = mul(k, cl.iv, i64c(k, w));
	V j[8], didx[8][FJ_MAX_RANK];
	fj_rg_point pts[8];
	for (int lane = 0; lane < w; lane++) {
		j[lane] = add(k, jb, i64c(k, lane));
		d_point(k, rc, ridx, j[lane], didx[lane]);
		fj_rg_point_idx(&pts[lane], rc->drank, didx[lane]);
	}
	for (uint32_t i = 0; i < k->nin; i++) {
		if (!row_whole(k, rc, i))
			continue;
		fj_dtype dt = k->in[i].t.dtype;
		LLVMTypeRef et = fj_cg_storage_type(cg, dt);
		V off = fj_cg_offset(cg, &k->in[i].t, didx[0]);
		V x = LLVMBuildLoad2(B, LLVMVectorType(et, (unsigned)w),
		                     LLVMBuildInBoundsGEP2(B, et, k->in[i].t.ptr, &off, 1, ""), "");
		size_t bytes = fj_dtype_size(dt) * (size_t)w;
		LLVMSetAlignment(x, bytes >= 16 ? 16 : (unsigned)bytes);
		for (int lane = 0; lane < w; lane++) {
			V e = LLVMBuildExtractElement(B, x, fj_cg_i32(cg, lane), "");
			fj_rg_bind_at(&k->r, k->body->params[i], &pts[lane], fj_cg_from_storage(cg, dt, e));
		}
	}
	for (int lane = 0; lane < w; lane++)
		step_phase_at(k, rc, ph, &pts[lane], j[lane]);
	fj_gpu_gloop_end(k, &cl);
}

/* Stores the results that live in `space` ('D': the pre-reduction space,
 * 'R': the reduced one) at one element, linear offset lin: those the analysis
 * places in that space evaluated at index idx (rank `rank`), the others at lin. */
static void store_space(gk *k, const redctx *rc, char space, int rank, const V *idx, V lin)
{
	for (uint32_t j = 0; j < k->nout; j++) {
		if (rc->space[j] != space)
			continue;
		fj_vid v = k->body->results[j];
		bool in = space == 'D' ? k->a->vals[v].in_d : k->a->vals[v].in_r;
		fj_rg_point p;
		if (in)
			fj_rg_point_idx(&p, rank, idx);
		else
			fj_rg_point_lin(&p, k->body->values[v].type.rank, lin);
		fj_rg_store(&k->r, &k->out[j], lin, v, &p);
	}
}

/* persistent_inner_outer: &state of outer reduction o at column j in slice
 * blk of `part` (blocks' slices or groups' partials: [(blk * noreds + o) *
 * len + j], 8 bytes each). */
V fj_gpu_io_slot(gk *k, V part, V blk, int o, V len, V j)
{
	return fj_rg_col_slot(&k->r, part, k->cg->t_i64, blk, o, len, j); /* the region plan's layout */
}

/* Adds the operand of acc's outer reduction at point p to the state in
 * `slot` (acc: a scratch accumulator of that reduction). */
static void io_accumulate_slot(gk *k, fj_rg_acc *acc, V slot, fj_rg_point *p)
{
	fj_cg *cg = k->cg;
	const fj_node *rn = &k->body->nodes[acc->node];
	fj_rg_point q = *p;
	V x = fj_rg_eval(&k->r, rn->opnds[0], &q);
	fj_cg_set(cg, acc->var[0], LLVMBuildLoad2(B, acc->ty[0], slot, ""));
	fj_rg_acc_step(&k->r, acc, x, NULL);
	V vals[3];
	fj_rg_acc_load(&k->r, acc, vals);
	LLVMBuildStore(B, vals[0], slot);
}

/* Writes the row's outputs: D-space ones at positions [j0, jend) step js
 * (with cols, also adding the column partials there), then R-space ones
 * (is_first: the thread that stores them). */
void fj_gpu_row_out(gk *k, redctx *rc, const V *ridx, V row, V j0, V jend, V js, V is_first, const iocols *cols)
{
	bool anyd = false, anyr = false;
	for (uint32_t j = 0; j < k->nout; j++) {
		anyd |= rc->space[j] == 'D';
		anyr |= rc->space[j] == 'R';
	}
	if (anyd || cols) {
		gloop l;
		fj_gpu_gloop_begin(k, &l, j0, jend, js, "out");
		V didx[FJ_MAX_RANK];
		d_point(k, rc, ridx, l.iv, didx);
		V dlin = fj_gpu_lin_of(k, rc->dv, didx, rc->drank);
		store_space(k, rc, 'D', rc->drank, didx, dlin);
		fj_rg_point p;
		fj_rg_point_idx(&p, rc->drank, didx);
		for (int o = 0; cols && o < k->a->noreds; o++)
			io_accumulate_slot(k, &cols->oacc[o], fj_gpu_io_slot(k, cols->part, k->ctaid, o, rc->len, l.iv), &p);
		fj_gpu_gloop_end(k, &l);
	}
	if (anyr) {
		fj_cg_if c;
		fj_gpu_if_begin(k, &c, is_first);
		store_space(k, rc, 'R', rc->nr, ridx, row);
		fj_gpu_if_end(k, &c);
	}
}

/* Writes the row's outputs: D-space ones at positions [j0, len) step js. */
void fj_gpu_write_row(gk *k, redctx *rc, const V *ridx, V row, V j0, V js, V is_first)
{
	fj_gpu_row_out(k, rc, ridx, row, j0, rc->len, js, is_first, NULL);
}

/* Stores every result at one element of the output space, linear offset lin:
 * the results of that rank evaluated at index idx, the others at lin. */
void fj_gpu_store_results(gk *k, int rank, const V *idx, V lin)
{
	const fj_graph *body = k->body;
	for (uint32_t j = 0; j < k->nout; j++) {
		fj_vid v = body->results[j];
		fj_rg_point op;
		if (body->values[v].type.rank == rank)
			fj_rg_point_idx(&op, rank, idx);
		else
			fj_rg_point_lin(&op, body->values[v].type.rank, lin);
		fj_rg_store(&k->r, &k->out[j], lin, v, &op);
	}
}

/* A thread per row. */
fj_status fj_gpu_emit_tpr(gk *k)
{
	redctx rc;
	fj_status st = fj_gpu_red_begin(k, &rc, "_tpr", 256, 0);
	if (st != FJ_OK)
		return st;
	for (int i = 0; i < k->a->nreds; i++)
		fj_rg_acc_init(&k->r, k->a->reds[i], &rc.acc[i]);
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	gloop rl;
	fj_gpu_gloop_begin(k, &rl, gtid, rc.rows, mul(k, k->nctaid, k->ntid), "row");
	V ridx[FJ_MAX_RANK];
	fj_gpu_unravel(k, rc.dv, rc.rdims, rc.nr, rl.iv, ridx);
	for (int ph = 0; ph < k->a->nphases; ph++) {
		for (int i = 0; i < k->a->nreds; i++)
			if (k->a->red_phase[i] == ph)
				fj_rg_acc_reset(&k->r, &rc.acc[i]);
		gloop jl;
		fj_gpu_gloop_begin(k, &jl, i64c(k, 0), rc.len, i64c(k, 1), "pos");
		fj_gpu_step_phase(k, &rc, ph, ridx, jl.iv);
		fj_gpu_gloop_end(k, &jl);
		for (int i = 0; i < k->a->nreds; i++)
			if (k->a->red_phase[i] == ph)
				fj_rg_acc_finish(&k->r, &rc.acc[i], rc.len);
	}
	fj_gpu_write_row(k, &rc, ridx, rl.iv, i64c(k, 0), i64c(k, 1), LLVMConstInt(k->cg->t_i1, 1, 0));
	fj_gpu_gloop_end(k, &rl);
	return fj_gpu_entry_end(k);
}

static void warp_reduce(gk *k, fj_rg_acc *acc)
{
	for (int m = 1; m < 32; m *= 2) {
		V vals[3], other[3];
		fj_rg_acc_load(&k->r, acc, vals);
		for (int s = 0; s < acc->n; s++)
			other[s] = k->cg->target->shuffle_xor(k->cg, vals[s], m);
		fj_rg_acc_merge(&k->r, acc, other);
	}
}

void fj_gpu_block_setup(gk *k, redctx *rc, blockctx *bc)
{
	fj_cg *cg = k->cg;
	for (int i = 0; i < k->a->nreds; i++) {
		fj_rg_acc_init(&k->r, k->a->reds[i], &rc->acc[i]);
		for (int s = 0; s < rc->acc[i].n; s++) {
			char nm[48];
			snprintf(nm, sizeof nm, "sh%u", k->nshared++);
			bc->sh[i][s] = cg->target->shared_array(cg, rc->acc[i].ty[s], 32, nm);
		}
	}
	bc->lane = LLVMBuildAnd(B, k->tid, i64c(k, 31), "lane");
	bc->warp = LLVMBuildLShr(B, k->tid, i64c(k, 5), "warp");
	bc->nwarps = LLVMBuildLShr(B, add(k, k->ntid, i64c(k, 31)), i64c(k, 5), "");
	bc->lane0 = LLVMBuildICmp(B, LLVMIntEQ, bc->lane, i64c(k, 0), "");
	bc->warp0 = LLVMBuildICmp(B, LLVMIntEQ, bc->warp, i64c(k, 0), "");
	bc->tid0 = LLVMBuildICmp(B, LLVMIntEQ, k->tid, i64c(k, 0), "");
}

/* Opens a block-per-row kernel's body: the block state, the loop over rows
 * (a block per row, strided by the grid) and the row's indices. */
static void block_rows_begin(gk *k, redctx *rc, blockctx *bc, gloop *rl, V *ridx)
{
	fj_gpu_block_setup(k, rc, bc);
	fj_gpu_gloop_begin(k, rl, k->ctaid, rc->rows, k->nctaid, "row");
	fj_gpu_unravel(k, rc->dv, rc->rdims, rc->nr, rl->iv, ridx);
}

/* Combines reduction i's per-thread states over the block (warp shuffles,
 * then shared memory across warps), gives every thread the result and
 * finishes it (binds the reduction's values). */
static void block_combine(gk *k, redctx *rc, blockctx *bc, int i)
{
	fj_cg *cg = k->cg;
	fj_rg_acc *acc = &rc->acc[i];
	V vals[3];
	warp_reduce(k, acc);
	fj_cg_if c1;
	fj_gpu_if_begin(k, &c1, bc->lane0);
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++) {
		V p = LLVMBuildInBoundsGEP2(B, acc->ty[s], bc->sh[i][s], &bc->warp, 1, "");
		LLVMBuildStore(B, vals[s], p);
	}
	fj_gpu_if_end(k, &c1);
	cg->target->barrier(cg);
	fj_cg_if c2;
	fj_gpu_if_begin(k, &c2, bc->warp0);
	fj_rg_acc_reset(&k->r, acc);
	fj_cg_if c3;
	fj_gpu_if_begin(k, &c3, ult(k, bc->lane, bc->nwarps));
	for (int s = 0; s < acc->n; s++) {
		V p = LLVMBuildInBoundsGEP2(B, acc->ty[s], bc->sh[i][s], &bc->lane, 1, "");
		fj_cg_set(cg, acc->var[s], LLVMBuildLoad2(B, acc->ty[s], p, ""));
	}
	fj_gpu_if_end(k, &c3);
	warp_reduce(k, acc);
	fj_cg_if c4;
	fj_gpu_if_begin(k, &c4, bc->lane0);
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++)
		LLVMBuildStore(B, vals[s], bc->sh[i][s]);
	fj_gpu_if_end(k, &c4);
	fj_gpu_if_end(k, &c2);
	cg->target->barrier(cg);
	for (int s = 0; s < acc->n; s++)
		fj_cg_set(cg, acc->var[s], LLVMBuildLoad2(B, acc->ty[s], bc->sh[i][s], ""));
	cg->target->barrier(cg);
	fj_rg_acc_finish(&k->r, acc, rc->len);
}

/* The positions of a row this thread handles in a block per row: strided
 * (j0 = tid, step ntid), or a contiguous chunk when an argmax/argmin needs
 * the order. */
void fj_gpu_thread_positions(gk *k, const redctx *rc, V *j0, V *jend, V *js)
{
	*j0 = k->tid;
	*jend = rc->len;
	*js = k->ntid;
	if (rc->ordered) {
		V ch = LLVMBuildUDiv(B, add(k, rc->len, LLVMBuildSub(B, k->ntid, i64c(k, 1), "")), k->ntid, "");
		*j0 = mul(k, k->tid, ch);
		V e = add(k, *j0, ch);
		*jend = sel(k, slt(k, e, rc->len), e, rc->len);
		*js = i64c(k, 1);
	}
}

/* The reduction phases of one row, each a pass over the thread's positions
 * [j0, jend) step js, then combined over the block. */
void fj_gpu_bpr_phases(gk *k, redctx *rc, blockctx *bc, const V *ridx, V j0, V jend, V js)
{
	const fj_rg_analysis *a = k->a;
	int w = row_vec_width(k, rc);
	V vec_ok = w ? row_vec_ok(k, rc, w) : NULL;
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_reset(&k->r, &rc->acc[i]);
		fj_cg_if c;
		if (w) { /* (w: j0 = tid, jend = len, js = ntid) */
			fj_gpu_if_begin(k, &c, vec_ok);
			row_vec_phase(k, rc, ph, ridx, w);
			fj_rg_scope_pop(&k->r);
			fj_cg_if_else(k->cg, &c);
			fj_rg_scope_push(&k->r);
		}
		gloop jl;
		fj_gpu_gloop_begin(k, &jl, j0, jend, js, "pos");
		fj_gpu_step_phase(k, rc, ph, ridx, jl.iv);
		fj_gpu_gloop_end(k, &jl);
		if (w)
			fj_gpu_if_end(k, &c);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				block_combine(k, rc, bc, i);
	}
}

/* A block per row. */
fj_status fj_gpu_emit_bpr(gk *k)
{
	redctx rc;
	fj_status st = fj_gpu_red_begin(k, &rc, "", ROW_BLOCK, MIN_BLOCKS);
	if (st != FJ_OK)
		return st;
	blockctx bc;
	gloop rl;
	V ridx[FJ_MAX_RANK];
	block_rows_begin(k, &rc, &bc, &rl, ridx);
	V j0, jend, js;
	fj_gpu_thread_positions(k, &rc, &j0, &jend, &js);
	fj_gpu_bpr_phases(k, &rc, &bc, ridx, j0, jend, js);
	fj_gpu_write_row(k, &rc, ridx, rl.iv, k->tid, k->ntid, bc.tid0);
	fj_gpu_gloop_end(k, &rl);
	return fj_gpu_entry_end(k);
}

/* A block per row with the row in registers: thread t owns positions
 * t + e*ntid (e < REG_E); every body value at those points is evaluated once
 * per row and kept (the evaluator's memo lives in the row's scope), so each
 * phase and the outputs reuse one read of the inputs. The plan uses it for
 * rows up to REG_E * REG_BLOCK elements (positions past REG_E * ntid are
 * still handled, by re-reading); not for argmax/argmin (positions interleave). */

/* The row's positions, then its reduction phases: the kept positions
 * evaluated once, positions from `tail` on (past REG_E * ntid) re-read. */
void fj_gpu_reg_row_reduce(gk *k, redctx *rc, blockctx *bc, const V *ridx, V tail, regrow *g)
{
	const fj_rg_analysis *a = k->a;
	for (int e = 0; e < REG_E; e++) {
		V j = add(k, k->tid, mul(k, k->ntid, i64c(k, e)));
		g->valid[e] = slt(k, j, rc->len);
		g->jpos[e] = sel(k, g->valid[e], j, i64c(k, 0));
		d_point(k, rc, ridx, g->jpos[e], g->didx[e]);
		fj_rg_point_idx(&g->pts[e], rc->drank, g->didx[e]);
		g->dlin[e] = fj_gpu_lin_of(k, rc->dv, g->didx[e], rc->drank);
	}
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			fj_rg_acc_reset(&k->r, &rc->acc[i]);
			const fj_node *rn = &k->body->nodes[a->reds[i]];
			for (int e = 0; e < REG_E; e++) {
				V x = fj_rg_eval(&k->r, rn->opnds[0], &g->pts[e]);
				fj_cg_if c;
				fj_gpu_if_begin(k, &c, g->valid[e]);
				fj_rg_acc_step(&k->r, &rc->acc[i], x, g->jpos[e]);
				fj_gpu_if_end(k, &c);
			}
		}
		gloop tl;
		fj_gpu_gloop_begin(k, &tl, tail, rc->len, k->ntid, "tail");
		fj_gpu_step_phase(k, rc, ph, ridx, tl.iv);
		fj_gpu_gloop_end(k, &tl);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				block_combine(k, rc, bc, i);
	}
}

/* The D-space results at kept position e, converted to their outputs'
 * dtypes (vals[j] for each such result j). */
void fj_gpu_reg_outputs(gk *k, const redctx *rc, const regrow *g, int e, V *vals)
{
	for (uint32_t j = 0; j < k->nout; j++) {
		if (rc->space[j] != 'D')
			continue;
		fj_vid v = k->body->results[j];
		fj_rg_point p;
		if (k->a->vals[v].in_d)
			p = g->pts[e];
		else
			fj_rg_point_lin(&p, k->body->values[v].type.rank, g->dlin[e]);
		vals[j] = fj_cg_convert(k->cg, fj_rg_eval(&k->r, v, &p), k->body->values[v].type.dtype, k->out[j].dtype);
	}
}

fj_status fj_gpu_emit_reg(gk *k)
{
	fj_cg *cg = k->cg;
	redctx rc;
	fj_status st = fj_gpu_red_begin(k, &rc, "_reg8", REG_BLOCK, REG_MIN_BLOCKS);
	if (st != FJ_OK)
		return st;
	blockctx bc;
	gloop rl;
	V ridx[FJ_MAX_RANK];
	block_rows_begin(k, &rc, &bc, &rl, ridx);
	fj_gpu_gloop_no_hoist(&rl);
	V tail = add(k, k->tid, mul(k, k->ntid, i64c(k, REG_E)));
	regrow g;
	fj_gpu_reg_row_reduce(k, &rc, &bc, ridx, tail, &g);
	/* outputs: the row's elements from the kept values, then per-row ones */
	for (int e = 0; e < REG_E; e++) {
		V vals[MAXIO];
		fj_gpu_reg_outputs(k, &rc, &g, e, vals);
		fj_cg_if c;
		fj_gpu_if_begin(k, &c, g.valid[e]);
		for (uint32_t j = 0; j < k->nout; j++)
			if (rc.space[j] == 'D')
				fj_cg_store(cg, &k->out[j], g.dlin[e], vals[j]);
		fj_gpu_if_end(k, &c);
	}
	/* per-row outputs, and row elements past REG_E * ntid */
	fj_gpu_write_row(k, &rc, ridx, rl.iv, tail, k->ntid, bc.tid0);
	fj_gpu_gloop_end(k, &rl);
	return fj_gpu_entry_end(k);
}

/* Outer reductions: a block holds 32 rows (lanes: adjacent rows, which are
 * adjacent in memory when the reduced dims are outer) and Y = ntid/32 groups
 * that split each row's positions (j = group + k*Y); the groups' states are
 * merged through shared memory by group 0, in group order, then shared with
 * the block for the row's outputs. Not for argmax/argmin (interleaved).
 * At most 256 threads: one shared slot per thread and state value. */

/* The accumulators and their per-thread shared slots of a column kernel. */
void fj_gpu_col_setup(gk *k, redctx *rc, V sh[][3])
{
	fj_cg *cg = k->cg;
	for (int i = 0; i < k->a->nreds; i++) {
		fj_rg_acc_init(&k->r, k->a->reds[i], &rc->acc[i]);
		for (int s = 0; s < rc->acc[i].n; s++) {
			char nm[48];
			snprintf(nm, sizeof nm, "col%u", k->nshared++);
			sh[i][s] = cg->target->shared_array(cg, rc->acc[i].ty[s], COL_BLOCK, nm);
		}
	}
}

/* Merges the states of the Y groups of a column kernel (one per thread,
 * lane tx = the row) through shared memory: group 0 merges them in group
 * order, then every thread reads its row's merged state back. All threads
 * of the block must call it (barriers). */
void fj_gpu_col_merge_groups(gk *k, fj_rg_acc *acc, V sh[3], V tx, V ty0, V ny)
{
	fj_cg *cg = k->cg;
	V vals[3];
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++)
		LLVMBuildStore(B, vals[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &k->tid, 1, ""));
	cg->target->barrier(cg);
	fj_cg_if c1;
	fj_gpu_if_begin(k, &c1, ty0);
	gloop ml;
	fj_gpu_gloop_begin(k, &ml, i64c(k, 1), ny, i64c(k, 1), "merge");
	V at = add(k, mul(k, ml.iv, i64c(k, 32)), tx);
	V other[3];
	for (int s = 0; s < acc->n; s++)
		other[s] = LLVMBuildLoad2(B, acc->ty[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &at, 1, ""), "");
	fj_rg_acc_merge(&k->r, acc, other);
	fj_gpu_gloop_end(k, &ml);
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++)
		LLVMBuildStore(B, vals[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &tx, 1, ""));
	fj_gpu_if_end(k, &c1);
	cg->target->barrier(cg);
	for (int s = 0; s < acc->n; s++)
		fj_cg_set(cg, acc->var[s],
		          LLVMBuildLoad2(B, acc->ty[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &tx, 1, ""), ""));
	cg->target->barrier(cg);
}

fj_status fj_gpu_emit_col(gk *k)
{
	redctx rc;
	fj_status st = fj_gpu_red_begin(k, &rc, "_col", COL_BLOCK, 0);
	if (st != FJ_OK)
		return st;
	const fj_rg_analysis *a = k->a;
	V sh[FJ_RG_MAX_REDS][3];
	fj_gpu_col_setup(k, &rc, sh);
	V tx = LLVMBuildAnd(B, k->tid, i64c(k, 31), "tx");
	V ty = LLVMBuildLShr(B, k->tid, i64c(k, 5), "ty");
	V ny = LLVMBuildLShr(B, k->ntid, i64c(k, 5), "ny");
	V ty0 = LLVMBuildICmp(B, LLVMIntEQ, ty, i64c(k, 0), "");
	V tiles = LLVMBuildUDiv(B, add(k, rc.rows, i64c(k, 31)), i64c(k, 32), "");
	gloop tl;
	fj_gpu_gloop_begin(k, &tl, k->ctaid, tiles, k->nctaid, "tile");
	V row = add(k, mul(k, tl.iv, i64c(k, 32)), tx);
	V ok = ult(k, row, rc.rows);
	V rowc = sel(k, ok, row, i64c(k, 0));
	V ridx[FJ_MAX_RANK];
	fj_gpu_unravel(k, rc.dv, rc.rdims, rc.nr, rowc, ridx);
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_reset(&k->r, &rc.acc[i]);
		fj_cg_if c0;
		fj_gpu_if_begin(k, &c0, ok);
		gloop jl;
		fj_gpu_gloop_begin(k, &jl, ty, rc.len, ny, "pos");
		fj_gpu_step_phase(k, &rc, ph, ridx, jl.iv);
		fj_gpu_gloop_end(k, &jl);
		fj_gpu_if_end(k, &c0);
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			fj_gpu_col_merge_groups(k, &rc.acc[i], sh[i], tx, ty0, ny);
			fj_rg_acc_finish(&k->r, &rc.acc[i], rc.len);
		}
	}
	fj_cg_if c2;
	fj_gpu_if_begin(k, &c2, ok);
	fj_gpu_write_row(k, &rc, ridx, row, ty, ny, ty0);
	fj_gpu_if_end(k, &c2);
	fj_gpu_gloop_end(k, &tl);
	return fj_gpu_entry_end(k);
}

/* ---- the family: rows and plan ---- */

static bool takes_rows(const fj_rg_analysis *a) { return a->nreds > 0; }

/* The reductions (reduction_inner/outer, persistent_inner/outer), in entry
 * order; _split is region_gpu_split.c's. */
enum { ROW_BPR, ROW_TPR, ROW_REG, ROW_COL, ROW_SPLIT };
static const fj_gpu_variant rows_variants[] = {
	[ROW_BPR] = {"", NULL, fj_gpu_emit_bpr},                   /* a block per row */
	[ROW_TPR] = {"_tpr", NULL, fj_gpu_emit_tpr},               /* a thread per row */
	[ROW_REG] = {"_reg8", NULL, fj_gpu_emit_reg},              /* a block per row, in registers */
	[ROW_COL] = {"_col", NULL, fj_gpu_emit_col},               /* 32 columns per block */
	[ROW_SPLIT] = {"_split", fj_gpu_split_ok, fj_gpu_emit_split}, /* ... the rows split across blocks */
};

/* Groups of 32 threads of a column kernel over `len` positions: about 64
 * positions per thread, up to 8 groups (COL_BLOCK). */
static unsigned col_groups(int64_t len)
{
	unsigned y = 1;
	while (y < COL_BLOCK / 32 && (int64_t)y * 64 < len)
		y *= 2;
	return y;
}

/* _tpr for short rows and for outer reductions with many rows, _reg8 for
 * rows up to REG_E * REG_BLOCK positions, _col for outer reductions, _split
 * when they have too few columns to fill the GPU, else the main entry.
 * Tests force a variant ("bpr", "tpr", "reg", "col", "split") where it can
 * run the sizes. */
static fj_status rows_choose(const fj_gpu_sizes *s, fj_nvptx_plan *plan)
{
	const fj_rg_analysis *a = s->a;
	const fj_graph *body = a->node->body;
	int64_t rows, len;
	fj_gpu_rows_len(s, &body->values[body->nodes[a->reds[0]].opnds[0]].type, &rows, &len);
	for (int i = 0; i < a->nreds; i++)
		plan->may_fail |= fj_gpu_red_may_fail(body->nodes[a->reds[i]].op, true);
	if (rows <= 0)
		return FJ_OK;
	bool is_inner = a->inner, ordered = a->ordered;
	bool reg_fits = !ordered && len > 0 && len <= REG_E * REG_BLOCK;
	int64_t nsplit = fj_gpu_split_chunks(s, is_inner, ordered, rows, len);
	int v = len <= 16 || (!is_inner && rows >= 2048) ? ROW_TPR : ROW_BPR;
	if (v == ROW_BPR && reg_fits)
		v = ROW_REG;
	if (!is_inner && !ordered && len > 16)
		v = ROW_COL;
	if (fj_gpu_forced(s, "bpr"))
		v = ROW_BPR;
	else if (fj_gpu_forced(s, "tpr"))
		v = ROW_TPR;
	else if (fj_gpu_forced(s, "reg") && reg_fits)
		v = ROW_REG;
	else if (fj_gpu_forced(s, "col") && !ordered)
		v = ROW_COL;
	if (nsplit > 1)
		v = ROW_SPLIT;
	const char *sfx = rows_variants[v].suffix;
	int64_t tiles = fj_gpu_ceil_div(rows, 32);
	unsigned capped_rows = (unsigned)(rows > (1 << 20) ? (1 << 20) : rows);
	unsigned capped_tiles = (unsigned)(tiles > (1 << 20) ? (1 << 20) : tiles);
	switch (v) {
	case ROW_TPR: return fj_gpu_launch(s, plan, sfx, fj_gpu_grid_of(rows, 256), 256, 0);
	case ROW_COL: return fj_gpu_launch(s, plan, sfx, capped_tiles, 32 * col_groups(len), 0);
	case ROW_SPLIT: {
		unsigned y = col_groups(fj_gpu_ceil_div(len, nsplit));
		int64_t grid = tiles * nsplit > (1 << 20) ? (1 << 20) : tiles * nsplit;
		plan->workspace = (size_t)(fj_gpu_split_counter_bytes(tiles) + (int64_t)a->nreds * 3 * tiles * nsplit * 32 * 8);
		return fj_gpu_launch(s, plan, sfx, (unsigned)grid, 32 * y, 0);
	}
	default: /* the main entry and _reg8: a block per row */
		return fj_gpu_launch(s, plan, sfx, capped_rows, fj_gpu_pow2_at_least(fj_gpu_ceil_div(len, REG_E)), 0);
	}
}

const fj_gpu_family fj_gpu_rows_family = {
	"reduction", takes_rows, rows_variants, FJ_ARRAY_LEN(rows_variants), rows_choose,
};
