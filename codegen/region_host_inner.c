/* region_host_inner.c -- the host templates of reductions along rows
 * (reduction_inner, persistent_inner, persistent_inner_outer): blocked
 * reduction passes, the row cache, streamed outputs, the row outputs
 * (region_host.c describes them). */
#include "codegen/region_host_internal.h"

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
enum { KBLOCK = 512 };

typedef struct kblock {
	knest kn;              /* K loops (innermost: the element loop of a block) */
	fj_cg_loop bl;         /* the block loop (when nblk) */
	int nblk;
	bool blocked;          /* the innermost K loop is blocked */
	int which[FJ_RG_MAX_REDS];          /* reduction index of blk[i] */
	fj_rg_acc blk[FJ_RG_MAX_REDS];      /* f32 block accumulators */
	bool minmax[FJ_RG_MAX_REDS];        /* blk[i] is a max / min block (block_minmax_step) */
	bool skipnan[FJ_RG_MAX_REDS];       /* ... a max that skips NaNs (fj_rg_max_skips_nan) */
	LLVMValueRef nan[FJ_RG_MAX_REDS];   /* max/min blocks with mask registers: "a NaN was seen" (i8), else NULL */
} kblock;

/* Block accumulators: f32 sums (above), and f32 max / min. With AVX-512's
 * mask registers a max / min block skips NaNs, noting them in a flag (an
 * i8 set by a select, which the vectoriser makes an any-of reduction in mask
 * registers), so that it compares with nnan selects: one vmaxps per vector
 * instead of llvm.maximum's NaN and signed-zero handling in the
 * loop-carried chain; a block with a NaN merges as NaN. Without mask
 * registers (AVX2) that any-of reduction packs each vector's compare down
 * to bytes (vextractf128, vpackssdw, por: with the select of -inf, six ops
 * per vector in softmax's max pass), so there the block is llvm.maximum
 * without signed zeros, which propagates the NaN itself: vmaxps, vcmpunordps,
 * vblendvps. A max whose NaN the row's sum carries to every output
 * (softmax's, log_softmax's: fj_rg_max_skips_nan) needs neither: a NaN
 * becomes -inf by a vmaxps with -inf, then the nnan select, two vmaxps per
 * vector on both paths. Sapphire Rapids, 2 threads, [8192,4096] f32, the
 * same-run memcpy ratio, mean of 5 alternating runs: log_softmax forward
 * AVX2 0.892 -> 0.959, AVX-512 1.062 -> 1.112; softmax AVX2 0.870 -> 0.920,
 * AVX-512 1.029 -> 1.052. */
static bool blockable(const fj_rg_acc *acc)
{
	bool sum = (acc->kind == FJ_RG_RED_SUM || acc->kind == FJ_RG_RED_VAR_MEAN) && acc->acc_dt == FJ_DT_F64;
	bool minmax = (acc->kind == FJ_RG_RED_MAX || acc->kind == FJ_RG_RED_MIN) && acc->acc_dt == FJ_DT_F32;
	return (sum || minmax) && fj_cg_compute_dtype(acc->in_dt) == FJ_DT_F32;
}

static bool block_acc(hctx *h, const fj_rg_acc *acc, fj_rg_acc *blk, bool *is_minmax, bool *skipnan,
                      LLVMValueRef *nan)
{
	if (!blockable(acc))
		return false;
	bool minmax = acc->kind == FJ_RG_RED_MAX || acc->kind == FJ_RG_RED_MIN;
	*skipnan = acc->kind == FJ_RG_RED_MAX && fj_rg_max_skips_nan(&h->r, &h->body->nodes[acc->node]);
	*blk = *acc;
	blk->acc_dt = FJ_DT_F32;
	for (int i = 0; i < blk->n; i++) {
		blk->ty[i] = h->cg->t_f32;
		blk->var[i] = fj_cg_var(h->cg, h->cg->t_f32, NULL, "bacc");
	}
	blk->shift = NULL; /* set per block by kblock_begin */
	*is_minmax = minmax;
	*nan = minmax && !*skipnan && h->cg->target->vector_bits >= 512 ? fj_cg_var(h->cg, h->cg->t_i8, NULL, "bnan")
	                                                                 : NULL;
	return true;
}

/* x as a max that skips NaNs sees it: x > -inf ? x : -inf, -inf for a NaN
 * (max), or x < inf ? x : inf (min); one vmaxps / vminps. */
static LLVMValueRef skip_nan(hctx *h, LLVMValueRef x, bool max)
{
	LLVMValueRef inf = LLVMConstReal(h->cg->t_f32, max ? -__builtin_inf() : __builtin_inf());
	return LLVMBuildSelect(BB, LLVMBuildFCmp(BB, max ? LLVMRealOGT : LLVMRealOLT, x, inf, ""), x, inf, "");
}

/* Steps f32 variable acc, a max (max) or min, with xs, which is no NaN: an
 * nnan select, one vmaxps / vminps in the loop-carried chain. */
static void nnan_minmax_step(hctx *h, LLVMValueRef acc, LLVMValueRef xs, bool max)
{
	fj_cg *cg = h->cg;
	LLVMValueRef a = fj_cg_get(cg, acc, cg->t_f32);
	LLVMValueRef better = LLVMBuildFCmp(BB, max ? LLVMRealOGT : LLVMRealOLT, xs, a, "");
	LLVMValueRef next = LLVMBuildSelect(BB, better, xs, a, "");
	LLVMSetFastMathFlags(better, LLVMFastMathNoNaNs | LLVMFastMathNoSignedZeros);
	LLVMSetFastMathFlags(next, LLVMFastMathNoNaNs | LLVMFastMathNoSignedZeros);
	fj_cg_set(cg, acc, next);
}

/* One step of a max / min block accumulator (see block_acc). */
static void block_minmax_step(hctx *h, fj_rg_acc *blk, LLVMValueRef nan, bool skipnan, LLVMValueRef x)
{
	fj_cg *cg = h->cg;
	bool max = blk->kind == FJ_RG_RED_MAX;
	if (!nan && !skipnan) {
		LLVMValueRef args[2] = {fj_cg_get(cg, blk->var[0], cg->t_f32), x};
		LLVMValueRef next = fj_cg_intrinsic(cg, max ? "llvm.maximum" : "llvm.minimum", args, 2);
		LLVMSetFastMathFlags(next, LLVMFastMathNoSignedZeros);
		fj_cg_set(cg, blk->var[0], next);
		return;
	}
	LLVMValueRef isnan = NULL, xs;
	if (nan) {
		isnan = LLVMBuildFCmp(BB, LLVMRealUNO, x, x, "");
		xs = LLVMBuildSelect(BB, isnan, LLVMConstReal(cg->t_f32, max ? -__builtin_inf() : __builtin_inf()), x, "");
	} else {
		xs = skip_nan(h, x, max);
	}
	nnan_minmax_step(h, blk->var[0], xs, max);
	/* select, not or: the vectoriser's any-of reduction (mask registers) */
	if (nan)
		fj_cg_set(cg, nan, LLVMBuildSelect(BB, isnan, LLVMConstInt(cg->t_i8, 1, 0), fj_cg_get(cg, nan, cg->t_i8), ""));
}

