/* infer.c -- result-type inference: the framework, its helpers, and the
 * pointwise, reduction, normalization, loss and backward ops.
 *
 * fj_infer_node gathers a node's operand types, literal scalars and attributes
 * (defaults filled in) and calls the op's inference function from ops.def.
 * Rules follow PyTorch: NumPy broadcasting, c10's result_type with weak
 * scalars, negative dims, reductions with dims/keepdim. Symbolic sizes flow
 * through (see ir.h for their representation). Shape, matrix, indexing and
 * most prims are in infer_shape.c. Every function is linear in the operands'
 * ranks and counts. */
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

const fj_attr *fj_ic_attr_opt(const fj_infer *ic, const char *name)
{
	int i = fj_op_attr_index(ic->info, name, strlen(name));
	return i >= 0 ? &ic->attrs[i] : NULL;
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

/* Whether the static sizes of a shape multiply beyond 64 bits. */
static bool static_overflow(const fj_dim *dims, int rank)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++)
		if (fj_dim_is_static(dims[k]) && __builtin_mul_overflow(n, dims[k], &n))
			return true;
	return false;
}

static fj_status overflow_error(fj_infer *ic, const fj_dim *dims, int rank)
{
	char b[160];
	return fj_infer_error(ic, "the element count of the result %s overflows 64 bits",
	                      fj_ic_shape_str(ic, dims, rank, b, sizeof b));
}

