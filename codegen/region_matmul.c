/* region_matmul.c -- the host template of float matmul regions: a packed,
 * register-blocked GEMM (Goto/BLIS style) with the region's prologue
 * evaluated while packing and its epilogue applied per C tile.
 *
 * C[b] = A[b] x B[b] (A: M x K, B: K x N; rank 2, or rank 3 with a batch
 * dim), every operand element computed by the evaluator (region.h), so
 * transposes, converts, broadcasts ... in front of the matmul work as
 * before, but paid once per packed element instead of once per
 * multiply-add.
 *
 * Blocking. C is cut into tiles of up to MC x NC; a call works on a range
 * of units, the MR-row micro-panels of the (batch, N-tile)s in that order,
 * so that consecutive tiles share their B panel, and cuts its range into
 * tiles of up to MC/MR micro-panels within each (batch, N-tile) (see
 * Parallel space). Per call, one heap block holds
 *   Bp  the B panel of the current (batch, N-tile): all of K x NC, packed as
 *       NC/NR micro-panels [k][NR] (columns past N are zeros); repacked only
 *       when the (batch, N-tile) changes;
 *   Ap  A rows of the current tile, one K block (KC) at a time, row-major
 *       with rows LDA = KC + 64 bytes apart (rows past M are zeros): a
 *       unit-stride copy for a row-major A; the padding keeps the MR rows
 *       the micro-kernel reads at once in different cache sets. Where A is
 *       a region operand of the accumulation dtype, row-major, read in
 *       place (a_direct), only the tile's partial micro-panel is packed:
 *       the micro-kernel broadcasts the full ones' MR rows straight from A,
 *       rows the previous block prefetched into L2 (prefetch_a); Zen 4,
 *       one thread, best of 6 alternating rounds, of the FMA peak: AVX-512
 *       nn and nt shapes +1-3 %, AVX2 within the noise. An A that
 *       is contiguous along M (a transposed operand: dY^T in the weight
 *       gradient dY^T X) is packed as MR-row micro-panels [k][MR] instead,
 *       KC x MR apart, so that both its reads and its stores run along
 *       unit strides (row-major, each k would store to MC rows at once);
 *   Cb  the tile's accumulators, MC x NC (f32, or f64 for f64 matmuls).
 * The packing loops run the operand's unit-stride dim innermost when its
 * layout is known (fj_rg_fast_dim: a region operand, through transposes and
 * converts), so a transposed B (linear's weight) is read along its unit
 * stride too (its stores are then strided: that loop is kept scalar,
 * cheaper than scatters, and blocked to stay in L1; a transposed A changes
 * Ap's layout instead, see above). A B that is exactly W^T of an f32
 * operand W (the weight itself, no conversion) skips the evaluator: its
 * full micro-panels are packed from W's rows by 8 x 8 register transposes
 * (pack_bt_direct), ~10% of a [512,2048] x [2048,512] linear's time
 * (Zen 3: 9.8 -> 8.8 ms on 2 threads). Where the clamping of partial panels is
 * on the inner index, full panels get their own loop without it, so that
 * unit-stride reads stay vector loads.
 * The micro-kernel keeps an MR x NR block of Cb in registers (MR * NR/W
 * vectors of W lanes: 6 x 4 x <16 x float> with AVX-512's 32 registers,
 * 6 x 2 x <8 x float> with AVX2's 16; see plan) and, per k, loads NR/W vectors of B,
 * broadcasts MR scalars of A (constant offsets from one pointer) and issues
 * MR * NR/W llvm.fmuladd; the first K block starts from zero instead of
 * loading Cb. Loops: K blocks outside, then B micro-panels, then A
 * micro-panels (the B micro-panel, KC x NR, is reused from L1/L2 by every
 * A micro-panel; the A block, MC x LDA, stays in L2). Meanwhile the next A
 * block is prefetched into L2 where A is an operand read in place
 * (prefetch_a): A is repacked once per N-tile, from rows apart.
 * After the last K block (during which the operands the epilogue reads are
 * prefetched: prefetch_epi) the tile goes through the epilogue: the matmul
 * value bound to Cb[i][j] (rounded to the result dtype), the caller's
 * store_outputs evaluates and stores every result at that point (large
 * outputs through row buffers, streamed out: nt_plan).
 *
 * Numerics: f16/bf16/f32 accumulate in f32 (as PyTorch's CPU matmul), in
 * KC-long runs of fmuladd per element added to the tile; f64 in f64.
 * Integer matmuls are not handled here (the caller's simple loop, i64).
 *
 * Parallel space: every element of result 0 (its full shape), which the
 * runtime cuts into one contiguous chunk per thread (FJ_CG_PAR_PER_THREAD:
 * each call packs the B panels of its own tiles, and the runtime's usual
 * 4 chunks per thread packed a panel up to 4 times; Sapphire Rapids, 2
 * threads, 1024x3072x768 f32: 25.7 -> 24.1 ms, best of 6). A call for
 * [lo, hi) of [0, extent) runs units [f(lo), f(hi)) of the T units
 * (fj_rg_tile_range, which the attention kernels share with their own
 * tiles), f(x) = x T / extent rounded to the nearest integer in f64 and
 * f(extent) = T: f is monotone with f(0) = 0, so the chunks of any
 * partition of [0, extent) get disjoint unit ranges that cover every unit
 * once, in proportion to their size. A tile's outputs are written by the
 * call that owns its units only. Units of micro-panels rather than whole
 * tiles: M = 512 with AVX-512 (tiles of 48 rows, one N-tile of 512) made
 * 11 tiles, 6 for one thread of two and 5 for the other; now each gets
 * 43 micro-panels. Zen 4, 2 threads, fj-bench-ab against tile units,
 * median speed ratio (quartiles): [512,2048] x [2048,512] 1.091
 * (1.057-1.112), the same with B = W^T 1.083 (1.029-1.118); bench/graphs
 * mlp forward 1.048 (1.019-1.073), its backward 1.038 (1.012-1.061); the
 * bench/matmul shapes, whose tiles were already even, 0.98-1.00 with
 * AVX2 and 0.995-1.003 with AVX-512, the same micro-kernel loop
 * instruction for instruction.
 *
 * Memory: the block is aligned_alloc'ed per call (at most (K + MC) x NC +
 * MC x LDA elements: ~1.2 MiB for K = 1024 in f32) and freed at the end; if
 * the allocation fails the call sets FJ_KERR_VALUE and writes nothing.
 *
 * Measured (Zen 4, FMA peak ~117 GFLOP/s a core): 1024^3 f32 with a
 * bias+relu epilogue ~105 GFLOP/s on 1 thread, ~200 on 2; the previous
 * template (operands evaluated per multiply-add, f64 accumulators) ran the
 * mlp benchmark's matmuls at ~0.5 GFLOP/s.
 */
#include <string.h>

#include "codegen/emit_common.h"
#include "codegen/region_matmul.h"

enum { KB = 64, NT_MAX = 2, EPI_MAX = 4 };

typedef struct mm {
	fj_cg *cg;
	fj_rg *r;
	const fj_rg_host_mm *hm;
	fj_vid av, bv, mv;
	int rank;               /* 2 or 3 */
	fj_dtype mdt;           /* the matmul's result dtype */
	fj_dtype acc;           /* F32 or F64: accumulation and packing */
	LLVMTypeRef et, vt;     /* element and vector types of acc */
	int esz;                /* bytes per element */
	int w;                  /* lanes per vector */
	int mr, nrv, nr;        /* micro-tile: MR rows x NRV vectors (NR columns) */
	int mc, nc;             /* C tile */
	int kc;                 /* K block */
	int lda;                /* row stride of packed A: KC + 64 bytes (no cache-set aliasing of its MR rows) */
	bool apanel;            /* A packed as [k][MR] micro-panels (A contiguous along M) */
	int bt_in;              /* B = W^T of region operand W (f32 [N, K], row-major): its index; else -1 */
	int a_in;               /* A = region operand X, or X's transpose (a_swap): its index; else -1 */
	bool a_swap;
	bool a_direct;          /* A = X of the accumulation dtype: full micro-panels read from X's rows */
	int64_t a_is, a_ks;     /* packed A: element offsets between rows and between k's of a micro-panel */
	int64_t a_ps;           /* ... and between micro-panels */
	LLVMValueRef batch, M, N, K;
	LLVMValueRef ap, bp, cb;  /* packed A, packed B, C tile */
	fj_rg_micro u;          /* the micro-kernel (its accumulators) */
	int nepi;               /* region operands the epilogue reads at the tile's points (prefetch_epi) */
	int epi_in[EPI_MAX];
	int nnt;                /* outputs streamed out (nt_plan) */
	uint32_t nt_out[NT_MAX];
	LLVMValueRef nt_buf[NT_MAX]; /* their row buffers, NC elements */
	LLVMValueRef nt_ok;     /* i1: this call streams them */
} mm;

#define BB (m->cg->b)

static LLVMValueRef c64(mm *m, int64_t v) { return fj_cg_i64(m->cg, v); }
static LLVMValueRef add(mm *m, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(BB, a, b, ""); }
static LLVMValueRef mul(mm *m, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWMul(BB, a, b, ""); }
static LLVMValueRef imin(mm *m, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, a, b, ""), a, b, "");
}
/* ceil(a / b) for a >= 0, b > 0 */
static LLVMValueRef cdiv(mm *m, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildUDiv(BB, LLVMBuildNSWSub(BB, add(m, a, b), c64(m, 1), ""), b, "");
}
/* &base[off] in elements of type et */
static LLVMValueRef at(mm *m, LLVMValueRef base, LLVMValueRef off)
{
	return LLVMBuildInBoundsGEP2(BB, m->et, base, &off, 1, "");
}

