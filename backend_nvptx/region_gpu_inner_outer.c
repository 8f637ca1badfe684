/* region_gpu_inner_outer.c -- persistent_inner_outer: a block per row (as
 * persistent_inner) whose row output pass also sums the outer reductions'
 * operands into column partials, merged across blocks in the same launch
 * (layer_norm's backward with grad_weight and grad_bias in one kernel). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

/* persistent_inner_outer with outer reductions. */
bool fj_gpu_io_ok(const fj_rg_analysis *a) { return a->sched == FJ_RG_PERSISTENT_INNER_OUTER && a->noreds > 0; }

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
 * the groups' [(group * noreds + o) * len + column] (fj_gpu_io_ws_bytes). Outer
 * reductions with one state value only (sum, prod, amax, amin). */
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
int64_t fj_gpu_io_ws_bytes(int64_t nb, int64_t noreds, int64_t len)
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
	fj_gpu_gloop_begin(k, &sl, i64c(k, 0), count, i64c(k, IO_UNROLL), "slices");
	V ld[IO_UNROLL][FJ_RG_MAX_REDS], in[IO_UNROLL];
	for (int u = 0; u < IO_UNROLL; u++) {
		V i = add(k, sl.iv, i64c(k, u));
		in[u] = slt(k, i, count);
		i = add(k, first, sel(k, in[u], i, last));
		for (int o = 0; o < nr; o++) {
			ld[u][o] = LLVMBuildLoad2(B, oacc[o].ty[0], fj_gpu_io_slot(k, area, i, o, len, col), "");
			LLVMSetVolatile(ld[u][o], 1);
		}
	}
	for (int u = 0; u < IO_UNROLL; u++) {
		fj_cg_if c;
		if (u > 0)
			fj_gpu_if_begin(k, &c, in[u]);
		for (int o = 0; o < nr; o++) {
			V other[3] = {ld[u][o], NULL, NULL};
			fj_rg_acc_merge(&k->r, &oacc[o], other);
		}
		if (u > 0)
			fj_gpu_if_end(k, &c);
	}
	fj_gpu_gloop_end(k, &sl);
}

/* Counts this block in the i32 counter at cnt (thread 0, after a fence
 * and a barrier) and tells every thread whether it was the last of `total`
 * (through the shared i32 at flag). */