fj_status fj_ic_out_dims(fj_infer *ic, uint32_t i, fj_dtype dt, const fj_dim *dims, int rank)
{
	if (rank > FJ_MAX_RANK)
		return fj_infer_error(ic, "the result would have rank %d; at most %d is supported", rank, FJ_MAX_RANK);
	if (static_overflow(dims, rank))
		return overflow_error(ic, dims, rank);
	if (!fj_ic_out(ic, i, dt, rank))
		return FJ_ERR_NOMEM;
	if (rank)
		memcpy(ic->out[i].dims, dims, (size_t)rank * sizeof *dims);
	return FJ_OK;
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

fj_status fj_ic_dim_mask(fj_infer *ic, const fj_attr *dims, int rank, bool all_if_empty, uint32_t *mask)
{
	*mask = 0;
	if (!dims || dims->kind != FJ_AK_LIST || dims->n == 0) {
		*mask = all_if_empty && rank ? (1u << rank) - 1 : 0;
		return FJ_OK;
	}
	uint32_t seen = 0;
	for (uint32_t i = 0; i < dims->n; i++) {
		int d = 0;
		fj_status st = fj_ic_dim(ic, fj_attr_as_int(&dims->u.items[i]), rank, &d);
		if (st)
			return st;
		if (seen & (1u << d))
			return fj_infer_error(ic, "dim %lld appears more than once in the list of dims",
			                      (long long)fj_attr_as_int(&dims->u.items[i]));
		seen |= 1u << d;
	}
	*mask = rank ? seen : 0;
	return FJ_OK;
}

fj_dtype fj_ic_float_of(fj_dtype dt) { return fj_dtype_is_float(dt) ? dt : FJ_DT_F32; }

/* ---- type promotion ---- */

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

void fj_rt_init(fj_rtstate *s) { s->dim = s->zero = s->wrapped = FJ_DT_COUNT; }

void fj_rt_add(fj_rtstate *s, const fj_type *t)
{
	if (!t)
		return;
	if (t->weak) {
		/* A float literal counts as the default dtype (f32), an int one as i64. */
		fj_dtype dt = fj_dtype_is_float(t->dtype) ? FJ_DT_F32 : t->dtype;
		s->wrapped = promote_undef(s->wrapped, dt);
	} else if (t->rank == 0) {
		s->zero = promote_undef(s->zero, t->dtype);
	} else {
		s->dim = promote_undef(s->dim, t->dtype);
	}
}

void fj_rt_add_attr(fj_rtstate *s, const fj_attr *a)
{
	fj_dtype dt;
	switch (a->kind) {
	case FJ_AK_BOOL: dt = FJ_DT_BOOL; break;
	case FJ_AK_INT: dt = FJ_DT_I64; break;
	case FJ_AK_FLOAT: dt = FJ_DT_F32; break;
	default: return;
	}
	s->wrapped = promote_undef(s->wrapped, dt);
}

fj_dtype fj_rt_result(const fj_rtstate *s)
{
	fj_dtype r = combine(s->dim, combine(s->zero, s->wrapped));
	return r == FJ_DT_COUNT ? FJ_DT_F32 : r;
}

fj_dtype fj_ic_result_type(const fj_infer *ic, uint32_t mask)
{
	fj_rtstate s;
	fj_rt_init(&s);
	for (uint32_t i = 0; i < ic->nin && i < 32; i++)
		if (mask & (1u << i))
			fj_rt_add(&s, ic->in[i]);
	return fj_rt_result(&s);
}

/* ---- broadcasting ---- */

fj_status fj_ic_broadcast_dims(fj_infer *ic, fj_dim *acc, int *racc, const fj_dim *b, int rb)
{
	int ra = *racc;
	int rank = ra > rb ? ra : rb;
	if (rank > FJ_MAX_RANK)
		return fj_infer_error(ic, "rank %d exceeds the supported %d", rank, FJ_MAX_RANK);
	/* Right-align acc in place. */
	if (rank > ra) {
		memmove(acc + (rank - ra), acc, (size_t)ra * sizeof *acc);
		for (int k = 0; k < rank - ra; k++)
			acc[k] = 1;
	}
	for (int k = 0; k < rb; k++) {
		int o = rank - rb + k;
		fj_dim x = acc[o], y = b[k];
		if (x == y || y == 1)
			continue;
		if (x == 1) {
			acc[o] = y;
			continue;
		}
		if (fj_dim_is_static(x) && fj_dim_is_static(y)) {
			char sa[64], sb[64];
			return fj_infer_error(ic, "shapes do not broadcast: size %s against size %s at dim %d",
			                      fj_ic_dim_str(ic, x, sa, sizeof sa), fj_ic_dim_str(ic, y, sb, sizeof sb), o);
		}
		/* Symbolic against anything else: checked at run time; keep a
		 * static size when there is one. */
		if (!fj_dim_is_static(x) && fj_dim_is_static(y))
			acc[o] = y;
	}
	*racc = rank;
	return FJ_OK;
}

fj_status fj_ic_broadcast(fj_infer *ic, uint32_t mask, fj_type *out)
{
	int rank = 0;
	fj_dim dims[FJ_MAX_RANK];
	for (uint32_t i = 0; i < ic->nin && i < 32; i++) {
		const fj_type *t = ic->in[i];
		if (!(mask & (1u << i)) || !t)
			continue;
		fj_status st = fj_ic_broadcast_dims(ic, dims, &rank, t->dims, t->rank);
		if (st)
			return st;
	}
	if (static_overflow(dims, rank))
		return overflow_error(ic, dims, rank);
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

/* ---- messages and checks ---- */

const char *fj_ic_dim_str(const fj_infer *ic, fj_dim d, char *buf, size_t size)
{
	fj_dim_format(ic->m, d, buf, size);
	return buf;
}

const char *fj_ic_shape_str(const fj_infer *ic, const fj_dim *dims, int rank, char *buf, size_t size)
{
	size_t len = 0;
	if (size == 0)
		return buf;
	buf[0] = 0;
	len += (size_t)snprintf(buf, size, "[");
	for (int k = 0; k < rank && len < size; k++) {
		if (k)
			len += (size_t)snprintf(buf + len, size - len, ",");
		if (len < size)
			len += (size_t)fj_dim_format(ic->m, dims[k], buf + len, size - len);
	}
	if (len < size)
		snprintf(buf + len, size - len, "]");
	return buf;
}

const char *fj_ic_type_str(const fj_infer *ic, const fj_type *t, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s", fj_dtype_name(t->dtype));
	if (n >= 0 && (size_t)n < size)
		fj_ic_shape_str(ic, t->dims, t->rank, buf + n, size - (size_t)n);
	return buf;
}

fj_status fj_ic_need_float(fj_infer *ic, const fj_type *t, const char *what)
{
	if (fj_dtype_is_float(t->dtype))
		return FJ_OK;
	return fj_infer_error(ic, "%s must be a floating-point tensor, got %s", what, fj_dtype_name(t->dtype));
}

fj_status fj_ic_need_index(fj_infer *ic, const fj_type *t, const char *what)
{
	if (t->dtype == FJ_DT_I64 || t->dtype == FJ_DT_I32)
		return FJ_OK;
	return fj_infer_error(ic, "%s must be an i64 or i32 tensor, got %s", what, fj_dtype_name(t->dtype));
}

fj_status fj_ic_numel(fj_infer *ic, const fj_dim *dims, int rank, fj_dim *out)
{
	if (fj_dim_product(ic->m, dims, rank, out))
		return FJ_OK;
	if (ic->m->oom)
		return FJ_ERR_NOMEM;
	char b[160];
	return fj_infer_error(ic, "the element count of shape %s overflows 64 bits",
	                      fj_ic_shape_str(ic, dims, rank, b, sizeof b));
}

/* ---- the driver ---- */

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
	/* Required operands are present (fj_check_node); guard anyway, so
	 * that a node that skipped the check gets an error, not a crash. */
	for (uint32_t i = 0; i < oi->noperands; i++) {
		if (oi->operands[i].optional || oi->operands[i].variadic)
			continue;
		if (i >= n->nopnds || !in[i]) {
			st = fj_infer_error(&ic, "operand '%s' is missing", oi->operands[i].name);
			goto done;
		}
	}
	if (!oi->variadic_results && n->nres != oi->nresults) {
		st = fj_infer_error(&ic, "expected %u results, got %u", oi->nresults, n->nres);
		goto done;
	}
	st = oi->infer(&ic);
	if (st == FJ_OK && g->module->oom)
		st = FJ_ERR_NOMEM;
done:
	if (in != in_stack) {
		if (in)
			fj_free(ctx, in, n->nopnds * sizeof *in);
		if (lit)
			fj_free(ctx, lit, n->nopnds * sizeof *lit);
	}
	return st;
}

/* ---- pointwise unary ---- */

static fj_status out1(fj_infer *ic, const fj_type *shape, fj_dtype dt)
{
	return fj_ic_out_like(ic, 0, shape, dt) ? FJ_OK : FJ_ERR_NOMEM;
}

/* Float math: ints and bools compute in f32 (PyTorch). */
fj_status fj_infer_unary_float(fj_infer *ic)
{
	return out1(ic, ic->in[0], fj_ic_float_of(fj_ic_result_type(ic, 1)));
}

/* Keeps the dtype: abs neg floor ceil round trunc sign relu hardtanh. */
fj_status fj_infer_unary_keep(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 1);
	if (dt == FJ_DT_BOOL && ic->op == FJ_OP_ATEN_NEG)
		return fj_infer_error(ic, "negation of a bool tensor is not supported; use logical_not");
	return out1(ic, ic->in[0], dt);
}

