/* region_host_cols.c -- the column sums of persistent_inner_outer on the
 * host: per-slot partials in the workspace and their merge in slot order. */
#include "codegen/region_host_internal.h"

/* ---- column sums (persistent_inner_outer) ----
 * The parallel space is S slots (dims' last entry, chosen by the runtime);
 * slot s runs the rows [s*N/S, (s+1)*N/S) and adds, in its output pass,
 * every outer reduction's operand at each column into its own partials in
 * the workspace, with the layout and merge order of the region plan's
 * column slots (region.h, fj_rg_col_slot): after a header of
 * FJ_RG_HOST_SLOT_HEADER bytes whose first i64 counts the finished slots
 * (zeroed by the runtime before the call), the S slots' f64 (i64 for
 * integer sums) states, then as many f32 block partials, at the same
 * indexes: sums of f32/f16/bf16 data add each row in f32 (16 lanes a
 * vector, no conversion) and move the block into the f64 states every
 * ROWBLK rows -- the error of a ROWBLK-term f32 sum, as the blocked row
 * passes above. The slot that finishes last merges the states in slot
 * order -- deterministic for a given S -- and stores the column results. */
enum { ROWBLK = 16 };

/* Does outer reduction i add f32 row blocks (else straight into f64/i64)? */
static bool part_blocked(hctx *h, int i)
{
	fj_vid o = h->body->nodes[h->a->oreds[i]].opnds[0];
	return fj_cg_compute_dtype(h->body->values[o].type.dtype) == FJ_DT_F32;
}

/* The type of outer reduction i's partials (f64 or i64). */
static LLVMTypeRef part_type(hctx *h, int i)
{
	fj_vid o = h->body->nodes[h->a->oreds[i]].opnds[0];
	return fj_dtype_is_float(h->body->values[o].type.dtype) ? h->cg->t_f64 : h->cg->t_i64;
}

static LLVMValueRef ncols(hctx *h) { return fj_rh_red_count(h); }

/* The slots' states (after the header), or (blk) their f32 block partials
 * (after the states). */
static LLVMValueRef slot_area(hctx *h, bool blk)
{
	LLVMValueRef hdr = c64(h, FJ_RG_HOST_SLOT_HEADER);
	LLVMValueRef states = LLVMBuildInBoundsGEP2(BB, h->cg->t_i8, h->ws, &hdr, 1, "");
	if (!blk)
		return states;
	LLVMValueRef n = LLVMBuildNSWMul(BB, LLVMBuildNSWMul(BB, h->nslots, c64(h, h->a->noreds), ""), ncols(h), "");
	return LLVMBuildInBoundsGEP2(BB, h->cg->t_i64, states, &n, 1, "");
}

/* &partial[i][pos] of slot s (blk: of the f32 block partials). */
static LLVMValueRef part_at(hctx *h, LLVMValueRef s, int i, LLVMValueRef pos, bool blk)
{
	return fj_rg_col_slot(&h->r, slot_area(h, blk), blk ? h->cg->t_f32 : h->cg->t_i64, s, i, ncols(h), pos);
}

/* The operand of every outer reduction at D point p, as its partials add
 * it (f32 for the blocked ones, else f64 or i64) into vals[i]. */
void fj_rh_col_values(hctx *h, fj_rg_point *p, LLVMValueRef *vals)
{
	for (int i = 0; h->part && i < h->a->noreds; i++) {
		fj_vid o = h->body->nodes[h->a->oreds[i]].opnds[0];
		fj_dtype to = part_blocked(h, i) ? FJ_DT_F32 : part_type(h, i) == h->cg->t_f64 ? FJ_DT_F64 : FJ_DT_I64;
		vals[i] = fj_cg_convert(h->cg, fj_rg_eval(&h->r, o, p), fj_cg_compute_dtype(h->body->values[o].type.dtype), to);
	}
}

/* Adds the values of n rows (fj_rh_col_values, in row order) to the slot's
 * partials at the K position of idx: one load and one store per partial,
 * the sum ((p + v0) + v1) ... as n single-row adds would round it. */
void fj_rh_col_add(hctx *h, LLVMValueRef *idx, LLVMValueRef (*vals)[FJ_RG_MAX_REDS], int n)
{
	if (!h->part)
		return;
	fj_cg *cg = h->cg;
	LLVMValueRef pos = fj_rh_kpos(h, idx);
	for (int i = 0; i < h->a->noreds; i++) {
		bool blk = part_blocked(h, i);
		LLVMTypeRef ty = blk ? cg->t_f32 : part_type(h, i);
		LLVMValueRef at = part_at(h, h->part, i, pos, blk);
		LLVMValueRef acc = LLVMBuildLoad2(BB, ty, at, "");
		for (int j = 0; j < n; j++)
			acc = ty != cg->t_i64 ? LLVMBuildFAdd(BB, acc, vals[j][i], "") : LLVMBuildAdd(BB, acc, vals[j][i], "");
		LLVMBuildStore(BB, acc, at);
	}
}

