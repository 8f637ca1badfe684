/* region_gpu_plan.c -- launch plans: a compiled region's variants and
 * grid/block sizes, chosen from the bound sizes and the device at run time.
 * The choice is the region's template family's (its choose, in its own
 * file: region_gpu_internal.h's variant table); this file is what they
 * share: the sizes, the device, and a launch named by its entry. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

unsigned fj_gpu_pow2_at_least(int64_t x)
{
	unsigned p = 32;
	while (p < ROW_BLOCK && (int64_t)p < x)
		p *= 2;
	return p;
}

unsigned fj_gpu_grid_of(int64_t items, unsigned block)
{
	int64_t g = fj_gpu_ceil_div(items, block);
	if (g > (1 << 20))
		g = 1 << 20;
	return g < 1 ? 1 : (unsigned)g;
}

int64_t fj_gpu_numel(const fj_gpu_sizes *s, const fj_type *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= s->dimval(s->ud, t->dims[i]);
	return n;
}

void fj_gpu_rows_len(const fj_gpu_sizes *s, const fj_type *t, int64_t *rows, int64_t *len)
{
	*rows = *len = 1;
	for (int i = 0; i < t->rank; i++) {
		int64_t d = s->dimval(s->ud, t->dims[i]);
		if (s->a->kmask & (1u << i))
			*len *= d;
		else
			*rows *= d;
	}
}

bool fj_gpu_red_may_fail(fj_op op, bool arg)
{
	return op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN ||
	       (arg && (op == FJ_OP_PRIMS_ARGMAX || op == FJ_OP_PRIMS_ARGMIN));
}

fj_status fj_gpu_launch(const fj_gpu_sizes *s, fj_nvptx_plan *plan, const char *suffix, unsigned grid,
                        unsigned block, unsigned shared)
{
	const char *sfx[FJ_NVPTX_MAX_VARIANTS];
	int nv = fj_gpu_region_variants(s->a, sfx), v = 0;
	while (v < nv && strcmp(sfx[v], suffix) != 0)
		v++;
	if (v == nv || plan->n == (int)FJ_ARRAY_LEN(plan->launch))
		return fj_error_status(s->ctx, FJ_ERR_INTERNAL, s->a->node->loc,
		                       "nvptx: the %s plan launches entry '%s', which the region %s", s->fam->name,
		                       suffix, v == nv ? "does not have" : "launches once too often");
	plan->launch[plan->n++] = (fj_nvptx_launch_step){v, grid, block, shared};
	return FJ_OK;
}

fj_status fj_nvptx_plan_region(const fj_nvptx_kernel *k, const fj_nvptx_limits *lim, const fj_graph *g,
                               uint32_t node, int64_t (*dimval)(void *ud, fj_dim d), void *ud, bool aligned16,
                               fj_nvptx_plan *plan)
{
	(void)k;
	memset(plan, 0, sizeof *plan);
	fj_context *ctx = fj_graph_ctx(g);
	if (!lim || !lim->sm_count || !lim->regs_per_sm)
		return fj_error_status(ctx, FJ_ERR_INVALID, (fj_loc){0},
		                       "nvptx: a launch plan needs the device's SM count and registers per SM (got %u, %u)",
		                       lim ? lim->sm_count : 0, lim ? lim->regs_per_sm : 0);
	fj_rg_analysis a;
	fj_status st = fj_gpu_analyze(ctx, g, node, &a);
	if (st != FJ_OK)
		return st;
	fj_gpu_sizes s = {
		.ctx = ctx, .a = &a, .fam = fj_gpu_family_of(&a), .lim = lim, .dimval = dimval, .ud = ud,
		.aligned16 = aligned16,
		.force = fj_context_settings(ctx)->nvptx_variants, /* forces a variant (tests) */
	};
	st = s.fam->choose(&s, plan);
	fj_rg_analysis_free(&a);
	return st;
}
