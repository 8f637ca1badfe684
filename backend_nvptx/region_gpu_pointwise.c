/* region_gpu_pointwise.c -- GPU templates: pointwise (vectorized and
 * scalar) and transposes through shared-memory tiles (region_gpu.c
 * describes them). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_nvptx/region_gpu_internal.h"

/* ---- pointwise ---- */

/* Whether region operand i is read whole by the vectorised entry: a tensor
 * of result 0's shape (read at the result's linear index, if at all). */
static bool read_whole(const fj_graph *body, uint32_t i)
{
	const fj_type *t = &body->values[body->params[i]].type;
	const fj_type *r = &body->values[body->results[0]].type;
	return body->values[body->params[i]].kind != FJ_VK_LITERAL && fj_type_same_dims(t, r);
}

int fj_gpu_vec_width(const fj_rg_analysis *a)
{
	const fj_graph *body = a->body;
	size_t narrow = 16;
	for (uint32_t j = 0; j < body->nresults; j++) {
		size_t s = fj_dtype_size(body->values[body->results[j]].type.dtype);
		narrow = s && s < narrow ? s : narrow;
	}
	for (uint32_t i = 0; body->nresults && i < body->nparams; i++) {
		size_t s = fj_dtype_size(body->values[body->params[i]].type.dtype);
		if (read_whole(body, i))
			narrow = s && s < narrow ? s : narrow;
	}
	int w = (int)(16 / narrow);
	return w < 2 ? 2 : w > 8 ? 8 : w;
}

/* The alignment of w elements of dtype dt at a multiple of w elements
 * from a 16-byte aligned base. */
static unsigned vec_align(fj_dtype dt, int w)
{
	size_t b = fj_dtype_size(dt) * (size_t)w;
	return b >= 16 ? 16 : (unsigned)b;
}

/* One chunk of the vectorised entry: elements [base, base + w). The
 * operands read whole are loaded as one vector each (ld.global.nc.v4 ...:
 * 16 bytes for 4 f32, 8 f16/bf16) and bound at the lanes' points; each
 * result is evaluated lane by lane and stored as one vector. (Left to
 * LLVM's load/store vectorizer, the lanes' loads stay scalar: each lane's
 * evaluation lies between them, and libdevice's slow paths split the
 * chunk into blocks.) */
static void vec_chunk(gk *k, V base, int w)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	V lin[8];
	for (int lane = 0; lane < w; lane++)
		lin[lane] = add(k, base, i64c(k, lane));
	for (uint32_t i = 0; i < k->nin; i++) {
		if (k->in[i].literal || k->in[i].none || !read_whole(body, i))
			continue;
		fj_dtype dt = k->in[i].t.dtype;
		LLVMTypeRef et = fj_cg_storage_type(cg, dt);
		V x = LLVMBuildLoad2(B, LLVMVectorType(et, (unsigned)w),
		                     LLVMBuildInBoundsGEP2(B, et, k->in[i].t.ptr, &base, 1, ""), "");
		LLVMSetAlignment(x, vec_align(dt, w));
		fj_vid pv = body->params[i];
		for (int lane = 0; lane < w; lane++) {
			fj_rg_point p;
			fj_rg_point_lin(&p, body->values[pv].type.rank, lin[lane]);
			V e = LLVMBuildExtractElement(B, x, fj_cg_i32(cg, lane), "");
			fj_rg_bind_at(&k->r, pv, &p, fj_cg_from_storage(cg, dt, e));
		}
	}
	for (uint32_t j = 0; j < k->nout; j++) {
		fj_vid v = body->results[j];
		fj_dtype dt = k->out[j].dtype;
		LLVMTypeRef et = fj_cg_storage_type(cg, dt), vt = LLVMVectorType(et, (unsigned)w);
		V acc = LLVMGetUndef(vt);
		for (int lane = 0; lane < w; lane++) {
			fj_rg_point p;
			fj_rg_point_lin(&p, body->values[v].type.rank, lin[lane]);
			V x = fj_cg_to_storage(cg, dt, fj_rg_eval_as(&k->r, v, &p, dt));
			acc = LLVMBuildInsertElement(B, acc, x, fj_cg_i32(cg, lane), "");
		}
		V s = LLVMBuildStore(B, acc, LLVMBuildInBoundsGEP2(B, et, k->out[j].ptr, &base, 1, ""));
		LLVMSetAlignment(s, vec_align(dt, w));
	}
}

