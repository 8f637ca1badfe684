/* region_acc.c -- the reduction accumulators of the region code generator
 * (region.h, fj_rg_acc_*): identity, step, merge and finish of every
 * reduction kind, shared by the host and GPU templates; and the column-slot
 * protocol of persistent_inner_outer (region.h). */
#include <string.h>

#include "codegen/region_internal.h"

/* ---- accumulators ---- */

static LLVMValueRef fadd_reassoc(fj_rg *r, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef s = LLVMBuildFAdd(B, x, y, "");
	if (LLVMIsAInstruction(s))
		LLVMSetFastMathFlags(s, LLVMFastMathAllowReassoc);
	return s;
}

static LLVMValueRef fmul_reassoc(fj_rg *r, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef s = LLVMBuildFMul(B, x, y, "");
	if (LLVMIsAInstruction(s))
		LLVMSetFastMathFlags(s, LLVMFastMathAllowReassoc);
	return s;
}

static LLVMValueRef intrinsic2(fj_rg *r, const char *name, LLVMValueRef x, LLVMValueRef y)
{
	LLVMValueRef args[2] = {x, y};
	return fj_cg_intrinsic(r->cg, name, args, 2);
}

static bool is_unsigned_dt(fj_dtype dt) { return dt == FJ_DT_U8 || dt == FJ_DT_BOOL; }

static void acc_identity(fj_rg *r, fj_rg_acc *acc, LLVMValueRef out[3])
{
	fj_cg *cg = r->cg;
	bool fl = fj_dtype_is_float(acc->acc_dt);
	switch (acc->kind) {
	case FJ_RG_RED_SUM: out[0] = fj_cg_const(cg, acc->acc_dt, 0, 0); break;
	case FJ_RG_RED_PROD: out[0] = fj_cg_const(cg, acc->acc_dt, 1, 1); break;
	case FJ_RG_RED_MAX:
	case FJ_RG_RED_ARGMAX:
		if (fl)
			out[0] = LLVMConstReal(acc->ty[0], -__builtin_inf());
		else if (acc->acc_dt == FJ_DT_BOOL || acc->acc_dt == FJ_DT_U8)
			out[0] = LLVMConstInt(acc->ty[0], 0, 0);
		else
			out[0] = LLVMConstInt(acc->ty[0], 1ull << (LLVMGetIntTypeWidth(acc->ty[0]) - 1), 0);
		break;
	case FJ_RG_RED_MIN:
	case FJ_RG_RED_ARGMIN:
		if (fl)
			out[0] = LLVMConstReal(acc->ty[0], __builtin_inf());
		else if (acc->acc_dt == FJ_DT_BOOL || acc->acc_dt == FJ_DT_U8)
			out[0] = LLVMConstAllOnes(acc->ty[0]);
		else
			out[0] = LLVMConstInt(acc->ty[0], (1ull << (LLVMGetIntTypeWidth(acc->ty[0]) - 1)) - 1, 0);
		break;
	case FJ_RG_RED_VAR_MEAN:
		out[0] = LLVMConstReal(acc->ty[0], 0);
		out[1] = LLVMConstReal(acc->ty[1], 0);
		break;
	}
	if (acc->kind == FJ_RG_RED_ARGMAX || acc->kind == FJ_RG_RED_ARGMIN)
		out[1] = c64(r, -1);
}

