/* region_gpu_matmul.c -- GPU matmul templates: 16x16 shared-memory tiles
 * (SIMT) and tensor cores (mma.sync m16n8k16, f16/bf16). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

/* ---- matmul: 16x16 shared-memory tiles ---- */

fj_status fj_gpu_emit_matmul(gk *k, const char *suffix)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *mm = &body->nodes[k->a->opaque];
	fj_vid av = mm->opnds[0], bv = mm->opnds[1], ov = mm->res[0];
	int ra = body->values[av].type.rank, rb = body->values[bv].type.rank, ro = body->values[ov].type.rank;
	if (ra < 2 || rb < 2 || ro < 2 || ro > 3)
		return fj_error_status(k->a->ctx, FJ_ERR_UNSUPPORTED, mm->loc, "prims.matmul: unsupported ranks");
	fj_dtype odt = body->values[ov].type.dtype;
	fj_dtype acc_dt = fj_dtype_is_float(odt) ? FJ_DT_F64 : FJ_DT_I64;
	fj_dtype tdt = fj_dtype_is_float(odt) ? (odt == FJ_DT_F64 ? FJ_DT_F64 : FJ_DT_F32) : FJ_DT_I64;
	fj_status st = fj_gpu_entry_begin(k, suffix, TILE * TILE, 0, 0);
	if (st != FJ_OK)
		return st;
	LLVMTypeRef tty = fj_cg_compute_type(cg, tdt), aty = fj_cg_compute_type(cg, acc_dt);
	V sa = cg->target->shared_array(cg, tty, TILE * TILE, "mm_a");
	V sb = cg->target->shared_array(cg, tty, TILE * TILE, "mm_b");
	V M = fj_rg_dim(&k->r, ov, ro - 2), N = fj_rg_dim(&k->r, ov, ro - 1);
	V K = fj_rg_dim(&k->r, av, ra - 1);
	V batch = ro == 3 ? fj_rg_dim(&k->r, ov, 0) : i64c(k, 1);
	V tx = LLVMBuildURem(B, k->tid, i64c(k, TILE), "tx");
	V ty = LLVMBuildUDiv(B, k->tid, i64c(k, TILE), "ty");
	V tilesm = LLVMBuildUDiv(B, add(k, M, i64c(k, TILE - 1)), i64c(k, TILE), "");
	V tilesn = LLVMBuildUDiv(B, add(k, N, i64c(k, TILE - 1)), i64c(k, TILE), "");
	V ntiles = mul(k, mul(k, tilesm, tilesn), batch);
	V zero_t = fj_cg_const(cg, tdt, 0, 0);
	V accv = fj_cg_var(cg, aty, fj_cg_const(cg, acc_dt, 0, 0), "acc");
	gloop tl;
	fj_gpu_gloop_begin(k, &tl, k->ctaid, ntiles, k->nctaid, "tile");
	V bi = LLVMBuildUDiv(B, tl.iv, mul(k, tilesm, tilesn), "");
	V rem = LLVMBuildURem(B, tl.iv, mul(k, tilesm, tilesn), "");
	V i = add(k, mul(k, LLVMBuildUDiv(B, rem, tilesn, ""), i64c(k, TILE)), ty);
	V jj = add(k, mul(k, LLVMBuildURem(B, rem, tilesn, ""), i64c(k, TILE)), tx);
	fj_cg_set(cg, accv, fj_cg_const(cg, acc_dt, 0, 0));
	gloop kl;
	fj_gpu_gloop_begin(k, &kl, i64c(k, 0), K, i64c(k, TILE), "k");
	/* A[b, i, k0 + tx] -> sa[ty][tx]; B[b, k0 + ty, j] -> sb[ty][tx] */
	V ka = add(k, kl.iv, tx), kb = add(k, kl.iv, ty);
	V oka = LLVMBuildAnd(B, ult(k, i, M), ult(k, ka, K), "");
	V okb = LLVMBuildAnd(B, ult(k, jj, N), ult(k, kb, K), "");
	V ic = sel(k, ult(k, i, M), i, i64c(k, 0)), kac = sel(k, ult(k, ka, K), ka, i64c(k, 0));
	V jc = sel(k, ult(k, jj, N), jj, i64c(k, 0)), kbc = sel(k, ult(k, kb, K), kb, i64c(k, 0));
	V pidx[3];
	fj_rg_point p;
	int q = 0;
	if (ra == 3)
		pidx[q++] = bi;
	pidx[q++] = ic;
	pidx[q++] = kac;
	fj_rg_point_idx(&p, ra, pidx);
	V xa = sel(k, oka, fj_rg_eval_as(&k->r, av, &p, tdt), zero_t);
	q = 0;
	if (rb == 3)
		pidx[q++] = bi;
	pidx[q++] = kbc;
	pidx[q++] = jc;
	fj_rg_point_idx(&p, rb, pidx);
	V xb = sel(k, okb, fj_rg_eval_as(&k->r, bv, &p, tdt), zero_t);
	LLVMBuildStore(B, xa, LLVMBuildInBoundsGEP2(B, tty, sa, &k->tid, 1, ""));
	LLVMBuildStore(B, xb, LLVMBuildInBoundsGEP2(B, tty, sb, &k->tid, 1, ""));
	cg->target->barrier(cg);
	V acc = fj_cg_get(cg, accv, aty);
	for (int kk = 0; kk < TILE; kk++) {
		V ia = add(k, mul(k, ty, i64c(k, TILE)), i64c(k, kk));
		V ib = add(k, i64c(k, kk * TILE), tx);
		V va = LLVMBuildLoad2(B, tty, LLVMBuildInBoundsGEP2(B, tty, sa, &ia, 1, ""), "");
		V vb = LLVMBuildLoad2(B, tty, LLVMBuildInBoundsGEP2(B, tty, sb, &ib, 1, ""), "");
		va = fj_cg_convert(cg, va, tdt, acc_dt);
		vb = fj_cg_convert(cg, vb, tdt, acc_dt);
		if (fj_dtype_is_float(acc_dt)) {
			V args[3] = {va, vb, acc};
			LLVMTypeRef ps[3] = {aty, aty, aty};
			LLVMTypeRef fty = LLVMFunctionType(aty, ps, 3, 0);
			LLVMValueRef f = LLVMGetNamedFunction(cg->mod, "llvm.fma.f64");
			if (!f)
				f = LLVMAddFunction(cg->mod, "llvm.fma.f64", fty);
			acc = LLVMBuildCall2(B, fty, f, args, 3, "");
		} else {
			acc = add(k, acc, mul(k, va, vb));
		}
	}
	fj_cg_set(cg, accv, acc);
	cg->target->barrier(cg);
	fj_gpu_gloop_end(k, &kl);
	fj_cg_if c;
	fj_gpu_if_begin(k, &c, LLVMBuildAnd(B, ult(k, i, M), ult(k, jj, N), ""));
	fj_rg_bind(&k->r, ov, fj_cg_convert(cg, fj_cg_get(cg, accv, aty), acc_dt, odt));
	V oidx[3];
	q = 0;
	if (ro == 3)
		oidx[q++] = bi;
	oidx[q++] = i;
	oidx[q++] = jj;
	V olin = fj_gpu_lin_of(k, ov, oidx, ro);
	fj_gpu_store_results(k, ro, oidx, olin);
	fj_rg_bind(&k->r, ov, NULL);
	fj_gpu_if_end(k, &c);
	fj_gpu_gloop_end(k, &tl);
	return fj_gpu_entry_end(k);
}

