/* canonicalize.c -- the `canonicalize` pass: constant folding, algebraic
 * simplification, layout composition, CSE and DCE, to a fixed point (IR.md §4).
 *
 * Algorithm: one sweep rebuilds the graph into a new one (passes/rebuild.h):
 * dead nodes (no result used, transitively from the graph's results) are
 * dropped; each live node's operands are mapped, then, for single-result
 * prims, local rules look at the defining nodes of the (new) operands and
 * either replace the result by an existing value, or rewrite the node into
 * another one; finally the node is looked up in a hash table of the nodes
 * built so far (same op, operands, attributes in effect and annotations)
 * and reused when found (CSE). Sweeps repeat until one changes nothing.
 *
 * Rules (prims only; aten ops and fusion.kernel nodes get CSE and DCE only):
 *   - folding: a pointwise prim (unary, binary, compare, where, convert)
 *     whose operands are all prims.full, and layout ops and amax/amin of a
 *     prims.full, become a prims.full; values are computed in double (int64
 *     for integers) and rounded to the result dtype (f32, f16 and bf16
 *     round-to-nearest-even, integers wrap), never folded when the result
 *     would be undefined (integer division by zero, out-of-range casts);
 *   - identities: x*1, 1*x, x+0, 0+x, x-0, x/1 -> x; x-x and x*0 -> 0 for
 *     integers only (NaN and inf); neg(neg x) -> x; where(p, a, a) -> a;
 *     where(splat p, a, b) -> a or b;
 *   - conversions: to the same dtype -> x; convert(convert(x, mid), dst) ->
 *     convert(x, dst) (or x) only when mid holds every value of x's dtype;
 *   - layout: broadcast_in_dim, reshape and transpose of themselves compose;
 *     reshape to the same shape, identity transpose, broadcast_in_dim to the
 *     same shape, full slice, squeeze/rev of nothing, one-operand cat, zero
 *     pad are removed;
 *   - gather of a pointwise prim -> the prim of gathers (push_gather): a
 *     loss reading a log_softmax at its targets computes it there only;
 *   - transpose of the last two dims of a matmul used nowhere else ->
 *     matmul(B^T, A^T) (transpose_matmul): the backward's weight gradient
 *     transpose(X^T dY) becomes dY^T X, whose transposed operands the
 *     matmul kernels read in place, so no transpose kernel is left; also
 *     through a reshape that regroups the batch dims only (4-D heads
 *     folded into a rank-3 matmul's batch): reshape(matmul(B^T, A^T)).
 * Values used by a fusion.kernel are pinned (copied as they are), so a
 * kernel's operands keep their names; bodies are left alone.
 *
 * Invariants: results are unchanged beyond the dtype's rounding; every value
 * keeps its type and name. Complexity: O(nodes) per sweep with hashing; the
 * number of sweeps is bounded by the graph's depth of simplifications. */
#include <math.h>
#include <string.h>

#include "ir/build.h"
#include "passes/pass.h"
#include "passes/rebuild.h"

#define MAX_SWEEPS 64

typedef struct canon {
	fj_context *ctx;
	fj_rebuild rb;
	uint32_t *tab; /* CSE: new node indices, FJ_NONODE = empty */
	uint32_t *nuse; /* uses of each old value by live nodes and the results */
	uint32_t cap;
	uint32_t nfold, nsimp, ncse, ndce;
} canon;

/* A node to build: the old node's shape with a possibly different op,
 * operands and attributes. */
typedef struct spec {
	fj_op op;
	uint32_t nopnds;
	fj_vid *opnds;
	fj_attr *attrs;
} spec;

/* ---- reading the new graph ---- */

static fj_graph *G(canon *c) { return c->rb.g; }
static const fj_type *ty(canon *c, fj_vid v) { return &G(c)->values[v].type; }

/* The node defining new value v, or NULL. */
static const fj_node *def(canon *c, fj_vid v)
{
	if (v == FJ_NOVAL || G(c)->values[v].kind != FJ_VK_RESULT)
		return NULL;
	return &G(c)->nodes[G(c)->values[v].def];
}

static const fj_attr *attr_eff(canon *c, fj_op op, const fj_attr *attrs, const char *name)
{
	const fj_opinfo *oi = fj_op_info(c->ctx, op);
	int i = fj_op_attr_index(oi, name, strlen(name));
	FJ_ASSERT(i >= 0);
	return attrs[i].kind != FJ_AK_ABSENT ? &attrs[i] : &oi->attrs[i].dflt;
}

static const fj_attr *nattr(canon *c, const fj_node *n, const char *name)
{
	return attr_eff(c, n->op, n->attrs, name);
}

/* ---- constants ---- */

typedef struct cval {
	fj_dtype dt;
	double f;  /* float dtypes */
	int64_t i; /* integer dtypes */
	bool b;    /* bool */
} cval;

static double round_to(double x, fj_dtype dt);
static int64_t wrap_to(uint64_t x, fj_dtype dt);

static bool is_const(canon *c, fj_vid v, cval *out)
{
	const fj_node *n = def(c, v);
	if (!n || n->op != FJ_OP_PRIMS_FULL)
		return false;
	const fj_attr *a = nattr(c, n, "value");
	fj_dtype dt = ty(c, v)->dtype;
	out->dt = dt;
	out->f = round_to(fj_attr_as_float(a), dt);
	out->i = wrap_to((uint64_t)(a->kind == FJ_AK_FLOAT ? (int64_t)a->u.f : fj_attr_as_int(a)), dt);
	out->b = a->kind == FJ_AK_FLOAT ? a->u.f != 0 : fj_attr_as_int(a) != 0;
	if (a->kind == FJ_AK_FLOAT && !fj_dtype_is_float(dt))
		return false; /* not written by us; leave it */
	return true;
}

