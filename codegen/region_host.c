/* region_host.c -- the host templates of the region code generator
 * (region.h): one multithreaded, vectorisable loop nest per fusion.kernel,
 * with the host kernel ABI of cg.h (the parallel space [lo, hi) is split over
 * the thread pool by the runtime).
 *
 * The kernel function loads the operand and result pointers and calls an
 * internal, always-inlined body function whose pointer parameters are
 * `noalias` (inlining turns them into alias scopes): the vectoriser then
 * needs no run-time alias checks between a region's operands and results.
 * Inside fused regions the target's region_math hook replaces `math`
 * (inline polynomials on the host: exp, log, tanh ... vectorize).
 *
 * Templates, chosen from the region's structure (the schedule names it):
 *   pointwise / transpose / take / gather
 *       one loop over the output: flat over the linear index when no value
 *       needs a multi-index (pure elementwise chains, reshapes), else rows
 *       of the output (parallel; indices split once per row) and a unit-
 *       stride inner loop over its last dim. No intermediate buffer.
 *   reduction_inner / persistent_inner (K holds D's innermost dim)
 *       parallel over rows (points of R); per row, one loop nest over K per
 *       phase of reductions (softmax: max, then sum), the unit-stride inner
 *       loop vectorised and interleaved (f32 sums in blocks of KBLOCK
 *       elements added to f64 accumulators: "blocked reduction passes"),
 *       then the row's outputs
 *       (R-shaped ones at once, D-shaped ones in one more pass over the row,
 *       which is in cache; large ones streamed out with non-temporal stores:
 *       ntplan). A value a later pass needs again is kept in an output's
 *       row or a stack row buffer (rowcache).
 *   persistent_inner_outer
 *       as persistent_inner, plus column sums: the parallel space is S
 *       slots of rows (the runtime passes S and a workspace); each slot adds
 *       the outer reductions' operands into its own f64 partials during its
 *       output passes, and the slot that finishes last merges them in slot
 *       order and stores the column results (col_merge).
 *   reduction_outer / persistent_outer (D's innermost dim is kept)
 *       parallel over R; R is walked in tiles of up to 2048 neighbouring
 *       points along its innermost dim, the lines of rows 8 ahead
 *       prefetched; per tile, accumulator arrays (one
 *       element per point) are updated by loops over K outside and the tile
 *       inside (unit stride: vectorised), then the outputs.
 *   matmul
 *       float: packed panels and a register-blocked micro-kernel, parallel
 *       over tiles of the output (codegen/region_matmul.c); integer: parallel
 *       over the output's rows; per row, tiles of 256 columns with i64
 *       accumulators in a stack array (k outside, columns inside), then
 *       the pointwise epilogue evaluated on the tile and stored.
 *   scan
 *       parallel over every dim but the scanned one; a sequential running
 *       sum (f64 / i64) along it.
 *   scatter
 *       one call (serial): the base copied to the output, then every source
 *       element added at its index; an index out of range sets
 *       FJ_KERR_INDEX and is skipped (never an out-of-bounds access).
 */
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "codegen/emit_common.h"
#include "codegen/region.h"
#include "codegen/region_matmul.h"

enum { TILE = 256 };

typedef struct hctx {
	fj_cg *cg;
	fj_cg_kernel *k;
	const fj_rg_analysis *a;
	const fj_graph *body;
	fj_rg r;
	fj_cg_operand *in;
	fj_cg_tensor *out;
	LLVMValueRef lo, hi;
	bool vec; /* force the vector width of inner loops (vectorisable()) */
	/* persistent_inner_outer: the workspace, the slot count S (the last
	 * entry of dims), and the partial column sums of the slot being run */
	LLVMValueRef ws, nslots, part;
} hctx;

#define BB (h->cg->b)

static LLVMValueRef c64(hctx *h, int64_t v) { return fj_cg_i64(h->cg, v); }
static LLVMValueRef imin(hctx *h, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, a, b, ""), a, b, "");
}
static int vrank(hctx *h, fj_vid v) { return h->body->values[v].type.rank; }

/* ---- vector width ---- */

/* Vectorise loop l with `width` lanes (!llvm.loop llvm.loop.vectorize.width):
 * left to itself LLVM picks 16 x f32 on AVX2 for long math chains and spills. */
/* Does every loop of the region vectorise? (No libm call: f32 math with a
 * polynomial only; no argmax/argmin, random numbers or data-dependent
 * reads.) Only then the width is forced: a forced loop that fails to
 * vectorise makes LLVM print a warning. */
static bool vectorisable(const fj_graph *b)
{
	bool f64 = false, transc = false;
	for (uint32_t v = 0; v < b->nvalues; v++)
		f64 |= b->values[v].kind != FJ_VK_LITERAL && b->values[v].type.dtype == FJ_DT_F64;
	for (uint32_t i = 0; i < b->nnodes; i++) {
		switch (b->nodes[i].op) {
		case FJ_OP_PRIMS_SINH: case FJ_OP_PRIMS_COSH: case FJ_OP_PRIMS_ASIN: case FJ_OP_PRIMS_ACOS:
		case FJ_OP_PRIMS_ATAN: case FJ_OP_PRIMS_ASINH: case FJ_OP_PRIMS_ACOSH: case FJ_OP_PRIMS_ATANH:
		case FJ_OP_PRIMS_POW: case FJ_OP_PRIMS_ATAN2: case FJ_OP_PRIMS_FMOD: case FJ_OP_PRIMS_REMAINDER:
		case FJ_OP_PRIMS_ARGMAX: case FJ_OP_PRIMS_ARGMIN: case FJ_OP_PRIMS_RAND: case FJ_OP_PRIMS_TAKE:
		case FJ_OP_PRIMS_GATHER: case FJ_OP_PRIMS_CUMSUM: case FJ_OP_PRIMS_SCATTER_ADD: case FJ_OP_PRIMS_INDEX_ADD:
		case FJ_OP_PRIMS_MATMUL: case FJ_OP_PRIMS_DIV: case FJ_OP_PRIMS_CAT: case FJ_OP_PRIMS_PAD:
			if (b->nodes[i].op != FJ_OP_PRIMS_DIV || !fj_dtype_is_float(b->values[b->nodes[i].res[0]].type.dtype))
				return false;
			break;
		case FJ_OP_PRIMS_EXP: case FJ_OP_PRIMS_EXP2: case FJ_OP_PRIMS_EXPM1: case FJ_OP_PRIMS_LOG:
		case FJ_OP_PRIMS_LOG2: case FJ_OP_PRIMS_LOG10: case FJ_OP_PRIMS_LOG1P: case FJ_OP_PRIMS_SIN:
		case FJ_OP_PRIMS_COS: case FJ_OP_PRIMS_TAN: case FJ_OP_PRIMS_TANH: case FJ_OP_PRIMS_ERF:
		case FJ_OP_PRIMS_ERFC:
			transc = true;
			break;
		default:
			if (!(fj_op_info(fj_graph_ctx(b), b->nodes[i].op)->flags & (FJ_OPF_PRIMS | FJ_OPF_FUSION)))
				return false; /* an aten op inside a region: its lowering is not ours to judge */
			break;
		}
	}
	return !(f64 && transc);
}

static void vector_width(hctx *h, fj_cg_loop *l, int interleave)
{
	fj_cg *cg = h->cg;
	int bits = cg->target->vector_bits;
	bool dbl = false, half = false;
	for (uint32_t v = 0; v < h->body->nvalues; v++) {
		fj_dtype dt = h->body->values[v].type.dtype;
		bool lit = h->body->values[v].kind == FJ_VK_LITERAL;
		dbl |= !lit && (dt == FJ_DT_F64 || dt == FJ_DT_I64);
		half |= !lit && (dt == FJ_DT_F16 || dt == FJ_DT_BF16);
	}
	/* The cost model picks full-width vectors for f32 and f64 loops by
	 * itself; for f16/bf16 data (computed in f32) it picks 4 lanes, the
	 * conversions priced high: there the register width is asked for. */
	int width = bits && h->vec && half ? bits / (dbl ? 64 : 32) : 0;
	LLVMValueRef br = LLVMGetBasicBlockTerminator(l->latch);
	if (!br || (width < 2 && interleave < 2))
		return;
	LLVMMetadataRef tmp = LLVMTemporaryMDNode(cg->llctx, NULL, 0);
	LLVMMetadataRef ops[5] = {tmp};
	unsigned nops = 1;
	if (width >= 2) {
		LLVMMetadataRef wv[2] = {LLVMMDStringInContext2(cg->llctx, "llvm.loop.vectorize.width", 25),
		                         LLVMValueAsMetadata(fj_cg_i32(cg, width))};
		LLVMMetadataRef en[2] = {LLVMMDStringInContext2(cg->llctx, "llvm.loop.vectorize.enable", 26),
		                         LLVMValueAsMetadata(LLVMConstInt(cg->t_i1, 1, 0))};
		ops[nops++] = LLVMMDNodeInContext2(cg->llctx, wv, 2);
		ops[nops++] = LLVMMDNodeInContext2(cg->llctx, en, 2);
	}
	if (interleave >= 2) {
		/* reduction loops: independent partial accumulators hide the latency
		 * of the loop-carried chain (NaN-propagating max is ~4 ops deep) */
		LLVMMetadataRef ic[2] = {LLVMMDStringInContext2(cg->llctx, "llvm.loop.interleave.count", 26),
		                         LLVMValueAsMetadata(fj_cg_i32(cg, interleave))};
		ops[nops++] = LLVMMDNodeInContext2(cg->llctx, ic, 2);
		/* and not fully unrolled afterwards (a static row length): the
		 * unrolled reassociable sum is rebuilt as one serial chain */
		LLVMMetadataRef ud = LLVMMDStringInContext2(cg->llctx, "llvm.loop.unroll.disable", 24);
		ops[nops++] = LLVMMDNodeInContext2(cg->llctx, &ud, 1);
	}
	LLVMMetadataRef node = LLVMMDNodeInContext2(cg->llctx, ops, nops);
	LLVMMetadataReplaceAllUsesWith(tmp, node);
	unsigned kind = LLVMGetMDKindIDInContext(cg->llctx, "llvm.loop", 9);
	LLVMSetMetadata(br, kind, LLVMMetadataAsValue(cg->llctx, node));
}

