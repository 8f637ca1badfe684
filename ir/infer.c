/* infer.c -- result-type inference: shapes and dtypes for every op.
 *
 * fj_infer_node gathers a node's operand types, literal scalars and attributes
 * (defaults filled in) and calls the op's inference function from ops.def.
 * Rules follow PyTorch: NumPy broadcasting, c10's result_type with weak
 * scalars, negative dims, reductions with dims/keepdim. Symbolic sizes flow
 * through (see ir.h for their representation). */
#include <stdio.h>
#include <string.h>

#include "context.h"
#include "infer.h"

fj_status fj_infer_error(fj_infer *ic, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return fj_error(ic->m->ctx, ic->loc, "%s: %s", ic->info->name, msg);
}

const fj_attr *fj_ic_attr_named(const fj_infer *ic, const char *name)
{
	int i = fj_op_attr_index(ic->info, name, strlen(name));
	FJ_ASSERT(i >= 0);
	return &ic->attrs[i];
}

bool fj_ic_out(fj_infer *ic, uint32_t i, fj_dtype dt, int rank)
{
	FJ_ASSERT(i < ic->nout);
	fj_type *t = &ic->out[i];
	memset(t, 0, sizeof *t);
	t->dtype = dt;
	t->rank = (uint8_t)rank;
	if (rank) {
		fj_graph *top = ic->g;
		while (top->parent)
			top = top->parent;
		t->dims = fj_arena_alloc(&top->arena, (size_t)rank * sizeof *t->dims);
		if (!t->dims) {
			ic->m->oom = true;
			return false;
		}
	}
	return true;
}

bool fj_ic_out_like(fj_infer *ic, uint32_t i, const fj_type *t, fj_dtype dt)
{
	if (!fj_ic_out(ic, i, dt, t->rank))
		return false;
	if (t->rank)
		memcpy(ic->out[i].dims, t->dims, t->rank * sizeof *t->dims);
	return true;
}

fj_status fj_ic_dim(fj_infer *ic, int64_t d, int rank, int *out)
{
	int64_t r = rank ? rank : 1;
	if (d < -r || d >= r)
		return fj_infer_error(ic, "dim %lld is out of range for a tensor of rank %d "
		                      "(expected a dim in [%lld, %lld])",
		                      (long long)d, rank, (long long)-r, (long long)r - 1);
	*out = (int)(d < 0 ? d + r : d);
	return FJ_OK;
}

fj_dtype fj_ic_float_of(fj_dtype dt) { return fj_dtype_is_float(dt) ? dt : FJ_DT_F32; }

static int category(fj_dtype dt)
{
	return fj_dtype_is_bool(dt) ? 0 : fj_dtype_is_int(dt) ? 1 : 2;
}

/* c10::combine_categories with FJ_DT_COUNT as "undefined". */
static fj_dtype combine(fj_dtype higher, fj_dtype lower)
{
	if (higher == FJ_DT_COUNT)
		return lower;
	if (lower == FJ_DT_COUNT)
		return higher;
	if (fj_dtype_is_float(higher))
		return higher;
	if (higher == FJ_DT_BOOL || fj_dtype_is_float(lower))
		return fj_dtype_promote(higher, lower);
	return higher;
}

static fj_dtype promote_undef(fj_dtype a, fj_dtype b)
{
	if (a == FJ_DT_COUNT)
		return b;
	if (b == FJ_DT_COUNT)
		return a;
	return fj_dtype_promote(a, b);
}

fj_dtype fj_ic_result_type(const fj_infer *ic, uint32_t mask)
{
	fj_dtype dim = FJ_DT_COUNT, zero = FJ_DT_COUNT, wrapped = FJ_DT_COUNT;
	for (uint32_t i = 0; i < ic->nin && i < 32; i++) {
		const fj_type *t = ic->in[i];
		if (!(mask & (1u << i)) || !t)
			continue;
		if (t->weak) {
			/* A float literal counts as the default dtype (f32). */
			fj_dtype dt = fj_dtype_is_float(t->dtype) ? FJ_DT_F32 : t->dtype;
			wrapped = promote_undef(wrapped, dt);
		} else if (t->rank == 0) {
			zero = promote_undef(zero, t->dtype);
		} else {
			dim = promote_undef(dim, t->dtype);
		}
	}
	(void)category;
	fj_dtype r = combine(dim, combine(zero, wrapped));
	return r == FJ_DT_COUNT ? FJ_DT_F32 : r;
}

