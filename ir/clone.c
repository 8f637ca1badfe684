/* clone.c -- copies of modules and graphs, in memory.
 *
 * A copy prints exactly as its original: the same values under the same ids,
 * the same nodes in the same order, the same names, attributes, annotations,
 * places and fusion.kernel bodies. The copy's module takes its original's
 * whole symbol table and table of size expressions as they are, so every
 * fj_dim keeps its value and nothing is remapped. Everything the copy points
 * to is its own (its graphs' arenas, its module's arena): the original may be
 * destroyed, or changed, afterwards. Places (fj_loc.file) that named the
 * original module's file name the copy's.
 *
 * Cost: linear in the size of the graphs (values, nodes, attributes, names);
 * no recursion except over fusion.kernel bodies, whose depth is one. */
#include <string.h>

#include "ir.h"

typedef struct cloner {
	const fj_module *src;
	fj_module *dst;
	const char *last_file, *last_copy; /* the last place's file copied */
} cloner;

static void *dup_array(fj_arena *a, const void *p, size_t n, size_t elem)
{
	if (!p || !n)
		return NULL;
	void *q = fj_arena_alloc(a, n * elem);
	if (q)
		memcpy(q, p, n * elem);
	return q;
}

static bool dup_str(fj_arena *a, const char **s)
{
	if (!*s)
		return true;
	*s = fj_arena_strdup(a, *s);
	return *s != NULL;
}

/* The copy's file name for a place's file. */
static bool map_loc(cloner *c, fj_loc *loc)
{
	if (!loc->file)
		return true;
	if (loc->file == c->src->file) {
		loc->file = c->dst->file;
		return true;
	}
	if (loc->file != c->last_file) {
		c->last_file = loc->file;
		c->last_copy = fj_arena_strdup(&c->dst->arena, loc->file);
		if (!c->last_copy)
			return false;
	}
	loc->file = c->last_copy;
	return true;
}

static bool copy_attr(fj_arena *a, fj_attr *at)
{
	if (at->kind == FJ_AK_STR)
		return dup_str(a, &at->u.s);
	if (at->kind != FJ_AK_LIST || !at->n)
		return true;
	fj_attr *items = dup_array(a, at->u.items, at->n, sizeof *items);
	if (!items)
		return false;
	for (uint32_t k = 0; k < at->n; k++)
		if (!copy_attr(a, &items[k]))
			return false;
	at->u.items = items;
	return true;
}

static bool copy_graph_into(cloner *c, const fj_graph *src, fj_graph *dst);

/* Copies node n of graph g in place (its lists onto arena a, g's top-level
 * graph's). */
static bool copy_node(cloner *c, fj_graph *g, fj_arena *a, fj_node *n)
{
	const fj_opinfo *oi = fj_op_info(c->dst->ctx, n->op);
	const fj_node orig = *n;
	/* the same minimum sizes as fj_graph_add_node's, so empty lists are not NULL */
	n->opnds = fj_arena_alloc(a, (orig.nopnds ? orig.nopnds : 1) * sizeof *n->opnds);
	n->res = fj_arena_alloc(a, (orig.nres ? orig.nres : 1) * sizeof *n->res);
	n->attrs = fj_arena_alloc(a, (oi->nattrs ? oi->nattrs : 1) * sizeof *n->attrs);
	if (!n->opnds || !n->res || !n->attrs)
		return false;
	memcpy(n->opnds, orig.opnds, orig.nopnds * sizeof *n->opnds);
	memcpy(n->res, orig.res, orig.nres * sizeof *n->res);
	memcpy(n->attrs, orig.attrs, oi->nattrs * sizeof *n->attrs);
	for (int k = 0; k < oi->nattrs; k++)
		if (!copy_attr(a, &n->attrs[k]))
			return false;
	if (!dup_str(a, &n->schedule) || !dup_str(a, &n->kernel) || !map_loc(c, &n->loc))
		return false;
	if (orig.body) {
		n->body = fj_arena_alloc(a, sizeof *n->body);
		if (!n->body)
			return false;
		n->body->parent = g;
		if (!copy_graph_into(c, orig.body, n->body))
			return false;
	}
	return true;
}

/* Copies src's contents into dst, whose module and parent are set (a body's
 * arena is its top-level graph's). */
