/* region_host_opaque.c -- the host templates of regions around an opaque
 * op: matmul with its epilogue, scan, scatter (region_host.c describes
 * them). */
#include "codegen/region_host_internal.h"

/* ---- matmul with its epilogue ---- */

static LLVMValueRef fmac(hctx *h, fj_dtype acc, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
	if (!fj_dtype_is_float(acc))
		return LLVMBuildAdd(BB, c, LLVMBuildMul(BB, a, b, ""), "");
	LLVMTypeRef ty = LLVMTypeOf(a);
	unsigned id = LLVMLookupIntrinsicID("llvm.fmuladd", 12);
	LLVMValueRef f = LLVMGetIntrinsicDeclaration(h->cg->mod, id, &ty, 1);
	LLVMTypeRef fty = LLVMIntrinsicGetType(h->cg->llctx, id, &ty, 1);
	LLVMValueRef args[3] = {a, b, c};
	return LLVMBuildCall2(BB, fty, f, args, 3, "");
}

/* the epilogue of the packed template: every result at a point of D */
static void store_d(void *ud, fj_rg_point *p) { fj_rh_store_outputs(ud, OUT_D, p); }

/* result j stored at a point's index of D (fj_rh_store_result) */
static bool store_d_by_index(void *ud, uint32_t j)
{
	hctx *h = ud;
	return h->a->vals[h->body->results[j]].in_d;
}

fj_status fj_rh_tpl_matmul(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	const fj_node *mm = &b->nodes[h->a->opaque];
	fj_vid av = mm->opnds[0], bv = mm->opnds[1], mv = mm->res[0];
	int ra = vrank(h, av), rb = vrank(h, bv), rm = vrank(h, mv);
	if (rm < 2 || ra != rm || rb != rm || rm > 3 || !h->a->vals[b->results[0]].in_d)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "matmul region of ranks %d x %d -> %d", ra, rb, rm);
	if (fj_rg_host_matmul_handles(h->a)) {
		fj_rg_host_mm hm = {.k = h->k, .r = r, .lo = h->lo, .hi = h->hi, .store = store_d,
		                    .out = h->out, .nout = h->k->nout, .by_index = store_d_by_index, .ud = h};
		return fj_rg_host_matmul(cg, &hm);
	}
	fj_dtype mdt = b->values[mv].type.dtype;
	fj_dtype acc = fj_dtype_is_float(mdt) ? FJ_DT_F64 : FJ_DT_I64;
	LLVMTypeRef aty = fj_cg_compute_type(cg, acc);
	LLVMValueRef tile = fj_cg_var(cg, LLVMArrayType(aty, TILE), NULL, "mmacc");
	h->k->par_out = 0;
	h->k->par_mask = (1u << (rm - 1)) - 1;
	LLVMValueRef K = fj_rg_dim(r, av, ra - 1), N = fj_rg_dim(r, mv, rm - 1);
	fj_cg_loop lr;
	fj_cg_loop_begin(cg, &lr, h->lo, h->hi, "rows");
	fj_rg_scope_push(r);
	LLVMValueRef ridx[FJ_MAX_RANK];
	fj_cg_unravel(cg, lr.iv, r->vdim[mv], rm - 1, ridx); /* (batch,) i */
	LLVMValueRef ntiles = LLVMBuildUDiv(BB, LLVMBuildNSWAdd(BB, N, c64(h, TILE - 1), ""), c64(h, TILE), "");
	fj_cg_loop lj;
	fj_cg_loop_begin(cg, &lj, c64(h, 0), ntiles, "jt");
	LLVMValueRef j0 = LLVMBuildNSWMul(BB, lj.iv, c64(h, TILE), "");
	LLVMValueRef len = imin(h, c64(h, TILE), LLVMBuildNSWSub(BB, N, j0, ""));
	fj_cg_loop lt;
	fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
	LLVMBuildStore(BB, LLVMConstNull(aty), elem(h, aty, tile, lt.iv));
	fj_cg_loop_end(cg, &lt);
	fj_cg_loop lk;
	fj_cg_loop_begin(cg, &lk, c64(h, 0), K, "k");
	fj_rg_scope_push(r);
	LLVMValueRef ai[3], bi[3];
	for (int d = 0; d < rm - 1; d++)
		ai[d] = ridx[d];
	ai[rm - 1] = lk.iv;
	fj_rg_point pa;
	fj_rg_point_idx(&pa, ra, ai);
	LLVMValueRef x = fj_rg_eval_as(r, av, &pa, acc);
	fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
	fj_rg_scope_push(r);
	if (rm == 3)
		bi[0] = ridx[0];
	bi[rm - 2] = lk.iv;
	bi[rm - 1] = LLVMBuildNSWAdd(BB, j0, lt.iv, "");
	fj_rg_point pb;
	fj_rg_point_idx(&pb, rb, bi);
	LLVMValueRef y = fj_rg_eval_as(r, bv, &pb, acc);
	LLVMValueRef ep = elem(h, aty, tile, lt.iv);
	LLVMBuildStore(BB, fmac(h, acc, x, y, LLVMBuildLoad2(BB, aty, ep, "")), ep);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lt);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lk);
	/* epilogue */
	fj_cg_loop_begin(cg, &lt, c64(h, 0), len, "t");
	fj_rg_scope_push(r);
	LLVMValueRef sum = LLVMBuildLoad2(BB, aty, elem(h, aty, tile, lt.iv), "");
	fj_rg_bind(r, mv, fj_cg_convert(cg, sum, acc, mdt));
	LLVMValueRef oi[3];
	for (int d = 0; d < rm - 1; d++)
		oi[d] = ridx[d];
	oi[rm - 1] = LLVMBuildNSWAdd(BB, j0, lt.iv, "");
	fj_rg_point p;
	fj_rg_point_idx(&p, rm, oi);
	fj_rh_store_outputs(h, OUT_D, &p);
	fj_rg_bind(r, mv, NULL);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lt);
	fj_cg_loop_end(cg, &lj);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &lr);
	return cg->st;
}