fj_status fj_ic_broadcast(fj_infer *ic, uint32_t mask, fj_type *out)
{
	int rank = 0;
	for (uint32_t i = 0; i < ic->nin && i < 32; i++)
		if ((mask & (1u << i)) && ic->in[i] && ic->in[i]->rank > rank)
			rank = ic->in[i]->rank;
	fj_dim dims[FJ_MAX_RANK];
	for (int k = 0; k < rank; k++)
		dims[k] = 1;
	for (uint32_t i = 0; i < ic->nin && i < 32; i++) {
		const fj_type *t = ic->in[i];
		if (!(mask & (1u << i)) || !t)
			continue;
		for (int k = 0; k < t->rank; k++) {
			int o = rank - t->rank + k;
			fj_dim a = dims[o], b = t->dims[k];
			if (a == b || b == 1)
				continue;
			if (a == 1) {
				dims[o] = b;
				continue;
			}
			if (fj_dim_is_static(a) && fj_dim_is_static(b)) {
				char sa[64], sb[64];
				fj_dim_format(ic->m, a, sa, sizeof sa);
				fj_dim_format(ic->m, b, sb, sizeof sb);
				return fj_infer_error(ic, "shapes do not broadcast: size %s against size %s at dim %d",
				                      sa, sb, o);
			}
			/* Symbolic against anything else: checked at run time; keep
			 * a static size when there is one. */
			if (!fj_dim_is_static(a) && fj_dim_is_static(b))
				dims[o] = b;
		}
	}
	out->rank = (uint8_t)rank;
	out->weak = false;
	out->dims = NULL;
	if (rank) {
		fj_graph *top = ic->g;
		while (top->parent)
			top = top->parent;
		out->dims = fj_arena_alloc(&top->arena, (size_t)rank * sizeof *out->dims);
		if (!out->dims) {
			ic->m->oom = true;
			return FJ_ERR_NOMEM;
		}
		memcpy(out->dims, dims, (size_t)rank * sizeof *dims);
	}
	return FJ_OK;
}

fj_status fj_infer_node(fj_graph *g, uint32_t node, fj_type *out)
{
	fj_context *ctx = g->module->ctx;
	fj_node *n = &g->nodes[node];
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	const fj_type *in_stack[16];
	const fj_literal *lit_stack[16];
	const fj_type **in = in_stack;
	const fj_literal **lit = lit_stack;
	fj_attr attrs[FJ_MAX_SPEC];
	fj_status st;
	if (n->nopnds > FJ_ARRAY_LEN(in_stack)) {
		in = fj_alloc(ctx, n->nopnds * sizeof *in);
		lit = fj_alloc(ctx, n->nopnds * sizeof *lit);
		if (!in || !lit) {
			st = FJ_ERR_NOMEM;
			goto done;
		}
	}
	for (uint32_t i = 0; i < n->nopnds; i++) {
		fj_vid v = n->opnds[i];
		in[i] = v == FJ_NOVAL ? NULL : &g->values[v].type;
		lit[i] = v != FJ_NOVAL && g->values[v].kind == FJ_VK_LITERAL ? &g->values[v].lit : NULL;
	}
	for (int i = 0; i < oi->nattrs; i++)
		attrs[i] = n->attrs[i].kind != FJ_AK_ABSENT ? n->attrs[i] : oi->attrs[i].dflt;
	fj_infer ic = {
		.m = g->module, .g = g, .op = n->op, .info = oi, .loc = n->loc,
		.nin = n->nopnds, .in = in, .lit = lit, .attrs = attrs,
		.nout = n->nres, .out = out, .body = n->body,
	};
	memset(out, 0, n->nres * sizeof *out);
	st = oi->infer(&ic);
	if (st == FJ_OK && g->module->oom)
		st = FJ_ERR_NOMEM;
done:
	if (in != in_stack) {
		fj_free(ctx, in, n->nopnds * sizeof *in);
		fj_free(ctx, lit, n->nopnds * sizeof *lit);
	}
	return st;
}