/* Activations defined on floating-point tensors only. */
fj_status fj_infer_unary_act(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 1);
	if (!fj_dtype_is_float(dt))
		return fj_infer_error(ic, "expected a floating-point tensor, got %s", fj_dtype_name(dt));
	const fj_attr *ap = fj_ic_attr_opt(ic, "approximate");
	if (ap && ap->kind == FJ_AK_STR && strcmp(ap->u.s, "none") != 0 && strcmp(ap->u.s, "tanh") != 0)
		return fj_infer_error(ic, "approximate must be \"none\" or \"tanh\", got \"%s\"", ap->u.s);
	return out1(ic, ic->in[0], dt);
}

fj_status fj_infer_unary_bool(fj_infer *ic) { return out1(ic, ic->in[0], FJ_DT_BOOL); }

fj_status fj_infer_unary_bitwise(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 1);
	if (fj_dtype_is_float(dt))
		return fj_infer_error(ic, "only integer and bool tensors are supported, got %s", fj_dtype_name(dt));
	return out1(ic, ic->in[0], dt);
}

/* ---- pointwise binary ---- */

static fj_status broadcast_to(fj_infer *ic, uint32_t mask, fj_dtype dt)
{
	fj_status st = fj_ic_broadcast(ic, mask, &ic->out[0]);
	ic->out[0].dtype = dt;
	return st;
}

