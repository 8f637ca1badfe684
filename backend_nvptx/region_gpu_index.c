/* region_gpu_index.c -- GPU templates for the opaque index ops: take and
 * gather, scatter (copy, then atomic adds), scan (region_gpu.c describes
 * them). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

/* ---- take / gather: a thread per element of the opaque result ---- */

static V index_value(gk *k, fj_vid iv, fj_rg_point *p, V size)
{
	V x = fj_rg_eval_as(&k->r, iv, p, FJ_DT_I64);
	V bad = LLVMBuildOr(B, slt(k, x, i64c(k, 0)), LLVMBuildICmp(B, LLVMIntSGE, x, size, ""), "");
	fj_rg_fail_if(&k->r, bad, FJ_KERR_INDEX);
	return sel(k, bad, i64c(k, 0), x);
}

fj_status fj_gpu_emit_index(gk *k)
{
	const fj_graph *body = k->body;
	const fj_node *on = &body->nodes[k->a->opaque];
	fj_vid dv = on->opnds[0], iv = on->opnds[1], ov = on->res[0];
	int dr = body->values[dv].type.rank, ir = body->values[iv].type.rank, orank = body->values[ov].type.rank;
	int64_t dim = fj_attr_as_int(fj_node_attr(k->a->ctx, on, "dim"));
	if (dim < 0)
		dim += dr ? dr : 1;
	fj_status st = fj_gpu_entry_begin(k, "", 256, 0, 0);
	if (st != FJ_OK)
		return st;
	V numel = fj_rg_numel(&k->r, ov);
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	gloop l;
	fj_gpu_gloop_begin(k, &l, gtid, numel, mul(k, k->nctaid, k->ntid), "elem");
	int all[FJ_MAX_RANK];
	for (int d = 0; d < FJ_MAX_RANK; d++)
		all[d] = d;
	V oidx[FJ_MAX_RANK], didx[FJ_MAX_RANK];
	fj_gpu_unravel(k, ov, all, orank, l.iv, oidx);
	V size = dr ? fj_rg_dim(&k->r, dv, (int)dim) : i64c(k, 1);
	fj_rg_point ip;
	if (on->op == FJ_OP_PRIMS_TAKE) {
		/* out[o[:dim], j..., o[dim+ir:]] = data[o[:dim], idx[j...], ...] */
		fj_rg_point_idx(&ip, ir, oidx + dim);
		V x = index_value(k, iv, &ip, size);
		int q = 0;
		for (int d = 0; d < dim; d++)
			didx[q++] = oidx[d];
		didx[q++] = x;
		for (int d = (int)dim + ir; d < orank; d++)
			didx[q++] = oidx[d];
	} else {
		fj_rg_point_idx(&ip, ir, oidx);
		V x = index_value(k, iv, &ip, size);
		for (int d = 0; d < dr; d++)
			didx[d] = d == dim ? x : oidx[d];
	}
	fj_rg_point dp;
	fj_rg_point_idx(&dp, dr, didx);
	fj_rg_bind(&k->r, ov, fj_rg_eval(&k->r, dv, &dp));
	fj_gpu_store_results(k, orank, oidx, l.iv);
	fj_rg_bind(&k->r, ov, NULL);
	fj_gpu_gloop_end(k, &l);
	return fj_gpu_entry_end(k);
}

/* ---- scatter_add / index_add ---- */

static bool atomic_ok(fj_dtype dt)
{
	return dt == FJ_DT_F32 || dt == FJ_DT_F64 || dt == FJ_DT_F16 || dt == FJ_DT_I32 || dt == FJ_DT_I64;
}

