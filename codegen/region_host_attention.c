/* region_host_attention.c -- the host template of attention regions
 * (schedule attention: O = softmax(f(Q K)) V, the pattern of
 * ir/attention.c): one flash-attention kernel, the scores and the weights
 * never in memory, only one block of them in L1.
 *
 * Q: [B, M, Dk], K: [B, Dk, N] (mm1's operands: usually K^T, a transpose
 * of the keys read in place), V: [B, N, Dv]; rank 2 without the batch.
 * Every operand element comes from the evaluator (region.h), so reshapes,
 * transposes and converts in front of the matmuls work as anywhere.
 *
 * Per call (a range of tiles, as the matmul template: FJ_CG_PAR_PER_THREAD
 * over the output, tiles (batch, MB rows) in that order), one heap block:
 *   Kp  K of the current batch as NR-column micro-panels [k][NR] (columns
 *       past N are zeros), packed when the batch changes;
 *   Vp  V of the current batch as NR-column panels [n][NR] (columns past
 *       Dv are zeros), packed with Kp;
 *   Qp  the tile's MB rows of Q as MR-row micro-panels [k][MR];
 *   Sb  MB x NB scores, then weights, of the current key block;
 *   Oa  MB x Dv' accumulators (Dv' = Dv rounded up to NR), in NR-column
 *       panels; m, l: per row, the running max and sum.
 * Per tile, per block of NB keys (the online softmax of FlashAttention,
 * Dao et al. 2022, Algorithm 1):
 *   Sb = Qp x Kp (the matmul micro-kernel, fj_rg_micro_emit);
 *   per row: x = the score chain at each score (the evaluator, with S bound
 *       to the score: the scale, the masks), kept in Sb; the block's max
 *       (NaN-propagating, as prims.amax), m' = max(m, block max),
 *       e = the region's own E = exp(X - MX) with MX bound to m' (to 0
 *       when m' is -inf: a row masked so far adds nothing), kept in Sb;
 *       a = exp(m - m'), l = l a + sum(e), Oa row *= a (in three passes
 *       over the rows: see "the online softmax of a block" below);
 *   Oa += Sb x Vp (the micro-kernel again, k over the block's keys), left
 *       out when no row of the tile has a key of the block that is not -inf
 *       (a causal mask's upper blocks) and the block's V is finite (vfin,
 *       noted when V is packed): its weights are all exactly 0, and only a
 *       non-finite V would make 0 x V anything but nothing.
 * A block that a mask such as the causal one removes whatever the scores
 * are is skipped whole, Q K^T included, on the same V condition (found by
 * the score chain alone: "blocks a mask removes" below).
 * Then O = Oa / l per row, bound as mm2's value, and every result stored
 * through the region's epilogue (the reshape back to heads, a conversion).
 * A row every key of which is -inf gives 0 / 0 = NaN, as softmax does; a
 * NaN score gives NaN. The order of the sums differs from the three
 * kernels' (P = E / L rounded, then P V): results agree to the matmul's
 * tolerance, not bit for bit.
 *
 * Sizes: MR x NRV vectors per micro-tile (12 x 2 x 16 f32 with AVX-512,
 * or 6 x 4 x 16 for most head sizes, see the kernel; 6 x 2 x 8 with
 * AVX2), MB = 24 rows, NB = 128 keys: Sb is
 * 12 KiB, Oa 6 KiB for Dv = 64; Kp and Vp, N x Dk and N x Dv floats, stay
 * in L2 for a few thousand keys. An empty key dim (N = 0) is the softmax of
 * nothing: FJ_KERR_VALUE, as prims.amax of no element.
 */
#include <math.h>
#include <string.h>

#include "codegen/region_host_internal.h"

/* IL: the interleave of the two per-score loops (the score chain and max,
 * the exp and sum). Two, not the row kernels' four (FJ_CG_INTERLEAVE): the
 * kernel compiled in 290-360 ms instead of 325-450 (it is one kernel where
 * the three it replaces compiled in parallel), and ran as fast (Zen 4, 2
 * threads, [8,512,64]: 3.10-3.19 against 3.16-3.52 ms). */
enum { MB = 24, NB = 128, IL = 2 };

typedef struct att {
	hctx *h;
	fj_cg *cg;
	fj_rg *r;
	fj_attn m;
	fj_vid qv, kv, vv, ov;  /* Q, K (mm1), V (mm2's second operand), O (mm2's result) */
	int rank, xrank;        /* of the matmuls (2 or 3), of the scores X */
	int mr, nr;             /* micro-tile rows, columns (NRV x W) */
	fj_rg_micro us, uo;     /* the micro-kernel for Sb = Qp Kp, for Oa += Sb Vp */
	LLVMTypeRef f32;
	LLVMValueRef batch, M, N, Dk, Dv, Dvp, npan; /* npan: key panels (N rounded up to NR, / NR) */
	LLVMValueRef vpan;      /* value panels: Dv' / NR */
	LLVMValueRef kp, vp, qp, sb, oa, mrow, lrow, vfin;
	LLVMValueRef bm, ms, alpha; /* per row: the softmax's block max, MS and exp(m - MS) (passes 1 -> 2 -> 3) */
	LLVMValueRef bmax, bnan, lsum; /* variables: a block's max, its NaN flag, its sum */
	LLVMValueRef live;      /* variable (i8): a row of the tile has a key of the block that is not -inf */
	bool precheck;          /* blocks X masks whatever the scores are skipped whole (mask_precheck) */
	LLVMValueRef nlive;     /* variable (f32): the points of such a block left live */
} att;

#undef BB
#define BB (t->cg->b)