fj_status fj_gpu_emit_pointwise(gk *k, bool vec)
{
	fj_status st = fj_gpu_entry_begin(k, vec ? "" : "_s1", 256, 0, vec ? 16 : 0);
	if (st != FJ_OK)
		return st;
	V numel = k->nout ? fj_gpu_result_numel(k) : i64c(k, 0);
	V gtid = add(k, mul(k, k->ctaid, k->ntid), k->tid);
	V gstride = mul(k, k->nctaid, k->ntid);
	V tail0 = i64c(k, 0);
	if (vec) {
		int w = fj_gpu_vec_width(k->a);
		V nchunks = LLVMBuildUDiv(B, numel, i64c(k, w), "");
		gloop l;
		fj_gpu_gloop_begin(k, &l, gtid, nchunks, gstride, "vchunk");
		vec_chunk(k, mul(k, l.iv, i64c(k, w)), w);
		fj_gpu_gloop_end(k, &l);
		tail0 = mul(k, nchunks, i64c(k, w));
	}
	gloop l;
	fj_gpu_gloop_begin(k, &l, add(k, tail0, gtid), numel, gstride, "elem");
	fj_gpu_store_all_lin(k, l.iv);
	fj_gpu_gloop_end(k, &l);
	return fj_gpu_entry_end(k);
}

/* ---- transpose: 32x32 tiles through shared memory ---- */

/* Whether a transpose region gets the tiled kernel: outputs of rank >= 2
 * (the tile spans result 0's last two dims), at most 4 of them. */
bool fj_gpu_tileable(const fj_graph *body)
{
	return body->nresults >= 1 && body->nresults <= 4 && body->values[body->results[0]].type.rank >= 2;
}

/* Thread (tx, ty) evaluates the outputs at (m0 + tx, n0 + ty + 8k) -- when
 * the transpose swaps the last two dims, adjacent threads read adjacent
 * input elements -- into a tile padded to 33 columns (no bank conflicts),
 * then writes (m0 + ty + 8k, n0 + tx): adjacent threads write adjacent
 * output elements. */
fj_status fj_gpu_emit_transpose(gk *k)
{
	fj_cg *cg = k->cg;
	const fj_graph *body = k->body;
	fj_status st = fj_gpu_entry_begin(k, "", 256, 0, 0);
	if (st != FJ_OK)
		return st;
	fj_vid v0 = body->results[0];
	int rank = body->values[v0].type.rank;
	V M = fj_rg_dim(&k->r, v0, rank - 2), N = fj_rg_dim(&k->r, v0, rank - 1);
	V batch = i64c(k, 1);
	int bdims[FJ_MAX_RANK];
	for (int d = 0; d < rank - 2; d++) {
		bdims[d] = d;
		batch = mul(k, batch, fj_rg_dim(&k->r, v0, d));
	}
	V tile[4];
	LLVMTypeRef tty[4];
	for (uint32_t j = 0; j < k->nout; j++) {
		tty[j] = fj_cg_compute_type(cg, body->values[body->results[j]].type.dtype);
		if (tty[j] == cg->t_i1)
			tty[j] = cg->t_i8;
		char nm[32];
		snprintf(nm, sizeof nm, "tile%u", j);
		tile[j] = cg->target->shared_array(cg, tty[j], 32 * 33, nm);
	}
	V tx = LLVMBuildAnd(B, k->tid, i64c(k, 31), "tx");
	V ty = LLVMBuildLShr(B, k->tid, i64c(k, 5), "ty");
	V tm = LLVMBuildUDiv(B, add(k, M, i64c(k, 31)), i64c(k, 32), "");
	V tn = LLVMBuildUDiv(B, add(k, N, i64c(k, 31)), i64c(k, 32), "");
	V per = mul(k, tm, tn);
	gloop tl;
	fj_gpu_gloop_begin(k, &tl, k->ctaid, mul(k, batch, per), k->nctaid, "tile");
	V b = LLVMBuildUDiv(B, tl.iv, per, "");
	V rem = LLVMBuildURem(B, tl.iv, per, "");
	V m0 = mul(k, LLVMBuildUDiv(B, rem, tn, ""), i64c(k, 32));
	V n0 = mul(k, LLVMBuildURem(B, rem, tn, ""), i64c(k, 32));
	V idx[FJ_MAX_RANK];
	fj_gpu_unravel(k, v0, bdims, rank - 2, b, idx);
	V base = mul(k, b, mul(k, M, N));
	for (int pass = 0; pass < 2; pass++) {
		for (int q = 0; q < 4; q++) {
			V r8 = add(k, ty, i64c(k, 8 * q));
			V m = add(k, m0, pass == 0 ? tx : r8), n = add(k, n0, pass == 0 ? r8 : tx);
			V ok = LLVMBuildAnd(B, ult(k, m, M), ult(k, n, N), "");
			V slot = pass == 0 ? add(k, mul(k, tx, i64c(k, 33)), r8) : add(k, mul(k, r8, i64c(k, 33)), tx);
			fj_rg_scope_push(&k->r);
			if (pass == 0) {
				idx[rank - 2] = sel(k, ok, m, i64c(k, 0));
				idx[rank - 1] = sel(k, ok, n, i64c(k, 0));
				V lin = add(k, base, add(k, mul(k, idx[rank - 2], N), idx[rank - 1]));
				for (uint32_t j = 0; j < k->nout; j++) {
					fj_vid v = body->results[j];
					fj_rg_point p;
					if (fj_type_equal(&body->values[v].type, &body->values[v0].type) ||
					    (body->values[v].type.rank == rank &&
					     memcmp(body->values[v].type.dims, body->values[v0].type.dims, rank * sizeof(fj_dim)) == 0))
						fj_rg_point_idx(&p, rank, idx);
					else
						fj_rg_point_lin(&p, body->values[v].type.rank, lin);
					V x = fj_rg_eval(&k->r, v, &p);
					if (LLVMTypeOf(x) == cg->t_i1)
						x = LLVMBuildZExt(B, x, cg->t_i8, "");
					LLVMBuildStore(B, x, LLVMBuildInBoundsGEP2(B, tty[j], tile[j], &slot, 1, ""));
				}
			} else {
				fj_cg_if c;
				fj_gpu_if_begin(k, &c, ok);
				V lin = add(k, base, add(k, mul(k, m, N), n));
				for (uint32_t j = 0; j < k->nout; j++) {
					fj_dtype vdt = body->values[body->results[j]].type.dtype;
					V x = LLVMBuildLoad2(B, tty[j], LLVMBuildInBoundsGEP2(B, tty[j], tile[j], &slot, 1, ""), "");
					if (vdt == FJ_DT_BOOL)
						x = LLVMBuildTrunc(B, x, cg->t_i1, "");
					fj_cg_store(cg, &k->out[j], lin, fj_cg_convert(cg, x, vdt, k->out[j].dtype));
				}
				fj_gpu_if_end(k, &c);
			}
			fj_rg_scope_pop(&k->r);
		}
		cg->target->barrier(cg);
	}
	fj_gpu_gloop_end(k, &tl);
	return fj_gpu_entry_end(k);
}