/* ---- prefetching the next row ----
 * A row kernel's first pass streams the row in from memory; its later
 * passes (softmax's exp and sum, the output pass) work on the row in cache
 * while the memory bus idles, and the hardware prefetchers, which follow the
 * first pass's stream only a few lines ahead, do not fill that gap. So the
 * passes after the one that read the row (the later reduction passes and
 * the output pass) prefetch the next row of every input of D's shape, block
 * by block (KBLOCK elements) through their own blocks: the next row's first
 * pass then finds it in cache (softmax forward on [8192,4096] f32, Zen 4, 2
 * threads: from 0.69 to 0.87 of the same-run memcpy). The next row goes to
 * L2 (prefetcht1), not L1: a row of 16 KiB per input, fetched while the
 * pass reads the current one, would evict the current row from a 32 KiB L1
 * (Zen 4, 2 threads, best medians over 3-4 alternating runs of 8 rounds:
 * softmax forward 12.2-14.0 -> 10.9-12.8 ms, its backward 14.5-17.9 ->
 * 11.7-15.2, rms_norm's backward 17.7-17.8 -> 15.6-17.5; log_softmax's and
 * layer_norm's unchanged within the noise). Rows must be contiguous: K is
 * D's innermost dim alone.
 * Those passes share the next row (prefetch_plan): of every KBLOCK-element
 * window of it, each takes one slice, the later reduction passes the first
 * ones, the output pass the last. One pass fetching all of it issued 32
 * prefetches at the start of each block, more than the line fill buffers
 * hold: in perf, a fifth of log_softmax's forward (AVX2) waited on them,
 * while the output pass, whose stores stream out, left reads idle.
 * Sapphire Rapids, 2 threads, [8192,4096] f32, the same-run memcpy ratio,
 * mean of 5 and of 8 alternating runs: the AVX2 log_softmax forward 0.78 ->
 * 0.88 and 0.82 -> 0.86, its training 0.87 -> 0.91; softmax, layer_norm,
 * rms_norm and AVX-512 within the noise (+-5 %). */
static bool row_prefetch(hctx *h)
{
	int dr = h->a->dom->rank;
	return dr >= 2 && h->a->kmask == 1u << (dr - 1);
}

/* The passes that prefetch: the later reduction passes with blocks (the
 * others walk K unblocked) and the output pass, when the kernel has one. */
static void prefetch_plan(hctx *h, const fj_rg_acc *accs)
{
	const fj_rg_analysis *a = h->a;
	h->pf_n = 0;
	memset(h->pf_slice, -1, sizeof h->pf_slice);
	if (!row_prefetch(h))
		return;
	for (int ph = 1; ph < a->nphases; ph++) {
		bool blocked = false;
		for (int i = 0; i < a->nreds; i++)
			blocked |= a->red_phase[i] == ph && blockable(&accs[i]);
		if (blocked)
			h->pf_slice[ph] = (int8_t)h->pf_n++;
	}
	if (fj_rh_has_outputs(h, OUT_D) || h->part)
		h->pf_slice[a->nphases] = (int8_t)h->pf_n++;
}

/* Prefetches, of elements [k0, k1) of the n rows after the one at idx of
 * every input that has D's shape, those in pass ph's slice (prefetch_plan)
 * of their KBLOCK-element windows, one prefetch per 64-byte line (the last
 * row's next row lies past the input: a prefetch never faults). Slices are
 * multiples of 64 elements, the last one takes the rest of the window.
 * k1 - k0 <= span; a span of up to KBLOCK lies in one window (k0 is a
 * multiple of span or of KBLOCK), a longer one is taken window by window
 * from anywhere. */
static void prefetch_rows(hctx *h, const LLVMValueRef *idx, LLVMValueRef k0, LLVMValueRef k1, int64_t span, int n,
                          int ph)
{
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	int slice = h->pf_slice[ph];
	if (slice < 0)
		return;
	int64_t len = KBLOCK / h->pf_n / 64 * 64;
	int64_t from = slice * len, to = slice == h->pf_n - 1 ? KBLOCK : from + len;
	fj_cg_loop lw;
	LLVMValueRef w = LLVMBuildAnd(BB, k0, c64(h, -KBLOCK), "");
	if (span > KBLOCK) {
		fj_cg_loop_begin(h->cg, &lw, w, k1, "pfw");
		lw.step = c64(h, KBLOCK);
		w = lw.iv;
	}
	LLVMValueRef lo = k0, hi = k1; /* one pass, one window: all of it */
	if (h->pf_n > 1 || span > KBLOCK) { /* the slice of window w, within [k0, k1) */
		lo = LLVMBuildNSWAdd(BB, w, c64(h, from), "");
		lo = LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, lo, k0, ""), k0, lo, "");
		hi = imin(h, LLVMBuildNSWAdd(BB, w, c64(h, to), ""), k1);
	}
	for (uint32_t i = 0; i < h->body->nparams; i++) {
		const fj_cg_operand *o = &h->in[i];
		if (o->none || o->literal || !fj_type_same_dims(&h->body->values[h->body->params[i]].type, a->dom))
			continue;
		int64_t per = 64 / (int64_t)fj_dtype_size(o->t.dtype);
		LLVMValueRef at[FJ_MAX_RANK];
		memcpy(at, idx, sizeof at);
		at[dr - 1] = lo;
		LLVMValueRef base = fj_cg_offset(h->cg, &o->t, at);
		fj_cg_loop l;
		fj_cg_loop_begin(h->cg, &l, c64(h, 0), LLVMBuildNSWSub(BB, hi, lo, ""), "pf");
		l.step = c64(h, per);
		for (int q = 1; q <= n; q++) {
			LLVMValueRef row = LLVMBuildNSWAdd(BB, base, LLVMBuildNSWMul(BB, o->t.stride[dr - 2], c64(h, q), ""), "");
			fj_cg_prefetch(h->cg, &o->t, LLVMBuildNSWAdd(BB, row, l.iv, ""), FJ_CG_PREFETCH_L2);
		}
		fj_cg_loop_end(h->cg, &l);
	}
	if (span > KBLOCK)
		fj_cg_loop_end(h->cg, &lw);
}

