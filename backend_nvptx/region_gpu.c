/* region_gpu.c -- GPU kernel templates for fused regions (fusion.kernel ->
 * PTX), on the shared region analysis and evaluator of codegen/region.h, and
 * the per-context cache of compiled regions.
 *
 * Every region compiles to ONE PTX module holding its variants (entries;
 * compiled in parallel, one LLVM module each, and joined: see "a region's
 * variants compiled in parallel" below);
 * the launch plan (fj_nvptx_plan_region) picks a variant and the grid/block
 * sizes from the bound sizes at run time (FUSEJIT_NVPTX_VARIANTS forces one,
 * for tests). Entry names: the kernel attribute for the main variant, plus a
 * suffix for the others. The ABI is nvptx.h's. The same templates run on the
 * host emulator (emu.c) through the target hooks of fj_cg_target.
 *
 * Templates (schedule -> entries):
 *   pointwise             <name>     grid-stride over the result in chunks of
 *                                    4 elements (param align 16 lets the
 *                                    load/store vectorizer form 16-byte
 *                                    ld/st.global.v4), scalar tail;
 *                         <name>_s1  grid-stride, one element per iteration
 *                                    (pointers not 16-byte aligned).
 *   transpose             <name>     32x32 tiles through shared memory
 *                                    (rows padded to 33: no bank conflicts):
 *                                    read with adjacent threads on the input's
 *                                    inner dim, written on the output's (1 to
 *                                    4 results of rank >= 2; else as pointwise);
 *                         <name>_s1  as pointwise (through the index map).
 *   reduction_inner/outer, persistent_inner/outer (variant order):
 *                         <name>     a block per row (grid-stride over rows):
 *                                    threads stride over the row (contiguous
 *                                    chunks when an argmax/argmin needs the
 *                                    order), warp shuffles (xor 1,2,..16) then
 *                                    shared memory across warps, the result
 *                                    broadcast to the block; one pass per
 *                                    reduction phase (chained persistent
 *                                    reductions: max, then sum of exp ...),
 *                                    re-reading the row (L2-resident), then
 *                                    the row's outputs.
 *                         <name>_tpr a thread per row, sequential over the
 *                                    row: short rows, and outer reductions
 *                                    with many rows (adjacent threads read
 *                                    adjacent columns).
 *                         <name>_reg8 a block per row with the row in
 *                                    registers: 8 positions per thread
 *                                    evaluated once and kept for every phase
 *                                    and the outputs (rows up to 4096).
 *                         <name>_col outer reductions: 32 rows (adjacent
 *                                    columns in memory) per block, the
 *                                    positions split among its warps, merged
 *                                    through shared memory in order.
 *                         <name>_split outer reductions with too few columns
 *                                    to fill the GPU: the positions also split
 *                                    into chunks across blocks; partial states
 *                                    (f64/i64 as every reduction here) go to a
 *                                    workspace, the last block of each column
 *                                    tile (an atomic counter after a fence)
 *                                    merges them in order and runs the
 *                                    epilogue. One reduction phase, no
 *                                    argmax/argmin (the variant is absent then).
 *   persistent_inner_outer (persistent_inner plus outer reductions: column
 *   sums over the rows, e.g. layer_norm's grad_weight/grad_bias), one launch:
 *                         <name>     as persistent_inner's <name> (a block per
 *                                    row, grid-stride), whose row output pass
 *                                    also adds each outer reduction's operand
 *                                    to this block's slice of the workspace (a
 *                                    thread keeps the same columns in every
 *                                    row: no sharing); any row length.
 *                         <name>_reg8 as persistent_inner's _reg8, the column
 *                                    partials of its 8 positions in registers.
 *                                    Both: a grid of about one wave of blocks;
 *                                    at the end each block's partials (f64)
 *                                    go to its slice, then a two-level merge
 *                                    (atomic counters after a fence, as
 *                                    _split): the last block of each group of
 *                                    ceil(sqrt(blocks)) consecutive blocks
 *                                    merges the group's slices in block order
 *                                    into a group partial, the last group's
 *                                    merger the group partials in group order,
 *                                    and stores the column-shaped results.
 *   matmul                <name>     f16/bf16 A and B: tensor cores. 64x64
 *                                    output tiles per block of 4 warps, A and B
 *                                    staged in shared memory through the
 *                                    evaluator (prologue ops work; zero outside
 *                                    M, N, K), mma.sync m16n8k16 with f32
 *                                    accumulators in registers (the
 *                                    mma_m16n8k16 hook), the accumulators
 *                                    through shared memory so that the
 *                                    epilogue runs per output element with
 *                                    coalesced stores.
 *                         <name>_simt (the only entry for other dtypes, named
 *                                    <name> then) 16x16 shared-memory tiles,
 *                                    f64/i64 accumulation as the reference,
 *                                    the epilogue per output element.
 *   take, gather          <name>     a thread per element of the opaque
 *                                    result; indices checked (status).
 *   scatter               <name>     out = self (grid-stride copy);
 *                         <name>_add a thread per source element:
 *                                    atomicrmw add for f32/f64/f16/i32/i64,
 *                                    a single thread for other dtypes.
 *   scan                  <name>     a thread per line, sequential along dim.
 * Errors (index out of range, empty amax ...) are OR-ed into *status (an
 * i32 the runtime zeroes and reads back after the run).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <llvm-c/Core.h>

#include "backend_nvptx/nvptx.h"
#include "backend_nvptx/nvptx_internal.h"
#include "backend_nvptx/region_gpu.h"
#include "codegen/region.h"
#include "ir/context.h"

#define BLOCK_MAX 1024
#define TILE 16
#define MAXIO 240 /* operands, results: CUDA allows 4 KiB of parameters */

typedef LLVMValueRef V;

typedef struct gk {
	fj_nvptx_comp *c;
	fj_cg *cg;
	const fj_rg_analysis *a;
	const fj_graph *body;
	const fj_node *n;
	fj_cg_operand in[MAXIO];
	fj_cg_tensor out[MAXIO];
	uint32_t nin, nout;
	LLVMValueRef fn, statusp, status;
	bool want_ws;               /* the next entry takes the workspace parameter */
	LLVMValueRef wsp;           /* its workspace (split reductions), or NULL */
	V tid, ntid, ctaid, nctaid; /* i64 */
	fj_rg r;
	char prefix[96];
	unsigned nshared;
} gk;

#define B (k->cg->b)

static V i64c(gk *k, int64_t v) { return fj_cg_i64(k->cg, v); }
static V add(gk *k, V x, V y) { return LLVMBuildAdd(B, x, y, ""); }
static V mul(gk *k, V x, V y) { return LLVMBuildMul(B, x, y, ""); }
static V ult(gk *k, V x, V y) { return LLVMBuildICmp(B, LLVMIntULT, x, y, ""); }
static V slt(gk *k, V x, V y) { return LLVMBuildICmp(B, LLVMIntSLT, x, y, ""); }
static V sel(gk *k, V c, V x, V y) { return LLVMBuildSelect(B, c, x, y, ""); }
static V zx64(gk *k, V x) { return LLVMBuildZExt(B, x, k->cg->t_i64, ""); }

static void attr(gk *k, LLVMValueRef f, int idx, const char *name, uint64_t val)
{
	unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
	LLVMAddAttributeAtIndex(f, (LLVMAttributeIndex)idx, LLVMCreateEnumAttribute(k->cg->llctx, kind, val));
}

/* ---- entries ---- */

static V load_dim(gk *k, V dims, int64_t i)
{
	V ix = i64c(k, i);
	V p = LLVMBuildInBoundsGEP2(B, k->cg->t_i64, dims, &ix, 1, "");
	V v = LLVMBuildLoad2(B, k->cg->t_i64, p, "d");
	LLVMSetAlignment(v, 8);
	return v;
}

static void make_view(gk *k, fj_cg_tensor *t, V ptr, fj_dtype dt, int rank, V dims, int64_t *di)
{
	memset(t, 0, sizeof *t);
	t->ptr = ptr;
	t->dtype = dt;
	t->rank = rank;
	for (int d = 0; d < rank; d++)
		t->dim[d] = load_dim(k, dims, (*di)++);
	V s = i64c(k, 1);
	for (int d = rank - 1; d >= 0; d--) {
		t->stride[d] = s;
		s = LLVMBuildNSWMul(B, s, t->dim[d], "");
	}
	t->numel = s;
}

/* Starts entry `name`: void(ptr operands..., ptr results..., ptr dims, ptr
 * status[, ptr workspace]) -- the workspace when k->want_ws (read and
 * written, atomics: no noalias/readonly). */
static fj_status entry_begin(gk *k, const char *suffix, unsigned maxntid, unsigned align)
{
	fj_cg *cg = k->cg;
	const fj_node *n = k->n;
	uint32_t ndims_i = n->nopnds + n->nres;
	uint32_t np = ndims_i + 2 + (k->want_ws ? 1 : 0);
	LLVMTypeRef ps[np];
	for (uint32_t i = 0; i < np; i++)
		ps[i] = cg->t_ptr;
	char name[160];
	snprintf(name, sizeof name, "%s%s", k->prefix, suffix);
	LLVMValueRef f = LLVMAddFunction(cg->mod, name, LLVMFunctionType(cg->t_void, ps, np, 0));
	k->fn = f;
	cg->fn = f;
	if (k->c)
		fj_nvptx_mark_kernel(k->c, f, maxntid);
	attr(k, f, (int)LLVMAttributeFunctionIndex, "nounwind", 0);
	for (uint32_t i = 0; i < ndims_i + 2; i++) {
		attr(k, f, (int)i + 1, "noalias", 0);
		attr(k, f, (int)i + 1, "nocapture", 0);
		bool input = i < n->nopnds || i == ndims_i;
		if (input)
			attr(k, f, (int)i + 1, "readonly", 0);
		if (align && i < n->nopnds + n->nres)
			attr(k, f, (int)i + 1, "align", align);
	}
	cg->entry = LLVMAppendBasicBlockInContext(cg->llctx, f, "entry");
	LLVMPositionBuilderAtEnd(cg->b, cg->entry);
	V dims = LLVMGetParam(f, ndims_i);
	k->statusp = LLVMGetParam(f, ndims_i + 1);
	k->wsp = k->want_ws ? LLVMGetParam(f, ndims_i + 2) : NULL;
	int64_t di = 0;
	memset(k->in, 0, sizeof k->in);
	for (uint32_t i = 0; i < n->nopnds; i++) {
		fj_cg_operand *o = &k->in[i];
		if (n->opnds[i] == FJ_NOVAL) {
			o->none = true;
			o->t.dtype = FJ_DT_F32;
			continue;
		}
		const fj_value *v = fj_val(k->a->g, n->opnds[i]);
		if (v->kind == FJ_VK_LITERAL) {
			o->literal = true;
			o->lit = v->lit;
			o->t.dtype = v->type.dtype;
			continue;
		}
		make_view(k, &o->t, LLVMGetParam(f, i), v->type.dtype, v->type.rank, dims, &di);
	}
	for (uint32_t j = 0; j < n->nres; j++) {
		const fj_value *v = fj_val(k->a->g, n->res[j]);
		make_view(k, &k->out[j], LLVMGetParam(f, n->nopnds + j), v->type.dtype, v->type.rank, dims, &di);
	}
	k->nin = n->nopnds;
	k->nout = n->nres;
	k->status = fj_cg_var(cg, cg->t_i32, fj_cg_i32(cg, FJ_KERR_OK), "status");
	k->tid = zx64(k, cg->target->thread_idx(cg, 0));
	k->ntid = zx64(k, cg->target->block_dim(cg, 0));
	k->ctaid = zx64(k, cg->target->block_idx(cg, 0));
	k->nctaid = zx64(k, cg->target->grid_dim(cg, 0));
	/* the region's extra symbols (region.h) follow the views' sizes in dims */
	fj_status st = fj_rg_begin_dims(&k->r, cg, k->a, k->in, k->nin, k->out, k->nout, k->status, dims, di);
	/* The evaluator reads possibly-empty operands through a local dummy
	 * (a select between an alloca and the pointer), which would turn every
	 * load into a generic one (no ld.global.nc, no vectors). Device buffers
	 * are never smaller than 256 bytes (fj_cu_alloc), so reading offset 0
	 * of an empty operand is safe here: use the operand pointers. */
	for (uint32_t i = 0; st == FJ_OK && i < k->nin; i++)
		if (k->r.inptr[i])
			k->r.inptr[i] = k->in[i].t.ptr;
	return st;
}

static fj_status entry_end(gk *k)
{
	fj_cg *cg = k->cg;
	fj_status st = k->r.st;
	fj_rg_end(&k->r);
	if (st == FJ_OK)
		st = cg->st;
	if (st != FJ_OK) {
		LLVMDeleteFunction(k->fn);
		cg->fn = NULL;
		return st;
	}
	V s = fj_cg_get(cg, k->status, cg->t_i32);
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, LLVMBuildICmp(B, LLVMIntNE, s, fj_cg_i32(cg, 0), ""));
	LLVMBuildAtomicRMW(B, LLVMAtomicRMWBinOpOr, k->statusp, s, LLVMAtomicOrderingMonotonic, 0);
	fj_cg_if_end(cg, &c);
	LLVMBuildRetVoid(B);
	return FJ_OK;
}

/* A grid-stride loop: for (i = start; i < hi; i += step). */
typedef struct gloop {
	LLVMBasicBlockRef head, body, exit;
	V phi, iv, step;
	LLVMBasicBlockRef pre;
} gloop;

static void gloop_begin(gk *k, gloop *l, V start, V hi, V step, const char *name)
{
	fj_cg *cg = k->cg;
	l->pre = LLVMGetInsertBlock(B);
	l->head = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, name);
	l->body = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "body");
	l->exit = LLVMAppendBasicBlockInContext(cg->llctx, k->fn, "exit");
	l->step = step;
	LLVMBuildBr(B, l->head);
	LLVMPositionBuilderAtEnd(B, l->head);
	l->phi = LLVMBuildPhi(B, cg->t_i64, "i");
	LLVMAddIncoming(l->phi, &start, &l->pre, 1);
	LLVMBuildCondBr(B, slt(k, l->phi, hi), l->body, l->exit);
	LLVMPositionBuilderAtEnd(B, l->body);
	l->iv = l->phi;
	fj_rg_scope_push(&k->r);
}

static void gloop_end(gk *k, gloop *l)
{
	fj_rg_scope_pop(&k->r);
	V next = LLVMBuildNSWAdd(B, l->phi, l->step, "");
	LLVMBasicBlockRef cur = LLVMGetInsertBlock(B);
	LLVMBuildBr(B, l->head);
	LLVMAddIncoming(l->phi, &next, &cur, 1);
	LLVMPositionBuilderAtEnd(B, l->exit);
}

static void if_begin(gk *k, fj_cg_if *c, V cond)
{
	fj_cg_if_begin(k->cg, c, cond);
	fj_rg_scope_push(&k->r);
}

static void if_end(gk *k, fj_cg_if *c)
{
	fj_rg_scope_pop(&k->r);
	fj_cg_if_end(k->cg, c);
}

/* ---- helpers on shapes ---- */

/* Row-major linear index of idx over v's sizes. */
static V lin_of(gk *k, fj_vid v, const V *idx, int rank)
{
	V l = i64c(k, 0);
	for (int d = 0; d < rank; d++)
		l = add(k, mul(k, l, fj_rg_dim(&k->r, v, d)), idx[d]);
	return l;
}

static void unravel(gk *k, fj_vid v, const int *which, int n, V lin, V *idx)
{
	V dims[FJ_MAX_RANK];
	for (int i = 0; i < n; i++)
		dims[i] = fj_rg_dim(&k->r, v, which[i]);
	fj_cg_unravel(k->cg, lin, dims, n, idx);
}

