/* kernel_abi.c -- the kernel ABI's views, dims and parameter attributes, one
 * implementation for every kernel shape: the per-node host kernels
 * (kernel.c), the host region kernels (region_host.c) and the GPU entries
 * (backend_nvptx/region_gpu.c). Each ABI passes every operand's and result's
 * sizes in one i64 array (cg.h); the views built from it are dense and
 * row-major, their strides products of the sizes, computed once in the
 * entry block. */
#include <string.h>

#include "codegen/cg.h"

void fj_cg_add_attr(fj_cg *cg, LLVMValueRef f, int idx, const char *name, uint64_t val)
{
	unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
	LLVMAddAttributeAtIndex(f, (LLVMAttributeIndex)idx, LLVMCreateEnumAttribute(cg->llctx, kind, val));
}

LLVMValueRef fj_cg_load_at(fj_cg *cg, LLVMTypeRef ty, LLVMValueRef base, int64_t i, const char *name)
{
	LLVMValueRef ix = fj_cg_i64(cg, i);
	LLVMValueRef p = LLVMBuildInBoundsGEP2(cg->b, ty, base, &ix, 1, "");
	LLVMValueRef v = LLVMBuildLoad2(cg->b, ty, p, name);
	LLVMSetAlignment(v, 8);
	/* The argument arrays are never written by the kernel. */
	return v;
}

void fj_cg_make_view(fj_cg *cg, fj_cg_tensor *t, LLVMValueRef ptr, fj_dtype dt, int rank, LLVMValueRef dims,
                     int64_t *di)
{
	memset(t, 0, sizeof *t);
	t->ptr = ptr;
	t->dtype = dt;
	t->rank = rank;
	for (int k = 0; k < rank; k++)
		t->dim[k] = fj_cg_load_at(cg, cg->t_i64, dims, (*di)++, "d");
	LLVMValueRef s = fj_cg_i64(cg, 1);
	for (int k = rank - 1; k >= 0; k--) {
		t->stride[k] = s;
		s = LLVMBuildNSWMul(cg->b, s, t->dim[k], "");
	}
	t->numel = s;
}

LLVMValueRef fj_cg_param_ptr(fj_cg *cg, void *fn, uint32_t i)
{
	(void)cg;
	return LLVMGetParam((LLVMValueRef)fn, i);
}

void fj_cg_node_views(fj_cg *cg, const fj_graph *g, const fj_node *n, LLVMValueRef dims, fj_cg_ptr_fn ptr_of,
                      void *ud, fj_cg_operand *in, fj_cg_tensor *out, int64_t *di)
{
	memset(in, 0, n->nopnds * sizeof *in);
	for (uint32_t i = 0; i < n->nopnds; i++) {
		fj_cg_operand *o = &in[i];
		if (n->opnds[i] == FJ_NOVAL) {
			o->none = true;
			o->t.dtype = FJ_DT_F32;
			continue;
		}
		const fj_value *v = fj_val(g, n->opnds[i]);
		if (v->kind == FJ_VK_LITERAL) {
			o->literal = true;
			o->lit = v->lit;
			o->t.dtype = v->type.dtype;
			continue;
		}
		fj_cg_make_view(cg, &o->t, ptr_of(cg, ud, i), v->type.dtype, v->type.rank, dims, di);
	}
	for (uint32_t j = 0; j < n->nres; j++) {
		const fj_value *v = fj_val(g, n->res[j]);
		fj_cg_make_view(cg, &out[j], ptr_of(cg, ud, n->nopnds + j), v->type.dtype, v->type.rank, dims, di);
	}
}