/* Opens the loops of reduction pass ph (after set_shifts). accs[i] of the
 * phase are stepped through kb_step(). */
static void kblock_begin(hctx *h, kblock *kb, fj_rg_acc *accs, int ph, LLVMValueRef *idx)
{
	const fj_rg_analysis *a = h->a;
	kb->nblk = 0;
	for (int i = 0; i < a->nreds; i++)
		if (a->red_phase[i] == ph && block_acc(h, &accs[i], &kb->blk[kb->nblk], &kb->minmax[kb->nblk],
		                                       &kb->skipnan[kb->nblk], &kb->nan[kb->nblk]))
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
			if (ph > 0)
				prefetch_rows(h, idx, kb->bl.iv, end, KBLOCK, 1, ph);
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
			if (kb->minmax[j])
				block_minmax_step(h, &kb->blk[j], kb->nan[j], kb->skipnan[j], x);
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
			fj_rh_vector_width(h, &kn->l[i], FJ_CG_INTERLEAVE);
			if (kb->blocked) {
				for (int j = 0; j < kb->nblk; j++) {
					LLVMValueRef v[3];
					fj_rg_acc_load(&h->r, &kb->blk[j], v);
					if (kb->nan[j]) {
						LLVMValueRef seen = LLVMBuildICmp(BB, LLVMIntNE, fj_cg_get(h->cg, kb->nan[j], h->cg->t_i8),
						                                  LLVMConstInt(h->cg->t_i8, 0, 0), "");
						v[0] = LLVMBuildSelect(BB, seen, LLVMConstReal(h->cg->t_f32, __builtin_nan("")), v[0], "");
					} else if (!kb->minmax[j]) {
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
LLVMValueRef fj_rh_kpos(hctx *h, LLVMValueRef *idx)
{
	LLVMValueRef pos = c64(h, 0);
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d))
			pos = LLVMBuildNSWAdd(BB, LLVMBuildNSWMul(BB, pos, fj_rg_dim(&h->r, h->a->dom_v, d), ""), idx[d], "");
	return pos;
}

bool fj_rh_has_outputs(hctx *h, int cls)
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
 * in a per-thread row buffer on the stack. An output that holds a cached
 * value cannot be streamed (below); where streaming it pays, a second
 * version of the row loop keeps the value on the stack instead
 * (stream_plan). */
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
 * (it will not stay in cache anyway), wherever it lies, the output pass
 * runs over the row NTBUF bytes at a time (output_pass_nt). A chunk that
 * starts on a 64-byte line of every output is stored in place with
 * non-temporal vector stores (fj_cg_tag_stream), which skip that read.
 * Any other chunk (the row's first and last, where the row is not on
 * lines) goes to a stack buffer (L1), and a copy loop moves it out, its
 * whole lines non-temporally and the partial lines at the row's ends
 * plainly. The kernel ends with a fence: non-temporal stores are weakly
 * ordered. Storing in place rather than through the buffer for every
 * chunk, Intel Xeon (Emerald Rapids), [8192,4096] f32, fj-bench-ab, median
 * speed ratio: forwards on 2 threads, AVX2 code softmax 1.054, log_softmax
 * 1.067, layer_norm 1.036, rms_norm 1.132; AVX-512 1.024, 1.032, 1.080,
 * 0.999; on 1 thread, softmax and layer_norm 1.076 and 1.078 (AVX2), 1.013
 * and 1.045 (AVX-512); backwards on 2 threads 1.01-1.10 (log_softmax's
 * the most). In place only where every streamed output is of 4-byte
 * elements: with an f16 output, LLVM's alignment-from-assumptions pass
 * left one vector store of four (AVX2, 16 bytes at line offset 48) at its
 * element alignment, so that fj_cg_stream_stores could not stream it, and
 * lines written partly streamed and partly plain ran the kernel 7x slower
 * (ln_residual_f16 on [8192,4096]). Chunks are 2 KiB, so that (presumably: no
 * performance counters here) the copy finds the chunk still in L1; a chunk
 * of 16 KiB is a whole 4096-float row, behind the pass's other streams (the
 * norm backwards read x, the tangent, the weight and the column partials).
 * Zen 4, 2 threads, [8192,4096] f32, 6-8
 * alternating runs, 16 -> 2 KiB: layer_norm backward 20.2-26.4 ->
 * 18.5-23.4 ms, rms_norm backward 18.3-22.0 -> 15.1-19.8, log_softmax
 * backward 17.6-23.0 -> 13.7-22.7, softmax forward 11.2-14.5 -> 10.6-14.5;
 * 1 and 4 KiB ran like 2. */
enum { NTBUF = 2048, NT_MIN_BYTES = 8 << 20, MAXNT = 2 };

/* ---- row groups ----
 * persistent_inner_outer adds each row's operands of the column sums to
 * the slot's partials in the output pass: a load and a store of every
 * partial per row element, beside the row's own loads and stores
 * (layer_norm's backward: two partials, with x, the tangent and the weight
 * read and the input gradient written). Its rows therefore go GROUP at a
 * time: each row's reduction passes in turn, then one output pass over the
 * group, which loads each partial once, adds the rows' operands in row
 * order -- ((p + a) + b), the bits of one row after the other -- and
 * stores it once; the weight is loaded once for the group too. A slot's
 * odd last row goes alone. */
enum { GROUP = 2, MAXGROUP = 4 };

typedef struct rowgroup {
	int n;                                          /* rows */
	LLVMValueRef row[MAXGROUP];                     /* R-linear index */
	LLVMValueRef idx[MAXGROUP][FJ_MAX_RANK];        /* D index (K dims: the pass's) */
	LLVMValueRef ridx[MAXGROUP][FJ_MAX_RANK];       /* R index */
	LLVMValueRef res[MAXGROUP][FJ_RG_MAX_REDS][2];  /* each row's reduction results */
} rowgroup;

/* Saves (save) or binds again row j's reduction results. */
static void group_results(hctx *h, rowgroup *g, int j, bool save)
{
	for (int i = 0; i < h->a->nreds; i++) {
		const fj_node *n = &h->body->nodes[h->a->reds[i]];
		for (uint32_t q = 0; q < n->nres && q < 2; q++) {
			if (save)
				g->res[j][i][q] = h->r.bound[n->res[q]];
			else
				fj_rg_bind(&h->r, n->res[q], g->res[j][i][q]);
		}
	}
}

typedef struct ntplan {
	int n;
	uint32_t out[MAXNT];      /* output indices */
	LLVMValueRef buf[MAXGROUP][MAXNT];  /* per row of a group: [NTBUF x i8] stack buffers, 64-byte aligned */
	LLVMValueRef ok;          /* i1: this call streams (alignment, sizes) */
	bool direct;              /* whole chunks stored in place (output_pass_nt) */
	bool checked;             /* ok holds wherever the plan is used (n > 0): no plain-store pass */
	int64_t chunk;            /* row elements per buffer fill (64-byte multiple for every output) */
} ntplan;

/* Plans streaming for the outputs that qualify when K is D's innermost dim
 * alone (a row is contiguous) and no cached value lives in them, with
 * buffers for groups of `rows` rows. */
static void ntplan_make(hctx *h, ntplan *nt, const rowcache *rc, int rows)
{
	fj_cg *cg = h->cg;
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	nt->n = 0;
	nt->checked = false;
	if (a->kmask != 1u << (dr - 1))
		return;
	for (uint32_t j = 0; j < h->k->nout && nt->n < MAXNT; j++) {
		const fj_cg_tensor *o = &h->out[j];
		bool scratch = false;
		for (int k = 0; k < rc->n; k++)
			scratch |= rc->out[k] == o;
		if (!row_output(h, j) || scratch || o->rank != dr)
			continue;
		for (int g = 0; g < rows; g++) {
			nt->buf[g][nt->n] = fj_cg_var(cg, LLVMArrayType(cg->t_i8, NTBUF), NULL, "ntbuf");
			LLVMSetAlignment(nt->buf[g][nt->n], 64);
		}
		nt->out[nt->n++] = j;
	}
	if (!nt->n)
		return;
	LLVMValueRef ok = LLVMConstInt(cg->t_i1, 1, 0);
	nt->chunk = NTBUF;
	nt->direct = true;
	for (int i = 0; i < nt->n; i++) {
		const fj_cg_tensor *o = &h->out[nt->out[i]];
		int64_t esz = (int64_t)fj_dtype_size(o->dtype);
		nt->direct &= esz == 4;
		if (NTBUF / esz < nt->chunk)
			nt->chunk = NTBUF / esz;
		LLVMValueRef bytes = LLVMBuildNSWMul(BB, o->numel, c64(h, esz), "");
		ok = LLVMBuildAnd(BB, ok, LLVMBuildICmp(BB, LLVMIntSGE, bytes, c64(h, NT_MIN_BYTES), ""), "");
	}
	nt->ok = ok;
}

/* The streamed version of a row loop whose cache lives in outputs: those
 * values move to stack row buffers (rcs), so that ntplan_make can stream
 * the outputs (nts). It runs when the row fits the buffers, the outputs
 * qualify for streaming, and each of them has FJ_RH_STREAM_MIN_BYTES or more.
 * Below that size an output's lines are likely still in the last-level
 * cache when the next kernel reads them, and the in-place version is the
 * faster one: attention's [8,512,512] f32 softmax (8 MiB, read back by
 * P x V) ran its forward in 4.6 ms streamed against 3.9 in place, while
 * softmax on [8192,4096] f32 (128 MiB) went from 13.8-18.9 to 11.1-14.2 ms
 * (Zen 4, 2 threads, 8 alternating runs each; AVX2 code: 17.0-26.9 to
 * 14.6-20.6). Why is not isolated (no performance counters in these VMs):
 * in place, each output line is written twice and must stay in cache
 * between the passes. The read for ownership of the plain stores is not
 * the whole story: on Zen 4 a loop that computes and stores whole aligned
 * 64-byte lines ran as fast with plain stores as with non-temporal ones.
 * Returns whether there is such a version (its condition in nts->ok). */

static bool stream_plan(hctx *h, const rowcache *rc, LLVMValueRef count, rowcache *rcs, ntplan *nts)
{
	if (rc->n == rc->nstack)
		return false;
	*rcs = *rc;
	for (int k = 0; k < rc->n; k++)
		rcs->out[k] = NULL;
	ntplan_make(h, nts, rcs, 1);
	LLVMValueRef ok = LLVMBuildICmp(BB, LLVMIntSLE, count, c64(h, ROWCACHE), "");
	for (int k = 0; k < rc->n; k++) {
		const fj_cg_tensor *o = rc->out[k];
		if (!o)
			continue;
		bool streamed = false;
		for (int i = 0; i < nts->n; i++)
			streamed |= &h->out[nts->out[i]] == o;
		if (!streamed)
			return false;
		LLVMValueRef bytes = LLVMBuildNSWMul(BB, o->numel, c64(h, (int64_t)fj_dtype_size(o->dtype)), "");
		ok = LLVMBuildAnd(BB, ok, LLVMBuildICmp(BB, LLVMIntSGE, bytes, c64(h, FJ_RH_STREAM_MIN_BYTES), ""), "");
		rcs->buf[k] = fj_cg_var(h->cg, LLVMArrayType(rc->ty[k], ROWCACHE), NULL, "rowcache");
		rcs->nstack++;
	}
	nts->ok = LLVMBuildAnd(BB, nts->ok, ok, "");
	nts->checked = true; /* the version runs under nts->ok */
	return true;
}

/* The offset in o of the element of the row at idx at K index k. */
static LLVMValueRef row_offset(hctx *h, const fj_cg_tensor *o, const LLVMValueRef *idx, LLVMValueRef k)
{
	LLVMValueRef at[FJ_MAX_RANK];
	memcpy(at, idx, sizeof at);
	at[h->a->dom->rank - 1] = k;
	return fj_cg_offset(h->cg, o, at);
}

/* Copies hi - lo elements of each planned output from its buffer for row
 * g of the group to offset off[i] of the output (fj_cg_stream_copy). */
static void nt_copy(hctx *h, const ntplan *nt, int g, const LLVMValueRef *off, LLVMValueRef lo, LLVMValueRef hi)
{
	fj_cg *cg = h->cg;
	for (int i = 0; i < nt->n; i++) {
		const fj_cg_tensor *o = &h->out[nt->out[i]];
		LLVMValueRef oi = off[i];
		LLVMValueRef dst0 = LLVMBuildInBoundsGEP2(BB, fj_cg_storage_type(cg, o->dtype), o->ptr, &oi, 1, "");
		LLVMValueRef bytes = LLVMBuildNSWMul(BB, LLVMBuildNSWSub(BB, hi, lo, ""),
		                                     c64(h, (int64_t)fj_dtype_size(o->dtype)), "");
		fj_cg_stream_copy(cg, dst0, nt->buf[g][i], bytes);
	}
}

/* The D-output pass of group g: every D-shaped output at every K point of
 * each row, the column sums' operands of the rows added at once. With nt,
 * at the points [lo, hi) of the innermost (only) K dim, the outputs nt
 * plans either stored in place, streamed (direct), or written to their
 * buffers (row j's element lo, at offset off[j][i] of output i, at byte 0
 * of its buffer). */
static void output_pass(hctx *h, const rowcache *rc, rowgroup *g, const ntplan *nt, bool direct,
                        LLVMValueRef (*off)[MAXNT], LLVMValueRef lo, LLVMValueRef hi)
{
	fj_rg *r = &h->r;
	int dr = h->a->dom->rank;
	LLVMValueRef *idx = g->idx[0];
	fj_cg_tensor saved[MAXNT];
	LLVMValueRef view[MAXGROUP][MAXNT];
	for (int i = 0; nt && i < nt->n; i++) {
		/* views of the buffers that the rows' own offsets index: a base
		 * of the buffer minus the offset of element lo (not in bounds: no
		 * inbounds) */
		fj_cg_tensor *o = &h->out[nt->out[i]];
		saved[i] = *o;
		o->stream = direct;
		for (int j = 0; j < g->n && !direct; j++) {
			LLVMValueRef back = LLVMBuildNeg(BB, off[j][i], "");
			view[j][i] = LLVMBuildGEP2(BB, fj_cg_storage_type(h->cg, o->dtype), nt->buf[j][i], &back, 1, "");
		}
	}
	knest kn;
	fj_cg_loop l, bl;
	bool blocks = !nt && h->pf_slice[h->a->nphases] >= 0;
	if (blocks) { /* the row in blocks, each prefetching the next rows' */
		LLVMValueRef n = fj_rg_dim(r, h->a->dom_v, dr - 1);
		fj_cg_loop_begin(h->cg, &bl, c64(h, 0), n, "ob");
		bl.step = c64(h, KBLOCK);
		lo = bl.iv;
		hi = imin(h, LLVMBuildNSWAdd(BB, bl.iv, c64(h, KBLOCK), ""), n);
		prefetch_rows(h, g->idx[g->n - 1], lo, hi, KBLOCK, g->n, h->a->nphases);
	}
	if (nt || blocks) {
		fj_cg_loop_begin(h->cg, &l, lo, hi, "k");
		idx[dr - 1] = l.iv;
	} else {
		fj_rh_knest_begin(h, &kn, idx);
	}
	LLVMValueRef vals[MAXGROUP][FJ_RG_MAX_REDS];
	for (int j = 0; j < g->n; j++) {
		for (int d = 0; d < dr; d++)
			if (h->a->kmask & (1u << d))
				g->idx[j][d] = idx[d];
		if (g->n > 1)
			group_results(h, g, j, false);
		for (int i = 0; nt && !direct && i < nt->n; i++)
			h->out[nt->out[i]].ptr = view[j][i];
		fj_rg_scope_push(r);
		rc_bind(h, rc, h->a->nphases, rc ? fj_rh_kpos(h, idx) : NULL, idx);
		fj_rg_point p;
		fj_rg_point_idx(&p, dr, g->idx[j]);
		fj_rh_store_outputs(h, OUT_D, &p);
		fj_rh_col_values(h, &p, vals[j]);
		fj_rg_scope_pop(r);
	}
	fj_rh_col_add(h, idx, vals, g->n);
	/* as many vectors side by side as one row's (AVX2: a pair of rows
	 * interleaved 4 times spills) */
	int il = FJ_CG_INTERLEAVE / g->n > 1 ? FJ_CG_INTERLEAVE / g->n : 1;
	if (nt || blocks) {
		fj_cg_loop_end(h->cg, &l);
		fj_rh_vector_width(h, &l, il);
		if (blocks)
			fj_cg_loop_end(h->cg, &bl);
	} else {
		fj_rh_knest_end(h, &kn, il);
	}
	for (int i = 0; nt && i < nt->n; i++)
		h->out[nt->out[i]] = saved[i];
}

/* The row's elements before the first that lies on a 64-byte boundary of
 * output o (the row's first line, where o is not line-aligned there), or
 * 0 where o is not even element-aligned. */
static LLVMValueRef line_head(hctx *h, const fj_cg_tensor *o, const LLVMValueRef *idx)
{
	LLVMValueRef esz = c64(h, (int64_t)fj_dtype_size(o->dtype));
	LLVMValueRef off = row_offset(h, o, idx, c64(h, 0));
	LLVMValueRef at = LLVMBuildInBoundsGEP2(BB, fj_cg_storage_type(h->cg, o->dtype), o->ptr, &off, 1, "");
	LLVMValueRef addr = LLVMBuildPtrToInt(BB, at, h->cg->t_i64, "");
	LLVMValueRef head = LLVMBuildAnd(BB, LLVMBuildNeg(BB, addr, ""), c64(h, 63), "");
	LLVMValueRef whole = LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildURem(BB, addr, esz, ""), c64(h, 0), "");
	return LLVMBuildSelect(BB, whole, LLVMBuildUDiv(BB, head, esz, ""), c64(h, 0), "");
}