/* Stores every result at linear position `lin` of its own shape. */
static void store_all_lin(gk *k, V lin)
{
	for (uint32_t j = 0; j < k->nout; j++) {
		fj_vid v = k->body->results[j];
		fj_rg_point p;
		fj_rg_point_lin(&p, k->body->values[v].type.rank, lin);
		fj_rg_store(&k->r, &k->out[j], lin, v, &p);
	}
}

static V result_numel(gk *k) { return fj_rg_numel(&k->r, k->body->results[0]); }

/* ---- pointwise ---- */

static fj_status emit_pointwise(gk *k, bool vec)
{
	fj_status st = entry_begin(k, vec ? "" : "_s1", 256, vec ? 16 : 0);
	if (st != FJ_OK)
		return st;
	V numel = k->nout ? result_numel(k) : i64c(k, 0);
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	V gstride = mul(k, k->nctaid, k->ntid);
	V tail0 = i64c(k, 0);
	if (vec) {
		V nchunks = LLVMBuildUDiv(B, numel, i64c(k, 4), "");
		gloop l;
		gloop_begin(k, &l, gtid, nchunks, gstride, "vchunk");
		V base = mul(k, l.iv, i64c(k, 4));
		for (int lane = 0; lane < 4; lane++)
			store_all_lin(k, add(k, base, i64c(k, lane)));
		gloop_end(k, &l);
		tail0 = mul(k, nchunks, i64c(k, 4));
	}
	gloop l;
	gloop_begin(k, &l, add(k, tail0, gtid), numel, gstride, "elem");
	store_all_lin(k, l.iv);
	gloop_end(k, &l);
	return entry_end(k);
}

/* ---- transpose: 32x32 tiles through shared memory ---- */

/* Whether a transpose region gets the tiled kernel: outputs of rank >= 2
 * (the tile spans result 0's last two dims), at most 4 of them. */
static bool tileable(const fj_graph *body)
{
	return body->nresults >= 1 && body->nresults <= 4 && body->values[body->results[0]].type.rank >= 2;
}

/* Thread (tx, ty) evaluates the outputs at (m0 + tx, n0 + ty + 8k) -- when
 * the transpose swaps the last two dims, adjacent threads read adjacent
 * input elements -- into a tile padded to 33 columns (no bank conflicts),
 * then writes (m0 + ty + 8k, n0 + tx): adjacent threads write adjacent
 * output elements. */
static fj_status emit_transpose(gk *k)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	fj_status st = entry_begin(k, "", 256, 0);
	if (st != FJ_OK)
		return st;
	fj_vid v0 = body->results[0];
	int rank = body->values[v0].type.rank;
	V M = fj_rg_dim(&k->r, v0, rank - 2), N = fj_rg_dim(&k->r, v0, rank - 1);
	V batch = i64c(k, 1);
	int bdims[FJ_MAX_RANK];
	for (int d = 0; d < rank - 2; d++) {
		bdims[d] = d;
		batch = mul(k, batch, fj_rg_dim(&k->r, v0, d));
	}
	V tile[4];
	LLVMTypeRef tty[4];
	for (uint32_t j = 0; j < k->nout; j++) {
		tty[j] = fj_cg_compute_type(cg, body->values[body->results[j]].type.dtype);
		if (tty[j] == cg->t_i1)
			tty[j] = cg->t_i8;
		char nm[32];
		snprintf(nm, sizeof nm, "tile%u", j);
		tile[j] = cg->target->shared_array(cg, tty[j], 32 * 33, nm);
	}
	V tx = LLVMBuildAnd(B, k->tid, i64c(k, 31), "tx");
	V ty = LLVMBuildLShr(B, k->tid, i64c(k, 5), "ty");
	V tm = LLVMBuildUDiv(B, add(k, M, i64c(k, 31)), i64c(k, 32), "");
	V tn = LLVMBuildUDiv(B, add(k, N, i64c(k, 31)), i64c(k, 32), "");
	V per = mul(k, tm, tn);
	gloop tl;
	gloop_begin(k, &tl, k->ctaid, mul(k, batch, per), k->nctaid, "tile");
	V b = LLVMBuildUDiv(B, tl.iv, per, "");
	V rem = LLVMBuildURem(B, tl.iv, per, "");
	V m0 = mul(k, LLVMBuildUDiv(B, rem, tn, ""), i64c(k, 32));
	V n0 = mul(k, LLVMBuildURem(B, rem, tn, ""), i64c(k, 32));
	V idx[FJ_MAX_RANK];
	unravel(k, v0, bdims, rank - 2, b, idx);
	V base = mul(k, b, mul(k, M, N));
	for (int pass = 0; pass < 2; pass++) {
		for (int q = 0; q < 4; q++) {
			V r8 = add(k, ty, i64c(k, 8 * q));
			V m = add(k, m0, pass == 0 ? tx : r8), n = add(k, n0, pass == 0 ? r8 : tx);
			V ok = LLVMBuildAnd(B, ult(k, m, M), ult(k, n, N), "");
			V slot = pass == 0 ? add(k, mul(k, tx, i64c(k, 33)), r8) : add(k, mul(k, r8, i64c(k, 33)), tx);
			fj_rg_scope_push(&k->r);
			if (pass == 0) {
				idx[rank - 2] = sel(k, ok, m, i64c(k, 0));
				idx[rank - 1] = sel(k, ok, n, i64c(k, 0));
				V lin = add(k, base, add(k, mul(k, idx[rank - 2], N), idx[rank - 1]));
				for (uint32_t j = 0; j < k->nout; j++) {
					fj_vid v = body->results[j];
					fj_rg_point p;
					if (fj_type_equal(&body->values[v].type, &body->values[v0].type) ||
					    (body->values[v].type.rank == rank &&
					     memcmp(body->values[v].type.dims, body->values[v0].type.dims, rank * sizeof(fj_dim)) == 0))
						fj_rg_point_idx(&p, rank, idx);
					else
						fj_rg_point_lin(&p, body->values[v].type.rank, lin);
					V x = fj_rg_eval(&k->r, v, &p);
					if (LLVMTypeOf(x) == cg->t_i1)
						x = LLVMBuildZExt(B, x, cg->t_i8, "");
					LLVMBuildStore(B, x, LLVMBuildInBoundsGEP2(B, tty[j], tile[j], &slot, 1, ""));
				}
			} else {
				fj_cg_if c;
				if_begin(k, &c, ok);
				V lin = add(k, base, add(k, mul(k, m, N), n));
				for (uint32_t j = 0; j < k->nout; j++) {
					fj_dtype vdt = body->values[body->results[j]].type.dtype;
					V x = LLVMBuildLoad2(B, tty[j], LLVMBuildInBoundsGEP2(B, tty[j], tile[j], &slot, 1, ""), "");
					if (vdt == FJ_DT_BOOL)
						x = LLVMBuildTrunc(B, x, cg->t_i1, "");
					fj_cg_store(cg, &k->out[j], lin, fj_cg_convert(cg, x, vdt, k->out[j].dtype));
				}
				if_end(k, &c);
			}
			fj_rg_scope_pop(&k->r);
		}
		cg->target->barrier(cg);
	}
	gloop_end(k, &tl);
	return entry_end(k);
}

/* ---- reductions ---- */

typedef struct redctx {
	fj_vid dv;       /* a body value of shape D (the first reduction's operand) */
	int drank;
	int rdims[FJ_MAX_RANK], nr;
	int kdims[FJ_MAX_RANK], nk;
	V rows, len;     /* i64 */
	fj_rg_acc acc[FJ_RG_MAX_REDS];
	bool ordered;    /* an argmax/argmin: contiguous chunks per thread */
	int8_t space[MAXIO]; /* per result: 'D', 'R' or (persistent_inner_outer) 'C' */
} redctx;

/* persistent_inner_outer with outer reductions (the io entries below). */
static bool io_ok(const fj_rg_analysis *a) { return a->sched == FJ_RG_PERSISTENT_INNER_OUTER && a->noreds > 0; }

static fj_status red_setup(gk *k, redctx *rc)
{
	const fj_rg_analysis *a = k->a;
	const fj_graph *body = k->body;
	rc->dv = body->nodes[a->reds[0]].opnds[0]; /* persistent_inner_outer too: its inner reductions' D */
	const fj_type *dt = &body->values[rc->dv].type;
	rc->drank = dt->rank;
	rc->nr = rc->nk = 0;
	for (int d = 0; d < dt->rank; d++) {
		if (a->kmask & (1u << d))
			rc->kdims[rc->nk++] = d;
		else
			rc->rdims[rc->nr++] = d;
	}
	for (uint32_t j = 0; j < body->nresults && j < MAXIO; j++)
		rc->space[j] = "DRC"[a->vals[body->results[j]].space];
	rc->ordered = false;
	for (int i = 0; i < a->nreds; i++) {
		fj_op op = body->nodes[a->reds[i]].op;
		rc->ordered |= op == FJ_OP_PRIMS_ARGMAX || op == FJ_OP_PRIMS_ARGMIN;
	}
	return FJ_OK;
}

static void red_sizes(gk *k, redctx *rc)
{
	rc->rows = i64c(k, 1);
	rc->len = i64c(k, 1);
	for (int i = 0; i < rc->nr; i++)
		rc->rows = mul(k, rc->rows, fj_rg_dim(&k->r, rc->dv, rc->rdims[i]));
	for (int i = 0; i < rc->nk; i++)
		rc->len = mul(k, rc->len, fj_rg_dim(&k->r, rc->dv, rc->kdims[i]));
}

/* The prologue of every reduction kernel: the row/position split, the
 * entry point (name suffix, block bound), then the row count and length. */
static fj_status red_begin(gk *k, redctx *rc, const char *suffix, unsigned maxntid)
{
	fj_status st = red_setup(k, rc);
	if (st == FJ_OK)
		st = entry_begin(k, suffix, maxntid, 0);
	if (st != FJ_OK)
		return st;
	red_sizes(k, rc);
	return FJ_OK;
}

/* The D point of (row indices ridx, position j in the row). */
static void d_point(gk *k, redctx *rc, const V *ridx, V j, V *didx)
{
	V kidx[FJ_MAX_RANK];
	unravel(k, rc->dv, rc->kdims, rc->nk, j, kidx);
	for (int i = 0; i < rc->nr; i++)
		didx[rc->rdims[i]] = ridx[i];
	for (int i = 0; i < rc->nk; i++)
		didx[rc->kdims[i]] = kidx[i];
}

static void step_phase(gk *k, redctx *rc, int ph, const V *ridx, V j)
{
	V didx[FJ_MAX_RANK];
	d_point(k, rc, ridx, j, didx);
	fj_rg_point p;
	fj_rg_point_idx(&p, rc->drank, didx);
	for (int i = 0; i < k->a->nreds; i++) {
		if (k->a->red_phase[i] != ph)
			continue;
		const fj_node *rn = &k->body->nodes[k->a->reds[i]];
		fj_rg_point q = p;
		V x = fj_rg_eval(&k->r, rn->opnds[0], &q);
		fj_rg_acc_step(&k->r, &rc->acc[i], x, j);
	}
}

/* Stores the results that live in `space` ('D': the pre-reduction space,
 * 'R': the reduced one) at one element, linear offset lin: those the analysis
 * places in that space evaluated at index idx (rank `rank`), the others at lin. */
static void store_space(gk *k, const redctx *rc, char space, int rank, const V *idx, V lin)
{
	for (uint32_t j = 0; j < k->nout; j++) {
		if (rc->space[j] != space)
			continue;
		fj_vid v = k->body->results[j];
		bool in = space == 'D' ? k->a->vals[v].in_d : k->a->vals[v].in_r;
		fj_rg_point p;
		if (in)
			fj_rg_point_idx(&p, rank, idx);
		else
			fj_rg_point_lin(&p, k->body->values[v].type.rank, lin);
		fj_rg_store(&k->r, &k->out[j], lin, v, &p);
	}
}

/* persistent_inner_outer: &state of outer reduction o at column j in slice
 * blk of `part` (blocks' slices or groups' partials: [(blk * noreds + o) *
 * len + j], 8 bytes each). */
static V io_slot(gk *k, V part, V blk, int o, V len, V j)
{
	V at = add(k, mul(k, add(k, mul(k, blk, i64c(k, k->a->noreds)), i64c(k, o)), len), j);
	return LLVMBuildInBoundsGEP2(B, k->cg->t_i64, part, &at, 1, "");
}

/* Adds the operand of acc's outer reduction at point p to the state in
 * `slot` (acc: a scratch accumulator of that reduction). */
static void io_accumulate_slot(gk *k, fj_rg_acc *acc, V slot, fj_rg_point *p)
{
	fj_cg *cg = k->cg;
	const fj_node *rn = &k->body->nodes[acc->node];
	fj_rg_point q = *p;
	V x = fj_rg_eval(&k->r, rn->opnds[0], &q);
	fj_cg_set(cg, acc->var[0], LLVMBuildLoad2(B, acc->ty[0], slot, ""));
	fj_rg_acc_step(&k->r, acc, x, NULL);
	V vals[3];
	fj_rg_acc_load(&k->r, acc, vals);
	LLVMBuildStore(B, vals[0], slot);
}

/* The column partials a persistent_inner_outer row adds to: this block's
 * slice of `part`, through scratch accumulators oacc (one per outer
 * reduction). */
typedef struct iocols {
	fj_rg_acc *oacc;
	V part;
} iocols;

/* Writes the row's outputs: D-space ones at positions [j0, jend) step js
 * (with cols, also adding the column partials there), then R-space ones
 * (is_first: the thread that stores them). */
static void row_out(gk *k, redctx *rc, const V *ridx, V row, V j0, V jend, V js, V is_first, const iocols *cols)
{
	bool anyd = false, anyr = false;
	for (uint32_t j = 0; j < k->nout; j++) {
		anyd |= rc->space[j] == 'D';
		anyr |= rc->space[j] == 'R';
	}
	if (anyd || cols) {
		gloop l;
		gloop_begin(k, &l, j0, jend, js, "out");
		V didx[FJ_MAX_RANK];
		d_point(k, rc, ridx, l.iv, didx);
		V dlin = lin_of(k, rc->dv, didx, rc->drank);
		store_space(k, rc, 'D', rc->drank, didx, dlin);
		fj_rg_point p;
		fj_rg_point_idx(&p, rc->drank, didx);
		for (int o = 0; cols && o < k->a->noreds; o++)
			io_accumulate_slot(k, &cols->oacc[o], io_slot(k, cols->part, k->ctaid, o, rc->len, l.iv), &p);
		gloop_end(k, &l);
	}
	if (anyr) {
		fj_cg_if c;
		if_begin(k, &c, is_first);
		store_space(k, rc, 'R', rc->nr, ridx, row);
		if_end(k, &c);
	}
}

/* Writes the row's outputs: D-space ones at positions [j0, len) step js. */
static void write_row(gk *k, redctx *rc, const V *ridx, V row, V j0, V js, V is_first)
{
	row_out(k, rc, ridx, row, j0, rc->len, js, is_first, NULL);
}

/* Stores every result at one element of the output space, linear offset lin:
 * the results of that rank evaluated at index idx, the others at lin. */
static void store_results(gk *k, int rank, const V *idx, V lin)
{
	const fj_graph *body = k->body;
	for (uint32_t j = 0; j < k->nout; j++) {
		fj_vid v = body->results[j];
		fj_rg_point op;
		if (body->values[v].type.rank == rank)
			fj_rg_point_idx(&op, rank, idx);
		else
			fj_rg_point_lin(&op, body->values[v].type.rank, lin);
		fj_rg_store(&k->r, &k->out[j], lin, v, &op);
	}
}