/* ---- output classes ---- */

enum { OUT_D = FJ_RG_SPACE_D, OUT_R = FJ_RG_SPACE_R, OUT_C = FJ_RG_SPACE_C };

/* Is result j's value a D-sized output, an R-sized one, or (persistent_
 * inner_outer) a C-sized one? (the analysis decides: fj_rg_space) */
static int out_class(hctx *h, uint32_t j) { return h->a->vals[h->body->results[j]].space; }

/* Stores every result of class cls at a point of D (pd, with idx) or of R
 * (pr, with idx and lin = the R-linear index). */
static void store_outputs(hctx *h, int cls, fj_rg_point *pt)
{
	fj_rg *r = &h->r;
	for (uint32_t j = 0; j < h->k->nout; j++) {
		if (h->a->kmask && out_class(h, j) != cls)
			continue;
		fj_vid v = h->body->results[j];
		const fj_cg_tensor *o = &h->out[j];
		bool same = cls == OUT_D ? h->a->vals[v].in_d : h->a->vals[v].in_r;
		if (same && pt->has_idx) {
			fj_rg_point q = *pt;
			fj_rg_store(r, o, fj_cg_offset(h->cg, o, pt->idx), v, &q);
		} else {
			fj_rg_need_lin(r, h->a->dom_v, pt); /* D-linear (or R-linear, given) */
			fj_rg_point q;
			fj_rg_point_lin(&q, vrank(h, v), pt->lin);
			fj_rg_store(r, o, pt->lin, v, &q);
		}
	}
}

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

static void tpl_pointwise(hctx *h)
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
		store_outputs(h, OUT_D, &p);
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &l);
		vector_width(h, &l, 0);
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
	store_outputs(h, OUT_D, &p);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
	vector_width(h, &lc, 0);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
}

/* ---- the parallel space of a reduction region ---- */

/* Sets par_out/par_mask to R (an R-shaped result, or the kept dims of a
 * D-shaped one); false when no result can express it (then one call runs
 * every row). */
static bool pick_par_r(hctx *h)
{
	const fj_graph *b = h->body;
	uint32_t kept = ((1u << h->a->dom->rank) - 1) & ~h->a->kmask;
	for (uint32_t j = 0; j < h->k->nout; j++) {
		const fj_rg_value *x = &h->a->vals[b->results[j]];
		if (x->in_r && !x->in_d && h->a->rrank > 0) {
			h->k->par_out = j;
			h->k->par_mask = (1u << h->a->rrank) - 1;
			return true;
		}
	}
	for (uint32_t j = 0; j < h->k->nout; j++)
		if (h->a->vals[b->results[j]].in_d && kept) {
			h->k->par_out = j;
			h->k->par_mask = kept;
			return true;
		}
	h->k->par_out = 0;
	h->k->par_mask = 0;
	return false;
}

/* [rlo, rhi): the rows of R this call runs. */
static void row_range(hctx *h, bool par, LLVMValueRef *rlo, LLVMValueRef *rhi)
{
	fj_rg *r = &h->r;
	if (par) {
		*rlo = h->lo;
		*rhi = h->hi;
		return;
	}
	LLVMValueRef nr = c64(h, 1);
	for (int d = 0; d < h->a->dom->rank; d++)
		if (!(h->a->kmask & (1u << d)))
			nr = LLVMBuildNSWMul(BB, nr, fj_rg_dim(r, h->a->dom_v, d), "");
	LLVMValueRef any = LLVMBuildICmp(BB, LLVMIntSLT, h->lo, h->hi, "");
	*rlo = c64(h, 0);
	*rhi = LLVMBuildSelect(BB, any, nr, c64(h, 0), "");
}

/* The number of elements each reduction reduces (product of D's K dims). */
static LLVMValueRef red_count(hctx *h)
{
	LLVMValueRef n = c64(h, 1);
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d))
			n = LLVMBuildNSWMul(BB, n, fj_rg_dim(&h->r, h->a->dom_v, d), "");
	return n;
}

/* Loops over the K dims of D (outermost first): idx[d] for d in K. */
typedef struct knest {
	fj_cg_loop l[FJ_MAX_RANK];
	int n;
} knest;

static void knest_begin(hctx *h, knest *kn, LLVMValueRef *idx)
{
	kn->n = 0;
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d)) {
			fj_cg_loop_begin(h->cg, &kn->l[kn->n], c64(h, 0), fj_rg_dim(&h->r, h->a->dom_v, d), "k");
			idx[d] = kn->l[kn->n].iv;
			kn->n++;
		}
}

/* innermost: the K nest holds the innermost loop (set its vector width) */
static void knest_end(hctx *h, knest *kn, bool innermost)
{
	for (int i = kn->n - 1; i >= 0; i--) {
		fj_cg_loop_end(h->cg, &kn->l[i]);
		if (innermost && i == kn->n - 1)
			vector_width(h, &kn->l[i], 0);
	}
}

/* ---- blocked reduction passes ----
 * A reduction pass over a row's K dims walks the innermost K dim in blocks
 * of KBLOCK elements. f32 sums (sum, var_mean's shifted S1/S2 of f32/f16/
 * bf16 data) accumulate in f32 within a block -- 16 lanes per AVX-512
 * vector instead of 8 f64 lanes, no conversions; the vectoriser's partial
 * sums (lanes x interleave) each add at most KBLOCK / 64 terms -- and each
 * block's f32 sums are added to the f64 accumulator: the error stays that
 * of a KBLOCK-term f32 sum, whatever the row length. The innermost loop is
 * interleaved (independent partial accumulators) to hide the latency of the
 * loop-carried chains. f32 max / min use block accumulators too (block_acc). */
enum { KBLOCK = 512, INTERLEAVE = 4 };

typedef struct kblock {
	knest kn;              /* K loops (innermost: the element loop of a block) */
	fj_cg_loop bl;         /* the block loop (when nblk) */
	int nblk;
	bool blocked;          /* the innermost K loop is blocked */
	int which[FJ_RG_MAX_REDS];          /* reduction index of blk[i] */
	fj_rg_acc blk[FJ_RG_MAX_REDS];      /* f32 block accumulators */
	LLVMValueRef nan[FJ_RG_MAX_REDS];   /* max/min blocks: "a NaN was seen" (i8 variable), else NULL */
} kblock;

/* Block accumulators: f32 sums (above), and f32 max / min, which within a
 * block skip NaNs (noted in a flag) so that they compare with nnan selects:
 * one vmaxps per vector instead of llvm.maximum's NaN and signed-zero
 * handling in the loop-carried chain; a block with a NaN merges as NaN. */
static bool block_acc(hctx *h, const fj_rg_acc *acc, fj_rg_acc *blk, LLVMValueRef *nan)
{
	bool sum = (acc->kind == FJ_RG_RED_SUM || acc->kind == FJ_RG_RED_VAR_MEAN) && acc->acc_dt == FJ_DT_F64;
	bool minmax = (acc->kind == FJ_RG_RED_MAX || acc->kind == FJ_RG_RED_MIN) && acc->acc_dt == FJ_DT_F32;
	if ((!sum && !minmax) || fj_cg_compute_dtype(acc->in_dt) != FJ_DT_F32)
		return false;
	*blk = *acc;
	blk->acc_dt = FJ_DT_F32;
	for (int i = 0; i < blk->n; i++) {
		blk->ty[i] = h->cg->t_f32;
		blk->var[i] = fj_cg_var(h->cg, h->cg->t_f32, NULL, "bacc");
	}
	blk->shift = NULL; /* set per block by kblock_begin */
	*nan = minmax ? fj_cg_var(h->cg, h->cg->t_i8, NULL, "bnan") : NULL;
	return true;
}