static bool const_is(const cval *v, double x)
{
	if (fj_dtype_is_float(v->dt))
		return v->f == x;
	if (fj_dtype_is_bool(v->dt))
		return (double)v->b == x;
	return (double)v->i == x;
}

/* Rounds to nearest even with p significand bits, minimum normal exponent
 * emin and largest finite value max (f16, bf16). */
static double round_bits(double x, int p, int emin, double max)
{
	if (x == 0 || isnan(x) || isinf(x))
		return x;
	int e;
	frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
	int lead = e - 1 < emin ? emin : e - 1;
	double q = ldexp(1.0, lead - p + 1);
	double r = nearbyint(x / q) * q;
	if (fabs(r) > max)
		return copysign(INFINITY, x);
	return r;
}

static double round_to(double x, fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_F32: return (double)(float)x;
	case FJ_DT_F16: return round_bits(x, 11, -14, 65504.0);
	case FJ_DT_BF16: return round_bits(x, 8, -126, 3.3895313892515355e38);
	default: return x;
	}
}

static int64_t wrap_to(uint64_t x, fj_dtype dt)
{
	switch (dt) {
	case FJ_DT_I32: return (int32_t)(uint32_t)x;
	case FJ_DT_I16: return (int16_t)(uint16_t)x;
	case FJ_DT_I8: return (int8_t)(uint8_t)x;
	case FJ_DT_U8: return (uint8_t)x;
	default: return (int64_t)x;
	}
}

/* v as a double (for float math and conversions). */
static double as_f(const cval *v)
{
	return fj_dtype_is_float(v->dt) ? v->f : fj_dtype_is_bool(v->dt) ? (double)v->b : (double)v->i;
}

static bool convert_val(const cval *a, fj_dtype to, cval *r)
{
	r->dt = to;
	if (fj_dtype_is_bool(to)) {
		r->b = fj_dtype_is_float(a->dt) ? a->f != 0 || isnan(a->f) : fj_dtype_is_bool(a->dt) ? a->b : a->i != 0;
		return true;
	}
	if (fj_dtype_is_float(to)) {
		if (fj_dtype_is_int(a->dt) && (a->i > (1ll << 53) || a->i < -(1ll << 53)))
			return false;
		r->f = round_to(as_f(a), to);
		return true;
	}
	if (fj_dtype_is_float(a->dt)) {
		double t = trunc(a->f);
		double lo = to == FJ_DT_U8 ? 0 : to == FJ_DT_I8 ? -128 : to == FJ_DT_I16 ? -32768 : to == FJ_DT_I32 ? -2147483648.0 : -9.2e18;
		double hi = to == FJ_DT_U8 ? 255 : to == FJ_DT_I8 ? 127 : to == FJ_DT_I16 ? 32767 : to == FJ_DT_I32 ? 2147483647.0 : 9.2e18;
		if (!(t >= lo && t <= hi))
			return false;
		r->i = (int64_t)t;
		return true;
	}
	r->i = wrap_to((uint64_t)(fj_dtype_is_bool(a->dt) ? (int64_t)a->b : a->i), to);
	return true;
}

static bool fold_unary(fj_op op, const cval *a, fj_dtype rdt, cval *r)
{
	r->dt = rdt;
	if (op == FJ_OP_PRIMS_ISNAN || op == FJ_OP_PRIMS_ISINF) {
		r->b = fj_dtype_is_float(a->dt) && (op == FJ_OP_PRIMS_ISNAN ? isnan(a->f) : isinf(a->f));
		return true;
	}
	if (op == FJ_OP_PRIMS_LOGICAL_NOT) {
		cval t;
		convert_val(a, FJ_DT_BOOL, &t);
		r->b = !t.b;
		return true;
	}
	if (fj_dtype_is_float(rdt)) {
		double x = a->f, y;
		switch (op) {
		case FJ_OP_PRIMS_ABS: y = fabs(x); break;
		case FJ_OP_PRIMS_NEG: y = -x; break;
		case FJ_OP_PRIMS_EXP: y = exp(x); break;
		case FJ_OP_PRIMS_EXP2: y = exp2(x); break;
		case FJ_OP_PRIMS_EXPM1: y = expm1(x); break;
		case FJ_OP_PRIMS_LOG: y = log(x); break;
		case FJ_OP_PRIMS_LOG2: y = log2(x); break;
		case FJ_OP_PRIMS_LOG10: y = log10(x); break;
		case FJ_OP_PRIMS_LOG1P: y = log1p(x); break;
		case FJ_OP_PRIMS_SQRT: y = sqrt(x); break;
		case FJ_OP_PRIMS_RSQRT: y = 1 / sqrt(x); break;
		case FJ_OP_PRIMS_RECIPROCAL: y = 1 / x; break;
		case FJ_OP_PRIMS_SIN: y = sin(x); break;
		case FJ_OP_PRIMS_COS: y = cos(x); break;
		case FJ_OP_PRIMS_TAN: y = tan(x); break;
		case FJ_OP_PRIMS_TANH: y = tanh(x); break;
		case FJ_OP_PRIMS_SINH: y = sinh(x); break;
		case FJ_OP_PRIMS_COSH: y = cosh(x); break;
		case FJ_OP_PRIMS_ASIN: y = asin(x); break;
		case FJ_OP_PRIMS_ACOS: y = acos(x); break;
		case FJ_OP_PRIMS_ATAN: y = atan(x); break;
		case FJ_OP_PRIMS_ASINH: y = asinh(x); break;
		case FJ_OP_PRIMS_ACOSH: y = acosh(x); break;
		case FJ_OP_PRIMS_ATANH: y = atanh(x); break;
		case FJ_OP_PRIMS_ERF: y = erf(x); break;
		case FJ_OP_PRIMS_ERFC: y = erfc(x); break;
		case FJ_OP_PRIMS_FLOOR: y = floor(x); break;
		case FJ_OP_PRIMS_CEIL: y = ceil(x); break;
		case FJ_OP_PRIMS_ROUND: y = nearbyint(x); break;
		case FJ_OP_PRIMS_TRUNC: y = trunc(x); break;
		case FJ_OP_PRIMS_SIGN: y = isnan(x) ? x : (x > 0) - (x < 0); break;
		default: return false;
		}
		r->f = round_to(y, rdt);
		return true;
	}
	if (fj_dtype_is_int(rdt)) {
		uint64_t x = (uint64_t)a->i;
		switch (op) {
		case FJ_OP_PRIMS_ABS: r->i = wrap_to(a->i < 0 ? 0 - x : x, rdt); return true;
		case FJ_OP_PRIMS_NEG: r->i = wrap_to(0 - x, rdt); return true;
		case FJ_OP_PRIMS_SIGN: r->i = (a->i > 0) - (a->i < 0); return true;
		case FJ_OP_PRIMS_BITWISE_NOT: r->i = wrap_to(~x, rdt); return true;
		case FJ_OP_PRIMS_FLOOR:
		case FJ_OP_PRIMS_CEIL:
		case FJ_OP_PRIMS_ROUND:
		case FJ_OP_PRIMS_TRUNC: r->i = a->i; return true;
		default: return false;
		}
	}
	if (op == FJ_OP_PRIMS_BITWISE_NOT) {
		r->b = !a->b;
		return true;
	}
	return false;
}