static LLVMValueRef k64(att *t, int64_t v) { return fj_cg_i64(t->cg, v); }
static LLVMValueRef add(att *t, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(BB, a, b, ""); }
static LLVMValueRef mul(att *t, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWMul(BB, a, b, ""); }
static LLVMValueRef smin(att *t, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, a, b, ""), a, b, "");
}
static LLVMValueRef cdiv(att *t, LLVMValueRef a, int64_t b)
{
	return LLVMBuildUDiv(BB, add(t, a, k64(t, b - 1)), k64(t, b), "");
}
static LLVMValueRef at(att *t, LLVMValueRef base, LLVMValueRef off)
{
	return LLVMBuildInBoundsGEP2(BB, t->f32, base, &off, 1, "");
}
static LLVMValueRef ld(att *t, LLVMValueRef p)
{
	LLVMValueRef x = LLVMBuildLoad2(BB, t->f32, p, "");
	LLVMSetAlignment(x, 4);
	return x;
}
static void st(att *t, LLVMValueRef p, LLVMValueRef x) { LLVMSetAlignment(LLVMBuildStore(BB, x, p), 4); }
static LLVMValueRef f32c(att *t, double x) { return LLVMConstReal(t->f32, x); }

/* Operand v (Q, K or V) at (batch b, row, col), as f32. */
static LLVMValueRef operand_at(att *t, fj_vid v, LLVMValueRef b, LLVMValueRef row, LLVMValueRef col)
{
	fj_rg_point p;
	fj_rg_batch_point(&p, t->rank, b, row, col);
	return fj_rg_eval_as(t->r, v, &p, FJ_DT_F32);
}

/* ---- packing ---- */

/* dst[base + k * stride] = (ok ? v at (b, row, k) : 0) for k < Dk, or, with
 * `cols`, v at (b, k, row) (K's column `row`): one packed run along Dk,
 * read along the operand's unit stride (Q's rows, K^T's columns), stored
 * `stride` apart (scalar stores, as the matmul's transposed packing). */
static void pack_run(att *t, fj_vid v, bool cols, LLVMValueRef b, LLVMValueRef row, LLVMValueRef ok,
                     LLVMValueRef dst, LLVMValueRef base, int64_t stride)
{
	fj_cg_loop lk;
	fj_cg_loop_begin(t->cg, &lk, k64(t, 0), t->Dk, "pk");
	fj_rg_scope_push(t->r);
	LLVMValueRef e = cols ? operand_at(t, v, b, lk.iv, row) : operand_at(t, v, b, row, lk.iv);
	st(t, at(t, dst, add(t, base, mul(t, lk.iv, k64(t, stride)))), LLVMBuildSelect(BB, ok, e, f32c(t, 0), ""));
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(t->cg, &lk);
	fj_cg_loop_no_vectorize(t->cg, &lk);
}

/* Kp and Vp for batch b. */
static void pack_kv(att *t, LLVMValueRef b)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	LLVMValueRef nlast = LLVMBuildNSWSub(BB, t->N, k64(t, 1), "");
	fj_cg_loop lj, lc;
	fj_cg_loop_begin(cg, &lj, k64(t, 0), t->npan, "kpan");
	fj_cg_loop_begin(cg, &lc, k64(t, 0), k64(t, t->nr), "kcol");
	fj_rg_scope_push(r);
	LLVMValueRef col = add(t, mul(t, lj.iv, k64(t, t->nr)), lc.iv);
	LLVMValueRef ok = LLVMBuildICmp(BB, LLVMIntSLT, col, t->N, "");
	LLVMValueRef colc = smin(t, col, nlast);
	LLVMValueRef base = add(t, mul(t, lj.iv, mul(t, t->Dk, k64(t, t->nr))), lc.iv);
	pack_run(t, t->kv, true, b, colc, ok, t->kp, base, t->nr);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
	fj_cg_loop_end(cg, &lj);
	/* V: panel jv at jv * N * NR, row n at n * NR (unit stride both ways) */
	LLVMValueRef dlast = LLVMBuildNSWSub(BB, t->Dv, k64(t, 1), "");
	fj_cg_loop ln, lp, lv;
	fj_cg_loop_begin(cg, &ln, k64(t, 0), t->N, "vrow");
	fj_rg_scope_push(r);
	fj_cg_loop_begin(cg, &lp, k64(t, 0), t->vpan, "vpan");
	LLVMValueRef c0 = mul(t, lp.iv, k64(t, t->nr));
	LLVMValueRef vrow = at(t, t->vp, mul(t, add(t, mul(t, lp.iv, t->N), ln.iv), k64(t, t->nr)));
	fj_cg_loop_begin(cg, &lv, k64(t, 0), k64(t, t->nr), "vcol");
	fj_rg_scope_push(r);
	LLVMValueRef vc = add(t, c0, lv.iv);
	LLVMValueRef ok2 = LLVMBuildICmp(BB, LLVMIntSLT, vc, t->Dv, "");
	LLVMValueRef x2 = LLVMBuildSelect(BB, ok2, operand_at(t, t->vv, b, ln.iv, smin(t, vc, dlast)), f32c(t, 0), "");
	st(t, at(t, vrow, lv.iv), x2);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lv);
	fj_cg_loop_end(cg, &lp);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &ln);
	/* vfin[block]: is every V element of the block of NB keys finite? (a
	 * block of zero weights then adds exactly nothing: see tile) */
	fj_cg_loop lb, lq, lk;
	fj_cg_loop_begin(cg, &lb, k64(t, 0), cdiv(t, t->N, NB), "vblk");
	LLVMValueRef k0 = mul(t, lb.iv, k64(t, NB)), k1 = smin(t, add(t, k0, k64(t, NB)), t->N);
	LLVMValueRef fin = fj_cg_var(cg, cg->t_i8, NULL, "vfin");
	fj_cg_set(cg, fin, LLVMConstInt(cg->t_i8, 1, 0));
	fj_cg_loop_begin(cg, &lq, k64(t, 0), t->vpan, "vfpan");
	LLVMValueRef pbase = mul(t, mul(t, lq.iv, t->N), k64(t, t->nr));
	fj_cg_loop_begin(cg, &lk, mul(t, k0, k64(t, t->nr)), mul(t, k1, k64(t, t->nr)), "vfel");
	LLVMValueRef x = ld(t, at(t, t->vp, add(t, pbase, lk.iv)));
	/* finite: x - x == 0 (inf - inf and NaN are NaN) */
	LLVMValueRef fx = LLVMBuildFCmp(BB, LLVMRealOEQ, LLVMBuildFSub(BB, x, x, ""), f32c(t, 0), "");
	fj_cg_set(cg, fin, LLVMBuildSelect(BB, fx, fj_cg_get(cg, fin, cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), ""));
	fj_cg_loop_end(cg, &lk);
	fj_cg_loop_hints(cg, &lk, t->us.w, IL);
	fj_cg_loop_end(cg, &lq);
	LLVMSetAlignment(LLVMBuildStore(BB, fj_cg_get(cg, fin, cg->t_i8),
	                                LLVMBuildInBoundsGEP2(BB, cg->t_i8, t->vfin, &lb.iv, 1, "")), 1);
	fj_cg_loop_end(cg, &lb);
}

