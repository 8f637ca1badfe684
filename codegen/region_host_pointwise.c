/* region_host_pointwise.c -- the host template of regions without
 * reductions: pointwise, transpose, take, gather (region_host.c describes
 * it). */
#include "codegen/region_host_internal.h"

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

/* The flat loop over [lo, hi): every output at each D-linear index. */
static void flat_body(hctx *h, int rank, LLVMValueRef lo, LLVMValueRef hi)
{
	fj_cg_loop l;
	fj_cg_loop_begin(h->cg, &l, lo, hi, "i");
	fj_rg_scope_push(&h->r);
	fj_rg_point p;
	if (rank == 1)
		fj_rg_point_idx(&p, 1, &l.iv);
	else
		fj_rg_point_lin(&p, rank, l.iv);
	p.lin = l.iv;
	fj_rh_store_outputs(h, OUT_D, &p);
	fj_rg_scope_pop(&h->r);
	fj_cg_loop_end(h->cg, &l);
	fj_rh_vector_width(h, &l, FJ_CG_INTERLEAVE);
}

/* ---- prefetching ahead ----
 * With long polynomial math per element (gelu, silu: ~30 vector ops per
 * vector), a flat loop issues its loads too slowly for the hardware
 * prefetchers to keep the memory bus busy, and its time becomes the sum of
 * computing and copying rather than the larger of the two: Intel Xeon
 * (Sapphire Rapids, 2 vCPUs), AVX2 code, [8192,4096] f32, 2 threads, the
 * tanh gelu forward took 12-18 ms where computing it in L2 took 6.7 and a
 * copy (neg) 7. So the loop over large inputs runs in blocks of PF_BLOCK
 * elements, and each block first prefetches into L2 (prefetcht1) the lines
 * PF_AHEAD bytes ahead in every input it reads. Same machine, 3 alternating
 * runs each, medians, before -> after: gelu 12.4-16.4 -> 9.3-9.9 ms (AVX2),
 * 10.3-11.1 -> 8.2-8.8 (AVX-512); silu 16.6-17.2 -> 8.8-9.0 (AVX2),
 * 10.0-10.7 -> 7.9-8.0 (AVX-512); their training (AVX2) 30.5-35.8 ->
 * 25.4-25.7 and 27.2-32.1 -> 21.0-23.3; on 1 thread gelu (AVX-512)
 * 23.2-26.2 -> 19.8-20.4; the compute-bound chain unchanged. Blocks of 4 KiB
 * (bursts of 64 prefetches) gave 11.2-11.9 (AVX2 gelu); into L1
 * (prefetcht0) 1-2 KiB ahead 10.2-13.5; into L2 4-32 KiB ahead no better
 * than 16. Only where the inputs are large together (PF_MIN_BYTES) or sized
 * at run time: in cache ([128,2048]) the blocks cost gelu ~5 %. */
enum { PF_BLOCK = 128, PF_AHEAD = 16384, PF_MIN_BYTES = 4 << 20 };

/* Is input i read from memory by the flat loop (at the linear index)? */
static bool prefetched_input(hctx *h, uint32_t i)
{
	const fj_cg_operand *o = &h->in[i];
	return !o->none && !o->literal && o->t.rank > 0;
}

static bool flat_prefetch(hctx *h)
{
	int64_t bytes = 0;
	for (uint32_t i = 0; i < h->body->nparams; i++) {
		if (!prefetched_input(h, i))
			continue;
		const fj_type *t = &h->body->values[h->body->params[i]].type;
		int64_t n = (int64_t)fj_dtype_size(t->dtype);
		for (int d = 0; d < t->rank; d++) {
			if (!fj_dim_is_static(t->dims[d]))
				return true;
			n *= t->dims[d];
		}
		bytes += n;
	}
	return bytes >= PF_MIN_BYTES;
}

/* The flat loop over [lo, hi), in prefetching blocks where that pays. */
static void flat_loop(hctx *h, int rank, LLVMValueRef lo, LLVMValueRef hi)
{
	fj_cg *cg = h->cg;
	if (!flat_prefetch(h)) {
		flat_body(h, rank, lo, hi);
		return;
	}
	fj_cg_loop l;
	fj_cg_loop_begin(cg, &l, lo, hi, "blk");
	l.step = c64(h, PF_BLOCK);
	for (uint32_t i = 0; i < h->body->nparams; i++) {
		if (!prefetched_input(h, i))
			continue;
		const fj_cg_tensor *t = &h->in[i].t;
		int64_t es = (int64_t)fj_dtype_size(t->dtype);
		LLVMValueRef at = LLVMBuildNSWAdd(BB, l.iv, c64(h, PF_AHEAD / es), "");
		for (int64_t e = 0; e < PF_BLOCK; e += 64 / es) /* one per 64-byte line */
			fj_cg_prefetch(cg, t, LLVMBuildNSWAdd(BB, at, c64(h, e), ""), FJ_CG_PREFETCH_L2);
	}
	LLVMValueRef end = LLVMBuildNSWAdd(BB, l.iv, c64(h, PF_BLOCK), "");
	end = LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, end, hi, ""), end, hi, "");
	flat_body(h, rank, l.iv, end);
	fj_cg_loop_end(cg, &l);
}