/* ---- plan ---- */

bool fj_rg_host_matmul_handles(const fj_rg_analysis *a)
{
	if (a->opaque == FJ_NONODE || a->kmask)
		return false;
	const fj_graph *b = a->body;
	const fj_node *n = &b->nodes[a->opaque];
	if (n->op != FJ_OP_PRIMS_MATMUL)
		return false;
	const fj_type *ta = &b->values[n->opnds[0]].type, *tb = &b->values[n->opnds[1]].type,
	              *tm = &b->values[n->res[0]].type;
	return (tm->rank == 2 || tm->rank == 3) && ta->rank == tm->rank && tb->rank == tm->rank &&
	       fj_dtype_is_float(tm->dtype) && a->vals[b->results[0]].in_d;
}

static int fast_dim_at(const fj_rg *r, fj_vid v, int depth)
{
	const fj_rg_analysis *a = r->a;
	const fj_graph *g = a->body;
	for (; depth < 8; depth++) {
		const fj_rg_value *x = &a->vals[v];
		int rank = g->values[v].type.rank;
		if (x->cls == FJ_RG_INPUT)
			return rank - 1;
		if (x->cls != FJ_RG_FULL || x->node == FJ_NONODE)
			return -1;
		const fj_node *n = &g->nodes[x->node];
		if (n->op == FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE) {
			v = n->opnds[0];
			continue;
		}
		if (n->op != FJ_OP_PRIMS_TRANSPOSE)
			return -1;
		int f = fast_dim_at(r, n->opnds[0], depth + 1);
		const fj_attr *perm = fj_node_attr(r->cg->ctx, n, "perm");
		if (f < 0 || !perm || perm->kind != FJ_AK_LIST || perm->n != (uint32_t)rank)
			return -1;
		for (int i = 0; i < rank; i++) {
			int64_t d = perm->u.items[i].kind == FJ_AK_INT ? perm->u.items[i].u.i : -1;
			if ((d < 0 ? d + rank : d) == f)
				return i;
		}
		return -1;
	}
	return -1;
}

/* (region_matmul.h) */
int fj_rg_fast_dim(const fj_rg *r, fj_vid v) { return fast_dim_at(r, v, 0); }

/* Is v a region operand X, or X's transpose (its last two dims swapped),
 * read in place? X's index (*swap: the transpose), or -1. */
static int in_place(const mm *m, fj_vid v, bool *swap)
{
	const fj_rg_analysis *a = m->r->a;
	const fj_rg_value *x = &a->vals[v];
	*swap = false;
	if (x->cls == FJ_RG_FULL && x->node != FJ_NONODE) {
		const fj_node *n = &a->body->nodes[x->node];
		const fj_attr *perm = n->op == FJ_OP_PRIMS_TRANSPOSE ? fj_node_attr(m->cg->ctx, n, "perm") : NULL;
		if (!perm || n->nopnds != 1 || perm->kind != FJ_AK_LIST || perm->n != (uint32_t)m->rank)
			return -1;
		for (int i = 0; i < m->rank; i++) /* [1, 0] or [0, 2, 1] */
			if (fj_attr_as_int(&perm->u.items[i]) != (i < m->rank - 2 ? i : 2 * m->rank - 3 - i))
				return -1;
		x = &a->vals[n->opnds[0]];
		*swap = true;
	}
	if (x->cls != FJ_RG_INPUT || x->index < 0 || (uint32_t)x->index >= m->r->nin)
		return -1;
	const fj_cg_operand *o = &m->r->in[x->index];
	return o->none || o->literal || o->t.rank != m->rank ? -1 : x->index;
}

/* Is B the transpose of a region operand W, f32 [N, K] (linear's weight),
 * in a rank-2 f32 matmul with 8-lane vectors or wider? W's index, or -1. */
static int bt_direct(const mm *m)
{
	bool swap;
	int w = in_place(m, m->bv, &swap);
	if (m->rank != 2 || m->acc != FJ_DT_F32 || m->w < 8 || w < 0 || !swap)
		return -1;
	return m->r->in[w].t.dtype == FJ_DT_F32 ? w : -1;
}

enum { APANEL_NC = 768, APANEL_BP = 8 << 20, APANEL_TILES = 16 };

/* The region operands of the result's shape that are not the matmul's own
 * (read in place by the packing): the epilogue's, read at the tile's
 * points (a residual, gelu's saved input in its backward); prefetch_epi. */
static void epi_plan(mm *m)
{
	const fj_graph *g = m->r->a->body;
	bool b_swap;
	int b_in = in_place(m, m->bv, &b_swap);
	m->nepi = 0;
	for (uint32_t i = 0; i < m->r->nin && i < g->nparams && m->nepi < EPI_MAX; i++) {
		const fj_cg_operand *o = &m->r->in[i];
		if (o->none || o->literal || (int)i == m->a_in || (int)i == b_in || /* bt_in, when set, is b_in */
		    !fj_type_same_dims(&g->values[g->params[i]].type, &g->values[m->mv].type))
			continue;
		m->epi_in[m->nepi++] = (int)i;
	}
}

static void plan(mm *m)
{
	fj_cg *cg = m->cg;
	m->acc = m->mdt == FJ_DT_F64 ? FJ_DT_F64 : FJ_DT_F32;
	m->et = fj_cg_compute_type(cg, m->acc);
	m->esz = m->acc == FJ_DT_F64 ? 8 : 4;
	/* the register width of the CPU the JIT compiles for (backend_host/jit.c
	 * sets it from the host's features): the micro-tile fits the register file */
	int bits = cg->target->vector_bits ? cg->target->vector_bits : 128;
	m->w = bits / (8 * m->esz);
	/* accumulators + NRV B vectors + 1 broadcast fit the register file:
	 * 32 registers with AVX-512 (6 x 4 + 4 + 1), 16 otherwise (6 x 2 + 2
	 * + 1). AVX-512 has 6 x 4 rather than 12 x 2: half the broadcasts per
	 * FMA (llvm-mca's Zen 4 model puts a 512-bit broadcast on an FP pipe),
	 * and the B micro-panel, KC x 64, streams from L2 (12 x 2 at KC 256
	 * filled all of L1 with it, beside the A micro-panel), so KC can be
	 * 512: half the passes over Cb. Zen 4, one thread, the 7 shapes of
	 * bench/matmul, geometric mean of the fraction of the FMA peak (best of
	 * 5 alternating rounds): 86 % -> 88 %; the micro-kernel alone (packing
	 * and epilogue left out): 92 % -> 98 %. AVX2 keeps 6 x 2 at KC 256:
	 * 4 x 3, and KC 512, measured the same. */
	m->mr = 6;
	m->nrv = bits == 512 ? 4 : 2;
	m->kc = bits == 512 ? 512 : 256;
	m->nr = m->nrv * m->w;
	m->mc = 8 * m->mr;
	m->nc = 8 * m->nr;
	const fj_cg_target *tg = cg->target;
	if (tg->matmul_kc > 0) { /* backend_host/jit.c measures it */
		m->kc = tg->matmul_kc;
		m->mc = tg->matmul_mc_panels * m->mr;
		m->nc = tg->matmul_nc_panels * m->nr;
	}
	/* An A contiguous along M (a transposed operand: dY^T in the weight
	 * gradient) is packed into micro-panels once per tile, so once per
	 * N-tile: the transposing copy reads each row of X for MC elements,
	 * from L3 for an X wider than L2, and took ~14 % of the matmul. Wider
	 * N-tiles (APANEL_NC columns) repack it fewer times, where B's panel
	 * (K x NC, packed once per N-tile) stays within APANEL_BP bytes and
	 * the threads still share APANEL_TILES tiles or more (9 tiles of a
	 * 512 x 512 x 2048 weight gradient left one thread of two 5).
	 * Sapphire Rapids, 2 threads, median of 6 alternating rounds (with
	 * pack_a_panels' k groups): 768 x 1024 x 3072 (A = dY^T, K x M = 1024 x
	 * 768) 17.4 -> 16.5 ms, 3072 x 1024 x 768 17.1 -> 15.9; AVX2 27.9 ->
	 * 26.5 and 28.3 -> 27.5; bench/peers mlp_wide training 107 -> 101.
	 * AVX2 on AMD takes 384 (fj_cg_target.matmul_apanel_nc, jit.c). */
	m->apanel = fj_rg_fast_dim(m->r, m->av) == m->rank - 2;
	if (m->apanel && LLVMIsAConstantInt(m->K) && LLVMIsAConstantInt(m->M) && LLVMIsAConstantInt(m->N)) {
		int64_t wide = (tg->matmul_apanel_nc > 0 ? tg->matmul_apanel_nc : APANEL_NC) / m->nr * m->nr;
		int64_t k = LLVMConstIntGetSExtValue(m->K);
		int64_t mt = (LLVMConstIntGetSExtValue(m->M) + m->mc - 1) / m->mc;
		int64_t nt = (LLVMConstIntGetSExtValue(m->N) + wide - 1) / wide;
		if (wide > m->nc && k * wide * m->esz <= APANEL_BP && mt * nt >= APANEL_TILES)
			m->nc = (int)wide;
	}
	/* N cut into tiles of equal width (a multiple of NR) where N is known:
	 * the runtime shares the tiles out by count, and a last N-tile of 256
	 * beside full ones of 512 (N = 768 with AVX-512) gave one thread of two
	 * twice the other's work (2 threads: 66 % of the peak against 86 %) */
	if (LLVMIsAConstantInt(m->N)) {
		int64_t n = LLVMConstIntGetSExtValue(m->N), nt = (n + m->nc - 1) / m->nc;
		if (nt > 0)
			m->nc = (int)(((n + nt - 1) / nt + m->nr - 1) / m->nr * m->nr);
	}
	/* and a known M into tiles of equal height (a multiple of MR). When
	 * the calls split tiles rather than micro-panels, M = 1024 in tiles of
	 * 192 left a last one of 64, so that one thread of two got 8 tiles and
	 * a small one, the other 7 and two small ones (Sapphire Rapids, 2
	 * threads, 1024 x 3072 x 768: 320 -> 335 GFLOP/s; tiles of 174); a
	 * call that owns whole N-tiles still runs these tiles */
	if (LLVMIsAConstantInt(m->M)) {
		int64_t mv = LLVMConstIntGetSExtValue(m->M), mt = (mv + m->mc - 1) / m->mc;
		if (mt > 0)
			m->mc = (int)(((mv + mt - 1) / mt + m->mr - 1) / m->mr * m->mr);
	}
	m->lda = m->kc + 64 / m->esz;
	m->a_is = m->apanel ? 1 : m->lda;
	m->a_ks = m->apanel ? m->mr : 1;
	m->a_ps = m->apanel ? (int64_t)m->kc * m->mr : (int64_t)m->lda * m->mr;
	m->vt = LLVMVectorType(m->et, (unsigned)m->w);
	m->bt_in = bt_direct(m);
	m->a_in = in_place(m, m->av, &m->a_swap); /* prefetch_a */
	m->a_direct = m->a_in >= 0 && !m->a_swap && m->r->in[m->a_in].t.dtype == m->acc;
	epi_plan(m);
	fj_rg_micro_init(cg, &m->u, m->acc, m->mr, m->nrv);
	m->u.a_is = m->a_is;
	m->u.a_ks = m->a_ks;
	m->u.b_ks = m->nr;
	m->u.c_rs = m->nc;
}

