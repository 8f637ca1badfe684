/* region_host_attention_bw.c -- the host template of attention_bw regions:
 * the backward of attention with its weights recomputed (the pattern of
 * fj_attn_bw_match, ir/attention.c), one kernel, the weights never in
 * memory, one block of them in L1.
 *
 * The region: first-stage matmuls F = X_f Z_f, each of W's dims
 * [B, M, N] (the scores Q K^T, dP = dO V^T); weights W_g computed pointwise
 * from them and from values computed outside (P = exp(X - lse), dS = P (dP
 * - D) / scale); second-stage matmuls G = W_g Y_g ("row" G, [B, M, Dg]: dQ
 * = dS K) or W_g^T Y_g ("column" G, [B, N, Dg]: dK = dS^T Q, dV = P^T dO).
 * Every operand element comes from the evaluator (region.h), so the
 * transposes and reshapes in front of the matmuls are read in place.
 *
 * Per call, a range of batches (FJ_CG_PAR_PER_THREAD over result 0; each
 * batch is one tile, so a batch's column G's and row G's are summed by one
 * thread and nothing is added across threads), one heap block:
 *   Zp_f  Z_f of the batch as MR-row micro-panels over W's columns
 *         ([N'/MR][k_f][MR], N' = N rounded up to KB, zeros past N);
 *   Xp_f  X_f as NR-column panels over W's rows ([M'/NR][k_f][NR], M' = M
 *         rounded up to QB);
 *   Yp_g  Y_g as NR-column panels over Dg ([Dg'/NR][M' or N'][NR]);
 *   Ft_f, Wt_w  a KB x QB block of each F and of each distinct W_g, kept
 *         transposed: [key j][query i];
 *   Ac_g  the accumulators: a row G's over the whole batch
 *         ([Dg'/NR][M'][NR]), a column G's over the current key block
 *         ([Dg'/NR][KB][NR]).
 * Per batch, per block of KB keys (j0), per block of QB queries (i0) (the
 * loop order of FlashAttention-2's backward, Dao 2023, Algorithm 2, with
 * the row G's accumulated in the block instead of by atomics):
 *   Ft_f = Zp_f^T Xp_f (the matmul micro-kernel, fj_rg_micro_emit);
 *   per (j, i): every W_g, F bound to Ft_f[j][i], kept in Wt (0 past the
 *       block's rows and columns); under a mask, first with the F's it
 *       drops bound to NaN instead, their Ft and the W's again only when
 *       a W comes out NaN (mask_fs);
 *   column G: Ac_g += Wt rows x Yp_g rows i0..; row G: Ac_g rows i0.. +=
 *       Wt^T x Yp_g rows j0.. (the micro-kernel again), left out when every
 *       weight of W_g in the block is exactly 0 (a causal mask's blocks
 *       past the diagonal) and the block's rows of Y_g are finite (yfin,
 *       noted when Y_g is packed: only a non-finite Y makes 0 x Y anything
 *       but nothing);
 * after the block of keys, each column G's rows j0.. are stored through the
 * region's epilogue (the results computed from that G); after the batch,
 * each row G's. Empty dims give zeros (a sum of nothing).
 *
 * Sizes: KB = 48 (a multiple of MR, 12 with AVX-512, 6 with AVX2); QB =
 * 128 with AVX-512, 96 with AVX2 (a multiple of NR, 32 or 16, and of the
 * row G's micro-tile rows, 8 or 6): a block is 24 KiB per F and per W; the
 * packed operands of a batch stay in L2 for a few thousand keys.
 * The FLOPs are FlashAttention-2's: 2 + (number of G) block matmuls per
 * block, the scores' recomputation included.
 */
#include "codegen/region_host_internal.h"

enum { KB = 48, IL = 2, MAXOUT = 16 };

typedef struct bwt {
	hctx *h;
	fj_cg *cg;
	fj_rg *r;
	fj_attn_bw m;
	int rank, xrank;        /* of the matmuls (2 or 3), of W (heads unfolded: higher) */
	int mr, nr, mrr, qb; /* micro-tile rows and columns; row G's micro-tile rows; QB */
	fj_rg_micro uf, uc, ur; /* the micro-kernel for Ft and column G's (sharing accumulators), row G's */
	LLVMTypeRef f32;
	LLVMValueRef batch, M, N, Mp, Np; /* Mp, Np: M, N rounded up to QB, KB */
	LLVMValueRef kf[FJ_ATTN_BW_MAX_F], zp[FJ_ATTN_BW_MAX_F], xp[FJ_ATTN_BW_MAX_F], ft[FJ_ATTN_BW_MAX_F];
	LLVMValueRef dg[FJ_ATTN_BW_MAX_G], gpan[FJ_ATTN_BW_MAX_G], yp[FJ_ATTN_BW_MAX_G], ac[FJ_ATTN_BW_MAX_G];
	fj_vid w[FJ_ATTN_BW_MAX_G]; /* the distinct W values */
	LLVMValueRef wt[FJ_ATTN_BW_MAX_G];
	LLVMValueRef wlive[FJ_ATTN_BW_MAX_G]; /* variables (i8): a weight of the block is not 0 */
	LLVMValueRef yfin[FJ_ATTN_BW_MAX_G];  /* per G, per block of Y's rows: every element finite (i8) */
	unsigned fs;            /* bit f: a mask can drop F f from the W's (mask_fs), none: 0 */
	LLVMValueRef wnan;      /* variable (i8): a weight of the block is NaN with the F's fs bound to NaN */
	LLVMValueRef guess;     /* variable (i8): the key block's last query block did without them */
	int nw, gwi[FJ_ATTN_BW_MAX_G]; /* G g reads wt[gwi[g]] */
	int res_g[MAXOUT]; /* the G each result is computed from */
} bwt;

