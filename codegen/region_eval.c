/* region_eval.c -- the region evaluator (region.h): the scalar value of a
 * body value at a point, a recursive descent over the defining nodes,
 * memoised per (value, point) in scopes; begin/end, points and stores.
 * region.c's opening comment describes it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/region_internal.h"

static LLVMValueRef undef_of(fj_rg *r, fj_vid v)
{
	return LLVMGetUndef(fj_cg_compute_type(r->cg, r->body->values[v].type.dtype));
}

static fj_status rg_error(fj_rg *r, const fj_node *n, const char *fmt, const char *arg)
{
	if (r->st == FJ_OK)
		r->st = fj_cg_error(r->cg, FJ_ERR_UNSUPPORTED, n, fmt, arg);
	return r->st;
}

/* The i64 value of size expression d. */
static LLVMValueRef dim_value(fj_rg *r, fj_dim d)
{
	if (fj_dim_is_static(d))
		return c64(r, d);
	const fj_symexpr *e = fj_dim_expr(r->a->g->module, d);
	LLVMValueRef v = c64(r, e->coef);
	for (uint32_t k = 0; k < e->nsyms; k++) {
		LLVMValueRef s = e->syms[k] < r->nsymval ? r->symval[e->syms[k]] : NULL;
		if (!s) {
			if (r->st == FJ_OK)
				r->st = fj_cg_error(r->cg, FJ_ERR_INTERNAL, r->a->node, "unbound symbol %s",
				                    fj_symbol_name(r->a->g->module, e->syms[k]));
			return c64(r, 0);
		}
		v = e->coef == 1 && k == 0 ? s : imul(r, v, s);
	}
	return v;
}

static LLVMValueRef attr_dim(fj_rg *r, const fj_attr *a)
{
	if (a->kind == FJ_AK_DIM)
		return dim_value(r, a->u.dim);
	return c64(r, fj_attr_as_int(a));
}

/* ---- begin / end ---- */

fj_status fj_rg_begin(fj_rg *r, fj_cg *cg, const fj_rg_analysis *a, const fj_cg_operand *in, uint32_t nin,
                      const fj_cg_tensor *out, uint32_t nout, LLVMValueRef status)
{
	return fj_rg_begin_dims(r, cg, a, in, nin, out, nout, status, NULL, 0);
}

/* Binds the extra symbols (fj_rg_analysis.xsyms) from dims[at ...]; a
 * caller without a dims array (fj_rg_begin) cannot give them. */
static void bind_extra_syms(fj_rg *r, LLVMValueRef dims, int64_t at)
{
	const fj_rg_analysis *a = r->a;
	for (uint32_t i = 0; i < a->nxsyms; i++) {
		if (!dims) {
			r->st = fj_cg_error(r->cg, FJ_ERR_UNSUPPORTED, a->node,
			                    "symbolic size %s is not a size of the kernel's operands or results",
			                    fj_symbol_name(a->g->module, a->xsyms[i]));
			return;
		}
		LLVMValueRef ix = c64(r, at + (int64_t)i);
		LLVMValueRef p = LLVMBuildInBoundsGEP2(B, r->cg->t_i64, dims, &ix, 1, "");
		LLVMValueRef v = LLVMBuildLoad2(B, r->cg->t_i64, p, "sym");
		LLVMSetAlignment(v, 8);
		r->symval[a->xsyms[i]] = v;
	}
}

fj_status fj_rg_begin_dims(fj_rg *r, fj_cg *cg, const fj_rg_analysis *a, const fj_cg_operand *in, uint32_t nin,
                           const fj_cg_tensor *out, uint32_t nout, LLVMValueRef status, LLVMValueRef dims,
                           int64_t xat)
{
	memset(r, 0, sizeof *r);
	r->cg = cg;
	r->a = a;
	r->body = a->body;
	r->in = in;
	r->nin = nin;
	r->out = out;
	r->nout = nout;
	r->status = status;
	fj_context *ctx = cg->ctx;
	uint32_t nv = r->body->nvalues ? r->body->nvalues : 1;
	r->nsymval = fj_symbol_count(a->g->module);
	r->symval = fj_alloc(ctx, (r->nsymval ? r->nsymval : 1) * sizeof *r->symval);
	r->bound = fj_alloc(ctx, nv * sizeof *r->bound);
	r->vdim = fj_alloc(ctx, nv * sizeof *r->vdim);
	r->inptr = fj_alloc(ctx, (nin ? nin : 1) * sizeof *r->inptr);
	r->cap_memo = 256;
	r->memo = fj_alloc(ctx, r->cap_memo * sizeof *r->memo);
	if (!r->symval || !r->bound || !r->vdim || !r->inptr || !r->memo) {
		fj_rg_end(r);
		return fj_cg_error(cg, FJ_ERR_NOMEM, a->node, "out of memory");
	}
	memset(r->symval, 0, (r->nsymval ? r->nsymval : 1) * sizeof *r->symval);
	memset(r->bound, 0, nv * sizeof *r->bound);
	memset(r->vdim, 0, nv * sizeof *r->vdim);
	/* symbols: the extra ones, then those of the operands' and results'
	 * dims, in the order the analysis resolved them */
	bind_extra_syms(r, dims, xat);
	if (r->st != FJ_OK) {
		fj_status st = r->st;
		fj_rg_end(r);
		return st;
	}
	const fj_module *m = a->g->module;
	for (uint32_t i = 0; i < a->nsyms; i++) {
		const fj_rg_symsrc *s = &a->syms[i];
		LLVMValueRef dv = s->is_result ? out[s->index].dim[s->dim] : in[s->index].t.dim[s->dim];
		const fj_type *t = s->is_result ? &a->g->values[a->node->res[s->index]].type
		                                : &a->g->values[a->node->opnds[s->index]].type;
		const fj_symexpr *e = fj_dim_expr(m, t->dims[s->dim]);
		LLVMValueRef div = c64(r, e->coef);
		for (uint32_t k = 0; k < e->nsyms; k++)
			if (e->syms[k] != s->sym)
				div = imul(r, div, r->symval[e->syms[k]]);
		r->symval[s->sym] = e->coef == 1 && e->nsyms == 1 ? dv : LLVMBuildSDiv(B, dv, div, "");
	}
	/* sizes of every body value */
	for (uint32_t v = 0; v < r->body->nvalues; v++) {
		const fj_value *val = &r->body->values[v];
		if (val->kind == FJ_VK_LITERAL)
			continue;
		const fj_rg_value *x = &a->vals[v];
		for (int d = 0; d < val->type.rank; d++)
			r->vdim[v][d] = x->cls == FJ_RG_INPUT && !in[x->index].literal && !in[x->index].none
			                    ? in[x->index].t.dim[d]
			                    : dim_value(r, val->type.dims[d]);
	}
	/* operands: a pointer that is safe to read at offset 0 even when empty */
	LLVMValueRef dummy = NULL;
	for (uint32_t i = 0; i < nin; i++) {
		r->inptr[i] = NULL;
		if (in[i].none || in[i].literal)
			continue;
		bool maybe_empty = in[i].t.rank > 0;
		const fj_type *t = &a->g->values[a->node->opnds[i]].type;
		if (maybe_empty) {
			maybe_empty = false;
			for (int d = 0; d < t->rank; d++)
				if (!fj_dim_is_static(t->dims[d]) || t->dims[d] == 0)
					maybe_empty = true;
		}
		if (!maybe_empty) {
			r->inptr[i] = in[i].t.ptr;
			continue;
		}
		if (!dummy) {
			LLVMTypeRef at = LLVMArrayType(cg->t_i64, 4);
			dummy = fj_cg_var(cg, at, LLVMConstNull(at), "empty");
		}
		LLVMValueRef empty = icmp(r, LLVMIntEQ, in[i].t.numel, c64(r, 0));
		r->inptr[i] = sel(r, empty, dummy, in[i].t.ptr);
	}
	return cg->st;
}