/* ---- operands ---- */

void fj_rg_batch_point(fj_rg_point *p, int rank, LLVMValueRef b, LLVMValueRef row, LLVMValueRef col)
{
	LLVMValueRef idx[3];
	int n = 0;
	if (rank == 3)
		idx[n++] = b;
	idx[n++] = row;
	idx[n++] = col;
	fj_rg_point_idx(p, rank, idx);
}

/* Operand v (A or B) at (batch b, row, col), as an acc value. */
static LLVMValueRef operand_at(mm *m, fj_vid v, LLVMValueRef b, LLVMValueRef row, LLVMValueRef col)
{
	fj_rg_point p;
	fj_rg_batch_point(&p, m->rank, b, row, col);
	return fj_rg_eval_as(m->r, v, &p, m->acc);
}

/* x, or 0 where `ok` is false (padding of partial panels) */
static LLVMValueRef or_zero(mm *m, LLVMValueRef ok, LLVMValueRef x)
{
	return LLVMBuildSelect(BB, ok, x, LLVMConstNull(m->et), "");
}

static void store_elem(mm *m, LLVMValueRef ptr, LLVMValueRef x)
{
	LLVMSetAlignment(LLVMBuildStore(BB, x, ptr), (unsigned)m->esz);
}

/* Packs B micro-panels [jr0, jr1) of columns jc + jr*NR ... into Bp: panel
 * jr at Bp[jr*K*NR ...], [k][NR]. With `clamp` (the last, partial panel),
 * columns >= N read column N-1 and store 0; without it the column index is
 * affine in the loop counter, so unit-stride reads stay vector loads.
 * k_inner: the k loop innermost (B contiguous along k: linear's weights),
 * over blocks of KB k's so that the panel rows being written (KB x NR)
 * stay in L1 (k over all of K would write each line NR times from L3).
 * Otherwise k outermost, then the panels: each k reads its row's run of
 * the tile, NC columns, in order. (Panel by panel instead, every k started
 * an NR-wide run on another row, a page apart for rows of 1024 floats:
 * a miss each that no prefetcher follows, ~3 % of a 1024^3 matmul on one
 * Zen 4 thread.) */
static void pack_b_panels(mm *m, LLVMValueRef b, LLVMValueRef jc, LLVMValueRef jr0, LLVMValueRef jr1, bool clamp,
                          bool k_inner)
{
	fj_cg *cg = m->cg;
	fj_rg *r = m->r;
	LLVMValueRef nlast = LLVMBuildNSWSub(BB, m->N, c64(m, 1), "");
	fj_cg_loop lo, lb, l1, l2;
	/* k_inner: panel, k block, column, k; else k, panel, column */
	fj_cg_loop_begin(cg, &lo, k_inner ? jr0 : c64(m, 0), k_inner ? jr1 : m->K, k_inner ? "bpanel" : "bk");
	fj_rg_scope_push(r);
	if (k_inner) {
		fj_cg_loop_begin(cg, &lb, c64(m, 0), m->K, "bkb");
		lb.step = c64(m, KB);
		LLVMValueRef kend = imin(m, add(m, lb.iv, c64(m, KB)), m->K);
		fj_cg_loop_begin(cg, &l1, c64(m, 0), c64(m, m->nr), "bj");
		fj_rg_scope_push(r);
		fj_cg_loop_begin(cg, &l2, lb.iv, kend, "bk");
	} else {
		fj_cg_loop_begin(cg, &l1, jr0, jr1, "bpanel");
		fj_rg_scope_push(r);
		fj_cg_loop_begin(cg, &l2, c64(m, 0), c64(m, m->nr), "bj");
	}
	fj_rg_scope_push(r);
	LLVMValueRef jr = k_inner ? lo.iv : l1.iv, k = k_inner ? l2.iv : lo.iv, jj = k_inner ? l1.iv : l2.iv;
	LLVMValueRef col = add(m, add(m, jc, mul(m, jr, c64(m, m->nr))), jj);
	LLVMValueRef x = operand_at(m, m->bv, b, k, clamp ? imin(m, col, nlast) : col);
	if (clamp)
		x = or_zero(m, LLVMBuildICmp(BB, LLVMIntSLT, col, m->N, ""), x);
	LLVMValueRef base = mul(m, jr, mul(m, m->K, c64(m, m->nr)));
	store_elem(m, at(m, m->bp, add(m, base, add(m, mul(m, k, c64(m, m->nr)), jj))), x);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l2);
	if (k_inner)
		fj_cg_loop_no_vectorize(cg, &l2); /* strided stores: scatters cost more than scalar stores */
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l1);
	if (k_inner)
		fj_cg_loop_end(cg, &lb);
	else
		fj_cg_loop_no_vectorize(cg, &l1); /* across panels: the NR columns' run is one vector copy */
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lo);
}

/* The lanes idx[0..8) of a and b (b's from 8 on). */
static LLVMValueRef shuffle2(mm *m, LLVMValueRef a, LLVMValueRef b, const int *idx)
{
	LLVMValueRef mask[8];
	for (int i = 0; i < 8; i++)
		mask[i] = fj_cg_i32(m->cg, idx[i]);
	return LLVMBuildShuffleVector(BB, a, b, LLVMConstVector(mask, 8), "");
}

/* v[0..8): eight <8 x float> rows (v[c][k]) -> their transpose (v[k][c]):
 * unpack pairs, then pairs of pairs, then the 128-bit halves (vunpcklps,
 * vshufps, vperm2f128 on x86). */
static void transpose8(mm *m, LLVMValueRef *v)
{
	static const int lo1[] = {0, 8, 1, 9, 4, 12, 5, 13}, hi1[] = {2, 10, 3, 11, 6, 14, 7, 15};
	static const int lo2[] = {0, 1, 8, 9, 4, 5, 12, 13}, hi2[] = {2, 3, 10, 11, 6, 7, 14, 15};
	static const int lo4[] = {0, 1, 2, 3, 8, 9, 10, 11}, hi4[] = {4, 5, 6, 7, 12, 13, 14, 15};
	LLVMValueRef t[8], u[8];
	for (int i = 0; i < 4; i++) {
		t[2 * i] = shuffle2(m, v[2 * i], v[2 * i + 1], lo1);
		t[2 * i + 1] = shuffle2(m, v[2 * i], v[2 * i + 1], hi1);
	}
	for (int h = 0; h < 2; h++) /* u[4h .. 4h+4): rows 4h .. 4h+4 at k = 0,1,2,3 | 4,5,6,7 */
		for (int i = 0; i < 2; i++) {
			u[4 * h + 2 * i] = shuffle2(m, t[4 * h + i], t[4 * h + i + 2], lo2);
			u[4 * h + 2 * i + 1] = shuffle2(m, t[4 * h + i], t[4 * h + i + 2], hi2);
		}
	for (int k = 0; k < 4; k++) {
		v[k] = shuffle2(m, u[k], u[k + 4], lo4);
		v[k + 4] = shuffle2(m, u[k], u[k + 4], hi4);
	}
}

/* Packs B = W^T's full micro-panels [0, nfull) from W's rows (bt_in):
 * eight rows of W (columns of B) at a time, eight k's each, loaded as
 * vectors along W's unit stride and stored transposed, eight columns of a
 * panel row per store; the last K % 8 k's one element at a time. The
 * scalar pack of such a B (pack_b_panels, k innermost) loads and stores
 * every element apart: K x NR of them per micro-panel, 1M per call for a
 * [512, 2048] weight. */
