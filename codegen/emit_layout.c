/* emit_layout.c -- the layout and source family: every op is a dense copy
 * into its (row-major) result.
 *
 * Most layout ops are an affine gather: the source offset of result element
 * idx is base + sum idx[k] * sstride[k], with per-result-dim source strides
 * built at run time from the operand's sizes (permute: permuted strides;
 * expand/broadcast_in_dim: 0 where the operand has size 1; slice: start and
 * step; flip/rev: a negative stride from the last element; reshape, view,
 * squeeze, unsqueeze, clone...: the result's own strides, a linear copy).
 * cat copies each operand's contiguous blocks; pad tests each element;
 * sources store a constant (full, *_like, new_*) or start + i * step
 * (arange, in f64 for floats and i64 for ints, as ATen's CPU kernel).
 */
#include <string.h>

#include "codegen/emit.h"

enum { L_GATHER, L_FILL, L_ARANGE, L_PAD };

typedef struct lay {
	int mode;
	const fj_cg_tensor *src;
	LLVMValueRef sstride[FJ_MAX_RANK], sbase;
	LLVMValueRef fill;          /* L_FILL, L_PAD: compute value of the result dtype */
	int64_t low[FJ_MAX_RANK];   /* L_PAD */
	LLVMValueRef start, step;   /* L_ARANGE, in dtype acc */
	fj_dtype acc;
} lay;

static void body(fj_cg *cg, fj_cg_kernel *k, void *ud, const LLVMValueRef *idx)
{
	lay *l = ud;
	const fj_cg_tensor *o = &k->out[0];
	LLVMValueRef doff = fj_cg_offset(cg, o, idx);
	switch (l->mode) {
	case L_GATHER: {
		LLVMValueRef off = l->sbase;
		for (int i = 0; i < o->rank; i++)
			off = LLVMBuildNSWAdd(cg->b, off, LLVMBuildNSWMul(cg->b, idx[i], l->sstride[i], ""), "");
		LLVMValueRef v = fj_cg_load(cg, l->src, off);
		fj_cg_store(cg, o, doff, fj_cg_convert(cg, v, l->src->dtype, o->dtype));
		break;
	}
	case L_FILL:
		fj_cg_store(cg, o, doff, l->fill);
		break;
	case L_ARANGE: {
		LLVMValueRef v;
		if (l->acc == FJ_DT_F64)
			v = LLVMBuildFAdd(cg->b, l->start,
			                  LLVMBuildFMul(cg->b, l->step, LLVMBuildSIToFP(cg->b, doff, cg->t_f64, ""), ""), "");
		else
			v = LLVMBuildAdd(cg->b, l->start, LLVMBuildMul(cg->b, l->step, doff, ""), "");
		fj_cg_store(cg, o, doff, fj_cg_convert(cg, v, l->acc, o->dtype));
		break;
	}
	case L_PAD: {
		const fj_cg_tensor *s = l->src;
		LLVMValueRef ok = LLVMConstInt(cg->t_i1, 1, 0), off = fj_cg_i64(cg, 0);
		for (int i = 0; i < o->rank; i++) {
			LLVMValueRef si = LLVMBuildSub(cg->b, idx[i], fj_cg_i64(cg, l->low[i]), "");
			ok = LLVMBuildAnd(cg->b, ok, LLVMBuildICmp(cg->b, LLVMIntULT, si, s->dim[i], ""), "");
			off = LLVMBuildAdd(cg->b, off, LLVMBuildMul(cg->b, si, s->stride[i], ""), "");
		}
		fj_cg_if c;
		fj_cg_if_begin(cg, &c, ok);
		fj_cg_store(cg, o, doff, fj_cg_convert(cg, fj_cg_load(cg, s, off), s->dtype, o->dtype));
		fj_cg_if_else(cg, &c);
		fj_cg_store(cg, o, doff, l->fill);
		fj_cg_if_end(cg, &c);
		break;
	}
	}
}

static const fj_attr *attr(fj_cg *cg, const fj_node *n, const char *name)
{
	return fj_node_attr(cg->ctx, n, name);
}