#undef BB
#define BB (t->cg->b)

static LLVMValueRef k64(bwt *t, int64_t v) { return fj_cg_i64(t->cg, v); }
static LLVMValueRef add(bwt *t, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(BB, a, b, ""); }
static LLVMValueRef mul(bwt *t, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWMul(BB, a, b, ""); }
static LLVMValueRef lt(bwt *t, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildICmp(BB, LLVMIntSLT, a, b, ""); }
static LLVMValueRef smin(bwt *t, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildSelect(BB, lt(t, a, b), a, b, ""); }
static LLVMValueRef roundup(bwt *t, LLVMValueRef a, int64_t b)
{
	return mul(t, LLVMBuildUDiv(BB, add(t, a, k64(t, b - 1)), k64(t, b), ""), k64(t, b));
}
static LLVMValueRef at(bwt *t, LLVMValueRef base, LLVMValueRef off)
{
	return LLVMBuildInBoundsGEP2(BB, t->f32, base, &off, 1, "");
}
static LLVMValueRef ld(bwt *t, LLVMValueRef p)
{
	LLVMValueRef x = LLVMBuildLoad2(BB, t->f32, p, "");
	LLVMSetAlignment(x, 4);
	return x;
}
static void st(bwt *t, LLVMValueRef p, LLVMValueRef x) { LLVMSetAlignment(LLVMBuildStore(BB, x, p), 4); }
static LLVMValueRef zero(bwt *t) { return LLVMConstReal(t->f32, 0); }

/* v (a matmul operand of the pattern's rank) at (b, row, col), as f32. */
static LLVMValueRef operand_at(bwt *t, fj_vid v, LLVMValueRef b, LLVMValueRef row, LLVMValueRef col)
{
	fj_rg_point p;
	fj_rg_batch_point(&p, t->rank, b, row, col);
	return fj_rg_eval_as(t->r, v, &p, FJ_DT_F32);
}

/* ---- packing ---- */

/* One run of pack_runs: dst[i] = the element (a0 + i, k) for i < pw;
 * `clamp`: a past na (or k past nk, !kin) stores 0, from an element read
 * at the last a (and k). */
static void pack_run(bwt *t, fj_vid v, bool swap, LLVMValueRef b, LLVMValueRef dst, int pw, LLVMValueRef a0,
                     LLVMValueRef k, LLVMValueRef na, bool clamp, LLVMValueRef kin)
{
	fj_cg *cg = t->cg;
	LLVMValueRef alast = clamp ? LLVMBuildNSWSub(BB, na, k64(t, 1), "") : NULL;
	fj_cg_loop li;
	fj_cg_loop_begin(cg, &li, k64(t, 0), k64(t, pw), clamp ? "rac" : "ra");
	fj_rg_scope_push(t->r);
	LLVMValueRef a = add(t, a0, li.iv);
	LLVMValueRef ac = clamp ? smin(t, a, alast) : a;
	LLVMValueRef e = swap ? operand_at(t, v, b, k, ac) : operand_at(t, v, b, ac, k);
	if (clamp)
		e = LLVMBuildSelect(BB, LLVMBuildAnd(BB, kin, lt(t, a, na), ""), e, zero(t), "");
	st(t, at(t, dst, li.iv), e);
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(cg, &li);
}

/* pack's order for a v whose elements lie along a (fj_rg_fast_dim: K, Q
 * and dO read in place as the Y's): per k, each panel's run of pw a's,
 * read and stored at unit stride, a vector loop; the panels with every
 * a < na and k < nk unclamped. The transposing order below read each
 * element a row apart and stored it pw apart: Sapphire Rapids, the
 * backward of 8 x [512, 64], alternating processes, 1 thread 10.6-11.2 ->
 * 9.3-9.8 ms, 2 threads 5.6-5.7 -> 4.8-5.1. */
static void pack_runs(bwt *t, fj_vid v, bool swap, LLVMValueRef b, LLVMValueRef dst, int pw, LLVMValueRef na,
                      LLVMValueRef nap, LLVMValueRef nk, LLVMValueRef nkp)
{
	fj_cg *cg = t->cg;
	LLVMValueRef klast = LLVMBuildNSWSub(BB, nk, k64(t, 1), "");
	LLVMValueRef full = LLVMBuildUDiv(BB, na, k64(t, pw), "");
	fj_cg_loop lk, lp;
	fj_cg_loop_begin(cg, &lk, k64(t, 0), nkp, "rk");
	fj_rg_scope_push(t->r);
	LLVMValueRef kin = lt(t, lk.iv, nk), kc = smin(t, lk.iv, klast);
	fj_cg_loop_begin(cg, &lp, k64(t, 0), LLVMBuildUDiv(BB, nap, k64(t, pw), ""), "rp");
	fj_rg_scope_push(t->r);
	LLVMValueRef run = at(t, dst, add(t, mul(t, lp.iv, mul(t, nkp, k64(t, pw))), mul(t, lk.iv, k64(t, pw))));
	LLVMValueRef a0 = mul(t, lp.iv, k64(t, pw));
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, LLVMBuildAnd(BB, kin, lt(t, lp.iv, full), ""));
	pack_run(t, v, swap, b, run, pw, a0, kc, na, false, kin);
	fj_cg_if_else(cg, &c);
	pack_run(t, v, swap, b, run, pw, a0, kc, na, true, kin);
	fj_cg_if_end(cg, &c);
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(cg, &lp);
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(cg, &lk);
}