static void pack_bt_direct(mm *m, LLVMValueRef jc, LLVMValueRef nfull)
{
	fj_cg *cg = m->cg;
	const fj_cg_tensor *w = &m->r->in[m->bt_in].t;
	LLVMTypeRef v8 = LLVMVectorType(m->et, 8);
	LLVMValueRef k8 = LLVMBuildAnd(BB, m->K, c64(m, ~(int64_t)7), "");
	fj_cg_loop lj, lk, lt;
	fj_cg_loop_begin(cg, &lj, c64(m, 0), nfull, "btpanel");
	LLVMValueRef c0 = add(m, jc, mul(m, lj.iv, c64(m, m->nr)));
	LLVMValueRef base = mul(m, lj.iv, mul(m, m->K, c64(m, m->nr)));
	fj_cg_loop_begin(cg, &lk, c64(m, 0), k8, "btk");
	lk.step = c64(m, 8);
	for (int g = 0; g < m->nr / 8; g++) {
		LLVMValueRef v[8];
		for (int c = 0; c < 8; c++) {
			LLVMValueRef row = mul(m, add(m, c0, c64(m, g * 8 + c)), w->stride[0]);
			v[c] = LLVMBuildLoad2(BB, v8, at(m, w->ptr, add(m, row, lk.iv)), "");
			LLVMSetAlignment(v[c], (unsigned)m->esz);
		}
		transpose8(m, v);
		for (int k = 0; k < 8; k++) {
			LLVMValueRef off = add(m, mul(m, add(m, lk.iv, c64(m, k)), c64(m, m->nr)), c64(m, g * 8));
			LLVMSetAlignment(LLVMBuildStore(BB, v[k], at(m, m->bp, add(m, base, off))), (unsigned)m->esz);
		}
	}
	fj_cg_loop_end(cg, &lk);
	fj_cg_loop_begin(cg, &lt, k8, m->K, "btt");
	for (int jj = 0; jj < m->nr; jj++) {
		LLVMValueRef row = mul(m, add(m, c0, c64(m, jj)), w->stride[0]);
		LLVMValueRef x = LLVMBuildLoad2(BB, m->et, at(m, w->ptr, add(m, row, lt.iv)), "");
		LLVMSetAlignment(x, (unsigned)m->esz);
		store_elem(m, at(m, m->bp, add(m, base, add(m, mul(m, lt.iv, c64(m, m->nr)), c64(m, jj)))), x);
	}
	fj_cg_loop_end(cg, &lt);
	fj_cg_loop_end(cg, &lj);
}

/* Packs B[b, 0:K, jc : jc + njr*NR] into Bp. Columns innermost: the full
 * micro-panels, then the partial one (if any), so that the full ones index
 * without clamping. */
static void pack_b(mm *m, LLVMValueRef b, LLVMValueRef jc, LLVMValueRef njr)
{
	bool k_inner = fj_rg_fast_dim(m->r, m->bv) == m->rank - 2;
	if (k_inner && m->bt_in < 0) { /* the clamp is invariant in the inner loop: one loop nest */
		pack_b_panels(m, b, jc, c64(m, 0), njr, true, true);
		return;
	}
	LLVMValueRef nfull = imin(m, njr, LLVMBuildSDiv(BB, LLVMBuildNSWSub(BB, m->N, jc, ""), c64(m, m->nr), ""));
	if (k_inner) { /* a weight: transposed 8 x 8 at a time */
		pack_bt_direct(m, jc, nfull);
		pack_b_panels(m, b, jc, nfull, njr, true, true);
		return;
	}
	pack_b_panels(m, b, jc, c64(m, 0), nfull, false, false);
	pack_b_panels(m, b, jc, nfull, njr, true, false);
}

/* Packs rows [i0, i1) of the tile (A[b, ic + i, pc : pc + kl]) into Ap,
 * row-major with rows LDA apart (micro-panel ir: rows ir*MR ...); the
 * micro-kernel broadcasts from MR rows at constant offsets. With `clamp`
 * rows >= M read row M-1 and store 0. */
static void pack_a_rows(mm *m, LLVMValueRef b, LLVMValueRef ic, LLVMValueRef i0, LLVMValueRef i1, LLVMValueRef pc,
                        LLVMValueRef kl)
{
	fj_cg *cg = m->cg;
	fj_rg *r = m->r;
	LLVMValueRef mlast = LLVMBuildNSWSub(BB, m->M, c64(m, 1), "");
	fj_cg_loop l1, l2;
	fj_cg_loop_begin(cg, &l1, i0, i1, "arow");
	fj_rg_scope_push(r);
	fj_cg_loop_begin(cg, &l2, c64(m, 0), kl, "ak");
	fj_rg_scope_push(r);
	LLVMValueRef row = add(m, ic, l1.iv);
	LLVMValueRef x = operand_at(m, m->av, b, imin(m, row, mlast), add(m, pc, l2.iv));
	x = or_zero(m, LLVMBuildICmp(BB, LLVMIntSLT, row, m->M, ""), x);
	store_elem(m, at(m, m->ap, add(m, mul(m, l1.iv, c64(m, m->lda)), l2.iv)), x);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l2);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l1);
}

/* Packs micro-panels [ir0, ir1) of the tile into Ap as [k][MR] (panel ir at
 * ir * KC*MR): groups of APANEL_KG k's, then the panels, then the group's
 * k's, then MR rows unrolled (one vector copy), so that the reads of an A
 * contiguous along M run along its rows (the group's rows, MC elements
 * each, stay in L1 while every panel takes its part) and each panel is
 * written APANEL_KG x MR elements at a time: one k per step across all
 * the panels (KC x MR apart) kept every panel's line in flight at once.
 * Sapphire Rapids, 2 threads, median of 6 alternating rounds: 768 x 1024
 * x 3072 with A = dY^T 18.1 -> 17.5 ms (without any packing: 14.3-15.4).
 * With `clamp` (the last, partial panel) rows >= M read row M-1 and store
 * 0. */
enum { APANEL_KG = 8 };

static void pack_a_panels(mm *m, LLVMValueRef b, LLVMValueRef ic, LLVMValueRef ir0, LLVMValueRef ir1,
                          LLVMValueRef pc, LLVMValueRef kl, bool clamp)
{
	fj_cg *cg = m->cg;
	fj_rg *r = m->r;
	LLVMValueRef mlast = LLVMBuildNSWSub(BB, m->M, c64(m, 1), "");
	fj_cg_loop lg, lk, lr;
	fj_cg_loop_begin(cg, &lg, c64(m, 0), kl, "apg");
	lg.step = c64(m, APANEL_KG);
	fj_cg_loop_begin(cg, &lr, ir0, ir1, "apr");
	fj_cg_loop_begin(cg, &lk, lg.iv, imin(m, add(m, lg.iv, c64(m, APANEL_KG)), kl), "apk");
	LLVMValueRef col = add(m, pc, lk.iv);
	LLVMValueRef dst = at(m, m->ap, add(m, mul(m, lr.iv, c64(m, m->a_ps)), mul(m, lk.iv, c64(m, m->mr))));
	LLVMValueRef row0 = add(m, ic, mul(m, lr.iv, c64(m, m->mr)));
	for (int ii = 0; ii < m->mr; ii++) {
		fj_rg_scope_push(r);
		LLVMValueRef row = add(m, row0, c64(m, ii));
		LLVMValueRef x = operand_at(m, m->av, b, clamp ? imin(m, row, mlast) : row, col);
		if (clamp)
			x = or_zero(m, LLVMBuildICmp(BB, LLVMIntSLT, row, m->M, ""), x);
		store_elem(m, at(m, dst, c64(m, ii)), x);
		fj_rg_scope_pop(r);
	}
	/* none of the three loops vectorised: across k's, 16 k's would be a
	 * gather (rows of A^T apart; the weight gradient 3072 x 1024 x 768 once
	 * ran in 61.4 ms instead of 52.0, AVX-512, one thread); across panels,
	 * gathers and scatters; the MR rows' run is one vector copy already */
	fj_cg_loop_end(cg, &lk);
	fj_cg_loop_no_vectorize(cg, &lk);
	fj_cg_loop_end(cg, &lr);
	fj_cg_loop_no_vectorize(cg, &lr);
	fj_cg_loop_end(cg, &lg);
	fj_cg_loop_no_vectorize(cg, &lg);
}

/* Packs A[b, ic : ic + nir*MR, pc : pc + kl] into Ap, of whose micro-panels
 * the first nfull have every row < M. As panels: the full ones, then the
 * partial one (if any), so that the full ones index without clamping. With
 * a_direct, rows: the partial panel only (the micro-kernel reads the full
 * ones from A). */
static void pack_a(mm *m, LLVMValueRef b, LLVMValueRef ic, LLVMValueRef nir, LLVMValueRef nfull, LLVMValueRef pc,
                   LLVMValueRef kl)
{
	if (!m->apanel) { /* the clamp is invariant in the inner loop: one loop nest */
		LLVMValueRef i0 = m->a_direct ? mul(m, nfull, c64(m, m->mr)) : c64(m, 0);
		pack_a_rows(m, b, ic, i0, mul(m, nir, c64(m, m->mr)), pc, kl);
		return;
	}
	pack_a_panels(m, b, ic, c64(m, 0), nfull, pc, kl, false);
	pack_a_panels(m, b, ic, nfull, nir, pc, kl, true);
}

/* ---- the micro-kernel ---- */

static LLVMValueRef uload(fj_cg *cg, const fj_rg_micro *u, LLVMValueRef ptr)
{
	LLVMValueRef v = LLVMBuildLoad2(cg->b, u->vt, ptr, "");
	LLVMSetAlignment(v, (unsigned)(u->w * u->esz)); /* every vector offset is a multiple of W */
	return v;
}

static LLVMValueRef uat(fj_cg *cg, const fj_rg_micro *u, LLVMValueRef base, int64_t off)
{
	LLVMValueRef o = fj_cg_i64(cg, off);
	return LLVMBuildInBoundsGEP2(cg->b, u->et, base, &o, 1, "");
}