void fj_rg_end(fj_rg *r)
{
	fj_context *ctx = r->cg->ctx;
	uint32_t nv = r->body->nvalues ? r->body->nvalues : 1;
	if (r->symval)
		fj_free(ctx, r->symval, (r->nsymval ? r->nsymval : 1) * sizeof *r->symval);
	if (r->bound)
		fj_free(ctx, r->bound, nv * sizeof *r->bound);
	if (r->vdim)
		fj_free(ctx, r->vdim, nv * sizeof *r->vdim);
	if (r->inptr)
		fj_free(ctx, r->inptr, (r->nin ? r->nin : 1) * sizeof *r->inptr);
	if (r->memo)
		fj_free(ctx, r->memo, r->cap_memo * sizeof *r->memo);
	r->symval = NULL;
	r->bound = NULL;
	r->vdim = NULL;
	r->inptr = NULL;
	r->memo = NULL;
}

LLVMValueRef fj_rg_dim(fj_rg *r, fj_vid v, int d) { return r->vdim[v][d]; }

LLVMValueRef fj_rg_numel(fj_rg *r, fj_vid v)
{
	LLVMValueRef n = c64(r, 1);
	for (int d = 0; d < r->body->values[v].type.rank; d++)
		n = d == 0 ? r->vdim[v][d] : imul(r, n, r->vdim[v][d]);
	return n;
}

/* ---- points ---- */

void fj_rg_point_idx(fj_rg_point *p, int rank, const LLVMValueRef *idx)
{
	memset(p, 0, sizeof *p);
	p->rank = rank;
	p->has_idx = true;
	for (int d = 0; d < rank; d++)
		p->idx[d] = idx[d];
}

void fj_rg_point_lin(fj_rg_point *p, int rank, LLVMValueRef lin)
{
	memset(p, 0, sizeof *p);
	p->rank = rank;
	p->has_idx = rank == 0;
	p->lin = lin;
}

void fj_rg_need_idx(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	if (p->has_idx)
		return;
	if (p->rank > 0)
		fj_cg_unravel(r->cg, p->lin, r->vdim[v], p->rank, p->idx);
	p->has_idx = true;
}

void fj_rg_need_lin(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	if (p->lin)
		return;
	if (p->rank == 0) {
		p->lin = c64(r, 0);
		return;
	}
	LLVMValueRef lin = p->idx[0];
	for (int d = 1; d < p->rank; d++)
		lin = iadd(r, imul(r, lin, r->vdim[v][d]), p->idx[d]);
	p->lin = lin;
}

/* ---- memo ---- */

static bool same_point(const fj_rg_point *a, const fj_rg_point *b)
{
	if (a->rank != b->rank)
		return false;
	if (a->rank == 0)
		return true;
	if (a->lin && a->lin == b->lin)
		return true;
	if (!a->has_idx || !b->has_idx)
		return false;
	for (int d = 0; d < a->rank; d++)
		if (a->idx[d] != b->idx[d])
			return false;
	return true;
}

static LLVMValueRef memo_find(fj_rg *r, fj_vid v, const fj_rg_point *p)
{
	for (uint32_t i = r->nmemo; i-- > 0;)
		if (r->memo[i].v == v && same_point(&r->memo[i].p, p))
			return r->memo[i].val;
	return NULL;
}

static void memo_add(fj_rg *r, fj_vid v, const fj_rg_point *p, LLVMValueRef val)
{
	if (r->nmemo == r->cap_memo) {
		uint32_t ncap = r->cap_memo * 2;
		fj_rg_memo *nm = fj_realloc(r->cg->ctx, r->memo, r->cap_memo * sizeof *nm, ncap * sizeof *nm);
		if (!nm)
			return; /* no memo: correct, only bigger */
		r->memo = nm;
		r->cap_memo = ncap;
	}
	r->memo[r->nmemo++] = (fj_rg_memo){v, *p, val};
}

void fj_rg_scope_push(fj_rg *r)
{
	FJ_ASSERT(r->nscope < (int)FJ_ARRAY_LEN(r->scope));
	r->scope[r->nscope++] = r->nmemo;
}

void fj_rg_scope_pop(fj_rg *r)
{
	FJ_ASSERT(r->nscope > 0);
	r->nmemo = r->scope[--r->nscope];
}

void fj_rg_bind(fj_rg *r, fj_vid v, LLVMValueRef val) { r->bound[v] = val; }

void fj_rg_bind_at(fj_rg *r, fj_vid v, const fj_rg_point *p, LLVMValueRef val) { memo_add(r, v, p, val); }

void fj_rg_fail_if(fj_rg *r, LLVMValueRef cond, int code)
{
	if (!r->status)
		return;
	LLVMValueRef cur = fj_cg_get(r->cg, r->status, r->cg->t_i32);
	fj_cg_set(r->cg, r->status, sel(r, cond, fj_cg_i32(r->cg, code), cur));
}

/* ---- evaluation ---- */