/* Qp: rows i0 .. i0 + MB of batch b (rows past mlen are zeros), as
 * micro-panels [k][MR]: row i of panel p at p * Dk * MR + k * MR + i. */
static void pack_q(att *t, LLVMValueRef b, LLVMValueRef i0, LLVMValueRef mlen)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	LLVMValueRef mlast = LLVMBuildNSWSub(BB, t->M, k64(t, 1), "");
	fj_cg_loop li;
	fj_cg_loop_begin(cg, &li, k64(t, 0), k64(t, MB), "qrow");
	fj_rg_scope_push(r);
	LLVMValueRef ok = LLVMBuildICmp(BB, LLVMIntSLT, li.iv, mlen, "");
	LLVMValueRef row = smin(t, add(t, i0, li.iv), mlast);
	LLVMValueRef p = LLVMBuildUDiv(BB, li.iv, k64(t, t->mr), ""), i = LLVMBuildURem(BB, li.iv, k64(t, t->mr), "");
	LLVMValueRef base = add(t, mul(t, p, mul(t, t->Dk, k64(t, t->mr))), i);
	pack_run(t, t->qv, false, b, row, ok, t->qp, base, t->mr);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &li);
}

/* ---- the online softmax of one row of a block ---- */

/* The point of X for (batch b, row, key col): its lead dims (B unravelled
 * over X's dims before the last two, in lead[]) and its linear index. */
static void x_point(att *t, fj_rg_point *p, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef row,
                    LLVMValueRef col)
{
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int d = 0; d < t->xrank - 2; d++)
		idx[d] = lead[d];
	idx[t->xrank - 2] = row;
	idx[t->xrank - 1] = col;
	fj_rg_point_idx(p, t->xrank, idx);
	p->lin = add(t, mul(t, add(t, mul(t, b, t->M), row), t->N), col);
}

/* A NaN-propagating max step (prims.amax): NaNs are flagged and skipped, so
 * that the loop-carried compare is a plain vmaxps (region_host_inner.c's
 * block accumulators do the same). */
static void max_step(att *t, LLVMValueRef x)
{
	fj_cg *cg = t->cg;
	LLVMValueRef isnan = LLVMBuildFCmp(BB, LLVMRealUNO, x, x, "");
	LLVMValueRef xs = LLVMBuildSelect(BB, isnan, f32c(t, -INFINITY), x, "");
	LLVMValueRef acc = fj_cg_get(cg, t->bmax, t->f32);
	LLVMValueRef better = LLVMBuildFCmp(BB, LLVMRealOGT, xs, acc, "");
	LLVMValueRef next = LLVMBuildSelect(BB, better, xs, acc, "");
	LLVMSetFastMathFlags(better, LLVMFastMathNoNaNs | LLVMFastMathNoSignedZeros);
	LLVMSetFastMathFlags(next, LLVMFastMathNoNaNs | LLVMFastMathNoSignedZeros);
	fj_cg_set(cg, t->bmax, next);
	fj_cg_set(cg, t->bnan, LLVMBuildSelect(BB, isnan, LLVMConstInt(cg->t_i8, 1, 0), fj_cg_get(cg, t->bnan, cg->t_i8), ""));
}

/* The online softmax of a block runs in three passes over the tile's
 * rows. A row's work is two loops over the keys, each ending in a
 * horizontal max or sum, with scalar steps between them (m', the exp of
 * m - m'): one long chain per row, and one row at a time from start to
 * end left the FMA ports waiting on it. Here the scalar steps run for
 * all the rows at once (pass 2, a loop the vectoriser widens), and the
 * rows' loops over the keys (passes 1 and 3) depend on nothing of the
 * row before. Sapphire Rapids, 8 x [512, 64], alternating processes: 1
 * thread 4.72-4.82 -> 4.26-4.37 ms, 2 threads 2.37-2.46 -> 2.17-2.20
 * (two rows per loop over the keys as well: as fast, and 13 % longer to
 * compile). */