/* dst[(a / pw) * nkp * pw + k * pw + a % pw] = v's element (a, k) of batch
 * b for a < na, k < nk, else 0; a over [0, nap), k over [0, nkp). The
 * element (a, k) is v at (b, a, k), or with `swap` at (b, k, a). */
static void pack(bwt *t, fj_vid v, bool swap, LLVMValueRef b, LLVMValueRef dst, int pw, LLVMValueRef na,
                 LLVMValueRef nap, LLVMValueRef nk, LLVMValueRef nkp)
{
	fj_cg *cg = t->cg;
	fj_cg_if any;
	fj_cg_if_begin(cg, &any, LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGT, na, k64(t, 0), ""),
	                                      LLVMBuildICmp(BB, LLVMIntSGT, nk, k64(t, 0), ""), ""));
	if (fj_rg_fast_dim(t->r, v) == (swap ? t->rank - 1 : t->rank - 2)) {
		pack_runs(t, v, swap, b, dst, pw, na, nap, nk, nkp);
		fj_cg_if_end(cg, &any);
		return;
	}
	LLVMValueRef alast = LLVMBuildNSWSub(BB, na, k64(t, 1), ""), klast = LLVMBuildNSWSub(BB, nk, k64(t, 1), "");
	fj_cg_loop la, lk;
	fj_cg_loop_begin(cg, &la, k64(t, 0), nap, "pa");
	fj_rg_scope_push(t->r);
	LLVMValueRef aok = lt(t, la.iv, na), ac = smin(t, la.iv, alast);
	LLVMValueRef pan = LLVMBuildUDiv(BB, la.iv, k64(t, pw), ""), ai = LLVMBuildURem(BB, la.iv, k64(t, pw), "");
	LLVMValueRef base = add(t, mul(t, pan, mul(t, nkp, k64(t, pw))), ai);
	fj_cg_loop_begin(cg, &lk, k64(t, 0), nkp, "pk");
	fj_rg_scope_push(t->r);
	LLVMValueRef ok = LLVMBuildAnd(BB, aok, lt(t, lk.iv, nk), ""), kc = smin(t, lk.iv, klast);
	LLVMValueRef e = swap ? operand_at(t, v, b, kc, ac) : operand_at(t, v, b, ac, kc);
	st(t, at(t, dst, add(t, base, mul(t, lk.iv, k64(t, pw)))), LLVMBuildSelect(BB, ok, e, zero(t), ""));
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(cg, &lk);
	fj_cg_loop_no_vectorize(cg, &lk);
	fj_rg_scope_pop(t->r);
	fj_cg_loop_end(cg, &la);
	fj_cg_if_end(cg, &any);
}

static void zero_fill(bwt *t, LLVMValueRef p, LLVMValueRef n)
{
	fj_cg_loop l;
	fj_cg_loop_begin(t->cg, &l, k64(t, 0), n, "z");
	st(t, at(t, p, l.iv), zero(t));
	fj_cg_loop_end(t->cg, &l);
}

/* yfin[g][blk]: is every element of Yp_g's rows [blk * bs, (blk + 1) *
 * bs) finite? (a block of zero weights then adds exactly nothing: see
 * batch) */
static void y_finite(bwt *t, uint32_t g, LLVMValueRef rowsp, int64_t bs)
{
	fj_cg *cg = t->cg;
	fj_cg_loop lb, lp, le;
	fj_cg_loop_begin(cg, &lb, k64(t, 0), LLVMBuildUDiv(BB, rowsp, k64(t, bs), ""), "yblk");
	LLVMValueRef fin = fj_cg_var(cg, cg->t_i8, NULL, "yfin");
	fj_cg_set(cg, fin, LLVMConstInt(cg->t_i8, 1, 0));
	fj_cg_loop_begin(cg, &lp, k64(t, 0), t->gpan[g], "ypan");
	LLVMValueRef base = mul(t, add(t, mul(t, lp.iv, rowsp), mul(t, lb.iv, k64(t, bs))), k64(t, t->nr));
	fj_cg_loop_begin(cg, &le, k64(t, 0), k64(t, bs * t->nr), "yel");
	LLVMValueRef x = ld(t, at(t, t->yp[g], add(t, base, le.iv)));
	/* finite: x - x == 0 (inf - inf and NaN are NaN) */
	LLVMValueRef fx = LLVMBuildFCmp(BB, LLVMRealOEQ, LLVMBuildFSub(BB, x, x, ""), zero(t), "");
	fj_cg_set(cg, fin, LLVMBuildSelect(BB, fx, fj_cg_get(cg, fin, cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), ""));
	fj_cg_loop_end(cg, &le);
	fj_cg_loop_hints(cg, &le, t->uf.w, IL);
	fj_cg_loop_end(cg, &lp);
	LLVMSetAlignment(LLVMBuildStore(BB, fj_cg_get(cg, fin, cg->t_i8),
	                                LLVMBuildInBoundsGEP2(BB, cg->t_i8, t->yfin[g], &lb.iv, 1, "")), 1);
	fj_cg_loop_end(cg, &lb);
}