static bool fold_compare(fj_op op, const cval *a, const cval *b, cval *r)
{
	r->dt = FJ_DT_BOOL;
	if (op == FJ_OP_PRIMS_LOGICAL_AND || op == FJ_OP_PRIMS_LOGICAL_OR || op == FJ_OP_PRIMS_LOGICAL_XOR) {
		cval x, y;
		convert_val(a, FJ_DT_BOOL, &x);
		convert_val(b, FJ_DT_BOOL, &y);
		r->b = op == FJ_OP_PRIMS_LOGICAL_AND ? x.b && y.b : op == FJ_OP_PRIMS_LOGICAL_OR ? x.b || y.b : x.b != y.b;
		return true;
	}
	int cmp; /* -1, 0, 1; 2 = unordered */
	if (fj_dtype_is_float(a->dt))
		cmp = isnan(a->f) || isnan(b->f) ? 2 : (a->f > b->f) - (a->f < b->f);
	else if (fj_dtype_is_bool(a->dt))
		cmp = (a->b > b->b) - (a->b < b->b);
	else
		cmp = (a->i > b->i) - (a->i < b->i);
	switch (op) {
	case FJ_OP_PRIMS_EQ: r->b = cmp == 0; return true;
	case FJ_OP_PRIMS_NE: r->b = cmp != 0; return true;
	case FJ_OP_PRIMS_LT: r->b = cmp == -1; return true;
	case FJ_OP_PRIMS_LE: r->b = cmp == -1 || cmp == 0; return true;
	case FJ_OP_PRIMS_GT: r->b = cmp == 1; return true;
	case FJ_OP_PRIMS_GE: r->b = cmp == 1 || cmp == 0; return true;
	default: return false;
	}
}

static bool fold_binary(fj_op op, const cval *a, const cval *b, fj_dtype rdt, cval *r)
{
	if (rdt == FJ_DT_BOOL && !fj_dtype_is_bool(a->dt))
		return fold_compare(op, a, b, r);
	r->dt = rdt;
	if (fj_dtype_is_float(rdt)) {
		double x = a->f, y = b->f, z;
		switch (op) {
		case FJ_OP_PRIMS_ADD: z = x + y; break;
		case FJ_OP_PRIMS_SUB: z = x - y; break;
		case FJ_OP_PRIMS_MUL: z = x * y; break;
		case FJ_OP_PRIMS_DIV: z = x / y; break;
		case FJ_OP_PRIMS_POW: z = pow(x, y); break;
		case FJ_OP_PRIMS_MAXIMUM: z = isnan(x) || isnan(y) ? NAN : fmax(x, y); break;
		case FJ_OP_PRIMS_MINIMUM: z = isnan(x) || isnan(y) ? NAN : fmin(x, y); break;
		case FJ_OP_PRIMS_ATAN2: z = atan2(x, y); break;
		case FJ_OP_PRIMS_FMOD: z = fmod(x, y); break;
		case FJ_OP_PRIMS_REMAINDER:
			z = fmod(x, y);
			if (z != 0 && (z < 0) != (y < 0))
				z += y;
			break;
		default: return false;
		}
		r->f = round_to(z, rdt);
		return true;
	}
	if (fj_dtype_is_int(rdt)) {
		int64_t x = a->i, y = b->i;
		uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
		switch (op) {
		case FJ_OP_PRIMS_ADD: r->i = wrap_to(ux + uy, rdt); return true;
		case FJ_OP_PRIMS_SUB: r->i = wrap_to(ux - uy, rdt); return true;
		case FJ_OP_PRIMS_MUL: r->i = wrap_to(ux * uy, rdt); return true;
		case FJ_OP_PRIMS_MAXIMUM: r->i = x > y ? x : y; return true;
		case FJ_OP_PRIMS_MINIMUM: r->i = x < y ? x : y; return true;
		case FJ_OP_PRIMS_BITWISE_AND: r->i = wrap_to(ux & uy, rdt); return true;
		case FJ_OP_PRIMS_BITWISE_OR: r->i = wrap_to(ux | uy, rdt); return true;
		case FJ_OP_PRIMS_BITWISE_XOR: r->i = wrap_to(ux ^ uy, rdt); return true;
		default: break;
		}
		if (y == 0 || (x == INT64_MIN && y == -1))
			return false;
		switch (op) {
		case FJ_OP_PRIMS_DIV: r->i = wrap_to((uint64_t)(x / y), rdt); return true;
		case FJ_OP_PRIMS_FMOD: r->i = x % y; return true;
		case FJ_OP_PRIMS_REMAINDER: {
			int64_t m = x % y;
			if (m != 0 && (m < 0) != (y < 0))
				m += y;
			r->i = m;
			return true;
		}
		default: return false;
		}
	}
	/* bool operands and result */
	switch (op) {
	case FJ_OP_PRIMS_BITWISE_AND:
	case FJ_OP_PRIMS_LOGICAL_AND: r->b = a->b && b->b; return true;
	case FJ_OP_PRIMS_BITWISE_OR:
	case FJ_OP_PRIMS_LOGICAL_OR: r->b = a->b || b->b; return true;
	case FJ_OP_PRIMS_BITWISE_XOR:
	case FJ_OP_PRIMS_LOGICAL_XOR: r->b = a->b != b->b; return true;
	default: return fold_compare(op, a, b, r);
	}
}

