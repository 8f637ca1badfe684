/* vjp.c -- the VJP rules of the prims (IR.md §3: "every differentiable prim
 * has a VJP rule written in prims"), one table keyed by op.
 *
 * Each rule turns the gradients of a node's results into the gradients of
 * its operands, built in prims on the joint graph (see autodiff.h). The
 * formulas are PyTorch's derivatives.yaml on prims:
 *   - pointwise math: the usual derivatives, reusing the result where
 *     PyTorch does (exp, tanh, sqrt, rsqrt, reciprocal);
 *   - maximum/minimum split the gradient evenly on ties; amax/amin send it to
 *     the positions equal to the result, split evenly among ties (PyTorch's
 *     amax backward); prod uses out / x (exact for non-zero inputs);
 *   - broadcast_in_dim sums over the broadcast dims and reshapes back; sum
 *     broadcasts back; var_mean: dvar * 2 (x - mean) / (N - correction) +
 *     dmean / N (N is a prims.sum of ones when the reduced sizes are symbolic);
 *   - layout ops undo themselves: reshape/squeeze reshape back, transpose
 *     applies the inverse permutation, slice pads back (strided slices
 *     interleave zeros with reshape + pad), pad crops (negative pads), cat
 *     slices, rev reverses; cumsum is a reverse cumsum;
 *   - matmul: dA = dC B^T, dB = A^T dC (batched: transpose the last two dims);
 *     take -> index_add, gather -> scatter_add, and back (scatter_add ->
 *     gather, index_add -> take);
 *   - floor, ceil, round, trunc, sign have a zero gradient (as PyTorch);
 *     comparisons, logical and bitwise ops, isnan/isinf, argmax/argmin and the
 *     sources (full, iota, rand) are not differentiable: they have no float
 *     result or no float operand, so no gradient ever reaches them.
 * Rules never fail on valid input except through the builder (its sticky
 * status). Constants are prims.full of the needed shape: prims take no
 * literal operands. */
#include <math.h>
#include <string.h>

#include "passes/autodiff.h"

/* ---- helpers ---- */

#define G0 (a->gout[0])
#define X0 (a->in[0])
#define X1 (a->in[1])
#define Y0 (a->out[0])

static const fj_type *ty(fj_ad *a, fj_vid v) { return &a->g->values[v].type; }

static fj_vid op(fj_ad *a, fj_op o, const fj_vid *in, uint32_t n, const fj_named_attr *at, uint32_t nat)
{
	return fj_b_op1(&a->b, o, in, n, at, nat);
}

static fj_vid un(fj_ad *a, fj_op o, fj_vid x) { return op(a, o, &x, 1, NULL, 0); }
static fj_vid bin(fj_ad *a, fj_op o, fj_vid x, fj_vid y) { return op(a, o, (fj_vid[]){x, y}, 2, NULL, 0); }
static fj_vid add(fj_ad *a, fj_vid x, fj_vid y) { return bin(a, FJ_OP_PRIMS_ADD, x, y); }
static fj_vid sub(fj_ad *a, fj_vid x, fj_vid y) { return bin(a, FJ_OP_PRIMS_SUB, x, y); }
static fj_vid mul(fj_ad *a, fj_vid x, fj_vid y) { return bin(a, FJ_OP_PRIMS_MUL, x, y); }
static fj_vid divv(fj_ad *a, fj_vid x, fj_vid y) { return bin(a, FJ_OP_PRIMS_DIV, x, y); }
static fj_vid neg(fj_ad *a, fj_vid x) { return un(a, FJ_OP_PRIMS_NEG, x); }

static fj_attr ints_attr(fj_ad *a, const int64_t *v, int n) { return fj_attr_ints(a->g, v, (uint32_t)n); }

static fj_vid full(fj_ad *a, const fj_dim *dims, int rank, double c, fj_dtype dt)
{
	fj_attr val = fj_dtype_is_float(dt) ? fj_attr_float(c)
	              : fj_dtype_is_bool(dt) ? fj_attr_bool(c != 0) : fj_attr_int((int64_t)c);
	fj_named_attr at[3] = {{"shape", fj_attr_shape(a->g, dims, rank)}, {"value", val}, {"dtype", fj_attr_dtype(dt)}};
	return op(a, FJ_OP_PRIMS_FULL, NULL, 0, at, 3);
}

/* A constant with like's shape and dtype. */
static fj_vid cst(fj_ad *a, fj_vid like, double c)
{
	if (fj_b_status(&a->b))
		return FJ_NOVAL;
	const fj_type *t = ty(a, like);
	return full(a, t->dims, t->rank, c, t->dtype);
}

static fj_vid mulc(fj_ad *a, fj_vid x, double c) { return mul(a, x, cst(a, x, c)); }
static fj_vid addc(fj_ad *a, fj_vid x, double c) { return add(a, x, cst(a, x, c)); }
static fj_vid csub(fj_ad *a, double c, fj_vid x) { return sub(a, cst(a, x, c), x); }
static fj_vid sq(fj_ad *a, fj_vid x) { return mul(a, x, x); }

static fj_vid cvt(fj_ad *a, fj_vid x, fj_dtype dt)
{
	if (fj_b_status(&a->b) || ty(a, x)->dtype == dt)
		return x;
	fj_named_attr at = {"dtype", fj_attr_dtype(dt)};
	return op(a, FJ_OP_PRIMS_CONVERT_ELEMENT_TYPE, &x, 1, &at, 1);
}

static fj_vid where(fj_ad *a, fj_vid p, fj_vid x, fj_vid y)
{
	return op(a, FJ_OP_PRIMS_WHERE, (fj_vid[]){p, x, y}, 3, NULL, 0);
}