/* ---- inference functions, named in ops.def ---- */

/* Float math: the promoted dtype, ints and bools computing in f32. */
fj_status fj_infer_unary_float(fj_infer *ic)
{
	return fj_ic_out_like(ic, 0, ic->in[0], fj_ic_float_of(fj_ic_result_type(ic, 1))) ? FJ_OK : FJ_ERR_NOMEM;
}

fj_status fj_infer_binary(fj_infer *ic)
{
	fj_status st = fj_ic_broadcast(ic, 3, &ic->out[0]);
	if (st == FJ_OK)
		ic->out[0].dtype = fj_ic_result_type(ic, 3);
	return st;
}

fj_status fj_infer_prim_unary(fj_infer *ic)
{
	return fj_ic_out_like(ic, 0, ic->in[0], ic->in[0]->dtype) ? FJ_OK : FJ_ERR_NOMEM;
}

fj_status fj_infer_prim_binary(fj_infer *ic)
{
	if (!fj_type_equal(ic->in[0], ic->in[1]))
		return fj_infer_error(ic, "operands must have identical shapes and dtypes");
	return fj_ic_out_like(ic, 0, ic->in[0], ic->in[0]->dtype) ? FJ_OK : FJ_ERR_NOMEM;
}

/* Reduction dims: the `dims` attribute (empty: all) normalised into a mask. */
static fj_status reduce_mask(fj_infer *ic, const fj_attr *dims, int rank, uint32_t *mask)
{
	*mask = 0;
	if (dims->kind != FJ_AK_LIST || dims->n == 0) {
		*mask = rank ? (1u << rank) - 1 : 0;
		return FJ_OK;
	}
	for (uint32_t i = 0; i < dims->n; i++) {
		int d = 0;
		fj_status st = fj_ic_dim(ic, fj_attr_as_int(&dims->u.items[i]), rank, &d);
		if (st)
			return st;
		if (*mask & (1u << d))
			return fj_infer_error(ic, "dim %d appears more than once in dims", d);
		if (rank)
			*mask |= 1u << d;
	}
	return FJ_OK;
}

/* The shape of x reduced over mask (kept as size 1 with keepdim). */
static bool reduced(fj_infer *ic, uint32_t out, const fj_type *x, uint32_t mask, bool keepdim, fj_dtype dt)
{
	int rank = 0;
	fj_dim dims[FJ_MAX_RANK];
	for (int k = 0; k < x->rank; k++) {
		if (!(mask & (1u << k)))
			dims[rank++] = x->dims[k];
		else if (keepdim)
			dims[rank++] = 1;
	}
	if (!fj_ic_out(ic, out, dt, rank))
		return false;
	if (rank)
		memcpy(ic->out[out].dims, dims, (size_t)rank * sizeof *dims);
	return true;
}

fj_status fj_infer_var_mean(fj_infer *ic)
{
	uint32_t mask;
	fj_status st = reduce_mask(ic, fj_ic_attr_named(ic, "dims"), ic->in[0]->rank, &mask);
	if (st)
		return st;
	if (!fj_dtype_is_float(ic->in[0]->dtype))
		return fj_infer_error(ic, "expected a floating-point tensor, got %s", fj_dtype_name(ic->in[0]->dtype));
	bool keep = fj_ic_attr_named(ic, "keepdim")->u.b;
	if (!reduced(ic, 0, ic->in[0], mask, keep, ic->in[0]->dtype) ||
	    !reduced(ic, 1, ic->in[0], mask, keep, ic->in[0]->dtype))
		return FJ_ERR_NOMEM;
	return FJ_OK;
}