/* One step of a max / min block accumulator (see block_acc). */
static void block_minmax_step(hctx *h, fj_rg_acc *blk, LLVMValueRef nan, LLVMValueRef x)
{
	fj_cg *cg = h->cg;
	bool max = blk->kind == FJ_RG_RED_MAX;
	LLVMValueRef isnan = LLVMBuildFCmp(BB, LLVMRealUNO, x, x, "");
	LLVMValueRef xs = LLVMBuildSelect(BB, isnan, LLVMConstReal(cg->t_f32, max ? -__builtin_inf() : __builtin_inf()),
	                                  x, "");
	LLVMValueRef acc = fj_cg_get(cg, blk->var[0], cg->t_f32);
	LLVMValueRef better = LLVMBuildFCmp(BB, max ? LLVMRealOGT : LLVMRealOLT, xs, acc, "");
	LLVMValueRef next = LLVMBuildSelect(BB, better, xs, acc, "");
	LLVMSetFastMathFlags(better, LLVMFastMathNoNaNs | LLVMFastMathNoSignedZeros);
	LLVMSetFastMathFlags(next, LLVMFastMathNoNaNs | LLVMFastMathNoSignedZeros);
	fj_cg_set(cg, blk->var[0], next);
	/* select, not or: the vectoriser's any-of reduction (mask registers) */
	fj_cg_set(cg, nan, LLVMBuildSelect(BB, isnan, LLVMConstInt(cg->t_i8, 1, 0), fj_cg_get(cg, nan, cg->t_i8), ""));
}

/* Opens the loops of reduction pass ph (after set_shifts). accs[i] of the
 * phase are stepped through kb_step(). */
static void kblock_begin(hctx *h, kblock *kb, fj_rg_acc *accs, int ph, LLVMValueRef *idx)
{
	const fj_rg_analysis *a = h->a;
	kb->nblk = 0;
	for (int i = 0; i < a->nreds; i++)
		if (a->red_phase[i] == ph && block_acc(h, &accs[i], &kb->blk[kb->nblk], &kb->nan[kb->nblk]))
			kb->which[kb->nblk++] = i;
	kb->blocked = kb->nblk > 0;
	knest *kn = &kb->kn;
	kn->n = 0;
	int inner = -1;
	for (int d = 0; d < a->dom->rank; d++)
		if (a->kmask & (1u << d))
			inner = d;
	for (int d = 0; d < a->dom->rank; d++) {
		if (!(a->kmask & (1u << d)))
			continue;
		LLVMValueRef n = fj_rg_dim(&h->r, a->dom_v, d);
		if (d == inner && kb->blocked) {
			fj_cg_loop_begin(h->cg, &kb->bl, c64(h, 0), n, "kb");
			kb->bl.step = c64(h, KBLOCK);
			for (int j = 0; j < kb->nblk; j++) {
				fj_rg_acc_reset(&h->r, &kb->blk[j]);
				if (kb->nan[j])
					fj_cg_set(h->cg, kb->nan[j], LLVMConstInt(h->cg->t_i8, 0, 0));
			}
			/* reset drops the shift: K, rounded to f32 by set_shifts, is
			 * exact back in f32 */
			for (int j = 0; j < kb->nblk; j++)
				kb->blk[j].shift = kb->blk[j].kind == FJ_RG_RED_VAR_MEAN && accs[kb->which[j]].shift
				                   ? LLVMBuildFPTrunc(BB, accs[kb->which[j]].shift, h->cg->t_f32, "") : NULL;
			LLVMValueRef end = imin(h, LLVMBuildNSWAdd(BB, kb->bl.iv, c64(h, KBLOCK), ""), n);
			fj_cg_loop_begin(h->cg, &kn->l[kn->n], kb->bl.iv, end, "k");
		} else {
			fj_cg_loop_begin(h->cg, &kn->l[kn->n], c64(h, 0), n, "k");
		}
		idx[d] = kn->l[kn->n].iv;
		kn->n++;
	}
}

/* Steps reduction i (its block accumulator, if any) with x at position pos
 * (argmax/argmin; else NULL). */
static void kb_step(hctx *h, kblock *kb, fj_rg_acc *accs, int i, LLVMValueRef x, LLVMValueRef pos)
{
	for (int j = 0; j < kb->nblk; j++)
		if (kb->which[j] == i) {
			if (kb->nan[j])
				block_minmax_step(h, &kb->blk[j], kb->nan[j], x);
			else
				fj_rg_acc_step(&h->r, &kb->blk[j], x, pos);
			return;
		}
	fj_rg_acc_step(&h->r, &accs[i], x, pos);
}

static void kblock_end(hctx *h, kblock *kb, fj_rg_acc *accs)
{
	knest *kn = &kb->kn;
	for (int i = kn->n - 1; i >= 0; i--) {
		fj_cg_loop_end(h->cg, &kn->l[i]);
		if (i == kn->n - 1) {
			vector_width(h, &kn->l[i], INTERLEAVE);
			if (kb->blocked) {
				for (int j = 0; j < kb->nblk; j++) {
					LLVMValueRef v[3];
					fj_rg_acc_load(&h->r, &kb->blk[j], v);
					if (kb->nan[j]) {
						LLVMValueRef seen = LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(h->cg, kb->nan[j], h->cg->t_i8),
						                                  LLVMConstInt(h->cg->t_i8, 0, 0), "");
						v[0] = LLVMBuildSelect(BB, seen, LLVMConstReal(h->cg->t_f32, __builtin_nan("")), v[0], "");
					} else {
						for (int q = 0; q < kb->blk[j].n; q++)
							v[q] = LLVMBuildFPExt(BB, v[q], h->cg->t_f64, "");
					}
					fj_rg_acc_merge(&h->r, &accs[kb->which[j]], v);
				}
				fj_cg_loop_end(h->cg, &kb->bl);
			}
		}
	}
}

/* Linear position of idx within the K dims (argmax/argmin's index). */
static LLVMValueRef kpos(hctx *h, LLVMValueRef *idx)
{
	LLVMValueRef pos = c64(h, 0);
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d))
			pos = LLVMBuildNSWAdd(BB, LLVMBuildNSWMul(BB, pos, fj_rg_dim(&h->r, h->a->dom_v, d), ""), idx[d], "");
	return pos;
}

static bool has_outputs(hctx *h, int cls)
{
	for (uint32_t j = 0; j < h->k->nout; j++)
		if (out_class(h, j) == cls)
			return true;
	return false;
}

/* var_mean sums x - shift and (x - shift)^2 in one pass; their cancellation
 * error grows with (shift - mean)^2 / var. The shift is the mean of the
 * row's first SHIFT_N elements along the innermost K dim, rounded to the
 * input's compute type (so that the f32 block sums and the f64 row sums use
 * the same shift): (shift - mean)^2 <= var * n / SHIFT_N, so one outlier
 * cannot ruin the row (with shift = the first element, an outlier there
 * costs a factor n). */
enum { SHIFT_N = 64 };

/* Sets the var_mean shift of every reduction of phase ph (0 for an empty
 * reduction). */
static void set_shifts(hctx *h, fj_rg_acc *accs, int ph, LLVMValueRef *idx, LLVMValueRef count)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	int inner = -1;
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d))
			inner = d;
	for (int i = 0; i < h->a->nreds; i++) {
		if (h->a->red_phase[i] != ph || accs[i].kind != FJ_RG_RED_VAR_MEAN)
			continue;
		fj_dtype ct = fj_cg_compute_dtype(accs[i].in_dt);
		LLVMValueRef sv = fj_cg_var(cg, cg->t_f64, LLVMConstReal(cg->t_f64, 0), "shift");
		fj_cg_if c;
		fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntSGT, count, c64(h, 0), ""));
		LLVMValueRef m = imin(h, fj_rg_dim(r, h->a->dom_v, inner), c64(h, SHIFT_N));
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, c64(h, 0), m, "shift");
		fj_rg_scope_push(r);
		LLVMValueRef id2[FJ_MAX_RANK];
		for (int d = 0; d < h->a->dom->rank; d++)
			id2[d] = d == inner ? l.iv : (h->a->kmask & (1u << d)) ? c64(h, 0) : idx[d];
		fj_rg_point p;
		fj_rg_point_idx(&p, h->a->dom->rank, id2);
		const fj_node *n = &h->body->nodes[h->a->reds[i]];
		LLVMValueRef x = fj_cg_convert(cg, fj_rg_eval(r, n->opnds[0], &p), ct, FJ_DT_F64);
		fj_cg_set(cg, sv, LLVMBuildFAdd(BB, fj_cg_get(cg, sv, cg->t_f64), x, ""));
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &l);
		LLVMValueRef mean = LLVMBuildFDiv(BB, fj_cg_get(cg, sv, cg->t_f64),
		                                  LLVMBuildSIToFP(BB, m, cg->t_f64, ""), "");
		fj_cg_set(cg, sv, fj_cg_convert(cg, fj_cg_convert(cg, mean, FJ_DT_F64, ct), ct, FJ_DT_F64));
		fj_cg_if_end(cg, &c);
		accs[i].shift = fj_cg_get(cg, sv, cg->t_f64);
	}
}

