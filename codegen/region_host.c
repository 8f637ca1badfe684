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
 *       The flat loop streams large outputs with non-temporal stores
 *       where the target says so (host_stream; stream_split), and over
 *       large inputs runs in blocks that prefetch the inputs ahead.
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
 *       order and stores the column results (fj_rh_col_merge).
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
 *
 * This file: the kernel (its ABI and the template choice), vector widths,
 * output classes and the parallel space; the templates live in
 * region_host_<family>.c (pointwise, inner with cols, outer, opaque); what
 * they share: region_host_internal.h.
 */
#include "codegen/region_host_internal.h"

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

void fj_rh_vector_width(hctx *h, fj_cg_loop *l, int interleave)
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
	fj_cg_loop_hints(cg, l, width, interleave);
}

/* ---- output classes ---- */

/* Stores every result of class cls at a point of D (pd, with idx) or of R
 * (pr, with idx and lin = the R-linear index). */
void fj_rh_store_outputs(hctx *h, int cls, fj_rg_point *pt)
{
	for (uint32_t j = 0; j < h->k->nout; j++) {
		if (h->a->kmask && out_class(h, j) != cls)
			continue;
		const fj_rg_value *x = &h->a->vals[h->body->results[j]];
		fj_rh_store_result(h, j, cls == OUT_D ? x->in_d : x->in_r, pt);
	}
}

void fj_rh_store_result(hctx *h, uint32_t j, bool same, fj_rg_point *pt)
{
	fj_rg *r = &h->r;
	fj_vid v = h->body->results[j];
	const fj_cg_tensor *o = &h->out[j];
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

/* ---- the parallel space of a reduction region ---- */

/* Sets par_out/par_mask to R (an R-shaped result, or the kept dims of a
 * D-shaped one); false when no result can express it (then one call runs
 * every row). */
bool fj_rh_pick_par_r(hctx *h)
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
void fj_rh_row_range(hctx *h, bool par, LLVMValueRef *rlo, LLVMValueRef *rhi)
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
LLVMValueRef fj_rh_red_count(hctx *h)
{
	LLVMValueRef n = c64(h, 1);
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d))
			n = LLVMBuildNSWMul(BB, n, fj_rg_dim(&h->r, h->a->dom_v, d), "");
	return n;
}

void fj_rh_knest_begin(hctx *h, knest *kn, LLVMValueRef *idx)
{
	kn->n = 0;
	for (int d = 0; d < h->a->dom->rank; d++)
		if (h->a->kmask & (1u << d)) {
			fj_cg_loop_begin(h->cg, &kn->l[kn->n], c64(h, 0), fj_rg_dim(&h->r, h->a->dom_v, d), "k");
			idx[d] = kn->l[kn->n].iv;
			kn->n++;
		}
}

/* interleave > 0: the K nest holds the innermost loop (set its vector
 * width, with that interleave) */
void fj_rh_knest_end(hctx *h, knest *kn, int interleave)
{
	for (int i = kn->n - 1; i >= 0; i--) {
		fj_cg_loop_end(h->cg, &kn->l[i]);
		if (interleave > 0 && i == kn->n - 1)
			fj_rh_vector_width(h, &kn->l[i], interleave);
	}
}

/* ---- the kernel ---- */

static fj_status emit_body(hctx *h)
{
	const fj_rg_analysis *a = h->a;
	if (a->sched == FJ_RG_ATTENTION)
		return fj_rh_tpl_attention(h);
	if (a->sched == FJ_RG_ATTENTION_BW)
		return fj_rh_tpl_attention_bw(h);
	if (a->opaque != FJ_NONODE) {
		switch (h->body->nodes[a->opaque].op) {
		case FJ_OP_PRIMS_MATMUL: return fj_rh_tpl_matmul(h);
		case FJ_OP_PRIMS_CUMSUM: return fj_rh_tpl_scan(h);
		case FJ_OP_PRIMS_SCATTER_ADD:
		case FJ_OP_PRIMS_INDEX_ADD: return fj_rh_tpl_scatter(h);
		default: break; /* take, gather: evaluated inline */
		}
	}
	if (!a->nreds) {
		fj_rh_tpl_pointwise(h);
		return h->cg->st;
	}
	if (a->inner) /* the region plan: inner or outer */
		fj_rh_tpl_inner(h);
	else
		fj_rh_tpl_outer(h);
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
	fj_cg_add_attr(cg, f, (int)LLVMAttributeFunctionIndex, "nounwind", 0);
	fj_cg_add_attr(cg, f, (int)LLVMAttributeFunctionIndex, "alwaysinline", 0);
	for (uint32_t i = 0; i < np; i++) {
		fj_cg_add_attr(cg, f, (int)i + 1, "noalias", 0);
		fj_cg_add_attr(cg, f, (int)i + 1, "nocapture", 0);
		if (i < nin)
			fj_cg_add_attr(cg, f, (int)i + 1, "readonly", 0);
	}
	fj_cg_add_attr(cg, f, (int)np + 1, "readonly", 0);
	fj_cg_add_attr(cg, f, (int)np + 1, "nocapture", 0);
	if (a.noreds) {
		fj_cg_add_attr(cg, f, (int)np + 4, "noalias", 0);
		fj_cg_add_attr(cg, f, (int)np + 4, "nocapture", 0);
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
	fj_cg_node_views(cg, k->g, k->node, dims, fj_cg_param_ptr, f, in, out, &di);
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