/* Pass 1, row rr of the tile (row `row` of batch b): the score chain at
 * each score of the block of keys [jc, jc + nlen), kept in Sb, and the
 * row's block max in bm (NaN when a score is NaN, as prims.amax); `live`
 * notes a row that has a key that is not -inf. */
static void chain_row(att *t, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef rr, LLVMValueRef row,
                      LLVMValueRef jc, LLVMValueRef nlen)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	LLVMValueRef srow = at(t, t->sb, mul(t, rr, k64(t, NB)));
	fj_cg_set(cg, t->bmax, f32c(t, -INFINITY));
	fj_cg_set(cg, t->bnan, LLVMConstInt(cg->t_i8, 0, 0));
	fj_cg_loop lj;
	fj_cg_loop_begin(cg, &lj, k64(t, 0), nlen, "sx");
	fj_rg_scope_push(r);
	LLVMValueRef sp = at(t, srow, lj.iv);
	fj_rg_bind(r, t->m.s, ld(t, sp));
	fj_rg_point p;
	x_point(t, &p, lead, b, row, add(t, jc, lj.iv));
	LLVMValueRef x = fj_rg_eval_as(r, t->m.x, &p, FJ_DT_F32);
	st(t, sp, x);
	max_step(t, x);
	fj_rg_bind(r, t->m.s, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lj);
	fj_cg_loop_hints(cg, &lj, t->us.w, IL);
	LLVMValueRef anynan = LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(cg, t->bnan, cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), "");
	LLVMValueRef bm = LLVMBuildSelect(BB, anynan, f32c(t, NAN), fj_cg_get(cg, t->bmax, t->f32), "");
	LLVMValueRef dead = LLVMBuildFCmp(BB, LLVMRealOEQ, bm, f32c(t, -INFINITY), ""); /* false for NaN */
	fj_cg_set(cg, t->live, LLVMBuildSelect(BB, dead, fj_cg_get(cg, t->live, cg->t_i8), LLVMConstInt(cg->t_i8, 1, 0), ""));
	st(t, at(t, t->bm, rr), bm);
}

/* Pass 2, every row of the tile: m' = max(m, block max), NaN from either
 * side; MS = m' (0 when m' is -inf: a row masked so far adds nothing) and
 * alpha = exp(m - MS) kept for pass 3; m = m'. */
static void rescale_rows(att *t, LLVMValueRef mlen)
{
	fj_cg *cg = t->cg;
	fj_cg_loop lr;
	fj_cg_loop_begin(cg, &lr, k64(t, 0), mlen, "sm");
	LLVMValueRef mp = at(t, t->mrow, lr.iv), mold = ld(t, mp), bm = ld(t, at(t, t->bm, lr.iv));
	LLVMValueRef keep = LLVMBuildOr(BB, LLVMBuildFCmp(BB, LLVMRealUNO, mold, mold, ""),
	                                LLVMBuildFCmp(BB, LLVMRealOGT, mold, bm, ""), "");
	LLVMValueRef mnew = LLVMBuildSelect(BB, keep, mold, bm, "");
	LLVMValueRef msafe = LLVMBuildSelect(BB, LLVMBuildFCmp(BB, LLVMRealOEQ, mnew, f32c(t, -INFINITY), ""), f32c(t, 0),
	                                     mnew, "");
	st(t, at(t, t->ms, lr.iv), msafe);
	st(t, at(t, t->alpha, lr.iv), fj_cg_math1(cg, FJ_MATH_EXP, LLVMBuildFSub(BB, mold, msafe, "")));
	st(t, mp, mnew);
	fj_cg_loop_end(cg, &lr);
}

/* Pass 3, row rr: the weights, the region's E at each score with MX bound
 * to the row's MS, kept in Sb; l = l alpha + sum(e) and the row of Oa
 * times alpha. */
static void weight_row(att *t, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef rr, LLVMValueRef row,
                       LLVMValueRef jc, LLVMValueRef nlen)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	LLVMValueRef srow = at(t, t->sb, mul(t, rr, k64(t, NB)));
	fj_rg_bind(r, t->m.mx, ld(t, at(t, t->ms, rr)));
	fj_cg_set(cg, t->lsum, f32c(t, 0));
	fj_cg_loop le;
	fj_cg_loop_begin(cg, &le, k64(t, 0), nlen, "se");
	fj_rg_scope_push(r);
	LLVMValueRef ep = at(t, srow, le.iv);
	fj_rg_point p;
	x_point(t, &p, lead, b, row, add(t, jc, le.iv));
	fj_rg_bind_at(r, t->m.x, &p, ld(t, ep));
	LLVMValueRef e = fj_rg_eval_as(r, t->m.e, &p, FJ_DT_F32);
	st(t, ep, e);
	LLVMValueRef sum = LLVMBuildFAdd(BB, fj_cg_get(cg, t->lsum, t->f32), e, "");
	LLVMSetFastMathFlags(sum, LLVMFastMathAllowReassoc);
	fj_cg_set(cg, t->lsum, sum);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &le);
	fj_cg_loop_hints(cg, &le, t->us.w, IL);
	fj_rg_bind(r, t->m.mx, NULL);
	LLVMValueRef lp = at(t, t->lrow, rr), alpha = ld(t, at(t, t->alpha, rr));
	st(t, lp, LLVMBuildFAdd(BB, LLVMBuildFMul(BB, ld(t, lp), alpha, ""), fj_cg_get(cg, t->lsum, t->f32), ""));
	/* Oa's row times alpha: NR columns in each panel */
	fj_cg_loop lv, lc;
	fj_cg_loop_begin(cg, &lv, k64(t, 0), t->vpan, "apan");
	LLVMValueRef orow = at(t, t->oa, add(t, mul(t, lv.iv, k64(t, (int64_t)MB * t->nr)), mul(t, rr, k64(t, t->nr))));
	fj_cg_loop_begin(cg, &lc, k64(t, 0), k64(t, t->nr), "acol");
	LLVMValueRef op = at(t, orow, lc.iv);
	st(t, op, LLVMBuildFMul(BB, ld(t, op), alpha, ""));
	fj_cg_loop_end(cg, &lc);
	fj_cg_loop_end(cg, &lv);
}