void fj_rg_micro_init(fj_cg *cg, fj_rg_micro *u, fj_dtype acc, int mr, int nrv)
{
	u->esz = acc == FJ_DT_F64 ? 8 : 4;
	u->et = fj_cg_compute_type(cg, acc);
	int bits = cg->target->vector_bits ? cg->target->vector_bits : 128;
	u->w = bits / (8 * u->esz);
	u->vt = LLVMVectorType(u->et, (unsigned)u->w);
	u->mr = mr;
	u->nrv = nrv;
	u->a_isv = NULL;
	FJ_ASSERT(mr * nrv <= FJ_RG_MICRO_MAX);
	for (int i = 0; i < mr * nrv; i++)
		u->accv[i] = fj_cg_var(cg, u->vt, NULL, "cacc");
}

/* The accumulators are variables: SROA makes them registers (loop phis). */
void fj_rg_micro_emit(fj_cg *cg, const fj_rg_micro *u, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c,
                      LLVMValueRef kl, LLVMValueRef first)
{
	LLVMBuilderRef bb = cg->b;
	fj_cg_if f;
	fj_cg_if_begin(cg, &f, first);
	for (int i = 0; i < u->mr * u->nrv; i++)
		fj_cg_set(cg, u->accv[i], LLVMConstNull(u->vt));
	fj_cg_if_else(cg, &f);
	for (int i = 0; i < u->mr; i++)
		for (int v = 0; v < u->nrv; v++)
			fj_cg_set(cg, u->accv[i * u->nrv + v], uload(cg, u, uat(cg, u, c, i * u->c_rs + v * u->w)));
	fj_cg_if_end(cg, &f);
	unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
	LLVMTypeRef vt = u->vt;
	LLVMValueRef fma = LLVMGetIntrinsicDeclaration(cg->mod, id, &vt, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(cg->llctx, id, &vt, 1);
	LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(cg->t_i32, (unsigned)u->w));
	LLVMValueRef arow[FJ_RG_MICRO_MAX];
	for (int i = 0; u->a_isv && i < u->mr; i++) {
		LLVMValueRef o = LLVMBuildNSWMul(bb, u->a_isv, fj_cg_i64(cg, i), "");
		arow[i] = LLVMBuildInBoundsGEP2(bb, u->et, a, &o, 1, "");
	}
	fj_cg_loop lk;
	fj_cg_loop_begin(cg, &lk, fj_cg_i64(cg, 0), kl, "mk");
	LLVMValueRef bo = LLVMBuildNSWMul(bb, lk.iv, fj_cg_i64(cg, u->b_ks), "");
	LLVMValueRef ao = LLVMBuildNSWMul(bb, lk.iv, fj_cg_i64(cg, u->a_ks), "");
	LLVMValueRef bk = LLVMBuildInBoundsGEP2(bb, u->et, b, &bo, 1, "");
	LLVMValueRef ak = LLVMBuildInBoundsGEP2(bb, u->et, a, &ao, 1, "");
	LLVMValueRef bvec[FJ_RG_MICRO_MAX];
	for (int v = 0; v < u->nrv; v++)
		bvec[v] = uload(cg, u, uat(cg, u, bk, v * u->w));
	for (int i = 0; i < u->mr; i++) {
		LLVMValueRef ai = u->a_isv ? LLVMBuildInBoundsGEP2(bb, u->et, arow[i], &ao, 1, "") : uat(cg, u, ak, i * u->a_is);
		LLVMValueRef x = LLVMBuildLoad2(bb, u->et, ai, "");
		LLVMSetAlignment(x, (unsigned)u->esz);
		LLVMValueRef xv = LLVMBuildInsertElement(bb, LLVMGetPoison(u->vt), x, fj_cg_i32(cg, 0), "");
		LLVMValueRef xs = LLVMBuildShuffleVector(bb, xv, LLVMGetPoison(u->vt), zeros, "");
		for (int v = 0; v < u->nrv; v++) {
			LLVMValueRef var = u->accv[i * u->nrv + v];
			LLVMValueRef args[3] = {xs, bvec[v], fj_cg_get(cg, var, u->vt)};
			fj_cg_set(cg, var, LLVMBuildCall2(bb, fty, fma, args, 3, ""));
		}
	}
	fj_cg_loop_end(cg, &lk);
	/* four k's per iteration: the row addresses and the loop's count and
	 * branch once per four, integer ops that otherwise take issue slots on
	 * the FMA ports. Sapphire Rapids, 2 threads, 1024 x 768 x 3072, best
	 * of 4 alternating rounds: AVX-512 305 -> 315-324 GFLOP/s, AVX2 195 ->
	 * 207 (of ~250: 78 -> 82 %); 2 and 8 measured as 4 */
	fj_cg_loop_unroll(cg, &lk, 4);
	for (int i = 0; i < u->mr; i++)
		for (int v = 0; v < u->nrv; v++)
			LLVMSetAlignment(LLVMBuildStore(bb, fj_cg_get(cg, u->accv[i * u->nrv + v], u->vt),
			                                uat(cg, u, c, i * u->c_rs + v * u->w)),
			                 (unsigned)(u->w * u->esz));
}

/* ---- one tile ---- */

/* The element offset of (batch b, i0, i1) in region operand t of the
 * matmul's rank (b unused at rank 2). */
static LLVMValueRef in_offset(mm *m, const fj_cg_tensor *t, LLVMValueRef b, LLVMValueRef i0, LLVMValueRef i1)
{
	LLVMValueRef idx[3];
	int n = 0;
	if (m->rank == 3)
		idx[n++] = b;
	idx[n++] = i0;
	idx[n++] = i1;
	return fj_cg_offset(m->cg, t, idx);
}

/* The micro-kernel calls of a full tile in one K block: the calls q of
 * macro() among which prefetch_a and prefetch_epi share out their lines. */
static int64_t tile_calls(const mm *m)
{
	return (int64_t)(m->mc / m->mr) * (m->nc / m->nr);
}

/* Prefetches (into L2) micro-kernel q's share of the next A block: batch
 * nb, rows nic .. nic + MC, k's npc .. npc + KC of X (in_place), whose
 * pack_a would otherwise wait on memory. Packing A from rows apart (MC
 * short runs along k, or KC along M for a transpose) is latency-bound
 * where the hardware prefetchers do not follow it: with NC/NR = 8 N-tiles
 * of 1024 x 3072 x 768 repacking A 6 times, ~13 of 72 ms (AVX2, Zen 4, one
 * thread). The block's lines are shared out over the MC/MR x NC/NR
 * micro-kernels of a full tile: along X's strided dim (rows of A, or k's
 * of a transpose) a few indices each, every line of the unit-stride run
 * (prefetches past the operand's end are harmless: none faults).
 * Measured on Zen 4, one thread, best of 5-8 alternating rounds, of the
 * FMA peak: AVX2 1024x3072x768 80 -> 86 %, the weight gradient 3072 x
 * 1024 x 768 (a transposed A) 80 -> 87 %; AVX-512 (NC twice as wide: half
 * the repacks) row-major A +1-2 %, but a transposed A -1 to -5 % (768 x
 * 1024 x 3072): not prefetched there. Two threads: within the noise. */
static void prefetch_a(mm *m, LLVMValueRef q, LLVMValueRef nb, LLVMValueRef nic, LLVMValueRef npc)
{
	if (m->a_in < 0 || (m->a_swap && m->w * m->esz > 32))
		return;
	fj_cg *cg = m->cg;
	const fj_cg_tensor *t = &m->r->in[m->a_in].t;
	int64_t per = 64 / (int64_t)fj_dtype_size(t->dtype);
	int64_t slow = m->a_swap ? m->kc : m->mc, fast = m->a_swap ? m->mc : m->kc;
	int64_t nq = tile_calls(m), c = (slow + nq - 1) / nq;
	LLVMValueRef s0 = mul(m, q, c64(m, c));
	fj_cg_if in;
	fj_cg_if_begin(cg, &in, LLVMBuildICmp(BB, LLVMIntSLT, s0, c64(m, slow), ""));
	for (int64_t j = 0; j < c; j++) {
		LLVMValueRef sl = add(m, s0, c64(m, j));
		for (int64_t f = 0; f < fast + per; f += per) { /* ..., then the run's last element's line */
			LLVMValueRef fa = c64(m, f < fast ? f : fast - 1);
			LLVMValueRef row = add(m, nic, m->a_swap ? fa : sl), col = add(m, npc, m->a_swap ? sl : fa);
			LLVMValueRef off = m->a_swap ? in_offset(m, t, nb, col, row) : in_offset(m, t, nb, row, col);
			fj_cg_prefetch(cg, t, off, FJ_CG_PREFETCH_L2);
		}
	}
	fj_cg_if_end(cg, &in);
}

/* Prefetches (into L2) call q's share of the next B micro-panel, (jr + 1,
 * K block pc), else (0, pc + KC) after the tile's last jr, where the target
 * asks for it (matmul_prefetch_b) and B's panel (K x NC, K known) exceeds
 * PREFETCH_B_MIN bytes. A panel that does not stay in L2 (K = 3072: 3 MiB)
 * reaches each micro-panel's first micro-kernel from L3, by the hardware
 * prefetchers, which start over at every micro-panel; fetched during the
 * MC / MR calls of the micro-panel before, its KC x NR lines are spread
 * over them (16 a call with Intel's blocking, one call ~1500 cycles).
 * Intel Xeon (Emerald Rapids), fj-bench-ab against the library without
 * it, median speed ratio (quartiles), AVX-512, one thread: 1024 x 3072 x
 * 768 1.028 (1.021-1.038), the weight gradients 3072 x 1024 x 768 1.027
 * (1.014-1.044) and 768 x 1024 x 3072 1.013 (1.009-1.017); two threads
 * the same; AVX2 1.005-1.014. Panels of 1 MiB or less (1024^3: 1 MiB,
 * 512 x 512 x 2048: 512 KiB) stay in L2, and prefetched they ran 0.2-0.9
 * % slower. */