/* ---- rules ---- */

enum { NONE, REPL, SPEC };

/* s := prims.full of the node's result type with value v. */
static int make_full(canon *c, spec *s, const fj_type *rt, const cval *v)
{
	fj_graph *g = G(c);
	s->op = FJ_OP_PRIMS_FULL;
	s->nopnds = 0;
	s->attrs[0] = fj_attr_shape(g, rt->dims, rt->rank);
	s->attrs[1] = fj_dtype_is_float(v->dt) ? fj_attr_float(v->f)
	              : fj_dtype_is_bool(v->dt) ? fj_attr_bool(v->b) : fj_attr_int(v->i);
	s->attrs[2] = fj_attr_dtype(rt->dtype);
	c->nfold++;
	return SPEC;
}

static bool lossless(fj_dtype from, fj_dtype to)
{
	if (from == to || from == FJ_DT_BOOL)
		return true;
	switch (from) {
	case FJ_DT_U8: return to == FJ_DT_I16 || to == FJ_DT_I32 || to == FJ_DT_I64 || fj_dtype_is_float(to);
	case FJ_DT_I8: return to == FJ_DT_I16 || to == FJ_DT_I32 || to == FJ_DT_I64 || fj_dtype_is_float(to);
	case FJ_DT_I16: return to == FJ_DT_I32 || to == FJ_DT_I64 || to == FJ_DT_F32 || to == FJ_DT_F64;
	case FJ_DT_I32: return to == FJ_DT_I64 || to == FJ_DT_F64;
	case FJ_DT_F16:
	case FJ_DT_BF16: return to == FJ_DT_F32 || to == FJ_DT_F64;
	case FJ_DT_F32: return to == FJ_DT_F64;
	default: return false;
	}
}

static bool same_shape(const fj_type *a, const fj_type *b)
{
	if (a->rank != b->rank)
		return false;
	for (int k = 0; k < a->rank; k++)
		if (a->dims[k] != b->dims[k])
			return false;
	return true;
}

/* Tries the rules on node n (single-result prim) with new operands s->opnds.
 * REPL: *repl is the value to use; SPEC: s was rewritten; NONE. */
/* Does broadcast node bn (result of a's shape) repeat its operand along dim
 * (dim not one of its broadcast_dims, or mapped from a size-1 dim)? */
static bool constant_along(canon *c, const fj_node *bn, int64_t dim)
{
	const fj_attr *bd = nattr(c, bn, "broadcast_dims");
	const fj_type *at = ty(c, bn->opnds[0]);
	for (uint32_t i = 0; bd && i < bd->n; i++)
		if (bd->u.items[i].u.i == dim && !(i < (uint32_t)at->rank && at->dims[i] == 1))
			return false;
	return bd != NULL;
}

/* gather(p(x, y, ..), index) {dim} -> p(gather(x, index), .. ) for a
 * pointwise prim p: p is computed at the gathered points only (a loss that
 * reads a log_softmax at the targets no longer needs the whole log_softmax
 * written; the kernels then keep just its per-row statistics). An operand
 * that a broadcast repeats along dim (a per-row value) is broadcast to the
 * index's shape instead of gathered; literals stay. The index must cover
 * a in every other dim (then out[.., j, ..] reads the same row of a). */
static int push_gather(canon *c, const fj_node *n, spec *s)
{
	fj_vid a = s->opnds[0], index = s->opnds[1];
	const fj_node *pn = def(c, a);
	const fj_attr *da = attr_eff(c, n->op, s->attrs, "dim");
	if (!pn || !da || pn->nres != 1 || pn->nograd || pn->body || pn->nopnds > 3)
		return NONE;
	const fj_opinfo *pi = fj_op_info(c->ctx, pn->op);
	if (!(pi->flags & FJ_OPF_POINTWISE) || !(pi->flags & FJ_OPF_PRIMS))
		return NONE;
	const fj_type *at = ty(c, a), *it = ty(c, index);
	int64_t dim = da->u.i < 0 ? da->u.i + at->rank : da->u.i;
	if (at->rank != it->rank || dim < 0 || dim >= at->rank)
		return NONE;
	for (int d = 0; d < at->rank; d++)
		if (d != dim && at->dims[d] != it->dims[d])
			return NONE;
	fj_builder b;
	fj_builder_init(&b, G(c), n->loc);
	uint32_t n0 = G(c)->nnodes;
	fj_vid ops[3];
	for (uint32_t i = 0; i < pn->nopnds; i++) {
		fj_vid o = pn->opnds[i];
		const fj_node *on = def(c, o);
		if (G(c)->values[o].kind == FJ_VK_LITERAL) {
			ops[i] = o;
		} else if (!same_shape(ty(c, o), at)) {
			return NONE; /* before any node is built */
		} else if (on && on->op == FJ_OP_PRIMS_BROADCAST_IN_DIM && constant_along(c, on, dim)) {
			fj_named_attr ba[2] = {{"shape", fj_attr_shape(G(c), it->dims, it->rank)},
			                       {"broadcast_dims", *nattr(c, on, "broadcast_dims")}};
			ops[i] = fj_b_op1(&b, FJ_OP_PRIMS_BROADCAST_IN_DIM, &on->opnds[0], 1, ba, 2);
		} else {
			fj_named_attr ga = {"dim", fj_attr_int(dim)};
			ops[i] = fj_b_op1(&b, FJ_OP_PRIMS_GATHER, (fj_vid[]){o, index}, 2, &ga, 1);
		}
	}
	if (fj_b_status(&b) != FJ_OK || fj_pass_rebuild_name_from(&c->rb, n0, c->rb.old->values[n->res[0]].name, "_g") != FJ_OK)
		return NONE; /* the built nodes are dead: the next sweep drops them */
	s->op = pn->op;
	s->nopnds = pn->nopnds;
	for (uint32_t i = 0; i < pn->nopnds; i++)
		s->opnds[i] = ops[i];
	if (pi->nattrs)
		memcpy(s->attrs, pn->attrs, pi->nattrs * sizeof *s->attrs);
	c->nsimp++;
	return SPEC;
}