static const fj_attr *nattr(fj_rg *r, const fj_node *n, const char *name)
{
	return fj_node_attr(r->cg->ctx, n, name);
}

static int64_t list_item(const fj_attr *a, uint32_t i, int64_t dflt)
{
	if (!a || a->kind != FJ_AK_LIST || i >= a->n)
		return dflt;
	return fj_attr_as_int(&a->u.items[i]);
}

static int vrank(fj_rg *r, fj_vid v) { return r->body->values[v].type.rank; }

/* The operand dtype the scalar lowering wants (emit_pointwise.c). */
static fj_dtype operand_dtype(const fj_node *n, uint32_t i, fj_dtype dt)
{
	if (i == 0 && (n->op == FJ_OP_ATEN_WHERE || n->op == FJ_OP_PRIMS_WHERE))
		return FJ_DT_BOOL;
	if (i == 1 && n->op == FJ_OP_ATEN_MASKED_FILL)
		return FJ_DT_BOOL;
	return dt;
}

LLVMValueRef fj_rg_eval_as(fj_rg *r, fj_vid v, fj_rg_point *p, fj_dtype to)
{
	const fj_value *val = &r->body->values[v];
	if (val->kind == FJ_VK_LITERAL)
		return fj_cg_literal(r->cg, &val->lit, to);
	return fj_cg_convert(r->cg, fj_rg_eval(r, v, p), val->type.dtype, to);
}

static LLVMValueRef eval_input(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	int i = r->a->vals[v].index;
	const fj_cg_operand *op = &r->in[i];
	if (op->literal)
		return fj_cg_literal(r->cg, &op->lit, vdt(r, v));
	if (op->none)
		return undef_of(r, v);
	fj_cg_tensor t = op->t;
	t.ptr = r->inptr[i];
	LLVMValueRef off;
	if (p->rank == 0)
		off = c64(r, 0);
	else if (p->has_idx)
		off = fj_cg_offset(r->cg, &t, p->idx);
	else
		off = p->lin;
	return fj_cg_load(r->cg, &t, off);
}

/* The value at a point of operand `a` whose index is idx (rank of a). */
static LLVMValueRef eval_at_idx(fj_rg *r, fj_vid a, const LLVMValueRef *idx)
{
	fj_rg_point q;
	fj_rg_point_idx(&q, vrank(r, a), idx);
	return fj_rg_eval(r, a, &q);
}

/* The node defining v inside the body, or NULL (a parameter, a literal). */
static const fj_node *def_node(fj_rg *r, fj_vid v)
{
	const fj_value *x = &r->body->values[v];
	return x->kind == FJ_VK_RESULT ? &r->body->nodes[x->def] : NULL;
}

/* Is v = broadcast_in_dim(red(a)), a reduction `op` of a broadcast back
 * to a's dims along the dims it reduced (each point gets its own row's
 * value)? Returns a, or FJ_NOVAL. */
static fj_vid row_value(fj_rg *r, fj_vid v, fj_op op)
{
	const fj_node *b = def_node(r, v);
	if (!b || b->op != FJ_OP_PRIMS_BROADCAST_IN_DIM)
		return FJ_NOVAL;
	const fj_node *m = def_node(r, b->opnds[0]);
	if (!m || m->op != op)
		return FJ_NOVAL;
	fj_vid a = m->opnds[0];
	if (!same_dims(&r->body->values[a].type, &r->body->values[v].type))
		return FJ_NOVAL;
	/* broadcast_dims must be the dims the reduction kept, in order */
	int rank = vrank(r, a);
	const fj_attr *dims = nattr(r, m, "dims"), *bd = nattr(r, b, "broadcast_dims");
	if (!dims || dims->kind != FJ_AK_LIST || !bd || bd->kind != FJ_AK_LIST)
		return FJ_NOVAL;
	uint32_t reduced = 0;
	for (uint32_t i = 0; i < dims->n; i++) {
		int64_t d = list_item(dims, i, -1);
		d += d < 0 ? rank : 0;
		if (d < 0 || d >= rank)
			return FJ_NOVAL;
		reduced |= 1u << d;
	}
	uint32_t k = 0;
	for (int d = 0; d < rank; d++)
		if (!(reduced & (1u << d)) && list_item(bd, k++, -1) != d)
			return FJ_NOVAL;
	return k == bd->n ? a : FJ_NOVAL;
}

/* Is v = a - broadcast_in_dim(amax(a)), the max broadcast back along the
 * dims it reduced (softmax's, log_softmax's and cross_entropy's shift)?
 * Then v <= 0 or NaN at every point: a is at most its row's max, and a
 * rounded difference keeps that sign. */
static bool minus_row_max(fj_rg *r, fj_vid v)
{
	const fj_node *s = def_node(r, v);
	return s && s->op == FJ_OP_PRIMS_SUB && row_value(r, s->opnds[1], FJ_OP_PRIMS_AMAX) == s->opnds[0];
}

/* Is n softmax's division e / broadcast_in_dim(sum(e)), e = exp(x - its row
 * max), in f32? Each e is then in [0, 1] (or NaN, and s with it), so the row
 * sum s is in [1, row length], or NaN. */
static bool softmax_div(fj_rg *r, const fj_node *n)
{
	if (n->op != FJ_OP_PRIMS_DIV || r->body->values[n->res[0]].type.dtype != FJ_DT_F32)
		return false;
	const fj_node *e = def_node(r, n->opnds[0]);
	return e && e->op == FJ_OP_PRIMS_EXP && minus_row_max(r, e->opnds[0]) &&
	       row_value(r, n->opnds[1], FJ_OP_PRIMS_SUM) == n->opnds[0];
}

/* The division n = e / broadcast(sum(e)) of softmax_div whose sum is red,
 * or NULL. */
static const fj_node *softmax_of_sum(fj_rg *r, const fj_node *red)
{
	for (uint32_t i = 0; i < r->body->nnodes; i++) {
		const fj_node *n = &r->body->nodes[i];
		if (softmax_div(r, n) && def_node(r, def_node(r, n->opnds[1])->opnds[0]) == red)
			return n;
	}
	return NULL;
}

bool fj_rg_recip_sum(fj_rg *r, const fj_node *red)
{
	return softmax_of_sum(r, red) != NULL;
}

const fj_node *fj_rg_recip_max(fj_rg *r, const fj_node *red)
{
	const fj_node *n = softmax_of_sum(r, red);
	if (!n)
		return NULL;
	const fj_node *s = def_node(r, def_node(r, n->opnds[0])->opnds[0]); /* x - broadcast(m) */
	return def_node(r, def_node(r, s->opnds[1])->opnds[0]);
}