/* The packed operands of batch b, and the row G's accumulators zeroed. */
static void pack_batch(bwt *t, LLVMValueRef b)
{
	const fj_graph *body = t->h->body;
	for (uint32_t f = 0; f < t->m.nf; f++) {
		const fj_node *n = &body->nodes[t->m.f[f]];
		/* Zp: a = W's column j (Z's column), k along Z's rows; Xp: a = W's row i */
		pack(t, n->opnds[1], true, b, t->zp[f], t->mr, t->N, t->Np, t->kf[f], t->kf[f]);
		pack(t, n->opnds[0], false, b, t->xp[f], t->nr, t->M, t->Mp, t->kf[f], t->kf[f]);
	}
	for (uint32_t g = 0; g < t->m.ng; g++) {
		const fj_node *n = &body->nodes[t->m.g[g]];
		bool col = t->m.gt[g];
		LLVMValueRef rows = col ? t->M : t->N, rowsp = col ? t->Mp : t->Np;
		/* a = Y's column c (over Dg), k = Y's row */
		pack(t, n->opnds[1], true, b, t->yp[g], t->nr, t->dg[g], mul(t, t->gpan[g], k64(t, t->nr)), rows, rowsp);
		y_finite(t, g, rowsp, col ? t->qb : KB);
		if (!col)
			zero_fill(t, t->ac[g], mul(t, mul(t, t->gpan[g], t->Mp), k64(t, t->nr)));
	}
}

/* ---- the weights of a block ---- */

/* Wt[j][i] for the block's rows j < klen (keys j0 + j) and every column
 * i < QB (queries i0 + i; 0 past M), from Ft; lead: W's dims before the
 * last two, batch b unravelled over them. nan_fs: with the F's fs bound
 * to NaN instead, noting in wnan whether a weight is NaN (see mask_fs). */
static void weights(bwt *t, const LLVMValueRef *lead, LLVMValueRef b, LLVMValueRef j0, LLVMValueRef klen,
                    LLVMValueRef i0, bool nan_fs)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	const fj_graph *body = t->h->body;
	LLVMValueRef mlast = LLVMBuildNSWSub(BB, t->M, k64(t, 1), "");
	for (int w = 0; w < t->nw; w++)
		fj_cg_set(cg, t->wlive[w], LLVMConstInt(cg->t_i8, 0, 0));
	if (nan_fs)
		fj_cg_set(cg, t->wnan, LLVMConstInt(cg->t_i8, 0, 0));
	fj_cg_loop lj, li;
	fj_cg_loop_begin(cg, &lj, k64(t, 0), klen, "wj");
	fj_rg_scope_push(r);
	LLVMValueRef j = add(t, j0, lj.iv), roff = mul(t, lj.iv, k64(t, t->qb));
	fj_cg_loop_begin(cg, &li, k64(t, 0), k64(t, t->qb), "wi");
	fj_rg_scope_push(r);
	LLVMValueRef ig = add(t, i0, li.iv), ok = lt(t, ig, t->M), off = add(t, roff, li.iv);
	LLVMValueRef i = smin(t, ig, mlast);
	for (uint32_t f = 0; f < t->m.nf; f++)
		fj_rg_bind(r, body->nodes[t->m.f[f]].res[0],
		           nan_fs && (t->fs >> f & 1) ? LLVMConstReal(t->f32, __builtin_nan("")) : ld(t, at(t, t->ft[f], off)));
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int d = 0; d < t->xrank - 2; d++)
		idx[d] = lead[d];
	idx[t->xrank - 2] = i;
	idx[t->xrank - 1] = j;
	fj_rg_point p;
	fj_rg_point_idx(&p, t->xrank, idx);
	p.lin = add(t, mul(t, add(t, mul(t, b, t->M), i), t->N), j);
	LLVMValueRef anynan = LLVMConstInt(cg->t_i1, 0, 0);
	for (int w = 0; w < t->nw; w++) {
		LLVMValueRef x = LLVMBuildSelect(BB, ok, fj_rg_eval_as(r, t->w[w], &p, FJ_DT_F32), zero(t), "");
		st(t, at(t, t->wt[w], off), x);
		LLVMValueRef nz = LLVMBuildFCmp(BB, LLVMRealUNE, x, zero(t), ""); /* NaN too */
		fj_cg_set(cg, t->wlive[w], LLVMBuildSelect(BB, nz, LLVMConstInt(cg->t_i8, 1, 0), fj_cg_get(cg, t->wlive[w], cg->t_i8), ""));
		anynan = LLVMBuildOr(BB, anynan, LLVMBuildFCmp(BB, LLVMRealUNO, x, x, ""), "");
	}
	if (nan_fs) /* one select a point: an any-of reduction the vectoriser knows */
		fj_cg_set(cg, t->wnan, LLVMBuildSelect(BB, anynan, LLVMConstInt(cg->t_i8, 1, 0), fj_cg_get(cg, t->wnan, cg->t_i8), ""));
	for (uint32_t f = 0; f < t->m.nf; f++)
		fj_rg_bind(r, body->nodes[t->m.f[f]].res[0], NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &li);
	fj_cg_loop_hints(cg, &li, t->uf.w, IL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lj);
}

/* ---- storing a G ---- */

/* The results computed from G g at its rows [r0, r0 + n) of batch b, from
 * the accumulators acc ([Dg'/NR][rows][NR], `rows` apart per panel, row r0
 * at accrow). */