void fj_rg_acc_init(fj_rg *r, uint32_t node, fj_rg_acc *acc)
{
	fj_cg *cg = r->cg;
	const fj_node *n = &r->body->nodes[node];
	memset(acc, 0, sizeof *acc);
	acc->node = node;
	acc->in_dt = vdt(r, n->opnds[0]);
	fj_dtype cdt = fj_cg_compute_dtype(acc->in_dt);
	acc->n = 1;
	switch (n->op) {
	case FJ_OP_PRIMS_SUM: acc->kind = FJ_RG_RED_SUM; break;
	case FJ_OP_PRIMS_PROD: acc->kind = FJ_RG_RED_PROD; break;
	case FJ_OP_PRIMS_AMAX: acc->kind = FJ_RG_RED_MAX; break;
	case FJ_OP_PRIMS_AMIN: acc->kind = FJ_RG_RED_MIN; break;
	case FJ_OP_PRIMS_VAR_MEAN: acc->kind = FJ_RG_RED_VAR_MEAN; acc->n = 2; break;
	case FJ_OP_PRIMS_ARGMAX: acc->kind = FJ_RG_RED_ARGMAX; acc->n = 2; break;
	default: acc->kind = FJ_RG_RED_ARGMIN; acc->n = 2; break;
	}
	switch (acc->kind) {
	case FJ_RG_RED_SUM:
	case FJ_RG_RED_PROD: acc->acc_dt = fj_dtype_is_float(cdt) ? FJ_DT_F64 : FJ_DT_I64; break;
	case FJ_RG_RED_VAR_MEAN: acc->acc_dt = FJ_DT_F64; break;
	default: acc->acc_dt = cdt; break;
	}
	acc->ty[0] = fj_cg_compute_type(cg, acc->acc_dt);
	if (acc->kind == FJ_RG_RED_VAR_MEAN)
		acc->ty[1] = cg->t_f64;
	if (acc->kind == FJ_RG_RED_ARGMAX || acc->kind == FJ_RG_RED_ARGMIN)
		acc->ty[1] = cg->t_i64;
	if (acc->acc_dt == FJ_DT_BOOL && (acc->kind == FJ_RG_RED_MAX || acc->kind == FJ_RG_RED_MIN ||
	                                  acc->kind == FJ_RG_RED_ARGMAX || acc->kind == FJ_RG_RED_ARGMIN)) {
		acc->acc_dt = FJ_DT_U8; /* compare bools as 0/1 */
		acc->ty[0] = cg->t_i8;
	}
	LLVMValueRef id[3];
	acc_identity(r, acc, id);
	for (int i = 0; i < acc->n; i++)
		acc->var[i] = fj_cg_var(cg, acc->ty[i], id[i], "acc");
}

void fj_rg_acc_reset(fj_rg *r, fj_rg_acc *acc)
{
	LLVMValueRef id[3];
	acc_identity(r, acc, id);
	for (int i = 0; i < acc->n; i++)
		fj_cg_set(r->cg, acc->var[i], id[i]);
	acc->shift = NULL;
}

void fj_rg_acc_set_shift(fj_rg *r, fj_rg_acc *acc, LLVMValueRef x)
{
	if (acc->kind == FJ_RG_RED_VAR_MEAN)
		acc->shift = fj_cg_convert(r->cg, x, fj_cg_compute_dtype(acc->in_dt), acc->acc_dt);
}

void fj_rg_acc_load(fj_rg *r, const fj_rg_acc *acc, LLVMValueRef vals[3])
{
	for (int i = 0; i < acc->n; i++)
		vals[i] = fj_cg_get(r->cg, acc->var[i], acc->ty[i]);
}

/* Is x better than best (argmax/argmin: strictly, a NaN beats all but a NaN)? */
static LLVMValueRef better(fj_rg *r, const fj_rg_acc *acc, LLVMValueRef x, LLVMValueRef best)
{
	bool max = acc->kind == FJ_RG_RED_ARGMAX;
	if (!fj_dtype_is_float(acc->acc_dt)) {
		bool u = is_unsigned_dt(acc->acc_dt);
		return icmp(r, max ? (u ? LLVMIntUGT : LLVMIntSGT) : (u ? LLVMIntULT : LLVMIntSLT), x, best);
	}
	LLVMValueRef c = LLVMBuildFCmp(B, max ? LLVMRealOGT : LLVMRealOLT, x, best, "");
	LLVMValueRef xn = LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), bn = LLVMBuildFCmp(B, LLVMRealUNO, best, best, "");
	return LLVMBuildOr(B, c, LLVMBuildAnd(B, xn, LLVMBuildNot(B, bn, ""), ""), "");
}

