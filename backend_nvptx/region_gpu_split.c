/* region_gpu_split.c -- outer reductions split across blocks (_split), their
 * partial states merged through a workspace by the last block of each tile.
 * persistent_inner_outer, which merges the same way, is in
 * region_gpu_inner_outer.c. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

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
bool fj_gpu_split_ok(const fj_rg_analysis *a)
{
	if (a->nreds == 0 || a->nphases != 1 || a->sched == FJ_RG_MATMUL || a->sched == FJ_RG_SCAN ||
	    a->sched == FJ_RG_TAKE || a->sched == FJ_RG_GATHER || a->sched == FJ_RG_SCATTER)
		return false;
	return !a->ordered;
}

/* The chunks of a split reduction (_split), or 0 when _split is not used:
 * outer reductions whose tiles of 32 rows give fewer than half of the
 * blocks that fill the device, with rows long enough to split (at least 2
 * chunks of SPLIT_MIN positions); enough chunks for about that many blocks:
 * its SMs x the blocks of 256 threads its register file holds at 32
 * registers a thread, at most 8 (an H100: 132 x 8 = 1056). Forced
 * ("split"): any region that has the variant, in chunks of about 32
 * positions. */
#define SPLIT_MIN 512
int64_t fj_gpu_split_chunks(const fj_gpu_sizes *s, bool is_inner, bool ordered, int64_t rows, int64_t len)
{
	if (!fj_gpu_split_ok(s->a) || ordered || len <= 0)
		return 0;
	int64_t tiles = fj_gpu_ceil_div(rows, 32);
	if (fj_gpu_forced(s, "split")) {
		int64_t n = fj_gpu_ceil_div(len, 32);
		return n < 2 ? 2 : n > 64 ? 64 : n;
	}
	int64_t per_sm = (int64_t)s->lim->regs_per_sm / (256 * 32);
	int64_t blocks = (int64_t)s->lim->sm_count * (per_sm < 1 ? 1 : per_sm > 8 ? 8 : per_sm);
	if (s->force || is_inner || tiles * 2 > blocks || len < 2 * SPLIT_MIN)
		return 0;
	int64_t n = blocks / tiles, most = len / SPLIT_MIN;
	return n < most ? n : most;
}

/* Bytes of counters before the partials (16-byte aligned). */
int64_t fj_gpu_split_counter_bytes(int64_t tiles) { return (tiles + 3) / 4 * 16; }

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
void fj_gpu_device_fence(gk *k)
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

fj_status fj_gpu_emit_split(gk *k)
{
	fj_cg *cg = k->cg;
	redctx rc;
	k->want_ws = true;
	fj_status st = fj_gpu_red_begin(k, &rc, "_split", COL_BLOCK, 0);
	k->want_ws = false;
	if (st != FJ_OK)
		return st;
	const fj_rg_analysis *a = k->a;
	V sh[FJ_RG_MAX_REDS][3];
	fj_gpu_col_setup(k, &rc, sh);
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
	fj_gpu_gloop_begin(k, &il, k->ctaid, items, k->nctaid, "item");
	V tile = LLVMBuildUDiv(B, il.iv, nsplit, "");
	V chunk_i = LLVMBuildURem(B, il.iv, nsplit, "");
	V row = add(k, mul(k, tile, i64c(k, 32)), tx);
	V ok = ult(k, row, rc.rows);
	V rowc = sel(k, ok, row, i64c(k, 0));
	V ridx[FJ_MAX_RANK];
	fj_gpu_unravel(k, rc.dv, rc.rdims, rc.nr, rowc, ridx);
	/* stage 1: this chunk's partial states */
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_reset(&k->r, &rc.acc[i]);
	V j0 = mul(k, chunk_i, chunk);
	V j1 = add(k, j0, chunk);
	j1 = sel(k, slt(k, j1, rc.len), j1, rc.len);
	fj_cg_if c0;
	fj_gpu_if_begin(k, &c0, ok);
	gloop jl;
	fj_gpu_gloop_begin(k, &jl, add(k, j0, ty), j1, ny, "pos");
	fj_gpu_step_phase(k, &rc, 0, ridx, jl.iv);
	fj_gpu_gloop_end(k, &jl);
	fj_gpu_if_end(k, &c0);
	for (int i = 0; i < a->nreds; i++)
		fj_gpu_col_merge_groups(k, &rc.acc[i], sh[i], tx, ty0, ny);
	fj_cg_if c1;
	fj_gpu_if_begin(k, &c1, ty0);
	for (int i = 0; i < a->nreds; i++) {
		V vals[3];
		fj_rg_acc_load(&k->r, &rc.acc[i], vals);
		for (int s = 0; s < rc.acc[i].n; s++)
			LLVMBuildStore(B, vals[s], split_slot(k, part, i, s, items, il.iv, tx));
	}
	fj_gpu_if_end(k, &c1);
	/* the partials visible device-wide before the count says so */
	fj_gpu_device_fence(k);
	cg->target->barrier(cg);
	fj_cg_if c2;
	fj_gpu_if_begin(k, &c2, tid0);
	V cnt = LLVMBuildInBoundsGEP2(B, cg->t_i32, k->wsp, &tile, 1, "");
	V old = LLVMBuildAtomicRMW(B, LLVMAtomicRMWBinOpAdd, cnt, fj_cg_i32(cg, 1), LLVMAtomicOrderingMonotonic, 0);
	V is_last = LLVMBuildICmp(B, LLVMIntEQ, zx64(k, old), LLVMBuildSub(B, nsplit, i64c(k, 1), ""), "");
	LLVMBuildStore(B, LLVMBuildZExt(B, is_last, cg->t_i32, ""), last_sh);
	fj_gpu_if_end(k, &c2);
	cg->target->barrier(cg);
	V last = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildLoad2(B, cg->t_i32, last_sh, ""), fj_cg_i32(cg, 0), "");
	/* stage 2 (the tile's last block): every thread merges its row's partials in chunk order */
	fj_cg_if c3;
	fj_gpu_if_begin(k, &c3, last);
	fj_gpu_device_fence(k);
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_reset(&k->r, &rc.acc[i]);
	gloop sl;
	fj_gpu_gloop_begin(k, &sl, i64c(k, 0), nsplit, i64c(k, 1), "chunk");
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
	fj_gpu_gloop_end(k, &sl);
	for (int i = 0; i < a->nreds; i++)
		fj_rg_acc_finish(&k->r, &rc.acc[i], rc.len);
	fj_cg_if c4;
	fj_gpu_if_begin(k, &c4, ok);
	fj_gpu_write_row(k, &rc, ridx, row, ty, ny, ty0);
	fj_gpu_if_end(k, &c4);
	fj_cg_if c5;
	fj_gpu_if_begin(k, &c5, tid0);
	LLVMBuildStore(B, fj_cg_i32(cg, 0), LLVMBuildInBoundsGEP2(B, cg->t_i32, k->wsp, &tile, 1, ""));
	fj_gpu_if_end(k, &c5);
	fj_gpu_if_end(k, &c3);
	fj_gpu_gloop_end(k, &il);
	return fj_gpu_entry_end(k);
}