fj_status fj_infer_binary(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 3);
	if (ic->op == FJ_OP_ATEN_SUB && (ic->in[0]->dtype == FJ_DT_BOOL || ic->in[1]->dtype == FJ_DT_BOOL))
		return fj_infer_error(ic, "subtraction with a bool operand is not supported; use logical_xor");
	const fj_attr *alpha = fj_ic_attr_opt(ic, "alpha");
	if (alpha && !fj_dtype_is_float(dt) && alpha->kind == FJ_AK_FLOAT)
		return fj_infer_error(ic, "for integral operands, alpha must not be a floating-point number");
	if (alpha && dt == FJ_DT_BOOL && alpha->kind == FJ_AK_INT && alpha->u.i != 0 && alpha->u.i != 1)
		return fj_infer_error(ic, "for bool operands, alpha must be a bool");
	return broadcast_to(ic, 3, dt);
}

fj_status fj_infer_div(fj_infer *ic)
{
	const fj_attr *rm = fj_ic_attr_named(ic, "rounding_mode");
	fj_dtype dt = fj_ic_result_type(ic, 3);
	if (rm->kind == FJ_AK_STR) {
		if (strcmp(rm->u.s, "trunc") != 0 && strcmp(rm->u.s, "floor") != 0)
			return fj_infer_error(ic, "rounding_mode must be none, \"trunc\" or \"floor\", got \"%s\"", rm->u.s);
		if (dt == FJ_DT_BOOL)
			return fj_infer_error(ic, "integer division of bool tensors is not supported");
	} else {
		dt = fj_ic_float_of(dt); /* true division */
	}
	return broadcast_to(ic, 3, dt);
}

fj_status fj_infer_binary_float(fj_infer *ic)
{
	return broadcast_to(ic, 3, fj_ic_float_of(fj_ic_result_type(ic, 3)));
}

/* Comparisons and logical ops: bool. */
fj_status fj_infer_compare(fj_infer *ic) { return broadcast_to(ic, 3, FJ_DT_BOOL); }

fj_status fj_infer_bitwise(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 3);
	if (fj_dtype_is_float(dt))
		return fj_infer_error(ic, "only integer and bool operands are supported, got %s", fj_dtype_name(dt));
	return broadcast_to(ic, 3, dt);
}

/* ---- pointwise other ---- */

fj_status fj_infer_where(fj_infer *ic)
{
	if (ic->in[0]->dtype != FJ_DT_BOOL)
		return fj_infer_error(ic, "condition must be a bool tensor, got %s", fj_dtype_name(ic->in[0]->dtype));
	return broadcast_to(ic, 7, fj_ic_result_type(ic, 6));
}

fj_status fj_infer_clamp(fj_infer *ic)
{
	const fj_attr *lo = fj_ic_attr_named(ic, "min"), *hi = fj_ic_attr_named(ic, "max");
	if (fj_attr_is_none(lo) && fj_attr_is_none(hi))
		return fj_infer_error(ic, "at least one of min and max must not be none");
	fj_dtype dt = fj_ic_result_type(ic, 1);
	if (dt == FJ_DT_BOOL)
		return fj_infer_error(ic, "clamp is not supported for bool tensors");
	if (!fj_dtype_is_float(dt)) {
		/* The scalars take part in promotion (PyTorch >= 1.13). */
		fj_rtstate s;
		fj_rt_init(&s);
		fj_rt_add(&s, ic->in[0]);
		fj_rt_add_attr(&s, lo);
		fj_rt_add_attr(&s, hi);
		dt = fj_rt_result(&s);
	}
	return out1(ic, ic->in[0], dt);
}

fj_status fj_infer_lerp(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 7);
	if (!fj_dtype_is_float(dt))
		return fj_infer_error(ic, "expected floating-point operands, got %s", fj_dtype_name(dt));
	return broadcast_to(ic, 7, dt);
}

fj_status fj_infer_addcmul(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 7);
	const fj_attr *v = fj_ic_attr_named(ic, "value");
	if (!fj_dtype_is_float(dt) && v->kind == FJ_AK_FLOAT)
		return fj_infer_error(ic, "for integral operands, value must not be a floating-point number");
	return broadcast_to(ic, 7, dt);
}

