/* region_gpu.c -- GPU kernel templates for fused regions (fusion.kernel ->
 * PTX), on the shared region analysis and evaluator of codegen/region.h.
 * This file: the entries' plumbing (parameters, views, loops) and the list
 * of template families; each family lives in its own file with its rows of
 * the variant table {suffix, applies, emit} and its plan choice (choose):
 * region_gpu_pointwise.c (pointwise, transpose), region_gpu_reduce.c (the
 * row reductions; their _split in region_gpu_split.c),
 * region_gpu_inner_outer.c (persistent_inner_outer), region_gpu_matmul.c,
 * region_gpu_index.c (take, gather, scatter, scan). What plans share (the
 * device's SMs and registers, launches named by entry) is in
 * region_gpu_plan.c; compilation (variants in parallel, the cache of
 * compiled regions) in compile_gpu.c. What they share: region_gpu_internal.h.
 *
 * Every region compiles to ONE PTX module holding its variants (entries;
 * compiled in parallel, one LLVM module each, and joined: see "a region's
 * variants compiled in parallel" in compile_gpu.c);
 * the launch plan (fj_nvptx_plan_region) picks a variant and the grid/block
 * sizes from the bound sizes and the device at run time (the nvptx_variants
 * setting forces one, for tests). Entry names: the kernel attribute for the
 * main variant, plus a suffix for the others. The ABI is nvptx.h's. The same templates run on the
 * host emulator (emu.c) through the target hooks of fj_cg_target.
 *
 * Templates (schedule -> entries):
 *   pointwise             <name>     grid-stride over the result in chunks of
 *                                    16 bytes of its narrowest tensor (4
 *                                    f32, 8 f16/bf16: fj_gpu_vec_width):
 *                                    the operands of the result's shape
 *                                    loaded and the results stored as one
 *                                    16-byte vector each (ld.global.nc.v4,
 *                                    st.global.v4), scalar tail; needs every
 *                                    operand and result pointer 16-byte
 *                                    aligned (the plan's aligned16);
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

/* ---- entries ---- */

/* Starts entry `name`: void(ptr operands..., ptr results..., ptr dims, ptr
 * status[, ptr workspace]) -- the workspace when k->want_ws (read and
 * written, atomics: no noalias/readonly). Blocks of at most maxntid
 * threads, of which minblocks fit on an SM at once (the registers that
 * ptxas may use: tests/nvptx/budgets.tsv checks them); align: the
 * alignment of the operand and result pointers (0: their elements'). */
fj_status fj_gpu_entry_begin(gk *k, const char *suffix, unsigned maxntid, unsigned minblocks, unsigned align)
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
		fj_nvptx_mark_kernel(k->c, f, maxntid, minblocks);
	fj_cg_add_attr(cg, f, (int)LLVMAttributeFunctionIndex, "nounwind", 0);
	for (uint32_t i = 0; i < ndims_i + 2; i++) {
		fj_cg_add_attr(cg, f, (int)i + 1, "noalias", 0);
		fj_cg_add_attr(cg, f, (int)i + 1, "nocapture", 0);
		bool input = i < n->nopnds || i == ndims_i;
		if (input)
			fj_cg_add_attr(cg, f, (int)i + 1, "readonly", 0);
	}
	/* Every pointer's alignment, which the PTX declares (.ptr .align, so
	 * that a driver can check the arguments): `align` for the tensors of a
	 * vectorised entry, else their element's; the sizes are i64, the status
	 * an i32, the workspace holds f64 partials. */
	for (uint32_t i = 0; i < np; i++) {
		unsigned al = i == ndims_i ? 8 : i == ndims_i + 1 ? 4 : i > ndims_i ? 16 : align;
		if (!al) {
			fj_vid v = i < n->nopnds ? n->opnds[i] : n->res[i - n->nopnds];
			al = v == FJ_NOVAL ? 1 : (unsigned)fj_dtype_size(k->a->g->values[v].type.dtype);
		}
		fj_cg_add_attr(cg, f, (int)i + 1, "align", al ? al : 1);
	}
	cg->entry = LLVMAppendBasicBlockInContext(cg->llctx, f, "entry");
	LLVMPositionBuilderAtEnd(cg->b, cg->entry);
	V dims = LLVMGetParam(f, ndims_i);
	k->statusp = LLVMGetParam(f, ndims_i + 1);
	k->wsp = k->want_ws ? LLVMGetParam(f, ndims_i + 2) : NULL;
	int64_t di = 0;
	memset(k->in, 0, sizeof k->in);
	fj_cg_node_views(cg, k->a->g, n, dims, fj_cg_param_ptr, f, k->in, k->out, &di);
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