/* ---- reductions along rows (K holds D's innermost dim) ---- */

enum { ROWCACHE = 8192, MAXCACHE = 4 };

/* Values a row pass computes that later passes need again (a reduction
 * operand that is not an input and has other uses: softmax's exp(x - max)).
 * They are kept instead of being recomputed: in the row of a D-shaped
 * output of the same dtype when there is one (softmax: the output row holds
 * exp(x - max) until the output pass scales it in place: the stores that
 * bring the output's lines in overlap the exp pass's arithmetic, and no
 * extra buffer competes for the cache), else, when the row is short enough,
 * in a per-thread row buffer on the stack. */
typedef struct rowcache {
	int n, nstack;
	fj_vid v[MAXCACHE];
	int phase[MAXCACHE];   /* filled by the reduction pass of this phase */
	LLVMTypeRef ty[MAXCACHE];
	LLVMValueRef buf[MAXCACHE];          /* stack row buffer, or NULL */
	const fj_cg_tensor *out[MAXCACHE];   /* else: this output's row */
} rowcache;

/* Is output j D-shaped and stored at the row's own points (its element at
 * idx is the row's element at idx)? */
static bool row_output(hctx *h, uint32_t j)
{
	return out_class(h, j) == OUT_D && h->a->vals[h->body->results[j]].in_d;
}

/* A D-shaped output of v's dtype (a compute dtype: no rounding) that no
 * other cached value uses, or NULL. */
static const fj_cg_tensor *scratch_output(hctx *h, const rowcache *rc, fj_vid v)
{
	fj_dtype dt = h->body->values[v].type.dtype;
	if (fj_cg_compute_dtype(dt) != dt)
		return NULL;
	for (uint32_t j = 0; j < h->k->nout; j++) {
		const fj_cg_tensor *o = &h->out[j];
		if (!row_output(h, j) || o->dtype != dt)
			continue;
		bool taken = false;
		for (int k = 0; k < rc->n; k++)
			taken |= rc->out[k] == o;
		if (!taken)
			return o;
	}
	return NULL;
}

static void rowcache_plan(hctx *h, rowcache *rc)
{
	const fj_rg_analysis *a = h->a;
	rc->n = rc->nstack = 0;
	for (int i = 0; i < a->nreds && rc->n < MAXCACHE; i++) {
		fj_vid v = h->body->nodes[a->reds[i]].opnds[0];
		const fj_rg_value *x = &a->vals[v];
		if (x->cls == FJ_RG_INPUT || x->cls == FJ_RG_LITERAL || x->nuses < 2 || !x->in_d)
			continue;
		bool dup = false;
		for (int k = 0; k < rc->n; k++)
			dup |= rc->v[k] == v;
		if (dup)
			continue;
		rc->v[rc->n] = v;
		rc->phase[rc->n] = a->red_phase[i];
		rc->ty[rc->n] = fj_cg_compute_type(h->cg, h->body->values[v].type.dtype);
		rc->out[rc->n] = scratch_output(h, rc, v);
		rc->buf[rc->n] = NULL;
		if (!rc->out[rc->n]) {
			rc->buf[rc->n] = fj_cg_var(h->cg, LLVMArrayType(rc->ty[rc->n], ROWCACHE), NULL, "rowcache");
			rc->nstack++;
		}
		rc->n++;
	}
}

/* The place of cached value k at the row's element idx (pos: its position
 * in the row). */
static LLVMValueRef rc_elem(hctx *h, const rowcache *rc, int k, LLVMValueRef pos, LLVMValueRef *idx)
{
	if (rc->out[k]) {
		LLVMValueRef off = fj_cg_offset(h->cg, rc->out[k], idx);
		return LLVMBuildInBoundsGEP2(BB, rc->ty[k], rc->out[k]->ptr, &off, 1, "");
	}
	LLVMValueRef ix[2] = {c64(h, 0), pos};
	return LLVMBuildInBoundsGEP2(BB, LLVMArrayType(rc->ty[k], ROWCACHE), rc->buf[k], ix, 2, "");
}

/* Binds the cached values filled before pass `ph` (nphases: the output pass). */
/* at the row's point idx alone (in the current memo scope): a result that
 * reads a cached value at another point (a transposed copy) computes it */
static void rc_bind(hctx *h, const rowcache *rc, int ph, LLVMValueRef pos, LLVMValueRef *idx)
{
	fj_rg_point p;
	fj_rg_point_idx(&p, h->a->dom->rank, idx);
	for (int k = 0; rc && k < rc->n; k++)
		if (rc->phase[k] < ph)
			fj_rg_bind_at(&h->r, rc->v[k], &p, LLVMBuildLoad2(BB, rc->ty[k], rc_elem(h, rc, k, pos, idx), ""));
}

/* Streaming the row's D-shaped outputs. A plain store to a line that is not
 * in cache first reads it (read for ownership): a row kernel that reads x
 * and writes y moves 3 bytes for every 2 it must. When an output is large
 * (it will not stay in cache anyway) and its rows are 64-byte aligned, the
 * output pass writes the row, NTBUF bytes at a time, into a stack buffer
 * (L1) and a copy loop then moves each chunk out with non-temporal 64-byte
 * stores, which skip that read. The kernel ends with a fence: non-temporal
 * stores are weakly ordered. */
enum { NTBUF = 16384, NT_MIN_BYTES = 8 << 20, MAXNT = 2 };

typedef struct ntplan {
	int n;
	uint32_t out[MAXNT];      /* output indices */
	LLVMValueRef buf[MAXNT];  /* [NTBUF x i8] stack buffers, 64-byte aligned */
	LLVMValueRef ok;          /* i1: this call streams (alignment, sizes) */
	int64_t chunk;            /* row elements per buffer fill (64-byte multiple for every output) */
} ntplan;

/* Plans streaming for the outputs that qualify when K is D's innermost dim
 * alone (a row is contiguous) and no cached value lives in them. */
static void ntplan_make(hctx *h, ntplan *nt, const rowcache *rc)
{
	fj_cg *cg = h->cg;
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	nt->n = 0;
	if (a->kmask != 1u << (dr - 1))
		return;
	for (uint32_t j = 0; j < h->k->nout && nt->n < MAXNT; j++) {
		const fj_cg_tensor *o = &h->out[j];
		bool scratch = false;
		for (int k = 0; k < rc->n; k++)
			scratch |= rc->out[k] == o;
		if (!row_output(h, j) || scratch || o->rank != dr)
			continue;
		LLVMValueRef buf = fj_cg_var(cg, LLVMArrayType(cg->t_i8, NTBUF), NULL, "ntbuf");
		LLVMSetAlignment(buf, 64);
		nt->out[nt->n] = j;
		nt->buf[nt->n++] = buf;
	}
	if (!nt->n)
		return;
	LLVMValueRef ok = LLVMConstInt(cg->t_i1, 1, 0);
	nt->chunk = NTBUF;
	for (int i = 0; i < nt->n; i++) {
		const fj_cg_tensor *o = &h->out[nt->out[i]];
		int64_t esz = (int64_t)fj_dtype_size(o->dtype);
		if (NTBUF / esz < nt->chunk)
			nt->chunk = NTBUF / esz;
		LLVMValueRef es = c64(h, esz);
		LLVMValueRef rowb = LLVMBuildNSWMul(BB, o->dim[dr - 1], es, "");
		LLVMValueRef addr = LLVMBuildPtrToInt(BB, o->ptr, cg->t_i64, "");
		LLVMValueRef c[3] = {
			LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildAnd(BB, addr, c64(h, 63), ""), c64(h, 0), ""),
			LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildAnd(BB, rowb, c64(h, 63), ""), c64(h, 0), ""),
			LLVMBuildICmp(BB, LLVMIntSGE, LLVMBuildNSWMul(BB, o->numel, es, ""), c64(h, NT_MIN_BYTES), ""),
		};
		for (int k = 0; k < 3; k++)
			ok = LLVMBuildAnd(BB, ok, c[k], "");
	}
	nt->ok = ok;
}

/* The offset in o of the element of the row at idx at K index k. */
static LLVMValueRef row_offset(hctx *h, const fj_cg_tensor *o, const LLVMValueRef *idx, LLVMValueRef k)
{
	LLVMValueRef at[FJ_MAX_RANK];
	memcpy(at, idx, sizeof at);
	at[h->a->dom->rank - 1] = k;
	return fj_cg_offset(h->cg, o, at);
}