/* ---- a row max whose NaN the row sum carries ----
 * Softmax and log_softmax shift the row by its max m = amax(x) and sum
 * s = sum(exp(x - m)) over the same dims. A NaN in the row makes m NaN,
 * and with it every output of the row; but x - m is NaN at the NaN itself
 * whatever m is, so s is NaN, and an output that combines x - m or
 * exp(x - m) with s in an arithmetic op is NaN too. Where that is all m
 * is used for, the max may skip NaNs: two vmaxps per vector (region_host_
 * inner.c, block_minmax_step), where llvm.maximum's NaN handling takes
 * vcmpunordps and vblendvps beside its vmaxps (five uops on AVX2) and
 * AVX-512 a mask compare, a select and a NaN flag. Rows without a NaN get
 * the same bits: ties between +0 and -0 were already free (nsz), and a row
 * of -inf still gives m = -inf. */

static bool region_result(fj_rg *r, fj_vid v)
{
	for (uint32_t j = 0; j < r->body->nresults; j++)
		if (r->body->results[j] == v)
			return true;
	return false;
}

/* Do reductions a and b reduce the same dims of operands of one rank? */
static bool same_reduced(fj_rg *r, const fj_node *a, const fj_node *b)
{
	int rank = vrank(r, a->opnds[0]);
	return vrank(r, b->opnds[0]) == rank &&
	       fj_rg_red_mask(r->cg->ctx, a, rank) == fj_rg_red_mask(r->cg->ctx, b, rank);
}

/* Is v = x - broadcast_in_dim(m), x being m's operand? */
static bool minus_this_max(fj_rg *r, fj_vid v, const fj_node *m)
{
	const fj_node *s = def_node(r, v);
	if (!s || s->op != FJ_OP_PRIMS_SUB || s->opnds[0] != m->opnds[0] || !minus_row_max(r, v))
		return false;
	return def_node(r, def_node(r, s->opnds[1])->opnds[0]) == m;
}

/* Is v NaN at every point of a row where s = sum(exp(x - m)) over m's dims
 * is: a broadcast of s along those dims, or a unary op of such a value? */
static bool carries_sum(fj_rg *r, fj_vid v, const fj_node *m)
{
	for (int depth = 0; depth < 8; depth++) {
		fj_vid e = row_value(r, v, FJ_OP_PRIMS_SUM);
		const fj_node *u = def_node(r, v);
		if (e != FJ_NOVAL) {
			const fj_node *en = def_node(r, e);
			return en && en->op == FJ_OP_PRIMS_EXP && minus_this_max(r, en->opnds[0], m) &&
			       same_reduced(r, def_node(r, u->opnds[0]), m);
		}
		if (!u || (u->op != FJ_OP_PRIMS_LOG && u->op != FJ_OP_PRIMS_EXP && u->op != FJ_OP_PRIMS_NEG &&
		           u->op != FJ_OP_PRIMS_SQRT && u->op != FJ_OP_PRIMS_RSQRT && u->op != FJ_OP_PRIMS_RECIPROCAL))
			return false;
		v = u->opnds[0];
	}
	return false;
}

/* Is node u, which reads v, an arithmetic op of v and a value that
 * carries_sum? */
static bool beside_sum(fj_rg *r, const fj_node *u, fj_vid v, const fj_node *m)
{
	if (u->op != FJ_OP_PRIMS_ADD && u->op != FJ_OP_PRIMS_SUB && u->op != FJ_OP_PRIMS_MUL &&
	    u->op != FJ_OP_PRIMS_DIV)
		return false;
	fj_vid other = u->opnds[0] == v ? u->opnds[1] : u->opnds[0];
	return other != v && carries_sum(r, other, m);
}

/* Does every reader of v pass ok(r, reader, v, m)? v is no region result. */
static bool readers_ok(fj_rg *r, fj_vid v, const fj_node *m,
                       bool (*ok)(fj_rg *r, const fj_node *u, fj_vid v, const fj_node *m))
{
	if (region_result(r, v))
		return false;
	for (uint32_t i = 0; i < r->body->nnodes; i++) {
		const fj_node *u = &r->body->nodes[i];
		for (uint32_t k = 0; k < u->nopnds; k++)
			if (u->opnds[k] == v && !ok(r, u, v, m))
				return false;
	}
	return true;
}

/* a reader of e = exp(x - m): the row sum, or beside it */
static bool exp_reader(fj_rg *r, const fj_node *u, fj_vid e, const fj_node *m)
{
	if (u->op == FJ_OP_PRIMS_SUM)
		return u->opnds[0] == e && same_reduced(r, u, m);
	return beside_sum(r, u, e, m);
}

/* a reader of d = x - m: its exp, or beside the sum */
static bool shifted_reader(fj_rg *r, const fj_node *u, fj_vid d, const fj_node *m)
{
	if (u->op == FJ_OP_PRIMS_EXP)
		return readers_ok(r, u->res[0], m, exp_reader);
	return beside_sum(r, u, d, m);
}

/* a reader of broadcast_in_dim(m): x - it */
static bool shift_reader(fj_rg *r, const fj_node *u, fj_vid b, const fj_node *m)
{
	(void)b;
	return minus_this_max(r, u->res[0], m) && readers_ok(r, u->res[0], m, shifted_reader);
}

/* a reader of m: its broadcast */
static bool max_reader(fj_rg *r, const fj_node *u, fj_vid v, const fj_node *m)
{
	(void)v;
	return u->op == FJ_OP_PRIMS_BROADCAST_IN_DIM && readers_ok(r, u->res[0], m, shift_reader);
}

bool fj_rg_max_skips_nan(fj_rg *r, const fj_node *red)
{
	return red->op == FJ_OP_PRIMS_AMAX && readers_ok(r, red->res[0], red, max_reader);
}

/* e / s as q = e (1/s) corrected by its residual: q + (e - q s) (1/s), the
 * residual exact by an FMA. With 1/s rounded to nearest and q within an ulp
 * of e / s, that is e / s rounded to nearest (Markstein's theorem) unless
 * something underflows; for s in [1, 2^39] nothing does when e >= 2^-60,
 * which the caller checks (fj_rg_recip_sum). Three FMA-port ops per vector
 * where a vdivps takes the divider 3 (ymm) or 6 (zmm) cycles on Zen 4. */