/* ---- the family: rows and plan ---- */

static bool tiled(const fj_rg_analysis *a) { return a->sched == FJ_RG_TRANSPOSE && fj_gpu_tileable(a->node->body); }
static bool untiled(const fj_rg_analysis *a) { return !tiled(a); }
static fj_status emit_vec(gk *k) { return fj_gpu_emit_pointwise(k, true); }
static fj_status emit_s1(gk *k) { return fj_gpu_emit_pointwise(k, false); }
static bool takes_any(const fj_rg_analysis *a) { return (void)a, true; }

static const fj_gpu_variant pointwise_variants[] = {
	{"", tiled, fj_gpu_emit_transpose}, /* transpose: 32x32 tiles */
	{"", untiled, emit_vec},            /* 4 elements an iteration */
	{"_s1", NULL, emit_s1},
};

/* The tiles when they apply and "bpr" does not force the scalar entry; else
 * 4 elements a thread when every pointer is 16-byte aligned; else _s1. */
static fj_status pointwise_choose(const fj_gpu_sizes *s, fj_nvptx_plan *plan)
{
	const fj_graph *body = s->a->node->body;
	const fj_type *t = &body->values[body->results[0]].type;
	int64_t numel = fj_gpu_numel(s, t);
	if (numel <= 0)
		return FJ_OK;
	bool scalar = fj_gpu_forced(s, "bpr");
	if (tiled(s->a) && !scalar) {
		int64_t mm = s->dimval(s->ud, t->dims[t->rank - 2]), nn = s->dimval(s->ud, t->dims[t->rank - 1]);
		int64_t tiles =
			mm > 0 && nn > 0 ? numel / (mm * nn) * fj_gpu_ceil_div(mm, 32) * fj_gpu_ceil_div(nn, 32) : 0;
		return fj_gpu_launch(s, plan, "", (unsigned)(tiles > (1 << 20) ? (1 << 20) : tiles), 256, 0);
	}
	if (s->aligned16 && !scalar) {
		int64_t chunks = fj_gpu_ceil_div(numel, fj_gpu_vec_width(s->a));
		return fj_gpu_launch(s, plan, "", fj_gpu_grid_of(chunks, 256), 256, 0);
	}
	return fj_gpu_launch(s, plan, "_s1", fj_gpu_grid_of(numel, 256), 256, 0);
}

/* Every region no other family takes (region_gpu.c asks it last). */
const fj_gpu_family fj_gpu_pointwise_family = {
	"pointwise", takes_any, pointwise_variants, FJ_ARRAY_LEN(pointwise_variants), pointwise_choose,
};