/* Streaming the outputs of a flat loop: see fj_cg_mark_stream. When the
 * outputs are large (FJ_RH_STREAM_MIN_BYTES together), of one element size,
 * and aligned alike modulo 64 bytes, and the call runs part of the range
 * (the runtime splits it among threads), the loop runs in two parts: up to
 * the first index at which they are 64-byte aligned, then the rest, whose
 * vector stores, once aligned, are non-temporal. One thread over the whole
 * range stores plainly: Zen 4, [8192,4096] f32, gelu and silu forwards, best
 * of 6 alternating runs, streamed against plain: 1 thread 1-6 % slower in 3
 * cases of 4 (AVX-512 and AVX2 code); 2 threads (the peers' setting, 2
 * alternating pairs of runs) silu 5.7-8.0 -> 4.4-5.0 ms, gelu 7.2-7.8 ->
 * 6.3-6.4, their training within the noise. Returns the condition (i1),
 * or NULL when the outputs are never large enough, and sets *mid to the
 * first aligned index where it holds, else to hi. */
static LLVMValueRef stream_split(hctx *h, int rank, LLVMValueRef *mid)
{
	fj_cg *cg = h->cg;
	const fj_graph *b = h->body;
	*mid = h->hi;
	if (!h->k->nout || !cg->target->stream)
		return NULL;
	int64_t es = (int64_t)fj_dtype_size(h->out[0].dtype);
	for (uint32_t j = 0; j < h->k->nout; j++)
		if (vrank(h, b->results[j]) != rank || (int64_t)fj_dtype_size(h->out[j].dtype) != es)
			return NULL;
	LLVMValueRef bytes = LLVMBuildNSWMul(BB, h->out[0].numel, c64(h, es * (int64_t)h->k->nout), "");
	if (LLVMIsAConstantInt(bytes) && LLVMConstIntGetSExtValue(bytes) < FJ_RH_STREAM_MIN_BYTES)
		return NULL;
	LLVMValueRef a0 = LLVMBuildPtrToInt(BB, h->out[0].ptr, cg->t_i64, "");
	LLVMValueRef ok = LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGE, bytes, c64(h, FJ_RH_STREAM_MIN_BYTES), ""),
	                               LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildURem(BB, a0, c64(h, es), ""), c64(h, 0), ""),
	                               "");
	LLVMValueRef part = LLVMBuildICmp(BB, LLVMIntSLT, LLVMBuildNSWSub(BB, h->hi, h->lo, ""), h->out[0].numel, "");
	ok = LLVMBuildAnd(BB, ok, part, "");
	for (uint32_t j = 1; j < h->k->nout; j++) {
		LLVMValueRef d = LLVMBuildSub(BB, LLVMBuildPtrToInt(BB, h->out[j].ptr, cg->t_i64, ""), a0, "");
		ok = LLVMBuildAnd(BB, ok, LLVMBuildICmp(BB, LLVMIntEQ, LLVMBuildAnd(BB, d, c64(h, 63), ""), c64(h, 0), ""),
		                  "");
	}
	/* the first index of the call whose outputs are 64-byte aligned */
	LLVMValueRef at = LLVMBuildAdd(BB, a0, LLVMBuildNSWMul(BB, h->lo, c64(h, es), ""), "");
	LLVMValueRef skip = LLVMBuildAnd(BB, LLVMBuildNeg(BB, at, ""), c64(h, 63), "");
	LLVMValueRef a = LLVMBuildNSWAdd(BB, h->lo, LLVMBuildSDiv(BB, skip, c64(h, es), ""), "");
	ok = LLVMBuildAnd(BB, ok, LLVMBuildICmp(BB, LLVMIntSLT, a, h->hi, ""), "");
	*mid = LLVMBuildSelect(BB, ok, a, h->hi, "");
	return ok;
}

void fj_rh_tpl_pointwise(hctx *h)
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
		LLVMValueRef mid, ok = stream_split(h, rank, &mid);
		flat_loop(h, rank, h->lo, mid);
		if (ok) {
			fj_cg_if c;
			fj_cg_if_begin(cg, &c, ok);
			LLVMValueRef bytes = LLVMBuildNSWMul(BB, mid, c64(h, (int64_t)fj_dtype_size(h->out[0].dtype)), "");
			for (uint32_t j = 0; j < h->k->nout; j++)
				fj_cg_assume_aligned(cg, h->out[j].ptr, bytes, 64);
			flat_loop(h, rank, mid, h->hi);
			LLVMBuildFence(BB, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
			fj_cg_if_end(cg, &c);
			fj_cg_mark_stream(cg);
		}
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
	fj_rh_store_outputs(h, OUT_D, &p);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lc);
	fj_rh_vector_width(h, &lc, FJ_CG_INTERLEAVE);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
}