/* The D-output pass of a group streamed, a chunk of the rows at a time: in
 * place where the chunk is whole and starts on a line of every output in
 * every row, else written to the buffers and copied out before the next
 * (fj_cg_stream_copy: the lines a chunk fills whole with non-temporal
 * stores, partial ones plainly). The
 * chunks fall on the line boundaries of the first row's first output: the
 * first chunk ends a line short of a full one past the row's first line
 * boundary, so that every other starts on one and only the row's two ends
 * are stored plainly there. Chunks of fixed place would give an output off
 * its lines a partial line at each end of every chunk: two memcpy calls and
 * a read for ownership per 2 KiB. Intel Xeon (Emerald Rapids), 2 threads,
 * [8192,4096] f32 forwards, output 16 bytes off its lines (as glibc's
 * malloc gives large blocks), against the plain stores such an output used
 * to get, alternating runs (fj-bench-ab): layer_norm 18.2 -> 10.6 ms,
 * rms_norm 14.6 -> 6.8, softmax 13.2 -> 9.3, log_softmax 14.6 -> 9.1
 * (line-aligned: 7.2, 6.3, 8.7, 8.9); chunks of fixed place (a first try,
 * separate runs) took layer_norm to 11.8, softmax to 12.6. */
static void output_pass_nt(hctx *h, const rowcache *rc, rowgroup *g, const ntplan *nt)
{
	int dr = h->a->dom->rank;
	LLVMValueRef n = fj_rg_dim(&h->r, h->a->dom_v, dr - 1);
	const fj_cg_tensor *o0 = &h->out[nt->out[0]];
	LLVMValueRef chunk = c64(h, nt->chunk);
	LLVMValueRef head = line_head(h, o0, g->idx[0]);
	/* chunk c covers [first - chunk + c chunk, first + c chunk) within the
	 * row, first = head + chunk - (a line's elements) where head > 0, else
	 * chunk: the first chunk fits the buffers */
	LLVMValueRef line = c64(h, 64 / (int64_t)fj_dtype_size(o0->dtype));
	LLVMValueRef first = LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntEQ, head, c64(h, 0), ""), chunk,
	                                     LLVMBuildNSWSub(BB, LLVMBuildNSWAdd(BB, head, chunk, ""), line, ""), "");
	fj_cg_loop lc;
	fj_cg_loop_begin(h->cg, &lc, LLVMBuildNSWSub(BB, first, chunk, ""), n, "chunk");
	lc.step = chunk;
	LLVMValueRef lo = LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, lc.iv, c64(h, 0), ""), c64(h, 0), lc.iv, "");
	LLVMValueRef hi = imin(h, LLVMBuildNSWAdd(BB, lc.iv, chunk, ""), n);
	LLVMValueRef off[MAXGROUP][MAXNT];
	for (int j = 0; j < g->n; j++)
		for (int i = 0; i < nt->n; i++)
			off[j][i] = row_offset(h, &h->out[nt->out[i]], g->idx[j], lo);
	prefetch_rows(h, g->idx[g->n - 1], lo, hi, nt->chunk + KBLOCK, g->n, h->a->nphases);
	/* a whole chunk that starts on a line of every output in every row of
	 * the group: stored in place, streamed (nt->direct); any other chunk
	 * through the buffers */
	fj_cg_if c;
	if (nt->direct) {
		LLVMValueRef end = LLVMBuildNSWAdd(BB, lc.iv, chunk, "");
		LLVMValueRef whole = LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGE, lc.iv, c64(h, 0), ""),
		                                  LLVMBuildICmp(BB, LLVMIntSLE, end, n, ""), "");
		LLVMValueRef at[MAXGROUP][MAXNT]; /* byte offsets of element lc.iv (where whole) */
		for (int j = 0; j < g->n; j++)
			for (int i = 0; i < nt->n; i++) {
				const fj_cg_tensor *o = &h->out[nt->out[i]];
				LLVMValueRef esz = c64(h, (int64_t)fj_dtype_size(o->dtype));
				at[j][i] = LLVMBuildMul(BB, row_offset(h, o, g->idx[j], lc.iv), esz, "");
				LLVMValueRef a = LLVMBuildAdd(BB, LLVMBuildPtrToInt(BB, o->ptr, h->cg->t_i64, ""), at[j][i], "");
				a = LLVMBuildAnd(BB, a, c64(h, 63), "");
				whole = LLVMBuildAnd(BB, whole, LLVMBuildICmp(BB, LLVMIntEQ, a, c64(h, 0), ""), "");
			}
		fj_cg_if_begin(h->cg, &c, whole);
		for (int j = 0; j < g->n; j++)
			for (int i = 0; i < nt->n; i++)
				fj_cg_assume_aligned(h->cg, h->out[nt->out[i]].ptr, at[j][i], 64);
		output_pass(h, rc, g, nt, true, off, lc.iv, end);
		fj_cg_if_else(h->cg, &c);
	}
	output_pass(h, rc, g, nt, false, off, lo, hi);
	for (int j = 0; j < g->n; j++)
		nt_copy(h, nt, j, off[j], lo, hi);
	if (nt->direct)
		fj_cg_if_end(h->cg, &c);
	fj_cg_loop_end(h->cg, &lc);
}