/* The perm of a transpose of the last two of `rank` dims. */
static void swap_last_perm(int64_t *perm, int rank)
{
	for (int k = 0; k < rank; k++)
		perm[k] = k < rank - 2 ? k : 2 * rank - 3 - k;
}

/* transpose(matmul(A, B)){perm swaps the last two dims} -> matmul(B^T, A^T)
 * (B^T, A^T: transposes of the last two dims, which compose with transposes
 * A or B may already be, on the next sweep). Only when the matmul's result
 * has no other use (else two matmuls would run) and A, B have the result's
 * rank (no batch broadcast). Each C[.., j, i] sums the same products in the
 * same order, so results are unchanged. A reshape between them that only
 * regroups the batch dims (the last two kept: heads folded into a rank-3
 * matmul's batch) stays, its last two dims swapped:
 * transpose(reshape(matmul(A, B))) -> reshape(matmul(B^T, A^T)), when
 * nothing else reads the reshape or the matmul either. */
static int transpose_matmul(canon *c, const fj_node *n, spec *s)
{
	fj_vid a = s->opnds[0];
	fj_vid oa = n->opnds[0]; /* the old value the matmul's result stands for */
	const fj_node *mn = def(c, a), *rn = NULL;
	const fj_attr *p = attr_eff(c, n->op, s->attrs, "perm");
	const fj_graph *og = c->rb.old;
	int rank = ty(c, a)->rank;
	if (mn && mn->op == FJ_OP_PRIMS_RESHAPE && !mn->nograd && c->nuse[oa] == 1 &&
	    og->values[oa].kind == FJ_VK_RESULT) {
		const fj_node *orn = &og->nodes[og->values[oa].def];
		if (orn->op == FJ_OP_PRIMS_RESHAPE && c->rb.map[orn->opnds[0]] == mn->opnds[0]) {
			rn = mn;
			oa = orn->opnds[0];
			mn = def(c, rn->opnds[0]);
		}
	}
	if (!mn || mn->op != FJ_OP_PRIMS_MATMUL || mn->nograd || mn->nres != 1 || c->nuse[oa] != 1 || rank < 2 ||
	    p->n != (uint32_t)rank)
		return NONE;
	int64_t perm[FJ_MAX_RANK];
	swap_last_perm(perm, rank);
	for (int k = 0; k < rank; k++)
		if (fj_attr_as_int(&p->u.items[k]) != perm[k])
			return NONE;
	const fj_type *mt = ty(c, mn->res[0]), *at = ty(c, a);
	int mr = mt->rank;
	if (rn && (mr < 2 || mt->dims[mr - 2] != at->dims[rank - 2] || mt->dims[mr - 1] != at->dims[rank - 1]))
		return NONE;
	fj_vid x = mn->opnds[0], y = mn->opnds[1];
	if (ty(c, x)->rank != mr || ty(c, y)->rank != mr)
		return NONE;
	fj_builder b;
	fj_builder_init(&b, G(c), n->loc);
	uint32_t n0 = G(c)->nnodes;
	swap_last_perm(perm, mr);
	fj_named_attr pa = {"perm", fj_attr_ints(G(c), perm, (uint32_t)mr)};
	fj_vid yt = fj_b_op1(&b, FJ_OP_PRIMS_TRANSPOSE, &y, 1, &pa, 1);
	fj_vid xt = fj_b_op1(&b, FJ_OP_PRIMS_TRANSPOSE, &x, 1, &pa, 1);
	fj_vid mm = rn ? fj_b_op1(&b, FJ_OP_PRIMS_MATMUL, (fj_vid[]){yt, xt}, 2, NULL, 0) : FJ_NOVAL;
	if (fj_b_status(&b) != FJ_OK || fj_pass_rebuild_name_from(&c->rb, n0, og->values[n->res[0]].name, "_t") != FJ_OK)
		return NONE; /* the built nodes are dead: the next sweep drops them */
	if (rn) {
		const fj_type *rt = &og->values[n->res[0]].type;
		s->op = FJ_OP_PRIMS_RESHAPE;
		s->nopnds = 1;
		s->opnds[0] = mm;
		s->attrs[0] = fj_attr_shape(G(c), rt->dims, rt->rank);
	} else {
		s->op = FJ_OP_PRIMS_MATMUL;
		s->nopnds = 2;
		s->opnds[0] = yt;
		s->opnds[1] = xt;
	}
	c->nsimp++;
	return SPEC;
}