enum { PREFETCH_B_MIN = 1 << 20 };

static void prefetch_b(mm *m, LLVMValueRef q, LLVMValueRef jr, LLVMValueRef njr, LLVMValueRef pc)
{
	if (!m->cg->target->matmul_prefetch_b || !LLVMIsAConstantInt(m->K) ||
	    LLVMConstIntGetSExtValue(m->K) * m->nc * m->esz <= PREFETCH_B_MIN)
		return;
	fj_cg *cg = m->cg;
	fj_cg_tensor bt = {.ptr = m->bp, .dtype = m->acc};
	int64_t per = 64 / m->esz, lines = (int64_t)m->kc * m->nr / per, nq = m->mc / m->mr;
	int64_t c = (lines + nq - 1) / nq;
	LLVMValueRef nr = c64(m, m->nr);
	LLVMValueRef j1 = add(m, jr, c64(m, 1)), last = LLVMBuildICmp(BB, LLVMIntSGE, j1, njr, "");
	LLVMValueRef next = LLVMBuildSelect(BB, last, mul(m, add(m, pc, c64(m, m->kc)), nr),
	                                    add(m, mul(m, j1, mul(m, m->K, nr)), mul(m, pc, nr)), "");
	LLVMValueRef first = add(m, next, mul(m, q, c64(m, c * per)));
	/* after the tile's last K block, lines of no use or past Bp's end: harmless, none faults */
	for (int64_t j = 0; j < c; j++)
		fj_cg_prefetch(cg, &bt, add(m, first, c64(m, j * per)), FJ_CG_PREFETCH_L2);
}

/* Prefetches (into L2) call q's share of the tile's epilogue operands
 * (epi_plan): rows ic .. ic + MC, columns jc .. jc + NC, during the
 * tile's last K block, whose micro-kernels run while they come in; the
 * epilogue would otherwise wait on memory for each row of them, a long
 * computation per element (the exact gelu's backward) behind latency-bound
 * loads: in perf, a fifth of the samples of [1024,768] x [768,3072] with
 * gelu_backward's epilogue (its saved input h [1024,3072] read there) were
 * in the epilogue, a quarter of those on the first load of h. Intel Xeon
 * (Emerald Rapids), fj-bench-ab against the library without it, median
 * speed ratio (quartiles): AVX-512 one thread 1.064 (1.051-1.076), two
 * 1.034 (1.009-1.056), AVX2 two 1.039 (1.021-1.067); the mlp_wide
 * forward (a residual) 1.008 (0.990-1.028). Rows and columns past the
 * operand's end are harmless: a prefetch never faults. */
static void prefetch_epi(mm *m, LLVMValueRef q, LLVMValueRef b, LLVMValueRef ic, LLVMValueRef jc, LLVMValueRef last)
{
	if (!m->nepi)
		return;
	fj_cg *cg = m->cg;
	int64_t nq = tile_calls(m);
	fj_cg_if in;
	fj_cg_if_begin(cg, &in, last);
	for (int e = 0; e < m->nepi; e++) {
		const fj_cg_tensor *t = &m->r->in[m->epi_in[e]].t;
		int64_t per = 64 / (int64_t)fj_dtype_size(t->dtype), lpr = (m->nc + per - 1) / per;
		int64_t c = (m->mc * lpr + nq - 1) / nq;
		LLVMValueRef l0 = mul(m, q, c64(m, c));
		for (int64_t j = 0; j < c; j++) {
			LLVMValueRef l = add(m, l0, c64(m, j));
			LLVMValueRef row = add(m, ic, LLVMBuildUDiv(BB, l, c64(m, lpr), ""));
			LLVMValueRef col = add(m, jc, mul(m, LLVMBuildURem(BB, l, c64(m, lpr), ""), c64(m, per)));
			fj_cg_prefetch(cg, t, in_offset(m, t, b, row, col), FJ_CG_PREFETCH_L2);
		}
	}
	fj_cg_if_end(cg, &in);
}

/* ---- denormals ----
 * An x86 multiply or FMA with a denormal operand or result takes a
 * microcode assist of ~100+ cycles on Intel cores: Intel Xeon (Sapphire
 * Rapids), 1024 x 3072 x 768 f32 on 2 threads, 19 ms with A uniform in
 * [-1, 1), 870-950 ms with 30 % of A's elements denormal (PyTorch's MKL
 * matmul: 14 and 850). Training makes such inputs: the exact gelu's
 * backward is x phi(x) for x < -13, denormal between -13.2 and -14.5, and
 * it is the left operand of two matmuls (the MLP of bench/peers/mlp_wide.fj:
 * its backward 183 ms, against 75 for the same graph on inputs without
 * denormals). So on x86 the micro-kernels of a macro step run with MXCSR's
 * DAZ (denormal operands read as 0) and FTZ (denormal results written as
 * 0) set, the caller's MXCSR saved before and put back after: the packing,
 * which evaluates the prologue, and the epilogue keep the caller's
 * (IEEE) arithmetic. A product or partial sum below 2^-126 in magnitude
 * (2^-1022 in f64) then counts as 0: a result moves by at most K times that
 * times the largest |B|, beyond its last bit only where it is itself that
 * small. Two writes of MXCSR per macro step (MC x NC x KC multiply-adds). */
enum { MXCSR_DAZ = 0x40, MXCSR_FTZ = 0x8000 };

static LLVMValueRef mxcsr_call(mm *m, const char *name, LLVMValueRef slot)
{
	unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(m->cg->mod, id, NULL, 0);
	return LLVMBuildCall2(BB, LLVMIntrinsicGetType(m->cg->llctx, id, NULL, 0), f, &slot, 1, "");
}

/* Sets DAZ and FTZ; returns the caller's MXCSR (NULL: not x86). */
static LLVMValueRef flush_begin(mm *m, LLVMValueRef slot)
{
	if (!m->cg->target->matmul_flush)
		return NULL;
	mxcsr_call(m, "llvm.x86.sse.stmxcsr", slot);
	LLVMValueRef old = LLVMBuildLoad2(BB, m->cg->t_i32, slot, "mxcsr");
	LLVMBuildStore(BB, LLVMBuildOr(BB, old, LLVMConstInt(m->cg->t_i32, MXCSR_DAZ | MXCSR_FTZ, 0), ""), slot);
	mxcsr_call(m, "llvm.x86.sse.ldmxcsr", slot);
	return old;
}

static void flush_end(mm *m, LLVMValueRef slot, LLVMValueRef old)
{
	if (!old)
		return;
	LLVMBuildStore(BB, old, slot);
	mxcsr_call(m, "llvm.x86.sse.ldmxcsr", slot);
}

/* Cb += A block (pc, kl) x B, over every micro-tile of the tile (at ic,
 * jc), the next A block (batch nb, rows nic, k's npc) prefetched
 * meanwhile, and in the tile's last block (last) its epilogue's operands. */
static void macro(mm *m, LLVMValueRef b, LLVMValueRef ic, LLVMValueRef jc, LLVMValueRef nir, LLVMValueRef nfull,
                  LLVMValueRef njr, LLVMValueRef pc, LLVMValueRef kl, LLVMValueRef last, LLVMValueRef nb,
                  LLVMValueRef nic, LLVMValueRef npc)
{
	fj_cg *cg = m->cg;
	LLVMValueRef slot = fj_cg_var(cg, cg->t_i32, NULL, "mxcsr");
	LLVMValueRef old = flush_begin(m, slot);
	fj_cg_loop lj, li;
	fj_cg_loop_begin(cg, &lj, c64(m, 0), njr, "jr");
	LLVMValueRef bpan = at(m, m->bp, add(m, mul(m, lj.iv, mul(m, m->K, c64(m, m->nr))), mul(m, pc, c64(m, m->nr))));
	LLVMValueRef ccol = mul(m, lj.iv, c64(m, m->nr));
	fj_cg_loop_begin(cg, &li, c64(m, 0), nir, "ir");
	LLVMValueRef apan = at(m, m->ap, mul(m, li.iv, c64(m, m->a_ps)));
	if (m->a_direct) { /* a full micro-panel from A's rows, the partial one from Ap */
		const fj_cg_tensor *t = &m->r->in[m->a_in].t;
		LLVMValueRef src = at(m, t->ptr, in_offset(m, t, b, add(m, ic, mul(m, li.iv, c64(m, m->mr))), pc));
		LLVMValueRef full = LLVMBuildICmp(BB, LLVMIntSLT, li.iv, nfull, "");
		apan = LLVMBuildSelect(BB, full, src, apan, "");
		m->u.a_isv = LLVMBuildSelect(BB, full, t->stride[m->rank - 2], c64(m, m->lda), "");
	}
	LLVMValueRef cptr = at(m, m->cb, add(m, mul(m, li.iv, c64(m, (int64_t)m->mr * m->nc)), ccol));
	LLVMValueRef q = add(m, mul(m, lj.iv, nir), li.iv);
	prefetch_a(m, q, nb, nic, npc);
	prefetch_b(m, li.iv, lj.iv, njr, pc);
	prefetch_epi(m, q, b, ic, jc, last);
	fj_rg_micro_emit(cg, &m->u, apan, bpan, cptr, kl, LLVMBuildICmp(BB, LLVMIntEQ, pc, c64(m, 0), ""));
	fj_cg_loop_end(cg, &li);
	fj_cg_loop_end(cg, &lj);
	flush_end(m, slot, old);
}