/* x reshaped to dims (x itself when its shape is already that). */
static fj_vid reshape(fj_ad *a, fj_vid x, const fj_dim *dims, int rank)
{
	if (fj_b_status(&a->b))
		return FJ_NOVAL;
	const fj_type *t = ty(a, x);
	if (t->rank == rank && (rank == 0 || memcmp(t->dims, dims, (size_t)rank * sizeof *dims) == 0))
		return x;
	fj_named_attr at = {"shape", fj_attr_shape(a->g, dims, rank)};
	return op(a, FJ_OP_PRIMS_RESHAPE, &x, 1, &at, 1);
}

static fj_vid reshape_like(fj_ad *a, fj_vid x, const fj_type *t) { return reshape(a, x, t->dims, t->rank); }

/* x reduced with op o over the dims in mask (x itself for an empty mask). */
static fj_vid reduce(fj_ad *a, fj_op o, fj_vid x, uint32_t mask)
{
	if (fj_b_status(&a->b) || !mask)
		return x;
	int64_t d[FJ_MAX_RANK];
	int n = 0;
	for (int k = 0; k < ty(a, x)->rank; k++)
		if (mask & (1u << k))
			d[n++] = k;
	fj_named_attr at = {"dims", ints_attr(a, d, n)};
	return op(a, o, &x, 1, &at, 1);
}

/* r (x reduced over mask) broadcast back to x's type. */
static fj_vid unreduce(fj_ad *a, fj_vid r, const fj_type *x, uint32_t mask)
{
	if (fj_b_status(&a->b))
		return FJ_NOVAL;
	if (!mask)
		return r;
	int64_t bd[FJ_MAX_RANK];
	int n = 0;
	for (int k = 0; k < x->rank; k++)
		if (!(mask & (1u << k)))
			bd[n++] = k;
	fj_named_attr at[2] = {{"shape", fj_attr_shape(a->g, x->dims, x->rank)}, {"broadcast_dims", ints_attr(a, bd, n)}};
	return op(a, FJ_OP_PRIMS_BROADCAST_IN_DIM, &r, 1, at, 2);
}

static int norm_dim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }

static const fj_attr *attr(fj_ad *a, const char *name) { return fj_node_attr(a->ctx, a->n, name); }

/* The dims listed in attribute `name` as a mask (rank-normalised). */
static uint32_t dims_mask(fj_ad *a, const char *name, int rank)
{
	const fj_attr *l = attr(a, name);
	uint32_t m = 0;
	for (uint32_t i = 0; l && l->kind == FJ_AK_LIST && i < l->n; i++)
		m |= 1u << norm_dim(fj_attr_as_int(&l->u.items[i]), rank);
	return rank ? m : 0;
}

static fj_status set(fj_ad *a, int i, fj_vid v)
{
	if (a->want[i])
		a->gin[i] = v;
	return fj_b_status(&a->b);
}

/* The number of elements of x over mask as a tensor of x reduced over mask:
 * a constant when static, else a sum of ones. */
static fj_vid count(fj_ad *a, fj_vid x, uint32_t mask)
{
	const fj_type *t = ty(a, x);
	int64_t n = 1;
	bool stat = true;
	fj_dim rd[FJ_MAX_RANK];
	int rr = 0;
	for (int k = 0; k < t->rank; k++) {
		if (mask & (1u << k)) {
			if (fj_dim_is_static(t->dims[k]))
				n *= t->dims[k];
			else
				stat = false;
		} else {
			rd[rr++] = t->dims[k];
		}
	}
	if (stat)
		return full(a, rd, rr, (double)n, t->dtype);
	return reduce(a, FJ_OP_PRIMS_SUM, cst(a, x, 1.0), mask);
}

/* e = exp(z), 0 where z is below fj_dtype_exp_normal_lo: the gradients
 * that are multiples of e get no denormal. Denormals would flow into every
 * product and sum of the backward, and an x86 core takes a ~100-cycle
 * microcode assist for each operation that reads or writes one: the exact
 * gelu's x phi(x) is denormal for |x| in [13.2, 14.5], and bench/peers
 * mlp_wide's gelu backward spent 14 of its 29 ms in them; the tanh gelu's
 * e r for arguments in [10.0, 10.7] (bench mlp's backward 20.8 -> 15.8 ms).
 * PyTorch's f32 gelu backward returns 0 from |x| = 11 on. The host
 * computes such an exp as e^max(z, bound), bit for bit, so that the exp
 * itself makes no denormal (codegen/region_eval.c: exp_clamp_exact). */
static fj_vid flush_small(fj_ad *a, fj_vid z, fj_vid e)
{
	if (fj_b_status(&a->b))
		return FJ_NOVAL;
	fj_vid lo = cst(a, z, fj_dtype_exp_normal_lo(ty(a, z)->dtype));
	return where(a, bin(a, FJ_OP_PRIMS_LT, z, lo), cst(a, e, 0.0), e);
}

/* e^(-x^2) for the gradient of erf and erfc, 0 below the smallest normal
 * (|x| > 9.35 in f32) */
static fj_vid gauss(fj_ad *a, fj_vid x)
{
	fj_vid t = neg(a, sq(a, x));
	return flush_small(a, t, un(a, FJ_OP_PRIMS_EXP, t));
}

/* ---- pointwise unary ---- */

#define UNARY(name, expr)                                                                                    \
	static fj_status vjp_##name(fj_ad *a) { return set(a, 0, (expr)); }