static V io_arrive(gk *k, blockctx *bc, V cnt, V total, V flag)
{
	fj_cg *cg = k->cg;
	/* what this block wrote visible device-wide before the count says so */
	fj_gpu_device_fence(k);
	cg->target->barrier(cg);
	fj_cg_if c;
	fj_gpu_if_begin(k, &c, bc->tid0);
	V old = LLVMBuildAtomicRMW(B, LLVMAtomicRMWBinOpAdd, cnt, fj_cg_i32(cg, 1), LLVMAtomicOrderingMonotonic, 0);
	V is_last = LLVMBuildICmp(B, LLVMIntEQ, zx64(k, old), LLVMBuildSub(B, total, i64c(k, 1), ""), "");
	LLVMBuildStore(B, LLVMBuildZExt(B, is_last, cg->t_i32, ""), flag);
	fj_gpu_if_end(k, &c);
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

fj_status fj_gpu_emit_io(gk *k, bool reg)
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
	fj_status st = fj_gpu_red_begin(k, &rc, reg ? "_reg8" : "", reg ? REG_BLOCK : ROW_BLOCK,
	                                   reg ? 1 : MIN_BLOCKS); /* _reg8 at 1 block: see REG_MIN_BLOCKS */
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
	fj_gpu_block_setup(k, &rc, &bc);
	for (int o = 0; o < a->noreds; o++) {
		fj_rg_acc_init(&k->r, a->oreds[o], &oacc[o]);
		for (int e = 0; reg && e < REG_E; e++)
			fj_rg_acc_init(&k->r, a->oreds[o], &racc[o][e]);
	}
	char nm[48];
	snprintf(nm, sizeof nm, "io_last%u", k->nshared++);
	V last_sh = cg->target->shared_array(cg, cg->t_i32, 2, nm); /* group's last, all's last */
	/* the groups and the workspace's areas (fj_gpu_io_ws_bytes) */
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
	fj_gpu_thread_positions(k, &rc, &j0, &jend, &js);
	/* the slice's positions this thread accumulates in memory start at the
	 * identity (_reg8: those past its registers) */
	V jm0 = reg ? add(k, k->tid, mul(k, k->ntid, i64c(k, REG_E))) : j0;
	{
		gloop zl;
		fj_gpu_gloop_begin(k, &zl, jm0, jend, js, "init");
		for (int o = 0; o < a->noreds; o++) {
			V vals[3];
			fj_rg_acc_load(&k->r, &oacc[o], vals);
			LLVMBuildStore(B, vals[0], fj_gpu_io_slot(k, part, k->ctaid, o, rc.len, zl.iv));
		}
		fj_gpu_gloop_end(k, &zl);
	}
	gloop rl;
	fj_gpu_gloop_begin(k, &rl, k->ctaid, rc.rows, k->nctaid, "row");
	if (reg)
		fj_gpu_gloop_no_hoist(&rl);
	V ridx[FJ_MAX_RANK];
	fj_gpu_unravel(k, rc.dv, rc.rdims, rc.nr, rl.iv, ridx);
	regrow g;
	if (!reg) {
		fj_gpu_bpr_phases(k, &rc, &bc, ridx, j0, jend, js);
	} else {
		fj_gpu_reg_row_reduce(k, &rc, &bc, ridx, jm0, &g);
		/* the row's elements from the kept values, and the column partials */
		for (int e = 0; e < REG_E; e++) {
			V vals[MAXIO], xs[FJ_RG_MAX_REDS];
			fj_gpu_reg_outputs(k, &rc, &g, e, vals);
			for (int o = 0; o < a->noreds; o++) {
				fj_rg_point q = g.pts[e];
				xs[o] = fj_rg_eval(&k->r, k->body->nodes[a->oreds[o]].opnds[0], &q);
			}
			fj_cg_if c;
			fj_gpu_if_begin(k, &c, g.valid[e]);
			for (uint32_t j = 0; j < k->nout; j++)
				if (rc.space[j] == 'D')
					fj_cg_store(cg, &k->out[j], g.dlin[e], vals[j]);
			for (int o = 0; o < a->noreds; o++)
				fj_rg_acc_step(&k->r, &racc[o][e], xs[o], NULL);
			fj_gpu_if_end(k, &c);
		}
	}
	/* the rest of the row (all of it in the main entry) and its R outputs */
	fj_gpu_row_out(k, &rc, ridx, rl.iv, jm0, jend, js, bc.tid0, &(iocols){oacc, part});
	fj_gpu_gloop_end(k, &rl);
	io_unbind_rows(k);
	/* _reg8: the register partials to the slice */
	for (int e = 0; reg && e < REG_E; e++) {
		V j = add(k, k->tid, mul(k, k->ntid, i64c(k, e)));
		fj_cg_if c;
		fj_gpu_if_begin(k, &c, slt(k, j, rc.len));
		for (int o = 0; o < a->noreds; o++) {
			V vals[3];
			fj_rg_acc_load(&k->r, &racc[o][e], vals);
			LLVMBuildStore(B, vals[0], fj_gpu_io_slot(k, part, k->ctaid, o, rc.len, j));
		}
		fj_gpu_if_end(k, &c);
	}
	free(racc);
	/* level 1: the group's last block merges its slices into the group's
	 * partial, in block order */
	V glast = io_arrive(k, &bc, gcnt, gcount, last_sh);
	fj_cg_if c2;
	fj_gpu_if_begin(k, &c2, glast);
	fj_gpu_device_fence(k);
	{
		gloop gl;
		fj_gpu_gloop_begin(k, &gl, k->tid, rc.len, k->ntid, "gcol");
		for (int o = 0; o < a->noreds; o++)
			fj_rg_acc_reset(&k->r, &oacc[o]);
		io_merge_slices(k, oacc, part, gfirst, gcount, rc.len, gl.iv);
		for (int o = 0; o < a->noreds; o++) {
			V vals[3];
			fj_rg_acc_load(&k->r, &oacc[o], vals);
			LLVMBuildStore(B, vals[0], fj_gpu_io_slot(k, gpart, grp, o, rc.len, gl.iv));
		}
		fj_gpu_gloop_end(k, &gl);
	}
	fj_cg_if c3;
	fj_gpu_if_begin(k, &c3, bc.tid0);
	LLVMBuildStore(B, fj_cg_i32(cg, 0), gcnt);
	fj_gpu_if_end(k, &c3);
	/* level 2: the last group's merger merges the group partials in group
	 * order, finishes the outer reductions, stores the column results */
	V last = io_arrive(k, &bc, k->wsp, ngroups, flag_all);
	fj_cg_if c4;
	fj_gpu_if_begin(k, &c4, last);
	fj_gpu_device_fence(k);
	gloop cl;
	fj_gpu_gloop_begin(k, &cl, k->tid, rc.len, k->ntid, "col");
	for (int o = 0; o < a->noreds; o++)
		fj_rg_acc_reset(&k->r, &oacc[o]);
	io_merge_slices(k, oacc, gpart, i64c(k, 0), ngroups, rc.len, cl.iv);
	fj_rg_col_finish(&k->r, oacc, rc.rows);
	V kidx[FJ_MAX_RANK];
	fj_gpu_unravel(k, rc.dv, rc.kdims, rc.nk, cl.iv, kidx);
	fj_rg_col_store(&k->r, cl.iv, kidx);
	fj_gpu_gloop_end(k, &cl);
	fj_cg_if c5;
	fj_gpu_if_begin(k, &c5, bc.tid0);
	LLVMBuildStore(B, fj_cg_i32(cg, 0), k->wsp);
	fj_gpu_if_end(k, &c5);
	fj_gpu_if_end(k, &c4);
	fj_gpu_if_end(k, &c2);
	return fj_gpu_entry_end(k);
}

