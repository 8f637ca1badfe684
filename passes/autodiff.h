/* autodiff.h -- internals of the `autodiff` pass, shared by passes/autodiff.c
 * (the driver: joint graph, gradient accumulation, errors) and
 * passes/vjp.c (one VJP rule per prim, written in prims).
 *
 * A rule reads node a->n of the source graph (attributes through
 * fj_node_attr), its operands and results mapped into the joint graph
 * (a->in, a->out), the gradients of its results (a->gout[i], FJ_NOVAL when a
 * result receives none: treat it as zero), and writes into a->gin[i] the
 * gradient of each operand i with a->want[i] set (FJ_NOVAL: zero). Every
 * gradient has exactly its value's type. Rules build with the builder a->b
 * (checked, typed, sticky status) on the joint graph. */
#ifndef FJ_PASS_AUTODIFF_H
#define FJ_PASS_AUTODIFF_H

#include "ir/build.h"

typedef struct fj_ad {
	fj_builder b;          /* on the joint graph; its loc is the node's */
	fj_graph *g;           /* the joint graph */
	fj_module *m;
	fj_context *ctx;
	const fj_graph *f;     /* the source graph */
	const fj_node *n;      /* the node being differentiated (of f) */
	const fj_vid *in;      /* n's operands in g (FJ_NOVAL for none) */
	const fj_vid *out;     /* n's results in g */
	const fj_vid *gout;    /* gradient of each result, or FJ_NOVAL */
	const bool *want;      /* operand i needs a gradient */
	fj_vid *gin;           /* the rule's output, one per operand */
	const fj_vid *map;     /* f's node results -> their values in g (the idioms) */
} fj_ad;

typedef fj_status (*fj_vjp_fn)(fj_ad *a);

/* How an op takes part in differentiation. */
typedef enum fj_vjp_kind {
	FJ_VJP_MISSING = 0, /* no entry: an error on a gradient path (aten, fusion ops) */
	FJ_VJP_RULE,        /* differentiable: fn computes the operands' gradients */
	FJ_VJP_ZERO,        /* piecewise constant (floor, sign ...): a zero gradient */
	FJ_VJP_NONE         /* not differentiable: no float result, or no float input
	                       (comparisons, bitwise, argmax, iota, full, rand ...) */
} fj_vjp_kind;

typedef struct fj_vjp_rule {
	fj_vjp_kind kind;
	fj_vjp_fn fn;
} fj_vjp_rule;

/* The VJP table, indexed by op: every prims.* op has an entry. */
extern const fj_vjp_rule fj_vjp_rules[FJ_OP_COUNT];

/* Idioms differentiated as a whole. The softmaxes (as PyTorch's
 * _softmax_backward_data and _log_softmax_backward_data do), so that the
 * backward needs the result only, not the exponentials and their row sum:
 *   y = e / bcast(sum(e, D)), e = exp(sh):        d sh = y * (g - bcast(sum(g * y, D)))
 *   l = sh - log(bcast(sum(e, D))), e = exp(sh):  d sh = g - exp(l) * bcast(sum(g, D))
 * (decompose's softmax and log_softmax). And the sigmoids, y = a / (1 +
 * e), e = exp(z) (decompose's sigmoid, silu and tanh gelu), whose rules
 * one by one give NaN once e overflows (exp's gradient g * e with g = -0
 * and e = inf), where the gradient is 0: with r = 1 / (1 + e),
 *   d a = g * r,   d z = -g * a * r * c,   c = e / (1 + e) = (e < 1 ? e * r : 1 - r)
 * (c is 1 at e = inf; the two forms avoid e * r's inf * 0 and 1 - r's
 * cancellation). a->n is the division or the subtraction; uses[v] counts
 * v's uses in a->f (operands and graph results): the values inside a
 * softmax idiom must have no other use. Returns the gradient of sh or z (a
 * value of a->f, in *target) and sets a->gin for the node's own operands,
 * or returns FJ_NOVAL when a->n is no idiom. */
fj_vid fj_vjp_idiom(fj_ad *a, const uint32_t *uses, fj_vid *target);

#endif