static int norm_dim(int64_t d, int rank)
{
	if (d < 0)
		d += rank > 0 ? rank : 1;
	return (int)d;
}

/* ---- cat: per operand, its contiguous blocks ---- */

static fj_status emit_cat(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_cg_tensor *o = &k->out[0];
	int d = norm_dim(fj_attr_as_int(attr(cg, k->node, "dim")), o->rank);
	if (o->rank == 0 || d < 0 || d >= o->rank)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, k->node, "bad cat dim");
	k->par_out = 0;
	k->par_mask = (1u << d) - 1;
	LLVMValueRef lo = k->lo, hi = k->hi;
	fj_cg_loop lp;
	fj_cg_loop_begin(cg, &lp, lo, hi, "prefix");
	LLVMValueRef p = lp.iv;
	LLVMValueRef cum = fj_cg_i64(cg, 0);
	for (uint32_t j = 0; j < k->nin; j++) {
		const fj_cg_operand *op = &k->in[j];
		if (op->none || op->literal || op->t.rank != o->rank)
			continue; /* legacy empty 1-D operands take no part */
		const fj_cg_tensor *t = &op->t;
		LLVMValueRef blk = d == 0 ? t->numel : t->stride[d - 1];
		LLVMValueRef src0 = LLVMBuildNSWMul(cg->b, p, blk, "");
		LLVMValueRef dst0 = LLVMBuildNSWMul(cg->b, cum, o->stride[d], "");
		if (d > 0)
			dst0 = LLVMBuildNSWAdd(cg->b, dst0, LLVMBuildNSWMul(cg->b, p, o->stride[d - 1], ""), "");
		fj_cg_loop le;
		fj_cg_loop_begin(cg, &le, fj_cg_i64(cg, 0), blk, "blk");
		LLVMValueRef v = fj_cg_load(cg, t, LLVMBuildNSWAdd(cg->b, src0, le.iv, ""));
		fj_cg_store(cg, o, LLVMBuildNSWAdd(cg->b, dst0, le.iv, ""), fj_cg_convert(cg, v, t->dtype, o->dtype));
		fj_cg_loop_end(cg, &le);
		cum = LLVMBuildNSWAdd(cg->b, cum, t->dim[d], "");
	}
	fj_cg_loop_end(cg, &lp);
	return cg->st;
}