static int simplify(canon *c, const fj_node *n, spec *s, fj_vid *repl)
{
	fj_op op = n->op;
	const fj_opinfo *oi = fj_op_info(c->ctx, op);
	const fj_type *rt = &c->rb.old->values[n->res[0]].type;
	fj_vid a = s->nopnds > 0 ? s->opnds[0] : FJ_NOVAL, b = s->nopnds > 1 ? s->opnds[1] : FJ_NOVAL;
	cval ca, cb, cr;
	bool ka = a != FJ_NOVAL && is_const(c, a, &ca), kb = b != FJ_NOVAL && is_const(c, b, &cb);

	/* folding */
	if (oi->flags & FJ_OPF_POINTWISE) {
		bool all = s->nopnds > 0;
		cval cv[3];
		for (uint32_t i = 0; i < s->nopnds && i < 3 && all; i++)
			all = is_const(c, s->opnds[i], &cv[i]);
		if (all && s->nopnds <= 3) {
			bool okf = false;
			if (op == FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE)
				okf = convert_val(&cv[0], rt->dtype, &cr);
			else if (op == FJ_OP_PRIMS_WHERE)
				okf = true, cr = cv[0].b ? cv[1] : cv[2];
			else if (s->nopnds == 1)
				okf = fold_unary(op, &cv[0], rt->dtype, &cr);
			else if (s->nopnds == 2)
				okf = fold_binary(op, &cv[0], &cv[1], rt->dtype, &cr);
			if (okf)
				return make_full(c, s, rt, &cr);
		}
	}
	if (ka && s->nopnds == 1 && ((oi->flags & FJ_OPF_LAYOUT) || op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN)) {
		bool okf = op != FJ_OP_PRIMS_PAD;
		if (op == FJ_OP_PRIMS_AMAX || op == FJ_OP_PRIMS_AMIN) {
			const fj_type *at = ty(c, a);
			for (int k = 0; k < at->rank; k++)
				okf &= fj_dim_is_static(at->dims[k]) && at->dims[k] > 0;
		}
		if (okf)
			return make_full(c, s, rt, &ca);
	}
	if (op == FJ_OP_PRIMS_CAT && ka) {
		bool all = true;
		for (uint32_t i = 1; i < s->nopnds && all; i++) {
			cval ci;
			all = is_const(c, s->opnds[i], &ci) && memcmp(&ci, &ca, sizeof ci) == 0;
		}
		if (all)
			return make_full(c, s, rt, &ca);
	}

	/* identities */
	bool isint = fj_dtype_is_int(rt->dtype);
	switch (op) {
	case FJ_OP_PRIMS_MUL:
		if (kb && const_is(&cb, 1))
			return *repl = a, REPL;
		if (ka && const_is(&ca, 1))
			return *repl = b, REPL;
		if (isint && ((kb && const_is(&cb, 0)) || (ka && const_is(&ca, 0))))
			return cr = (cval){.dt = rt->dtype}, make_full(c, s, rt, &cr);
		break;
	case FJ_OP_PRIMS_ADD:
		if (kb && const_is(&cb, 0))
			return *repl = a, REPL;
		if (ka && const_is(&ca, 0))
			return *repl = b, REPL;
		break;
	case FJ_OP_PRIMS_SUB:
		if (kb && const_is(&cb, 0))
			return *repl = a, REPL;
		if (isint && a == b)
			return cr = (cval){.dt = rt->dtype}, make_full(c, s, rt, &cr);
		break;
	case FJ_OP_PRIMS_DIV:
		if (kb && const_is(&cb, 1))
			return *repl = a, REPL;
		break;
	case FJ_OP_PRIMS_NEG: {
		const fj_node *d = def(c, a);
		if (d && d->op == FJ_OP_PRIMS_NEG)
			return *repl = d->opnds[0], REPL;
		break;
	}
	case FJ_OP_PRIMS_WHERE: {
		fj_vid x = s->opnds[1], y = s->opnds[2];
		if (x == y)
			return *repl = x, REPL;
		if (ka)
			return *repl = ca.b ? x : y, REPL;
		break;
	}
	case FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE: {
		if (ty(c, a)->dtype == rt->dtype)
			return *repl = a, REPL;
		const fj_node *d = def(c, a);
		if (d && d->op == FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE) {
			fj_vid x = d->opnds[0];
			fj_dtype src = ty(c, x)->dtype, mid = ty(c, a)->dtype;
			if (lossless(src, mid)) {
				if (src == rt->dtype)
					return *repl = x, REPL;
				s->opnds[0] = x;
				c->nsimp++;
				return SPEC;
			}
		}
		break;
	}
	case FJ_OP_PRIMS_BROADCAST_IN_DIM: {
		if (same_shape(ty(c, a), rt))
			return *repl = a, REPL;
		const fj_node *d = def(c, a);
		if (d && d->op == FJ_OP_PRIMS_BROADCAST_IN_DIM) {
			const fj_attr *inner = nattr(c, d, "broadcast_dims");
			const fj_attr *outer = attr_eff(c, op, s->attrs, "broadcast_dims");
			int64_t bd[FJ_MAX_RANK];
			for (uint32_t k = 0; k < inner->n; k++)
				bd[k] = fj_attr_as_int(&outer->u.items[fj_attr_as_int(&inner->u.items[k])]);
			s->opnds[0] = d->opnds[0];
			s->attrs[fj_op_attr_index(oi, "broadcast_dims", 14)] = fj_attr_ints(G(c), bd, inner->n);
			c->nsimp++;
			return SPEC;
		}
		break;
	}
	case FJ_OP_PRIMS_RESHAPE: {
		if (same_shape(ty(c, a), rt))
			return *repl = a, REPL;
		const fj_node *d = def(c, a);
		if (d && d->op == FJ_OP_PRIMS_RESHAPE) {
			if (same_shape(ty(c, d->opnds[0]), rt))
				return *repl = d->opnds[0], REPL;
			s->opnds[0] = d->opnds[0];
			c->nsimp++;
			return SPEC;
		}
		break;
	}
	case FJ_OP_PRIMS_TRANSPOSE: {
		const fj_attr *p = attr_eff(c, op, s->attrs, "perm");
		bool id = true;
		for (uint32_t k = 0; k < p->n; k++)
			id &= fj_attr_as_int(&p->u.items[k]) == (int64_t)k;
		if (id)
			return *repl = a, REPL;
		const fj_node *d = def(c, a);
		if (d && d->op == FJ_OP_PRIMS_TRANSPOSE) {
			const fj_attr *p1 = nattr(c, d, "perm");
			int64_t perm[FJ_MAX_RANK];
			bool id2 = true;
			for (uint32_t k = 0; k < p->n; k++) {
				perm[k] = fj_attr_as_int(&p1->u.items[fj_attr_as_int(&p->u.items[k])]);
				id2 &= perm[k] == (int64_t)k;
			}
			if (id2)
				return *repl = d->opnds[0], REPL;
			s->opnds[0] = d->opnds[0];
			s->attrs[0] = fj_attr_ints(G(c), perm, p->n);
			c->nsimp++;
			return SPEC;
		}
		return transpose_matmul(c, n, s);
	}
	case FJ_OP_PRIMS_SQUEEZE:
	case FJ_OP_PRIMS_REV:
	case FJ_OP_PRIMS_SLICE:
	case FJ_OP_PRIMS_PAD:
		if (op == FJ_OP_PRIMS_REV) {
			const fj_attr *dims = attr_eff(c, op, s->attrs, "dims");
			bool noop = true;
			for (uint32_t k = 0; k < dims->n; k++)
				noop &= ty(c, a)->dims[fj_attr_as_int(&dims->u.items[k])] <= 1;
			if (!noop)
				break;
		}
		if (op == FJ_OP_PRIMS_PAD) {
			const fj_attr *lo = attr_eff(c, op, s->attrs, "low"), *hi = attr_eff(c, op, s->attrs, "high");
			bool zero = true;
			for (uint32_t k = 0; k < lo->n; k++)
				zero &= fj_attr_as_int(&lo->u.items[k]) == 0 && fj_attr_as_int(&hi->u.items[k]) == 0;
			if (!zero)
				break;
		}
		if (same_shape(ty(c, a), rt))
			return *repl = a, REPL;
		break;
	case FJ_OP_PRIMS_CAT:
		if (s->nopnds == 1)
			return *repl = a, REPL;
		break;
	case FJ_OP_PRIMS_GATHER:
		return push_gather(c, n, s);
	default: break;
	}
	return NONE;
}