fj_status fj_infer_to_copy(fj_infer *ic)
{
	const fj_attr *dt = fj_ic_attr_named(ic, "dtype");
	return out1(ic, ic->in[0], dt->kind == FJ_AK_DTYPE ? dt->u.dt : fj_ic_result_type(ic, 1));
}

fj_status fj_infer_masked_fill(fj_infer *ic)
{
	if (ic->in[1]->dtype != FJ_DT_BOOL)
		return fj_infer_error(ic, "mask must be a bool tensor, got %s", fj_dtype_name(ic->in[1]->dtype));
	if (ic->in[2]->rank != 0)
		return fj_infer_error(ic, "value must be a 0-d tensor or a scalar, got a tensor of rank %d", ic->in[2]->rank);
	return broadcast_to(ic, 3, fj_ic_result_type(ic, 1));
}

/* ---- backward pointwise ops ---- */

fj_status fj_infer_binary_backward(fj_infer *ic)
{
	fj_dtype dt = fj_ic_result_type(ic, 3);
	const fj_attr *ap = fj_ic_attr_opt(ic, "approximate");
	if (ap && ap->kind == FJ_AK_STR && strcmp(ap->u.s, "none") != 0 && strcmp(ap->u.s, "tanh") != 0)
		return fj_infer_error(ic, "approximate must be \"none\" or \"tanh\", got \"%s\"", ap->u.s);
	return broadcast_to(ic, 3, dt);
}

/* ---- reductions ---- */

/* x reduced over mask (kept as size 1 with keepdim) into result i. */
static fj_status reduced(fj_infer *ic, uint32_t i, const fj_type *x, uint32_t mask, bool keepdim, fj_dtype dt)
{
	int rank = 0;
	fj_dim dims[FJ_MAX_RANK];
	for (int k = 0; k < x->rank; k++) {
		if (!(mask & (1u << k)))
			dims[rank++] = x->dims[k];
		else if (keepdim)
			dims[rank++] = 1;
	}
	return fj_ic_out_dims(ic, i, dt, dims, rank);
}

static bool attr_bool(const fj_infer *ic, const char *name)
{
	const fj_attr *a = fj_ic_attr_named(ic, name);
	return a->kind == FJ_AK_BOOL && a->u.b;
}

/* sum mean amax amin prod logsumexp {dims, keepdim, dtype} */
fj_status fj_infer_reduce(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	uint32_t mask;
	fj_status st = fj_ic_dim_mask(ic, fj_ic_attr_named(ic, "dims"), x->rank, true, &mask);
	if (st)
		return st;
	const fj_attr *dta = fj_ic_attr_named(ic, "dtype");
	bool has_dt = dta->kind == FJ_AK_DTYPE;
	fj_dtype dt = x->dtype;
	switch (ic->op) {
	case FJ_OP_ATEN_SUM:
	case FJ_OP_ATEN_PROD:
		dt = has_dt ? dta->u.dt : fj_dtype_is_float(x->dtype) ? x->dtype : FJ_DT_I64;
		break;
	case FJ_OP_ATEN_MEAN:
		dt = has_dt ? dta->u.dt : x->dtype;
		if (!fj_dtype_is_float(dt))
			return fj_infer_error(ic, "could not infer the output dtype: the input must be a "
			                      "floating-point tensor or dtype must be given, got %s", fj_dtype_name(dt));
		break;
	case FJ_OP_ATEN_LOGSUMEXP:
		dt = has_dt ? dta->u.dt : fj_ic_float_of(x->dtype);
		if (!fj_dtype_is_float(dt))
			return fj_infer_error(ic, "dtype must be a floating-point dtype, got %s", fj_dtype_name(dt));
		break;
	default:
		dt = has_dt ? dta->u.dt : x->dtype;
		break;
	}
	return reduced(ic, 0, x, mask, attr_bool(ic, "keepdim"), dt);
}

/* var, var_mean {dims, correction, keepdim} */
fj_status fj_infer_var_mean(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	uint32_t mask;
	fj_status st = fj_ic_dim_mask(ic, fj_ic_attr_named(ic, "dims"), x->rank, true, &mask);
	if (st == FJ_OK)
		st = fj_ic_need_float(ic, x, "self");
	bool keep = attr_bool(ic, "keepdim");
	for (uint32_t i = 0; st == FJ_OK && i < ic->nout; i++)
		st = reduced(ic, i, x, mask, keep, x->dtype);
	return st;
}