static void store_g(bwt *t, uint32_t g, LLVMValueRef b, LLVMValueRef r0, LLVMValueRef n, LLVMValueRef accrow,
                    LLVMValueRef rows)
{
	fj_cg *cg = t->cg;
	fj_rg *r = t->r;
	hctx *h = t->h;
	const fj_graph *body = h->body;
	fj_vid gv = body->nodes[t->m.g[g]].res[0];
	LLVMValueRef R = fj_rg_dim(r, gv, t->rank - 2);
	fj_cg_loop lr, lp, lc;
	fj_cg_loop_begin(cg, &lr, k64(t, 0), n, "gr");
	fj_rg_scope_push(r);
	LLVMValueRef row = add(t, r0, lr.iv);
	fj_cg_loop_begin(cg, &lp, k64(t, 0), t->gpan[g], "gp");
	LLVMValueRef c0 = mul(t, lp.iv, k64(t, t->nr));
	LLVMValueRef arow = at(t, t->ac[g], mul(t, add(t, mul(t, lp.iv, rows), add(t, accrow, lr.iv)), k64(t, t->nr)));
	fj_cg_loop_begin(cg, &lc, k64(t, 0), smin(t, k64(t, t->nr), LLVMBuildNSWSub(BB, t->dg[g], c0, "")), "gc");
	fj_rg_scope_push(r);
	LLVMValueRef col = add(t, c0, lc.iv);
	fj_rg_bind(r, gv, ld(t, at(t, arow, lc.iv)));
	LLVMValueRef lin = add(t, mul(t, add(t, mul(t, b, R), row), t->dg[g]), col);
	fj_rg_point q;
	fj_rg_batch_point(&q, t->rank, b, row, col);
	q.lin = lin;
	for (uint32_t j = 0; j < h->k->nout; j++)
		if (t->res_g[j] == (int)g)
			fj_rh_store_result(h, j, fj_type_same_dims(&body->values[body->results[j]].type, &body->values[gv].type), &q);
	fj_rg_bind(r, gv, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
	fj_cg_loop_end(cg, &lp);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
}

/* ---- one batch ---- */

/* Ft_f of the block of keys from panel jp0 and queries from panel ip0. */
static void first_stage(bwt *t, uint32_t f, LLVMValueRef jp0, LLVMValueRef ip0)
{
	fj_cg *cg = t->cg;
	fj_cg_loop lj, li;
	fj_cg_loop_begin(cg, &lj, k64(t, 0), k64(t, KB / t->mr), "fj");
	fj_cg_loop_begin(cg, &li, k64(t, 0), k64(t, t->qb / t->nr), "fi");
	LLVMValueRef a = at(t, t->zp[f], mul(t, add(t, jp0, lj.iv), mul(t, t->kf[f], k64(t, t->mr))));
	LLVMValueRef bp = at(t, t->xp[f], mul(t, add(t, ip0, li.iv), mul(t, t->kf[f], k64(t, t->nr))));
	LLVMValueRef c = at(t, t->ft[f], add(t, mul(t, lj.iv, k64(t, (int64_t)t->mr * t->qb)), mul(t, li.iv, k64(t, t->nr))));
	fj_rg_micro_emit(cg, &t->uf, a, bp, c, t->kf[f], LLVMConstInt(cg->t_i1, 1, 0));
	fj_cg_loop_end(cg, &li);
	fj_cg_loop_end(cg, &lj);
}

static void batch(bwt *t, LLVMValueRef b)
{
	fj_cg *cg = t->cg;
	LLVMValueRef none = LLVMConstInt(cg->t_i1, 0, 0);
	pack_batch(t, b);
	LLVMValueRef lead[FJ_MAX_RANK];
	if (t->xrank > 2) {
		LLVMValueRef dims[FJ_MAX_RANK];
		for (int d = 0; d < t->xrank - 2; d++)
			dims[d] = fj_rg_dim(t->r, t->w[0], d);
		fj_cg_unravel(cg, b, dims, t->xrank - 2, lead);
	}
	fj_cg_loop lk, lq;
	fj_cg_loop_begin(cg, &lk, k64(t, 0), t->Np, "kblk");
	lk.step = k64(t, KB);
	LLVMValueRef j0 = lk.iv, klen = smin(t, k64(t, KB), LLVMBuildNSWSub(BB, t->N, j0, ""));
	LLVMValueRef jp0 = LLVMBuildUDiv(BB, j0, k64(t, t->mr), "");
	for (uint32_t g = 0; g < t->m.ng; g++)
		if (t->m.gt[g])
			zero_fill(t, t->ac[g], mul(t, t->gpan[g], k64(t, (int64_t)KB * t->nr)));
	if (t->fs) /* the key block's first query block tries without them */
		fj_cg_set(cg, t->guess, LLVMConstInt(cg->t_i8, 1, 0));
	/* rows of Wt past the keys: zeros, once per block (the row G's sum over them) */
	for (int w = 0; w < t->nw; w++)
		zero_fill(t, at(t, t->wt[w], mul(t, klen, k64(t, t->qb))), mul(t, LLVMBuildNSWSub(BB, k64(t, KB), klen, ""), k64(t, t->qb)));
	fj_cg_loop_begin(cg, &lq, k64(t, 0), t->Mp, "qblk");
	lq.step = k64(t, t->qb);
	LLVMValueRef i0 = lq.iv, ip0 = LLVMBuildUDiv(BB, i0, k64(t, t->nr), "");
	for (uint32_t f = 0; f < t->m.nf; f++)
		if (!(t->fs >> f & 1))
			first_stage(t, f, jp0, ip0);
	if (!t->fs) {
		weights(t, lead, b, j0, klen, i0, false);
	} else {
		/* the weights with the F's fs bound to NaN, where the key block's
		 * last query block did without them; those F's and the weights
		 * again when one of them is NaN (see mask_fs) */
		LLVMValueRef guess = LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(cg, t->guess, cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), "");
		fj_cg_set(cg, t->wnan, LLVMConstInt(cg->t_i8, 1, 0));
		fj_cg_if gs, full;
		fj_cg_if_begin(cg, &gs, guess);
		weights(t, lead, b, j0, klen, i0, true);
		fj_cg_if_end(cg, &gs);
		LLVMValueRef need = LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(cg, t->wnan, cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), "");
		fj_cg_if_begin(cg, &full, need);
		for (uint32_t f = 0; f < t->m.nf; f++)
			if (t->fs >> f & 1)
				first_stage(t, f, jp0, ip0);
		weights(t, lead, b, j0, klen, i0, false);
		fj_cg_if_end(cg, &full);
		fj_cg_set(cg, t->guess, LLVMBuildZExt(BB, LLVMBuildNot(BB, need, ""), cg->t_i8, ""));
	}
	for (uint32_t g = 0; g < t->m.ng; g++) {
		/* left out when every weight of the block is exactly 0 (a causal
		 * mask's blocks above the diagonal) and Y's rows there are finite */
		LLVMValueRef yb = t->m.gt[g] ? LLVMBuildUDiv(BB, i0, k64(t, t->qb), "") : LLVMBuildUDiv(BB, j0, k64(t, KB), "");
		LLVMValueRef yf = LLVMBuildLoad2(BB, cg->t_i8, LLVMBuildInBoundsGEP2(BB, cg->t_i8, t->yfin[g], &yb, 1, ""), "");
		LLVMValueRef need = LLVMBuildOr(BB, LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(cg, t->wlive[t->gwi[g]], cg->t_i8), LLVMConstInt(cg->t_i8, 0, 0), ""),
		                                LLVMBuildICmp(BB, LLVMIntEQ, yf, LLVMConstInt(cg->t_i8, 0, 0), ""), "");
		fj_cg_if gi;
		fj_cg_if_begin(cg, &gi, need);
		LLVMValueRef wt = t->wt[t->gwi[g]];
		fj_cg_loop lp, lr;
		fj_cg_loop_begin(cg, &lp, k64(t, 0), t->gpan[g], "gpan");
		if (t->m.gt[g]) { /* Ac rows j += Wt rows j x Yp rows i0 .. i0 + QB */
			fj_cg_loop_begin(cg, &lr, k64(t, 0), k64(t, KB / t->mr), "cj");
			LLVMValueRef a = at(t, wt, mul(t, lr.iv, k64(t, (int64_t)t->mr * t->qb)));
			LLVMValueRef bp = at(t, t->yp[g], mul(t, add(t, mul(t, lp.iv, t->Mp), i0), k64(t, t->nr)));
			LLVMValueRef c = at(t, t->ac[g], mul(t, add(t, mul(t, lp.iv, k64(t, KB)), mul(t, lr.iv, k64(t, t->mr))), k64(t, t->nr)));
			fj_rg_micro_emit(cg, &t->uc, a, bp, c, k64(t, t->qb), none);
		} else { /* Ac rows i0 + i += Wt^T rows i x Yp rows j0 .. j0 + KB */
			fj_cg_loop_begin(cg, &lr, k64(t, 0), k64(t, t->qb / t->mrr), "ri");
			LLVMValueRef a = at(t, wt, mul(t, lr.iv, k64(t, t->mrr)));
			LLVMValueRef bp = at(t, t->yp[g], mul(t, add(t, mul(t, lp.iv, t->Np), j0), k64(t, t->nr)));
			LLVMValueRef c = at(t, t->ac[g], mul(t, add(t, mul(t, lp.iv, t->Mp), add(t, i0, mul(t, lr.iv, k64(t, t->mrr)))), k64(t, t->nr)));
			fj_rg_micro_emit(cg, &t->ur, a, bp, c, k64(t, KB), none);
		}
		fj_cg_loop_end(cg, &lr);
		fj_cg_loop_end(cg, &lp);
		fj_cg_if_end(cg, &gi);
	}
	fj_cg_loop_end(cg, &lq);
	for (uint32_t g = 0; g < t->m.ng; g++)
		if (t->m.gt[g])
			store_g(t, g, b, j0, klen, k64(t, 0), k64(t, KB));
	fj_cg_loop_end(cg, &lk);
	for (uint32_t g = 0; g < t->m.ng; g++)
		if (!t->m.gt[g])
			store_g(t, g, b, k64(t, 0), t->M, k64(t, 0), t->Mp);
}