static bool copy_graph_into(cloner *c, const fj_graph *src, fj_graph *dst)
{
	fj_graph *top = dst;
	while (top->parent)
		top = top->parent;
	fj_arena *a = &top->arena;
	dst->module = c->dst;
	dst->name = dst->parent ? dst->parent->name : fj_arena_strdup(a, src->name);
	dst->num_fwd_outputs = src->num_fwd_outputs;
	dst->fresh = src->fresh;
	dst->loc = src->loc;
	dst->nvalues = dst->cap_values = src->nvalues;
	dst->nnodes = dst->cap_nodes = src->nnodes;
	dst->nparams = dst->cap_params = src->nparams;
	dst->nresults = src->nresults;
	dst->name_cap = src->name_cap;
	dst->name_count = src->name_count;
	dst->values = dup_array(a, src->values, src->nvalues, sizeof *src->values);
	dst->nodes = dup_array(a, src->nodes, src->nnodes, sizeof *src->nodes);
	dst->params = dup_array(a, src->params, src->nparams, sizeof *src->params);
	dst->results = dup_array(a, src->results, src->nresults ? src->nresults : 1, sizeof *src->results);
	dst->name_tab = dup_array(a, src->name_tab, src->name_cap, sizeof *src->name_tab);
	if (!dst->name || (src->nvalues && !dst->values) || (src->nnodes && !dst->nodes) ||
	    (src->nparams && !dst->params) || (src->results && !dst->results) || (src->name_cap && !dst->name_tab) ||
	    !map_loc(c, &dst->loc))
		return false;
	for (uint32_t v = 0; v < dst->nvalues; v++) {
		fj_value *val = &dst->values[v];
		if (!dup_str(a, &val->name) || !map_loc(c, &val->loc))
			return false;
		if (val->type.rank && !(val->type.dims = dup_array(a, val->type.dims, val->type.rank, sizeof(fj_dim))))
			return false;
	}
	for (uint32_t i = 0; i < dst->nnodes; i++)
		if (!copy_node(c, dst, a, &dst->nodes[i]))
			return false;
	return true;
}

/* The module part: file name, symbols (derived symbols' definitions too) and
 * size expressions, verbatim. */
static bool copy_symbols(fj_module *dst, const fj_module *src)
{
	fj_arena *a = &dst->arena;
	if (src->file && !(dst->file = fj_arena_strdup(a, src->file)))
		return false;
	dst->nsymbols = dst->cap_symbols = src->nsymbols;
	if (src->nsymbols) {
		dst->symbols = fj_arena_alloc(a, src->nsymbols * sizeof *dst->symbols);
		if (!dst->symbols)
			return false;
		for (uint32_t s = 0; s < src->nsymbols; s++)
			if (!(dst->symbols[s] = fj_arena_strdup(a, src->symbols[s])))
				return false;
		dst->defs = dup_array(a, src->defs, src->nsymbols, sizeof *src->defs);
		if (!dst->defs)
			return false;
		for (uint32_t s = 0; s < src->nsymbols; s++)
			if (src->defs[s].nterms &&
			    !(dst->defs[s].terms = dup_array(a, src->defs[s].terms, src->defs[s].nterms, sizeof(fj_symterm))))
				return false;
	}
	dst->nexprs = dst->cap_exprs = src->nexprs;
	if (src->nexprs) {
		dst->exprs = dup_array(a, src->exprs, src->nexprs, sizeof *src->exprs);
		if (!dst->exprs)
			return false;
		for (uint32_t e = 0; e < src->nexprs; e++)
			if (src->exprs[e].nsyms &&
			    !(dst->exprs[e].syms = dup_array(a, src->exprs[e].syms, src->exprs[e].nsyms, sizeof(uint32_t))))
				return false;
	}
	return true;
}

/* Appends a copy of g (of module c->src) to c->dst. */
static fj_status add_copy(cloner *c, const fj_graph *g, fj_graph **out)
{
	fj_graph *d = fj_graph_create(c->dst, g->name);
	if (!d || !copy_graph_into(c, g, d)) {
		fj_graph_destroy(d);
		return FJ_ERR_NOMEM;
	}
	fj_status st = fj_module_insert_graph(c->dst, c->dst->ngraphs, d);
	if (st != FJ_OK) {
		fj_graph_destroy(d);
		return st;
	}
	if (out)
		*out = d;
	return FJ_OK;
}

/* A module with m's symbols and graphs; only_g: just that graph of m. */
static fj_status clone(const fj_module *m, const fj_graph *only_g, fj_module **out, fj_graph **gout)
{
	*out = NULL;
	fj_context *ctx = m->ctx;
	fj_module *d = fj_module_create(ctx);
	cloner c = {m, d, NULL, NULL};
	fj_status st = d && copy_symbols(d, m) ? FJ_OK : FJ_ERR_NOMEM;
	for (uint32_t i = 0; st == FJ_OK && i < m->ngraphs; i++)
		if (!only_g || m->graphs[i] == only_g)
			st = add_copy(&c, m->graphs[i], gout);
	if (st == FJ_OK && only_g && only_g->module == m && !d->ngraphs)
		st = add_copy(&c, only_g, gout); /* a stand-alone graph of m (fj_graph_create) */
	if (st != FJ_OK) {
		fj_module_destroy(d);
		return st == FJ_ERR_NOMEM ? fj_error_status(ctx, FJ_ERR_NOMEM, (fj_loc){0}, "out of memory copying a module")
		                          : st;
	}
	*out = d;
	return FJ_OK;
}

fj_status fj_module_clone(const fj_module *m, fj_module **out) { return clone(m, NULL, out, NULL); }

fj_status fj_graph_clone(const fj_graph *g, fj_module **out, fj_graph **gout)
{
	FJ_ASSERT(!g->parent);
	*gout = NULL;
	return clone(g->module, g, out, gout);
}
