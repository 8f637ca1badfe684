/* region_host_cols.c -- the column sums of persistent_inner_outer on the
 * host: per-slot partials in the workspace and their merge in slot order. */
#include "codegen/region_host_internal.h"

/* ---- column sums (persistent_inner_outer) ----
 * The parallel space is S slots (dims' last entry, chosen by the runtime);
 * slot s runs the rows [s*N/S, (s+1)*N/S) and adds, in its output pass,
 * every outer reduction's operand at each column into its own partials in
 * the workspace (after a header of FJ_RG_HOST_SLOT_HEADER bytes whose
 * first i64 counts the finished slots, zeroed by the runtime before the
 * call). A slot holds noreds x C f64 (i64 for integer sums) partials, then
 * noreds x C f32 block partials: sums of f32/f16/bf16 data add each row in
 * f32 (16 lanes a vector, no conversion) and move the block into the f64
 * partials every ROWBLK rows -- the error of a ROWBLK-term f32 sum, as the
 * blocked row passes above. The slot that finishes last merges the f64
 * partials in slot order -- deterministic for a given S -- and stores the
 * column results. */
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

/* &partial[i][pos] of the slot at `base` (blk: of the f32 block partials). */
static LLVMValueRef part_at(hctx *h, LLVMValueRef base, int i, LLVMValueRef pos, bool blk)
{
	LLVMValueRef nc = ncols(h);
	LLVMValueRef off = LLVMBuildNSWAdd(BB, LLVMBuildNSWMul(BB, c64(h, i), nc, ""), pos, "");
	if (!blk)
		return LLVMBuildInBoundsGEP2(BB, h->cg->t_i64, base, &off, 1, "");
	LLVMValueRef f32s = LLVMBuildInBoundsGEP2(BB, h->cg->t_i64, base,
	                                          (LLVMValueRef[]){LLVMBuildNSWMul(BB, c64(h, h->a->noreds), nc, "")}, 1, "");
	return LLVMBuildInBoundsGEP2(BB, h->cg->t_f32, f32s, &off, 1, "");
}

/* Adds every outer reduction's operand at D point p (idx) to the slot's
 * partials. */
void fj_rh_col_accumulate(hctx *h, fj_rg_point *p, LLVMValueRef *idx)
{
	if (!h->part)
		return;
	fj_cg *cg = h->cg;
	LLVMValueRef pos = fj_rh_kpos(h, idx);
	for (int i = 0; i < h->a->noreds; i++) {
		fj_vid o = h->body->nodes[h->a->oreds[i]].opnds[0];
		bool blk = part_blocked(h, i);
		LLVMTypeRef ty = blk ? cg->t_f32 : part_type(h, i);
		bool fl = ty != cg->t_i64;
		fj_dtype to = blk ? FJ_DT_F32 : fl ? FJ_DT_F64 : FJ_DT_I64;
		LLVMValueRef x = fj_cg_convert(cg, fj_rg_eval(&h->r, o, p), fj_cg_compute_dtype(h->body->values[o].type.dtype), to);
		LLVMValueRef at = part_at(h, h->part, i, pos, blk);
		LLVMValueRef old = LLVMBuildLoad2(BB, ty, at, "");
		LLVMBuildStore(BB, fl ? LLVMBuildFAdd(BB, old, x, "") : LLVMBuildAdd(BB, old, x, ""), at);
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

/* The bytes of one slot's partials. */
static LLVMValueRef slot_bytes(hctx *h)
{
	return LLVMBuildNSWMul(BB, c64(h, FJ_RG_HOST_SLOT_BYTES * h->a->noreds), ncols(h), "");
}

LLVMValueRef fj_rh_slot_base(hctx *h, LLVMValueRef s)
{
	LLVMValueRef off = LLVMBuildNSWAdd(BB, c64(h, FJ_RG_HOST_SLOT_HEADER), LLVMBuildNSWMul(BB, s, slot_bytes(h), ""), "");
	return LLVMBuildInBoundsGEP2(BB, h->cg->t_i8, h->ws, &off, 1, "");
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
	LLVMValueRef base = fj_rh_slot_base(h, ls.iv);
	for (int i = 0; i < a->noreds; i++) {
		LLVMValueRef v[3] = {LLVMBuildLoad2(BB, part_type(h, i), part_at(h, base, i, lc.iv, false), "")};
		fj_rg_acc_merge(r, &accs[i], v);
	}
	fj_cg_loop_end(cg, &ls);
	for (int i = 0; i < a->noreds; i++)
		fj_rg_acc_finish(r, &accs[i], rows);
	for (uint32_t j = 0; j < h->k->nout; j++) {
		if (out_class(h, j) != OUT_C)
			continue;
		fj_vid v = h->body->results[j];
		fj_rg_point p;
		fj_rg_point_lin(&p, vrank(h, v), lc.iv);
		fj_rg_store(r, &h->out[j], lc.iv, v, &p);
	}
	for (int i = 0; i < a->noreds; i++)
		fj_rg_bind(r, h->body->nodes[a->oreds[i]].res[0], NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
}

/* Zeroes the partials at `base`. */
void fj_rh_part_zero(hctx *h, LLVMValueRef base)
{
	fj_cg *cg = h->cg;
	fj_cg_loop l;
	LLVMValueRef n = LLVMBuildNSWMul(BB, c64(h, FJ_RG_HOST_SLOT_BYTES / 4 * h->a->noreds), ncols(h), "");
	fj_cg_loop_begin(cg, &l, c64(h, 0), n, "zero");
	LLVMBuildStore(BB, fj_cg_i32(cg, 0), LLVMBuildInBoundsGEP2(BB, cg->t_i32, base, &l.iv, 1, ""));
	fj_cg_loop_end(cg, &l);
}

/* The D-output pass of a row: every D-shaped output at every K point, or,
 * with nt, at the points [lo, hi) of the innermost (only) K dim, the
 * outputs nt plans written to their buffers (element lo, at offset off[i]
 * of output i, at byte 0). */
