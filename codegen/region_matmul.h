/* region_matmul.h -- the host's packed, register-blocked matmul template
 * (codegen/region_matmul.c), called by the matmul template of
 * codegen/region_host.c for float matmul regions.
 */
#ifndef FJ_REGION_MATMUL_H
#define FJ_REGION_MATMUL_H

#include "codegen/region.h"

/* What the caller (region_host.c) lends the template: the kernel, the
 * evaluator, the [lo, hi) parameters, and its epilogue: `store` stores every
 * result of the region at a point of D (with idx set), after the template
 * bound the matmul result to its value there (fj_rg_bind). `out` (nout
 * views, may be NULL) are the views `store` writes the results through;
 * where `by_index(ud, j)` says that result j is stored at the point's
 * index in out[j] (of D's shape), the template may point out[j] at a row
 * buffer of its own for a while and stream the rows out from there. */
typedef struct fj_rg_host_mm {
	fj_cg_kernel *k;
	fj_rg *r;
	LLVMValueRef lo, hi;
	void (*store)(void *ud, fj_rg_point *p);
	fj_cg_tensor *out;
	uint32_t nout;
	bool (*by_index)(void *ud, uint32_t j);
	void *ud;
} fj_rg_host_mm;

/* The dim of body value v along which neighbouring indices read
 * neighbouring memory, following transposes and converts back to a region
 * operand (row-major: its last dim); -1 when unknown (computed values). It
 * picks the order of the packing loops (the matmul's and the attention
 * backward's): unit-stride reads vectorise, strided ones become gathers or
 * scalar copies. (At most 8 transposes and converts deep.) */
int fj_rg_fast_dim(const fj_rg *r, fj_vid v);

/* The register-blocked micro-kernel, shared with the attention template
 * (region_host_attention.c): C (= 0 when `first`, an i1) += A x B over kl
 * (i64) k's, C an MR x NRV*W block kept in MR*NRV vector registers: per k,
 * NRV vectors of B are loaded, MR scalars of A broadcast, MR*NRV
 * llvm.fmuladd issued. A: MR rows a_is (or a_isv) elements apart, its k's a_ks apart;
 * B: rows of NRV*W elements, b_ks apart; C: rows c_rs apart. Every B and C
 * vector must be W elements aligned. W: the target's register width in
 * elements of et (f32 or f64). */
#define FJ_RG_MICRO_MAX 32
typedef struct fj_rg_micro {
	LLVMTypeRef et, vt;
	int esz, w, mr, nrv;
	int64_t a_is, a_ks, b_ks, c_rs;
	LLVMValueRef a_isv;                 /* i64: A's row stride at run time, instead of a_is (NULL: a_is) */
	LLVMValueRef accv[FJ_RG_MICRO_MAX]; /* MR*NRV variables (fj_cg_var) */
} fj_rg_micro;
/* Sets the types and W for accumulation dtype acc (F32 or F64) and creates
 * the accumulators; the caller sets the strides. */
void fj_rg_micro_init(fj_cg *cg, fj_rg_micro *u, fj_dtype acc, int mr, int nrv);
void fj_rg_micro_emit(fj_cg *cg, const fj_rg_micro *u, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c,
                      LLVMValueRef kl, LLVMValueRef first);

/* p = (b, row, col) of a rank-3 matmul operand or result, (row, col) of a
 * rank-2 one (b unused). */
void fj_rg_batch_point(fj_rg_point *p, int rank, LLVMValueRef b, LLVMValueRef row, LLVMValueRef col);

/* The tiles [*t0, *t1) of ntiles (> 0) that a call for [lo, hi) of a
 * parallel space of `extent` elements runs (region_matmul.c's header: every
 * tile once over any partition of the space into calls). */
void fj_rg_tile_range(fj_cg *cg, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef extent, LLVMValueRef ntiles,
                      LLVMValueRef *t0, LLVMValueRef *t1);
/* aligned_alloc(64, bytes rounded up to 64) (NULL on failure), and free. */
LLVMValueRef fj_rg_aligned_alloc(fj_cg *cg, LLVMValueRef bytes);
void fj_rg_free(fj_cg *cg, LLVMValueRef p);

/* Does the packed template handle region a (a float matmul of rank 2 or 3
 * whose result 0 has D's shape)? Else the caller keeps its simple loop. */
bool fj_rg_host_matmul_handles(const fj_rg_analysis *a);

/* Emits the region's body; sets k->par_out / par_mask. */
fj_status fj_rg_host_matmul(fj_cg *cg, const fj_rg_host_mm *hm);

#endif