fj_status fj_cg_emit_layout(fj_cg *cg, fj_cg_kernel *k)
{
	const fj_node *n = k->node;
	const fj_cg_tensor *o = &k->out[0];
	int ro = o->rank;
	lay l;
	memset(&l, 0, sizeof l);
	l.mode = L_GATHER;
	LLVMValueRef zero = fj_cg_i64(cg, 0);
	l.sbase = zero;
	const fj_cg_tensor *t = NULL;
	if (k->nin > 0 && !k->in[0].none && !k->in[0].literal)
		t = &k->in[0].t;
	l.src = t;
	int ri = t ? t->rank : 0;
	if (k->nout != 1)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, n, "unexpected result count");

	switch (n->op) {
	case FJ_OP_ATEN_VIEW: case FJ_OP_ATEN_RESHAPE: case FJ_OP_ATEN__RESHAPE_ALIAS:
	case FJ_OP_ATEN__UNSAFE_VIEW: case FJ_OP_ATEN_CLONE: case FJ_OP_ATEN_DETACH:
	case FJ_OP_ATEN_ALIAS: case FJ_OP_ATEN_UNSQUEEZE: case FJ_OP_ATEN_SQUEEZE:
	case FJ_OP_PRIMS_RESHAPE: case FJ_OP_PRIMS_SQUEEZE:
		for (int i = 0; i < ro; i++)
			l.sstride[i] = o->stride[i]; /* the same linear index */
		break;
	case FJ_OP_ATEN_PERMUTE: case FJ_OP_PRIMS_TRANSPOSE: case FJ_OP_ATEN_TRANSPOSE: case FJ_OP_ATEN_T: {
		int perm[FJ_MAX_RANK];
		for (int i = 0; i < ro; i++)
			perm[i] = i;
		if (n->op == FJ_OP_ATEN_PERMUTE || n->op == FJ_OP_PRIMS_TRANSPOSE) {
			const fj_attr *a = attr(cg, n, n->op == FJ_OP_ATEN_PERMUTE ? "dims" : "perm");
			for (int i = 0; i < ro && i < (int)a->n; i++)
				perm[i] = norm_dim(a->u.items[i].u.i, ri);
		} else if (n->op == FJ_OP_ATEN_TRANSPOSE && ro > 0) {
			int d0 = norm_dim(fj_attr_as_int(attr(cg, n, "dim0")), ri);
			int d1 = norm_dim(fj_attr_as_int(attr(cg, n, "dim1")), ri);
			perm[d0] = d1;
			perm[d1] = d0;
		} else if (n->op == FJ_OP_ATEN_T && ro == 2) {
			perm[0] = 1;
			perm[1] = 0;
		}
		for (int i = 0; i < ro; i++) {
			if (perm[i] < 0 || perm[i] >= ri)
				return fj_cg_error(cg, FJ_ERR_INTERNAL, n, "bad permutation");
			l.sstride[i] = t->stride[perm[i]];
		}
		break;
	}
	case FJ_OP_ATEN_EXPAND: case FJ_OP_PRIMS_BROADCAST_IN_DIM: {
		for (int i = 0; i < ro; i++)
			l.sstride[i] = zero;
		const fj_attr *bd = n->op == FJ_OP_PRIMS_BROADCAST_IN_DIM ? attr(cg, n, "broadcast_dims") : NULL;
		for (int j = 0; j < ri; j++) {
			int od = bd ? (j < (int)bd->n ? (int)bd->u.items[j].u.i : -1) : ro - ri + j;
			if (od < 0 || od >= ro)
				return fj_cg_error(cg, FJ_ERR_INTERNAL, n, "bad broadcast dims");
			LLVMValueRef is1 = LLVMBuildICmp(cg->b, LLVMIntEQ, t->dim[j], fj_cg_i64(cg, 1), "");
			l.sstride[od] = LLVMBuildSelect(cg->b, is1, zero, t->stride[j], "");
		}
		break;
	}
	case FJ_OP_ATEN_SLICE: {
		int d = norm_dim(fj_attr_as_int(attr(cg, n, "dim")), ri);
		const fj_attr *sa = attr(cg, n, "start");
		int64_t step = fj_attr_as_int(attr(cg, n, "step"));
		for (int i = 0; i < ro; i++)
			l.sstride[i] = t->stride[i];
		if (ri == 0)
			break;
		int64_t start = fj_attr_is_none(sa) ? 0 : fj_attr_as_int(sa);
		/* PyTorch: a negative start counts from the end; clamp to [0, size]. */
		LLVMValueRef size = t->dim[d], s;
		if (start >= 0) {
			LLVMValueRef c = fj_cg_i64(cg, start);
			s = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, c, size, ""), c, size, "");
		} else {
			s = LLVMBuildAdd(cg->b, size, fj_cg_i64(cg, start), "");
			s = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, s, zero, ""), zero, s, "");
		}
		l.sstride[d] = LLVMBuildNSWMul(cg->b, t->stride[d], fj_cg_i64(cg, step), "");
		l.sbase = LLVMBuildNSWMul(cg->b, s, t->stride[d], "");
		break;
	}
	case FJ_OP_PRIMS_SLICE: {
		const fj_attr *st = attr(cg, n, "start"), *sd = attr(cg, n, "strides");
		for (int i = 0; i < ro; i++) {
			int64_t step = sd->kind == FJ_AK_LIST && i < (int)sd->n ? sd->u.items[i].u.i : 1;
			l.sstride[i] = LLVMBuildNSWMul(cg->b, t->stride[i], fj_cg_i64(cg, step), "");
			if (i < (int)st->n) {
				LLVMValueRef s;
				if (st->u.items[i].kind == FJ_AK_INT) {
					s = fj_cg_i64(cg, st->u.items[i].u.i);
				} else {
					/* A symbolic start (x[:, -3:], the gradient of a cat) slices
					 * to the end, stride 1: start = size - length. The limit is
					 * no kernel argument, but the key holds the types and start. */
					const fj_attr *lm = attr(cg, n, "limit");
					const fj_type *xt = &k->g->values[n->opnds[0]].type;
					if (step != 1 || i >= (int)lm->n || lm->u.items[i].kind != FJ_AK_DIM ||
					    lm->u.items[i].u.dim != xt->dims[i])
						return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, n,
						                   "a symbolic slice start that does not slice to the end");
					s = LLVMBuildNSWSub(cg->b, t->dim[i], o->dim[i], "");
				}
				LLVMValueRef b = LLVMBuildNSWMul(cg->b, t->stride[i], s, "");
				l.sbase = LLVMBuildNSWAdd(cg->b, l.sbase, b, "");
			}
		}
		break;
	}
	case FJ_OP_ATEN_FLIP: case FJ_OP_PRIMS_REV: {
		const fj_attr *a = attr(cg, n, "dims");
		bool flip[FJ_MAX_RANK] = {0};
		for (uint32_t i = 0; i < a->n; i++) {
			int d = norm_dim(a->u.items[i].u.i, ri);
			if (d >= 0 && d < ri)
				flip[d] = true;
		}
		for (int i = 0; i < ro; i++) {
			l.sstride[i] = t->stride[i];
			if (!flip[i])
				continue;
			l.sstride[i] = LLVMBuildNeg(cg->b, t->stride[i], "");
			LLVMValueRef last = LLVMBuildSub(cg->b, t->dim[i], fj_cg_i64(cg, 1), "");
			l.sbase = LLVMBuildAdd(cg->b, l.sbase, LLVMBuildMul(cg->b, last, t->stride[i], ""), "");
		}
		break;
	}
	case FJ_OP_ATEN_CAT: case FJ_OP_PRIMS_CAT:
		return emit_cat(cg, k);
	case FJ_OP_PRIMS_PAD: {
		const fj_attr *lo = attr(cg, n, "low");
		l.mode = L_PAD;
		for (int i = 0; i < ro; i++)
			l.low[i] = i < (int)lo->n ? lo->u.items[i].u.i : 0;
		fj_literal v = fj_cg_attr_literal(attr(cg, n, "value"));
		l.fill = fj_cg_literal(cg, &v, o->dtype);
		break;
	}
	case FJ_OP_ATEN_FULL: case FJ_OP_PRIMS_FULL: case FJ_OP_ATEN_FULL_LIKE: case FJ_OP_ATEN_NEW_FULL: {
		fj_literal v = fj_cg_attr_literal(attr(cg, n, "value"));
		l.mode = L_FILL;
		l.fill = fj_cg_literal(cg, &v, o->dtype);
		break;
	}
	case FJ_OP_ATEN_ZEROS_LIKE: case FJ_OP_ATEN_NEW_ZEROS:
		l.mode = L_FILL;
		l.fill = fj_cg_const(cg, o->dtype, 0, 0);
		break;
	case FJ_OP_ATEN_ONES_LIKE: case FJ_OP_ATEN_NEW_ONES:
		l.mode = L_FILL;
		l.fill = fj_cg_const(cg, o->dtype, 1, 1);
		break;
	case FJ_OP_ATEN_ARANGE: case FJ_OP_PRIMS_IOTA:
		l.mode = L_ARANGE;
		l.acc = fj_dtype_is_float(o->dtype) ? FJ_DT_F64 : FJ_DT_I64;
		if (n->op == FJ_OP_ATEN_ARANGE) {
			fj_literal s = fj_cg_attr_literal(attr(cg, n, "start")), st = fj_cg_attr_literal(attr(cg, n, "step"));
			l.start = fj_cg_literal(cg, &s, l.acc);
			l.step = fj_cg_literal(cg, &st, l.acc);
		} else {
			l.start = fj_cg_const(cg, l.acc, 0, 0);
			l.step = fj_cg_const(cg, l.acc, 1, 1);
		}
		break;
	default:
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, n, "not a layout op");
	}
	if ((l.mode == L_GATHER || l.mode == L_PAD) && !t)
		return fj_cg_error(cg, FJ_ERR_INTERNAL, n, "missing tensor operand");
	fj_cg_for_each(cg, k, 0, body, &l);
	return cg->st;
}
