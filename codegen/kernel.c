/* kernel.c -- per-node kernels: the op -> emitter table, the host kernel ABI
 * (cg.h) around an emitter, and the canonical kernel key for the cache.
 *
 * A kernel is `i32 (ptr ptrs, ptr dims, i64 lo, i64 hi)`. Its prologue loads
 * the data pointers and the sizes of every operand and result and builds
 * dense row-major views (strides are products of the sizes, computed once);
 * the emitter then writes the body and the kernel returns its status
 * variable. Sizes are never constants: one kernel serves every size.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/emit.h"
#include "codegen/region.h"

char fj_cg_bcast_kind(fj_dim din, fj_dim dout); /* emit_pointwise.c */

#define FAM(X, f) [FJ_OP_##X] = f
static const fj_cg_emit_fn emitters[FJ_OP_COUNT] = {
	/* layout and sources */
	FAM(ATEN_VIEW, fj_cg_emit_layout), FAM(ATEN_RESHAPE, fj_cg_emit_layout),
	FAM(ATEN_PERMUTE, fj_cg_emit_layout), FAM(ATEN_TRANSPOSE, fj_cg_emit_layout),
	FAM(ATEN_T, fj_cg_emit_layout), FAM(ATEN_EXPAND, fj_cg_emit_layout),
	FAM(ATEN_UNSQUEEZE, fj_cg_emit_layout), FAM(ATEN_SQUEEZE, fj_cg_emit_layout),
	FAM(ATEN_SLICE, fj_cg_emit_layout), FAM(ATEN_CAT, fj_cg_emit_layout),
	FAM(ATEN_FLIP, fj_cg_emit_layout), FAM(ATEN_CLONE, fj_cg_emit_layout),
	FAM(ATEN_DETACH, fj_cg_emit_layout), FAM(ATEN_ALIAS, fj_cg_emit_layout),
	FAM(ATEN_FULL, fj_cg_emit_layout), FAM(ATEN_ZEROS_LIKE, fj_cg_emit_layout),
	FAM(ATEN_ONES_LIKE, fj_cg_emit_layout), FAM(ATEN_FULL_LIKE, fj_cg_emit_layout),
	FAM(ATEN_NEW_ZEROS, fj_cg_emit_layout), FAM(ATEN_NEW_ONES, fj_cg_emit_layout),
	FAM(ATEN_NEW_FULL, fj_cg_emit_layout), FAM(ATEN_ARANGE, fj_cg_emit_layout),
	FAM(ATEN__RESHAPE_ALIAS, fj_cg_emit_layout), FAM(ATEN__UNSAFE_VIEW, fj_cg_emit_layout),
	FAM(PRIMS_BROADCAST_IN_DIM, fj_cg_emit_layout), FAM(PRIMS_RESHAPE, fj_cg_emit_layout),
	FAM(PRIMS_TRANSPOSE, fj_cg_emit_layout), FAM(PRIMS_SQUEEZE, fj_cg_emit_layout),
	FAM(PRIMS_SLICE, fj_cg_emit_layout), FAM(PRIMS_CAT, fj_cg_emit_layout),
	FAM(PRIMS_PAD, fj_cg_emit_layout), FAM(PRIMS_REV, fj_cg_emit_layout),
	FAM(PRIMS_FULL, fj_cg_emit_layout), FAM(PRIMS_IOTA, fj_cg_emit_layout),
	/* reductions and scans */
	FAM(ATEN_SUM, fj_cg_emit_reduction), FAM(ATEN_MEAN, fj_cg_emit_reduction),
	FAM(ATEN_AMAX, fj_cg_emit_reduction), FAM(ATEN_AMIN, fj_cg_emit_reduction),
	FAM(ATEN_PROD, fj_cg_emit_reduction), FAM(ATEN_LOGSUMEXP, fj_cg_emit_reduction),
	FAM(ATEN_VAR, fj_cg_emit_reduction), FAM(ATEN_VAR_MEAN, fj_cg_emit_reduction),
	FAM(ATEN_ARGMAX, fj_cg_emit_reduction), FAM(ATEN_ARGMIN, fj_cg_emit_reduction),
	FAM(PRIMS_SUM, fj_cg_emit_reduction), FAM(PRIMS_AMAX, fj_cg_emit_reduction),
	FAM(PRIMS_AMIN, fj_cg_emit_reduction), FAM(PRIMS_PROD, fj_cg_emit_reduction),
	FAM(PRIMS_VAR_MEAN, fj_cg_emit_reduction), FAM(PRIMS_ARGMAX, fj_cg_emit_reduction),
	FAM(PRIMS_ARGMIN, fj_cg_emit_reduction),
	FAM(ATEN_CUMSUM, fj_cg_emit_cumsum), FAM(PRIMS_CUMSUM, fj_cg_emit_cumsum),
	/* normalization and losses */
	FAM(ATEN__SOFTMAX, fj_cg_emit_norm), FAM(ATEN_SOFTMAX, fj_cg_emit_norm),
	FAM(ATEN__LOG_SOFTMAX, fj_cg_emit_norm), FAM(ATEN_LOG_SOFTMAX, fj_cg_emit_norm),
	FAM(ATEN__SOFTMAX_BACKWARD_DATA, fj_cg_emit_norm), FAM(ATEN__LOG_SOFTMAX_BACKWARD_DATA, fj_cg_emit_norm),
	FAM(ATEN_NATIVE_LAYER_NORM, fj_cg_emit_norm), FAM(ATEN_LAYER_NORM, fj_cg_emit_norm),
	FAM(ATEN_RMS_NORM, fj_cg_emit_norm), FAM(ATEN_NATIVE_LAYER_NORM_BACKWARD, fj_cg_emit_norm),
	FAM(ATEN_NATIVE_BATCH_NORM, fj_cg_emit_norm), FAM(ATEN__NATIVE_BATCH_NORM_LEGIT_FUNCTIONAL, fj_cg_emit_norm),
	FAM(ATEN_NATIVE_BATCH_NORM_BACKWARD, fj_cg_emit_norm),
	FAM(ATEN_NLL_LOSS_FORWARD, fj_cg_emit_norm), FAM(ATEN_NLL_LOSS_BACKWARD, fj_cg_emit_norm),
	/* matrix products */
	FAM(ATEN_MM, fj_cg_emit_matmul), FAM(ATEN_BMM, fj_cg_emit_matmul), FAM(ATEN_ADDMM, fj_cg_emit_matmul),
	FAM(ATEN_MATMUL, fj_cg_emit_matmul), FAM(ATEN_LINEAR, fj_cg_emit_matmul),
	FAM(PRIMS_MATMUL, fj_cg_emit_matmul),
	/* indexing */
	FAM(ATEN_EMBEDDING, fj_cg_emit_index), FAM(ATEN_GATHER, fj_cg_emit_index),
	FAM(ATEN_INDEX_SELECT, fj_cg_emit_index), FAM(ATEN_SCATTER_ADD, fj_cg_emit_index),
	FAM(ATEN_INDEX_ADD, fj_cg_emit_index), FAM(ATEN_EMBEDDING_DENSE_BACKWARD, fj_cg_emit_index),
	FAM(PRIMS_TAKE, fj_cg_emit_index), FAM(PRIMS_GATHER, fj_cg_emit_index),
	FAM(PRIMS_SCATTER_ADD, fj_cg_emit_index), FAM(PRIMS_INDEX_ADD, fj_cg_emit_index),
	/* random */
	FAM(ATEN_NATIVE_DROPOUT, fj_cg_emit_random), FAM(PRIMS_RAND, fj_cg_emit_random),
	/* fused regions (codegen/region_host.c) */
	FAM(FUSION_KERNEL, fj_cg_emit_region_host),
};
#undef FAM