/* A thread per row. */
static fj_status emit_tpr(gk *k)
{
	redctx rc;
	fj_status st = red_begin(k, &rc, "_tpr", 256);
	if (st != FJ_OK)
		return st;
	for (int i = 0; i < k->a->nreds; i++)
		fj_rg_acc_init(&k->r, k->a->reds[i], &rc.acc[i]);
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	gloop rl;
	gloop_begin(k, &rl, gtid, rc.rows, mul(k, k->nctaid, k->ntid), "row");
	V ridx[FJ_MAX_RANK];
	unravel(k, rc.dv, rc.rdims, rc.nr, rl.iv, ridx);
	for (int ph = 0; ph < k->a->nphases; ph++) {
		for (int i = 0; i < k->a->nreds; i++)
			if (k->a->red_phase[i] == ph)
				fj_rg_acc_reset(&k->r, &rc.acc[i]);
		gloop jl;
		gloop_begin(k, &jl, i64c(k, 0), rc.len, i64c(k, 1), "pos");
		step_phase(k, &rc, ph, ridx, jl.iv);
		gloop_end(k, &jl);
		for (int i = 0; i < k->a->nreds; i++)
			if (k->a->red_phase[i] == ph)
				fj_rg_acc_finish(&k->r, &rc.acc[i], rc.len);
	}
	write_row(k, &rc, ridx, rl.iv, i64c(k, 0), i64c(k, 1), LLVMConstInt(k->cg->t_i1, 1, 0));
	gloop_end(k, &rl);
	return entry_end(k);
}

static void warp_reduce(gk *k, fj_rg_acc *acc)
{
	for (int m = 1; m < 32; m *= 2) {
		V vals[3], other[3];
		fj_rg_acc_load(&k->r, acc, vals);
		for (int s = 0; s < acc->n; s++)
			other[s] = k->cg->target->shuffle_xor(k->cg, vals[s], m);
		fj_rg_acc_merge(&k->r, acc, other);
	}
}

/* The block-wide state of a block-per-row kernel. */
typedef struct blockctx {
	V sh[FJ_RG_MAX_REDS][3];
	V lane, warp, nwarps, lane0, warp0, tid0;
} blockctx;

static void block_setup(gk *k, redctx *rc, blockctx *bc)
{
	fj_cg *cg = k->cg;
	for (int i = 0; i < k->a->nreds; i++) {
		fj_rg_acc_init(&k->r, k->a->reds[i], &rc->acc[i]);
		for (int s = 0; s < rc->acc[i].n; s++) {
			char nm[48];
			snprintf(nm, sizeof nm, "sh%u", k->nshared++);
			bc->sh[i][s] = cg->target->shared_array(cg, rc->acc[i].ty[s], 32, nm);
		}
	}
	bc->lane = LLVMBuildAnd(B, k->tid, i64c(k, 31), "lane");
	bc->warp = LLVMBuildLShr(B, k->tid, i64c(k, 5), "warp");
	bc->nwarps = LLVMBuildLShr(B, add(k, k->ntid, i64c(k, 31)), i64c(k, 5), "");
	bc->lane0 = LLVMBuildICmp(B, LLVMIntEQ, bc->lane, i64c(k, 0), "");
	bc->warp0 = LLVMBuildICmp(B, LLVMIntEQ, bc->warp, i64c(k, 0), "");
	bc->tid0 = LLVMBuildICmp(B, LLVMIntEQ, k->tid, i64c(k, 0), "");
}

/* Opens a block-per-row kernel's body: the block state, the loop over rows
 * (a block per row, strided by the grid) and the row's indices. */
static void block_rows_begin(gk *k, redctx *rc, blockctx *bc, gloop *rl, V *ridx)
{
	block_setup(k, rc, bc);
	gloop_begin(k, rl, k->ctaid, rc->rows, k->nctaid, "row");
	unravel(k, rc->dv, rc->rdims, rc->nr, rl->iv, ridx);
}

/* Combines reduction i's per-thread states over the block (warp shuffles,
 * then shared memory across warps), gives every thread the result and
 * finishes it (binds the reduction's values). */
static void block_combine(gk *k, redctx *rc, blockctx *bc, int i)
{
	fj_cg *cg = k->cg;
	fj_rg_acc *acc = &rc->acc[i];
	V vals[3];
	warp_reduce(k, acc);
	fj_cg_if c1;
	if_begin(k, &c1, bc->lane0);
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++) {
		V p = LLVMBuildInBoundsGEP2(B, acc->ty[s], bc->sh[i][s], &bc->warp, 1, "");
		LLVMBuildStore(B, vals[s], p);
	}
	if_end(k, &c1);
	cg->target->barrier(cg);
	fj_cg_if c2;
	if_begin(k, &c2, bc->warp0);
	fj_rg_acc_reset(&k->r, acc);
	fj_cg_if c3;
	if_begin(k, &c3, ult(k, bc->lane, bc->nwarps));
	for (int s = 0; s < acc->n; s++) {
		V p = LLVMBuildInBoundsGEP2(B, acc->ty[s], bc->sh[i][s], &bc->lane, 1, "");
		fj_cg_set(cg, acc->var[s], LLVMBuildLoad2(B, acc->ty[s], p, ""));
	}
	if_end(k, &c3);
	warp_reduce(k, acc);
	fj_cg_if c4;
	if_begin(k, &c4, bc->lane0);
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++)
		LLVMBuildStore(B, vals[s], bc->sh[i][s]);
	if_end(k, &c4);
	if_end(k, &c2);
	cg->target->barrier(cg);
	for (int s = 0; s < acc->n; s++)
		fj_cg_set(cg, acc->var[s], LLVMBuildLoad2(B, acc->ty[s], bc->sh[i][s], ""));
	cg->target->barrier(cg);
	fj_rg_acc_finish(&k->r, acc, rc->len);
}

/* The positions of a row this thread handles in a block per row: strided
 * (j0 = tid, step ntid), or a contiguous chunk when an argmax/argmin needs
 * the order. */
static void thread_positions(gk *k, const redctx *rc, V *j0, V *jend, V *js)
{
	*j0 = k->tid;
	*jend = rc->len;
	*js = k->ntid;
	if (rc->ordered) {
		V ch = LLVMBuildUDiv(B, add(k, rc->len, LLVMBuildSub(B, k->ntid, i64c(k, 1), "")), k->ntid, "");
		*j0 = mul(k, k->tid, ch);
		V e = add(k, *j0, ch);
		*jend = sel(k, slt(k, e, rc->len), e, rc->len);
		*js = i64c(k, 1);
	}
}

/* The reduction phases of one row, each a pass over the thread's positions
 * [j0, jend) step js, then combined over the block. */
static void bpr_phases(gk *k, redctx *rc, blockctx *bc, const V *ridx, V j0, V jend, V js)
{
	const fj_rg_analysis *a = k->a;
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_reset(&k->r, &rc->acc[i]);
		gloop jl;
		gloop_begin(k, &jl, j0, jend, js, "pos");
		step_phase(k, rc, ph, ridx, jl.iv);
		gloop_end(k, &jl);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				block_combine(k, rc, bc, i);
	}
}

/* A block per row. */
static fj_status emit_bpr(gk *k)
{
	redctx rc;
	fj_status st = red_begin(k, &rc, "", BLOCK_MAX);
	if (st != FJ_OK)
		return st;
	blockctx bc;
	gloop rl;
	V ridx[FJ_MAX_RANK];
	block_rows_begin(k, &rc, &bc, &rl, ridx);
	V j0, jend, js;
	thread_positions(k, &rc, &j0, &jend, &js);
	bpr_phases(k, &rc, &bc, ridx, j0, jend, js);
	write_row(k, &rc, ridx, rl.iv, k->tid, k->ntid, bc.tid0);
	gloop_end(k, &rl);
	return entry_end(k);
}

/* A block per row with the row in registers: thread t owns positions
 * t + e*ntid (e < REG_E); every body value at those points is evaluated once
 * per row and kept (the evaluator's memo lives in the row's scope), so each
 * phase and the outputs reuse one read of the inputs. The plan uses it for
 * rows up to REG_E * REG_BLOCK elements (positions past REG_E * ntid are
 * still handled, by re-reading); not for argmax/argmin (positions interleave). */
#define REG_E 8
#define REG_BLOCK 512 /* maxntid 512: up to 128 registers, no spills */
/* A row of a _reg8 entry: the thread's REG_E positions, whether each is in
 * the row, and their points of D (index and linear offset). */
typedef struct regrow {
	V jpos[REG_E], valid[REG_E];
	fj_rg_point pts[REG_E];
	V didx[REG_E][FJ_MAX_RANK], dlin[REG_E];
} regrow;

/* The row's positions, then its reduction phases: the kept positions
 * evaluated once, positions from `tail` on (past REG_E * ntid) re-read. */
static void reg_row_reduce(gk *k, redctx *rc, blockctx *bc, const V *ridx, V tail, regrow *g)
{
	const fj_rg_analysis *a = k->a;
	for (int e = 0; e < REG_E; e++) {
		V j = add(k, k->tid, mul(k, k->ntid, i64c(k, e)));
		g->valid[e] = slt(k, j, rc->len);
		g->jpos[e] = sel(k, g->valid[e], j, i64c(k, 0));
		d_point(k, rc, ridx, g->jpos[e], g->didx[e]);
		fj_rg_point_idx(&g->pts[e], rc->drank, g->didx[e]);
		g->dlin[e] = lin_of(k, rc->dv, g->didx[e], rc->drank);
	}
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			fj_rg_acc_reset(&k->r, &rc->acc[i]);
			const fj_node *rn = &k->body->nodes[a->reds[i]];
			for (int e = 0; e < REG_E; e++) {
				V x = fj_rg_eval(&k->r, rn->opnds[0], &g->pts[e]);
				fj_cg_if c;
				if_begin(k, &c, g->valid[e]);
				fj_rg_acc_step(&k->r, &rc->acc[i], x, g->jpos[e]);
				if_end(k, &c);
			}
		}
		gloop tl;
		gloop_begin(k, &tl, tail, rc->len, k->ntid, "tail");
		step_phase(k, rc, ph, ridx, tl.iv);
		gloop_end(k, &tl);
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				block_combine(k, rc, bc, i);
	}
}

/* The D-space results at kept position e, converted to their outputs'
 * dtypes (vals[j] for each such result j). */
static void reg_outputs(gk *k, const redctx *rc, const regrow *g, int e, V *vals)
{
	for (uint32_t j = 0; j < k->nout; j++) {
		if (rc->space[j] != 'D')
			continue;
		fj_vid v = k->body->results[j];
		fj_rg_point p;
		if (k->a->vals[v].in_d)
			p = g->pts[e];
		else
			fj_rg_point_lin(&p, k->body->values[v].type.rank, g->dlin[e]);
		vals[j] = fj_cg_convert(k->cg, fj_rg_eval(&k->r, v, &p), k->body->values[v].type.dtype, k->out[j].dtype);
	}
}

static fj_status emit_reg(gk *k)
{
	fj_cg *cg = k->cg;
	redctx rc;
	fj_status st = red_begin(k, &rc, "_reg8", REG_BLOCK);
	if (st != FJ_OK)
		return st;
	blockctx bc;
	gloop rl;
	V ridx[FJ_MAX_RANK];
	block_rows_begin(k, &rc, &bc, &rl, ridx);
	V tail = add(k, k->tid, mul(k, k->ntid, i64c(k, REG_E)));
	regrow g;
	reg_row_reduce(k, &rc, &bc, ridx, tail, &g);
	/* outputs: the row's elements from the kept values, then per-row ones */
	for (int e = 0; e < REG_E; e++) {
		V vals[MAXIO];
		reg_outputs(k, &rc, &g, e, vals);
		fj_cg_if c;
		if_begin(k, &c, g.valid[e]);
		for (uint32_t j = 0; j < k->nout; j++)
			if (rc.space[j] == 'D')
				fj_cg_store(cg, &k->out[j], g.dlin[e], vals[j]);
		if_end(k, &c);
	}
	/* per-row outputs, and row elements past REG_E * ntid */
	write_row(k, &rc, ridx, rl.iv, tail, k->ntid, bc.tid0);
	gloop_end(k, &rl);
	return entry_end(k);
}

/* Outer reductions: a block holds 32 rows (lanes: adjacent rows, which are
 * adjacent in memory when the reduced dims are outer) and Y = ntid/32 groups
 * that split each row's positions (j = group + k*Y); the groups' states are
 * merged through shared memory by group 0, in group order, then shared with
 * the block for the row's outputs. Not for argmax/argmin (interleaved).
 * At most 256 threads: one shared slot per thread and state value. */
#define COL_BLOCK 256

/* The accumulators and their per-thread shared slots of a column kernel. */
static void col_setup(gk *k, redctx *rc, V sh[][3])
{
	fj_cg *cg = k->cg;
	for (int i = 0; i < k->a->nreds; i++) {
		fj_rg_acc_init(&k->r, k->a->reds[i], &rc->acc[i]);
		for (int s = 0; s < rc->acc[i].n; s++) {
			char nm[48];
			snprintf(nm, sizeof nm, "col%u", k->nshared++);
			sh[i][s] = cg->target->shared_array(cg, rc->acc[i].ty[s], COL_BLOCK, nm);
		}
	}
}

/* Merges the states of the Y groups of a column kernel (one per thread,
 * lane tx = the row) through shared memory: group 0 merges them in group
 * order, then every thread reads its row's merged state back. All threads
 * of the block must call it (barriers). */
static void col_merge_groups(gk *k, fj_rg_acc *acc, V sh[3], V tx, V ty0, V ny)
{
	fj_cg *cg = k->cg;
	V vals[3];
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++)
		LLVMBuildStore(B, vals[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &k->tid, 1, ""));
	cg->target->barrier(cg);
	fj_cg_if c1;
	if_begin(k, &c1, ty0);
	gloop ml;
	gloop_begin(k, &ml, i64c(k, 1), ny, i64c(k, 1), "merge");
	V at = add(k, mul(k, ml.iv, i64c(k, 32)), tx);
	V other[3];
	for (int s = 0; s < acc->n; s++)
		other[s] = LLVMBuildLoad2(B, acc->ty[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &at, 1, ""), "");
	fj_rg_acc_merge(&k->r, acc, other);
	gloop_end(k, &ml);
	fj_rg_acc_load(&k->r, acc, vals);
	for (int s = 0; s < acc->n; s++)
		LLVMBuildStore(B, vals[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &tx, 1, ""));
	if_end(k, &c1);
	cg->target->barrier(cg);
	for (int s = 0; s < acc->n; s++)
		fj_cg_set(cg, acc->var[s],
		          LLVMBuildLoad2(B, acc->ty[s], LLVMBuildInBoundsGEP2(B, acc->ty[s], sh[s], &tx, 1, ""), ""));
	cg->target->barrier(cg);
}