/* The group's D-sized outputs: one more pass over its rows (in cache),
 * streamed out when the plan says so. */
static void d_outputs(hctx *h, const rowcache *rc, rowgroup *g, const ntplan *nt)
{
	fj_cg_if c;
	if (nt->checked) { /* this version runs under nt->ok */
		output_pass_nt(h, rc, g, nt);
	} else if (nt->n) {
		fj_cg_if_begin(h->cg, &c, nt->ok);
		output_pass_nt(h, rc, g, nt);
		fj_cg_if_else(h->cg, &c);
		output_pass(h, rc, g, NULL, false, NULL, NULL, NULL);
		fj_cg_if_end(h->cg, &c);
	} else {
		output_pass(h, rc, g, NULL, false, NULL, NULL, NULL);
	}
}

/* Softmax's division by the row sum by reciprocal (fj_rg_recip_sum): the
 * index of the reduction that is its sum, or -1 (no such division). */
static int recip_sum(hctx *h)
{
	for (int i = 0; i < h->a->nreds; i++)
		if (fj_rg_recip_sum(&h->r, &h->body->nodes[h->a->reds[i]]))
			return i;
	return -1;
}

/* The index of the row max that shifts the exps that reduction mi sums
 * (fj_rg_recip_max). */
static int recip_max(hctx *h, int mi)
{
	const fj_node *m = fj_rg_recip_max(&h->r, &h->body->nodes[h->a->reds[mi]]);
	for (int i = 0; i < h->a->nreds; i++)
		if (&h->body->nodes[h->a->reds[i]] == m)
			return i;
	return -1;
}