UNARY(abs, mul(a, G0, un(a, FJ_OP_PRIMS_SIGN, X0)))
UNARY(neg, neg(a, G0))
UNARY(exp, mul(a, G0, Y0))
UNARY(exp2, mul(a, G0, mulc(a, Y0, M_LN2)))
UNARY(expm1, mul(a, G0, addc(a, Y0, 1.0)))
UNARY(log, divv(a, G0, X0))
UNARY(log2, divv(a, G0, mulc(a, X0, M_LN2)))
UNARY(log10, divv(a, G0, mulc(a, X0, M_LN10)))
UNARY(log1p, divv(a, G0, addc(a, X0, 1.0)))
UNARY(sqrt, divv(a, G0, mulc(a, Y0, 2.0)))
UNARY(rsqrt, mul(a, G0, mulc(a, divv(a, Y0, X0), -0.5)))
UNARY(reciprocal, neg(a, mul(a, G0, sq(a, Y0))))
UNARY(sin, mul(a, G0, un(a, FJ_OP_PRIMS_COS, X0)))
UNARY(cos, neg(a, mul(a, G0, un(a, FJ_OP_PRIMS_SIN, X0))))
UNARY(tan, mul(a, G0, addc(a, sq(a, Y0), 1.0)))
UNARY(tanh, mul(a, G0, csub(a, 1.0, sq(a, Y0))))
UNARY(sinh, mul(a, G0, un(a, FJ_OP_PRIMS_COSH, X0)))
UNARY(cosh, mul(a, G0, un(a, FJ_OP_PRIMS_SINH, X0)))
UNARY(asin, mul(a, G0, un(a, FJ_OP_PRIMS_RSQRT, csub(a, 1.0, sq(a, X0)))))
UNARY(acos, neg(a, mul(a, G0, un(a, FJ_OP_PRIMS_RSQRT, csub(a, 1.0, sq(a, X0))))))
UNARY(atan, divv(a, G0, addc(a, sq(a, X0), 1.0)))
UNARY(asinh, mul(a, G0, un(a, FJ_OP_PRIMS_RSQRT, addc(a, sq(a, X0), 1.0))))
UNARY(acosh, mul(a, G0, un(a, FJ_OP_PRIMS_RSQRT, addc(a, sq(a, X0), -1.0))))
UNARY(atanh, divv(a, G0, csub(a, 1.0, sq(a, X0))))
UNARY(erf, mul(a, G0, mulc(a, gauss(a, X0), M_2_SQRTPI)))
UNARY(erfc, mul(a, G0, mulc(a, gauss(a, X0), -M_2_SQRTPI)))

/* ---- pointwise binary, ternary ---- */

static fj_status vjp_add(fj_ad *a)
{
	set(a, 0, G0);
	return set(a, 1, G0);
}

static fj_status vjp_sub(fj_ad *a)
{
	set(a, 0, G0);
	return set(a, 1, a->want[1] ? neg(a, G0) : FJ_NOVAL);
}

static fj_status vjp_mul(fj_ad *a)
{
	set(a, 0, a->want[0] ? mul(a, G0, X1) : FJ_NOVAL);
	return set(a, 1, a->want[1] ? mul(a, G0, X0) : FJ_NOVAL);
}

static fj_status vjp_div(fj_ad *a)
{
	set(a, 0, a->want[0] ? divv(a, G0, X1) : FJ_NOVAL);
	return set(a, 1, a->want[1] ? neg(a, divv(a, mul(a, G0, Y0), X1)) : FJ_NOVAL);
}

/* PyTorch's pow_backward_self / pow_backward_exponent, with their masks:
 * d/da = b * a^(b-1), 0 where b == 0; d/db = out * log(a), 0 where a == 0
 * and b >= 0. */
static fj_status vjp_pow(fj_ad *a)
{
	if (a->want[0]) {
		fj_vid zero = cst(a, X1, 0.0);
		fj_vid d = mul(a, X1, bin(a, FJ_OP_PRIMS_POW, X0, addc(a, X1, -1.0)));
		d = where(a, bin(a, FJ_OP_PRIMS_EQ, X1, zero), zero, d);
		set(a, 0, mul(a, G0, d));
	}
	if (a->want[1]) {
		fj_vid zero = cst(a, X0, 0.0);
		fj_vid d = mul(a, Y0, un(a, FJ_OP_PRIMS_LOG, X0));
		fj_vid mask = bin(a, FJ_OP_PRIMS_LOGICAL_AND, bin(a, FJ_OP_PRIMS_EQ, X0, zero),
		                  bin(a, FJ_OP_PRIMS_GE, X1, zero));
		set(a, 1, mul(a, G0, where(a, mask, zero, d)));
	}
	return fj_b_status(&a->b);
}

/* maximum/minimum: the gradient goes to the winner, half to each on ties. */
static fj_status minmax(fj_ad *a, fj_op win)
{
	fj_vid zero = cst(a, G0, 0.0), half = mulc(a, G0, 0.5);
	fj_vid tie = bin(a, FJ_OP_PRIMS_EQ, X0, X1);
	if (a->want[0])
		set(a, 0, where(a, tie, half, where(a, bin(a, win, X0, X1), G0, zero)));
	if (a->want[1])
		set(a, 1, where(a, tie, half, where(a, bin(a, win, X1, X0), G0, zero)));
	return fj_b_status(&a->b);
}

static fj_status vjp_maximum(fj_ad *a) { return minmax(a, FJ_OP_PRIMS_GT); }
static fj_status vjp_minimum(fj_ad *a) { return minmax(a, FJ_OP_PRIMS_LT); }

static fj_status vjp_atan2(fj_ad *a)
{
	fj_vid den = add(a, sq(a, X0), sq(a, X1));
	set(a, 0, a->want[0] ? divv(a, mul(a, G0, X1), den) : FJ_NOVAL);
	return set(a, 1, a->want[1] ? neg(a, divv(a, mul(a, G0, X0), den)) : FJ_NOVAL);
}

/* fmod(a, b) = a - trunc(a/b) * b; remainder uses floor. */
static fj_status fmod_like(fj_ad *a, fj_op round)
{
	set(a, 0, G0);
	if (a->want[1])
		set(a, 1, neg(a, mul(a, G0, un(a, round, divv(a, X0, X1)))));
	return fj_b_status(&a->b);
}

static fj_status vjp_fmod(fj_ad *a) { return fmod_like(a, FJ_OP_PRIMS_TRUNC); }
static fj_status vjp_remainder(fj_ad *a) { return fmod_like(a, FJ_OP_PRIMS_FLOOR); }