/* ---- the kernel ---- */

/* A block of keys past a causal mask's diagonal needs no first stage: its
 * weights are P = 0 and dS = 0 (dP - D), or the where of dS's gradient,
 * whatever the scores are. The first-stage matmuls F that every W depends
 * on only through steps that carry a NaN through and through a where's
 * values (fj_attn_drops_only: the scores under a mask; dP too when dS goes
 * through the mask's where), or not at all, are therefore left out where
 * every weight of the block, computed with them bound to NaN, is not NaN:
 * each is then its value for every F (a live score makes its weights NaN;
 * so does an inf in dP where dS keeps 0 x inf). The kernel tries that for
 * the first query block of each key block, then for the next ones as long
 * as it worked: along a key block's query blocks a causal mask's dead
 * blocks come first, so only the block that crosses the diagonal computes
 * its weights twice. Sets t->fs (0: none, no mask); false: no memory. */
static bool mask_fs(bwt *t)
{
	const fj_graph *g = t->h->body;
	size_t sz = 2 * (size_t)(g->nvalues ? g->nvalues : 1);
	uint8_t *scratch = fj_alloc(t->cg->ctx, sz);
	if (!scratch)
		return false;
	fj_vid fv[FJ_ATTN_BW_MAX_F];
	uint32_t n = 0;
	for (uint32_t f = 0; f < t->m.nf; f++) {
		fj_vid v = g->nodes[t->m.f[f]].res[0];
		bool ok = true;
		for (int w = 0; w < t->nw && ok; w++)
			ok = !fj_attn_depends(g, &v, 1, t->w[w], scratch) || fj_attn_drops_only(g, &v, 1, t->w[w], scratch);
		if (ok) {
			t->fs |= 1u << f;
			fv[n++] = v;
		}
	}
	/* together: bound to NaN at once */
	for (int w = 0; w < t->nw && n; w++)
		if (fj_attn_depends(g, fv, n, t->w[w], scratch) && !fj_attn_drops_only(g, fv, n, t->w[w], scratch))
			t->fs &= 0u - t->fs, n = 0; /* the first one alone (each passed alone) */
	fj_free(t->cg->ctx, scratch, sz);
	return true;
}