/* ---- streamed outputs ----
 * The epilogue's stores to an output much larger than the L2 miss it: each
 * line is read for ownership before it is written, from L3 or memory,
 * while the FMA units idle (the epilogue runs after the tile's last K
 * block). Streamed instead, a row of the tile is evaluated into a row
 * buffer (out[j] pointed at it: `store` is unchanged) and copied out with
 * non-temporal 64-byte stores, which write whole lines without reading
 * them. Intel Xeon (Emerald Rapids), one thread, bench/matmul's shapes,
 * alternating runs: the epilogue cost 3-7 % of the matmul (4 MiB to 12
 * MiB outputs: leaving it out, 1024^3 13.7 against 14.2 ms, the linear
 * 1024 x 768 x 3072 30.2 against 32.7), streaming saves about half of it
 * (13.8, 31.3); prefetching the rows ahead for writing saved a third. An
 * output streams where the target says so (host_stream), it holds
 * NT_MIN_BYTES or more (an L2's worth: a smaller one may well be read
 * again from cache by the next kernel), its start and every row of a tile
 * are 64-byte aligned and its last dim is unit-stride; the kernel then
 * fences before it returns. Not an output off its lines: streamed, a tile's
 * row (NC columns) would have a partial line at each end, stored plainly
 * (fj_cg_stream_copy, not fj_cg_stream_lines), and that cost what the rest
 * saved (same CPU, 2 threads, the linear with bias and gelu, output 16
 * bytes off its lines: 17.9 ms streamed and plain alike). */
enum { NT_MIN_BYTES = 2 << 20 };

/* Chooses the outputs to stream (at most NT_MAX) and their row buffers;
 * m->nt_ok: the run-time conditions. */
static void nt_plan(mm *m)
{
	fj_cg *cg = m->cg;
	const fj_rg_host_mm *hm = m->hm;
	m->nnt = 0;
	if (!cg->target->stream || !hm->out || !hm->by_index)
		return;
	LLVMValueRef ok = LLVMConstInt(cg->t_i1, 1, 0);
	for (uint32_t j = 0; j < hm->nout && m->nnt < NT_MAX; j++) {
		const fj_cg_tensor *o = &hm->out[j];
		int64_t esz = (int64_t)fj_dtype_size(o->dtype);
		if (o->rank != m->rank || !hm->by_index(hm->ud, j) || m->nc * esz % 64)
			continue;
		m->nt_out[m->nnt] = j;
		m->nt_buf[m->nnt] = fj_cg_var(cg, LLVMArrayType(cg->t_i8, (unsigned)(m->nc * esz)), NULL, "ntbuf");
		LLVMSetAlignment(m->nt_buf[m->nnt], 64);
		m->nnt++;
		LLVMValueRef addr = LLVMBuildPtrToInt(BB, o->ptr, cg->t_i64, "");
		LLVMValueRef c = LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildAnd(BB, addr, c64(m, 63), ""), c64(m, 0), "");
		c = LLVMBuildAnd(BB, c, LLVMBuildICmp(BB, LLVMIntEQ, o->stride[m->rank - 1], c64(m, 1), ""), "");
		for (int d = 0; d < m->rank - 1; d++) { /* rows (and batches) 64-byte aligned */
			LLVMValueRef sb = LLVMBuildAnd(BB, mul(m, o->stride[d], c64(m, esz)), c64(m, 63), "");
			c = LLVMBuildAnd(BB, c, LLVMBuildICmp(BB, LLVMIntEQ, sb, c64(m, 0), ""), "");
		}
		/* a tile's columns [jc, jc + nlen): jc x esz is a multiple of 64
		 * (NC's is), and so is nlen x esz where N x esz is */
		LLVMValueRef nb = LLVMBuildAnd(BB, mul(m, m->N, c64(m, esz)), c64(m, 63), "");
		c = LLVMBuildAnd(BB, c, LLVMBuildICmp(BB, LLVMIntEQ, nb, c64(m, 0), ""), "");
		LLVMValueRef big = LLVMBuildICmp(BB, LLVMIntSGE, mul(m, o->numel, c64(m, esz)), c64(m, NT_MIN_BYTES), "");
		ok = LLVMBuildAnd(BB, ok, LLVMBuildAnd(BB, c, big, ""), "");
	}
	m->nt_ok = ok;
}

/* One row of the tile's epilogue: every result at (row, jc + j) for j in
 * [0, nlen), Cb's row at crow. */
static void epilogue_row(mm *m, LLVMValueRef b, LLVMValueRef row, LLVMValueRef jc, LLVMValueRef crow, LLVMValueRef nlen)
{
	fj_cg *cg = m->cg;
	fj_rg *r = m->r;
	fj_cg_loop lj;
	fj_cg_loop_begin(cg, &lj, c64(m, 0), nlen, "ej");
	fj_rg_scope_push(r);
	LLVMValueRef x = LLVMBuildLoad2(BB, m->et, at(m, m->cb, add(m, crow, lj.iv)), "");
	LLVMSetAlignment(x, (unsigned)m->esz);
	fj_rg_bind(r, m->mv, fj_cg_convert(cg, x, m->acc, m->mdt));
	fj_rg_point p;
	fj_rg_batch_point(&p, m->rank, b, row, add(m, jc, lj.iv));
	m->hm->store(m->hm->ud, &p);
	fj_rg_bind(r, m->mv, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lj);
	/* two copies of the vector body, not the row kernels' four
	 * (FJ_CG_INTERLEAVE): a row of the tile is NC columns, a few iterations
	 * of four, and four copies of a long body (the exact gelu's erf: a
	 * division, two polynomials, an exp) spill and reload its constants per
	 * row. Intel Xeon (Sapphire Rapids), 2 threads, a 768 -> 3072 linear on
	 * [1024, 768] with the exact gelu, alternating rounds: AVX-512 21.8-24.8
	 * -> 19.3-20.6 ms (the linear and bias alone: 19.7-20.6), AVX2 32.9-35.5
	 * -> 30.7-32.1 (alone: 28.7-29.2); with the tanh gelu, the bias alone
	 * or no epilogue, within the noise; bench/peers mlp_wide forward 46-49
	 * -> 43-45 ms. */
	fj_cg_loop_hints(cg, &lj, 0, 2);
}

/* Row `row` of the tile through the row buffers: the streamed outputs'
 * views moved so that the row's element jc is the buffer's first (not in
 * bounds: a plain GEP), then copied out, 64 bytes per non-temporal store. */
static void epilogue_row_nt(mm *m, LLVMValueRef b, LLVMValueRef row, LLVMValueRef jc, LLVMValueRef crow,
                            LLVMValueRef nlen)
{
	fj_cg *cg = m->cg;
	fj_cg_tensor saved[NT_MAX];
	LLVMValueRef off[NT_MAX];
	fj_rg_point p;
	fj_rg_batch_point(&p, m->rank, b, row, jc);
	for (int i = 0; i < m->nnt; i++) {
		fj_cg_tensor *o = &m->hm->out[m->nt_out[i]];
		off[i] = fj_cg_offset(cg, o, p.idx);
		saved[i] = *o;
		LLVMValueRef back = LLVMBuildNeg(BB, off[i], "");
		o->ptr = LLVMBuildGEP2(BB, fj_cg_storage_type(cg, o->dtype), m->nt_buf[i], &back, 1, "");
	}
	epilogue_row(m, b, row, jc, crow, nlen);
	for (int i = 0; i < m->nnt; i++) {
		fj_cg_tensor *o = &m->hm->out[m->nt_out[i]];
		*o = saved[i];
		LLVMValueRef dst0 = LLVMBuildInBoundsGEP2(BB, fj_cg_storage_type(cg, o->dtype), o->ptr, &off[i], 1, "");
		LLVMValueRef lines = LLVMBuildSDiv(BB, mul(m, nlen, c64(m, (int64_t)fj_dtype_size(o->dtype))), c64(m, 64), "");
		fj_cg_stream_lines(cg, dst0, m->nt_buf[i], lines);
	}
}

/* The epilogue: every result at the tile's points, the matmul value bound
 * to Cb (rounded to the matmul's dtype, as if stored); row by row, through
 * the row buffers where this call streams (nt_plan). */
static void epilogue(mm *m, LLVMValueRef b, LLVMValueRef ic, LLVMValueRef jc, LLVMValueRef mlen, LLVMValueRef nlen)
{
	fj_cg *cg = m->cg;
	fj_cg_loop li;
	fj_cg_loop_begin(cg, &li, c64(m, 0), mlen, "ei");
	fj_rg_scope_push(m->r);
	LLVMValueRef row = add(m, ic, li.iv);
	LLVMValueRef crow = mul(m, li.iv, c64(m, m->nc));
	if (m->nnt) {
		fj_cg_if s;
		fj_cg_if_begin(cg, &s, m->nt_ok);
		epilogue_row_nt(m, b, row, jc, crow, nlen);
		fj_cg_if_else(cg, &s);
		epilogue_row(m, b, row, jc, crow, nlen);
		fj_cg_if_end(cg, &s);
	} else {
		epilogue_row(m, b, row, jc, crow, nlen);
	}
	fj_rg_scope_pop(m->r);
	fj_cg_loop_end(cg, &li);
}

/* ---- the tile loop ---- */