static fj_status vjp_where(fj_ad *a)
{
	fj_vid zero = cst(a, G0, 0.0);
	if (a->want[1])
		set(a, 1, where(a, a->in[0], G0, zero));
	if (a->want[2])
		set(a, 2, where(a, a->in[0], zero, G0));
	return fj_b_status(&a->b);
}

static fj_status vjp_convert_element_type(fj_ad *a) { return set(a, 0, cvt(a, G0, ty(a, X0)->dtype)); }

/* ---- broadcast, reductions ---- */

static fj_status vjp_broadcast_in_dim(fj_ad *a)
{
	const fj_type *x = ty(a, X0), *y = ty(a, Y0);
	const fj_attr *bd = attr(a, "broadcast_dims");
	uint32_t mask = y->rank ? (1u << y->rank) - 1 : 0;
	for (int k = 0; k < x->rank; k++) {
		int d = norm_dim(fj_attr_as_int(&bd->u.items[k]), y->rank);
		if (x->dims[k] == y->dims[d])
			mask &= ~(1u << d);
	}
	return set(a, 0, reshape_like(a, reduce(a, FJ_OP_PRIMS_SUM, G0, mask), x));
}

static fj_status vjp_sum(fj_ad *a)
{
	const fj_type *x = ty(a, X0);
	return set(a, 0, unreduce(a, G0, x, dims_mask(a, "dims", x->rank)));
}

/* amax/amin: to the positions equal to the result, split evenly among ties. */
static fj_status vjp_amax(fj_ad *a)
{
	const fj_type *x = ty(a, X0);
	uint32_t mask = dims_mask(a, "dims", x->rank);
	fj_vid hit = cvt(a, bin(a, FJ_OP_PRIMS_EQ, X0, unreduce(a, Y0, x, mask)), x->dtype);
	fj_vid share = divv(a, G0, reduce(a, FJ_OP_PRIMS_SUM, hit, mask));
	return set(a, 0, mul(a, unreduce(a, share, x, mask), hit));
}

static fj_status vjp_prod(fj_ad *a)
{
	const fj_type *x = ty(a, X0);
	uint32_t mask = dims_mask(a, "dims", x->rank);
	return set(a, 0, divv(a, unreduce(a, mul(a, G0, Y0), x, mask), X0));
}

static fj_status vjp_var_mean(fj_ad *a)
{
	const fj_type *x = ty(a, X0);
	uint32_t mask = dims_mask(a, "dims", x->rank);
	double corr = fj_attr_as_float(attr(a, "correction"));
	fj_vid gv = a->gout[0], gm = a->gout[1], n = count(a, X0, mask), acc = FJ_NOVAL;
	if (gv != FJ_NOVAL) {
		fj_vid s = divv(a, mulc(a, gv, 2.0), addc(a, n, -corr));
		acc = mul(a, unreduce(a, s, x, mask), sub(a, X0, unreduce(a, a->out[1], x, mask)));
	}
	if (gm != FJ_NOVAL) {
		fj_vid t = unreduce(a, divv(a, gm, n), x, mask);
		acc = acc == FJ_NOVAL ? t : add(a, acc, t);
	}
	return set(a, 0, acc);
}

/* ---- layout, scan ---- */

static fj_status vjp_reshape(fj_ad *a) { return set(a, 0, reshape_like(a, G0, ty(a, X0))); }

static fj_status vjp_transpose(fj_ad *a)
{
	const fj_attr *p = attr(a, "perm");
	int r = ty(a, X0)->rank;
	int64_t inv[FJ_MAX_RANK];
	for (int i = 0; i < r; i++)
		inv[norm_dim(fj_attr_as_int(&p->u.items[i]), r)] = i;
	fj_named_attr at = {"perm", ints_attr(a, inv, r)};
	return set(a, 0, op(a, FJ_OP_PRIMS_TRANSPOSE, &G0, 1, &at, 1));
}

static fj_vid pad(fj_ad *a, fj_vid x, const int64_t *lo, const int64_t *hi)
{
	int r = ty(a, x)->rank;
	bool any = false;
	for (int k = 0; k < r; k++)
		any |= lo[k] != 0 || hi[k] != 0;
	if (!any || fj_b_status(&a->b))
		return x;
	fj_named_attr at[3] = {{"low", ints_attr(a, lo, r)}, {"high", ints_attr(a, hi, r)}, {"value", fj_attr_float(0.0)}};
	return op(a, FJ_OP_PRIMS_PAD, &x, 1, at, 3);
}

/* The gradient of a slice: strided dims first interleave zeros (reshape to
 * [.., n, 1, ..], pad to [.., n, s, ..], merge), then one pad puts every dim
 * back at its offset (negative high pads crop the interleaving's overhang). */
/* g with stride - 1 zeros after each entry along dim k: reshape to
 * [.., n, 1, ..], pad to [.., n, stride, ..], merge to [.., n*stride, ..]. */
static fj_vid interleave(fj_ad *a, fj_vid g, int k, int64_t stride)
{
	const fj_type *gt = ty(a, g);
	int r = gt->rank;
	fj_dim d[FJ_MAX_RANK + 1], n = gt->dims[k];
	memcpy(d, gt->dims, (size_t)(k + 1) * sizeof *d);
	d[k + 1] = 1;
	memcpy(d + k + 2, gt->dims + k + 1, (size_t)(r - k - 1) * sizeof *d);
	g = reshape(a, g, d, r + 1);
	int64_t plo[FJ_MAX_RANK + 1] = {0}, phi[FJ_MAX_RANK + 1] = {0};
	phi[k + 1] = stride - 1;
	g = pad(a, g, plo, phi);
	memcpy(d, ty(a, g)->dims, (size_t)k * sizeof *d);
	memcpy(d + k + 1, ty(a, g)->dims + k + 2, (size_t)(r - k - 1) * sizeof *d);
	if (!fj_dim_mul(a->g->module, n, stride, &d[k])) {
		fj_b_fail(&a->b, FJ_ERR_UNSUPPORTED, "autodiff: the size of a strided slice's gradient overflows");
		return g;
	}
	return reshape(a, g, d, r);
}