static LLVMValueRef recip_div(fj_rg *r, LLVMValueRef e, LLVMValueRef s)
{
	fj_cg *cg = r->cg;
	LLVMBuilderRef b = cg->b;
	LLVMValueRef y = LLVMBuildFDiv(b, LLVMConstReal(cg->t_f32, 1.0), s, ""); /* invariant: hoisted */
	LLVMValueRef q = LLVMBuildFMul(b, e, y, "");
	LLVMValueRef ra[3] = {LLVMBuildFNeg(b, q, ""), s, e};
	LLVMValueRef res = fj_cg_intrinsic(cg, "llvm.fma", ra, 3);
	LLVMValueRef qa[3] = {res, y, q};
	return fj_cg_intrinsic(cg, "llvm.fma", qa, 3);
}

/* The value of v when it is a constant (a literal or a prims.full). */
static bool const_value(fj_rg *r, fj_vid v, double *out)
{
	const fj_value *x = &r->body->values[v];
	const fj_node *d = def_node(r, v);
	fj_literal l;
	if (x->kind == FJ_VK_LITERAL)
		l = x->lit;
	else if (d && d->op == FJ_OP_PRIMS_FULL)
		l = fj_cg_attr_literal(nattr(r, d, "value"));
	else
		return false;
	*out = fj_literal_value(&l);
	return true;
}

/* How may the exp v = e^z, z its operand, be computed? EXP_CLAMP: as
 * e^max(z, -87.33), bit for bit, where v is not a result and every use of
 * it is
 *  - a sum c + v with a constant |c| >= 1 (the 1 + exp(z) of sigmoid, silu
 *    and the tanh gelu): below -87.33 e^z < 2^-125, and c + e^z rounds to c
 *    either way;
 *  - or, for an f32 v, where(lt(z, k), 0, v) with a constant k >= -87.33
 *    (a gradient's flush of small exps: flush_small in passes/vjp.c and in
 *    decompose's gelu_backward): every lane the clamp changes is selected
 *    away.
 * e^z then never comes out denormal. An Intel core takes a microcode assist
 * per denormal result: Sapphire Rapids, 2 threads, a [512,512] x
 * [512,2048] linear with the tanh gelu as its epilogue, inputs uniform in
 * [-1, 1) (about 1 gelu argument in 70 between 10.0 and 10.7, where e^z is
 * denormal): 5.5 ms, against 3.7 with inputs a tenth as large; 3.3 without
 * the gelu.
 * EXP_ADDEND: every use is such a sum, so fj_cg_exp_addend may compute it,
 * with one integer op for scale2's eight (math_poly.c: p_exp_addend). Intel
 * Xeon (Emerald Rapids), [8192,4096] f32, 2 threads, fj-bench-ab median
 * speed ratio (quartiles): AVX2 code, the tanh gelu forward 1.188
 * (1.170-1.208), silu 1.184 (1.163-1.207); AVX-512 (scale2 is four ops
 * there, vscalefps) 1.040 (1.026-1.056) both.
 * EXP_ANY: neither. */
enum { EXP_ANY, EXP_CLAMP, EXP_ADDEND };

static int exp_uses(fj_rg *r, fj_vid v, fj_vid z)
{
	const fj_graph *b = r->body;
	if (region_result(r, v))
		return EXP_ANY;
	uint32_t uses = 0, sums = 0;
	for (uint32_t i = 0; i < b->nnodes; i++) {
		const fj_node *n = &b->nodes[i];
		for (uint32_t k = 0; k < n->nopnds; k++) {
			if (n->opnds[k] != v)
				continue;
			double c;
			if (n->op == FJ_OP_PRIMS_ADD && n->nopnds == 2 && const_value(r, n->opnds[1 - k], &c) && fabs(c) >= 1) {
				uses++;
				sums++;
				continue;
			}
			const fj_node *lt = n->op == FJ_OP_PRIMS_WHERE && k == 2 ? def_node(r, n->opnds[0]) : NULL;
			if (!lt || lt->op != FJ_OP_PRIMS_LT || lt->opnds[0] != z || b->values[v].type.dtype != FJ_DT_F32 ||
			    b->values[z].type.dtype != FJ_DT_F32 || !const_value(r, lt->opnds[1], &c) ||
			    !((float)c >= (float)fj_dtype_exp_normal_lo(FJ_DT_F32)) || !const_value(r, n->opnds[1], &c) || c != 0)
				return EXP_ANY;
			uses++;
		}
	}
	return uses == 0 ? EXP_ANY : sums == uses ? EXP_ADDEND : EXP_CLAMP;
}

static LLVMValueRef eval_pointwise(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_cg_scalar_fn fn = fj_cg_scalar_lowering(n->op);
	fj_dtype dt = fj_cg_pointwise_dtype(r->body, n);
	LLVMValueRef args[FJ_MAX_SPEC + 4];
	if (n->nopnds > FJ_ARRAY_LEN(args)) {
		rg_error(r, n, "%s: too many operands", fj_op_name(n->op));
		return undef_of(r, v);
	}
	for (uint32_t i = 0; i < n->nopnds; i++) {
		fj_vid o = n->opnds[i];
		fj_dtype want = operand_dtype(n, i, dt);
		if (o == FJ_NOVAL) {
			args[i] = NULL;
			continue;
		}
		if (r->body->values[o].kind == FJ_VK_LITERAL) {
			args[i] = fj_cg_literal(r->cg, &r->body->values[o].lit, want);
			continue;
		}
		if (vrank(r, o) == 0 && p->rank != 0) {
			fj_rg_point q;
			fj_rg_point_lin(&q, 0, NULL);
			args[i] = fj_rg_eval_as(r, o, &q, want);
		} else {
			args[i] = fj_rg_eval_as(r, o, p, want);
		}
	}
	bool nonpos = n->op == FJ_OP_PRIMS_EXP && (n == r->exp_nonpos || minus_row_max(r, n->opnds[0]));
	int eu = n->op == FJ_OP_PRIMS_EXP && dt == FJ_DT_F32 && args[0] ? exp_uses(r, v, n->opnds[0]) : EXP_ANY;
	LLVMValueRef ea = eu == EXP_ADDEND && !nonpos ? fj_cg_exp_addend(r->cg, args[0]) : NULL;
	if (ea)
		return ea;
	if (eu != EXP_ANY) {
		LLVMValueRef lo = fj_cg_const(r->cg, FJ_DT_F32, fj_dtype_exp_normal_lo(FJ_DT_F32), 0);
		LLVMValueRef below = LLVMBuildFCmp(r->cg->b, LLVMRealOLT, args[0], lo, "");
		args[0] = LLVMBuildSelect(r->cg->b, below, lo, args[0], "");
	}
	if (nonpos)
		return fj_cg_exp_nonpos(r->cg, args[0]); /* the same bits, cheaper */
	/* Divisions keep their bits, also by a per-row value: a reciprocal
	 * hoisted out of the row (x * (1/s)) may differ from x / s by an ulp, and
	 * a value the backward recomputes must have the forward's bits (amax's
	 * gradient compares it with the saved maximum: the soak's NaN
	 * gradients). Softmax's, corrected, has them (recip_div). */
	if (r->recip && dt == FJ_DT_F32 && softmax_div(r, n))
		return recip_div(r, args[0], args[1]);
	return fn(r->cg, r->body, n, args, dt);
}