fj_status fj_gpu_entry_end(gk *k)
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

void fj_gpu_gloop_begin(gk *k, gloop *l, V start, V hi, V step, const char *name)
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
	l->no_hoist = false;
	fj_rg_scope_push(&k->r);
}

void fj_gpu_gloop_no_hoist(gloop *l) { l->no_hoist = true; }

void fj_gpu_gloop_end(gk *k, gloop *l)
{
	fj_rg_scope_pop(&k->r);
	V next = LLVMBuildNSWAdd(B, l->phi, l->step, "");
	LLVMBasicBlockRef cur = LLVMGetInsertBlock(B);
	LLVMValueRef br = LLVMBuildBr(B, l->head);
	LLVMAddIncoming(l->phi, &next, &cur, 1);
	if (l->no_hoist) {
		LLVMMetadataRef dis = fj_cg_loop_prop(k->cg, "llvm.licm.disable", NULL);
		fj_cg_loop_md(k->cg, br, &dis, 1);
	}
	LLVMPositionBuilderAtEnd(B, l->exit);
}

void fj_gpu_if_begin(gk *k, fj_cg_if *c, V cond)
{
	fj_cg_if_begin(k->cg, c, cond);
	fj_rg_scope_push(&k->r);
}

void fj_gpu_if_end(gk *k, fj_cg_if *c)
{
	fj_rg_scope_pop(&k->r);
	fj_cg_if_end(k->cg, c);
}

/* ---- helpers on shapes ---- */

/* Row-major linear index of idx over v's sizes. */
V fj_gpu_lin_of(gk *k, fj_vid v, const V *idx, int rank)
{
	V l = i64c(k, 0);
	for (int d = 0; d < rank; d++)
		l = add(k, mul(k, l, fj_rg_dim(&k->r, v, d)), idx[d]);
	return l;
}

void fj_gpu_unravel(gk *k, fj_vid v, const int *which, int n, V lin, V *idx)
{
	V dims[FJ_MAX_RANK];
	for (int i = 0; i < n; i++)
		dims[i] = fj_rg_dim(&k->r, v, which[i]);
	fj_cg_unravel(k->cg, lin, dims, n, idx);
}

/* Stores every result at linear position `lin` of its own shape. */
void fj_gpu_store_all_lin(gk *k, V lin)
{
	for (uint32_t j = 0; j < k->nout; j++) {
		fj_vid v = k->body->results[j];
		fj_rg_point p;
		fj_rg_point_lin(&p, k->body->values[v].type.rank, lin);
		fj_rg_store(&k->r, &k->out[j], lin, v, &p);
	}
}

V fj_gpu_result_numel(gk *k) { return fj_rg_numel(&k->r, k->body->results[0]); }

/* ---- one region -> its entries: the variant table ---- */

/* The families, in the order they are asked (`takes`): pointwise, which
 * takes every region, last. */
static const fj_gpu_family *const families[] = {
	&fj_gpu_matmul_family, &fj_gpu_index_family, &fj_gpu_io_family, &fj_gpu_rows_family, &fj_gpu_pointwise_family,
};

const fj_gpu_family *fj_gpu_family_of(const fj_rg_analysis *a)
{
	for (size_t i = 0; i < FJ_ARRAY_LEN(families); i++)
		if (families[i]->takes(a))
			return families[i];
	FJ_UNREACHABLE();
}

/* The rows of a's family that apply to a, in order (at most
 * FJ_NVPTX_MAX_VARIANTS: a unit test checks every family's rows). */
static int region_rows(const fj_rg_analysis *a, const fj_gpu_variant **rows)
{
	const fj_gpu_family *f = fj_gpu_family_of(a);
	int n = 0;
	for (int i = 0; i < f->nvariants && n < FJ_NVPTX_MAX_VARIANTS; i++)
		if (!f->variants[i].applies || f->variants[i].applies(a))
			rows[n++] = &f->variants[i];
	return n;
}