/* The tiles [*t0, *t1) of this call (see the header). */
void fj_rg_tile_range(fj_cg *cg, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef extent, LLVMValueRef ntiles,
                      LLVMValueRef *t0, LLVMValueRef *t1)
{
	LLVMBuilderRef b = cg->b;
	LLVMTypeRef f64 = LLVMDoubleTypeInContext(cg->llctx);
	/* x * ntiles / extent in f64, rounded to the nearest tile: every step
	 * rounds monotonically, so f stays monotone, and a split that falls on
	 * a tile boundary (x * ntiles a multiple of extent) lands on it, the
	 * f64 error (below 2^-50 relative) being far below half a tile */
	LLVMValueRef per = LLVMBuildFDiv(b, LLVMBuildUIToFP(b, ntiles, f64, ""), LLVMBuildUIToFP(b, extent, f64, ""), "");
	LLVMValueRef x[2] = {lo, hi};
	for (int i = 0; i < 2; i++) {
		LLVMValueRef r = LLVMBuildFMul(b, LLVMBuildUIToFP(b, x[i], f64, ""), per, "");
		LLVMValueRef c = LLVMBuildFPToSI(b, fj_cg_intrinsic(cg, "llvm.round", &r, 1), cg->t_i64, "");
		LLVMValueRef f = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, c, ntiles, ""), c, ntiles, "");
		LLVMValueRef end = LLVMBuildICmp(b, LLVMIntSGE, x[i], extent, "");
		x[i] = LLVMBuildSelect(b, end, ntiles, f, "");
	}
	*t0 = x[0];
	*t1 = x[1];
}

LLVMValueRef fj_rg_aligned_alloc(fj_cg *cg, LLVMValueRef bytes)
{
	bytes = LLVMBuildAnd(cg->b, LLVMBuildNSWAdd(cg->b, bytes, fj_cg_i64(cg, 63), ""), fj_cg_i64(cg, -64), "");
	LLVMTypeRef ps[2] = {cg->t_i64, cg->t_i64};
	LLVMTypeRef fty = LLVMFunctionType(cg->t_ptr, ps, 2, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, "aligned_alloc");
	if (!f)
		f = LLVMAddFunction(cg->mod, "aligned_alloc", fty);
	LLVMValueRef args[2] = {fj_cg_i64(cg, 64), bytes};
	return LLVMBuildCall2(cg->b, fty, f, args, 2, "mmbuf");
}

void fj_rg_free(fj_cg *cg, LLVMValueRef p)
{
	LLVMTypeRef fty = LLVMFunctionType(cg->t_void, &cg->t_ptr, 1, 0);
	LLVMValueRef f = LLVMGetNamedFunction(cg->mod, "free");
	if (!f)
		f = LLVMAddFunction(cg->mod, "free", fty);
	LLVMBuildCall2(cg->b, fty, f, &p, 1, "");
}

/* The heap block for Ap, Bp and Cb (NULL on failure), its parts set in m. */
static LLVMValueRef alloc_block(mm *m)
{
	int64_t fixed = (int64_t)m->mc * m->lda + (int64_t)m->mc * m->nc;
	LLVMValueRef elems = add(m, c64(m, fixed), mul(m, m->K, c64(m, m->nc)));
	LLVMValueRef blk = fj_rg_aligned_alloc(m->cg, mul(m, elems, c64(m, m->esz)));
	/* Cb and Ap first: their rows (NC, LDA elements) are multiples of a
	 * vector, so every part, and every B vector of Bp and Cb, is aligned
	 * to a vector */
	m->cb = blk;
	m->ap = at(m, blk, c64(m, (int64_t)m->mc * m->nc));
	m->bp = at(m, blk, c64(m, fixed));
	return blk;
}

/* The tile at unit u of this call's units [u, u1) (see the header): up to
 * MC/MR micro-panels of rows from u's, within its (batch, N-tile) and the
 * call's units. `cur` holds the (batch, N-tile) whose B panel is in Bp (-1:
 * none). Returns the tile's micro-panels: the step to the next tile. */
static LLVMValueRef tile(mm *m, LLVMValueRef u, LLVMValueRef u1, LLVMValueRef mp, LLVMValueRef nt, LLVMValueRef cur)
{
	fj_cg *cg = m->cg;
	LLVMValueRef ip = LLVMBuildURem(BB, u, mp, ""), bj = LLVMBuildUDiv(BB, u, mp, "");
	LLVMValueRef jt = LLVMBuildURem(BB, bj, nt, ""), b = LLVMBuildUDiv(BB, bj, nt, "");
	LLVMValueRef np = imin(m, imin(m, c64(m, m->mc / m->mr), LLVMBuildNSWSub(BB, mp, ip, "")),
	                       LLVMBuildNSWSub(BB, u1, u, ""));
	LLVMValueRef ic = mul(m, ip, c64(m, m->mr)), jc = mul(m, jt, c64(m, m->nc));
	LLVMValueRef mlen = imin(m, mul(m, np, c64(m, m->mr)), LLVMBuildNSWSub(BB, m->M, ic, ""));
	LLVMValueRef nlen = imin(m, c64(m, m->nc), LLVMBuildNSWSub(BB, m->N, jc, ""));
	/* np micro-panels: each has a row < M, since ip + np <= mp = ceil(M / MR) */
	LLVMValueRef nir = np, njr = cdiv(m, nlen, c64(m, m->nr));
	/* the micro-panels with every row < M */
	LLVMValueRef nfull = imin(m, nir, LLVMBuildSDiv(BB, LLVMBuildNSWSub(BB, m->M, ic, ""), c64(m, m->mr), ""));
	LLVMValueRef un = add(m, u, np); /* the next tile's batch and rows (prefetch_a) */
	LLVMValueRef nic = mul(m, LLVMBuildURem(BB, un, mp, ""), c64(m, m->mr));
	LLVMValueRef nb = LLVMBuildUDiv(BB, LLVMBuildUDiv(BB, un, mp, ""), nt, "");
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntNE, bj, fj_cg_get(cg, cur, cg->t_i64), ""));
	pack_b(m, b, jc, njr);
	fj_cg_set(cg, cur, bj);
	fj_cg_if_end(cg, &c);
	/* K blocks; K = 0 still runs one (empty) block: it zeroes Cb */
	fj_cg_loop lp;
	LLVMValueRef kend = LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSGT, m->K, c64(m, 0), ""), m->K, c64(m, 1), "");
	fj_cg_loop_begin(cg, &lp, c64(m, 0), kend, "pc");
	lp.step = c64(m, m->kc);
	LLVMValueRef kl = imin(m, c64(m, m->kc), LLVMBuildNSWSub(BB, m->K, lp.iv, ""));
	pack_a(m, b, ic, nir, nfull, lp.iv, kl);
	/* the next A block: the tile's next K block, else the next tile's first */
	LLVMValueRef npc = add(m, lp.iv, c64(m, m->kc)), more = LLVMBuildICmp(BB, LLVMIntSLT, npc, m->K, "");
	macro(m, b, ic, jc, nir, nfull, njr, lp.iv, kl, LLVMBuildNot(BB, more, ""), LLVMBuildSelect(BB, more, b, nb, ""),
	      LLVMBuildSelect(BB, more, ic, nic, ""), LLVMBuildSelect(BB, more, npc, c64(m, 0), ""));
	fj_cg_loop_end(cg, &lp);
	epilogue(m, b, ic, jc, mlen, nlen);
	return np;
}

fj_status fj_rg_host_matmul(fj_cg *cg, const fj_rg_host_mm *hm)
{
	fj_rg *r = hm->r;
	const fj_rg_analysis *a = r->a;
	const fj_node *n = &a->body->nodes[a->opaque];
	mm mm0 = {.cg = cg, .r = r, .hm = hm, .av = n->opnds[0], .bv = n->opnds[1], .mv = n->res[0]};
	mm *m = &mm0;
	m->rank = a->body->values[m->mv].type.rank;
	m->mdt = a->body->values[m->mv].type.dtype;
	int d = m->rank - 2;
	m->batch = d ? fj_rg_dim(r, m->mv, 0) : c64(m, 1);
	m->M = fj_rg_dim(r, m->mv, d);
	m->N = fj_rg_dim(r, m->mv, d + 1);
	m->K = fj_rg_dim(r, m->av, d + 1);
	plan(m);
	nt_plan(m);
	hm->k->par_out = 0;
	hm->k->par_mask = ((1u << m->rank) - 1) | FJ_CG_PAR_PER_THREAD; /* a call packs its own B panels */
	LLVMValueRef mp = cdiv(m, m->M, c64(m, m->mr)), nt = cdiv(m, m->N, c64(m, m->nc));
	LLVMValueRef nunits = mul(m, mul(m, m->batch, nt), mp);
	LLVMValueRef t0, t1;
	fj_cg_if some;
	/* the runtime never calls with an empty result; a zero-sized M or N
	 * would make nunits 0 (and fj_rg_tile_range divide by zero) */
	fj_cg_if_begin(cg, &some, LLVMBuildICmp(BB, LLVMIntSGT, nunits, c64(m, 0), ""));
	fj_rg_tile_range(cg, hm->lo, hm->hi, mul(m, mul(m, m->batch, m->M), m->N), nunits, &t0, &t1);
	fj_cg_if work;
	fj_cg_if_begin(cg, &work, LLVMBuildICmp(BB, LLVMIntSLT, t0, t1, ""));
	LLVMValueRef blk = alloc_block(m);
	LLVMValueRef failed = LLVMBuildIsNull(BB, blk, "");
	fj_rg_fail_if(r, failed, FJ_KERR_VALUE);
	fj_cg_if ok;
	fj_cg_if_begin(cg, &ok, LLVMBuildNot(BB, failed, ""));
	LLVMValueRef cur = fj_cg_var(cg, cg->t_i64, NULL, "bpanel_of");
	fj_cg_set(cg, cur, c64(m, -1));
	fj_cg_loop lt;
	fj_cg_loop_begin(cg, &lt, t0, t1, "tile");
	fj_rg_scope_push(r);
	lt.step = tile(m, lt.iv, t1, mp, nt, cur);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lt);
	fj_rg_free(cg, blk);
	if (m->nnt) /* the streamed rows are visible before the call returns */
		LLVMBuildFence(BB, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
	fj_cg_if_end(cg, &ok);
	fj_cg_if_end(cg, &work);
	fj_cg_if_end(cg, &some);
	return cg->st;
}