/* Copies hi - lo elements of each planned output from its buffer to offset
 * off[i] of the output with non-temporal 64-byte stores. */
static void nt_copy(hctx *h, const ntplan *nt, const LLVMValueRef *off, LLVMValueRef lo, LLVMValueRef hi)
{
	fj_cg *cg = h->cg;
	LLVMTypeRef vty = LLVMVectorType(cg->t_i32, 16);
	unsigned mdk = LLVMGetMDKindIDInContext(cg->llctx, "nontemporal", 11);
	LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(cg->t_i32, 1, 0));
	LLVMValueRef md = LLVMMetadataAsValue(cg->llctx, LLVMMDNodeInContext2(cg->llctx, &one, 1));
	for (int i = 0; i < nt->n; i++) {
		const fj_cg_tensor *o = &h->out[nt->out[i]];
		LLVMValueRef oi = off[i];
		LLVMValueRef dst0 = LLVMBuildInBoundsGEP2(BB, fj_cg_storage_type(cg, o->dtype), o->ptr, &oi, 1, "");
		LLVMValueRef bytes = LLVMBuildNSWMul(BB, LLVMBuildNSWSub(BB, hi, lo, ""),
		                                     c64(h, (int64_t)fj_dtype_size(o->dtype)), "");
		fj_cg_loop l;
		fj_cg_loop_begin(cg, &l, c64(h, 0), LLVMBuildSDiv(BB, bytes, c64(h, 64), ""), "nt");
		LLVMValueRef src = LLVMBuildInBoundsGEP2(BB, vty, nt->buf[i], &l.iv, 1, "");
		LLVMValueRef dst = LLVMBuildInBoundsGEP2(BB, vty, dst0, &l.iv, 1, "");
		LLVMValueRef v = LLVMBuildLoad2(BB, vty, src, "");
		LLVMSetAlignment(v, 64);
		LLVMValueRef st = LLVMBuildStore(BB, v, dst);
		LLVMSetAlignment(st, 64);
		LLVMSetMetadata(st, mdk, md);
		fj_cg_loop_end(cg, &l);
	}
}

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

static LLVMValueRef ncols(hctx *h) { return red_count(h); }

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
static void col_accumulate(hctx *h, fj_rg_point *p, LLVMValueRef *idx)
{
	if (!h->part)
		return;
	fj_cg *cg = h->cg;
	LLVMValueRef pos = kpos(h, idx);
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
		vector_width(h, &l, 0);
	}
}

/* After the row `row` of [rlo, rhi): flushes the block partials every
 * ROWBLK rows and after the slot's last row. */
static void col_row_done(hctx *h, LLVMValueRef row, LLVMValueRef rlo, LLVMValueRef rhi)
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

static LLVMValueRef slot_base(hctx *h, LLVMValueRef s)
{
	LLVMValueRef off = LLVMBuildNSWAdd(BB, c64(h, FJ_RG_HOST_SLOT_HEADER), LLVMBuildNSWMul(BB, s, slot_bytes(h), ""), "");
	return LLVMBuildInBoundsGEP2(BB, h->cg->t_i8, h->ws, &off, 1, "");
}

/* The last slot: merges the partials of all S slots in order, binds the
 * outer reductions' results and stores the column outputs. */
static void col_merge(hctx *h)
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
	LLVMValueRef base = slot_base(h, ls.iv);
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
static void part_zero(hctx *h, LLVMValueRef base)
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
static void output_pass(hctx *h, const rowcache *rc, LLVMValueRef *idx, const ntplan *nt, const LLVMValueRef *off,
                        LLVMValueRef lo, LLVMValueRef hi)
{
	fj_rg *r = &h->r;
	int dr = h->a->dom->rank;
	fj_cg_tensor saved[MAXNT];
	for (int i = 0; nt && i < nt->n; i++) {
		/* a view of the buffer that the row's own offsets index: its base
		 * is the buffer minus the offset of element lo (not in bounds: no
		 * inbounds) */
		fj_cg_tensor *o = &h->out[nt->out[i]];
		saved[i] = *o;
		LLVMValueRef back = LLVMBuildNeg(BB, off[i], "");
		o->ptr = LLVMBuildGEP2(BB, fj_cg_storage_type(h->cg, o->dtype), nt->buf[i], &back, 1, "");
	}
	knest kn;
	fj_cg_loop l;
	if (nt) {
		fj_cg_loop_begin(h->cg, &l, lo, hi, "k");
		idx[dr - 1] = l.iv;
	} else {
		knest_begin(h, &kn, idx);
	}
	fj_rg_scope_push(r);
	rc_bind(h, rc, h->a->nphases, rc ? kpos(h, idx) : NULL, idx);
	fj_rg_point p;
	fj_rg_point_idx(&p, dr, idx);
	store_outputs(h, OUT_D, &p);
	col_accumulate(h, &p, idx);
	fj_rg_scope_pop(r);
	if (nt) {
		fj_cg_loop_end(h->cg, &l);
		vector_width(h, &l, 0);
	} else {
		knest_end(h, &kn, true);
	}
	for (int i = 0; nt && i < nt->n; i++)
		h->out[nt->out[i]] = saved[i];
}

/* The D-output pass of a row streamed: chunks of the row written to the
 * buffers, each copied out before the next. */
static void output_pass_nt(hctx *h, const rowcache *rc, LLVMValueRef *idx, const ntplan *nt)
{
	int dr = h->a->dom->rank;
	LLVMValueRef n = fj_rg_dim(&h->r, h->a->dom_v, dr - 1);
	fj_cg_loop lc;
	fj_cg_loop_begin(h->cg, &lc, c64(h, 0), n, "chunk");
	lc.step = c64(h, nt->chunk);
	LLVMValueRef hi = imin(h, LLVMBuildNSWAdd(BB, lc.iv, c64(h, nt->chunk), ""), n);
	LLVMValueRef off[MAXNT];
	for (int i = 0; i < nt->n; i++)
		off[i] = row_offset(h, &h->out[nt->out[i]], idx, lc.iv);
	output_pass(h, rc, idx, nt, off, lc.iv, hi);
	nt_copy(h, nt, off, lc.iv, hi);
	fj_cg_loop_end(h->cg, &lc);
}

/* One row: the reduction passes, then the outputs. rc: NULL, or the values
 * to keep in the row buffer. */
static void inner_row(hctx *h, fj_rg_acc *accs, LLVMValueRef *idx, LLVMValueRef *ridx, int nk, LLVMValueRef row,
                      LLVMValueRef count, const rowcache *rc, const ntplan *nt)
{
	fj_rg *r = &h->r;
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	fj_rg_scope_push(r);
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_reset(r, &accs[i]);
		set_shifts(h, accs, ph, idx, count);
		kblock kb;
		kblock_begin(h, &kb, accs, ph, idx);
		fj_rg_scope_push(r);
		LLVMValueRef pos = rc ? kpos(h, idx) : NULL;
		rc_bind(h, rc, ph, pos, idx);
		fj_rg_point p;
		fj_rg_point_idx(&p, dr, idx);
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			const fj_node *n = &h->body->nodes[a->reds[i]];
			LLVMValueRef x = fj_rg_eval(r, n->opnds[0], &p);
			for (int k = 0; rc && k < rc->n; k++)
				if (rc->v[k] == n->opnds[0] && rc->phase[k] == ph)
					LLVMBuildStore(BB, x, rc_elem(h, rc, k, pos, idx));
			bool arg = accs[i].kind == FJ_RG_RED_ARGMAX || accs[i].kind == FJ_RG_RED_ARGMIN;
			kb_step(h, &kb, accs, i, x, arg ? kpos(h, idx) : NULL);
		}
			fj_rg_scope_pop(r);
		kblock_end(h, &kb, accs);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_finish(r, &accs[i], count);
	}
	/* R-sized outputs */
	if (has_outputs(h, OUT_R)) {
		fj_rg_point pr;
		fj_rg_point_idx(&pr, nk, ridx);
		pr.lin = row;
		store_outputs(h, OUT_R, &pr);
	}
	/* D-sized outputs: one more pass over the row (in cache), streamed out
	 * when the plan says so */
	if (has_outputs(h, OUT_D) || h->part) {
		fj_cg_if c;
		if (nt->n) {
			fj_cg_if_begin(h->cg, &c, nt->ok);
			output_pass_nt(h, rc, idx, nt);
			fj_cg_if_else(h->cg, &c);
		}
		output_pass(h, rc, idx, NULL, NULL, NULL, NULL);
		if (nt->n)
			fj_cg_if_end(h->cg, &c);
	}
	fj_rg_scope_pop(r);
}