/* argmax, argmin {dim?, keepdim} -> i64 */
fj_status fj_infer_argmax(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	const fj_attr *d = fj_ic_attr_named(ic, "dim");
	uint32_t mask = x->rank ? (1u << x->rank) - 1 : 0;
	if (!fj_attr_is_none(d)) {
		int k = 0;
		fj_status st = fj_ic_dim(ic, fj_attr_as_int(d), x->rank, &k);
		if (st)
			return st;
		mask = x->rank ? 1u << k : 0;
	}
	return reduced(ic, 0, x, mask, attr_bool(ic, "keepdim"), FJ_DT_I64);
}

/* ---- normalization ---- */

/* _softmax softmax _log_softmax log_softmax {dim, half_to_float, dtype?} */
fj_status fj_infer_softmax(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int k = 0;
	fj_status st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), x->rank, &k);
	if (st)
		return st;
	const fj_attr *dta = fj_ic_attr_opt(ic, "dtype");
	fj_dtype dt = x->dtype;
	if (dta && dta->kind == FJ_AK_DTYPE) {
		dt = dta->u.dt;
	} else if (attr_bool(ic, "half_to_float")) {
		if (x->dtype != FJ_DT_F16 && x->dtype != FJ_DT_BF16)
			return fj_infer_error(ic, "half_to_float needs an f16 or bf16 input, got %s", fj_dtype_name(x->dtype));
		dt = FJ_DT_F32;
	}
	if (!fj_dtype_is_float(dt))
		return fj_infer_error(ic, "expected a floating-point tensor, got %s", fj_dtype_name(dt));
	return out1(ic, x, dt);
}

/* normalized_shape as sizes into ns; checks that it is x's trailing shape. */
static fj_status norm_shape(fj_infer *ic, const fj_type *x, fj_dim *ns, int *nns)
{
	const fj_attr *a = fj_ic_attr_named(ic, "normalized_shape");
	char b1[160], b2[160];
	if (a->kind != FJ_AK_LIST || a->n == 0 || a->n > FJ_MAX_RANK)
		return fj_infer_error(ic, "normalized_shape must list 1 to %d sizes", FJ_MAX_RANK);
	*nns = (int)a->n;
	for (uint32_t i = 0; i < a->n; i++)
		ns[i] = fj_ic_size(&a->u.items[i]);
	int axis = x->rank - *nns;
	bool ok = axis >= 0;
	for (int i = 0; ok && i < *nns; i++)
		ok = x->dims[axis + i] == ns[i];
	if (!ok)
		return fj_infer_error(ic, "normalized_shape %s does not match the trailing sizes of input %s",
		                      fj_ic_shape_str(ic, ns, *nns, b1, sizeof b1),
		                      fj_ic_type_str(ic, x, b2, sizeof b2));
	return FJ_OK;
}

static fj_status need_shape(fj_infer *ic, const fj_type *t, const fj_dim *dims, int rank, const char *what)
{
	bool ok = t->rank == rank;
	for (int i = 0; ok && i < rank; i++)
		ok = t->dims[i] == dims[i];
	if (ok)
		return FJ_OK;
	char b1[160], b2[160];
	return fj_infer_error(ic, "%s must have shape %s, got %s", what, fj_ic_shape_str(ic, dims, rank, b1, sizeof b1),
	                      fj_ic_type_str(ic, t, b2, sizeof b2));
}

/* native_layer_norm, layer_norm, rms_norm */
fj_status fj_infer_layer_norm(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	fj_dim ns[FJ_MAX_RANK];
	int nns;
	fj_status st = fj_ic_need_float(ic, x, "input");
	if (st == FJ_OK)
		st = norm_shape(ic, x, ns, &nns);
	const char *names[2] = {"weight", "bias"};
	for (uint32_t i = 1; st == FJ_OK && i < 3; i++)
		if (fj_ic_in(ic, i))
			st = need_shape(ic, ic->in[i], ns, nns, names[i - 1]);
	if (st)
		return st;
	if ((st = out1(ic, x, x->dtype)) != FJ_OK || ic->nout == 1)
		return st;
	fj_dim md[FJ_MAX_RANK];
	int axis = x->rank - nns;
	for (int k = 0; k < x->rank; k++)
		md[k] = k < axis ? x->dims[k] : 1;
	if ((st = fj_ic_out_dims(ic, 1, x->dtype, md, x->rank)) != FJ_OK)
		return st;
	return fj_ic_out_dims(ic, 2, x->dtype, md, x->rank);
}