/* Combines state a with values b (b from later positions). */
static void combine(fj_rg *r, fj_rg_acc *acc, LLVMValueRef a[3], LLVMValueRef b[3], LLVMValueRef out[3])
{
	bool fl = fj_dtype_is_float(acc->acc_dt);
	switch (acc->kind) {
	case FJ_RG_RED_SUM:
		out[0] = fl ? fadd_reassoc(r, a[0], b[0]) : LLVMBuildAdd(B, a[0], b[0], "");
		break;
	case FJ_RG_RED_PROD:
		out[0] = fl ? fmul_reassoc(r, a[0], b[0]) : LLVMBuildMul(B, a[0], b[0], "");
		break;
	case FJ_RG_RED_MAX:
		if (fl)
			out[0] = intrinsic2(r, "llvm.maximum", a[0], b[0]);
		else
			out[0] = intrinsic2(r, is_unsigned_dt(acc->acc_dt) ? "llvm.umax" : "llvm.smax", a[0], b[0]);
		break;
	case FJ_RG_RED_MIN:
		if (fl)
			out[0] = intrinsic2(r, "llvm.minimum", a[0], b[0]);
		else
			out[0] = intrinsic2(r, is_unsigned_dt(acc->acc_dt) ? "llvm.umin" : "llvm.smin", a[0], b[0]);
		break;
	case FJ_RG_RED_VAR_MEAN:
		out[0] = fadd_reassoc(r, a[0], b[0]);
		out[1] = fadd_reassoc(r, a[1], b[1]);
		break;
	case FJ_RG_RED_ARGMAX:
	case FJ_RG_RED_ARGMIN: {
		/* b wins when better, or when a is empty (index -1) and b is not */
		LLVMValueRef aempty = icmp(r, LLVMIntSLT, a[1], c64(r, 0));
		LLVMValueRef bvalid = icmp(r, LLVMIntSGE, b[1], c64(r, 0));
		LLVMValueRef take = LLVMBuildAnd(B, bvalid, LLVMBuildOr(B, aempty, better(r, acc, b[0], a[0]), ""), "");
		out[0] = sel(r, take, b[0], a[0]);
		out[1] = sel(r, take, b[1], a[1]);
		break;
	}
	}
}

void fj_rg_acc_step(fj_rg *r, fj_rg_acc *acc, LLVMValueRef x, LLVMValueRef pos)
{
	LLVMValueRef a[3], b[3], out[3];
	fj_rg_acc_load(r, acc, a);
	fj_dtype cdt = fj_cg_compute_dtype(acc->in_dt);
	switch (acc->kind) {
	case FJ_RG_RED_VAR_MEAN: {
		LLVMValueRef xf = fj_cg_convert(r->cg, x, cdt, acc->acc_dt);
		if (acc->shift)
			xf = LLVMBuildFSub(B, xf, acc->shift, "");
		b[0] = xf;
		b[1] = LLVMBuildFMul(B, xf, xf, "");
		break;
	}
	case FJ_RG_RED_ARGMAX:
	case FJ_RG_RED_ARGMIN:
		b[0] = fj_cg_convert(r->cg, x, cdt, acc->acc_dt);
		b[1] = pos ? pos : c64(r, 0);
		break;
	default:
		b[0] = fj_cg_convert(r->cg, x, cdt, acc->acc_dt);
		break;
	}
	combine(r, acc, a, b, out);
	for (int i = 0; i < acc->n; i++)
		fj_cg_set(r->cg, acc->var[i], out[i]);
}

void fj_rg_acc_merge(fj_rg *r, fj_rg_acc *acc, LLVMValueRef other[3])
{
	LLVMValueRef a[3], out[3];
	fj_rg_acc_load(r, acc, a);
	combine(r, acc, a, other, out);
	for (int i = 0; i < acc->n; i++)
		fj_cg_set(r->cg, acc->var[i], out[i]);
}