/* The gradient of a strided slice of dim k of symbolic size from a static
 * start: interleave zeros, pad start zeros in front, and crop the
 * interleaving's overhang (at most stride - 1) at the size. */
static fj_vid unslice_strided_sym(fj_ad *a, fj_vid g, int k, int64_t start, int64_t stride)
{
	const fj_type *x = ty(a, X0);
	int r = x->rank;
	g = interleave(a, g, k, stride);
	int64_t lo[FJ_MAX_RANK] = {0}, hi[FJ_MAX_RANK] = {0};
	lo[k] = start;
	g = pad(a, g, lo, hi);
	if (fj_b_status(&a->b))
		return g;
	fj_attr s[FJ_MAX_RANK], l[FJ_MAX_RANK];
	for (int q = 0; q < r; q++) {
		s[q] = fj_attr_int(0);
		l[q] = fj_attr_size(x->dims[q]);
	}
	fj_named_attr at[2] = {{"start", fj_attr_list(a->g, s, (uint32_t)r)}, {"limit", fj_attr_list(a->g, l, (uint32_t)r)}};
	return op(a, FJ_OP_PRIMS_SLICE, &g, 1, at, 2);
}

/* The gradient of a slice along dim k of symbolic size (or with symbolic
 * bounds), stride 1: g between zeros of the lengths start and size - limit
 * (a pad when both are integers, else a cat with zero fills). */
static fj_vid unslice_sym(fj_ad *a, fj_vid g, int k, fj_dim start, fj_dim limit)
{
	const fj_type *x = ty(a, X0);
	fj_dim hi;
	if (!fj_dim_sub(a->g->module, x->dims[k], limit, &hi)) {
		fj_b_fail(&a->b, FJ_ERR_UNSUPPORTED, "autodiff: a slice past the end of a dim of symbolic size");
		return g;
	}
	int r = x->rank;
	if (fj_dim_is_static(start) && fj_dim_is_static(hi)) {
		int64_t lo[FJ_MAX_RANK] = {0}, h[FJ_MAX_RANK] = {0};
		lo[k] = start;
		h[k] = hi;
		return pad(a, g, lo, h);
	}
	fj_vid parts[3];
	uint32_t n = 0;
	fj_dim d[FJ_MAX_RANK];
	memcpy(d, ty(a, g)->dims, (size_t)r * sizeof *d);
	if (start != 0) {
		d[k] = start;
		parts[n++] = full(a, d, r, 0.0, ty(a, g)->dtype);
	}
	parts[n++] = g;
	if (hi != 0) {
		d[k] = hi;
		parts[n++] = full(a, d, r, 0.0, ty(a, g)->dtype);
	}
	if (n == 1)
		return g;
	fj_named_attr at = {"dim", fj_attr_int(k)};
	return op(a, FJ_OP_PRIMS_CAT, parts, n, &at, 1);
}

static fj_status vjp_slice(fj_ad *a)
{
	const fj_type *x = ty(a, X0);
	const fj_attr *sa = attr(a, "start"), *la = attr(a, "limit"), *ta = attr(a, "strides");
	int r = x->rank;
	fj_vid g = G0;
	int64_t lo[FJ_MAX_RANK], hi[FJ_MAX_RANK];
	for (int k = 0; k < r; k++) {
		const fj_attr *s = &sa->u.items[k], *l = &la->u.items[k];
		int64_t stride = ta->n ? fj_attr_as_int(&ta->u.items[k]) : 1;
		lo[k] = hi[k] = 0;
		if (!fj_dim_is_static(x->dims[k]) || s->kind == FJ_AK_DIM || l->kind == FJ_AK_DIM) {
			fj_dim start = s->kind == FJ_AK_DIM ? s->u.dim : s->u.i, limit = l->kind == FJ_AK_DIM ? l->u.dim : l->u.i;
			if (start == 0 && limit == x->dims[k] && stride == 1)
				continue;
			if (stride != 1 && (!fj_dim_is_static(start) || limit != x->dims[k]))
				return fj_b_fail(&a->b, FJ_ERR_UNSUPPORTED,
				                 "autodiff: a strided slice of a dim of symbolic size is supported from an "
				                 "integer start to the end");
			g = stride == 1 ? unslice_sym(a, g, k, start, limit) : unslice_strided_sym(a, g, k, start, stride);
			if (fj_b_status(&a->b))
				return fj_b_status(&a->b);
			continue;
		}
		int64_t start = s->u.i, limit = l->u.i, size = x->dims[k];
		if (stride == 1) {
			lo[k] = start;
			hi[k] = size - limit;
			continue;
		}
		const fj_type *gt = ty(a, g);
		if (fj_b_status(&a->b))
			break;
		int64_t n = gt->dims[k];
		g = interleave(a, g, k, stride);
		lo[k] = start;
		hi[k] = size - start - n * stride;
	}
	return set(a, 0, pad(a, g, lo, hi));
}

static fj_status vjp_pad(fj_ad *a)
{
	const fj_attr *la = attr(a, "low"), *ha = attr(a, "high");
	int r = ty(a, X0)->rank;
	int64_t lo[FJ_MAX_RANK], hi[FJ_MAX_RANK];
	for (int k = 0; k < r; k++) {
		lo[k] = -fj_attr_as_int(&la->u.items[k]);
		hi[k] = -fj_attr_as_int(&ha->u.items[k]);
	}
	return set(a, 0, pad(a, G0, lo, hi));
}