typedef void row_fn(att *t, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef rr, LLVMValueRef row,
                    LLVMValueRef jc, LLVMValueRef nlen);

/* fn over the tile's rows i0 .. i0 + mlen of batch b. */
static void each_row(att *t, row_fn *fn, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef i0, LLVMValueRef mlen,
                     LLVMValueRef jc, LLVMValueRef nlen)
{
	fj_cg_loop lr;
	fj_cg_loop_begin(t->cg, &lr, k64(t, 0), mlen, "srow");
	fj_rg_scope_push(t->r);
	fn(t, lead, b, lr.iv, add(t, i0, lr.iv), jc, nlen);
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(t->cg, &lr);
}

/* The row values of a logsumexp beside the softmax (ir/attention.c) at
 * row `row` of batch b: MX bound to the row's max m, the logsumexp's sum
 * S2 = sum exp(X - MS) to l (MS is m when m is finite; both are 0 when m is
 * -inf), or to +inf when m is (MS is then 0, and the sum of exp(X) holds
 * an exp(+inf)); every R result evaluated from them and stored. */
static void row_outputs(att *t, LLVMValueRef b, LLVMValueRef row, LLVMValueRef m, LLVMValueRef l)
{
	fj_rg *r = t->r;
	fj_rg_bind(r, t->m.mx, m);
	if (t->m.s2 != FJ_NOVAL) {
		LLVMValueRef pinf = LLVMBuildFCmp(BB, LLVMRealOEQ, m, f32c(t, INFINITY), "");
		fj_rg_bind(r, t->m.s2, LLVMBuildSelect(BB, pinf, f32c(t, INFINITY), l, ""));
	}
	LLVMValueRef idx[2];
	int n = 0;
	if (t->rank == 3)
		idx[n++] = b;
	idx[n++] = row;
	fj_rg_point p;
	fj_rg_point_idx(&p, n, idx);
	p.lin = add(t, mul(t, b, t->M), row);
	fj_rh_store_outputs(t->h, OUT_R, &p);
	fj_rg_bind(r, t->m.mx, NULL);
	if (t->m.s2 != FJ_NOVAL)
		fj_rg_bind(r, t->m.s2, NULL);
}

/* ---- blocks a mask removes ----
 * A causal mask (where(col <= row, S, -inf), the bridge's is_causal) makes
 * X -inf at every point of the blocks above the diagonal whatever the
 * scores are: their weights are exactly 0, and the block changes nothing
 * (m and l stay, Oa is multiplied by exp(m - m) = 1, or by 0 while it is
 * still 0) but where V is not finite (0 x inf: the vfin rule below). Such
 * blocks are found before Q K^T, by the chain alone: X evaluated with S
 * bound to NaN. Every step from S to X either carries a NaN through
 * (arithmetic, conversions between floats, layout) or is a where whose
 * condition S does not reach, so at each point X does not depend on S at
 * all (a where dropped it), or X(NaN) is NaN: X(NaN) = -inf means -inf for
 * every score. The check is a few ops per score where Q K^T is Dk
 * multiply-adds. An additive -inf mask is not such a step (S = +inf gives
 * NaN there, not -inf), so it keeps the score pass. */

/* Does the chain from S to X pass only such steps (fj_attn_drops_only)? */
static bool mask_precheck(att *t)
{
	const fj_graph *g = t->h->body;
	size_t sz = 2 * (size_t)(g->nvalues ? g->nvalues : 1);
	uint8_t *scratch = fj_alloc(t->cg->ctx, sz);
	if (!scratch)
		return false; /* no pre-check: the plain path */
	bool ok = fj_attn_drops_only(g, &t->m.s, 1, t->m.x, scratch);
	fj_free(t->cg->ctx, scratch, sz);
	return ok;
}

/* Does the block [jc, jc + nlen) keep a live point in the tile's rows (X
 * with S bound to NaN not -inf somewhere)? A count of such points in f32
 * (at most MB x NB: exact), a sum that vectorises. */
static LLVMValueRef block_live(att *t, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef i0, LLVMValueRef mlen,
                               LLVMValueRef jc, LLVMValueRef nlen)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	fj_cg_set(cg, t->nlive, f32c(t, 0));
	fj_cg_loop lr, lj;
	fj_cg_loop_begin(cg, &lr, k64(t, 0), mlen, "prow");
	fj_rg_scope_push(r);
	LLVMValueRef row = add(t, i0, lr.iv);
	fj_cg_loop_begin(cg, &lj, k64(t, 0), nlen, "pkey");
	fj_rg_scope_push(r);
	fj_rg_bind(r, t->m.s, f32c(t, NAN));
	fj_rg_point p;
	x_point(t, &p, lead, b, row, add(t, jc, lj.iv));
	LLVMValueRef x = fj_rg_eval_as(r, t->m.x, &p, FJ_DT_F32);
	LLVMValueRef dead = LLVMBuildFCmp(BB, LLVMRealOEQ, x, f32c(t, -INFINITY), "");
	LLVMValueRef s = LLVMBuildFAdd(BB, fj_cg_get(cg, t->nlive, t->f32), LLVMBuildSelect(BB, dead, f32c(t, 0), f32c(t, 1), ""), "");
	LLVMSetFastMathFlags(s, LLVMFastMathAllowReassoc);
	fj_cg_set(cg, t->nlive, s);
	fj_rg_bind(r, t->m.s, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lj);
	fj_cg_loop_hints(cg, &lj, t->us.w, IL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
	return LLVMBuildFCmp(BB, LLVMRealOGT, fj_cg_get(cg, t->nlive, t->f32), f32c(t, 0), "");
}