static LLVMValueRef eval_broadcast(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_type *at = &r->body->values[a].type, *vt = &r->body->values[v].type;
	if (same_dims(at, vt))
		return fj_rg_eval(r, a, p);
	if (at->rank == 0) {
		fj_rg_point q;
		fj_rg_point_lin(&q, 0, NULL);
		return fj_rg_eval(r, a, &q);
	}
	fj_rg_need_idx(r, v, p);
	const fj_attr *bd = nattr(r, n, "broadcast_dims");
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int i = 0; i < at->rank; i++) {
		int od = (int)list_item(bd, (uint32_t)i, i);
		if (od < 0 || od >= vt->rank) {
			rg_error(r, n, "%s: bad broadcast_dims", fj_op_name(n->op));
			return undef_of(r, v);
		}
		fj_dim din = at->dims[i], dout = vt->dims[od];
		if (din == dout)
			idx[i] = p->idx[od];
		else if (din == 1)
			idx[i] = c64(r, 0);
		else
			idx[i] = sel(r, icmp(r, LLVMIntEQ, r->vdim[a][i], c64(r, 1)), c64(r, 0), p->idx[od]);
	}
	return eval_at_idx(r, a, idx);
}

static LLVMValueRef eval_reshape(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_type *at = &r->body->values[a].type, *vt = &r->body->values[v].type;
	if (same_dims(at, vt))
		return fj_rg_eval(r, a, p);
	fj_rg_point q;
	memset(&q, 0, sizeof q);
	q.rank = at->rank;
	q.lin = p->lin; /* a reshape keeps the linear index */
	if (p->has_idx && at->rank > 0 && vt->rank > 0) {
		/* common leading and trailing dims pass through; the middle part is
		 * linearised and split again */
		int pre = 0;
		while (pre < at->rank && pre < vt->rank && at->dims[pre] == vt->dims[pre])
			pre++;
		int suf = 0;
		while (suf < at->rank - pre && suf < vt->rank - pre &&
		       at->dims[at->rank - 1 - suf] == vt->dims[vt->rank - 1 - suf])
			suf++;
		for (int d = 0; d < pre; d++)
			q.idx[d] = p->idx[d];
		for (int d = 0; d < suf; d++)
			q.idx[at->rank - 1 - d] = p->idx[vt->rank - 1 - d];
		int om = vt->rank - pre - suf, im = at->rank - pre - suf;
		if (im > 0) {
			LLVMValueRef lin = om > 0 ? p->idx[pre] : c64(r, 0);
			for (int d = pre + 1; d < pre + om; d++)
				lin = iadd(r, imul(r, lin, r->vdim[v][d]), p->idx[d]);
			fj_cg_unravel(r->cg, lin, &r->vdim[a][pre], im, &q.idx[pre]);
		}
		q.has_idx = true;
	} else if (at->rank == 0) {
		q.has_idx = true;
	} else {
		fj_rg_need_lin(r, v, p);
		q.lin = p->lin;
	}
	return fj_rg_eval(r, a, &q);
}

static LLVMValueRef eval_squeeze(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_type *at = &r->body->values[a].type;
	const fj_attr *dl = nattr(r, n, "dims");
	uint32_t mask = 0;
	for (uint32_t i = 0; dl && dl->kind == FJ_AK_LIST && i < dl->n; i++)
		mask |= 1u << norm_dim(fj_attr_as_int(&dl->u.items[i]), at->rank);
	fj_rg_point q;
	memset(&q, 0, sizeof q);
	q.rank = at->rank;
	q.lin = p->lin;
	if (p->has_idx || !p->lin) {
		fj_rg_need_idx(r, v, p);
		int j = 0;
		for (int d = 0; d < at->rank; d++)
			q.idx[d] = (mask & (1u << d)) ? c64(r, 0) : p->idx[j++];
		q.has_idx = true;
	}
	return fj_rg_eval(r, a, &q);
}

static LLVMValueRef eval_transpose(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_attr *perm = nattr(r, n, "perm");
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK];
	int rank = vrank(r, a);
	for (int i = 0; i < rank; i++)
		idx[norm_dim(list_item(perm, (uint32_t)i, i), rank)] = p->idx[i];
	return eval_at_idx(r, a, idx);
}

static LLVMValueRef eval_slice(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	const fj_attr *start = nattr(r, n, "start"), *strides = nattr(r, n, "strides");
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int d = 0; d < vrank(r, a); d++) {
		LLVMValueRef s = start && start->kind == FJ_AK_LIST && (uint32_t)d < start->n ? attr_dim(r, &start->u.items[d])
		                                                                             : c64(r, 0);
		int64_t st = list_item(strides, (uint32_t)d, 1);
		LLVMValueRef i = st == 1 ? p->idx[d] : imul(r, p->idx[d], c64(r, st));
		idx[d] = iadd(r, s, i);
	}
	return eval_at_idx(r, a, idx);
}

static LLVMValueRef eval_rev(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	int rank = vrank(r, a);
	const fj_attr *dl = nattr(r, n, "dims");
	uint32_t mask = 0;
	for (uint32_t i = 0; dl && dl->kind == FJ_AK_LIST && i < dl->n; i++)
		mask |= 1u << norm_dim(fj_attr_as_int(&dl->u.items[i]), rank);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK];
	for (int d = 0; d < rank; d++)
		idx[d] = (mask & (1u << d)) ? isub(r, isub(r, r->vdim[a][d], c64(r, 1)), p->idx[d]) : p->idx[d];
	return eval_at_idx(r, a, idx);
}