/* ---- CSE ---- */

static uint32_t hash_vid(canon *c, fj_vid v)
{
	if (v == FJ_NOVAL)
		return 0x9e3779b9u;
	const fj_value *val = &G(c)->values[v];
	if (val->kind == FJ_VK_LITERAL) {
		uint64_t bits;
		double f = val->lit.kind == FJ_LIT_FLOAT ? val->lit.f : (double)val->lit.i + val->lit.b;
		memcpy(&bits, &f, sizeof bits);
		return (uint32_t)(bits ^ (bits >> 32)) * 31u + val->lit.kind;
	}
	return v * 2654435761u;
}

static bool same_vid(canon *c, fj_vid a, fj_vid b)
{
	if (a == b)
		return true;
	if (a == FJ_NOVAL || b == FJ_NOVAL)
		return false;
	const fj_value *x = &G(c)->values[a], *y = &G(c)->values[b];
	return x->kind == FJ_VK_LITERAL && y->kind == FJ_VK_LITERAL && x->lit.kind == y->lit.kind &&
	       x->lit.i == y->lit.i && x->lit.b == y->lit.b && memcmp(&x->lit.f, &y->lit.f, sizeof x->lit.f) == 0;
}

static uint32_t hash_spec(canon *c, const spec *s)
{
	uint32_t h = (uint32_t)s->op * 0x85ebca6bu;
	for (uint32_t i = 0; i < s->nopnds; i++)
		h = (h ^ hash_vid(c, s->opnds[i])) * 16777619u;
	return h;
}

/* The new node equal to s (with the old node's annotations), or FJ_NONODE. */
static uint32_t cse_find(canon *c, const spec *s, const fj_node *old, uint32_t *slot)
{
	const fj_opinfo *oi = fj_op_info(c->ctx, s->op);
	uint32_t mask = c->cap - 1;
	for (uint32_t i = hash_spec(c, s) & mask;; i = (i + 1) & mask) {
		uint32_t k = c->tab[i];
		if (k == FJ_NONODE) {
			*slot = i;
			return FJ_NONODE;
		}
		const fj_node *n = &G(c)->nodes[k];
		if (n->op != s->op || n->nopnds != s->nopnds || n->nres != old->nres || n->body ||
		    n->recomputable != old->recomputable || n->nograd != old->nograd)
			continue; /* annotations are part of a node's identity */
		bool eq = true;
		for (uint32_t j = 0; j < s->nopnds && eq; j++)
			eq = same_vid(c, n->opnds[j], s->opnds[j]);
		for (int j = 0; j < oi->nattrs && eq; j++) {
			const fj_attr *x = n->attrs[j].kind != FJ_AK_ABSENT ? &n->attrs[j] : &oi->attrs[j].dflt;
			const fj_attr *y = s->attrs[j].kind != FJ_AK_ABSENT ? &s->attrs[j] : &oi->attrs[j].dflt;
			eq = fj_attr_equal(x, y);
		}
		if (eq)
			return k;
	}
}

/* ---- one sweep ---- */