/* ---- one tile ---- */

/* The tile's rows i0 .. i0 + mlen of batch b (Kp, Vp hold b's). */
static void tile(att *t, LLVMValueRef b, LLVMValueRef i0, LLVMValueRef mlen)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	hctx *h = t->h;
	pack_q(t, b, i0, mlen);
	LLVMValueRef lead[FJ_MAX_RANK];
	if (t->xrank > 2) {
		LLVMValueRef dims[FJ_MAX_RANK];
		for (int d = 0; d < t->xrank - 2; d++)
			dims[d] = fj_rg_dim(r, t->m.x, d);
		fj_cg_unravel(cg, b, dims, t->xrank - 2, lead);
	}
	fj_cg_loop li, lc;
	fj_cg_loop_begin(cg, &li, k64(t, 0), k64(t, MB), "init");
	st(t, at(t, t->mrow, li.iv), f32c(t, -INFINITY));
	st(t, at(t, t->lrow, li.iv), f32c(t, 0));
	fj_cg_loop_end(cg, &li);
	fj_cg_loop_begin(cg, &lc, k64(t, 0), mul(t, t->Dvp, k64(t, MB)), "zero");
	st(t, at(t, t->oa, lc.iv), f32c(t, 0));
	fj_cg_loop_end(cg, &lc);
	LLVMValueRef nir = cdiv(t, mlen, t->mr);
	/* key blocks */
	fj_cg_loop lb;
	fj_cg_loop_begin(cg, &lb, k64(t, 0), t->N, "kblk");
	lb.step = k64(t, NB);
	LLVMValueRef jc = lb.iv, nlen = smin(t, k64(t, NB), LLVMBuildNSWSub(BB, t->N, jc, ""));
	LLVMValueRef jp0 = LLVMBuildUDiv(BB, jc, k64(t, t->nr), "");
	LLVMValueRef kb = LLVMBuildUDiv(BB, jc, k64(t, NB), "");
	LLVMValueRef vf = LLVMBuildLoad2(BB, cg->t_i8, LLVMBuildInBoundsGEP2(BB, cg->t_i8, t->vfin, &kb, 1, ""), "");
	LLVMValueRef vinf = LLVMBuildICmp(BB, LLVMIntEQ, vf, LLVMConstInt(cg->t_i8, 0, 0), "");
	fj_cg_if whole;
	if (t->precheck) /* the block, unless the mask removes it (see above) */
		fj_cg_if_begin(cg, &whole, LLVMBuildOr(BB, block_live(t, lead, b, i0, mlen, jc, nlen), vinf, ""));
	fj_cg_loop lir, ljr;
	fj_cg_loop_begin(cg, &lir, k64(t, 0), nir, "sir");
	fj_cg_loop_begin(cg, &ljr, k64(t, 0), cdiv(t, nlen, t->nr), "sjr");
	LLVMValueRef a = at(t, t->qp, mul(t, lir.iv, mul(t, t->Dk, k64(t, t->mr))));
	LLVMValueRef bp = at(t, t->kp, mul(t, add(t, jp0, ljr.iv), mul(t, t->Dk, k64(t, t->nr))));
	LLVMValueRef c = at(t, t->sb, add(t, mul(t, lir.iv, k64(t, (int64_t)t->mr * NB)), mul(t, ljr.iv, k64(t, t->nr))));
	fj_rg_micro_emit(cg, &t->us, a, bp, c, t->Dk, LLVMConstInt(cg->t_i1, 1, 0));
	fj_cg_loop_end(cg, &ljr);
	fj_cg_loop_end(cg, &lir);
	fj_cg_set(cg, t->live, LLVMConstInt(cg->t_i8, 0, 0));
	each_row(t, chain_row, lead, b, i0, mlen, jc, nlen);
	rescale_rows(t, mlen);
	each_row(t, weight_row, lead, b, i0, mlen, jc, nlen);
	/* weights x V, unless every row's keys in this block are -inf (a causal
	 * mask's upper blocks) and V is finite there: the weights are then all
	 * exactly 0 and the products add nothing (0 x inf would be NaN) */
	LLVMValueRef need = LLVMBuildOr(BB, LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(cg, t->live, cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), ""),
	                                vinf, "");
	fj_cg_if pv;
	fj_cg_if_begin(cg, &pv, need);
	fj_cg_loop lor, lov;
	fj_cg_loop_begin(cg, &lor, k64(t, 0), nir, "oir");
	fj_cg_loop_begin(cg, &lov, k64(t, 0), t->vpan, "ojv");
	LLVMValueRef a2 = at(t, t->sb, mul(t, lor.iv, k64(t, (int64_t)t->mr * NB)));
	LLVMValueRef b2 = at(t, t->vp, mul(t, add(t, mul(t, lov.iv, t->N), jc), k64(t, t->nr)));
	LLVMValueRef c2 = at(t, t->oa, add(t, mul(t, lov.iv, k64(t, (int64_t)MB * t->nr)), mul(t, lor.iv, k64(t, (int64_t)t->mr * t->nr))));
	fj_rg_micro_emit(cg, &t->uo, a2, b2, c2, nlen, LLVMConstInt(cg->t_i1, 0, 0));
	fj_cg_loop_end(cg, &lov);
	fj_cg_loop_end(cg, &lor);
	fj_cg_if_end(cg, &pv);
	if (t->precheck)
		fj_cg_if_end(cg, &whole);
	fj_cg_loop_end(cg, &lb);
	/* O = Oa / l, through the epilogue: per row, per NR-column panel of Oa,
	 * its columns below Dv (unit stride in Oa and in O) */
	fj_cg_loop le, lv, lj;
	fj_cg_loop_begin(cg, &le, k64(t, 0), mlen, "orow");
	fj_rg_scope_push(r);
	LLVMValueRef lrow = ld(t, at(t, t->lrow, le.iv));
	LLVMValueRef row = add(t, i0, le.iv);
	if (fj_rh_has_outputs(h, OUT_R))
		row_outputs(t, b, row, ld(t, at(t, t->mrow, le.iv)), lrow);
	fj_cg_loop_begin(cg, &lv, k64(t, 0), t->vpan, "opan");
	LLVMValueRef c0 = mul(t, lv.iv, k64(t, t->nr));
	LLVMValueRef orow = at(t, t->oa, mul(t, add(t, mul(t, lv.iv, k64(t, MB)), le.iv), k64(t, t->nr)));
	fj_cg_loop_begin(cg, &lj, k64(t, 0), smin(t, k64(t, t->nr), LLVMBuildNSWSub(BB, t->Dv, c0, "")), "ocol");
	fj_rg_scope_push(r);
	fj_rg_bind(r, t->ov, LLVMBuildFDiv(BB, ld(t, at(t, orow, lj.iv)), lrow, ""));
	fj_rg_point p;
	fj_rg_batch_point(&p, t->rank, b, row, add(t, c0, lj.iv));
	fj_rh_store_outputs(h, OUT_D, &p);
	fj_rg_bind(r, t->ov, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lj);
	fj_cg_loop_hints(cg, &lj, 0, FJ_CG_INTERLEAVE);
	fj_cg_loop_end(cg, &lv);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &le);
}