fj_cg_emit_fn fj_cg_node_emitter(fj_op op)
{
	if ((unsigned)op >= FJ_OP_COUNT)
		return NULL;
	if (emitters[op])
		return emitters[op];
	/* Every op with a scalar lowering is pointwise. */
	return fj_cg_scalar_lowering(op) ? fj_cg_emit_pointwise : NULL;
}

/* ---- the kernel ABI (views and attributes: kernel_abi.c) ---- */

/* Operand and result pointers from the ptrs array ("p", then "q"). */
typedef struct ptr_array {
	LLVMValueRef ptrs;
	uint32_t nopnds;
} ptr_array;

static LLVMValueRef ptr_from_array(fj_cg *cg, void *ud, uint32_t i)
{
	const ptr_array *pa = ud;
	return fj_cg_load_at(cg, cg->t_ptr, pa->ptrs, i, i < pa->nopnds ? "p" : "q");
}

fj_status fj_cg_emit_node_kernel(fj_cg *cg, const fj_graph *g, uint32_t node, const char *name,
                                 uint32_t *par_out, uint32_t *par_mask)
{
	const fj_node *n = &g->nodes[node];
	fj_cg_emit_fn emit = fj_cg_node_emitter(n->op);
	if (!emit)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, n, "no kernel emitter for this op");
	if (n->nopnds + n->nres > 4096)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, n, "too many operands");

	LLVMTypeRef ps[4] = {cg->t_ptr, cg->t_ptr, cg->t_i64, cg->t_i64};
	LLVMTypeRef fty = LLVMFunctionType(cg->t_i32, ps, 4, 0);
	LLVMValueRef f = LLVMAddFunction(cg->mod, name, fty);
	fj_cg_add_attr(cg, f, (int)LLVMAttributeFunctionIndex, "nounwind", 0);
	for (int i = 1; i <= 2; i++) {
		fj_cg_add_attr(cg, f, i, "noalias", 0);
		fj_cg_add_attr(cg, f, i, "nocapture", 0);
		fj_cg_add_attr(cg, f, i, "readonly", 0);
	}
	cg->fn = f;
	cg->stream = false;
	cg->entry = LLVMAppendBasicBlockInContext(cg->llctx, f, "entry");
	LLVMPositionBuilderAtEnd(cg->b, cg->entry);
	LLVMValueRef ptrs = LLVMGetParam(f, 0), dims = LLVMGetParam(f, 1);

	fj_cg_operand in[n->nopnds ? n->nopnds : 1];
	fj_cg_tensor out[n->nres ? n->nres : 1];
	memset(in, 0, sizeof in);
	int64_t di = 0;
	ptr_array pa = {ptrs, n->nopnds};
	fj_cg_node_views(cg, g, n, dims, ptr_from_array, &pa, in, out, &di);

	fj_cg_kernel k = {
		.g = g, .node = n, .nin = n->nopnds, .nout = n->nres, .in = in, .out = out,
		.lo = LLVMGetParam(f, 2), .hi = LLVMGetParam(f, 3),
	};
	k.status = fj_cg_var(cg, cg->t_i32, fj_cg_i32(cg, FJ_KERR_OK), "status");
	fj_status st = emit(cg, &k);
	if (st == FJ_OK && cg->st != FJ_OK)
		st = cg->st;
	if (st != FJ_OK) {
		/* Leave a well-formed module: drop the half-built function. */
		LLVMDeleteFunction(f);
		cg->fn = NULL;
		return st;
	}
	LLVMBuildRet(cg->b, fj_cg_get(cg, k.status, cg->t_i32));
	if (cg->stream) /* fj_cg_mark_stream */
		LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
		                        LLVMCreateStringAttribute(cg->llctx, FJ_CG_STREAM, (unsigned)strlen(FJ_CG_STREAM), "", 0));
	*par_out = k.par_out;
	*par_mask = k.par_mask;
	return FJ_OK;
}