/* The channel count of a batch-norm input [N, C, ...], checking the [C] operands. */
static fj_status channels(fj_infer *ic, const fj_type *x, uint32_t first, uint32_t last, fj_dim *c)
{
	if (x->rank < 2)
		return fj_infer_error(ic, "input must have rank >= 2 ([N, C, ...]), got rank %d", x->rank);
	*c = x->dims[1];
	for (uint32_t i = first; i <= last; i++) {
		const fj_type *t = fj_ic_in(ic, i);
		if (t) {
			fj_status st = need_shape(ic, t, c, 1, ic->info->operands[i].name);
			if (st)
				return st;
		}
	}
	return FJ_OK;
}

/* native_batch_norm, _native_batch_norm_legit_functional */
fj_status fj_infer_batch_norm(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	fj_dim c;
	fj_status st = fj_ic_need_float(ic, x, "input");
	if (st == FJ_OK)
		st = channels(ic, x, 1, 4, &c);
	if (st)
		return st;
	bool training = attr_bool(ic, "training");
	if (!training && (!fj_ic_in(ic, 3) || !fj_ic_in(ic, 4)))
		return fj_infer_error(ic, "running_mean and running_var are needed when not training");
	fj_dim saved = training ? c : 0; /* ATen returns size-0 tensors in eval mode */
	if ((st = out1(ic, x, x->dtype)) != FJ_OK ||
	    (st = fj_ic_out_dims(ic, 1, x->dtype, &saved, 1)) != FJ_OK ||
	    (st = fj_ic_out_dims(ic, 2, x->dtype, &saved, 1)) != FJ_OK)
		return st;
	for (uint32_t i = 3; i < ic->nout; i++) {
		const fj_type *r = fj_ic_in(ic, i == 3 ? 3 : 4);
		if ((st = fj_ic_out_dims(ic, i, r ? r->dtype : x->dtype, &c, 1)) != FJ_OK)
			return st;
	}
	return FJ_OK;
}

/* ---- losses ---- */

static fj_status nll_check(fj_infer *ic, const fj_type *x, const fj_type *target, const fj_type *w, int64_t reduction)
{
	fj_status st = fj_ic_need_float(ic, x, "self");
	if (st == FJ_OK)
		st = fj_ic_need_index(ic, target, "target");
	if (st)
		return st;
	if (x->rank != 1 && x->rank != 2)
		return fj_infer_error(ic, "self must be 1-d [C] or 2-d [N, C], got rank %d", x->rank);
	if (x->rank == 2 ? !(target->rank == 1 && (target->dims[0] == x->dims[0] ||
	                                          !fj_dim_is_static(target->dims[0]) || !fj_dim_is_static(x->dims[0])))
	                 : target->rank > 1) {
		char b1[160], b2[160];
		return fj_infer_error(ic, "target %s does not match self %s", fj_ic_type_str(ic, target, b1, sizeof b1),
		                      fj_ic_type_str(ic, x, b2, sizeof b2));
	}
	if (w && (st = need_shape(ic, w, &x->dims[x->rank - 1], 1, "weight")) != FJ_OK)
		return st;
	if (reduction < 0 || reduction > 2)
		return fj_infer_error(ic, "reduction must be 0 (none), 1 (mean) or 2 (sum), got %lld", (long long)reduction);
	return FJ_OK;
}

fj_status fj_infer_nll_loss_forward(fj_infer *ic)
{
	const fj_type *x = ic->in[0];
	int64_t red = fj_attr_as_int(fj_ic_attr_named(ic, "reduction"));
	fj_status st = nll_check(ic, x, ic->in[1], fj_ic_in(ic, 2), red);
	if (st)
		return st;
	if ((st = fj_ic_out_dims(ic, 0, x->dtype, x->dims, red == 0 && x->rank == 2 ? 1 : 0)) != FJ_OK)
		return st;
	return fj_ic_out_dims(ic, 1, x->dtype, NULL, 0);
}