/* Which entries a region has (the main one first). */
int fj_gpu_region_variants(const fj_rg_analysis *a, const char **suffix)
{
	const fj_gpu_variant *rows[FJ_NVPTX_MAX_VARIANTS];
	int n = region_rows(a, rows);
	for (int v = 0; v < n; v++)
		suffix[v] = rows[v]->suffix;
	return n;
}

/* Emits row r and checks that the entry it emitted carries r's suffix. */
static fj_status emit_variant(gk *k, const fj_gpu_variant *r)
{
	k->fn = NULL;
	fj_status st = r->emit(k);
	if (st != FJ_OK)
		return st;
	char want[160];
	snprintf(want, sizeof want, "%s%s", k->prefix, r->suffix);
	size_t len = 0;
	const char *name = k->fn ? LLVMGetValueName2(k->fn, &len) : "";
	if (strlen(want) != len || memcmp(want, name, len) != 0)
		return fj_error_status(k->cg->ctx, FJ_ERR_INTERNAL, k->n->loc,
		                       "nvptx: the variant table's entry %s was emitted as %.*s", want, (int)len, name);
	return FJ_OK;
}

/* Emits the entries of region `node` of g into cg's module: all variants
 * (variant < 0) or only that one (0: the main one). */
fj_status fj_gpu_emit_region(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int variant,
                             const fj_rg_analysis *a)
{
	if (!cg->target->thread_idx || !cg->target->barrier || !cg->target->shuffle_xor || !cg->target->shared_array ||
	    !cg->target->mma_m16n8k16)
		return fj_error_status(cg->ctx, FJ_ERR_INTERNAL, (fj_loc){0}, "nvptx: the target has no GPU hooks");
	const fj_node *n = &g->nodes[node];
	if (n->nopnds > MAXIO || n->nres > MAXIO)
		return fj_error_status(cg->ctx, FJ_ERR_UNSUPPORTED, n->loc, "fusion.kernel: too many operands or results");
	const fj_gpu_variant *rows[FJ_NVPTX_MAX_VARIANTS];
	int nv = region_rows(a, rows);
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
		st = emit_variant(k, rows[v]);
	free(k);
	return st;
}

fj_status fj_gpu_analyze(fj_context *ctx, const fj_graph *g, uint32_t node, fj_rg_analysis *a)
{
	fj_status st = fj_rg_analyze(ctx, g, node, a);
	if (st == FJ_OK && (a->sched == FJ_RG_ATTENTION || a->sched == FJ_RG_ATTENTION_BW)) {
		bool bw = a->sched == FJ_RG_ATTENTION_BW;
		fj_rg_analysis_free(a);
		return fj_error_status(ctx, FJ_ERR_UNSUPPORTED, g->nodes[node].loc,
		                       "fusion.kernel: schedule %s has no GPU kernel; fuse for the GPU without "
		                       "attention=true (the default)", bw ? "attention_bw" : "attention");
	}
	return st;
}

/* The entry name of variant v. */
void fj_gpu_entry_name(const fj_graph *g, uint32_t node, const fj_rg_analysis *a, int v, char entry[112])
{
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	fj_gpu_region_variants(a, suffix);
	const fj_node *n = &g->nodes[node];
	snprintf(entry, 112, "%s%s", n->kernel ? n->kernel : "fj_kernel", suffix[v]);
}

fj_status fj_nvptx_emit_region(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int *nvariants,
                                char entries[][112])
{
	fj_rg_analysis a;
	fj_status st = fj_gpu_analyze(cg->ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	*nvariants = fj_gpu_region_variants(&a, suffix);
	st = fj_gpu_emit_region(c, cg, g, node, -1, &a);
	for (int v = 0; st == FJ_OK && v < *nvariants; v++)
		fj_gpu_entry_name(g, node, &a, v, entries[v]);
	fj_rg_analysis_free(&a);
	return st;
}

fj_status fj_nvptx_emit_region_variant(fj_nvptx_comp *c, fj_cg *cg, const fj_graph *g, uint32_t node, int variant,
                                       int *nvariants, char entry[112])
{
	fj_rg_analysis a;
	fj_status st = fj_gpu_analyze(cg->ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	const char *suffix[FJ_NVPTX_MAX_VARIANTS];
	*nvariants = fj_gpu_region_variants(&a, suffix);
	st = fj_gpu_emit_region(c, cg, g, node, variant, &a);
	if (st == FJ_OK)
		fj_gpu_entry_name(g, node, &a, variant, entry);
	fj_rg_analysis_free(&a);
	return st;
}
