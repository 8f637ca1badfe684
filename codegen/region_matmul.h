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
 * bound the matmul result to its value there (fj_rg_bind). */
typedef struct fj_rg_host_mm {
	fj_cg_kernel *k;
	fj_rg *r;
	LLVMValueRef lo, hi;
	void (*store)(void *ud, fj_rg_point *p);
	void *ud;
} fj_rg_host_mm;

/* Does the packed template handle region a (a float matmul of rank 2 or 3
 * whose result 0 has D's shape)? Else the caller keeps its simple loop. */
bool fj_rg_host_matmul_handles(const fj_rg_analysis *a);

/* Emits the region's body; sets k->par_out / par_mask. */
fj_status fj_rg_host_matmul(fj_cg *cg, const fj_rg_host_mm *hm);

#endif