fj_status fj_infer_prim_reduce(fj_infer *ic)
{
	uint32_t mask;
	fj_status st = reduce_mask(ic, fj_ic_attr_named(ic, "dims"), ic->in[0]->rank, &mask);
	if (st)
		return st;
	return reduced(ic, 0, ic->in[0], mask, false, ic->in[0]->dtype) ? FJ_OK : FJ_ERR_NOMEM;
}

/* linear(x[..., K], w[M, K], b[M]?) -> [..., M] */
fj_status fj_infer_linear(fj_infer *ic)
{
	const fj_type *x = ic->in[0], *w = ic->in[1], *b = ic->nin > 2 ? ic->in[2] : NULL;
	if (x->rank < 1 || w->rank != 2)
		return fj_infer_error(ic, "expected input of rank >= 1 and a 2-d weight");
	if (x->dims[x->rank - 1] != w->dims[1]) {
		char a[64], c[64];
		fj_dim_format(ic->m, x->dims[x->rank - 1], a, sizeof a);
		fj_dim_format(ic->m, w->dims[1], c, sizeof c);
		return fj_infer_error(ic, "input has %s features but weight expects %s", a, c);
	}
	if (x->dtype != w->dtype || (b && b->dtype != x->dtype))
		return fj_infer_error(ic, "operands must have the same dtype");
	if (b && !(b->rank == 0 || (b->rank == 1 && (b->dims[0] == w->dims[0] || b->dims[0] == 1))))
		return fj_infer_error(ic, "bias must have shape [out_features]");
	if (!fj_ic_out_like(ic, 0, x, x->dtype))
		return FJ_ERR_NOMEM;
	ic->out[0].dims[x->rank - 1] = w->dims[0];
	return FJ_OK;
}

fj_status fj_infer_broadcast_in_dim(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *shape = fj_ic_attr_named(ic, "shape"), *bd = fj_ic_attr_named(ic, "broadcast_dims");
	if (shape->n > FJ_MAX_RANK)
		return fj_infer_error(ic, "shape has rank %u; at most %d is supported", shape->n, FJ_MAX_RANK);
	if (bd->n != x->rank)
		return fj_infer_error(ic, "broadcast_dims has %u entries for an operand of rank %d", bd->n, x->rank);
	if (!fj_ic_out(ic, 0, x->dtype, (int)shape->n))
		return FJ_ERR_NOMEM;
	for (uint32_t i = 0; i < shape->n; i++) {
		const fj_attr *d = &shape->u.items[i];
		fj_dim v = d->kind == FJ_AK_DIM ? d->u.dim : d->u.i;
		if (v < 0 && d->kind == FJ_AK_INT)
			return fj_infer_error(ic, "shape has a negative size");
		ic->out[0].dims[i] = v;
	}
	int prev = -1;
	for (uint32_t k = 0; k < bd->n; k++) {
		int64_t d = bd->u.items[k].u.i;
		if (d <= prev || d >= (int64_t)shape->n)
			return fj_infer_error(ic, "broadcast_dims must be increasing and below the result rank %u", shape->n);
		prev = (int)d;
		fj_dim s = x->dims[k], o = ic->out[0].dims[d];
		if (s != o && s != 1)
			return fj_infer_error(ic, "operand dim %u does not broadcast to result dim %lld", k, (long long)d);
	}
	return FJ_OK;
}

fj_status fj_infer_fusion_kernel(fj_infer *ic)
{
	const fj_graph *b = ic->body;
	if (!b)
		return fj_infer_error(ic, "a fusion.kernel needs a body");
	if (b->nresults != ic->nout)
		return fj_infer_error(ic, "the body yields %u values for %u results", b->nresults, ic->nout);
	for (uint32_t i = 0; i < ic->nout; i++)
		if (!fj_ic_out_like(ic, i, &b->values[b->results[i]].type, b->values[b->results[i]].type.dtype))
			return FJ_ERR_NOMEM;
	return FJ_OK;
}