fj_status fj_infer_nll_loss_backward(fj_infer *ic)
{
	const fj_type *x = ic->in[1];
	int64_t red = fj_attr_as_int(fj_ic_attr_named(ic, "reduction"));
	fj_status st = nll_check(ic, x, ic->in[2], fj_ic_in(ic, 3), red);
	if (st)
		return st;
	return out1(ic, x, x->dtype);
}

/* ---- backward of normalizations ---- */

fj_status fj_infer_softmax_backward(fj_infer *ic)
{
	const fj_type *g = ic->in[0], *y = ic->in[1];
	int k = 0;
	fj_status st = need_shape(ic, g, y->dims, y->rank, "grad_output");
	if (st == FJ_OK)
		st = fj_ic_dim(ic, fj_attr_as_int(fj_ic_attr_named(ic, "dim")), y->rank, &k);
	if (st)
		return st;
	fj_dtype dt = fj_ic_attr_named(ic, "input_dtype")->u.dt;
	if (!fj_dtype_is_float(dt))
		return fj_infer_error(ic, "input_dtype must be a floating-point dtype, got %s", fj_dtype_name(dt));
	return out1(ic, y, dt);
}

static fj_status output_mask3(fj_infer *ic)
{
	const fj_attr *m = fj_ic_attr_named(ic, "output_mask");
	if (m->kind != FJ_AK_LIST || m->n != 3)
		return fj_infer_error(ic, "output_mask must list 3 bools");
	return FJ_OK;
}

fj_status fj_infer_layer_norm_backward(fj_infer *ic)
{
	const fj_type *x = ic->in[1];
	fj_dim ns[FJ_MAX_RANK];
	int nns;
	fj_status st = output_mask3(ic);
	if (st == FJ_OK)
		st = need_shape(ic, ic->in[0], x->dims, x->rank, "grad_out");
	if (st == FJ_OK)
		st = norm_shape(ic, x, ns, &nns);
	if (st)
		return st;
	const fj_type *w = fj_ic_in(ic, 4), *b = fj_ic_in(ic, 5);
	if ((w && (st = need_shape(ic, w, ns, nns, "weight")) != FJ_OK) ||
	    (b && (st = need_shape(ic, b, ns, nns, "bias")) != FJ_OK))
		return st;
	if ((st = out1(ic, x, x->dtype)) != FJ_OK ||
	    (st = fj_ic_out_dims(ic, 1, w ? w->dtype : x->dtype, ns, nns)) != FJ_OK)
		return st;
	return fj_ic_out_dims(ic, 2, b ? b->dtype : w ? w->dtype : x->dtype, ns, nns);
}

fj_status fj_infer_batch_norm_backward(fj_infer *ic)
{
	const fj_type *x = ic->in[1];
	fj_dim c;
	fj_status st = output_mask3(ic);
	if (st == FJ_OK)
		st = need_shape(ic, ic->in[0], x->dims, x->rank, "grad_out");
	if (st == FJ_OK)
		st = channels(ic, x, 2, 6, &c);
	if (st)
		return st;
	const fj_type *w = fj_ic_in(ic, 2);
	fj_dtype wdt = w ? w->dtype : x->dtype;
	if ((st = out1(ic, x, x->dtype)) != FJ_OK || (st = fj_ic_out_dims(ic, 1, wdt, &c, 1)) != FJ_OK)
		return st;
	return fj_ic_out_dims(ic, 2, wdt, &c, 1);
}

fj_status fj_infer_embedding_dense_backward(fj_infer *ic)
{
	const fj_type *g = ic->in[0];
	fj_status st = fj_ic_need_index(ic, ic->in[1], "indices");
	if (st)
		return st;
	if (g->rank < 1)
		return fj_infer_error(ic, "grad_output must have rank >= 1");
	fj_dim d[2] = {fj_ic_size(fj_ic_attr_named(ic, "num_weights")), g->dims[g->rank - 1]};
	if (fj_dim_is_static(d[0]) && d[0] < 0)
		return fj_infer_error(ic, "num_weights must not be negative");
	return fj_ic_out_dims(ic, 0, g->dtype, d, 2);
}

/* ---- fusion.kernel ---- */

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
