/* emit_pointwise.c -- the pointwise family: every op with a scalar lowering
 * (math.c). Operands broadcast as in NumPy (aligned right, size-1 dims read
 * index 0, decided at run time); literals are weak scalars converted to the
 * computation dtype. The parallel space is the result's leading dims, the
 * inner loop runs over its last dim (unit stride: it vectorizes).
 */
#include <string.h>

#include "codegen/emit.h"

typedef struct pw_state {
	fj_cg_scalar_fn fn;
	fj_dtype dt;
	/* per operand, per result dim: the element stride (0 where it broadcasts) */
	LLVMValueRef stride[FJ_MAX_SPEC + 4][FJ_MAX_RANK];
} pw_state;

/* How operand dim `din` relates to the result dim `dout` it aligns with:
 * '=' the same size (static or symbolic: equal at run time), '1' a static 1
 * (broadcasts), '?' unknown until run time (a select on size == 1). The
 * kernel key records this pattern (fj_cg_node_key). */
char fj_cg_bcast_kind(fj_dim din, fj_dim dout)
{
	if (din == dout)
		return '=';
	return din == 1 ? '1' : '?';
}

/* The dtype operand i is converted to before the scalar lowering. */
static fj_dtype operand_dtype(const fj_node *n, uint32_t i, fj_dtype dt)
{
	if (i == 0 && (n->op == FJ_OP_ATEN_WHERE || n->op == FJ_OP_PRIMS_WHERE))
		return FJ_DT_BOOL;
	if (i == 1 && n->op == FJ_OP_ATEN_MASKED_FILL)
		return FJ_DT_BOOL;
	return dt;
}

static void pw_body(fj_cg *cg, fj_cg_kernel *k, void *ud, const LLVMValueRef *idx)
{
	pw_state *s = ud;
	const fj_cg_tensor *o = &k->out[0];
	LLVMValueRef args[FJ_MAX_SPEC + 4];
	for (uint32_t i = 0; i < k->nin && i < FJ_ARRAY_LEN(args); i++) {
		const fj_cg_operand *op = &k->in[i];
		fj_dtype want = operand_dtype(k->node, i, s->dt);
		if (op->none) {
			args[i] = NULL;
		} else if (op->literal) {
			args[i] = fj_cg_literal(cg, &op->lit, want);
		} else {
			LLVMValueRef off = fj_cg_i64(cg, 0);
			for (int d = 0; d < op->t.rank; d++) {
				LLVMValueRef term = LLVMBuildNSWMul(cg->b, idx[o->rank - op->t.rank + d], s->stride[i][d], "");
				off = d == 0 ? term : LLVMBuildNSWAdd(cg->b, off, term, "");
			}
			args[i] = fj_cg_convert(cg, fj_cg_load(cg, &op->t, off), op->t.dtype, want);
		}
	}
	LLVMValueRef v = s->fn(cg, k->g, k->node, args, s->dt);
	fj_cg_store(cg, o, fj_cg_offset(cg, o, idx), v);
}

fj_status fj_cg_emit_pointwise(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_node *n = k->node;
	pw_state s;
	memset(&s, 0, sizeof s);
	s.fn = fj_cg_scalar_lowering(n->op);
	s.dt = fj_cg_pointwise_dtype(k->g, n);
	if (!s.fn)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, n, "no scalar lowering");
	if (k->nout != 1 || k->nin > FJ_MAX_SPEC + 4)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, n, "unexpected arity for a pointwise op");
	const fj_type *rt = &fj_val(k->g, n->res[0])->type;
	for (uint32_t i = 0; i < k->nin; i++) {
		const fj_cg_operand *op = &k->in[i];
		if (op->none || op->literal)
			continue;
		if (op->t.rank > k->out[0].rank)
			return fj_cg_error(cg, FJ_ERR_INTERNAL, n, "operand of higher rank than the result");
		const fj_type *it = &fj_val(k->g, n->opnds[i])->type;
		for (int d = 0; d < op->t.rank; d++) {
			switch (fj_cg_bcast_kind(it->dims[d], rt->dims[rt->rank - it->rank + d])) {
			case '=': s.stride[i][d] = op->t.stride[d]; break;
			case '1': s.stride[i][d] = fj_cg_i64(cg, 0); break;
			default: {
				LLVMValueRef is1 = LLVMBuildICmp(cg->b, LLVMIntEQ, op->t.dim[d], fj_cg_i64(cg, 1), "");
				s.stride[i][d] = LLVMBuildSelect(cg->b, is1, fj_cg_i64(cg, 0), op->t.stride[d], "");
			}
			}
		}
	}
	fj_cg_for_each(cg, k, 0, pw_body, &s);
	return cg->st;
}