/* ---- scan ---- */

fj_status fj_rh_tpl_scan(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	const fj_node *n = &b->nodes[h->a->opaque];
	fj_vid av = n->opnds[0], cv = n->res[0];
	if (b->results[0] != cv || h->k->nout != 1)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "scan region with an epilogue");
	int rank = vrank(h, cv);
	int dim = rank ? (int)fj_attr_as_int(fj_node_attr(cg->ctx, n, "dim")) : 0;
	if (dim < 0)
		dim += rank;
	fj_dtype cdt = b->values[cv].type.dtype;
	fj_dtype acc = fj_dtype_is_float(cdt) ? FJ_DT_F64 : FJ_DT_I64;
	LLVMTypeRef aty = fj_cg_compute_type(cg, acc);
	LLVMValueRef accv = fj_cg_var(cg, aty, NULL, "scan");
	const fj_cg_tensor *o = &h->out[0];
	h->k->par_out = 0;
	h->k->par_mask = rank ? ((1u << rank) - 1) & ~(1u << dim) : 0;
	LLVMValueRef odims[FJ_MAX_RANK], oidx[FJ_MAX_RANK], idx[FJ_MAX_RANK];
	int map[FJ_MAX_RANK], no = 0;
	for (int d = 0; d < rank; d++)
		if (d != dim) {
			map[no] = d;
			odims[no++] = fj_rg_dim(r, cv, d);
		}
	fj_cg_loop ll;
	fj_cg_loop_begin(cg, &ll, h->lo, h->hi, "lines");
	fj_rg_scope_push(r);
	fj_cg_unravel(cg, ll.iv, odims, no, oidx);
	for (int i = 0; i < no; i++)
		idx[map[i]] = oidx[i];
	fj_cg_set(cg, accv, LLVMConstNull(aty));
	if (rank == 0) {
		fj_rg_point p;
		fj_rg_point_lin(&p, 0, c64(h, 0));
		fj_rg_store(r, o, c64(h, 0), av, &p);
	} else {
		fj_cg_loop lt;
		fj_cg_loop_begin(cg, &lt, c64(h, 0), fj_rg_dim(r, cv, dim), "t");
		fj_rg_scope_push(r);
		idx[dim] = lt.iv;
		fj_rg_point p;
		fj_rg_point_idx(&p, rank, idx);
		LLVMValueRef x = fj_rg_eval_as(r, av, &p, acc);
		LLVMValueRef s = fj_dtype_is_float(acc) ? LLVMBuildFAdd(BB, fj_cg_get(cg, accv, aty), x, "")
		                                        : LLVMBuildAdd(BB, fj_cg_get(cg, accv, aty), x, "");
		fj_cg_set(cg, accv, s);
		fj_cg_store(cg, o, fj_cg_offset(cg, o, idx), fj_cg_convert(cg, s, acc, o->dtype));
		fj_rg_scope_pop(r);
		fj_cg_loop_end(cg, &lt);
	}
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &ll);
	return cg->st;
}