/* ---- the kernel ---- */

/* The block's parts (see the header); NULL when the allocation failed.
 * In floats: Sb (MB x NB), m, l, bm, ms and alpha (32 each), Oa (MB x
 * Dv'), Qp (MB x Dk), then, from the next multiple of 16, Kp (N' x Dk, N'
 * = N rounded up to NR), Vp (N x Dv') and vfin (a byte per key block). Sb,
 * the rows and Oa have sizes that are multiples of 16 floats, so Sb, Oa
 * and every NR-wide vector of them are 64-byte aligned; Qp (MR-row
 * panels) needs no alignment; Kp and Vp start at multiples of 16 and hold
 * whole NR-wide vectors. */
static LLVMValueRef alloc_block(att *t)
{
	int64_t fixed = (int64_t)MB * NB + 5 * 32;
	LLVMValueRef kn = mul(t, t->npan, k64(t, t->nr));
	LLVMValueRef q0 = add(t, k64(t, fixed), mul(t, t->Dvp, k64(t, MB)));
	LLVMValueRef qend = add(t, q0, mul(t, k64(t, MB), t->Dk)); /* MB is a multiple of MR */
	LLVMValueRef k0 = LLVMBuildAnd(BB, add(t, qend, k64(t, 15)), k64(t, -16), "");
	LLVMValueRef v0 = add(t, k0, mul(t, kn, t->Dk));
	LLVMValueRef f0 = add(t, v0, mul(t, t->N, t->Dvp));
	LLVMValueRef elems = add(t, f0, cdiv(t, cdiv(t, t->N, NB), 4));
	LLVMValueRef blk = fj_rg_aligned_alloc(t->cg, mul(t, elems, k64(t, 4)));
	t->sb = blk;
	t->mrow = at(t, blk, k64(t, (int64_t)MB * NB));
	t->lrow = at(t, blk, k64(t, (int64_t)MB * NB + 32));
	t->bm = at(t, blk, k64(t, (int64_t)MB * NB + 64));
	t->ms = at(t, blk, k64(t, (int64_t)MB * NB + 96));
	t->alpha = at(t, blk, k64(t, (int64_t)MB * NB + 128));
	t->oa = at(t, blk, k64(t, fixed));
	t->qp = at(t, blk, q0);
	t->kp = at(t, blk, k0);
	t->vp = at(t, blk, v0);
	t->vfin = at(t, blk, f0);
	return blk;
}