fj_status fj_gpu_emit_scatter(gk *k, bool add_phase)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *on = &body->nodes[k->a->opaque];
	fj_vid selfv = on->opnds[0], iv = on->opnds[1], sv = on->opnds[2], ov = on->res[0];
	if (body->nresults != 1 || body->results[0] != ov)
		return fj_error_status(k->a->ctx, FJ_ERR_UNSUPPORTED, on->loc,
		                       "%s: a scatter region must yield the scatter's result only", fj_op_name(on->op));
	fj_status st = fj_gpu_entry_begin(k, add_phase ? "_add" : "", 256, 0, 0);
	if (st != FJ_OK)
		return st;
	int orank = body->values[ov].type.rank;
	int all[FJ_MAX_RANK];
	for (int d = 0; d < FJ_MAX_RANK; d++)
		all[d] = d;
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	V gstride = mul(k, k->nctaid, k->ntid);
	if (!add_phase) {
		gloop l;
		fj_gpu_gloop_begin(k, &l, gtid, fj_rg_numel(&k->r, ov), gstride, "copy");
		fj_rg_point p;
		fj_rg_point_lin(&p, orank, l.iv);
		fj_rg_store(&k->r, &k->out[0], l.iv, selfv, &p);
		fj_gpu_gloop_end(k, &l);
		return fj_gpu_entry_end(k);
	}
	fj_dtype odt = k->out[0].dtype;
	bool atomic = atomic_ok(odt);
	int64_t dim = fj_attr_as_int(fj_node_attr(k->a->ctx, on, "dim"));
	if (dim < 0)
		dim += orank ? orank : 1;
	fj_vid space = sv; /* scatter_add: the index's shape (= src's leading part); index_add: src's */
	if (on->op == FJ_OP_PRIMS_SCATTER_ADD)
		space = iv;
	int srank = body->values[space].type.rank;
	V start = atomic ? gtid : i64c(k, 0), step = atomic ? gstride : i64c(k, 1);
	fj_cg_if only;
	if (!atomic)
		fj_gpu_if_begin(k, &only, LLVMBuildICmp(B, LLVMIntEQ, gtid, i64c(k, 0), ""));
	gloop l;
	fj_gpu_gloop_begin(k, &l, start, fj_rg_numel(&k->r, space), step, "src");
	V sidx[FJ_MAX_RANK], tidx[FJ_MAX_RANK];
	fj_gpu_unravel(k, space, all, srank, l.iv, sidx);
	V size = orank ? fj_rg_dim(&k->r, ov, (int)dim) : i64c(k, 1);
	fj_rg_point ip;
	if (on->op == FJ_OP_PRIMS_SCATTER_ADD)
		fj_rg_point_idx(&ip, srank, sidx);
	else
		fj_rg_point_idx(&ip, 1, &sidx[dim]);
	V x = index_value(k, iv, &ip, size);
	for (int d = 0; d < orank; d++)
		tidx[d] = d == dim ? x : sidx[d];
	fj_rg_point sp;
	if (on->op == FJ_OP_PRIMS_SCATTER_ADD && body->values[sv].type.rank != srank) {
		fj_error_status(k->a->ctx, FJ_ERR_UNSUPPORTED, on->loc, "prims.scatter_add: ranks differ");
	}
	fj_rg_point_idx(&sp, srank, sidx);
	V val = fj_rg_eval_as(&k->r, sv, &sp, fj_cg_compute_dtype(odt));
	V off = fj_cg_offset(cg, &k->out[0], tidx);
	if (atomic) {
		LLVMTypeRef sty = fj_cg_storage_type(cg, odt);
		V ptr = LLVMBuildInBoundsGEP2(B, sty, k->out[0].ptr, &off, 1, "");
		V sval = odt == FJ_DT_F16 ? LLVMBuildFPTrunc(B, val, cg->t_f16, "") : val;
		LLVMBuildAtomicRMW(B, fj_dtype_is_float(odt) ? LLVMAtomicRMWBinOpFAdd : LLVMAtomicRMWBinOpAdd, ptr, sval,
		                   LLVMAtomicOrderingMonotonic, 0);
	} else {
		V cur = fj_cg_load(cg, &k->out[0], off);
		V sum;
		if (fj_dtype_is_float(odt))
			sum = LLVMBuildFAdd(B, cur, val, "");
		else if (odt == FJ_DT_BOOL)
			sum = LLVMBuildOr(B, cur, val, "");
		else
			sum = LLVMBuildAdd(B, cur, val, "");
		fj_cg_store(cg, &k->out[0], off, sum);
	}
	fj_gpu_gloop_end(k, &l);
	if (!atomic)
		fj_gpu_if_end(k, &only);
	return fj_gpu_entry_end(k);
}

/* ---- scan (cumsum): a thread per line ---- */