/* Moves the f32 block partials into the f64 ones (and zeroes them). */
static void col_flush(hctx *h)
{
	fj_cg *cg = h->cg;
	for (int i = 0; i < h->a->noreds; i++) {
		if (!part_blocked(h, i))
			continue;
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, c64(h, 0), ncols(h), "flush");
		LLVMValueRef b = part_at(h, h->part, i, l.iv, true), d = part_at(h, h->part, i, l.iv, false);
		LLVMValueRef x = LLVMBuildFPExt(BB, LLVMBuildLoad2(BB, cg->t_f32, b, ""), cg->t_f64, "");
		LLVMBuildStore(BB, LLVMBuildFAdd(BB, LLVMBuildLoad2(BB, cg->t_f64, d, ""), x, ""), d);
		LLVMBuildStore(BB, LLVMConstReal(cg->t_f32, 0), b);
		fj_cg_loop_end(cg, &l);
		fj_rh_vector_width(h, &l, 0);
	}
}

/* After the row `row` of [rlo, rhi): flushes the block partials every
 * ROWBLK rows and after the slot's last row. */
void fj_rh_col_row_done(hctx *h, LLVMValueRef row, LLVMValueRef rlo, LLVMValueRef rhi)
{
	bool any = false;
	for (int i = 0; h->part && i < h->a->noreds; i++)
		any |= part_blocked(h, i);
	if (!any)
		return;
	LLVMValueRef next = LLVMBuildNSWAdd(BB, row, c64(h, 1), "");
	LLVMValueRef full = LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildSRem(BB, LLVMBuildNSWSub(BB, next, rlo, ""), c64(h, ROWBLK), ""),
	                                  c64(h, 0), "");
	fj_cg_if c;
	fj_cg_if_begin(h->cg, &c, LLVMBuildOr(BB, full, LLVMBuildICmp(BB, LLVMIntEQ, next, rhi, ""), ""));
	col_flush(h);
	fj_cg_if_end(h->cg, &c);
}

/* The last slot: merges the partials of all S slots in order, binds the
 * outer reductions' results and stores the column outputs. */
void fj_rh_col_merge(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_rg_analysis *a = h->a;
	fj_rg_acc accs[FJ_RG_MAX_REDS];
	for (int i = 0; i < a->noreds; i++)
		fj_rg_acc_init(r, a->oreds[i], &accs[i]);
	LLVMValueRef rows = c64(h, 1);
	for (int d = 0; d < a->dom->rank; d++)
		if (!(a->kmask & (1u << d)))
			rows = LLVMBuildNSWMul(BB, rows, fj_rg_dim(r, a->dom_v, d), "");
	fj_cg_loop lc;
	fj_cg_loop_begin(cg, &lc, c64(h, 0), ncols(h), "col");
	fj_rg_scope_push(r);
	for (int i = 0; i < a->noreds; i++)
		fj_rg_acc_reset(r, &accs[i]);
	fj_cg_loop ls;
	fj_cg_loop_begin(cg, &ls, c64(h, 0), h->nslots, "slot");
	for (int i = 0; i < a->noreds; i++) {
		LLVMValueRef v[3] = {LLVMBuildLoad2(BB, part_type(h, i), part_at(h, ls.iv, i, lc.iv, false), "")};
		fj_rg_acc_merge(r, &accs[i], v);
	}
	fj_cg_loop_end(cg, &ls);
	fj_rg_col_finish(r, accs, rows);
	fj_rg_col_store(r, lc.iv, NULL);
	for (int i = 0; i < a->noreds; i++)
		fj_rg_bind(r, h->body->nodes[a->oreds[i]].res[0], NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
}

/* Zeroes the states and block partials of slot s. */
void fj_rh_part_zero(hctx *h, LLVMValueRef s)
{
	fj_cg *cg = h->cg;
	LLVMValueRef n = LLVMBuildNSWMul(BB, c64(h, h->a->noreds), ncols(h), "");
	for (int blk = 0; blk < 2; blk++) {
		LLVMValueRef base = part_at(h, s, 0, c64(h, 0), blk);
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, c64(h, 0), n, "zero");
		LLVMTypeRef ty = blk ? cg->t_f32 : cg->t_i64;
		LLVMBuildStore(BB, LLVMConstNull(ty), LLVMBuildInBoundsGEP2(BB, ty, base, &l.iv, 1, ""));
		fj_cg_loop_end(cg, &l);
	}
}

/* The D-output pass of a row: every D-shaped output at every K point, or,
 * with nt, at the points [lo, hi) of the innermost (only) K dim, the
 * outputs nt plans written to their buffers (element lo, at offset off[i]
 * of output i, at byte 0). */