/* The G result j is computed from (-1: none, -2: several). */
static int result_g(bwt *t, fj_vid v, int depth)
{
	const fj_graph *body = t->h->body;
	for (uint32_t g = 0; g < t->m.ng; g++)
		if (body->nodes[t->m.g[g]].res[0] == v)
			return (int)g;
	if (v == FJ_NOVAL || body->values[v].kind != FJ_VK_RESULT || depth > 32)
		return -1;
	const fj_node *n = &body->nodes[body->values[v].def];
	int found = -1;
	for (uint32_t o = 0; o < n->nopnds; o++) {
		int x = result_g(t, n->opnds[o], depth + 1);
		if (x == -2 || (x >= 0 && found >= 0 && x != found))
			return -2;
		if (x >= 0)
			found = x;
	}
	return found;
}

/* The heap block (see the header); every part a multiple of 16 floats, so
 * that the NR-wide vectors of Ft, Wt, Yp and Ac are 64-byte aligned. */
static LLVMValueRef alloc_block(bwt *t)
{
	LLVMValueRef off = k64(t, 0), parts[4 * FJ_ATTN_BW_MAX_F + 3 * FJ_ATTN_BW_MAX_G];
	LLVMValueRef *dst[4 * FJ_ATTN_BW_MAX_F + 3 * FJ_ATTN_BW_MAX_G];
	int n = 0;
	for (uint32_t f = 0; f < t->m.nf; f++) {
		dst[n] = &t->zp[f], parts[n++] = mul(t, t->Np, t->kf[f]); /* Np: 48 k, Mp: 96 k */
		dst[n] = &t->xp[f], parts[n++] = mul(t, t->Mp, t->kf[f]);
		dst[n] = &t->ft[f], parts[n++] = k64(t, (int64_t)KB * t->qb);
	}
	for (uint32_t g = 0; g < t->m.ng; g++) {
		LLVMValueRef cols = mul(t, t->gpan[g], k64(t, t->nr));
		dst[n] = &t->yp[g], parts[n++] = mul(t, cols, t->m.gt[g] ? t->Mp : t->Np);
		dst[n] = &t->ac[g], parts[n++] = mul(t, cols, t->m.gt[g] ? k64(t, KB) : t->Mp);
	}
	for (int w = 0; w < t->nw; w++)
		dst[n] = &t->wt[w], parts[n++] = k64(t, (int64_t)KB * t->qb);
	LLVMValueRef offs[4 * FJ_ATTN_BW_MAX_F + 3 * FJ_ATTN_BW_MAX_G];
	for (int i = 0; i < n; i++) {
		offs[i] = off;
		off = add(t, off, parts[i]);
	}
	/* then the finiteness flags, a byte per block of each Y's rows */
	LLVMValueRef bytes = mul(t, off, k64(t, 4)), fo[FJ_ATTN_BW_MAX_G];
	for (uint32_t g = 0; g < t->m.ng; g++) {
		fo[g] = bytes;
		bytes = add(t, bytes, t->m.gt[g] ? LLVMBuildUDiv(BB, t->Mp, k64(t, t->qb), "") : LLVMBuildUDiv(BB, t->Np, k64(t, KB), ""));
	}
	LLVMValueRef blk = fj_rg_aligned_alloc(t->cg, bytes);
	for (int i = 0; i < n; i++)
		*dst[i] = at(t, blk, offs[i]);
	for (uint32_t g = 0; g < t->m.ng; g++)
		t->yfin[g] = LLVMBuildInBoundsGEP2(BB, t->cg->t_i8, blk, &fo[g], 1, "");
	return blk;
}