static fj_status emit_col(gk *k)
{
	redctx rc;
	fj_status st = red_begin(k, &rc, "_col", COL_BLOCK);
	if (st != FJ_OK)
		return st;
	const fj_rg_analysis *a = k->a;
	V sh[FJ_RG_MAX_REDS][3];
	col_setup(k, &rc, sh);
	V tx = LLVMBuildAnd(B, k->tid, i64c(k, 31), "tx");
	V ty = LLVMBuildLShr(B, k->tid, i64c(k, 5), "ty");
	V ny = LLVMBuildLShr(B, k->ntid, i64c(k, 5), "ny");
	V ty0 = LLVMBuildICmp(B, LLVMIntEQ, ty, i64c(k, 0), "");
	V tiles = LLVMBuildUDiv(B, add(k, rc.rows, i64c(k, 31)), i64c(k, 32), "");
	gloop tl;
	gloop_begin(k, &tl, k->ctaid, tiles, k->nctaid, "tile");
	V row = add(k, mul(k, tl.iv, i64c(k, 32)), tx);
	V ok = ult(k, row, rc.rows);
	V rowc = sel(k, ok, row, i64c(k, 0));
	V ridx[FJ_MAX_RANK];
	unravel(k, rc.dv, rc.rdims, rc.nr, rowc, ridx);
	for (int ph = 0; ph < a->nphases; ph++) {
		for (int i = 0; i < a->nreds; i++)
			if (a->red_phase[i] == ph)
				fj_rg_acc_reset(&k->r, &rc.acc[i]);
		fj_cg_if c0;
		if_begin(k, &c0, ok);
		gloop jl;
		gloop_begin(k, &jl, ty, rc.len, ny, "pos");
		step_phase(k, &rc, ph, ridx, jl.iv);
		gloop_end(k, &jl);
		if_end(k, &c0);
		for (int i = 0; i < a->nreds; i++) {
			if (a->red_phase[i] != ph)
				continue;
			col_merge_groups(k, &rc.acc[i], sh[i], tx, ty0, ny);
			fj_rg_acc_finish(&k->r, &rc.acc[i], rc.len);
		}
	}
	fj_cg_if c2;
	if_begin(k, &c2, ok);
	write_row(k, &rc, ridx, row, ty, ny, ty0);
	if_end(k, &c2);
	gloop_end(k, &tl);
	return entry_end(k);
}

/* ---- outer reductions split across blocks (_split) ---- */

/* _col gives a tile of 32 rows (rows of R: adjacent columns of the data) to
 * one block, which walks the whole reduced extent: with few rows (e.g. the
 * bias gradient, 4096 columns of 8192 rows: 128 tiles) most of the GPU idles. _split cuts each row's positions into S
 * contiguous chunks: work item (tile, s) is one tile over chunk s, reduced
 * as _col does (Y groups, merged through shared memory), its states written
 * to the workspace. The block that completes a tile's S-th item (a counter
 * per tile, incremented after a fence: CUDA's threadFenceReduction) merges
 * the S partials in chunk order, finishes the reductions and writes the
 * tile's outputs (the epilogue), then zeroes the counter for the next launch.
 * One kernel, no grid-wide barrier, any grid size: S = nctaid / tiles (at
 * least 1), so a smaller grid than the plan's (the emulator's) makes fewer
 * chunks within the workspace the plan sized. One reduction phase only (a
 * second would need the first's results in every block); not for
 * argmax/argmin (chunks interleave positions within a block).
 * Workspace (zeroed once by the runtime): an i32 counter per tile, padded
 * to 16 bytes, then 8-byte partial slots
 * [((reduction * 3 + state) * items + item) * 32 + lane]. */
static bool split_ok(const fj_rg_analysis *a)
{
	if (a->nreds == 0 || a->nphases != 1 || a->sched == FJ_RG_MATMUL || a->sched == FJ_RG_SCAN ||
	    a->sched == FJ_RG_TAKE || a->sched == FJ_RG_GATHER || a->sched == FJ_RG_SCATTER)
		return false;
	for (int i = 0; i < a->nreds; i++) {
		fj_op op = a->node->body->nodes[a->reds[i]].op;
		if (op == FJ_OP_PRIMS_ARGMAX || op == FJ_OP_PRIMS_ARGMIN)
			return false;
	}
	return true;
}

/* Bytes of counters before the partials (16-byte aligned). */
static int64_t split_counter_bytes(int64_t tiles) { return (tiles + 3) / 4 * 16; }

/* The address of partial slot (reduction i, state s, item, lane tx). */
static V split_slot(gk *k, V part, int i, int s, V items, V item, V tx)
{
	V at = add(k, mul(k, add(k, mul(k, i64c(k, i * 3 + s), items), item), i64c(k, 32)), tx);
	return LLVMBuildInBoundsGEP2(B, k->cg->t_i64, part, &at, 1, "");
}

/* __threadfence(): device-wide ordering of this thread's memory accesses.
 * LLVM 19's NVPTX backend cannot select the IR `fence` instruction, so on
 * NVPTX (k->c set) it is the membar.gl intrinsic; the host emulator (k->c
 * NULL) uses the IR fence. */
static void device_fence(gk *k)
{
	if (!k->c) {
		LLVMBuildFence(B, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
		return;
	}
	LLVMTypeRef fty = LLVMFunctionType(k->cg->t_void, NULL, 0, 0);
	LLVMValueRef f = LLVMGetNamedFunction(k->cg->mod, "llvm.nvvm.membar.gl");
	if (!f)
		f = LLVMAddFunction(k->cg->mod, "llvm.nvvm.membar.gl", fty);
	LLVMBuildCall2(B, fty, f, NULL, 0, "");
}

static fj_status emit_split(gk *k)
{
	fj_cg *cg = k->cg;
	redctx rc;
	k->want_ws = true;
	fj_status st = red_begin(k, &rc, "_split", COL_BLOCK);
	k->want_ws = false;
	if (st != FJ_OK)
		return st;
	const fj_rg_analysis *a = k->a;
	V sh[FJ_RG_MAX_REDS][3];
	col_setup(k, &rc, sh);
	V last_sh = cg->target->shared_array(cg, cg->t_i32, 1, "split_last");
	V tx = LLVMBuildAnd(B, k->tid, i64c(k, 31), "tx");
	V ty = LLVMBuildLShr(B, k->tid, i64c(k, 5), "ty");
	V ny = LLVMBuildLShr(B, k->ntid, i64c(k, 5), "ny");
	V ty0 = LLVMBuildICmp(B, LLVMIntEQ, ty, i64c(k, 0), "");
	V tid0 = LLVMBuildICmp(B, LLVMIntEQ, k->tid, i64c(k, 0), "");
	V tiles = LLVMBuildUDiv(B, add(k, rc.rows, i64c(k, 31)), i64c(k, 32), "");
	V tiles1 = sel(k, ult(k, tiles, i64c(k, 1)), i64c(k, 1), tiles); /* no division by 0 */
	V nsplit = LLVMBuildUDiv(B, k->nctaid, tiles1, "");
	nsplit = sel(k, ult(k, nsplit, i64c(k, 1)), i64c(k, 1), nsplit);
	V chunk = LLVMBuildUDiv(B, add(k, rc.len, LLVMBuildSub(B, nsplit, i64c(k, 1), "")), nsplit, "");
	V items = mul(k, tiles, nsplit);
	V cbytes = mul(k, LLVMBuildUDiv(B, add(k, tiles, i64c(k, 3)), i64c(k, 4), ""), i64c(k, 16));
	V part = LLVMBuildGEP2(B, cg->t_i8, k->wsp, &cbytes, 1, "partials");
	gloop il;
	gloop_begin(k, &il, k->ctaid, items, k->nctaid, "item");
	V tile = LLVMBuildUDiv(B, il.iv, nsplit, "");
	V chunk_i = LLVMBuildURem(B, il.iv, nsplit, "");
	V row = add(k, mul(k, tile, i64c(k, 32)), tx);
	V ok = ult(k, row, rc.rows);
	V rowc = sel(k, ok, row, i64c(k, 0));
	V ridx[FJ_MAX_RANK];
	unravel(k, rc.dv, rc.rdims, rc.nr, rowc, ridx);
	/* stage 1: this chunk's partial states */
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_reset(&k->r, &rc.acc[i]);
	V j0 = mul(k, chunk_i, chunk);
	V j1 = add(k, j0, chunk);
	j1 = sel(k, slt(k, j1, rc.len), j1, rc.len);
	fj_cg_if c0;
	if_begin(k, &c0, ok);
	gloop jl;
	gloop_begin(k, &jl, add(k, j0, ty), j1, ny, "pos");
	step_phase(k, &rc, 0, ridx, jl.iv);
	gloop_end(k, &jl);
	if_end(k, &c0);
	for (int i = 0; i < a->nreds; i++)
		col_merge_groups(k, &rc.acc[i], sh[i], tx, ty0, ny);
	fj_cg_if c1;
	if_begin(k, &c1, ty0);
	for (int i = 0; i < a->nreds; i++) {
		V vals[3];
		fj_rg_acc_load(&k->r, &rc.acc[i], vals);
		for (int s = 0; s < rc.acc[i].n; s++)
			LLVMBuildStore(B, vals[s], split_slot(k, part, i, s, items, il.iv, tx));
	}
	if_end(k, &c1);
	/* the partials visible device-wide before the count says so */
	device_fence(k);
	cg->target->barrier(cg);
	fj_cg_if c2;
	if_begin(k, &c2, tid0);
	V cnt = LLVMBuildInBoundsGEP2(B, cg->t_i32, k->wsp, &tile, 1, "");
	V old = LLVMBuildAtomicRMW(B, LLVMAtomicRMWBinOpAdd, cnt, fj_cg_i32(cg, 1), LLVMAtomicOrderingMonotonic, 0);
	V is_last = LLVMBuildICmp(B, LLVMIntEQ, zx64(k, old), LLVMBuildSub(B, nsplit, i64c(k, 1), ""), "");
	LLVMBuildStore(B, LLVMBuildZExt(B, is_last, cg->t_i32, ""), last_sh);
	if_end(k, &c2);
	cg->target->barrier(cg);
	V last = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildLoad2(B, cg->t_i32, last_sh, ""), fj_cg_i32(cg, 0), "");
	/* stage 2 (the tile's last block): every thread merges its row's partials in chunk order */
	fj_cg_if c3;
	if_begin(k, &c3, last);
	device_fence(k);
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_reset(&k->r, &rc.acc[i]);
	gloop sl;
	gloop_begin(k, &sl, i64c(k, 0), nsplit, i64c(k, 1), "chunk");
	V item = add(k, mul(k, tile, nsplit), sl.iv);
	for (int i = 0; i < a->nreds; i++) {
		V other[3];
		for (int s = 0; s < rc.acc[i].n; s++) {
			/* volatile: from L2, never a line this SM's L1 kept (the
			 * slots are rewritten by other blocks at every launch) */
			other[s] = LLVMBuildLoad2(B, rc.acc[i].ty[s], split_slot(k, part, i, s, items, item, tx), "");
			LLVMSetVolatile(other[s], 1);
		}
		fj_rg_acc_merge(&k->r, &rc.acc[i], other);
	}
	gloop_end(k, &sl);
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_finish(&k->r, &rc.acc[i], rc.len);
	fj_cg_if c4;
	if_begin(k, &c4, ok);
	write_row(k, &rc, ridx, row, ty, ny, ty0);
	if_end(k, &c4);
	fj_cg_if c5;
	if_begin(k, &c5, tid0);
	LLVMBuildStore(B, fj_cg_i32(cg, 0), LLVMBuildInBoundsGEP2(B, cg->t_i32, k->wsp, &tile, 1, ""));
	if_end(k, &c5);
	if_end(k, &c3);
	gloop_end(k, &il);
	return entry_end(k);
}

/* ---- persistent_inner_outer: rows and column sums in one launch ---- */

/* A persistent_inner kernel (a block per row, the grid striding over the
 * rows; the main entry as <name> of persistent_inner, _reg8 as its _reg8)
 * whose row output pass also accumulates, for every outer reduction (a sum
 * over the rows: layer_norm's grad_weight and grad_bias ...), its operand at
 * the row's positions into per-thread column partials. A thread handles the
 * same positions of every row (t + m*ntid, or its chunk when an
 * argmax/argmin orders them), so no two threads of a block share a column:
 * _reg8 keeps the partials of its 8 positions in registers (later positions,
 * a block smaller than the plan's, in the workspace), the main entry keeps
 * them all in this block's slice of the workspace (any row length). Then
 * every block stores its partials to its slice and the slices merge in two
 * levels, in the same launch, without waiting on other blocks (only the
 * counter pattern of _split: the last to arrive does the work):
 *   - the blocks form groups of G consecutive blocks (the last group may be
 *     smaller); a block fences and counts itself done on its group's
 *     counter, and the group's last block merges the group's slices in block
 *     order into the group's partial, re-zeroes the group counter, fences
 *     and counts the group done on the global counter;
 *   - the last group's merger merges the group partials in group order,
 *     finishes the outer reductions, writes the column-shaped results and
 *     re-zeroes the global counter for the next launch.
 * G = ceil(sqrt(nblocks)), from gridDim at run time: the critical path (the
 * last group's merge, then the final one) reads G + ceil(nblocks / G)
 * slices, least for G near sqrt(nblocks): 12 + 11 for 132 blocks instead of
 * the 132 a single merger reads (a fixed G = 16 would give 16 + 9; sqrt
 * also groups the emulator's small grids: 7 blocks -> 3, 3, 1). The
 * merges' order depends on the grid only: the same bits for the same grid,
 * whatever the timing. Each merging thread strides over the columns and
 * loads IO_UNROLL slices (of every outer reduction) before merging them in
 * order, to keep several loads in flight. Any grid works (the emulator's
 * smaller one uses fewer slices and groups); rows = 0 still writes the
 * columns (the reductions' identity).
 * Workspace (zeroed once by the runtime; every counter is back at 0 after a
 * launch): i32 counters, the global one then one per group, padded to 16
 * bytes; the blocks' 8-byte states [(block * noreds + o) * len + column];
 * the groups' [(group * noreds + o) * len + column] (io_ws_bytes). Outer
 * reductions with one state value only (sum, prod, amax, amin). */
#define IO_SMS 132 /* H100 SXM: 132 SMs (H200 too) */
#define IO_UNROLL 4 /* slices loaded per merge step */

/* G (the blocks of a group) for a grid of nb blocks: ceil(sqrt(nb)) */
static int64_t io_group_blocks(int64_t nb)
{
	int64_t g = 1;
	while (g * g < nb)
		g++;
	return g;
}

/* The workspace of a grid of nb blocks (and of any smaller grid). */
static int64_t io_ws_bytes(int64_t nb, int64_t noreds, int64_t len)
{
	int64_t g = io_group_blocks(nb), ngroups = (nb + g - 1) / g;
	return (1 + ngroups + 3) / 4 * 16 + (nb + ngroups) * noreds * len * 8;
}

/* The same G in the kernel: the f64 square root rounded up, corrected by
 * one where it was off (it is exact for perfect squares). */
static V io_group_blocks_ir(gk *k, V nb)
{
	fj_cg *cg = k->cg;
	LLVMTypeRef f64 = cg->t_f64;
	V x = LLVMBuildSIToFP(B, nb, f64, "");
	unsigned id = LLVMLookupIntrinsicID("llvm.sqrt", 9);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, &f64, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(cg->llctx, id, &f64, 1);
	V g = LLVMBuildFPToSI(B, LLVMBuildCall2(B, fty, f, &x, 1, ""), cg->t_i64, "");
	g = sel(k, slt(k, mul(k, g, g), nb), add(k, g, i64c(k, 1)), g);
	V gm = LLVMBuildSub(B, g, i64c(k, 1), "");
	V down = LLVMBuildAnd(B, slt(k, i64c(k, 1), g), LLVMBuildNot(B, slt(k, mul(k, gm, gm), nb), ""), "");
	return sel(k, down, gm, g);
}

/* Merges into oacc (every outer reduction's state, reset by the caller)
 * the states of slices first .. first+count-1 of `area` (blocks' slices or
 * groups' partials, count >= 1) at column col, in slice order: IO_UNROLL
 * slices' volatile loads (from L2, never a line this SM's L1 kept: other
 * blocks rewrite them at every launch) issued before their merges; past the
 * end a step reloads the last slice and merges nothing. */