/* One step of xmin, the min over the row of the max's operand x, as the
 * max that skips NaNs sees it (skip_nan: a NaN becomes -inf, the max's own
 * vmaxps), then an nnan select: one vminps. A NaN thus sends its row
 * to the divisions, where its outputs are NaN as they would be anyway. */
static void xmin_step(hctx *h, LLVMValueRef xmin, LLVMValueRef x)
{
	nnan_minmax_step(h, xmin, skip_nan(h, x, true), false);
}

/* Does the row go by reciprocal: x - m >= FJ_RG_RECIP_SHIFT for its min x
 * (so every e >= FJ_RG_RECIP_MIN), m its max? False for a NaN (an all
 * -inf row, a NaN max) and for a -inf in the row. */
static LLVMValueRef recip_check(hctx *h, LLVMValueRef xmin, LLVMValueRef m)
{
	fj_cg *cg = h->cg;
	LLVMValueRef d = LLVMBuildFSub(BB, fj_cg_get(cg, xmin, cg->t_f32), m, "");
	return LLVMBuildFCmp(BB, LLVMRealOGE, d, LLVMConstReal(cg->t_f32, FJ_RG_RECIP_SHIFT), "");
}

/* An exp of a region input of D's shape (log_softmax's backward: exp of
 * the saved log-probabilities), f32, or NULL. Its general polynomial scales
 * in two steps (eight ops per vector) for the results that are denormal or
 * large; fj_cg_exp_nonpos gives the same bits in one op for an argument <=
 * 0. So the first reduction pass reads the operand too and keeps the max
 * of its bits (one vpmaxsd per vector: as an i32, the bits of a float <= +0
 * or of a NaN with its sign set are <= 0, those of anything above +0 are
 * not), and rows where it is <= 0 take an output pass with the cheap exp.
 * Only kernels with that pass (D-sized outputs or column partials). */