/* ---- matmul on tensor cores: mma.sync m16n8k16, f16/bf16 operands ---- */

/* A block (4 warps) computes a 64x64 tile of the output. Per step of 32
 * along K, the block stages A[64][32] (row-major) and B[32][64] (stored
 * transposed, Bs[n][k], so that a B fragment's two k-adjacent halves are one
 * 32-bit word) in shared memory through the evaluator (prologue ops such as
 * transposes or converts are evaluated there; positions outside M, N or K
 * are zero), then each warp multiplies its 32x32 quarter: 2x4 mma tiles of
 * 16x8, f32 accumulators in registers. The accumulators then go through
 * shared memory, so that the epilogue runs once per output element with
 * adjacent threads on adjacent columns (coalesced stores), as in the SIMT
 * kernel. Rows are padded to 40 halves: the 8 rows x 4 words a warp's
 * fragment load touches fall in 32 distinct banks. */

/* The ranks the matmul templates handle (prims.matmul after decomposition). */
static bool matmul_ranks_ok(int ra, int rb, int ro)
{
	return ra >= 2 && ra <= 3 && rb >= 2 && rb <= 3 && ro >= 2 && ro <= 3;
}

/* Whether matmul region a gets the tensor-core variant: A and B both f16 or
 * both bf16 (tensor cores read them exactly; sm_80+, every supported target). */