static fj_status vjp_cat(fj_ad *a)
{
	const fj_type *y = ty(a, Y0);
	int r = y->rank, d = norm_dim(fj_attr_as_int(attr(a, "dim")), r);
	fj_dim off = 0; /* symbolic along a dim of symbolic size (s0+s1) */
	for (uint32_t i = 0; i < a->n->nopnds && !fj_b_status(&a->b); i++) {
		const fj_type *x = ty(a, a->in[i]);
		if (a->n->nopnds == 1) {
			set(a, (int)i, G0);
			continue;
		}
		fj_dim end;
		if (!fj_dim_add(a->g->module, off, x->dims[d], &end))
			return fj_b_fail(&a->b, FJ_ERR_NOMEM, "out of memory");
		if (a->want[i]) {
			fj_attr s[FJ_MAX_RANK], l[FJ_MAX_RANK];
			for (int k = 0; k < r; k++) {
				s[k] = k == d ? fj_attr_size(off) : fj_attr_int(0);
				l[k] = k == d ? fj_attr_size(end) : fj_attr_size(y->dims[k]);
			}
			fj_named_attr at[2] = {{"start", fj_attr_list(a->g, s, (uint32_t)r)},
			                       {"limit", fj_attr_list(a->g, l, (uint32_t)r)}};
			set(a, (int)i, op(a, FJ_OP_PRIMS_SLICE, &G0, 1, at, 2));
		}
		off = end;
	}
	return fj_b_status(&a->b);
}

static fj_status vjp_rev(fj_ad *a)
{
	fj_named_attr at = {"dims", fj_attr_list(a->g, attr(a, "dims")->u.items, attr(a, "dims")->n)};
	return set(a, 0, op(a, FJ_OP_PRIMS_REV, &G0, 1, &at, 1));
}

static fj_status vjp_cumsum(fj_ad *a)
{
	int r = ty(a, X0)->rank;
	int64_t d = r ? norm_dim(fj_attr_as_int(attr(a, "dim")), r) : 0;
	if (r == 0)
		return set(a, 0, G0);
	fj_named_attr rv = {"dims", ints_attr(a, &d, 1)};
	fj_vid t = op(a, FJ_OP_PRIMS_REV, &G0, 1, &rv, 1);
	fj_named_attr cs = {"dim", fj_attr_int(d)};
	t = op(a, FJ_OP_PRIMS_CUMSUM, &t, 1, &cs, 1);
	rv.value = ints_attr(a, &d, 1);
	return set(a, 0, op(a, FJ_OP_PRIMS_REV, &t, 1, &rv, 1));
}

/* ---- opaque ---- */

static fj_vid mt(fj_ad *a, fj_vid x)
{
	int r = ty(a, x)->rank;
	int64_t p[3] = {0, 1, 2};
	p[r - 2] = r - 1;
	p[r - 1] = r - 2;
	fj_named_attr at = {"perm", ints_attr(a, p, r)};
	return op(a, FJ_OP_PRIMS_TRANSPOSE, &x, 1, &at, 1);
}

static fj_status vjp_matmul(fj_ad *a)
{
	if (a->want[0])
		set(a, 0, bin(a, FJ_OP_PRIMS_MATMUL, G0, mt(a, X1)));
	if (a->want[1])
		set(a, 1, bin(a, FJ_OP_PRIMS_MATMUL, mt(a, X0), G0));
	return fj_b_status(&a->b);
}

static fj_named_attr dim_attr(fj_ad *a) { return (fj_named_attr){"dim", fj_attr_int(fj_attr_as_int(attr(a, "dim")))}; }

/* take(a, index){dim}: index_add of the gradient, the index flattened to 1-d. */
static fj_status vjp_take(fj_ad *a)
{
	const fj_type *x = ty(a, X0), *it = ty(a, X1);
	int d = norm_dim(fj_attr_as_int(attr(a, "dim")), x->rank);
	fj_dim n;
	if (!fj_dim_product(a->m, it->dims, it->rank, &n))
		return fj_b_fail(&a->b, FJ_ERR_UNSUPPORTED, "autodiff: prims.take: index size overflows");
	fj_vid idx = reshape(a, X1, &n, 1);
	fj_dim s[FJ_MAX_RANK];
	memcpy(s, x->dims, (size_t)x->rank * sizeof *s);
	s[d] = n;
	fj_vid src = reshape(a, G0, s, x->rank);
	fj_named_attr at = {"dim", fj_attr_int(d)};
	return set(a, 0, op(a, FJ_OP_PRIMS_INDEX_ADD, (fj_vid[]){cst(a, X0, 0.0), idx, src}, 3, &at, 1));
}

/* gather(x, index){dim} with one index per line of x along dim (index of
 * size 1 there and of x's sizes elsewhere: a loss reading its targets):
 * the gradient is where(iota == index, g, 0) in x's shape, pointwise, and
 * fuses into its consumer, where scatter_add into zeros was a serial
 * kernel writing all of x that the next kernel read back (cross entropy's
 * backward on [1024,32000] f32: 131 MB each way). The forward's gather has
 * checked the indices. FJ_NOVAL where the index is of another shape. */
static fj_vid onehot_grad(fj_ad *a, int d)
{
	const fj_type *x = ty(a, X0), *it = ty(a, X1);
	if (x->rank < 1 || it->rank != x->rank || it->dims[d] != 1 || ty(a, G0)->dtype != x->dtype)
		return FJ_NOVAL;
	fj_dim rd[FJ_MAX_RANK];
	int n = 0;
	for (int k = 0; k < x->rank; k++) {
		if (k != d && it->dims[k] != x->dims[k])
			return FJ_NOVAL;
		if (k != d)
			rd[n++] = x->dims[k];
	}
	/* index and g without dim d, and iota along it, broadcast to x's dims */
	uint32_t at_d = 1u << d, but_d = ((1u << x->rank) - 1) & ~at_d;
	fj_vid idx = unreduce(a, reshape(a, X1, rd, n), x, at_d), g = unreduce(a, reshape(a, G0, rd, n), x, at_d);
	fj_named_attr ia[2] = {{"length", fj_attr_size(x->dims[d])}, {"dtype", fj_attr_dtype(it->dtype)}};
	fj_vid iota = unreduce(a, op(a, FJ_OP_PRIMS_IOTA, NULL, 0, ia, 2), x, but_d);
	return where(a, bin(a, FJ_OP_PRIMS_EQ, iota, idx), g, cst(a, X0, 0.0));
}