static void io_merge_slices(gk *k, fj_rg_acc *oacc, V area, V first, V count, V len, V col)
{
	int nr = k->a->noreds;
	V last = LLVMBuildSub(B, count, i64c(k, 1), "");
	gloop sl;
	gloop_begin(k, &sl, i64c(k, 0), count, i64c(k, IO_UNROLL), "slices");
	V ld[IO_UNROLL][FJ_RG_MAX_REDS], in[IO_UNROLL];
	for (int u = 0; u < IO_UNROLL; u++) {
		V i = add(k, sl.iv, i64c(k, u));
		in[u] = slt(k, i, count);
		i = add(k, first, sel(k, in[u], i, last));
		for (int o = 0; o < nr; o++) {
			ld[u][o] = LLVMBuildLoad2(B, oacc[o].ty[0], io_slot(k, area, i, o, len, col), "");
			LLVMSetVolatile(ld[u][o], 1);
		}
	}
	for (int u = 0; u < IO_UNROLL; u++) {
		fj_cg_if c;
		if (u > 0)
			if_begin(k, &c, in[u]);
		for (int o = 0; o < nr; o++) {
			V other[3] = {ld[u][o], NULL, NULL};
			fj_rg_acc_merge(&k->r, &oacc[o], other);
		}
		if (u > 0)
			if_end(k, &c);
	}
	gloop_end(k, &sl);
}

/* Counts this block in the i32 counter at cnt (thread 0, after a fence
 * and a barrier) and tells every thread whether it was the last of `total`
 * (through the shared i32 at flag). */
static V io_arrive(gk *k, blockctx *bc, V cnt, V total, V flag)
{
	fj_cg *cg = k->cg;
	/* what this block wrote visible device-wide before the count says so */
	device_fence(k);
	cg->target->barrier(cg);
	fj_cg_if c;
	if_begin(k, &c, bc->tid0);
	V old = LLVMBuildAtomicRMW(B, LLVMAtomicRMWBinOpAdd, cnt, fj_cg_i32(cg, 1), LLVMAtomicOrderingMonotonic, 0);
	V is_last = LLVMBuildICmp(B, LLVMIntEQ, zx64(k, old), LLVMBuildSub(B, total, i64c(k, 1), ""), "");
	LLVMBuildStore(B, LLVMBuildZExt(B, is_last, cg->t_i32, ""), flag);
	if_end(k, &c);
	cg->target->barrier(cg);
	return LLVMBuildICmp(B, LLVMIntNE, LLVMBuildLoad2(B, cg->t_i32, flag, ""), fj_cg_i32(cg, 0), "");
}

/* The inner reductions' results are values of the row loop: unbound after it
 * (nothing column-shaped may use them). */
static void io_unbind_rows(gk *k)
{
	for (int i = 0; i < k->a->nreds; i++) {
		const fj_node *rn = &k->body->nodes[k->a->reds[i]];
		for (uint32_t j = 0; j < rn->nres; j++)
			fj_rg_bind(&k->r, rn->res[j], NULL);
	}
}

static fj_status emit_io(gk *k, bool reg)
{
	fj_cg *cg = k->cg;
	const fj_rg_analysis *a = k->a;
	for (int o = 0; o < a->noreds; o++) {
		fj_op op = k->body->nodes[a->oreds[o]].op;
		if (op != FJ_OP_PRIMS_SUM && op != FJ_OP_PRIMS_PROD && op != FJ_OP_PRIMS_AMAX && op != FJ_OP_PRIMS_AMIN)
			return fj_error_status(a->ctx, FJ_ERR_UNSUPPORTED, k->n->loc,
			                       "fusion.kernel: an outer reduction of persistent_inner_outer must be a "
			                       "sum, prod, amax or amin");
	}
	redctx rc;
	k->want_ws = true;
	fj_status st = red_begin(k, &rc, reg ? "_reg8" : "", reg ? REG_BLOCK : BLOCK_MAX);
	k->want_ws = false;
	if (st != FJ_OK)
		return st;
	fj_rg_acc oacc[FJ_RG_MAX_REDS];
	fj_rg_acc (*racc)[REG_E] = reg ? calloc((size_t)a->noreds, sizeof *racc) : NULL;
	if (reg && !racc) {
		fj_rg_end(&k->r);
		LLVMDeleteFunction(k->fn);
		cg->fn = NULL;
		return fj_error_status(a->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	}
	blockctx bc;
	block_setup(k, &rc, &bc);
	for (int o = 0; o < a->noreds; o++) {
		fj_rg_acc_init(&k->r, a->oreds[o], &oacc[o]);
		for (int e = 0; reg && e < REG_E; e++)
			fj_rg_acc_init(&k->r, a->oreds[o], &racc[o][e]);
	}
	char nm[48];
	snprintf(nm, sizeof nm, "io_last%u", k->nshared++);
	V last_sh = cg->target->shared_array(cg, cg->t_i32, 2, nm); /* group's last, all's last */
	/* the groups and the workspace's areas (io_ws_bytes) */
	V nb = k->nctaid;
	V gsz = io_group_blocks_ir(k, nb);
	V ngroups = LLVMBuildSDiv(B, add(k, nb, LLVMBuildSub(B, gsz, i64c(k, 1), "")), gsz, "ngroups");
	V grp = LLVMBuildSDiv(B, k->ctaid, gsz, "group");
	V gfirst = mul(k, grp, gsz);
	V gcount = LLVMBuildSub(B, nb, gfirst, "");
	gcount = sel(k, slt(k, gcount, gsz), gcount, gsz);
	V hdr = mul(k, LLVMBuildSDiv(B, add(k, ngroups, i64c(k, 4)), i64c(k, 4), ""), i64c(k, 16));
	V part = LLVMBuildGEP2(B, cg->t_i8, k->wsp, &hdr, 1, "partials");
	V gbytes = mul(k, mul(k, nb, i64c(k, a->noreds * 8)), rc.len);
	V gpart = LLVMBuildGEP2(B, cg->t_i8, part, &gbytes, 1, "group_partials");
	V gidx = add(k, grp, i64c(k, 1));
	V gcnt = LLVMBuildGEP2(B, cg->t_i32, k->wsp, &gidx, 1, "group_count");
	V one = i64c(k, 1);
	V flag_all = LLVMBuildGEP2(B, cg->t_i32, last_sh, &one, 1, "");
	/* this thread's positions: strided, or a contiguous chunk (argmax/argmin,
	 * never in _reg8) */
	V j0, jend, js;
	thread_positions(k, &rc, &j0, &jend, &js);
	/* the slice's positions this thread accumulates in memory start at the
	 * identity (_reg8: those past its registers) */
	V jm0 = reg ? add(k, k->tid, mul(k, k->ntid, i64c(k, REG_E))) : j0;
	{
		gloop zl;
		gloop_begin(k, &zl, jm0, jend, js, "init");
		for (int o = 0; o < a->noreds; o++) {
			V vals[3];
			fj_rg_acc_load(&k->r, &oacc[o], vals);
			LLVMBuildStore(B, vals[0], io_slot(k, part, k->ctaid, o, rc.len, zl.iv));
		}
		gloop_end(k, &zl);
	}
	gloop rl;
	gloop_begin(k, &rl, k->ctaid, rc.rows, k->nctaid, "row");
	V ridx[FJ_MAX_RANK];
	unravel(k, rc.dv, rc.rdims, rc.nr, rl.iv, ridx);
	regrow g;
	if (!reg) {
		bpr_phases(k, &rc, &bc, ridx, j0, jend, js);
	} else {
		reg_row_reduce(k, &rc, &bc, ridx, jm0, &g);
		/* the row's elements from the kept values, and the column partials */
		for (int e = 0; e < REG_E; e++) {
			V vals[MAXIO], xs[FJ_RG_MAX_REDS];
			reg_outputs(k, &rc, &g, e, vals);
			for (int o = 0; o < a->noreds; o++) {
				fj_rg_point q = g.pts[e];
				xs[o] = fj_rg_eval(&k->r, k->body->nodes[a->oreds[o]].opnds[0], &q);
			}
			fj_cg_if c;
			if_begin(k, &c, g.valid[e]);
			for (uint32_t j = 0; j < k->nout; j++)
				if (rc.space[j] == 'D')
					fj_cg_store(cg, &k->out[j], g.dlin[e], vals[j]);
			for (int o = 0; o < a->noreds; o++)
				fj_rg_acc_step(&k->r, &racc[o][e], xs[o], NULL);
			if_end(k, &c);
		}
	}
	/* the rest of the row (all of it in the main entry) and its R outputs */
	row_out(k, &rc, ridx, rl.iv, jm0, jend, js, bc.tid0, &(iocols){oacc, part});
	gloop_end(k, &rl);
	io_unbind_rows(k);
	/* _reg8: the register partials to the slice */
	for (int e = 0; reg && e < REG_E; e++) {
		V j = add(k, k->tid, mul(k, k->ntid, i64c(k, e)));
		fj_cg_if c;
		if_begin(k, &c, slt(k, j, rc.len));
		for (int o = 0; o < a->noreds; o++) {
			V vals[3];
			fj_rg_acc_load(&k->r, &racc[o][e], vals);
			LLVMBuildStore(B, vals[0], io_slot(k, part, k->ctaid, o, rc.len, j));
		}
		if_end(k, &c);
	}
	free(racc);
	/* level 1: the group's last block merges its slices into the group's
	 * partial, in block order */
	V glast = io_arrive(k, &bc, gcnt, gcount, last_sh);
	fj_cg_if c2;
	if_begin(k, &c2, glast);
	device_fence(k);
	{
		gloop gl;
		gloop_begin(k, &gl, k->tid, rc.len, k->ntid, "gcol");
		for (int o = 0; o < a->noreds; o++)
			fj_rg_acc_reset(&k->r, &oacc[o]);
		io_merge_slices(k, oacc, part, gfirst, gcount, rc.len, gl.iv);
		for (int o = 0; o < a->noreds; o++) {
			V vals[3];
			fj_rg_acc_load(&k->r, &oacc[o], vals);
			LLVMBuildStore(B, vals[0], io_slot(k, gpart, grp, o, rc.len, gl.iv));
		}
		gloop_end(k, &gl);
	}
	fj_cg_if c3;
	if_begin(k, &c3, bc.tid0);
	LLVMBuildStore(B, fj_cg_i32(cg, 0), gcnt);
	if_end(k, &c3);
	/* level 2: the last group's merger merges the group partials in group
	 * order, finishes the outer reductions, stores the column results */
	V last = io_arrive(k, &bc, k->wsp, ngroups, flag_all);
	fj_cg_if c4;
	if_begin(k, &c4, last);
	device_fence(k);
	gloop cl;
	gloop_begin(k, &cl, k->tid, rc.len, k->ntid, "col");
	for (int o = 0; o < a->noreds; o++)
		fj_rg_acc_reset(&k->r, &oacc[o]);
	io_merge_slices(k, oacc, gpart, i64c(k, 0), ngroups, rc.len, cl.iv);
	for (int o = 0; o < a->noreds; o++)
		fj_rg_acc_finish(&k->r, &oacc[o], rc.rows);
	V kidx[FJ_MAX_RANK];
	unravel(k, rc.dv, rc.kdims, rc.nk, cl.iv, kidx);
	for (uint32_t j = 0; j < k->nout; j++) {
		if (rc.space[j] != 'C')
			continue;
		fj_vid v = k->body->results[j];
		fj_rg_point p;
		if (a->vals[v].in_c)
			fj_rg_point_idx(&p, rc.nk, kidx);
		else
			fj_rg_point_lin(&p, k->body->values[v].type.rank, cl.iv);
		fj_rg_store(&k->r, &k->out[j], cl.iv, v, &p);
	}
	gloop_end(k, &cl);
	fj_cg_if c5;
	if_begin(k, &c5, bc.tid0);
	LLVMBuildStore(B, fj_cg_i32(cg, 0), k->wsp);
	if_end(k, &c5);
	if_end(k, &c4);
	if_end(k, &c2);
	return entry_end(k);
}

/* ---- matmul: 16x16 shared-memory tiles ---- */

static fj_status emit_matmul(gk *k, const char *suffix)
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
	fj_status st = entry_begin(k, suffix, TILE * TILE, 0);
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
	gloop_begin(k, &tl, k->ctaid, ntiles, k->nctaid, "tile");
	V bi = LLVMBuildUDiv(B, tl.iv, mul(k, tilesm, tilesn), "");
	V rem = LLVMBuildURem(B, tl.iv, mul(k, tilesm, tilesn), "");
	V i = add(k, mul(k, LLVMBuildUDiv(B, rem, tilesn, ""), i64c(k, TILE)), ty);
	V jj = add(k, mul(k, LLVMBuildURem(B, rem, tilesn, ""), i64c(k, TILE)), tx);
	fj_cg_set(cg, accv, fj_cg_const(cg, acc_dt, 0, 0));
	gloop kl;
	gloop_begin(k, &kl, i64c(k, 0), K, i64c(k, TILE), "k");
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
	gloop_end(k, &kl);
	fj_cg_if c;
	if_begin(k, &c, LLVMBuildAnd(B, ult(k, i, M), ult(k, jj, N), ""));
	fj_rg_bind(&k->r, ov, fj_cg_convert(cg, fj_cg_get(cg, accv, aty), acc_dt, odt));
	V oidx[3];
	q = 0;
	if (ro == 3)
		oidx[q++] = bi;
	oidx[q++] = i;
	oidx[q++] = jj;
	V olin = lin_of(k, ov, oidx, ro);
	store_results(k, ro, oidx, olin);
	fj_rg_bind(&k->r, ov, NULL);
	if_end(k, &c);
	gloop_end(k, &tl);
	return entry_end(k);
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
#define MMA_BM 64
#define MMA_BN 64
#define MMA_BK 32
#define MMA_LD (MMA_BK + 8)
#define MMA_CLD (MMA_BN + 4)
#define MMA_THREADS 128

/* The ranks the matmul templates handle (prims.matmul after decomposition). */
static bool matmul_ranks_ok(int ra, int rb, int ro)
{
	return ra >= 2 && ra <= 3 && rb >= 2 && rb <= 3 && ro >= 2 && ro <= 3;
}

/* Whether matmul region a gets the tensor-core variant: A and B both f16 or
 * both bf16 (tensor cores read them exactly; sm_80+, every supported target). */
static bool mma_ok(const fj_rg_analysis *a)
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
	gloop_begin(k, &el, k->tid, i64c(k, (int64_t)s->tile_rows * s->tile_cols), i64c(k, MMA_THREADS), "stage");
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
	gloop_end(k, &el);
}