fj_status fj_gpu_emit_scan(gk *k)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	const fj_node *on = &body->nodes[k->a->opaque];
	fj_vid xv = on->opnds[0], ov = on->res[0];
	int rank = body->values[ov].type.rank;
	int64_t dim = fj_attr_as_int(fj_node_attr(k->a->ctx, on, "dim"));
	if (dim < 0)
		dim += rank ? rank : 1;
	fj_dtype odt = body->values[ov].type.dtype;
	fj_dtype acc_dt = fj_dtype_is_float(odt) ? FJ_DT_F64 : FJ_DT_I64;
	fj_status st = fj_gpu_entry_begin(k, "", 256, 0, 0);
	if (st != FJ_OK)
		return st;
	int others[FJ_MAX_RANK], no = 0;
	for (int d = 0; d < rank; d++)
		if (d != dim)
			others[no++] = d;
	V lines = i64c(k, 1);
	for (int i = 0; i < no; i++)
		lines = mul(k, lines, fj_rg_dim(&k->r, ov, others[i]));
	V len = rank ? fj_rg_dim(&k->r, ov, (int)dim) : i64c(k, 1);
	LLVMTypeRef aty = fj_cg_compute_type(cg, acc_dt);
	V accv = fj_cg_var(cg, aty, fj_cg_const(cg, acc_dt, 0, 0), "acc");
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	gloop l;
	fj_gpu_gloop_begin(k, &l, gtid, lines, mul(k, k->nctaid, k->ntid), "line");
	V oi[FJ_MAX_RANK], idx[FJ_MAX_RANK];
	fj_gpu_unravel(k, ov, others, no, l.iv, oi);
	fj_cg_set(cg, accv, fj_cg_const(cg, acc_dt, 0, 0));
	gloop e;
	fj_gpu_gloop_begin(k, &e, i64c(k, 0), len, i64c(k, 1), "pos");
	for (int i = 0; i < no; i++)
		idx[others[i]] = oi[i];
	if (rank)
		idx[dim] = e.iv;
	fj_rg_point p;
	fj_rg_point_idx(&p, rank, idx);
	V x = fj_rg_eval_as(&k->r, xv, &p, acc_dt);
	V a = fj_cg_get(cg, accv, aty);
	a = fj_dtype_is_float(acc_dt) ? LLVMBuildFAdd(B, a, x, "") : add(k, a, x);
	fj_cg_set(cg, accv, a);
	fj_rg_bind(&k->r, ov, fj_cg_convert(cg, a, acc_dt, odt));
	V olin = fj_gpu_lin_of(k, ov, idx, rank);
	fj_gpu_store_results(k, rank, idx, olin);
	fj_rg_bind(&k->r, ov, NULL);
	fj_gpu_gloop_end(k, &e);
	fj_gpu_gloop_end(k, &l);
	return fj_gpu_entry_end(k);
}

/* ---- the family: rows and plan ---- */

static bool is_take(const fj_rg_analysis *a) { return a->sched == FJ_RG_TAKE || a->sched == FJ_RG_GATHER; }
static bool is_scan(const fj_rg_analysis *a) { return a->sched == FJ_RG_SCAN; }
static bool is_scatter(const fj_rg_analysis *a) { return a->sched == FJ_RG_SCATTER; }
static bool index_takes(const fj_rg_analysis *a) { return is_take(a) || is_scan(a) || is_scatter(a); }
static fj_status emit_scatter_copy(gk *k) { return fj_gpu_emit_scatter(k, false); }
static fj_status emit_scatter_add(gk *k) { return fj_gpu_emit_scatter(k, true); }

static const fj_gpu_variant index_variants[] = {
	{"", is_take, fj_gpu_emit_index},
	{"", is_scan, fj_gpu_emit_scan},
	{"", is_scatter, emit_scatter_copy}, /* out = self */
	{"_add", is_scatter, emit_scatter_add},
};

/* A thread per element of the opaque result (take, gather), per line
 * (scan); scatter: the copy, then a thread per source element. */
static fj_status index_choose(const fj_gpu_sizes *s, fj_nvptx_plan *plan)
{
	const fj_graph *body = s->a->node->body;
	const fj_node *on = &body->nodes[s->a->opaque];
	const fj_type *t = &body->values[on->res[0]].type;
	int64_t numel = fj_gpu_numel(s, t);
	if (is_scan(s->a)) {
		int64_t dim = fj_attr_as_int(fj_node_attr(s->ctx, on, "dim"));
		if (dim < 0)
			dim += t->rank ? t->rank : 1;
		int64_t len = t->rank ? s->dimval(s->ud, t->dims[dim]) : 1;
		int64_t lines = len ? numel / len : 0;
		return lines > 0 && len > 0 ? fj_gpu_launch(s, plan, "", fj_gpu_grid_of(lines, 256), 256, 0) : FJ_OK;
	}
	plan->may_fail = true;
	fj_status st = numel > 0 ? fj_gpu_launch(s, plan, "", fj_gpu_grid_of(numel, 256), 256, 0) : FJ_OK;
	if (st != FJ_OK || !is_scatter(s->a))
		return st;
	fj_vid space = on->op == FJ_OP_PRIMS_SCATTER_ADD ? on->opnds[1] : on->opnds[2];
	int64_t sn = fj_gpu_numel(s, &body->values[space].type);
	return sn > 0 && numel > 0 ? fj_gpu_launch(s, plan, "_add", fj_gpu_grid_of(sn, 256), 256, 0) : FJ_OK;
}

const fj_gpu_family fj_gpu_index_family = {
	"take/gather/scatter/scan", index_takes, index_variants, FJ_ARRAY_LEN(index_variants), index_choose,
};