static fj_status vjp_gather(fj_ad *a)
{
	fj_named_attr at = dim_attr(a);
	fj_vid oh = onehot_grad(a, norm_dim(fj_attr_as_int(&at.value), ty(a, X0)->rank));
	if (oh != FJ_NOVAL)
		return set(a, 0, oh);
	return set(a, 0, op(a, FJ_OP_PRIMS_SCATTER_ADD, (fj_vid[]){cst(a, X0, 0.0), X1, G0}, 3, &at, 1));
}

static fj_status vjp_scatter_add(fj_ad *a)
{
	set(a, 0, G0);
	if (a->want[2]) {
		fj_named_attr at = dim_attr(a);
		fj_vid gs = op(a, FJ_OP_PRIMS_GATHER, (fj_vid[]){G0, X1}, 2, &at, 1);
		/* src may be larger than index: its other elements get zero */
		const fj_type *src = ty(a, a->in[2]), *it = ty(a, X1);
		int64_t lo[FJ_MAX_RANK] = {0}, hi[FJ_MAX_RANK] = {0};
		for (int k = 0; k < src->rank; k++)
			if (fj_dim_is_static(src->dims[k]) && fj_dim_is_static(it->dims[k]))
				hi[k] = src->dims[k] - it->dims[k];
		set(a, 2, pad(a, gs, lo, hi));
	}
	return fj_b_status(&a->b);
}

static fj_status vjp_index_add(fj_ad *a)
{
	set(a, 0, G0);
	if (a->want[2]) {
		fj_named_attr at = dim_attr(a);
		fj_vid t = op(a, FJ_OP_PRIMS_TAKE, (fj_vid[]){G0, X1}, 2, &at, 1);
		set(a, 2, reshape_like(a, t, ty(a, a->in[2])));
	}
	return fj_b_status(&a->b);
}

/* ---- idioms ---- */

/* The single-result node of op o defining v in f, or NULL. */
static const fj_node *def_of(const fj_graph *f, fj_vid v, fj_op o)
{
	if (v == FJ_NOVAL || f->values[v].kind != FJ_VK_RESULT)
		return NULL;
	const fj_node *n = &f->nodes[f->values[v].def];
	return n->op == o && n->nres == 1 ? n : NULL;
}

/* S = broadcast_in_dim(sum(e, D)) back to e's shape (the row sum of a
 * softmax, as decompose writes it): sets *e and *mask (D), or false. Every
 * value between e and S has one use (uses[], results counted), so no
 * gradient reaches them but through S. */
static bool row_sum(fj_ad *a, const uint32_t *uses, fj_vid S, fj_vid *e, uint32_t *mask)
{
	const fj_graph *f = a->f;
	const fj_node *nb = def_of(f, S, FJ_OP_PRIMS_BROADCAST_IN_DIM);
	const fj_node *ns = nb ? def_of(f, nb->opnds[0], FJ_OP_PRIMS_SUM) : NULL;
	if (!ns || ns->opnds[0] == FJ_NOVAL || uses[S] != 1 || uses[nb->opnds[0]] != 1 || nb->nograd || ns->nograd)
		return false;
	const fj_type *xt = &f->values[ns->opnds[0]].type, *st = &f->values[S].type;
	if (!fj_type_equal(xt, st))
		return false;
	const fj_attr *dl = fj_node_attr(a->ctx, ns, "dims"), *bl = fj_node_attr(a->ctx, nb, "broadcast_dims");
	uint32_t m = 0;
	for (uint32_t i = 0; dl && dl->kind == FJ_AK_LIST && i < dl->n; i++)
		m |= 1u << norm_dim(fj_attr_as_int(&dl->u.items[i]), xt->rank);
	uint32_t k = 0;
	for (int d = 0; d < xt->rank; d++) {
		if (m & (1u << d))
			continue;
		if (!bl || bl->kind != FJ_AK_LIST || k >= bl->n ||
		    norm_dim(fj_attr_as_int(&bl->u.items[k]), xt->rank) != d)
			return false;
		k++;
	}
	if (!m || !bl || k != bl->n)
		return false;
	*e = ns->opnds[0];
	*mask = m;
	return true;
}

/* Is v, of type t, a prims.full of 1 in f? */
static bool full_one(fj_ad *a, fj_vid v, const fj_type *t)
{
	const fj_node *nf = def_of(a->f, v, FJ_OP_PRIMS_FULL);
	const fj_attr *val = nf ? fj_node_attr(a->ctx, nf, "value") : NULL;
	return val && (val->kind == FJ_AK_FLOAT || val->kind == FJ_AK_INT) && fj_attr_as_float(val) == 1 &&
	       fj_type_equal(&a->f->values[v].type, t);
}

/* y = a / (1 + exp(z)) (fj_vjp_idiom): the gradient of z, and a's in gin[0].
 * 1 + exp(z) and exp(z) may have other uses (decompose's sigmoid and silu of
 * one x share them): the gradients those bring go through the rules. */
static fj_vid sigmoid_idiom(fj_ad *a, fj_vid *target)
{
	const fj_graph *f = a->f;
	const fj_node *n = a->n;
	fj_vid D = n->opnds[1];
	const fj_node *nd = def_of(f, D, FJ_OP_PRIMS_ADD);
	if (!nd || nd->nograd)
		return FJ_NOVAL;
	const fj_type *t = &f->values[D].type;
	int k = full_one(a, nd->opnds[1], t) ? 0 : full_one(a, nd->opnds[0], t) ? 1 : -1;
	const fj_node *ne = k < 0 ? NULL : def_of(f, nd->opnds[k], FJ_OP_PRIMS_EXP);
	if (!ne || ne->nograd || !fj_type_equal(&f->values[n->opnds[0]].type, t) ||
	    !fj_type_equal(&f->values[ne->opnds[0]].type, t))
		return FJ_NOVAL;
	fj_vid G = G0, E = a->map[nd->opnds[k]];
	fj_vid r = un(a, FJ_OP_PRIMS_RECIPROCAL, X1);
	if (a->want[0])
		set(a, 0, mul(a, G, r));
	fj_vid Es = flush_small(a, a->map[ne->opnds[0]], E);
	fj_vid c = where(a, bin(a, FJ_OP_PRIMS_LT, Es, cst(a, E, 1)), mul(a, Es, r), csub(a, 1, r));
	*target = ne->opnds[0];
	/* y as a * r: the backward needs no second division */
	return neg(a, mul(a, mul(a, G, mul(a, X0, r)), c));
}