static fj_status sweep(canon *c, fj_module *m, fj_graph *og, bool *changed)
{
	fj_context *ctx = c->ctx;
	bool *used = NULL, *live = NULL, *pinned = NULL;
	size_t nv = og->nvalues ? og->nvalues : 1, nn = og->nnodes ? og->nnodes : 1; /* og may be replaced */
	fj_status st = fj_pass_liveness(og, &used, &live);
	if (st)
		return st;
	pinned = fj_alloc(ctx, og->nvalues ? og->nvalues : 1);
	c->nuse = fj_alloc(ctx, nv * sizeof *c->nuse);
	c->cap = 16;
	while (c->cap < 2 * og->nnodes + 16)
		c->cap *= 2;
	c->tab = fj_alloc(ctx, c->cap * sizeof *c->tab);
	if (!pinned || !c->tab || !c->nuse) {
		st = FJ_ERR_NOMEM;
		goto out;
	}
	memset(c->nuse, 0, nv * sizeof *c->nuse);
	for (uint32_t i = 0; i < og->nresults; i++)
		if (og->results[i] != FJ_NOVAL)
			c->nuse[og->results[i]]++;
	for (uint32_t ni = 0; ni < og->nnodes; ni++)
		for (uint32_t i = 0; live[ni] && i < og->nodes[ni].nopnds; i++)
			if (og->nodes[ni].opnds[i] != FJ_NOVAL)
				c->nuse[og->nodes[ni].opnds[i]]++;
	memset(pinned, 0, og->nvalues ? og->nvalues : 1);
	memset(c->tab, 0xff, c->cap * sizeof *c->tab);
	for (uint32_t ni = 0; ni < og->nnodes; ni++)
		if (live[ni] && og->nodes[ni].op == FJ_OP_FUSION_KERNEL)
			for (uint32_t i = 0; i < og->nodes[ni].nopnds; i++)
				if (og->nodes[ni].opnds[i] != FJ_NOVAL)
					pinned[og->nodes[ni].opnds[i]] = true;
	if ((st = fj_pass_rebuild_begin(&c->rb, og)) != FJ_OK)
		goto out;
	for (uint32_t ni = 0; ni < og->nnodes && st == FJ_OK; ni++) {
		const fj_node *n = &og->nodes[ni];
		if (!live[ni]) {
			c->ndce++;
			*changed = true;
			continue;
		}
		const fj_opinfo *oi = fj_op_info(ctx, n->op);
		fj_vid ostack[16], *ops = n->nopnds <= 16 ? ostack : fj_alloc(ctx, n->nopnds * sizeof *ops);
		fj_attr attrs[FJ_MAX_SPEC];
		if (!ops) {
			st = FJ_ERR_NOMEM;
			break;
		}
		for (uint32_t i = 0; i < n->nopnds; i++)
			ops[i] = fj_pass_rebuild_value(&c->rb, n->opnds[i]);
		if (oi->nattrs)
			memcpy(attrs, n->attrs, oi->nattrs * sizeof *attrs);
		spec s = {n->op, n->nopnds, ops, attrs};
		bool pin = n->body != NULL;
		for (uint32_t i = 0; i < n->nres; i++)
			pin |= pinned[n->res[i]];
		int r = NONE;
		fj_vid repl = FJ_NOVAL;
		/* A stop-gradient node is never replaced by another value: the
		 * replacement would let gradients flow where nograd stops them. */
		if (!pin && !n->nograd && (oi->flags & FJ_OPF_PRIMS) && n->nres == 1) {
			r = simplify(c, n, &s, &repl);
			if (r == REPL && (repl == FJ_NOVAL || !fj_type_equal(ty(c, repl), &og->values[n->res[0]].type) ||
			                  G(c)->values[repl].kind == FJ_VK_LITERAL))
				r = NONE, s = (spec){n->op, n->nopnds, ops, attrs}; /* safety net */
		}
		if (r == REPL) {
			c->rb.map[n->res[0]] = repl;
			c->nsimp++;
			*changed = true;
		} else {
			if (r == SPEC)
				*changed = true;
			uint32_t slot = 0, k = pin ? FJ_NONODE : cse_find(c, &s, n, &slot);
			if (k != FJ_NONODE) {
				for (uint32_t i = 0; i < n->nres; i++)
					c->rb.map[n->res[i]] = G(c)->nodes[k].res[i];
				c->ncse++;
				*changed = true;
			} else {
				fj_node tmp = *n;
				tmp.op = s.op;
				tmp.nopnds = s.nopnds;
				tmp.attrs = s.attrs;
				k = fj_pass_rebuild_copy(&c->rb, &tmp, s.opnds);
				if (k == FJ_NONODE)
					st = FJ_ERR_NOMEM;
				else if (!pin)
					c->tab[slot] = k;
			}
		}
		if (ops != ostack)
			fj_free(ctx, ops, n->nopnds * sizeof *ops);
	}
	if (st == FJ_OK && *changed)
		st = fj_pass_rebuild_finish(&c->rb, m, st);
	else
		fj_pass_rebuild_abort(&c->rb);
out:
	fj_free(ctx, used, nv);
	fj_free(ctx, live, nn);
	if (pinned)
		fj_free(ctx, pinned, nv);
	if (c->tab)
		fj_free(ctx, c->tab, c->cap * sizeof *c->tab);
	if (c->nuse)
		fj_free(ctx, c->nuse, nv * sizeof *c->nuse);
	c->tab = NULL;
	c->nuse = NULL;
	return st;
}

fj_status fj_pass_canonicalize(fj_pass_run *r)
{
	fj_module *m = r->m;
	canon c = {.ctx = m->ctx};
	for (uint32_t gi = 0; gi < m->ngraphs; gi++) {
		for (int it = 0; it < MAX_SWEEPS; it++) {
			bool changed = false;
			fj_status st = sweep(&c, m, m->graphs[gi], &changed);
			if (st)
				return st;
			if (!changed)
				break;
		}
	}
	fj_pass_stat(r, "canonicalize: %u folded, %u simplified, %u common subexpressions, %u dead nodes removed",
	             c.nfold, c.nsimp, c.ncse, c.ndce);
	return FJ_OK;
}