fj_status fj_rh_tpl_attention(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *body = h->body;
	att t0 = {.h = h, .cg = cg, .r = r, .f32 = cg->t_f32};
	att *t = &t0;
	uint8_t *scratch = fj_alloc(cg->ctx, body->nnodes ? body->nnodes : 1);
	if (!scratch)
		return fj_cg_error(cg, FJ_ERR_NOMEM, h->a->node, "out of memory");
	bool ok = fj_attn_match(body, h->a->opaque, NULL, scratch, &t->m);
	fj_free(cg->ctx, scratch, body->nnodes ? body->nnodes : 1);
	if (!ok)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, h->a->node, "attention region without its pattern");
	const fj_node *n1 = &body->nodes[t->m.mm1], *n2 = &body->nodes[t->m.mm2];
	t->qv = n1->opnds[0];
	t->kv = n1->opnds[1];
	t->vv = n2->opnds[1];
	t->ov = n2->res[0];
	t->rank = vrank(h, t->ov);
	t->xrank = vrank(h, t->m.x);
	int d = t->rank - 2;
	t->batch = d ? fj_rg_dim(r, t->ov, 0) : k64(t, 1);
	t->M = fj_rg_dim(r, t->ov, d);
	t->Dv = fj_rg_dim(r, t->ov, d + 1);
	t->N = fj_rg_dim(r, t->kv, d + 1);
	t->Dk = fj_rg_dim(r, t->qv, d + 1);
	int bits = cg->target->vector_bits ? cg->target->vector_bits : 128;
	t->mr = bits == 512 ? 12 : 6;
	int nrv = 2;
	/* AVX-512: 6 x 4 micro-tiles (64 keys, 64 columns of V) where Dv is
	 * known and pads to no more columns than with 2 vectors (64, 128, 40,
	 * not 16 or 80): fewer loads per multiply-add, 10 per 24 instead of
	 * 14. Sapphire Rapids, 8 x [512, 64], alternating processes: 1 thread
	 * 4.14-4.33 -> 4.01-4.28 ms, 2 threads 2.17-2.23 -> 2.06-2.20. */
	if (bits == 512 && LLVMIsAConstantInt(t->Dv)) {
		int64_t dv = LLVMConstIntGetSExtValue(t->Dv);
		if ((dv + 63) / 64 * 64 == (dv + 31) / 32 * 32) {
			t->mr = 6;
			nrv = 4;
		}
	}
	fj_rg_micro_init(cg, &t->us, FJ_DT_F32, t->mr, nrv);
	t->nr = nrv * t->us.w;
	t->us.a_is = 1;
	t->us.a_ks = t->mr;
	t->us.b_ks = t->nr;
	t->us.c_rs = NB;
	t->uo = t->us; /* the same accumulators */
	t->uo.a_is = NB;
	t->uo.a_ks = 1;
	t->uo.c_rs = t->nr;
	t->bmax = fj_cg_var(cg, t->f32, NULL, "bmax");
	t->bnan = fj_cg_var(cg, cg->t_i8, NULL, "bnan");
	t->lsum = fj_cg_var(cg, t->f32, NULL, "lsum");
	t->live = fj_cg_var(cg, cg->t_i8, NULL, "live");
	t->nlive = fj_cg_var(cg, t->f32, NULL, "nlive");
	t->precheck = mask_precheck(t);
	t->vpan = cdiv(t, t->Dv, t->nr);
	t->Dvp = mul(t, t->vpan, k64(t, t->nr));
	t->npan = cdiv(t, t->N, t->nr);
	/* the parallel space: an O-sized result's elements (the analysis put
	 * every result of O's count at D; a logsumexp comes first, at R) */
	uint32_t po = 0;
	while (po + 1 < h->k->nout && out_class(h, po) != OUT_D)
		po++;
	if (out_class(h, po) != OUT_D)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "attention region without its output P V");
	h->k->par_out = po;
	h->k->par_mask = ((1u << vrank(h, body->results[po])) - 1) | FJ_CG_PAR_PER_THREAD; /* a call packs K and V */
	/* tiles (batch, MB rows), the range of this call as the matmul's */
	LLVMValueRef mt = cdiv(t, t->M, MB);
	LLVMValueRef ntiles = mul(t, t->batch, mt);
	fj_cg_if some, keys, work, okb;
	LLVMValueRef any = LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGT, ntiles, k64(t, 0), ""),
	                                LLVMBuildICmp(BB, LLVMIntSGT, t->Dv, k64(t, 0), ""), "");
	fj_cg_if_begin(cg, &some, any); /* the runtime never calls with an empty result */
	LLVMValueRef nokeys = LLVMBuildICmp(BB, LLVMIntSLE, t->N, k64(t, 0), "");
	fj_rg_fail_if(r, nokeys, FJ_KERR_VALUE); /* the softmax of no key (prims.amax of nothing) */
	fj_cg_if_begin(cg, &keys, LLVMBuildNot(BB, nokeys, ""));
	LLVMValueRef t0r, t1r;
	fj_rg_tile_range(cg, h->lo, h->hi, mul(t, mul(t, t->batch, t->M), t->Dv), ntiles, &t0r, &t1r);
	fj_cg_if_begin(cg, &work, LLVMBuildICmp(BB, LLVMIntSLT, t0r, t1r, ""));
	LLVMValueRef blk = alloc_block(t);
	LLVMValueRef failed = LLVMBuildIsNull(BB, blk, "");
	fj_rg_fail_if(r, failed, FJ_KERR_VALUE);
	fj_cg_if_begin(cg, &okb, LLVMBuildNot(BB, failed, ""));
	LLVMValueRef cur = fj_cg_var(cg, cg->t_i64, NULL, "kv_of");
	fj_cg_set(cg, cur, k64(t, -1));
	fj_cg_loop lt;
	fj_cg_loop_begin(cg, &lt, t0r, t1r, "tile");
	fj_rg_scope_push(r);
	LLVMValueRef b = LLVMBuildUDiv(BB, lt.iv, mt, ""), it = LLVMBuildURem(BB, lt.iv, mt, "");
	fj_cg_if nb;
	fj_cg_if_begin(cg, &nb, LLVMBuildICmp(BB, LLVMIntNE, b, fj_cg_get(cg, cur, cg->t_i64), ""));
	pack_kv(t, b);
	fj_cg_set(cg, cur, b);
	fj_cg_if_end(cg, &nb);
	LLVMValueRef i0 = mul(t, it, k64(t, MB));
	tile(t, b, i0, smin(t, k64(t, MB), LLVMBuildNSWSub(BB, t->M, i0, "")));
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lt);
	fj_rg_free(cg, blk);
	fj_cg_if_end(cg, &okb);
	fj_cg_if_end(cg, &work);
	fj_cg_if_end(cg, &keys);
	fj_cg_if_end(cg, &some);
	return cg->st;
}