fj_vid fj_vjp_idiom(fj_ad *a, const uint32_t *uses, fj_vid *target)
{
	const fj_graph *f = a->f;
	const fj_node *n = a->n;
	fj_vid e, sh, G = a->gout[0], Y = a->out[0];
	uint32_t mask;
	if (n->nres != 1 || n->nopnds != 2 || G == FJ_NOVAL || !fj_dtype_is_float(f->values[n->res[0]].type.dtype))
		return FJ_NOVAL;
	if (n->op == FJ_OP_PRIMS_DIV) {
		fj_vid gz = sigmoid_idiom(a, target);
		if (gz != FJ_NOVAL || fj_b_status(&a->b))
			return gz;
		/* softmax: y = e / S, e = exp(sh): d sh = y * (g - bcast(sum(g * y))) */
		const fj_node *ne = def_of(f, n->opnds[0], FJ_OP_PRIMS_EXP);
		if (!ne || ne->nograd || !row_sum(a, uses, n->opnds[1], &e, &mask) || e != n->opnds[0] || uses[e] != 2)
			return FJ_NOVAL;
		sh = ne->opnds[0];
		fj_vid gy = mul(a, G, Y);
		*target = sh;
		return sub(a, gy, mul(a, Y, unreduce(a, reduce(a, FJ_OP_PRIMS_SUM, gy, mask), ty(a, Y), mask)));
	}
	if (n->op == FJ_OP_PRIMS_SUB) {
		/* log_softmax: l = sh - log(S), e = exp(sh): d sh = g - exp(l) * bcast(sum(g)) */
		const fj_node *nl = def_of(f, n->opnds[1], FJ_OP_PRIMS_LOG);
		if (!nl || nl->nograd || uses[n->opnds[1]] != 1 || !row_sum(a, uses, nl->opnds[0], &e, &mask) ||
		    uses[e] != 1)
			return FJ_NOVAL;
		const fj_node *ne = def_of(f, e, FJ_OP_PRIMS_EXP);
		if (!ne || ne->nograd || ne->opnds[0] != n->opnds[0])
			return FJ_NOVAL;
		sh = n->opnds[0];
		*target = sh;
		fj_vid r = unreduce(a, reduce(a, FJ_OP_PRIMS_SUM, G, mask), ty(a, Y), mask);
		return sub(a, G, mul(a, un(a, FJ_OP_PRIMS_EXP, Y), r));
	}
	return FJ_NOVAL;
}

/* ---- the table ---- */

#define R(op, f) [FJ_OP_PRIMS_##op] = {FJ_VJP_RULE, vjp_##f}
#define Z(op) [FJ_OP_PRIMS_##op] = {FJ_VJP_ZERO, NULL}
#define N(op) [FJ_OP_PRIMS_##op] = {FJ_VJP_NONE, NULL}

const fj_vjp_rule fj_vjp_rules[FJ_OP_COUNT] = {
	R(ABS, abs), R(NEG, neg), R(EXP, exp), R(EXP2, exp2), R(EXPM1, expm1), R(LOG, log), R(LOG2, log2),
	R(LOG10, log10), R(LOG1P, log1p), R(SQRT, sqrt), R(RSQRT, rsqrt), R(RECIPROCAL, reciprocal),
	R(SIN, sin), R(COS, cos), R(TAN, tan), R(TANH, tanh), R(SINH, sinh), R(COSH, cosh), R(ASIN, asin),
	R(ACOS, acos), R(ATAN, atan), R(ASINH, asinh), R(ACOSH, acosh), R(ATANH, atanh), R(ERF, erf),
	R(ERFC, erfc),
	Z(FLOOR), Z(CEIL), Z(ROUND), Z(TRUNC), Z(SIGN),
	N(LOGICAL_NOT), N(BITWISE_NOT), N(ISNAN), N(ISINF),
	R(ADD, add), R(SUB, sub), R(MUL, mul), R(DIV, div), R(POW, pow), R(MAXIMUM, maximum),
	R(MINIMUM, minimum), R(ATAN2, atan2), R(FMOD, fmod), R(REMAINDER, remainder),
	N(EQ), N(NE), N(LT), N(LE), N(GT), N(GE), N(LOGICAL_AND), N(LOGICAL_OR), N(LOGICAL_XOR),
	N(BITWISE_AND), N(BITWISE_OR), N(BITWISE_XOR),
	R(WHERE, where), R(CONVERT_ELEMENT_TYPE, convert_element_type),
	R(BROADCAST_IN_DIM, broadcast_in_dim), R(SUM, sum), R(AMAX, amax), R(AMIN, amax), R(PROD, prod),
	R(VAR_MEAN, var_mean), N(ARGMAX), N(ARGMIN),
	R(RESHAPE, reshape), R(TRANSPOSE, transpose), R(SQUEEZE, reshape), R(SLICE, slice), R(CAT, cat),
	R(PAD, pad), R(REV, rev), R(CUMSUM, cumsum),
	N(FULL), N(IOTA), N(RAND),
	R(MATMUL, matmul), R(TAKE, take), R(GATHER, gather), R(SCATTER_ADD, scatter_add),
	R(INDEX_ADD, index_add),
};