/* ---- scatter_add / index_add ---- */

fj_status fj_rh_tpl_scatter(hctx *h)
{
	fj_cg *cg = h->cg;
	fj_rg *r = &h->r;
	const fj_graph *b = h->body;
	const fj_node *n = &b->nodes[h->a->opaque];
	fj_vid av = n->opnds[0], iv = n->opnds[1], sv = n->opnds[2], ov = n->res[0];
	if (b->results[0] != ov || h->k->nout != 1)
		return fj_cg_error(cg, FJ_ERR_UNSUPPORTED, h->a->node, "scatter region with an epilogue");
	bool index_add = n->op == FJ_OP_PRIMS_INDEX_ADD;
	int rank = vrank(h, ov);
	int dim = rank ? (int)fj_attr_as_int(fj_node_attr(cg->ctx, n, "dim")) : 0;
	if (dim < 0)
		dim += rank;
	const fj_cg_tensor *o = &h->out[0];
	fj_dtype odt = fj_cg_compute_dtype(o->dtype);
	h->k->par_out = 0;
	h->k->par_mask = 0;
	fj_cg_if g;
	fj_cg_if_begin(cg, &g, LLVMBuildICmp(BB, LLVMIntSLT, h->lo, h->hi, ""));
	/* the base */
	fj_cg_loop l;
	fj_cg_loop_begin(cg, &l, c64(h, 0), o->numel, "i");
	fj_rg_scope_push(r);
	fj_rg_point p;
	fj_rg_point_lin(&p, vrank(h, av), l.iv);
	fj_rg_store(r, o, l.iv, av, &p);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l);
	/* the additions, in order */
	fj_vid walk = index_add ? sv : iv; /* the shape walked */
	int wr = vrank(h, walk);
	fj_cg_loop_begin(cg, &l, c64(h, 0), fj_rg_numel(r, walk), "j");
	fj_rg_scope_push(r);
	LLVMValueRef widx[FJ_MAX_RANK], tidx[FJ_MAX_RANK];
	fj_cg_unravel(cg, l.iv, r->vdim[walk], wr, widx);
	fj_rg_point pw;
	fj_rg_point_idx(&pw, wr, widx);
	pw.lin = l.iv;
	LLVMValueRef ix;
	if (index_add) {
		fj_rg_point pi;
		LLVMValueRef one = rank ? widx[dim] : c64(h, 0);
		fj_rg_point_idx(&pi, vrank(h, iv), &one);
		ix = fj_rg_eval_as(r, iv, &pi, FJ_DT_I64);
	} else {
		ix = fj_rg_eval_as(r, iv, &pw, FJ_DT_I64);
	}
	LLVMValueRef size = rank ? o->dim[dim] : c64(h, 1);
	LLVMValueRef ok = LLVMBuildAnd(BB, LLVMBuildICmp(BB, LLVMIntSGE, ix, c64(h, 0), ""),
	                               LLVMBuildICmp(BB, LLVMIntSLT, ix, size, ""), "");
	fj_rg_fail_if(r, LLVMBuildNot(BB, ok, ""), FJ_KERR_INDEX);
	fj_rg_point ps;
	if (index_add) {
		ps = pw;
	} else {
		/* src is read at the index's position (src may be larger) */
		fj_rg_point_idx(&ps, vrank(h, sv), widx);
	}
	LLVMValueRef x = fj_rg_eval_as(r, sv, &ps, odt);
	fj_cg_if c;
	fj_cg_if_begin(cg, &c, ok);
	for (int d = 0; d < rank; d++)
		tidx[d] = widx[d];
	if (rank)
		tidx[dim] = ix;
	LLVMValueRef off = fj_cg_offset(cg, o, tidx);
	LLVMValueRef cur = fj_cg_convert(cg, fj_cg_load(cg, o, off), o->dtype, odt);
	LLVMValueRef s = fj_dtype_is_float(odt) ? LLVMBuildFAdd(BB, cur, x, "")
	                 : odt == FJ_DT_BOOL    ? LLVMBuildOr(BB, cur, x, "")
	                                        : LLVMBuildAdd(BB, cur, x, "");
	fj_cg_store(cg, o, off, fj_cg_convert(cg, s, odt, o->dtype));
	fj_cg_if_end(cg, &c);
	fj_rg_scope_pop(r);
	fj_cg_loop_end(cg, &l);
	fj_cg_if_end(cg, &g);
	return cg->st;
}