/* ---- the kernel key ---- */

/* Attributes the kernels never read: they restate the result's sizes, which
 * are run-time arguments (leaving them out lets one kernel serve all sizes). */
static bool size_attr(fj_op op, const char *name)
{
	if (strcmp(name, "shape") == 0 || strcmp(name, "size") == 0)
		return true;
	if (op == FJ_OP_ATEN__RESHAPE_ALIAS && strcmp(name, "stride") == 0)
		return true;
	if (op == FJ_OP_PRIMS_IOTA && strcmp(name, "length") == 0)
		return true;
	if (op == FJ_OP_PRIMS_SLICE && strcmp(name, "limit") == 0)
		return true;
	return false;
}

static void key_attr(fj_buf *b, const fj_module *m, const fj_attr *a)
{
	char tmp[64];
	switch (a->kind) {
	case FJ_AK_ABSENT: case FJ_AK_NONE: fj_buf_puts(b, "none"); break;
	case FJ_AK_BOOL: fj_buf_puts(b, a->u.b ? "true" : "false"); break;
	case FJ_AK_INT: fj_buf_printf(b, "%lld", (long long)a->u.i); break;
	case FJ_AK_FLOAT: fj_buf_printf(b, "%a", a->u.f); break;
	case FJ_AK_STR: fj_buf_printf(b, "\"%s\"", a->u.s); break;
	case FJ_AK_DTYPE: fj_buf_puts(b, fj_dtype_name(a->u.dt)); break;
	case FJ_AK_DIM:
		fj_dim_format(m, a->u.dim, tmp, sizeof tmp);
		fj_buf_printf(b, "$%s", tmp);
		break;
	case FJ_AK_LIST:
		fj_buf_puts(b, "[");
		for (uint32_t i = 0; i < a->n; i++) {
			if (i)
				fj_buf_puts(b, ",");
			key_attr(b, m, &a->u.items[i]);
		}
		fj_buf_puts(b, "]");
		break;
	}
}

