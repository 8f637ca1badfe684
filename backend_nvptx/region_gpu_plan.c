/* region_gpu_plan.c -- launch plans: a compiled region's variant and
 * grid/block sizes, chosen from the bound sizes at run time. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

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
	if (!fj_gpu_split_ok(a) || ordered || len <= 0)
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

/* persistent_inner_outer (fj_gpu_emit_io): _reg8 for rows up to REG_E * REG_BLOCK
 * positions without argmax/argmin, else the main entry (partials in the
 * workspace); blocks of about len/8 threads; a persistent grid: the blocks
 * that fit at once on IO_SMS SMs (1 to 4 each), never more blocks than
 * rows. The workspace holds a slice per block (noreds x len states) and a
 * partial per group of blocks (fj_gpu_emit_io's two-level merge), so no more
 * blocks than fill the GPU once (a 4096-wide layer_norm: 132 blocks of 512
 * in 11 groups of 12, 9.4 MB of partials; the last group's merger and the
 * final one read 23 slices, 1.5 MB).
 * Forced (the nvptx_variants setting): "bpr" the main entry, "reg" _reg8 where
 * it applies. Rows = 0 still launches one block (the column results: sums
 * of nothing). */
static void plan_io(const fj_rg_analysis *a, int64_t (*dimval)(void *ud, fj_dim d), void *ud, const char *force,
                    fj_nvptx_plan *plan)
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
	bool ordered = a->ordered;
	for (int i = 0; i < a->nreds; i++) {
		fj_op op = body->nodes[a->reds[i]].op;
		plan->may_fail |= op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN || op == FJ_OP_PRIMS_ARGMAX ||
		                  op == FJ_OP_PRIMS_ARGMIN;
	}
	for (int o = 0; o < a->noreds; o++) {
		fj_op op = body->nodes[a->oreds[o]].op;
		plan->may_fail |= op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN;
	}
	if (rows <= 0 && len <= 0)
		return;
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
	plan->workspace = (size_t)fj_gpu_io_ws_bytes(grid, a->noreds, len > 0 ? len : 0);
}

fj_status fj_nvptx_plan_region(const fj_nvptx_kernel *k, const fj_graph *g, uint32_t node,
                               int64_t (*dimval)(void *ud, fj_dim d), void *ud, bool aligned16,
                               fj_nvptx_plan *plan)
{
	memset(plan, 0, sizeof *plan);
	const fj_node *n = &g->nodes[node];
	const fj_graph *body = n->body;
	fj_context *ctx = fj_graph_ctx(g);
	/* the nvptx_variants setting forces a variant (tests) */
	const char *force = fj_context_settings(ctx)->nvptx_variants;
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
		if (fj_gpu_mma_ok(&a) && !(force && strcmp(force, "bpr") == 0)) {
			int64_t bt = ceil_div(d[t->rank - 2], MMA_BM) * ceil_div(d[t->rank - 1], MMA_BN);
			if (t->rank == 3)
				bt *= d[0];
			if (bt > 0)
				plan->launch[plan->n++] = (fj_nvptx_launch_step){0, grid_of(bt, 1), MMA_THREADS, 0};
		} else if (tiles > 0)
			plan->launch[plan->n++] =
				(fj_nvptx_launch_step){fj_gpu_mma_ok(&a) ? 1 : 0, grid_of(tiles, 1), TILE * TILE, 0};
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
		if (fj_gpu_io_ok(&a)) {
			plan_io(&a, dimval, ud, force, plan);
			break;
		}
		if (a.nreds) {
			const fj_node *r0 = &body->nodes[a.reds[0]];
			t = &body->values[r0->opnds[0]].type;
			int64_t rows = 1, len = 1;
			for (int i = 0; i < t->rank; i++) {
				d[i] = dimval(ud, t->dims[i]);
				if (a.kmask & (1u << i))
					len *= d[i];
				else
					rows *= d[i];
			}
			bool is_inner = a.inner; /* the region plan */
			for (int i = 0; i < a.nreds; i++) {
				fj_op op = body->nodes[a.reds[i]].op;
				if (op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN || op == FJ_OP_PRIMS_ARGMAX ||
				    op == FJ_OP_PRIMS_ARGMIN)
					plan->may_fail = true;
			}
			if (rows <= 0)
				break;
			bool ordered = a.ordered;
			/* tests force a variant: "bpr", "tpr", "reg", "col" or "split" */
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
				plan->workspace = (size_t)(fj_gpu_split_counter_bytes(tiles) + (int64_t)a.nreds * 3 * tiles * nsplit * 32 * 8);
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
			/* force "bpr": the scalar variant too */
			if (a.sched == FJ_RG_TRANSPOSE && fj_gpu_tileable(body) && !(force && strcmp(force, "bpr") == 0)) {
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