bool fj_gpu_mma_ok(const fj_rg_analysis *a)
{
	if (a->sched != FJ_RG_MATMUL || a->opaque == FJ_NONODE)
		return false;
	const fj_graph *body = a->node->body;
	const fj_node *mm = &body->nodes[a->opaque];
	if (mm->op != FJ_OP_PRIMS_MATMUL || mm->nopnds < 2)
		return false;
	const fj_type *ta = &body->values[mm->opnds[0]].type, *tb = &body->values[mm->opnds[1]].type;
	const fj_type *to = &body->values[mm->res[0]].type;
	return matmul_ranks_ok(ta->rank, tb->rank, to->rank) && ta->dtype == tb->dtype &&
	       (ta->dtype == FJ_DT_F16 || ta->dtype == FJ_DT_BF16);
}

/* The 16-bit pattern of x (a compute value that is exactly an f16/bf16:
 * the operand has that dtype, and the evaluator rounds to it). */
static V half_bits(gk *k, V x, bool bf16)
{
	fj_cg *cg = k->cg;
	if (!bf16)
		return LLVMBuildBitCast(B, LLVMBuildFPTrunc(B, x, LLVMHalfTypeInContext(cg->llctx), ""), cg->t_i16, "");
	V u = LLVMBuildBitCast(B, x, cg->t_i32, "");
	return LLVMBuildTrunc(B, LLVMBuildLShr(B, u, fj_cg_i32(cg, 16), ""), cg->t_i16, "");
}

/* Two adjacent halves of a shared i16 array at element `at` (even) as one i32. */
static V ld_pair(gk *k, V arr, V at)
{
	V p = LLVMBuildInBoundsGEP2(B, k->cg->t_i16, arr, &at, 1, "");
	V v = LLVMBuildLoad2(B, k->cg->t_i32, p, "");
	LLVMSetAlignment(v, 4);
	return v;
}

/* Stages one operand tile into shared memory: element e of the tile is
 * (r, c) = (e / cols, e % cols) of the tile (rows x cols), read from the
 * operand at (batch bi, row0 + r, col0 + c) (zero outside rows x cols of
 * the operand) and stored at sh[r * ld_r + c * ld_c]. */
typedef struct mma_stage {
	fj_vid v;
	int rank;
	V rows, cols;          /* the operand's last two sizes */
	V row0, col0;
	int tile_rows, tile_cols;
	int64_t ld_r, ld_c;
	V sh;
} mma_stage;

