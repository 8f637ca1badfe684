/* region_host_internal.h -- what the host template files share
 * (region_host*.c): the kernel being emitted (hctx), output classes, the
 * parallel space of a reduction region, loop nests over K, and each
 * template's entry, which region_host.c's emit_body picks. The templates
 * are described in region_host.c's opening comment. Private to codegen/. */
#ifndef FJ_REGION_HOST_INTERNAL_H
#define FJ_REGION_HOST_INTERNAL_H

#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "codegen/emit_common.h"
#include "codegen/region.h"
#include "codegen/region_matmul.h"

enum { TILE = 256 };
/* reduction_outer tiles: points of R per tile (region_host_outer.c) */
enum { OTILE = 2048 };

/* An output at least this large is streamed (non-temporal stores): smaller
 * ones are likely still in the last-level cache when the next kernel reads
 * them (region_host_inner.c measures it). */
enum { FJ_RH_STREAM_MIN_BYTES = 32 << 20 };

typedef struct hctx {
	fj_cg *cg;
	fj_cg_kernel *k;
	const fj_rg_analysis *a;
	const fj_graph *body;
	fj_rg r;
	fj_cg_operand *in;
	fj_cg_tensor *out;
	LLVMValueRef lo, hi;
	bool vec; /* force the vector width of inner loops (vectorisable()) */
	/* persistent_inner_outer: the workspace, the slot count S (the last
	 * entry of dims), and the slot being run (i64; NULL outside its loop) */
	LLVMValueRef ws, nslots, part;
	/* the inner templates' passes that prefetch the next row, pf_n of
	 * them: pass ph (nphases: the output pass) takes slice pf_slice[ph] of
	 * it, -1 none (region_host_inner.c, prefetch_plan) */
	int pf_n;
	int8_t pf_slice[FJ_RG_MAX_REDS + 1];
} hctx;

#define BB (h->cg->b)

static inline LLVMValueRef c64(hctx *h, int64_t v) { return fj_cg_i64(h->cg, v); }
static inline LLVMValueRef imin(hctx *h, LLVMValueRef a, LLVMValueRef b)
{
	return LLVMBuildSelect(BB, LLVMBuildICmp(BB, LLVMIntSLT, a, b, ""), a, b, "");
}
static inline int vrank(hctx *h, fj_vid v) { return h->body->values[v].type.rank; }

/* &arr[t] of an [OTILE x ty] stack array. */
static inline LLVMValueRef elem(hctx *h, LLVMTypeRef ty, LLVMValueRef arr, LLVMValueRef t)
{
	LLVMValueRef ix[2] = {c64(h, 0), t};
	return LLVMBuildInBoundsGEP2(BB, LLVMArrayType(ty, OTILE), arr, ix, 2, "");
}

/* ---- vector width and output classes (region_host.c) ---- */

/* Vectorise loop l with the region's width (see region_host.c), interleave
 * vector iterations side by side (fj_cg_loop_hints; FJ_CG_INTERLEAVE). */
void fj_rh_vector_width(hctx *h, fj_cg_loop *l, int interleave);

enum { OUT_D = FJ_RG_SPACE_D, OUT_R = FJ_RG_SPACE_R, OUT_C = FJ_RG_SPACE_C };

/* Is result j's value a D-sized output, an R-sized one, or (persistent_
 * inner_outer) a C-sized one? (the analysis decides: fj_rg_space) */
static inline int out_class(hctx *h, uint32_t j) { return h->a->vals[h->body->results[j]].space; }

/* Stores every result of class cls at a point of D or of R. */
void fj_rh_store_outputs(hctx *h, int cls, fj_rg_point *pt);
/* Stores result j at point pt: at pt's multi-index when `same` (the result
 * has the dims pt indexes), else at pt's linear index (D-linear when pt
 * has none), an order-preserving reshape's. */
void fj_rh_store_result(hctx *h, uint32_t j, bool same, fj_rg_point *pt);

/* ---- the parallel space of a reduction region (region_host.c) ---- */

bool fj_rh_pick_par_r(hctx *h);
void fj_rh_row_range(hctx *h, bool par, LLVMValueRef *rlo, LLVMValueRef *rhi);
LLVMValueRef fj_rh_red_count(hctx *h);

/* Loops over the K dims of D (outermost first): idx[d] for d in K. */
typedef struct knest {
	fj_cg_loop l[FJ_MAX_RANK];
	int n;
} knest;

void fj_rh_knest_begin(hctx *h, knest *kn, LLVMValueRef *idx);
void fj_rh_knest_end(hctx *h, knest *kn, int interleave);

/* ---- templates ---- */

void fj_rh_tpl_pointwise(hctx *h);  /* region_host_pointwise.c */
void fj_rh_tpl_inner(hctx *h);      /* region_host_inner.c */
void fj_rh_tpl_outer(hctx *h);      /* region_host_outer.c */
fj_status fj_rh_tpl_matmul(hctx *h);  /* region_host_opaque.c */
fj_status fj_rh_tpl_attention(hctx *h); /* region_host_attention.c */
fj_status fj_rh_tpl_attention_bw(hctx *h); /* region_host_attention_bw.c */
fj_status fj_rh_tpl_scan(hctx *h);
fj_status fj_rh_tpl_scatter(hctx *h);

/* ---- reductions along rows (region_host_inner.c) ---- */

/* The linear position within K of D point idx. */
LLVMValueRef fj_rh_kpos(hctx *h, LLVMValueRef *idx);
bool fj_rh_has_outputs(hctx *h, int cls);

/* ---- column sums of persistent_inner_outer (region_host_cols.c) ---- */

/* An output pass adds each point's fj_rh_col_values, of one row or of
 * several (region_host_inner.c's row groups), with one fj_rh_col_add. */
void fj_rh_col_values(hctx *h, fj_rg_point *p, LLVMValueRef *vals);
void fj_rh_col_add(hctx *h, LLVMValueRef *idx, LLVMValueRef (*vals)[FJ_RG_MAX_REDS], int n);
void fj_rh_col_row_done(hctx *h, LLVMValueRef row, LLVMValueRef rlo, LLVMValueRef rhi);
void fj_rh_col_merge(hctx *h);
void fj_rh_part_zero(hctx *h, LLVMValueRef s);

#endif