static const fj_node *exp_input(hctx *h)
{
	const fj_graph *b = h->body;
	if (!fj_rh_has_outputs(h, OUT_D) && !h->part)
		return NULL;
	for (uint32_t i = 0; i < b->nnodes; i++) {
		const fj_node *n = &b->nodes[i];
		const fj_value *x = n->op == FJ_OP_PRIMS_EXP ? &b->values[n->opnds[0]] : NULL;
		if (x && x->kind == FJ_VK_PARAM && x->type.dtype == FJ_DT_F32 &&
		    fj_type_same_dims(&x->type, h->a->dom))
			return n;
	}
	return NULL;
}

/* One row's reduction passes and R-sized outputs (rc: NULL, or the values
 * to keep in the row buffer). Returns the row's condition for its cheap
 * output pass, else NULL: softmax's division by reciprocal (recip_check)
 * and exp_input's exp by fj_cg_exp_nonpos, both where the region has
 * both. */
static LLVMValueRef row_reduce(hctx *h, fj_rg_acc *accs, LLVMValueRef *idx, LLVMValueRef *ridx, int nk,
                               LLVMValueRef row, LLVMValueRef count, const rowcache *rc)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	int mi = recip_sum(h), xi = mi >= 0 ? recip_max(h, mi) : -1;
	LLVMValueRef xmin = xi >= 0 ? fj_cg_var(cg, cg->t_f32, NULL, "xmin") : NULL, cheap = NULL;
	if (xmin)
		fj_cg_set(cg, xmin, LLVMConstReal(cg->t_f32, __builtin_inf()));
	const fj_node *en = exp_input(h);
	LLVMValueRef emax = en ? fj_cg_var(cg, cg->t_i32, NULL, "expmax") : NULL;
	if (emax)
		fj_cg_set(cg, emax, fj_cg_i32(cg, INT32_MIN));
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_reset(r, &accs[i]);
		set_shifts(h, accs, ph, idx, count);
		kblock kb;
		kblock_begin(h, &kb, accs, ph, idx);
		fj_rg_scope_push(r);
		LLVMValueRef pos = rc ? fj_rh_kpos(h, idx) : NULL;
		rc_bind(h, rc, ph, pos, idx);
		fj_rg_point p;
		fj_rg_point_idx(&p, dr, idx);
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			const fj_node *n = &h->body->nodes[a->reds[i]];
			LLVMValueRef x = fj_rg_eval(r, n->opnds[0], &p);
			if (i == xi)
				xmin_step(h, xmin, x);
			for (int k = 0; rc && k < rc->n; k++)
				if (rc->v[k] == n->opnds[0] && rc->phase[k] == ph)
					LLVMBuildStore(BB, x, rc_elem(h, rc, k, pos, idx));
			bool arg = accs[i].kind == FJ_RG_RED_ARGMAX || accs[i].kind == FJ_RG_RED_ARGMIN;
			kb_step(h, &kb, accs, i, x, arg ? fj_rh_kpos(h, idx) : NULL);
		}
		if (emax && ph == 0) {
			LLVMValueRef x = fj_rg_eval(r, en->opnds[0], &p);
			LLVMValueRef args[2] = {fj_cg_get(cg, emax, cg->t_i32), LLVMBuildBitCast(BB, x, cg->t_i32, "")};
			fj_cg_set(cg, emax, fj_cg_intrinsic(cg, "llvm.smax", args, 2));
		}
		fj_rg_scope_pop(r);
		kblock_end(h, &kb, accs);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph) {
				fj_rg_acc_finish(r, &accs[i], count);
				if (i == xi) /* decided here: only an i1 stays live through the later passes */
					cheap = recip_check(h, xmin, fj_cg_get(cg, accs[i].var[0], accs[i].ty[0]));
			}
	}
	if (emax) {
		LLVMValueRef ok = LLVMBuildICmp(BB, LLVMIntSLE, fj_cg_get(cg, emax, cg->t_i32), fj_cg_i32(cg, 0), "");
		cheap = cheap ? LLVMBuildAnd(BB, cheap, ok, "") : ok;
	}
	/* R-sized outputs */
	if (fj_rh_has_outputs(h, OUT_R)) {
		fj_rg_point pr;
		fj_rg_point_idx(&pr, nk, ridx);
		pr.lin = row;
		fj_rh_store_outputs(h, OUT_R, &pr);
	}
	return cheap;
}

/* The rows of group g: each row's reduction passes, then the outputs. A
 * group of one row may keep values in the row buffer (rc) and divide by
 * reciprocal: softmax's output pass comes in two versions, by reciprocal
 * when every weight of the row is at least FJ_RG_RECIP_MIN, else with
 * divisions (a -inf in the row, or weights that small); in llvm-mca on
 * Zen 4 the output loop takes 3 instead of 6 cycles per 16 floats with
 * AVX-512, 2 instead of 3 per 8 with AVX2. The check costs the max's pass
 * one vminps per vector (xmin_step): the sum's pass, with its exp, holds
 * more live vectors than AVX2's 16 registers (116 instructions per 4
 * vectors, 15 of them spills and reloads, when it kept the weights' min
 * itself; 96 and 9 without), while the max's pass waits on memory.
 * Emerald Rapids, softmax forward, the same bits: on [64,4096] f32 (in
 * L2), 1 thread, 1.03x (AVX2) and 1.02x (AVX-512); on [8192,4096], 2
 * threads, the same-run memcpy ratio over 12 alternating runs, AVX2 median
 * 0.83 -> 0.87 (best 0.88 -> 0.91), AVX-512 1.04 -> 1.02 (best 1.06 ->
 * 1.07). exp_input's exp goes the same way. */
static void inner_rows(hctx *h, fj_rg_acc *accs, rowgroup *g, int nk, LLVMValueRef count, const rowcache *rc,
                       const ntplan *nt)
{
	fj_rg *r = &h->r;
	LLVMValueRef cheap = NULL;
	fj_rg_scope_push(r);
	for (int j = 0; j < g->n; j++) {
		cheap = row_reduce(h, accs, g->idx[j], g->ridx[j], nk, g->row[j], count, rc);
		if (g->n > 1)
			group_results(h, g, j, true);
	}
	FJ_ASSERT(g->n == 1 || (!rc && !cheap));
	if (fj_rh_has_outputs(h, OUT_D) || h->part) {
		if (cheap) {
			fj_cg_if c;
			fj_cg_if_begin(h->cg, &c, cheap);
			r->recip = recip_sum(h) >= 0;
			r->exp_nonpos = exp_input(h);
			d_outputs(h, rc, g, nt);
			r->recip = false;
			r->exp_nonpos = NULL;
			fj_cg_if_else(h->cg, &c);
			d_outputs(h, rc, g, nt);
			fj_cg_if_end(h->cg, &c);
		} else {
			d_outputs(h, rc, g, nt);
		}
	}
	fj_rg_scope_pop(r);
}

