/* region_internal.h -- small helpers shared by the files of the region code
 * generator (region.c: analysis, region_eval.c: evaluator, region_acc.c:
 * accumulators). Private to codegen/. */
#ifndef FJ_REGION_INTERNAL_H
#define FJ_REGION_INTERNAL_H

#include "codegen/region.h"

#define B (r->cg->b)

/* A reduction dim d of a rank-`rank` value, normalised (0 when out of range). */
static inline int norm_dim(int64_t d, int rank)
{
	int rr = rank ? rank : 1;
	if (d < 0)
		d += rr;
	return d < 0 || d >= rr ? 0 : (int)d;
}

/* The dims reduction n reduces of its rank-`rank` operand, as a bit mask
 * (region.c). */
uint32_t fj_rg_red_mask(const fj_context *ctx, const fj_node *n, int rank);

static inline bool same_dims(const fj_type *a, const fj_type *b)
{
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return false;
	return true;
}

/* ---- small IR helpers ---- */

static inline LLVMValueRef c64(fj_rg *r, int64_t v) { return fj_cg_i64(r->cg, v); }
static inline LLVMValueRef iadd(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWAdd(B, x, y, ""); }
static inline LLVMValueRef isub(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWSub(B, x, y, ""); }
static inline LLVMValueRef imul(fj_rg *r, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWMul(B, x, y, ""); }
static inline LLVMValueRef icmp(fj_rg *r, LLVMIntPredicate p, LLVMValueRef x, LLVMValueRef y)
{
	return LLVMBuildICmp(B, p, x, y, "");
}
static inline LLVMValueRef sel(fj_rg *r, LLVMValueRef c, LLVMValueRef x, LLVMValueRef y)
{
	return LLVMBuildSelect(B, c, x, y, "");
}
static inline LLVMValueRef smax(fj_rg *r, LLVMValueRef x, LLVMValueRef y)
{
	return sel(r, icmp(r, LLVMIntSGT, x, y), x, y);
}
static inline LLVMValueRef smin(fj_rg *r, LLVMValueRef x, LLVMValueRef y)
{
	return sel(r, icmp(r, LLVMIntSLT, x, y), x, y);
}
static inline fj_dtype vdt(fj_rg *r, fj_vid v) { return r->body->values[v].type.dtype; }

#endif