static void tpl_inner(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	fj_rg_acc accs[FJ_RG_MAX_REDS];
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_init(r, a->reds[i], &accs[i]);
	rowcache rc;
	rowcache_plan(h, &rc);
	ntplan nt;
	ntplan_make(h, &nt, &rc);
	bool par = pick_par_r(h);
	LLVMValueRef rlo, rhi;
	row_range(h, par, &rlo, &rhi);
	LLVMValueRef count = red_count(h);
	/* R's dims */
	LLVMValueRef rdims[FJ_MAX_RANK];
	int kd[FJ_MAX_RANK], nk = 0;
	for (int d = 0; d < dr; d++)
		if (!(a->kmask & (1u << d))) {
			rdims[nk] = fj_rg_dim(r, a->dom_v, d);
			kd[nk++] = d;
		}
	/* persistent_inner_outer: the parallel space is the slots */
	fj_cg_loop ls;
	if (a->noreds) {
		LLVMValueRef nrows = c64(h, 1);
		for (int i = 0; i < nk; i++)
			nrows = LLVMBuildNSWMul(BB, nrows, rdims[i], "");
		fj_cg_loop_begin(cg, &ls, h->lo, h->hi, "slot");
		h->part = slot_base(h, ls.iv);
		part_zero(h, h->part);
		rlo = LLVMBuildSDiv(BB, LLVMBuildNSWMul(BB, ls.iv, nrows, ""), h->nslots, "");
		rhi = LLVMBuildSDiv(BB, LLVMBuildNSWMul(BB, LLVMBuildNSWAdd(BB, ls.iv, c64(h, 1), ""), nrows, ""),
		                    h->nslots, "");
	}
	/* two versions when a value is cached on the stack: rows that fit the
	 * row buffer, and rows that recompute it */
	fj_cg_if c;
	if (rc.nstack)
		fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntSLE, count, c64(h, ROWCACHE), ""));
	int last = rc.n && !rc.nstack ? 0 : 1; /* version 0 caches, 1 recomputes */
	for (int version = rc.n ? 0 : 1; version <= last; version++) {
		fj_cg_loop lr;
		fj_cg_loop_begin(cg, &lr, rlo, rhi, "rows");
		LLVMValueRef ridx[FJ_MAX_RANK], idx[FJ_MAX_RANK];
		fj_cg_unravel(cg, lr.iv, rdims, nk, ridx);
		for (int i = 0; i < nk; i++)
			idx[kd[i]] = ridx[i];
		inner_row(h, accs, idx, ridx, nk, lr.iv, count, version == 0 ? &rc : NULL, &nt);
		col_row_done(h, lr.iv, rlo, rhi);
		fj_cg_loop_end(cg, &lr);
		if (version == 0 && rc.nstack)
			fj_cg_if_else(cg, &c);
	}
	if (rc.nstack)
		fj_cg_if_end(cg, &c);
	if (a->noreds) {
		/* the slot is done: the last one merges (acq_rel: it sees every
		 * other slot's partials) */
		LLVMValueRef done = LLVMBuildAtomicRMW(BB, LLVMAtomicRMWBinOpAdd, h->ws, c64(h, 1),
		                                       LLVMAtomicOrderingAcquireRelease, 0);
		fj_cg_if merge;
		fj_cg_if_begin(cg, &merge, LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildNSWAdd(BB, done, c64(h, 1), ""),
		                                        h->nslots, ""));
		col_merge(h);
		fj_cg_if_end(cg, &merge);
		fj_cg_loop_end(cg, &ls);
		h->part = NULL;
	}
	if (nt.n) /* the streamed rows are visible before the call returns */
		LLVMBuildFence(BB, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
}

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
		fj_cg_prefetch(cg, &o->t, fj_cg_offset(cg, &o->t, at));
		fj_cg_loop_end(cg, &l);
	}
	fj_cg_if_end(cg, &c);
}

/* Outer tiles: up to OTILE neighbouring points of R per tile. Wide tiles
 * read long contiguous runs of each row (OTILE * 4 bytes of f32): short runs
 * at a large stride defeat the hardware prefetchers (a column sum of [8192,
 * 4096] f32 ran at 4 GB/s with 256-point tiles). The accumulator arrays
 * (f64, on the stack) stay in L2. */
enum { OTILE = 2048 };

typedef struct tacc {
	LLVMValueRef arr[3];   /* [OTILE x ty] state arrays */
	LLVMValueRef shift;    /* [OTILE x f64] */
} tacc;

static LLVMValueRef elem(hctx *h, LLVMTypeRef ty, LLVMValueRef arr, LLVMValueRef t)
{
	LLVMValueRef ix[2] = {c64(h, 0), t};
	return LLVMBuildInBoundsGEP2(BB, LLVMArrayType(ty, OTILE), arr, ix, 2, "");
}

/* Points acc's variables at element t of its arrays. */
static void acc_at(hctx *h, fj_rg_acc *acc, tacc *ta, LLVMValueRef t)
{
	for (int i = 0; i < acc->n; i++)
		acc->var[i] = elem(h, acc->ty[i], ta->arr[i], t);
	acc->shift = acc->kind == FJ_RG_RED_VAR_MEAN
	                 ? LLVMBuildLoad2(BB, h->cg->t_f64, elem(h, h->cg->t_f64, ta->shift, t), "")
	                 : NULL;
}

static void tpl_outer(hctx *h)
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
	bool par = pick_par_r(h);
	LLVMValueRef rlo, rhi;
	row_range(h, par, &rlo, &rhi);
	LLVMValueRef count = red_count(h);
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
		knest_begin(h, &kn, id2);
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
			fj_rg_acc_step(r, &accs[i], x, arg ? kpos(h, id3) : NULL);
		}
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &lt);
		knest_end(h, &kn, false);
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
		if (!has_outputs(h, cls))
			continue;
		knest kn;
		LLVMValueRef id2[FJ_MAX_RANK];
		memcpy(id2, idx, sizeof id2);
		if (cls == OUT_D)
			knest_begin(h, &kn, id2);
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
		store_outputs(h, cls, &p);
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &lt);
		if (cls == OUT_D)
			knest_end(h, &kn, false);
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

/* ---- matmul with its epilogue ---- */

static LLVMValueRef fmac(hctx *h, fj_dtype acc, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
	if (!fj_dtype_is_float(acc))
		return LLVMBuildAdd(BB, c, LLVMBuildMul(BB, a, b, ""), "");
	LLVMTypeRef ty = LLVMTypeOf(a);
	unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(h->cg->mod, id, &ty, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(h->cg->llctx, id, &ty, 1);
	LLVMValueRef args[3] = {a, b, c};
	return LLVMBuildCall2(BB, fty, f, args, 3, "");
}

/* the epilogue of the packed template: every result at a point of D */
static void store_d(void *ud, fj_rg_point *p) { store_outputs(ud, OUT_D, p); }

static fj_status tpl_matmul(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	const fj_node *mm = &b->nodes[h->a->opaque];
	fj_vid av = mm->opnds[0], bv = mm->opnds[1], mv = mm->res[0];
	int ra = vrank(h, av), rb = vrank(h, bv), rm = vrank(h, mv);
	if (rm < 2 || ra != rm || rb != rm || rm > 3 || !h->a->vals[b->results[0]].in_d)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "matmul region of ranks %d x %d -> %d", ra, rb, rm);
	if (fj_rg_host_matmul_handles(h->a)) {
		fj_rg_host_mm hm = {.k = h->k, .r = r, .lo = h->lo, .hi = h->hi, .store = store_d, .ud = h};
		return fj_rg_host_matmul(cg, &hm);
	}
	fj_dtype mdt = b->values[mv].type.dtype;
	fj_dtype acc = fj_dtype_is_float(mdt) ? FJ_DT_F64 : FJ_DT_I64;
	LLVMTypeRef aty = fj_cg_compute_type(cg, acc);
	LLVMValueRef tile = fj_cg_var(cg, LLVMArrayType(aty, TILE), NULL, "mmacc");
	h->k->par_out = 0;
	h->k->par_mask = (1u << (rm - 1)) - 1;
	LLVMValueRef K = fj_rg_dim(r, av, ra - 1), N = fj_rg_dim(r, mv, rm - 1);
	fj_cg_loop lr;
	fj_cg_loop_begin(cg, &lr, h->lo, h->hi, "rows");
	fj_rg_scope_push(r);
	LLVMValueRef ridx[FJ_MAX_RANK];
	fj_cg_unravel(cg, lr.iv, r->vdim[mv], rm - 1, ridx); /* (batch,) i */
	LLVMValueRef ntiles = LLVMBuildUDiv(BB, LLVMBuildNSWAdd(BB, N, c64(h, TILE - 1), ""), c64(h, TILE), "");
	fj_cg_loop lj;
	fj_cg_loop_begin(cg, &lj, c64(h, 0), ntiles, "jt");
	LLVMValueRef j0 = LLVMBuildNSWMul(BB, lj.iv, c64(h, TILE), "");
	LLVMValueRef len = imin(h, c64(h, TILE), LLVMBuildNSWSub(BB, N, j0, ""));
	fj_cg_loop lt;
	fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
	LLVMBuildStore(BB, LLVMConstNull(aty), elem(h, aty, tile, lt.iv));
	fj_cg_loop_end(cg, &lt);
	fj_cg_loop lk;
	fj_cg_loop_begin(cg, &lk, c64(h, 0), K, "k");
	fj_rg_scope_push(r);
	LLVMValueRef ai[3], bi[3];
	for (int d = 0; d < rm - 1; d++)
		ai[d] = ridx[d];
	ai[rm - 1] = lk.iv;
	fj_rg_point pa;
	fj_rg_point_idx(&pa, ra, ai);
	LLVMValueRef x = fj_rg_eval_as(r, av, &pa, acc);
	fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
	fj_rg_scope_push(r);
	if (rm == 3)
		bi[0] = ridx[0];
	bi[rm - 2] = lk.iv;
	bi[rm - 1] = LLVMBuildNSWAdd(BB, j0, lt.iv, "");
	fj_rg_point pb;
	fj_rg_point_idx(&pb, rb, bi);
	LLVMValueRef y = fj_rg_eval_as(r, bv, &pb, acc);
	LLVMValueRef ep = elem(h, aty, tile, lt.iv);
	LLVMBuildStore(BB, fmac(h, acc, x, y, LLVMBuildLoad2(BB, aty, ep, "")), ep);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lt);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lk);
	/* epilogue */
	fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
	fj_rg_scope_push(r);
	LLVMValueRef sum = LLVMBuildLoad2(BB, aty, elem(h, aty, tile, lt.iv), "");
	fj_rg_bind(r, mv, fj_cg_convert(cg, sum, acc, mdt));
	LLVMValueRef oi[3];
	for (int d = 0; d < rm - 1; d++)
		oi[d] = ridx[d];
	oi[rm - 1] = LLVMBuildNSWAdd(BB, j0, lt.iv, "");
	fj_rg_point p;
	fj_rg_point_idx(&p, rm, oi);
	store_outputs(h, OUT_D, &p);
	fj_rg_bind(r, mv, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lt);
	fj_cg_loop_end(cg, &lj);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
	return cg->st;
}