static void key_literal(fj_buf *b, const fj_value *v)
{
	switch (v->lit.kind) {
	case FJ_LIT_INT: fj_buf_printf(b, "#i%lld", (long long)v->lit.i); break;
	case FJ_LIT_FLOAT: fj_buf_printf(b, "#f%a", v->lit.f); break;
	default: fj_buf_printf(b, "#b%d", v->lit.b ? 1 : 0); break;
	}
}

static void key_type(fj_buf *b, const fj_module *m, const fj_type *t)
{
	char tmp[64];
	fj_buf_printf(b, "%s[", fj_dtype_name(t->dtype));
	for (int d = 0; d < t->rank; d++) {
		fj_dim_format(m, t->dims[d], tmp, sizeof tmp);
		fj_buf_printf(b, "%s%s", d ? "," : "", tmp);
	}
	fj_buf_puts(b, "]");
}

/* A kernel body by its structure alone: values by position (parameter i,
 * result r of node k), not by name, so that the identical regions of
 * identical layers share one key, and so one compiled kernel. */
static void body_key(fj_buf *b, const fj_graph *body)
{
	const fj_module *m = body->module;
	const fj_context *ctx = fj_graph_ctx(body);
	for (uint32_t i = 0; i < body->nparams; i++) {
		fj_buf_puts(b, "p:");
		key_type(b, m, &fj_val(body, body->params[i])->type);
		fj_buf_puts(b, "\n");
	}
	for (uint32_t k = 0; k < body->nnodes; k++) {
		const fj_node *n = &body->nodes[k];
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		fj_buf_printf(b, "%s(", fj_op_name(n->op));
		for (uint32_t i = 0; i < n->nopnds; i++) {
			const fj_value *v = n->opnds[i] == FJ_NOVAL ? NULL : fj_val(body, n->opnds[i]);
			if (i)
				fj_buf_puts(b, ",");
			if (!v)
				fj_buf_puts(b, "none");
			else if (v->kind == FJ_VK_LITERAL)
				key_literal(b, v);
			else if (v->kind == FJ_VK_PARAM)
				fj_buf_printf(b, "p%u", v->def);
			else
				fj_buf_printf(b, "r%u.%u", v->def, v->res);
		}
		fj_buf_puts(b, "){");
		for (int i = 0; i < oi->nattrs; i++) {
			const fj_attr *a = n->attrs[i].kind != FJ_AK_ABSENT ? &n->attrs[i] : &oi->attrs[i].dflt;
			key_attr(b, m, a);
			fj_buf_puts(b, ";");
		}
		fj_buf_puts(b, "}->");
		for (uint32_t j = 0; j < n->nres; j++)
			key_type(b, m, &fj_val(body, n->res[j])->type);
		fj_buf_puts(b, "\n");
	}
	fj_buf_puts(b, "yield");
	for (uint32_t j = 0; j < body->nresults; j++) {
		const fj_value *v = fj_val(body, body->results[j]);
		if (v->kind == FJ_VK_LITERAL)
			key_literal(b, v);
		else
			fj_buf_printf(b, v->kind == FJ_VK_PARAM ? " p%u" : " r%u.%u", v->def, v->res);
	}
	fj_buf_puts(b, "\n");
}