/* The rows [lo, hi) of R (dims, at D's dims kd) and the reduced count. */
typedef struct rowspace {
	LLVMValueRef lo, hi, count;
	LLVMValueRef dims[FJ_MAX_RANK];
	int kd[FJ_MAX_RANK], nk;
} rowspace;

/* The rows [lo, hi), n at a time. */
static void group_loop(hctx *h, fj_rg_acc *accs, const rowspace *rs, LLVMValueRef lo, LLVMValueRef hi, int n,
                       const rowcache *rc, const ntplan *nt)
{
	fj_cg_loop lr;
	fj_cg_loop_begin(h->cg, &lr, lo, hi, "rows");
	lr.step = c64(h, n);
	rowgroup g = {.n = n};
	for (int j = 0; j < n; j++) {
		g.row[j] = LLVMBuildNSWAdd(BB, lr.iv, c64(h, j), "");
		fj_cg_unravel(h->cg, g.row[j], rs->dims, rs->nk, g.ridx[j]);
		for (int i = 0; i < rs->nk; i++)
			g.idx[j][rs->kd[i]] = g.ridx[j][i];
	}
	inner_rows(h, accs, &g, rs->nk, rs->count, rc, nt);
	fj_rh_col_row_done(h, g.row[n - 1], rs->lo, rs->hi);
	fj_cg_loop_end(h->cg, &lr);
}

/* Rows in groups (the column sums of persistent_inner_outer, neither a
 * row buffer nor softmax's reciprocal), else one at a time. */
static int group_rows(hctx *h, const rowcache *rc)
{
	return h->part && !rc && recip_sum(h) < 0 && !exp_input(h) ? GROUP : 1;
}

static void row_loop(hctx *h, fj_rg_acc *accs, const rowspace *rs, const rowcache *rc, const ntplan *nt)
{
	int n = group_rows(h, rc);
	if (n == 1) {
		group_loop(h, accs, rs, rs->lo, rs->hi, 1, rc, nt);
		return;
	}
	/* whole groups, then the rest one at a time */
	LLVMValueRef span = LLVMBuildNSWSub(BB, rs->hi, rs->lo, "");
	LLVMValueRef end = LLVMBuildNSWSub(BB, rs->hi, LLVMBuildSRem(BB, span, c64(h, n), ""), "");
	group_loop(h, accs, rs, rs->lo, end, n, rc, nt);
	group_loop(h, accs, rs, end, rs->hi, 1, rc, nt);
}

void fj_rh_tpl_inner(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_rg_analysis *a = h->a;
	int dr = a->dom->rank;
	fj_rg_acc accs[FJ_RG_MAX_REDS];
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_init(r, a->reds[i], &accs[i]);
	prefetch_plan(h, accs);
	rowcache rc;
	rowcache_plan(h, &rc);
	rowspace rs = {.count = fj_rh_red_count(h)};
	ntplan nt, nts;
	ntplan_make(h, &nt, &rc, a->noreds ? GROUP : 1);
	rowcache rcs;
	bool stream = stream_plan(h, &rc, rs.count, &rcs, &nts);
	bool par = fj_rh_pick_par_r(h);
	LLVMValueRef rlo, rhi;
	fj_rh_row_range(h, par, &rlo, &rhi);
	/* R's dims */
	for (int d = 0; d < dr; d++)
		if (!(a->kmask & (1u << d))) {
			rs.dims[rs.nk] = fj_rg_dim(r, a->dom_v, d);
			rs.kd[rs.nk++] = d;
		}
	/* persistent_inner_outer: the parallel space is the slots */
	fj_cg_loop ls;
	if (a->noreds) {
		LLVMValueRef nrows = c64(h, 1);
		for (int i = 0; i < rs.nk; i++)
			nrows = LLVMBuildNSWMul(BB, nrows, rs.dims[i], "");
		fj_cg_loop_begin(cg, &ls, h->lo, h->hi, "slot");
		h->part = ls.iv; /* the slot being run (region_host_cols.c) */
		fj_rh_part_zero(h, h->part);
		rlo = LLVMBuildSDiv(BB, LLVMBuildNSWMul(BB, ls.iv, nrows, ""), h->nslots, "");
		rhi = LLVMBuildSDiv(BB, LLVMBuildNSWMul(BB, LLVMBuildNSWAdd(BB, ls.iv, c64(h, 1), ""), nrows, ""),
		                    h->nslots, "");
	}
	rs.lo = rlo;
	rs.hi = rhi;
	fj_cg_if sc;
	if (stream) {
		fj_cg_if_begin(cg, &sc, nts.ok);
		row_loop(h, accs, &rs, &rcs, &nts);
		fj_cg_if_else(cg, &sc);
	}
	/* two versions when a value is cached on the stack: rows that fit the
	 * row buffer, and rows that recompute it */
	fj_cg_if c;
	if (rc.nstack)
		fj_cg_if_begin(cg, &c, LLVMBuildICmp(BB, LLVMIntSLE, rs.count, c64(h, ROWCACHE), ""));
	int last = rc.n && !rc.nstack ? 0 : 1; /* version 0 caches, 1 recomputes */
	for (int version = rc.n ? 0 : 1; version <= last; version++) {
		row_loop(h, accs, &rs, version == 0 ? &rc : NULL, &nt);
		if (version == 0 && rc.nstack)
			fj_cg_if_else(cg, &c);
	}
	if (rc.nstack)
		fj_cg_if_end(cg, &c);
	if (stream)
		fj_cg_if_end(cg, &sc);
	if (a->noreds) {
		/* the slot is done: the last one merges (acq_rel: it sees every
		 * other slot's partials) */
		LLVMValueRef done = LLVMBuildAtomicRMW(BB, LLVMAtomicRMWBinOpAdd, h->ws, c64(h, 1),
		                                       LLVMAtomicOrderingAcquireRelease, 0);
		fj_cg_if merge;
		fj_cg_if_begin(cg, &merge, LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildNSWAdd(BB, done, c64(h, 1), ""),
		                                        h->nslots, ""));
		fj_rh_col_merge(h);
		fj_cg_if_end(cg, &merge);
		fj_cg_loop_end(cg, &ls);
		h->part = NULL;
	}
	if (nt.n || stream) /* the streamed rows are visible before the call returns */
		LLVMBuildFence(BB, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
}