/* ---- scan ---- */

static fj_status tpl_scan(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	const fj_node *n = &b->nodes[h->a->opaque];
	fj_vid av = n->opnds[0], cv = n->res[0];
	if (b->results[0] != cv || h->k->nout != 1)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "scan region with an epilogue");
	int rank = vrank(h, cv);
	int dim = rank ? (int)fj_attr_as_int(fj_node_attr(cg->ctx, n, "dim")) : 0;
	if (dim < 0)
		dim += rank;
	fj_dtype cdt = b->values[cv].type.dtype;
	fj_dtype acc = fj_dtype_is_float(cdt) ? FJ_DT_F64 : FJ_DT_I64;
	LLVMTypeRef aty = fj_cg_compute_type(cg, acc);
	LLVMValueRef accv = fj_cg_var(cg, aty, NULL, "scan");
	const fj_cg_tensor *o = &h->out[0];
	h->k->par_out = 0;
	h->k->par_mask = rank ? ((1u << rank) - 1) & ~(1u << dim) : 0;
	LLVMValueRef odims[FJ_MAX_RANK], oidx[FJ_MAX_RANK], idx[FJ_MAX_RANK];
	int map[FJ_MAX_RANK], no = 0;
	for (int d = 0; d < rank; d++)
		if (d != dim) {
			map[no] = d;
			odims[no++] = fj_rg_dim(r, cv, d);
		}
	fj_cg_loop ll;
	fj_cg_loop_begin(cg, &ll, h->lo, h->hi, "lines");
	fj_rg_scope_push(r);
	fj_cg_unravel(cg, ll.iv, odims, no, oidx);
	for (int i = 0; i < no; i++)
		idx[map[i]] = oidx[i];
	fj_cg_set(cg, accv, LLVMConstNull(aty));
	if (rank == 0) {
		fj_rg_point p;
		fj_rg_point_lin(&p, 0, c64(h, 0));
		fj_rg_store(r, o, c64(h, 0), av, &p);
	} else {
		fj_cg_loop lt;
		fj_cg_loop_begin(cg, &lt, c64(h, 0), fj_rg_dim(r, cv, dim), "t");
		fj_rg_scope_push(r);
		idx[dim] = lt.iv;
		fj_rg_point p;
		fj_rg_point_idx(&p, rank, idx);
		LLVMValueRef x = fj_rg_eval_as(r, av, &p, acc);
		LLVMValueRef s = fj_dtype_is_float(acc) ? LLVMBuildFAdd(BB, fj_cg_get(cg, accv, aty), x, "")
		                                        : LLVMBuildAdd(BB, fj_cg_get(cg, accv, aty), x, "");
		fj_cg_set(cg, accv, s);
		fj_cg_store(cg, o, fj_cg_offset(cg, o, idx), fj_cg_convert(cg, s, acc, o->dtype));
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &lt);
	}
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &ll);
	return cg->st;
}

/* ---- scatter_add / index_add ---- */

static fj_status tpl_scatter(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	const fj_node *n = &b->nodes[h->a->opaque];
	fj_vid av = n->opnds[0], iv = n->opnds[1], sv = n->opnds[2], ov = n->res[0];
	if (b->results[0] != ov || h->k->nout != 1)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "scatter region with an epilogue");
	bool index_add = n->op == FJ_OP_PRIMS_INDEX_ADD;
	int rank = vrank(h, ov);
	int dim = rank ? (int)fj_attr_as_int(fj_node_attr(cg->ctx, n, "dim")) : 0;
	if (dim < 0)
		dim += rank;
	const fj_cg_tensor *o = &h->out[0];
	fj_dtype odt = fj_cg_compute_dtype(o->dtype);
	h->k->par_out = 0;
	h->k->par_mask = 0;
	fj_cg_if g;
	fj_cg_if_begin(cg, &g, LLVMBuildICmp(BB, LLVMIntSLT, h->lo, h->hi, ""));
	/* the base */
	fj_cg_loop l;
	fj_cg_loop_begin(cg, &l, c64(h, 0), o->numel, "i");
	fj_rg_scope_push(r);
	fj_rg_point p;
	fj_rg_point_lin(&p, vrank(h, av), l.iv);
	fj_rg_store(r, o, l.iv, av, &p);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l);
	/* the additions, in order */
	fj_vid walk = index_add ? sv : iv; /* the shape walked */
	int wr = vrank(h, walk);
	fj_cg_loop_begin(cg, &l, c64(h, 0), fj_rg_numel(r, walk), "j");
	fj_rg_scope_push(r);
	LLVMValueRef widx[FJ_MAX_RANK], tidx[FJ_MAX_RANK];
	fj_cg_unravel(cg, l.iv, r->vdim[walk], wr, widx);
	fj_rg_point pw;
	fj_rg_point_idx(&pw, wr, widx);
	pw.lin = l.iv;
	LLVMValueRef ix;
	if (index_add) {
		fj_rg_point pi;
		LLVMValueRef one = rank ? widx[dim] : c64(h, 0);
		fj_rg_point_idx(&pi, vrank(h, iv), &one);
		ix = fj_rg_eval_as(r, iv, &pi, FJ_DT_I64);
	} else {
		ix = fj_rg_eval_as(r, iv, &pw, FJ_DT_I64);
	}
	LLVMValueRef size = rank ? o->dim[dim] : c64(h, 1);
	LLVMValueRef ok = LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGE, ix, c64(h, 0), ""),
	                               LLVMBuildICmp(BB, LLVMIntSLT, ix, size, ""), "");
	fj_rg_fail_if(r, LLVMBuildNot(BB, ok, ""), FJ_KERR_INDEX);
	fj_rg_point ps;
	if (index_add) {
		ps = pw;
	} else {
		/* src is read at the index's position (src may be larger) */
		fj_rg_point_idx(&ps, vrank(h, sv), widx);
	}
	LLVMValueRef x = fj_rg_eval_as(r, sv, &ps, odt);
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, ok);
	for (int d = 0; d < rank; d++)
		tidx[d] = widx[d];
	if (rank)
		tidx[dim] = ix;
	LLVMValueRef off = fj_cg_offset(cg, o, tidx);
	LLVMValueRef cur = fj_cg_convert(cg, fj_cg_load(cg, o, off), o->dtype, odt);
	LLVMValueRef s = fj_dtype_is_float(odt) ? LLVMBuildFAdd(BB, cur, x, "")
	                 : odt == FJ_DT_BOOL    ? LLVMBuildOr(BB, cur, x, "")
	                                        : LLVMBuildAdd(BB, cur, x, "");
	fj_cg_store(cg, o, off, fj_cg_convert(cg, s, odt, o->dtype));
	fj_cg_if_end(cg, &c);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l);
	fj_cg_if_end(cg, &g);
	return cg->st;
}