static void mma_stage_tile(gk *k, const mma_stage *s, V bi, bool bf16)
{
	gloop el;
	fj_gpu_gloop_begin(k, &el, k->tid, i64c(k, (int64_t)s->tile_rows * s->tile_cols), i64c(k, MMA_THREADS), "stage");
	V r = LLVMBuildUDiv(B, el.iv, i64c(k, s->tile_cols), "");
	V c = LLVMBuildURem(B, el.iv, i64c(k, s->tile_cols), "");
	V gr = add(k, s->row0, r), gc = add(k, s->col0, c);
	V okr = ult(k, gr, s->rows), okc = ult(k, gc, s->cols);
	V idx[3];
	int q = 0;
	if (s->rank == 3)
		idx[q++] = bi;
	idx[q++] = sel(k, okr, gr, i64c(k, 0));
	idx[q++] = sel(k, okc, gc, i64c(k, 0));
	fj_rg_point p;
	fj_rg_point_idx(&p, s->rank, idx);
	V bits = half_bits(k, fj_rg_eval(&k->r, s->v, &p), bf16);
	bits = sel(k, LLVMBuildAnd(B, okr, okc, ""), bits, LLVMConstInt(k->cg->t_i16, 0, 0));
	V at = add(k, mul(k, r, i64c(k, s->ld_r)), mul(k, c, i64c(k, s->ld_c)));
	LLVMBuildStore(B, bits, LLVMBuildInBoundsGEP2(B, k->cg->t_i16, s->sh, &at, 1, ""));
	fj_gpu_gloop_end(k, &el);
}

