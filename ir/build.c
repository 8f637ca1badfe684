/* build.c -- the IR builder (build.h): nodes appended, checked and typed one
 * at a time, with a sticky status so that callers check once. */
#include <stdio.h>
#include <string.h>

#include "build.h"

void fj_builder_init(fj_builder *b, fj_graph *g, fj_loc loc)
{
	b->g = g;
	b->loc = loc;
	b->status = FJ_OK;
}

fj_status fj_b_fail(fj_builder *b, fj_status st, const char *fmt, ...)
{
	if (b->status != FJ_OK)
		return b->status;
	va_list ap;
	va_start(ap, fmt);
	fj_verror(fj_graph_ctx(b->g), st, FJ_SEV_ERROR, b->loc, fmt, ap);
	va_end(ap);
	b->status = st;
	return st;
}

static fj_status nomem(fj_builder *b) { return fj_b_fail(b, FJ_ERR_NOMEM, "out of memory"); }

uint32_t fj_b_op(fj_builder *b, fj_op op, const fj_vid *opnds, uint32_t nopnds,
                 const fj_named_attr *attrs, uint32_t nattrs, fj_vid *res, uint32_t nres)
{
	if (b->status)
		return FJ_NONODE;
	fj_graph *g = b->g;
	fj_context *ctx = fj_graph_ctx(g);
	if ((unsigned)op >= FJ_OP_COUNT) {
		fj_b_fail(b, FJ_ERR_INVALID, "no op number %d", (int)op);
		return FJ_NONODE;
	}
	const fj_opinfo *oi = fj_op_info(ctx, op);
	if (!oi->variadic_results && nres != oi->nresults) {
		fj_b_fail(b, FJ_ERR_INVALID, "%s has %u results, not %u", oi->name, oi->nresults, nres);
		return FJ_NONODE;
	}
	for (uint32_t i = 0; i < nopnds; i++) {
		if (opnds[i] != FJ_NOVAL && opnds[i] >= g->nvalues) {
			fj_b_fail(b, FJ_ERR_INVALID, "%s: operand %u is not a value of graph @%s", oi->name, i, g->name);
			return FJ_NONODE;
		}
	}
	uint32_t n = fj_graph_add_node(g, op, opnds, nopnds, nres, NULL, NULL, b->loc);
	if (n == FJ_NONODE) {
		nomem(b);
		return FJ_NONODE;
	}
	for (uint32_t i = 0; i < nattrs; i++) {
		if (attrs[i].value.kind == FJ_AK_ABSENT) { /* fj_attr_str/list failed */
			nomem(b);
			return FJ_NONODE;
		}
		int k = fj_op_attr_index(oi, attrs[i].name, strlen(attrs[i].name));
		if (k < 0) {
			fj_b_fail(b, FJ_ERR_INVALID, "%s has no attribute '%s'", oi->name, attrs[i].name);
			return FJ_NONODE;
		}
		g->nodes[n].attrs[k] = attrs[i].value;
	}
	fj_status st = fj_check_node(g, n);
	if (st) {
		b->status = st; /* recorded by fj_check_node */
		return FJ_NONODE;
	}
	fj_type stack[8], *types = stack;
	if (nres > FJ_ARRAY_LEN(stack)) {
		types = fj_alloc(ctx, nres * sizeof *types);
		if (!types) {
			nomem(b);
			return FJ_NONODE;
		}
	}
	st = fj_infer_node(g, n, types);
	if (st == FJ_OK) {
		for (uint32_t i = 0; i < nres; i++) {
			fj_vid v = g->nodes[n].res[i];
			g->values[v].type = types[i];
			if (res)
				res[i] = v;
		}
	} else {
		b->status = st; /* recorded by the inference */
		if (st == FJ_ERR_NOMEM)
			fj_error_status(ctx, st, b->loc, "out of memory");
	}
	if (types != stack)
		fj_free(ctx, types, nres * sizeof *types);
	return st ? FJ_NONODE : n;
}

fj_vid fj_b_op1(fj_builder *b, fj_op op, const fj_vid *opnds, uint32_t nopnds,
                const fj_named_attr *attrs, uint32_t nattrs)
{
	fj_vid r = FJ_NOVAL;
	if (fj_b_op(b, op, opnds, nopnds, attrs, nattrs, &r, 1) == FJ_NONODE)
		return FJ_NOVAL;
	return r;
}

static fj_vid literal(fj_builder *b, fj_literal lit)
{
	if (b->status)
		return FJ_NOVAL;
	fj_vid v = fj_graph_add_literal(b->g, lit, b->loc);
	if (v == FJ_NOVAL)
		nomem(b);
	return v;
}

fj_vid fj_b_float(fj_builder *b, double f) { return literal(b, (fj_literal){.kind = FJ_LIT_FLOAT, .f = f}); }
fj_vid fj_b_int(fj_builder *b, int64_t i) { return literal(b, (fj_literal){.kind = FJ_LIT_INT, .i = i}); }
fj_vid fj_b_bool(fj_builder *b, bool v) { return literal(b, (fj_literal){.kind = FJ_LIT_BOOL, .b = v}); }

fj_vid fj_b_param(fj_builder *b, const char *name, fj_type type)
{
	if (b->status)
		return FJ_NOVAL;
	if (fj_graph_find_value(b->g, name, strlen(name)) != FJ_NOVAL) {
		fj_b_fail(b, FJ_ERR_INVALID, "%%%s is defined twice in graph @%s", name, b->g->name);
		return FJ_NOVAL;
	}
	fj_vid v = fj_graph_add_param(b->g, name, type, b->loc);
	if (v == FJ_NOVAL)
		nomem(b);
	return v;
}

fj_status fj_b_return(fj_builder *b, const fj_vid *res, uint32_t n)
{
	if (b->status)
		return b->status;
	for (uint32_t i = 0; i < n; i++)
		if (res[i] == FJ_NOVAL || res[i] >= b->g->nvalues)
			return fj_b_fail(b, FJ_ERR_INVALID, "result %u of graph @%s is not a value", i, b->g->name);
	if (fj_graph_set_results(b->g, res, n) != FJ_OK)
		return nomem(b);
	return FJ_OK;
}