/* ---- the kernel ---- */

/* A dense row-major view of `rank` sizes read from dims[*di ...]. */
static void make_view(fj_cg *cg, fj_cg_tensor *t, LLVMValueRef ptr, fj_dtype dt, int rank, LLVMValueRef dims,
                      int64_t *di)
{
	memset(t, 0, sizeof *t);
	t->ptr = ptr;
	t->dtype = dt;
	t->rank = rank;
	for (int k = 0; k < rank; k++) {
		LLVMValueRef ix = fj_cg_i64(cg, (*di)++);
		LLVMValueRef v = LLVMBuildLoad2(cg->b, cg->t_i64, LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, dims, &ix, 1, ""), "d");
		LLVMSetAlignment(v, 8);
		t->dim[k] = v;
	}
	LLVMValueRef s = fj_cg_i64(cg, 1);
	for (int k = rank - 1; k >= 0; k--) {
		t->stride[k] = s;
		s = LLVMBuildNSWMul(cg->b, s, t->dim[k], "");
	}
	t->numel = s;
}

static void add_attr(fj_cg *cg, LLVMValueRef f, int idx, const char *name)
{
	unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
	LLVMAddAttributeAtIndex(f, (LLVMAttributeIndex)idx, LLVMCreateEnumAttribute(cg->llctx, kind, 0));
}

static fj_status emit_body(hctx *h)
{
	const fj_rg_analysis *a = h->a;
	if (a->opaque != FJ_NONODE) {
		switch (h->body->nodes[a->opaque].op) {
		case FJ_OP_PRIMS_MATMUL: return tpl_matmul(h);
		case FJ_OP_PRIMS_CUMSUM: return tpl_scan(h);
		case FJ_OP_PRIMS_SCATTER_ADD:
		case FJ_OP_PRIMS_INDEX_ADD: return tpl_scatter(h);
		default: break; /* take, gather: evaluated inline */
		}
	}
	if (!a->nreds) {
		tpl_pointwise(h);
		return h->cg->st;
	}
	if (a->rrank == 0 || a->noreds) {
		tpl_inner(h);
		return h->cg->st;
	}
	/* inner when the innermost non-unit dim of D is reduced */
	int inner = -1;
	for (int d = a->dom->rank; d-- > 0;)
		if (a->dom->dims[d] != 1) {
			inner = d;
			break;
		}
	if (inner < 0 || (a->kmask & (1u << inner)))
		tpl_inner(h);
	else
		tpl_outer(h);
	return h->cg->st;
}

fj_status fj_cg_emit_region_host(fj_cg *cg, fj_cg_kernel *k)
{
	fj_rg_analysis a;
	uint32_t node = (uint32_t)(k->node - k->g->nodes);
	fj_status st = fj_rg_analyze(cg->ctx, k->g, node, &a);
	if (st != FJ_OK) {
		if (cg->st == FJ_OK)
			cg->st = st;
		return st;
	}
	uint32_t nin = k->nin, nout = k->nout, np = nin + nout;
	/* persistent_inner_outer: + the workspace (ptrs[np], region.h) */
	uint32_t nx = a.noreds ? 4 : 3;
	LLVMTypeRef ps[np + 4];
	for (uint32_t i = 0; i < np; i++)
		ps[i] = cg->t_ptr;
	ps[np] = cg->t_ptr;
	ps[np + 1] = cg->t_i64;
	ps[np + 2] = cg->t_i64;
	ps[np + 3] = cg->t_ptr;
	LLVMTypeRef fty = LLVMFunctionType(cg->t_i32, ps, np + nx, 0);
	size_t nlen = 0;
	const char *oname = LLVMGetValueName2(cg->fn, &nlen);
	char name[nlen + 16];
	memcpy(name, oname, nlen);
	memcpy(name + nlen, ".region", 8);
	LLVMValueRef f = LLVMAddFunction(cg->mod, name, fty);
	LLVMSetLinkage(f, LLVMInternalLinkage);
	add_attr(cg, f, (int)LLVMAttributeFunctionIndex, "nounwind");
	add_attr(cg, f, (int)LLVMAttributeFunctionIndex, "alwaysinline");
	for (uint32_t i = 0; i < np; i++) {
		add_attr(cg, f, (int)i + 1, "noalias");
		add_attr(cg, f, (int)i + 1, "nocapture");
		if (i < nin)
			add_attr(cg, f, (int)i + 1, "readonly");
	}
	add_attr(cg, f, (int)np + 1, "readonly");
	add_attr(cg, f, (int)np + 1, "nocapture");
	if (a.noreds) {
		add_attr(cg, f, (int)np + 4, "noalias");
		add_attr(cg, f, (int)np + 4, "nocapture");
	}

	LLVMValueRef ofn = cg->fn;
	LLVMBasicBlockRef oentry = cg->entry, oblock = LLVMGetInsertBlock(cg->b);
	const fj_cg_target *otarget = cg->target;
	fj_cg_target tt = *cg->target;
	if (tt.region_math)
		tt.math = tt.region_math;
	cg->target = &tt;
	cg->fn = f;
	cg->entry = LLVMAppendBasicBlockInContext(cg->llctx, f, "entry");
	LLVMPositionBuilderAtEnd(cg->b, cg->entry);

	fj_cg_operand in[nin ? nin : 1];
	fj_cg_tensor out[nout ? nout : 1];
	LLVMValueRef dims = LLVMGetParam(f, np);
	int64_t di = 0;
	for (uint32_t i = 0; i < nin; i++) {
		in[i] = k->in[i];
		if (k->in[i].none || k->in[i].literal)
			continue;
		make_view(cg, &in[i].t, LLVMGetParam(f, i), k->in[i].t.dtype, k->in[i].t.rank, dims, &di);
	}
	for (uint32_t j = 0; j < nout; j++)
		make_view(cg, &out[j], LLVMGetParam(f, nin + j), k->out[j].dtype, k->out[j].rank, dims, &di);
	LLVMValueRef status = fj_cg_var(cg, cg->t_i32, fj_cg_i32(cg, FJ_KERR_OK), "status");
	hctx h = {.cg = cg, .k = k, .a = &a, .body = a.body, .in = in, .out = out,
	          .lo = LLVMGetParam(f, np + 1), .hi = LLVMGetParam(f, np + 2)};
	h.vec = vectorisable(a.body);
	if (a.noreds) { /* S follows the extra symbols */
		h.ws = LLVMGetParam(f, np + 3);
		LLVMValueRef at = fj_cg_i64(cg, di + (int64_t)a.nxsyms);
		h.nslots = LLVMBuildLoad2(cg->b, cg->t_i64, LLVMBuildInBoundsGEP2(cg->b, cg->t_i64, dims, &at, 1, ""), "slots");
	}
	/* the region's extra symbols (region.h) follow the views' sizes in dims */
	st = fj_rg_begin_dims(&h.r, cg, &a, in, nin, out, nout, status, dims, di);
	if (st == FJ_OK)
		st = emit_body(&h);
	if (st == FJ_OK && h.r.st != FJ_OK)
		st = h.r.st;
	if (st == FJ_OK && cg->st != FJ_OK)
		st = cg->st;
	fj_rg_end(&h.r);
	if (st == FJ_OK)
		LLVMBuildRet(cg->b, fj_cg_get(cg, status, cg->t_i32));
	cg->fn = ofn;
	cg->entry = oentry;
	cg->target = otarget;
	LLVMPositionBuilderAtEnd(cg->b, oblock);
	fj_rg_analysis_free(&a);
	if (st != FJ_OK) {
		LLVMDeleteFunction(f);
		if (cg->st == FJ_OK)
			cg->st = st;
		return st;
	}
	LLVMValueRef args[np + 4];
	for (uint32_t i = 0; i < nin; i++)
		args[i] = k->in[i].none || k->in[i].literal ? LLVMConstPointerNull(cg->t_ptr) : k->in[i].t.ptr;
	for (uint32_t j = 0; j < nout; j++)
		args[nin + j] = k->out[j].ptr;
	args[np] = LLVMGetParam(ofn, 1);
	args[np + 1] = k->lo;
	args[np + 2] = k->hi;
	if (nx == 4) {
		LLVMValueRef at = fj_cg_i64(cg, np);
		args[np + 3] = LLVMBuildLoad2(cg->b, cg->t_ptr,
		                              LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, LLVMGetParam(ofn, 0), &at, 1, ""), "ws");
	}
	LLVMValueRef rc = LLVMBuildCall2(cg->b, fty, f, args, np + nx, "");
	fj_cg_set(cg, k->status, rc);
	return FJ_OK;
}