static fj_status emit_matmul_mma(gk *k)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *mm = &body->nodes[k->a->opaque];
	fj_vid av = mm->opnds[0], bv = mm->opnds[1], ov = mm->res[0];
	int ra = body->values[av].type.rank, rb = body->values[bv].type.rank, ro = body->values[ov].type.rank;
	bool bf16 = body->values[av].type.dtype == FJ_DT_BF16;
	fj_dtype odt = body->values[ov].type.dtype;
	fj_status st = entry_begin(k, "", MMA_THREADS, 0);
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
	gloop_begin(k, &tl, k->ctaid, mul(k, per, batch), k->nctaid, "tile");
	V bi = LLVMBuildUDiv(B, tl.iv, per, "");
	V rem = LLVMBuildURem(B, tl.iv, per, "");
	V m0 = mul(k, LLVMBuildUDiv(B, rem, tilesn, ""), i64c(k, MMA_BM));
	V n0 = mul(k, LLVMBuildURem(B, rem, tilesn, ""), i64c(k, MMA_BN));
	for (int mi = 0; mi < 2; mi++)
		for (int ni = 0; ni < 4; ni++)
			for (int i = 0; i < 4; i++)
				fj_cg_set(cg, acc[mi][ni][i], zero);
	gloop kl;
	gloop_begin(k, &kl, i64c(k, 0), K, i64c(k, MMA_BK), "k");
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
	gloop_end(k, &kl);
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
	gloop_begin(k, &el, k->tid, i64c(k, MMA_BM * MMA_BN), i64c(k, MMA_THREADS), "epi");
	V r = LLVMBuildUDiv(B, el.iv, i64c(k, MMA_BN), ""), c = LLVMBuildURem(B, el.iv, i64c(k, MMA_BN), "");
	V i = add(k, m0, r), j = add(k, n0, c);
	fj_cg_if ok;
	if_begin(k, &ok, LLVMBuildAnd(B, ult(k, i, M), ult(k, j, N), ""));
	V at = add(k, mul(k, r, i64c(k, MMA_CLD)), c);
	V x = LLVMBuildLoad2(B, cg->t_f32, LLVMBuildInBoundsGEP2(B, cg->t_f32, sc, &at, 1, ""), "");
	fj_rg_bind(&k->r, ov, fj_cg_convert(cg, x, FJ_DT_F32, odt));
	V oidx[3];
	int q = 0;
	if (ro == 3)
		oidx[q++] = bi;
	oidx[q++] = i;
	oidx[q++] = j;
	store_results(k, ro, oidx, lin_of(k, ov, oidx, ro));
	fj_rg_bind(&k->r, ov, NULL);
	if_end(k, &ok);
	gloop_end(k, &el);
	cg->target->barrier(cg);
	gloop_end(k, &tl);
	return entry_end(k);
}

/* ---- take / gather: a thread per element of the opaque result ---- */

static V index_value(gk *k, fj_vid iv, fj_rg_point *p, V size)
{
	V x = fj_rg_eval_as(&k->r, iv, p, FJ_DT_I64);
	V bad = LLVMBuildOr(B, slt(k, x, i64c(k, 0)), LLVMBuildICmp(B, LLVMIntSGE, x, size, ""), "");
	fj_rg_fail_if(&k->r, bad, FJ_KERR_INDEX);
	return sel(k, bad, i64c(k, 0), x);
}

static fj_status emit_index(gk *k)
{
	const fj_graph *body = k->body;
	const fj_node *on = &body->nodes[k->a->opaque];
	fj_vid dv = on->opnds[0], iv = on->opnds[1], ov = on->res[0];
	int dr = body->values[dv].type.rank, ir = body->values[iv].type.rank, orank = body->values[ov].type.rank;
	int64_t dim = fj_attr_as_int(fj_node_attr(k->a->ctx, on, "dim"));
	if (dim < 0)
		dim += dr ? dr : 1;
	fj_status st = entry_begin(k, "", 256, 0);
	if (st != FJ_OK)
		return st;
	V numel = fj_rg_numel(&k->r, ov);
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	gloop l;
	gloop_begin(k, &l, gtid, numel, mul(k, k->nctaid, k->ntid), "elem");
	int all[FJ_MAX_RANK];
	for (int d = 0; d < FJ_MAX_RANK; d++)
		all[d] = d;
	V oidx[FJ_MAX_RANK], didx[FJ_MAX_RANK];
	unravel(k, ov, all, orank, l.iv, oidx);
	V size = dr ? fj_rg_dim(&k->r, dv, (int)dim) : i64c(k, 1);
	fj_rg_point ip;
	if (on->op == FJ_OP_PRIMS_TAKE) {
		/* out[o[:dim], j..., o[dim+ir:]] = data[o[:dim], idx[j...], ...] */
		fj_rg_point_idx(&ip, ir, oidx + dim);
		V x = index_value(k, iv, &ip, size);
		int q = 0;
		for (int d = 0; d < dim; d++)
			didx[q++] = oidx[d];
		didx[q++] = x;
		for (int d = (int)dim + ir; d < orank; d++)
			didx[q++] = oidx[d];
	} else {
		fj_rg_point_idx(&ip, ir, oidx);
		V x = index_value(k, iv, &ip, size);
		for (int d = 0; d < dr; d++)
			didx[d] = d == dim ? x : oidx[d];
	}
	fj_rg_point dp;
	fj_rg_point_idx(&dp, dr, didx);
	fj_rg_bind(&k->r, ov, fj_rg_eval(&k->r, dv, &dp));
	store_results(k, orank, oidx, l.iv);
	fj_rg_bind(&k->r, ov, NULL);
	gloop_end(k, &l);
	return entry_end(k);
}

/* ---- scatter_add / index_add ---- */

static bool atomic_ok(fj_dtype dt)
{
	return dt == FJ_DT_F32 || dt == FJ_DT_F64 || dt == FJ_DT_F16 || dt == FJ_DT_I32 || dt == FJ_DT_I64;
}

static fj_status emit_scatter(gk *k, bool add_phase)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *on = &body->nodes[k->a->opaque];
	fj_vid selfv = on->opnds[0], iv = on->opnds[1], sv = on->opnds[2], ov = on->res[0];
	if (body->nresults != 1 || body->results[0] != ov)
		return fj_error_status(k->a->ctx, FJ_ERR_UNSUPPORTED, on->loc,
		                       "%s: a scatter region must yield the scatter's result only", fj_op_name(on->op));
	fj_status st = entry_begin(k, add_phase ? "_add" : "", 256, 0);
	if (st != FJ_OK)
		return st;
	int orank = body->values[ov].type.rank;
	int all[FJ_MAX_RANK];
	for (int d = 0; d < FJ_MAX_RANK; d++)
		all[d] = d;
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	V gstride = mul(k, k->nctaid, k->ntid);
	if (!add_phase) {
		gloop l;
		gloop_begin(k, &l, gtid, fj_rg_numel(&k->r, ov), gstride, "copy");
		fj_rg_point p;
		fj_rg_point_lin(&p, orank, l.iv);
		fj_rg_store(&k->r, &k->out[0], l.iv, selfv, &p);
		gloop_end(k, &l);
		return entry_end(k);
	}
	fj_dtype odt = k->out[0].dtype;
	bool atomic = atomic_ok(odt);
	int64_t dim = fj_attr_as_int(fj_node_attr(k->a->ctx, on, "dim"));
	if (dim < 0)
		dim += orank ? orank : 1;
	fj_vid space = sv; /* scatter_add: the index's shape (= src's leading part); index_add: src's */
	if (on->op == FJ_OP_PRIMS_SCATTER_ADD)
		space = iv;
	int srank = body->values[space].type.rank;
	V start = atomic ? gtid : i64c(k, 0), step = atomic ? gstride : i64c(k, 1);
	fj_cg_if only;
	if (!atomic)
		if_begin(k, &only, LLVMBuildICmp(B, LLVMIntEQ, gtid, i64c(k, 0), ""));
	gloop l;
	gloop_begin(k, &l, start, fj_rg_numel(&k->r, space), step, "src");
	V sidx[FJ_MAX_RANK], tidx[FJ_MAX_RANK];
	unravel(k, space, all, srank, l.iv, sidx);
	V size = orank ? fj_rg_dim(&k->r, ov, (int)dim) : i64c(k, 1);
	fj_rg_point ip;
	if (on->op == FJ_OP_PRIMS_SCATTER_ADD)
		fj_rg_point_idx(&ip, srank, sidx);
	else
		fj_rg_point_idx(&ip, 1, &sidx[dim]);
	V x = index_value(k, iv, &ip, size);
	for (int d = 0; d < orank; d++)
		tidx[d] = d == dim ? x : sidx[d];
	fj_rg_point sp;
	if (on->op == FJ_OP_PRIMS_SCATTER_ADD && body->values[sv].type.rank != srank) {
		fj_error_status(k->a->ctx, FJ_ERR_UNSUPPORTED, on->loc, "prims.scatter_add: ranks differ");
	}
	fj_rg_point_idx(&sp, srank, sidx);
	V val = fj_rg_eval_as(&k->r, sv, &sp, fj_cg_compute_dtype(odt));
	V off = fj_cg_offset(cg, &k->out[0], tidx);
	if (atomic) {
		LLVMTypeRef sty = fj_cg_storage_type(cg, odt);
		V ptr = LLVMBuildInBoundsGEP2(B, sty, k->out[0].ptr, &off, 1, "");
		V sval = odt == FJ_DT_F16 ? LLVMBuildFPTrunc(B, val, cg->t_f16, "") : val;
		LLVMBuildAtomicRMW(B, fj_dtype_is_float(odt) ? LLVMAtomicRMWBinOpFAdd : LLVMAtomicRMWBinOpAdd, ptr, sval,
		                   LLVMAtomicOrderingMonotonic, 0);
	} else {
		V cur = fj_cg_load(cg, &k->out[0], off);
		V sum;
		if (fj_dtype_is_float(odt))
			sum = LLVMBuildFAdd(B, cur, val, "");
		else if (odt == FJ_DT_BOOL)
			sum = LLVMBuildOr(B, cur, val, "");
		else
			sum = LLVMBuildAdd(B, cur, val, "");
		fj_cg_store(cg, &k->out[0], off, sum);
	}
	gloop_end(k, &l);
	if (!atomic)
		if_end(k, &only);
	return entry_end(k);
}

/* ---- scan (cumsum): a thread per line ---- */

static fj_status emit_scan(gk *k)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *on = &body->nodes[k->a->opaque];
	fj_vid xv = on->opnds[0], ov = on->res[0];
	int rank = body->values[ov].type.rank;
	int64_t dim = fj_attr_as_int(fj_node_attr(k->a->ctx, on, "dim"));
	if (dim < 0)
		dim += rank ? rank : 1;
	fj_dtype odt = body->values[ov].type.dtype;
	fj_dtype acc_dt = fj_dtype_is_float(odt) ? FJ_DT_F64 : FJ_DT_I64;
	fj_status st = entry_begin(k, "", 256, 0);
	if (st != FJ_OK)
		return st;
	int others[FJ_MAX_RANK], no = 0;
	for (int d = 0; d < rank; d++)
		if (d != dim)
			others[no++] = d;
	V lines = i64c(k, 1);
	for (int i = 0; i < no; i++)
		lines = mul(k, lines, fj_rg_dim(&k->r, ov, others[i]));
	V len = rank ? fj_rg_dim(&k->r, ov, (int)dim) : i64c(k, 1);
	LLVMTypeRef aty = fj_cg_compute_type(cg, acc_dt);
	V accv = fj_cg_var(cg, aty, fj_cg_const(cg, acc_dt, 0, 0), "acc");
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	gloop l;
	gloop_begin(k, &l, gtid, lines, mul(k, k->nctaid, k->ntid), "line");
	V oi[FJ_MAX_RANK], idx[FJ_MAX_RANK];
	unravel(k, ov, others, no, l.iv, oi);
	fj_cg_set(cg, accv, fj_cg_const(cg, acc_dt, 0, 0));
	gloop e;
	gloop_begin(k, &e, i64c(k, 0), len, i64c(k, 1), "pos");
	for (int i = 0; i < no; i++)
		idx[others[i]] = oi[i];
	if (rank)
		idx[dim] = e.iv;
	fj_rg_point p;
	fj_rg_point_idx(&p, rank, idx);
	V x = fj_rg_eval_as(&k->r, xv, &p, acc_dt);
	V a = fj_cg_get(cg, accv, aty);
	a = fj_dtype_is_float(acc_dt) ? LLVMBuildFAdd(B, a, x, "") : add(k, a, x);
	fj_cg_set(cg, accv, a);
	fj_rg_bind(&k->r, ov, fj_cg_convert(cg, a, acc_dt, odt));
	V olin = lin_of(k, ov, idx, rank);
	store_results(k, rank, idx, olin);
	fj_rg_bind(&k->r, ov, NULL);
	gloop_end(k, &e);
	gloop_end(k, &l);
	return entry_end(k);
}

/* ---- one region -> its entries ---- */

/* Which entries a region has (the main one first). */
static int region_variants(const fj_rg_analysis *a, const char **suffix)
{
	switch (a->sched) {
	case FJ_RG_MATMUL: /* f16/bf16: tensor cores first, the SIMT kernel kept */
		suffix[0] = "";
		suffix[1] = "_simt";
		return mma_ok(a) ? 2 : 1;
	case FJ_RG_TAKE: case FJ_RG_GATHER: case FJ_RG_SCAN:
		suffix[0] = "";
		return 1;
	case FJ_RG_SCATTER:
		suffix[0] = "";
		suffix[1] = "_add";
		return 2;
	default:
		if (io_ok(a)) { /* persistent_inner_outer: the workspace entry, then registers */
			suffix[0] = "";
			suffix[1] = "_reg8";
			return 2;
		}
		if (a->nreds) {
			suffix[0] = "";
			suffix[1] = "_tpr";
			suffix[2] = "_reg8";
			suffix[3] = "_col";
			suffix[4] = "_split";
			return split_ok(a) ? 5 : 4;
		}
		suffix[0] = "";
		suffix[1] = "_s1";
		return 2;
	}
}

static fj_status emit_variant(gk *k, int v)
{
	const fj_rg_analysis *a = k->a;
	switch (a->sched) {
	case FJ_RG_MATMUL: return mma_ok(a) && v == 0 ? emit_matmul_mma(k) : emit_matmul(k, v == 0 ? "" : "_simt");
	case FJ_RG_TAKE: case FJ_RG_GATHER: return emit_index(k);
	case FJ_RG_SCAN: return emit_scan(k);
	case FJ_RG_SCATTER: return emit_scatter(k, v == 1);
	default:
		if (io_ok(a))
			return emit_io(k, v == 1);
		if (a->nreds)
			return v == 0 ? emit_bpr(k) : v == 1 ? emit_tpr(k) : v == 2 ? emit_reg(k) : v == 3 ? emit_col(k)
			                                                                               : emit_split(k);
		if (a->sched == FJ_RG_TRANSPOSE && v == 0 && tileable(k->body))
			return emit_transpose(k);
		return emit_pointwise(k, v == 0);
	}
}

/* Emits the entries of region `node` of g into cg's module: all variants
 * (variant < 0) or only that one (0: the main one). */