fj_status fj_gpu_emit_matmul_mma(gk *k)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *mm = &body->nodes[k->a->opaque];
	fj_vid av = mm->opnds[0], bv = mm->opnds[1], ov = mm->res[0];
	int ra = body->values[av].type.rank, rb = body->values[bv].type.rank, ro = body->values[ov].type.rank;
	bool bf16 = body->values[av].type.dtype == FJ_DT_BF16;
	fj_dtype odt = body->values[ov].type.dtype;
	fj_status st = fj_gpu_entry_begin(k, "", MMA_THREADS, 0, 0);
	if (st != FJ_OK)
		return st;
	V sa = cg->target->shared_array(cg, cg->t_i16, MMA_BM * MMA_LD, "mma_a");
	V sb = cg->target->shared_array(cg, cg->t_i16, MMA_BN * MMA_LD, "mma_b");
	V sc = cg->target->shared_array(cg, cg->t_f32, MMA_BM * MMA_CLD, "mma_c");
	V M = fj_rg_dim(&k->r, ov, ro - 2), N = fj_rg_dim(&k->r, ov, ro - 1);
	V K = fj_rg_dim(&k->r, av, ra - 1);
	V batch = ro == 3 ? fj_rg_dim(&k->r, ov, 0) : i64c(k, 1);
	V lane = LLVMBuildAnd(B, k->tid, i64c(k, 31), "lane");
	V warp = LLVMBuildLShr(B, k->tid, i64c(k, 5), "warp");
	V g = LLVMBuildLShr(B, lane, i64c(k, 2), "g"), t2 = mul(k, LLVMBuildAnd(B, lane, i64c(k, 3), ""), i64c(k, 2));
	V wm = mul(k, LLVMBuildLShr(B, warp, i64c(k, 1), ""), i64c(k, 32));
	V wn = mul(k, LLVMBuildAnd(B, warp, i64c(k, 1), ""), i64c(k, 32));
	V tilesm = LLVMBuildUDiv(B, add(k, M, i64c(k, MMA_BM - 1)), i64c(k, MMA_BM), "");
	V tilesn = LLVMBuildUDiv(B, add(k, N, i64c(k, MMA_BN - 1)), i64c(k, MMA_BN), "");
	V per = mul(k, tilesm, tilesn);
	V zero = LLVMConstReal(cg->t_f32, 0);
	V acc[2][4][4];
	for (int mi = 0; mi < 2; mi++)
		for (int ni = 0; ni < 4; ni++)
			for (int i = 0; i < 4; i++)
				acc[mi][ni][i] = fj_cg_var(cg, cg->t_f32, NULL, "acc");
	gloop tl;
	fj_gpu_gloop_begin(k, &tl, k->ctaid, mul(k, per, batch), k->nctaid, "tile");
	V bi = LLVMBuildUDiv(B, tl.iv, per, "");
	V rem = LLVMBuildURem(B, tl.iv, per, "");
	V m0 = mul(k, LLVMBuildUDiv(B, rem, tilesn, ""), i64c(k, MMA_BM));
	V n0 = mul(k, LLVMBuildURem(B, rem, tilesn, ""), i64c(k, MMA_BN));
	for (int mi = 0; mi < 2; mi++)
		for (int ni = 0; ni < 4; ni++)
			for (int i = 0; i < 4; i++)
				fj_cg_set(cg, acc[mi][ni][i], zero);
	gloop kl;
	fj_gpu_gloop_begin(k, &kl, i64c(k, 0), K, i64c(k, MMA_BK), "k");
	/* A[bi, m0 + r, k0 + c] -> sa[r][c]; B[bi, k0 + r, n0 + c] -> sb[c][r] */
	mma_stage s_a = {av, ra, M, K, m0, kl.iv, MMA_BM, MMA_BK, MMA_LD, 1, sa};
	mma_stage s_b = {bv, rb, K, N, kl.iv, n0, MMA_BK, MMA_BN, 1, MMA_LD, sb};
	mma_stage_tile(k, &s_a, bi, bf16);
	mma_stage_tile(k, &s_b, bi, bf16);
	cg->target->barrier(cg);
	for (int ks = 0; ks < MMA_BK; ks += 16) {
		V af[2][4], bfr[4][2];
		for (int mi = 0; mi < 2; mi++) {
			V r = add(k, wm, add(k, i64c(k, mi * 16), g));
			V c = add(k, t2, i64c(k, ks));
			V r8 = add(k, r, i64c(k, 8)), c8 = add(k, c, i64c(k, 8));
			af[mi][0] = ld_pair(k, sa, add(k, mul(k, r, i64c(k, MMA_LD)), c));
			af[mi][1] = ld_pair(k, sa, add(k, mul(k, r8, i64c(k, MMA_LD)), c));
			af[mi][2] = ld_pair(k, sa, add(k, mul(k, r, i64c(k, MMA_LD)), c8));
			af[mi][3] = ld_pair(k, sa, add(k, mul(k, r8, i64c(k, MMA_LD)), c8));
		}
		for (int ni = 0; ni < 4; ni++) {
			V n = add(k, wn, add(k, i64c(k, ni * 8), g));
			V at = add(k, mul(k, n, i64c(k, MMA_LD)), add(k, t2, i64c(k, ks)));
			bfr[ni][0] = ld_pair(k, sb, at);
			bfr[ni][1] = ld_pair(k, sb, add(k, at, i64c(k, 8)));
		}
		for (int mi = 0; mi < 2; mi++)
			for (int ni = 0; ni < 4; ni++) {
				V c[4], d[4];
				for (int i = 0; i < 4; i++)
					c[i] = fj_cg_get(cg, acc[mi][ni][i], cg->t_f32);
				cg->target->mma_m16n8k16(cg, bf16, af[mi], bfr[ni], c, d);
				for (int i = 0; i < 4; i++)
					fj_cg_set(cg, acc[mi][ni][i], d[i]);
			}
	}
	cg->target->barrier(cg);
	fj_gpu_gloop_end(k, &kl);
	/* accumulators -> sc (the D fragment layout), then the epilogue */
	for (int mi = 0; mi < 2; mi++)
		for (int ni = 0; ni < 4; ni++)
			for (int i = 0; i < 4; i++) {
				V r = add(k, wm, add(k, g, i64c(k, mi * 16 + (i >= 2 ? 8 : 0))));
				V c = add(k, wn, add(k, t2, i64c(k, ni * 8 + (i & 1))));
				V at = add(k, mul(k, r, i64c(k, MMA_CLD)), c);
				LLVMBuildStore(B, fj_cg_get(cg, acc[mi][ni][i], cg->t_f32),
				               LLVMBuildInBoundsGEP2(B, cg->t_f32, sc, &at, 1, ""));
			}
	cg->target->barrier(cg);
	gloop el;
	fj_gpu_gloop_begin(k, &el, k->tid, i64c(k, MMA_BM * MMA_BN), i64c(k, MMA_THREADS), "epi");
	V r = LLVMBuildUDiv(B, el.iv, i64c(k, MMA_BN), ""), c = LLVMBuildURem(B, el.iv, i64c(k, MMA_BN), "");
	V i = add(k, m0, r), j = add(k, n0, c);
	fj_cg_if ok;
	fj_gpu_if_begin(k, &ok, LLVMBuildAnd(B, ult(k, i, M), ult(k, j, N), ""));
	V at = add(k, mul(k, r, i64c(k, MMA_CLD)), c);
	V x = LLVMBuildLoad2(B, cg->t_f32, LLVMBuildInBoundsGEP2(B, cg->t_f32, sc, &at, 1, ""), "");
	fj_rg_bind(&k->r, ov, fj_cg_convert(cg, x, FJ_DT_F32, odt));
	V oidx[3];
	int q = 0;
	if (ro == 3)
		oidx[q++] = bi;
	oidx[q++] = i;
	oidx[q++] = j;
	fj_gpu_store_results(k, ro, oidx, fj_gpu_lin_of(k, ov, oidx, ro));
	fj_rg_bind(&k->r, ov, NULL);
	fj_gpu_if_end(k, &ok);
	fj_gpu_gloop_end(k, &el);
	cg->target->barrier(cg);
	fj_gpu_gloop_end(k, &tl);
	return fj_gpu_entry_end(k);
}