void fj_rg_acc_finish(fj_rg *r, fj_rg_acc *acc, LLVMValueRef count)
{
	fj_cg *cg = r->cg;
	const fj_node *n = &r->body->nodes[acc->node];
	LLVMValueRef s[3];
	fj_rg_acc_load(r, acc, s);
	fj_dtype rdt = vdt(r, n->res[0]);
	LLVMValueRef empty = icmp(r, LLVMIntEQ, count, c64(r, 0));
	switch (acc->kind) {
	case FJ_RG_RED_SUM:
	case FJ_RG_RED_PROD:
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, s[0], acc->acc_dt, rdt));
		break;
	case FJ_RG_RED_MAX:
	case FJ_RG_RED_MIN: {
		fj_rg_fail_if(r, empty, FJ_KERR_VALUE);
		fj_dtype from = acc->acc_dt == FJ_DT_U8 && acc->in_dt == FJ_DT_BOOL ? FJ_DT_U8 : acc->acc_dt;
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, s[0], from, rdt));
		break;
	}
	case FJ_RG_RED_ARGMAX:
	case FJ_RG_RED_ARGMIN:
		fj_rg_fail_if(r, empty, FJ_KERR_VALUE);
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, smax(r, s[1], c64(r, 0)), FJ_DT_I64, rdt));
		break;
	case FJ_RG_RED_VAR_MEAN: {
		const fj_attr *ca = fj_node_attr(cg->ctx, n, "correction");
		double corr = ca && !fj_attr_is_none(ca) ? fj_attr_as_float(ca) : 1.0;
		LLVMValueRef nf = LLVMBuildSIToFP(B, count, cg->t_f64, "");
		LLVMValueRef zero = LLVMConstReal(cg->t_f64, 0);
		LLVMValueRef d1 = LLVMBuildFDiv(B, s[0], nf, ""); /* mean - K */
		LLVMValueRef mean = acc->shift ? LLVMBuildFAdd(B, acc->shift, d1, "") : d1;
		LLVMValueRef m2 = LLVMBuildFSub(B, s[1], LLVMBuildFMul(B, s[0], d1, ""), "");
		m2 = sel(r, LLVMBuildFCmp(B, LLVMRealOLT, m2, zero, ""), zero, m2);
		LLVMValueRef div = LLVMBuildFSub(B, nf, LLVMConstReal(cg->t_f64, corr), "");
		div = sel(r, LLVMBuildFCmp(B, LLVMRealOLT, div, zero, ""), zero, div);
		LLVMValueRef var = LLVMBuildFDiv(B, m2, div, "");
		fj_rg_bind(r, n->res[0], fj_cg_convert(cg, var, FJ_DT_F64, rdt));
		if (n->nres > 1)
			fj_rg_bind(r, n->res[1], fj_cg_convert(cg, mean, FJ_DT_F64, vdt(r, n->res[1])));
		break;
	}
	}
}

/* ---- persistent_inner_outer's column slots (region.h) ---- */

LLVMValueRef fj_rg_col_slot(fj_rg *r, LLVMValueRef area, LLVMTypeRef ty, LLVMValueRef slot, int o,
                            LLVMValueRef ncols, LLVMValueRef col)
{
	LLVMValueRef s = LLVMBuildMul(B, slot, c64(r, r->a->noreds), "");
	LLVMValueRef at = LLVMBuildAdd(B, LLVMBuildMul(B, LLVMBuildAdd(B, s, c64(r, o), ""), ncols, ""), col, "");
	return LLVMBuildInBoundsGEP2(B, ty, area, &at, 1, "");
}

void fj_rg_col_finish(fj_rg *r, fj_rg_acc *oacc, LLVMValueRef rows)
{
	for (int o = 0; o < r->a->noreds; o++)
		fj_rg_acc_finish(r, &oacc[o], rows);
}

void fj_rg_col_store(fj_rg *r, LLVMValueRef col, const LLVMValueRef *kidx)
{
	const fj_rg_analysis *a = r->a;
	int nk = __builtin_popcount(a->kmask);
	for (uint32_t j = 0; j < r->nout; j++) {
		fj_vid v = r->body->results[j];
		if (a->vals[v].space != FJ_RG_SPACE_C)
			continue;
		fj_rg_point p;
		if (kidx && a->vals[v].in_c)
			fj_rg_point_idx(&p, nk, kidx);
		else
			fj_rg_point_lin(&p, r->body->values[v].type.rank, col);
		fj_rg_store(r, &r->out[j], col, v, &p);
	}
}