fj_status fj_rh_tpl_attention_bw(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *body = h->body;
	bwt t0 = {.h = h, .cg = cg, .r = r, .f32 = cg->t_f32};
	bwt *t = &t0;
	uint8_t *scratch = fj_alloc(cg->ctx, body->nnodes ? body->nnodes : 1);
	if (!scratch)
		return fj_cg_error(cg, FJ_ERR_NOMEM, h->a->node, "out of memory");
	bool ok = fj_attn_bw_match(body, h->a->opaque, NULL, scratch, &t->m);
	fj_free(cg->ctx, scratch, body->nnodes ? body->nnodes : 1);
	if (!ok)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, h->a->node, "attention_bw region without its pattern");
	if (h->k->nout > MAXOUT)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "attention_bw: too many results");
	for (uint32_t j = 0; j < h->k->nout; j++) {
		t->res_g[j] = result_g(t, body->results[j], 0);
		if (t->res_g[j] < 0)
			return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node,
			                   "attention_bw: result %u is not computed from exactly one second-stage matmul", j);
	}
	for (uint32_t g = 0; g < t->m.ng; g++) {
		int w = 0;
		while (w < t->nw && t->w[w] != t->m.gw[g])
			w++;
		if (w == t->nw)
			t->w[t->nw++] = t->m.gw[g];
		t->gwi[g] = w;
	}
	for (int w = 0; w < t->nw; w++)
		t->wlive[w] = fj_cg_var(cg, cg->t_i8, NULL, "wlive");
	if (!mask_fs(t))
		return fj_cg_error(cg, FJ_ERR_NOMEM, h->a->node, "out of memory");
	t->wnan = fj_cg_var(cg, cg->t_i8, NULL, "wnan");
	t->guess = fj_cg_var(cg, cg->t_i8, NULL, "guess");
	fj_vid wv = t->m.gw[0];
	t->rank = vrank(h, body->nodes[t->m.g[0]].res[0]);
	t->xrank = vrank(h, wv);
	int bits = cg->target->vector_bits ? cg->target->vector_bits : 128;
	t->mr = bits == 512 ? 12 : 6;
	t->mrr = bits == 512 ? 8 : 6;
	t->qb = bits == 512 ? 128 : 96;
	int nrv = 2;
	fj_rg_micro_init(cg, &t->uf, FJ_DT_F32, t->mr, nrv);
	t->nr = nrv * t->uf.w;
	if (t->qb % t->nr || t->qb % t->mrr || KB % t->mr)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, h->a->node, "attention_bw: block sizes do not fit the micro-tile");
	t->uf.a_is = 1;
	t->uf.a_ks = t->mr;
	t->uf.b_ks = t->nr;
	t->uf.c_rs = t->qb;
	t->uc = t->uf;
	t->uc.a_is = t->qb;
	t->uc.a_ks = 1;
	t->uc.c_rs = t->nr;
	fj_rg_micro_init(cg, &t->ur, FJ_DT_F32, t->mrr, nrv);
	t->ur.a_is = 1;
	t->ur.a_ks = t->qb;
	t->ur.b_ks = t->nr;
	t->ur.c_rs = t->nr;
	int d = t->rank - 2;
	t->batch = d ? fj_rg_dim(r, body->nodes[t->m.g[0]].res[0], 0) : k64(t, 1);
	t->M = fj_rg_dim(r, wv, t->xrank - 2);
	t->N = fj_rg_dim(r, wv, t->xrank - 1);
	t->Mp = roundup(t, t->M, t->qb);
	t->Np = roundup(t, t->N, KB);
	for (uint32_t f = 0; f < t->m.nf; f++)
		t->kf[f] = fj_rg_dim(r, body->nodes[t->m.f[f]].opnds[0], d + 1);
	for (uint32_t g = 0; g < t->m.ng; g++) {
		t->dg[g] = fj_rg_dim(r, body->nodes[t->m.g[g]].res[0], d + 1);
		t->gpan[g] = LLVMBuildUDiv(BB, add(t, t->dg[g], k64(t, t->nr - 1)), k64(t, t->nr), "");
	}
	/* the parallel space: result 0's batch dims, one tile per batch: its
	 * dims before the last two when it is its G (the batch) or has W's
	 * leading dims (the batch and heads of a reshape back to heads), else
	 * none (one call). Never empty while a result is not: the runtime calls
	 * no kernel over an empty space, and an empty batch empties every G. */
	fj_vid r0 = body->results[0];
	const fj_type *rt = &body->values[r0].type, *wty = &body->values[wv].type;
	int pr = 0;
	if (fj_type_same_dims(rt, &body->values[body->nodes[t->m.g[t->res_g[0]]].res[0]].type))
		pr = t->rank - 2;
	else if (rt->rank == t->xrank) {
		pr = t->xrank - 2;
		for (int i = 0; i < pr; i++)
			if (rt->dims[i] != wty->dims[i])
				pr = 0;
	}
	LLVMValueRef extent = k64(t, 1);
	for (int i = 0; i < pr; i++)
		extent = mul(t, extent, fj_rg_dim(r, r0, i));
	h->k->par_out = 0;
	h->k->par_mask = ((1u << pr) - 1) | FJ_CG_PAR_PER_THREAD; /* a call packs a batch */
	fj_cg_if some, work, okb;
	fj_cg_if_begin(cg, &some, LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGT, t->batch, k64(t, 0), ""),
	                                       LLVMBuildICmp(BB, LLVMIntSGT, extent, k64(t, 0), ""), ""));
	LLVMValueRef t0r, t1r;
	fj_rg_tile_range(cg, h->lo, h->hi, extent, t->batch, &t0r, &t1r);
	fj_cg_if_begin(cg, &work, lt(t, t0r, t1r));
	LLVMValueRef blk = alloc_block(t);
	LLVMValueRef failed = LLVMBuildIsNull(BB, blk, "");
	fj_rg_fail_if(r, failed, FJ_KERR_VALUE);
	fj_cg_if_begin(cg, &okb, LLVMBuildNot(BB, failed, ""));
	fj_cg_loop lb;
	fj_cg_loop_begin(cg, &lb, t0r, t1r, "batch");
	fj_rg_scope_push(r);
	batch(t, lb.iv);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lb);
	fj_rg_free(cg, blk);
	fj_cg_if_end(cg, &okb);
	fj_cg_if_end(cg, &work);
	fj_cg_if_end(cg, &some);
	return cg->st;
}