/* clamp(i, 0, max(n - 1, 0)) */
static LLVMValueRef clamp_index(fj_rg *r, LLVMValueRef i, LLVMValueRef n)
{
	return smax(r, smin(r, i, isub(r, n, c64(r, 1))), c64(r, 0));
}

static LLVMValueRef eval_pad(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0];
	int rank = vrank(r, a);
	const fj_attr *low = nattr(r, n, "low");
	fj_rg_need_idx(r, v, p);
	LLVMValueRef idx[FJ_MAX_RANK], ok = LLVMConstInt(r->cg->t_i1, 1, 0);
	for (int d = 0; d < rank; d++) {
		LLVMValueRef i = isub(r, p->idx[d], c64(r, list_item(low, (uint32_t)d, 0)));
		LLVMValueRef in = LLVMBuildAnd(B, icmp(r, LLVMIntSGE, i, c64(r, 0)), icmp(r, LLVMIntSLT, i, r->vdim[a][d]), "");
		ok = LLVMBuildAnd(B, ok, in, "");
		idx[d] = clamp_index(r, i, r->vdim[a][d]);
	}
	LLVMValueRef x = eval_at_idx(r, a, idx);
	fj_literal lit = fj_cg_attr_literal(nattr(r, n, "value"));
	return sel(r, ok, x, fj_cg_literal(r->cg, &lit, vdt(r, v)));
}

static LLVMValueRef eval_cat(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	int rank = vrank(r, v);
	int dim = norm_dim(fj_attr_as_int(nattr(r, n, "dim")), rank);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef off = c64(r, 0), result = NULL;
	LLVMValueRef starts[n->nopnds ? n->nopnds : 1];
	for (uint32_t k = 0; k < n->nopnds; k++) {
		starts[k] = off;
		off = iadd(r, off, r->vdim[n->opnds[k]][dim]);
	}
	for (uint32_t k = n->nopnds; k-- > 0;) {
		fj_vid a = n->opnds[k];
		if (r->body->values[a].type.dims[dim] == 0)
			continue; /* statically empty: never selected */
		LLVMValueRef idx[FJ_MAX_RANK];
		for (int d = 0; d < rank; d++)
			idx[d] = p->idx[d];
		idx[dim] = clamp_index(r, isub(r, p->idx[dim], starts[k]), r->vdim[a][dim]);
		LLVMValueRef x = fj_cg_convert(r->cg, eval_at_idx(r, a, idx), vdt(r, a), vdt(r, v));
		LLVMValueRef end = iadd(r, starts[k], r->vdim[a][dim]);
		result = result ? sel(r, icmp(r, LLVMIntSLT, p->idx[dim], end), x, result) : x;
	}
	return result ? result : fj_cg_const(r->cg, vdt(r, v), 0, 0);
}

static LLVMValueRef eval_full(fj_rg *r, const fj_node *n, fj_vid v)
{
	fj_literal lit = fj_cg_attr_literal(nattr(r, n, "value"));
	return fj_cg_literal(r->cg, &lit, vdt(r, v));
}

/* ---- Philox-4x32-10, exactly as codegen/emit_random.c (THE STREAM) ---- */

static LLVMValueRef c32(fj_rg *r, uint32_t v) { return LLVMConstInt(r->cg->t_i32, v, 0); }

static void mulhilo(fj_rg *r, uint32_t a, LLVMValueRef b, LLVMValueRef *hi, LLVMValueRef *lo)
{
	fj_cg *cg = r->cg;
	LLVMValueRef p = LLVMBuildMul(B, LLVMConstInt(cg->t_i64, a, 0), LLVMBuildZExt(B, b, cg->t_i64, ""), "");
	*lo = LLVMBuildTrunc(B, p, cg->t_i32, "");
	*hi = LLVMBuildTrunc(B, LLVMBuildLShr(B, p, LLVMConstInt(cg->t_i64, 32, 0), ""), cg->t_i32, "");
}

static void philox(fj_rg *r, LLVMValueRef c[4], LLVMValueRef k0, LLVMValueRef k1)
{
	for (int round = 0; round < 10; round++) {
		if (round) {
			k0 = LLVMBuildAdd(B, k0, c32(r, 0x9E3779B9u), "");
			k1 = LLVMBuildAdd(B, k1, c32(r, 0xBB67AE85u), "");
		}
		LLVMValueRef hi0, lo0, hi1, lo1;
		mulhilo(r, 0xD2511F53u, c[0], &hi0, &lo0);
		mulhilo(r, 0xCD9E8D57u, c[2], &hi1, &lo1);
		LLVMValueRef n0 = LLVMBuildXor(B, LLVMBuildXor(B, hi1, c[1], ""), k0, "");
		LLVMValueRef n2 = LLVMBuildXor(B, LLVMBuildXor(B, hi0, c[3], ""), k1, "");
		c[0] = n0;
		c[1] = lo1;
		c[2] = n2;
		c[3] = lo0;
	}
}

static LLVMValueRef lo32(fj_rg *r, LLVMValueRef v) { return LLVMBuildTrunc(B, v, r->cg->t_i32, ""); }
static LLVMValueRef hi32(fj_rg *r, LLVMValueRef v)
{
	return LLVMBuildTrunc(B, LLVMBuildLShr(B, v, c64(r, 32), ""), r->cg->t_i32, "");
}

static LLVMValueRef eval_rand(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_rg_point z;
	fj_rg_point_lin(&z, 0, NULL);
	LLVMValueRef seed = n->opnds[0] == FJ_NOVAL ? c64(r, 0) : fj_rg_eval_as(r, n->opnds[0], &z, FJ_DT_I64);
	LLVMValueRef offset = n->opnds[1] == FJ_NOVAL ? c64(r, 0) : fj_rg_eval_as(r, n->opnds[1], &z, FJ_DT_I64);
	fj_rg_need_lin(r, v, p);
	LLVMValueRef i = p->lin;
	LLVMValueRef blk = LLVMBuildLShr(B, i, c64(r, 2), "");
	LLVMValueRef c[4] = {lo32(r, offset), hi32(r, offset), lo32(r, blk), hi32(r, blk)};
	philox(r, c, lo32(r, seed), hi32(r, seed));
	LLVMValueRef lane = LLVMBuildTrunc(B, LLVMBuildAnd(B, i, c64(r, 3), ""), r->cg->t_i32, "");
	LLVMValueRef w = c[3];
	for (int q = 2; q >= 0; q--)
		w = sel(r, LLVMBuildICmp(B, LLVMIntEQ, lane, c32(r, (uint32_t)q), ""), c[q], w);
	fj_dtype dt = vdt(r, v);
	int bits = dt == FJ_DT_F16 ? 11 : dt == FJ_DT_BF16 ? 8 : 24;
	LLVMValueRef m = LLVMBuildLShr(B, w, c32(r, (uint32_t)(32 - bits)), "");
	LLVMValueRef f = LLVMBuildUIToFP(B, m, r->cg->t_f64, "");
	f = LLVMBuildFMul(B, f, LLVMConstReal(r->cg->t_f64, 1.0 / (double)(1u << bits)), "");
	return fj_cg_convert(r->cg, f, FJ_DT_F64, dt);
}

