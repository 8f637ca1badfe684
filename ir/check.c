/* check.c -- fj_check_node: a node against its op's spec, before inference.
 *
 * Checks operand counts (variadic ones too; trailing optional operands may be
 * left out), `none` only for optional operands, literal scalars only for
 * pointwise aten ops (IR.md §1), the result count, each written attribute's
 * kind against its spec type, list items, sizes in shapes (-1 only where
 * reshape/view/expand infer it) and required attributes. Linear in the
 * operands and attributes. */
#include <string.h>

#include "context.h"

static const char *kind_name(const fj_attr *a)
{
	switch (a->kind) {
	case FJ_AK_NONE: return "none";
	case FJ_AK_BOOL: return "a bool";
	case FJ_AK_INT: return "an int";
	case FJ_AK_FLOAT: return "a float";
	case FJ_AK_STR: return "a string";
	case FJ_AK_DTYPE: return "a dtype";
	case FJ_AK_DIM: return "a symbolic size";
	case FJ_AK_LIST: return "a list";
	default: return "nothing";
	}
}

static const char *type_name(fj_attr_type t)
{
	switch (t) {
	case FJ_AT_BOOL: return "a bool";
	case FJ_AT_INT: return "an int";
	case FJ_AT_FLOAT: return "a float";
	case FJ_AT_NUM: return "a number";
	case FJ_AT_STR: return "a string";
	case FJ_AT_DTYPE: return "a dtype";
	case FJ_AT_INTS: return "a list of ints";
	case FJ_AT_DIMS: return "a list of sizes";
	case FJ_AT_BOOLS: return "a list of bools";
	case FJ_AT_FLOATS: return "a list of floats";
	}
	return "?";
}

/* Scalar attributes that hold a size and so may be symbolic. */
static bool size_attr(fj_op op, const char *name)
{
	switch (op) {
	case FJ_OP_ATEN_SLICE: return strcmp(name, "start") == 0 || strcmp(name, "end") == 0;
	case FJ_OP_ATEN_ARANGE: return strcmp(name, "end") == 0;
	case FJ_OP_PRIMS_IOTA: return strcmp(name, "length") == 0;
	case FJ_OP_ATEN_EMBEDDING_DENSE_BACKWARD: return strcmp(name, "num_weights") == 0;
	default: return false;
	}
}

/* Shapes in which -1 stands for an inferred (or kept) size. */
static bool allows_minus_one(fj_op op)
{
	return op == FJ_OP_ATEN_VIEW || op == FJ_OP_ATEN_RESHAPE || op == FJ_OP_ATEN__UNSAFE_VIEW ||
	       op == FJ_OP_ATEN__RESHAPE_ALIAS || op == FJ_OP_ATEN_EXPAND;
}

static bool scalar_ok(fj_attr_type t, const fj_attr *a, bool size)
{
	switch (t) {
	case FJ_AT_BOOL: return a->kind == FJ_AK_BOOL;
	case FJ_AT_INT: return a->kind == FJ_AK_INT || (size && a->kind == FJ_AK_DIM);
	case FJ_AT_FLOAT: return a->kind == FJ_AK_INT || a->kind == FJ_AK_FLOAT;
	case FJ_AT_NUM:
		return a->kind == FJ_AK_INT || a->kind == FJ_AK_FLOAT || a->kind == FJ_AK_BOOL ||
		       (size && a->kind == FJ_AK_DIM);
	case FJ_AT_STR: return a->kind == FJ_AK_STR;
	case FJ_AT_DTYPE: return a->kind == FJ_AK_DTYPE;
	default: return false;
	}
}