void fj_cg_node_key(fj_buf *b, const fj_graph *g, uint32_t node)
{
	const fj_node *n = &g->nodes[node];
	const fj_context *ctx = fj_graph_ctx(g);
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	fj_buf_puts(b, fj_op_name(n->op));
	fj_buf_puts(b, "(");
	for (uint32_t i = 0; i < n->nopnds; i++) {
		if (i)
			fj_buf_puts(b, ",");
		if (n->opnds[i] == FJ_NOVAL) {
			fj_buf_puts(b, "none");
			continue;
		}
		const fj_value *v = fj_val(g, n->opnds[i]);
		if (v->kind == FJ_VK_LITERAL) {
			key_literal(b, v);
			continue;
		}
		fj_buf_printf(b, "%s/%u", fj_dtype_name(v->type.dtype), (unsigned)v->type.rank);
		if (fj_cg_scalar_lowering(n->op) && n->nres > 0) {
			/* pointwise: which dims broadcast is decided from the types */
			const fj_type *rt = &fj_val(g, n->res[0])->type;
			fj_buf_puts(b, ":");
			for (int d = 0; d < v->type.rank && v->type.rank <= rt->rank; d++) {
				char c = fj_cg_bcast_kind(v->type.dims[d], rt->dims[rt->rank - v->type.rank + d]);
				fj_buf_putn(b, &c, 1);
			}
		}
	}
	fj_buf_puts(b, "){");
	for (int i = 0; i < oi->nattrs; i++) {
		const char *an = oi->attrs[i].name;
		if (size_attr(n->op, an))
			continue;
		fj_buf_printf(b, "%s=", an);
		const fj_attr *a = n->attrs[i].kind != FJ_AK_ABSENT ? &n->attrs[i] : &oi->attrs[i].dflt;
		key_attr(b, g->module, a);
		fj_buf_puts(b, ";");
	}
	fj_buf_puts(b, "}->");
	for (uint32_t j = 0; j < n->nres; j++) {
		const fj_value *v = fj_val(g, n->res[j]);
		fj_buf_printf(b, "%s%s/%u", j ? "," : "", fj_dtype_name(v->type.dtype), (unsigned)v->type.rank);
	}
	if (n->body) {
		/* a fusion.kernel: its schedule, its operand and result shapes (sizes
		 * the body's symbols are read from) and its printed body */
		fj_buf_printf(b, "{%s schedule=%s}", FJ_RG_VERSION, n->schedule ? n->schedule : "none");
		for (uint32_t j = 0; j < n->nopnds + n->nres; j++) {
			fj_vid vv = j < n->nopnds ? n->opnds[j] : n->res[j - n->nopnds];
			if (vv == FJ_NOVAL || fj_val(g, vv)->kind == FJ_VK_LITERAL)
				continue;
			key_type(b, g->module, &fj_val(g, vv)->type);
		}
		fj_buf_puts(b, "\n");
		body_key(b, n->body);
	}
}

uint64_t fj_hash64(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}