/* ---- the family: rows and plan ---- */

static bool takes_matmul(const fj_rg_analysis *a) { return a->sched == FJ_RG_MATMUL; }
static bool no_mma(const fj_rg_analysis *a) { return !fj_gpu_mma_ok(a); }
static fj_status emit_simt_main(gk *k) { return fj_gpu_emit_matmul(k, ""); }
static fj_status emit_simt(gk *k) { return fj_gpu_emit_matmul(k, "_simt"); }

static const fj_gpu_variant matmul_variants[] = {
	{"", fj_gpu_mma_ok, fj_gpu_emit_matmul_mma}, /* f16/bf16: tensor cores first */
	{"", no_mma, emit_simt_main},                /* other dtypes: SIMT only */
	{"_simt", fj_gpu_mma_ok, emit_simt},         /* the SIMT kernel kept */
};

/* Tensor cores: 64x64 tiles of 4 warps ("bpr" forces the SIMT kernel, for
 * tests); SIMT: 16x16 tiles. */
static fj_status matmul_choose(const fj_gpu_sizes *s, fj_nvptx_plan *plan)
{
	const fj_graph *body = s->a->node->body;
	const fj_type *t = &body->values[body->nodes[s->a->opaque].res[0]].type;
	int64_t d[FJ_MAX_RANK];
	for (int i = 0; i < t->rank; i++)
		d[i] = s->dimval(s->ud, t->dims[i]);
	int64_t batch = t->rank == 3 ? d[0] : 1, m = d[t->rank - 2], n = d[t->rank - 1];
	bool mma = fj_gpu_mma_ok(s->a);
	if (mma && !fj_gpu_forced(s, "bpr")) {
		int64_t bt = batch * fj_gpu_ceil_div(m, MMA_BM) * fj_gpu_ceil_div(n, MMA_BN);
		return bt > 0 ? fj_gpu_launch(s, plan, "", fj_gpu_grid_of(bt, 1), MMA_THREADS, 0) : FJ_OK;
	}
	int64_t tiles = batch * fj_gpu_ceil_div(m, TILE) * fj_gpu_ceil_div(n, TILE);
	return tiles > 0 ? fj_gpu_launch(s, plan, mma ? "_simt" : "", fj_gpu_grid_of(tiles, 1), TILE * TILE, 0) : FJ_OK;
}

const fj_gpu_family fj_gpu_matmul_family = {
	"matmul", takes_matmul, matmul_variants, FJ_ARRAY_LEN(matmul_variants), matmul_choose,
};