static fj_status emit_region(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int variant,
                             const fj_rg_analysis *a)
{
	if (!cg->target->thread_idx || !cg->target->barrier || !cg->target->shuffle_xor || !cg->target->shared_array ||
	    !cg->target->mma_m16n8k16)
		return fj_error_status(cg->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: the target has no GPU hooks");
	const fj_node *n = &g->nodes[node];
	if (n->nopnds > MAXIO || n->nres > MAXIO)
		return fj_error_status(cg->ctx, FJ_ERR_UNSUPPORTED, n->loc, "fusion.kernel: too many operands or results");
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	int nv = region_variants(a, suffix);
	if (variant >= nv)
		return fj_error_status(cg->ctx, FJ_ERR_INTERNAL, n->loc, "nvptx: region %s has no variant %d",
		                       n->kernel ? n->kernel : "fj_kernel", variant);
	gk *k = calloc(1, sizeof *k);
	if (!k)
		return fj_error_status(cg->ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	k->c = c;
	k->cg = cg;
	k->a = a;
	k->body = n->body;
	k->n = n;
	snprintf(k->prefix, sizeof k->prefix, "%s", n->kernel ? n->kernel : "fj_kernel");
	fj_status st = FJ_OK;
	for (int v = variant < 0 ? 0 : variant; v < (variant < 0 ? nv : variant + 1) && st == FJ_OK; v++)
		st = emit_variant(k, v);
	free(k);
	return st;
}

/* The entry name of variant v. */
static void entry_name(const fj_graph *g, uint32_t node, const fj_rg_analysis *a, int v, char entry[112])
{
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	region_variants(a, suffix);
	const fj_node *n = &g->nodes[node];
	snprintf(entry, 112, "%s%s", n->kernel ? n->kernel : "fj_kernel", suffix[v]);
}

fj_status fj_nvptx_emit_region(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int *nvariants,
                                char entries[][112])
{
	fj_rg_analysis a;
	fj_status st = fj_rg_analyze(cg->ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	*nvariants = region_variants(&a, suffix);
	st = emit_region(c, cg, g, node, -1, &a);
	for (int v = 0; st == FJ_OK && v < *nvariants; v++)
		entry_name(g, node, &a, v, entries[v]);
	fj_rg_analysis_free(&a);
	return st;
}

fj_status fj_nvptx_emit_region_variant(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int variant,
                                       int *nvariants, char entry[112])
{
	fj_rg_analysis a;
	fj_status st = fj_rg_analyze(cg->ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	*nvariants = region_variants(&a, suffix);
	st = emit_region(c, cg, g, node, variant, &a);
	if (st == FJ_OK)
		entry_name(g, node, &a, variant, entry);
	fj_rg_analysis_free(&a);
	return st;
}

fj_status fj_nvptx_emit_module(fj_context *ctx, const fj_module *m, const char *sm, bool llvm, fj_buf *out)
{
	fj_nvptx_comp c;
	fj_status st = fj_nvptx_comp_begin(ctx, sm, &c);
	if (st != FJ_OK) {
		fj_nvptx_comp_end(&c);
		return st;
	}
	const char *e = getenv("FUSEJIT_PTX_ALL_VARIANTS");
	bool all = e && *e && strcmp(e, "0") != 0;
	fj_cg cg;
	fj_cg_init(&cg, ctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
	for (uint32_t gi = 0; gi < m->ngraphs && st == FJ_OK; gi++)
	for (uint32_t i = 0, nn = m->graphs[gi]->nnodes; i < nn && st == FJ_OK; i++) {
		const fj_graph *g = m->graphs[gi];
		const fj_node *n = &g->nodes[i];
		if (n->op != FJ_OP_FUSION_KERNEL) {
			st = fj_error_status(ctx, FJ_ERR_UNSUPPORTED, n->loc,
			                     "%s: the nvptx backend runs fused regions only (run the fuse and schedule "
			                     "passes first)",
			                     fj_op_name(n->op));
			break;
		}
		fj_rg_analysis a;
		st = fj_rg_analyze(ctx, g, i, &a);
		if (st != FJ_OK)
			break;
		st = emit_region(&c, &cg, g, i, all ? -1 : 0, &a);
		fj_rg_analysis_free(&a);
	}
	fj_cg_dispose(&cg);
	if (st == FJ_OK)
		st = fj_nvptx_comp_optimise(&c);
	if (st == FJ_OK)
		st = llvm ? fj_nvptx_comp_llvm(&c, out) : fj_nvptx_comp_ptx(&c, out);
	fj_nvptx_comp_end(&c);
	return st;
}

/* ---- the cache of compiled regions ---- */

struct fj_nvptx_cache_entry {
	char *key;
	size_t keylen;
	uint64_t hash;
	fj_nvptx_kernel k;
};

void fj_nvptx_cache_free(fj_nvptx_state *s)
{
	for (uint32_t i = 0; i < s->cap; i++) {
		fj_nvptx_cache_entry *e = s->tab[i];
		if (!e)
			continue;
		free(e->key);
		free(e->k.ptx);
		if (e->k.cumod && s->cu && s->cu->init_status == FJ_OK)
			s->cu->api.cuModuleUnload(e->k.cumod);
		free(e);
	}
	free(s->tab);
	s->tab = NULL;
	s->cap = s->count = 0;
}

static fj_nvptx_cache_entry *cache_find(fj_nvptx_state *s, const char *key, size_t len, uint64_t h)
{
	if (!s->cap)
		return NULL;
	for (uint32_t i = (uint32_t)h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		fj_nvptx_cache_entry *e = s->tab[i];
		if (!e)
			return NULL;
		if (e->hash == h && e->keylen == len && memcmp(e->key, key, len) == 0)
			return e;
	}
}

static bool cache_insert(fj_nvptx_state *s, fj_nvptx_cache_entry *e)
{
	if ((s->count + 1) * 2 > s->cap) {
		uint32_t nc = s->cap ? s->cap * 2 : 64;
		fj_nvptx_cache_entry **nt = calloc(nc, sizeof *nt);
		if (!nt)
			return false;
		for (uint32_t i = 0; i < s->cap; i++) {
			if (!s->tab[i])
				continue;
			uint32_t j = (uint32_t)s->tab[i]->hash & (nc - 1);
			while (nt[j])
				j = (j + 1) & (nc - 1);
			nt[j] = s->tab[i];
		}
		free(s->tab);
		s->tab = nt;
		s->cap = nc;
	}
	uint32_t j = (uint32_t)e->hash & (s->cap - 1);
	while (s->tab[j])
		j = (j + 1) & (s->cap - 1);
	s->tab[j] = e;
	s->count++;
	return true;
}

/* The key: the target and the node's canonical key, which holds its body's
 * structure (fj_cg_node_key): identical regions under other kernel names
 * (the layers of a deep stack) share one compiled module, whose entries keep
 * the first one's names. */
static fj_status region_key(fj_context *ctx, const fj_graph *g, uint32_t node, const char *sm, fj_buf *b)
{
	fj_buf_printf(b, "%s|", sm);
	fj_cg_node_key(b, g, node);
	if (!b->oom)
		return FJ_OK;
	return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
}

/* ---- a region's variants compiled in parallel ----
 *
 * A region with several variants compiles each in its own compilation (LLVM
 * context, module, target machine; libdevice linked per module), up to one
 * thread per variant and per core (the calling thread takes its share),
 * variants handed out in order. Each module's local symbols get the suffix
 * _v<variant> (fj_nvptx_comp.sym_suffix), kernels keep their names, and the
 * PTX texts are joined in variant order into one module: the first whole,
 * the others without their header (comment block, .version, .target,
 * .address_size), each keeping its own forward declarations ahead of its
 * entries. The bytes do not depend on the thread count or timing.
 *
 * Diagnostics: with threads, every thread records into a private context
 * (fj_context's last error is per thread and the list is shared, so errors
 * recorded concurrently would come out in any order); once all have joined,
 * the calling thread replays onto ctx, in variant order, the diagnostics of
 * the variants up to the first failing one, whose status is returned.
 * Variants after a failed one are skipped. Serially (one core, a failed
 * thread start, FUSEJIT_NVPTX_JOBS=1), the calling thread records into ctx
 * directly and stops at the first failure: the same result. */

typedef struct pv_job {
	fj_status st;
	bool done;
	fj_buf ptx;
	fj_context *dctx;           /* where its diagnostics went */
	size_t d0, d1;              /* ... their range there */
} pv_job;

typedef struct pv_run {
	fj_nvptx_state *s;
	const char *sm;
	const fj_graph *g;
	uint32_t node;
	int nv;
	atomic_int next;            /* the next variant to hand out */
	atomic_int first_fail;      /* the lowest failed variant so far (nv: none) */
	pv_job job[FJ_NVPTX_MAX_VARIANTS];
} pv_run;

typedef struct pv_worker {
	pv_run *r;
	fj_context *dctx;
	pthread_t tid;
} pv_worker;

/* Compiles variant v alone (diagnostics into dctx) and appends its PTX to out. */
static fj_status pv_compile(pv_run *r, fj_context *dctx, int v, fj_buf *out)
{
	fj_nvptx_comp c;
	fj_status st = fj_nvptx_comp_begin_state(dctx, r->s, r->sm, &c);
	snprintf(c.sym_suffix, sizeof c.sym_suffix, "_v%d", v);
	fj_rg_analysis a;
	bool analysed = false;
	if (st == FJ_OK) {
		st = fj_rg_analyze(dctx, r->g, r->node, &a);
		analysed = st == FJ_OK;
	}
	if (st == FJ_OK) {
		fj_cg cg;
		fj_cg_init(&cg, dctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
		st = emit_region(&c, &cg, r->g, r->node, v, &a);
		fj_cg_dispose(&cg);
	}
	if (st == FJ_OK)
		st = fj_nvptx_comp_optimise(&c);
	if (st == FJ_OK)
		st = fj_nvptx_comp_ptx(&c, out);
	fj_nvptx_comp_end(&c);
	if (analysed)
		fj_rg_analysis_free(&a);
	return st;
}

static void pv_loop(pv_run *r, fj_context *dctx)
{
	for (;;) {
		int v = atomic_fetch_add(&r->next, 1);
		if (v >= r->nv)
			return;
		if (v > atomic_load(&r->first_fail))
			continue; /* an earlier variant failed: its diagnostic is the one */
		pv_job *j = &r->job[v];
		j->dctx = dctx;
		j->d0 = fj_context_diagnostic_count(dctx);
		j->st = pv_compile(r, dctx, v, &j->ptx);
		j->d1 = fj_context_diagnostic_count(dctx);
		j->done = true;
		if (j->st != FJ_OK) {
			int f = atomic_load(&r->first_fail);
			while (v < f && !atomic_compare_exchange_weak(&r->first_fail, &f, v))
				;
		}
	}
}

static void *pv_thread(void *p)
{
	pv_worker *w = p;
	pv_loop(w->r, w->dctx);
	return NULL;
}

static fj_status pv_record(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static fj_status pv_record(fj_context *ctx, fj_status st, fj_severity sev, fj_loc loc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	st = fj_verror(ctx, st, sev, loc, fmt, ap);
	va_end(ap);
	return st;
}

/* How many threads: FUSEJIT_NVPTX_JOBS (>= 1) or the online cores, at most nv. */
static int pv_threads(int nv)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	const char *e = getenv("FUSEJIT_NVPTX_JOBS");
	if (e && *e && atoi(e) >= 1)
		n = atoi(e);
	if (n < 1)
		n = 1;
	return n < nv ? (int)n : nv;
}

/* The text after a PTX module's header: its leading comment and blank lines
 * and its .version, .target and .address_size lines. */
static size_t ptx_header_len(const char *p, size_t len)
{
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(p + i, '\n', len - i);
		size_t e = nl ? (size_t)(nl - p) + 1 : len;
		const char *l = p + i;
		size_t ll = e - i;
		while (ll && (*l == ' ' || *l == '\t')) {
			l++;
			ll--;
		}
		bool head = ll == 0 || *l == '\n' || *l == '\r' || (ll >= 2 && l[0] == '/' && l[1] == '/') ||
		            (ll >= 8 && strncmp(l, ".version", 8) == 0) || (ll >= 7 && strncmp(l, ".target", 7) == 0) ||
		            (ll >= 13 && strncmp(l, ".address_size", 13) == 0);
		if (!head)
			break;
		i = e;
	}
	return i;
}

/* Compiles the nv variants of region `node` (see above) and appends the
 * joined PTX to out. */
static fj_status pv_compile_region(fj_context *ctx, fj_nvptx_state *s, const char *sm, const fj_graph *g,
                                   uint32_t node, int nv, fj_buf *out)
{
	pv_run *r = calloc(1, sizeof *r);
	if (!r)
		return fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	r->s = s;
	r->sm = sm;
	r->g = g;
	r->node = node;
	r->nv = nv;
	atomic_init(&r->next, 0);
	atomic_init(&r->first_fail, nv);
	for (int v = 0; v < nv; v++)
		fj_buf_init(&r->job[v].ptx, ctx);
	pv_worker w[FJ_NVPTX_MAX_VARIANTS];
	int nthreads = pv_threads(nv), started = 0;
	/* the calling thread's private diagnostics, when there are threads */
	fj_context *own = nthreads > 1 ? fj_context_create(ctx->alloc, ctx->alloc_ud) : NULL;
	if (own) {
		pthread_attr_t attr;
		bool attr_ok = pthread_attr_init(&attr) == 0;
		size_t stack = 0;
		if (attr_ok && pthread_attr_getstacksize(&attr, &stack) == 0 && stack < ((size_t)8 << 20))
			pthread_attr_setstacksize(&attr, (size_t)8 << 20); /* LLVM's codegen recurses */
		for (int t = 0; t < nthreads - 1; t++) {
			w[started].r = r;
			w[started].dctx = fj_context_create(ctx->alloc, ctx->alloc_ud);
			if (!w[started].dctx)
				break;
			if (pthread_create(&w[started].tid, attr_ok ? &attr : NULL, pv_thread, &w[started]) != 0) {
				fj_context_destroy(w[started].dctx);
				break; /* fewer threads: the calling thread takes the rest */
			}
			started++;
		}
		if (attr_ok)
			pthread_attr_destroy(&attr);
	}
	pv_loop(r, own ? own : ctx);
	for (int t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	/* the first failing variant, in variant order */
	int fail = nv;
	for (int v = 0; v < nv && fail == nv; v++)
		if (r->job[v].done && r->job[v].st != FJ_OK)
			fail = v;
	fj_status st = fail < nv ? r->job[fail].st : FJ_OK;
	if (own) { /* replay the diagnostics of variants 0..fail onto ctx */
		for (int v = 0; v <= fail && v < nv; v++) {
			pv_job *j = &r->job[v];
			if (!j->done)
				continue;
			bool error = false;
			for (size_t i = j->d0; i < j->d1; i++) {
				const fj_diagnostic *d = fj_context_diagnostic(j->dctx, i);
				if (!d)
					break;
				error |= d->severity == FJ_SEV_ERROR;
				pv_record(ctx, j->st, d->severity, (fj_loc){d->file, d->line, d->col}, "%s", d->message);
			}
			if (j->st != FJ_OK && !error) /* not kept there (out of memory): its last error */
				fj_error_status(ctx, j->st, (fj_loc){0}, "%s", fj_context_error(j->dctx));
		}
	}
	for (int t = 0; t < started; t++)
		fj_context_destroy(w[t].dctx);
	fj_context_destroy(own);
	/* join the texts in variant order */
	for (int v = 0; v < nv && st == FJ_OK; v++) {
		const fj_buf *b = &r->job[v].ptx;
		size_t skip = v ? ptx_header_len(b->data, b->len) : 0;
		if (b->len > skip)
			fj_buf_putn(out, b->data + skip, b->len - skip);
	}
	if (st == FJ_OK && out->oom)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	for (int v = 0; v < nv; v++)
		fj_buf_free(&r->job[v].ptx);
	free(r);
	return st;
}

fj_status fj_nvptx_compile_region(fj_context *ctx, const fj_graph *g, uint32_t node, const char *sm,
                                  fj_nvptx_kernel **out, bool *hit)
{
	*out = NULL;
	if (hit)
		*hit = false;
	if (!sm)
		sm = FJ_NVPTX_DEFAULT_SM;
	fj_nvptx_state *s;
	fj_status st = fj_nvptx_state_get(ctx, &s);
	if (st != FJ_OK)
		return st;
	fj_buf key;
	fj_buf_init(&key, ctx);
	st = region_key(ctx, g, node, sm, &key);
	if (st != FJ_OK) {
		fj_buf_free(&key);
		return st;
	}
	uint64_t h = fj_hash64(key.data, key.len);
	pthread_mutex_lock(&s->lock);
	fj_nvptx_cache_entry *e = cache_find(s, key.data, key.len, h);
	pthread_mutex_unlock(&s->lock);
	if (e) {
		*out = &e->k;
		if (hit)
			*hit = true;
		fj_buf_free(&key);
		return FJ_OK;
	}
	/* compile (outside the lock: fresh LLVM contexts) */
	fj_rg_analysis a;
	bool analysed = false;
	int nv = 0;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	st = fj_nvptx_check_sm(ctx, sm);
	if (st == FJ_OK) {
		st = fj_rg_analyze(ctx, g, node, &a);
		analysed = st == FJ_OK;
	}
	if (st == FJ_OK)
		nv = region_variants(&a, suffix);
	fj_buf ptx;
	fj_buf_init(&ptx, ctx);
	if (st == FJ_OK && nv > 1) {
		st = pv_compile_region(ctx, s, sm, g, node, nv, &ptx);
	} else if (st == FJ_OK) { /* one variant: one compilation, as fj_nvptx_emit_module */
		fj_nvptx_comp c;
		st = fj_nvptx_comp_begin_state(ctx, s, sm, &c);
		if (st == FJ_OK) {
			fj_cg cg;
			fj_cg_init(&cg, ctx, fj_nvptx_cg_target(&c), c.llctx, c.mod);
			st = emit_region(&c, &cg, g, node, -1, &a);
			fj_cg_dispose(&cg);
		}
		if (st == FJ_OK)
			st = fj_nvptx_comp_optimise(&c);
		if (st == FJ_OK)
			st = fj_nvptx_comp_ptx(&c, &ptx);
		fj_nvptx_comp_end(&c);
	}
	if (st == FJ_OK)
		fj_buf_putn(&ptx, "", 1); /* NUL-terminated for the driver */
	if (st == FJ_OK && ptx.oom)
		st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
	e = NULL;
	if (st == FJ_OK) {
		e = calloc(1, sizeof *e);
		if (e)
			e->key = malloc(key.len + 1);
		if (e && e->key)
			e->k.ptx = malloc(ptx.len);
		if (!e || !e->key || !e->k.ptx) {
			if (e) {
				free(e->key);
				free(e);
			}
			e = NULL;
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		}
	}
	if (st == FJ_OK) {
		memcpy(e->key, key.data, key.len);
		e->key[key.len] = 0;
		e->keylen = key.len;
		e->hash = h;
		memcpy(e->k.ptx, ptx.data, ptx.len);
		e->k.ptxlen = ptx.len - 1;
		const fj_node *n = &g->nodes[node];
		snprintf(e->k.name, sizeof e->k.name, "%s", n->kernel ? n->kernel : "fj_kernel");
		e->k.sched = a.sched;
		e->k.nvariants = nv;
		for (int v = 0; v < nv; v++)
			entry_name(g, node, &a, v, e->k.entry[v]);
		e->k.nreds = a.nreds;
		e->k.nparams = n->nopnds + n->nres + 2;
		pthread_mutex_lock(&s->lock);
		fj_nvptx_cache_entry *other = cache_find(s, key.data, key.len, h);
		if (other) { /* compiled meanwhile by another thread */
			free(e->key);
			free(e->k.ptx);
			free(e);
			e = other;
		} else if (!cache_insert(s, e)) {
			free(e->key);
			free(e->k.ptx);
			free(e);
			e = NULL;
			st = fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory");
		}
		pthread_mutex_unlock(&s->lock);
		if (e)
			*out = &e->k;
	}
	if (analysed)
		fj_rg_analysis_free(&a);
	fj_buf_free(&ptx);
	fj_buf_free(&key);
	return st;
}

/* ---- launch plans ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static unsigned pow2_at_least(int64_t x)
{
	unsigned p = 32;
	while (p < BLOCK_MAX && (int64_t)p < x)
		p *= 2;
	return p;
}

static unsigned grid_of(int64_t items, unsigned block)
{
	int64_t g = ceil_div(items, block);
	if (g > (1 << 20))
		g = 1 << 20;
	return g < 1 ? 1 : (unsigned)g;
}

/* Groups of 32 threads of a column kernel over `len` positions: about 64
 * positions per thread, up to 8 groups (COL_BLOCK). */
static unsigned col_groups(int64_t len)
{
	unsigned y = 1;
	while (y < COL_BLOCK / 32 && (int64_t)y * 64 < len)
		y *= 2;
	return y;
}

/* The chunks of a split reduction (_split), or 0 when _split is not used:
 * outer reductions whose tiles of 32 rows give fewer than half of
 * SPLIT_BLOCKS blocks, with rows long enough to split (at least 2 chunks
 * of SPLIT_MIN positions); enough chunks for about SPLIT_BLOCKS blocks (132
 * SMs x 8 blocks of 256 threads on an H100/H200). Forced ("split"): any
 * region that has the variant, in chunks of about 32 positions. */
#define SPLIT_BLOCKS 1024
#define SPLIT_MIN 512
static int64_t split_chunks(const fj_rg_analysis *a, bool is_inner, bool ordered, int64_t rows, int64_t len,
                            const char *force)
{
	if (!split_ok(a) || ordered || len <= 0)
		return 0;
	int64_t tiles = ceil_div(rows, 32);
	if (force && strcmp(force, "split") == 0) {
		int64_t s = ceil_div(len, 32);
		return s < 2 ? 2 : s > 64 ? 64 : s;
	}
	if (force || is_inner || tiles * 2 > SPLIT_BLOCKS || len < 2 * SPLIT_MIN)
		return 0;
	int64_t s = ceil_div(SPLIT_BLOCKS, tiles), most = len / SPLIT_MIN;
	return s < most ? s : most;
}

/* persistent_inner_outer (emit_io): _reg8 for rows up to REG_E * REG_BLOCK
 * positions without argmax/argmin, else the main entry (partials in the
 * workspace); blocks of about len/8 threads; a persistent grid: the blocks
 * that fit at once on IO_SMS SMs (1 to 4 each), never more blocks than
 * rows. The workspace holds a slice per block (noreds x len states) and a
 * partial per group of blocks (emit_io's two-level merge), so no more
 * blocks than fill the GPU once (a 4096-wide layer_norm: 132 blocks of 512
 * in 11 groups of 12, 9.4 MB of partials; the last group's merger and the
 * final one read 23 slices, 1.5 MB).
 * Forced (FUSEJIT_NVPTX_VARIANTS): "bpr" the main entry, "reg" _reg8 where
 * it applies. Rows = 0 still launches one block (the column results: sums
 * of nothing). */
static void plan_io(const fj_rg_analysis *a, int64_t (*dimval)(void *ud, fj_dim d), void *ud, fj_nvptx_plan *plan)
{
	const fj_graph *body = a->node->body;
	const fj_type *t = a->dom;
	int64_t rows = 1, len = 1;
	for (int i = 0; i < t->rank; i++) {
		int64_t d = dimval(ud, t->dims[i]);
		if (a->kmask & (1u << i))
			len *= d;
		else
			rows *= d;
	}
	bool ordered = false;
	for (int i = 0; i < a->nreds; i++) {
		fj_op op = body->nodes[a->reds[i]].op;
		ordered |= op == FJ_OP_PRIMS_ARGMAX || op == FJ_OP_PRIMS_ARGMIN;
		plan->may_fail |= op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN || op == FJ_OP_PRIMS_ARGMAX ||
		                  op == FJ_OP_PRIMS_ARGMIN;
	}
	for (int o = 0; o < a->noreds; o++) {
		fj_op op = body->nodes[a->oreds[o]].op;
		plan->may_fail |= op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN;
	}
	if (rows <= 0 && len <= 0)
		return;
	const char *force = getenv("FUSEJIT_NVPTX_VARIANTS");
	bool reg = !ordered && len > 0 && len <= REG_E * REG_BLOCK;
	if (force && strcmp(force, "bpr") == 0)
		reg = false;
	unsigned block = pow2_at_least(ceil_div(len, REG_E));
	/* resident blocks per SM: 64K registers, up to 128 a thread in _reg8,
	 * about 64 in the main entry */
	int64_t per_sm = 65536 / ((reg ? 128 : 64) * (int64_t)block);
	per_sm = per_sm < 1 ? 1 : per_sm > 4 ? 4 : per_sm;
	int64_t grid = IO_SMS * per_sm;
	if (grid > rows)
		grid = rows;
	if (grid < 1)
		grid = 1;
	plan->launch[plan->n++] = (fj_nvptx_launch_step){reg ? 1 : 0, (unsigned)grid, block, 0};
	plan->workspace = (size_t)io_ws_bytes(grid, a->noreds, len > 0 ? len : 0);
}

fj_status fj_nvptx_plan_region(const fj_nvptx_kernel *k, const fj_graph *g, uint32_t node,
                               int64_t (*dimval)(void *ud, fj_dim d), void *ud, bool aligned16,
                               fj_nvptx_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	const fj_node *n = &g->nodes[node];
	const fj_graph *body = n->body;
	fj_context *ctx = fj_graph_ctx(g);
	fj_rg_analysis a;
	fj_status st = fj_rg_analyze(ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	int64_t d[FJ_MAX_RANK];
	int64_t numel = 1;
	const fj_type *t;
	switch (a.sched) {
	case FJ_RG_MATMUL: {
		const fj_node *mm = &body->nodes[a.opaque];
		t = &body->values[mm->res[0]].type;
		for (int i = 0; i < t->rank; i++)
			d[i] = dimval(ud, t->dims[i]);
		int64_t tiles = ceil_div(d[t->rank - 2], TILE) * ceil_div(d[t->rank - 1], TILE);
		if (t->rank == 3)
			tiles *= d[0];
		/* tensor cores for f16/bf16 ("bpr" forces the SIMT kernel, for tests) */
		const char *force = getenv("FUSEJIT_NVPTX_VARIANTS");
		if (mma_ok(&a) && !(force && strcmp(force, "bpr") == 0)) {
			int64_t bt = ceil_div(d[t->rank - 2], MMA_BM) * ceil_div(d[t->rank - 1], MMA_BN);
			if (t->rank == 3)
				bt *= d[0];
			if (bt > 0)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, grid_of(bt, 1), MMA_THREADS, 0};
		} else if (tiles > 0)
			plan->launch[plan->n++] =
				(fj_nvptx_launch_step){mma_ok(&a) ? 1 : 0, grid_of(tiles, 1), TILE * TILE, 0};
		break;
	}
	case FJ_RG_TAKE: case FJ_RG_GATHER: case FJ_RG_SCAN: case FJ_RG_SCATTER: {
		const fj_node *on = &body->nodes[a.opaque];
		t = &body->values[on->res[0]].type;
		for (int i = 0; i < t->rank; i++)
			numel *= dimval(ud, t->dims[i]);
		if (a.sched == FJ_RG_SCAN) {
			int64_t dim = fj_attr_as_int(fj_node_attr(ctx, on, "dim"));
			if (dim < 0)
				dim += t->rank ? t->rank : 1;
			int64_t len = t->rank ? dimval(ud, t->dims[dim]) : 1;
			int64_t lines = len ? numel / len : 0;
			if (lines > 0 && len > 0)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, grid_of(lines, 256), 256, 0};
		} else if (a.sched == FJ_RG_SCATTER) {
			if (numel > 0)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, grid_of(numel, 256), 256, 0};
			fj_vid space = on->op == FJ_OP_PRIMS_SCATTER_ADD ? on->opnds[1] : on->opnds[2];
			const fj_type *s = &body->values[space].type;
			int64_t sn = 1;
			for (int i = 0; i < s->rank; i++)
				sn *= dimval(ud, s->dims[i]);
			if (sn > 0 && numel > 0)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){1, grid_of(sn, 256), 256, 0};
			plan->may_fail = true;
		} else {
			if (numel > 0)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, grid_of(numel, 256), 256, 0};
			plan->may_fail = true;
		}
		break;
	}
	default:
		if (io_ok(&a)) {
			plan_io(&a, dimval, ud, plan);
			break;
		}
		if (a.nreds) {
			const fj_node *r0 = &body->nodes[a.reds[0]];
			t = &body->values[r0->opnds[0]].type;
			int64_t rows = 1, len = 1;
			int inner = -1;
			for (int i = 0; i < t->rank; i++) {
				d[i] = dimval(ud, t->dims[i]);
				if (a.kmask & (1u << i))
					len *= d[i];
				else
					rows *= d[i];
				if (d[i] != 1)
					inner = i;
			}
			bool is_inner = inner < 0 || (a.kmask & (1u << inner));
			for (int i = 0; i < a.nreds; i++) {
				fj_op op = body->nodes[a.reds[i]].op;
				if (op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN || op == FJ_OP_PRIMS_ARGMAX ||
				    op == FJ_OP_PRIMS_ARGMIN)
					plan->may_fail = true;
			}
			if (rows <= 0)
				break;
			bool ordered = false;
			for (int i = 0; i < a.nreds; i++) {
				fj_op op = body->nodes[a.reds[i]].op;
				ordered |= op == FJ_OP_PRIMS_ARGMAX || op == FJ_OP_PRIMS_ARGMIN;
			}
			/* tests force a variant: "bpr", "tpr", "reg", "col" or "split" */
			const char *force = getenv("FUSEJIT_NVPTX_VARIANTS");
			int64_t nsplit = split_chunks(&a, is_inner, ordered, rows, len, force);
			int var = len <= 16 || (!is_inner && rows >= 2048) ? 1 : 0;
			if (var == 0 && !ordered && len > 0 && len <= 8 * 512)
				var = 2;
			if (!is_inner && !ordered && len > 16)
				var = 3;
			if (force && strcmp(force, "bpr") == 0)
				var = 0;
			else if (force && strcmp(force, "tpr") == 0)
				var = 1;
			else if (force && strcmp(force, "reg") == 0 && !ordered && len > 0 && len <= 8 * 512)
				var = 2;
			else if (force && strcmp(force, "col") == 0 && !ordered)
				var = 3;
			if (nsplit > 1)
				var = 4;
			unsigned gr = (unsigned)(rows > (1 << 20) ? (1 << 20) : rows);
			if (var == 1)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){1, grid_of(rows, 256), 256, 0};
			else if (var == 4) {
				int64_t tiles = ceil_div(rows, 32);
				unsigned y = col_groups(ceil_div(len, nsplit));
				int64_t grid = tiles * nsplit > (1 << 20) ? (1 << 20) : tiles * nsplit;
				plan->launch[plan->n++] = (fj_nvptx_launch_step){4, (unsigned)grid, 32 * y, 0};
				plan->workspace = (size_t)(split_counter_bytes(tiles) + (int64_t)a.nreds * 3 * tiles * nsplit * 32 * 8);
			}
			else if (var == 3) {
				unsigned y = col_groups(len);
				int64_t tiles = ceil_div(rows, 32);
				plan->launch[plan->n++] =
					(fj_nvptx_launch_step){3, (unsigned)(tiles > (1 << 20) ? (1 << 20) : tiles), 32 * y, 0};
			} else if (var == 2)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){2, gr, pow2_at_least(ceil_div(len, 8)), 0};
			else
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, gr, pow2_at_least(ceil_div(len, 8)), 0};
		} else {
			t = &body->values[body->results[0]].type;
			for (int i = 0; i < t->rank; i++)
				numel *= dimval(ud, t->dims[i]);
			if (numel <= 0)
				break;
			const char *force = getenv("FUSEJIT_NVPTX_VARIANTS"); /* "bpr": the scalar variant too */
			if (a.sched == FJ_RG_TRANSPOSE && tileable(body) && !(force && strcmp(force, "bpr") == 0)) {
				int64_t mm = dimval(ud, t->dims[t->rank - 2]), nn = dimval(ud, t->dims[t->rank - 1]);
				int64_t tiles = mm > 0 && nn > 0 ? numel / (mm * nn) * ceil_div(mm, 32) * ceil_div(nn, 32) : 0;
				plan->launch[plan->n++] =
					(fj_nvptx_launch_step){0, (unsigned)(tiles > (1 << 20) ? (1 << 20) : tiles), 256, 0};
			} else if (aligned16 && !(force && strcmp(force, "bpr") == 0))
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, grid_of(ceil_div(numel, 4), 256), 256, 0};
			else
				plan->launch[plan->n++] = (fj_nvptx_launch_step){1, grid_of(numel, 256), 256, 0};
		}
		break;
	}
	fj_rg_analysis_free(&a);
	(void)k;
	return FJ_OK;
}