/* ---- the family: rows and plan ---- */

static fj_status emit_io_main(gk *k) { return fj_gpu_emit_io(k, false); }
static fj_status emit_io_reg(gk *k) { return fj_gpu_emit_io(k, true); }

static const fj_gpu_variant io_variants[] = {
	{"", NULL, emit_io_main},     /* the column partials in the workspace */
	{"_reg8", NULL, emit_io_reg}, /* ... in registers */
};

/* _reg8 for rows up to REG_E * REG_BLOCK positions without argmax/argmin,
 * else the main entry (partials in the workspace); blocks of about len/8
 * threads; a persistent grid: the blocks that fit at once on the device's
 * SMs (1 to 4 each, by its register file: up to 128 registers a thread in
 * _reg8, about 64 in the main entry), never more blocks than rows. The
 * workspace holds a slice per block (noreds x len states) and a partial per
 * group of blocks (fj_gpu_emit_io's two-level merge), so no more blocks
 * than fill the GPU once (a 4096-wide layer_norm on an H100's 132 SMs: 132
 * blocks of 512 in 11 groups of 12, 9.4 MB of partials; the last group's
 * merger and the final one read 23 slices, 1.5 MB).
 * Forced (the nvptx_variants setting): "bpr" the main entry, "reg" _reg8 where
 * it applies. Rows = 0 still launches one block (the column results: sums
 * of nothing). */
static fj_status io_choose(const fj_gpu_sizes *s, fj_nvptx_plan *plan)
{
	const fj_rg_analysis *a = s->a;
	const fj_graph *body = a->node->body;
	int64_t rows, len;
	fj_gpu_rows_len(s, a->dom, &rows, &len);
	for (int i = 0; i < a->nreds; i++)
		plan->may_fail |= fj_gpu_red_may_fail(body->nodes[a->reds[i]].op, true);
	for (int o = 0; o < a->noreds; o++)
		plan->may_fail |= fj_gpu_red_may_fail(body->nodes[a->oreds[o]].op, false);
	if (rows <= 0 && len <= 0)
		return FJ_OK;
	bool reg = !a->ordered && len > 0 && len <= REG_E * REG_BLOCK && !fj_gpu_forced(s, "bpr");
	unsigned block = fj_gpu_pow2_at_least(fj_gpu_ceil_div(len, REG_E));
	int64_t per_sm = (int64_t)s->lim->regs_per_sm / ((reg ? 128 : 64) * (int64_t)block);
	per_sm = per_sm < 1 ? 1 : per_sm > 4 ? 4 : per_sm;
	int64_t grid = (int64_t)s->lim->sm_count * per_sm;
	if (grid > rows)
		grid = rows;
	if (grid < 1)
		grid = 1;
	plan->workspace = (size_t)fj_gpu_io_ws_bytes(grid, a->noreds, len > 0 ? len : 0);
	return fj_gpu_launch(s, plan, reg ? "_reg8" : "", (unsigned)grid, block, 0);
}

const fj_gpu_family fj_gpu_io_family = {
	"persistent_inner_outer", fj_gpu_io_ok, io_variants, FJ_ARRAY_LEN(io_variants), io_choose,
};