static fj_status check_attr(fj_context *ctx, const fj_node *n, const fj_opinfo *oi, const fj_attr_spec *s,
                            const fj_attr *a)
{
	const char *op = oi->name;
	if (a->kind == FJ_AK_NONE) {
		if (s->optional)
			return FJ_OK;
		return fj_error(ctx, n->loc, "%s: attribute '%s' does not accept none (it expects %s)", op, s->name,
		                type_name(s->type));
	}
	fj_attr_type item;
	switch (s->type) {
	case FJ_AT_INTS: item = FJ_AT_INT; break;
	case FJ_AT_DIMS: item = FJ_AT_INT; break;
	case FJ_AT_BOOLS: item = FJ_AT_BOOL; break;
	case FJ_AT_FLOATS: item = FJ_AT_FLOAT; break;
	default:
		if (scalar_ok(s->type, a, size_attr(n->op, s->name)))
			return FJ_OK;
		return fj_error(ctx, n->loc, "%s: attribute '%s' expects %s, got %s", op, s->name,
		                type_name(s->type), kind_name(a));
	}
	if (a->kind != FJ_AK_LIST)
		return fj_error(ctx, n->loc, "%s: attribute '%s' expects %s, got %s", op, s->name, type_name(s->type),
		                kind_name(a));
	bool dims = s->type == FJ_AT_DIMS;
	for (uint32_t i = 0; i < a->n; i++) {
		const fj_attr *it = &a->u.items[i];
		if (!scalar_ok(item, it, dims))
			return fj_error(ctx, n->loc, "%s: attribute '%s' expects %s, got %s at position %u", op, s->name,
			                type_name(s->type), kind_name(it), i);
		if (dims && it->kind == FJ_AK_INT && it->u.i < 0 && !(it->u.i == -1 && allows_minus_one(n->op)))
			return fj_error(ctx, n->loc, "%s: attribute '%s' has a negative size %lld at position %u", op,
			                s->name, (long long)it->u.i, i);
	}
	return FJ_OK;
}

fj_status fj_check_node(fj_graph *g, uint32_t node)
{
	fj_context *ctx = fj_graph_ctx(g);
	const fj_node *n = &g->nodes[node];
	const fj_opinfo *oi = fj_op_info(ctx, n->op);
	const char *op = oi->name;
	uint32_t nfixed = oi->noperands, nmin = 0;
	bool variadic = nfixed && oi->operands[nfixed - 1].variadic;
	if (variadic) {
		nfixed--;
		nmin = nfixed + (oi->operands[nfixed].nonempty ? 1 : 0);
	}
	/* Trailing optional operands may be left out. */
	uint32_t nreq = nfixed;
	while (!variadic && nreq > 0 && oi->operands[nreq - 1].optional)
		nreq--;
	if (variadic ? n->nopnds < nmin : n->nopnds < nreq || n->nopnds > nfixed) {
		if (variadic)
			return fj_error(ctx, n->loc, "%s: expected at least %u operands, got %u", op, nmin, n->nopnds);
		if (nreq == nfixed)
			return fj_error(ctx, n->loc, "%s: expected %u operand%s, got %u", op, nfixed, nfixed == 1 ? "" : "s",
			                n->nopnds);
		return fj_error(ctx, n->loc, "%s: expected %u to %u operands, got %u", op, nreq, nfixed, n->nopnds);
	}
	bool literals = (oi->flags & FJ_OPF_ATEN) && (oi->flags & FJ_OPF_POINTWISE);
	for (uint32_t i = 0; i < n->nopnds; i++) {
		const fj_operand_spec *os = &oi->operands[i < nfixed ? i : nfixed];
		fj_vid v = n->opnds[i];
		if (v == FJ_NOVAL) {
			if (!os->optional)
				return fj_error(ctx, n->loc, "%s: operand %u ('%s') is not optional and cannot be none", op, i,
				                os->name);
			continue;
		}
		if (v >= g->nvalues)
			return fj_error(ctx, n->loc, "%s: operand %u is not a value of the graph", op, i);
		if (g->values[v].kind == FJ_VK_LITERAL && !literals)
			return fj_error(ctx, n->loc, "%s: operand %u ('%s') must be a tensor; a literal scalar may stand "
			                "only for operands of pointwise aten ops", op, i, os->name);
	}
	if (!oi->variadic_results && n->nres != oi->nresults)
		return fj_error(ctx, n->loc, "%s: expected %u result%s, got %u", op, oi->nresults,
		                oi->nresults == 1 ? "" : "s", n->nres);
	if (n->body && n->op != FJ_OP_FUSION_KERNEL)
		return fj_error(ctx, n->loc, "%s: only fusion.kernel has a body", op);
	for (int i = 0; i < oi->nattrs; i++) {
		const fj_attr_spec *s = &oi->attrs[i];
		const fj_attr *a = &n->attrs[i];
		if (a->kind == FJ_AK_ABSENT) {
			if (s->required)
				return fj_error(ctx, n->loc, "%s: attribute '%s' is required", op, s->name);
			continue;
		}
		fj_status st = check_attr(ctx, n, oi, s, a);
		if (st)
			return st;
	}
	return FJ_OK;
}