/* take(a, index){dim}: out = a[:dim] + index.shape + a[dim+1:] */
static LLVMValueRef eval_take(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0], ix = n->opnds[1];
	int ra = vrank(r, a), ri = vrank(r, ix);
	int dim = norm_dim(fj_attr_as_int(nattr(r, n, "dim")), ra);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef iidx[FJ_MAX_RANK], aidx[FJ_MAX_RANK];
	for (int d = 0; d < ri; d++)
		iidx[d] = p->idx[dim + d];
	fj_rg_point q;
	fj_rg_point_idx(&q, ri, iidx);
	LLVMValueRef i = fj_rg_eval_as(r, ix, &q, FJ_DT_I64);
	LLVMValueRef size = ra ? r->vdim[a][dim] : c64(r, 1);
	LLVMValueRef ok = LLVMBuildAnd(B, icmp(r, LLVMIntSGE, i, c64(r, 0)), icmp(r, LLVMIntSLT, i, size), "");
	fj_rg_fail_if(r, LLVMBuildNot(B, ok, ""), FJ_KERR_INDEX);
	i = sel(r, ok, i, c64(r, 0));
	for (int d = 0; d < dim; d++)
		aidx[d] = p->idx[d];
	if (ra)
		aidx[dim] = i;
	for (int d = dim + 1; d < ra; d++)
		aidx[d] = p->idx[d - 1 + ri];
	return eval_at_idx(r, a, aidx);
}

/* gather(a, index){dim}: out[p] = a[p with p[dim] = index[p]] */
static LLVMValueRef eval_gather(fj_rg *r, const fj_node *n, fj_vid v, fj_rg_point *p)
{
	fj_vid a = n->opnds[0], ix = n->opnds[1];
	int ra = vrank(r, a);
	int dim = norm_dim(fj_attr_as_int(nattr(r, n, "dim")), ra);
	fj_rg_need_idx(r, v, p);
	LLVMValueRef i = fj_rg_eval_as(r, ix, p, FJ_DT_I64);
	LLVMValueRef size = ra ? r->vdim[a][dim] : c64(r, 1);
	LLVMValueRef ok = LLVMBuildAnd(B, icmp(r, LLVMIntSGE, i, c64(r, 0)), icmp(r, LLVMIntSLT, i, size), "");
	fj_rg_fail_if(r, LLVMBuildNot(B, ok, ""), FJ_KERR_INDEX);
	LLVMValueRef aidx[FJ_MAX_RANK];
	for (int d = 0; d < ra; d++)
		aidx[d] = p->idx[d];
	if (ra)
		aidx[dim] = sel(r, ok, i, c64(r, 0));
	return eval_at_idx(r, a, aidx);
}

static LLVMValueRef eval_node(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	const fj_node *n = &r->body->nodes[r->a->vals[v].node];
	switch (n->op) {
	case FJ_OP_PRIMS_BROADCAST_IN_DIM: return eval_broadcast(r, n, v, p);
	case FJ_OP_PRIMS_RESHAPE: return eval_reshape(r, n, v, p);
	case FJ_OP_PRIMS_SQUEEZE: return eval_squeeze(r, n, v, p);
	case FJ_OP_PRIMS_TRANSPOSE: return eval_transpose(r, n, v, p);
	case FJ_OP_PRIMS_SLICE: return eval_slice(r, n, v, p);
	case FJ_OP_PRIMS_REV: return eval_rev(r, n, v, p);
	case FJ_OP_PRIMS_PAD: return eval_pad(r, n, v, p);
	case FJ_OP_PRIMS_CAT: return eval_cat(r, n, v, p);
	case FJ_OP_PRIMS_FULL: return eval_full(r, n, v);
	case FJ_OP_PRIMS_IOTA: {
		fj_rg_need_lin(r, v, p);
		return fj_cg_convert(r->cg, p->lin, FJ_DT_I64, vdt(r, v));
	}
	case FJ_OP_PRIMS_RAND: return eval_rand(r, n, v, p);
	case FJ_OP_PRIMS_TAKE: return eval_take(r, n, v, p);
	case FJ_OP_PRIMS_GATHER: return eval_gather(r, n, v, p);
	default: break;
	}
	if (fj_cg_scalar_lowering(n->op))
		return eval_pointwise(r, n, v, p);
	rg_error(r, n, "%s: not computed by this kernel's template", fj_op_name(n->op));
	return undef_of(r, v);
}

LLVMValueRef fj_rg_eval(fj_rg *r, fj_vid v, fj_rg_point *p)
{
	const fj_value *val = &r->body->values[v];
	if (val->kind == FJ_VK_LITERAL)
		return fj_cg_literal(r->cg, &val->lit, val->type.dtype);
	if (r->bound[v])
		return r->bound[v];
	if (r->st != FJ_OK || r->cg->st != FJ_OK)
		return undef_of(r, v);
	LLVMValueRef x = memo_find(r, v, p);
	if (x)
		return x;
	const fj_rg_value *info = &r->a->vals[v];
	if (info->cls == FJ_RG_INPUT) {
		x = eval_input(r, v, p);
	} else {
		x = eval_node(r, v, p);
		fj_dtype dt = val->type.dtype;
		if ((dt == FJ_DT_F16 || dt == FJ_DT_BF16) && x && !LLVMIsUndef(x))
			x = fj_cg_convert(r->cg, x, FJ_DT_F32, dt); /* rounded as if stored */
	}
	memo_add(r, v, p, x);
	return x;
}

void fj_rg_store(fj_rg *r, const fj_cg_tensor *t, LLVMValueRef offset, fj_vid v, fj_rg_point *p)
{
	LLVMValueRef x = fj_rg_eval_as(r, v, p, t->dtype);
	fj_cg_store(r->cg, t, offset, x);
}
